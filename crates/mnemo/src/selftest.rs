//! `mnemo selftest isolation`: tenant isolation checked against a running server. With two API
//! keys for two projects, it plants marked memories as tenant A (two users) and tenant B, then
//! tries every read path with the other tenant's key and ids — search, context, profiles, session
//! info, jobs, export, stats, collection info, update/delete by id, and the MCP tools at `/mcp` —
//! and, inside tenant A, one user's reads against the other user's ids; optionally, that a
//! read-only key of A writes nothing and that an end-user token of A sees no other user's data. Any response carrying the other side's marker, or
//! any cross-tenant call that is not refused, is a leak. Exits non-zero on a leak.

use anyhow::{Result, bail};
use serde_json::{Value, json};

pub struct Isolation {
    pub url: String,
    pub key_a: String,
    pub project_a: String,
    pub key_b: String,
    pub project_b: String,
    /// A read-only key of project A (optional): its writes and admin calls must be refused.
    pub read_key_a: Option<String>,
    /// An end-user token of project A (optional): nothing of a1 or a2 may reach it.
    pub user_token_a: Option<String>,
}

struct Tenant<'a> {
    client: &'a reqwest::Client,
    url: &'a str,
    key: &'a str,
    project: &'a str,
}

impl Tenant<'_> {
    /// POSTs `body` (with this tenant's key) to `project`; returns status and raw text.
    async fn call(&self, path: &str, project: &str, mut body: Value) -> Result<(u16, String)> {
        body["project_name"] = json!(project);
        let r = self
            .client
            .post(format!("{}/api/memory/{path}", self.url))
            .bearer_auth(self.key)
            .json(&body)
            .send()
            .await?;
        Ok((r.status().as_u16(), r.text().await?))
    }

    /// Calls an MCP tool over `/mcp` as this tenant, scoped by headers. Returns a status-like code
    /// (403 for a tool error, i.e. refused or not found; 200 otherwise) and the text.
    async fn mcp(&self, project: &str, collection: &str, user: &str, tool: &str, args: Value) -> Result<(u16, String)> {
        let r = self
            .client
            .post(format!("{}/mcp", self.url))
            .bearer_auth(self.key)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .header("x-mnemo-project", project)
            .header("x-mnemo-collection", collection)
            .header("x-mnemo-user", user)
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}}))
            .send()
            .await?;
        let status = r.status().as_u16();
        let v: Value = r.json().await.unwrap_or_default();
        let refused = status >= 400 || v["result"]["isError"] == true || v["error"].is_object();
        Ok((if refused { 403 } else { 200 }, v.to_string()))
    }

    async fn ok(&self, path: &str, body: Value) -> Result<Value> {
        let (st, text) = self.call(path, self.project, body).await?;
        if st != 200 {
            bail!("setup call {path} failed: {st} {text}");
        }
        Ok(serde_json::from_str::<Value>(&text)?["data"].clone())
    }
}

pub async fn run(cfg: Isolation) -> Result<()> {
    let client = crate::http_client()?.build()?;
    let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis();
    let a = Tenant { client: &client, url: &cfg.url, key: &cfg.key_a, project: &cfg.project_a };
    let b = Tenant { client: &client, url: &cfg.url, key: &cfg.key_b, project: &cfg.project_b };
    let coll = format!("isolation-{nonce}");
    let (ua1, ua2, ub) = (format!("a1-{nonce}"), format!("a2-{nonce}"), format!("b1-{nonce}"));
    let (mark_a1, mark_a2, mark_b) = (format!("MARKA1x{nonce}"), format!("MARKA2x{nonce}"), format!("MARKBx{nonce}"));

    // Plant: conversations (extracted at once), events, profiles.
    let mut ids = Vec::new();
    for (t, user, mark) in [(&a, &ua1, &mark_a1), (&a, &ua2, &mark_a2), (&b, &ub, &mark_b)] {
        let conv = format!("conv-{user}");
        t.ok("session/streaming_write", json!({"collection_name": coll, "conversation_id": conv, "metadata": {"user_id": user},
            "messages": [{"role": "user", "content": format!("My name is {user}, codeword {mark}. I live in Oslo.")}], "extract_trigger": {"message_count": 1}})).await?;
        t.ok(
            "session/streaming_write",
            json!({"collection_name": coll, "conversation_id": format!("{conv}-open"), "metadata": {"user_id": user},
            "messages": [{"role": "user", "content": format!("pending {mark}")}]}),
        )
        .await?;
        let e = t.ok("event/add", json!({"collection_name": coll, "event_type": "event_v1", "user_id": user, "memory_info": {"summary": format!("{user} secret {mark}")}})).await?;
        let p = t
            .ok(
                "profile/add",
                json!({"collection_name": coll, "user_id": format!("{user}-p"), "content": format!("profile {mark}")}),
            )
            .await?;
        ids.push((
            conv,
            e["event_id"].as_str().unwrap_or_default().to_string(),
            p["profile_id"].as_str().unwrap_or_default().to_string(),
        ));
    }
    // Let extraction finish so events from conversations exist too.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;

    let mut tried = 0;
    let mut leaks: Vec<String> = Vec::new();
    let mut check = |what: String, status: u16, text: &str, forbidden: &[&String], must_refuse: bool| {
        tried += 1;
        if let Some(m) = forbidden.iter().find(|m| text.contains(m.as_str())) {
            leaks.push(format!("{what}: response contains {m}"));
        }
        if must_refuse && status < 400 {
            leaks.push(format!("{what}: answered {status} instead of refusing"));
        }
    };
    // Every read (and id-addressed write) of one side, as the other side.
    let probes = |conv: &str, event: &str, profile: &str, user: &str| -> Vec<(&'static str, Value)> {
        vec![
            (
                "event/search",
                json!({"collection_name": coll, "query": "codeword secret Oslo", "filter": {"user_id": user}, "limit": 100}),
            ),
            ("event/search", json!({"collection_name": coll, "filter": {"user_id": user}, "limit": 100})),
            (
                "get_context",
                json!({"collection_name": coll, "conversation_id": conv, "query": "codeword", "event_search_config": {"filter": {"user_id": user}}, "profile_search_config": {"filter": {"user_id": format!("{user}-p")}}}),
            ),
            ("get_context", json!({"collection_name": coll, "conversation_id": format!("{conv}-open")})),
            (
                "profile/search",
                json!({"collection_name": coll, "filter": {"user_id": [user.to_string(), format!("{user}-p")]}}),
            ),
            ("session/info", json!({"collection_name": coll, "conversation_id": conv})),
            ("session/info", json!({"collection_name": coll, "conversation_id": format!("{conv}-open")})),
            ("job/list", json!({"collection_name": coll, "conversation_id": conv})),
            ("user/export", json!({"collection_name": coll, "user_id": user})),
            ("user/export", json!({"user_id": user})),
            ("stats", json!({"collection_name": coll, "user_id": user})),
            ("collection/info", json!({"collection_name": coll})),
            ("collection/list", json!({})),
            (
                "event/update",
                json!({"collection_name": coll, "event_id": event, "memory_info": {"summary": "overwritten"}}),
            ),
            ("event/delete", json!({"collection_name": coll, "event_id": event})),
            ("profile/update", json!({"collection_name": coll, "profile_id": profile, "content": "overwritten"})),
            ("profile/delete", json!({"collection_name": coll, "profile_id": profile})),
            ("user/forget", json!({"collection_name": coll, "user_id": user})),
        ]
    };
    let marks_a = [&mark_a1, &mark_a2];
    // 1. Tenant B with A's project name: every call must be refused (403).
    for (i, user) in [&ua1, &ua2].iter().enumerate() {
        let (conv, event, profile) = &ids[i];
        for (path, body) in probes(conv, event, profile, user) {
            let (st, text) = b.call(path, &cfg.project_a, body).await?;
            check(format!("B→A {path}"), st, &text, &marks_a, true);
        }
    }
    // 2. Tenant B in its own project, with A's ids and users: nothing of A comes back, nothing of A changes.
    for (i, user) in [&ua1, &ua2].iter().enumerate() {
        let (conv, event, profile) = &ids[i];
        for (path, body) in probes(conv, event, profile, user) {
            let (st, text) = b.call(path, &cfg.project_b, body).await?;
            check(format!("B(own project)→A ids {path}"), st, &text, &marks_a, false);
        }
    }
    // 3. Tenant A towards B, both ways.
    let (conv, event, profile) = &ids[2];
    for (path, body) in probes(conv, event, profile, &ub) {
        let (st, text) = a.call(path, &cfg.project_b, body.clone()).await?;
        check(format!("A→B {path}"), st, &text, &[&mark_b], true);
        let (st, text) = a.call(path, &cfg.project_a, body).await?;
        check(format!("A(own project)→B ids {path}"), st, &text, &[&mark_b], false);
    }
    // 4. Inside tenant A: user a2's reads never show a1's memories (read paths only).
    let (conv2, _, _) = &ids[1];
    for (path, body) in probes(conv2, "evt_none", "prf_none", &ua2).into_iter().take(9) {
        let (st, text) = a.call(path, &cfg.project_a, body).await?;
        check(format!("a2→a1 {path}"), st, &text, &[&mark_a1], false);
    }
    // 5. The MCP endpoint: the other tenant's project is refused; with the other side's users and
    //    ids in one's own project nothing comes back and nothing is deleted.
    let mcp_probes = |event: &str| {
        vec![
            ("recall", json!({"query": "codeword Oslo"})),
            ("search_memory", json!({"query": "codeword secret Oslo", "limit": 50})),
            ("forget_memory", json!({"memory_id": event})),
        ]
    };
    for (i, user) in [&ua1, &ua2].iter().enumerate() {
        for (tool, args) in mcp_probes(&ids[i].1) {
            let (st, text) = b.mcp(&cfg.project_a, &coll, user, tool, args.clone()).await?;
            check(format!("B→A mcp {tool}"), st, &text, &marks_a, true);
            let (st, text) = b.mcp(&cfg.project_b, &coll, user, tool, args).await?;
            check(format!("B(own project)→A mcp {tool}"), st, &text, &marks_a, false);
        }
    }
    for (tool, args) in mcp_probes(&ids[0].1) {
        let (st, text) = a.mcp(&cfg.project_a, &coll, &ua2, tool, args).await?;
        check(format!("a2→a1 mcp {tool}"), st, &text, &[&mark_a1], false);
    }
    // 6. Least privilege inside tenant A: a read-only key writes and deletes nothing.
    if let Some(key) = &cfg.read_key_a {
        let r = Tenant { client: &client, url: &cfg.url, key, project: &cfg.project_a };
        let (conv, event, profile) = &ids[0];
        let writes = probes(conv, event, profile, &ua1)
            .into_iter()
            .filter(|(p, _)| {
                matches!(*p, "event/update" | "event/delete" | "profile/update" | "profile/delete" | "user/forget")
            })
            .chain([(
                "session/streaming_write",
                json!({"collection_name": coll, "conversation_id": conv, "metadata": {"user_id": ua1},
                       "messages": [{"role": "user", "content": "overwritten"}]}),
            )]);
        for (path, body) in writes {
            let (st, text) = r.call(path, &cfg.project_a, body).await?;
            check(format!("read-only key {path}"), st, &text, &[], true);
        }
        let (st, text) = r.mcp(&cfg.project_a, &coll, &ua1, "forget_memory", json!({"memory_id": ids[0].1})).await?;
        check("read-only key mcp forget_memory".into(), st, &text, &[], true);
    }
    // 7. An end-user token of tenant A: a1's and a2's memories never reach it, whatever it asks.
    if let Some(key) = &cfg.user_token_a {
        let u = Tenant { client: &client, url: &cfg.url, key, project: &cfg.project_a };
        for (i, user) in [&ua1, &ua2].iter().enumerate() {
            let (conv, event, profile) = &ids[i];
            for (path, mut body) in probes(conv, event, profile, user) {
                let (st, text) = u.call(path, &cfg.project_a, body.clone()).await?;
                check(format!("user token→{user} {path}"), st, &text, &marks_a, false);
                // The same call without naming anyone: confined to the token's own user.
                for k in ["user_id", "filter", "event_search_config", "profile_search_config"] {
                    body.as_object_mut().map(|m| m.remove(k));
                }
                let (st, text) = u.call(path, &cfg.project_a, body).await?;
                check(format!("user token (no user named) {path}"), st, &text, &marks_a, false);
            }
            for (tool, args) in mcp_probes(event) {
                let (st, text) = u.mcp(&cfg.project_a, &coll, user, tool, args).await?;
                check(format!("user token→{user} mcp {tool}"), st, &text, &marks_a, false);
            }
        }
    }
    // Everything planted is still there for its owner.
    for (t, user, mark) in [(&a, &ua1, &mark_a1), (&a, &ua2, &mark_a2), (&b, &ub, &mark_b)] {
        let r =
            t.ok("event/search", json!({"collection_name": coll, "filter": {"user_id": user}, "limit": 100})).await?;
        if !r.to_string().contains(mark.as_str()) {
            leaks.push(format!("{user}'s own memories were changed or deleted by the other side"));
        }
    }
    // Clean up the planted users.
    for (t, user) in [(&a, &ua1), (&a, &ua2), (&b, &ub)] {
        t.ok("user/forget", json!({"collection_name": coll, "user_id": user})).await?;
        t.ok("user/forget", json!({"collection_name": coll, "user_id": format!("{user}-p")})).await?;
    }
    if leaks.is_empty() {
        println!("isolation: {tried} cross-tenant and cross-user calls over 18 endpoints and 3 MCP tools, 0 leaks");
        Ok(())
    } else {
        for l in &leaks {
            println!("LEAK {l}");
        }
        bail!("{} leaks in {tried} calls", leaks.len())
    }
}
