//! `mnemo bench scale`: search and get_context latency, cold start and memory at 100k–1M events.
//!
//! For each size N: N events spread over U users (N/U each; synthetic clustered vectors of the
//! configured model's dimension and texts, written through the store's normal insert path with their vectors and full-text terms)
//! in a fresh data directory. Then, in this process: `event/search` for one user through the
//! `Service` — with the query embedded by the configured model (the real path), and with a
//! precomputed vector (no embedding) — and `get_context`; 300 queries each over random users.
//! `get_context` is measured for a conversation the store does not know (the other
//! conversations' events alone) and in a live one: two turns written and 20 of the user's events
//! extracted from it (untimed), so this conversation's events are searched as well — what an app
//! asks before each LLM call. Baseline in the same run: the query embedding alone. Finally
//! `mnemo serve` is started on the data directory as a separate process: cold start (spawn → first search answered) and its RSS
//! after 200 searches. `--stores sqlite,postgres` runs every size on both stores, one after the
//! other in the same process, for a side-by-side table.

use crate::bench::{EventShape, Rng, percentile, shaped_event};
use crate::config::Config;
use anyhow::{Context, Result};
use mnemo_core::embed::{EmbedKind, normalize};
use mnemo_core::model::*;
use mnemo_core::ranking::TimeDecay;
use mnemo_core::service::{ContextRequest, EventSearch, Include, IncomingMessage, Target, WriteRequest};
use mnemo_core::{Store, SystemClock};
use std::io::{BufRead, BufReader};
use std::sync::Arc;
use std::time::Instant;

const QUERIES: &[&str] = &[
    "宝宝喝奶粉胀气怎么办",
    "coffee shops for hand drip",
    "planning a trip to Kyoto",
    "上海周末爬山路线",
    "piano lessons for kids",
    "database migration invoice report",
];

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

fn p50_p95(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (percentile(&v, 0.5), percentile(&v, 0.95))
}

/// Writes the events; returns the collection and the ingest rate (events/s).
#[allow(clippy::too_many_arguments)]
async fn fill(
    store: Arc<dyn Store>,
    n: usize,
    users: usize,
    batch: usize,
    model: &str,
    dim: usize,
    shape: EventShape,
) -> Result<(CollectionId, f64)> {
    let c = store
        .ensure_collection(NewCollection {
            id: None,
            project_name: "default".into(),
            collection_name: "scale".into(),
            description: String::new(),
            schema: CollectionSchema::default(),
            embedding_model: model.into(),
            embedding_dim: dim as u32,
            created_at: 0,
        })
        .await?;
    let have = store.stats().await?.events as usize;
    if have > 0 {
        // MNEMO_BENCH_KEEP: the data of an earlier run is measured again. Never filled twice:
        // PostgreSQL's count is an estimate (a 1M store may read 999,700), and the generator
        // would write the same events again.
        println!("  ingest: skipped, the store already holds ~{have} events");
        return Ok((c.id, f64::NAN));
    }
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ n as u64);
    let centres: Vec<Vec<f32>> = (0..64).map(|_| (0..dim).map(|_| rng.f()).collect()).collect();
    let mut pending = Vec::new();
    let t0 = Instant::now();
    if batch > 1 {
        store.begin_bulk_load().await?;
    }
    let mut events = Vec::with_capacity(batch);
    for i in 0..n {
        let mut v: Vec<f32> = centres[i % centres.len()].iter().map(|c| c + 0.6 * rng.f()).collect();
        normalize(&mut v);
        let user = format!("user-{}", i % users);
        events.push(shaped_event(
            shape,
            c.id,
            user,
            format!("event {i}"),
            v,
            1_700_000_000_000 + i as i64 * 1000,
            &mut rng,
        ));
        if events.len() == batch || i + 1 == n {
            let (s, mut chunk) = (store.clone(), std::mem::take(&mut events));
            pending.push(tokio::spawn(async move {
                match chunk.len() {
                    1 => s.insert_event(chunk.pop().expect("one")).await.map(|_| ()),
                    _ => s.insert_events(chunk).await.map(|_| ()),
                }
            }));
            // 512 events in flight (at least two batches).
            if pending.len() >= (512 / batch).max(2) {
                for p in pending.drain(..) {
                    p.await??;
                }
            }
        }
        if (i + 1) % 100_000 == 0 {
            eprintln!("  {} events written ({:.0}/s)", i + 1, (i + 1) as f64 / t0.elapsed().as_secs_f64());
        }
    }
    for p in pending {
        p.await??;
    }
    let loaded = t0.elapsed().as_secs_f64();
    if batch > 1 {
        let t = Instant::now();
        store.end_bulk_load().await?;
        println!(
            "  bulk load: {n} events in {loaded:.1} s, then {:.1} s to build the indexes it deferred",
            t.elapsed().as_secs_f64()
        );
    }
    let rate = n as f64 / t0.elapsed().as_secs_f64();
    println!("  ingest: {n} events in {:.1} s ({rate:.0} events/s, {batch} per insert)", t0.elapsed().as_secs_f64());
    Ok((c.id, rate))
}

/// What the bench asks get_context: 5 events of `user`'s and their profile, 1,200 tokens.
fn context_request(target: &Target, conversation: String, query: &str, user: String) -> ContextRequest {
    ContextRequest {
        target: target.clone(),
        conversation_id: conversation,
        query: Some(query.to_string()),
        event_filter: EventFilter { user_id: vec![user.clone()], ..Default::default() },
        event_limit: 5,
        decay: TimeDecay::NONE,
        similarity_threshold: None,
        profile_filter: ProfileFilter { user_id: vec![user], ..Default::default() },
        profile_limit: 1,
        max_tokens: 1200,
        include: Include::default(),
        locale: None,
    }
}

/// Makes `conversation` live for `user` (untimed): two turns written to it, and 20 events of the
/// user's extracted from it, with vectors and texts like the fill's.
#[allow(clippy::too_many_arguments)]
async fn make_live(
    service: &mnemo_core::Service,
    store: &Arc<dyn Store>,
    target: &Target,
    collection: CollectionId,
    user: &str,
    conversation: &str,
    dim: usize,
    shape: EventShape,
    rng: &mut Rng,
) -> Result<()> {
    let turn = |role, content: &str| IncomingMessage {
        role,
        content: content.to_string(),
        name: None,
        time: None,
        idempotency_key: None,
    };
    service
        .streaming_write(WriteRequest {
            project: target.project.clone(),
            collection: target.collection.clone(),
            conversation_id: conversation.to_string(),
            messages: vec![
                turn(Role::User, "we were talking about the trip and the coffee shops"),
                turn(Role::Assistant, "yes, the hand-drip place near the station"),
            ],
            trigger: mnemo_core::ExtractTrigger::default(),
            meta: ConversationMeta { user_id: Some(user.to_string()), ..Default::default() },
        })
        .await?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as i64;
    let events = (0..20)
        .map(|j| {
            let mut v: Vec<f32> = (0..dim).map(|_| rng.f()).collect();
            normalize(&mut v);
            let mut e = shaped_event(shape, collection, user.to_string(), format!("live {j}"), v, now - j, rng);
            e.conversation_id = Some(conversation.to_string());
            e
        })
        .collect();
    store.insert_events(events).await?;
    Ok(())
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|it| it.filter_map(|e| e.ok()).filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum())
        .unwrap_or(0)
}

/// `mnemo serve` on the data directory (or the store `env` names) as its own process: (ms to
/// first answered search, RSS MB after 200 searches, peak RSS MB, anonymous RSS MB — RSS
/// without the file pages SQLite's memory-mapped reads count in it).
async fn cold_start(data: &std::path::Path, env: &[(String, String)], users: usize) -> Result<(f64, f64, f64, f64)> {
    let exe = std::env::current_exe()?;
    let t0 = Instant::now();
    let mut child = std::process::Command::new(exe)
        .args(["serve", "--bind", "127.0.0.1:0", "--data"])
        .arg(data)
        .envs(env.iter().cloned())
        .env("MNEMO_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().context("stdout")?).read_line(&mut line)?;
    let addr =
        line.trim().strip_prefix("mnemo listening on ").and_then(|r| r.split(' ').next()).context("no listen line")?;
    let client = crate::http_client()?.build()?;
    let search = |u: usize, q: &str| {
        client.post(format!("{addr}/api/memory/event/search")).json(&serde_json::json!({
            "collection_name": "scale", "query": q, "filter": {"user_id": format!("user-{u}")}, "limit": 10}))
    };
    let r = search(0, QUERIES[0]).send().await?;
    anyhow::ensure!(r.status().is_success(), "first search failed: {}", r.text().await?);
    let cold = ms(t0);
    for i in 0..200 {
        search((i * 7919) % users, QUERIES[i % QUERIES.len()]).send().await?;
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id()))?;
    let field = |name: &str| -> f64 {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    };
    let (rss, hwm, anon) = (field("VmRSS:"), field("VmHWM:"), field("RssAnon:"));
    let _ = child.kill();
    let _ = child.wait();
    Ok((cold, rss, hwm, anon))
}

pub async fn run(
    sizes: &[usize],
    users: usize,
    batch: usize,
    shape: EventShape,
    stores: crate::bench::Stores,
    mut cfg: Config,
) -> Result<()> {
    let embedder = crate::app::build_embedder(&cfg)?;
    println!(
        "scale benchmark: N events over {users} users (N/{users} per user), shaped {shape:?}, {}-d vectors ({}), 300 queries per measure, k = 10, stores {:?}",
        embedder.dimension(),
        embedder.model_id(),
        stores.stores
    );
    let mut rows = Vec::new();
    for &n in sizes {
        for store in &stores.stores {
            println!("N = {n}, store {store}:");
            let env = stores.prepare(store, &n.to_string(), &mut cfg).await?;
            let dir = tempfile::tempdir()?;
            cfg.store.path = match std::env::var_os("MNEMO_BENCH_KEEP") {
                Some(keep) => std::path::PathBuf::from(keep).join(n.to_string()), // kept for inspection
                None => dir.path().to_path_buf(),
            };
            let t = Instant::now();
            let db = crate::app::open_store(&cfg).await?;
            let opened = t.elapsed();
            let service = crate::app::service_on(&cfg, Arc::new(SystemClock), embedder.clone(), db.clone())?;
            let ingest = fill(db.clone(), n, users, batch, embedder.model_id(), embedder.dimension(), shape).await?.1;
            // What the service's housekeeping loop has done by then in a server (PostgreSQL: the
            // BM25 statistics deltas folded — unfolded, every full-text query sums them all;
            // SQLite: an upgraded directory's old events relocated).
            let t = Instant::now();
            while db.housekeeping().await? {}
            if opened.as_secs_f64() + t.elapsed().as_secs_f64() > 1.0 {
                // An upgraded store: its migration and the upkeep it left (e.g. rows to fill).
                println!(
                    "  store opened (migrations included) in {:.1} s, housekeeping caught up in {:.1} s",
                    opened.as_secs_f64(),
                    t.elapsed().as_secs_f64()
                );
            }
            service.check_embedding_model().await?;
            let target = Target { project: "default".into(), collection: "scale".into() };
            let mut rng = Rng(42);
            let (mut embed_only, mut with_embed, mut no_embed, mut ctx, mut ctx_again, mut ctx_live) =
                (vec![], vec![], vec![], vec![], vec![], vec![]);
            // The same query again, answered with its cached vector (`embedding.query_cache`);
            // every other measure forgets the cache first, so it pays its query's embedding.
            let mut repeated = vec![];
            let c = service.collection_for_read(&target).await?;
            // Live conversations get names of their own in each run (kept data is measured again).
            let run = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis();
            for i in 0..300 {
                // Each measure asks for its own random user, so each pays the same first-touch
                // reads (a user's pages are rarely all in cache at 1M); `ctx_again` is the same
                // user's next call, as in a running conversation.
                let mut user = || format!("user-{}", rng.next() as usize % users);
                let (user_a, user_b, user) = (user(), user(), user());
                let q = QUERIES[i % QUERIES.len()];
                let t = Instant::now();
                let qv = embedder.embed(&[q.to_string()], EmbedKind::Query).await?.pop().context("vector")?;
                embed_only.push(ms(t));
                let req = EventSearch::new(
                    target.clone(),
                    Some(q.to_string()),
                    EventFilter { user_id: vec![user_a], ..Default::default() },
                    10,
                );
                service.query_cache.clear();
                let t = Instant::now();
                service.search_events(req.clone()).await?;
                with_embed.push(ms(t));
                let t = Instant::now();
                service.search_events(req).await?;
                repeated.push(ms(t));
                let filter = EventFilter { user_id: vec![user_b], active_only: true, ..Default::default() };
                let terms = mnemo_core::text::search_tokens(q);
                let t = Instant::now();
                db.search_candidates(
                    c.id,
                    filter,
                    CandidateQuery { vector: Some(qv), terms, k: 10, vector_hits: None, corpus: None },
                )
                .await?;
                no_embed.push(ms(t));
                let context = context_request(&target, format!("conv-{user}"), q, user);
                service.query_cache.clear();
                let t = Instant::now();
                service.get_context(context.clone()).await?;
                ctx.push(ms(t));
                service.query_cache.clear();
                let again = ContextRequest { query: Some(QUERIES[(i + 1) % QUERIES.len()].to_string()), ..context };
                let t = Instant::now();
                service.get_context(again).await?;
                ctx_again.push(ms(t));
            }
            // How often the searches above found their scope kept (`store.scope_cache_mib`).
            if let Some(k) = db.stats().await?.scope_cache {
                println!(
                    "  kept scopes after the reads: {} hits, {} misses, {:.1} MB kept",
                    k.hits,
                    k.misses,
                    k.bytes as f64 / 1e6
                );
            }
            // Then get_context in a live conversation, each right after its writes: every write
            // makes each read connection start over (SQLite drops its page cache and memory map
            // when the file changed), so these come last and the measures above stay reads alone.
            let lives: Vec<String> = (0..300).map(|i| format!("live-{run}-{i}")).collect();
            for (i, live) in lives.iter().enumerate() {
                let user = format!("user-{}", rng.next() as usize % users);
                make_live(&service, &db, &target, c.id, &user, live, embedder.dimension(), shape, &mut rng).await?;
                service.query_cache.clear();
                let t = Instant::now();
                service.get_context(context_request(&target, live.clone(), QUERIES[i % QUERIES.len()], user)).await?;
                ctx_live.push(ms(t));
            }
            // What the live conversations wrote goes (untimed), so a kept store
            // (`MNEMO_BENCH_KEEP`) is the same store in the next run: it grew by 6,000 events a
            // run before.
            for live in &lives {
                db.delete_conversation(c.id, live).await?;
            }
            // The dashboard's opening read: the collection's users, most recently active first —
            // right after those deletes (on PostgreSQL their users' latest change is read again
            // until the store's upkeep has folded them), then once a server's housekeeping loop
            // (every 2 s) would have run.
            for when in ["right after 6,000 deletes", "after the store's upkeep"] {
                if when.starts_with("after") {
                    while db.housekeeping().await? {}
                }
                let mut user_list = Vec::new();
                for _ in 0..20 {
                    let t = Instant::now();
                    service.list_users(&target, None, 100).await?;
                    user_list.push(ms(t));
                }
                let u = p50_p95(user_list);
                println!(
                    "  user/list ({users} users, the 100 most recently active), {when}: p50 / p95 {:.1} / {:.1} ms",
                    u.0, u.1
                );
            }
            let _ = service.flush_hits().await;
            let bytes = match store.as_str() {
                "postgres" | "sharded" => db.stats().await?.bytes,
                _ => dir_bytes(&cfg.store.path),
            };
            drop(service);
            drop(db);
            let (cold, rss, hwm, anon) = cold_start(&cfg.store.path, &env, users).await?;
            let (e, w, r, s, x, xa, xl) = (
                p50_p95(embed_only),
                p50_p95(with_embed),
                p50_p95(repeated),
                p50_p95(no_embed),
                p50_p95(ctx),
                p50_p95(ctx_again),
                p50_p95(ctx_live),
            );
            let label = match store.as_str() {
                "postgres" if !cfg.store.hnsw => "postgres (hnsw: false)",
                "sharded" if !cfg.store.hnsw => "sharded, 2 databases (hnsw: false)",
                "sharded" => "sharded, 2 databases",
                other => other,
            };
            let row = format!(
                "| {label} | {n} | {:.0} | {:.0} | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} / {:.2} | {:.0} ms | {:.0} / {:.0} / {:.0} MB | {:.0} MB |",
                n as f64 / users as f64,
                ingest,
                e.0,
                e.1,
                s.0,
                s.1,
                w.0,
                w.1,
                r.0,
                r.1,
                x.0,
                x.1,
                xa.0,
                xa.1,
                xl.0,
                xl.1,
                cold,
                rss,
                hwm,
                anon,
                bytes as f64 / 1e6
            );
            println!("{row}");
            rows.push(row);
        }
    }
    println!(
        "\n| store | events | per user | ingest events/s | query embedding alone (baseline) p50 / p95 ms | search, no embedding p50 / p95 ms | event/search incl. embedding p50 / p95 ms | event/search, the same query again (cached vector) | get_context p50 / p95 ms | get_context, same user again | get_context in a live conversation | cold start to first search | serve RSS after 200 searches / peak / anonymous | data on disk |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for r in rows {
        println!("{r}");
    }
    Ok(())
}
