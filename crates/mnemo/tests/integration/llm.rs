//! The `llm` extractor against an OpenAI-compatible test server with scripted answers:
//! typed events and profiles end to end, malformed JSON repaired, wrong types dropped, 429 / 5xx
//! / timeouts retried, duplicates merged, corrections superseding, profile history, the daily
//! token budget deferring jobs, and relative dates anchored to the message's own time.

use crate::harness::*;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the fake model does with one request.
pub enum Answer {
    /// A well-formed completion whose content is this JSON.
    Json(Value),
    /// A completion whose content is this text verbatim (for malformed answers).
    Raw(String),
    /// An HTTP error status.
    Status(u16),
    /// An HTTP error status with headers and a body (a provider's refusal, a 429 with Retry-After).
    Refuse(u16, Vec<(&'static str, String)>, String),
    /// Never answers within the client's timeout.
    Hang,
    /// Closes the connection without an answer.
    Drop,
}

type Script = dyn Fn(&Value, usize) -> Answer + Send + Sync;

pub struct FakeLlm {
    pub url: String,
    /// Every request body received, in order.
    pub requests: Arc<Mutex<Vec<Value>>>,
    /// Requests wait here while it has no permits (`release` adds them).
    gate: Arc<tokio::sync::Semaphore>,
}

impl FakeLlm {
    pub fn release(&self) {
        self.gate.add_permits(1_000);
    }

    pub fn count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

/// The transcript part of a request: the user prompt (and any repair turns).
pub fn prompt(body: &Value) -> String {
    body["messages"].as_array().unwrap().iter().skip(1).map(|m| m["content"].as_str().unwrap_or("")).collect()
}

/// Starts the fake model. `script(body, n)` gets each request and how many requests carrying the
/// same user prompt came before it. With `gated`, requests wait until `release`.
pub async fn fake_llm(gated: bool, script: impl Fn(&Value, usize) -> Answer + Send + Sync + 'static) -> FakeLlm {
    let (app, mut llm) = fake_llm_app(gated, script);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    llm.url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    llm
}

/// The fake model's routes, to serve over plain HTTP or TLS: `/v1/chat/completions` as scripted,
/// and `/v1/embeddings` with a deterministic 8-dimensional vector per input (its request bodies
/// are recorded too). A recorded chat request carries `_query` (the URL's query string) and
/// `_auth` / `_api_key` (those headers) and `_at` (ms) besides its body. `url` is left for the caller to fill in.
pub fn fake_llm_app(
    gated: bool,
    script: impl Fn(&Value, usize) -> Answer + Send + Sync + 'static,
) -> (axum::Router, FakeLlm) {
    use axum::{Json, Router, http::StatusCode, response::IntoResponse, routing::post};
    let requests: Arc<Mutex<Vec<Value>>> = Arc::default();
    let gate = Arc::new(tokio::sync::Semaphore::new(if gated { 0 } else { 1_000 }));
    let script: Arc<Script> = Arc::new(script);
    let (reqs, g) = (requests.clone(), gate.clone());
    let app = Router::new().route(
        "/v1/chat/completions",
        post(move |uri: axum::http::Uri, headers: axum::http::HeaderMap, Json(body): Json<Value>| {
            let (reqs, g, script) = (reqs.clone(), g.clone(), script.clone());
            async move {
                let n = {
                    let mut r = reqs.lock().unwrap();
                    let first_user = body["messages"][1]["content"].clone();
                    let n = r.iter().filter(|b| b["messages"][1]["content"] == first_user).count();
                    let mut seen = body.clone();
                    let h = |k: &str| json!(headers.get(k).and_then(|v| v.to_str().ok()));
                    seen["_query"] = json!(uri.query());
                    seen["_auth"] = h("authorization");
                    seen["_api_key"] = h("api-key");
                    seen["_at"] = json!(std::time::UNIX_EPOCH.elapsed().unwrap().as_millis() as u64);
                    r.push(seen);
                    n
                };
                g.acquire().await.unwrap().forget();
                g.add_permits(1);
                let content = match script(&body, n) {
                    Answer::Json(v) => v.to_string(),
                    Answer::Raw(s) => s,
                    Answer::Status(code) => {
                        return (StatusCode::from_u16(code).unwrap(), "scripted failure").into_response();
                    }
                    Answer::Refuse(code, headers, body) => {
                        let mut r = (StatusCode::from_u16(code).unwrap(), body).into_response();
                        for (k, v) in headers {
                            r.headers_mut().insert(k, v.parse().unwrap());
                        }
                        return r;
                    }
                    Answer::Hang => {
                        tokio::time::sleep(Duration::from_secs(30)).await;
                        return StatusCode::GATEWAY_TIMEOUT.into_response();
                    }
                    // Unwinding out of the handler makes hyper drop the connection (no panic message).
                    Answer::Drop => std::panic::resume_unwind(Box::new("scripted dropped connection")),
                };
                Json(json!({
                    "id": "chatcmpl-test", "object": "chat.completion", "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
                }))
                .into_response()
            }
        }),
    );
    let reqs = requests.clone();
    let app = app.route(
        "/v1/embeddings",
        post(move |Json(body): Json<Value>| {
            let reqs = reqs.clone();
            async move {
                reqs.lock().unwrap().push(body.clone());
                let data: Vec<Value> = body["input"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .enumerate()
                    .map(|(i, text)| {
                        let t = text.as_str().unwrap_or("");
                        let v: Vec<f32> = (0..8).map(|d| ((t.len() + d * 7) % 11) as f32 + 1.0).collect();
                        json!({"object": "embedding", "index": i, "embedding": v})
                    })
                    .collect();
                Json(json!({"object": "list", "data": data, "model": body["model"]}))
            }
        }),
    );
    (app, FakeLlm { url: String::new(), requests, gate })
}

pub fn llm_config(url: &str, extra: &str) -> String {
    format!(
        "extraction:\n  provider: llm\n  base_url: {url}\n  model: fake-model\n  retry_base_ms: 200\n  retry_max_ms: 1000\n  request_timeout_secs: 1\n{extra}"
    )
}

fn summary_event(text: &str) -> Value {
    json!({"type": "event_v1", "fields": {"summary": text}, "source": [1]})
}

async fn all_done(s: &Server, n: usize) -> Vec<Value> {
    eventually(30, "jobs to finish", || async {
        let jobs = s.jobs().await;
        (jobs.len() == n && jobs.iter().all(|j| j["state"] == "done")).then_some(jobs)
    })
    .await
}

/// 2026-11-29 02:00 UTC = 10:00 at UTC+8.
const T_MSG: i64 = 1_795_917_600_000;

#[tokio::test]
async fn typed_events_and_profiles_end_to_end_without_blocking_writes() {
    let llm = fake_llm(true, |_, _| {
        Answer::Json(json!({
            "events": [
                summary_event("用户昨天在东京买了一台相机"),
                {"type": "purchase", "fields": {"item": "相机", "price": "500", "category": "travel"}, "source": [1]},
                {"type": "purchase", "fields": {"item": "x", "price": "cheap", "category": "nope"}, "source": [1]},
            ],
            "profile": [
                {"op": "set", "attribute": "city", "value": "上海"},
                {"op": "set", "attribute": "job", "value": "后端工程师"},
            ],
        }))
    })
    .await;
    let s = Server::start(&llm_config(&llm.url, "  utc_offset: \"+08:00\"\n"));
    s.ok(
        "collection/create",
        json!({"collection_name": "c", "event_types": [{
        "name": "purchase", "description": "Something the user bought.",
        "fields": [
            {"name": "item", "type": "string", "required": true},
            {"name": "price", "type": "float"},
            {"name": "category", "type": "enum", "values": ["food", "travel", "other"]},
        ]}]}),
    )
    .await;
    let messages = json!([
        {"role": "user", "content": "我昨天在东京买了一台相机，花了500美元。我住在上海，是后端工程师。", "time": T_MSG},
        {"role": "assistant", "content": "好的，记下了。", "time": T_MSG + 1000},
    ]);
    let w = s.write("a", messages, json!({"message_count": 2}), "u1").await;
    assert!(w["extraction"]["job_id"].is_string(), "{w}");
    // The model is blocked: the job is taken but cannot finish, and writes go on regardless.
    eventually(10, "the job to reach the model", || async { (llm.count() == 1).then_some(()) }).await;
    let w2 = s.write("a", msgs(&[("user", "还有一件事")]), json!({"message_count": 50}), "u1").await;
    assert_eq!(w2["accepted"], 1);
    assert_eq!(s.jobs().await[0]["state"], "running");
    llm.release();
    let jobs = all_done(&s, 1).await;
    assert_eq!(jobs[0]["token_usage"], json!({"prompt_tokens": 100, "completion_tokens": 20}));

    let req = llm.requests.lock().unwrap()[0].clone();
    assert_eq!(req["response_format"]["type"], "json_schema", "schema-constrained output is asked for");
    assert!(req["messages"][0]["content"].as_str().unwrap().contains("purchase"), "custom types are in the prompt");
    assert!(prompt(&req).contains("我昨天在东京买了一台相机"));

    let events = s.events("u1").await;
    assert_eq!(events.len(), 2, "the invalid purchase was dropped: {events:#?}");
    let summary = events.iter().find(|e| e["memory_type"] == "event_v1").unwrap();
    assert_eq!(summary["memory_info"]["summary"], "用户昨天（2026-11-28）在东京买了一台相机", "dated by the message");
    assert_eq!(summary["time"], 1_795_838_400_000i64, "event time: 2026-11-28 12:00 at UTC+8");
    assert!(summary["created_at"].as_i64().unwrap() > T_MSG, "ingest time is separate");
    let purchase = events.iter().find(|e| e["memory_type"] == "purchase").unwrap();
    assert_eq!(purchase["memory_info"]["price"], json!(500.0), "a numeric string became a float");
    assert_eq!(purchase["memory_info"]["category"], "travel");
    assert!(purchase["memory_info"]["original_messages"].as_str().unwrap().contains("相机"), "provenance kept");

    let ctx = s.ok("get_context", json!({"collection_name": "c", "conversation_id": "a", "query": "相机"})).await;
    let text = ctx["context_str"].as_str().unwrap();
    assert!(text.contains("上海") && text.contains("后端工程师"), "profile in context: {text}");
    assert!(text.contains("相机"), "events in context: {text}");
    let stats = s.ok("stats", json!({"collection_name": "c"})).await;
    assert_eq!(stats["token_usage"], json!({"prompt_tokens": 100, "completion_tokens": 20}));
}

#[tokio::test]
async fn bad_answers_are_repaired_retried_or_dropped_and_nothing_is_lost() {
    let llm = fake_llm(false, |body, n| {
        let p = prompt(body);
        let ok = || Answer::Json(json!({"events": [summary_event("用户说了一件事")], "profile": []}));
        if p.contains("MALFORMED") {
            // The repair request carries the bad answer and the parse error.
            return if p.contains("not valid JSON") { ok() } else { Answer::Raw("Sure! {events: [oops".into()) };
        }
        if p.contains("RATE") {
            return if n < 2 { Answer::Status(429) } else { ok() };
        }
        if p.contains("FLAKY") {
            return if n < 4 { Answer::Status(500) } else { ok() };
        }
        if p.contains("SLOW") {
            return if n < 1 { Answer::Hang } else { ok() };
        }
        if p.contains("DROPPED") {
            return if n < 1 { Answer::Drop } else { ok() };
        }
        ok()
    })
    .await;
    let s = Server::start(&llm_config(&llm.url, "  max_retries: 2\n"));
    for (conv, marker) in [("m", "MALFORMED"), ("r", "RATE"), ("f", "FLAKY"), ("s", "SLOW"), ("d", "DROPPED")] {
        s.write(conv, msgs(&[("user", &format!("{marker}: 今天的事情 {conv}"))]), json!({"message_count": 1}), conv)
            .await;
    }
    let jobs = all_done(&s, 5).await;
    let by_conv = |c: &str| jobs.iter().find(|j| j["conversation_id"] == c).unwrap().clone();
    assert_eq!(by_conv("m")["attempts"], 1, "repaired within the attempt");
    assert_eq!(by_conv("r")["attempts"], 1, "two 429s retried within the attempt");
    assert_eq!(by_conv("f")["attempts"], 2, "three 500s failed the attempt; the job backed off and succeeded");
    assert_eq!(by_conv("d")["attempts"], 1, "a dropped connection is retried within the attempt");
    for conv in ["m", "r", "f", "s", "d"] {
        assert_eq!(s.events(conv).await.len(), 1, "{conv}: extracted");
        assert_eq!(s.all_messages(conv).await.len(), 1, "{conv}: the message is kept");
    }
}

#[tokio::test]
async fn a_refused_json_schema_steps_down_to_json_object() {
    let llm = fake_llm(false, |body, _| {
        if body["response_format"]["type"] == "json_schema" {
            Answer::Status(400)
        } else {
            Answer::Json(json!({"events": [summary_event("用户喜欢爵士乐")], "profile": []}))
        }
    })
    .await;
    let s = Server::start(&llm_config(&llm.url, ""));
    s.write("a", msgs(&[("user", "我喜欢爵士乐")]), json!({"message_count": 1}), "u").await;
    all_done(&s, 1).await;
    let reqs = llm.requests.lock().unwrap().clone();
    assert_eq!(reqs.last().unwrap()["response_format"]["type"], "json_object");
    assert_eq!(s.events("u").await.len(), 1);
}

/// What hosted providers really do: a reasoning model refuses `temperature: 0` and refuses
/// `max_tokens`, naming `max_completion_tokens`; a 429 says when to come back as an HTTP date; the schema is asked for
/// with `strict: true`; Azure wants `?api-version=` and an `api-key` header.
#[tokio::test]
async fn hosted_provider_behaviours_token_field_retry_after_date_strict_schema_and_azure_auth() {
    let throttled = Arc::new(AtomicUsize::new(0));
    let t = throttled.clone();
    let llm = fake_llm(false, move |body, _| {
        if body.get("temperature").is_some() {
            return Answer::Refuse(
                400,
                vec![],
                json!({"error": {"message": "Unsupported value: 'temperature' does not support 0 with this model. Only the default (1) value is supported.",
                                 "param": "temperature", "code": "unsupported_value"}})
                .to_string(),
            );
        }
        if body.get("max_tokens").is_some() {
            return Answer::Refuse(
                400,
                vec![("content-type", "application/json".into())],
                json!({"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
                                 "type": "invalid_request_error", "param": "max_tokens", "code": "unsupported_parameter"}})
                .to_string(),
            );
        }
        if t.fetch_add(1, Ordering::SeqCst) == 0 {
            // Come back in two seconds, said as a date (RFC 9110): 1 s of resolution, so ≥ 1 s.
            let at = std::time::SystemTime::now() + Duration::from_secs(2);
            return Answer::Refuse(429, vec![("retry-after", httpdate::fmt_http_date(at))], "slow down".into());
        }
        Answer::Json(json!({"events": [summary_event("The user plays the cello.")], "profile": []}))
    })
    .await;
    let s = Server::start_with_env(
        &llm_config(
            &llm.url,
            "  api_version: 2024-10-21\n  api_key_header: api-key\n  api_key_env: MNEMO_TEST_AZURE_KEY\n  max_retries: 3\n  request_timeout_secs: 5\n",
        ),
        &[("MNEMO_TEST_AZURE_KEY", "azure-test-key")],
    );
    s.write("a", msgs(&[("user", "I play the cello.")]), json!({"message_count": 1}), "u").await;
    all_done(&s, 1).await;
    let reqs = llm.requests.lock().unwrap().clone();
    assert_eq!(reqs.len(), 4, "refused temperature, refused field, throttled, answered: {reqs:#?}");
    assert_eq!(reqs[0]["temperature"], 0.0);
    assert!(reqs[1..].iter().all(|r| r.get("temperature").is_none()), "the model's default from then on");
    let reqs = &reqs[1..];
    assert_eq!(reqs[0]["max_tokens"], 1200);
    assert!(reqs[1].get("max_tokens").is_none() && reqs[1]["max_completion_tokens"] == 1200, "switched: {}", reqs[1]);
    assert_eq!(reqs[2]["max_completion_tokens"], 1200, "and stays switched");
    let waited = reqs[2]["_at"].as_u64().unwrap() - reqs[1]["_at"].as_u64().unwrap();
    assert!(waited >= 1000, "Retry-After (a date 2 s ahead) was honoured, not the 500 ms backoff: {waited} ms");
    assert_eq!(reqs[0]["response_format"]["json_schema"]["strict"], true);
    assert_eq!(reqs[0]["response_format"]["json_schema"]["schema"]["additionalProperties"], false);
    assert_eq!(reqs[2]["response_format"]["type"], "json_schema", "a refused field is not a refused schema");
    for r in reqs {
        assert_eq!(r["_query"], "api-version=2024-10-21", "{r}");
        assert_eq!(r["_api_key"], "azure-test-key", "{r}");
        assert_eq!(r["_auth"], Value::Null, "no bearer header beside api-key: {r}");
    }
    assert_eq!(s.events("u").await.len(), 1);
}

#[tokio::test]
async fn duplicates_merge_corrections_supersede_and_profile_history_is_kept() {
    let llm = fake_llm(false, |body, _| {
        let p = prompt(body);
        if p.contains("SESSION-ONE") {
            return Answer::Json(json!({
                "events": [
                    summary_event("The user plans a trip to Tokyo in March."),
                    {"type": "event_v1", "fields": {"summary": "The user adopted a cat named Miso."}, "source": [1], "supersedes": null,
                     "entities": [{"name": "Miso", "kind": "pet", "aliases": ["my cat"]}]},
                ],
                "profile": [{"op": "set", "attribute": "city", "value": "Beijing"}],
            }));
        }
        // Session two: the same cat event again, and a correction of the Tokyo plan, pointing at
        // the earlier memory by the id the prompt gave it.
        let tokyo = p.lines().find(|l| l.starts_with('E') && l.contains("Tokyo")).and_then(|l| l.split(' ').next());
        Answer::Json(json!({
            "events": [
                summary_event("The user adopted a cat named Miso."),
                {"type": "event_v1", "fields": {"summary": "The user cancelled the Tokyo trip."}, "source": [1], "supersedes": tokyo},
            ],
            "profile": [{"op": "set", "attribute": "city", "value": "Shanghai"}],
        }))
    })
    .await;
    let s = Server::start(&llm_config(&llm.url, ""));
    s.ok(
        "collection/create",
        json!({"collection_name": "c", "profile_types": [{"name": "profile_v1", "update_mode": "keep_history"}]}),
    )
    .await;
    s.write(
        "a",
        msgs(&[("user", "SESSION-ONE: I live in Beijing, I got a cat, Tokyo in March!")]),
        json!({"message_count": 1}),
        "u",
    )
    .await;
    all_done(&s, 1).await;
    s.write(
        "b",
        msgs(&[("user", "SESSION-TWO: moved to Shanghai; the Tokyo trip is off. Miso says hi.")]),
        json!({"message_count": 1}),
        "u",
    )
    .await;
    all_done(&s, 2).await;

    assert!(prompt(&llm.requests.lock().unwrap()[1]).contains("Tokyo"), "earlier memories are shown to the model");
    let active = s.events("u").await;
    let texts: Vec<&str> = active.iter().map(|e| e["memory_info"]["summary"].as_str().unwrap()).collect();
    assert_eq!(active.len(), 2, "one cat event, one cancellation: {texts:?}");
    let cat = active.iter().find(|e| e["memory_info"]["summary"].as_str().unwrap().contains("Miso")).unwrap();
    assert_eq!(cat["source_message_ids"].as_array().unwrap().len(), 2, "the duplicate refreshed it");
    let all = s
        .ok(
            "event/search",
            json!({"collection_name": "c", "filter": {"user_id": "u"}, "include_archived": true, "limit": 10}),
        )
        .await["result_list"]
        .as_array()
        .unwrap()
        .clone();
    let trip = all.iter().find(|e| e["memory_info"]["summary"].as_str().unwrap().contains("plans a trip")).unwrap();
    assert_eq!(trip["status"], "superseded");
    let cancel = active.iter().find(|e| e["memory_info"]["summary"].as_str().unwrap().contains("cancelled")).unwrap();
    assert_eq!(trip["superseded_by"], cancel["id"]);
    let found = s
        .ok("event/search", json!({"collection_name": "c", "query": "Tokyo trip plan", "filter": {"user_id": "u"}}))
        .await;
    assert!(found["result_list"].as_array().unwrap().iter().all(|e| e["id"] != trip["id"]), "hidden from search");

    let p = s.ok("profile/search", json!({"collection_name": "c", "filter": {"user_id": "u"}})).await;
    let p = &p["result_list"][0];
    assert_eq!(p["attributes"]["city"], "Shanghai", "the contradiction replaced the old value");
    assert_eq!(p["history"].as_array().unwrap().len(), 1);
    assert_eq!(
        (p["history"][0]["attribute"].as_str(), p["history"][0]["value"].as_str()),
        (Some("city"), Some("Beijing"))
    );
    assert!(p["history"][0]["valid_to"].as_i64().is_some());

    // The entity the model named, with its kind and alias, kept through the merge.
    let list = s.ok("entity/list", json!({"collection_name": "c", "filter": {"user_id": "u"}})).await;
    let miso = list["entities"].as_array().unwrap().iter().find(|e| e["name"] == "Miso").expect("Miso").clone();
    assert_eq!((&miso["kind"], &miso["aliases"]), (&json!("pet"), &json!(["my cat"])), "{list}");
    let by_alias =
        s.ok("event/search", json!({"collection_name": "c", "filter": {"user_id": "u", "entity": "my cat"}})).await;
    assert_eq!(by_alias["result_list"][0]["id"], cat["id"], "{by_alias}");
}

#[tokio::test]
async fn a_spent_daily_token_budget_defers_jobs_until_the_next_day() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c2 = calls.clone();
    let llm = fake_llm(false, move |_, _| {
        c2.fetch_add(1, Ordering::SeqCst);
        Answer::Json(json!({"events": [summary_event("用户今天做了一件事")], "profile": []}))
    })
    .await;
    let s = Server::start(&format!(
        "{}testing:\n  clock_control: true\n",
        llm_config(&llm.url, "  daily_token_budget: 100\n")
    ));
    s.write("a", msgs(&[("user", "第一件事")]), json!({"message_count": 1}), "u").await;
    all_done(&s, 1).await;
    s.write("b", msgs(&[("user", "第二件事")]), json!({"message_count": 1}), "u").await;
    let deferred = eventually(10, "the second job to be deferred", || async {
        let jobs = s.jobs().await;
        jobs.iter().find(|j| j["last_error"].as_str().is_some_and(|e| e.starts_with("deferred:"))).cloned()
    })
    .await;
    assert_eq!(deferred["state"], "queued", "waiting, not failed: {deferred}");
    assert_eq!(deferred["attempts"], 0, "a deferral is not an attempt");
    assert!(deferred["last_error"].as_str().unwrap().contains("120 of its daily budget of 100"), "{deferred}");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the model was not called over budget");
    assert_eq!(s.all_messages("b").await.len(), 1, "nothing lost while waiting");
    s.ok("admin/clock", json!({"advance_ms": 86_400_000})).await;
    all_done(&s, 2).await;
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_dead_endpoint_trips_the_breaker_the_api_stays_up_and_everything_is_extracted_after_recovery() {
    let healthy = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let h = healthy.clone();
    let llm = fake_llm(false, move |_, _| {
        if h.load(Ordering::SeqCst) {
            Answer::Json(json!({"events": [summary_event("用户说了一件事")], "profile": []}))
        } else {
            Answer::Status(503)
        }
    })
    .await;
    let s = Server::start(&llm_config(
        &llm.url,
        "  max_retries: 0\n  breaker_open_secs: 2\n  retry_max_ms: 300\n  max_attempts: 50\n",
    ));
    for i in 0..3 {
        s.write(&format!("c{i}"), msgs(&[("user", &format!("第{i}件事"))]), json!({"message_count": 1}), "u").await;
    }
    // Three failed calls open the breaker: later attempts fail fast without calling the endpoint.
    let jobs = eventually(20, "the breaker to open", || async {
        let jobs = s.jobs().await;
        jobs.iter().any(|j| j["last_error"].as_str().is_some_and(|e| e.contains("circuit open"))).then_some(jobs)
    })
    .await;
    let calls_when_open = llm.count();
    let attempts: u64 = jobs.iter().map(|j| j["attempts"].as_u64().unwrap()).sum();
    assert!(
        calls_when_open < attempts as usize,
        "not every attempt reached the dead endpoint ({calls_when_open} calls, {attempts} attempts)"
    );
    // The API is unaffected: writes and searches answer while extraction cannot.
    let w = s.write("live", msgs(&[("user", "还在工作吗")]), json!({"message_count": 100}), "u").await;
    assert_eq!(w["accepted"], 1);
    s.ok("event/search", json!({"collection_name": "c", "query": "事", "filter": {"user_id": "u"}})).await;
    // Recovery: the breaker half-opens, the probe succeeds, every session is extracted.
    healthy.store(true, Ordering::SeqCst);
    all_done(&s, 3).await;
    assert_eq!(s.events("u").await.len(), 1, "three identical summaries of one user merged into one event");
    for i in 0..3 {
        assert_eq!(s.all_messages(&format!("c{i}")).await.len(), 1, "no message lost");
    }
}
