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

mod catalog;
mod events;
mod upkeep;
mod writes;

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
}

/// A write, named by what decides its shard: the one placement rule of every write that goes to
/// a single shard ([`ShardedStore::place`]). Writes to every shard (collections, webhooks, deletes
/// by filter) and reads (scatter and merge) do not place.
pub(crate) enum Write<'a> {
    /// A conversation's messages: its user's shard; without a user, the shard that already has
    /// the conversation, else the conversation id's.
    Conversation(&'a AppendRequest),
    /// A new event: its first user's shard, else its group's, else shard 0.
    Event(&'a NewEvent),
    /// A new profile: its user's shard.
    Profile(&'a NewProfile),
    /// A stored event, by id: the shard that holds it (none when no shard does).
    StoredEvent(CollectionId, &'a str),
    /// A claimed job: the shard it was claimed from. A claim this process does not know was lost
    /// with a previous process (claims are remembered in memory) — a lost lease, a conflict.
    Claim(&'a JobLease),
    /// What the catalog keeps (collection ids, maintenance notes): shard 0.
    Catalog,
}

impl ShardedStore {
    /// The shard a write goes to; `None` only for a [`Write::StoredEvent`] no shard holds.
    pub(crate) async fn place(&self, write: Write<'_>) -> StoreResult<Option<usize>> {
        let n = self.shards.len();
        Ok(Some(match write {
            Write::Conversation(req) => match req.meta.user_id.as_deref() {
                Some(user) => shard_of(user, n),
                None => {
                    let (c, id) = (req.collection_id, req.conversation_id.as_str());
                    match first_some(each!(self, |s| s.conversation_info(c, id))?) {
                        Some((i, _)) => i,
                        None => shard_of(id, n),
                    }
                }
            },
            Write::Event(e) => match (e.user_id.first(), &e.group_id) {
                (Some(user), _) => shard_of(user, n),
                (None, Some(group)) => shard_of(group, n),
                (None, None) => 0,
            },
            Write::Profile(p) => shard_of(&p.user_id, n),
            Write::StoredEvent(c, id) => match first_some(each!(self, |s| s.get_event(c, id))?) {
                Some((i, _)) => i,
                None => return Ok(None),
            },
            Write::Claim(lease) => {
                self.claims.lock().unwrap_or_else(|e| e.into_inner()).get(&lease.job_id).copied().ok_or_else(|| {
                    StoreError::Conflict(format!(
                        "job {} lost its lease (attempt {} was not claimed by this process)",
                        lease.job_id, lease.attempt
                    ))
                })?
            }
            Write::Catalog => 0,
        }))
    }

    /// The shard a write goes to, for writes that always have one.
    pub(crate) async fn shard(&self, write: Write<'_>) -> StoreResult<&Arc<dyn Store>> {
        let i = self.place(write).await?.unwrap_or(0);
        Ok(&self.shards[i])
    }
}

/// The first shard (in shard order) answering `Some`, and its answer.
fn first_some<T>(answers: Vec<Option<T>>) -> Option<(usize, T)> {
    answers.into_iter().enumerate().find_map(|(i, v)| Some((i, v?)))
}

#[cfg(test)]
mod tests;
