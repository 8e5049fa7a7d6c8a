//! The write path over HTTP: trigger reasons, the long-message rule, idle timeouts (also across a
//! restart), flush, session_add, idempotent retries, graceful shutdown.

use crate::harness::*;
use serde_json::json;

#[tokio::test]
async fn message_count_and_token_count_each_trigger() {
    let s = Server::start("");
    let t = json!({"token_count": 1000, "message_count": 4});
    let d = s.write("mc", msgs(&[("user", "hello"), ("assistant", "hi there")]), t.clone(), "u1").await;
    assert_eq!(d["extraction"]["triggered"], false);
    assert_eq!(d["pending_messages"], 2);
    assert!(d["pending_tokens"].as_u64().unwrap() > 0);
    let d = s.write("mc", msgs(&[("user", "how are you"), ("assistant", "fine")]), t, "u1").await;
    assert_eq!(d["extraction"]["triggered"], true);
    assert_eq!(d["extraction"]["reason"], "message_count");
    assert!(d["extraction"]["session_id"].as_str().unwrap().starts_with("ses_"));
    assert_eq!(d["pending_messages"], 0);

    // Token trigger: o200k counts ~1 token per Chinese character; 30 tokens fire on the 3rd write.
    let t = json!({"token_count": 30, "message_count": 100});
    let line = "我家宝宝一岁最近喝奶粉总胀气"; // 14 characters
    let d1 = s.write("tc", msgs(&[("user", line)]), t.clone(), "u1").await;
    let d2 = s.write("tc", msgs(&[("user", line)]), t.clone(), "u1").await;
    assert_eq!(d2["extraction"]["triggered"], false, "{d1} {d2}");
    let d3 = s.write("tc", msgs(&[("user", line)]), t, "u1").await;
    assert_eq!(d3["extraction"]["reason"], "token_count", "{d3}");
}

#[tokio::test]
async fn a_single_message_larger_than_token_count_fires_at_once() {
    let s = Server::start("");
    let long = "The quick brown fox jumps over the lazy dog. ".repeat(30);
    let d = s.write("long", msgs(&[("user", &long)]), json!({"token_count": 100}), "u1").await;
    assert_eq!(d["extraction"]["triggered"], true);
    assert_eq!(d["extraction"]["reason"], "token_count");
}

#[tokio::test]
async fn idle_conversation_closes_after_wait_timeout() {
    let s = Server::start("");
    s.write("idle", msgs(&[("user", "我住在杭州")]), json!({"wait_timeout": 1}), "u-idle").await;
    let sessions = eventually(10, "the idle conversation to close", || async {
        let info = s.ok("session/info", json!({"collection_name": "c", "conversation_id": "idle"})).await;
        let sessions = info["sessions"].as_array().unwrap().clone();
        (!sessions.is_empty()).then_some(sessions)
    })
    .await;
    assert_eq!(sessions[0]["reason"], "wait_timeout");
    // The rules extractor then runs: the profile learns the city.
    eventually(10, "the profile to appear", || async {
        let p = s.ok("profile/search", json!({"collection_name": "c", "filter": {"user_id": "u-idle"}})).await;
        (p["result_list"][0]["attributes"]["city"] == "杭州").then_some(())
    })
    .await;
}

#[tokio::test]
async fn idle_deadline_survives_a_restart() {
    let mut s = Server::start("");
    s.write("idle-r", msgs(&[("user", "remember me")]), json!({"wait_timeout": 2}), "u1").await;
    s.kill9();
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await; // the deadline passes while down
    s.restart();
    let info = eventually(10, "the deadline to fire after restart", || async {
        let info = s.ok("session/info", json!({"collection_name": "c", "conversation_id": "idle-r"})).await;
        (!info["sessions"].as_array().unwrap().is_empty()).then_some(info)
    })
    .await;
    assert_eq!(info["sessions"][0]["reason"], "wait_timeout");
    assert_eq!(info["pending_messages"], 0);
}

#[tokio::test]
async fn flush_and_session_add() {
    let s = Server::start("");
    s.write("f", msgs(&[("user", "one"), ("assistant", "two")]), json!({}), "u1").await;
    let d = s.ok("session/flush", json!({"collection_name": "c", "conversation_id": "f"})).await;
    assert_eq!(d["extraction"]["reason"], "flush");
    let d = s.ok("session/flush", json!({"collection_name": "c", "conversation_id": "f"})).await;
    assert_eq!(d["extraction"]["triggered"], false, "nothing left to flush");

    let d = s
        .ok(
            "session/add",
            json!({"collection_name": "c", "conversation_id": "batch", "metadata": {"user_id": "u2"},
                   "messages": [{"role": "user", "content": "I live in Paris"}, {"role": "assistant", "content": "Lovely city."}]}),
        )
        .await;
    assert_eq!(d["accepted"], 2);
    let sid = d["session_id"].as_str().unwrap().to_string();
    let detail = eventually(10, "session_add extraction", || async {
        let d = s.ok("session/info", json!({"collection_name": "c", "session_id": sid})).await;
        (d["jobs"][0]["state"] == "done").then_some(d)
    })
    .await;
    assert_eq!(detail["messages"].as_array().unwrap().len(), 2);
    assert_eq!(detail["sessions"][0]["reason"], "session_add");
    assert_eq!(detail["event_memory"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn retried_writes_with_an_idempotency_key_are_stored_once() {
    let s = Server::start("");
    let body = json!([{"role": "user", "content": "pay the invoice", "idempotency_key": "msg-1"}]);
    let first = s.write("idem", body.clone(), json!({}), "u1").await;
    let again = s.write("idem", body.clone(), json!({}), "u1").await;
    assert_eq!(
        (first["accepted"].clone(), again["accepted"].clone(), again["duplicates"].clone()),
        (json!(1), json!(0), json!(1))
    );
    assert_eq!(s.all_messages("idem").await.len(), 1);
    // A different key is a different message.
    s.write(
        "idem",
        json!([{"role": "user", "content": "pay the invoice", "idempotency_key": "msg-2"}]),
        json!({}),
        "u1",
    )
    .await;
    assert_eq!(s.all_messages("idem").await.len(), 2);
}

#[tokio::test]
async fn sigterm_stops_cleanly() {
    let mut s = Server::start("");
    s.write("t", msgs(&[("user", "hi")]), json!({}), "u1").await;
    let status = s.terminate();
    assert!(status.success(), "exit status {status:?}");
    s.restart();
    assert_eq!(s.all_messages("t").await.len(), 1);
}
