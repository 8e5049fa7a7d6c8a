//! mnemo-http: the HTTP edge. axum routes under `/api/memory/…`, the wire DTOs and
//! their conversion into core requests, bearer-key auth per project, request ids, load shedding
//! and the error → status mapping. Handlers only translate; all behaviour lives in
//! `mnemo_core::Service`. This crate must not know SQL or any concrete store or provider.

mod answers;
mod confine;
mod dto;
mod error;
pub mod guard;
mod iam;
mod json;
mod metrics;
pub mod openapi;
mod routes;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use mnemo_core::Service;
pub use mnemo_core::access::Principal;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tracing::Instrument;

pub use error::{ApiError, ApiOk};

/// An API key and the projects it may use (`*` = all).
#[derive(Clone, Debug)]
pub struct ApiKey {
    pub key: String,
    pub projects: Vec<String>,
    /// What the key may do: `read`, `write`, `admin` (each granted on its own).
    pub scopes: Vec<mnemo_core::access::Scope>,
    /// An end-user token: every call is confined to this user.
    pub user_id: Option<String>,
    /// A VikingDB IAM pair: `key` is then the access key id (AK) and this its secret (SK);
    /// requests are signed with it (`iam.rs`) instead of carrying the key.
    pub secret_key: Option<String>,
}

/// Per-request context the middleware puts in the request's extensions.
#[derive(Clone, Debug)]
pub struct Ctx {
    pub request_id: String,
    pub principal: Principal,
}

#[derive(Clone)]
pub struct HttpConfig {
    pub api_keys: Vec<ApiKey>,
    pub max_body_bytes: usize,
    /// Requests in flight above which new ones get 429 instead of queueing without bound.
    pub max_in_flight: usize,
    /// Test-only: a clock `admin/clock` may move (`testing.clock_control`); `None` in production.
    pub clock: Option<Arc<mnemo_core::clock::OffsetClock>>,
    /// Who the MCP endpoint (`/mcp`) acts for unless the request's headers say otherwise.
    pub mcp_scope: mnemo_mcp::McpScope,
    /// Which hosts and (browser) origins may reach the server.
    pub sites: guard::SitePolicy,
    /// A bearer token that may read `/metrics` (a scraper's, separate from the API keys).
    pub metrics_key: Option<String>,
    /// Reads (search, context) running longer are stopped with 503.
    pub request_timeout: std::time::Duration,
    /// Reads running at once (0: no limit); a read that waits longer than `read_queue` for its
    /// turn is shed (503, `Retry-After`).
    pub max_concurrent_reads: usize,
    pub read_queue: std::time::Duration,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            api_keys: vec![],
            max_body_bytes: 4 * 1024 * 1024,
            max_in_flight: 2048,
            clock: None,
            mcp_scope: Default::default(),
            sites: guard::SitePolicy::for_bind(std::net::Ipv4Addr::LOCALHOST.into(), &[], vec![]),
            metrics_key: None,
            request_timeout: std::time::Duration::from_secs(30),
            max_concurrent_reads: 8,
            read_queue: std::time::Duration::from_millis(500),
        }
    }
}

/// What every handler shares, behind one `Arc`: axum clones the state for each request (and each
/// layer), so a clone is one reference count, not one per field.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

pub struct Shared {
    pub service: Arc<Service>,
    keys: Arc<Vec<ApiKey>>,
    metrics_key: Option<Arc<String>>,
    request_timeout: std::time::Duration,
    /// Admission of reads: one permit per read running (`None`: no limit).
    reads: Option<Arc<tokio::sync::Semaphore>>,
    max_reads: usize,
    read_queue: std::time::Duration,
    max_body_bytes: usize,
    max_in_flight: usize,
    in_flight: Arc<AtomicUsize>,
    metrics: Arc<metrics::Metrics>,
    clock: Option<Arc<mnemo_core::clock::OffsetClock>>,
}

impl Shared {
    fn metrics_key_matches(&self, headers: &axum::http::HeaderMap) -> bool {
        let Some(want) = &self.metrics_key else { return false };
        bearer(headers).is_some_and(|got| constant_time_eq(got.as_bytes(), want.as_bytes()))
    }

    /// Who is calling: open without configured keys, else the holder of a valid bearer key or of
    /// the IAM pair that signed the request (whose body is then read here, to check its hash).
    async fn authenticate(&self, req: Request, request_id: &str) -> Result<(Principal, Request), ApiError> {
        if self.keys.is_empty() {
            return Ok((Principal::Open, req));
        }
        let unauthorized = |m: String| ApiError::new(StatusCode::UNAUTHORIZED, request_id, m);
        let header =
            req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
        if let Some(signed) = iam::parse(&header) {
            let signed = signed.map_err(unauthorized)?;
            let Some(key) = self.keys.iter().find(|k| k.secret_key.is_some() && k.key == signed.access_key) else {
                return Err(unauthorized("Authorization: unknown access key".into()));
            };
            iam::check_date(&signed, req.headers(), chrono::Utc::now().timestamp_millis()).map_err(unauthorized)?;
            let (parts, body) = req.into_parts();
            let bytes = axum::body::to_bytes(body, self.max_body_bytes).await.map_err(|_| {
                let limit = self.max_body_bytes;
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, request_id, format!("body: must be at most {limit} bytes"))
            })?;
            let hash = iam::body_hash(&bytes);
            if parts.headers.get("x-content-sha256").is_some_and(|v| v.as_bytes() != hash.as_bytes()) {
                return Err(unauthorized("X-Content-Sha256: does not match the body".into()));
            }
            // Under `nest` the URI is the nested one; the client signed the whole path.
            let uri = parts.extensions.get::<axum::extract::OriginalUri>().map_or(&parts.uri, |u| &u.0);
            let want = iam::signature(
                &signed,
                key.secret_key.as_deref().expect("found by its secret"),
                &parts.method,
                uri.path(),
                uri.query(),
                &parts.headers,
                &hash,
            )
            .map_err(unauthorized)?;
            if !constant_time_eq(want.as_bytes(), signed.signature.as_bytes()) {
                return Err(unauthorized("Authorization: the signature does not match (wrong secret key?)".into()));
            }
            let principal = key.principal();
            return Ok((principal, Request::from_parts(parts, axum::body::Body::from(bytes))));
        }
        let bearer = bearer(req.headers()).ok_or_else(|| {
            unauthorized("Authorization: a `Bearer <key>` header or a VikingDB IAM signature is required".into())
        })?;
        let principal = self
            .keys
            .iter()
            .find(|key| key.secret_key.is_none() && constant_time_eq(key.key.as_bytes(), bearer.as_bytes()))
            .map(ApiKey::principal)
            .ok_or_else(|| unauthorized("Authorization: unknown API key".into()))?;
        Ok((principal, req))
    }
}

impl ApiKey {
    fn principal(&self) -> Principal {
        Principal::Key {
            projects: Arc::new(self.projects.clone()),
            scopes: Arc::new(self.scopes.clone()),
            user: self.user_id.as_deref().map(Arc::from),
        }
    }
}

/// Builds the router for `service`.
pub fn router(service: Arc<Service>, config: HttpConfig) -> Router {
    let state = AppState(Arc::new(Shared {
        service,
        keys: Arc::new(config.api_keys),
        metrics_key: config.metrics_key.map(Arc::new),
        request_timeout: config.request_timeout,
        reads: (config.max_concurrent_reads > 0)
            .then(|| Arc::new(tokio::sync::Semaphore::new(config.max_concurrent_reads))),
        max_reads: config.max_concurrent_reads,
        read_queue: config.read_queue,
        max_body_bytes: config.max_body_bytes,
        max_in_flight: config.max_in_flight,
        in_flight: Arc::new(AtomicUsize::new(0)),
        metrics: Arc::new(metrics::Metrics::default()),
        clock: config.clock,
    }));
    let api = routes::api_routes(&state)
        .route("/ping", get(routes::ping).fallback(ping_other_method))
        .fallback(not_found)
        .layer(middleware::from_fn(guard::json_only))
        .layer(middleware::from_fn_with_state(state.clone(), auth_and_context));
    let gate = state.reads.clone().map(|permits| mnemo_mcp::ReadGate {
        permits,
        max: state.max_reads,
        queue: state.read_queue,
    });
    let mcp = Router::new()
        .route_service(
            "/mcp",
            mnemo_mcp::http_service(state.service.clone(), config.mcp_scope, !state.keys.is_empty(), gate),
        )
        .route_layer(middleware::from_fn_with_state(state.clone(), jsonrpc_body))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth_and_context));
    let cors = (!config.sites.cors_origins.is_empty()).then(|| cors_layer(&config.sites.cors_origins));
    let sites = Arc::new(config.sites);
    let router = Router::new()
        .merge(mcp)
        .route("/healthz", get(routes::healthz))
        .route("/openapi.json", get(|| async { axum::Json(openapi::document()) }))
        .route("/metrics", get(metrics::scrape))
        .route("/", get(dashboard))
        .nest("/api/memory", api)
        .fallback(not_found_plain)
        .layer(middleware::from_fn_with_state(state.clone(), metrics::track))
        .layer(middleware::from_fn_with_state(sites, guard::sites))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(panic_response))
        .with_state(state);
    match cors {
        Some(c) => router.layer(c),
        None => router,
    }
}

/// CORS for the origins `server.cors_origins` names (a browser app on another site).
fn cors_layer(origins: &[String]) -> tower_http::cors::CorsLayer {
    use tower_http::cors::{AllowOrigin, CorsLayer};
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
    };
    CorsLayer::new()
        .allow_origin(allow)
        .allow_methods([axum::http::Method::GET, axum::http::Method::POST, axum::http::Method::DELETE])
        .allow_headers([
            header::CONTENT_TYPE,
            header::AUTHORIZATION,
            axum::http::HeaderName::from_static("x-request-id"),
            axum::http::HeaderName::from_static("x-mnemo-project"),
            axum::http::HeaderName::from_static("x-mnemo-collection"),
            axum::http::HeaderName::from_static("x-mnemo-user"),
            axum::http::HeaderName::from_static("x-mnemo-conversation"),
            axum::http::HeaderName::from_static("x-mnemo-min-score"),
            axum::http::HeaderName::from_static("mcp-protocol-version"),
            axum::http::HeaderName::from_static("mcp-session-id"),
        ])
        .expose_headers([axum::http::HeaderName::from_static("x-request-id")])
}

const DASHBOARD: &str = include_str!("dashboard/index.html");

/// The dashboard's Content-Security-Policy: its one inline script is allowed by its SHA-256 (no
/// other script runs, injected or not), it may talk to this server only, load nothing from
/// elsewhere, and not be framed by another site. Inline styles stay allowed (no script in them).
static DASHBOARD_CSP: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    use base64::Engine;
    use sha2::Digest;
    let script = DASHBOARD
        .split_once("<script>")
        .and_then(|(_, rest)| rest.split_once("</script>"))
        .map(|(s, _)| s)
        .expect("the dashboard has one inline script");
    let hash = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(script.as_bytes()));
    format!(
        "default-src 'none'; script-src 'sha256-{hash}'; style-src 'unsafe-inline'; img-src 'self' data:; \
         connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
});

/// The dashboard: one self-contained page compiled into the binary (no separate build step).
async fn dashboard() -> Response {
    (
        [
            (header::CONTENT_SECURITY_POLICY, DASHBOARD_CSP.as_str()),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        axum::response::Html(DASHBOARD),
    )
        .into_response()
}

/// A POST to `/mcp` whose body is not JSON gets JSON-RPC's own answer — a parse error (-32700,
/// `id: null`) with HTTP 400 — instead of the transport's plain-text refusal.
async fn jsonrpc_body(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if req.method() != axum::http::Method::POST {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, state.max_body_bytes).await {
        Ok(b) => b,
        Err(_) => return jsonrpc_error(StatusCode::PAYLOAD_TOO_LARGE, -32600, "request body too large"),
    };
    if let Err(e) = serde_json::from_slice::<serde_json::Value>(&bytes) {
        return jsonrpc_error(StatusCode::BAD_REQUEST, -32700, &format!("Parse error: {e}"));
    }
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes))).await
}

fn jsonrpc_error(status: StatusCode, code: i64, message: &str) -> Response {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
    (status, axum::Json(body)).into_response()
}

pub(crate) fn new_request_id() -> String {
    uuid::Uuid::now_v7().simple().to_string()
}

/// Assigns the request id, authenticates, sheds load, and tags the response with the id.
async fn auth_and_context(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let request_id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.chars().all(|c| c.is_ascii_graphic()))
        .map(str::to_string)
        .unwrap_or_else(new_request_id);
    let (principal, mut req) = match state.authenticate(req, &request_id).await {
        Ok(p) => p,
        Err(e) => return with_id(e.into_response(), &request_id),
    };
    let in_flight = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    let _guard = InFlight(state.in_flight.clone());
    if in_flight > state.max_in_flight {
        return with_id(
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                &request_id,
                format!("server busy: more than {} requests in flight; retry with backoff", state.max_in_flight),
            )
            .into_response(),
            &request_id,
        );
    }
    // The MCP tools (a front end of their own) read the principal from the extensions too.
    req.extensions_mut().insert(principal.clone());
    req.extensions_mut().insert(Ctx { request_id: request_id.clone(), principal });
    // Every log line written while serving the request carries its id; one line sums it up.
    let span = tracing::info_span!("request", request_id = %request_id);
    let method = req.method().clone();
    let path =
        req.extensions().get::<axum::extract::OriginalUri>().map_or_else(|| req.uri().path(), |u| u.path()).to_string();
    let started = std::time::Instant::now();
    let resp = next.run(req).instrument(span.clone()).await;
    let status = resp.status().as_u16();
    span.in_scope(
        || tracing::info!(%method, route = %path, status, ms = started.elapsed().as_secs_f64() * 1000.0, "request"),
    );
    with_id(resp, &request_id)
}

struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn with_id(mut resp: Response, request_id: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(request_id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn not_found(req: Request) -> Response {
    let rid = req.extensions().get::<Ctx>().map(|c| c.request_id.clone()).unwrap_or_else(new_request_id);
    let msg = if req.method() != axum::http::Method::POST {
        return ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            &rid,
            format!("method: {} is not allowed; API endpoints take POST with a JSON body", req.method()),
        )
        .into_response();
    } else {
        format!("path: no endpoint {}", req.uri().path())
    };
    ApiError::new(StatusCode::NOT_FOUND, &rid, msg).into_response()
}

async fn ping_other_method(req: Request) -> Response {
    let rid = req.extensions().get::<Ctx>().map(|c| c.request_id.clone()).unwrap_or_else(new_request_id);
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        &rid,
        format!("method: {} is not allowed; ping takes GET", req.method()),
    )
    .into_response()
}

async fn not_found_plain(req: Request) -> Response {
    ApiError::new(StatusCode::NOT_FOUND, &new_request_id(), format!("path: no endpoint {}", req.uri().path()))
        .into_response()
}

fn panic_response(_err: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "", "internal error").into_response()
}

/// Registers POST routes.
pub(crate) fn p<H, T>(h: H) -> axum::routing::MethodRouter<AppState>
where
    H: axum::handler::Handler<T, AppState>,
    T: 'static,
{
    post(h)
}
