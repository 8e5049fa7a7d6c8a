//! Least-privilege keys: a key carries the scopes it was given — `read`, `write`, `admin` — and
//! each endpoint and MCP tool needs one; `/metrics` (every tenant's figures) needs the metrics
//! key or an admin key for every project.

use crate::harness::*;
use serde_json::{Value, json};

const CONFIG: &str = "server:\n  metrics_key_env: SC_METRICS\n  api_keys:\n    \
    - {key_env: SC_READ, projects: [p], scopes: [read]}\n    \
    - {key_env: SC_WRITE, projects: [p], scopes: [read, write]}\n    \
    - {key_env: SC_ADMIN_P, projects: [p], scopes: [read, write, admin]}\n    \
    - {key_env: SC_ADMIN_ALL, projects: [\"*\"], scopes: [admin]}\n";

const KEYS: [(&str, &str); 5] = [
    ("SC_READ", "read-key-0123456789"),
    ("SC_WRITE", "write-key-0123456789"),
    ("SC_ADMIN_P", "admin-p-key-0123456789"),
    ("SC_ADMIN_ALL", "admin-all-key-0123456789"),
    ("SC_METRICS", "metrics-key-0123456789"),
];

async fn call(s: &Server, key: &str, path: &str, body: Value) -> (u16, Value) {
    let r = s.client.post(format!("{}/api/memory/{path}", s.base)).bearer_auth(key).json(&body).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn each_scope_allows_its_calls_and_no_more() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("mnemo.yaml");
    std::fs::write(&cfg, CONFIG).unwrap();
    let s = Server::spawn(&cfg, &dir.path().join("data"), "127.0.0.1:0", &KEYS).unwrap();
    let [read, write, admin_p, admin_all, metrics] = KEYS.map(|(_, k)| k);
    let c = |extra: Value| {
        let mut b = json!({"project_name": "p", "collection_name": "c"});
        b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        b
    };
    let write_body = c(json!({"conversation_id": "x", "messages": [{"role": "user", "content": "I like tea"}],
                              "extract_trigger": {"message_count": 1}, "metadata": {"user_id": "u"}}));
    // read: reads only.
    let (st, v) = call(&s, read, "session/streaming_write", write_body.clone()).await;
    assert_eq!(st, 403, "{v}");
    assert!(v["message"].as_str().unwrap().contains("lacks the write scope"), "{v}");
    // write: writes and reads, nothing irreversible.
    let (st, v) = call(&s, write, "session/streaming_write", write_body).await;
    assert_eq!(st, 200, "{v}");
    let (st, v) = call(&s, read, "event/search", c(json!({"filter": {"user_id": "u"}}))).await;
    assert_eq!(st, 200, "{v}");
    for (path, body) in [
        ("user/forget", c(json!({"user_id": "u"}))),
        ("collection/delete", c(json!({}))),
        ("maintenance/run", json!({"project_name": "p", "collection_name": "c"})),
    ] {
        let (st, v) = call(&s, write, path, body).await;
        assert_eq!(st, 403, "{path}: {v}");
        assert!(v["message"].as_str().unwrap().contains("lacks the admin scope"), "{v}");
    }
    // admin (of the project): the irreversible calls.
    let (st, v) = call(&s, admin_p, "user/forget", c(json!({"user_id": "u", "dry_run": true}))).await;
    assert_eq!(st, 200, "{v}");
    // An admin-only key has no read scope (each scope is granted on its own).
    let (st, _) = call(&s, admin_all, "event/search", c(json!({"filter": {"user_id": "u"}}))).await;
    assert_eq!(st, 403);

    // /metrics: every tenant's figures.
    let scrape = |key: &'static str| {
        let client = s.client.clone();
        let url = format!("{}/metrics", s.base);
        async move { client.get(url).bearer_auth(key).send().await.unwrap().status().as_u16() }
    };
    assert_eq!(scrape(read).await, 403);
    assert_eq!(scrape(admin_p).await, 403, "an admin of one project sees only its own figures (stats)");
    assert_eq!(scrape(admin_all).await, 200);
    assert_eq!(scrape(metrics).await, 200);

    // MCP tools: reading tools need read, the others write.
    let mcp = |key: &'static str, tool: &'static str, args: Value| {
        let client = s.client.clone();
        let url = format!("{}/mcp", s.base);
        async move {
            let body =
                json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}});
            let r = client
                .post(url)
                .bearer_auth(key)
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2025-06-18")
                .header("x-mnemo-project", "p")
                .header("x-mnemo-collection", "c")
                .header("x-mnemo-user", "u")
                .json(&body)
                .send()
                .await
                .unwrap();
            r.json::<Value>().await.unwrap()
        }
    };
    let v = mcp(read, "remember", json!({"content": "x"})).await;
    assert_eq!(v["result"]["isError"], true, "{v}");
    assert!(v["result"]["content"][0]["text"].as_str().unwrap().contains("lacks the write scope"), "{v}");
    let v = mcp(read, "search_memory", json!({"query": "tea"})).await;
    assert_eq!(v["result"]["isError"], false, "{v}");
}

/// An end-user token (a key with `user_id`) reads and writes its user's memories only, whatever
/// the body or the MCP headers say.
#[tokio::test]
async fn an_end_user_token_is_confined_to_its_user() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("mnemo.yaml");
    std::fs::write(
        &cfg,
        "server:\n  api_keys:\n    - {key_env: EU_PROJECT, projects: [p]}\n    \
         - {key_env: EU_ALICE, projects: [p], scopes: [read, write], user_id: alice}\n",
    )
    .unwrap();
    let (project, alice) = ("project-key-0123456789", "alice-token-0123456789");
    let s =
        Server::spawn(&cfg, &dir.path().join("data"), "127.0.0.1:0", &[("EU_PROJECT", project), ("EU_ALICE", alice)])
            .unwrap();
    let c = |extra: Value| {
        let mut b = json!({"project_name": "p", "collection_name": "c"});
        b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        b
    };
    let turn = |conv: &str, text: &str| {
        c(
            json!({"conversation_id": conv, "messages": [{"role": "user", "content": text}], "extract_trigger": {"message_count": 1}}),
        )
    };
    // The project key writes bob's memory; alice's token writes hers without naming herself.
    let mut bobs = turn("bob-chat", "Bob's secret: the safe code is 4711");
    bobs["metadata"] = json!({"user_id": "bob"});
    assert_eq!(call(&s, project, "session/streaming_write", bobs).await.0, 200);
    let (st, v) = call(&s, alice, "session/streaming_write", turn("alice-chat", "I like green tea")).await;
    assert_eq!(st, 200, "{v}");
    eventually(20, "both extracted", || async {
        let (_, v) = call(&s, project, "event/search", c(json!({"filter": {"user_id": ["alice", "bob"]}}))).await;
        (v["data"]["count"] == 2).then_some(())
    })
    .await;

    // Her searches see her memories only — with no filter, or her own.
    let (_, v) = call(&s, alice, "event/search", c(json!({"query": "safe code tea"}))).await;
    // The memories' texts only: an event id is hex, and "4711" can be part of one.
    let texts: Vec<String> =
        v["data"]["result_list"].as_array().unwrap().iter().map(|e| e["memory_info"].to_string()).collect();
    assert!(texts.iter().any(|t| t.contains("green tea")) && !texts.iter().any(|t| t.contains("4711")), "{v}");
    // Naming another user, in a filter or in metadata, is refused.
    for (path, body) in [
        ("event/search", c(json!({"filter": {"user_id": "bob"}}))),
        ("event/search", c(json!({"filter": {"user_id": ["alice", "bob"]}}))),
        ("session/streaming_write", {
            let mut b = turn("x", "hi");
            b["metadata"] = json!({"user_id": "bob"});
            b
        }),
        (
            "get_context",
            c(json!({"conversation_id": "alice-chat", "event_search_config": {"filter": {"user_id": "bob"}}})),
        ),
        ("user/export", c(json!({"user_id": "bob"}))),
    ] {
        let (st, v) = call(&s, alice, path, body).await;
        assert_eq!(st, 403, "{path}: {v}");
        assert!(v["message"].as_str().unwrap().contains("may only act for user \"alice\""), "{v}");
    }
    // Someone else's conversation is off limits, by reading or by writing into it.
    for (path, body) in [
        ("get_context", c(json!({"conversation_id": "bob-chat", "query": "code"}))),
        ("session/info", c(json!({"conversation_id": "bob-chat"}))),
        ("session/streaming_write", turn("bob-chat", "I am bob now")),
    ] {
        let (st, v) = call(&s, alice, path, body).await;
        assert_eq!(st, 403, "{path}: {v}");
        assert!(v["message"].as_str().unwrap().contains("is not a conversation of user \"alice\""), "{v}");
    }
    // Calls by id could reach anyone's data: refused for end-user tokens.
    let (st, _) = call(&s, alice, "event/delete", c(json!({"event_id": "evt_x"}))).await;
    assert_eq!(st, 403);
    // Her own context works.
    let (st, v) = call(&s, alice, "get_context", c(json!({"conversation_id": "alice-chat", "query": "tea"}))).await;
    assert_eq!(st, 200, "{v}");
    assert!(!v["data"]["context_str"].as_str().unwrap().contains("4711"));

    // Over MCP the token is the user: another X-Mnemo-User is refused.
    let mcp = |user: &'static str| {
        let client = s.client.clone();
        let url = format!("{}/mcp", s.base);
        async move {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                              "params": {"name": "search_memory", "arguments": {"query": "safe code"}}});
            let r = client
                .post(url)
                .bearer_auth(alice)
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2025-06-18")
                .header("x-mnemo-project", "p")
                .header("x-mnemo-collection", "c")
                .header("x-mnemo-user", user)
                .json(&body)
                .send()
                .await
                .unwrap();
            r.json::<Value>().await.unwrap()
        }
    };
    let v = mcp("bob").await;
    assert_eq!(v["result"]["isError"], true, "{v}");
    let v = mcp("alice").await;
    // Bob's words, not "4711": the tool's text shows event ids, which are hex.
    assert!(!v["result"]["content"][0]["text"].as_str().unwrap().contains("safe code is"), "{v}");
}

/// An end-user token asking about a conversation in a project its key may not use is refused for
/// the project, before any lookup (the answer says nothing about that conversation).
#[tokio::test]
async fn an_end_user_token_learns_nothing_about_other_projects() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("mnemo.yaml");
    std::fs::write(
        &cfg,
        "server:\n  api_keys:\n    - {key_env: EP_ALL}\n    - {key_env: EP_ALICE, projects: [p], user_id: alice}\n",
    )
    .unwrap();
    let (all, alice) = ("all-projects-key-0123456789", "alice-token-0123456789");
    let s =
        Server::spawn(&cfg, &dir.path().join("data"), "127.0.0.1:0", &[("EP_ALL", all), ("EP_ALICE", alice)]).unwrap();
    let body = json!({"project_name": "q", "collection_name": "c", "conversation_id": "bob-chat",
                      "messages": [{"role": "user", "content": "hi"}], "metadata": {"user_id": "bob"}});
    assert_eq!(call(&s, all, "session/streaming_write", body).await.0, 200);
    for conv in ["bob-chat", "no-such-chat"] {
        let (st, v) = call(
            &s,
            alice,
            "get_context",
            json!({"project_name": "q", "collection_name": "c", "conversation_id": conv}),
        )
        .await;
        assert_eq!(st, 403, "{v}");
        assert!(v["message"].as_str().unwrap().starts_with("project_name:"), "the same refusal either way: {v}");
    }
}
