//! The `Service` façade: every front end (HTTP, MCP, CLI, demo) calls these methods and nothing
//! else. It validates domain rules, talks to the [`Store`] and runs the background work — the
//! extraction worker and the idle-conversation scheduler — as loops around testable single steps
//! ([`Service::try_run_one`], [`Service::close_idle_once`]) with a shutdown path.

use crate::clock::Clock;
use crate::error::{CoreError, CoreResult};
use crate::extract::{ExtractError, ExtractionInput, Extractor};
use crate::model::*;
use crate::ranking::{self, Scores, TimeDecay};
use crate::store::Store;
use crate::tokens::TokenCounter;
use crate::trigger::ExtractTrigger;
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
}

pub const MAX_QUERY_CHARS: usize = 4000;

#[derive(Clone, Debug)]
pub struct EventSearch {
    pub target: Target,
    pub query: Option<String>,
    pub filter: EventFilter,
    pub limit: u32,
    pub decay: TimeDecay,
    pub custom_weight: f64,
}

#[derive(Clone, Debug)]
pub struct ScoredEvent {
    pub event: Event,
    pub scores: Scores,
}

pub const EVENT_CLASSES: [&str; 3] = ["temporary", "conclusion", "process"];

pub struct Service {
    store: Arc<dyn Store>,
    extractor: Arc<dyn Extractor>,
    clock: Arc<dyn Clock>,
    config: ServiceConfig,
    /// Woken whenever a job is queued, so workers do not wait for their next poll.
    job_queued: Notify,
}

impl Service {
    pub fn new(
        store: Arc<dyn Store>,
        extractor: Arc<dyn Extractor>,
        clock: Arc<dyn Clock>,
        config: ServiceConfig,
    ) -> Arc<Self> {
        TokenCounter::warm();
        Arc::new(Self {
            store,
            extractor,
            clock,
            config,
            job_queued: Notify::new(),
        })
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

    pub fn extractor_name(&self) -> &str {
        self.extractor.name()
    }

    // ------------------------------------------------------------------ collections

    /// The collection a write goes to: created with the default schema on first use.
    pub async fn collection_for_write(&self, t: &Target) -> CoreResult<Collection> {
        validate_names(t)?;
        if self.config.auto_create_collections {
            Ok(self
                .store
                .ensure_collection(&t.project, &t.collection, self.now())
                .await?)
        } else {
            self.collection_for_read(t).await
        }
    }

    /// The collection a read goes to: it must exist.
    pub async fn collection_for_read(&self, t: &Target) -> CoreResult<Collection> {
        validate_names(t)?;
        self.store.get_collection(&t.project, &t.collection).await?.ok_or_else(|| {
            CoreError::NotFound(format!(
                "collection_name: no collection \"{}\" in project \"{}\" (it is created by the first write, or by collection/create)",
                t.collection, t.project
            ))
        })
    }

    pub async fn create_collection(
        &self,
        t: &Target,
        description: String,
        event_types: Vec<EventTypeDef>,
        profile_types: Vec<ProfileTypeDef>,
    ) -> CoreResult<Collection> {
        validate_names(t)?;
        validate_schema(&event_types, &profile_types)?;
        let schema = CollectionSchema::with_builtins(event_types, profile_types);
        Ok(self
            .store
            .create_collection(NewCollection {
                project_name: t.project.clone(),
                collection_name: t.collection.clone(),
                description,
                schema,
                created_at: self.now(),
            })
            .await?)
    }

    pub async fn list_collections(&self, project: &str) -> CoreResult<Vec<Collection>> {
        Ok(self.store.list_collections(project).await?)
    }

    pub async fn delete_collection(&self, t: &Target) -> CoreResult<()> {
        let c = self.collection_for_read(t).await?;
        self.store.delete_collection(c.id).await?;
        Ok(())
    }

    // ------------------------------------------------------------------ write path

    pub async fn streaming_write(&self, req: WriteRequest) -> CoreResult<AppendOutcome> {
        let (collection, append) = self.prepare_append(req).await?;
        let _ = collection;
        let out = self.store.append_messages(append).await?;
        if out.closed.is_some() {
            self.job_queued.notify_waiters();
        }
        Ok(out)
    }

    pub async fn session_add(&self, req: WriteRequest) -> CoreResult<SessionClosed> {
        let (_, append) = self.prepare_append(req).await?;
        let closed = self.store.add_session(append).await?;
        self.job_queued.notify_waiters();
        Ok(closed)
    }

    pub async fn flush(
        &self,
        t: &Target,
        conversation_id: &str,
    ) -> CoreResult<Option<SessionClosed>> {
        validate_conversation_id(conversation_id)?;
        let c = self.collection_for_read(t).await?;
        let closed = self
            .store
            .flush_conversation(
                c.id,
                conversation_id,
                self.now(),
                self.config.max_job_attempts,
            )
            .await?;
        if closed.is_some() {
            self.job_queued.notify_waiters();
        }
        Ok(closed)
    }

    pub async fn conversation_info(
        &self,
        t: &Target,
        conversation_id: &str,
    ) -> CoreResult<ConversationInfo> {
        validate_conversation_id(conversation_id)?;
        let c = self.collection_for_read(t).await?;
        self.store
            .conversation_info(c.id, conversation_id)
            .await?
            .ok_or_else(|| {
                CoreError::NotFound(format!(
                    "conversation_id: no conversation \"{conversation_id}\""
                ))
            })
    }

    pub async fn session_info(&self, t: &Target, session_id: &str) -> CoreResult<SessionDetail> {
        validate_id("session_id", session_id)?;
        let c = self.collection_for_read(t).await?;
        self.store
            .session_info(c.id, session_id)
            .await?
            .ok_or_else(|| CoreError::NotFound(format!("session_id: no session \"{session_id}\"")))
    }

    async fn prepare_append(&self, req: WriteRequest) -> CoreResult<(Collection, AppendRequest)> {
        validate_conversation_id(&req.conversation_id)?;
        if req.messages.is_empty() || req.messages.len() > MAX_MESSAGES_PER_WRITE {
            return Err(CoreError::invalid(
                "messages",
                format!(
                    "must hold 1..={MAX_MESSAGES_PER_WRITE} messages, got {}",
                    req.messages.len()
                ),
            ));
        }
        let now = self.now();
        let mut messages = Vec::with_capacity(req.messages.len());
        for (i, m) in req.messages.into_iter().enumerate() {
            if m.content.trim().is_empty() {
                return Err(CoreError::invalid(
                    format!("messages[{i}].content"),
                    "must not be empty",
                ));
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
                check_len(
                    &format!("messages[{i}].idempotency_key"),
                    key,
                    1,
                    MAX_ID_CHARS,
                )?;
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
        let collection = self
            .collection_for_write(&Target {
                project: req.project,
                collection: req.collection,
            })
            .await?;
        let append = AppendRequest {
            collection_id: collection.id,
            conversation_id: req.conversation_id,
            meta: req.meta,
            messages,
            trigger: req.trigger,
            now,
            max_job_attempts: self.config.max_job_attempts,
        };
        Ok((collection, append))
    }

    // ------------------------------------------------------------------ jobs

    pub async fn list_jobs(&self, t: &Target, filter: JobFilter) -> CoreResult<Vec<Job>> {
        let c = self.collection_for_read(t).await?;
        Ok(self.store.list_jobs(c.id, filter).await?)
    }

    /// Runs one due extraction job, if any. Returns whether a job was run (done or failed).
    pub async fn try_run_one(&self) -> CoreResult<bool> {
        let now = self.now();
        let lease = self.config.job_lease.as_millis() as i64;
        let Some(claimed) = self.store.claim_job(now, lease).await? else {
            return Ok(false);
        };
        let job_id = claimed.job.job_id.clone();
        let attempt = claimed.job.attempts; // already counts this attempt
        let input = ExtractionInput {
            schema: claimed.collection.schema.clone(),
            session_id: claimed.session.session_id.clone(),
            meta: claimed.meta.clone(),
            messages: claimed.messages,
            profile: claimed.profile,
            now,
        };
        let result = match tokio::time::timeout(
            self.config.extraction_timeout,
            self.extractor.extract(input),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => Err(ExtractError::Transient(format!(
                "extraction timed out after {} s",
                self.config.extraction_timeout.as_secs()
            ))),
        };
        match result {
            Ok(output) => {
                let n = output.events.len();
                self.store.complete_job(&job_id, output, self.now()).await?;
                tracing::info!(job_id, session_id = %claimed.session.session_id, events = n, "extraction done");
            }
            Err(e) => {
                let retry_at = match &e {
                    ExtractError::Transient(_) if attempt < claimed.job.max_attempts => {
                        Some(self.now() + self.backoff(attempt).as_millis() as i64)
                    }
                    _ => None,
                };
                tracing::warn!(job_id, attempt, error = %e, retry_at, "extraction failed");
                self.store
                    .fail_job(&job_id, &e.to_string(), retry_at, self.now())
                    .await?;
            }
        }
        Ok(true)
    }

    /// Exponential backoff: base · 2^(attempt-1), capped.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32
            .checked_shl(attempt.saturating_sub(1).min(20))
            .unwrap_or(u32::MAX);
        self.config
            .retry_base
            .saturating_mul(factor)
            .min(self.config.retry_max)
    }

    /// Closes every conversation whose idle deadline has passed. Returns how many.
    pub async fn close_idle_once(&self) -> CoreResult<usize> {
        let mut total = 0;
        loop {
            let closed = self
                .store
                .close_idle_conversations(self.now(), 100, self.config.max_job_attempts)
                .await?;
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
    pub fn spawn_background(
        self: &Arc<Self>,
        shutdown: watch::Receiver<bool>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
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

    fn sleep_until_due(&self, due: Option<Millis>) -> Duration {
        let cap = self.config.poll_interval;
        match due {
            Some(t) => {
                Duration::from_millis((t - self.now()).clamp(0, cap.as_millis() as i64) as u64)
            }
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
                    c.schema
                        .event_types
                        .iter()
                        .map(|t| t.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })?;
        if req.user_id.is_empty() && req.assistant_id.is_empty() {
            return Err(CoreError::invalid(
                "user_id",
                "at least one of user_id and assistant_id is required",
            ));
        }
        for (field, ids) in [
            ("user_id", &req.user_id),
            ("assistant_id", &req.assistant_id),
        ] {
            for id in ids {
                check_len(field, id, 1, MAX_ID_CHARS)?;
            }
        }
        validate_memory_info(def, &req.memory_info, "memory_info", true)?;
        let class = validate_class(req.class)?;
        if let Some(t) = req.time {
            check_time("time", t)?;
        }
        let now = self.now();
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
                CoreError::Conflict(format!(
                    "event type \"{}\" is no longer in the schema",
                    existing.memory_type
                ))
            })?;
            validate_memory_info(def, info, "memory_info", false)?;
        }
        if let Some(t) = patch.time {
            check_time("time", t)?;
        }
        let patch = EventPatch {
            class: patch.class.map(|c| validate_class(Some(c))).transpose()?,
            ..patch
        };
        Ok(self.store.update_event(c.id, id, patch, self.now()).await?)
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
    pub async fn list_events(
        &self,
        t: &Target,
        filter: EventFilter,
        limit: u32,
    ) -> CoreResult<Vec<Event>> {
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
        let c = self.collection_for_read(&req.target).await?;
        let now = self.now();
        match req
            .query
            .as_deref()
            .map(str::trim)
            .filter(|q| !q.is_empty())
        {
            None => {
                let events = self.store.list_events(c.id, req.filter, req.limit).await?;
                Ok(events
                    .into_iter()
                    .map(|e| {
                        let scores =
                            ranking::score(1.0, &e, &c.schema, now, &req.decay, req.custom_weight);
                        ScoredEvent { event: e, scores }
                    })
                    .collect())
            }
            Some(_) => Err(CoreError::invalid(
                "query",
                "semantic search is not available in this build yet; omit query to list newest first",
            )),
        }
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
                    c.schema
                        .profile_types
                        .iter()
                        .map(|t| t.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        let content = content.unwrap_or_else(|| crate::profile::describe(&attributes));
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

    pub async fn update_profile(
        &self,
        t: &Target,
        id: &str,
        patch: ProfilePatch,
    ) -> CoreResult<Profile> {
        validate_id("profile_id", id)?;
        let c = self.collection_for_read(t).await?;
        Ok(self
            .store
            .update_profile(c.id, id, patch, self.now())
            .await?)
    }

    pub async fn delete_profile(&self, t: &Target, id: &str) -> CoreResult<()> {
        validate_id("profile_id", id)?;
        let c = self.collection_for_read(t).await?;
        if self.store.delete_profile(c.id, id).await? {
            Ok(())
        } else {
            Err(CoreError::NotFound(format!(
                "profile_id: no profile \"{id}\""
            )))
        }
    }

    pub async fn list_profiles(
        &self,
        t: &Target,
        filter: ProfileFilter,
        limit: u32,
    ) -> CoreResult<Vec<Profile>> {
        let c = self.collection_for_read(t).await?;
        Ok(self.store.list_profiles(c.id, filter, limit).await?)
    }
}

// ---------------------------------------------------------------------- validation helpers

fn check_len(field: &str, v: &str, min: usize, max: usize) -> CoreResult<()> {
    let n = v.chars().count();
    if n < min || n > max || (min > 0 && v.trim().is_empty()) {
        return Err(CoreError::invalid(
            field,
            format!("must be {min}..={max} characters and not blank, got {n}"),
        ));
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
    for (field, v) in [
        ("project_name", &t.project),
        ("collection_name", &t.collection),
    ] {
        let ok = !v.is_empty()
            && v.len() <= 128
            && v.chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '-' || c == '.');
        if !ok {
            return Err(CoreError::invalid(
                field,
                format!("must be 1..=128 characters of letters, digits, '_', '-', '.', got {v:?}"),
            ));
        }
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
        Some(c) => Err(CoreError::invalid(
            "class",
            format!("must be one of {EVENT_CLASSES:?}, got {c:?}"),
        )),
    }
}

fn validate_time_range(f: &EventFilter) -> CoreResult<()> {
    if let (Some(s), Some(e)) = (f.start_time, f.end_time)
        && s > e
    {
        return Err(CoreError::invalid(
            "filter.start_time",
            format!("must be <= filter.end_time ({s} > {e})"),
        ));
    }
    Ok(())
}

fn validate_schema(events: &[EventTypeDef], profiles: &[ProfileTypeDef]) -> CoreResult<()> {
    let name_ok = |s: &str| {
        !s.is_empty() && s.len() <= 64 && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    for (i, t) in events.iter().enumerate() {
        if !name_ok(&t.name) {
            return Err(CoreError::invalid(
                format!("event_types[{i}].name"),
                "must be 1..=64 of [A-Za-z0-9_]",
            ));
        }
        if t.fields.is_empty() {
            return Err(CoreError::invalid(
                format!("event_types[{i}].fields"),
                "must list at least one field",
            ));
        }
        if let Some(w) = t.weight
            && !(0.0..=1.0).contains(&w)
        {
            return Err(CoreError::invalid(
                format!("event_types[{i}].weight"),
                format!("must be in [0,1], got {w}"),
            ));
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
            && !t
                .fields
                .iter()
                .any(|f| &f.name == wf && matches!(f.field_type, FieldType::Int | FieldType::Float))
        {
            return Err(CoreError::invalid(
                format!("event_types[{i}].weight_field"),
                format!("must name an int or float field of the type, got {wf:?}"),
            ));
        }
    }
    for (i, t) in profiles.iter().enumerate() {
        if !name_ok(&t.name) {
            return Err(CoreError::invalid(
                format!("profile_types[{i}].name"),
                "must be 1..=64 of [A-Za-z0-9_]",
            ));
        }
    }
    Ok(())
}

/// Checks `info` against an event type's fields. `full` requires every required field.
pub fn validate_memory_info(
    def: &EventTypeDef,
    info: &Map<String, Value>,
    path: &str,
    full: bool,
) -> CoreResult<()> {
    for (k, v) in info {
        if k == "original_messages" {
            if !v.is_string() {
                return Err(CoreError::invalid(
                    format!("{path}.original_messages"),
                    "must be a string",
                ));
            }
            continue;
        }
        let Some(f) = def.fields.iter().find(|f| &f.name == k) else {
            return Err(CoreError::invalid(
                format!("{path}.{k}"),
                format!(
                    "is not a field of event type \"{}\" (fields: {})",
                    def.name,
                    def.fields
                        .iter()
                        .map(|f| f.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        };
        let ok = match f.field_type {
            FieldType::String => v
                .as_str()
                .is_some_and(|s| s.chars().count() <= MAX_CONTENT_CHARS),
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
            return Err(CoreError::invalid(
                format!("{path}.{k}"),
                format!("must be {want}, got {v}"),
            ));
        }
    }
    if full {
        for f in def.fields.iter().filter(|f| f.required) {
            match info.get(&f.name) {
                None => {
                    return Err(CoreError::invalid(
                        format!("{path}.{}", f.name),
                        "is required",
                    ));
                }
                Some(Value::String(s)) if s.trim().is_empty() => {
                    return Err(CoreError::invalid(
                        format!("{path}.{}", f.name),
                        "must not be empty",
                    ));
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
        };
        assert!(
            validate_memory_info(
                &def,
                json!({"rating": "good", "score": 7}).as_object().unwrap(),
                "m",
                true
            )
            .is_ok()
        );
        assert!(
            validate_memory_info(
                &def,
                json!({"rating": "meh"}).as_object().unwrap(),
                "m",
                true
            )
            .is_err()
        );
        assert!(
            validate_memory_info(
                &def,
                json!({"rating": "bad", "score": 1.5}).as_object().unwrap(),
                "m",
                true
            )
            .is_err()
        );
        assert!(validate_schema(&[def], &[]).is_ok());
    }
}
