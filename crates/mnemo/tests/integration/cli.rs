//! The client verbs of the binary against a real server: write, context, search, import (resumable,
//! idempotent), export → import round trip, forget.

use crate::harness::*;
use serde_json::{Value, json};
use std::process::Command;

fn mnemo(s: &Server, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(BIN).args(args).args(["--url", &s.base]).env("MNEMO_LOG", "warn").output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(s: &Server, args: &[&str]) -> String {
    let (success, out, err) = mnemo(s, args);
    assert!(success, "mnemo {args:?} failed: {err}");
    out
}

#[tokio::test]
async fn write_context_search_forget() {
    let s = Server::start("");
    let out = ok(
        &s,
        &["write", "--collection", "c", "--conversation", "k1", "--user", "u1", "--flush", "我住在上海，喜欢爵士乐"],
    );
    assert!(out.contains("stored 1 message(s) in k1") && out.contains("flushed"), "{out}");
    eventually(20, "extraction", || async { s.jobs().await.iter().all(|j| j["state"] == "done").then_some(()) }).await;
    let out = ok(&s, &["context", "--collection", "c", "--conversation", "k1", "--query", "音乐"]);
    assert!(out.contains("上海"), "{out}");
    let out = ok(&s, &["search", "--collection", "c", "--user", "u1", "--json", "爵士"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(v["count"].as_u64().unwrap() >= 1, "{v}");
    let out = ok(&s, &["search", "--collection", "c", "--user", "u1", "爵士"]);
    assert!(out.contains("爵士乐"), "human-readable lines: {out}");
    let (success, _, err) = mnemo(&s, &["forget", "--collection", "c", "--user", "u1"]);
    assert!(!success && err.contains("--yes"), "forget asks for confirmation: {err}");
    let out = ok(&s, &["forget", "--collection", "c", "--user", "u1", "--yes"]);
    assert!(out.contains("forgot u1: 1 events"), "{out}");
}

#[tokio::test]
async fn import_is_resumable_and_round_trips_an_export() {
    let s = Server::start("");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("convs.jsonl");
    let conv = |id: &str, user: &str, text: &str| {
        json!({"conversation_id": id, "user_id": user, "sessions": [
            {"session_id": "s1", "time": "2023-05-08T13:56:00", "messages": [
                {"role": "user", "speaker": "A", "content": text}, {"role": "assistant", "speaker": "B", "content": "ok"}]},
            {"session_id": "s2", "time": "2023-05-09T10:00:00", "messages": [
                {"role": "user", "speaker": "A", "content": format!("{text} again")}]}]})
        .to_string()
    };
    std::fs::write(&file, [conv("a", "ua", "I adopted a cat named Miso"), conv("b", "ub", "我在学日语")].join("\n"))
        .unwrap();
    let f = file.to_str().unwrap();
    let out = ok(&s, &["import", "--collection", "imp", f]);
    assert!(out.contains("imported 2 lines: 6 messages") && out.contains("0 errors"), "{out}");
    let out = ok(&s, &["import", "--collection", "imp", f]);
    assert!(out.contains("imported 0 lines"), "resumes after the last line done: {out}");
    ok(&s, &["import", "--collection", "imp", "--restart", f]);
    let info = s.ok("session/info", json!({"collection_name": "imp", "conversation_id": "a"})).await;
    let sessions = info["sessions"].as_array().unwrap();
    let stored: u64 = sessions.iter().map(|x| x["message_count"].as_u64().unwrap()).sum();
    assert_eq!(stored, 3, "a re-run stores nothing twice: {info}");
    assert_eq!(sessions.len(), 2, "one session per imported session");

    // Export a user, import the export into another collection.
    eventually(20, "extraction", || async {
        let jobs = s.ok("job/list", json!({"collection_name": "imp"})).await["jobs"].as_array().unwrap().clone();
        jobs.iter().all(|j| j["state"] == "done").then_some(())
    })
    .await;
    let export = dir.path().join("ua.jsonl");
    ok(&s, &["export", "--collection", "imp", "--user", "ua", "-o", export.to_str().unwrap()]);
    let out = ok(&s, &["import", "--collection", "copy", "--json", export.to_str().unwrap()]);
    let summary: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["errors"], 0, "{summary}");
    assert!(summary["records"].as_u64().unwrap() >= 1, "events and the profile came along: {summary}");
    let copied = s.ok("event/search", json!({"collection_name": "copy", "filter": {"user_id": "ua"}})).await;
    assert!(copied["result_list"][0]["memory_info"]["summary"].as_str().unwrap().contains("Miso"), "{copied}");
}

/// Exported events go in `event/batch_add` batches of up to 500; a batch refused for one bad line
/// is sent again event by event, so only that line fails (named with its number).
#[tokio::test]
async fn exported_events_import_in_batches_and_a_bad_line_fails_alone() {
    let s = Server::start("");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    let mut lines: Vec<String> = (0..700)
        .map(|i| {
            let users = if i == 300 { json!([]) } else { json!(["u1"]) };
            json!({"kind": "event", "collection_name": "bulk", "record": {"memory_type": "event_v1", "user_id": users,
                "assistant_id": [], "memory_info": {"summary": format!("fact number {i}")}, "time": 1_000 + i, "class": "conclusion"}})
            .to_string()
        })
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let (success, out, err) = mnemo(&s, &["import", file.to_str().unwrap()]);
    assert!(!success, "a failed line fails the import: {out}");
    assert!(out.contains("699 events/profiles") && out.contains("1 errors"), "{out}");
    assert!(err.contains("line 301: ") && err.contains("user_id"), "the bad line is named: {err}");
    assert_eq!(
        s.ok("event/search", json!({"collection_name": "bulk", "filter": {"user_id": "u1"}, "limit": 1000})).await["count"],
        699
    );
    let out = ok(&s, &["import", file.to_str().unwrap()]);
    assert!(out.contains("imported 0 lines"), "the progress covers the batches sent: {out}");

    // --bulk, with the store the server runs on: PostgreSQL drops its HNSW index for the load
    // and builds it after; the embedded store has none to defer.
    lines.remove(300);
    std::fs::write(&file, lines.join("\n").replace("\"bulk\"", "\"bulk2\"")).unwrap();
    let out = Command::new(BIN)
        .args(["import", "--bulk", "--restart", file.to_str().unwrap(), "--url", &s.base])
        .envs(store_env(&s.data))
        .env("MNEMO_LOG", "warn")
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && stdout.contains("699 events/profiles"), "{stdout}{stderr}");
    let deferred = if postgres_url().is_some() { "vector indexes built in" } else { "keeps no index to defer" };
    assert!(stderr.contains(deferred), "{stderr}");
    let q = json!({"collection_name": "bulk2", "query": "fact number 42", "filter": {"user_id": "u1"}, "limit": 1});
    assert_eq!(s.ok("event/search", q).await["result_list"][0]["memory_info"]["summary"], "fact number 42");
}

/// ChatGPT's and Claude's data exports (fixtures written in their documented formats): the branch
/// shown is imported with its timestamps, owned by `--user`, extracted; a re-run (even with
/// `--restart`) stores nothing twice; `--skip-extraction` keeps the turns as short-term memory.
#[tokio::test]
async fn chatgpt_and_claude_exports_import_idempotently() {
    let s = Server::start("");
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/exports");
    let dir = tempfile::tempdir().unwrap();
    let copy = |name: &str| {
        let to = dir.path().join(name);
        std::fs::copy(format!("{fixtures}/{name}"), &to).unwrap();
        to.to_str().unwrap().to_string()
    };
    let (gpt, claude) = (copy("chatgpt-conversations.json"), copy("claude-conversations.json"));
    let (success, _, err) = mnemo(&s, &["import", "--collection", "chats", "--from", "chatgpt", &gpt]);
    assert!(!success && err.contains("--user"), "a chat export needs its user: {err}");
    let out = ok(&s, &["import", "--collection", "chats", "--from", "chatgpt", "--user", "ana", &gpt]);
    assert!(out.contains("imported 2 lines: 6 messages") && out.contains("0 errors"), "{out}");
    ok(&s, &["import", "--collection", "chats", "--from", "chatgpt", "--user", "ana", "--restart", &gpt]);
    let info = s.ok("session/info", json!({"collection_name": "chats", "conversation_id": "chatgpt-c1"})).await;
    let total: u64 = info["sessions"].as_array().unwrap().iter().map(|x| x["message_count"].as_u64().unwrap()).sum();
    assert_eq!(total, 4, "the shown branch only, stored once across two runs: {info}");
    assert_eq!(info["metadata"]["title"], "Kyoto trip");
    eventually(20, "extraction", || async {
        let jobs = s.ok("job/list", json!({"collection_name": "chats"})).await["jobs"].as_array().unwrap().clone();
        (!jobs.is_empty() && jobs.iter().all(|j| j["state"] == "done")).then_some(())
    })
    .await;
    let hits = s
        .ok(
            "event/search",
            json!({"collection_name": "chats", "query": "cherry blossom Kyoto", "filter": {"user_id": "ana"}}),
        )
        .await;
    let first = &hits["result_list"][0];
    assert!(first["memory_info"]["summary"].as_str().unwrap().contains("Kyoto"), "{hits}");
    assert!(!hits.to_string().contains("abandoned answer"), "an abandoned branch is not imported");
    let sid = info["sessions"][0]["session_id"].clone();
    let d = s.ok("session/info", json!({"collection_name": "chats", "session_id": sid})).await;
    assert_eq!(d["messages"][0]["time"], 1_714_000_000_000_i64, "original timestamps");

    // Claude's export, held for later extraction.
    let out =
        ok(&s, &["import", "--collection", "held", "--from", "claude", "--user", "bo", "--skip-extraction", &claude]);
    assert!(out.contains("imported 1 lines: 2 messages"), "{out}");
    let info = s.ok("session/info", json!({"collection_name": "held", "conversation_id": "claude-k1"})).await;
    assert_eq!(info["pending_messages"], 2, "short-term memory, not extracted: {info}");
    assert_eq!(info["messages"][0]["content"], "I adopted a cat named Miso.\n[attachment: miso.jpg]");
    assert_eq!(s.ok("job/list", json!({"collection_name": "held"})).await["count"], 0);
    s.ok("session/flush", json!({"collection_name": "held", "conversation_id": "claude-k1"})).await;
    eventually(20, "extraction after the flush", || async {
        let e = s.ok("event/search", json!({"collection_name": "held", "filter": {"user_id": "bo"}})).await;
        (e["count"] == 1).then_some(())
    })
    .await;
}

/// A failed command prints its error and its causes, and exits 1 — no backtrace even when
/// RUST_BACKTRACE is set (a user's shell often has it): an unreachable server is not a crash.
#[test]
fn a_failed_command_prints_its_causes_and_no_backtrace() {
    let out = Command::new(BIN)
        .args(["search", "--url", "http://127.0.0.1:1", "--collection", "c", "--user", "u", "hello"])
        .env("RUST_BACKTRACE", "1")
        .env_remove("RUST_LIB_BACKTRACE")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.starts_with("Error: http://127.0.0.1:1: is `mnemo serve` running?"), "{err}");
    assert!(err.contains("\n\nCaused by:\n") && err.contains("Connection refused"), "the causes: {err}");
    assert!(!err.contains("backtrace") && !err.contains("Backtrace"), "no backtrace: {err}");
}
