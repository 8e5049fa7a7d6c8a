//! Forgetting with a movable clock (`testing.clock_control`): temporary memories expire unless
//! they were used, unused memories are archived after 90 days (kept, not searched by default),
//! every maintenance run is recorded.

use crate::harness::*;
use serde_json::{Value, json};

const DAY: i64 = 86_400_000;

async fn add(s: &Server, summary: &str, extra: Value) -> String {
    let mut body =
        json!({"collection_name": "c", "event_type": "event_v1", "user_id": "u", "memory_info": {"summary": summary}});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    s.ok("event/add", body).await["event_id"].as_str().unwrap().to_string()
}

async fn ids(s: &Server, extra: Value) -> Vec<String> {
    let mut body = json!({"collection_name": "c", "filter": {"user_id": "u"}, "limit": 100});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let r = s.ok("event/search", body).await;
    r["result_list"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn temporary_memories_expire_unused_ones_are_archived() {
    let s = Server::start("testing:\n  clock_control: true\nlifecycle:\n  maintenance_interval_secs: 3600\n");
    // Start at 01:00 UTC, so "two hours later" is the same day: crossing midnight would write a
    // daily digest of these events (a CI run at 23:15 UTC did), which this test does not count.
    let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    s.ok("admin/clock", json!({"advance_ms": DAY - wall.rem_euclid(DAY) + 3_600_000})).await;
    let debug_note =
        add(&s, "debug session: the build failed on a missing env var", json!({"class": "temporary"})).await;
    let used_temp = add(&s, "temporary: the staging URL is staging.example.com", json!({"class": "temporary"})).await;
    let short = add(&s, "reminder valid for one hour", json!({"ttl_relative": 3600})).await;
    let decision = add(&s, "decision: the team chose PostgreSQL", json!({})).await;
    let e = s.ok("event/search", json!({"collection_name": "c", "filter": {"user_id": "u"}})).await;
    let temp = e["result_list"].as_array().unwrap().iter().find(|x| x["id"] == debug_note.as_str()).unwrap().clone();
    assert!(
        (temp["expires_at"].as_i64().unwrap() - temp["created_at"].as_i64().unwrap() - 7 * DAY).abs() < 5_000,
        "7-day default TTL: {temp}"
    );
    // One temporary memory gets used.
    let r = s
        .ok(
            "event/search",
            json!({"collection_name": "c", "query": "staging URL", "filter": {"user_id": "u"}, "limit": 1}),
        )
        .await;
    assert_eq!(r["result_list"][0]["id"], used_temp.as_str());
    eventually(5, "the hit to be recorded", || async {
        let r = s.ok("event/search", json!({"collection_name": "c", "filter": {"user_id": "u"}, "limit": 100})).await;
        r["result_list"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["id"] == used_temp.as_str() && e["hit_count"].as_u64() >= Some(1))
            .then_some(())
    })
    .await;

    // Two hours later: only the one-hour reminder has expired.
    s.ok("admin/clock", json!({"advance_ms": 2 * 3_600_000})).await;
    let run = s.ok("maintenance/run", json!({})).await;
    assert_eq!((run["runs"][0]["expired"].clone(), run["runs"][0]["archived"].clone()), (json!(1), json!(0)), "{run}");
    assert!(!ids(&s, json!({})).await.contains(&short));

    // Eight days later: the unused temporary note is gone; the used one and the decision stay.
    s.ok("admin/clock", json!({"advance_ms": 8 * DAY})).await;
    let run = s.ok("maintenance/run", json!({})).await;
    assert_eq!(run["runs"][0]["expired"], 1, "{run}");
    let left = ids(&s, json!({})).await;
    assert!(!left.contains(&debug_note) && left.contains(&used_temp) && left.contains(&decision), "{left:?}");

    // A hundred days later: nothing was used for 90 days, so both are archived — kept, not searched.
    s.ok("admin/clock", json!({"advance_ms": 100 * DAY})).await;
    let run = s.ok("maintenance/run", json!({"collection_name": "c"})).await;
    assert_eq!(run["runs"][0]["archived"], 2, "{run}");
    assert!(ids(&s, json!({})).await.is_empty(), "archived events are not searched by default");
    let archived = ids(&s, json!({"include_archived": true})).await;
    assert!(archived.contains(&decision) && archived.contains(&used_temp));
    let ctx = s.ok("get_context", json!({"collection_name": "c", "conversation_id": "new", "query": "PostgreSQL", "event_search_config": {"filter": {"user_id": "u"}}})).await;
    assert!(!ctx["context_str"].as_str().unwrap().contains("PostgreSQL"), "archived events stay out of the context");

    // Every run is recorded, newest first.
    let runs = s.ok("maintenance/list", json!({"collection_name": "c"})).await;
    let got: Vec<(i64, i64)> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["expired"].as_i64().unwrap(), r["archived"].as_i64().unwrap()))
        .collect();
    assert_eq!(got, vec![(0, 2), (1, 0), (1, 0)]);
    assert_eq!(runs["runs"][0]["trigger"], "request");
}

#[tokio::test]
async fn the_clock_cannot_be_moved_unless_enabled_and_ttls_are_checked() {
    let s = Server::start("");
    let (st, _) = s.post("admin/clock", json!({"advance_ms": 1000})).await;
    assert_eq!(st, 404, "no clock control in a normal server");
    let (st, v) = s.post("event/add", json!({"collection_name": "c", "event_type": "event_v1", "user_id": "u", "memory_info": {"summary": "x"}, "ttl_relative": 0})).await;
    assert_eq!(st, 400, "{v}");
    assert!(v["message"].as_str().unwrap().starts_with("ttl_relative:"));
    let (st, _) = s
        .post("event/add", json!({"collection_name": "c", "event_type": "event_v1", "user_id": "u", "memory_info": {"summary": "x"}, "ttl_relative": 5, "ttl_absolute": 5}))
        .await;
    assert_eq!(st, 400);
}

#[tokio::test]
async fn process_notes_fold_daily_digests_open_new_conversations() {
    let s = Server::start("testing:\n  clock_control: true\nlifecycle:\n  maintenance_interval_secs: 3600\n");
    for note in ["tried restarting the build agent", "cleared the npm cache", "pinned node to version 20"] {
        add(&s, note, json!({"class": "process"})).await;
    }
    let decision = add(&s, "decided to run CI on node 20 from now on", json!({})).await;
    // Two days later the day is finished: its process notes fold, and the user gets a digest.
    s.ok("admin/clock", json!({"advance_ms": 2 * DAY})).await;
    let run = s.ok("maintenance/run", json!({})).await;
    assert_eq!((run["runs"][0]["folded"].clone(), run["runs"][0]["digests"].clone()), (json!(3), json!(1)), "{run}");
    let all = s.ok("event/search", json!({"collection_name": "c", "filter": {"user_id": "u"}, "limit": 100})).await;
    let list = all["result_list"].as_array().unwrap();
    let summaries: Vec<&str> = list.iter().map(|e| e["memory_info"]["summary"].as_str().unwrap()).collect();
    assert_eq!(list.len(), 3, "fold + decision + digest: {summaries:#?}");
    let folded = list.iter().find(|e| e["memory_info"]["summary"].as_str().unwrap().contains("process notes")).unwrap();
    assert!(
        folded["memory_info"]["summary"].as_str().unwrap().contains("cleared the npm cache; pinned node to version 20")
    );
    assert_eq!(folded["class"], "conclusion");
    assert!(list.iter().any(|e| e["id"] == decision.as_str()));
    let digest = list.iter().find(|e| e["memory_type"] == "daily_digest").unwrap();
    assert!(digest["memory_info"]["summary"].as_str().unwrap().contains("decided to run CI on node 20"), "{digest}");
    // No second digest for the same day.
    let run = s.ok("maintenance/run", json!({})).await;
    assert_eq!(run["runs"][0]["digests"], 0);

    // A new conversation opens with the latest digest ("what we discussed last time").
    let d = s.ok("get_context", json!({"collection_name": "c", "conversation_id": "monday", "locale": "en", "event_search_config": {"filter": {"user_id": "u"}}})).await;
    let c = d["context_str"].as_str().unwrap();
    assert!(c.contains("1. Last time\n- [created]") && c.contains("decided to run CI on node 20"), "{c}");
    assert_eq!(d["context_parts"]["recap"]["memory_type"], "daily_digest");
    let d = s
        .ok("get_context", json!({"collection_name": "c", "conversation_id": "monday", "include": {"recap": false}, "event_search_config": {"filter": {"user_id": "u"}}}))
        .await;
    assert_eq!(d["context_str"], "", "switchable");
    // Once the conversation has turns, no recap.
    s.write("monday", msgs(&[("user", "hi again")]), json!({}), "u").await;
    let d = s.ok("get_context", json!({"collection_name": "c", "conversation_id": "monday", "locale": "en"})).await;
    assert!(!d["context_str"].as_str().unwrap().contains("Last time"));
}

#[tokio::test]
async fn event_types_set_the_class_collections_set_the_temporary_ttl_and_export_runs_from_the_cli() {
    let s = Server::start("");
    s.ok(
        "collection/create",
        json!({"collection_name": "c", "temporary_ttl_days": 2,
               "event_types": [{"name": "scratch", "default_class": "temporary", "fields": [{"name": "summary", "type": "string", "required": true}]}]}),
    )
    .await;
    let e = s.ok("event/add", json!({"collection_name": "c", "event_type": "scratch", "user_id": "u", "memory_info": {"summary": "scratch note"}})).await;
    let ev = &e["event"];
    assert_eq!(ev["class"], "temporary", "the type's default class");
    let ttl = ev["expires_at"].as_i64().unwrap() - ev["created_at"].as_i64().unwrap();
    assert!((ttl - 2 * DAY).abs() < 5_000, "the collection's temporary TTL: {ttl}");
    let e = s.ok("event/add", json!({"collection_name": "c", "event_type": "event_v1", "user_id": "u", "memory_info": {"summary": "a decision"}})).await;
    assert_eq!((e["event"]["class"].clone(), e["event"]["expires_at"].clone()), (json!("conclusion"), Value::Null));
    let (st, v) = s.post("collection/create", json!({"collection_name": "d", "event_types": [{"name": "t", "default_class": "forever", "fields": [{"name": "f", "type": "string"}]}]})).await;
    assert_eq!(st, 400, "{v}");
    assert!(v["message"].as_str().unwrap().starts_with("event_types[0].default_class:"));

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("u.jsonl");
    let out = std::process::Command::new(BIN)
        .args(["export", "--user", "u", "--collection", "c", "--url", &s.base, "-o"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text.lines().count(), 3, "a header and two events:\n{text}");
    assert!(text.contains("scratch note") && text.contains("a decision"));
}
