//! `mnemo bench crash`: the crash harness. Runs this binary's `serve` on a temporary data
//! directory, drives concurrent `streaming_write` clients, SIGKILLs the server at a random moment,
//! restarts it, and repeats. At the end it checks, over HTTP:
//! - every acknowledged message is stored exactly once (idempotency keys make retries safe);
//! - every closed session is extracted exactly once (one job, done; no message in two events);
//! - `wait_timeout` deadlines still fire after all the crashes (no conversation left open).
//!
//! Exits non-zero on any violation.

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct CrashBench {
    pub cycles: usize,
    pub writers: usize,
    pub max_cycle_ms: u64,
    pub seed: u64,
}

fn spawn(exe: &std::path::Path, cfg: &std::path::Path, data: &std::path::Path) -> Result<(Child, String)> {
    let mut child = Command::new(exe)
        .args(["serve", "--config"])
        .arg(cfg)
        .args(["--bind", "127.0.0.1:0", "--data"])
        .arg(data)
        .env("MNEMO_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().context("stdout")?).read_line(&mut line)?;
    let addr = line
        .trim()
        .strip_prefix("mnemo listening on ")
        .and_then(|r| r.split(' ').next())
        .context("server did not start")?;
    Ok((child, addr.to_string()))
}

/// Waits until the server answers `/healthz` (a busy machine may take a while after "listening").
async fn ready(client: &reqwest::Client, base: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(r) = client.get(format!("{base}/healthz")).send().await
            && r.status().is_success()
        {
            return Ok(());
        }
        ensure!(Instant::now() < deadline, "the server at {base} did not answer /healthz within 60 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn post(client: &reqwest::Client, base: &str, path: &str, body: Value) -> Result<Value> {
    let r = client.post(format!("{base}/api/memory/{path}")).json(&body).send().await?;
    let v: Value = r.json().await?;
    ensure!(v["code"] == 0, "{path}: {v}");
    Ok(v["data"].clone())
}

pub async fn run(b: CrashBench) -> Result<()> {
    let exe = std::env::current_exe()?;
    let dir = tempfile::tempdir()?;
    let cfg = dir.path().join("mnemo.yaml");
    std::fs::write(&cfg, "session:\n  poll_interval_ms: 50\nextraction:\n  retry_base_ms: 100\n  job_lease_secs: 3\n")?;
    let data = dir.path().join("data");
    let client = crate::http_client()?.timeout(Duration::from_secs(10)).build()?;
    let acked: Arc<Mutex<HashSet<(usize, u64)>>> = Arc::default();
    let next: Arc<Mutex<Vec<u64>>> = Arc::new(Mutex::new(vec![0; b.writers]));
    let mut rng = b.seed | 1;
    let t0 = Instant::now();
    println!("crash harness: {} cycles, {} writers, kill after 0–{} ms each", b.cycles, b.writers, b.max_cycle_ms);
    // A cycle whose kill came before any write was acknowledged (a busy machine) proves nothing:
    // it is run again, up to a bound.
    let (mut cycle, mut attempts) = (0, 0);
    while cycle < b.cycles {
        attempts += 1;
        ensure!(
            attempts <= b.cycles * 5,
            "{attempts} attempts for {} cycles: too many cycles acknowledged nothing",
            b.cycles
        );
        let (mut child, base) = spawn(&exe, &cfg, &data)?;
        ready(&client, &base).await?;
        let before = acked.lock().unwrap().len();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut tasks = Vec::new();
        for w in 0..b.writers {
            let (client, base, acked, next, stop) =
                (client.clone(), base.clone(), acked.clone(), next.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    // Retry the same message until it is acknowledged: the idempotency key makes it safe.
                    let i = next.lock().unwrap()[w];
                    let body = json!({"collection_name": "crash", "conversation_id": format!("w{w}"),
                        "messages": [{"role": if i % 2 == 0 {"user"} else {"assistant"}, "content": format!("writer {w} message {i}"), "idempotency_key": format!("{w}-{i}")}],
                        "extract_trigger": {"message_count": 7, "wait_timeout": 2}, "metadata": {"user_id": format!("u{w}")}});
                    match client.post(format!("{base}/api/memory/session/streaming_write")).json(&body).send().await {
                        Ok(r) if r.status().is_success() => {
                            acked.lock().unwrap().insert((w, i));
                            next.lock().unwrap()[w] = i + 1;
                        }
                        _ => return,
                    }
                }
            }));
        }
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        tokio::time::sleep(Duration::from_millis(rng % b.max_cycle_ms.max(1))).await;
        child.kill()?; // SIGKILL
        child.wait()?;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in tasks {
            let _ = t.await;
        }
        let now = acked.lock().unwrap().len();
        if now == before {
            println!("cycle {cycle}: killed before any write was acknowledged; running it again");
            continue;
        }
        println!("cycle {cycle}: killed; {now} messages acknowledged so far");
        cycle += 1;
    }
    // Final run: let jobs finish and deadlines fire, then check everything.
    let (child, base) = spawn(&exe, &cfg, &data)?;
    // Killed however verification ends (an error or a panic must not leave the server running).
    struct KillOnDrop(Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let child = KillOnDrop(child);
    ready(&client, &base).await?;
    let acked_now = acked.lock().unwrap().clone();
    let result = verify(&client, &base, b.writers, &acked_now).await;
    drop(child);
    let (stored, sessions, events) = result?;
    println!(
        "ok: {} cycles in {:.1} s; {} acknowledged messages all stored exactly once ({stored} stored); {sessions} sessions, each extracted exactly once ({events} events); every idle deadline fired",
        b.cycles,
        t0.elapsed().as_secs_f64(),
        acked.lock().unwrap().len()
    );
    Ok(())
}

/// How long the work left after the last kill may stay the same before the harness gives up.
const STALL: Duration = Duration::from_secs(60);

async fn verify(
    client: &reqwest::Client,
    base: &str,
    writers: usize,
    acked: &HashSet<(usize, u64)>,
) -> Result<(usize, usize, usize)> {
    // Deadlines (2 s) fire and every job completes: the work left must shrink at least once a
    // minute (a busy machine may take long; a stuck one makes no progress).
    let (mut deadline, mut least) = (Instant::now() + STALL, u64::MAX);
    loop {
        let mut open = 0;
        for w in 0..writers {
            let info = post(
                client,
                base,
                "session/info",
                json!({"collection_name": "crash", "conversation_id": format!("w{w}")}),
            )
            .await;
            open += info.map(|i| i["pending_messages"].as_u64().unwrap_or(0)).unwrap_or(0);
        }
        let mut unfinished = 0;
        for state in ["queued", "running", "failed"] {
            let jobs =
                post(client, base, "job/list", json!({"collection_name": "crash", "state": state, "limit": 1000}))
                    .await?;
            unfinished += jobs["count"].as_u64().unwrap_or(0);
        }
        if open == 0 && unfinished == 0 {
            break;
        }
        if open + unfinished < least {
            (deadline, least) = (Instant::now() + STALL, open + unfinished);
        }
        if Instant::now() > deadline {
            bail!("no progress for {} s: {open} messages still open, {unfinished} jobs not done", STALL.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (mut stored_total, mut sessions_total, mut events_total) = (0, 0, 0);
    for w in 0..writers {
        let conv = format!("w{w}");
        let info =
            post(client, base, "session/info", json!({"collection_name": "crash", "conversation_id": conv})).await?;
        let mut contents: Vec<String> = Vec::new();
        for s in info["sessions"].as_array().unwrap() {
            ensure!(s["state"] == "extracted", "session {} is {}", s["session_id"], s["state"]);
            let jobs = post(
                client,
                base,
                "job/list",
                json!({"collection_name": "crash", "session_id": s["session_id"], "limit": 10}),
            )
            .await?;
            ensure!(
                jobs["count"] == 1 && jobs["jobs"][0]["state"] == "done",
                "session {}: jobs {}",
                s["session_id"],
                jobs["jobs"]
            );
            let d =
                post(client, base, "session/info", json!({"collection_name": "crash", "session_id": s["session_id"]}))
                    .await?;
            contents
                .extend(d["messages"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap().to_string()));
            let mut seen: HashSet<i64> = HashSet::new();
            for e in d["event_memory"].as_array().context("session/info: no event_memory")? {
                for id in e["source_message_ids"].as_array().unwrap() {
                    ensure!(
                        seen.insert(id.as_i64().unwrap()),
                        "message {id} in two events of one session: extracted twice"
                    );
                }
                events_total += 1;
            }
            sessions_total += 1;
        }
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for c in &contents {
            *counts.entry(c.as_str()).or_default() += 1;
        }
        ensure!(counts.values().all(|&n| n == 1), "writer {w}: a message is stored twice");
        for (aw, i) in acked.iter().filter(|(aw, _)| *aw == w) {
            let want = format!("writer {aw} message {i}");
            ensure!(counts.contains_key(want.as_str()), "acknowledged message lost: {want}");
        }
        stored_total += contents.len();
    }
    Ok((stored_total, sessions_total, events_total))
}
