//! Privacy: redaction at the door (no raw secret in any table, index or log), `user/export`, and
//! `user/forget` (nothing left in search, context, export or the store's files; other users
//! untouched).

use crate::harness::*;
use serde_json::{Value, json};

fn file_contains(path: &std::path::Path, needle: &str) -> bool {
    std::fs::read(path).map(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes())).unwrap_or(false)
}

/// Where the store holds `needle`: the SQLite files, or on PostgreSQL the rows of the test's
/// schema (a `pg_dump` of it; PostgreSQL's own files keep dead row versions until VACUUM, which
/// `user/forget` starts in the background).
fn store_contains(data: &std::path::Path, needle: &str) -> Vec<String> {
    if let Some(url) = postgres_url() {
        let env = store_env(data);
        let schema = &env.iter().find(|(k, _)| k == "MNEMO_STORE__SCHEMA").unwrap().1;
        let out = std::process::Command::new("pg_dump")
            .args(["--data-only", "--schema", schema, "--dbname", &url])
            .output()
            .expect("pg_dump (postgresql-client) is installed");
        assert!(out.status.success(), "pg_dump: {}", String::from_utf8_lossy(&out.stderr));
        let dump = String::from_utf8_lossy(&out.stdout);
        return if dump.contains(needle) { vec![format!("postgres schema {schema}")] } else { vec![] };
    }
    ["mnemo.db", "mnemo.db-wal", "mnemo.db-shm"]
        .iter()
        .filter(|f| file_contains(&data.join(f), needle))
        .map(|f| f.to_string())
        .collect()
}

async fn export_lines(s: &Server, body: Value) -> Vec<Value> {
    let r = s.client.post(format!("{}/api/memory/user/export", s.base)).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("application/x-ndjson"));
    r.text().await.unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[tokio::test]
async fn secrets_and_private_text_never_reach_the_store_or_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, data, log) = (dir.path().join("m.yaml"), dir.path().join("data"), dir.path().join("server.log"));
    std::fs::write(&cfg, "session:\n  poll_interval_ms: 50\n").unwrap();
    let mut s = Server::spawn_with_log(&cfg, &data, "127.0.0.1:0", &[], Some(&log)).unwrap();
    let secrets = [
        "sk-proj-SECRETSECRET12345678",
        "diary-kiwi-3344",
        "hunter2-Walrus",
        "4111 1111 1111 1111",
        "AKIAIOSFODNN7EXAMPLE",
    ];
    s.write(
        "sec",
        json!([
            {"role": "user", "content": "my key is sk-proj-SECRETSECRET12345678 and <private>diary-kiwi-3344</private> I live in Oslo"},
            {"role": "assistant", "content": "noted; password=hunter2-Walrus was masked, card 4111 1111 1111 1111 too"},
        ]),
        json!({"message_count": 2}),
        "u-sec",
    )
    .await;
    s.ok("event/add", json!({"collection_name": "c", "event_type": "event_v1", "user_id": "u-sec", "memory_info": {"summary": "AWS key AKIAIOSFODNN7EXAMPLE leaked in chat"}})).await;
    s.ok("profile/add", json!({"collection_name": "c", "user_id": "u-sec2", "content": "token: sk-proj-SECRETSECRET12345678", "attributes": {"note": "<private>diary-kiwi-3344</private>"}})).await;
    eventually(10, "extraction", || async { (s.jobs().await.iter().all(|j| j["state"] == "done")).then_some(()) })
        .await;
    let stored = s.all_messages("sec").await;
    assert!(
        stored[0]["content"].as_str().unwrap().contains("[REDACTED SECRET]")
            && stored[0]["content"].as_str().unwrap().contains("[private]")
    );
    assert!(stored[1]["content"].as_str().unwrap().contains("password=[REDACTED]"));
    let ev = s.events("u-sec").await;
    assert!(ev.iter().all(|e| !e.to_string().contains("AKIA")), "{ev:?}");
    s.terminate();
    for secret in secrets {
        assert!(store_contains(&data, secret).is_empty(), "{secret:?} found in {:?}", store_contains(&data, secret));
        assert!(!file_contains(&log, secret), "{secret:?} found in the server log");
    }
    assert!(!store_contains(&data, "Oslo").is_empty(), "the check can see stored text");
    assert!(std::fs::metadata(&log).unwrap().len() > 0, "the log was written at debug level");
}

#[tokio::test]
async fn export_then_forget_leaves_nothing_and_spares_other_users() {
    let mut s = Server::start("");
    let t = json!({"message_count": 2});
    for (user, word, conv) in [("alice", "quokka-zebra-5519", "a1"), ("bob", "otter-lynx-8822", "b1")] {
        s.write(
            conv,
            msgs(&[("user", &format!("I live in Lisbon and my codeword is {word}")), ("assistant", "Noted.")]),
            t.clone(),
            user,
        )
        .await;
        s.write(&format!("{conv}-open"), msgs(&[("user", &format!("still pending {word}"))]), json!({}), user).await;
        s.ok("event/add", json!({"collection_name": "c", "event_type": "event_v1", "user_id": user, "memory_info": {"summary": format!("{user} said {word}")}})).await;
        s.ok("event/add", json!({"collection_name": "other", "event_type": "event_v1", "user_id": user, "memory_info": {"summary": format!("{user} elsewhere {word}")}})).await;
    }
    eventually(10, "extraction", || async { (s.jobs().await.iter().all(|j| j["state"] == "done")).then_some(()) })
        .await;

    let lines = export_lines(&s, json!({"user_id": "alice"})).await;
    assert_eq!(lines[0]["kind"], "export");
    let kinds: std::collections::HashSet<&str> = lines.iter().skip(1).map(|l| l["kind"].as_str().unwrap()).collect();
    for k in ["conversation", "message", "session", "job", "event", "profile"] {
        assert!(kinds.contains(k), "export has {k}: {kinds:?}");
    }
    let all = lines.iter().map(|l| l.to_string()).collect::<String>();
    assert!(all.contains("quokka-zebra-5519") && !all.contains("otter-lynx-8822"), "export is alice's alone");
    assert!(lines.iter().any(|l| l["collection_name"] == "other"), "without collection_name: every collection");

    // A dry run says what forgetting would remove, and removes nothing.
    let dry = s.ok("user/forget", json!({"user_id": "alice", "dry_run": true})).await;
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["would_delete"]["c"]["profiles"], 1, "{dry}");
    assert!(dry["would_delete"]["c"]["messages"].as_u64().unwrap() >= 3, "{dry}");
    assert_eq!(export_lines(&s, json!({"user_id": "alice"})).await.len(), lines.len(), "nothing removed");

    let d = s.ok("user/forget", json!({"user_id": "alice"})).await;
    let n = &d["deleted"];
    assert_eq!((n["conversations"].clone(), n["profiles"].clone()), (json!(2), json!(1)), "{d}");
    assert!(
        n["messages"].as_u64().unwrap() >= 3
            && n["events"].as_u64().unwrap() >= 3
            && n["sessions"] == 1
            && n["jobs"] == 1,
        "{d}"
    );

    // Nothing left through any read path.
    assert!(s.events("alice").await.is_empty());
    let r = s
        .ok(
            "event/search",
            json!({"collection_name": "c", "query": "quokka-zebra-5519 Lisbon", "filter": {"user_id": "alice"}}),
        )
        .await;
    assert_eq!(r["count"], 0);
    let ctx = s.ok("get_context", json!({"collection_name": "c", "conversation_id": "a1-open", "query": "codeword", "event_search_config": {"filter": {"user_id": "alice"}}})).await;
    assert_eq!(ctx["context_str"], "", "{ctx}");
    assert_eq!(export_lines(&s, json!({"user_id": "alice"})).await.len(), 1, "export: only the header");
    assert_eq!(
        s.ok("profile/search", json!({"collection_name": "c", "filter": {"user_id": "alice"}})).await["count"],
        0
    );

    // Bob is untouched.
    let r = s
        .ok("event/search", json!({"collection_name": "c", "query": "otter-lynx-8822", "filter": {"user_id": "bob"}}))
        .await;
    assert!(r["count"].as_u64().unwrap() >= 2);
    assert_eq!(s.ok("profile/search", json!({"collection_name": "c", "filter": {"user_id": "bob"}})).await["count"], 1);
    assert_eq!(s.all_messages("b1").await.len(), 2);

    // The bytes are gone from the store's files (secure_delete, FTS optimise, WAL truncated).
    let data = s.data.clone();
    s.terminate();
    assert!(
        store_contains(&data, "quokka-zebra-5519").is_empty(),
        "alice's words remain in {:?}",
        store_contains(&data, "quokka-zebra-5519")
    );
    assert!(!store_contains(&data, "otter-lynx-8822").is_empty(), "bob's words are still stored");
}
