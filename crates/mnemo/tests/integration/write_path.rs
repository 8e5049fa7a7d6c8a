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

/// VikingDB's session/add fields the VikingDB SDK cannot send (it has no parameter for them):
/// `extract_memory_type` limits what is extracted, `ttl_relative` / `ttl_absolute` set when the
/// extracted events expire (in VikingDB's ranges), `metadata.time` dates the messages, and a
/// re-used `session_id` replaces the session's events.
#[tokio::test]
async fn session_add_takes_vikingdb_types_ttls_and_replaces_a_reused_session_id() {
    let server = Server::start("");
    let s = &server;
    let add = |body: serde_json::Value| async move {
        let mut b = json!({"collection_name": "c", "metadata": {"default_user_id": "vt"}});
        b.as_object_mut().unwrap().extend(body.as_object().unwrap().clone());
        s.ok("session/add", b).await
    };
    let wait = |sid: &'static str| async move {
        eventually(20, "extraction", || async {
            let d = s.ok("session/info", json!({"collection_name": "c", "session_id": sid})).await;
            (d["jobs"].as_array().is_some_and(|j| !j.is_empty() && j.iter().all(|j| j["state"] == "done"))).then_some(d)
        })
        .await
    };
    // Only profiles: no event.
    add(json!({"session_id": "only_profile", "extract_memory_type": ["sys_profile_v1"],
               "messages": [{"role": "user", "content": "I love chess"}]}))
    .await;
    let d = wait("only_profile").await;
    assert_eq!(d["event_memory"], json!([]));
    let p = s.ok("profile/search", json!({"collection_name": "c", "filter": {"user_id": "vt"}})).await;
    assert!(p["result_list"][0]["memory_info"].to_string().contains("chess"), "{p}");
    // Only events, expiring 60 s after extraction; messages dated by metadata.time.
    add(json!({"session_id": "ttl", "extract_memory_type": ["event_v1"], "ttl_relative": 60,
               "metadata": {"default_user_id": "vt", "time": 1_700_000_000_000_i64},
               "messages": [{"role": "user", "content": "I love go"}]}))
    .await;
    let d = wait("ttl").await;
    let e = &d["event_memory"][0];
    assert_eq!(d["messages"][0]["time"], 1_700_000_000_000_i64);
    let expires = e["expires_at"].as_i64().expect("an expiry");
    assert!((expires - e["created_at"].as_i64().unwrap() - 60_000).abs() < 5_000, "{e}");
    // ttl_absolute wins and is checked against the messages' time (at most ten years after).
    add(json!({"session_id": "abs", "ttl_absolute": 1_700_000_100_000_i64, "ttl_relative": 60,
               "messages": [{"role": "user", "content": "noted", "time": 1_700_000_000_000_i64}]}))
    .await;
    assert_eq!(wait("abs").await["event_memory"][0]["expires_at"], 1_700_000_100_000_i64);
    for (body, field) in [
        (json!({"ttl_relative": 0}), "ttl_relative:"),
        (json!({"ttl_relative": 315_576_001}), "ttl_relative:"),
        (json!({"ttl_absolute": 1_699_999_999_999_i64}), "ttl_absolute:"),
        (json!({"session_id": "a", "conversation_id": "b"}), "session_id:"),
        (json!({"metadata": {"time": "noon"}}), "metadata.time:"),
    ] {
        let mut b = json!({"collection_name": "c", "messages": [{"role": "user", "content": "x", "time": 1_700_000_000_000_i64}]});
        b.as_object_mut().unwrap().extend(body.as_object().unwrap().clone());
        let (st, v) = s.post("session/add", b).await;
        assert_eq!(st, 400, "{v}");
        assert!(v["message"].as_str().unwrap().starts_with(field), "{v}");
        assert_eq!(v["ResponseMetadata"]["Error"]["Code"], 1_000_003);
    }
    // streaming_write keeps its conversation_id and refuses a session_id.
    let (st, v) = s
        .post(
            "session/streaming_write",
            json!({"collection_name": "c", "session_id": "x", "messages": [{"role": "user", "content": "x"}]}),
        )
        .await;
    assert_eq!((st, v["message"].as_str().unwrap().starts_with("session_id:")), (400, true), "{v}");
    // A re-used session_id replaces the session whole.
    let r = add(json!({"session_id": "ttl", "messages": [{"role": "user", "content": "I love checkers"}]})).await;
    assert_eq!(r["replaced"], true);
    let d = wait("ttl").await;
    assert_eq!(d["messages"].as_array().unwrap().len(), 1);
    let texts = d["event_memory"].to_string();
    assert!(texts.contains("checkers") && !texts.contains(" go"), "{texts}");
}

/// `session/delete`: a conversation goes whole — messages, sessions, events — and what it changed
/// in the user's profile is withdrawn; other conversations stay.
#[tokio::test]
async fn a_deleted_conversation_takes_its_events_and_profile_changes_with_it() {
    let s = Server::start("");
    s.write("gone", msgs(&[("user", "I love sailing"), ("assistant", "Nice.")]), json!({"message_count": 2}), "dl")
        .await;
    s.write("kept", msgs(&[("user", "I love chess"), ("assistant", "Nice.")]), json!({"message_count": 2}), "dl").await;
    eventually(20, "extraction", || async { s.jobs().await.iter().all(|j| j["state"] == "done").then_some(()) }).await;
    let profile = || async {
        s.ok("profile/search", json!({"collection_name": "c", "filter": {"user_id": "dl"}})).await.to_string()
    };
    assert!(profile().await.contains("sailing"));
    let d = s.ok("session/delete", json!({"collection_name": "c", "conversation_id": "gone"})).await;
    assert_eq!(d["sessions"], 1);
    let (st, _) = s.post("session/info", json!({"collection_name": "c", "conversation_id": "gone"})).await;
    assert_eq!(st, 404);
    let events = s.events("dl").await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["conversation_id"], "kept");
    let p = profile().await;
    assert!(p.contains("chess") && !p.contains("sailing"), "{p}");
    let (st, _) = s.post("session/delete", json!({"collection_name": "c", "conversation_id": "gone"})).await;
    assert_eq!(st, 404, "a second time: no such conversation");
}
