//! Starting, stopping and talking to a real `mnemo serve` process.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_mnemo");

/// Config every test server gets unless it overrides: fast background polling.
const BASE_CONFIG: &str = "session:\n  poll_interval_ms: 50\nextraction:\n  retry_base_ms: 200\n  job_lease_secs: 3\n";

pub struct Server {
    child: Option<Child>,
    pub base: String,
    pub data: PathBuf,
    _dir: Option<tempfile::TempDir>,
    config: PathBuf,
    pub client: reqwest::Client,
    pub key: Option<String>,
}

impl Server {
    /// Starts a server with `extra` YAML appended to the base config, on a fresh data directory.
    pub fn start(extra: &str) -> Server {
        Self::start_with_env(extra, &[])
    }

    /// [`Server::start`] with extra environment variables (e.g. a key `api_key_env` names).
    pub fn start_with_env(extra: &str, env: &[(&str, &str)]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let config = dir.path().join("mnemo.yaml");
        std::fs::write(&config, format!("{BASE_CONFIG}{extra}")).unwrap();
        let mut s = Server::spawn(&config, &data, "127.0.0.1:0", env).expect("server starts");
        s._dir = Some(dir);
        s
    }

    /// Spawns `mnemo serve`; returns the error output if it exits instead of listening.
    pub fn spawn(config: &Path, data: &Path, bind: &str, env: &[(&str, &str)]) -> Result<Server, String> {
        Self::spawn_with_log(config, data, bind, env, None)
    }

    /// Like `spawn`; with `log`, the server logs at debug level into that file.
    pub fn spawn_with_log(
        config: &Path,
        data: &Path,
        bind: &str,
        env: &[(&str, &str)],
        log: Option<&Path>,
    ) -> Result<Server, String> {
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "--config"]).arg(config).args(["--bind", bind, "--data"]).arg(data);
        cmd.env("MNEMO_LOG", "warn").stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.envs(store_env(data));
        if let Some(path) = log {
            cmd.env("MNEMO_LOG", "debug").stderr(std::fs::File::create(path).unwrap());
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn mnemo");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let Some(addr) = line.trim().strip_prefix("mnemo listening on ").and_then(|r| r.split(' ').next()) else {
            let out = child.wait_with_output().unwrap();
            let log = log.map(|p| std::fs::read_to_string(p).unwrap_or_default()).unwrap_or_default();
            return Err(String::from_utf8_lossy(&out.stderr).into_owned() + &log);
        };
        Ok(Server {
            base: addr.to_string(),
            child: Some(child),
            data: data.to_path_buf(),
            _dir: None,
            config: config.to_path_buf(),
            client: http_client(),
            key: None,
        })
    }

    /// SIGKILL: no chance to flush or clean up.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// SIGTERM, then waits for a clean exit; returns the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("running");
        Command::new("kill").args(["-TERM", &c.id().to_string()]).status().unwrap();
        c.wait().unwrap()
    }

    /// Starts a new process on the same data directory and config.
    pub fn restart(&mut self) {
        self.kill9();
        let dir = self._dir.take();
        let mut s = Server::spawn(&self.config, &self.data, "127.0.0.1:0", &[]).expect("restart");
        s._dir = dir;
        s.key = self.key.take();
        *self = s;
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let mut req = self.client.post(format!("{}/api/memory/{path}", self.base)).json(&body);
        if let Some(k) = &self.key {
            req = req.bearer_auth(k);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{path}: non-JSON body {text:?}"));
        (status, v)
    }

    /// POSTs and asserts success; returns `data`.
    pub async fn ok(&self, path: &str, body: Value) -> Value {
        let (status, v) = self.post(path, body.clone()).await;
        assert_eq!(status, 200, "{path} {body} -> {v}");
        assert_eq!(v["code"], 0, "{path} -> {v}");
        assert!(v["request_id"].as_str().is_some_and(|s| !s.is_empty()));
        v["data"].clone()
    }

    pub async fn write(&self, conv: &str, messages: Value, trigger: Value, user: &str) -> Value {
        self.ok(
            "session/streaming_write",
            json!({"collection_name": "c", "conversation_id": conv, "messages": messages,
                   "extract_trigger": trigger, "metadata": {"user_id": user}}),
        )
        .await
    }

    /// Every message of a conversation, pending or closed, oldest first (by message id).
    pub async fn all_messages(&self, conv: &str) -> Vec<Value> {
        let info = self.ok("session/info", json!({"collection_name": "c", "conversation_id": conv})).await;
        let mut out: Vec<Value> = info["messages"].as_array().unwrap().clone();
        for s in info["sessions"].as_array().unwrap() {
            let d = self.ok("session/info", json!({"collection_name": "c", "session_id": s["session_id"]})).await;
            for m in d["messages"].as_array().unwrap() {
                if !out.iter().any(|o| o["message_id"] == m["message_id"]) {
                    out.push(m.clone());
                }
            }
        }
        out.sort_by_key(|m| m["message_id"].as_i64().unwrap());
        out
    }

    pub async fn jobs(&self) -> Vec<Value> {
        self.ok("job/list", json!({"collection_name": "c", "limit": 5000})).await["jobs"].as_array().unwrap().clone()
    }

    pub async fn events(&self, user: &str) -> Vec<Value> {
        self.ok(
            "event/search",
            json!({"collection_name": "c", "filter": {"user_id": user}, "limit": 5000}),
        )
        .await["result_list"]
            .as_array()
            .unwrap()
            .clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The store every test server runs on: the embedded store, or — with `MNEMO_TEST_STORE=postgres`
/// and `MNEMO_TEST_DATABASE_URL` — PostgreSQL, in a schema of its own per data directory (a
/// restart on the same directory finds its data again). The whole suite is the conformance
/// suite both stores pass (`./scripts/test` runs it once per store).
/// A client for the servers under test, with mnemo's own TLS recipe (reqwest is built without a
/// default TLS provider).
pub fn http_client() -> reqwest::Client {
    mnemo_providers::http::client_builder(&Default::default()).unwrap().build().unwrap()
}

pub fn postgres_url() -> Option<String> {
    match std::env::var("MNEMO_TEST_STORE").as_deref() {
        Ok("postgres") => {
            Some(std::env::var("MNEMO_TEST_DATABASE_URL").expect(
                "MNEMO_TEST_STORE=postgres needs MNEMO_TEST_DATABASE_URL (eval \"$(./scripts/setup-postgres)\")",
            ))
        }
        _ => None,
    }
}

/// Runs SQL statements on the test store of `data` (its SQLite file, or its PostgreSQL schema),
/// no server running; returns the first column of the last statement's first row, if a number.
pub async fn store_sql(data: &Path, sql: &str) -> Option<i64> {
    let env: std::collections::HashMap<String, String> = store_env(data).into_iter().collect();
    let Some(url) = env.get("MNEMO_STORE__URL") else {
        let conn = rusqlite::Connection::open(data.join("mnemo.db")).unwrap();
        let (init, last) = sql.trim().trim_end_matches(';').rsplit_once(';').unwrap_or(("", sql));
        conn.execute_batch(init).unwrap();
        let mut stmt = conn.prepare(last).unwrap();
        let mut rows = stmt.query([]).unwrap();
        return rows.next().unwrap().and_then(|r| r.get(0).ok());
    };
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let schema = &env["MNEMO_STORE__SCHEMA"];
    let messages = client.simple_query(&format!("SET search_path TO {schema}; {sql}")).await.unwrap();
    messages.iter().rev().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).and_then(|v| v.parse().ok()),
        _ => None,
    })
}

/// The environment that points a `mnemo` process at the test store for `data`.
pub fn store_env(data: &Path) -> Vec<(String, String)> {
    let Some(url) = postgres_url() else { return vec![] };
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    data.hash(&mut h);
    vec![
        ("MNEMO_STORE__ENGINE".into(), "postgres".into()),
        ("MNEMO_STORE__URL".into(), url),
        ("MNEMO_STORE__SCHEMA".into(), format!("t_{:016x}", h.finish())),
        ("MNEMO_STORE__POOL".into(), "6".into()),
    ]
}

/// Polls `f` until it returns `Some`, or panics after `secs` seconds.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {secs} s waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `f` until it breaks with a value, for as long as it makes progress: panics only after
/// `stall_secs` seconds in which the count it continues with did not grow (work that takes
/// minutes on a busy machine, yet must not hang).
pub async fn while_progressing<T, F, Fut>(stall_secs: u64, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::ops::ControlFlow<T, usize>>,
{
    let (mut best, mut since) = (0, Instant::now());
    loop {
        match f().await {
            std::ops::ControlFlow::Break(v) => return v,
            std::ops::ControlFlow::Continue(done) if done > best => (best, since) = (done, Instant::now()),
            std::ops::ControlFlow::Continue(_) => {}
        }
        assert!(
            since.elapsed() < Duration::from_secs(stall_secs),
            "no progress in {stall_secs} s ({best} done) waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn msgs(pairs: &[(&str, &str)]) -> Value {
    Value::Array(pairs.iter().map(|(r, c)| json!({"role": r, "content": c})).collect())
}
