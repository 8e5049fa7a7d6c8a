//! `mnemo bench load`: a realistic mix from many concurrent clients for a set time — writes
//! (which close sessions, so extraction runs alongside), `get_context` and `event/search` over
//! many users — against a server (in-process on a temporary data directory unless `--url`).
//! Reports throughput, p50/p99 per endpoint, errors by status, and the server's RSS over time
//! (in-process: this process; with `--url`: the process given by `--pid`, if any).

use crate::bench::percentile;
use anyhow::{Context, Result};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct LoadBench {
    pub url: Option<String>,
    pub key: Option<String>,
    pub pid: Option<u32>,
    pub clients: usize,
    pub seconds: u64,
    pub users: usize,
    /// Percent of operations that are writes, contexts and searches (the rest).
    pub write_pct: u32,
    pub context_pct: u32,
    /// Every query a text never asked before (so each is embedded: the model-bound case); by
    /// default queries repeat from a few topics and the query cache answers most of them.
    pub fresh_queries: bool,
    /// After the run, wait up to this long for the extraction queue to empty (0: do not wait).
    pub drain_seconds: u64,
}

#[derive(Default)]
struct Tally {
    /// Answered requests' latencies, by endpoint.
    latencies: BTreeMap<&'static str, Vec<f64>>,
    /// Requests shed (503, `Retry-After`): by endpoint, their latencies.
    shed: BTreeMap<&'static str, Vec<f64>>,
    errors: BTreeMap<String, usize>,
    /// Reads answered on full text alone (`"semantic": false`: the query was not embedded).
    full_text: BTreeMap<&'static str, usize>,
    /// The slowest request of any outcome, ms.
    slowest: f64,
}

/// The extraction queue from the server's `/metrics`: (queued, running, done).
async fn queue(client: &reqwest::Client, base: &str, key: Option<&str>) -> Option<(u64, u64, u64)> {
    let mut req = client.get(format!("{base}/metrics"));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let text = req.send().await.ok()?.text().await.ok()?;
    let state = |s: &str| {
        let prefix = format!("mnemo_jobs{{state=\"{s}\"}} ");
        text.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|n| n.trim().parse::<u64>().ok()).unwrap_or(0)
    };
    Some((state("queued"), state("running"), state("done")))
}

const TOPICS: [&str; 8] = [
    "我家宝宝1岁，最近喝奶粉总胀气，有没有推荐的？",
    "I'm planning a trip to Kyoto in April, what should I pack?",
    "最近在学 Rust，生命周期总是搞不懂。",
    "My sister's wedding is next month and I need a gift idea.",
    "周末想去爬山，杭州附近有什么路线？",
    "I started running again; my knee hurts after 5 km.",
    "公司要从 MySQL 迁到 PostgreSQL，有什么坑？",
    "We adopted a cat named Miso last week.",
];

fn rss_kib(pid: Option<u32>) -> Option<u64> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/status"),
        None => "/proc/self/status".into(),
    };
    let s = std::fs::read_to_string(path).ok()?;
    s.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok()
}

pub async fn run(b: LoadBench, mut cfg: crate::config::Config) -> Result<()> {
    let (base, running, _tmp) = crate::bench::target(b.url.as_deref(), &mut cfg).await?;
    let rss_pid = if b.url.is_some() { b.pid } else { None };
    let can_sample = b.url.is_none() || b.pid.is_some();
    println!(
        "load: {} clients for {} s over {} users; mix {}% streaming_write / {}% get_context / {}% event/search; {} queries; server {}",
        b.clients,
        b.seconds,
        b.users,
        b.write_pct,
        b.context_pct,
        100 - b.write_pct - b.context_pct,
        if b.fresh_queries { "fresh" } else { "repeated" },
        if b.url.is_some() { base.as_str() } else { "in-process (temporary data dir)" }
    );
    let client = crate::http_client()?.pool_max_idle_per_host(b.clients * 2).build()?;
    let tally: Arc<Mutex<Tally>> = Arc::default();
    let start = Instant::now();
    let dur = Duration::from_secs(b.seconds);

    // RSS over time, sampled every second.
    let sampler = tokio::spawn(async move {
        let mut samples = Vec::new();
        while start.elapsed() < dur {
            if let Some(kib) = rss_kib(rss_pid) {
                samples.push((start.elapsed().as_secs_f64(), kib));
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        samples
    });

    let mut tasks = Vec::new();
    for c in 0..b.clients {
        let (client, base, key, tally) = (client.clone(), base.clone(), b.key.clone(), tally.clone());
        let (users, write_pct, context_pct, fresh) = (b.users.max(1), b.write_pct, b.context_pct, b.fresh_queries);
        tasks.push(tokio::spawn(async move {
            let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ (c as u64 + 1);
            let mut next = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let mut local: Tally = Tally::default();
            let mut i = 0u64;
            while start.elapsed() < dur {
                let user = (next() % users as u64) as usize;
                let roll = (next() % 100) as u32;
                let topic = TOPICS[(next() % TOPICS.len() as u64) as usize];
                let query = if fresh { format!("{topic} ({c}-{})", next() % 1_000_000) } else { topic.to_string() };
                let conv = format!("load-u{user}-c{}", user % 3);
                let (path, name, body): (&str, &'static str, Value) = if roll < write_pct {
                    i += 1;
                    ("session/streaming_write", "streaming_write", json!({
                        "collection_name": "load", "conversation_id": conv,
                        "messages": [{"role": if i.is_multiple_of(2) {"assistant"} else {"user"}, "content": format!("{topic} (#{i} from client {c})")}],
                        "metadata": {"user_id": format!("user-{user}")},
                        "extract_trigger": {"message_count": 10}}))
                } else if roll < write_pct + context_pct {
                    ("get_context", "get_context", json!({
                        "collection_name": "load", "conversation_id": conv, "query": query, "max_tokens": 800}))
                } else {
                    ("event/search", "event/search", json!({
                        "collection_name": "load", "query": query, "filter": {"user_id": format!("user-{user}")}, "limit": 5}))
                };
                let mut req = client.post(format!("{base}/api/memory/{path}")).json(&body);
                if let Some(k) = &key {
                    req = req.bearer_auth(k);
                }
                let t0 = Instant::now();
                let sent = req.send().await;
                let ms = t0.elapsed().as_secs_f64() * 1000.0;
                local.slowest = local.slowest.max(ms);
                match sent {
                    // A search before the user's first write finds no collection yet: not an error of the server.
                    Ok(r) if r.status().is_success() || r.status().as_u16() == 404 => {
                        local.latencies.entry(name).or_default().push(ms);
                        if name != "streaming_write"
                            && r.json::<Value>().await.is_ok_and(|v| v["data"]["semantic"] == json!(false))
                        {
                            *local.full_text.entry(name).or_default() += 1;
                        }
                    }
                    // Shed: a client that honours `Retry-After` (as the SDKs do) waits before its next request.
                    Ok(r) if r.status().as_u16() == 503 && r.headers().contains_key("retry-after") => {
                        local.shed.entry(name).or_default().push(ms);
                        let pause = mnemo_providers::http::retry_after(r.headers(), Duration::from_secs(5));
                        tokio::time::sleep(pause.unwrap_or(Duration::from_secs(1))).await;
                    }
                    Ok(r) => *local.errors.entry(format!("{name} HTTP {}", r.status().as_u16())).or_default() += 1,
                    Err(e) => {
                        let what = if e.is_timeout() { "timeout" } else { "error" };
                        *local.errors.entry(format!("{name} transport: {what}")).or_default() += 1
                    }
                }
            }
            let mut t = tally.lock().expect("tally");
            for (k, v) in local.latencies {
                t.latencies.entry(k).or_default().extend(v);
            }
            for (k, v) in local.shed {
                t.shed.entry(k).or_default().extend(v);
            }
            for (k, v) in local.full_text {
                *t.full_text.entry(k).or_default() += v;
            }
            t.slowest = t.slowest.max(local.slowest);
            for (k, v) in local.errors {
                *t.errors.entry(k).or_default() += v;
            }
        }));
    }
    for t in tasks {
        t.await.context("load client")?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let samples = sampler.await.unwrap_or_default();
    let t = std::mem::take(&mut *tally.lock().expect("tally"));
    let answered: usize = t.latencies.values().map(Vec::len).sum();
    let shed: usize = t.shed.values().map(Vec::len).sum();
    println!(
        "{answered} requests answered in {elapsed:.1} s: {:.0} req/s; {shed} shed (503, Retry-After); slowest request {:.0} ms",
        answered as f64 / elapsed,
        t.slowest
    );
    println!("| endpoint | answered | on full text alone | req/s | p50 ms | p99 ms | shed | shed after, max ms |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for (name, mut lat) in t.latencies {
        lat.sort_by(f64::total_cmp);
        let shed = t.shed.get(name).map_or(&[][..], Vec::as_slice);
        println!(
            "| {name} | {} | {} | {:.0} | {:.2} | {:.2} | {} | {:.0} |",
            lat.len(),
            t.full_text.get(name).copied().unwrap_or(0),
            lat.len() as f64 / elapsed,
            percentile(&lat, 0.5),
            percentile(&lat, 0.99),
            shed.len(),
            shed.iter().copied().fold(0.0, f64::max)
        );
    }
    let errors: usize = t.errors.values().sum();
    println!("errors: {errors}{}", if errors > 0 { format!(" {:?}", t.errors) } else { String::new() });
    if can_sample && !samples.is_empty() {
        let mb = |k: u64| k as f64 / 1024.0;
        let max = samples.iter().map(|s| s.1).max().unwrap_or(0);
        let step = (samples.len() / 6).max(1);
        let timeline: Vec<String> =
            samples.iter().step_by(step).map(|(t, k)| format!("{t:.0}s {:.0} MB", mb(*k))).collect();
        println!(
            "RSS: start {:.0} MB, end {:.0} MB, max {:.0} MB; over time: {}",
            mb(samples[0].1),
            mb(samples.last().expect("non-empty").1),
            mb(max),
            timeline.join(", ")
        );
    }
    // How far extraction kept up, and how long its backlog takes to drain once the load stops.
    if let Some((queued, running, done)) = queue(&client, &base, b.key.as_deref()).await {
        println!(
            "extraction during the run: {done} jobs done ({:.2}/s), {queued} queued and {running} running at the end",
            done as f64 / elapsed
        );
        if b.drain_seconds > 0 && queued + running > 0 {
            let t0 = Instant::now();
            let mut last = (queued, running, done);
            while t0.elapsed() < Duration::from_secs(b.drain_seconds) && last.0 + last.1 > 0 {
                tokio::time::sleep(Duration::from_millis(500)).await;
                last = queue(&client, &base, b.key.as_deref()).await.unwrap_or(last);
            }
            let s = t0.elapsed().as_secs_f64();
            let rate = (last.2 - done) as f64 / s;
            match last.0 + last.1 {
                0 => println!("backlog drained in {s:.1} s ({rate:.2} jobs/s with no load)"),
                left => {
                    println!("backlog not drained after {s:.0} s: {left} jobs left ({rate:.2} jobs/s with no load)")
                }
            }
        }
    }
    if let Some(r) = running {
        r.shutdown().await;
    }
    Ok(())
}
