//! Cross-site protection for a server on the user's own machine: a web page the user visits must
//! not be able to write or read memories through it.
//!
//! - **Host**: the `Host` header must name the server — a loopback name, the address it is bound
//!   to, or one of `server.allowed_hosts` (behind a proxy). A page that rebinds its own DNS name to
//!   127.0.0.1 sends its own name and is refused (DNS rebinding). A server bound to every address
//!   (`0.0.0.0`) cannot list its names; it requires API keys anyway, and checks `Host` only against
//!   a configured `allowed_hosts`.
//! - **Origin**: a browser names the page's origin on cross-site requests; one that is not this
//!   server (same host) and not in `server.cors_origins` is refused. Allowed origins get CORS.
//! - **Content-Type**: API calls must be `application/json`, which a page cannot send to another
//!   site without a CORS preflight (a `text/plain` "simple request" is refused with 415).

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::IpAddr;
use std::sync::Arc;

/// Which hosts and origins may reach the server.
#[derive(Clone, Debug, Default)]
pub struct SitePolicy {
    /// Host names (without port) the server answers to; `None`: any (a server bound to every
    /// address without `allowed_hosts`).
    hosts: Option<Vec<String>>,
    /// Origins (`scheme://host[:port]`) of other sites allowed to call the API from a browser.
    pub cors_origins: Vec<String>,
}

impl SitePolicy {
    /// The policy of a server bound to `bind`: loopback names, the bound address, and `allowed`.
    pub fn for_bind(bind: IpAddr, allowed: &[String], cors_origins: Vec<String>) -> Self {
        let mut hosts: Vec<String> = allowed.iter().map(|h| h.to_ascii_lowercase()).collect();
        let hosts = if bind.is_unspecified() && allowed.is_empty() {
            None
        } else {
            hosts.extend(["localhost", "127.0.0.1", "::1"].map(String::from));
            if !bind.is_unspecified() {
                hosts.push(bind.to_string());
            }
            Some(hosts)
        };
        Self { hosts, cors_origins }
    }

    /// Every host allowed (tests and embedded use).
    pub fn open() -> Self {
        Self::default()
    }

    fn host_allowed(&self, host: &str) -> bool {
        let Some(hosts) = &self.hosts else { return true };
        let name = host_name(host);
        name.ends_with(".localhost") || hosts.iter().any(|h| h == &name)
    }

    fn origin_allowed(&self, origin: &str, host: Option<&str>) -> bool {
        if self.cors_origins.iter().any(|o| o == "*" || o.eq_ignore_ascii_case(origin)) {
            return true;
        }
        // Same origin: the page was served by this server (its dashboard).
        let Some(rest) = origin.split_once("://").map(|(_, r)| r) else { return false };
        host.is_some_and(|h| rest.eq_ignore_ascii_case(h))
    }
}

/// `host[:port]` → the lowercase host name (IPv6 without brackets).
fn host_name(host: &str) -> String {
    let h = host.trim().to_ascii_lowercase();
    if let Some(rest) = h.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default().to_string();
    }
    match h.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name.to_string(),
        _ => h,
    }
}

/// mnemo's error envelope, with the request id (`rid`, or a new one for a request refused before
/// it was given one).
fn refuse(status: StatusCode, rid: Option<&str>, message: String) -> Response {
    let rid = rid.map_or_else(crate::new_request_id, str::to_string);
    crate::error::ApiError::new(status, &rid, message).into_response()
}

/// Host and Origin checks on every route.
pub async fn sites(State(policy): State<Arc<SitePolicy>>, req: Request, next: Next) -> Response {
    let headers = req.headers();
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    match host {
        Some(h) if policy.host_allowed(h) => {}
        Some(h) => {
            return refuse(
                StatusCode::FORBIDDEN,
                None,
                format!(
                    "Host: {h:?} is not a name of this server (a page on another site cannot reach it); \
                     behind a proxy, list the name in server.allowed_hosts"
                ),
            );
        }
        None if policy.hosts.is_none() => {}
        None => return refuse(StatusCode::BAD_REQUEST, None, "Host: the header is required".into()),
    }
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok())
        && !policy.origin_allowed(origin, host)
    {
        return refuse(
            StatusCode::FORBIDDEN,
            None,
            format!("Origin: requests from {origin:?} are refused (another site); allow it in server.cors_origins"),
        );
    }
    next.run(req).await
}

/// API calls carry JSON: anything else is refused with 415 (a cross-site "simple request" cannot
/// set `application/json`).
pub async fn json_only(req: Request, next: Next) -> Response {
    if req.method() == Method::POST && !is_json(req.headers()) {
        let got = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("none");
        let rid = req.extensions().get::<crate::Ctx>().map(|c| c.request_id.clone());
        return refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            rid.as_deref(),
            format!("Content-Type: must be application/json, got {got:?}"),
        );
    }
    next.run(req).await
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_origins() {
        let p = SitePolicy::for_bind("127.0.0.1".parse().unwrap(), &["mem.example.org".into()], vec![]);
        for ok in ["127.0.0.1:8600", "localhost:8600", "[::1]:8600", "LOCALHOST", "mem.example.org", "app.localhost:1"]
        {
            assert!(p.host_allowed(ok), "{ok}");
        }
        for bad in ["evil.example.com:8600", "127.0.0.1.evil.com", "localhost.evil.com:8600"] {
            assert!(!p.host_allowed(bad), "{bad}");
        }
        assert!(p.origin_allowed("http://127.0.0.1:8600", Some("127.0.0.1:8600")));
        assert!(!p.origin_allowed("http://evil.example.com", Some("127.0.0.1:8600")));
        assert!(!p.origin_allowed("null", Some("127.0.0.1:8600")));
        let any = SitePolicy::for_bind("0.0.0.0".parse().unwrap(), &[], vec!["https://app.example.org".into()]);
        assert!(any.host_allowed("whatever:80"));
        assert!(any.origin_allowed("https://app.example.org", Some("mem:8600")));
    }
}
