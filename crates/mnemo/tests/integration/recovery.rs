//! Failed jobs recover: a job that failed because the model was down is queued again by itself
//! at start-up and as soon as another extraction succeeds; a session the model rejects for good
//! stays failed with its reason; `job/retry` puts failed jobs back by hand; nothing is lost.

use crate::harness::*;
use crate::llm::{Answer, fake_llm, llm_config, prompt};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

async fn job_of(s: &Server, conv: &str) -> Value {
    let d = s.ok("job/list", json!({"collection_name": "c", "conversation_id": conv})).await;
    d["jobs"][0].clone()
}

async fn wait_state(s: &Server, conv: &str, state: &str) -> Value {
    eventually(30, &format!("the job of {conv} to be {state}"), || async {
        let j = job_of(s, conv).await;
        (j["state"] == state).then_some(j)
    })
    .await
}

#[tokio::test]
async fn failed_jobs_recover_when_the_model_is_back_and_a_bad_session_stays_failed() {
    let healthy = Arc::new(AtomicBool::new(false));
    let h = healthy.clone();
    let llm = fake_llm(false, move |body, _| {
        if prompt(body).contains("POISON") {
            Answer::Status(400) // refused for good (after the JSON-mode step-downs)
        } else if h.load(Ordering::SeqCst) {
            Answer::Json(json!({"events": [{"type": "event_v1", "fields": {"summary": "用户说了一件事"}, "source": [1]}], "profile": []}))
        } else {
            Answer::Status(503)
        }
    })
    .await;
    // Only start-up and a successful extraction re-queue here (the periodic pass is an hour away).
    let mut s = Server::start(&llm_config(
        &llm.url,
        "  max_retries: 0\n  max_attempts: 2\n  retry_max_ms: 200\n  breaker_open_secs: 1\n  recover_interval_secs: 3600\n",
    ));
    let one = json!({"message_count": 1});
    s.write("outage", msgs(&[("user", "第一件事")]), one.clone(), "u").await;
    s.write("poison", msgs(&[("user", "POISON pill")]), one.clone(), "u").await;
    let failed = wait_state(&s, "outage", "failed").await;
    assert!(failed["last_error"].as_str().unwrap().starts_with("transient: "), "{failed}");
    assert!(failed["started_at"].as_i64().is_some() && failed["duration_ms"].as_i64().is_some(), "{failed}");
    let poison = wait_state(&s, "poison", "failed").await;
    assert!(poison["last_error"].as_str().unwrap().starts_with("permanent: "), "{poison}");

    // The model is back and the server restarts: the transient failure is queued again at once.
    healthy.store(true, Ordering::SeqCst);
    s.restart();
    let done = wait_state(&s, "outage", "done").await;
    assert_eq!(done["requeues"], 1, "{done}");
    assert!(done["finished_at"].as_i64() >= done["started_at"].as_i64(), "{done}");
    assert_eq!(s.all_messages("outage").await.len(), 1, "nothing lost");

    // Down again while the server runs; the next extraction that succeeds brings the failed one back.
    healthy.store(false, Ordering::SeqCst);
    s.write("outage2", msgs(&[("user", "第二件事")]), one.clone(), "u").await;
    wait_state(&s, "outage2", "failed").await;
    healthy.store(true, Ordering::SeqCst);
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await; // the breaker's open period
    s.write("fresh", msgs(&[("user", "第三件事")]), one.clone(), "u").await;
    wait_state(&s, "fresh", "done").await;
    wait_state(&s, "outage2", "done").await;

    // The rejected session never came back by itself; by hand it is tried again and fails again,
    // keeping its reason.
    let poison = job_of(&s, "poison").await;
    assert_eq!((poison["state"].as_str(), poison["requeues"].as_u64()), (Some("failed"), Some(0)), "{poison}");
    let id = poison["job_id"].as_str().unwrap();
    let r = s.ok("job/retry", json!({"collection_name": "c", "job_id": id})).await;
    assert_eq!(r["retried"], json!([id]));
    let again = eventually(30, "the retried job to fail again", || async {
        let j = job_of(&s, "poison").await;
        (j["state"] == "failed" && j["attempts"].as_u64() >= Some(1)).then_some(j)
    })
    .await;
    assert!(again["last_error"].as_str().unwrap().starts_with("permanent: "), "{again}");
    // Only failed jobs are retried; an unknown id is named.
    let done_id = job_of(&s, "fresh").await["job_id"].as_str().unwrap().to_string();
    let (st, v) = s.post("job/retry", json!({"collection_name": "c", "job_id": done_id})).await;
    assert_eq!(st, 409, "{v}");
    let (st, v) = s.post("job/retry", json!({"collection_name": "c", "job_id": "job_nope"})).await;
    assert_eq!(st, 404, "{v}");
    for conv in ["outage", "poison", "outage2", "fresh"] {
        assert_eq!(s.all_messages(conv).await.len(), 1, "{conv}: no message lost");
    }
}
