//! Candidate generation on PostgreSQL, giving the same candidates and the same signals as the
//! embedded store so `mnemo-core` ranks both alike:
//! - a scope of up to [`EXACT_SCOPE`] events (configurable) (the usual: one user's) is searched exactly
//!   without a transaction: one statement returns the scope's events with their terms and their
//!   inner product with the query (pgvector, no ANN) together with the collection's BM25
//!   statistics for the query's tokens — for a user scope from the user-document index (schema
//!   v5: an index-only range scan, f16 scores), else from the event rows; the vector top k and
//!   BM25 (`text::Bm25Query`) are ranked here, the exact f32 scores of the events f16 cannot
//!   place are read by primary key (`exact::halfvec_bound`), and a last statement loads the
//!   candidates' rows. While the query is still being embedded, that statement is split: the
//!   terms and statistics are read meanwhile, with the BM25 hits' rows (`candidates::Early`),
//!   and the inner products once the vector is there — by the server in a second statement, or,
//!   for a scope this replica keeps (`scope_cache`: its terms and the f16 copies of its
//!   vectors, of which a statement sends only the rows whose version is not kept), here, from
//!   the copies the first statement's snapshot holds;
//! - a larger scope uses the HNSW index of the collection's dimension with
//!   `hnsw.iterative_scan` (a filtered HNSW scan otherwise returns too few rows, even none) —
//!   for a real model's vectors the index of their signs ([`VectorIndex::Bits`]), whose nearest
//!   [`VectorIndex::rerank`] are ranked by the exact inner product —, and
//!   the GIN index over the terms to find the documents BM25 then scores.

use crate::PgStore;
use crate::candidates::{Early, load_candidates};
use crate::exact::{Doc, vector_part};
use crate::scope_cache::{Lookup, Row, RowVector, Scopes, score_here};
use crate::sql::{Args, Tx, backend, begin_read, event_filter_sql, query_all, query_one};
use crate::vector_index::VectorIndex;
use async_trait::async_trait;
use deadpool_postgres::{GenericClient, Object};
use mnemo_core::StoreError;
use mnemo_core::model::*;
use mnemo_core::store::prelude::*;
use mnemo_core::store::{NextHop, NextTerms, PendingVector, StoreResult, TwoHops};
use mnemo_core::text::{CorpusStats, ScopeTerms, fts_tokens};
use std::collections::HashMap;
use std::sync::Arc;

/// Scopes up to this many events are searched exactly (the default of `PgOptions::exact_scope`).
pub const EXACT_SCOPE: usize = 5_000;
/// At most this many full-text matches of a large scope are scored.
const LARGE_SCOPE_TEXT_MATCHES: i64 = 20_000;

pub async fn candidates(
    conn: &mut Object,
    cid: CollectionId,
    f: &EventFilter,
    q: &CandidateQuery,
    scopes: &Scopes,
) -> Result<Vec<Candidate>, StoreError> {
    let mut vector = QueryVector::Known(q.vector.clone());
    Ok(candidates_kept(conn, cid, f, q, &mut vector, scopes).await?.0)
}

/// Whether a search makes a second one, and with which terms: asked of the first's candidates
/// once (`Ask`), then known — so a search retried elsewhere (the primary, after the read
/// replica failed) makes the same second search without asking again.
pub(crate) enum Then<'a> {
    Ask(NextTerms<'a>),
    Known(Option<NextHop>),
}

impl Then<'_> {
    async fn decide(&mut self, found: &[Candidate]) -> Option<NextHop> {
        if let Then::Ask(_) = self
            && let Then::Ask(ask) = std::mem::replace(self, Then::Known(None))
        {
            *self = Then::Known(ask(found).await);
        }
        match self {
            Then::Known(next) => next.clone(),
            Then::Ask(_) => None,
        }
    }
}

/// A search's query vector: known, or still being computed (its embedding), then kept once it
/// arrives — so a search retried elsewhere (the primary, after the read replica failed) does
/// not wait for it again.
pub(crate) enum QueryVector<'a> {
    Pending(PendingVector<'a>),
    Known(Option<Vec<f32>>),
}

impl<'a> QueryVector<'a> {
    /// `vector`, known already when it is ready at once (a cached embedding): then the scope is
    /// read in one statement, as for a known vector.
    pub(crate) fn new(mut vector: PendingVector<'a>) -> Self {
        match futures_util::FutureExt::now_or_never(&mut vector) {
            Some(v) => QueryVector::Known(v),
            None => QueryVector::Pending(vector),
        }
    }

    /// The vector, waited for when still pending.
    async fn known(&mut self) -> Option<&Vec<f32>> {
        if let QueryVector::Pending(pending) = self {
            *self = QueryVector::Known(pending.await);
        }
        match self {
            QueryVector::Known(v) => v.as_ref(),
            QueryVector::Pending(_) => None,
        }
    }

    fn is_pending(&self) -> bool {
        matches!(self, QueryVector::Pending(_))
    }

    pub(crate) fn into_known(self) -> Option<Vec<f32>> {
        match self {
            QueryVector::Known(v) => v,
            QueryVector::Pending(_) => None,
        }
    }
}

/// `SearchStore::search_candidates_then` on one connection: `first` with `vector` (`first.vector`
/// is not read; a small scope's terms are read while the vector is still being computed); a
/// small scope's second search is scored from the terms the first one read (one statement for
/// the new terms' statistics, then the candidates' rows not loaded yet) instead of scanning the
/// scope again.
pub(crate) async fn two_hops(
    conn: &mut Object,
    cid: CollectionId,
    f: &EventFilter,
    first: &CandidateQuery,
    vector: &mut QueryVector<'_>,
    then: &mut Then<'_>,
    scopes: &Scopes,
) -> Result<(Vec<Candidate>, Option<Vec<Candidate>>), StoreError> {
    let (found, kept) = candidates_kept(conn, cid, f, first, vector, scopes).await?;
    let Some(next) = then.decide(&found).await else { return Ok((found, None)) };
    let first = CandidateQuery { vector: vector.known().await.cloned(), ..first.clone() };
    let second = first.second_hop(&found, next);
    let more = match kept {
        // Kept statistics serve a second hop scored with the store's own; statistics given for
        // the first (a sharded store's) were not read, and then the second's come given too.
        Some(kept) if kept.has_stats || second.corpus.is_some() => {
            kept.search_again(&*conn, cid, &second, &found).await?
        }
        _ => candidates(conn, cid, f, &second, scopes).await?,
    };
    Ok((found, Some(more)))
}

/// What a small scope's search read, kept for a second search over the same scope.
pub(crate) struct Kept {
    scope: Scope,
    /// The tokens whose statistics `scope.df` holds (a token no event has is absent from it).
    asked: std::collections::HashSet<String>,
    /// Whether `scope` holds the store's statistics (not when the first search was given them).
    has_stats: bool,
}

impl Kept {
    /// The same scope searched with `q` (whose `vector_hits` come from the first search): BM25
    /// over the kept terms, the statistics of tokens not asked yet read, and only the rows of
    /// candidates the first search did not return loaded.
    async fn search_again(
        mut self,
        c: &impl GenericClient,
        cid: CollectionId,
        q: &CandidateQuery,
        found: &[Candidate],
    ) -> Result<Vec<Candidate>, StoreError> {
        let new: Vec<String> = query_tokens(&q.terms).into_iter().filter(|t| !self.asked.contains(t)).collect();
        if !new.is_empty() && q.corpus.is_none() {
            let rows = query_all(
                c,
                "SELECT term, SUM(df)::bigint FROM (
                     SELECT term, df FROM term_stats WHERE collection_id = $1 AND term = ANY($2)
                     UNION ALL SELECT term, df FROM term_stats_delta WHERE collection_id = $1 AND term = ANY($2)) d
                 GROUP BY term",
                &[&cid, &new],
            )
            .await?;
            for r in rows {
                self.scope.df.insert(r.get(0), r.get::<_, i64>(1).max(0) as u64);
            }
        }
        let bm25 = self.scope.bm25(q);
        let cosine: HashMap<String, f32> = q.vector_hits.iter().flatten().cloned().collect();
        let qv = q.vector.as_ref().map(|v| pgvector::Vector::from(v.clone()));
        let dim = q.vector.as_ref().map(|v| v.len() as i32);
        load_candidates(c, cosine, bm25, qv.as_ref(), dim, found, Early::default()).await
    }
}

/// A query's distinct full-text tokens, sorted.
fn query_tokens(terms: &[String]) -> Vec<String> {
    let mut t: Vec<String> = terms.iter().flat_map(|t| fts_tokens(t).collect::<Vec<_>>()).collect();
    t.sort();
    t.dedup();
    t
}

/// The candidates, and what a small scope's search read (for [`Kept::search_again`]). With the
/// vector still pending, a small scope's terms and statistics are read meanwhile (the larger
/// share of the statement: ~1 KB of terms an event) and its vector scores once it is known.
async fn candidates_kept(
    conn: &mut Object,
    cid: CollectionId,
    f: &EventFilter,
    q: &CandidateQuery,
    vector: &mut QueryVector<'_>,
    scopes: &Scopes,
) -> Result<(Vec<Candidate>, Option<Kept>), StoreError> {
    let mut search = Search { cid, f, q, qv: None, dim: None, tokens: query_tokens(&q.terms), scopes };
    // With the vector still pending: the scope's terms, its BM25 hits and their rows, meanwhile.
    let early = if vector.is_pending() && !q.terms.is_empty() && q.vector_hits.is_none() {
        let read = async {
            let Some(scope) = small_scope(&*conn, &search, Read::Terms).await? else { return Ok(None) };
            let bm25 = scope.bm25(q);
            let rows = Early::read(&*conn, &bm25).await?;
            Ok::<_, StoreError>(Some((scope, bm25, rows)))
        };
        let (read, _) = tokio::join!(read, vector.known());
        Some(read?)
    } else {
        None
    };
    search.qv = vector.known().await.map(|v| pgvector::Vector::from(v.clone()));
    search.dim = search.qv.as_ref().map(|v| v.as_slice().len() as i32);
    // A small scope: what it read, its BM25 hits, their rows if read early.
    let here = q.vector_hits.is_none();
    let small = match early {
        // Every vector copy kept here: scored here, from the snapshot that read the terms.
        Some(Some((mut scope, bm25, rows))) if here && !scope.needs_server() => {
            if let (Some(qv), Some(vectors)) = (&search.qv, &scope.vectors) {
                score_here(&mut scope.docs, vectors, qv.as_slice());
            }
            Some((scope, bm25, rows))
        }
        Some(Some((mut scope, mut bm25, rows))) if search.qv.is_some() => {
            // The same scope's scores, read now: another snapshot, so an event deleted meanwhile
            // leaves the BM25 hits too, and one written meanwhile has its vector score alone.
            small_scope(&*conn, &search, Read::Vectors).await?.map(|scores| {
                let now: std::collections::HashSet<&str> = scores.docs.iter().map(|d| d.id.as_str()).collect();
                bm25.retain(|id, _| now.contains(id.as_str()));
                scope.docs = scores.docs;
                (scope, bm25, rows)
            })
        }
        Some(early) => early,
        None => small_scope(&*conn, &search, Read::All).await?.map(|mut scope| {
            if let (Some(qv), Some(vectors), true) = (&search.qv, &scope.vectors, here) {
                score_here(&mut scope.docs, vectors, qv.as_slice());
            }
            let bm25 = scope.bm25(q);
            (scope, bm25, Early::default())
        }),
    };
    let Some((scope, mut bm25, rows)) = small else {
        let tx = begin_read(conn).await?;
        return Ok((large_scope(&tx, &search).await?, None));
    };
    let (qv, dim) = (search.qv.as_ref(), search.dim);
    let cosine = match (&q.vector_hits, qv, dim) {
        (Some(hits), _, _) => hits.iter().cloned().collect(),
        (None, Some(qv), Some(dim)) if !scope.docs.is_empty() => {
            let (cosine, gone) = vector_part(&*conn, &scope.docs, &bm25, qv, dim, q.k).await?;
            bm25.retain(|id, _| !gone.contains(id));
            cosine
        }
        _ => HashMap::new(),
    };
    let found = load_candidates(&*conn, cosine, bm25, qv, dim, &[], rows).await?;
    // Only a search with full text keeps terms worth keeping.
    let has_stats = q.corpus.is_none();
    let asked = if has_stats { search.tokens.into_iter().collect() } else { Default::default() };
    let kept = (!q.terms.is_empty()).then_some(Kept { scope, asked, has_stats });
    Ok((found, kept))
}

/// One search's inputs: the query vector in pgvector's form and its dimension, the query's
/// distinct full-text tokens.
struct Search<'a> {
    cid: CollectionId,
    f: &'a EventFilter,
    q: &'a CandidateQuery,
    qv: Option<pgvector::Vector>,
    dim: Option<i32>,
    tokens: Vec<String>,
    scopes: &'a Scopes,
}

/// A small scope's events, their terms (tokenised once, for both searches) and BM25 statistics;
/// with the scope kept on this replica, the events' vector copies too (in `docs`' order).
struct Scope {
    docs: Vec<Doc>,
    terms: Arc<ScopeTerms>,
    vectors: Option<Arc<[RowVector]>>,
    stats: CorpusStats,
    df: HashMap<String, u64>,
}

impl Scope {
    /// Whether an event's inner product can only come from the server: no copies kept, or a
    /// vector too large for its row.
    fn needs_server(&self) -> bool {
        self.vectors.as_ref().is_none_or(|v| v.contains(&RowVector::Server))
    }

    /// The `q.k` best BM25 scores of the scope's events (none without query terms).
    fn bm25(&self, q: &CandidateQuery) -> HashMap<String, f64> {
        match q.terms.is_empty() {
            true => HashMap::new(),
            false => q.bm25(self.stats, |t| self.df.get(t).copied().unwrap_or(0)).top_k_in(&self.terms, q.k),
        }
    }
}

/// Whether the user-document index (schema v5) answers a filter on its own: one or more users
/// and any of event type, time range and status (not an as-of time) — the scopes of `event/search` and
/// `get_context`. A query vector must be representable in f16 (every usual embedding is).
pub(crate) fn user_docs_serve(f: &EventFilter, qv: Option<&pgvector::Vector>) -> bool {
    !f.user_id.is_empty()
        && f.assistant_id.is_empty()
        && f.group_id.is_empty()
        && f.session_id.is_empty()
        && f.conversation_id.is_empty()
        && f.scope.is_empty()
        && f.event_ids.is_empty()
        && f.as_of.is_none()
        && qv.is_none_or(|v| v.as_slice().iter().all(|x| x.abs() < 65_000.0))
}

/// The condition on `event_subjects s` that selects a filter's events through the user-document
/// index (when [`user_docs_serve`]): an index-only range scan of the users' entries; a row not
/// filled yet (written before v5, or being refilled) is filtered through its event's row instead.
pub(crate) fn user_docs_where(cid: CollectionId, f: &EventFilter) -> (String, Args) {
    let (rest_sql, mut a) = event_filter_sql(cid, &EventFilter { user_id: vec![], ..f.clone() });
    let users = a.push(f.user_id.clone());
    let mut filled = String::from("TRUE");
    if f.active_only {
        filled.push_str(" AND s.d_active");
    }
    if !f.memory_type.is_empty() {
        filled.push_str(&format!(" AND s.d_type = ANY({})", a.push(f.memory_type.clone())));
    }
    if let Some(t) = f.start_time {
        filled.push_str(&format!(" AND s.d_time >= {}", a.push(t)));
    }
    if let Some(t) = f.end_time {
        filled.push_str(&format!(" AND s.d_time <= {}", a.push(t)));
    }
    let sql = format!(
        "s.collection_id = $1 AND s.kind = 'u' AND s.subject_id = ANY({users})
         AND CASE WHEN s.d_state >= 4 THEN {filled} ELSE EXISTS (SELECT 1 FROM events WHERE id = s.event_id AND {rest_sql}) END"
    );
    (sql, a)
}

/// What one read of a small scope returns.
#[derive(Clone, Copy, PartialEq)]
enum Read {
    /// The events' terms and the query tokens' statistics (no vector scores).
    Terms,
    /// The events' vector scores alone (`Scope::terms` empty).
    Vectors,
    /// Both.
    All,
}

/// One statement, one snapshot: the scope with the signals `read` asks for (those the query
/// has), or `None` when the scope holds more than `exact_scope` events (then nothing else was
/// computed). Through the user-document index the terms come with their rows' versions, and
/// only those this replica does not keep are sent (`scope_cache`).
async fn small_scope(c: &Object, s: &Search<'_>, read: Read) -> Result<Option<Scope>, StoreError> {
    let (cid, f, q, qv, dim, tokens) = (s.cid, s.f, s.q, s.qv.as_ref(), s.dim, &s.tokens[..]);
    let exact_scope = s.scopes.exact;
    let want_ip = q.vector_hits.is_none() && qv.is_some() && read != Read::Terms;
    let want_terms = !q.terms.is_empty() && read != Read::Vectors;
    // Where the scope's terms are kept and what is kept there (through the index, cache on).
    let mut kept: Option<Lookup> = None;
    // Above which version rows send their vector copies (`Lookup::copies_above`), if at all.
    let mut copies: Option<i64> = None;
    let (scope_sql, terms, ip, norm, mut a) = if user_docs_serve(f, qv) {
        // Scored inside the scope: only the scores are materialised, or the copies of rows this
        // replica keeps copies of (`copies`).
        let (scope_where, mut a) = user_docs_where(cid, f);
        let distinct = if f.user_id.len() > 1 { "DISTINCT ON (s.event_id)" } else { "" };
        let stored = "CASE WHEN s.d_state & 1 = 1 THEN s.d_terms ELSE (SELECT e.terms FROM events e WHERE e.id = s.event_id) END";
        kept = s.scopes.lookup(cid, f).filter(|_| want_terms);
        copies = kept.as_ref().and_then(|l| l.copies_above(|| s.scopes.room()));
        let terms = match &kept {
            _ if !want_terms => "NULL::text".to_string(),
            // Only rows above the greatest version kept send theirs. A parameter, not a
            // literal: one prepared statement whatever the versions.
            Some(l) => {
                format!("CASE WHEN coalesce(s.d_version, 0) > {}::bigint THEN {stored} END", a.push(l.greatest()))
            }
            None => stored.to_string(),
        };
        let (ip, norm) = match (qv, dim) {
            // The rows' copies kept or sent: scored here, only a vector too large for its row there.
            (Some(qv), Some(dim)) if want_ip && copies.is_some() => {
                let (v, d) = (a.push(qv.clone()), a.push(dim));
                (
                    format!(
                        "CASE WHEN s.d_state & 2 <> 2 THEN (SELECT v.vec <#> {v} FROM event_vectors v WHERE v.event_id = s.event_id AND v.dim = {d}) END"
                    ),
                    "NULL::float8".into(),
                )
            }
            (Some(qv), Some(dim)) if want_ip => {
                let (v, d) = (a.push(qv.clone()), a.push(dim));
                (
                    format!(
                        "CASE WHEN s.d_state & 2 = 2 THEN CASE WHEN vector_dims(s.d_vec) = {d} THEN s.d_vec <#> (SELECT {v}::vector::halfvec) END
                         ELSE (SELECT v.vec <#> {v} FROM event_vectors v WHERE v.event_id = s.event_id AND v.dim = {d}) END"
                    ),
                    format!("CASE WHEN s.d_state & 2 = 2 AND vector_dims(s.d_vec) = {d} THEN s.d_norm::float8 END"),
                )
            }
            _ => ("NULL::float8".into(), "NULL::float8".into()),
        };
        let copy = match copies {
            Some(above) => format!("CASE WHEN coalesce(s.d_version, 0) > {}::bigint THEN s.d_vec END", a.push(above)),
            None => "NULL::halfvec".into(),
        };
        let scope_sql = format!(
            "SELECT {distinct} s.event_id AS id, {terms} AS terms, {ip} AS ip, {norm} AS norm,
                    coalesce(s.d_version, 0) AS version, {copy} AS copy, s.d_norm::float8 AS copy_norm,
                    s.d_state::int AS state
             FROM event_subjects s WHERE {scope_where}"
        );
        (scope_sql, "s.terms".to_string(), "s.ip".to_string(), "s.norm".to_string(), a)
    } else {
        let (where_sql, mut a) = event_filter_sql(cid, f);
        let ip = match (qv, dim) {
            (Some(qv), Some(dim)) if want_ip => {
                let (v, d) = (a.push(qv.clone()), a.push(dim));
                format!("(SELECT v.vec <#> {v} FROM event_vectors v WHERE v.event_id = s.id AND v.dim = {d})")
            }
            _ => "NULL::float8".into(),
        };
        let sql = format!(
            "SELECT id, terms, NULL::halfvec AS copy, NULL::float8 AS copy_norm, NULL::int AS state FROM events WHERE {where_sql}"
        );
        (sql, "s.terms".into(), ip, "NULL::float8".into(), a)
    };
    let cap = a.push((exact_scope + 1) as i64);
    let exact = a.push(exact_scope as i64);
    let terms = if want_terms { &terms } else { "NULL::text" };
    let version = if kept.is_some() { "s.version" } else { "NULL::bigint" };
    // The statistics rows (kind 1: documents and tokens; kind 2: a token's document frequency)
    // are the folded figures plus the deltas appended since, as everywhere.
    let stats = if !want_terms || q.corpus.is_some() {
        String::new()
    } else {
        let t = a.push(tokens.to_vec());
        format!(
            "UNION ALL SELECT 1, NULL, NULL, NULL, NULL, COALESCE(SUM(docs), 0)::bigint, COALESCE(SUM(tokens), 0)::bigint, NULL, NULL, NULL FROM (
                 SELECT docs, tokens FROM collection_stats WHERE collection_id = $1
                 UNION ALL SELECT docs, tokens FROM collection_stats_delta WHERE collection_id = $1) st
             UNION ALL SELECT 2, term, NULL, NULL, NULL, SUM(df)::bigint, NULL, NULL, NULL, NULL FROM (
                 SELECT term, df FROM term_stats WHERE collection_id = $1 AND term = ANY({t})
                 UNION ALL SELECT term, df FROM term_stats_delta WHERE collection_id = $1 AND term = ANY({t})) d
             GROUP BY term"
        )
    };
    let sql = format!(
        "WITH scope AS MATERIALIZED ({scope_sql} LIMIT {cap}),
              small AS (SELECT count(*) <= {exact} AS yes FROM scope)
         SELECT 0, s.id, {terms}, {ip}, {norm}, {version}, NULL::bigint, s.copy, s.copy_norm, s.state FROM scope s WHERE (SELECT yes FROM small)
         UNION ALL SELECT 3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE NOT (SELECT yes FROM small)
         {stats}"
    );
    let rows = query_all(c, &sql, &a.refs()).await?;
    let mut out = Scope {
        docs: Vec::new(),
        terms: Arc::default(),
        vectors: None,
        stats: CorpusStats { docs: 0, tokens: 0 },
        df: HashMap::new(),
    };
    let (mut terms, mut versioned) = (ScopeTerms::default(), Vec::new());
    for r in rows {
        match r.get::<_, i32>(0) {
            0 => {
                match &kept {
                    Some(l) => {
                        let version: i64 = r.get(5);
                        let terms = (version > l.greatest()).then(|| r.get(2));
                        let vector = copies
                            .filter(|&above| version > above)
                            .map(|_| RowVector::of(r.get(9), r.get(7), r.get(8)));
                        versioned.push(Row { id: r.get(1), version, terms, vector });
                    }
                    None if want_terms => terms.push(r.get(1), r.get(2)),
                    None => {}
                }
                out.docs.push(Doc { id: r.get(1), ip: r.get(3), approx_norm: r.get(4) })
            }
            1 => {
                out.stats =
                    CorpusStats { docs: r.get::<_, i64>(5).max(0) as u64, tokens: r.get::<_, i64>(6).max(0) as u64 }
            }
            2 => {
                out.df.insert(r.get(1), r.get::<_, i64>(5).max(0) as u64);
            }
            _ => return Ok(None), // more than `exact_scope` events
        }
    }
    match kept {
        Some(l) => {
            let rows = s.scopes.rows(c, cid, &f.user_id, l, copies.is_some(), versioned).await?;
            (out.terms, out.vectors) = (rows.terms, rows.vectors);
        }
        None => out.terms = Arc::new(terms),
    }
    Ok(Some(out))
}

/// The collection's BM25 statistics for `tokens`: the folded figures plus the changes appended
/// since the last compaction (two statements, pipelined).
pub(crate) async fn corpus(c: &impl GenericClient, cid: CollectionId, tokens: &[String]) -> Result<Corpus, StoreError> {
    let stats = async {
        let r = query_one(
            c,
            "SELECT COALESCE(SUM(docs), 0)::bigint, COALESCE(SUM(tokens), 0)::bigint FROM (
                 SELECT docs, tokens FROM collection_stats WHERE collection_id=$1
                 UNION ALL SELECT docs, tokens FROM collection_stats_delta WHERE collection_id=$1) s",
            &[&cid],
        )
        .await?;
        Ok::<_, StoreError>(CorpusStats {
            docs: r.get::<_, i64>(0).max(0) as u64,
            tokens: r.get::<_, i64>(1).max(0) as u64,
        })
    };
    let df = async {
        let rows = query_all(
            c,
            "SELECT term, SUM(df)::bigint FROM (
                 SELECT term, df FROM term_stats WHERE collection_id=$1 AND term = ANY($2)
                 UNION ALL SELECT term, df FROM term_stats_delta WHERE collection_id=$1 AND term = ANY($2)) s GROUP BY term",
            &[&cid, &tokens],
        )
        .await?;
        Ok::<_, StoreError>(
            rows.iter().map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1).max(0) as u64)).collect::<HashMap<_, _>>(),
        )
    };
    let (stats, df) = tokio::try_join!(stats, df)?;
    Ok(Corpus { stats, df })
}

/// A scope too large to scan: HNSW for the vectors, the GIN index for the full text.
async fn large_scope(tx: &Tx<'_>, s: &Search<'_>) -> Result<Vec<Candidate>, StoreError> {
    let (cid, f, q, qv, dim, tokens) = (s.cid, s.f, s.q, s.qv.as_ref(), s.dim, &s.tokens[..]);
    let k = q.k as i64;
    // The vector and the full-text queries go out together: tokio-postgres pipelines queries
    // issued concurrently on one connection, so the search costs fewer round trips.
    let vector = async {
        let (Some(qv), Some(dim)) = (qv, dim) else { return Ok(HashMap::new()) };
        if let Some(hits) = &q.vector_hits {
            return Ok(hits.iter().cloned().collect());
        }
        let index = VectorIndex::of(dim.into());
        let (where_sql, mut a) = event_filter_sql(cid, f);
        let v = a.push(qv.clone());
        let lim = a.push(k);
        let c = a.push(cid);
        let ip = format!("(v.vec::vector({dim})) <#> {v}::vector({dim})");
        let scope = format!(
            "FROM event_vectors v WHERE v.dim = {dim} AND v.collection_id = {c} AND v.event_id IN (SELECT id FROM events WHERE {where_sql})"
        );
        let rerank = VectorIndex::rerank(k);
        let sql = match index {
            // The nearest by their signs, then the exact inner product decides among them.
            VectorIndex::Bits => {
                let rerank = a.push(rerank);
                let key = index.key("v", dim.into());
                format!(
                    "SELECT event_id, score FROM (SELECT v.event_id, (-({ip}))::real AS score {scope}
                     ORDER BY {key} <~> binary_quantize({v}::vector({dim}))::bit({dim}) LIMIT {rerank}) near
                     ORDER BY score DESC, event_id LIMIT {lim}"
                )
            }
            _ => format!("SELECT v.event_id, (-({ip}))::real {scope} ORDER BY {ip} LIMIT {lim}"),
        };
        let ef = if index == VectorIndex::Bits { rerank } else { 100 };
        tx.batch_execute(&format!("SET LOCAL hnsw.iterative_scan = relaxed_order; SET LOCAL hnsw.ef_search = {ef}"))
            .await
            .map_err(backend)?;
        let rows = query_all(tx, &sql, &a.refs()).await?;
        Ok::<_, StoreError>(rows.iter().map(|r| (r.get::<_, String>(0), r.get::<_, f32>(1))).collect::<HashMap<_, _>>())
    };
    let text = async {
        if q.terms.is_empty() {
            return Ok(HashMap::new());
        }
        let docs = async {
            // Any document holding one of the query's tokens (a superset of BM25's matches).
            let tsquery = tokens
                .iter()
                .map(|t| format!("'{}'", t.replace('\\', "\\\\").replace('\'', "''")))
                .collect::<Vec<_>>()
                .join(" | ");
            let (where_sql, mut a) = event_filter_sql(cid, f);
            let tq = a.push(tsquery);
            let lim = a.push(LARGE_SCOPE_TEXT_MATCHES);
            let sql = format!(
                "SELECT id, terms FROM events WHERE {where_sql} AND terms_tsv @@ ({tq}::text)::tsquery LIMIT {lim}"
            );
            Ok::<_, StoreError>(
                query_all(tx, &sql, &a.refs())
                    .await?
                    .iter()
                    .map(|r| (r.get(0), r.get(1)))
                    .collect::<Vec<(String, Option<String>)>>(),
            )
        };
        let statistics = async {
            match q.corpus {
                Some(_) => Ok(Corpus::default()),
                None => corpus(tx, cid, tokens).await,
            }
        };
        let (Corpus { stats, df }, docs) = tokio::try_join!(statistics, docs)?;
        Ok(q.bm25(stats, |t| df.get(t).copied().unwrap_or(0)).top_k(docs, q.k))
    };
    let (cosine, bm25) = tokio::try_join!(vector, text)?;
    load_candidates(tx, cosine, bm25, qv, dim, &[], Early::default()).await
}

#[async_trait]
impl SearchStore for PgStore {
    async fn corpus(&self, cid: CollectionId, tokens: &[String]) -> StoreResult<Corpus> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        crate::search::corpus(&tx, cid, tokens).await
    }

    async fn search_candidates(
        &self,
        cid: CollectionId,
        filter: EventFilter,
        q: CandidateQuery,
    ) -> StoreResult<Vec<Candidate>> {
        let mut vector = QueryVector::Known(q.vector.clone());
        Ok(self.search_twice(cid, &filter, &q, &mut vector, &mut Then::Known(None)).await?.0)
    }

    async fn search_candidates_then(
        &self,
        cid: CollectionId,
        filter: EventFilter,
        first: CandidateQuery,
        vector: PendingVector<'_>,
        then: NextTerms<'_>,
    ) -> StoreResult<TwoHops> {
        let mut vector = QueryVector::new(vector);
        let (found, second) = self.search_twice(cid, &filter, &first, &mut vector, &mut Then::Ask(then)).await?;
        Ok(TwoHops { vector: vector.into_known(), first: found, second })
    }
}

impl PgStore {
    /// Searches on the read replica when there is one, else (or when it fails) on the primary.
    async fn search_twice(
        &self,
        cid: CollectionId,
        filter: &EventFilter,
        first: &CandidateQuery,
        vector: &mut QueryVector<'_>,
        then: &mut Then<'_>,
    ) -> StoreResult<(Vec<Candidate>, Option<Vec<Candidate>>)> {
        if let Some(read) = self.replica() {
            let on_replica = async {
                let mut conn = read.get().await.map_err(crate::sql::pool_error)?;
                two_hops(&mut conn, cid, filter, first, vector, then, &self.scopes).await
            };
            match on_replica.await {
                Ok(found) => return Ok(found),
                // Down, lagging past a recovery conflict, not yet holding the schema: the
                // primary answers this search and the next ones for a few seconds.
                Err(e) => {
                    self.rest_replica();
                    crate::sql::warn_muted(&format!(
                        "postgres read replica: {e}; searching on the primary for the next 5 s"
                    ))
                }
            }
        }
        let mut conn = self.client().await?;
        two_hops(&mut conn, cid, filter, first, vector, then, &self.scopes).await
    }
}
