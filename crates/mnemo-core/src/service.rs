//! The `Service` façade: every front end (HTTP, MCP, CLI, demo) calls these methods and nothing
//! else. It validates domain rules, talks to the [`Store`] and runs the background work — the
//! extraction worker and the idle-conversation scheduler — as loops around testable single steps
//! ([`Service::try_run_one`], [`Service::close_idle_once`]) with a shutdown path.

use crate::clock::Clock;
use crate::embed::{EmbedKind, Embedder};
use crate::error::{CoreError, CoreResult};
use crate::extract::{ExtractError, ExtractionInput, ExtractionOutput, Extractors};
use crate::model::*;
use crate::redact::Redaction;
use crate::store::Store;
use crate::trigger::ExtractTrigger;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

mod background;
mod collections;
mod context;
mod entities;
mod events;
mod jobs;
mod lifecycle;
mod privacy;
mod profiles;
mod query_cache;
mod search;
mod validate;
mod webhooks;
mod write;
mod write_input;

pub use crate::ranking::ScoredEvent;
pub use collections::CollectionOptions;
pub use context::{ContextRequest, ContextResult, Include, MAX_TOKENS_RANGE, max_tokens};
pub use entities::{ENTITY_SCAN_EVENTS, EntityList, MAX_ENTITY_LIMIT};
pub use events::{AddEventRequest, BatchDelete, BatchDeleted, EVENT_CLASSES, MAX_BATCH_EVENTS};
pub use jobs::ExtractionPolicy;
pub use lifecycle::LifecycleConfig;
pub use query_cache::QueryCache;
pub use search::{EventSearch, GLOBAL_SCOPE, MAX_QUERY_CHARS, RetrievalConfig};
use validate::*;
pub use validate::{
    LIMIT_RANGE, MAX_CONTENT_CHARS, MAX_CONVERSATION_ID_CHARS, MAX_ID_CHARS, MAX_MESSAGES_PER_WRITE, MAX_NAME_CHARS,
    validate_conversation_id, validate_memory_info,
};
pub use webhooks::{WebhookPolicy, WebhookSender, WebhookSpec, new_webhook_secret, sign_webhook, webhook_body};
pub use write::{IncomingMessage, WriteRequest};
pub use write_input::{MAX_TTL_SECS, MessageInput, TriggerInput, WriteInput, WriteKind};

#[derive(Clone, Debug)]
pub struct ServiceConfig {
    pub default_trigger: ExtractTrigger,
    /// Writes to an unknown collection create it with the default schema.
    pub auto_create_collections: bool,
    pub max_job_attempts: u32,
    pub retry_base: Duration,
    pub retry_max: Duration,
    /// How long a claimed job may run before another worker may take it over.
    pub job_lease: Duration,
    /// How often failed jobs with a transient error are queued again (also at start and after
    /// an extraction succeeds), and how often each may be.
    pub recover_interval: Duration,
    pub max_requeues: u32,
    pub extraction_timeout: Duration,
    pub workers: usize,
    /// Upper bound on how long the background loops sleep between checks.
    pub poll_interval: Duration,
    pub retrieval: RetrievalConfig,
    /// What is removed or masked before anything is stored.
    pub redaction: Redaction,
    pub lifecycle: LifecycleConfig,
    pub extraction: ExtractionPolicy,
    pub webhooks: WebhookPolicy,
    /// Query vectors kept for repeated queries (0: none).
    pub query_cache_entries: usize,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        Self {
            default_trigger: ExtractTrigger::default(),
            auto_create_collections: true,
            max_job_attempts: 10,
            retry_base: Duration::from_secs(2),
            retry_max: Duration::from_secs(600),
            job_lease: Duration::from_secs(300),
            recover_interval: Duration::from_secs(300),
            max_requeues: 3,
            extraction_timeout: Duration::from_secs(120),
            workers: 2,
            poll_interval: Duration::from_secs(1),
            retrieval: RetrievalConfig::default(),
            redaction: Redaction::default(),
            lifecycle: LifecycleConfig::default(),
            extraction: ExtractionPolicy::default(),
            webhooks: WebhookPolicy::default(),
            query_cache_entries: 4096,
        }
    }
}

/// The target of a call: a collection in a project.
#[derive(Clone, Debug)]
pub struct Target {
    pub project: String,
    pub collection: String,
}

pub struct Service {
    store: Arc<dyn Store>,
    extractors: Extractors,
    embedder: Arc<dyn Embedder>,
    clock: Arc<dyn Clock>,
    config: ServiceConfig,
    /// Woken whenever a job is queued, so workers do not wait for their next poll.
    job_queued: Notify,
    /// Recently looked-up collections: saves a store read on every write. Entries live briefly
    /// (`COLLECTION_CACHE_MS`) so a collection deleted by another replica is noticed soon; this
    /// process's own create/delete invalidates at once.
    collections: std::sync::RwLock<std::collections::HashMap<(String, String), (Millis, Collection)>>,
    /// Extraction outcomes since start, for monitoring.
    pub job_outcomes: JobOutcomes,
    /// Query searches (and contexts) that ran on full text alone since start: the query could
    /// not be embedded (the embedder's queue was full, or it failed).
    pub full_text_searches: std::sync::atomic::AtomicU64,
    /// Vectors of recent queries: a repeated query is not embedded again.
    pub query_cache: QueryCache,
    /// Set when a job may have failed for a transient reason (and at start): the next successful
    /// extraction — a sign the provider answers again — re-queues such jobs.
    transient_failures: std::sync::atomic::AtomicBool,
    /// Set when an event was stored without a vector; the re-index loop only scans then.
    vectors_missing: std::sync::atomic::AtomicBool,
    /// Hits not yet written: (collection, event ids, when).
    pending_hits: std::sync::Mutex<Vec<(CollectionId, Vec<String>, Millis)>>,
    /// Per (collection, user): extraction commits of one user are serialised (dedup).
    user_locks: std::sync::Mutex<HashMap<(CollectionId, String), UserLock>>,
    /// Sends webhook deliveries (set by the binary; without one they wait in the outbox).
    webhook_sender: std::sync::OnceLock<Arc<dyn webhooks::WebhookSender>>,
}

/// Serialises one user's extraction commits.
type UserLock = Arc<tokio::sync::Mutex<()>>;

/// Counters of extraction attempts by outcome since the process started.
#[derive(Debug, Default)]
pub struct JobOutcomes {
    pub done: std::sync::atomic::AtomicU64,
    pub retried: std::sync::atomic::AtomicU64,
    pub failed: std::sync::atomic::AtomicU64,
    /// Put off to the next day because the project's token budget was spent.
    pub deferred: std::sync::atomic::AtomicU64,
}

const COLLECTION_CACHE_MS: Millis = 5_000;

impl Service {
    pub fn new(
        store: Arc<dyn Store>,
        extractors: Extractors,
        embedder: Arc<dyn Embedder>,
        clock: Arc<dyn Clock>,
        config: ServiceConfig,
    ) -> Arc<Self> {
        crate::warm_up();
        let query_cache = QueryCache::new(config.query_cache_entries);
        Arc::new(Self {
            store,
            extractors,
            embedder,
            clock,
            config,
            job_queued: Notify::new(),
            collections: Default::default(),
            job_outcomes: JobOutcomes::default(),
            full_text_searches: Default::default(),
            query_cache,
            pending_hits: Default::default(),
            user_locks: Default::default(),
            webhook_sender: Default::default(),
            transient_failures: std::sync::atomic::AtomicBool::new(true),
            // Set at start: the first loop pass checks for events a previous process left without a vector.
            vectors_missing: std::sync::atomic::AtomicBool::new(true),
        })
    }

    pub fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.embedder
    }

    async fn embed_one(&self, text: &str, kind: EmbedKind) -> CoreResult<Vec<f32>> {
        let mut v = self
            .embedder
            .embed(&[text.to_string()], kind)
            .await
            .map_err(|e| CoreError::internal(format!("embedding failed: {e}")))?;
        v.pop().ok_or_else(|| CoreError::internal("the embedder returned no vector"))
    }

    pub fn config(&self) -> &ServiceConfig {
        &self.config
    }

    /// Stored texts' vectors, one per text, asked for 16 texts at a time (one request to an
    /// embedding service stays small); an embedder that answers with another count is an error.
    async fn embed_documents(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, crate::embed::EmbedError> {
        let mut vectors = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(16) {
            let got = self.embedder.embed(chunk, EmbedKind::Document).await?;
            if got.len() != chunk.len() {
                return Err(crate::embed::EmbedError::Permanent(format!(
                    "{} vectors for {} texts",
                    got.len(),
                    chunk.len()
                )));
            }
            vectors.extend(got);
        }
        Ok(vectors)
    }

    /// Per event, its turns' vectors ([`crate::turns`]) when `retrieval.turn_weight` uses them and
    /// the event is made of turns; `None` otherwise.
    async fn turn_vectors<'a>(
        &self,
        infos: impl IntoIterator<Item = &'a serde_json::Map<String, serde_json::Value>>,
    ) -> Result<Vec<Option<Vec<Vec<f32>>>>, crate::embed::EmbedError> {
        let texts: Vec<Option<Vec<String>>> = infos
            .into_iter()
            .map(|info| if self.config.retrieval.turn_weight > 0.0 { crate::turns::texts(info) } else { None })
            .collect();
        let all: Vec<String> = texts.iter().flatten().flatten().cloned().collect();
        let mut vectors = self.embed_documents(&all).await?.into_iter();
        Ok(texts.into_iter().map(|t| t.map(|t| vectors.by_ref().take(t.len()).collect())).collect())
    }

    /// The store's short name (`sqlite`, `postgres`), for `healthz` and logs.
    pub fn store_engine(&self) -> &'static str {
        self.store.engine()
    }

    /// Row and byte counts of the whole store (`/metrics`).
    pub async fn store_stats(&self) -> CoreResult<StoreStats> {
        Ok(self.store.stats().await?)
    }

    pub fn now(&self) -> Millis {
        self.clock.now_ms()
    }

    /// The default extractor's name, e.g. `rules` or `llm:qwen2.5`.
    pub fn extractor_name(&self) -> &str {
        self.extractors.get(None).map(|e| e.name()).unwrap_or("none")
    }

    pub fn extractors(&self) -> &Extractors {
        &self.extractors
    }
}
