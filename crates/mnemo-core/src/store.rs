//! The storage contract every backend implements (embedded SQLite, PostgreSQL, the sharded store,
//! the in-memory reference), by area: one trait per aggregate, [`Store`] their sum.
//!
//! Each method is one transaction: when it returns `Ok`, its effect is durable. Rules shared by
//! all backends (trigger evaluation, profile merging) are called from inside these transactions
//! through the pure functions of this crate, never re-implemented per store.

use crate::error::StoreError;
use crate::extract::ExtractionOutput;
use crate::model::*;
use async_trait::async_trait;

/// The areas' traits, for code that calls a concrete store's methods (a `dyn Store` needs none).
pub mod prelude {
    pub use super::{
        CollectionStore, ConversationStore, EventStore, JobStore, MaintenanceStore, PrivacyStore, ProfileStore,
        SearchStore, StatsStore, Store, StoreEngine, WebhookStore,
    };
}

pub type StoreResult<T> = Result<T, StoreError>;

/// Decides a second search from the first one's candidates (`None`: no second search). See
/// [`SearchStore::search_candidates_then`]. Asynchronous so that a sharded store can decide once for
/// all its shards, each of which asks while keeping what its own first search read.
pub type NextTerms<'a> =
    Box<dyn FnOnce(&[Candidate]) -> futures_util::future::BoxFuture<'a, Option<NextHop>> + Send + 'a>;

/// A search's query vector, perhaps still being computed (its embedding; `None`: full text
/// only). See [`SearchStore::search_candidates_then`].
pub type PendingVector<'a> = futures_util::future::BoxFuture<'a, Option<Vec<f32>>>;

/// A query vector already known, as a [`PendingVector`].
pub fn known_vector(v: Option<Vec<f32>>) -> PendingVector<'static> {
    Box::pin(std::future::ready(v))
}

/// What [`SearchStore::search_candidates_then`] answers: the query vector it searched with, the first
/// hop's candidates and the second's (when `then` asked for one).
#[derive(Clone, Debug)]
pub struct TwoHops {
    pub vector: Option<Vec<f32>>,
    pub first: Vec<Candidate>,
    pub second: Option<Vec<Candidate>>,
}

pub use crate::model::NextHop;

/// The ids either search signal found, sorted, each once: the candidates a store loads.
pub fn candidate_ids<A, B>(
    cosine: &std::collections::HashMap<String, A>,
    bm25: &std::collections::HashMap<String, B>,
) -> Vec<String> {
    let mut ids: Vec<String> = cosine.keys().chain(bm25.keys()).cloned().collect();
    ids.sort();
    ids.dedup();
    ids
}

/// What a store is and the upkeep it needs beside the requests: its name, whether its reads
/// overlap, its periodic housekeeping, bulk loads.
#[async_trait]
pub trait StoreEngine: Send + Sync {
    /// A short name for logs and `healthz`, e.g. `sqlite`.
    fn engine(&self) -> &'static str;

    /// How often the service's background loop should call [`StoreEngine::housekeeping`]; `None`
    /// (the default) when the store needs no periodic upkeep.
    fn housekeeping_interval(&self) -> Option<std::time::Duration> {
        None
    }

    /// Upkeep that keeps reads fast but is never needed for correctness (PostgreSQL: folding the
    /// appended BM25 statistics; SQLite: moving events written before schema v11 next to their
    /// users' in batches). The loop calls it at start and then every
    /// [`StoreEngine::housekeeping_interval`]; `Ok(true)` means more is waiting, and the next call comes
    /// after a pause three times as long as this one took (upkeep gets at most a quarter of the
    /// store's time: measured on a relocation under write load, half of it tripled the writes' p99).
    /// Stops with the service like every other background loop.
    async fn housekeeping(&self) -> StoreResult<bool> {
        Ok(false)
    }

    /// Whether two reads of one request finish sooner side by side than one after the other.
    /// A database across a socket: yes, each read is mostly a wait. The embedded store: no —
    /// under load it measured slower (each read connection keeps its own page cache, and a
    /// request holding two of the pool's four stalls the others; docs/history/benchmarks.md, session 21).
    fn reads_overlap(&self) -> bool {
        false
    }

    /// Before a bulk load: stop maintaining what is cheaper to build once afterwards
    /// (PostgreSQL: the HNSW indexes — searches over large scopes run exact meanwhile). Default:
    /// nothing to stop.
    async fn begin_bulk_load(&self) -> StoreResult<()> {
        Ok(())
    }

    /// After a bulk load: build it again. A store whose load was interrupted builds it when it
    /// is next opened.
    async fn end_bulk_load(&self) -> StoreResult<()> {
        Ok(())
    }
}

/// Collections: a project's named memory spaces and the embedding model their vectors come from.
#[async_trait]
pub trait CollectionStore: Send + Sync {
    /// Conflict if a collection of that name exists in the project.
    async fn create_collection(&self, c: NewCollection) -> StoreResult<Collection>;

    async fn get_collection(&self, project: &str, name: &str) -> StoreResult<Option<Collection>>;

    /// Returns the collection, creating it with the default schema if it does not exist.
    async fn ensure_collection(&self, c: NewCollection) -> StoreResult<Collection>;

    /// Every collection of every project (start-up checks).
    async fn all_collections(&self) -> StoreResult<Vec<Collection>>;

    /// Records the embedding model a collection's vectors come from. When the collection had
    /// another model recorded, its vectors are deleted in the same transaction (they are not
    /// comparable with the new model's): `events_missing_vectors` then lists every event, and a
    /// re-index refills them — a crash midway leaves a collection that search still serves (full
    /// text for the events not yet re-embedded) and that the next re-index finishes.
    async fn set_collection_embedding(&self, id: CollectionId, model: &str, dim: u32) -> StoreResult<()>;

    async fn list_collections(&self, project: &str) -> StoreResult<Vec<Collection>>;

    /// Deletes the collection and everything in it. Returns whether it existed.
    async fn delete_collection(&self, id: CollectionId) -> StoreResult<bool>;
}

/// The write path: conversations' messages (short-term memory), the trigger that closes them into
/// sessions and queues their extraction, in one transaction.
#[async_trait]
pub trait ConversationStore: Send + Sync {
    /// Stores the messages, merges metadata, moves the idle deadline and evaluates the trigger;
    /// closes a session and queues its job in the same transaction when the trigger fires.
    async fn append_messages(&self, req: AppendRequest) -> StoreResult<AppendOutcome>;

    /// Stores the messages as one closed session with its job queued (`session/add`).
    async fn add_session(&self, req: AppendRequest) -> StoreResult<SessionClosed>;

    /// Deletes a conversation and everything it produced — its messages, sessions, jobs and
    /// events — in one transaction; answers the ids of the sessions it had (their profile
    /// changes are the service's to withdraw). Nothing when the conversation does not exist.
    async fn delete_conversation(&self, collection_id: CollectionId, conversation_id: &str)
    -> StoreResult<Vec<String>>;

    /// Closes the conversation's open messages into a session now, if it has any.
    async fn flush_conversation(
        &self,
        collection_id: CollectionId,
        conversation_id: &str,
        now: Millis,
        max_job_attempts: u32,
    ) -> StoreResult<Option<SessionClosed>>;

    /// Closes up to `limit` conversations whose idle deadline is at or before `now`.
    async fn close_idle_conversations(
        &self,
        now: Millis,
        limit: u32,
        max_job_attempts: u32,
    ) -> StoreResult<Vec<SessionClosed>>;

    /// The earliest idle deadline of any conversation with open messages.
    async fn next_idle_deadline(&self) -> StoreResult<Option<Millis>>;

    async fn conversation_info(
        &self,
        collection_id: CollectionId,
        conversation_id: &str,
    ) -> StoreResult<Option<ConversationInfo>>;

    async fn session_info(&self, collection_id: CollectionId, session_id: &str) -> StoreResult<Option<SessionDetail>>;
}

/// The durable extraction queue: claims with leases, completion with the extraction's output,
/// retries.
#[async_trait]
pub trait JobStore: Send + Sync {
    /// Takes the oldest runnable job (queued and due, or running with an expired lease).
    async fn claim_job(&self, now: Millis, lease_ms: i64) -> StoreResult<Option<ClaimedJob>>;

    /// Stores the extraction's events and profile changes, marks the session extracted (its
    /// messages leave short-term memory) and the job done — all in one transaction.
    ///
    /// `lease` names the claim (job id + the attempt number `claim_job` returned). A claim whose
    /// lease expired and was taken by another worker is fenced off: `Conflict`, nothing written —
    /// so a session is extracted once even when a slow replica wakes up late.
    async fn complete_job(&self, lease: &JobLease, output: ExtractionOutput, now: Millis) -> StoreResult<Vec<String>>;

    /// Extends a running claim's lease to `until` (the worker's heartbeat); false if the lease
    /// was lost. A replica that dies stops renewing, and its job is due again within one lease.
    async fn renew_lease(&self, lease: &JobLease, until: Millis) -> StoreResult<bool>;

    /// Records a failed attempt: queued again at `retry_at`, or `failed` when `None`. A lost
    /// lease changes nothing.
    async fn fail_job(&self, lease: &JobLease, error: &str, retry_at: Option<Millis>, now: Millis) -> StoreResult<()>;

    /// Puts a claimed job back in the queue until `run_after` without counting the attempt, with
    /// `note` shown as its `last_error` (e.g. a spent token budget). A lost lease changes nothing.
    async fn defer_job(&self, lease: &JobLease, run_after: Millis, note: &str, now: Millis) -> StoreResult<()>;

    /// Puts failed jobs back in the queue now (`job/retry`): the one named, or every failed job
    /// of the collection; their attempts start again from zero and their sessions are queued.
    /// Returns the ids re-queued (none when the named job is not failed).
    async fn retry_jobs(
        &self,
        collection_id: CollectionId,
        job_id: Option<&str>,
        now: Millis,
    ) -> StoreResult<Vec<String>>;

    /// Re-queues, in every collection, failed jobs whose last error was transient
    /// ([`crate::model::TRANSIENT_PREFIX`]) and that were re-queued this way fewer than
    /// `max_requeues` times (the count goes up by one). Returns the ids.
    async fn requeue_transient_failures(&self, max_requeues: u32, now: Millis) -> StoreResult<Vec<String>>;

    /// Prompt + completion tokens recorded by a project's jobs updated at or after `since`.
    async fn tokens_used_since(&self, project: &str, since: Millis) -> StoreResult<u64>;

    async fn list_jobs(&self, collection_id: CollectionId, filter: JobFilter) -> StoreResult<Vec<Job>>;

    /// The earliest `run_after` of a queued job (to sleep until then).
    async fn next_job_due(&self) -> StoreResult<Option<Millis>>;
}

/// Events (long-term memory): rows, vectors and turn vectors, listings and upkeep of their vectors.
#[async_trait]
pub trait EventStore: Send + Sync {
    async fn insert_event(&self, e: NewEvent) -> StoreResult<Event>;

    /// Inserts many events in one transaction — all of them or none — returned in the order
    /// given. The same rows, vectors and full-text statistics as inserting them one by one (bulk
    /// import and `event/batch_add`; far fewer round trips and commits).
    async fn insert_events(&self, events: Vec<NewEvent>) -> StoreResult<Vec<Event>>;

    async fn get_event(&self, collection_id: CollectionId, id: &str) -> StoreResult<Option<Event>>;

    async fn update_event(
        &self,
        collection_id: CollectionId,
        id: &str,
        patch: EventPatch,
        now: Millis,
    ) -> StoreResult<Event>;

    async fn delete_event(&self, collection_id: CollectionId, id: &str) -> StoreResult<bool>;

    /// Deletes every event matching the (non-empty) filter; returns how many.
    async fn batch_delete_events(&self, collection_id: CollectionId, filter: EventFilter) -> StoreResult<u64>;

    /// Events matching the filter, newest first.
    async fn list_events(
        &self,
        collection_id: CollectionId,
        filter: EventFilter,
        limit: u32,
    ) -> StoreResult<Vec<Event>>;

    /// The first event of the filter after `(time, id)` in `(time, id)` order — the next turn of a
    /// session, when the filter names it.
    async fn event_after(
        &self,
        collection_id: CollectionId,
        filter: EventFilter,
        time: Millis,
        id: &str,
    ) -> StoreResult<Option<Event>>;

    /// Counts one hit for each event.
    async fn record_hits(&self, collection_id: CollectionId, ids: Vec<String>, now: Millis) -> StoreResult<()>;

    /// Events without a vector (written before a model was configured), to index now.
    async fn events_missing_vectors(&self, collection_id: CollectionId, limit: u32) -> StoreResult<Vec<Event>>;

    /// Stores an event's vector (re-indexing), with its turns' vectors when it has turns
    /// ([`crate::turns`]; earlier ones are dropped either way).
    async fn set_event_vector(
        &self,
        collection_id: CollectionId,
        id: &str,
        vector: Vec<f32>,
        turns: Option<Vec<Vec<f32>>>,
    ) -> StoreResult<()>;

    /// Events an older release stored before stores kept turn vectors ([`crate::turns`]), for the
    /// service to embed their turns: up to `limit` events with a vector and without turn vectors,
    /// of every collection, each with its collection, newest first (by id, below `before`: one
    /// pass over the events however many collections there are). `None` once the store has none
    /// left to look at: it was created with turn vectors, or [`EventStore::turns_backfilled`] was called.
    async fn events_without_turns(
        &self,
        before: Option<String>,
        limit: u32,
    ) -> StoreResult<Option<Vec<(CollectionId, Event)>>>;

    /// Adds the turn vectors embedded for an event [`EventStore::events_without_turns`] gave, unless
    /// it has changed since (its `updated_at` is no longer `seen`), has no vector, or has turn
    /// vectors already. Whether they were stored.
    async fn add_event_turns(
        &self,
        collection_id: CollectionId,
        id: &str,
        seen: Millis,
        turns: Vec<Vec<f32>>,
    ) -> StoreResult<bool>;

    /// Records that every event an older release stored has been looked at:
    /// [`EventStore::events_without_turns`] answers `None` from now on.
    async fn turns_backfilled(&self) -> StoreResult<()>;
}

/// Search candidates: cosine and BM25 over a filter's scope, one hop or two. Core ranks them.
#[async_trait]
pub trait SearchStore: Send + Sync {
    /// Search candidates within the filter: the `k` nearest by cosine (exact scan of the scope)
    /// and the `k` best by BM25, merged, each with both signals where it has them.
    async fn search_candidates(
        &self,
        collection_id: CollectionId,
        filter: EventFilter,
        query: CandidateQuery,
    ) -> StoreResult<Vec<Candidate>>;

    /// Two searches over one filter: `first` with the query vector `vector` (`first.vector` is
    /// not read), then — when `then` makes terms of its candidates (a search's second hop,
    /// pseudo-relevance feedback) — the same query with those terms and the first's vector part
    /// ([`CandidateQuery::vector_hits_of`]). Each answer is what `search_candidates` gives for it
    /// with the vector. The vector may still be being computed (the query's embedding): a store
    /// may read the scope meanwhile (SQLite reads a small scope's terms and vector copies), and
    /// one that can score the second hop from what the first read does (SQLite and PostgreSQL
    /// keep a small scope's terms: no second scan).
    async fn search_candidates_then(
        &self,
        collection_id: CollectionId,
        filter: EventFilter,
        first: CandidateQuery,
        vector: PendingVector<'_>,
        then: NextTerms<'_>,
    ) -> StoreResult<TwoHops> {
        let first = CandidateQuery { vector: vector.await, ..first };
        let found = self.search_candidates(collection_id, filter.clone(), first.clone()).await?;
        let Some(next) = then(&found).await else {
            return Ok(TwoHops { vector: first.vector, first: found, second: None });
        };
        let second = first.second_hop(&found, next);
        let more = self.search_candidates(collection_id, filter, second).await?;
        Ok(TwoHops { vector: first.vector, first: found, second: Some(more) })
    }

    /// The collection's BM25 statistics for `tokens` (full-text tokens, `text::fts_tokens`):
    /// what a search would score with, on the same terms. A sharded store sums its shards' and
    /// hands the sum to each in [`CandidateQuery::corpus`].
    async fn corpus(&self, collection_id: CollectionId, tokens: &[String]) -> StoreResult<Corpus>;
}

/// User profiles.
#[async_trait]
pub trait ProfileStore: Send + Sync {
    /// Conflict if the user already has a profile of that type (and assistant).
    async fn insert_profile(&self, p: NewProfile) -> StoreResult<Profile>;

    async fn update_profile(
        &self,
        collection_id: CollectionId,
        id: &str,
        patch: ProfilePatch,
        now: Millis,
    ) -> StoreResult<Profile>;

    async fn delete_profile(&self, collection_id: CollectionId, id: &str) -> StoreResult<bool>;

    /// Profiles matching the filter, most recently updated first.
    async fn list_profiles(
        &self,
        collection_id: CollectionId,
        filter: ProfileFilter,
        limit: u32,
    ) -> StoreResult<Vec<Profile>>;
}

/// Webhook endpoints and their delivery outbox. The outbox rows themselves are written by the
/// stores' triggers, in the transaction of the change they announce; a store without webhooks
/// keeps these defaults.
#[async_trait]
pub trait WebhookStore: Send + Sync {
    /// Inserts or replaces (same id) an endpoint.
    async fn upsert_webhook(&self, w: NewWebhook) -> StoreResult<Webhook> {
        let _ = w;
        Err(StoreError::Invalid("webhooks need the SQLite or PostgreSQL store".into()))
    }

    /// Makes the config-defined endpoints exactly `hooks`: others from the config are deleted
    /// (with their deliveries), these inserted or updated (their pending deliveries kept).
    async fn sync_config_webhooks(&self, hooks: Vec<NewWebhook>) -> StoreResult<()> {
        if hooks.is_empty() {
            Ok(())
        } else {
            Err(StoreError::Invalid("webhooks need the SQLite or PostgreSQL store".into()))
        }
    }

    /// Endpoints of a project (all projects with `None`), oldest first, with delivery counts.
    async fn list_webhooks(&self, project: Option<&str>) -> StoreResult<Vec<Webhook>> {
        let _ = project;
        Ok(Vec::new())
    }

    /// Deletes an endpoint of the project and its deliveries; false if there was none.
    async fn delete_webhook(&self, project: &str, id: &str) -> StoreResult<bool> {
        let _ = (project, id);
        Ok(false)
    }

    /// Up to `limit` pending deliveries due at `now`, oldest first, leased until `lease_until`
    /// (another replica does not take them before, a crashed sender's are taken after).
    async fn claim_deliveries(
        &self,
        now: Millis,
        lease_until: Millis,
        limit: u32,
    ) -> StoreResult<Vec<ClaimedDelivery>> {
        let _ = (now, lease_until, limit);
        Ok(Vec::new())
    }

    /// Records how an attempt ended (counts the attempt).
    async fn finish_delivery(&self, delivery_id: i64, outcome: DeliveryOutcome, now: Millis) -> StoreResult<()> {
        let _ = (delivery_id, outcome, now);
        Ok(())
    }

    /// The project's deliveries, newest first.
    async fn list_deliveries(&self, project: &str, filter: DeliveryFilter) -> StoreResult<Vec<Delivery>> {
        let _ = (project, filter);
        Ok(Vec::new())
    }

    /// Dead deliveries of one endpoint (all of them, or those listed) back to pending with no
    /// attempts counted, due at `now`. Returns their ids.
    async fn redeliver(
        &self,
        project: &str,
        webhook_id: &str,
        ids: Option<Vec<i64>>,
        now: Millis,
    ) -> StoreResult<Vec<i64>> {
        let _ = (project, webhook_id, ids, now);
        Ok(Vec::new())
    }

    /// Deletes delivered rows finished before `before`. Returns how many.
    async fn prune_deliveries(&self, before: Millis) -> StoreResult<u64> {
        let _ = before;
        Ok(0)
    }
}

/// Lifecycle maintenance: expiry, archiving, folding, and the record of runs.
#[async_trait]
pub trait MaintenanceStore: Send + Sync {
    /// Lifecycle maintenance of one collection: deletes events whose `expires_at` has passed and
    /// that were never hit; archives active events whose last hit (or creation) is before
    /// `archive_before`. Records the run. One transaction.
    async fn run_maintenance(
        &self,
        collection_id: CollectionId,
        now: Millis,
        archive_before: Millis,
        trigger: &str,
    ) -> StoreResult<MaintenanceRun>;

    /// Replaces events by one new event (folding), in one transaction.
    async fn replace_events(
        &self,
        collection_id: CollectionId,
        delete: Vec<String>,
        new: NewEvent,
    ) -> StoreResult<Event>;

    /// Records fold and digest counts on the newest maintenance run of the collection.
    async fn note_maintenance(&self, collection_id: CollectionId, folded: u64, digests: u64) -> StoreResult<()>;

    async fn list_maintenance_runs(&self, collection_id: CollectionId, limit: u32) -> StoreResult<Vec<MaintenanceRun>>;
}

/// Counts for monitoring and the dashboard.
#[async_trait]
pub trait StatsStore: Send + Sync {
    /// Memory statistics of a collection (optionally one user) for the last `days` days to `now`.
    async fn memory_stats(
        &self,
        collection_id: CollectionId,
        user_id: Option<String>,
        days: u32,
        now: Millis,
    ) -> StoreResult<MemoryStats>;

    /// Row counts and size, for monitoring.
    async fn stats(&self) -> StoreResult<StoreStats>;

    /// The users of a collection — named by a conversation's metadata or by an active event —
    /// whose id contains `contains` (ASCII case aside; any when `None`), ordered by
    /// [`order_users`](crate::model::order_users), at most `limit`.
    async fn list_users(
        &self,
        collection_id: CollectionId,
        contains: Option<String>,
        limit: u32,
    ) -> StoreResult<Vec<UserSummary>>;
}

/// A user's data as a whole: export and forgetting.
#[async_trait]
pub trait PrivacyStore: Send + Sync {
    /// Everything about `user_id` in the collection: conversations whose metadata names the user
    /// (with all their messages, sessions and jobs), events about the user, the user's profiles.
    async fn export_user(&self, collection_id: CollectionId, user_id: &str) -> StoreResult<UserData>;

    /// Deletes all of it — rows, vectors and full-text entries — in one transaction, and makes
    /// sure the bytes are gone from the store's files. Events shared with other users lose only
    /// this user's id; an event about this user alone is deleted.
    async fn forget_user(&self, collection_id: CollectionId, user_id: &str) -> StoreResult<ForgetCounts>;
}

/// The storage contract every backend implements, the sum of the areas above: a backend
/// implements each area's trait in the module that owns it (SQLite's `collections.rs` implements
/// [`CollectionStore`], …) and is a `Store` by the blanket impl below. A `dyn Store` answers every
/// area's methods as they are; code that holds a concrete store brings them into scope with
/// `use mnemo_core::store::prelude::*`. A new method touches its area's trait, each backend's
/// module of that area and the conformance scenario that pins it down — nothing else.
pub trait Store:
    StoreEngine
    + CollectionStore
    + ConversationStore
    + JobStore
    + EventStore
    + SearchStore
    + ProfileStore
    + WebhookStore
    + MaintenanceStore
    + StatsStore
    + PrivacyStore
    + 'static
{
}

impl<
    T: StoreEngine
        + CollectionStore
        + ConversationStore
        + JobStore
        + EventStore
        + SearchStore
        + ProfileStore
        + WebhookStore
        + MaintenanceStore
        + StatsStore
        + PrivacyStore
        + 'static,
> Store for T
{
}
