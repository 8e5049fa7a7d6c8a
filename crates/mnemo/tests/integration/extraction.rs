//! Extraction jobs over HTTP: the rules extractor's events and profiles in Chinese and English,
//! and retries after extractor failures with no message lost.

use crate::harness::*;
use serde_json::json;

#[tokio::test]
async fn rules_extractor_chinese_conversation() {
    let s = Server::start("");
    s.write(
        "zh",
        msgs(&[
            ("system", "你是一个育儿助手"),
            ("user", "我家宝宝1岁，最近喝奶粉总胀气，有没有推荐的？我住在上海。"),
            ("assistant", "您好，宝宝胀气大概率和奶粉乳糖含量有关，建议优先选择无乳糖配方奶粉。"),
            ("user", "我喜欢性价比高的，不要太贵。"),
        ]),
        json!({"message_count": 4}),
        "mom",
    )
    .await;
    let events = eventually(10, "events", || async {
        let e = s.events("mom").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    // Two topics: the formula question, and the price preference (no shared vocabulary).
    assert_eq!(events.len(), 2, "{events:#?}");
    let e = events.iter().find(|e| e["memory_info"]["summary"].as_str().unwrap().contains("奶粉")).unwrap();
    assert_eq!(e["memory_type"], "event_v1");
    assert_eq!(e["user_id"], json!(["mom"]));
    let summary = e["memory_info"]["summary"].as_str().unwrap();
    assert!(summary.contains("奶粉") && summary.chars().count() <= 200, "{summary}");
    assert!(!e["memory_info"]["original_messages"].as_str().unwrap().contains("育儿助手"), "system prompt cleaned out");
    let sources: usize = events.iter().map(|e| e["source_message_ids"].as_array().unwrap().len()).sum();
    assert_eq!(sources, 3, "every kept message is in exactly one event; the system prompt in none");
    let p = s.ok("profile/search", json!({"collection_name": "c", "filter": {"user_id": "mom"}})).await;
    assert_eq!(p["count"], 1);
    let attrs = &p["result_list"][0]["attributes"];
    assert_eq!(attrs["city"], "上海");
    assert_eq!(attrs["child_age"], "1岁");
    assert_eq!(attrs["likes"], json!(["性价比高"]));
    // Short-term memory is empty once extracted.
    let info = s.ok("session/info", json!({"collection_name": "c", "conversation_id": "zh"})).await;
    assert!(info["messages"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn rules_extractor_english_profile_updates_in_place() {
    let s = Server::start("");
    let t = json!({"message_count": 2});
    s.write(
        "en1",
        msgs(&[("user", "My name is Alice and I live in Berlin. I love jazz."), ("assistant", "Nice!")]),
        t.clone(),
        "alice",
    )
    .await;
    eventually(10, "first profile", || async {
        let p = s.ok("profile/search", json!({"collection_name": "c", "filter": {"user_id": "alice"}})).await;
        (p["result_list"][0]["attributes"]["city"] == "Berlin").then_some(())
    })
    .await;
    s.write(
        "en2",
        msgs(&[("user", "I moved! I live in Munich now. I love jazz and I love hiking."), ("assistant", "Great.")]),
        t,
        "alice",
    )
    .await;
    let p = eventually(10, "updated profile", || async {
        let p = s.ok("profile/search", json!({"collection_name": "c", "filter": {"user_id": "alice"}})).await;
        (p["result_list"][0]["attributes"]["city"] == "Munich").then_some(p)
    })
    .await;
    assert_eq!(p["count"], 1, "one profile, updated in place");
    let attrs = &p["result_list"][0]["attributes"];
    assert_eq!(attrs["name"], "Alice");
    assert_eq!(attrs["likes"], json!(["jazz", "hiking"]), "no duplicates");
}

#[tokio::test]
async fn failed_jobs_are_retried_and_no_message_is_lost() {
    let s = Server::start("extraction:\n  retry_base_ms: 1500\n  fault_injection:\n    fail_first_attempts: 1\n");
    s.write(
        "retry",
        msgs(&[("user", "I live in Oslo"), ("assistant", "Cold but beautiful.")]),
        json!({"message_count": 2}),
        "u1",
    )
    .await;
    // First attempt fails: the job waits to retry, with its error visible, and the messages stay short-term.
    let job = eventually(10, "a failed first attempt", || async {
        let jobs = s.jobs().await;
        (jobs.len() == 1 && jobs[0]["attempts"] == 1 && jobs[0]["state"] == "queued").then(|| jobs[0].clone())
    })
    .await;
    assert!(job["last_error"].as_str().unwrap().contains("injected fault"), "{job}");
    let info = s.ok("session/info", json!({"collection_name": "c", "conversation_id": "retry"})).await;
    assert_eq!(info["messages"].as_array().unwrap().len(), 2, "still short-term while the job is not done");
    // The retry succeeds.
    let job = eventually(15, "the retry to succeed", || async {
        let jobs = s.jobs().await;
        (jobs[0]["state"] == "done").then(|| jobs[0].clone())
    })
    .await;
    assert_eq!(job["attempts"], 2);
    assert_eq!(s.events("u1").await.len(), 1);
    let info = s.ok("session/info", json!({"collection_name": "c", "conversation_id": "retry"})).await;
    assert!(info["messages"].as_array().unwrap().is_empty());
    assert_eq!(s.all_messages("retry").await.len(), 2);
}

#[tokio::test]
async fn jobs_that_exhaust_their_attempts_fail_visibly_and_keep_messages() {
    let s = Server::start(
        "extraction:\n  max_attempts: 2\n  retry_base_ms: 100\n  fault_injection:\n    fail_first_attempts: 5\n",
    );
    s.write("doomed", msgs(&[("user", "keep me")]), json!({"message_count": 1}), "u1").await;
    let job = eventually(15, "the job to fail", || async {
        let jobs = s.jobs().await;
        (jobs[0]["state"] == "failed").then(|| jobs[0].clone())
    })
    .await;
    assert_eq!(job["attempts"], 2);
    let failed = s.ok("job/list", json!({"collection_name": "c", "state": "failed"})).await;
    assert_eq!(failed["count"], 1);
    let info = s.ok("session/info", json!({"collection_name": "c", "conversation_id": "doomed"})).await;
    assert_eq!(info["messages"][0]["content"], "keep me", "a failed session's messages stay short-term");
}
