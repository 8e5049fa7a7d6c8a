//! The OpenAPI document: served at /openapi.json, generated from the route table, and the committed
//! docs/openapi.json is current.

use crate::harness::*;
use serde_json::Value;

#[tokio::test]
async fn the_committed_openapi_document_is_current_and_served() {
    let s = Server::start("");
    let served: Value = s.client.get(format!("{}/openapi.json", s.base)).send().await.unwrap().json().await.unwrap();
    let committed: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.json")).unwrap(),
    )
    .unwrap();
    assert!(
        served == committed,
        "docs/openapi.json is stale: regenerate it with `cargo run -- openapi > docs/openapi.json`"
    );
    // Every API route is documented with its request schema.
    let paths = served["paths"].as_object().unwrap();
    for p in ["/api/memory/session/streaming_write", "/api/memory/get_context", "/api/memory/event/search", "/mcp"] {
        assert!(paths.contains_key(p), "{p} missing");
    }
    // The collection may be named by resource_id instead; session/add may give session_id instead.
    let write = &served["components"]["schemas"]["WriteBody"];
    assert_eq!(write["required"], serde_json::json!(["messages"]));
    assert!(write["properties"]["resource_id"].is_object() && write["properties"]["session_id"].is_object());
    // An undocumented route would 404 here: each documented API path answers (400 for an empty body, not 404).
    for p in paths.keys().filter(|p| p.starts_with("/api/memory/")) {
        let (status, _) = s.post(p.trim_start_matches("/api/memory/"), serde_json::json!({})).await;
        assert_ne!(status, 404, "{p} is documented but not routed");
    }
}
