//! A web page the user visits cannot reach a server on their machine: forged `Host` (DNS
//! rebinding), a foreign `Origin` and a non-JSON "simple request" are refused before anything is
//! written; configured hosts and origins are let in, with CORS for the origins.

use crate::harness::*;
use serde_json::json;

/// Request headers, the status expected, and what the message must say.
type Case<'a> = (Vec<(&'a str, &'a str)>, u16, &'a str);

async fn raw(s: &Server, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut req = s.client.post(format!("{}{path}", s.base)).body(body.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    // The refusal's message, unescaped, when the answer is mnemo's JSON envelope.
    let message = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v["message"].as_str().map(String::from))
        .unwrap_or(text);
    (status, message)
}

#[tokio::test]
async fn forged_host_foreign_origin_and_simple_requests_are_refused() {
    let s =
        Server::start("server:\n  allowed_hosts: [memory.internal]\n  cors_origins: [\"https://app.example.org\"]\n");
    let write =
        json!({"collection_name": "c", "conversation_id": "x", "messages": [{"role": "user", "content": "pwned"}],
                       "metadata": {"user_id": "u"}})
        .to_string();
    let path = "/api/memory/session/streaming_write";
    let json_ct = ("content-type", "application/json");
    let cases: Vec<Case> = vec![
        // A page's "simple request": text/plain needs no preflight.
        (vec![("content-type", "text/plain")], 415, "Content-Type: must be application/json"),
        (vec![], 415, "Content-Type: must be application/json"),
        (vec![("content-type", "application/x-www-form-urlencoded")], 415, "Content-Type"),
        // DNS rebinding: the page's own name in Host.
        (vec![json_ct, ("host", "evil.example.com:8600")], 403, "Host: \"evil.example.com:8600\""),
        (vec![json_ct, ("host", "localhost.evil.example.com")], 403, "Host:"),
        // A cross-site page (the browser names it).
        (
            vec![json_ct, ("origin", "https://evil.example.com")],
            403,
            "Origin: requests from \"https://evil.example.com\"",
        ),
        (vec![json_ct, ("origin", "null")], 403, "Origin:"),
    ];
    for (headers, status, message) in &cases {
        let (st, body) = raw(&s, path, headers, &write).await;
        assert_eq!(st, *status, "{headers:?}: {body}");
        assert!(body.contains(message), "{headers:?}: {body}");
    }
    // The dashboard's own page, MCP and the other routes are guarded too.
    let (st, _) = raw(&s, "/", &[("host", "evil.example.com")], "").await;
    assert_eq!(st, 403);
    let (st, _) = raw(&s, "/mcp", &[json_ct, ("host", "evil.example.com")], "{}").await;
    assert_eq!(st, 403);
    // Nothing was written.
    let (st, _) = s.post("session/info", json!({"collection_name": "c", "conversation_id": "x"})).await;
    assert_eq!(st, 404, "no refused request created the conversation");

    // What is allowed: the server's own names, a configured host, its own origin, a configured origin.
    let own = s.base.trim_start_matches("http://").to_string();
    let own_origin = format!("http://{own}");
    for headers in [
        vec![json_ct],
        vec![json_ct, ("content-type", "application/json; charset=utf-8")],
        vec![json_ct, ("host", "memory.internal")],
        vec![json_ct, ("origin", own_origin.as_str())],
        vec![json_ct, ("origin", "https://app.example.org")],
    ] {
        let (st, body) = raw(&s, path, &headers, &write).await;
        assert_eq!(st, 200, "{headers:?}: {body}");
    }
    // A configured origin gets CORS (the preflight and the answer).
    let pre = s
        .client
        .request(reqwest::Method::OPTIONS, format!("{}{path}", s.base))
        .header("origin", "https://app.example.org")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "content-type, authorization")
        .send()
        .await
        .unwrap();
    assert!(pre.status().is_success(), "{}", pre.status());
    assert_eq!(pre.headers()["access-control-allow-origin"], "https://app.example.org");

    // The dashboard cannot be framed by another site and may only talk to this server.
    let page = s.client.get(format!("{}/", s.base)).send().await.unwrap();
    let csp = page.headers()["content-security-policy"].to_str().unwrap().to_string();
    assert!(csp.contains("frame-ancestors 'none'") && csp.contains("connect-src 'self'"), "{csp}");
    assert!(csp.contains("script-src 'sha256-") && !csp.contains("script-src 'unsafe-inline'"), "{csp}");
    assert_eq!(page.headers()["x-frame-options"], "DENY");
    assert!(!page.text().await.unwrap().contains("localStorage.setItem"), "the key is not kept in localStorage");
}

/// A read that runs past `server.request_timeout_ms` is stopped with 503 and a clear message;
/// the server keeps answering. (The query embedding hangs here: an embedding endpoint that never
/// answers.)
#[tokio::test]
async fn a_read_past_its_deadline_is_stopped_with_503() {
    use axum::{Router, routing::post};
    let app = Router::new().route(
        "/v1/embeddings",
        post(|| async {
            tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            "never"
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let s = Server::start(&format!(
        "server:\n  request_timeout_ms: 500\nembedding:\n  provider: openai\n  base_url: {url}\n  model: hang\n  dimension: 8\n  timeout_secs: 20\n"
    ));
    s.ok("collection/create", json!({"collection_name": "c"})).await;
    let t = std::time::Instant::now();
    let (st, v) =
        s.post("event/search", json!({"collection_name": "c", "query": "anything", "filter": {"user_id": "u"}})).await;
    assert_eq!(st, 503, "{v}");
    assert!(v["message"].as_str().unwrap().starts_with("request_timeout: the request ran past 500 ms"), "{v}");
    assert!(
        t.elapsed() < std::time::Duration::from_secs(10),
        "answered at the deadline, not at the embedder's timeout"
    );
    let (st, _) = s.post("collection/list", json!({})).await;
    assert_eq!(st, 200, "the server keeps answering");
}
