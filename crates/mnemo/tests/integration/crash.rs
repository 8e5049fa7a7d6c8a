//! Durability: SIGKILL in the middle of concurrent writes loses no acknowledged message, and the
//! jobs queued before the crash complete after the restart.

use crate::harness::*;
use serde_json::json;
use std::collections::HashSet;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[tokio::test]
async fn sigkill_during_concurrent_writes_loses_nothing_acknowledged() {
    let mut s = Server::start("");
    let base = s.base.clone();
    let acked: Arc<Mutex<HashSet<(usize, usize)>>> = Arc::default();
    let client = http_client();
    let writers = 16;
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (client, base, acked) = (client.clone(), base.clone(), acked.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0.. {
                let body = json!({"collection_name": "c", "conversation_id": format!("w{w}"),
                    "messages": [{"role": if i % 2 == 0 {"user"} else {"assistant"}, "content": format!("writer {w} message {i}"), "idempotency_key": format!("{w}-{i}")}],
                    "extract_trigger": {"message_count": 7}, "metadata": {"user_id": format!("u{w}")}});
                match client.post(format!("{base}/api/memory/session/streaming_write")).json(&body).send().await {
                    Ok(r) if r.status().is_success() => {
                        let v: serde_json::Value = r.json().await.unwrap_or_default();
                        if v["code"] == 0 {
                            acked.lock().unwrap().insert((w, i));
                        }
                    }
                    _ => return i, // the server is gone
                }
            }
            unreachable!()
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    s.kill9();
    for t in tasks {
        t.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() > 50, "the writers got going ({} acks)", acked.len());

    s.restart();
    for w in 0..writers {
        let stored: HashSet<String> =
            s.all_messages(&format!("w{w}")).await.iter().map(|m| m["content"].as_str().unwrap().to_string()).collect();
        for (aw, i) in acked.iter().filter(|(aw, _)| *aw == w) {
            let want = format!("writer {aw} message {i}");
            assert!(stored.contains(&want), "acknowledged message lost: {want}");
        }
    }
    // Every session closed before the crash is extracted after the restart, exactly once.
    // Every job embeds its events and their turns, and a CI machine may be busy: waited for as
    // long as jobs keep finishing.
    let jobs = while_progressing(60, "all jobs to finish after the restart", || async {
        let jobs = s.jobs().await;
        let done = jobs.iter().filter(|j| j["state"] == "done").count();
        if done == jobs.len() { ControlFlow::Break(jobs) } else { ControlFlow::Continue(done) }
    })
    .await;
    assert!(!jobs.is_empty());
    let sessions: HashSet<_> = jobs.iter().map(|j| j["session_id"].as_str().unwrap().to_string()).collect();
    assert_eq!(sessions.len(), jobs.len(), "one job per session");
    // Near-duplicate sessions merge into one event (dedup), so count by session state and by
    // provenance: no message is in two events.
    for w in 0..writers {
        let info = s.ok("session/info", json!({"collection_name": "c", "conversation_id": format!("w{w}")})).await;
        for session in info["sessions"].as_array().unwrap() {
            assert_eq!(session["state"], "extracted", "writer {w}: every session extracted");
        }
        let events = s.events(&format!("u{w}")).await;
        let mut seen = HashSet::new();
        for e in &events {
            for id in e["source_message_ids"].as_array().into_iter().flatten() {
                assert!(seen.insert(id.as_i64().unwrap()), "writer {w}: message {id} in two events");
            }
        }
    }
}

/// The crash harness itself, with a CI-sized count (the README documents the 20-cycle run).
#[test]
fn the_crash_harness_passes_a_short_run() {
    let scratch = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(BIN)
        .args(["bench", "crash", "--cycles", "4", "--writers", "8", "--max-cycle-ms", "1200", "--seed", "7"])
        .envs(store_env(scratch.path()))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("all stored exactly once") && stdout.contains("every idle deadline fired"), "{stdout}");
}
