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
