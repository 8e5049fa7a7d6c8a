//! The response envelope `{code, message, request_id, data}` and the one place where an error
//! becomes an HTTP status. A 5xx body stays generic; its cause goes to the log.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use mnemo_core::CoreError;
use serde::Serialize;
use serde_json::{Value, json};

/// A success: `code: 0` and the payload.
pub struct ApiOk {
    pub request_id: String,
    pub data: Value,
}

impl ApiOk {
    pub fn new(request_id: &str, data: impl Serialize) -> Self {
        Self { request_id: request_id.to_string(), data: serde_json::to_value(data).expect("response data serializes") }
    }
}

impl IntoResponse for ApiOk {
    fn into_response(self) -> Response {
        Json(json!({"code": 0, "message": "success", "request_id": self.request_id, "data": self.data})).into_response()
    }
}

/// Error codes: the HTTP status times 100, so a client can switch on either (and VikingDB's
/// code beside it, see `vikingdb_code`).
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub request_id: String,
}

impl ApiError {
    pub fn new(status: StatusCode, request_id: &str, message: impl Into<String>) -> Self {
        Self { status, message: message.into(), request_id: request_id.to_string() }
    }

    pub fn bad_request(request_id: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, request_id, message)
    }

    pub fn from_core(request_id: &str, e: CoreError) -> Self {
        let status = match &e {
            CoreError::Invalid { .. } => StatusCode::BAD_REQUEST,
            CoreError::NotFound(_) => StatusCode::NOT_FOUND,
            CoreError::Conflict(_) => StatusCode::CONFLICT,
            CoreError::Overloaded(_) => StatusCode::TOO_MANY_REQUESTS,
            CoreError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            CoreError::Internal(cause) => {
                tracing::error!(request_id, cause = %cause.chain(), "internal error");
                return Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    request_id,
                    "internal error; see the server log for this request_id",
                );
            }
        };
        Self::new(status, request_id, e.to_string())
    }

    pub fn code(&self) -> u32 {
        self.status.as_u16() as u32 * 100
    }

    /// The VikingDB memory API's code for this error (its SDK maps these codes to its exception
    /// classes): answered beside ours in `ResponseMetadata.Error.Code`, Volcengine's envelope,
    /// which that SDK reads first.
    pub fn vikingdb_code(&self) -> u32 {
        let about_collection = self.message.starts_with("collection");
        match self.status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => 1_000_001,
            StatusCode::NOT_FOUND if about_collection => 1_000_005,
            StatusCode::NOT_FOUND => 1_000_011,
            StatusCode::CONFLICT if about_collection => 1_000_004,
            StatusCode::TOO_MANY_REQUESTS => 1_000_029,
            s if s.is_server_error() => 1_000_028,
            _ => 1_000_003,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({
            "code": self.code(),
            "message": self.message,
            "request_id": self.request_id,
            "data": null,
            "ResponseMetadata": {
                "RequestId": self.request_id,
                "Error": {"Code": self.vikingdb_code(), "Message": self.message},
            },
        });
        let mut resp = (self.status, Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            // The database is away: nothing was done, the same request may come again.
            resp.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
        }
        resp
    }
}

pub type ApiResult = Result<ApiOk, ApiError>;
