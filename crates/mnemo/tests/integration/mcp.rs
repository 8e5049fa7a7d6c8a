//! The MCP server as an MCP client drives it: `mnemo mcp` on stdio (initialize, list tools, call
//! each), and the streamable-HTTP endpoint `/mcp` behind the API keys, scoped by headers.

use crate::harness::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

struct Stdio_ {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: i64,
}

impl Stdio_ {
    fn start(data: &std::path::Path) -> Self {
        let dir = data.parent().unwrap();
        let cfg = dir.join("mcp.yaml");
        std::fs::write(&cfg, "session:\n  poll_interval_ms: 50\nmcp:\n  user_id: alice\n  collection: agent\n")
            .unwrap();
        let mut child = Command::new(BIN)
            .args(["mcp", "--config"])
            .arg(&cfg)
            .arg("--data")
            .arg(data)
            .envs(store_env(data))
            .env("MNEMO_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Self { child, stdin, stdout, next_id: 1 }
    }

    fn send(&mut self, msg: Value) {
        writeln!(self.stdin, "{msg}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Sends a request and returns its response (skipping notifications).
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "the MCP server closed stdout");
            let v: Value =
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("stdout is only JSON-RPC: {e}: {line}"));
            if v["id"] == id {
                return v;
            }
        }
    }

    fn call(&mut self, tool: &str, args: Value) -> (bool, String) {
        let r = self.request("tools/call", json!({"name": tool, "arguments": args}));
        let text = r["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{r}")).to_string();
        (r["result"]["isError"] == true, text)
    }
}

impl Drop for Stdio_ {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const INIT: &str =
    r#"{"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "mnemo-test", "version": "1"}}"#;

#[test]
fn stdio_mcp_initialize_list_and_call_every_tool() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = Stdio_::start(&dir.path().join("data"));
    let init = m.request("initialize", serde_json::from_str(INIT).unwrap());
    assert_eq!(init["result"]["serverInfo"]["name"], "mnemo", "{init}");
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "the current revision is spoken: {init}");
    assert!(init["result"]["serverInfo"]["description"].as_str().is_some_and(|d| d.contains("memory")), "{init}");
    assert!(init["result"]["capabilities"]["tools"].is_object());
    m.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));

    let list = m.request("tools/list", json!({}));
    let tools = list["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["remember", "recall", "search_memory", "add_memory", "forget_memory"]);
    for t in tools {
        assert!(t["description"].as_str().unwrap().len() > 40, "an agent can follow it: {t}");
        assert_eq!(t["inputSchema"]["type"], "object");
    }

    let (err, text) = m.call("add_memory", json!({"summary": "The user prefers answers in Chinese."}));
    assert!(!err && text.starts_with("Saved as memory evt_"), "{text}");
    let (err, remembered) = m.call("remember", json!({"content": "我下周去东京出差，住在新宿"}));
    assert!(!err && remembered.starts_with("Remembered"), "{remembered}");
    let (_, found) = m.call("search_memory", json!({"query": "language preference", "limit": 3}));
    assert!(found.contains("prefers answers in Chinese"), "{found}");
    let id = found.split(['[', ']']).nth(1).unwrap().to_string();
    let (err, ctx) = m.call("recall", json!({"query": "东京"}));
    assert!(!err && ctx.contains("东京"), "the remembered turn is long-term memory already: {ctx} ({remembered})");
    assert!(!ctx.contains("Chinese"), "an unrelated memory stays below the relevance floor: {ctx}");
    let (_, ctx) = m.call("recall", json!({"query": "which language should answers be in"}));
    assert!(ctx.contains("Chinese"), "{ctx}");

    let (err, text) = m.call("forget_memory", json!({"memory_id": id}));
    assert!(!err && text.contains("Forgot"), "{text}");
    let (_, found) = m.call("search_memory", json!({"query": "language preference"}));
    assert!(!found.contains("prefers answers in Chinese"), "{found}");
    // Bad arguments are tool errors naming the argument, not crashes.
    let (err, text) = m.call("search_memory", json!({"query": "x", "limit": 0}));
    assert!(err && text.starts_with("limit: must be an integer in 1..=50"), "{text}");
    let (err, text) = m.call("forget_memory", json!({"memory_id": "evt_nope"}));
    assert!(err && text.contains("memory_id"), "{text}");
    let (err, text) = m.call("remember", json!({}));
    assert!(err && text.contains("content: is required"), "{text}");
    let unknown = m.request("tools/call", json!({"name": "drop_tables", "arguments": {}}));
    assert!(unknown["error"].is_object(), "{unknown}");
}

pub(crate) async fn mcp_post(s: &Server, key: Option<&str>, headers: &[(&str, &str)], body: Value) -> (u16, Value) {
    let mut req = s
        .client
        .post(format!("{}/mcp", s.base))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .json(&body);
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn http_mcp_is_behind_the_keys_and_scoped_by_headers() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("mnemo.yaml");
    std::fs::write(
        &cfg,
        "server:\n  api_keys:\n    - key_env: MCP_KEY_A\n      projects: [pa]\nsession:\n  poll_interval_ms: 50\n",
    )
    .unwrap();
    let mut s =
        Server::spawn(&cfg, &dir.path().join("data"), "127.0.0.1:0", &[("MCP_KEY_A", "key-a-0123456789abc")]).unwrap();
    s.key = Some("key-a-0123456789abc".into());
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": serde_json::from_str::<Value>(INIT).unwrap()});
    let (status, _) = mcp_post(&s, None, &[], init.clone()).await;
    assert_eq!(status, 401, "no key, no MCP");
    let (status, v) = mcp_post(&s, Some("key-a-0123456789abc"), &[], init).await;
    assert_eq!((status, &v["result"]["serverInfo"]["name"]), (200, &json!("mnemo")), "{v}");

    let scope = [("x-mnemo-project", "pa"), ("x-mnemo-collection", "agent"), ("x-mnemo-user", "bob")];
    let call = |id: i64, name: &str, args: Value| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": args}});
    let (_, v) = mcp_post(
        &s,
        Some("key-a-0123456789abc"),
        &scope,
        call(2, "add_memory", json!({"summary": "Bob drinks oolong tea"})),
    )
    .await;
    assert_eq!(v["result"]["isError"], false, "{v}");
    // Stored for bob in pa/agent, visible through the REST API.
    let found = s
        .ok("event/search", json!({"project_name": "pa", "collection_name": "agent", "filter": {"user_id": "bob"}}))
        .await;
    assert_eq!(found["result_list"][0]["memory_info"]["summary"], "Bob drinks oolong tea");
    // Another user sees nothing of bob's; a project the key may not use is refused.
    let other = [("x-mnemo-project", "pa"), ("x-mnemo-collection", "agent"), ("x-mnemo-user", "eve")];
    let (_, v) =
        mcp_post(&s, Some("key-a-0123456789abc"), &other, call(3, "search_memory", json!({"query": "tea"}))).await;
    assert!(v["result"]["content"][0]["text"].as_str().unwrap().starts_with("Nothing relevant"), "{v}");
    let bad = [("x-mnemo-project", "pb")];
    let (_, v) = mcp_post(&s, Some("key-a-0123456789abc"), &bad, call(4, "recall", json!({}))).await;
    assert_eq!(v["result"]["isError"], true);
    assert!(v["result"]["content"][0]["text"].as_str().unwrap().contains("may not use project \"pb\""), "{v}");
}

/// A body that is not JSON gets JSON-RPC's parse error, not the transport's plain-text refusal.
#[tokio::test]
async fn a_malformed_mcp_body_is_a_json_rpc_parse_error() {
    let s = Server::start("");
    let r = s
        .client
        .post(format!("{}/mcp", s.base))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body("{\"jsonrpc\": \"2.0\", \"method\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], -32700, "{v}");
    assert_eq!(v["id"], Value::Null);
    // Input validation failures are tool execution errors (MCP 2025-11-25): a result with
    // isError that the model reads, naming the argument and what it may be.
    let scope = [("x-mnemo-user", "bob")];
    let call = |args: Value| json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search_memory", "arguments": args}});
    for (args, says) in [
        (
            json!({"query": "x", "limt": 2}),
            "limt: unknown argument; the arguments of search_memory are as_of, limit, query",
        ),
        (json!({"query": "x", "limit": 0}), "limit: must be an integer in 1..=50, got 0"),
        (json!({"query": 7}), "query: must be a string, got 7"),
        (json!({}), "query: is required"),
    ] {
        let (_, v) = mcp_post(&s, None, &scope, call(args)).await;
        assert!(v.get("error").is_none(), "not a protocol error: {v}");
        assert_eq!(v["result"]["isError"], true, "{v}");
        assert!(v["result"]["content"][0]["text"].as_str().unwrap().starts_with(says), "{says}: {v}");
    }
    // An unknown tool stays a protocol error.
    let unknown =
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "nope", "arguments": {}}});
    let (_, v) = mcp_post(&s, None, &scope, unknown).await;
    assert_eq!(v["error"]["code"], -32602, "{v}");
}

/// Operators get one line per request (route, status, ms, request id) and no terminal colours in
/// files; `log.format: json` writes one JSON object per line with the request id on every line.
#[tokio::test]
async fn request_logs_carry_the_request_id_in_text_and_json() {
    for format in ["text", "json"] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("mnemo.yaml");
        std::fs::write(&cfg, format!("log:\n  format: {format}\n")).unwrap();
        let log = dir.path().join("server.log");
        let mut s =
            Server::spawn_with_log(&cfg, &dir.path().join("data"), "127.0.0.1:0", &[("MNEMO_LOG", "info")], Some(&log))
                .unwrap();
        let r = s
            .client
            .post(format!("{}/api/memory/collection/list", s.base))
            .header("x-request-id", "req-probe-42")
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        s.terminate();
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(!text.contains('\u{1b}'), "no ANSI escapes in a log file: {text}");
        let line = text.lines().find(|l| l.contains("req-probe-42")).unwrap_or_else(|| panic!("{text}"));
        assert!(line.contains("/api/memory/collection/list") && line.contains("200"), "{line}");
        if format == "json" {
            let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            assert_eq!(v["span"]["request_id"], "req-probe-42", "{v}");
            assert_eq!(v["fields"]["status"], 200, "{v}");
        }
    }
}

/// One request model: the same turns written through `session/streaming_write` and through MCP's
/// `remember` (for two users, so the second is not deduplicated against the first) become the
/// same stored rows — roles, names, contents — and the same extracted events, each its writer's
/// user's (both go through core's `WriteInput`).
#[tokio::test]
async fn the_same_turns_through_http_and_mcp_are_the_same_rows() {
    let s = Server::start("session:\n  poll_interval_ms: 50\n");
    let turns = [
        ("user", "I moved to Munich last month for a new job at Siemens"),
        ("assistant", "Congratulations on the move!"),
    ];
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": serde_json::from_str::<Value>(INIT).unwrap()});
    let scope = [("x-mnemo-collection", "c"), ("x-mnemo-user", "u-mcp")];
    let (status, _) = mcp_post(&s, None, &scope, init).await;
    assert_eq!(status, 200);
    for (i, (role, content)) in turns.iter().enumerate() {
        let last = i + 1 == turns.len();
        let args = json!({"content": content, "role": role, "conversation_id": "via-mcp", "batched": !last, "end_conversation": last});
        let call = json!({"jsonrpc": "2.0", "id": 2 + i, "method": "tools/call", "params": {"name": "remember", "arguments": args}});
        let (_, v) = mcp_post(&s, None, &scope, call).await;
        assert_eq!(v["result"]["isError"], false, "{v}");
    }
    s.write("via-http", msgs(&turns), json!({}), "u-http").await;
    s.ok("session/flush", json!({"collection_name": "c", "conversation_id": "via-http"})).await;

    let rows = |m: &Vec<Value>| -> Vec<(Value, Value, Value)> {
        m.iter().map(|m| (m["role"].clone(), m["name"].clone(), m["content"].clone())).collect()
    };
    let (mcp, http) = (s.all_messages("via-mcp").await, s.all_messages("via-http").await);
    assert_eq!(rows(&mcp).len(), 2);
    assert_eq!(rows(&mcp), rows(&http));
    let extracted = |user: &'static str| {
        let s = &s;
        async move {
            eventually(60, "the conversation extracted", || async {
                let events = s.events(user).await;
                (!events.is_empty()).then_some(events)
            })
            .await
            .iter()
            .map(|e| {
                assert_eq!(e["user_id"], json!([user]), "{e}");
                json!([e["memory_type"], e["memory_info"]["summary"], e["source_message_ids"].as_array().map(Vec::len)])
            })
            .collect::<Vec<_>>()
        }
    };
    assert_eq!(extracted("u-mcp").await, extracted("u-http").await);
}
