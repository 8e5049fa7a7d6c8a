//! Hostile input against the real server: a deterministic mutation fuzzer over every endpoint's
//! body (bounded: MNEMO_FUZZ_CASES, default 1,500 requests), and crafted cases — deep JSON,
//! invalid UTF-8, NUL bytes, numbers out of range, FTS query syntax, lone surrogates, huge limits.
//! The rule: never a 5xx, never a dropped connection, always the JSON envelope; and the data that
//! was there before is still there after.

use crate::harness::*;
use serde_json::{Value, json};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Values that tend to break parsers, validators, SQL and FTS.
fn nasty(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth > 2 { 14 } else { 17 }) {
        0 => Value::Null,
        1 => json!(true),
        2 => json!(i64::MIN),
        3 => json!(u64::MAX),
        4 => json!(-1),
        5 => json!(1e308),
        6 => json!(0.5),
        7 => json!(""),
        8 => json!("x".repeat(rng.below(5000))),
        9 => json!("\" OR 1=1; DROP TABLE events; --"),
        10 => json!("\"unbalanced AND (NEAR( * ^ col:term OR NOT"),
        11 => json!("emoji 🧠 rtl שלום zero\u{200b}width combining e\u{301} nul \u{0} end"),
        12 => json!("我家宝宝喝奶粉总胀气"),
        13 => json!(["a", 1, null]),
        14 => Value::Array((0..rng.below(4)).map(|_| nasty(rng, depth + 1)).collect()),
        15 => {
            let mut m = serde_json::Map::new();
            for i in 0..rng.below(4) {
                m.insert(format!("k{i}"), nasty(rng, depth + 1));
            }
            Value::Object(m)
        }
        _ => json!({"user_id": nasty(rng, depth + 1)}),
    }
}

/// Replaces, removes or adds one field somewhere in `v`.
fn mutate(rng: &mut Rng, v: &mut Value) {
    match v {
        Value::Object(m) if !m.is_empty() && rng.below(3) > 0 => {
            let keys: Vec<String> = m.keys().cloned().collect();
            let k = &keys[rng.below(keys.len())];
            match rng.below(4) {
                0 => {
                    m.remove(k);
                }
                1 => mutate(rng, m.get_mut(k).unwrap()),
                _ => {
                    m.insert(k.clone(), nasty(rng, 0));
                }
            }
        }
        Value::Array(a) if !a.is_empty() && rng.below(2) == 0 => {
            let i = rng.below(a.len());
            mutate(rng, &mut a[i]);
        }
        Value::Object(m) => {
            m.insert(format!("extra{}", rng.below(100)), nasty(rng, 0));
        }
        other => *other = nasty(rng, 0),
    }
}

fn templates() -> Vec<(&'static str, Value)> {
    let msgs =
        json!([{"role": "user", "content": "I live in Rome", "time": 1_700_000_000_000i64, "idempotency_key": "k"}]);
    vec![
        (
            "session/streaming_write",
            json!({"collection_name": "c", "conversation_id": "f", "messages": msgs, "extract_trigger": {"token_count": 5, "message_count": 3, "wait_timeout": 60}, "metadata": {"user_id": "fz"}}),
        ),
        (
            "session/add",
            json!({"collection_name": "c", "conversation_id": "f2", "messages": msgs, "metadata": {"user_id": "fz"}}),
        ),
        ("session/flush", json!({"collection_name": "c", "conversation_id": "f"})),
        ("session/info", json!({"collection_name": "c", "conversation_id": "f"})),
        (
            "get_context",
            json!({"collection_name": "c", "conversation_id": "f", "query": "Rome", "max_tokens": 300, "locale": "auto",
            "event_search_config": {"filter": {"user_id": "fz"}, "limit": 5, "time_decay_config": {"weight": 0.5, "no_decay_period": 1}, "similarity_threshold": 0.1},
            "profile_search_config": {"filter": {"user_id": "fz"}, "limit": 1}, "include": {"profile": true, "short_term": true}}),
        ),
        (
            "event/search",
            json!({"collection_name": "c", "query": "Rome", "filter": {"user_id": "fz", "memory_type": ["event_v1"], "start_time": 0, "end_time": 9_000_000_000_000i64, "scope": "project:x"}, "limit": 5000, "time_decay_config": {"weight": 0.2}, "custom_weight": 0.3}),
        ),
        (
            "event/add",
            json!({"collection_name": "c", "event_type": "event_v1", "user_id": "fz", "memory_info": {"summary": "fuzz"}, "time": 1_700_000_000_000i64, "scope": "global", "class": "temporary"}),
        ),
        (
            "event/update",
            json!({"collection_name": "c", "event_id": "evt_x", "memory_info": {"summary": "y"}, "status": "archived"}),
        ),
        ("event/delete", json!({"collection_name": "c", "event_id": "evt_x"})),
        (
            "event/batch_delete",
            json!({"collection_name": "c", "filter": {"user_id": "fz-none", "event_type": "event_v1"}, "delete_type": "full"}),
        ),
        ("profile/search", json!({"collection_name": "c", "filter": {"user_id": "fz"}, "limit": 3})),
        ("profile/add", json!({"collection_name": "c", "user_id": "fz-p", "attributes": {"city": "Rome"}})),
        ("profile/update", json!({"collection_name": "c", "profile_id": "prf_x", "attributes": {"city": null}})),
        ("job/list", json!({"collection_name": "c", "state": "done", "limit": 10})),
        (
            "collection/create",
            json!({"collection_name": "fz", "event_types": [{"name": "t", "fields": [{"name": "f", "type": "enum", "values": ["a"]}]}]}),
        ),
        ("collection/info", json!({"collection_name": "c"})),
        ("collection/list", json!({})),
    ]
}

async fn send_raw(s: &Server, path: &str, body: Vec<u8>) -> (u16, Value) {
    send_with(s, path, body, &[("content-type", "application/json")]).await
}

/// Headers a hostile page or client may send instead of the real ones.
const FORGED: &[(&str, &str)] = &[
    ("content-type", "text/plain"),
    ("content-type", "application/x-www-form-urlencoded"),
    ("content-type", "multipart/form-data; boundary=x"),
    ("content-type", "application/jsonp"),
    ("host", "evil.example.com"),
    ("host", "127.0.0.1.nip.io:8600"),
    ("origin", "https://evil.example.com"),
    ("origin", "null"),
];

async fn send_with(s: &Server, path: &str, body: Vec<u8>, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut req = s.client.post(format!("{}/api/memory/{path}", s.base)).body(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap_or_else(|e| panic!("{path}: connection failed: {e}"));
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{path}: not the JSON envelope: {text:?}"));
    (status, v)
}

#[tokio::test]
async fn mutated_bodies_never_cause_a_server_error() {
    let s = Server::start("");
    // Data that must survive whatever follows, in a collection no template addresses (accepted
    // requests may legitimately delete in "c": a type-wide batch delete is a valid request).
    s.ok("session/streaming_write", json!({"collection_name": "vault", "conversation_id": "keep", "messages": [{"role": "user", "content": "keep this message"}], "metadata": {"user_id": "keeper"}})).await;
    s.ok("event/add", json!({"collection_name": "vault", "event_type": "event_v1", "user_id": "keeper", "memory_info": {"summary": "keep this event"}})).await;
    let cases: usize = std::env::var("MNEMO_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1500);
    let seed = std::env::var("MNEMO_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed_1234_abcd_ef01u64);
    let mut rng = Rng(seed | 1);
    let templates = templates();
    let (mut ok, mut rejected) = (0usize, 0usize);
    for i in 0..cases {
        let (path, template) = &templates[i % templates.len()];
        let mut body = template.clone();
        for _ in 0..1 + rng.below(3) {
            mutate(&mut rng, &mut body);
        }
        // Every fifth body is also sent with a forged header: refused (4xx, the envelope), never
        // a server error or a write.
        if i % 5 == 4 {
            let (k, v) = FORGED[rng.below(FORGED.len())];
            let headers =
                if k == "content-type" { vec![(k, v)] } else { vec![("content-type", "application/json"), (k, v)] };
            let (status, r) = send_with(&s, path, serde_json::to_vec(&body).unwrap(), &headers).await;
            assert!((400..500).contains(&status), "case {i} {path} with forged {k}: {status} {r}");
            assert!(r["request_id"].is_string() && r["code"].as_u64() == Some(status as u64 * 100), "{r}");
        }
        let (status, v) = send_raw(&s, path, serde_json::to_vec(&body).unwrap()).await;
        assert!(
            status < 500,
            "case {i} {path}: {status} {v}\nbody: {}",
            body.to_string().chars().take(400).collect::<String>()
        );
        assert!(v["request_id"].is_string(), "case {i}: envelope without request_id: {v}");
        if status == 200 {
            assert_eq!(v["code"], 0);
            ok += 1;
        } else {
            assert_eq!(v["code"].as_u64(), Some(status as u64 * 100), "case {i}: {v}");
            assert!(!v["message"].as_str().unwrap_or("").is_empty());
            rejected += 1;
        }
    }
    println!(
        "fuzz: {cases} mutated requests over {} endpoints: {ok} accepted, {rejected} rejected with 4xx, 0 server errors",
        templates.len()
    );
    assert!(ok > 50 && rejected > 200, "the fuzzer exercised both paths ({ok} ok, {rejected} rejected)");
    let info = s.ok("session/info", json!({"collection_name": "vault", "conversation_id": "keep"})).await;
    assert_eq!(info["messages"][0]["content"], "keep this message");
    let ev = s.ok("event/search", json!({"collection_name": "vault", "filter": {"user_id": "keeper"}})).await;
    assert_eq!(ev["result_list"][0]["memory_info"]["summary"], "keep this event");
    let h = http_client().get(format!("{}/healthz", s.base)).send().await.unwrap();
    assert_eq!(h.status(), 200);
}

#[tokio::test]
async fn crafted_hostile_inputs() {
    let s = Server::start("");
    s.ok("event/add", json!({"collection_name": "c", "event_type": "event_v1", "user_id": "u", "memory_info": {"summary": "ordinary memory about Rome"}})).await;
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_body = format!(
        r#"{{"collection_name":"c","conversation_id":"d","messages":[{{"role":"user","content":"x"}}],"metadata":{{"x":{deep}}}}}"#
    );
    let mut invalid_utf8 =
        br#"{"collection_name":"c","conversation_id":"u","messages":[{"role":"user","content":""#.to_vec();
    invalid_utf8.extend([0xff, 0xfe, 0xc3, 0x28]);
    invalid_utf8.extend(br#""}]}"#);
    let raw: Vec<(&str, Vec<u8>, u16)> = vec![
        ("session/streaming_write", deep_body.into_bytes(), 400),
        ("session/streaming_write", invalid_utf8, 400),
        ("session/streaming_write", br#"{"collection_name":"c","conversation_id":"s","messages":[{"role":"user","content":"\ud800"}]}"#.to_vec(), 400),
        ("event/search", br#"{"collection_name":"c","filter":{"user_id":"u"},"limit":1e400}"#.to_vec(), 400),
        ("event/search", br#"{"collection_name":"c","filter":{"user_id":"u"},"limit":99999999999999999999999}"#.to_vec(), 400),
        ("session/streaming_write", br#"{"collection_name":"c","conversation_id":"n","messages":[{"role":"user","content":"a"}],"extract_trigger":{"token_count":1e20}}"#.to_vec(), 400),
        ("session/streaming_write", vec![0u8; 64], 400),
    ];
    for (path, body, want) in raw {
        let (st, v) = send_raw(&s, path, body).await;
        assert_eq!(st, want, "{path}: {v}");
    }
    // Query syntax of SQL and FTS5 is just text.
    for q in [
        "\"",
        "*",
        "NEAR(a b)",
        "a AND OR NOT b",
        "col:term",
        "^start",
        "'; DROP TABLE events; --",
        "\u{0}",
        "🧠🧠",
        "  ",
    ] {
        let (st, v) = s
            .post(
                "event/search",
                json!({"collection_name": "c", "query": q, "filter": {"user_id": "u"}, "limit": 5000}),
            )
            .await;
        assert_eq!(st, 200, "query {q:?}: {v}");
        let (st, v) = s.post("get_context", json!({"collection_name": "c", "conversation_id": "q", "query": q, "event_search_config": {"filter": {"user_id": "u"}}})).await;
        assert_eq!(st, 200, "get_context query {q:?}: {v}");
    }
    // NUL bytes and odd unicode in stored text round-trip intact.
    let odd = "nul \u{0} zero\u{200b}width e\u{301} 🧠 שלום";
    s.write("odd", json!([{"role": "user", "content": odd}]), json!({}), "u").await;
    assert_eq!(s.all_messages("odd").await[0]["content"], odd);
    let r = s.ok("event/search", json!({"collection_name": "c", "query": "Rome", "filter": {"user_id": "u"}})).await;
    assert_eq!(r["result_list"][0]["memory_info"]["summary"], "ordinary memory about Rome");
}
