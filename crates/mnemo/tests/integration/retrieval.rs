//! Retrieval over HTTP with the real local model: cross-lingual search, read-your-writes, decay
//! and custom weight, layers, hits.

use crate::harness::*;
use serde_json::{Value, json};

async fn add(s: &Server, user: &str, summary: &str, extra: Value) -> String {
    let mut body =
        json!({"collection_name": "c", "event_type": "event_v1", "user_id": user, "memory_info": {"summary": summary}});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    s.ok("event/add", body).await["event_id"].as_str().unwrap().to_string()
}

async fn search(s: &Server, body: Value) -> Vec<Value> {
    let mut b = json!({"collection_name": "c"});
    for (k, v) in body.as_object().unwrap() {
        b[k] = v.clone();
    }
    s.ok("event/search", b).await["result_list"].as_array().unwrap().clone()
}

fn summaries(r: &[Value]) -> Vec<String> {
    r.iter().map(|e| e["memory_info"]["summary"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn cross_lingual_search_finds_the_right_event_first() {
    let s = Server::start("");
    let memories = [
        "用户对花生过敏",
        "The user works as a nurse at a children's hospital",
        "用户周末喜欢去爬山",
        "The user's daughter is learning to play the piano",
        "用户最近在学习意式浓缩咖啡的萃取",
        "The user lives in Hangzhou with two cats",
    ];
    for m in memories {
        add(&s, "u1", m, json!({})).await;
    }
    let cases = [
        ("What is the user allergic to?", 0),
        ("用户的职业是什么？", 1),
        ("What does the user do on weekends?", 2),
        ("用户的女儿在学什么乐器？", 3),
        ("Is the user interested in coffee?", 4),
        ("用户养了什么宠物？", 5),
    ];
    let mut misses = Vec::new();
    for (q, want) in cases {
        let r = search(&s, json!({"query": q, "filter": {"user_id": "u1"}, "limit": 3})).await;
        if r[0]["memory_info"]["summary"] != memories[want] {
            misses.push(format!("{q} → {:?}", summaries(&r)));
        }
        let o = r[0]["origin_score"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&o) && r[0]["score"].as_f64().unwrap() <= 1.0);
    }
    assert!(misses.len() <= 1, "cross-lingual top-1 misses: {misses:#?}");
}

#[tokio::test]
async fn an_added_event_is_searchable_on_return() {
    let s = Server::start("");
    let id = add(&s, "u1", "用户说周末想去一家新的咖啡店，想试试手冲咖啡。", json!({})).await;
    let r = search(&s, json!({"query": "咖啡店 手冲", "filter": {"user_id": "u1", "memory_type": ["event_v1"]}})).await;
    assert_eq!(r[0]["id"], id.as_str(), "read-your-writes: no indexing delay");
}

#[tokio::test]
async fn time_decay_and_custom_weight_change_the_order_as_documented() {
    let s = Server::start("");
    s.ok(
        "collection/create",
        json!({"collection_name": "c", "event_types": [{"name": "note", "weight_field": "importance",
            "fields": [{"name": "summary", "type": "string", "required": true}, {"name": "importance", "type": "int"}]}]}),
    )
    .await;
    let day = 86_400_000i64;
    let now = chrono_now();
    // Same text relevance; one old, one recent.
    add(&s, "u1", "User planned a trip to Japan", json!({"time": now - 200 * day})).await;
    add(&s, "u1", "User planned a trip to Japan again", json!({"time": now - day})).await;
    let q = "trip to Japan";
    let plain = search(&s, json!({"query": q, "filter": {"user_id": "u1"}})).await;
    let zero = search(&s, json!({"query": q, "filter": {"user_id": "u1"}, "time_decay_config": {"weight": 0.0}})).await;
    assert_eq!(summaries(&plain), summaries(&zero), "weight 0 leaves the order unchanged");
    assert!(zero.iter().all(|e| e["score"] == e["origin_score"]));
    let decayed = search(
        &s,
        json!({"query": q, "filter": {"user_id": "u1"}, "time_decay_config": {"weight": 0.9, "no_decay_period": 3}}),
    )
    .await;
    assert_eq!(decayed[0]["memory_info"]["summary"], "User planned a trip to Japan again", "recent first with decay");
    assert_eq!(decayed[0]["time_score"], 1.0, "inside no_decay_period: no decay");
    assert!(decayed[1]["time_score"].as_f64().unwrap() < 0.05, "200 days ≈ 6.5 half-lives");
    // Long no-decay period: both inside it, so the decay changes nothing.
    let long = search(
        &s,
        json!({"query": q, "filter": {"user_id": "u1"}, "time_decay_config": {"weight": 0.9, "no_decay_period": 365}}),
    )
    .await;
    assert_eq!(summaries(&long), summaries(&plain));

    // Custom weight: the importance field lifts a less relevant note above a more relevant one.
    let note = |summary: &str, importance: i64| json!({"collection_name": "c", "event_type": "note", "user_id": "u2", "memory_info": {"summary": summary, "importance": importance}});
    s.ok("event/add", note("User's passport expires in March, renew before the Japan trip", 10)).await;
    s.ok("event/add", note("User likes Japan trip photos on social media, trip to Japan", 0)).await;
    let base = search(&s, json!({"query": q, "filter": {"user_id": "u2"}})).await;
    let weighted = search(&s, json!({"query": q, "filter": {"user_id": "u2"}, "custom_weight": 0.9})).await;
    assert_eq!(base[0]["memory_info"]["importance"], 0, "without custom_weight, relevance decides");
    assert_eq!(weighted[0]["memory_info"]["importance"], 10, "custom_weight lifts the important note");
    assert_eq!(weighted[0]["custom_weight_score"], 1.0);
}

#[tokio::test]
async fn scope_layers_fall_back_to_global() {
    let s = Server::start("");
    add(&s, "u1", "Web project: the team chose PostgreSQL and an API gateway", json!({"scope": "project:web"})).await;
    add(&s, "u1", "User prefers concise answers with code samples", json!({"scope": "global"})).await;
    add(&s, "u1", "Data project: nightly Spark jobs on the cluster", json!({"scope": "project:data"})).await;
    let r = search(
        &s,
        json!({"query": "database choice", "filter": {"user_id": "u1", "scope": "project:web"}, "limit": 2}),
    )
    .await;
    assert_eq!(r.len(), 2);
    assert_eq!(r[0]["scope"], "project:web");
    assert_eq!(r[0]["layer"], "project:web");
    assert_eq!(r[1]["layer"], "global", "the scope alone had fewer than `limit`: global fills in");
    assert!(r.iter().all(|e| e["scope"] != "project:data"), "other projects never leak in");
    let r = search(
        &s,
        json!({"query": "database choice", "filter": {"user_id": "u1", "scope": "project:web"}, "limit": 1}),
    )
    .await;
    assert_eq!(r.len(), 1, "no fallback when the scope fills the limit");
}

#[tokio::test]
async fn thresholds_filters_and_hits() {
    let s = Server::start("");
    let id = add(
        &s,
        "u1",
        "User adopted a golden retriever puppy named Max",
        json!({"assistant_id": "bot", "group_id": "g1"}),
    )
    .await;
    add(&s, "u1", "User's favourite dish is mapo tofu", json!({"group_id": "g2"})).await;
    add(&s, "u2", "Another user adopted a puppy too", json!({})).await;
    let r = search(&s, json!({"query": "dog", "filter": {"user_id": "u1"}})).await;
    assert_eq!(r.len(), 2, "no threshold by default: nothing hidden silently");
    assert_eq!(r[0]["id"], id.as_str());
    let strict = search(&s, json!({"query": "dog", "filter": {"user_id": "u1"}, "similarity_threshold": 0.99})).await;
    assert!(strict.is_empty());
    assert_eq!(search(&s, json!({"query": "dog", "filter": {"user_id": "u1", "group_id": "g2"}})).await.len(), 1);
    assert_eq!(search(&s, json!({"query": "dog", "filter": {"assistant_id": "bot"}})).await.len(), 1);
    assert_eq!(search(&s, json!({"query": "dog", "filter": {"user_id": ["u1", "u2"]}})).await.len(), 3);
    // Every returned event counts a hit (recorded just after the answer).
    let hits = eventually(5, "hits to be recorded", || async {
        let r = search(&s, json!({"filter": {"user_id": "u1", "group_id": "g1"}})).await;
        (r[0]["hit_count"].as_u64().unwrap() >= 3).then_some(r)
    })
    .await;
    assert!(hits[0]["last_hit_at"].is_number());
}

fn chrono_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

#[tokio::test]
async fn stats_count_memories_hits_and_jobs_per_day() {
    let s = Server::start("");
    let a = add(&s, "u1", "User adopted a puppy named Max", json!({})).await;
    add(&s, "u1", "User's favourite dish is mapo tofu", json!({})).await;
    add(&s, "u2", "Another user's memory", json!({})).await;
    s.write("st", msgs(&[("user", "I live in Rome"), ("assistant", "Nice")]), json!({"message_count": 2}), "u1").await;
    eventually(10, "extraction", || async { (s.jobs().await[0]["state"] == "done").then_some(()) }).await;
    for _ in 0..3 {
        search(&s, json!({"query": "puppy", "filter": {"user_id": "u1"}, "limit": 1})).await;
    }
    let st = eventually(5, "hits to be counted", || async {
        let st = s.ok("stats", json!({"collection_name": "c", "user_id": "u1"})).await;
        (st["top_hit"][0]["hit_count"] == 3).then_some(st)
    })
    .await;
    assert_eq!(st["top_hit"][0]["event_id"], a.as_str());
    assert_eq!(st["total_events"], 3, "two added and one extracted for u1: {st}");
    assert_eq!(st["never_hit"], 2);
    assert_eq!(st["new_memories_per_day"][0]["count"], 3);
    assert_eq!(st["hits_per_day"][0]["hits"], 3);
    assert_eq!(st["jobs_per_day"][0]["jobs"], 1);
    assert_eq!(st["jobs_per_day"][0]["done"], 1);
    let all = s.ok("stats", json!({"collection_name": "c", "days": 7})).await;
    assert_eq!(all["total_events"], 4, "the whole collection");
    let (code, v) = s.post("stats", json!({"collection_name": "c", "days": 0})).await;
    assert_eq!(code, 400, "{v}");
}
