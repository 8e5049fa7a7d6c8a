//! Many stateless replicas on one PostgreSQL database: writes spread over three `mnemo serve`
//! processes, one of them killed with SIGKILL while it holds extraction jobs. Every acknowledged
//! message is stored once, every session is extracted exactly once (by a surviving replica, after
//! the dead one's lease ran out), idle conversations are closed once although every replica runs
//! the scheduler, and no event is duplicated. Runs when the suite runs on PostgreSQL.

use crate::harness::*;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};

const CONVERSATIONS: usize = 24;
const IDLE_CONVERSATIONS: usize = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_share_the_work_and_survive_a_sigkill_mid_job() {
    if postgres_url().is_none() {
        eprintln!("replicas_share_the_work_and_survive_a_sigkill_mid_job: SKIPPED (needs MNEMO_TEST_STORE=postgres)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (cfg, data) = (dir.path().join("m.yaml"), dir.path().join("data"));
    // A slow extractor (1.5 s per job), short leases renewed by each replica's heartbeat.
    // Similarity dedup is off: the sessions' texts differ only in a number ("…bees number 3"),
    // which the embedding model rightly finds near-identical; exact-text dedup stays on.
    std::fs::write(
        &cfg,
        "session:\n  poll_interval_ms: 50\nextraction:\n  workers: 2\n  retry_base_ms: 200\n  job_lease_secs: 3\n  dedup_similarity: 0\n  fault_injection:\n    delay_ms: 1500\n",
    )
    .unwrap();
    // Same data path: the same database schema for all three.
    let mut replicas: Vec<Server> =
        (0..3).map(|_| Server::spawn(&cfg, &data, "127.0.0.1:0", &[]).expect("replica starts")).collect();

    // Idle conversations: two messages each, closed by the wait_timeout scheduler every replica runs.
    let idle = json!({"message_count": 100, "wait_timeout": 1});
    for i in 0..IDLE_CONVERSATIONS {
        let s = &replicas[i % 3];
        s.write(
            &format!("idle{i}"),
            msgs(&[("user", &format!("idle note {i} about gardening")), ("assistant", "ok")]),
            idle.clone(),
            "u",
        )
        .await;
    }

    // Triggered conversations: four messages each, sent one by one to rotating replicas, each
    // with an idempotency key; the fourth message closes the session.
    let trigger = json!({"message_count": 4});
    let send = |s: &Server, conv: String, i: usize, turn: usize| {
        let body = json!({
            "collection_name": "c", "conversation_id": conv, "extract_trigger": trigger,
            "metadata": {"user_id": "u"},
            "messages": [{"role": if turn.is_multiple_of(2) {"user"} else {"assistant"},
                          "content": format!("conversation {i} turn {turn}: the user keeps bees number {i}"),
                          "idempotency_key": format!("c{i}-t{turn}")}],
        });
        let req = s.client.post(format!("{}/api/memory/session/streaming_write", s.base)).json(&body);
        async move { req.send().await.ok().filter(|r| r.status().is_success()).is_some() }
    };
    let mut acked: HashMap<String, HashSet<usize>> = HashMap::new();
    let mut killed = false;
    for turn in 0..4 {
        for i in 0..CONVERSATIONS {
            let conv = format!("conv{i}");
            let alive: Vec<usize> = (0..3).filter(|r| !(killed && *r == 0)).collect();
            let r = alive[(i + turn) % alive.len()];
            let mut ok = send(&replicas[r], conv.clone(), i, turn).await;
            if !ok {
                // Not acknowledged (the replica died under it): the client retries elsewhere, with
                // the same idempotency key.
                ok = send(&replicas[alive[(i + turn + 1) % alive.len()]], conv.clone(), i, turn).await;
            }
            assert!(ok, "a live replica acknowledges the write");
            acked.entry(conv).or_default().insert(turn);
        }
        if turn == 3 && !killed {
            // Wait until every worker of every replica is busy (6 running jobs at most, 4 outside
            // replica 0), so replica 0 certainly holds running jobs — then kill it.
            let running = eventually(30, "six extraction jobs running", || async {
                let jobs = replicas[1].jobs().await;
                let n = jobs.iter().filter(|j| j["state"] == "running").count();
                (n >= 5).then_some(n)
            })
            .await;
            replicas[0].kill9();
            killed = true;
            eprintln!("killed replica 0 with {running} jobs running");
        }
    }
    // A retried write to a different replica (same key) is stored once.
    assert!(send(&replicas[2], "conv0".into(), 0, 0).await);

    let total_sessions = CONVERSATIONS + IDLE_CONVERSATIONS;
    let jobs = eventually(90, "every session extracted", || async {
        let jobs = replicas[1].jobs().await;
        (jobs.len() >= total_sessions && jobs.iter().all(|j| j["state"] == "done")).then_some(jobs)
    })
    .await;
    assert_eq!(jobs.len(), total_sessions, "one job per session: {jobs:#?}");
    assert!(
        jobs.iter().any(|j| j["attempts"].as_u64().unwrap() >= 2),
        "a job the killed replica held was taken over by another one"
    );

    let s = &replicas[2];
    let mut sessions_seen = HashSet::new();
    for i in 0..CONVERSATIONS {
        let conv = format!("conv{i}");
        let messages = s.all_messages(&conv).await;
        let turns: Vec<String> = messages.iter().map(|m| m["content"].as_str().unwrap().to_string()).collect();
        assert_eq!(turns.len(), 4, "{conv}: every acknowledged message once: {turns:#?}");
        assert_eq!(acked[&conv].len(), 4);
        let info = s.ok("session/info", json!({"collection_name": "c", "conversation_id": conv})).await;
        let sessions = info["sessions"].as_array().unwrap();
        assert_eq!(sessions.len(), 1, "{conv}: one session");
        sessions_seen.insert(sessions[0]["session_id"].as_str().unwrap().to_string());
    }
    for i in 0..IDLE_CONVERSATIONS {
        let info = s.ok("session/info", json!({"collection_name": "c", "conversation_id": format!("idle{i}")})).await;
        let sessions = info["sessions"].as_array().unwrap();
        assert_eq!(sessions.len(), 1, "idle{i}: closed once although three schedulers ran");
        assert_eq!(sessions[0]["reason"], "wait_timeout");
        sessions_seen.insert(sessions[0]["session_id"].as_str().unwrap().to_string());
    }
    assert_eq!(sessions_seen.len(), total_sessions);

    // Exactly-once extraction: each session's events were written by one job, and no two events
    // are the same memory.
    let events: Vec<Value> = s.events("u").await;
    let mut per_session: HashMap<String, usize> = HashMap::new();
    let mut texts = HashSet::new();
    for e in &events {
        *per_session.entry(e["session_id"].as_str().unwrap().to_string()).or_default() += 1;
        let text = e["memory_info"]["summary"].as_str().unwrap().to_string();
        assert!(texts.insert(text.clone()), "duplicate event: {text}");
    }
    assert_eq!(per_session.len(), total_sessions, "every session produced its events");
    for s in replicas.iter_mut() {
        s.kill9();
    }
}
