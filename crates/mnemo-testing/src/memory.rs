//! `MemoryStore`: the whole [`Store`] contract over plain collections behind one mutex. Each
//! method takes the lock once, so each is one atomic step like a store transaction. It keeps
//! nothing on disk ("durable" means: until the last handle is dropped), which is what unit tests of
//! the `Service` want; it passes the same conformance suite as the real stores, so what it answers
//! is what they answer.
//!
//! BM25 statistics are computed from the collection's events at query time (exact by
//! construction); vectors are compared by exact scan — the reference computations themselves.

use async_trait::async_trait;
use mnemo_core::embed::dot;
use mnemo_core::extract::{ExtractedEvent, ExtractionOutput, ProfileChange};
use mnemo_core::model::*;
use mnemo_core::store::StoreResult;
use mnemo_core::store::prelude::*;
use mnemo_core::text::{fts_tokens, search_tokens};
use mnemo_core::{StoreError, TriggerReason, profile};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

const DAY: Millis = 86_400_000;

/// An in-memory store; clones and [`MemoryStore::reopen`] share the data.
#[derive(Clone, Default)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Another handle on the same data, as after a restart of a single-process store: jobs a
    /// previous "process" left running are queued again (what the SQLite store does at open).
    pub fn reopen(&self) -> Self {
        let mut s = self.lock();
        for j in s.jobs.values_mut().filter(|j| j.job.state == JobState::Running) {
            j.job.state = JobState::Queued;
            j.lease_until = None;
        }
        drop(s);
        self.clone()
    }

    /// The store as an older release left it: no event has turn vectors, and the backfill of
    /// [`EventStore::events_without_turns`] is pending (what a SQLite or PostgreSQL upgrade gives).
    pub fn as_written_before_turns(&self) {
        let mut s = self.lock();
        s.events.values_mut().for_each(|r| r.turns = None);
        s.turns_backfill = true;
    }

    /// How many events have turn vectors.
    pub fn events_with_turns(&self) -> usize {
        self.lock().events.values().filter(|r| r.turns.is_some()).count()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves half a step applied; tests fail loudly anyway.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[derive(Default)]
struct State {
    next_collection: CollectionId,
    collections: BTreeMap<CollectionId, Collection>,
    conversations: BTreeMap<(CollectionId, String), Conversation>,
    next_message: i64,
    messages: Vec<Message>,
    sessions: BTreeMap<String, Session>,
    jobs: BTreeMap<String, JobRow>,
    events: BTreeMap<String, EventRow>,
    profiles: BTreeMap<String, ProfileRow>,
    /// (collection, day, first user of the event) → hits.
    hits_daily: BTreeMap<(CollectionId, i64, String), u64>,
    maintenance: Vec<(CollectionId, MaintenanceRun)>,
    /// Events without turn vectors wait for the backfill ([`MemoryStore::as_written_before_turns`]).
    turns_backfill: bool,
}

struct Conversation {
    meta: ConversationMeta,
    open_messages: u64,
    open_tokens: u64,
    idle_deadline: Option<Millis>,
    created_at: Millis,
    last_write_at: Millis,
}

struct Message {
    collection_id: CollectionId,
    idempotency_key: Option<String>,
    stored: StoredMessage,
}

struct Session {
    collection_id: CollectionId,
    summary: SessionSummary,
    meta: ConversationMeta,
}

struct JobRow {
    collection_id: CollectionId,
    job: Job,
    lease_until: Option<Millis>,
}

struct EventRow {
    collection_id: CollectionId,
    event: Event,
    vector: Option<Vec<f32>>,
    /// Its turns' vectors as stored ([`mnemo_core::turns::encode`]); only beside `vector`.
    turns: Option<Vec<u8>>,
    terms: String,
}

struct ProfileRow {
    collection_id: CollectionId,
    profile: Profile,
}

fn terms_of(memory_info: &Map<String, Value>) -> String {
    search_tokens(&event_search_text(memory_info)).join(" ")
}

fn day_name(day: i64) -> String {
    chrono::DateTime::from_timestamp(day * 86_400, 0)
        .map(|t| t.format("%Y-%m-%d").to_string())
        .unwrap_or_else(|| day.to_string())
}

fn matches(e: &Event, f: &EventFilter) -> bool {
    let any = |want: &[String], have: &[String]| want.is_empty() || have.iter().any(|h| want.contains(h));
    let one =
        |want: &[String], have: &Option<String>| want.is_empty() || have.as_ref().is_some_and(|h| want.contains(h));
    any(&f.user_id, &e.user_id)
        && any(&f.assistant_id, &e.assistant_id)
        && (f.memory_type.is_empty() || f.memory_type.contains(&e.memory_type))
        && one(&f.group_id, &e.group_id)
        && one(&f.session_id, &e.session_id)
        && one(&f.conversation_id, &e.conversation_id)
        && one(&f.scope, &e.scope)
        && (f.event_ids.is_empty() || f.event_ids.contains(&e.id))
        && f.start_time.is_none_or(|t| e.time >= t)
        && f.end_time.is_none_or(|t| e.time <= t)
        && match f.as_of {
            Some(t) => {
                matches!(e.status.as_str(), "active" | "superseded")
                    && e.valid_from <= t
                    && e.valid_to.is_none_or(|end| end > t)
            }
            None => !f.active_only || e.status == "active",
        }
}

impl State {
    fn collection(&self, id: CollectionId) -> StoreResult<&Collection> {
        self.collections.get(&id).ok_or_else(|| StoreError::NotFound(format!("no collection {id}")))
    }

    fn by_name(&self, project: &str, name: &str) -> Option<&Collection> {
        self.collections.values().find(|c| c.project_name == project && c.collection_name == name)
    }

    /// Statistics of the whole collection, as the real stores keep them (every token's df).
    fn corpus(&self, collection_id: CollectionId) -> Corpus {
        let mut out = Corpus::default();
        for r in self.events.values().filter(|r| r.collection_id == collection_id) {
            let toks: Vec<String> = fts_tokens(&r.terms).collect();
            out.stats.docs += 1;
            out.stats.tokens += toks.len() as u64;
            for t in toks.into_iter().collect::<HashSet<_>>() {
                *out.df.entry(t).or_default() += 1;
            }
        }
        out
    }

    fn insert_collection(&mut self, c: NewCollection) -> Collection {
        let id = c.id.unwrap_or(self.next_collection + 1);
        self.next_collection = self.next_collection.max(id);
        let out = Collection {
            id,
            project_name: c.project_name,
            collection_name: c.collection_name,
            description: c.description,
            schema: c.schema,
            embedding_model: Some(c.embedding_model),
            embedding_dim: Some(c.embedding_dim),
            created_at: c.created_at,
        };
        self.collections.insert(out.id, out.clone());
        out
    }

    // ------------------------------------------------------------------ conversations

    fn upsert_conversation(&mut self, req: &AppendRequest) -> &mut Conversation {
        let c = self.conversations.entry((req.collection_id, req.conversation_id.clone())).or_insert(Conversation {
            meta: ConversationMeta::default(),
            open_messages: 0,
            open_tokens: 0,
            idle_deadline: None,
            created_at: req.now,
            last_write_at: req.now,
        });
        c.meta.merge(&req.meta);
        c.last_write_at = req.now;
        c
    }

    /// Stores the messages (a known idempotency key is a duplicate).
    fn insert_messages(&mut self, req: &AppendRequest, session_id: Option<&str>) -> MessageTally {
        let mut tally = MessageTally::default();
        for m in &req.messages {
            let seen = m.idempotency_key.as_ref().is_some_and(|k| {
                self.messages.iter().any(|x| {
                    x.collection_id == req.collection_id
                        && x.stored.conversation_id == req.conversation_id
                        && x.idempotency_key.as_ref() == Some(k)
                })
            });
            if seen {
                tally.add(false, m.tokens);
                continue;
            }
            self.next_message += 1;
            self.messages.push(Message {
                collection_id: req.collection_id,
                idempotency_key: m.idempotency_key.clone(),
                stored: StoredMessage {
                    message_id: self.next_message,
                    conversation_id: req.conversation_id.clone(),
                    session_id: session_id.map(String::from),
                    role: m.role,
                    name: m.name.clone(),
                    content: m.content.clone(),
                    time: m.time,
                    tokens: m.tokens,
                },
            });
            tally.add(true, m.tokens);
        }
        tally
    }

    #[allow(clippy::too_many_arguments)] // the SQLite store's insert_session_and_job, field for field
    fn insert_session_and_job(
        &mut self,
        cid: CollectionId,
        conv: &str,
        meta: &ConversationMeta,
        reason: TriggerReason,
        messages: u64,
        tokens: u64,
        now: Millis,
        max_attempts: u32,
    ) -> SessionClosed {
        let (session_id, job_id) = (new_id("ses"), new_id("job"));
        self.sessions.insert(
            session_id.clone(),
            Session {
                collection_id: cid,
                summary: SessionSummary {
                    session_id: session_id.clone(),
                    conversation_id: conv.to_string(),
                    reason: reason.as_str().to_string(),
                    state: "queued".into(),
                    message_count: messages,
                    token_count: tokens,
                    user_id: meta.user_id.clone(),
                    assistant_id: meta.assistant_id.clone(),
                    created_at: now,
                    extracted_at: None,
                },
                meta: meta.clone(),
            },
        );
        self.jobs.insert(
            job_id.clone(),
            JobRow {
                collection_id: cid,
                lease_until: None,
                job: Job {
                    job_id: job_id.clone(),
                    kind: "extract".into(),
                    state: JobState::Queued,
                    conversation_id: Some(conv.to_string()),
                    session_id: Some(session_id.clone()),
                    attempts: 0,
                    max_attempts,
                    last_error: None,
                    run_after: now,
                    prompt_tokens: 0,
                    completion_tokens: 0,
                    created_at: now,
                    updated_at: now,
                    started_at: None,
                    finished_at: None,
                    requeues: 0,
                },
            },
        );
        SessionClosed { session_id, job_id, conversation_id: conv.to_string(), reason, message_count: messages }
    }

    fn close_open_messages(
        &mut self,
        cid: CollectionId,
        conv: &str,
        reason: TriggerReason,
        now: Millis,
        max_attempts: u32,
    ) -> Option<SessionClosed> {
        let c = self.conversations.get(&(cid, conv.to_string()))?;
        if c.open_messages == 0 {
            return None;
        }
        let (meta, n, tokens) = (c.meta.clone(), c.open_messages, c.open_tokens);
        let closed = self.insert_session_and_job(cid, conv, &meta, reason, n, tokens, now, max_attempts);
        for m in self
            .messages
            .iter_mut()
            .filter(|m| m.collection_id == cid && m.stored.conversation_id == conv && m.stored.session_id.is_none())
        {
            m.stored.session_id = Some(closed.session_id.clone());
        }
        let c = self.conversations.get_mut(&(cid, conv.to_string())).expect("conversation");
        (c.open_messages, c.open_tokens, c.idle_deadline) = (0, 0, None);
        Some(closed)
    }

    /// A failed job queued again from its first attempt (its session too); `automatic` counts it.
    fn requeue(&mut self, job_id: &str, now: Millis, automatic: bool) {
        let j = self.jobs.get_mut(job_id).expect("job");
        j.job.state = JobState::Queued;
        j.job.attempts = 0;
        j.job.run_after = now;
        j.job.updated_at = now;
        j.job.finished_at = None;
        j.job.requeues += u32::from(automatic);
        j.lease_until = None;
        if let Some(sid) = j.job.session_id.clone()
            && let Some(x) = self.sessions.get_mut(&sid).filter(|x| x.summary.state == "failed")
        {
            x.summary.state = "queued".into();
        }
    }

    fn session_messages(&self, session_id: &str) -> Vec<StoredMessage> {
        self.messages
            .iter()
            .filter(|m| m.stored.session_id.as_deref() == Some(session_id))
            .map(|m| m.stored.clone())
            .collect()
    }

    // ------------------------------------------------------------------ events

    fn insert_event(&mut self, e: &NewEvent) -> String {
        let id = new_id("evt");
        let event = Event {
            id: id.clone(),
            memory_type: e.memory_type.clone(),
            user_id: e.user_id.clone(),
            assistant_id: e.assistant_id.clone(),
            group_id: e.group_id.clone(),
            session_id: e.session_id.clone(),
            conversation_id: e.conversation_id.clone(),
            scope: e.scope.clone(),
            class: e.class.clone(),
            status: "active".into(),
            time: e.time,
            memory_info: e.memory_info.clone(),
            source_message_ids: e.source_message_ids.clone(),
            hit_count: 0,
            last_hit_at: None,
            created_at: e.now,
            updated_at: e.now,
            expires_at: e.expires_at,
            superseded_by: None,
            valid_from: e.valid_from.unwrap_or(e.time),
            valid_to: None,
        };
        let terms = terms_of(&event.memory_info);
        let turns = e.embedding.as_ref().and(e.turn_vectors.as_deref()).and_then(mnemo_core::turns::encode);
        self.events.insert(
            id.clone(),
            EventRow { collection_id: e.collection_id, event, vector: e.embedding.clone(), turns, terms },
        );
        id
    }

    fn event(&self, cid: CollectionId, id: &str) -> Option<&EventRow> {
        self.events.get(id).filter(|r| r.collection_id == cid)
    }

    fn event_mut(&mut self, cid: CollectionId, id: &str) -> Option<&mut EventRow> {
        self.events.get_mut(id).filter(|r| r.collection_id == cid)
    }

    /// Events of the collection matching the filter, newest first (ties by id, descending).
    fn events_where(&self, cid: CollectionId, f: &EventFilter) -> Vec<&EventRow> {
        let mut out: Vec<&EventRow> =
            self.events.values().filter(|r| r.collection_id == cid && matches(&r.event, f)).collect();
        out.sort_by(|a, b| b.event.time.cmp(&a.event.time).then_with(|| b.event.id.cmp(&a.event.id)));
        out
    }

    /// The SQLite store's merge_event_row: false (nothing changed) if the target is gone or inactive.
    fn merge_event(&mut self, cid: CollectionId, id: &str, e: &ExtractedEvent, now: Millis) -> bool {
        let Some(row) = self.event_mut(cid, id) else { return false };
        if row.event.status != "active" {
            return false;
        }
        let (info, sources) = mnemo_core::extract::merged_content(&row.event, e);
        row.terms = terms_of(&info);
        row.turns = e.embedding.as_ref().and(e.turn_vectors.as_deref()).and_then(mnemo_core::turns::encode);
        if let Some(v) = &e.embedding {
            row.vector = Some(v.clone());
        }
        let ev = &mut row.event;
        ev.memory_info = info;
        // True since the first mention (or an earlier start the new one states).
        ev.valid_from = ev.valid_from.min(e.valid_from.unwrap_or(e.time));
        ev.time = ev.time.max(e.time);
        ev.source_message_ids = sources;
        ev.updated_at = now;
        ev.expires_at = ev.expires_at.map(|old| old.max(e.expires_at.unwrap_or(old)));
        true
    }

    // ------------------------------------------------------------------ profiles

    fn profile_for(&self, cid: CollectionId, ptype: &str, user: &str, assistant: &str) -> Option<&ProfileRow> {
        self.profiles.values().find(|p| {
            p.collection_id == cid
                && p.profile.profile_type == ptype
                && p.profile.user_id == user
                && p.profile.assistant_id.as_deref().unwrap_or("") == assistant
        })
    }

    fn keeps_history(&self, cid: CollectionId, ptype: &str) -> bool {
        self.collections
            .get(&cid)
            .and_then(|c| c.schema.profile_type(ptype))
            .is_some_and(|t| t.update_mode == ProfileUpdateMode::KeepHistory)
    }

    /// Versions what a change did: since-times, and replaced values for `keep_history` types.
    #[allow(clippy::too_many_arguments)]
    fn record_versions(
        &mut self,
        id: &str,
        keep_history: bool,
        before: &Map<String, Value>,
        superseded: &[(String, Value)],
        session_id: Option<&str>,
        now: Millis,
    ) {
        let row = self.profiles.get_mut(id).expect("profile");
        if keep_history {
            let replaced = profile::replaced_versions(&row.profile.since, superseded, session_id, now);
            row.profile.history.extend(replaced);
            row.profile.history.sort_by_key(|v| v.valid_to);
        }
        let after = row.profile.attributes.clone();
        profile::update_since(&mut row.profile.since, before, &after, now);
    }

    fn apply_profile_changes(
        &mut self,
        cid: CollectionId,
        ptype: &str,
        user: &str,
        session_id: &str,
        changes: &[ProfileChange],
        now: Millis,
    ) {
        let existing = self.profile_for(cid, ptype, user, "").map(|p| p.profile.clone());
        let Some(f) = profile::fold_session(existing, changes, session_id) else { return };
        let row = self.profiles.entry(f.id.clone()).or_insert_with(|| ProfileRow {
            collection_id: cid,
            profile: Profile {
                id: f.id.clone(),
                profile_type: ptype.to_string(),
                user_id: user.to_string(),
                assistant_id: None,
                content: String::new(),
                attributes: Map::new(),
                source_session_ids: vec![],
                created_at: now,
                updated_at: now,
                history: vec![],
                since: Map::new(),
            },
        });
        row.profile.content = f.content.clone();
        row.profile.attributes = f.attributes.clone();
        row.profile.source_session_ids = f.source_sessions.clone();
        row.profile.updated_at = now;
        let keep = self.keeps_history(cid, ptype);
        self.record_versions(&f.id, keep, &f.before, &f.superseded, Some(session_id), now);
    }

    /// Conversations of the collection whose metadata names the user, oldest first.
    fn user_conversations(&self, cid: CollectionId, user: &str) -> Vec<String> {
        let mut convs: Vec<(&Millis, &String)> = self
            .conversations
            .iter()
            .filter(|((c, _), v)| *c == cid && v.meta.user_id.as_deref() == Some(user))
            .map(|((_, id), v)| (&v.created_at, id))
            .collect();
        convs.sort();
        convs.into_iter().map(|(_, id)| id.clone()).collect()
    }

    fn user_event_ids(&self, cid: CollectionId, user: &str) -> Vec<String> {
        self.events
            .values()
            .filter(|r| r.collection_id == cid && r.event.user_id.iter().any(|u| u == user))
            .map(|r| r.event.id.clone())
            .collect()
    }
}

/// No webhooks: the trait's defaults (endpoints refused, nothing to deliver).
#[async_trait]
impl WebhookStore for MemoryStore {}

#[async_trait]
impl StoreEngine for MemoryStore {
    fn engine(&self) -> &'static str {
        "memory"
    }
}

#[async_trait]
impl CollectionStore for MemoryStore {
    // ------------------------------------------------------------------ collections

    async fn create_collection(&self, c: NewCollection) -> StoreResult<Collection> {
        let mut s = self.lock();
        if s.by_name(&c.project_name, &c.collection_name).is_some() {
            return Err(StoreError::Conflict(format!(
                "collection_name: collection \"{}\" already exists in project \"{}\"",
                c.collection_name, c.project_name
            )));
        }
        Ok(s.insert_collection(c))
    }

    async fn get_collection(&self, project: &str, name: &str) -> StoreResult<Option<Collection>> {
        Ok(self.lock().by_name(project, name).cloned())
    }

    async fn ensure_collection(&self, c: NewCollection) -> StoreResult<Collection> {
        let mut s = self.lock();
        if let Some(found) = s.by_name(&c.project_name, &c.collection_name) {
            return Ok(found.clone());
        }
        Ok(s.insert_collection(c))
    }

    async fn all_collections(&self) -> StoreResult<Vec<Collection>> {
        Ok(self.lock().collections.values().cloned().collect())
    }

    async fn set_collection_embedding(&self, id: CollectionId, model: &str, dim: u32) -> StoreResult<()> {
        let mut g = self.lock();
        let Some(c) = g.collections.get_mut(&id) else { return Ok(()) };
        let changed = c.embedding_model.as_ref().is_some_and(|m| m != model || c.embedding_dim != Some(dim));
        c.embedding_model = Some(model.to_string());
        c.embedding_dim = Some(dim);
        if changed {
            g.events.values_mut().filter(|r| r.collection_id == id).for_each(|r| (r.vector, r.turns) = (None, None));
        }
        Ok(())
    }

    async fn list_collections(&self, project: &str) -> StoreResult<Vec<Collection>> {
        let mut out: Vec<Collection> =
            self.lock().collections.values().filter(|c| c.project_name == project).cloned().collect();
        out.sort_by(|a, b| a.collection_name.cmp(&b.collection_name));
        Ok(out)
    }

    async fn delete_collection(&self, id: CollectionId) -> StoreResult<bool> {
        let mut s = self.lock();
        let existed = s.collections.remove(&id).is_some();
        s.conversations.retain(|(c, _), _| *c != id);
        s.messages.retain(|m| m.collection_id != id);
        s.sessions.retain(|_, v| v.collection_id != id);
        s.jobs.retain(|_, v| v.collection_id != id);
        s.events.retain(|_, v| v.collection_id != id);
        s.profiles.retain(|_, v| v.collection_id != id);
        s.hits_daily.retain(|(c, _, _), _| *c != id);
        s.maintenance.retain(|(c, _)| *c != id);
        Ok(existed)
    }
}

#[async_trait]
impl ConversationStore for MemoryStore {
    // ------------------------------------------------------------------ write path

    async fn append_messages(&self, req: AppendRequest) -> StoreResult<AppendOutcome> {
        let mut s = self.lock();
        let (open_messages, open_tokens) = {
            let c = s.upsert_conversation(&req);
            (c.open_messages, c.open_tokens)
        };
        let MessageTally { stored, duplicates: dup, tokens, largest } = s.insert_messages(&req, None);
        let (open_messages, open_tokens) = (open_messages + stored, open_tokens + tokens);
        {
            let c = s.conversations.get_mut(&(req.collection_id, req.conversation_id.clone())).expect("conversation");
            c.open_messages = open_messages;
            c.open_tokens = open_tokens;
            c.idle_deadline = (open_messages > 0).then(|| req.now + req.trigger.wait_timeout_ms());
        }
        let reason = if stored > 0 { req.trigger.evaluate(open_tokens, open_messages, largest) } else { None };
        let closed = reason.and_then(|r| {
            s.close_open_messages(req.collection_id, &req.conversation_id, r, req.now, req.max_job_attempts)
        });
        let (pending_messages, pending_tokens) = if closed.is_some() { (0, 0) } else { (open_messages, open_tokens) };
        Ok(AppendOutcome { accepted: stored, duplicates: dup, pending_messages, pending_tokens, closed })
    }

    async fn add_session(&self, req: AppendRequest) -> StoreResult<SessionClosed> {
        let mut s = self.lock();
        let meta = s.upsert_conversation(&req).meta.clone();
        let placeholder = format!("pending-{}", new_id("ses"));
        let MessageTally { stored, tokens, .. } = s.insert_messages(&req, Some(&placeholder));
        let closed = s.insert_session_and_job(
            req.collection_id,
            &req.conversation_id,
            &meta,
            TriggerReason::SessionAdd,
            stored,
            tokens,
            req.now,
            req.max_job_attempts,
        );
        for m in s.messages.iter_mut().filter(|m| m.stored.session_id.as_deref() == Some(placeholder.as_str())) {
            m.stored.session_id = Some(closed.session_id.clone());
        }
        Ok(closed)
    }

    async fn delete_conversation(
        &self,
        collection_id: CollectionId,
        conversation_id: &str,
    ) -> StoreResult<Vec<String>> {
        let mut s = self.lock();
        if s.conversations.remove(&(collection_id, conversation_id.to_string())).is_none() {
            return Ok(vec![]);
        }
        let ours = |cid: CollectionId, conv: Option<&str>| cid == collection_id && conv == Some(conversation_id);
        let sessions: Vec<String> = s
            .sessions
            .iter()
            .filter(|(_, v)| ours(v.collection_id, Some(v.summary.conversation_id.as_str())))
            .map(|(k, _)| k.clone())
            .collect();
        for id in &sessions {
            s.sessions.remove(id);
        }
        s.messages.retain(|m| !ours(m.collection_id, Some(m.stored.conversation_id.as_str())));
        s.jobs.retain(|_, j| !ours(j.collection_id, j.job.conversation_id.as_deref()));
        s.events.retain(|_, e| !ours(e.collection_id, e.event.conversation_id.as_deref()));
        Ok(sessions)
    }

    async fn flush_conversation(
        &self,
        collection_id: CollectionId,
        conversation_id: &str,
        now: Millis,
        max_job_attempts: u32,
    ) -> StoreResult<Option<SessionClosed>> {
        Ok(self.lock().close_open_messages(collection_id, conversation_id, TriggerReason::Flush, now, max_job_attempts))
    }

    async fn close_idle_conversations(
        &self,
        now: Millis,
        limit: u32,
        max_job_attempts: u32,
    ) -> StoreResult<Vec<SessionClosed>> {
        let mut s = self.lock();
        let mut due: Vec<(Millis, CollectionId, String)> = s
            .conversations
            .iter()
            .filter_map(|((cid, id), c)| c.idle_deadline.filter(|d| *d <= now).map(|d| (d, *cid, id.clone())))
            .collect();
        due.sort();
        due.truncate(limit as usize);
        let mut out = Vec::new();
        for (_, cid, conv) in due {
            match s.close_open_messages(cid, &conv, TriggerReason::WaitTimeout, now, max_job_attempts) {
                Some(c) => out.push(c),
                None => s.conversations.get_mut(&(cid, conv)).expect("conversation").idle_deadline = None,
            }
        }
        Ok(out)
    }

    async fn next_idle_deadline(&self) -> StoreResult<Option<Millis>> {
        Ok(self.lock().conversations.values().filter_map(|c| c.idle_deadline).min())
    }

    async fn conversation_info(
        &self,
        collection_id: CollectionId,
        conversation_id: &str,
    ) -> StoreResult<Option<ConversationInfo>> {
        let s = self.lock();
        let Some(c) = s.conversations.get(&(collection_id, conversation_id.to_string())) else { return Ok(None) };
        let pending = |sid: &Option<String>| match sid {
            None => true,
            Some(id) => s.sessions.get(id).is_none_or(|x| x.summary.state != "extracted"),
        };
        let short_term = s
            .messages
            .iter()
            .filter(|m| {
                m.collection_id == collection_id
                    && m.stored.conversation_id == conversation_id
                    && pending(&m.stored.session_id)
            })
            .map(|m| m.stored.clone())
            .collect();
        let mut sessions: Vec<SessionSummary> = s
            .sessions
            .values()
            .filter(|x| x.collection_id == collection_id && x.summary.conversation_id == conversation_id)
            .map(|x| x.summary.clone())
            .collect();
        sessions.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.session_id.cmp(&b.session_id)));
        Ok(Some(ConversationInfo {
            conversation_id: conversation_id.to_string(),
            meta: c.meta.clone(),
            short_term,
            open_messages: c.open_messages,
            open_tokens: c.open_tokens,
            idle_deadline: c.idle_deadline,
            sessions,
        }))
    }

    async fn session_info(&self, collection_id: CollectionId, session_id: &str) -> StoreResult<Option<SessionDetail>> {
        let s = self.lock();
        let Some(sess) = s.sessions.get(session_id).filter(|x| x.collection_id == collection_id) else {
            return Ok(None);
        };
        let mut events: Vec<Event> = s
            .events
            .values()
            .filter(|r| r.collection_id == collection_id && r.event.session_id.as_deref() == Some(session_id))
            .map(|r| r.event.clone())
            .collect();
        events.sort_by(|a, b| a.time.cmp(&b.time).then_with(|| a.id.cmp(&b.id)));
        let job = s
            .jobs
            .values()
            .filter(|j| j.job.session_id.as_deref() == Some(session_id))
            .max_by(|a, b| a.job.created_at.cmp(&b.job.created_at).then_with(|| a.job.job_id.cmp(&b.job.job_id)))
            .map(|j| j.job.clone());
        Ok(Some(SessionDetail { session: sess.summary.clone(), messages: s.session_messages(session_id), events, job }))
    }
}

#[async_trait]
impl JobStore for MemoryStore {
    // ------------------------------------------------------------------ jobs

    async fn claim_job(&self, now: Millis, lease_ms: i64) -> StoreResult<Option<ClaimedJob>> {
        let mut s = self.lock();
        let due = s
            .jobs
            .values()
            .filter(|j| match j.job.state {
                JobState::Queued => j.job.run_after <= now,
                JobState::Running => j.lease_until.is_some_and(|l| l <= now),
                _ => false,
            })
            .min_by(|a, b| {
                (a.job.run_after, a.job.created_at, &a.job.job_id).cmp(&(
                    b.job.run_after,
                    b.job.created_at,
                    &b.job.job_id,
                ))
            })
            .map(|j| j.job.job_id.clone());
        let Some(job_id) = due else { return Ok(None) };
        let row = s.jobs.get_mut(&job_id).expect("job");
        row.job.state = JobState::Running;
        row.job.attempts += 1;
        row.job.updated_at = now;
        row.job.started_at = Some(now);
        row.job.finished_at = None;
        row.lease_until = Some(now + lease_ms);
        let (cid, job) = (row.collection_id, row.job.clone());
        let collection = s.collection(cid)?.clone();
        let sid = job.session_id.clone().unwrap_or_default();
        let sess =
            s.sessions.get(&sid).ok_or_else(|| StoreError::backend(format!("job {job_id} has no session {sid}")))?;
        let (session, meta) = (sess.summary.clone(), sess.meta.clone());
        let mut profiles: Vec<Profile> = match &meta.user_id {
            Some(u) => s
                .profiles
                .values()
                .filter(|p| p.collection_id == cid && &p.profile.user_id == u && p.profile.assistant_id.is_none())
                .map(|p| p.profile.clone())
                .collect(),
            None => vec![],
        };
        profiles.sort_by(|a, b| a.profile_type.cmp(&b.profile_type));
        let messages = s.session_messages(&sid);
        Ok(Some(ClaimedJob { job, collection, session, meta, messages, profiles }))
    }

    async fn complete_job(&self, lease: &JobLease, output: ExtractionOutput, now: Millis) -> StoreResult<Vec<String>> {
        let mut s = self.lock();
        let row = s
            .jobs
            .get(&lease.job_id)
            .ok_or_else(|| StoreError::NotFound(format!("job_id: no job \"{}\"", lease.job_id)))?;
        row.job.check_lease(lease)?;
        let cid = row.collection_id;
        let sid = row.job.session_id.clone().unwrap_or_default();
        let sess = s.sessions.get(&sid).ok_or_else(|| StoreError::backend("job without session"))?;
        let (session, meta) = (sess.summary.clone(), sess.meta.clone());
        let mut ids = Vec::with_capacity(output.events.len());
        for e in &output.events {
            if let Some(target) = &e.merge_into
                && s.merge_event(cid, target, e, now)
            {
                ids.push(target.clone());
                continue;
            }
            let new = e.to_new_event(cid, &meta, &session, now);
            let id = s.insert_event(&new);
            if let Some(old) = &e.supersedes
                && let Some(r) = s.event_mut(cid, old).filter(|r| r.event.status == "active")
            {
                r.event.status = "superseded".into();
                r.event.superseded_by = Some(id.clone());
                r.event.updated_at = now;
                r.event.valid_to = Some(new.valid_from.unwrap_or(new.time));
            }
            ids.push(id);
        }
        let changed_at = output.profile_time.unwrap_or(now);
        if let Some(user) = &meta.user_id {
            let typed = std::iter::once((PROFILE_V1.to_string(), output.profile_changes.clone()))
                .chain(output.typed_profile_changes.iter().cloned());
            for (ptype, changes) in typed.filter(|(_, c)| !c.is_empty()) {
                s.apply_profile_changes(cid, &ptype, user, &session.session_id, &changes, changed_at);
            }
        }
        if let Some(x) = s.sessions.get_mut(&sid) {
            x.summary.state = "extracted".into();
            x.summary.extracted_at = Some(now);
        }
        let row = s.jobs.get_mut(&lease.job_id).expect("job");
        row.job.state = JobState::Done;
        row.lease_until = None;
        row.job.last_error = None;
        row.job.prompt_tokens += output.prompt_tokens;
        row.job.completion_tokens += output.completion_tokens;
        row.job.updated_at = now;
        row.job.finished_at = Some(now);
        Ok(ids)
    }

    async fn renew_lease(&self, lease: &JobLease, until: Millis) -> StoreResult<bool> {
        let mut s = self.lock();
        match s.jobs.get_mut(&lease.job_id) {
            Some(j) if j.job.state == JobState::Running && j.job.attempts == lease.attempt => {
                j.lease_until = Some(until);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn fail_job(&self, lease: &JobLease, error: &str, retry_at: Option<Millis>, now: Millis) -> StoreResult<()> {
        let mut s = self.lock();
        let Some(j) = s.jobs.get_mut(&lease.job_id) else { return Ok(()) };
        if j.job.state != JobState::Running || j.job.attempts != lease.attempt {
            return Ok(());
        }
        (j.job.state, j.job.run_after) = match retry_at {
            Some(t) => (JobState::Queued, t),
            None => (JobState::Failed, now),
        };
        j.job.last_error = Some(error.chars().take(2000).collect());
        j.lease_until = None;
        j.job.updated_at = now;
        j.job.finished_at = (j.job.state == JobState::Failed).then_some(now);
        if j.job.state == JobState::Failed
            && let Some(sid) = j.job.session_id.clone()
            && let Some(x) = s.sessions.get_mut(&sid)
        {
            x.summary.state = "failed".into();
        }
        Ok(())
    }

    async fn defer_job(&self, lease: &JobLease, run_after: Millis, note: &str, now: Millis) -> StoreResult<()> {
        let mut s = self.lock();
        if let Some(j) = s.jobs.get_mut(&lease.job_id)
            && j.job.state == JobState::Running
            && j.job.attempts == lease.attempt
        {
            j.job.state = JobState::Queued;
            j.job.attempts = j.job.attempts.saturating_sub(1);
            j.job.run_after = run_after;
            j.job.last_error = Some(note.to_string());
            j.lease_until = None;
            j.job.updated_at = now;
        }
        Ok(())
    }

    async fn retry_jobs(
        &self,
        collection_id: CollectionId,
        job_id: Option<&str>,
        now: Millis,
    ) -> StoreResult<Vec<String>> {
        let mut s = self.lock();
        let ids: Vec<String> = s
            .jobs
            .values()
            .filter(|j| j.collection_id == collection_id && j.job.state == JobState::Failed)
            .filter(|j| job_id.is_none_or(|id| j.job.job_id == id))
            .map(|j| j.job.job_id.clone())
            .collect();
        for id in &ids {
            s.requeue(id, now, false);
        }
        Ok(ids)
    }

    async fn requeue_transient_failures(&self, max_requeues: u32, now: Millis) -> StoreResult<Vec<String>> {
        let mut s = self.lock();
        let ids: Vec<String> = s
            .jobs
            .values()
            .filter(|j| j.job.failed_transiently() && j.job.requeues < max_requeues)
            .map(|j| j.job.job_id.clone())
            .collect();
        for id in &ids {
            s.requeue(id, now, true);
        }
        Ok(ids)
    }

    async fn tokens_used_since(&self, project: &str, since: Millis) -> StoreResult<u64> {
        let s = self.lock();
        Ok(s.jobs
            .values()
            .filter(|j| j.job.updated_at >= since)
            .filter(|j| s.collections.get(&j.collection_id).is_some_and(|c| c.project_name == project))
            .map(|j| j.job.prompt_tokens + j.job.completion_tokens)
            .sum())
    }

    async fn list_jobs(&self, collection_id: CollectionId, f: JobFilter) -> StoreResult<Vec<Job>> {
        let s = self.lock();
        let mut out: Vec<Job> = s
            .jobs
            .values()
            .filter(|j| j.collection_id == collection_id)
            .filter(|j| f.state.is_none_or(|st| j.job.state == st))
            .filter(|j| f.conversation_id.is_none() || j.job.conversation_id == f.conversation_id)
            .filter(|j| f.session_id.is_none() || j.job.session_id == f.session_id)
            .map(|j| j.job.clone())
            .collect();
        out.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| b.job_id.cmp(&a.job_id)));
        out.truncate(f.limit.max(1) as usize);
        Ok(out)
    }

    async fn next_job_due(&self) -> StoreResult<Option<Millis>> {
        Ok(self
            .lock()
            .jobs
            .values()
            .filter_map(|j| match j.job.state {
                JobState::Queued => Some(j.job.run_after),
                JobState::Running => j.lease_until,
                _ => None,
            })
            .min())
    }
}

#[async_trait]
impl EventStore for MemoryStore {
    // ------------------------------------------------------------------ events

    async fn insert_event(&self, e: NewEvent) -> StoreResult<Event> {
        let mut s = self.lock();
        let id = s.insert_event(&e);
        Ok(s.events[&id].event.clone())
    }

    async fn insert_events(&self, events: Vec<NewEvent>) -> StoreResult<Vec<Event>> {
        let mut s = self.lock();
        // As the databases' foreign keys do: a batch naming a missing collection stores nothing.
        for e in &events {
            s.collection(e.collection_id)?;
        }
        let ids: Vec<String> = events.iter().map(|e| s.insert_event(e)).collect();
        Ok(ids.iter().map(|id| s.events[id].event.clone()).collect())
    }

    async fn get_event(&self, collection_id: CollectionId, id: &str) -> StoreResult<Option<Event>> {
        Ok(self.lock().event(collection_id, id).map(|r| r.event.clone()))
    }

    async fn update_event(
        &self,
        collection_id: CollectionId,
        id: &str,
        patch: EventPatch,
        now: Millis,
    ) -> StoreResult<Event> {
        let mut s = self.lock();
        let row = s
            .event_mut(collection_id, id)
            .ok_or_else(|| StoreError::NotFound(format!("event_id: no event \"{id}\"")))?;
        if let Some(TextVectors { vector, turns }) = patch.apply(&mut row.event) {
            row.terms = terms_of(&row.event.memory_info);
            row.turns = vector.as_ref().and(turns.as_deref()).and_then(mnemo_core::turns::encode);
            if vector.is_some() {
                row.vector = vector;
            }
        }
        row.event.updated_at = now;
        Ok(row.event.clone())
    }

    async fn delete_event(&self, collection_id: CollectionId, id: &str) -> StoreResult<bool> {
        let mut s = self.lock();
        Ok(s.event(collection_id, id).is_some() && s.events.remove(id).is_some())
    }

    async fn batch_delete_events(&self, collection_id: CollectionId, filter: EventFilter) -> StoreResult<u64> {
        let mut s = self.lock();
        let ids: Vec<String> = s.events_where(collection_id, &filter).iter().map(|r| r.event.id.clone()).collect();
        for id in &ids {
            s.events.remove(id);
        }
        Ok(ids.len() as u64)
    }

    async fn list_events(
        &self,
        collection_id: CollectionId,
        filter: EventFilter,
        limit: u32,
    ) -> StoreResult<Vec<Event>> {
        let s = self.lock();
        Ok(s.events_where(collection_id, &filter).into_iter().take(limit as usize).map(|r| r.event.clone()).collect())
    }

    async fn event_after(
        &self,
        collection_id: CollectionId,
        filter: EventFilter,
        time: Millis,
        id: &str,
    ) -> StoreResult<Option<Event>> {
        let s = self.lock();
        let after = s
            .events_where(collection_id, &filter)
            .into_iter()
            .filter(|r| (r.event.time, r.event.id.as_str()) > (time, id));
        Ok(after.min_by(|a, b| (a.event.time, &a.event.id).cmp(&(b.event.time, &b.event.id))).map(|r| r.event.clone()))
    }

    async fn record_hits(&self, collection_id: CollectionId, ids: Vec<String>, now: Millis) -> StoreResult<()> {
        let mut s = self.lock();
        let day = now.div_euclid(DAY);
        for id in &ids {
            let Some(r) = s.event_mut(collection_id, id) else { continue };
            r.event.hit_count += 1;
            r.event.last_hit_at = Some(now);
            let user = r.event.user_id.first().cloned().unwrap_or_default();
            *s.hits_daily.entry((collection_id, day, user)).or_default() += 1;
        }
        Ok(())
    }

    async fn events_missing_vectors(&self, collection_id: CollectionId, limit: u32) -> StoreResult<Vec<Event>> {
        let s = self.lock();
        Ok(s.events
            .values()
            .filter(|r| r.collection_id == collection_id && r.vector.is_none())
            .take(limit as usize)
            .map(|r| r.event.clone())
            .collect())
    }

    async fn set_event_vector(
        &self,
        collection_id: CollectionId,
        id: &str,
        vector: Vec<f32>,
        turns: Option<Vec<Vec<f32>>>,
    ) -> StoreResult<()> {
        if let Some(r) = self.lock().event_mut(collection_id, id) {
            r.vector = Some(vector);
            r.turns = turns.as_deref().and_then(mnemo_core::turns::encode);
        }
        Ok(())
    }

    async fn events_without_turns(
        &self,
        before: Option<String>,
        limit: u32,
    ) -> StoreResult<Option<Vec<(CollectionId, Event)>>> {
        let s = self.lock();
        if !s.turns_backfill {
            return Ok(None);
        }
        let below = before.as_deref().map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
        Ok(Some(
            s.events
                .range::<str, _>((std::ops::Bound::Unbounded, below))
                .rev()
                .map(|(_, r)| r)
                .filter(|r| r.vector.is_some() && r.turns.is_none())
                .take(limit as usize)
                .map(|r| (r.collection_id, r.event.clone()))
                .collect(),
        ))
    }

    async fn add_event_turns(
        &self,
        collection_id: CollectionId,
        id: &str,
        seen: Millis,
        turns: Vec<Vec<f32>>,
    ) -> StoreResult<bool> {
        let mut s = self.lock();
        let Some(r) = s.event_mut(collection_id, id) else { return Ok(false) };
        if r.event.updated_at != seen || r.vector.is_none() || r.turns.is_some() {
            return Ok(false);
        }
        r.turns = mnemo_core::turns::encode(&turns);
        Ok(r.turns.is_some())
    }

    async fn turns_backfilled(&self) -> StoreResult<()> {
        self.lock().turns_backfill = false;
        Ok(())
    }
}

#[async_trait]
impl SearchStore for MemoryStore {
    async fn search_candidates(
        &self,
        collection_id: CollectionId,
        filter: EventFilter,
        q: CandidateQuery,
    ) -> StoreResult<Vec<Candidate>> {
        let s = self.lock();
        let scope = s.events_where(collection_id, &filter);
        let mut cosine: HashMap<String, f32> = HashMap::new();
        if let Some(qv) = &q.vector {
            let mut scored: Vec<(f32, &str)> = scope
                .iter()
                .filter_map(|r| {
                    r.vector.as_ref().filter(|v| v.len() == qv.len()).map(|v| (dot(qv, v), r.event.id.as_str()))
                })
                .collect();
            scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
            cosine = scored.into_iter().take(q.k).map(|(c, id)| (id.to_string(), c)).collect();
        }
        let mut bm25: HashMap<String, f64> = HashMap::new();
        if !q.terms.is_empty() {
            let Corpus { stats, df } = s.corpus(collection_id);
            let query = q.bm25(stats, |t| df.get(t).copied().unwrap_or(0));
            bm25 = query.top_k(scope.iter().map(|r| (&r.event.id, Some(&r.terms))), q.k);
        }
        let ids = mnemo_core::store::candidate_ids(&cosine, &bm25);
        let scored = mnemo_core::turns::scored(&cosine, &bm25);
        Ok(ids
            .into_iter()
            .map(|id| {
                let r = &s.events[&id];
                let cos = cosine.get(&id).copied().or_else(|| {
                    let qv = q.vector.as_ref()?;
                    r.vector.as_ref().filter(|v| v.len() == qv.len()).map(|v| dot(qv, v))
                });
                let best_turn = (q.vector.as_ref().zip(r.turns.as_ref()))
                    .filter(|_| scored.contains(id.as_str()))
                    .and_then(|(qv, t)| mnemo_core::turns::best(t, qv));
                Candidate { event: r.event.clone(), cosine: cos, bm25: bm25.get(&id).copied(), best_turn }
            })
            .collect())
    }

    async fn corpus(&self, collection_id: CollectionId, tokens: &[String]) -> StoreResult<Corpus> {
        let Corpus { stats, mut df } = self.lock().corpus(collection_id);
        df.retain(|t, _| tokens.contains(t));
        Ok(Corpus { stats, df })
    }
}

#[async_trait]
impl StatsStore for MemoryStore {
    // ------------------------------------------------------------------ lifecycle and numbers

    async fn list_users(
        &self,
        collection_id: CollectionId,
        contains: Option<String>,
        limit: u32,
    ) -> StoreResult<Vec<UserSummary>> {
        let s = self.lock();
        let mut by_user: BTreeMap<String, UserSummary> = BTreeMap::new();
        fn entry<'a>(by_user: &'a mut BTreeMap<String, UserSummary>, u: &str) -> &'a mut UserSummary {
            by_user.entry(u.to_string()).or_insert_with(|| UserSummary { user_id: u.to_string(), ..Default::default() })
        }
        for ((cid, _), c) in &s.conversations {
            if let Some(u) = c.meta.user_id.as_deref().filter(|_| *cid == collection_id) {
                let e = entry(&mut by_user, u);
                e.conversations += 1;
                e.last_active = e.last_active.max(Some(c.last_write_at));
            }
        }
        for r in s.events.values().filter(|r| r.collection_id == collection_id && r.event.status == "active") {
            for u in &r.event.user_id {
                let e = entry(&mut by_user, u);
                e.events += 1;
                e.last_active = e.last_active.max(Some(r.event.updated_at));
            }
        }
        let wanted = contains.map(|c| c.to_ascii_lowercase());
        let mut users: Vec<UserSummary> = by_user
            .into_values()
            .filter(|u| wanted.as_deref().is_none_or(|w| u.user_id.to_ascii_lowercase().contains(w)))
            .collect();
        order_users(&mut users, limit);
        Ok(users)
    }

    async fn memory_stats(
        &self,
        collection_id: CollectionId,
        user_id: Option<String>,
        days: u32,
        now: Millis,
    ) -> StoreResult<MemoryStats> {
        let s = self.lock();
        let from_day = now.div_euclid(DAY) - days as i64 + 1;
        let user = user_id.as_deref();
        let scope: Vec<&Event> = s
            .events
            .values()
            .filter(|r| r.collection_id == collection_id)
            .filter(|r| user.is_none_or(|u| r.event.user_id.iter().any(|x| x == u)))
            .map(|r| &r.event)
            .collect();
        let per_day = |pairs: BTreeMap<i64, u64>| -> Vec<(String, u64)> {
            pairs.into_iter().rev().map(|(d, n)| (day_name(d), n)).collect()
        };
        let mut created: BTreeMap<i64, u64> = BTreeMap::new();
        for e in scope.iter().filter(|e| e.created_at >= from_day * DAY) {
            *created.entry(e.created_at.div_euclid(DAY)).or_default() += 1;
        }
        let mut hits: BTreeMap<i64, u64> = BTreeMap::new();
        for ((c, d, u), n) in &s.hits_daily {
            if *c == collection_id && *d >= from_day && user.is_none_or(|x| x == u) {
                *hits.entry(*d).or_default() += n;
            }
        }
        let mut top: Vec<&&Event> = scope.iter().filter(|e| e.hit_count > 0).collect();
        top.sort_by(|a, b| b.hit_count.cmp(&a.hit_count).then_with(|| a.id.cmp(&b.id)));
        let mut jobs: BTreeMap<i64, (u64, u64, u64, u64, u64)> = BTreeMap::new();
        for j in s.jobs.values().filter(|j| j.collection_id == collection_id && j.job.created_at >= from_day * DAY) {
            let owner =
                j.job.session_id.as_ref().and_then(|sid| s.sessions.get(sid)).and_then(|x| x.meta.user_id.as_deref());
            if user.is_some() && owner != user {
                continue;
            }
            let t = jobs.entry(j.job.created_at.div_euclid(DAY)).or_default();
            t.0 += 1;
            t.1 += u64::from(j.job.state == JobState::Done);
            t.2 += u64::from(j.job.state == JobState::Failed);
            t.3 += j.job.prompt_tokens;
            t.4 += j.job.completion_tokens;
        }
        Ok(MemoryStats {
            new_memories_per_day: per_day(created),
            hits_per_day: per_day(hits),
            top_hit: top
                .iter()
                .take(10)
                .map(|e| (e.id.clone(), e.text().chars().take(120).collect(), e.hit_count))
                .collect(),
            never_hit: scope.iter().filter(|e| e.hit_count == 0).count() as u64,
            total_events: scope.len() as u64,
            jobs_per_day: jobs
                .into_iter()
                .rev()
                .map(|(d, (n, done, failed, pt, ct))| (day_name(d), n, done, failed, pt, ct))
                .collect(),
        })
    }

    async fn stats(&self) -> StoreResult<StoreStats> {
        let s = self.lock();
        let mut jobs: BTreeMap<&'static str, u64> = BTreeMap::new();
        for j in s.jobs.values() {
            *jobs.entry(j.job.state.as_str()).or_default() += 1;
        }
        Ok(StoreStats {
            jobs: jobs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            conversations: s.conversations.len() as u64,
            messages: s.messages.len() as u64,
            events: s.events.len() as u64,
            profiles: s.profiles.len() as u64,
            bytes: 0,
            scope_cache: None,
        })
    }
}

#[async_trait]
impl MaintenanceStore for MemoryStore {
    async fn run_maintenance(
        &self,
        collection_id: CollectionId,
        now: Millis,
        archive_before: Millis,
        trigger: &str,
    ) -> StoreResult<MaintenanceRun> {
        let mut s = self.lock();
        let name = s.collection(collection_id)?.collection_name.clone();
        let expired: Vec<String> = s
            .events
            .values()
            .filter(|r| r.collection_id == collection_id)
            .filter(|r| r.event.expires_at.is_some_and(|t| t <= now) && r.event.hit_count == 0)
            .map(|r| r.event.id.clone())
            .collect();
        for id in &expired {
            s.events.remove(id);
        }
        let mut archived = 0;
        for r in s.events.values_mut().filter(|r| r.collection_id == collection_id && r.event.status == "active") {
            if r.event.last_hit_at.unwrap_or(r.event.created_at) < archive_before {
                r.event.status = "archived".into();
                r.event.updated_at = now;
                archived += 1;
            }
        }
        let run = MaintenanceRun {
            collection_name: name,
            trigger: trigger.to_string(),
            started_at: now,
            expired: expired.len() as u64,
            archived,
            folded: 0,
            digests: 0,
        };
        s.maintenance.push((collection_id, run.clone()));
        Ok(run)
    }

    async fn replace_events(
        &self,
        collection_id: CollectionId,
        delete: Vec<String>,
        new: NewEvent,
    ) -> StoreResult<Event> {
        let mut s = self.lock();
        for id in &delete {
            if s.event(collection_id, id).is_some() {
                s.events.remove(id);
            }
        }
        let id = s.insert_event(&new);
        Ok(s.events[&id].event.clone())
    }

    async fn note_maintenance(&self, collection_id: CollectionId, folded: u64, digests: u64) -> StoreResult<()> {
        if let Some((_, run)) = self.lock().maintenance.iter_mut().rev().find(|(c, _)| *c == collection_id) {
            run.folded += folded;
            run.digests += digests;
        }
        Ok(())
    }

    async fn list_maintenance_runs(&self, collection_id: CollectionId, limit: u32) -> StoreResult<Vec<MaintenanceRun>> {
        let s = self.lock();
        let mut runs: Vec<(usize, &MaintenanceRun)> = s
            .maintenance
            .iter()
            .enumerate()
            .filter(|(_, (c, _))| *c == collection_id)
            .map(|(i, (_, r))| (i, r))
            .collect();
        runs.sort_by(|a, b| b.1.started_at.cmp(&a.1.started_at).then_with(|| b.0.cmp(&a.0)));
        Ok(runs.into_iter().take(limit as usize).map(|(_, r)| r.clone()).collect())
    }
}

#[async_trait]
impl PrivacyStore for MemoryStore {
    // ------------------------------------------------------------------ privacy

    async fn export_user(&self, collection_id: CollectionId, user_id: &str) -> StoreResult<UserData> {
        let s = self.lock();
        let mut out = UserData::default();
        for conv in s.user_conversations(collection_id, user_id) {
            out.messages.extend(
                s.messages
                    .iter()
                    .filter(|m| m.collection_id == collection_id && m.stored.conversation_id == conv)
                    .map(|m| m.stored.clone()),
            );
            let mut sessions: Vec<SessionSummary> = s
                .sessions
                .values()
                .filter(|x| x.collection_id == collection_id && x.summary.conversation_id == conv)
                .map(|x| x.summary.clone())
                .collect();
            sessions.sort_by_key(|x| x.created_at);
            out.sessions.extend(sessions);
            let mut jobs: Vec<Job> = s
                .jobs
                .values()
                .filter(|j| j.collection_id == collection_id && j.job.conversation_id.as_deref() == Some(conv.as_str()))
                .map(|j| j.job.clone())
                .collect();
            jobs.sort_by_key(|j| j.created_at);
            out.jobs.extend(jobs);
            out.conversations.push(ConversationInfo {
                meta: s.conversations[&(collection_id, conv.clone())].meta.clone(),
                conversation_id: conv,
                short_term: vec![],
                open_messages: 0,
                open_tokens: 0,
                idle_deadline: None,
                sessions: vec![],
            });
        }
        out.events = s.user_event_ids(collection_id, user_id).iter().map(|id| s.events[id].event.clone()).collect();
        let mut profiles: Vec<Profile> = s
            .profiles
            .values()
            .filter(|p| p.collection_id == collection_id && p.profile.user_id == user_id)
            .map(|p| p.profile.clone())
            .collect();
        profiles.sort_by_key(|p| p.created_at);
        out.profiles = profiles;
        Ok(out)
    }

    async fn forget_user(&self, collection_id: CollectionId, user_id: &str) -> StoreResult<ForgetCounts> {
        let mut s = self.lock();
        let mut n = ForgetCounts::default();
        for id in s.user_event_ids(collection_id, user_id) {
            let r = s.events.get_mut(&id).expect("event");
            if r.event.user_id.iter().all(|u| u == user_id) {
                s.events.remove(&id);
                n.events += 1;
            } else {
                r.event.user_id.retain(|u| u != user_id);
            }
        }
        for conv in s.user_conversations(collection_id, user_id) {
            let in_conv = |c: CollectionId, v: Option<&str>| c == collection_id && v == Some(conv.as_str());
            let before = s.events.len();
            s.events.retain(|_, r| !in_conv(r.collection_id, r.event.conversation_id.as_deref()));
            n.events += (before - s.events.len()) as u64;
            let before = s.jobs.len();
            s.jobs.retain(|_, j| !in_conv(j.collection_id, j.job.conversation_id.as_deref()));
            n.jobs += (before - s.jobs.len()) as u64;
            let before = s.sessions.len();
            s.sessions.retain(|_, x| !in_conv(x.collection_id, Some(x.summary.conversation_id.as_str())));
            n.sessions += (before - s.sessions.len()) as u64;
            let before = s.messages.len();
            s.messages.retain(|m| !in_conv(m.collection_id, Some(m.stored.conversation_id.as_str())));
            n.messages += (before - s.messages.len()) as u64;
            n.conversations += u64::from(s.conversations.remove(&(collection_id, conv.clone())).is_some());
        }
        let before = s.profiles.len();
        s.profiles.retain(|_, p| !(p.collection_id == collection_id && p.profile.user_id == user_id));
        n.profiles += (before - s.profiles.len()) as u64;
        s.hits_daily.retain(|(c, _, u), _| !(*c == collection_id && u == user_id));
        Ok(n)
    }
}

#[async_trait]
impl ProfileStore for MemoryStore {
    // ------------------------------------------------------------------ profiles

    async fn insert_profile(&self, p: NewProfile) -> StoreResult<Profile> {
        let mut s = self.lock();
        let assistant = p.assistant_id.clone().unwrap_or_default();
        if let Some(existing) = s.profile_for(p.collection_id, &p.profile_type, &p.user_id, &assistant) {
            return Err(StoreError::Conflict(format!(
                "user_id: user \"{}\" already has a {} profile ({}); use profile/update",
                p.user_id, p.profile_type, existing.profile.id
            )));
        }
        let profile = Profile {
            id: new_id("prf"),
            profile_type: p.profile_type,
            user_id: p.user_id,
            assistant_id: p.assistant_id.filter(|a| !a.is_empty()),
            content: p.content,
            attributes: p.attributes,
            source_session_ids: vec![],
            created_at: p.now,
            updated_at: p.now,
            history: vec![],
            since: Map::new(),
        };
        s.profiles.insert(profile.id.clone(), ProfileRow { collection_id: p.collection_id, profile: profile.clone() });
        Ok(profile)
    }

    async fn update_profile(
        &self,
        collection_id: CollectionId,
        id: &str,
        patch: ProfilePatch,
        now: Millis,
    ) -> StoreResult<Profile> {
        let mut s = self.lock();
        let row = s
            .profiles
            .get_mut(id)
            .filter(|p| p.collection_id == collection_id)
            .ok_or_else(|| StoreError::NotFound(format!("profile_id: no profile \"{id}\"")))?;
        let before = row.profile.attributes.clone();
        let mut patch = patch;
        let rebuilt = patch.versions.take();
        let superseded = profile::apply_patch(&mut row.profile, patch);
        row.profile.updated_at = now;
        if let Some(v) = rebuilt {
            row.profile.history = v.history;
            row.profile.since = v.since;
            return Ok(row.profile.clone());
        }
        let ptype = row.profile.profile_type.clone();
        let keep = s.keeps_history(collection_id, &ptype);
        s.record_versions(id, keep, &before, &superseded, None, now);
        Ok(s.profiles[id].profile.clone())
    }

    async fn delete_profile(&self, collection_id: CollectionId, id: &str) -> StoreResult<bool> {
        let mut s = self.lock();
        let ours = s.profiles.get(id).is_some_and(|p| p.collection_id == collection_id);
        Ok(ours && s.profiles.remove(id).is_some())
    }

    async fn list_profiles(
        &self,
        collection_id: CollectionId,
        f: ProfileFilter,
        limit: u32,
    ) -> StoreResult<Vec<Profile>> {
        let s = self.lock();
        let within = |want: &[String], have: &str| want.is_empty() || want.iter().any(|w| w == have);
        let mut out: Vec<Profile> = s
            .profiles
            .values()
            .filter(|p| p.collection_id == collection_id)
            .map(|p| &p.profile)
            .filter(|p| within(&f.user_id, &p.user_id))
            .filter(|p| within(&f.assistant_id, p.assistant_id.as_deref().unwrap_or("")))
            .filter(|p| within(&f.profile_type, &p.profile_type))
            .cloned()
            .collect();
        out.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then_with(|| a.id.cmp(&b.id)));
        out.truncate(limit as usize);
        Ok(out)
    }
}
