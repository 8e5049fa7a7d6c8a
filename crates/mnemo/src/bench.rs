//! `mnemo bench write`: concurrent `streaming_write` clients against a server (an in-process one
//! on a temporary data directory unless `--url` is given), reporting messages/s and the ack
//! latency distribution. As a baseline it first drives `GET /healthz` with the same clients in the
//! same process: the HTTP floor, so the write path's own cost is the difference. The other
//! benchmarks are the submodules; what they share (in-process target, Rng, words, percentiles) is here.

pub mod crash;
pub mod embed;
pub mod extraction;
pub mod load;
pub mod locomo;
pub mod locomo_data;
pub mod locomo_e2e;
pub mod locomo_qa;
pub mod scale;
pub mod scope;
pub mod webhooks;

use anyhow::{Context, Result};
use serde_json::json;
use std::time::{Duration, Instant};

pub struct WriteBench {
    pub url: Option<String>,
    pub key: Option<String>,
    pub concurrency: usize,
    pub seconds: u64,
    pub runs: usize,
    /// The trigger's message_count: 20 (the default) also runs extraction alongside the writes;
    /// a huge value measures the write path alone.
    pub message_count: u64,
}

#[derive(Debug, Clone)]
pub struct Figures {
    pub requests: usize,
    pub errors: usize,
    pub per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// Where a benchmark sends its requests: `url`, or an in-process server on a temporary data
/// directory (kept alive by the returned guards until they are dropped or shut down).
pub async fn target(
    url: Option<&str>,
    cfg: &mut crate::config::Config,
) -> Result<(String, Option<crate::app::Running>, Option<tempfile::TempDir>)> {
    if let Some(u) = url {
        return Ok((u.trim_end_matches('/').to_string(), None, None));
    }
    let dir = tempfile::tempdir().context("temp dir")?;
    cfg.store.path = dir.path().to_path_buf();
    cfg.server.max_in_flight = 100_000;
    let r = crate::app::start(cfg, "127.0.0.1:0".parse()?).await?;
    Ok((format!("http://{}", r.addr), Some(r), Some(dir)))
}

/// Which stores a benchmark runs on, side by side in one process.
#[derive(Clone, Debug, clap::Args)]
pub struct Stores {
    /// `sqlite`, `postgres`, `sharded` (two PostgreSQL databases behind `store.shards`,
    /// `<database>_shard0` and `_shard1` on the same server), or several (`sqlite,postgres`).
    #[arg(long, value_delimiter = ',', default_value = "sqlite")]
    pub stores: Vec<String>,
    /// The PostgreSQL database for `postgres` (default: `store.url`).
    #[arg(long, env = "MNEMO_TEST_DATABASE_URL")]
    pub pg_url: Option<String>,
    /// The PostgreSQL schemas this run has claimed: a concurrent run on the same database is
    /// refused instead of dropping them under this one.
    #[arg(skip)]
    claims: std::sync::Arc<std::sync::Mutex<Vec<(String, mnemo_store_pg::SchemaClaim)>>>,
}

impl Stores {
    /// Claims `schema` on `url` once per run: the same run may prepare it again (each size of
    /// `bench scale`), another process may not.
    async fn claim(&self, url: &str, schema: &str) -> Result<()> {
        let key = format!("{url} {schema}");
        if self.claims.lock().expect("schema claims").iter().any(|(k, _)| *k == key) {
            return Ok(());
        }
        let claim = mnemo_store_pg::claim_schema(url, schema).await.map_err(|e| anyhow::anyhow!("{e}"))?;
        self.claims.lock().expect("schema claims").push((key, claim));
        Ok(())
    }

    /// Points `cfg` at a fresh, empty store of kind `store` (`tag` names its schema / directory);
    /// returns the environment a `mnemo serve` child needs to open the same store.
    pub async fn prepare(
        &self,
        store: &str,
        tag: &str,
        cfg: &mut crate::config::Config,
    ) -> Result<Vec<(String, String)>> {
        match store {
            "sqlite" => {
                cfg.store.engine = "sqlite".into();
                (cfg.store.url, cfg.store.read_url, cfg.store.schema) = (None, None, None);
                cfg.store.shards.clear();
                Ok(vec![])
            }
            "postgres" => {
                let url = self.pg_url.clone().or_else(|| cfg.store.url.clone()).context(
                    "--stores postgres needs --pg-url or MNEMO_TEST_DATABASE_URL (eval \"$(./scripts/setup-postgres)\")",
                )?;
                let schema = format!("bench_{tag}");
                self.claim(&url, &schema).await?;
                if std::env::var_os("MNEMO_BENCH_KEEP").is_none() {
                    mnemo_store_pg::drop_schema(&url, &schema).await?;
                }
                cfg.store.engine = "postgres".into();
                cfg.store.url = Some(url.clone());
                cfg.store.schema = Some(schema.clone());
                Ok(vec![
                    ("MNEMO_STORE__ENGINE".into(), "postgres".into()),
                    ("MNEMO_STORE__URL".into(), url),
                    ("MNEMO_STORE__SCHEMA".into(), schema),
                ])
            }
            "sharded" => {
                let url = self.pg_url.clone().or_else(|| cfg.store.url.clone()).context(
                    "--stores sharded needs --pg-url or MNEMO_TEST_DATABASE_URL (eval \"$(./scripts/setup-postgres)\")",
                )?;
                let db = url.split('?').next().unwrap_or(&url).rsplit('/').next().unwrap_or("mnemo").to_string();
                let schema = format!("bench_{tag}");
                let mut shards = Vec::new();
                for i in 0..2 {
                    let shard = mnemo_store_pg::ensure_database(&url, &format!("{db}_shard{i}")).await?;
                    self.claim(&shard, &schema).await?;
                    if std::env::var_os("MNEMO_BENCH_KEEP").is_none() {
                        mnemo_store_pg::drop_schema(&shard, &schema).await?;
                    }
                    shards.push(shard);
                }
                cfg.store.engine = "postgres".into();
                cfg.store.url = None;
                cfg.store.shards = shards.clone();
                cfg.store.schema = Some(schema.clone());
                Ok(vec![
                    ("MNEMO_STORE__ENGINE".into(), "postgres".into()),
                    ("MNEMO_STORE__URL".into(), "null".into()),
                    ("MNEMO_STORE__SHARDS".into(), format!("[{}]", shards.join(", "))),
                    ("MNEMO_STORE__SCHEMA".into(), schema),
                ])
            }
            other => anyhow::bail!("--stores: must be sqlite, postgres or sharded, got {other:?}"),
        }
    }
}

/// A small deterministic generator for synthetic benchmark data.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in [-1, 1).
    pub fn f(&mut self) -> f32 {
        (self.next() % 20_000) as f32 / 10_000.0 - 1.0
    }
    /// `n` of [`WORDS`], space-separated: a synthetic event's text.
    pub fn words(&mut self, n: usize) -> String {
        (0..n).map(|_| WORDS[(self.next() % WORDS.len() as u64) as usize]).collect::<Vec<_>>().join(" ")
    }
}

/// Words synthetic event texts are made of (English and Chinese).
pub const WORDS: &[&str] = &[
    "coffee", "hiking", "baby", "formula", "trip", "kyoto", "piano", "nurse", "database", "invoice", "garden", "puppy",
    "奶粉", "咖啡", "爬山", "上海", "报告", "深色", "模式", "旅行", "宝宝", "辅食", "钢琴", "医院",
];

/// A synthetic `event_v1` of one user, written like an extracted one.
pub fn synthetic_event(
    collection_id: mnemo_core::model::CollectionId,
    user: String,
    summary: String,
    vector: Vec<f32>,
    time: i64,
) -> mnemo_core::model::NewEvent {
    let mut info = serde_json::Map::new();
    info.insert("summary".into(), serde_json::Value::String(summary));
    mnemo_core::model::NewEvent {
        embedding: Some(vector),
        ..mnemo_core::model::NewEvent::of_user(collection_id, mnemo_core::model::EVENT_V1, user, info, time)
    }
}

/// What the events `bench scale` writes look like.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum EventShape {
    /// As the rules extractor writes them: a 30-word summary, the chunk's four turns in
    /// `original_messages` (~1 KB of `memory_info`, its full-text terms ~1 KB) and a vector per
    /// turn beside the event's.
    Extracted,
    /// A 10-word summary and one vector (~75 bytes of `memory_info`): the shape every figure
    /// before 2026-12-05 (session 36) was measured with.
    Summary,
}

/// An event of `user` shaped as `shape` says, its vector `vector`; turn vectors near it.
pub fn shaped_event(
    shape: EventShape,
    collection_id: mnemo_core::model::CollectionId,
    user: String,
    label: String,
    vector: Vec<f32>,
    time: i64,
    rng: &mut Rng,
) -> mnemo_core::model::NewEvent {
    if shape == EventShape::Summary {
        return synthetic_event(collection_id, user, format!("{label}: {}", rng.words(10)), vector, time);
    }
    let turns: Vec<String> = (0..4)
        .map(|t| {
            let (name, role) = if t % 2 == 0 {
                (user.as_str(), mnemo_core::model::Role::User)
            } else {
                ("assistant", mnemo_core::model::Role::Assistant)
            };
            mnemo_core::model::original_message_line(Some(name), role, &rng.words(20))
        })
        .collect();
    let turn_vectors: Vec<Vec<f32>> = (0..turns.len())
        .map(|_| {
            let mut v: Vec<f32> = vector.iter().map(|x| x + 0.05 * rng.f()).collect();
            mnemo_core::embed::normalize(&mut v);
            v
        })
        .collect();
    let mut e = synthetic_event(collection_id, user, format!("{label}: {}", rng.words(30)), vector, time);
    e.memory_info.insert("original_messages".into(), serde_json::Value::String(turns.join("\n")));
    e.turn_vectors = Some(turn_vectors);
    e
}

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    percentile(&v, 0.5)
}

#[allow(clippy::too_many_arguments)]
async fn drive(
    client: &reqwest::Client,
    base: &str,
    key: Option<&str>,
    concurrency: usize,
    dur: Duration,
    write: bool,
    run: usize,
    message_count: u64,
) -> Figures {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..concurrency {
        let client = client.clone();
        let base = base.to_string();
        let key = key.map(str::to_string);
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0;
            let mut i = 0u64;
            while start.elapsed() < dur {
                let t0 = Instant::now();
                let ok = if write {
                    let body = json!({
                        "collection_name": "bench",
                        "conversation_id": format!("bench-r{run}-w{w}"),
                        "messages": [{"role": if i.is_multiple_of(2) {"user"} else {"assistant"},
                                      "content": format!("Message {i} from writer {w}: 我家宝宝1岁，最近喝奶粉总胀气，有没有推荐的？")}],
                        "metadata": {"user_id": format!("user-{w}")},
                        "extract_trigger": {"message_count": message_count, "token_count": 10_000_000}
                    });
                    let mut req = client.post(format!("{base}/api/memory/session/streaming_write")).json(&body);
                    if let Some(k) = &key {
                        req = req.bearer_auth(k);
                    }
                    matches!(req.send().await, Ok(r) if r.status().is_success())
                } else {
                    matches!(client.get(format!("{base}/healthz")).send().await, Ok(r) if r.status().is_success())
                };
                lat.push(t0.elapsed().as_secs_f64() * 1000.0);
                if !ok {
                    errors += 1;
                }
                i += 1;
            }
            (lat, errors)
        }));
    }
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await.expect("bench task");
        all.extend(l);
        errors += e;
    }
    let elapsed = start.elapsed().as_secs_f64();
    all.sort_by(|a, b| a.total_cmp(b));
    Figures {
        requests: all.len(),
        errors,
        per_sec: all.len() as f64 / elapsed,
        p50_ms: percentile(&all, 0.5),
        p99_ms: percentile(&all, 0.99),
    }
}

/// One store after the other, the same load, a summary row each.
pub async fn run(b: WriteBench, stores: Stores, mut cfg: crate::config::Config) -> Result<()> {
    let mut rows = Vec::new();
    for store in if b.url.is_some() { vec!["(server)".to_string()] } else { stores.stores.clone() } {
        if b.url.is_none() {
            stores.prepare(&store, "write", &mut cfg).await?;
        }
        let (hz, wr) = run_one(&b, &store, &mut cfg).await?;
        rows.push(format!(
            "| {store} | {:.0} | {:.2} / {:.2} | {:.0} | {:.2} / {:.2} | {:.2}× |",
            hz.per_sec,
            hz.p50_ms,
            hz.p99_ms,
            wr.per_sec,
            wr.p50_ms,
            wr.p99_ms,
            wr.per_sec / hz.per_sec
        ));
    }
    println!(
        "\n| store | GET /healthz req/s | p50 / p99 ms | streaming_write msg/s | p50 / p99 ms | write/baseline throughput |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for r in rows {
        println!("{r}");
    }
    Ok(())
}

async fn run_one(b: &WriteBench, store: &str, cfg: &mut crate::config::Config) -> Result<(Figures, Figures)> {
    let (base, running, _tmp) = target(b.url.as_deref(), cfg).await?;
    let client = crate::http_client()?.pool_max_idle_per_host(b.concurrency * 2).build()?;
    let dur = Duration::from_secs(b.seconds);
    println!(
        "write benchmark on {store}: {} clients, {} s per run, {} runs, a session closes every {} messages, server {}",
        b.concurrency,
        b.seconds,
        b.runs,
        b.message_count,
        if b.url.is_some() { base.as_str() } else { "in-process" }
    );
    // Warm-up: connections, tokenizer, SQLite caches.
    drive(&client, &base, b.key.as_deref(), b.concurrency, Duration::from_secs(1), true, 999, b.message_count).await;
    let (mut hz, mut wr) = (Vec::new(), Vec::new());
    for run in 0..b.runs {
        let h = drive(&client, &base, b.key.as_deref(), b.concurrency, dur, false, run, b.message_count).await;
        let w = drive(&client, &base, b.key.as_deref(), b.concurrency, dur, true, run, b.message_count).await;
        println!(
            "run {run}: healthz {:>8.0} req/s p50 {:.2} ms p99 {:.2} ms | streaming_write {:>8.0} msg/s ({} acks) p50 {:.2} ms p99 {:.2} ms errors {}",
            h.per_sec, h.p50_ms, h.p99_ms, w.per_sec, w.requests, w.p50_ms, w.p99_ms, w.errors
        );
        hz.push(h);
        wr.push(w);
    }
    let m = |v: &[Figures], f: fn(&Figures) -> f64| median(v.iter().map(f).collect());
    println!("median of {} runs:", b.runs);
    println!(
        "  baseline GET /healthz:     {:>8.0} req/s  p50 {:.2} ms  p99 {:.2} ms",
        m(&hz, |f| f.per_sec),
        m(&hz, |f| f.p50_ms),
        m(&hz, |f| f.p99_ms)
    );
    println!(
        "  session/streaming_write:   {:>8.0} msg/s  p50 {:.2} ms  p99 {:.2} ms  errors {}",
        m(&wr, |f| f.per_sec),
        m(&wr, |f| f.p50_ms),
        m(&wr, |f| f.p99_ms),
        wr.iter().map(|f| f.errors).sum::<usize>()
    );
    println!(
        "  ratio write/baseline: throughput {:.2}×, p50 {:.2}×, p99 {:.2}×",
        m(&wr, |f| f.per_sec) / m(&hz, |f| f.per_sec),
        m(&wr, |f| f.p50_ms) / m(&hz, |f| f.p50_ms),
        m(&wr, |f| f.p99_ms) / m(&hz, |f| f.p99_ms)
    );
    if let Some(r) = running {
        r.shutdown().await;
    }
    let pick = |v: &[Figures]| -> Figures {
        let mut v = v.to_vec();
        v.sort_by(|a, b| a.per_sec.total_cmp(&b.per_sec));
        v[v.len() / 2].clone()
    };
    Ok((pick(&hz), pick(&wr)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An extracted-shape event reads as the extractor's would: its `original_messages` parse
    /// into as many turns as it has turn vectors (the search pairs them by position), each vector
    /// of unit length; the summary shape has neither.
    #[test]
    fn an_extracted_event_has_a_vector_for_each_of_its_turns() {
        let mut rng = Rng(7);
        let mut v: Vec<f32> = (0..32).map(|_| rng.f()).collect();
        mnemo_core::embed::normalize(&mut v);
        let e = shaped_event(EventShape::Extracted, 1, "user-1".into(), "event 1".into(), v.clone(), 0, &mut rng);
        let turns = mnemo_core::turns::texts(&e.memory_info).expect("turns");
        let vectors = e.turn_vectors.as_ref().expect("turn vectors");
        assert_eq!((turns.len(), vectors.len()), (4, 4));
        assert!(turns[0].starts_with("user-1: ") && turns[1].starts_with("assistant: "), "{turns:?}");
        for t in vectors {
            let norm = t.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4 && t.len() == v.len());
        }
        let s = shaped_event(EventShape::Summary, 1, "user-1".into(), "event 1".into(), v, 0, &mut rng);
        assert!(s.turn_vectors.is_none() && mnemo_core::turns::texts(&s.memory_info).is_none());
    }
}
