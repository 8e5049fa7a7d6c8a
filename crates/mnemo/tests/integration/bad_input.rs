//! Every kind of bad input gets a 4xx with a non-zero code and a message naming the field (and
//! the allowed range where there is one); none is a 5xx; none changes stored data.

use crate::harness::*;
use serde_json::{Value, json};

fn write_body(patch: Value) -> Value {
    let mut b =
        json!({"collection_name": "c", "conversation_id": "bad", "messages": [{"role": "user", "content": "hi"}]});
    for (k, v) in patch.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

fn search_body(patch: Value) -> Value {
    let mut b = json!({"collection_name": "c", "filter": {"user_id": "u1"}});
    for (k, v) in patch.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

#[tokio::test]
async fn bad_input_is_rejected_with_the_field_named_and_nothing_changes() {
    let s = Server::start("");
    // Baseline data that must not change.
    s.write("base", msgs(&[("user", "I live in Rome")]), json!({}), "u1").await;
    s.ok(
        "event/add",
        json!({"collection_name": "c", "event_type": "event_v1", "user_id": "u1", "memory_info": {"summary": "kept"}}),
    )
    .await;

    let msg = |content: Value| json!([{"role": "user", "content": content}]);
    let cases: Vec<(&str, Value, u16, &str)> = vec![
        (
            "session/streaming_write",
            json!({"collection_name": "c", "messages": msg(json!("x"))}),
            400,
            "conversation_id: is required",
        ),
        (
            "session/streaming_write",
            write_body(json!({"conversation_id": ""})),
            400,
            "conversation_id: must be 1..=256",
        ),
        (
            "session/streaming_write",
            write_body(json!({"conversation_id": "x".repeat(257)})),
            400,
            "conversation_id: must be 1..=256",
        ),
        ("session/streaming_write", write_body(json!({"messages": []})), 400, "messages: must hold 1..=1000"),
        (
            "session/streaming_write",
            write_body(json!({"messages": vec![json!({"role": "user", "content": "x"}); 1001]})),
            400,
            "messages: must hold 1..=1000",
        ),
        ("session/streaming_write", write_body(json!({"messages": "hello"})), 400, "messages:"),
        (
            "session/streaming_write",
            write_body(json!({"messages": [{"role": "bot", "content": "x"}]})),
            400,
            "messages[0].role: must be one of",
        ),
        (
            "session/streaming_write",
            write_body(json!({"messages": [{"content": "x"}]})),
            400,
            "messages[0].role: is required",
        ),
        (
            "session/streaming_write",
            write_body(json!({"messages": msg(json!(""))})),
            400,
            "messages[0].content: must not be empty",
        ),
        (
            "session/streaming_write",
            write_body(json!({"messages": msg(json!("   "))})),
            400,
            "messages[0].content: must not be empty",
        ),
        (
            "session/streaming_write",
            write_body(json!({"messages": msg(json!(5))})),
            400,
            "messages[0].content: must be a string or a list of parts",
        ),
        (
            "session/streaming_write",
            write_body(json!({"messages": [{"role": "user", "content": "x", "time": -1}]})),
            400,
            "messages[0].time: must be",
        ),
        (
            "session/streaming_write",
            write_body(json!({"extract_trigger": {"token_count": 0}})),
            400,
            "extract_trigger.token_count: must be an integer in 1..=10000000",
        ),
        (
            "session/streaming_write",
            write_body(json!({"extract_trigger": {"token_count": -5}})),
            400,
            "extract_trigger.token_count:",
        ),
        (
            "session/streaming_write",
            write_body(json!({"extract_trigger": {"token_count": 1.5}})),
            400,
            "extract_trigger.token_count:",
        ),
        (
            "session/streaming_write",
            write_body(json!({"extract_trigger": {"message_count": 0}})),
            400,
            "extract_trigger.message_count: must be an integer in 1..=100000",
        ),
        (
            "session/streaming_write",
            write_body(json!({"extract_trigger": {"wait_timeout": 0}})),
            400,
            "extract_trigger.wait_timeout: must be an integer in 1..=2592000",
        ),
        (
            "session/streaming_write",
            write_body(json!({"extract_trigger": {"wait_timeout": 2_592_001}})),
            400,
            "extract_trigger.wait_timeout:",
        ),
        (
            "session/streaming_write",
            write_body(json!({"extract_trigger": {"wait_timeout": "soon"}})),
            400,
            "extract_trigger.wait_timeout:",
        ),
        (
            "session/streaming_write",
            write_body(json!({"metadata": {"user_id": {"a": 1}}})),
            400,
            "metadata.user_id: must be a string",
        ),
        ("session/streaming_write", write_body(json!({"metadata": {"user_id": ""}})), 400, "metadata.user_id:"),
        ("session/streaming_write", write_body(json!({"collection_name": "a b"})), 400, "collection_name: must be"),
        ("session/streaming_write", write_body(json!({"collection_name": 7})), 400, "collection_name:"),
        ("session/streaming_write", json!([1, 2]), 400, "body: must be a JSON object"),
        ("session/add", write_body(json!({"messages": []})), 400, "messages:"),
        (
            "session/flush",
            json!({"collection_name": "nope", "conversation_id": "x"}),
            404,
            "collection_name: no collection",
        ),
        (
            "session/info",
            json!({"collection_name": "c", "conversation_id": "a", "session_id": "b"}),
            400,
            "conversation_id: give exactly one",
        ),
        (
            "session/info",
            json!({"collection_name": "c", "conversation_id": "never"}),
            404,
            "conversation_id: no conversation",
        ),
        ("event/search", search_body(json!({"limit": 0})), 400, "limit: must be an integer in 1..=5000"),
        ("event/search", search_body(json!({"limit": 5001})), 400, "limit: must be an integer in 1..=5000"),
        (
            "event/search",
            search_body(json!({"time_decay_config": {"weight": 1.0}})),
            400,
            "time_decay_config.weight: must be in [0,1)",
        ),
        ("event/search", search_body(json!({"time_decay_config": {"weight": -0.1}})), 400, "time_decay_config.weight:"),
        (
            "event/search",
            search_body(json!({"time_decay_config": {"weight": 0.5, "no_decay_period": -1}})),
            400,
            "time_decay_config.no_decay_period: must be a number of days in [0,10000]",
        ),
        (
            "event/search",
            search_body(json!({"time_decay_config": {"weight": 0.5, "no_decay_period": 10_001}})),
            400,
            "time_decay_config.no_decay_period:",
        ),
        ("event/search", search_body(json!({"custom_weight": 1.0})), 400, "custom_weight: must be in [0,1)"),
        (
            "event/search",
            search_body(json!({"filter": {"memory_type": "event_v1"}})),
            400,
            "filter.user_id: at least one",
        ),
        ("event/search", search_body(json!({"filter": {"user_id": 5}})), 400, "filter.user_id:"),
        (
            "event/search",
            search_body(json!({"filter": {"user_id": "u1", "start_time": 10, "end_time": 5}})),
            400,
            "filter.start_time:",
        ),
        ("event/search", search_body(json!({"query": "q".repeat(4001)})), 400, "query: must be at most 4000"),
        ("event/search", search_body(json!({"collection_name": "nope"})), 404, "collection_name: no collection"),
        (
            "event/add",
            json!({"collection_name": "c", "event_type": "nope", "user_id": "u1", "memory_info": {"summary": "x"}}),
            400,
            "event_type: unknown event type",
        ),
        (
            "event/add",
            json!({"collection_name": "c", "event_type": "event_v1", "user_id": "u1", "memory_info": {}}),
            400,
            "memory_info.summary: is required",
        ),
        (
            "event/add",
            json!({"collection_name": "c", "event_type": "event_v1", "memory_info": {"summary": "x"}}),
            400,
            "user_id: at least one",
        ),
        (
            "event/add",
            json!({"collection_name": "c", "event_type": "event_v1", "user_id": "u1", "memory_info": {"summary": "x"}, "class": "forever"}),
            400,
            "class: must be one of",
        ),
        ("event/update", json!({"collection_name": "c", "event_id": "evt_nope"}), 404, "event_id: no event"),
        (
            "event/batch_delete",
            json!({"collection_name": "c", "filter": {"user_id": "u1"}, "delete_type": "soft"}),
            400,
            "delete_type: must be \"full\"",
        ),
        ("event/batch_delete", json!({"collection_name": "c", "filter": {}}), 400, "filter: must name at least one"),
        ("profile/add", json!({"collection_name": "c", "user_id": ""}), 400, "user_id: must be 1..=256"),
        (
            "profile/add",
            json!({"collection_name": "c", "user_id": "u1", "profile_type": "nope"}),
            400,
            "profile_type: unknown profile type",
        ),
        ("profile/search", json!({"collection_name": "c", "filter": {}}), 400, "filter.user_id: at least one"),
        ("profile/update", json!({"collection_name": "c", "profile_id": "prf_nope"}), 404, "profile_id: no profile"),
        ("job/list", json!({"collection_name": "c", "state": "bogus"}), 400, "state: must be one of"),
        ("job/list", json!({"collection_name": "c", "limit": 0}), 400, "limit: must be an integer in 1..=5000"),
        (
            "collection/create",
            json!({"collection_name": "x", "event_types": [{"name": "t", "fields": []}]}),
            400,
            "event_types[0].fields:",
        ),
        (
            "collection/create",
            json!({"collection_name": "x", "event_types": [{"name": "t", "fields": [{"name": "f", "type": "blob"}]}]}),
            400,
            "event_types[0].fields[0].type:",
        ),
        ("nothing/here", json!({}), 404, "path: no endpoint"),
        (
            "get_context",
            json!({"collection_name": "c", "conversation_id": "x", "max_tokens": 0}),
            400,
            "max_tokens: must be an integer in 1..=200000",
        ),
        (
            "get_context",
            json!({"collection_name": "c", "conversation_id": "x", "locale": "fr"}),
            400,
            "locale: must be zh, en or auto",
        ),
        (
            "get_context",
            json!({"collection_name": "c", "conversation_id": "x", "event_search_config": {"limit": 0}}),
            400,
            "event_search_config.limit:",
        ),
        (
            "get_context",
            json!({"collection_name": "c", "conversation_id": "x", "event_search_config": {"time_decay_config": {"weight": 2}}}),
            400,
            "event_search_config.time_decay_config.weight:",
        ),
        (
            "get_context",
            json!({"collection_name": "c", "conversation_id": "x", "event_search_config": {"similarity_threshold": 1.5}}),
            400,
            "event_search_config.similarity_threshold:",
        ),
        ("get_context", json!({"collection_name": "c", "conversation_id": ""}), 400, "conversation_id:"),
        (
            "get_context",
            json!({"collection_name": "c", "conversation_id": "x", "query": "q".repeat(4001)}),
            400,
            "query: must be at most 4000",
        ),
        (
            "get_context",
            json!({"collection_name": "nope", "conversation_id": "x"}),
            404,
            "collection_name: no collection",
        ),
        (
            "event/search",
            search_body(json!({"similarity_threshold": 2})),
            400,
            "similarity_threshold: must be in [0,1]",
        ),
        ("event/search", search_body(json!({"query": "x", "freshness_days": -1})), 400, "freshness_days:"),
    ];
    let mut failures = Vec::new();
    for (path, body, status, expect) in &cases {
        let (st, v) = s.post(path, body.clone()).await;
        let message = v["message"].as_str().unwrap_or_default();
        let code_ok = v["code"].as_u64().is_some_and(|c| c == *status as u64 * 100);
        if st != *status || !code_ok || !message.starts_with(expect) {
            failures.push(format!("{path} {}: got {st} {v}, want {status} starting {expect:?}", truncate(body)));
        }
    }
    // Malformed JSON and an empty body.
    for raw in ["{\"collection_name\": \"c\",", "", "not json"] {
        let r = s
            .client
            .post(format!("{}/api/memory/session/streaming_write", s.base))
            .header("content-type", "application/json")
            .body(raw)
            .send()
            .await
            .unwrap();
        let st = r.status().as_u16();
        let v: Value = r.json().await.unwrap();
        if st != 400 || !v["message"].as_str().unwrap().starts_with("body:") {
            failures.push(format!("raw {raw:?}: got {st} {v}"));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases wrong:\n{}", failures.len(), cases.len() + 3, failures.join("\n"));

    // Nothing changed: the baseline is intact, and no rejected write left a conversation behind.
    assert_eq!(s.all_messages("base").await.len(), 1);
    assert_eq!(s.events("u1").await.len(), 1);
    let (st, _) = s.post("session/info", json!({"collection_name": "c", "conversation_id": "bad"})).await;
    assert_eq!(st, 404, "no rejected write created the conversation");
    let l = s.ok("collection/list", json!({})).await;
    assert_eq!(l["count"], 1, "no rejected request created a collection");
}

fn truncate(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 120 { format!("{}…", &s[..120]) } else { s }
}
