//! PostgreSQL in production: the server over TLS to the database (`sslmode=verify-full` with the
//! test cluster's CA, `scripts/setup-postgres`), a bad TLS setting stopping the start with its
//! name, and a database that crashes mid-load (503 with `Retry-After` while it is away, recovery
//! without a restart, nothing acknowledged lost). Runs when the suite runs on PostgreSQL.

use crate::harness::*;
use serde_json::json;

#[tokio::test]
async fn the_server_talks_to_postgres_over_verified_tls() {
    let (Some(url), Ok(dir)) = (postgres_url(), std::env::var("MNEMO_TEST_PG_TLS_DIR")) else {
        eprintln!(
            "the_server_talks_to_postgres_over_verified_tls: SKIPPED (needs MNEMO_TEST_STORE=postgres and MNEMO_TEST_PG_TLS_DIR)"
        );
        return;
    };
    // The certificate names db.mnemo.test; the connection goes to 127.0.0.1 through hostaddr.
    let tls = format!(
        "{}?hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert={dir}/ca.crt",
        url.replace("@127.0.0.1:", "@db.mnemo.test:")
    );
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, data, log) = (tmp.path().join("m.yaml"), tmp.path().join("data"), tmp.path().join("log"));
    std::fs::write(&cfg, "").unwrap();
    let env = [("MNEMO_STORE__URL", tls.as_str())];
    let mut s = Server::spawn_with_log(&cfg, &data, "127.0.0.1:0", &env, Some(&log)).expect("starts over TLS");
    // The log is written by a thread of its own: the line may land just after the server answers.
    eventually(10, "the TLS line in the log", || async {
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        (logged.contains("PostgreSQL: connected over TLS") && logged.contains("TLSv1.")).then_some(())
    })
    .await;

    let id = s
        .ok(
            "event/add",
            json!({"collection_name": "c", "event_type": "event_v1", "user_id": "u",
                   "memory_info": {"summary": "the user renewed the database certificate"}}),
        )
        .await["event_id"]
        .clone();
    let found = s
        .ok(
            "event/search",
            json!({"collection_name": "c", "query": "database certificate", "filter": {"user_id": "u"}}),
        )
        .await;
    assert_eq!(found["result_list"][0]["event_id"], id, "{found}");

    // A certificate from another CA is refused: the server does not start, and says why.
    s.kill9();
    let other = tls.replace("/ca.crt", "/other-ca.crt");
    let err =
        Server::spawn(&cfg, &data, "127.0.0.1:0", &[("MNEMO_STORE__URL", other.as_str())]).err().expect("refused");
    assert!(err.contains("cannot connect to PostgreSQL") && err.contains("UnknownIssuer"), "{err}");
    let bad = tls.replace("sslmode=verify-full", "sslmode=verify");
    let err = Server::spawn(&cfg, &data, "127.0.0.1:0", &[("MNEMO_STORE__URL", bad.as_str())]).err().expect("refused");
    assert!(
        err.contains("sslmode \"verify\" must be one of disable, allow, prefer, require, verify-ca, verify-full"),
        "{err}"
    );
}

/// A PostgreSQL cluster of this test's own (the shared one serves the other tests), on a free
/// port, through `scripts/setup-postgres`; stopped and removed when dropped.
struct OwnCluster {
    port: u16,
    url: String,
}

impl OwnCluster {
    fn script(port: u16, arg: Option<&str>) -> String {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/setup-postgres");
        let out = std::process::Command::new(script)
            .args(arg)
            .env("MNEMO_PG_PORT", port.to_string())
            .env("MNEMO_PG_DB", "mnemo_restart")
            .output()
            .expect("run setup-postgres");
        assert!(out.status.success(), "setup-postgres {arg:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn start() -> OwnCluster {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let out = Self::script(port, None);
        let url = out
            .lines()
            .find_map(|l| l.strip_prefix("export MNEMO_TEST_DATABASE_URL="))
            .expect("the URL is printed")
            .to_string();
        OwnCluster { port, url }
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        Self::script(self.port, Some("stop"));
        let _ = std::fs::remove_dir_all(format!("/tmp/mnemo-pg-{}", self.port));
        let _ = std::fs::remove_dir_all(format!("/tmp/mnemo-pg-{}-tls", self.port));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_crash_mid_load_answers_503_recovers_by_itself_and_loses_nothing_acknowledged() {
    if postgres_url().is_none() {
        eprintln!("a_database_crash_mid_load…: SKIPPED (needs MNEMO_TEST_STORE=postgres)");
        return;
    }
    let db = OwnCluster::start();
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, data) = (tmp.path().join("m.yaml"), tmp.path().join("data"));
    std::fs::write(&cfg, "").unwrap();
    let s = Server::spawn(&cfg, &data, "127.0.0.1:0", &[("MNEMO_STORE__URL", db.url.as_str())]).expect("starts");

    // One client writing message after message, each with its own idempotency key; it records
    // what was acknowledged and every other answer.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (client, base) = (s.client.clone(), s.base.clone());
    let flag = stop.clone();
    let load = tokio::spawn(async move {
        let (mut acked, mut refused, mut other) = (Vec::new(), Vec::new(), Vec::new());
        let mut i = 0usize;
        while !flag.load(std::sync::atomic::Ordering::SeqCst) {
            let body = json!({"collection_name": "c", "conversation_id": "load", "metadata": {"user_id": "u"},
                "extract_trigger": {"message_count": 100000},
                "messages": [{"role": "user", "content": format!("message number {i}"), "idempotency_key": format!("k{i}")}]});
            match client.post(format!("{base}/api/memory/session/streaming_write")).json(&body).send().await {
                Ok(r) if r.status().is_success() => acked.push(i),
                Ok(r) if r.status() == 503 => {
                    let retry = r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
                    let msg: serde_json::Value = r.json().await.unwrap();
                    refused.push((i, retry, msg["message"].as_str().unwrap_or_default().to_string()));
                }
                Ok(r) => other.push(format!("{i}: {} {}", r.status(), r.text().await.unwrap_or_default())),
                Err(e) => other.push(format!("{i}: {e}")),
            }
            i += 1;
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        (i, acked, refused, other)
    });
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;

    // The database crashes (no checkpoint) and stays away for a while.
    OwnCluster::script(db.port, Some("crash"));
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let (st, body) =
        s.post("event/search", json!({"collection_name": "c", "query": "message", "filter": {"user_id": "u"}})).await;
    assert_eq!(st, 503, "a read while the database is away: {body}");
    assert!(body["message"].as_str().unwrap().contains("database is unreachable"), "{body}");

    // It comes back (recovering from its WAL); the same server process serves again by itself.
    OwnCluster::script(db.port, None);
    eventually(30, "writes succeed again", || async {
        let (st, _) = s
            .post("event/search", json!({"collection_name": "c", "query": "message", "filter": {"user_id": "u"}}))
            .await;
        (st == 200).then_some(())
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (sent, acked, refused, other) = load.await.unwrap();

    assert!(other.is_empty(), "every answer was a success or a 503: {other:?}");
    assert!(!refused.is_empty(), "the outage was seen by the client");
    for (i, retry, msg) in &refused {
        assert_eq!(retry.as_deref(), Some("1"), "Retry-After on {i}");
        assert!(msg.contains("database is unreachable") && msg.contains("idempotency key"), "{i}: {msg}");
    }
    let last_refused = refused.iter().map(|r| r.0).max().unwrap();
    assert!(acked.iter().any(|&i| i > last_refused), "writes were acknowledged again after the outage");

    // Every acknowledged message survived the crash; retrying the refused ones with their keys
    // stores each exactly once.
    let stored: Vec<String> =
        s.all_messages("load").await.iter().map(|m| m["content"].as_str().unwrap().to_string()).collect();
    for i in &acked {
        assert!(stored.contains(&format!("message number {i}")), "acknowledged message {i} is stored");
    }
    for (i, _, _) in &refused {
        s.write(
            "load",
            json!([{"role": "user", "content": format!("message number {i}"), "idempotency_key": format!("k{i}")}]),
            json!({"message_count": 100000}),
            "u",
        )
        .await;
    }
    let stored = s.all_messages("load").await;
    assert_eq!(stored.len(), sent, "each of the {sent} messages once");
}

/// Two replicas extracting the same user's two sessions at the same moment: each job's own dedup
/// looks before the other commits, so only the store's check under the per-user lock can see the
/// twin. Every user ends with one event per distinct text, citing the messages of both sessions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_extracting_one_user_together_do_not_duplicate_memories() {
    if postgres_url().is_none() {
        eprintln!("replicas_extracting_one_user_together…: SKIPPED (needs MNEMO_TEST_STORE=postgres)");
        return;
    }
    const USERS: usize = 6;
    let dir = tempfile::tempdir().unwrap();
    let (cfg, data) = (dir.path().join("m.yaml"), dir.path().join("data"));
    // Slow jobs, and a second between each job's own near-duplicate check and its commit: both
    // sessions of a user are checked before either commits (one per replica for most users;
    // within one replica the service's per-user lock already orders them).
    std::fs::write(
        &cfg,
        "session:\n  poll_interval_ms: 50\nextraction:\n  workers: 2\n  fault_injection:\n    delay_ms: 500\n    commit_delay_ms: 1000\n",
    )
    .unwrap();
    let replicas: Vec<Server> =
        (0..2).map(|_| Server::spawn(&cfg, &data, "127.0.0.1:0", &[]).expect("replica starts")).collect();
    let trigger = json!({"message_count": 2});
    for u in 0..USERS {
        let talk = msgs(&[
            ("user", &format!("I keep {} beehives in the orchard behind the house", u + 2)),
            ("assistant", "That is a lot of honey!"),
        ]);
        for (r, conv) in ["a", "b"].iter().enumerate() {
            replicas[r].write(&format!("u{u}-{conv}"), talk.clone(), trigger.clone(), &format!("u{u}")).await;
        }
    }
    let s = &replicas[0];
    eventually(60, "every session extracted", || async {
        let jobs = s.ok("job/list", json!({"collection_name": "c", "state": "done", "limit": 100})).await;
        (jobs["jobs"].as_array().unwrap().len() == 2 * USERS).then_some(())
    })
    .await;
    for u in 0..USERS {
        let found = s
            .ok("event/search", json!({"collection_name": "c", "filter": {"user_id": format!("u{u}")}, "limit": 50}))
            .await;
        let events = found["result_list"].as_array().unwrap();
        assert_eq!(events.len(), 1, "user u{u}: one memory, not one per replica: {found}");
        let sources = events[0]["source_message_ids"].as_array().unwrap().len();
        assert_eq!(sources, 4, "the memory cites both sessions' messages: {found}");
    }
}

/// `psql` on `url`: the answer's lines (unaligned, tuples only).
fn psql(url: &str, sql: &str) -> Vec<String> {
    let out = std::process::Command::new("psql").arg(url).args(["-qAtc", sql]).output().expect("psql is installed");
    assert!(out.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect()
}

/// `store.shards`: users spread over two databases by the hash of their id. Each user's
/// conversation, extraction, events and profile land in that user's database only; search,
/// get_context, listings and forgetting see every database; a restart routes the same way.
#[tokio::test]
async fn users_spread_over_two_databases_and_every_read_sees_both() {
    let Some(url) = postgres_url() else {
        eprintln!("users_spread_over_two_databases…: SKIPPED (needs MNEMO_TEST_STORE=postgres)");
        return;
    };
    let run = format!("shard_{}_{}", std::process::id(), chrono_free_millis());
    let base = url.rsplit_once('/').unwrap().0.to_string();
    let urls: Vec<String> = (0..2).map(|i| format!("{base}/{run}_{i}")).collect();
    for (i, u) in urls.iter().enumerate() {
        psql(&url, &format!("CREATE DATABASE {run}_{i}"));
        psql(u, "CREATE EXTENSION IF NOT EXISTS vector");
    }
    let dir = tempfile::tempdir().unwrap();
    let (cfg, data) = (dir.path().join("m.yaml"), dir.path().join("data"));
    std::fs::write(&cfg, "session:\n  poll_interval_ms: 50\n").unwrap();
    let shards = format!("[{}, {}]", urls[0], urls[1]);
    let env =
        [("MNEMO_STORE__URL", "null"), ("MNEMO_STORE__SHARDS", shards.as_str()), ("MNEMO_STORE__SCHEMA", "sharded")];
    let mut s = Server::spawn(&cfg, &data, "127.0.0.1:0", &env).expect("starts on two databases");
    let health = s.client.get(format!("{}/healthz", s.base)).send().await.unwrap().text().await.unwrap();
    assert!(health.contains("sharded"), "{health}");

    let fruits = ["mango", "lychee", "papaya", "quince", "durian", "guava", "kumquat", "tamarind"];
    for (u, fruit) in fruits.iter().enumerate() {
        let talk = msgs(&[
            ("user", &format!("My favourite fruit is the {fruit}, I eat one every morning.")),
            ("assistant", "Noted."),
        ]);
        s.write(&format!("conv{u}"), talk, json!({"message_count": 2}), &format!("user{u}")).await;
    }
    eventually(30, "every extraction", || async {
        let jobs = s.jobs().await;
        (jobs.len() == fruits.len() && jobs.iter().all(|j| j["state"] == "done")).then_some(())
    })
    .await;

    // Each database holds whole users: every row of a user in one of them, both used.
    let users_in = |i: usize| {
        let mut v = psql(&urls[i], "SELECT DISTINCT user_ids FROM sharded.events ORDER BY 1");
        v.extend(psql(&urls[i], "SELECT DISTINCT '[\"' || user_id || '\"]' FROM sharded.profiles"));
        v.sort();
        v.dedup();
        v
    };
    let (a, b) = (users_in(0), users_in(1));
    assert!(!a.is_empty() && !b.is_empty(), "both databases hold users: {a:?} / {b:?}");
    assert!(a.iter().all(|u| !b.contains(u)), "a user lives in one database: {a:?} / {b:?}");
    assert_eq!(a.len() + b.len(), fruits.len(), "{a:?} / {b:?}");
    for i in 0..2 {
        let conversations = psql(&urls[i], "SELECT count(*) FROM sharded.conversations")[0].parse::<usize>().unwrap();
        assert_eq!(conversations, [a.len(), b.len()][i], "a conversation lives with its user");
        assert_eq!(psql(&urls[i], "SELECT count(*) FROM sharded.collections"), vec!["1"], "the collection on both");
    }

    // Reads see every database: a user's own search and context, a search over everyone.
    for (u, fruit) in fruits.iter().enumerate() {
        let user = format!("user{u}");
        let found = s.events(&user).await;
        assert!(found.iter().any(|e| e["memory_info"].to_string().contains(fruit)), "{user}: {found:?}");
        assert!(
            found.iter().all(|e| e["user_id"] == json!([user.clone()]) || e["user_id"] == json!(user)),
            "{found:?}"
        );
        let ctx = s
            .ok(
                "get_context",
                json!({"collection_name": "c", "conversation_id": "fresh", "query": "which fruit do I like?",
                       "event_search_config": {"filter": {"user_id": user}},
                       "profile_search_config": {"filter": {"user_id": user}}}),
            )
            .await;
        assert!(ctx["context_str"].as_str().unwrap().contains(fruit), "{user}: {ctx}");
    }
    let everyone: Vec<String> = (0..fruits.len()).map(|u| format!("user{u}")).collect();
    let all = s
        .ok(
            "event/search",
            json!({"collection_name": "c", "query": "favourite fruit", "limit": 50, "filter": {"user_id": everyone}}),
        )
        .await;
    assert_eq!(all["result_list"].as_array().unwrap().len(), fruits.len(), "{all}");

    // Forgetting reaches the user's database; a restart routes the same users the same way.
    s.ok("user/forget", json!({"collection_name": "c", "user_id": "user3"})).await;
    assert!(s.events("user3").await.is_empty());
    s.kill9();
    let s = Server::spawn(&cfg, &data, "127.0.0.1:0", &env).expect("restarts");
    for u in [0, 1, 2, 4, 5, 6, 7] {
        let found = s.events(&format!("user{u}")).await;
        assert!(found.iter().any(|e| e["memory_info"].to_string().contains(fruits[u])), "user{u} after restart");
    }
    drop(s);

    // A reordered or shortened list would hide users: the start is refused, saying why.
    let swapped = format!("[{}, {}]", urls[1], urls[0]);
    let env =
        [("MNEMO_STORE__URL", "null"), ("MNEMO_STORE__SHARDS", swapped.as_str()), ("MNEMO_STORE__SCHEMA", "sharded")];
    let err = Server::spawn(&cfg, &data, "127.0.0.1:0", &env).err().expect("a reordered list is refused");
    assert!(
        err.contains("store.shards[0]: this database is shard 1 of 2") && err.contains("keep the list's order"),
        "{err}"
    );
    let one = format!("[{}]", urls[0]);
    let env = [("MNEMO_STORE__URL", "null"), ("MNEMO_STORE__SHARDS", one.as_str()), ("MNEMO_STORE__SCHEMA", "sharded")];
    let err = Server::spawn(&cfg, &data, "127.0.0.1:0", &env).err().expect("a shortened list is refused");
    assert!(err.contains("shard 0 of 2") && err.contains("makes it shard 0 of 1"), "{err}");
    // A database holding an unsharded deployment's memories does not become a shard.
    let env = [("MNEMO_STORE__URL", urls[0].as_str()), ("MNEMO_STORE__SCHEMA", "unsharded")];
    let mut single = Server::spawn(&cfg, &data, "127.0.0.1:0", &env).expect("one database");
    single
        .ok(
            "event/add",
            json!({"collection_name": "c", "event_type": "event_v1", "user_id": "u", "memory_info": {"summary": "x"}}),
        )
        .await;
    single.kill9();
    let mixed = format!("[{}, {}]", urls[0], urls[1]);
    let env =
        [("MNEMO_STORE__URL", "null"), ("MNEMO_STORE__SHARDS", mixed.as_str()), ("MNEMO_STORE__SCHEMA", "unsharded")];
    let err = Server::spawn(&cfg, &data, "127.0.0.1:0", &env).err().expect("an unsharded database is refused");
    assert!(err.contains("holds the memories of an unsharded deployment"), "{err}");

    for i in 0..2 {
        psql(&url, &format!("DROP DATABASE {run}_{i} WITH (FORCE)"));
    }
}

fn chrono_free_millis() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
}
