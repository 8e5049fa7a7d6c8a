//! Security by default: open on loopback without keys, refuses other binds without keys, bearer
//! keys scoped to projects, body size limit.

use crate::harness::*;
use serde_json::json;

#[tokio::test]
async fn non_loopback_bind_without_keys_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("m.yaml");
    std::fs::write(&cfg, "").unwrap();
    let err = Server::spawn(&cfg, &dir.path().join("d"), "0.0.0.0:0", &[]).err().expect("must refuse");
    assert!(err.contains("without API keys"), "{err}");
}

/// A PostgreSQL setting with the default engine is not ignored (the server would otherwise run
/// on a local file nobody asked for): the start stops, naming the key and the fix.
#[tokio::test]
async fn a_postgres_url_on_the_sqlite_engine_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("m.yaml");
    std::fs::write(&cfg, "store:\n  url: postgres://db.invalid/mnemo\n").unwrap();
    let env = [("MNEMO_STORE__ENGINE", "sqlite"), ("MNEMO_STORE__URL", "postgres://db.invalid/mnemo")];
    let err = Server::spawn(&cfg, &dir.path().join("d"), "127.0.0.1:0", &env).err().expect("must refuse");
    assert!(err.contains("store.url: is a postgres setting, but store.engine is sqlite"), "{err}");
    assert!(!dir.path().join("d").exists(), "no local store was created");
}

#[tokio::test]
async fn keys_are_required_and_scoped_to_projects() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("m.yaml");
    std::fs::write(
        &cfg,
        "server:\n  api_keys:\n    - {key_env: TEST_KEY_A, projects: [default]}\n    - {key: bbbbbbbbbbbbbbbbbbbbbbbb, projects: [other]}\n",
    )
    .unwrap();
    let mut s =
        Server::spawn(&cfg, &dir.path().join("d"), "127.0.0.1:0", &[("TEST_KEY_A", "aaaaaaaaaaaaaaaaaaaaaaaa")])
            .unwrap();
    let body = json!({"collection_name": "c", "conversation_id": "x", "messages": [{"role": "user", "content": "hi"}]});
    let (st, v) = s.post("session/streaming_write", body.clone()).await;
    assert_eq!((st, v["code"].clone()), (401, json!(40100)), "{v}");
    s.key = Some("wrong-key-wrong-key".into());
    assert_eq!(s.post("session/streaming_write", body.clone()).await.0, 401);
    s.key = Some("bbbbbbbbbbbbbbbbbbbbbbbb".into());
    let (st, v) = s.post("session/streaming_write", body.clone()).await;
    assert_eq!(st, 403, "{v}");
    assert!(v["message"].as_str().unwrap().starts_with("project_name:"));
    s.key = Some("aaaaaaaaaaaaaaaaaaaaaaaa".into());
    assert_eq!(s.post("session/streaming_write", body).await.0, 200);
    // healthz stays open for load balancers.
    let r = http_client().get(format!("{}/healthz", s.base)).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn oversized_bodies_get_413() {
    let s = Server::start("server:\n  max_body_bytes: 10000\n");
    let big = "x".repeat(20_000);
    let (st, v) = s
        .post(
            "session/streaming_write",
            json!({"collection_name": "c", "conversation_id": "big", "messages": [{"role": "user", "content": big}]}),
        )
        .await;
    assert_eq!((st, v["code"].clone()), (413, json!(41300)), "{v}");
    assert!(v["message"].as_str().unwrap().contains("10000"));
    let (st, _) = s.post("session/info", json!({"collection_name": "c", "conversation_id": "big"})).await;
    assert_eq!(st, 404, "nothing was stored");
}

#[tokio::test]
async fn metrics_report_requests_jobs_and_store_and_need_a_key_when_keys_exist() {
    let s = Server::start("");
    s.write("m", msgs(&[("user", "I live in Rome")]), json!({"message_count": 1}), "u").await;
    eventually(10, "extraction", || async { (s.jobs().await[0]["state"] == "done").then_some(()) }).await;
    let _ = s.post("no/such/endpoint", json!({})).await;
    // The same user's scope twice: the store keeps it for the second search (PostgreSQL: its
    // terms, on this replica).
    for _ in 0..2 {
        s.ok("event/search", json!({"collection_name": "c", "query": "Rome", "filter": {"user_id": "u"}})).await;
    }
    let text = http_client().get(format!("{}/metrics", s.base)).send().await.unwrap().text().await.unwrap();
    let hits = |l: &str| l.starts_with("mnemo_scope_cache_lookups{outcome=\"hit\"}") && !l.ends_with(" 0");
    assert!(text.lines().any(hits), "the second search found the scope kept:\n{text}");
    assert!(text.contains("mnemo_scope_cache_bytes "), "{text}");
    for line in [
        "mnemo_http_requests_total{route=\"/api/memory/session/streaming_write\",status=\"200\"} 1",
        "mnemo_jobs{state=\"done\"} 1",
        "mnemo_job_attempts{outcome=\"done\"} 1",
        "mnemo_store_rows{kind=\"messages\"} 1",
        "mnemo_store_rows{kind=\"events\"} 1",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    assert!(
        text.contains("mnemo_http_request_duration_seconds_bucket{le=") && text.contains("route=\"unmatched\""),
        "{text}"
    );
    assert!(!text.contains("no/such/endpoint"), "raw paths never become labels");

    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("m.yaml");
    std::fs::write(&cfg, "server:\n  api_keys:\n    - {key: cccccccccccccccccccccccc}\n").unwrap();
    let k = Server::spawn(&cfg, &dir.path().join("d"), "127.0.0.1:0", &[]).unwrap();
    let url = format!("{}/metrics", k.base);
    assert_eq!(http_client().get(&url).send().await.unwrap().status(), 401);
    let ok = http_client().get(&url).bearer_auth("cccccccccccccccccccccccc").send().await.unwrap();
    assert_eq!(ok.status(), 200);
}

#[test]
fn the_isolation_selftest_finds_no_leak() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("m.yaml");
    std::fs::write(
        &cfg,
        "session:\n  poll_interval_ms: 50\nserver:\n  api_keys:\n    - {key: aaaaaaaaaaaaaaaaaaaaaaaa, projects: [alpha]}\n    - {key: bbbbbbbbbbbbbbbbbbbbbbbb, projects: [beta]}\n    - {key: rrrrrrrrrrrrrrrrrrrrrrrr, projects: [alpha], scopes: [read]}\n    - {key: uuuuuuuuuuuuuuuuuuuuuuuu, projects: [alpha], scopes: [read, write], user_id: carol}\n",
    )
    .unwrap();
    let s = Server::spawn(&cfg, &dir.path().join("d"), "127.0.0.1:0", &[]).unwrap();
    let out = std::process::Command::new(BIN)
        .args(["selftest", "isolation", "--url", &s.base])
        .args([
            "--key-a",
            "aaaaaaaaaaaaaaaaaaaaaaaa",
            "--project-a",
            "alpha",
            "--key-b",
            "bbbbbbbbbbbbbbbbbbbbbbbb",
            "--project-b",
            "beta",
            "--read-key-a",
            "rrrrrrrrrrrrrrrrrrrrrrrr",
            "--user-token-a",
            "uuuuuuuuuuuuuuuuuuuuuuuu",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(", 0 leaks"), "{stdout}");
}
