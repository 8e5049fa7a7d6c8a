//! The `Service` façade: every front end (HTTP, MCP, CLI, demo) calls these methods and nothing
//! else. It validates domain rules, talks to the [`Store`] and runs the background work — the
//! extraction worker and the idle-conversation scheduler — as loops around testable single steps
//! ([`Service::try_run_one`], [`Service::close_idle_once`]) with a shutdown path.

use crate::clock::Clock;
use crate::context::{Assembled, Locale};
use crate::embed::{EmbedKind, Embedder};
use crate::error::{CoreError, CoreResult};
use crate::extract::{ExtractError, ExtractionInput, ExtractionOutput, Extractors};
use std::collections::HashMap;

mod jobs;
use crate::model::*;
use crate::ranking::{self, Scores, TimeDecay};
use crate::redact::Redaction;
use crate::store::Store;
use crate::tokens::TokenCounter;
use crate::trigger::ExtractTrigger;
pub use jobs::ExtractionPolicy;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, watch};

pub const MAX_CONVERSATION_ID_CHARS: usize = 256;
pub const MAX_MESSAGES_PER_WRITE: usize = 500;
pub const MAX_NAME_CHARS: usize = 256;
pub const MAX_ID_CHARS: usize = 256;
pub const MAX_CONTENT_CHARS: usize = 200_000;
pub const LIMIT_RANGE: (i64, i64) = (1, 5000);

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
    pub extraction_timeout: Duration,
    pub workers: usize,
    /// Upper bound on how long the background loops sleep between checks.
    pub poll_interval: Duration,
    pub retrieval: RetrievalConfig,
    /// What is removed or masked before anything is stored.
    pub redaction: Redaction,
    pub lifecycle: LifecycleConfig,
    pub extraction: ExtractionPolicy,
}

/// Forgetting (seed 002 §4.2): temporary memories expire, unused ones are archived.
#[derive(Clone, Debug)]
pub struct LifecycleConfig {
    /// TTL of a `temporary` event unless the write gives one.
    pub temporary_ttl: Duration,
    /// Events not hit for this long are archived (kept, not searched by default).
    pub archive_after: Duration,
    /// How often scheduled maintenance runs.
    pub maintenance_interval: Duration,
    /// `process` events older than this are folded, per user and day, into one summary event.
    pub fold_process_after: Duration,
    /// Write a `daily_digest` per user for each finished day (last 7 days) that has events.
    pub daily_digest: bool,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        Self {
            temporary_ttl: Duration::from_secs(7 * 86_400),
            archive_after: Duration::from_secs(90 * 86_400),
            maintenance_interval: Duration::from_secs(86_400),
            fold_process_after: Duration::from_secs(86_400),
            daily_digest: true,
        }
    }
}

/// Retrieval defaults (SPEC §4): out of the box nothing hides a memory silently — no threshold,
/// no freshness window, no decay unless configured or asked for per request.
#[derive(Clone, Debug)]
pub struct RetrievalConfig {
    /// Events per context section (`event_search_config.limit` default).
    pub top_k: u32,
    pub similarity_threshold: Option<f64>,
    pub freshness_days: Option<f64>,
    pub time_decay: TimeDecay,
    pub max_tokens: u32,
}

impl Default for RetrievalConfig {
    fn default() -> Self {
        Self {
            top_k: 5,
            similarity_threshold: None,
            freshness_days: None,
            time_decay: TimeDecay::NONE,
            max_tokens: 1200,
        }
    }
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
            extraction_timeout: Duration::from_secs(120),
            workers: 2,
            poll_interval: Duration::from_secs(1),
            retrieval: RetrievalConfig::default(),
            redaction: Redaction::default(),
            lifecycle: LifecycleConfig::default(),
            extraction: ExtractionPolicy::default(),
        }
    }
}

/// A message as a client sends it, before validation.
#[derive(Clone, Debug)]
pub struct IncomingMessage {
    pub role: Role,
    pub content: String,
    pub name: Option<String>,
    pub time: Option<Millis>,
    pub idempotency_key: Option<String>,
}

#[derive(Clone, Debug)]
pub struct WriteRequest {
    pub project: String,
    pub collection: String,
    pub conversation_id: String,
    pub messages: Vec<IncomingMessage>,
    pub trigger: ExtractTrigger,
    pub meta: ConversationMeta,
}

/// The target of a call: a collection in a project.
#[derive(Clone, Debug)]
pub struct Target {
    pub project: String,
    pub collection: String,
}

#[derive(Clone, Debug)]
pub struct AddEventRequest {
    pub target: Target,
    pub memory_type: String,
    pub user_id: Vec<String>,
    pub assistant_id: Vec<String>,
    pub group_id: Option<String>,
    pub session_id: Option<String>,
    pub conversation_id: Option<String>,
    pub scope: Option<String>,
    pub class: Option<String>,
    pub time: Option<Millis>,
    pub memory_info: Map<String, Value>,
    /// Seconds until a never-hit event may be deleted; overrides the class default.
    pub ttl_relative: Option<i64>,
    /// The moment (ms) after which a never-hit event may be deleted; overrides the class default.
    pub ttl_absolute: Option<Millis>,
}

pub const MAX_QUERY_CHARS: usize = 4000;
pub const MAX_TOKENS_RANGE: (u32, u32) = (1, 200_000);
pub const GLOBAL_SCOPE: &str = "global";

/// Which parts `get_context` includes (all by default).
#[derive(Clone, Copy, Debug)]
pub struct Include {
    pub profile: bool,
    pub short_term: bool,
    pub intra_events: bool,
    pub cross_events: bool,
    /// A conversation with no turns yet opens with the user's latest daily digest.
    pub recap: bool,
}

impl Default for Include {
    fn default() -> Self {
        Self { profile: true, short_term: true, intra_events: true, cross_events: true, recap: true }
    }
}

#[derive(Clone, Debug)]
pub struct ContextRequest {
    pub target: Target,
    pub conversation_id: String,
    pub query: Option<String>,
    pub event_filter: EventFilter,
    pub event_limit: u32,
    pub decay: TimeDecay,
    pub similarity_threshold: Option<f64>,
    pub profile_filter: ProfileFilter,
    pub profile_limit: u32,
    pub max_tokens: u32,
    pub include: Include,
    /// `None`: follow the conversation's language.
    pub locale: Option<Locale>,
}

#[derive(Clone, Debug)]
pub struct ContextResult {
    pub assembled: Assembled,
    pub locale: Locale,
}

#[derive(Clone, Debug)]
pub struct EventSearch {
    pub target: Target,
    pub query: Option<String>,
    pub filter: EventFilter,
    pub limit: u32,
    pub decay: TimeDecay,
    pub custom_weight: f64,
    /// Overrides the configured threshold (`origin_score` below it is left out).
    pub similarity_threshold: Option<f64>,
    pub freshness_days: Option<f64>,
    /// Also search archived events.
    pub include_archived: bool,
}

impl EventSearch {
    /// A plain search: no decay, custom weight, threshold or freshness window; active events only.
    pub fn new(target: Target, query: Option<String>, filter: EventFilter, limit: u32) -> Self {
        Self {
            target,
            query,
            filter,
            limit,
            decay: TimeDecay::NONE,
            custom_weight: 0.0,
            similarity_threshold: None,
            freshness_days: None,
            include_archived: false,
        }
    }
}

#[derive(Clone, Debug)]
pub struct ScoredEvent {
    pub event: Event,
    pub scores: Scores,
    /// The scope layer the result came from (`global` when found by the fallback).
    pub layer: Option<String>,
}

pub const EVENT_CLASSES: [&str; 3] = ["temporary", "conclusion", "process"];

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
    /// Set when an event was stored without a vector; the re-index loop only scans then.
    vectors_missing: std::sync::atomic::AtomicBool,
    /// Hits not yet written: (collection, event ids, when).
    pending_hits: std::sync::Mutex<Vec<(CollectionId, Vec<String>, Millis)>>,
    /// Per (collection, user): extraction commits of one user are serialised (dedup).
    user_locks: std::sync::Mutex<HashMap<(CollectionId, String), UserLock>>,
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
        TokenCounter::warm();
        crate::text::warm();
        Arc::new(Self {
            store,
            extractors,
            embedder,
            clock,
            config,
            job_queued: Notify::new(),
            collections: Default::default(),
            job_outcomes: JobOutcomes::default(),
            pending_hits: Default::default(),
            user_locks: Default::default(),
            // Set at start: the first loop pass checks for events a previous process left without a vector.
            vectors_missing: std::sync::atomic::AtomicBool::new(true),
        })
    }

    pub fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.embedder
    }

    /// Start-up check: every collection was indexed with this server's embedding model, or is
    /// adopted by it now (no model recorded yet). A mismatch is refused with both models named.
    pub async fn check_embedding_model(&self) -> CoreResult<()> {
        let (model, dim) = (self.embedder.model_id(), self.embedder.dimension() as u32);
        for c in self.store.all_collections().await? {
            match (&c.embedding_model, c.embedding_dim) {
                (Some(m), Some(d)) if m == model && d == dim => {}
                (None, _) => self.store.set_collection_embedding(c.id, model, dim).await?,
                (m, d) => {
                    return Err(CoreError::Conflict(format!(
                        "collection \"{}\" in project \"{}\" was indexed with embedding model {} ({} dims), but this server is configured with {model} ({dim} dims); vectors of different models are not comparable. Start with the collection's model, or use a new data directory.",
                        c.collection_name,
                        c.project_name,
                        m.as_deref().unwrap_or("?"),
                        d.map(|d| d.to_string()).unwrap_or_else(|| "?".into())
                    )));
                }
            }
        }
        Ok(())
    }

    /// Embeds events that have no vector yet (e.g. written by an older version). Returns how many.
    pub async fn reindex_missing(&self) -> CoreResult<usize> {
        let mut n = 0;
        for c in self.store.all_collections().await? {
            loop {
                let events = self.store.events_missing_vectors(c.id, 256).await?;
                if events.is_empty() {
                    break;
                }
                for e in &events {
                    let v = self.embed_one(&e.text(), EmbedKind::Document).await?;
                    self.store.set_event_vector(c.id, &e.id, v).await?;
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    async fn embed_one(&self, text: &str, kind: EmbedKind) -> CoreResult<Vec<f32>> {
        let mut v = self
            .embedder
            .embed(&[text.to_string()], kind)
            .await
            .map_err(|e| CoreError::Internal(format!("embedding failed: {e}")))?;
        v.pop().ok_or_else(|| CoreError::Internal("the embedder returned no vector".into()))
    }

    /// When an event of `class` expires unless hit: `temporary` events after the collection's
    /// `temporary_ttl_days`, else the server's `lifecycle.temporary_ttl_days`; others never.
    fn default_expiry(&self, schema: &CollectionSchema, class: Option<&str>, now: Millis) -> Option<Millis> {
        (class == Some("temporary")).then(|| {
            let ttl = schema
                .temporary_ttl_days
                .map(|d| (d * ranking::DAY_MS) as i64)
                .unwrap_or(self.config.lifecycle.temporary_ttl.as_millis() as i64);
            now + ttl
        })
    }

    fn new_collection(&self, t: &Target, description: String, schema: CollectionSchema) -> NewCollection {
        NewCollection {
            project_name: t.project.clone(),
            collection_name: t.collection.clone(),
            description,
            schema,
            embedding_model: self.embedder.model_id().to_string(),
            embedding_dim: self.embedder.dimension() as u32,
            created_at: self.now(),
        }
    }

    pub fn config(&self) -> &ServiceConfig {
        &self.config
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
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

    // ------------------------------------------------------------------ collections

    /// The collection a write goes to: created with the default schema on first use.
    pub async fn collection_for_write(&self, t: &Target) -> CoreResult<Collection> {
        if !self.config.auto_create_collections {
            return self.collection_for_read(t).await;
        }
        match self.collection_for_read(t).await {
            Err(CoreError::NotFound(_)) => Ok(self
                .store
                .ensure_collection(self.new_collection(t, String::new(), CollectionSchema::default()))
                .await?),
            other => other,
        }
    }

    /// The collection a read goes to: it must exist.
    pub async fn collection_for_read(&self, t: &Target) -> CoreResult<Collection> {
        validate_names(t)?;
        let key = (t.project.clone(), t.collection.clone());
        let now = self.now();
        if let Some((at, c)) = self.collections.read().expect("collection cache").get(&key)
            && now - at < COLLECTION_CACHE_MS
        {
            return Ok(c.clone());
        }
        let c = self.store.get_collection(&t.project, &t.collection).await?.ok_or_else(|| {
            CoreError::NotFound(format!(
                "collection_name: no collection \"{}\" in project \"{}\" (it is created by the first write, or by collection/create)",
                t.collection, t.project
            ))
        })?;
        self.collections.write().expect("collection cache").insert(key, (now, c.clone()));
        Ok(c)
    }

    fn forget_collection(&self, t: &Target) {
        self.collections.write().expect("collection cache").remove(&(t.project.clone(), t.collection.clone()));
    }

    pub async fn create_collection(
        &self,
        t: &Target,
        description: String,
        event_types: Vec<EventTypeDef>,
        profile_types: Vec<ProfileTypeDef>,
        temporary_ttl_days: Option<f64>,
        extractor: Option<String>,
    ) -> CoreResult<Collection> {
        validate_names(t)?;
        validate_schema(&event_types, &profile_types)?;
        if let Some(name) = &extractor
            && self.extractors.get(Some(name)).is_none()
        {
            return Err(CoreError::invalid(
                "extractor",
                format!(
                    "\"{name}\" is not configured on this server (configured: {})",
                    self.extractors.names().join(", ")
                ),
            ));
        }
        if let Some(d) = temporary_ttl_days
            && !(d > 0.0 && d <= 36_500.0)
        {
            return Err(CoreError::invalid(
                "temporary_ttl_days",
                format!("must be a number of days in (0,36500], got {d}"),
            ));
        }
        let mut schema = CollectionSchema::with_builtins(event_types, profile_types);
        schema.temporary_ttl_days = temporary_ttl_days;
        schema.extractor = extractor;
        Ok(self.store.create_collection(self.new_collection(t, description, schema)).await?)
    }

    pub async fn list_collections(&self, project: &str) -> CoreResult<Vec<Collection>> {
        Ok(self.store.list_collections(project).await?)
    }

    pub async fn delete_collection(&self, t: &Target) -> CoreResult<()> {
        let c = self.collection_for_read(t).await?;
        self.forget_collection(t);
        self.store.delete_collection(c.id).await?;
        self.forget_collection(t);
        Ok(())
    }

    // ------------------------------------------------------------------ write path

    pub async fn streaming_write(&self, req: WriteRequest) -> CoreResult<AppendOutcome> {
        let append = self.prepare_append(req).await?;
        let out = self.store.append_messages(append).await?;
        if out.closed.is_some() {
            self.job_queued.notify_waiters();
        }
        Ok(out)
    }

    pub async fn session_add(&self, req: WriteRequest) -> CoreResult<SessionClosed> {
        let append = self.prepare_append(req).await?;
        let closed = self.store.add_session(append).await?;
        self.job_queued.notify_waiters();
        Ok(closed)
    }

    pub async fn flush(&self, t: &Target, conversation_id: &str) -> CoreResult<Option<SessionClosed>> {
        validate_conversation_id(conversation_id)?;
        let c = self.collection_for_read(t).await?;
        let closed =
            self.store.flush_conversation(c.id, conversation_id, self.now(), self.config.max_job_attempts).await?;
        if closed.is_some() {
            self.job_queued.notify_waiters();
        }
        Ok(closed)
    }

    pub async fn conversation_info(&self, t: &Target, conversation_id: &str) -> CoreResult<ConversationInfo> {
        validate_conversation_id(conversation_id)?;
        let c = self.collection_for_read(t).await?;
        self.store
            .conversation_info(c.id, conversation_id)
            .await?
            .ok_or_else(|| CoreError::NotFound(format!("conversation_id: no conversation \"{conversation_id}\"")))
    }

    pub async fn session_info(&self, t: &Target, session_id: &str) -> CoreResult<SessionDetail> {
        validate_id("session_id", session_id)?;
        let c = self.collection_for_read(t).await?;
        self.store
            .session_info(c.id, session_id)
            .await?
            .ok_or_else(|| CoreError::NotFound(format!("session_id: no session \"{session_id}\"")))
    }

    async fn prepare_append(&self, req: WriteRequest) -> CoreResult<AppendRequest> {
        validate_conversation_id(&req.conversation_id)?;
        if req.messages.is_empty() || req.messages.len() > MAX_MESSAGES_PER_WRITE {
            return Err(CoreError::invalid(
                "messages",
                format!("must hold 1..={MAX_MESSAGES_PER_WRITE} messages, got {}", req.messages.len()),
            ));
        }
        let now = self.now();
        let mut messages = Vec::with_capacity(req.messages.len());
        for (i, mut m) in req.messages.into_iter().enumerate() {
            if m.content.trim().is_empty() {
                return Err(CoreError::invalid(format!("messages[{i}].content"), "must not be empty"));
            }
            if let std::borrow::Cow::Owned(r) = self.config.redaction.apply(&m.content) {
                m.content = r;
            }
            if m.content.trim().is_empty() {
                return Err(CoreError::invalid(format!("messages[{i}].content"), "must not be empty"));
            }
            let chars = m.content.chars().count();
            if chars > MAX_CONTENT_CHARS {
                return Err(CoreError::invalid(
                    format!("messages[{i}].content"),
                    format!("must be at most {MAX_CONTENT_CHARS} characters, got {chars}"),
                ));
            }
            if let Some(name) = &m.name {
                check_len(&format!("messages[{i}].name"), name, 1, MAX_NAME_CHARS)?;
            }
            if let Some(key) = &m.idempotency_key {
                check_len(&format!("messages[{i}].idempotency_key"), key, 1, MAX_ID_CHARS)?;
            }
            if let Some(t) = m.time {
                check_time(&format!("messages[{i}].time"), t)?;
            }
            let tokens = TokenCounter::count(&m.content) as u64;
            messages.push(NewMessage {
                role: m.role,
                tokens,
                content: m.content,
                name: m.name,
                time: m.time.unwrap_or(now),
                idempotency_key: m.idempotency_key,
            });
        }
        validate_meta(&req.meta)?;
        let mut meta = req.meta;
        for v in meta.extra.values_mut() {
            self.config.redaction.apply_json(v);
        }
        let collection =
            self.collection_for_write(&Target { project: req.project, collection: req.collection }).await?;
        let append = AppendRequest {
            collection_id: collection.id,
            conversation_id: req.conversation_id,
            meta,
            messages,
            trigger: req.trigger,
            now,
            max_job_attempts: self.config.max_job_attempts,
        };
        Ok(append)
    }

    // ------------------------------------------------------------------ jobs

    pub async fn list_jobs(&self, t: &Target, filter: JobFilter) -> CoreResult<Vec<Job>> {
        let c = self.collection_for_read(t).await?;
        Ok(self.store.list_jobs(c.id, filter).await?)
    }

    /// Closes every conversation whose idle deadline has passed. Returns how many.
    pub async fn close_idle_once(&self) -> CoreResult<usize> {
        let mut total = 0;
        loop {
            let closed = self.store.close_idle_conversations(self.now(), 100, self.config.max_job_attempts).await?;
            total += closed.len();
            if !closed.is_empty() {
                self.job_queued.notify_waiters();
            }
            if closed.len() < 100 {
                return Ok(total);
            }
        }
    }

    /// Spawns the extraction workers and the idle scheduler; they stop when `shutdown` turns true.
    pub fn spawn_background(self: &Arc<Self>, shutdown: watch::Receiver<bool>) -> Vec<tokio::task::JoinHandle<()>> {
        let mut handles = Vec::new();
        for worker in 0..self.config.workers.max(1) {
            let svc = self.clone();
            let mut stop = shutdown.clone();
            handles.push(tokio::spawn(async move {
                loop {
                    if *stop.borrow() {
                        break;
                    }
                    match svc.try_run_one().await {
                        Ok(true) => continue,
                        Ok(false) => {}
                        Err(e) => {
                            tracing::error!(worker, error = %e, "extraction worker step failed")
                        }
                    }
                    let wait = svc.sleep_until_due(svc.store.next_job_due().await.ok().flatten());
                    tokio::select! {
                        _ = stop.changed() => {}
                        _ = svc.job_queued.notified() => {}
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
            }));
        }
        // Scheduled maintenance (default daily; the first run one interval after start).
        handles.push(self.spawn_every(&shutdown, self.config.lifecycle.maintenance_interval, |svc| async move {
            if let Err(e) = svc.maintain(None, "schedule").await {
                tracing::error!(error = %e, "scheduled maintenance failed");
            }
        }));
        // Re-index: events stored without a vector (provider down) are embedded when it is back.
        let period = self.config.poll_interval.max(Duration::from_secs(1)) * 5;
        handles.push(self.spawn_every(&shutdown, period, |svc| async move {
            // Scanning for vector-less events costs a pass over the index: only when needed.
            if !svc.vectors_missing.swap(false, std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            match svc.reindex_missing().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(events = n, "embedded events stored without a vector"),
                Err(e) => {
                    svc.vectors_missing.store(true, std::sync::atomic::Ordering::SeqCst);
                    tracing::debug!(error = %e, "re-index postponed");
                }
            }
        }));
        // Hits: written in batches every 200 ms, and once more on shutdown.
        let svc = self.clone();
        let mut stop = shutdown.clone();
        handles.push(tokio::spawn(async move {
            loop {
                let stopping = *stop.borrow();
                if let Err(e) = svc.flush_hits().await {
                    tracing::warn!(error = %e, "recording hits failed");
                }
                if stopping {
                    break;
                }
                tokio::select! {
                    _ = stop.changed() => {}
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                }
            }
        }));
        let svc = self.clone();
        let mut stop = shutdown;
        handles.push(tokio::spawn(async move {
            loop {
                if *stop.borrow() {
                    break;
                }
                if let Err(e) = svc.close_idle_once().await {
                    tracing::error!(error = %e, "idle scheduler step failed");
                }
                let wait = svc.sleep_until_due(svc.store.next_idle_deadline().await.ok().flatten());
                tokio::select! {
                    _ = stop.changed() => {}
                    _ = tokio::time::sleep(wait) => {}
                }
            }
        }));
        handles
    }

    /// Runs `tick` every `period` (the first one period after start) until shutdown.
    fn spawn_every<F, Fut>(
        self: &Arc<Self>,
        shutdown: &watch::Receiver<bool>,
        period: Duration,
        tick: F,
    ) -> tokio::task::JoinHandle<()>
    where
        F: Fn(Arc<Self>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let (svc, mut stop) = (self.clone(), shutdown.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.changed() => {}
                    _ = tokio::time::sleep(period) => {}
                }
                if *stop.borrow() {
                    break;
                }
                tick(svc.clone()).await;
            }
        })
    }

    fn sleep_until_due(&self, due: Option<Millis>) -> Duration {
        let cap = self.config.poll_interval;
        match due {
            Some(t) => Duration::from_millis((t - self.now()).clamp(0, cap.as_millis() as i64) as u64),
            None => cap,
        }
    }

    // ------------------------------------------------------------------ events

    pub async fn add_event(&self, req: AddEventRequest) -> CoreResult<Event> {
        let c = self.collection_for_write(&req.target).await?;
        let def = c.schema.event_type(&req.memory_type).ok_or_else(|| {
            CoreError::invalid(
                "event_type",
                format!(
                    "unknown event type \"{}\"; this collection has: {}",
                    req.memory_type,
                    c.schema.event_types.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
            )
        })?;
        if req.user_id.is_empty() && req.assistant_id.is_empty() {
            return Err(CoreError::invalid("user_id", "at least one of user_id and assistant_id is required"));
        }
        for (field, ids) in [("user_id", &req.user_id), ("assistant_id", &req.assistant_id)] {
            for id in ids {
                check_len(field, id, 1, MAX_ID_CHARS)?;
            }
        }
        validate_memory_info(def, &req.memory_info, "memory_info", true)?;
        let mut req = req;
        for v in req.memory_info.values_mut() {
            self.config.redaction.apply_json(v);
        }
        let class = validate_class(req.class.clone().or_else(|| def.default_class.clone()))?;
        if let Some(t) = req.time {
            check_time("time", t)?;
        }
        let now = self.now();
        let expires_at = match (req.ttl_absolute, req.ttl_relative) {
            (Some(_), Some(_)) => {
                return Err(CoreError::invalid("ttl_relative", "give ttl_relative or ttl_absolute, not both"));
            }
            (Some(t), None) => {
                check_time("ttl_absolute", t)?;
                Some(t)
            }
            (None, Some(secs)) if (1..=315_360_000).contains(&secs) => Some(now + secs * 1000),
            (None, Some(secs)) => {
                return Err(CoreError::invalid(
                    "ttl_relative",
                    format!("must be seconds in 1..=315360000, got {secs}"),
                ));
            }
            (None, None) => self.default_expiry(&c.schema, Some(&class), now),
        };
        // A failing embedding provider must not lose the write: the event is stored without a
        // vector (full text still finds it) and the re-index loop embeds it once the provider is back.
        let embedding = match self.embed_one(&event_text(&req.memory_info), EmbedKind::Document).await {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(error = %e, "storing an event without a vector; it is embedded when the provider recovers");
                self.vectors_missing.store(true, std::sync::atomic::Ordering::SeqCst);
                None
            }
        };
        Ok(self
            .store
            .insert_event(NewEvent {
                collection_id: c.id,
                memory_type: req.memory_type,
                user_id: req.user_id,
                assistant_id: req.assistant_id,
                group_id: req.group_id,
                session_id: req.session_id,
                conversation_id: req.conversation_id,
                scope: req.scope,
                class,
                time: req.time.unwrap_or(now),
                memory_info: req.memory_info,
                source_message_ids: vec![],
                embedding,
                expires_at,
                now,
            })
            .await?)
    }

    pub async fn update_event(&self, t: &Target, id: &str, patch: EventPatch) -> CoreResult<Event> {
        validate_id("event_id", id)?;
        let c = self.collection_for_read(t).await?;
        let existing = self
            .store
            .get_event(c.id, id)
            .await?
            .ok_or_else(|| CoreError::NotFound(format!("event_id: no event \"{id}\"")))?;
        if let Some(info) = &patch.memory_info {
            let def = c.schema.event_type(&existing.memory_type).ok_or_else(|| {
                CoreError::Conflict(format!("event type \"{}\" is no longer in the schema", existing.memory_type))
            })?;
            validate_memory_info(def, info, "memory_info", false)?;
        }
        if let Some(t) = patch.time {
            check_time("time", t)?;
        }
        let mut patch = EventPatch { class: patch.class.map(|c| validate_class(Some(c))).transpose()?, ..patch };
        if let Some(info) = patch.memory_info.as_mut() {
            info.values_mut().for_each(|v| self.config.redaction.apply_json(v));
        }
        if let Some(info) = &patch.memory_info {
            let mut merged = existing.memory_info.clone();
            merged.extend(info.clone());
            patch.embedding = Some(self.embed_one(&event_text(&merged), EmbedKind::Document).await?);
        }
        Ok(self.store.update_event(c.id, id, patch, self.now()).await?)
    }

    pub async fn get_event(&self, t: &Target, id: &str) -> CoreResult<Event> {
        validate_id("event_id", id)?;
        let c = self.collection_for_read(t).await?;
        self.store.get_event(c.id, id).await?.ok_or_else(|| CoreError::NotFound(format!("event_id: no event \"{id}\"")))
    }

    pub async fn delete_event(&self, t: &Target, id: &str) -> CoreResult<()> {
        validate_id("event_id", id)?;
        let c = self.collection_for_read(t).await?;
        if self.store.delete_event(c.id, id).await? {
            Ok(())
        } else {
            Err(CoreError::NotFound(format!("event_id: no event \"{id}\"")))
        }
    }

    pub async fn batch_delete_events(&self, t: &Target, filter: EventFilter) -> CoreResult<u64> {
        if filter.is_empty() {
            return Err(CoreError::invalid(
                "filter",
                "must name at least one of user_id, assistant_id, group_id, event_type, session_id, start_time, end_time (an empty filter would delete the whole collection; use collection/delete for that)",
            ));
        }
        validate_time_range(&filter)?;
        let c = self.collection_for_read(t).await?;
        Ok(self.store.batch_delete_events(c.id, filter).await?)
    }

    /// Events matching the filter, newest first (the no-query form of `event/search`).
    pub async fn list_events(&self, t: &Target, filter: EventFilter, limit: u32) -> CoreResult<Vec<Event>> {
        validate_time_range(&filter)?;
        let c = self.collection_for_read(t).await?;
        Ok(self.store.list_events(c.id, filter, limit).await?)
    }

    /// `event/search`: with a query, ranked by relevance, time and custom weight; without one,
    /// the newest first (scores still reported).
    pub async fn search_events(&self, req: EventSearch) -> CoreResult<Vec<ScoredEvent>> {
        if req.filter.user_id.is_empty() && req.filter.assistant_id.is_empty() {
            return Err(CoreError::invalid(
                "filter.user_id",
                "at least one of filter.user_id and filter.assistant_id is required",
            ));
        }
        if let Some(q) = &req.query {
            let n = q.chars().count();
            if n > MAX_QUERY_CHARS {
                return Err(CoreError::invalid(
                    "query",
                    format!("must be at most {MAX_QUERY_CHARS} characters, got {n}"),
                ));
            }
        }
        validate_time_range(&req.filter)?;
        if let Some(t) = req.similarity_threshold
            && !(0.0..=1.0).contains(&t)
        {
            return Err(CoreError::invalid("similarity_threshold", format!("must be in [0,1], got {t}")));
        }
        if let Some(d) = req.freshness_days
            && !(0.0..=100_000.0).contains(&d)
        {
            return Err(CoreError::invalid(
                "freshness_days",
                format!("must be a number of days in [0,100000], got {d}"),
            ));
        }
        let c = self.collection_for_read(&req.target).await?;
        let results = self.search_in(&c, &req).await?;
        // A hit is a recall: a query search or a context. Listing (no query) is browsing — it
        // must not keep memories alive against expiry and archiving.
        if req.query.as_deref().is_some_and(|q| !q.trim().is_empty()) {
            self.count_hits(&c, &results);
        }
        Ok(results)
    }

    /// Queues hits for the returned events; the hits loop writes them in batches, so a search
    /// never waits for a write.
    fn count_hits(&self, c: &Collection, results: &[ScoredEvent]) {
        if results.is_empty() {
            return;
        }
        let now = self.now();
        let mut pending = self.pending_hits.lock().expect("hit buffer");
        pending.push((c.id, results.iter().map(|r| r.event.id.clone()).collect(), now));
    }

    /// Writes the queued hits. Returns how many events were counted.
    pub async fn flush_hits(&self) -> CoreResult<usize> {
        let batch = std::mem::take(&mut *self.pending_hits.lock().expect("hit buffer"));
        let mut n = 0;
        for (cid, ids, at) in batch {
            n += ids.len();
            self.store.record_hits(cid, ids, at).await?;
        }
        Ok(n)
    }

    /// Search within one collection, with the layered scope fallback (seed 002 §6.1).
    async fn search_in(&self, c: &Collection, req: &EventSearch) -> CoreResult<Vec<ScoredEvent>> {
        let now = self.now();
        let mut filter = req.filter.clone();
        filter.active_only = !req.include_archived;
        let freshness = req.freshness_days.or(self.config.retrieval.freshness_days);
        if let Some(days) = freshness {
            let from = now - (days * ranking::DAY_MS) as i64;
            filter.start_time = Some(filter.start_time.map_or(from, |s| s.max(from)));
        }
        let query = req.query.as_deref().map(str::trim).filter(|q| !q.is_empty());
        let Some(query) = query else {
            let events = self.store.list_events(c.id, filter, req.limit).await?;
            return Ok(events
                .into_iter()
                .map(|e| {
                    let scores = ranking::score(1.0, &e, &c.schema, now, &req.decay, req.custom_weight);
                    ScoredEvent { layer: e.scope.clone(), event: e, scores }
                })
                .collect());
        };
        // Without the embedding provider, search degrades to full text instead of failing.
        let qv = match self.embed_one(query, EmbedKind::Query).await {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(error = %e, "query embedding failed; searching full text only");
                None
            }
        };
        let terms = crate::text::search_tokens(query);
        let threshold = req.similarity_threshold.or(self.config.retrieval.similarity_threshold).unwrap_or(0.0);
        let ranked = |cands: Vec<Candidate>, layer: Option<&str>| -> Vec<ScoredEvent> {
            let mut out: Vec<ScoredEvent> = cands
                .into_iter()
                .filter_map(|cand| {
                    let origin = ranking::fuse(cand.cosine, cand.bm25);
                    (origin >= threshold).then(|| {
                        let scores = ranking::score(origin, &cand.event, &c.schema, now, &req.decay, req.custom_weight);
                        let layer = layer.map(str::to_string).or_else(|| cand.event.scope.clone());
                        ScoredEvent { event: cand.event, scores, layer }
                    })
                })
                .collect();
            out.sort_by(|a, b| b.scores.score.total_cmp(&a.scores.score).then(b.event.time.cmp(&a.event.time)));
            out.truncate(req.limit as usize);
            out
        };
        let k = (req.limit as usize * 3).max(50);
        let cq = CandidateQuery { vector: qv, terms, k };
        let mut results = ranked(self.store.search_candidates(c.id, filter.clone(), cq.clone()).await?, None);
        // Layers: a search in a scope other than global falls back to global when it is short.
        let scoped = !filter.scope.is_empty() && !filter.scope.iter().any(|s| s == GLOBAL_SCOPE);
        if scoped && results.len() < req.limit as usize {
            let mut global = filter.clone();
            global.scope = vec![GLOBAL_SCOPE.to_string()];
            for r in ranked(self.store.search_candidates(c.id, global, cq).await?, Some(GLOBAL_SCOPE)) {
                if results.len() >= req.limit as usize {
                    break;
                }
                if !results.iter().any(|x| x.event.id == r.event.id) {
                    results.push(r);
                }
            }
        }
        Ok(results)
    }

    // ------------------------------------------------------------------ lifecycle

    /// One maintenance pass over the given collections (all when `None`): deletes expired events
    /// that were never hit, archives events not hit for `archive_after`. Each run is recorded.
    pub async fn maintain(&self, project: Option<&str>, trigger: &str) -> CoreResult<Vec<MaintenanceRun>> {
        let now = self.now();
        let archive_before = now - self.config.lifecycle.archive_after.as_millis() as i64;
        let collections = match project {
            Some(p) => self.store.list_collections(p).await?,
            None => self.store.all_collections().await?,
        };
        let mut runs = Vec::new();
        for c in collections {
            let mut run = self.store.run_maintenance(c.id, now, archive_before, trigger).await?;
            let (folded, digests) = self.fold_and_digest(&c, now).await?;
            if folded + digests > 0 {
                self.store.note_maintenance(c.id, folded, digests).await?;
                run.folded = folded;
                run.digests = digests;
            }
            if run.expired + run.archived > 0 {
                tracing::info!(collection = %c.collection_name, expired = run.expired, archived = run.archived, "maintenance");
            }
            runs.push(run);
        }
        Ok(runs)
    }

    /// Folds old `process` events per user and day into one summary, and writes the daily digest
    /// of each user for each finished day of the last week that has none yet. Extractive and
    /// deterministic (the LLM extractor can do better later). Returns (events folded, digests).
    async fn fold_and_digest(&self, c: &Collection, now: Millis) -> CoreResult<(u64, u64)> {
        const DAY: i64 = 86_400_000;
        let today = now.div_euclid(DAY) * DAY;
        let filter = EventFilter { start_time: Some(today - 7 * DAY), end_time: Some(now), ..Default::default() };
        let events = self.store.list_events(c.id, filter, 5000).await?;
        let user_key = |e: &Event| e.user_id.first().cloned().unwrap_or_default();
        let join = |texts: Vec<String>, max: usize| -> (String, bool) {
            let zh = crate::text::looks_chinese(&texts.concat());
            let s = texts.join(if zh { "；" } else { "; " });
            let cut: String = s.chars().take(max).collect();
            (if cut.len() < s.len() { format!("{cut}…") } else { s }, zh)
        };
        let day_name = |t: Millis| crate::context::format_time(t)[..10].to_string();

        // Fold: process notes of one user and day become one summary.
        let fold_before = now - self.config.lifecycle.fold_process_after.as_millis() as i64;
        let mut groups: std::collections::BTreeMap<(String, i64), Vec<&Event>> = Default::default();
        for e in events.iter().filter(|e| e.class == "process" && e.status == "active" && e.time < fold_before) {
            groups.entry((user_key(e), e.time.div_euclid(DAY))).or_default().push(e);
        }
        let mut folded = 0;
        for ((_, day), mut group) in groups.into_iter().filter(|(_, g)| g.len() >= 2) {
            group.sort_by_key(|e| e.time);
            let (text, zh) = join(group.iter().map(|e| e.text()).collect(), 400);
            let summary =
                format!("{} {}: {text}", day_name(day * DAY), if zh { "过程记录汇总" } else { "process notes" });
            let mut info = Map::new();
            info.insert("summary".into(), Value::String(summary.clone()));
            let union = |f: fn(&Event) -> &Vec<String>| {
                let mut v: Vec<String> = group.iter().flat_map(|e| f(e).iter().cloned()).collect();
                v.sort();
                v.dedup();
                v
            };
            let new = NewEvent {
                collection_id: c.id,
                memory_type: EVENT_V1.into(),
                user_id: union(|e| &e.user_id),
                assistant_id: union(|e| &e.assistant_id),
                group_id: group[0].group_id.clone(),
                session_id: None,
                conversation_id: None,
                scope: group[0].scope.clone(),
                class: "conclusion".into(),
                time: group.iter().map(|e| e.time).min().unwrap_or(now),
                memory_info: info,
                source_message_ids: group.iter().flat_map(|e| e.source_message_ids.iter().copied()).collect(),
                embedding: Some(self.embed_one(&summary, EmbedKind::Document).await?),
                expires_at: None,
                now,
            };
            folded += group.len() as u64;
            self.store.replace_events(c.id, group.iter().map(|e| e.id.clone()).collect(), new).await?;
        }

        // Digest: one per user and finished day.
        if !self.config.lifecycle.daily_digest {
            return Ok((folded, 0));
        }
        let have: std::collections::HashSet<(String, i64)> = events
            .iter()
            .filter(|e| e.memory_type == DAILY_DIGEST)
            .map(|e| (user_key(e), e.time.div_euclid(DAY)))
            .collect();
        let mut days: std::collections::BTreeMap<(String, i64), Vec<&Event>> = Default::default();
        for e in events.iter().filter(|e| e.memory_type != DAILY_DIGEST && e.time < today && !e.user_id.is_empty()) {
            days.entry((user_key(e), e.time.div_euclid(DAY))).or_default().push(e);
        }
        let mut digests = 0;
        for ((user, day), mut evs) in days {
            if have.contains(&(user.clone(), day)) {
                continue;
            }
            evs.sort_by_key(|e| e.time);
            let (text, zh) = join(evs.iter().map(|e| e.text()).collect(), 300);
            let summary = format!("{} {}: {text}", day_name(day * DAY), if zh { "小结" } else { "recap" });
            let mut info = Map::new();
            info.insert("summary".into(), Value::String(summary.clone()));
            self.store
                .insert_event(NewEvent {
                    embedding: Some(self.embed_one(&summary, EmbedKind::Document).await?),
                    now,
                    ..NewEvent::of_user(c.id, DAILY_DIGEST, user, info, day * DAY + DAY - 1)
                })
                .await?;
            digests += 1;
        }
        Ok((folded, digests))
    }

    pub async fn maintenance_runs(&self, t: &Target, limit: u32) -> CoreResult<Vec<MaintenanceRun>> {
        let c = self.collection_for_read(t).await?;
        Ok(self.store.list_maintenance_runs(c.id, limit).await?)
    }

    // ------------------------------------------------------------------ stats

    /// `stats`: new memories and hits per day, the most-hit events, the never-hit count, and
    /// extraction jobs with their token cost per day — for a collection, or one user in it.
    pub async fn memory_stats(&self, t: &Target, user_id: Option<String>, days: u32) -> CoreResult<MemoryStats> {
        if !(1..=3650).contains(&days) {
            return Err(CoreError::invalid("days", format!("must be an integer in 1..=3650, got {days}")));
        }
        if let Some(u) = &user_id {
            check_len("user_id", u, 1, MAX_ID_CHARS)?;
        }
        let c = self.collection_for_read(t).await?;
        Ok(self.store.memory_stats(c.id, user_id, days, self.now()).await?)
    }

    // ------------------------------------------------------------------ privacy

    /// The collections a user-level call covers: one, or every collection of the project.
    async fn user_scope(&self, project: &str, collection: Option<&str>, user_id: &str) -> CoreResult<Vec<Collection>> {
        check_len("user_id", user_id, 1, MAX_ID_CHARS)?;
        match collection {
            Some(name) => {
                Ok(vec![self.collection_for_read(&Target { project: project.into(), collection: name.into() }).await?])
            }
            None => {
                validate_name("project_name", project)?;
                Ok(self.store.list_collections(project).await?)
            }
        }
    }

    /// `user/export`: everything stored about a user, per collection.
    pub async fn export_user(
        &self,
        project: &str,
        collection: Option<&str>,
        user_id: &str,
    ) -> CoreResult<Vec<(String, UserData)>> {
        let mut out = Vec::new();
        for c in self.user_scope(project, collection, user_id).await? {
            out.push((c.collection_name.clone(), self.store.export_user(c.id, user_id).await?));
        }
        Ok(out)
    }

    /// `user/forget`: deletes everything stored about a user (rows, vectors, full text), per
    /// collection, each in one transaction. Other users' data is untouched.
    pub async fn forget_user(
        &self,
        project: &str,
        collection: Option<&str>,
        user_id: &str,
    ) -> CoreResult<Vec<(String, ForgetCounts)>> {
        let mut out = Vec::new();
        for c in self.user_scope(project, collection, user_id).await? {
            let n = self.store.forget_user(c.id, user_id).await?;
            tracing::info!(collection = %c.collection_name, ?n, "forgot a user");
            out.push((c.collection_name.clone(), n));
        }
        Ok(out)
    }

    // ------------------------------------------------------------------ get_context

    pub async fn get_context(&self, req: ContextRequest) -> CoreResult<ContextResult> {
        validate_conversation_id(&req.conversation_id)?;
        if !(MAX_TOKENS_RANGE.0..=MAX_TOKENS_RANGE.1).contains(&req.max_tokens) {
            return Err(CoreError::invalid(
                "max_tokens",
                format!(
                    "must be an integer in {}..={}, got {}",
                    MAX_TOKENS_RANGE.0, MAX_TOKENS_RANGE.1, req.max_tokens
                ),
            ));
        }
        if let Some(q) = &req.query
            && q.chars().count() > MAX_QUERY_CHARS
        {
            return Err(CoreError::invalid("query", format!("must be at most {MAX_QUERY_CHARS} characters")));
        }
        let c = self.collection_for_read(&req.target).await?;
        let conv = self.store.conversation_info(c.id, &req.conversation_id).await?;
        let meta = conv.as_ref().map(|c| c.meta.clone()).unwrap_or_default();
        // Whose memories: the request's filter, else the conversation's metadata.
        let mut filter = req.event_filter.clone();
        if filter.user_id.is_empty() && filter.assistant_id.is_empty() {
            filter.user_id.extend(meta.user_id.clone());
            if filter.user_id.is_empty() {
                filter.assistant_id.extend(meta.assistant_id.clone());
            }
        }
        let mut profile_filter = req.profile_filter.clone();
        if profile_filter.user_id.is_empty() {
            profile_filter.user_id = filter.user_id.clone();
        }
        let known = !filter.user_id.is_empty() || !filter.assistant_id.is_empty();
        let mut cands = crate::context::Candidates::default();
        if req.include.profile && !profile_filter.user_id.is_empty() {
            cands.profiles = self.store.list_profiles(c.id, profile_filter, req.profile_limit).await?;
        }
        if req.include.short_term
            && let Some(conv) = &conv
        {
            cands.short_term =
                conv.short_term.iter().filter(|m| matches!(m.role, Role::User | Role::Assistant)).cloned().collect();
        }
        let fresh = conv.as_ref().is_none_or(|c| c.short_term.is_empty() && c.sessions.is_empty());
        if req.include.recap && fresh && known {
            let f = EventFilter { memory_type: vec![DAILY_DIGEST.into()], active_only: true, ..filter.clone() };
            cands.recap = self
                .store
                .list_events(c.id, f, 1)
                .await?
                .into_iter()
                .map(|e| ScoredEvent {
                    scores: Scores { score: 1.0, origin_score: 1.0, time_score: 1.0, custom_weight_score: 0.0 },
                    layer: None,
                    event: e,
                })
                .next();
        }
        let search = |filter: EventFilter, limit: u32| EventSearch {
            target: req.target.clone(),
            query: req.query.clone(),
            filter,
            limit,
            decay: req.decay,
            custom_weight: 0.0,
            similarity_threshold: req.similarity_threshold,
            freshness_days: None,
            include_archived: false,
        };
        if req.include.intra_events && conv.is_some() {
            let mut f = filter.clone();
            f.conversation_id = vec![req.conversation_id.clone()];
            cands.intra_events = self.search_in(&c, &search(f, req.event_limit)).await?;
        }
        if req.include.cross_events && known && req.query.as_deref().is_some_and(|q| !q.trim().is_empty()) {
            // Ask for more than the limit: this conversation's own events are removed after.
            let found = self.search_in(&c, &search(filter.clone(), req.event_limit + 10)).await?;
            cands.cross_events = found
                .into_iter()
                .filter(|e| e.event.conversation_id.as_deref() != Some(req.conversation_id.as_str()))
                .take(req.event_limit as usize)
                .collect();
        }
        let locale = match req.locale {
            Some(l) => l,
            None => {
                let mut sample = req.query.clone().unwrap_or_default();
                for m in cands.short_term.iter().rev().take(4) {
                    sample.push_str(&m.content);
                }
                for p in &cands.profiles {
                    sample.push_str(&p.content);
                    sample.push_str(&crate::profile::describe(&p.attributes));
                }
                if crate::text::looks_chinese(&sample) { Locale::Zh } else { Locale::En }
            }
        };
        let assembled = crate::context::assemble(cands, locale, req.max_tokens as usize);
        let hit: Vec<ScoredEvent> =
            assembled.included.intra_events.iter().chain(&assembled.included.cross_events).cloned().collect();
        self.count_hits(&c, &hit);
        Ok(ContextResult { assembled, locale })
    }

    // ------------------------------------------------------------------ profiles

    pub async fn add_profile(
        &self,
        t: &Target,
        profile_type: String,
        user_id: String,
        assistant_id: Option<String>,
        content: Option<String>,
        attributes: Map<String, Value>,
    ) -> CoreResult<Profile> {
        check_len("user_id", &user_id, 1, MAX_ID_CHARS)?;
        let c = self.collection_for_write(t).await?;
        if c.schema.profile_type(&profile_type).is_none() {
            return Err(CoreError::invalid(
                "profile_type",
                format!(
                    "unknown profile type \"{profile_type}\"; this collection has: {}",
                    c.schema.profile_types.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        let mut attributes = attributes;
        attributes.values_mut().for_each(|v| self.config.redaction.apply_json(v));
        let content = match content {
            Some(c) => self.config.redaction.apply(&c).into_owned(),
            None => crate::profile::describe(&attributes),
        };
        Ok(self
            .store
            .insert_profile(NewProfile {
                collection_id: c.id,
                profile_type,
                user_id,
                assistant_id,
                content,
                attributes,
                now: self.now(),
            })
            .await?)
    }

    pub async fn update_profile(&self, t: &Target, id: &str, patch: ProfilePatch) -> CoreResult<Profile> {
        validate_id("profile_id", id)?;
        let c = self.collection_for_read(t).await?;
        let mut patch = patch;
        if let Some(content) = patch.content.as_mut() {
            *content = self.config.redaction.apply(content).into_owned();
        }
        if let Some(attrs) = patch.attributes.as_mut() {
            attrs.values_mut().for_each(|v| self.config.redaction.apply_json(v));
        }
        Ok(self.store.update_profile(c.id, id, patch, self.now()).await?)
    }

    pub async fn delete_profile(&self, t: &Target, id: &str) -> CoreResult<()> {
        validate_id("profile_id", id)?;
        let c = self.collection_for_read(t).await?;
        if self.store.delete_profile(c.id, id).await? {
            Ok(())
        } else {
            Err(CoreError::NotFound(format!("profile_id: no profile \"{id}\"")))
        }
    }

    pub async fn list_profiles(&self, t: &Target, filter: ProfileFilter, limit: u32) -> CoreResult<Vec<Profile>> {
        let c = self.collection_for_read(t).await?;
        Ok(self.store.list_profiles(c.id, filter, limit).await?)
    }
}

// ---------------------------------------------------------------------- validation helpers

fn check_len(field: &str, v: &str, min: usize, max: usize) -> CoreResult<()> {
    let n = v.chars().count();
    if n < min || n > max || (min > 0 && v.trim().is_empty()) {
        return Err(CoreError::invalid(field, format!("must be {min}..={max} characters and not blank, got {n}")));
    }
    if v.contains('\0') {
        return Err(CoreError::invalid(field, "must not contain NUL (\\u0000) characters"));
    }
    Ok(())
}

fn check_time(field: &str, t: Millis) -> CoreResult<()> {
    // 0 ..= year 9999: anything else is almost surely seconds-vs-ms confusion or garbage.
    const MAX: Millis = 253_402_300_799_999;
    if !(0..=MAX).contains(&t) {
        return Err(CoreError::invalid(
            field,
            format!("must be milliseconds since the Unix epoch in 0..={MAX}, got {t}"),
        ));
    }
    Ok(())
}

fn validate_names(t: &Target) -> CoreResult<()> {
    validate_name("project_name", &t.project)?;
    validate_name("collection_name", &t.collection)
}

fn validate_name(field: &str, v: &str) -> CoreResult<()> {
    let ok =
        !v.is_empty() && v.len() <= 128 && v.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-' || c == '.');
    if !ok {
        return Err(CoreError::invalid(
            field,
            format!("must be 1..=128 characters of letters, digits, '_', '-', '.', got {v:?}"),
        ));
    }
    Ok(())
}

pub fn validate_conversation_id(id: &str) -> CoreResult<()> {
    check_len("conversation_id", id, 1, MAX_CONVERSATION_ID_CHARS)
}

fn validate_id(field: &str, id: &str) -> CoreResult<()> {
    check_len(field, id, 1, MAX_ID_CHARS)
}

fn validate_meta(m: &ConversationMeta) -> CoreResult<()> {
    for (field, v) in [
        ("metadata.user_id", &m.user_id),
        ("metadata.assistant_id", &m.assistant_id),
        ("metadata.group_id", &m.group_id),
        ("metadata.scope", &m.scope),
    ] {
        if let Some(v) = v {
            check_len(field, v, 1, MAX_ID_CHARS)?;
        }
    }
    Ok(())
}

fn validate_class(class: Option<String>) -> CoreResult<String> {
    match class {
        None => Ok("conclusion".into()),
        Some(c) if EVENT_CLASSES.contains(&c.as_str()) => Ok(c),
        Some(c) => Err(CoreError::invalid("class", format!("must be one of {EVENT_CLASSES:?}, got {c:?}"))),
    }
}

fn validate_time_range(f: &EventFilter) -> CoreResult<()> {
    if let (Some(s), Some(e)) = (f.start_time, f.end_time)
        && s > e
    {
        return Err(CoreError::invalid("filter.start_time", format!("must be <= filter.end_time ({s} > {e})")));
    }
    Ok(())
}

fn validate_schema(events: &[EventTypeDef], profiles: &[ProfileTypeDef]) -> CoreResult<()> {
    let name_ok = |s: &str| !s.is_empty() && s.len() <= 64 && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    for (i, t) in events.iter().enumerate() {
        if !name_ok(&t.name) {
            return Err(CoreError::invalid(format!("event_types[{i}].name"), "must be 1..=64 of [A-Za-z0-9_]"));
        }
        if t.fields.is_empty() {
            return Err(CoreError::invalid(format!("event_types[{i}].fields"), "must list at least one field"));
        }
        if let Some(c) = &t.default_class
            && !EVENT_CLASSES.contains(&c.as_str())
        {
            return Err(CoreError::invalid(
                format!("event_types[{i}].default_class"),
                format!("must be one of {EVENT_CLASSES:?}, got {c:?}"),
            ));
        }
        if let Some(w) = t.weight
            && !(0.0..=1.0).contains(&w)
        {
            return Err(CoreError::invalid(format!("event_types[{i}].weight"), format!("must be in [0,1], got {w}")));
        }
        for (j, f) in t.fields.iter().enumerate() {
            if !name_ok(&f.name) || f.name == "original_messages" {
                return Err(CoreError::invalid(
                    format!("event_types[{i}].fields[{j}].name"),
                    "must be 1..=64 of [A-Za-z0-9_] and not \"original_messages\"",
                ));
            }
            if f.field_type == FieldType::Enum && f.values.is_empty() {
                return Err(CoreError::invalid(
                    format!("event_types[{i}].fields[{j}].values"),
                    "an enum field needs values",
                ));
            }
        }
        if let Some(wf) = &t.weight_field
            && !t.fields.iter().any(|f| &f.name == wf && matches!(f.field_type, FieldType::Int | FieldType::Float))
        {
            return Err(CoreError::invalid(
                format!("event_types[{i}].weight_field"),
                format!("must name an int or float field of the type, got {wf:?}"),
            ));
        }
    }
    for (i, t) in profiles.iter().enumerate() {
        if !name_ok(&t.name) {
            return Err(CoreError::invalid(format!("profile_types[{i}].name"), "must be 1..=64 of [A-Za-z0-9_]"));
        }
    }
    Ok(())
}

/// Checks `info` against an event type's fields. `full` requires every required field.
pub fn validate_memory_info(def: &EventTypeDef, info: &Map<String, Value>, path: &str, full: bool) -> CoreResult<()> {
    for (k, v) in info {
        if k == "original_messages" {
            if !v.is_string() {
                return Err(CoreError::invalid(format!("{path}.original_messages"), "must be a string"));
            }
            continue;
        }
        let Some(f) = def.fields.iter().find(|f| &f.name == k) else {
            return Err(CoreError::invalid(
                format!("{path}.{k}"),
                format!(
                    "is not a field of event type \"{}\" (fields: {})",
                    def.name,
                    def.fields.iter().map(|f| f.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
            ));
        };
        let ok = match f.field_type {
            FieldType::String => v.as_str().is_some_and(|s| s.chars().count() <= MAX_CONTENT_CHARS),
            FieldType::Int => v.as_i64().is_some(),
            FieldType::Float => v.as_f64().is_some(),
            FieldType::Bool => v.is_boolean(),
            FieldType::Enum => v.as_str().is_some_and(|s| f.values.iter().any(|x| x == s)),
        };
        if !ok {
            let want = match f.field_type {
                FieldType::Enum => format!("one of {:?}", f.values),
                other => format!("a {other:?}").to_lowercase(),
            };
            return Err(CoreError::invalid(format!("{path}.{k}"), format!("must be {want}, got {v}")));
        }
    }
    if full {
        for f in def.fields.iter().filter(|f| f.required) {
            match info.get(&f.name) {
                None => {
                    return Err(CoreError::invalid(format!("{path}.{}", f.name), "is required"));
                }
                Some(Value::String(s)) if s.trim().is_empty() => {
                    return Err(CoreError::invalid(format!("{path}.{}", f.name), "must not be empty"));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn memory_info_is_checked_against_the_type() {
        let def = CollectionSchema::builtin_event_v1();
        let ok = json!({"summary": "用户喜欢手冲咖啡", "original_messages": "u: …"});
        assert!(validate_memory_info(&def, ok.as_object().unwrap(), "memory_info", true).is_ok());
        for (bad, field) in [
            (json!({}), "memory_info.summary"),
            (json!({"summary": 3}), "memory_info.summary"),
            (json!({"summary": "x", "mood": "ok"}), "memory_info.mood"),
            (json!({"summary": "   "}), "memory_info.summary"),
        ] {
            match validate_memory_info(&def, bad.as_object().unwrap(), "memory_info", true) {
                Err(CoreError::Invalid { field: f, .. }) => assert_eq!(f, field, "{bad}"),
                other => panic!("{bad}: expected invalid, got {other:?}"),
            }
        }
    }

    #[test]
    fn enum_and_numeric_fields() {
        let def = EventTypeDef {
            name: "lesson".into(),
            description: String::new(),
            fields: vec![
                FieldDef {
                    name: "rating".into(),
                    field_type: FieldType::Enum,
                    description: String::new(),
                    values: vec!["good".into(), "bad".into()],
                    required: true,
                },
                FieldDef {
                    name: "score".into(),
                    field_type: FieldType::Int,
                    description: String::new(),
                    values: vec![],
                    required: false,
                },
            ],
            weight: None,
            weight_field: Some("score".into()),
            default_class: None,
        };
        assert!(
            validate_memory_info(&def, json!({"rating": "good", "score": 7}).as_object().unwrap(), "m", true).is_ok()
        );
        assert!(validate_memory_info(&def, json!({"rating": "meh"}).as_object().unwrap(), "m", true).is_err());
        assert!(
            validate_memory_info(&def, json!({"rating": "bad", "score": 1.5}).as_object().unwrap(), "m", true).is_err()
        );
        assert!(validate_schema(&[def], &[]).is_ok());
    }
}
