//! Time validity over HTTP: a user who moved and changed jobs. The profile keeps what it was
//! (`history`, `since`) and get_context shows the change with its span; `as_of` on
//! `profile/search`, `event/search`, `get_context` and the MCP tools answers with what was true then; events
//! carry `valid_from` (a stated "last month" starts before the message) and `valid_to`.

use crate::harness::*;
use serde_json::{Value, json};

const DAY: i64 = 86_400_000;
/// 2023-11-14T22:13:20Z.
const T1: i64 = 1_700_000_000_000;

fn at(t: i64, pairs: &[(&str, &str)]) -> Value {
    let mut m = msgs(pairs);
    for (i, x) in m.as_array_mut().unwrap().iter_mut().enumerate() {
        x["time"] = json!(t + i as i64 * 1000);
    }
    m
}

#[tokio::test]
async fn as_of_answers_with_what_was_true_then() {
    let s = Server::start("");
    let t2 = T1 + 100 * DAY; // 2024-02-22
    s.write(
        "s1",
        at(T1, &[("user", "I live in Berlin and I work at Siemens."), ("assistant", "Berlin is a great city.")]),
        json!({"message_count": 2}),
        "u",
    )
    .await;
    eventually(20, "the first extraction", || async {
        s.jobs().await.iter().all(|j| j["state"] == "done").then_some(())
    })
    .await;
    s.write(
        "s2",
        at(
            t2,
            &[
                ("user", "Big news: I moved to Munich last month, and I started working at BMW."),
                ("assistant", "Congratulations on the move and the new job!"),
            ],
        ),
        json!({"message_count": 2}),
        "u",
    )
    .await;
    eventually(20, "extraction", || async {
        let jobs = s.jobs().await;
        (jobs.len() == 2 && jobs.iter().all(|j| j["state"] == "done")).then_some(())
    })
    .await;

    // The profile now, with what it replaced.
    let profile = |as_of: Option<i64>| {
        let mut body = json!({"collection_name": "c", "filter": {"user_id": "u"}});
        if let Some(t) = as_of {
            body["as_of"] = json!(t);
        }
        s.ok("profile/search", body)
    };
    let now = profile(None).await;
    let p = &now["result_list"][0];
    assert_eq!(
        (p["attributes"]["city"].clone(), p["attributes"]["workplace"].clone()),
        (json!("Munich"), json!("BMW")),
        "{now}"
    );
    assert_eq!(p["since"]["city"], json!(t2 + 1000), "since the session said it: {p}");
    let berlin = p["history"].as_array().unwrap().iter().find(|h| h["attribute"] == "city").expect("history kept");
    assert_eq!(
        (berlin["value"].clone(), berlin["valid_from"].clone(), berlin["valid_to"].clone()),
        (json!("Berlin"), json!(T1 + 1000), json!(t2 + 1000))
    );
    // As of a day in between: Berlin and Siemens; before anything was said: no profile.
    let then = profile(Some(T1 + 10 * DAY)).await;
    let p = &then["result_list"][0];
    assert_eq!(
        (p["attributes"]["city"].clone(), p["attributes"]["workplace"].clone()),
        (json!("Berlin"), json!("Siemens")),
        "{then}"
    );
    assert_eq!(profile(Some(T1 - DAY)).await["count"], 0);

    // Events: the move's validity starts last month (January 2024), before its message.
    let search = |as_of: Option<i64>| {
        let mut body = json!({"collection_name": "c", "query": "where does the user live", "filter": {"user_id": "u"}});
        if let Some(t) = as_of {
            body["as_of"] = json!(t);
        }
        s.ok("event/search", body)
    };
    let found = search(None).await;
    let moved = found["result_list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| {
            e["session_id"].as_str().is_some()
                && e["memory_info"]["summary"].as_str().unwrap_or_default().contains("Munich")
        })
        .expect("the move")
        .clone();
    let jan = 1_704_067_200_000i64; // 2024-01-01T00:00Z
    assert_eq!((moved["valid_from"].clone(), moved["valid_to"].clone()), (json!(jan), Value::Null), "{moved}");
    assert_eq!(moved["time"], json!(t2));
    let then = search(Some(T1 + 10 * DAY)).await;
    let texts: Vec<&str> =
        then["result_list"].as_array().unwrap().iter().map(|e| e["memory_info"]["summary"].as_str().unwrap()).collect();
    assert!(!texts.is_empty() && texts.iter().all(|t| t.contains("Berlin") && !t.contains("Munich")), "{then}");
    let early = search(Some(jan + DAY)).await;
    assert_eq!(early["count"], 2, "in January both were true as far as is known: {early}");

    // get_context: the change with its span now; as of then, Berlin alone.
    let context = |as_of: Option<i64>| {
        let mut body = json!({"collection_name": "c", "conversation_id": "s3", "query": "where do I live?",
                              "event_search_config": {"filter": {"user_id": "u"}}});
        if let Some(t) = as_of {
            body["as_of"] = json!(t);
        }
        s.ok("get_context", body)
    };
    let ctx = context(None).await;
    let text = ctx["context_str"].as_str().unwrap();
    assert!(text.contains("City: Munich (since 2024-02-22; before: Berlin)"), "{text}");
    assert!(text.contains("Workplace: BMW (since 2024-02-22; before: Siemens)"), "{text}");
    let ctx = context(Some(T1 + 10 * DAY)).await;
    let text = ctx["context_str"].as_str().unwrap();
    assert!(text.contains("City: Berlin") && !text.contains("Munich") && !text.contains("BMW"), "{text}");

    // The MCP tools answer as of then too: a date is the end of that day (2023-11-24 here).
    let tool = |name: &'static str, args: Value| {
        let body =
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": args}});
        let s = &s;
        async move {
            let (_, v) =
                crate::mcp::mcp_post(s, None, &[("x-mnemo-collection", "c"), ("x-mnemo-user", "u")], body).await;
            (
                v["result"]["isError"] == json!(true),
                v["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string(),
            )
        }
    };
    let (_, now) = tool("recall", json!({"query": "where do I live?"})).await;
    assert!(now.contains("City: Munich"), "{now}");
    let (_, then) = tool("recall", json!({"query": "where do I live?", "as_of": "2023-11-24"})).await;
    assert!(then.contains("City: Berlin") && !then.contains("Munich") && !then.contains("BMW"), "{then}");
    let (_, then) =
        tool("search_memory", json!({"query": "where does the user live", "as_of": "2023-11-24T12:00:00Z"})).await;
    assert!(then.contains("Berlin") && !then.contains("Munich"), "{then}");
    let (error, text) = tool("search_memory", json!({"query": "where", "as_of": "last spring"})).await;
    assert!(error && text.starts_with("as_of: must be a date (YYYY-MM-DD) or an RFC 3339 time"), "{text}");

    // The dashboard's list of users: two conversations, the events extracted from them.
    let users = s.ok("user/list", json!({"collection_name": "c"})).await;
    let u = &users["users"][0];
    assert_eq!((u["user_id"].clone(), u["conversation_count"].clone()), (json!("u"), json!(2)), "{users}");
    assert!(u["event_count"].as_u64().unwrap() >= 2 && u["last_active"].as_i64().is_some(), "{users}");

    // The entity's page: its events and the profile values that name it.
    let bmw = s.ok("entity/get", json!({"collection_name": "c", "user_id": "u", "entity": "bmw"})).await;
    assert_eq!(bmw["entity"]["name"], "BMW", "{bmw}");
    assert_eq!(
        bmw["profile_values"],
        json!([{"profile_type": "profile_v1", "attribute": "workplace", "value": "BMW"}]),
        "{bmw}"
    );

    // A time that is no time is refused, naming the field.
    for (path, body) in [
        ("event/search", json!({"collection_name": "c", "filter": {"user_id": "u"}, "as_of": -1})),
        ("profile/search", json!({"collection_name": "c", "filter": {"user_id": "u"}, "as_of": -1})),
        ("get_context", json!({"collection_name": "c", "conversation_id": "s3", "as_of": 253_402_300_800_000i64})),
    ] {
        let (status, v) = s.post(path, body).await;
        assert_eq!(status, 400, "{path}: {v}");
        assert!(v["message"].as_str().unwrap().starts_with("as_of"), "{path}: {v}");
    }
}
