//! Provider faults: an OpenAI-compatible embedding endpoint that goes down and comes back.
//! Writes are never lost, search degrades to full text, jobs back off and retry, the circuit
//! breaker stops hammering the dead endpoint, and everything is processed after recovery.

use crate::harness::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

struct Fake {
    url: String,
    down: Arc<AtomicBool>,
    /// While set, every call waits (a slow model).
    hold: Arc<AtomicBool>,
    calls: Arc<AtomicUsize>,
}

async fn fake_embeddings(dim: usize) -> Fake {
    use axum::{Json, Router, http::StatusCode, routing::post};
    let down = Arc::new(AtomicBool::new(false));
    let hold = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let (d, h, c) = (down.clone(), hold.clone(), calls.clone());
    let app = Router::new().route(
        "/v1/embeddings",
        post(move |Json(body): Json<Value>| {
            let (d, h, c) = (d.clone(), h.clone(), c.clone());
            async move {
                c.fetch_add(1, Ordering::SeqCst);
                while h.load(Ordering::SeqCst) {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                if d.load(Ordering::SeqCst) {
                    return Err(StatusCode::SERVICE_UNAVAILABLE);
                }
                let data: Vec<Value> = body["input"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .enumerate()
                    .map(|(i, t)| {
                        let mut v = vec![0.01f32; dim];
                        for (j, b) in t.as_str().unwrap_or("").bytes().enumerate() {
                            v[(b as usize * 7 + j) % dim] += 1.0;
                        }
                        json!({"index": i, "embedding": v})
                    })
                    .collect();
                Ok(Json(json!({"data": data})))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Fake { url: format!("http://{addr}/v1"), down, hold, calls }
}

async fn ids(s: &Server, query: &str) -> Vec<String> {
    let r = s
        .ok("event/search", json!({"collection_name": "c", "query": query, "filter": {"user_id": "u"}, "limit": 10}))
        .await;
    r["result_list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["memory_info"]["summary"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_dead_embedding_endpoint_loses_nothing_and_recovers() {
    let fake = fake_embeddings(32).await;
    let s = Server::start(&format!(
        "embedding:\n  provider: openai\n  base_url: {}\n  model: fake\n  dimension: 32\n  timeout_secs: 2\nextraction:\n  retry_base_ms: 300\n  retry_max_ms: 1000\n",
        fake.url
    ));
    s.ok("event/add", json!({"collection_name": "c", "event_type": "event_v1", "user_id": "u", "memory_info": {"summary": "alpha memory before the outage"}})).await;

    fake.down.store(true, Ordering::SeqCst);
    // Writes go through: the event is stored without a vector, found by full text.
    let d = s.ok("event/add", json!({"collection_name": "c", "event_type": "event_v1", "user_id": "u", "memory_info": {"summary": "bravo memory during the outage"}})).await;
    assert!(d["event_id"].is_string());
    assert_eq!(ids(&s, "bravo outage").await[0], "bravo memory during the outage", "search falls back to full text");
    // …and says so: the answer is marked, the reason given, the fallback counted.
    let body = json!({"collection_name": "c", "query": "bravo outage", "filter": {"user_id": "u"}});
    let r = s.ok("event/search", body).await;
    assert_eq!(r["semantic"], false, "{r}");
    assert!(r["semantic_error"].as_str().is_some_and(|e| e.contains("503") || e.contains("circuit")), "{r}");
    let c = s
        .ok(
            "get_context",
            json!({"collection_name": "c", "conversation_id": "x", "query": "bravo",
                                  "event_search_config": {"filter": {"user_id": "u"}}}),
        )
        .await;
    assert_eq!(c["semantic"], false, "{c}");
    assert!(c["semantic_error"].is_string(), "{c}");
    let metrics = http_client().get(format!("{}/metrics", s.base)).send().await.unwrap().text().await.unwrap();
    let line = metrics
        .lines()
        .find(|l| l.starts_with("mnemo_full_text_only_searches "))
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(line.split(' ').nth(1).unwrap().parse::<f64>().unwrap() >= 3.0, "{line}");
    s.write(
        "conv",
        msgs(&[("user", "charlie: I live in Porto"), ("assistant", "ok")]),
        json!({"message_count": 2}),
        "u",
    )
    .await;
    let job = eventually(10, "the extraction to fail on the embedding", || async {
        let jobs = s.jobs().await;
        (jobs[0]["attempts"].as_u64() >= Some(1) && jobs[0]["last_error"].is_string()).then(|| jobs[0].clone())
    })
    .await;
    assert_eq!(job["state"], "queued", "retried later, not failed: {job}");
    // The breaker: the dead endpoint is not called on every request.
    let before = fake.calls.load(Ordering::SeqCst);
    for i in 0..20 {
        let (st, _) = s
            .post(
                "event/search",
                json!({"collection_name": "c", "query": format!("probe {i}"), "filter": {"user_id": "u"}}),
            )
            .await;
        assert_eq!(st, 200, "the API stays responsive");
    }
    let during = fake.calls.load(Ordering::SeqCst) - before;
    assert!(during <= 4, "{during} calls to a dead endpoint for 20 searches: the circuit should be open");

    // Recovery: the job completes, and the event stored without a vector gets one.
    fake.down.store(false, Ordering::SeqCst);
    eventually(20, "the job to complete after recovery", || async {
        (s.jobs().await[0]["state"] == "done").then_some(())
    })
    .await;
    let calls = fake.calls.load(Ordering::SeqCst);
    let r = s.ok("event/search", json!({"collection_name": "c", "query": "alpha", "filter": {"user_id": "u"}})).await;
    assert_eq!(r["semantic"], true, "a full answer says so too: {r}");
    // The same query again is answered with its cached vector: the endpoint is not asked again.
    let again =
        s.ok("event/search", json!({"collection_name": "c", "query": "alpha", "filter": {"user_id": "u"}})).await;
    let event_ids =
        |v: &Value| v["result_list"].as_array().unwrap().iter().map(|e| e["event_id"].clone()).collect::<Vec<_>>();
    assert_eq!((&again["semantic"], event_ids(&again)), (&r["semantic"], event_ids(&r)), "the same answer");
    assert_eq!(fake.calls.load(Ordering::SeqCst), calls + 1, "one embedding for two identical searches");
    let metrics = http_client().get(format!("{}/metrics", s.base)).send().await.unwrap().text().await.unwrap();
    assert!(
        metrics.lines().any(|l| l.starts_with("mnemo_query_cache_lookups{outcome=\"hit\"}") && !l.ends_with(" 0")),
        "{metrics}"
    );
    assert!(r.get("semantic_error").is_none(), "{r}");
    let listed = s.ok("event/search", json!({"collection_name": "c", "filter": {"user_id": "u"}})).await;
    assert!(listed.get("semantic").is_none(), "a listing without a query has no semantic half: {listed}");
    eventually(20, "the vector-less event to be embedded", || async {
        // A query with no word in common: only events with vectors can be found.
        ids(&s, "zzqq xxjj").await.iter().any(|t| t.starts_with("bravo")).then_some(())
    })
    .await;
    let p = s.ok("profile/search", json!({"collection_name": "c", "filter": {"user_id": "u"}})).await;
    assert_eq!(p["result_list"][0]["attributes"]["city"], "Porto", "nothing lost");
}

#[tokio::test]
async fn reads_past_the_limit_are_shed_with_retry_after_while_writes_go_on() {
    let fake = fake_embeddings(32).await;
    let s = Arc::new(Server::start(&format!(
        "server:\n  max_concurrent_reads: 1\n  read_queue_ms: 100\nembedding:\n  provider: openai\n  base_url: {}\n  model: fake\n  dimension: 32\n",
        fake.url
    )));
    s.ok("event/add", json!({"collection_name": "c", "event_type": "event_v1", "user_id": "u", "memory_info": {"summary": "delta memory"}})).await;
    // One search holds the only read slot: its query's embedding waits on the model.
    fake.hold.store(true, Ordering::SeqCst);
    let calls = fake.calls.load(Ordering::SeqCst);
    let first = {
        let s = s.clone();
        tokio::spawn(async move {
            s.post("event/search", json!({"collection_name": "c", "query": "delta first", "filter": {"user_id": "u"}}))
                .await
        })
    };
    eventually(10, "the first search to reach the model", || async {
        (fake.calls.load(Ordering::SeqCst) > calls).then_some(())
    })
    .await;
    // A second read waits its 100 ms, then is told to come back.
    let resp = http_client()
        .post(format!("{}/api/memory/get_context", s.base))
        .json(&json!({"collection_name": "c", "conversation_id": "x", "query": "delta second"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    let body: Value = resp.json().await.unwrap();
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("server.max_concurrent_reads") && message.contains("server.read_queue_ms"), "{body}");
    // Writes are not reads: they go on.
    s.write("conv", msgs(&[("user", "echo: still writing")]), json!({"message_count": 50}), "u").await;
    // The same over MCP: search_memory takes the same slots and is told to retry; a write goes on
    // (a batched turn: nothing to embed while the model is held).
    let tool = |name: &str, args: Value| {
        let body =
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": args}});
        let s = s.clone();
        async move {
            let (_, v) =
                crate::mcp::mcp_post(&s, None, &[("x-mnemo-collection", "c"), ("x-mnemo-user", "u")], body).await;
            (
                v["result"]["isError"] == json!(true),
                v["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string(),
            )
        }
    };
    let (error, text) = tool("search_memory", json!({"query": "delta over mcp"})).await;
    assert!(error && text.starts_with("overloaded:") && text.contains("server.max_concurrent_reads"), "{text}");
    let (error, text) = tool("remember", json!({"content": "foxtrot turn", "batched": true})).await;
    assert!(!error && text.starts_with("Remembered as short-term memory"), "{text}");
    // The model answers; the held search is answered, and the next read gets its turn.
    fake.hold.store(false, Ordering::SeqCst);
    let (status, first) = first.await.unwrap();
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["data"]["result_list"][0]["memory_info"]["summary"], "delta memory");
    let (status, _) = s
        .post("event/search", json!({"collection_name": "c", "query": "delta third", "filter": {"user_id": "u"}}))
        .await;
    assert_eq!(status, 200);
}
