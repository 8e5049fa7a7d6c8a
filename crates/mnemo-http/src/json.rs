//! `ApiJson<T>`: reads the body under the size limit, parses it with the failing field's path in
//! the error (`messages[3].role: unknown variant …`), and checks that the caller's key may use the
//! request's project. Every `/api/memory` handler takes its input through it.

use crate::confine::confine;
use crate::error::ApiError;
use crate::{AppState, Ctx};
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

/// `unknown field `x`, expected one of `a`, `b`` → (`x`, `a, b`): serde's message for a key a
/// request type does not have (every request type denies unknown fields: nothing is dropped).
fn unknown_field(msg: &str) -> Option<(&str, String)> {
    let rest = msg.strip_prefix("unknown field `")?;
    let (field, rest) = rest.split_once('`')?;
    let expected = rest
        .trim_start_matches(", ")
        .trim_start_matches("expected one of ")
        .trim_start_matches("expected ")
        .replace('`', "");
    let expected = if expected.starts_with("there are no fields") { "no fields".to_string() } else { expected };
    Some((field, expected))
}

/// VikingDB's `resource_id`, the other way to name a collection: mnemo's is
/// `<project_name>/<collection_name>` (`collection/info` answers it). It is rewritten into the two
/// names before the body is read; a body that also names another collection or project is refused.
/// (The VikingDB SDK always sends `project_name: "default"` beside a `resource_id`: that one is not
/// a contradiction.)
pub fn resolve_resource_id(v: &mut serde_json::Map<String, serde_json::Value>) -> Result<(), String> {
    use serde_json::Value;
    let Some(rid) = v.remove("resource_id") else { return Ok(()) };
    let rid = match rid {
        Value::Null => return Ok(()),
        Value::String(s) => s,
        other => return Err(format!("resource_id: must be a string, got {other}")),
    };
    let Some((project, collection)) = rid.split_once('/').filter(|(p, c)| !p.is_empty() && !c.is_empty()) else {
        return Err(format!(
            "resource_id: must be \"<project_name>/<collection_name>\" as collection/info answers it, got {rid:?}"
        ));
    };
    match v.get("collection_name") {
        None | Some(Value::Null) => {}
        Some(Value::String(c)) if c == collection => {}
        Some(other) => {
            return Err(format!("collection_name: {other} contradicts resource_id {rid:?}; give one of them"));
        }
    }
    match v.get("project_name") {
        None | Some(Value::Null) => {}
        Some(Value::String(p)) if p == project || p == mnemo_core::model::DEFAULT_PROJECT => {}
        Some(other) => return Err(format!("project_name: {other} contradicts resource_id {rid:?}; give one of them")),
    }
    v.insert("collection_name".into(), Value::String(collection.into()));
    v.insert("project_name".into(), Value::String(project.into()));
    Ok(())
}

/// Why another shape of a body could not be rewritten into the request type's own.
pub enum RewriteError {
    Parse(serde_path_to_error::Error<serde_json::Error>),
    Invalid(mnemo_core::CoreError),
}

/// A request body that names the project it acts on.
pub trait Scoped {
    fn project(&self) -> &str;

    /// Whether the body may come in another shape (`rewrite` turns it into this type's own).
    const REWRITES: bool = false;

    /// Another accepted shape of the body, rewritten into this type's (e.g. VikingDB's
    /// CreateCollection body); the body unchanged when it is already this type's.
    fn rewrite(
        v: serde_json::Map<String, serde_json::Value>,
    ) -> Result<serde_json::Map<String, serde_json::Value>, RewriteError> {
        Ok(v)
    }
}

/// serde's error for a body, as a 400 naming the field's path.
fn parse_error(rid: &str, e: serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    let msg = inner.to_string();
    // serde_json appends " at line L column C"; the field path says more.
    let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
    if inner.is_syntax() || inner.is_eof() {
        ApiError::bad_request(rid, format!("body: malformed JSON: {inner}"))
    } else if let Some((field, expected)) = unknown_field(&msg) {
        // serde_path_to_error's path ends at the unknown key itself.
        let full = if path == "." || path.ends_with(field) { path.clone() } else { format!("{path}.{field}") };
        let full = if full == "." { field.to_string() } else { full };
        ApiError::bad_request(rid, format!("{full}: unknown field; expected one of {expected}"))
    } else if let Some(field) = msg.strip_prefix("missing field `").and_then(|m| m.strip_suffix('`')) {
        let full = if path == "." { field.to_string() } else { format!("{path}.{field}") };
        ApiError::bad_request(rid, format!("{full}: is required"))
    } else if path == "." {
        ApiError::bad_request(rid, format!("body: {msg}"))
    } else {
        ApiError::bad_request(rid, format!("{path}: {msg}"))
    }
}

pub struct ApiJson<T> {
    pub ctx: Ctx,
    pub body: T,
}

impl<T> FromRequest<AppState> for ApiJson<T>
where
    T: DeserializeOwned + Scoped + Send,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let ctx = req.extensions().get::<Ctx>().cloned().expect("the auth layer runs first");
        let rid = ctx.request_id.clone();
        let path = req.uri().path().to_string();
        let limit = state.max_body_bytes;
        let bytes = axum::body::to_bytes(req.into_body(), limit).await.map_err(|_| {
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, &rid, format!("body: must be at most {limit} bytes"))
        })?;
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(ApiError::bad_request(&rid, "body: must be a JSON object"));
        }
        // `resource_id` becomes the collection's two names, and an end-user token's user is forced
        // into the fields naming a user, before the body is read.
        let user = ctx.principal.user();
        let names_resource = bytes.windows(13).any(|w| w == b"\"resource_id\"");
        let bytes = if user.is_none() && !names_resource && !T::REWRITES {
            bytes
        } else {
            let v: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&bytes)
                .map_err(|e| ApiError::bad_request(&rid, format!("body: malformed JSON: {e}")))?;
            let mut v = T::rewrite(v).map_err(|e| match e {
                RewriteError::Parse(e) => parse_error(&rid, e),
                RewriteError::Invalid(e) => ApiError::from_core(&rid, e),
            })?;
            resolve_resource_id(&mut v).map_err(|m| ApiError::bad_request(&rid, m))?;
            if let Some(user) = user {
                let conversation =
                    confine(&path, &mut v, user).map_err(|m| ApiError::new(StatusCode::FORBIDDEN, &rid, m))?;
                if let Some(conv) = conversation {
                    let t = mnemo_core::service::Target {
                        project: v.get("project_name").and_then(|p| p.as_str()).unwrap_or("default").into(),
                        collection: v.get("collection_name").and_then(|c| c.as_str()).unwrap_or_default().into(),
                    };
                    // The project first: a conversation of a project the key may not use is not
                    // looked up at all (its existence would show in the answer).
                    ctx.principal
                        .check_project(&t.project)
                        .map_err(|m| ApiError::new(StatusCode::FORBIDDEN, &rid, m))?;
                    // A new conversation becomes the user's; an existing one must already be.
                    match state.service.conversation_owner(&t, &conv).await {
                        Ok(None) => {}
                        Ok(Some(owner)) if owner.as_deref() == Some(user) => {}
                        Ok(Some(_)) => {
                            return Err(ApiError::new(
                                StatusCode::FORBIDDEN,
                                &rid,
                                format!("conversation_id: \"{conv}\" is not a conversation of user \"{user}\""),
                            ));
                        }
                        Err(e) => return Err(ApiError::from_core(&rid, e)),
                    }
                }
            }
            serde_json::to_vec(&v).expect("a JSON object serializes").into()
        };
        let de = &mut serde_json::Deserializer::from_slice(&bytes);
        let body: T = serde_path_to_error::deserialize(de).map_err(|e| parse_error(&rid, e))?;
        ctx.principal.check_project(body.project()).map_err(|m| ApiError::new(StatusCode::FORBIDDEN, &rid, m))?;
        Ok(ApiJson { ctx, body })
    }
}
