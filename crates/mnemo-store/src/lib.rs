//! mnemo-store: the embedded store. One SQLite file in WAL mode holds collections,
//! conversations, messages, sessions, the durable job queue, events and profiles.
//!
//! Writes go through one writer thread with group commit ([`writer`]); reads use a small pool of
//! connections on `spawn_blocking`. Every `Store` method is one transaction, so a method that
//! returned `Ok` is on disk (WAL, `synchronous=NORMAL` survives a killed process; `full` also
//! survives power loss). This crate knows SQL and nothing of HTTP or models.

mod collections;
mod conversations;
mod copies;
mod events;
mod jobs;
mod maintenance;
mod privacy;
mod profiles;
mod rows;
mod schema;
mod search;
mod stats;
mod webhooks;
mod writer;

use crate::events::backfill_terms;
use crate::writer::Writer;
use async_trait::async_trait;
use mnemo_core::StoreError;
use mnemo_core::extract::ExtractionOutput;
use mnemo_core::model::*;
use mnemo_core::store::{NextTerms, PendingVector, Store, StoreResult, TwoHops};
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub use schema::SCHEMA_VERSION;

/// How hard a commit waits for the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// WAL + `synchronous=NORMAL`: a committed write survives the process being killed.
    #[default]
    Process,
    /// WAL + `synchronous=FULL`: also survives power loss (an fsync per group commit).
    PowerLoss,
}

#[derive(Clone, Debug)]
pub struct SqliteOptions {
    pub durability: Durability,
    /// Page cache per connection, MiB (the default 2 MiB made inserts ~5× slower here).
    pub cache_mib: u32,
    /// `PRAGMA mmap_size`, MiB (0: reads copy pages through each connection's cache).
    pub mmap_mib: u32,
    pub readers: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self { durability: Durability::Process, cache_mib: 64, mmap_mib: 0, readers: 4 }
    }
}

pub struct SqliteStore {
    path: PathBuf,
    writer: Writer,
    readers: Arc<Mutex<Vec<Connection>>>,
    options: SqliteOptions,
    relocation: events::Relocation,
    f16_fill: events::F16Fill,
}

pub const DB_FILE: &str = "mnemo.db";

impl SqliteStore {
    /// Opens (creating if needed) the store in `dir`, migrating it to the current schema.
    pub fn open(dir: &Path, options: SqliteOptions) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| StoreError::backend(format!("cannot create data directory {}: {e}", dir.display())))?;
        let path = dir.join(DB_FILE);
        let mut conn = open_conn(&path, &options, false).map_err(backend)?;
        schema::migrate_with(&mut conn, |tx, version| match version {
            7 => backfill_terms(tx)
                .map(|n| tracing::info!(events = n, "indexed the terms of events written before schema v7")),
            11 => {
                let empty: bool =
                    tx.query_row("SELECT NOT EXISTS (SELECT 1 FROM event_vectors_legacy)", [], |r| r.get(0))?;
                if empty { tx.execute_batch("DROP TABLE event_vectors_legacy") } else { Ok(()) }
            }
            // A new data directory has no vectors to copy. (One upgraded from v10 keeps its
            // vectors in the legacy table — dropped above only when empty — until the relocation
            // moves them.)
            12 => {
                let empty: bool = tx.query_row(
                    "SELECT NOT EXISTS (SELECT 1 FROM event_vectors)
                        AND NOT EXISTS (SELECT 1 FROM sqlite_schema WHERE type='table' AND name='event_vectors_legacy')",
                    [],
                    |r| r.get(0),
                )?;
                if empty { tx.execute_batch("DROP TABLE event_vectors_f16_fill") } else { Ok(()) }
            }
            _ => Ok(()),
        })
        .map_err(backend)?
        .map_err(StoreError::backend)?;
        // Jobs left `running` by a previous process of this single-process store resume now.
        conn.execute("UPDATE jobs SET state='queued', lease_until=NULL WHERE state='running'", []).map_err(backend)?;
        let relocation = events::Relocation::new(&conn)?;
        let f16_fill = events::F16Fill::new(&conn)?;
        // WAL checkpoints run on a connection of their own (writer.rs).
        let checkpoints = open_conn(&path, &options, false)
            .inspect_err(
                |e| tracing::warn!(error = %e, "no checkpoint connection; the writer checkpoints the WAL itself"),
            )
            .ok();
        Ok(Self {
            path,
            writer: Writer::spawn(conn, checkpoints),
            readers: Arc::new(Mutex::new(Vec::new())),
            options,
            relocation,
            f16_fill,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn read<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    {
        let pool = self.readers.clone();
        let path = self.path.clone();
        let options = self.options.clone();
        tokio::task::spawn_blocking(move || {
            let conn = pool.lock().expect("reader pool").pop();
            let conn = match conn {
                Some(c) => c,
                None => open_conn(&path, &options, true).map_err(backend)?,
            };
            // One snapshot for the whole read: a read made of several queries must not see a
            // commit land between them (e.g. a job `done` without its events).
            conn.execute_batch("BEGIN").map_err(backend)?;
            let out = f(&conn);
            let _ = conn.execute_batch("COMMIT");
            let mut pool = pool.lock().expect("reader pool");
            if pool.len() < options.readers {
                pool.push(conn);
            }
            out
        })
        .await
        .map_err(|e| StoreError::backend(format!("read task failed: {e}")))?
    }
}

fn open_conn(path: &Path, o: &SqliteOptions, read_only: bool) -> rusqlite::Result<Connection> {
    let flags = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX
    };
    let conn = Connection::open_with_flags(path, flags)?;
    // rusqlite keeps 16 prepared statements by default; the writer alone uses more than that on
    // a write with extraction, and an evicted one is parsed again on its next use.
    conn.set_prepared_statement_cache_capacity(128);
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    if !read_only {
        conn.pragma_update(None, "journal_mode", "WAL")?;
    }
    let sync = match o.durability {
        Durability::Process => "NORMAL",
        Durability::PowerLoss => "FULL",
    };
    conn.execute_batch(&format!(
        "PRAGMA synchronous={sync}; PRAGMA foreign_keys=ON; PRAGMA cache_size=-{}; PRAGMA temp_store=MEMORY; PRAGMA secure_delete=ON; PRAGMA mmap_size={};",
        o.cache_mib as i64 * 1024,
        o.mmap_mib as i64 * 1024 * 1024
    ))?;
    Ok(conn)
}

/// A SQLite (or other) error as a backend failure, kept as its cause.
pub(crate) fn backend(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::backend_caused("sqlite", e)
}

/// Each method delegates to the aggregate module that owns it.
#[async_trait]
impl Store for SqliteStore {
    fn engine(&self) -> &'static str {
        "sqlite"
    }

    fn housekeeping_interval(&self) -> Option<std::time::Duration> {
        // Only the upkeep an upgrade left: the relocation after schema v10 (`events::Relocation`),
        // then the f16 copies of the vectors written before schema v12 (`events::F16Fill`).
        (self.relocation.pending() || self.f16_fill.pending()).then_some(std::time::Duration::from_secs(60))
    }

    async fn housekeeping(&self) -> StoreResult<bool> {
        if self.relocate_step().await? {
            return Ok(true);
        }
        self.fill_f16_step().await
    }

    async fn create_collection(&self, c: NewCollection) -> StoreResult<Collection> {
        SqliteStore::create_collection(self, c).await
    }

    async fn get_collection(&self, project: &str, name: &str) -> StoreResult<Option<Collection>> {
        SqliteStore::get_collection(self, project, name).await
    }

    async fn ensure_collection(&self, c: NewCollection) -> StoreResult<Collection> {
        SqliteStore::ensure_collection(self, c).await
    }

    async fn all_collections(&self) -> StoreResult<Vec<Collection>> {
        SqliteStore::all_collections(self).await
    }

    async fn set_collection_embedding(&self, id: CollectionId, model: &str, dim: u32) -> StoreResult<()> {
        SqliteStore::set_collection_embedding(self, id, model, dim).await
    }

    async fn list_collections(&self, project: &str) -> StoreResult<Vec<Collection>> {
        SqliteStore::list_collections(self, project).await
    }

    async fn delete_collection(&self, id: CollectionId) -> StoreResult<bool> {
        SqliteStore::delete_collection(self, id).await
    }

    async fn append_messages(&self, req: AppendRequest) -> StoreResult<AppendOutcome> {
        SqliteStore::append_messages(self, req).await
    }

    async fn add_session(&self, req: AppendRequest) -> StoreResult<SessionClosed> {
        SqliteStore::add_session(self, req).await
    }

    async fn delete_conversation(&self, cid: CollectionId, conversation_id: &str) -> StoreResult<Vec<String>> {
        SqliteStore::delete_conversation(self, cid, conversation_id).await
    }

    async fn flush_conversation(
        &self,
        collection_id: CollectionId,
        conversation_id: &str,
        now: Millis,
        max_job_attempts: u32,
    ) -> StoreResult<Option<SessionClosed>> {
        SqliteStore::flush_conversation(self, collection_id, conversation_id, now, max_job_attempts).await
    }

    async fn close_idle_conversations(
        &self,
        now: Millis,
        limit: u32,
        max_job_attempts: u32,
    ) -> StoreResult<Vec<SessionClosed>> {
        SqliteStore::close_idle_conversations(self, now, limit, max_job_attempts).await
    }

    async fn next_idle_deadline(&self) -> StoreResult<Option<Millis>> {
        SqliteStore::next_idle_deadline(self).await
    }

    async fn conversation_info(
        &self,
        cid: CollectionId,
        conversation_id: &str,
    ) -> StoreResult<Option<ConversationInfo>> {
        SqliteStore::conversation_info(self, cid, conversation_id).await
    }

    async fn session_info(&self, cid: CollectionId, session_id: &str) -> StoreResult<Option<SessionDetail>> {
        SqliteStore::session_info(self, cid, session_id).await
    }

    async fn claim_job(&self, now: Millis, lease_ms: i64) -> StoreResult<Option<ClaimedJob>> {
        SqliteStore::claim_job(self, now, lease_ms).await
    }

    async fn complete_job(&self, lease: &JobLease, output: ExtractionOutput, now: Millis) -> StoreResult<Vec<String>> {
        SqliteStore::complete_job(self, lease, output, now).await
    }

    async fn fail_job(&self, lease: &JobLease, error: &str, retry_at: Option<Millis>, now: Millis) -> StoreResult<()> {
        SqliteStore::fail_job(self, lease, error, retry_at, now).await
    }

    async fn renew_lease(&self, lease: &JobLease, until: Millis) -> StoreResult<bool> {
        SqliteStore::renew_lease(self, lease, until).await
    }

    async fn defer_job(&self, lease: &JobLease, run_after: Millis, note: &str, now: Millis) -> StoreResult<()> {
        SqliteStore::defer_job(self, lease, run_after, note, now).await
    }

    async fn retry_jobs(&self, cid: CollectionId, job_id: Option<&str>, now: Millis) -> StoreResult<Vec<String>> {
        SqliteStore::retry_jobs(self, cid, job_id, now).await
    }

    async fn requeue_transient_failures(&self, max_requeues: u32, now: Millis) -> StoreResult<Vec<String>> {
        SqliteStore::requeue_transient_failures(self, max_requeues, now).await
    }

    async fn tokens_used_since(&self, project: &str, since: Millis) -> StoreResult<u64> {
        SqliteStore::tokens_used_since(self, project, since).await
    }

    async fn list_jobs(&self, cid: CollectionId, f: JobFilter) -> StoreResult<Vec<Job>> {
        SqliteStore::list_jobs(self, cid, f).await
    }

    async fn next_job_due(&self) -> StoreResult<Option<Millis>> {
        SqliteStore::next_job_due(self).await
    }

    async fn insert_event(&self, e: NewEvent) -> StoreResult<Event> {
        SqliteStore::insert_event(self, e).await
    }
    async fn insert_events(&self, events: Vec<NewEvent>) -> StoreResult<Vec<Event>> {
        SqliteStore::insert_events(self, events).await
    }

    async fn get_event(&self, cid: CollectionId, id: &str) -> StoreResult<Option<Event>> {
        SqliteStore::get_event(self, cid, id).await
    }

    async fn update_event(&self, cid: CollectionId, id: &str, patch: EventPatch, now: Millis) -> StoreResult<Event> {
        SqliteStore::update_event(self, cid, id, patch, now).await
    }

    async fn delete_event(&self, cid: CollectionId, id: &str) -> StoreResult<bool> {
        SqliteStore::delete_event(self, cid, id).await
    }

    async fn batch_delete_events(&self, cid: CollectionId, filter: EventFilter) -> StoreResult<u64> {
        SqliteStore::batch_delete_events(self, cid, filter).await
    }

    async fn list_events(&self, cid: CollectionId, filter: EventFilter, limit: u32) -> StoreResult<Vec<Event>> {
        SqliteStore::list_events(self, cid, filter, limit).await
    }

    async fn event_after(
        &self,
        cid: CollectionId,
        filter: EventFilter,
        time: Millis,
        id: &str,
    ) -> StoreResult<Option<Event>> {
        SqliteStore::event_after(self, cid, filter, time, id).await
    }

    async fn search_candidates(
        &self,
        cid: CollectionId,
        filter: EventFilter,
        q: CandidateQuery,
    ) -> StoreResult<Vec<Candidate>> {
        SqliteStore::search_candidates(self, cid, filter, q).await
    }

    async fn search_candidates_then(
        &self,
        cid: CollectionId,
        filter: EventFilter,
        first: CandidateQuery,
        vector: PendingVector<'_>,
        then: NextTerms<'_>,
    ) -> StoreResult<TwoHops> {
        SqliteStore::search_candidates_then(self, cid, filter, first, vector, then).await
    }

    async fn corpus(&self, cid: CollectionId, tokens: &[String]) -> StoreResult<Corpus> {
        SqliteStore::corpus(self, cid, tokens.to_vec()).await
    }

    async fn record_hits(&self, cid: CollectionId, ids: Vec<String>, now: Millis) -> StoreResult<()> {
        SqliteStore::record_hits(self, cid, ids, now).await
    }

    async fn events_missing_vectors(&self, cid: CollectionId, limit: u32) -> StoreResult<Vec<Event>> {
        SqliteStore::events_missing_vectors(self, cid, limit).await
    }

    async fn set_event_vector(
        &self,
        cid: CollectionId,
        id: &str,
        vector: Vec<f32>,
        turns: Option<Vec<Vec<f32>>>,
    ) -> StoreResult<()> {
        SqliteStore::set_event_vector(self, cid, id, vector, turns).await
    }

    async fn events_without_turns(
        &self,
        before: Option<String>,
        limit: u32,
    ) -> StoreResult<Option<Vec<(CollectionId, Event)>>> {
        SqliteStore::events_without_turns(self, before, limit).await
    }

    async fn add_event_turns(
        &self,
        cid: CollectionId,
        id: &str,
        seen: Millis,
        turns: Vec<Vec<f32>>,
    ) -> StoreResult<bool> {
        SqliteStore::add_event_turns(self, cid, id, seen, turns).await
    }

    async fn turns_backfilled(&self) -> StoreResult<()> {
        SqliteStore::turns_backfilled(self).await
    }

    async fn memory_stats(
        &self,
        cid: CollectionId,
        user: Option<String>,
        days: u32,
        now: Millis,
    ) -> StoreResult<MemoryStats> {
        SqliteStore::memory_stats(self, cid, user, days, now).await
    }

    async fn run_maintenance(
        &self,
        cid: CollectionId,
        now: Millis,
        archive_before: Millis,
        trigger: &str,
    ) -> StoreResult<MaintenanceRun> {
        SqliteStore::run_maintenance(self, cid, now, archive_before, trigger).await
    }

    async fn replace_events(&self, cid: CollectionId, delete: Vec<String>, new: NewEvent) -> StoreResult<Event> {
        SqliteStore::replace_events(self, cid, delete, new).await
    }

    async fn note_maintenance(&self, cid: CollectionId, folded: u64, digests: u64) -> StoreResult<()> {
        SqliteStore::note_maintenance(self, cid, folded, digests).await
    }

    async fn list_maintenance_runs(&self, cid: CollectionId, limit: u32) -> StoreResult<Vec<MaintenanceRun>> {
        SqliteStore::list_maintenance_runs(self, cid, limit).await
    }

    async fn stats(&self) -> StoreResult<StoreStats> {
        SqliteStore::stats(self).await
    }

    async fn export_user(&self, cid: CollectionId, user_id: &str) -> StoreResult<UserData> {
        SqliteStore::export_user(self, cid, user_id).await
    }

    async fn forget_user(&self, cid: CollectionId, user_id: &str) -> StoreResult<ForgetCounts> {
        SqliteStore::forget_user(self, cid, user_id).await
    }

    async fn insert_profile(&self, p: NewProfile) -> StoreResult<Profile> {
        SqliteStore::insert_profile(self, p).await
    }

    async fn update_profile(
        &self,
        cid: CollectionId,
        id: &str,
        patch: ProfilePatch,
        now: Millis,
    ) -> StoreResult<Profile> {
        SqliteStore::update_profile(self, cid, id, patch, now).await
    }

    async fn delete_profile(&self, cid: CollectionId, id: &str) -> StoreResult<bool> {
        SqliteStore::delete_profile(self, cid, id).await
    }

    async fn list_profiles(&self, cid: CollectionId, f: ProfileFilter, limit: u32) -> StoreResult<Vec<Profile>> {
        SqliteStore::list_profiles(self, cid, f, limit).await
    }

    async fn upsert_webhook(&self, w: NewWebhook) -> StoreResult<Webhook> {
        SqliteStore::upsert_webhook(self, w).await
    }

    async fn sync_config_webhooks(&self, hooks: Vec<NewWebhook>) -> StoreResult<()> {
        SqliteStore::sync_config_webhooks(self, hooks).await
    }

    async fn list_webhooks(&self, project: Option<&str>) -> StoreResult<Vec<Webhook>> {
        SqliteStore::list_webhooks(self, project).await
    }

    async fn delete_webhook(&self, project: &str, id: &str) -> StoreResult<bool> {
        SqliteStore::delete_webhook(self, project, id).await
    }

    async fn claim_deliveries(
        &self,
        now: Millis,
        lease_until: Millis,
        limit: u32,
    ) -> StoreResult<Vec<ClaimedDelivery>> {
        SqliteStore::claim_deliveries(self, now, lease_until, limit).await
    }

    async fn finish_delivery(&self, id: i64, outcome: DeliveryOutcome, now: Millis) -> StoreResult<()> {
        SqliteStore::finish_delivery(self, id, outcome, now).await
    }

    async fn list_deliveries(&self, project: &str, filter: DeliveryFilter) -> StoreResult<Vec<Delivery>> {
        SqliteStore::list_deliveries(self, project, filter).await
    }

    async fn redeliver(
        &self,
        project: &str,
        webhook_id: &str,
        ids: Option<Vec<i64>>,
        now: Millis,
    ) -> StoreResult<Vec<i64>> {
        SqliteStore::redeliver(self, project, webhook_id, ids, now).await
    }

    async fn prune_deliveries(&self, before: Millis) -> StoreResult<u64> {
        SqliteStore::prune_deliveries(self, before).await
    }
}

#[cfg(test)]
mod tests;
