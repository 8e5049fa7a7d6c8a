//! The composition root: builds the store, providers and `Service` from config, and runs the
//! HTTP server until a shutdown signal. The only place that names concrete implementations.

use crate::config::{Config, EmbeddingConfig};
use anyhow::{Context, Result, bail};
use mnemo_core::ranking::TimeDecay;
use mnemo_core::service::{ExtractionPolicy, RetrievalConfig, ServiceConfig};
use mnemo_core::{Clock, Embedder, Extractor, Extractors, Service, Store};
use mnemo_providers::embed::local::{Device, Runtime};
use mnemo_providers::embed::{
    LocalEmbedder, LocalModel, OpenAiEmbedder, OpenAiEmbedderConfig, SplitEmbedder, find_model_dir,
};
use mnemo_providers::llm::TokenLimit;
use mnemo_providers::{FaultInjectingExtractor, JsonMode, LlmConfig, LlmExtractor, RulesConfig, RulesExtractor};
use mnemo_store::{Durability, SqliteOptions, SqliteStore};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The embedder the configuration names: one provider, or queries on one and documents on
/// another running the same model (`embedding.documents`).
pub fn build_embedder(cfg: &Config) -> Result<Arc<dyn Embedder>> {
    let e = &cfg.embedding;
    let Some(documents) = &e.documents else { return one_embedder(e, cfg, false) };
    if documents.documents.is_some() {
        bail!("embedding.documents.documents: documents have one provider");
    }
    let queries = one_embedder(e, cfg, true)?;
    // The section's own settings named as they are written, e.g. embedding.documents.base_url.
    let documents = one_embedder(documents, cfg, false)
        .map_err(|err| anyhow::anyhow!("{}", err.to_string().replace("embedding.", "embedding.documents.")))?;
    Ok(Arc::new(SplitEmbedder::new(queries, documents).map_err(anyhow::Error::msg)?))
}

/// One provider's embedder; `queries_only`: it embeds no documents (another one does).
fn one_embedder(e: &EmbeddingConfig, cfg: &Config, queries_only: bool) -> Result<Arc<dyn Embedder>> {
    Ok(match e.provider.as_str() {
        "local" => {
            let runtime = Runtime {
                device: Device::parse(&e.device).map_err(anyhow::Error::msg)?,
                library: e.onnxruntime.clone(),
                fast_int8: e.fast_int8,
            };
            // Unset: EmbeddingGemma, or the USE + e5 pair when EmbeddingGemma is not installed
            // (it could not be fetched, or its terms were not wanted) — said, not failed.
            let chosen = e.local_model.as_deref().unwrap_or("embeddinggemma-300m");
            let mut model = LocalModel::parse(chosen).map_err(anyhow::Error::msg)?;
            let found = match find_model_dir(e.model_dir.as_deref(), model) {
                Ok(d) => Ok(d),
                Err(missing) => match install_model_from_checkout(e.model_dir.is_none()) {
                    Ok(()) => find_model_dir(e.model_dir.as_deref(), model),
                    Err(_) => Err(missing),
                },
            };
            let dir = match found {
                Ok(d) => d,
                Err(missing) if e.local_model.is_none() => {
                    let d = find_model_dir(e.model_dir.as_deref(), LocalModel::UseE5)
                        .map_err(|_| anyhow::Error::msg(missing.clone()))?;
                    let why = "EmbeddingGemma-300M (the default embedding model) is not installed; running on the \
                               USE + e5-small pair instead (embedding.local_model: use-m3+e5-small). Run \
                               ./scripts/setup-model to install it (a data directory indexed with one model needs \
                               `mnemo reindex` to move to the other)";
                    eprintln!("warning: {why}");
                    tracing::warn!(missing, "{why}");
                    model = LocalModel::UseE5;
                    d
                }
                Err(missing) => bail!(missing),
            };
            let local = LocalEmbedder::open_on(&dir, model, e.sessions.max(1), &runtime)
                .map_err(anyhow::Error::msg)?
                .with_max_waiting_queries(match e.max_waiting_queries {
                    0 => usize::MAX,
                    n => n,
                });
            Arc::new(if queries_only { local.for_queries_only() } else { local })
        }
        "openai" => {
            if e.device != "cpu" || e.onnxruntime.is_some() {
                bail!(
                    "embedding.device and embedding.onnxruntime are settings of the local provider; with provider \
                     openai the endpoint decides where the model runs"
                );
            }
            if !(1..=2048).contains(&e.max_batch) {
                bail!("embedding.max_batch: must be in 1..=2048, got {}", e.max_batch);
            }
            let need = |v: &Option<String>, k: &str| {
                v.clone().with_context(|| format!("embedding.{k} is required with provider openai"))
            };
            let api_key = match &e.api_key_env {
                Some(var) => {
                    Some(std::env::var(var).with_context(|| format!("embedding.api_key_env: {var} is not set"))?)
                }
                None => None,
            };
            let served =
                match &e.same_as {
                    Some(m) => Some(LocalModel::parse(m).and_then(LocalModel::served).map_err(|err| {
                        anyhow::anyhow!("{}", err.replace("embedding.local_model", "embedding.same_as"))
                    })?),
                    None => None,
                };
            let dimension = match (&served, e.dimension) {
                (_, Some(d)) => d,
                (Some(m), None) => m.dimension,
                (None, None) => bail!("embedding.dimension is required with provider openai"),
            };
            let config = OpenAiEmbedderConfig {
                base_url: need(&e.base_url, "base_url")?,
                model: need(&e.model, "model")?,
                dimension,
                api_key,
                timeout: Duration::from_secs(e.timeout_secs.max(1)),
                api_version: e.api_version.clone(),
                api_key_header: e.api_key_header.clone(),
                served,
                max_batch: e.max_batch,
                tls: cfg.tls.options(),
            };
            Arc::new(OpenAiEmbedder::new(config).map_err(anyhow::Error::msg)?)
        }
        other => bail!("embedding.provider: must be local or openai, got {other:?}"),
    })
}

/// On a fresh clone, `cargo run -- demo` finds no model: run the checkout's own
/// `scripts/setup-model` once (it fetches checksummed packages from PyPI), then go on.
fn install_model_from_checkout(default_location: bool) -> Result<()> {
    if !default_location {
        bail!("embedding.model_dir is set explicitly");
    }
    let exe = std::env::current_exe()?;
    let script = exe
        .ancestors()
        .skip(1)
        .take(5)
        .map(|a| a.join("scripts/setup-model"))
        .find(|p| p.is_file())
        .context("no scripts/setup-model beside this binary")?;
    eprintln!("The embedding model is not installed yet; running {} (one time) …", script.display());
    let status = std::process::Command::new("bash")
        .arg(&script)
        .stdout(std::process::Stdio::from(std::io::stderr()))
        .status()?;
    if !status.success() {
        bail!("{} failed", script.display());
    }
    Ok(())
}

pub async fn build_service(cfg: &Config, clock: Arc<dyn Clock>) -> Result<Arc<Service>> {
    // A store setting the engine ignores, or a retrieval setting out of range, stops the start
    // before the model's 2 s of loading.
    cfg.store.check_engine()?;
    retrieval_config(cfg)?;
    check_mcp(&cfg.mcp)?;
    let t = std::time::Instant::now();
    // While the embedding model loads (on two threads), not on the first request.
    mnemo_core::warm_up();
    let embedder = build_embedder(cfg)?;
    tracing::info!(ms = t.elapsed().as_millis() as u64, model = embedder.model_id(), "embedding model loaded");
    let t = std::time::Instant::now();
    let service = build_service_with(cfg, clock, embedder).await?;
    tracing::info!(ms = t.elapsed().as_millis() as u64, "store opened");
    Ok(service)
}

pub async fn build_service_with(
    cfg: &Config,
    clock: Arc<dyn Clock>,
    embedder: Arc<dyn Embedder>,
) -> Result<Arc<Service>> {
    service_on(cfg, clock, embedder, open_store(cfg).await?)
}

/// Opens the configured store (`store.engine`).
pub async fn open_store(cfg: &Config) -> Result<Arc<dyn Store>> {
    cfg.store.check_engine()?;
    Ok(match cfg.store.engine.as_str() {
        "sqlite" => {
            let durability = match cfg.store.durability.as_str() {
                "process" => Durability::Process,
                "power_loss" => Durability::PowerLoss,
                other => bail!("store.durability: must be process or power_loss, got {other:?}"),
            };
            if !(1..=64).contains(&cfg.store.readers) {
                bail!("store.readers: must be 1..=64, got {}", cfg.store.readers);
            }
            let opts = SqliteOptions {
                durability,
                cache_mib: cfg.store.cache_mib,
                mmap_mib: cfg.store.mmap_mib,
                readers: cfg.store.readers,
                scope_cache_mib: cfg.store.scope_cache_mib,
            };
            Arc::new(
                SqliteStore::open(&cfg.store.path, opts)
                    .with_context(|| format!("opening the store in {}", cfg.store.path.display()))?,
            )
        }
        "postgres" => {
            let opts = |url: String| mnemo_store_pg::PgOptions {
                pool: cfg.store.pool.clamp(2, 1000),
                schema: cfg.store.schema.clone(),
                hnsw: cfg.store.hnsw,
                read_url: cfg.store.read_url.clone(),
                index_build_mib: cfg.store.index_build_mib.max(64),
                scope_cache_mib: cfg.store.scope_cache_mib,
                ..mnemo_store_pg::PgOptions::new(url)
            };
            if !cfg.store.shards.is_empty() {
                return open_shards(cfg, opts).await;
            }
            let Some(url) = cfg.store.url.clone() else {
                bail!("store.url: is required with engine postgres (postgres://user:password@host:port/database)");
            };
            Arc::new(mnemo_store_pg::PgStore::connect(opts(url)).await.context("opening the postgres store")?)
        }
        other => bail!("store.engine: must be sqlite or postgres, got {other:?}"),
    })
}

/// `store.shards`: one PostgreSQL store per database, routed by user ([`ShardedStore`]).
async fn open_shards(cfg: &Config, opts: impl Fn(String) -> mnemo_store_pg::PgOptions) -> Result<Arc<dyn Store>> {
    use mnemo_sharded::{MAX_SHARDS, ShardedStore};
    let shards = &cfg.store.shards;
    if cfg.store.url.is_some() {
        bail!("store.url: give either url (one database) or shards (several), not both");
    }
    if cfg.store.read_url.is_some() {
        bail!("store.read_url: read replicas are not supported with store.shards (each shard would need its own)");
    }
    if shards.len() > MAX_SHARDS {
        bail!("store.shards: at most {MAX_SHARDS} databases, got {}", shards.len());
    }
    let mut stores: Vec<Arc<dyn Store>> = Vec::with_capacity(shards.len());
    let mut deployment: Option<String> = None;
    for (i, url) in shards.iter().enumerate() {
        let store = mnemo_store_pg::PgStore::connect(opts(url.clone()))
            .await
            .with_context(|| format!("opening store.shards[{i}]"))?;
        deployment = Some(store.place_in_shards(i, shards.len(), deployment.as_deref()).await?);
        stores.push(Arc::new(store));
    }
    Ok(Arc::new(ShardedStore::open(stores).await.context("joining the shards")?))
}

/// The service over an opened store, configured from `cfg`.
pub fn service_on(
    cfg: &Config,
    clock: Arc<dyn Clock>,
    embedder: Arc<dyn Embedder>,
    store: Arc<dyn Store>,
) -> Result<Arc<Service>> {
    let extractors = extractors(cfg)?;
    let s = &cfg.session;
    let default_trigger = mnemo_core::ExtractTrigger::from_parts(
        Some(s.token_count as i64),
        Some(s.message_count as i64),
        Some(s.wait_timeout as i64),
        Default::default(),
    )
    .map_err(|e| anyhow::anyhow!("session.{e}"))?;
    let e = &cfg.extraction;
    let config = ServiceConfig {
        default_trigger,
        auto_create_collections: s.auto_create_collections,
        max_job_attempts: e.max_attempts.max(1),
        retry_base: Duration::from_millis(e.retry_base_ms),
        retry_max: Duration::from_millis(e.retry_max_ms),
        job_lease: Duration::from_secs(e.job_lease_secs.clamp(3, 3600)),
        recover_interval: Duration::from_secs(e.recover_interval_secs.clamp(1, 86_400)),
        max_requeues: e.max_requeues,
        extraction_timeout: Duration::from_secs(e.timeout_secs.max(1)),
        workers: e.workers.max(1),
        poll_interval: Duration::from_millis(s.poll_interval_ms.clamp(10, 60_000)),
        retrieval: retrieval_config(cfg)?,
        lifecycle: mnemo_core::service::LifecycleConfig {
            temporary_ttl: Duration::from_secs_f64(cfg.lifecycle.temporary_ttl_days.clamp(0.0, 36_500.0) * 86_400.0),
            archive_after: Duration::from_secs_f64(cfg.lifecycle.archive_after_days.clamp(0.0, 36_500.0) * 86_400.0),
            maintenance_interval: Duration::from_secs(cfg.lifecycle.maintenance_interval_secs.max(1)),
            fold_process_after: Duration::from_secs_f64(
                cfg.lifecycle.fold_process_after_days.clamp(0.0, 36_500.0) * 86_400.0,
            ),
            daily_digest: cfg.lifecycle.daily_digest,
        },
        redaction: mnemo_core::redact::Redaction {
            private_tags: cfg.redaction.private_tags,
            secrets: cfg.redaction.secrets,
        },
        extraction: ExtractionPolicy {
            dedup_similarity: Some(e.dedup_similarity.unwrap_or_else(|| embedder.duplicate_similarity()))
                .filter(|t| *t > 0.0)
                .map(|t| t.min(1.0)),
            utc_offset: mnemo_core::dates::parse_offset(&e.utc_offset).with_context(|| {
                format!("extraction.utc_offset: must look like +08:00, -05:30 or UTC, got {:?}", e.utc_offset)
            })?,
            daily_token_budget: (e.daily_token_budget > 0).then_some(e.daily_token_budget),
            project_token_budgets: e.project_token_budgets.clone(),
            commit_delay: Duration::from_millis(e.fault_injection.commit_delay_ms.min(60_000)),
        },
        webhooks: webhook_policy(cfg),
        query_cache_entries: cfg.embedding.query_cache.min(1_000_000),
    };
    Ok(Service::new(store, extractors, embedder, clock, config))
}

fn webhook_policy(cfg: &Config) -> mnemo_core::service::WebhookPolicy {
    let d = &cfg.webhook_delivery;
    let loopback = cfg.bind_addr().map(|a| a.ip().is_loopback()).unwrap_or(false);
    mnemo_core::service::WebhookPolicy {
        max_attempts: d.max_attempts.clamp(1, 100),
        backoff_base: Duration::from_millis(d.backoff_base_ms.clamp(10, 3_600_000)),
        backoff_max: Duration::from_secs(d.backoff_max_secs.clamp(1, 7 * 86_400)),
        timeout: Duration::from_millis(d.timeout_ms.clamp(100, 120_000)),
        batch: d.batch.clamp(1, 1000),
        keep_delivered: Duration::from_secs_f64(d.keep_delivered_days.clamp(0.0, 3650.0) * 86_400.0),
        allow_private_urls: d.allow_private_urls.unwrap_or(loopback),
    }
}

/// Webhooks: the HTTP sender plugged in, the config file's endpoints registered.
pub async fn start_webhooks(cfg: &Config, service: &Service) -> Result<()> {
    service.set_webhook_sender(Arc::new(
        mnemo_providers::webhook::HttpWebhookSender::new(&cfg.tls.options()).map_err(|e| anyhow::anyhow!(e))?,
    ));
    let mut specs = Vec::new();
    for (i, w) in cfg.webhooks.iter().enumerate() {
        let secret = match (&w.secret_env, &w.secret) {
            (Some(var), _) => Some(
                std::env::var(var)
                    .with_context(|| format!("webhooks[{i}].secret_env: environment variable {var} is not set"))?,
            ),
            (None, s) => s.clone(),
        };
        specs.push(mnemo_core::service::WebhookSpec {
            project_name: w.project_name.clone(),
            url: w.url.clone(),
            secret,
            events: Some(w.events.clone()),
            description: w.description.clone(),
        });
    }
    service.sync_config_webhooks(specs).await.map_err(|e| anyhow::anyhow!("{e}"))
}

/// The extractors: `rules` always, `llm` when an endpoint is configured; the default is
/// `extraction.provider`.
fn extractors(cfg: &Config) -> Result<Extractors> {
    let e = &cfg.extraction;
    let wrap = |x: Arc<dyn Extractor>| -> Arc<dyn Extractor> {
        let f = &e.fault_injection;
        if f.fail_first_attempts == 0 && f.delay_ms == 0 {
            return x;
        }
        let (n, ms) = (f.fail_first_attempts, f.delay_ms);
        tracing::warn!(
            n,
            ms,
            "fault injection is on: the first {n} extraction attempts fail, each takes {ms} ms longer"
        );
        Arc::new(FaultInjectingExtractor::new(x, n, Duration::from_millis(ms)))
    };
    let rules = RulesExtractor::new(RulesConfig {
        ignore_system: cfg.session.ignore_system,
        ignore_tools: cfg.session.ignore_tools,
        ..Default::default()
    });
    let mut all = Extractors::new("rules", wrap(Arc::new(rules)));
    if e.base_url.is_some() || e.model.is_some() || e.provider == "llm" {
        let need = |v: &Option<String>, k: &str| {
            v.clone().with_context(|| format!("extraction.{k} is required for the llm extractor"))
        };
        let api_key = match &e.api_key_env {
            Some(var) => Some(std::env::var(var).with_context(|| format!("extraction.api_key_env: {var} is not set"))?),
            None => None,
        };
        let json_mode = JsonMode::parse(&e.json_mode).with_context(|| {
            format!("extraction.json_mode: must be json_schema, json_object or none, got {:?}", e.json_mode)
        })?;
        let token_limit = TokenLimit::parse(&e.token_limit_param).with_context(|| {
            format!(
                "extraction.token_limit_param: must be max_tokens or max_completion_tokens, got {:?}",
                e.token_limit_param
            )
        })?;
        let llm = LlmExtractor::new(LlmConfig {
            base_url: need(&e.base_url, "base_url")?,
            model: need(&e.model, "model")?,
            api_key,
            timeout: Duration::from_secs(e.request_timeout_secs.max(1)),
            max_concurrency: e.max_concurrency.max(1),
            json_mode,
            max_retries: e.max_retries,
            max_tokens: e.max_tokens.max(64),
            temperature: e.temperature.clamp(0.0, 2.0),
            ignore_system: cfg.session.ignore_system,
            ignore_tools: cfg.session.ignore_tools,
            breaker_open: Duration::from_secs(e.breaker_open_secs.max(1)),
            token_limit,
            api_version: e.api_version.clone(),
            api_key_header: e.api_key_header.clone(),
            tls: cfg.tls.options(),
            ..Default::default()
        })
        .map_err(anyhow::Error::msg)?;
        all = all.with("llm", wrap(Arc::new(llm)));
    }
    match e.provider.as_str() {
        "rules" | "llm" => Ok(all.default_to(&e.provider)),
        other => bail!("extraction.provider: must be rules or llm, got {other:?}"),
    }
}

fn check_mcp(m: &mnemo_mcp::McpScope) -> Result<()> {
    if let Some(s) = m.min_score
        && !(0.0..=1.0).contains(&s)
    {
        bail!("mcp.min_score: must be in [0,1], got {s}");
    }
    Ok(())
}

fn retrieval_config(cfg: &Config) -> Result<RetrievalConfig> {
    let r = &cfg.retrieval;
    let d = &r.time_decay;
    let time_decay = TimeDecay::new(d.weight, Some(d.no_decay_period), d.half_life_days.max(0.001))
        .map_err(|e| anyhow::anyhow!("retrieval.{e}"))?;
    if let Some(t) = r.similarity_threshold
        && !(0.0..=1.0).contains(&t)
    {
        bail!("retrieval.similarity_threshold: must be in [0,1], got {t}");
    }
    for (key, w) in [
        ("neighbour_weight", r.neighbour_weight),
        ("date_weight", r.date_weight),
        ("entity_weight", r.entity_weight),
        ("whole_share", r.whole_share),
        ("turn_weight", r.turn_weight),
    ] {
        if !(0.0..=1.0).contains(&w) {
            bail!("retrieval.{key}: must be in [0,1], got {w}");
        }
    }
    if r.feedback_terms > 50 {
        bail!("retrieval.feedback_terms: must be in 0..=50, got {}", r.feedback_terms);
    }
    if r.reply_hits > 50 {
        bail!("retrieval.reply_hits: must be in 0..=50, got {}", r.reply_hits);
    }
    let (lo, hi) = mnemo_core::service::MAX_TOKENS_RANGE;
    if !(lo..=hi).contains(&cfg.inject.max_tokens) {
        bail!("inject.max_tokens: must be in {lo}..={hi}, got {}", cfg.inject.max_tokens);
    }
    Ok(RetrievalConfig {
        top_k: r.top_k.clamp(1, 5000),
        similarity_threshold: r.similarity_threshold,
        freshness_days: r.freshness_days,
        time_decay,
        max_tokens: cfg.inject.max_tokens,
        feedback_terms: r.feedback_terms,
        neighbour_weight: r.neighbour_weight,
        date_weight: r.date_weight,
        entity_weight: r.entity_weight,
        whole_share: r.whole_share,
        reply_hits: r.reply_hits,
        turn_weight: r.turn_weight as f32,
    })
}

/// Checks the store against the embedding model and indexes events that have no vector.
pub async fn prepare(service: &Service) -> Result<()> {
    let t = std::time::Instant::now();
    service.check_embedding_model().await.map_err(|e| anyhow::anyhow!("{e}"))?;
    // Events left without a vector (provider down, model added later) are embedded by the
    // background re-index loop right after start, not here: finding them is a scan of every
    // event (seconds at a million), and start-up must stay fast. Until then full text finds them.
    tracing::info!(ms = t.elapsed().as_millis() as u64, "embedding model checked");
    Ok(())
}

/// `mnemo reindex`: moves every collection indexed with another model to the configured one;
/// `all`: every collection, those of the configured model too.
pub async fn reindex(cfg: Config, all: bool) -> Result<()> {
    let service = build_service(&cfg, Arc::new(mnemo_core::SystemClock)).await?;
    let model = service.embedder().model_id().to_string();
    if all {
        let n = service.mark_for_reembedding().await.map_err(|e| anyhow::anyhow!("{e}"))?;
        eprintln!("{n} {} of {model} to re-embed", if n == 1 { "collection" } else { "collections" });
    }
    let todo = service.collections_to_reindex().await.map_err(|e| anyhow::anyhow!("{e}"))?;
    if todo.is_empty() {
        // A previous run may have stopped midway: its collections already name the new model.
        let n = service.reindex_missing().await.map_err(|e| anyhow::anyhow!("{e}"))?;
        println!(
            "every collection is indexed with {model}{}",
            if n > 0 { format!(" ({n} events embedded that had no vector)") } else { String::new() }
        );
        return backfill_turns(&service).await;
    }
    for c in todo {
        eprintln!(
            "{}/{}: {} → {model}",
            c.project_name,
            c.collection_name,
            c.embedding_model.as_deref().unwrap_or("?")
        );
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} events  {per_sec}  eta {eta}")
                .expect("template")
                .progress_chars("=> "),
        );
        let n = service
            .reindex_collection(&c, |done, total| {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
            })
            .await
            .map_err(|e| anyhow::anyhow!("{e} (run `mnemo reindex` again to resume)"))?;
        bar.finish_and_clear();
        println!("{}/{}: {n} events re-embedded with {model}", c.project_name, c.collection_name);
    }
    backfill_turns(&service).await
}

/// The turn vectors of events an older release stored (the server's background backfill, at
/// full speed here).
async fn backfill_turns(service: &Service) -> Result<()> {
    let n = service
        .backfill_turns(false)
        .await
        .map_err(|e| anyhow::anyhow!("{e} (run `mnemo reindex` again to resume)"))?;
    if n > 0 {
        println!("{n} events stored by an earlier release got their turns' vectors");
    }
    Ok(())
}

/// Refuses a non-loopback bind without API keys (secure by default).
pub fn check_bind_security(addr: &SocketAddr, keys: &[mnemo_http::ApiKey]) -> Result<()> {
    if !addr.ip().is_loopback() && keys.is_empty() {
        bail!(
            "refusing to listen on {addr} without API keys: anyone on the network could read and write memories.\n\
             Add server.api_keys (e.g. `api_keys: [{{key_env: MNEMO_KEY_A, projects: [default]}}]`) or bind to 127.0.0.1."
        );
    }
    Ok(())
}

/// A running server: where it listens, and how to stop it.
pub struct Running {
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    background: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Stops accepting, lets in-flight requests finish, stops the background loops.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(20), self.server).await;
        for h in self.background {
            let _ = tokio::time::timeout(Duration::from_secs(10), h).await;
        }
    }
}

/// Binds and starts serving in the background (used by `serve`, `bench` and tests).
pub async fn start(cfg: &Config, bind: SocketAddr) -> Result<Running> {
    let keys = cfg.api_keys()?;
    check_bind_security(&bind, &keys)?;
    if cfg.server.concurrent_reads() > 100_000 {
        bail!("server.max_concurrent_reads: must be 0 (no limit) to 100000, got {}", cfg.server.concurrent_reads());
    }
    if !(1..=600_000).contains(&cfg.server.read_queue_ms) {
        bail!("server.read_queue_ms: must be 1..=600000, got {}", cfg.server.read_queue_ms);
    }
    let clock = Arc::new(mnemo_core::clock::OffsetClock::default());
    if cfg.testing.clock_control {
        tracing::warn!("testing.clock_control is on: POST /api/memory/admin/clock can move this server's clock");
    }
    let service = build_service(cfg, clock.clone()).await?;
    prepare(&service).await?;
    start_webhooks(cfg, &service).await?;
    let router = mnemo_http::router(
        service.clone(),
        mnemo_http::HttpConfig {
            api_keys: keys,
            max_body_bytes: cfg.server.max_body_bytes,
            max_in_flight: cfg.server.max_in_flight,
            clock: cfg.testing.clock_control.then_some(clock),
            mcp_scope: cfg.mcp.clone(),
            sites: mnemo_http::guard::SitePolicy::for_bind(
                bind.ip(),
                &cfg.server.allowed_hosts,
                cfg.server.cors_origins.clone(),
            ),
            request_timeout: Duration::from_millis(cfg.server.request_timeout_ms.clamp(100, 3_600_000)),
            max_concurrent_reads: cfg.server.concurrent_reads(),
            read_queue: Duration::from_millis(cfg.server.read_queue_ms),
            metrics_key: match &cfg.server.metrics_key_env {
                Some(var) => Some(
                    std::env::var(var)
                        .with_context(|| format!("server.metrics_key_env: environment variable {var} is not set"))?,
                ),
                None => None,
            },
        },
    );
    let listener = TcpListener::bind(bind).await.with_context(|| format!("binding {bind}"))?;
    let addr = listener.local_addr()?;
    let (stop, stop_rx) = watch::channel(false);
    let background = service.spawn_background(stop_rx.clone());
    let mut server_stop = stop_rx;
    let server = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                let _ = server_stop.wait_for(|s| *s).await;
            })
            .await
    });
    Ok(Running { addr, stop, server, background })
}

/// `mnemo mcp`: the MCP tools on stdin/stdout over the configured store, with the background
/// loops (extraction) running, until the client closes stdin. Nothing else writes to stdout.
pub async fn mcp_stdio(cfg: Config) -> Result<()> {
    use rmcp::ServiceExt;
    let clock = Arc::new(mnemo_core::clock::OffsetClock::default());
    let service = build_service(&cfg, clock).await?;
    prepare(&service).await?;
    start_webhooks(&cfg, &service).await?;
    let (stop, stop_rx) = watch::channel(false);
    let background = service.spawn_background(stop_rx);
    let tools = mnemo_mcp::MemoryTools::new(service, cfg.mcp.clone());
    tracing::info!(project = %cfg.mcp.project, collection = %cfg.mcp.collection, user = %cfg.mcp.user_id, "MCP server on stdio");
    let running = tools.serve(rmcp::transport::stdio()).await.context("starting the MCP server on stdio")?;
    let ended = running.waiting().await;
    let _ = stop.send(true);
    for h in background {
        let _ = tokio::time::timeout(Duration::from_secs(10), h).await;
    }
    ended.map(|_| ()).context("MCP session")
}

/// `mnemo serve`: runs until SIGTERM or Ctrl-C.
pub async fn serve(cfg: Config) -> Result<()> {
    let bind = cfg.bind_addr()?;
    let running = start(&cfg, bind).await?;
    // Written without println!: a closed stdout (a supervisor that stopped reading) must not panic.
    let data = match cfg.store.engine.as_str() {
        "postgres" => format!("postgres schema {}", cfg.store.schema.as_deref().unwrap_or("public")),
        _ => cfg.store.path.display().to_string(),
    };
    say(&format!("mnemo listening on http://{} (data: {data})", running.addr));
    wait_for_signal().await;
    tracing::info!("shutting down");
    running.shutdown().await;
    say("mnemo stopped");
    Ok(())
}

fn say(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

#[cfg(test)]
mod tests;
