//! Many databases behind one [`Store`]: users routed to shards by a hash of their id.
//!
//! A [`ShardedStore`] holds N stores (in production N PostgreSQL databases, each with the whole
//! schema) and is itself a `Store`, so the service, the HTTP API and every background loop run
//! unchanged on top of it. What lives where:
//!
//! - **a user's data on the user's shard**: shard = FNV-1a-64(user id) mod N ([`shard_of`]). A
//!   conversation lives on the shard of the `user_id` it is written with (a write without one
//!   goes where the conversation already is, else by the conversation id); its messages,
//!   sessions and jobs stay there, so a trigger, a job claim and an extraction — events and
//!   profile changes together — remain one transaction in one database. `event/add` goes to the
//!   shard of the event's first user (else its group; else shard 0), a profile to its user's.
//! - **collections and webhooks on every shard**, created with the same ids: shard 0 allocates a
//!   collection's id and is the catalog the listings read; the others get a copy
//!   ([`ShardedStore::open`] restores copies a crash left out). Webhook endpoints are written to
//!   every shard because each shard's triggers queue the deliveries of its own changes.
//! - **reads scatter and merge**: a search asks every shard for its candidates (an event that
//!   names a user besides its first one — a group chat's speakers — lives on its first user's
//!   shard, so even a user-scoped search cannot skip shards; on the others its scope is an empty
//!   index range), and core ranks the union as it ranks one store's. BM25 is exact: a search
//!   with full text first sums every shard's statistics for its tokens ([`SearchStore::corpus`]) and
//!   hands the sum to each shard ([`CandidateQuery::corpus`]), so candidates and scores are the
//!   ones a single database would give (the conformance suite's reference computation holds).
//!   Listings merge in the stores' order; look-ups by id ask every shard in parallel.
//!
//! Limits, stated where a user would meet them (README "When one database is not enough"): a
//! batch of events over several shards is all or none by
//! compensation (a crash between the shards' commits can keep the first part); a group chat's
//! speakers get their profile changes on the conversation's shard (listings merge them, one
//! profile of a type per shard); `user.forgotten` is announced once per shard; a conversation
//! first written without a user and later with one may continue on the user's shard; the shard
//! count is fixed once data is written (no rebalancing; the PostgreSQL composition root checks
//! each database's recorded place, `PgStore::place_in_shards`).

use async_trait::async_trait;
use futures_util::future::try_join_all;
use mnemo_core::StoreError;
use mnemo_core::extract::ExtractionOutput;
use mnemo_core::model::*;
use mnemo_core::store::prelude::*;
use mnemo_core::store::{NextHop, NextTerms, PendingVector, Store, StoreResult, TwoHops};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Most shards a [`ShardedStore`] routes to: a webhook delivery's id carries its shard in its
/// low six bits (`local id × 64 + shard`), unique across shards for the receiver's dedup.
pub const MAX_SHARDS: usize = 64;

/// The shard of a routing key (a user id): FNV-1a over its UTF-8 bytes, mod `shards`. Fixed for
/// ever — data written under it is found through it.
pub fn shard_of(key: &str, shards: usize) -> usize {
    (fnv1a(key) % shards as u64) as usize
}

/// 64-bit FNV-1a.
fn fnv1a(key: &str) -> u64 {
    key.as_bytes().iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// Claims remembered at most (see `ShardedStore::claims`).
const MAX_CLAIMS: usize = 100_000;

/// `$call` on every shard at once (`$s` names the shard); the answers in shard order.
macro_rules! each {
    ($self:ident, |$s:ident| $call:expr) => {
        try_join_all($self.shards.iter().map(|$s| $call)).await
    };
}

pub struct ShardedStore {
    shards: Vec<Arc<dyn Store>>,
    /// Job id → shard, for the jobs this process claimed (`complete_job` and friends name the
    /// job alone; a job never changes shards, so an entry stays true — entries are dropped only
    /// all at once, past [`MAX_CLAIMS`]).
    claims: Mutex<HashMap<String, usize>>,
    /// Where the next `claim_job` starts, so every shard's queue is served.
    next_claim: AtomicUsize,
}

impl ShardedStore {
    /// Routes over `shards` (their order is the routing table: never reorder or resize a
    /// deployment's list). Copies every collection of shard 0 to the shards that lack it, with
    /// its id — what a crash between the shards' creations left out.
    pub async fn open(shards: Vec<Arc<dyn Store>>) -> StoreResult<Self> {
        if shards.is_empty() || shards.len() > MAX_SHARDS {
            return Err(StoreError::Invalid(format!(
                "store.shards: between 1 and {MAX_SHARDS} databases, got {}",
                shards.len()
            )));
        }
        let store = Self { shards, claims: Mutex::new(HashMap::new()), next_claim: AtomicUsize::new(0) };
        for c in store.shards[0].all_collections().await? {
            store.copy_collection(&c).await?;
        }
        Ok(store)
    }

    fn user_shard(&self, user: &str) -> usize {
        shard_of(user, self.shards.len())
    }

    /// Creates `c` (shard 0's) on the other shards with its id, unless there; a shard holding
    /// another collection under that name or id is an error naming both.
    async fn copy_collection(&self, c: &Collection) -> StoreResult<()> {
        for (i, s) in self.shards.iter().enumerate().skip(1) {
            let copy = s
                .ensure_collection(NewCollection {
                    id: Some(c.id),
                    project_name: c.project_name.clone(),
                    collection_name: c.collection_name.clone(),
                    description: c.description.clone(),
                    schema: c.schema.clone(),
                    embedding_model: c.embedding_model.clone().unwrap_or_default(),
                    embedding_dim: c.embedding_dim.unwrap_or(0),
                    created_at: c.created_at,
                })
                .await?;
            if copy.id != c.id {
                return Err(StoreError::backend(format!(
                    "shard {i} holds collection {}/{} as id {}, shard 0 as id {}: the shards are not one deployment's",
                    c.project_name, c.collection_name, copy.id, c.id
                )));
            }
            if let (Some(model), Some(dim)) = (&c.embedding_model, c.embedding_dim)
                && (copy.embedding_model != c.embedding_model || copy.embedding_dim != c.embedding_dim)
            {
                s.set_collection_embedding(c.id, model, dim).await?;
            }
        }
        Ok(())
    }

    /// Where a conversation lives: its user's shard; without a user, the shard that already has
    /// it, else the conversation id's.
    async fn conversation_shard(&self, req: &AppendRequest) -> StoreResult<usize> {
        if let Some(user) = req.meta.user_id.as_deref() {
            return Ok(self.user_shard(user));
        }
        let (c, id) = (req.collection_id, req.conversation_id.as_str());
        Ok(match first_some(each!(self, |s| s.conversation_info(c, id))?) {
            Some((i, _)) => i,
            None => shard_of(id, self.shards.len()),
        })
    }

    fn event_shard(&self, e: &NewEvent) -> usize {
        match (e.user_id.first(), &e.group_id) {
            (Some(user), _) => self.user_shard(user),
            (None, Some(group)) => shard_of(group, self.shards.len()),
            (None, None) => 0,
        }
    }

    /// The shard of a claim this process holds. A claim it does not know was lost with a
    /// previous process (claims are remembered in memory), and a lost lease is a conflict.
    fn claim_shard(&self, lease: &JobLease) -> StoreResult<usize> {
        self.claims.lock().unwrap_or_else(|e| e.into_inner()).get(&lease.job_id).copied().ok_or_else(|| {
            StoreError::Conflict(format!(
                "job {} lost its lease (attempt {} was not claimed by this process)",
                lease.job_id, lease.attempt
            ))
        })
    }

    /// `q` with the BM25 statistics of every shard (one round, all shards at once), so each
    /// shard ranks and scores its full-text hits as one database holding everything would.
    async fn with_corpus(&self, collection_id: CollectionId, q: CandidateQuery) -> StoreResult<CandidateQuery> {
        let corpus = self.summed_corpus(collection_id, &q.terms, q.corpus.clone()).await?;
        Ok(CandidateQuery { corpus, ..q })
    }

    /// `given`, or every shard's statistics for `terms`' tokens summed (`None` without terms).
    async fn summed_corpus(
        &self,
        collection_id: CollectionId,
        terms: &[String],
        given: Option<Arc<Corpus>>,
    ) -> StoreResult<Option<Arc<Corpus>>> {
        if terms.is_empty() || given.is_some() {
            return Ok(given);
        }
        let mut tokens: Vec<String> =
            terms.iter().flat_map(|t| mnemo_core::text::fts_tokens(t).collect::<Vec<_>>()).collect();
        tokens.sort();
        tokens.dedup();
        Ok(Some(Arc::new(self.corpus(collection_id, &tokens).await?)))
    }

    async fn event_shard_of_id(&self, collection_id: CollectionId, id: &str) -> StoreResult<Option<usize>> {
        Ok(first_some(each!(self, |s| s.get_event(collection_id, id))?).map(|(i, _)| i))
    }
}

/// What one store holding every shard's events would answer from the shards' answers: the `k`
/// nearest and the `k` best by BM25 of their union (a shard's candidates outside its own `k`
/// nearest are farther than its `k`-th, so the union holds the overall `k` nearest; BM25 alike).
fn best_of(mut all: Vec<Candidate>, k: usize) -> Vec<Candidate> {
    let by = |score: fn(&Candidate) -> Option<f64>, all: &mut Vec<Candidate>| -> Vec<String> {
        all.sort_by(|a, b| {
            score(b)
                .unwrap_or(f64::NEG_INFINITY)
                .total_cmp(&score(a).unwrap_or(f64::NEG_INFINITY))
                .then_with(|| a.event.id.cmp(&b.event.id))
        });
        all.iter().filter(|c| score(c).is_some()).take(k).map(|c| c.event.id.clone()).collect()
    };
    let mut keep: std::collections::HashSet<String> = by(|c| c.cosine.map(f64::from), &mut all).into_iter().collect();
    keep.extend(by(|c| c.bm25, &mut all));
    all.retain(|c| keep.contains(&c.event.id));
    all
}

/// The first shard (in shard order) answering `Some`, and its answer.
fn first_some<T>(answers: Vec<Option<T>>) -> Option<(usize, T)> {
    answers.into_iter().enumerate().find_map(|(i, v)| Some((i, v?)))
}

fn delivery_to_global(id: i64, shard: usize) -> i64 {
    id * MAX_SHARDS as i64 + shard as i64
}

fn delivery_to_local(id: i64) -> (i64, usize) {
    (id.div_euclid(MAX_SHARDS as i64), id.rem_euclid(MAX_SHARDS as i64) as usize)
}

fn sum_by_key<K: Ord + Clone>(parts: impl IntoIterator<Item = Vec<(K, u64)>>) -> Vec<(K, u64)> {
    let mut m: BTreeMap<K, u64> = BTreeMap::new();
    for part in parts {
        for (k, v) in part {
            *m.entry(k).or_default() += v;
        }
    }
    m.into_iter().collect()
}

#[async_trait]
impl StoreEngine for ShardedStore {
    fn engine(&self) -> &'static str {
        "sharded"
    }

    fn housekeeping_interval(&self) -> Option<std::time::Duration> {
        self.shards.iter().filter_map(|s| s.housekeeping_interval()).min()
    }

    async fn housekeeping(&self) -> StoreResult<bool> {
        Ok(each!(self, |s| s.housekeeping())?.into_iter().any(|more| more))
    }

    fn reads_overlap(&self) -> bool {
        self.shards.iter().all(|s| s.reads_overlap())
    }

    async fn begin_bulk_load(&self) -> StoreResult<()> {
        each!(self, |s| s.begin_bulk_load()).map(drop)
    }

    async fn end_bulk_load(&self) -> StoreResult<()> {
        each!(self, |s| s.end_bulk_load()).map(drop)
    }
}

#[async_trait]
impl CollectionStore for ShardedStore {
    // --- collections: shard 0 allocates and lists, every shard holds a copy
    async fn create_collection(&self, c: NewCollection) -> StoreResult<Collection> {
        let created = self.shards[0].create_collection(c).await?;
        self.copy_collection(&created).await?;
        Ok(created)
    }

    async fn get_collection(&self, project: &str, name: &str) -> StoreResult<Option<Collection>> {
        self.shards[0].get_collection(project, name).await
    }

    async fn ensure_collection(&self, c: NewCollection) -> StoreResult<Collection> {
        let found = self.shards[0].ensure_collection(c).await?;
        self.copy_collection(&found).await?;
        Ok(found)
    }

    async fn all_collections(&self) -> StoreResult<Vec<Collection>> {
        self.shards[0].all_collections().await
    }

    async fn set_collection_embedding(&self, id: CollectionId, model: &str, dim: u32) -> StoreResult<()> {
        each!(self, |s| s.set_collection_embedding(id, model, dim)).map(drop)
    }

    async fn list_collections(&self, project: &str) -> StoreResult<Vec<Collection>> {
        self.shards[0].list_collections(project).await
    }

    async fn delete_collection(&self, id: CollectionId) -> StoreResult<bool> {
        // The catalog last: a failure midway leaves the collection listed, and deleting it
        // again finishes the job.
        for s in &self.shards[1..] {
            s.delete_collection(id).await?;
        }
        self.shards[0].delete_collection(id).await
    }
}

#[async_trait]
impl ConversationStore for ShardedStore {
    // --- write path: a conversation on its user's shard
    async fn append_messages(&self, req: AppendRequest) -> StoreResult<AppendOutcome> {
        let i = self.conversation_shard(&req).await?;
        self.shards[i].append_messages(req).await
    }

    async fn add_session(&self, req: AppendRequest) -> StoreResult<SessionClosed> {
        let i = self.conversation_shard(&req).await?;
        self.shards[i].add_session(req).await
    }

    async fn delete_conversation(
        &self,
        collection_id: CollectionId,
        conversation_id: &str,
    ) -> StoreResult<Vec<String>> {
        Ok(each!(self, |s| s.delete_conversation(collection_id, conversation_id))?.concat())
    }

    async fn flush_conversation(
        &self,
        collection_id: CollectionId,
        conversation_id: &str,
        now: Millis,
        max_job_attempts: u32,
    ) -> StoreResult<Option<SessionClosed>> {
        let found =
            first_some(each!(self, |s| s.flush_conversation(collection_id, conversation_id, now, max_job_attempts))?);
        Ok(found.map(|(_, closed)| closed))
    }

    async fn close_idle_conversations(
        &self,
        now: Millis,
        limit: u32,
        max_job_attempts: u32,
    ) -> StoreResult<Vec<SessionClosed>> {
        Ok(each!(self, |s| s.close_idle_conversations(now, limit, max_job_attempts))?.concat())
    }

    async fn next_idle_deadline(&self) -> StoreResult<Option<Millis>> {
        Ok(each!(self, |s| s.next_idle_deadline())?.into_iter().flatten().min())
    }

    async fn conversation_info(
        &self,
        collection_id: CollectionId,
        conversation_id: &str,
    ) -> StoreResult<Option<ConversationInfo>> {
        Ok(first_some(each!(self, |s| s.conversation_info(collection_id, conversation_id))?).map(|(_, c)| c))
    }

    async fn session_info(&self, collection_id: CollectionId, session_id: &str) -> StoreResult<Option<SessionDetail>> {
        Ok(first_some(each!(self, |s| s.session_info(collection_id, session_id))?).map(|(_, d)| d))
    }
}

#[async_trait]
impl JobStore for ShardedStore {
    // --- jobs: claimed shard by shard, finished where claimed
    async fn claim_job(&self, now: Millis, lease_ms: i64) -> StoreResult<Option<ClaimedJob>> {
        let n = self.shards.len();
        let start = self.next_claim.fetch_add(1, Ordering::Relaxed) % n;
        for k in 0..n {
            let i = (start + k) % n;
            if let Some(claimed) = self.shards[i].claim_job(now, lease_ms).await? {
                let mut claims = self.claims.lock().unwrap_or_else(|e| e.into_inner());
                if claims.len() >= MAX_CLAIMS {
                    // Long finished jobs, almost all: a live claim forgotten here ends as a lost
                    // lease (fenced off, the job claimed again when the lease runs out).
                    claims.clear();
                }
                claims.insert(claimed.job.job_id.clone(), i);
                return Ok(Some(claimed));
            }
        }
        Ok(None)
    }

    async fn complete_job(&self, lease: &JobLease, output: ExtractionOutput, now: Millis) -> StoreResult<Vec<String>> {
        let i = self.claim_shard(lease)?;
        self.shards[i].complete_job(lease, output, now).await
    }

    async fn renew_lease(&self, lease: &JobLease, until: Millis) -> StoreResult<bool> {
        let Ok(i) = self.claim_shard(lease) else { return Ok(false) };
        self.shards[i].renew_lease(lease, until).await
    }

    async fn fail_job(&self, lease: &JobLease, error: &str, retry_at: Option<Millis>, now: Millis) -> StoreResult<()> {
        let Ok(i) = self.claim_shard(lease) else { return Ok(()) };
        self.shards[i].fail_job(lease, error, retry_at, now).await
    }

    async fn defer_job(&self, lease: &JobLease, run_after: Millis, note: &str, now: Millis) -> StoreResult<()> {
        let Ok(i) = self.claim_shard(lease) else { return Ok(()) };
        self.shards[i].defer_job(lease, run_after, note, now).await
    }

    async fn retry_jobs(
        &self,
        collection_id: CollectionId,
        job_id: Option<&str>,
        now: Millis,
    ) -> StoreResult<Vec<String>> {
        Ok(each!(self, |s| s.retry_jobs(collection_id, job_id, now))?.concat())
    }

    async fn requeue_transient_failures(&self, max_requeues: u32, now: Millis) -> StoreResult<Vec<String>> {
        Ok(each!(self, |s| s.requeue_transient_failures(max_requeues, now))?.concat())
    }

    async fn tokens_used_since(&self, project: &str, since: Millis) -> StoreResult<u64> {
        Ok(each!(self, |s| s.tokens_used_since(project, since))?.into_iter().sum())
    }

    async fn list_jobs(&self, collection_id: CollectionId, filter: JobFilter) -> StoreResult<Vec<Job>> {
        let limit = filter.limit.max(1) as usize;
        let mut jobs = each!(self, |s| s.list_jobs(collection_id, filter.clone()))?.concat();
        jobs.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| b.job_id.cmp(&a.job_id)));
        jobs.truncate(limit);
        Ok(jobs)
    }

    async fn next_job_due(&self) -> StoreResult<Option<Millis>> {
        Ok(each!(self, |s| s.next_job_due())?.into_iter().flatten().min())
    }
}

#[async_trait]
impl EventStore for ShardedStore {
    // --- events: written on their first user's shard, read from all
    async fn insert_event(&self, e: NewEvent) -> StoreResult<Event> {
        self.shards[self.event_shard(&e)].insert_event(e).await
    }

    async fn insert_events(&self, events: Vec<NewEvent>) -> StoreResult<Vec<Event>> {
        let mut parts: BTreeMap<usize, Vec<(usize, NewEvent)>> = BTreeMap::new();
        for (pos, e) in events.into_iter().enumerate() {
            parts.entry(self.event_shard(&e)).or_default().push((pos, e));
        }
        let total = parts.values().map(Vec::len).sum();
        let mut out: Vec<Option<Event>> = vec![None; total];
        let mut written: Vec<(usize, CollectionId, Vec<String>)> = Vec::new();
        for (i, part) in parts {
            let (positions, batch): (Vec<usize>, Vec<NewEvent>) = part.into_iter().unzip();
            let collection_id = batch[0].collection_id;
            match self.shards[i].insert_events(batch).await {
                Ok(stored) => {
                    written.push((i, collection_id, stored.iter().map(|e| e.id.clone()).collect()));
                    for (pos, e) in positions.into_iter().zip(stored) {
                        out[pos] = Some(e);
                    }
                }
                Err(e) => {
                    // All or none: take back what the shards before committed.
                    for (j, c, ids) in written {
                        for id in ids {
                            self.shards[j].delete_event(c, &id).await?;
                        }
                    }
                    return Err(e);
                }
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    async fn get_event(&self, collection_id: CollectionId, id: &str) -> StoreResult<Option<Event>> {
        Ok(first_some(each!(self, |s| s.get_event(collection_id, id))?).map(|(_, e)| e))
    }

    async fn update_event(
        &self,
        collection_id: CollectionId,
        id: &str,
        patch: EventPatch,
        now: Millis,
    ) -> StoreResult<Event> {
        let Some(i) = self.event_shard_of_id(collection_id, id).await? else {
            return Err(StoreError::NotFound(format!("event_id: no event \"{id}\"")));
        };
        self.shards[i].update_event(collection_id, id, patch, now).await
    }

    async fn delete_event(&self, collection_id: CollectionId, id: &str) -> StoreResult<bool> {
        Ok(each!(self, |s| s.delete_event(collection_id, id))?.into_iter().any(|d| d))
    }

    async fn batch_delete_events(&self, collection_id: CollectionId, filter: EventFilter) -> StoreResult<u64> {
        Ok(each!(self, |s| s.batch_delete_events(collection_id, filter.clone()))?.into_iter().sum())
    }

    async fn list_events(
        &self,
        collection_id: CollectionId,
        filter: EventFilter,
        limit: u32,
    ) -> StoreResult<Vec<Event>> {
        let mut events = each!(self, |s| s.list_events(collection_id, filter.clone(), limit))?.concat();
        events.sort_by(|a, b| b.time.cmp(&a.time).then_with(|| b.id.cmp(&a.id)));
        events.truncate(limit as usize);
        Ok(events)
    }

    async fn event_after(
        &self,
        collection_id: CollectionId,
        filter: EventFilter,
        time: Millis,
        id: &str,
    ) -> StoreResult<Option<Event>> {
        let firsts = each!(self, |s| s.event_after(collection_id, filter.clone(), time, id))?;
        Ok(firsts.into_iter().flatten().min_by(|a, b| (a.time, &a.id).cmp(&(b.time, &b.id))))
    }

    async fn record_hits(&self, collection_id: CollectionId, ids: Vec<String>, now: Millis) -> StoreResult<()> {
        each!(self, |s| s.record_hits(collection_id, ids.clone(), now)).map(drop)
    }

    async fn events_missing_vectors(&self, collection_id: CollectionId, limit: u32) -> StoreResult<Vec<Event>> {
        let mut events = each!(self, |s| s.events_missing_vectors(collection_id, limit))?.concat();
        events.truncate(limit as usize);
        Ok(events)
    }

    async fn set_event_vector(
        &self,
        collection_id: CollectionId,
        id: &str,
        vector: Vec<f32>,
        turns: Option<Vec<Vec<f32>>>,
    ) -> StoreResult<()> {
        let Some(i) = self.event_shard_of_id(collection_id, id).await? else { return Ok(()) };
        self.shards[i].set_event_vector(collection_id, id, vector, turns).await
    }

    async fn events_without_turns(
        &self,
        before: Option<String>,
        limit: u32,
    ) -> StoreResult<Option<Vec<(CollectionId, Event)>>> {
        let parts = each!(self, |s| s.events_without_turns(before.clone(), limit))?;
        if parts.iter().all(Option::is_none) {
            return Ok(None);
        }
        let mut events = parts.into_iter().flatten().flatten().collect::<Vec<_>>();
        events.sort_by(|a, b| b.1.id.cmp(&a.1.id));
        events.truncate(limit as usize);
        Ok(Some(events))
    }

    async fn add_event_turns(
        &self,
        collection_id: CollectionId,
        id: &str,
        seen: Millis,
        turns: Vec<Vec<f32>>,
    ) -> StoreResult<bool> {
        let Some(i) = self.event_shard_of_id(collection_id, id).await? else { return Ok(false) };
        self.shards[i].add_event_turns(collection_id, id, seen, turns).await
    }

    async fn turns_backfilled(&self) -> StoreResult<()> {
        each!(self, |s| s.turns_backfilled()).map(drop)
    }
}

#[async_trait]
impl SearchStore for ShardedStore {
    async fn search_candidates(
        &self,
        collection_id: CollectionId,
        filter: EventFilter,
        query: CandidateQuery,
    ) -> StoreResult<Vec<Candidate>> {
        // A vector part given (a second hop's) names events of every shard and a shard loads
        // what it is given: each scans its own again instead (`search_candidates_then` hands
        // every shard its own part).
        let query = self.with_corpus(collection_id, CandidateQuery { vector_hits: None, ..query }).await?;
        let found = each!(self, |s| s.search_candidates(collection_id, filter.clone(), query.clone()))?;
        Ok(best_of(found.concat(), query.k))
    }

    /// Every shard runs its own two-hop search (so a store that keeps what its first search
    /// read — PostgreSQL's small scopes — scores the second from it, and one that reads its
    /// scope while the vector is computed — SQLite — does), while the second hop is decided
    /// once, here: each shard's `then` hands its first answer over and waits; when all have, the
    /// union's `k` best decide the terms (the caller's `then`), their statistics are summed over
    /// the shards, and every shard goes on with the same second query (and its own first hop's
    /// vector part). The vector is handed to every shard as it arrives (a watch channel).
    async fn search_candidates_then(
        &self,
        collection_id: CollectionId,
        filter: EventFilter,
        first: CandidateQuery,
        vector: PendingVector<'_>,
        then: NextTerms<'_>,
    ) -> StoreResult<TwoHops> {
        let k = first.k;
        let (found_tx, mut found_rx) = tokio::sync::mpsc::unbounded_channel::<Vec<Candidate>>();
        let (hop_tx, hop_rx) = tokio::sync::watch::channel::<Option<Option<NextHop>>>(None);
        let (vector_tx, vector_rx) = tokio::sync::watch::channel::<Option<Option<Vec<f32>>>>(None);
        let publish = async {
            let v = vector.await;
            let _ = vector_tx.send(Some(v.clone()));
            Ok::<_, StoreError>(v)
        };
        let searches = async {
            let found_tx = found_tx; // moved in: dropped below, once every shard holds its own
            let first = self.with_corpus(collection_id, first.clone()).await?;
            let searches = self.shards.iter().map(|s| {
                let (found_tx, mut hop_rx, mut vector_rx) = (found_tx.clone(), hop_rx.clone(), vector_rx.clone());
                let ask: NextTerms<'static> = Box::new(move |found: &[Candidate]| {
                    let _ = found_tx.send(found.to_vec());
                    Box::pin(async move {
                        hop_rx.wait_for(Option::is_some).await.ok().and_then(|hop| hop.clone().flatten())
                    })
                });
                let vector: PendingVector<'static> = Box::pin(async move {
                    vector_rx.wait_for(Option::is_some).await.ok().and_then(|v| v.clone().flatten())
                });
                s.search_candidates_then(collection_id, filter.clone(), first.clone(), vector, ask)
            });
            let searches = try_join_all(searches);
            drop(found_tx);
            searches.await
        };
        let decide = async {
            // Until every shard has answered (a shard that ends without asking drops its sender).
            let mut parts = Vec::new();
            while let Some(found) = found_rx.recv().await {
                parts.extend(found);
            }
            let hop = match then(&best_of(parts, k)).await {
                Some(next) => {
                    let corpus = self.summed_corpus(collection_id, &next.terms, next.corpus).await?;
                    Some(NextHop { terms: next.terms, corpus })
                }
                None => None,
            };
            let _ = hop_tx.send(Some(hop));
            Ok::<_, StoreError>(())
        };
        let (vector, answers, ()) = tokio::try_join!(publish, searches, decide)?;
        let mut firsts = Vec::new();
        let mut seconds: Option<Vec<Candidate>> = None;
        for TwoHops { first, second, .. } in answers {
            firsts.extend(first);
            if let Some(more) = second {
                seconds.get_or_insert_with(Vec::new).extend(more);
            }
        }
        Ok(TwoHops { vector, first: best_of(firsts, k), second: seconds.map(|more| best_of(more, k)) })
    }

    async fn corpus(&self, collection_id: CollectionId, tokens: &[String]) -> StoreResult<Corpus> {
        let mut sum = Corpus::default();
        for part in each!(self, |s| s.corpus(collection_id, tokens))? {
            sum.add(part);
        }
        Ok(sum)
    }
}

#[async_trait]
impl StatsStore for ShardedStore {
    async fn memory_stats(
        &self,
        collection_id: CollectionId,
        user_id: Option<String>,
        days: u32,
        now: Millis,
    ) -> StoreResult<MemoryStats> {
        let parts = each!(self, |s| s.memory_stats(collection_id, user_id.clone(), days, now))?;
        let top_len = parts.iter().map(|p| p.top_hit.len()).max().unwrap_or(0);
        let mut top: Vec<(String, String, u64)> = parts.iter().flat_map(|p| p.top_hit.clone()).collect();
        top.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
        top.truncate(top_len);
        let mut jobs: BTreeMap<String, [u64; 5]> = BTreeMap::new();
        for (day, a, b, c, d, e) in parts.iter().flat_map(|p| p.jobs_per_day.clone()) {
            let row = jobs.entry(day).or_default();
            for (slot, v) in row.iter_mut().zip([a, b, c, d, e]) {
                *slot += v;
            }
        }
        Ok(MemoryStats {
            new_memories_per_day: sum_by_key(parts.iter().map(|p| p.new_memories_per_day.clone())),
            hits_per_day: sum_by_key(parts.iter().map(|p| p.hits_per_day.clone())),
            top_hit: top,
            never_hit: parts.iter().map(|p| p.never_hit).sum(),
            total_events: parts.iter().map(|p| p.total_events).sum(),
            jobs_per_day: jobs.into_iter().map(|(day, [a, b, c, d, e])| (day, a, b, c, d, e)).collect(),
        })
    }

    async fn stats(&self) -> StoreResult<StoreStats> {
        let parts = each!(self, |s| s.stats())?;
        Ok(StoreStats {
            jobs: sum_by_key(parts.iter().map(|p| p.jobs.clone())),
            conversations: parts.iter().map(|p| p.conversations).sum(),
            messages: parts.iter().map(|p| p.messages).sum(),
            events: parts.iter().map(|p| p.events).sum(),
            profiles: parts.iter().map(|p| p.profiles).sum(),
            bytes: parts.iter().map(|p| p.bytes).sum(),
        })
    }
}

#[async_trait]
impl MaintenanceStore for ShardedStore {
    /// Every shard runs (and records) its part; the answer adds them up.
    async fn run_maintenance(
        &self,
        collection_id: CollectionId,
        now: Millis,
        archive_before: Millis,
        trigger: &str,
    ) -> StoreResult<MaintenanceRun> {
        let parts = each!(self, |s| s.run_maintenance(collection_id, now, archive_before, trigger))?;
        let mut run = parts[0].clone();
        for p in &parts[1..] {
            run.add_counts(p);
        }
        Ok(run)
    }

    /// The new event on its user's shard, in one transaction with the deletions there; events of
    /// the list on other shards are deleted after it.
    async fn replace_events(
        &self,
        collection_id: CollectionId,
        delete: Vec<String>,
        new: NewEvent,
    ) -> StoreResult<Event> {
        let home = self.event_shard(&new);
        let event = self.shards[home].replace_events(collection_id, delete.clone(), new).await?;
        for (i, s) in self.shards.iter().enumerate() {
            if i != home {
                for id in &delete {
                    s.delete_event(collection_id, id).await?;
                }
            }
        }
        Ok(event)
    }

    /// On shard 0's run: the listing adds the shards' runs of the same start together.
    async fn note_maintenance(&self, collection_id: CollectionId, folded: u64, digests: u64) -> StoreResult<()> {
        self.shards[0].note_maintenance(collection_id, folded, digests).await
    }

    async fn list_maintenance_runs(&self, collection_id: CollectionId, limit: u32) -> StoreResult<Vec<MaintenanceRun>> {
        let parts = each!(self, |s| s.list_maintenance_runs(collection_id, limit))?;
        let mut runs: BTreeMap<(Millis, String), MaintenanceRun> = BTreeMap::new();
        for r in parts.into_iter().flatten() {
            match runs.get_mut(&(r.started_at, r.trigger.clone())) {
                Some(run) => run.add_counts(&r),
                None => {
                    runs.insert((r.started_at, r.trigger.clone()), r);
                }
            }
        }
        Ok(runs.into_values().rev().take(limit as usize).collect())
    }
}

#[async_trait]
impl PrivacyStore for ShardedStore {
    // --- privacy: a user's data may sit on several shards (a group chat's speakers)
    async fn export_user(&self, collection_id: CollectionId, user_id: &str) -> StoreResult<UserData> {
        let mut out = UserData::default();
        for part in each!(self, |s| s.export_user(collection_id, user_id))? {
            out.conversations.extend(part.conversations);
            out.messages.extend(part.messages);
            out.sessions.extend(part.sessions);
            out.jobs.extend(part.jobs);
            out.events.extend(part.events);
            out.profiles.extend(part.profiles);
        }
        Ok(out)
    }

    async fn forget_user(&self, collection_id: CollectionId, user_id: &str) -> StoreResult<ForgetCounts> {
        let mut out = ForgetCounts::default();
        for c in each!(self, |s| s.forget_user(collection_id, user_id))? {
            out += c;
        }
        Ok(out)
    }
}

#[async_trait]
impl ProfileStore for ShardedStore {
    // --- profiles: on their user's shard
    async fn insert_profile(&self, p: NewProfile) -> StoreResult<Profile> {
        self.shards[self.user_shard(&p.user_id)].insert_profile(p).await
    }

    async fn update_profile(
        &self,
        collection_id: CollectionId,
        id: &str,
        patch: ProfilePatch,
        now: Millis,
    ) -> StoreResult<Profile> {
        let patch = &patch;
        let answers = each!(self, |s| async move {
            match s.update_profile(collection_id, id, patch.clone(), now).await {
                Ok(p) => Ok(Some(p)),
                Err(StoreError::NotFound(_)) => Ok(None),
                Err(e) => Err(e),
            }
        })?;
        first_some(answers)
            .map(|(_, p)| p)
            .ok_or_else(|| StoreError::NotFound(format!("profile_id: no profile \"{id}\"")))
    }

    async fn delete_profile(&self, collection_id: CollectionId, id: &str) -> StoreResult<bool> {
        Ok(each!(self, |s| s.delete_profile(collection_id, id))?.into_iter().any(|d| d))
    }

    async fn list_profiles(
        &self,
        collection_id: CollectionId,
        filter: ProfileFilter,
        limit: u32,
    ) -> StoreResult<Vec<Profile>> {
        let mut profiles = each!(self, |s| s.list_profiles(collection_id, filter.clone(), limit))?.concat();
        profiles.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then_with(|| a.id.cmp(&b.id)));
        profiles.truncate(limit as usize);
        Ok(profiles)
    }
}

#[async_trait]
impl WebhookStore for ShardedStore {
    // --- webhooks: endpoints on every shard, each shard's outbox delivered from it
    async fn upsert_webhook(&self, w: NewWebhook) -> StoreResult<Webhook> {
        let mut out = each!(self, |s| s.upsert_webhook(w.clone()))?;
        Ok(out.swap_remove(0))
    }

    async fn sync_config_webhooks(&self, hooks: Vec<NewWebhook>) -> StoreResult<()> {
        each!(self, |s| s.sync_config_webhooks(hooks.clone())).map(drop)
    }

    async fn list_webhooks(&self, project: Option<&str>) -> StoreResult<Vec<Webhook>> {
        let mut parts = each!(self, |s| s.list_webhooks(project))?.into_iter();
        let mut hooks = parts.next().unwrap_or_default();
        for part in parts {
            for other in part {
                if let Some(h) = hooks.iter_mut().find(|h| h.webhook_id == other.webhook_id) {
                    h.pending += other.pending;
                    h.dead += other.dead;
                    h.delivered += other.delivered;
                }
            }
        }
        Ok(hooks)
    }

    async fn delete_webhook(&self, project: &str, id: &str) -> StoreResult<bool> {
        Ok(each!(self, |s| s.delete_webhook(project, id))?.into_iter().any(|d| d))
    }

    /// Up to `limit` in all: shard after shard (from a rotating first one, so every outbox is
    /// served), each asked for what is left, so nothing is leased that is not handed out.
    async fn claim_deliveries(
        &self,
        now: Millis,
        lease_until: Millis,
        limit: u32,
    ) -> StoreResult<Vec<ClaimedDelivery>> {
        let n = self.shards.len();
        let start = self.next_claim.fetch_add(1, Ordering::Relaxed) % n;
        let mut out = Vec::new();
        for k in 0..n {
            let left = limit.saturating_sub(out.len() as u32);
            if left == 0 {
                break;
            }
            let i = (start + k) % n;
            for mut d in self.shards[i].claim_deliveries(now, lease_until, left).await? {
                d.delivery.delivery_id = delivery_to_global(d.delivery.delivery_id, i);
                out.push(d);
            }
        }
        Ok(out)
    }

    async fn finish_delivery(&self, delivery_id: i64, outcome: DeliveryOutcome, now: Millis) -> StoreResult<()> {
        let (local, i) = delivery_to_local(delivery_id);
        let Some(s) = self.shards.get(i) else {
            return Err(StoreError::NotFound(format!("delivery_id: no delivery {delivery_id}")));
        };
        s.finish_delivery(local, outcome, now).await
    }

    async fn list_deliveries(&self, project: &str, filter: DeliveryFilter) -> StoreResult<Vec<Delivery>> {
        let limit = filter.limit.max(1) as usize;
        let parts = each!(self, |s| s.list_deliveries(project, filter.clone()))?;
        let mut out = Vec::new();
        for (i, part) in parts.into_iter().enumerate() {
            for mut d in part {
                d.delivery_id = delivery_to_global(d.delivery_id, i);
                out.push(d);
            }
        }
        out.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.delivery_id.cmp(&a.delivery_id)));
        out.truncate(limit);
        Ok(out)
    }

    async fn redeliver(
        &self,
        project: &str,
        webhook_id: &str,
        ids: Option<Vec<i64>>,
        now: Millis,
    ) -> StoreResult<Vec<i64>> {
        let mut out = Vec::new();
        for (i, s) in self.shards.iter().enumerate() {
            let local = ids.as_ref().map(|ids| {
                ids.iter().map(|id| delivery_to_local(*id)).filter(|(_, shard)| *shard == i).map(|(l, _)| l).collect()
            });
            if local.as_ref().is_some_and(|l: &Vec<i64>| l.is_empty()) {
                continue;
            }
            out.extend(
                s.redeliver(project, webhook_id, local, now).await?.into_iter().map(|l| delivery_to_global(l, i)),
            );
        }
        Ok(out)
    }

    async fn prune_deliveries(&self, before: Millis) -> StoreResult<u64> {
        Ok(each!(self, |s| s.prune_deliveries(before))?.into_iter().sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mnemo_testing::{MemoryStore, StoreHarness, run_all};

    /// Collection `p/c` of a model with `dim` dimensions.
    fn collection(dim: u32) -> NewCollection {
        NewCollection {
            id: None,
            project_name: "p".into(),
            collection_name: "c".into(),
            description: String::new(),
            schema: Default::default(),
            embedding_model: "m".into(),
            embedding_dim: dim,
            created_at: 1,
        }
    }

    /// Three in-memory shards; every open is a reopen of the same three.
    struct ShardedHarness(Vec<MemoryStore>);

    #[async_trait]
    impl StoreHarness for ShardedHarness {
        async fn open(&self) -> Arc<dyn Store> {
            let shards = self.0.iter().map(|s| Arc::new(s.reopen()) as Arc<dyn Store>).collect();
            Arc::new(ShardedStore::open(shards).await.unwrap())
        }
        fn has_webhooks(&self) -> bool {
            false
        }
        fn sharded(&self) -> bool {
            true
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn three_shards_pass_the_conformance_suite() {
        run_all(async || ShardedHarness((0..3).map(|_| MemoryStore::new()).collect())).await;
    }

    /// A batch over two shards whose second part fails leaves nothing: the first shard's
    /// committed part is taken back.
    #[tokio::test]
    async fn a_batch_over_shards_is_taken_back_when_a_later_shard_refuses_its_part() {
        let shards: Vec<Arc<dyn Store>> = (0..3).map(|_| Arc::new(MemoryStore::new()) as Arc<dyn Store>).collect();
        let s = ShardedStore::open(shards.clone()).await.unwrap();
        let c = s.ensure_collection(collection(4)).await.unwrap();
        for shard in &shards {
            assert_eq!(shard.get_collection("p", "c").await.unwrap().map(|x| x.id), Some(c.id), "a copy, same id");
        }
        let (a, b) = ("u0", "u1");
        assert!(shard_of(a, 3) < shard_of(b, 3), "the good part is written first");
        let info = |t: &str| serde_json::json!({ "summary": t }).as_object().unwrap().clone();
        let good = NewEvent::of_user(c.id, crate::EVENT_V1, a, info("kept?"), 1);
        let orphan = NewEvent::of_user(c.id + 99, crate::EVENT_V1, b, info("no such collection"), 2);
        assert!(s.insert_events(vec![good.clone(), orphan]).await.is_err());
        let all = EventFilter { user_id: vec![a.into(), b.into()], ..Default::default() };
        assert!(s.list_events(c.id, all.clone(), 10).await.unwrap().is_empty(), "nothing of the batch stays");
        let stored =
            s.insert_events(vec![good, NewEvent::of_user(c.id, crate::EVENT_V1, b, info("b"), 3)]).await.unwrap();
        assert_eq!(stored.iter().map(|e| e.user_id[0].as_str()).collect::<Vec<_>>(), [a, b], "in the order given");
        for e in &stored {
            let home = &shards[shard_of(&e.user_id[0], 3)];
            assert!(home.get_event(c.id, &e.id).await.unwrap().is_some(), "on its user's shard");
        }
    }

    /// The turn-vector backfill pages through every shard's events, newest first across them,
    /// adds turns on the event's own shard, and is done when every shard says so.
    #[tokio::test]
    async fn the_turn_backfill_pages_through_every_shard_newest_first() {
        let memories: Vec<MemoryStore> = (0..3).map(|_| MemoryStore::new()).collect();
        let shards = memories.iter().map(|m| Arc::new(m.clone()) as Arc<dyn Store>).collect();
        let s = ShardedStore::open(shards).await.unwrap();
        let c = s.ensure_collection(collection(2)).await.unwrap();
        let mut ids = Vec::new();
        for u in ["u0", "u1", "u2", "u3", "u4", "u5"] {
            let info = serde_json::json!({ "summary": u }).as_object().unwrap().clone();
            let e =
                NewEvent { embedding: Some(vec![1.0, 0.0]), ..NewEvent::of_user(c.id, crate::EVENT_V1, u, info, 1) };
            ids.push(s.insert_event(e).await.unwrap().id);
        }
        let homes: std::collections::HashSet<usize> =
            ["u0", "u1", "u2", "u3", "u4", "u5"].iter().map(|u| shard_of(u, 3)).collect();
        assert!(homes.len() > 1, "the events are spread");
        assert_eq!(s.events_without_turns(None, 10).await.unwrap(), None, "nothing written before");
        memories.iter().for_each(MemoryStore::as_written_before_turns);
        let mut seen = Vec::new();
        let mut before = None;
        while let Some(page) = s.events_without_turns(before.clone(), 4).await.unwrap() {
            let Some((_, last)) = page.last() else { break };
            before = Some(last.id.clone());
            assert!(page.iter().all(|(cid, _)| *cid == c.id));
            seen.extend(page.into_iter().map(|(_, e)| e.id));
        }
        ids.reverse();
        assert_eq!(seen, ids, "each once, newest first");
        assert!(s.add_event_turns(c.id, &ids[0], 1, vec![vec![1.0, 0.0], vec![0.0, 1.0]]).await.unwrap());
        assert_eq!(memories.iter().map(MemoryStore::events_with_turns).sum::<usize>(), 1);
        s.turns_backfilled().await.unwrap();
        assert_eq!(s.events_without_turns(None, 10).await.unwrap(), None);
    }

    #[test]
    fn the_routing_hash_never_changes() {
        // Data written under these is found through them: a change here strands it.
        // FNV-1a's published test vectors, then where three users live among four shards.
        assert_eq!(
            [fnv1a(""), fnv1a("a"), fnv1a("foobar")],
            [0xcbf29ce484222325, 0xaf63dc4c8601ec8c, 0x85944171f73967e8]
        );
        assert_eq!([shard_of("u1", 4), shard_of("alice", 4), shard_of("用户", 4)], [3, 3, 1]);
        let spread: Vec<usize> =
            (0..4).map(|i| (0..4000).filter(|u| shard_of(&format!("user{u}"), 4) == i).count()).collect();
        assert!(spread.iter().all(|n| (900..1100).contains(n)), "{spread:?}");
    }
}
