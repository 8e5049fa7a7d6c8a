//! Candidate generation for search: an exact cosine scan over the vectors in the filter's scope
//! (every search is scoped by user or assistant, so the scope is small; see docs/history/benchmarks.md for
//! where an ANN index would start to pay) and BM25 over the FTS5 index of jieba-segmented terms,
//! restricted to the same scope. Fusing the two signals into a score is core's job.

use crate::candidates::{Decoded, Early, RowIds, Rows, load_candidates};
use crate::copies::Score;
use crate::filter::event_filter_sql;
use crate::scope_cache::ScopeCache;
use crate::{SqliteStore, backend};
use async_trait::async_trait;
use mnemo_core::StoreError;
use mnemo_core::embed::dot_le_bytes;
use mnemo_core::kept::Weighed;
use mnemo_core::model::*;
use mnemo_core::store::prelude::*;
use mnemo_core::store::{NextTerms, PendingVector, StoreResult, TwoHops};
use mnemo_core::text::{CorpusStats, ScopeTerms, fts_tokens};
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, OnceLock};

/// The collection's BM25 statistics for `tokens` (see `SearchStore::corpus`).
pub fn corpus(conn: &Connection, cid: CollectionId, tokens: &[String]) -> Result<Corpus, StoreError> {
    let stats: CorpusStats = conn
        .prepare_cached("SELECT docs, tokens FROM collection_stats WHERE collection_id=?1")
        .map_err(backend)?
        .query_row([cid], |r| Ok(CorpusStats { docs: r.get::<_, i64>(0)? as u64, tokens: r.get::<_, i64>(1)? as u64 }))
        .optional()
        .map_err(backend)?
        .unwrap_or_default();
    let mut df_stmt =
        conn.prepare_cached("SELECT df FROM term_stats WHERE collection_id=?1 AND term=?2").map_err(backend)?;
    let mut df: HashMap<String, u64> = HashMap::new();
    for t in tokens {
        if let std::collections::hash_map::Entry::Vacant(slot) = df.entry(t.clone()) {
            let n: i64 =
                df_stmt.query_row(params![cid, slot.key()], |r| r.get(0)).optional().map_err(backend)?.unwrap_or(0);
            slot.insert(n.max(0) as u64);
        }
    }
    Ok(Corpus { stats, df })
}

pub fn candidates(
    conn: &Connection,
    cache: &ScopeCache<Scope>,
    cid: CollectionId,
    f: &EventFilter,
    q: &CandidateQuery,
) -> Result<Vec<Candidate>, StoreError> {
    Ok(first_hop(conn, cache, cid, f, q, || q.vector.clone())?.found)
}

/// A small scope as a search read it, kept for its second hop and in the [`ScopeCache`] for the
/// next search of it: its events' terms tokenised and their rowids; their f16 copies once a
/// search with a vector read them; the events its searches read, decoded.
pub(crate) struct Scope {
    terms: ScopeTerms,
    rowids: RowIds,
    copies: OnceLock<Copies>,
    decoded: Decoded,
}

impl Weighed for Scope {
    fn bytes(&self) -> usize {
        let ids: usize = self.rowids.keys().map(|k| k.len() + 48).sum();
        self.terms.heap_bytes() + ids + self.copies.get().map_or(0, |c| c.heap_bytes()) + self.decoded.bytes()
    }
}

impl ScopeCache<Scope> {
    /// Hits were counted for `ids`: the kept scopes forget them decoded (their hit counts moved),
    /// and a row read before now is not kept (the clock moves first).
    pub(crate) fn hits_counted(&self, ids: &[String]) {
        self.hits().fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.each(|scope| scope.decoded.forget(ids));
    }
}

/// What a small scope's search read, kept for a search's second hop over the same scope.
pub struct Kept {
    scope: Arc<Scope>,
    /// Its key in the cache (`None`: not cached).
    key: Option<String>,
}

impl Kept {
    /// What the search knows of the scope's rows (see [`Rows`]; `epoch`: the hit clock before
    /// the read's first statement).
    fn rows<'a>(&'a self, cache: &'a ScopeCache<Scope>, epoch: u64) -> Rows<'a> {
        let decoded = self.key.is_some().then_some(&self.scope.decoded);
        Rows { rowids: &self.scope.rowids, decoded, hits: cache.hits(), epoch }
    }

    /// The entry's size again, if the search decoded events into it (`before`: their bytes when
    /// it began) — not a pass over the scope and a lock of the cache on every search.
    fn resize_if_grown(&self, cache: &ScopeCache<Scope>, before: usize) {
        if self.scope.decoded.bytes() != before {
            self.resize(cache);
        }
    }

    /// The entry's size again, once it holds more than when it was kept.
    fn resize(&self, cache: &ScopeCache<Scope>) {
        if let Some(key) = &self.key {
            cache.resize(key, &self.scope);
        }
    }

    /// The scope's f16 copies: kept with it, or read now (and kept).
    fn copies(
        &self,
        conn: &Connection,
        cache: &ScopeCache<Scope>,
        where_sql: &str,
        args: &[SqlValue],
    ) -> Result<&Copies, StoreError> {
        if self.scope.copies.get().is_none() {
            let _ = self.scope.copies.set(Copies::read(conn, where_sql, args)?);
            self.resize(cache);
        }
        Ok(self.scope.copies.get().expect("set above"))
    }
}

impl Kept {
    /// The same scope searched again with `q` (its `vector_hits` from the first hop): BM25 over
    /// the kept terms — the scope is not read again —, and only the rows of candidates the first
    /// hop (`found`) did not return loaded. Answers what [`candidates`] would.
    pub fn search_again(
        &self,
        conn: &Connection,
        cache: &ScopeCache<Scope>,
        cid: CollectionId,
        q: &CandidateQuery,
        found: &[Candidate],
    ) -> Result<Vec<Candidate>, StoreError> {
        // Before the read's first statement begins its snapshot (see `Rows::epoch`).
        let epoch = cache.hits().load(std::sync::atomic::Ordering::SeqCst);
        let decoded = self.scope.decoded.bytes();
        let cosine: HashMap<String, f32> = q.vector_hits.iter().flatten().cloned().collect();
        let bm25 = if q.terms.is_empty() { HashMap::new() } else { scope_bm25(conn, cid, q, &self.scope.terms)? };
        let found = load_candidates(conn, cosine, bm25, q, found, Early::default(), self.rows(cache, epoch))?;
        self.resize_if_grown(cache, decoded);
        Ok(found)
    }
}

/// The `k` best BM25 scores of a small scope's events, from their stored terms and the
/// collection's statistics (or the query's own, a sharded store's sums).
fn scope_bm25(
    conn: &Connection,
    cid: CollectionId,
    q: &CandidateQuery,
    in_scope: &ScopeTerms,
) -> Result<HashMap<String, f64>, StoreError> {
    let tokens: Vec<String> = q.terms.iter().flat_map(|t| fts_tokens(t).collect::<Vec<_>>()).collect();
    let Corpus { stats, df } = if q.corpus.is_some() { Corpus::default() } else { corpus(conn, cid, &tokens)? };
    Ok(q.bm25(stats, |t| df.get(t).copied().unwrap_or(0)).top_k_in(in_scope, q.k))
}

/// A search's first hop: the query vector it searched with, its candidates, and the scope it
/// read when it was small enough to keep (see [`Kept`]).
pub struct FirstHop {
    pub vector: Option<Vec<f32>>,
    pub found: Vec<Candidate>,
    pub kept: Option<Kept>,
}

/// [`candidates`] with the query vector `vector()` (`q.vector` is not read), and the scope
/// read. The full-text part, and a small scope's vector copies, are read before `vector()` is
/// called — it may wait for the query's embedding, which leaves a core idle for most of its time.
pub fn first_hop(
    conn: &Connection,
    cache: &ScopeCache<Scope>,
    cid: CollectionId,
    f: &EventFilter,
    q: &CandidateQuery,
    vector: impl FnOnce() -> Option<Vec<f32>>,
) -> Result<FirstHop, StoreError> {
    // Before the read's first statement begins its snapshot (see `Rows::epoch`).
    let epoch = cache.hits().load(std::sync::atomic::Ordering::SeqCst);
    let (where_sql, args) = event_filter_sql(cid, f);
    let (bm25, kept) = text_part(conn, cache, cid, f, q, &where_sql, &args)?;
    let decoded = kept.as_ref().map_or(0, |k| k.scope.decoded.bytes());
    // The rowids of a scope not kept: those the vector part finds.
    let mut own = RowIds::new();
    // The full-text hits are read now, while the query is embedded: only the vector's own hits
    // are left to read once it is there.
    let early = Early::read(conn, &bm25, rows(&kept, &own, cache, epoch))?;
    // Only a scope small enough to keep has its copies read ahead (at most SMALL_SCOPE × 1.8 KB).
    let copies = match &kept {
        Some(k) if q.vector_hits.is_none() && !crate::schema::has_legacy_vectors(conn)? => {
            Some(k.copies(conn, cache, &where_sql, &args)?)
        }
        _ => None,
    };
    let q = CandidateQuery { vector: vector(), ..q.clone() };
    let cosine = match (&q.vector, copies) {
        (Some(qv), Some(copies)) => {
            let mut ranker = CopyRanker::new(qv, q.k);
            copies.offer_to(&mut ranker);
            ranker.finish(conn, &mut own)?
        }
        _ => vector_part(conn, &q, &where_sql, &args, &mut own)?,
    };
    let found = load_candidates(conn, cosine, bm25, &q, &[], early, rows(&kept, &own, cache, epoch))?;
    if let Some(k) = &kept {
        k.resize_if_grown(cache, decoded);
    }
    Ok(FirstHop { vector: q.vector, found, kept })
}

/// What a search knows of its scope's rows: a kept scope's, or the rowids it found itself.
fn rows<'a>(kept: &'a Option<Kept>, own: &'a RowIds, cache: &'a ScopeCache<Scope>, epoch: u64) -> Rows<'a> {
    match kept {
        Some(k) => k.rows(cache, epoch),
        None => Rows { rowids: own, decoded: None, hits: cache.hits(), epoch },
    }
}

/// A scope's f16 vector copies, read into memory before the query vector exists: what is left
/// once it is there is one widening and one dot product a row.
struct Copies {
    /// Each event's rowid and where its copy is in `halves` (`None`: no copy yet).
    rows: Vec<(i64, Option<std::ops::Range<usize>>)>,
    halves: Vec<half::f16>,
}

impl Copies {
    fn read(conn: &Connection, where_sql: &str, args: &[SqlValue]) -> Result<Self, StoreError> {
        let mut c = Copies { rows: Vec::new(), halves: Vec::new() };
        for_each_copy(conn, where_sql, args, |rowid, h| {
            let at = h.map(|h| {
                let start = c.halves.len();
                c.halves.extend(h.chunks_exact(2).map(|b| half::f16::from_bits(u16::from_le_bytes([b[0], b[1]]))));
                start..c.halves.len()
            });
            c.rows.push((rowid, at));
        })?;
        Ok(c)
    }

    fn offer_to(&self, ranker: &mut CopyRanker<'_>) {
        for (rowid, at) in &self.rows {
            ranker.ranker.offer(*rowid, at.clone().map(|r| &self.halves[r]));
        }
    }

    fn heap_bytes(&self) -> usize {
        self.halves.capacity() * 2 + self.rows.capacity() * 32
    }
}

/// The vector part of a search: the `k` nearest of the scope (or the hits already known).
fn vector_part(
    conn: &Connection,
    q: &CandidateQuery,
    where_sql: &str,
    args: &[SqlValue],
    rowids: &mut RowIds,
) -> Result<HashMap<String, f32>, StoreError> {
    Ok(match (&q.vector, &q.vector_hits) {
        (Some(_), Some(hits)) => hits.iter().cloned().collect(),
        (Some(qv), None) if crate::schema::has_legacy_vectors(conn)? => scan_f32(conn, where_sql, args, qv, q.k)?,
        (Some(qv), None) => {
            let mut ranker = CopyRanker::new(qv, q.k);
            for_each_copy(conn, where_sql, args, |rowid, h| ranker.offer(rowid, h))?;
            ranker.finish(conn, rowids)?
        }
        (None, _) => HashMap::new(),
    })
}

/// The full-text part of a search: the `k` best BM25 scores of the scope, and a small scope's
/// terms kept for a second hop.
fn text_part(
    conn: &Connection,
    cache: &ScopeCache<Scope>,
    cid: CollectionId,
    f: &EventFilter,
    q: &CandidateQuery,
    where_sql: &str,
    args: &[SqlValue],
) -> Result<(HashMap<String, f64>, Option<Kept>), StoreError> {
    let mut bm25: HashMap<String, f64> = HashMap::new();
    if q.terms.is_empty() {
        return Ok((bm25, None));
    }
    // Stamped before the scope is read: what is read is at least as new as its stamp.
    let stamp = cache.stamp(conn, where_sql, args, f)?;
    if let Some((key, stamp)) = &stamp
        && let Some(scope) = cache.get(key, *stamp)
    {
        let bm25 = scope_bm25(conn, cid, q, &scope.terms)?;
        return Ok((bm25, Some(Kept { scope, key: Some(key.clone()) })));
    }
    // Each term quoted: user text can never be read as FTS5 query syntax.
    let expr = q.terms.iter().map(|t| format!("\"{}\"", t.replace('"', "\"\""))).collect::<Vec<_>>().join(" OR ");
    // A small scope (the usual: one user's events) is scored here from the events' terms and
    // the collection's statistics — FTS5's bm25() would walk every document of the collection
    // that holds a query term (measured: 105 ms at 100k events; see docs/history/benchmarks.md).
    let mut scope = conn
        .prepare_cached(&format!("SELECT rowid, id, terms FROM events WHERE {where_sql} LIMIT ?{}", args.len() + 1))
        .map_err(backend)?;
    let mut a = args.to_vec();
    a.push(SqlValue::Integer(SMALL_SCOPE as i64 + 1));
    // Tokenised as read: the terms are not copied into strings of their own.
    let (mut in_scope, mut rowids) = (ScopeTerms::default(), RowIds::new());
    let mut rows = scope.query(params_from_iter(a.iter())).map_err(backend)?;
    while let Some(r) = rows.next().map_err(backend)? {
        let terms = match r.get_ref(2).map_err(backend)? {
            rusqlite::types::ValueRef::Text(t) => Some(t),
            _ => None,
        };
        let id: String = r.get(1).map_err(backend)?;
        rowids.insert(id.clone(), r.get(0).map_err(backend)?);
        in_scope.push_bytes(id, terms);
    }
    drop(rows);
    if in_scope.len() <= SMALL_SCOPE {
        let bm25 = scope_bm25(conn, cid, q, &in_scope)?;
        // Decoded events up to half the terms' bytes (the candidates of many searches), or 64 KiB.
        let decoded = Decoded::new((in_scope.heap_bytes() / 2).max(64 << 10));
        let scope = Arc::new(Scope { terms: in_scope, rowids, copies: OnceLock::new(), decoded });
        let key = stamp.map(|(key, stamp)| {
            cache.put(key.clone(), stamp, scope.clone());
            key
        });
        return Ok((bm25, Some(Kept { scope, key })));
    }
    let mut a = args.to_vec();
    a.push(SqlValue::Text(expr));
    let match_idx = a.len();
    if q.corpus.is_some() {
        // Statistics given (a sharded store's, over every shard): FTS5's bm25() knows only
        // this file's, so the matches are scored here, as the small scopes are.
        let sql = format!(
            "SELECT e.id, e.terms FROM event_fts CROSS JOIN events e ON e.rowid = event_fts.rowid
             WHERE event_fts MATCH ?{match_idx} AND e.id IN (SELECT id FROM events WHERE {where_sql})"
        );
        let mut stmt = conn.prepare_cached(&sql).map_err(backend)?;
        let matches: Vec<(String, Option<String>)> = stmt
            .query_map(params_from_iter(a.iter()), |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(backend)?
            .collect::<Result<_, _>>()
            .map_err(backend)?;
        return Ok((q.bm25(CorpusStats::default(), |_| 0).top_k(matches, q.k), None));
    }
    a.push(SqlValue::Integer(q.k as i64));
    let sql = format!(
        // CROSS JOIN keeps the full-text match as the outer loop: otherwise the planner may
        // run the MATCH once per event in scope (measured: 112 ms → see docs/history/benchmarks.md).
        "SELECT e.id, -bm25(event_fts) FROM event_fts CROSS JOIN events e ON e.rowid = event_fts.rowid
         WHERE event_fts MATCH ?{match_idx} AND e.id IN (SELECT id FROM events WHERE {where_sql})
         ORDER BY bm25(event_fts) LIMIT ?{}",
        a.len()
    );
    let mut stmt = conn.prepare_cached(&sql).map_err(backend)?;
    let rows = stmt
        .query_map(params_from_iter(a.iter()), |r| Ok((r.get::<_, String>(0)?, r.get::<_, f64>(1)?)))
        .map_err(backend)?;
    for r in rows {
        let (id, s) = r.map_err(backend)?;
        bm25.insert(id, s);
    }
    Ok((bm25, None))
}

/// The k best vectors of the scope by exact inner product, reading every vector in f32 — the
/// legacy table of a directory upgraded from schema v10 included, until its relocation is done.
fn scan_f32(
    conn: &Connection,
    where_sql: &str,
    args: &[SqlValue],
    qv: &[f32],
    k: usize,
) -> Result<HashMap<String, f32>, StoreError> {
    // Vectors of events written before schema v11 are in the legacy table, keyed by event id.
    let legacy = format!(
        " UNION ALL SELECT lv.event_id, lv.vec FROM event_vectors_legacy lv WHERE lv.event_id IN (SELECT id FROM events WHERE {where_sql})"
    );
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT v.event_id, v.vec FROM event_vectors v WHERE v.rowid IN (SELECT rowid FROM events WHERE {where_sql}){legacy}"
        ))
        .map_err(backend)?;
    let mut rows = stmt.query(params_from_iter(args.iter())).map_err(backend)?;
    let mut best = TopK::new(k);
    while let Some(r) = rows.next().map_err(backend)? {
        let blob = r.get_ref(1).map_err(backend)?.as_blob().map_err(backend)?;
        if blob.len() != qv.len() * 4 {
            continue; // a vector from another model; the start-up check prevents this
        }
        best.offer(dot_le_bytes(qv, blob), || {
            Ok(r.get_ref(0).map_err(backend)?.as_str().map_err(backend)?.to_string())
        })?;
    }
    Ok(best.into_map())
}

/// The k best by score, then by id (so equal scores are decided the same whatever the order rows
/// are offered in); an id is copied only when its row may enter (a bounded min-heap).
struct TopK {
    k: usize,
    heap: BinaryHeap<Reverse<(Score, String)>>,
}

impl TopK {
    fn new(k: usize) -> Self {
        Self { k, heap: BinaryHeap::with_capacity(k + 1) }
    }

    fn offer(&mut self, score: f32, id: impl FnOnce() -> Result<String, StoreError>) -> Result<(), StoreError> {
        if self.heap.len() < self.k {
            self.heap.push(Reverse((Score(score), id()?)));
            return Ok(());
        }
        // Below the least kept: out without copying the id; equal to it: the id decides.
        if self.heap.peek().is_none_or(|Reverse((least, _))| score < least.0) {
            return Ok(());
        }
        let entry = (Score(score), id()?);
        if self.heap.peek().is_some_and(|Reverse(least)| entry > *least) {
            self.heap.push(Reverse(entry));
            self.heap.pop();
        }
        Ok(())
    }

    fn into_map(self) -> HashMap<String, f32> {
        self.heap.into_iter().map(|Reverse((s, id))| (id, s.0)).collect()
    }
}

/// Each event of the scope with its f16 vector copy (`None`: none yet), in rowid order.
fn for_each_copy(
    conn: &Connection,
    where_sql: &str,
    args: &[SqlValue],
    mut each: impl FnMut(i64, Option<&[u8]>),
) -> Result<(), StoreError> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT s.rowid, h.h FROM (SELECT rowid FROM events WHERE {where_sql}) s LEFT JOIN event_vectors_f16 h ON h.rowid = s.rowid"
        ))
        .map_err(backend)?;
    let mut rows = stmt.query(params_from_iter(args.iter())).map_err(backend)?;
    while let Some(r) = rows.next().map_err(backend)? {
        let rowid: i64 = r.get(0).map_err(backend)?;
        match r.get_ref(1).map_err(backend)? {
            rusqlite::types::ValueRef::Blob(h) => each(rowid, Some(h)),
            _ => each(rowid, None),
        }
    }
    Ok(())
}

/// The k best vectors of the scope by exact inner product, as [`scan_f32`] finds them, from the
/// scope's f16 copies (half the bytes; a user's copies are contiguous) and the f32 rows only of
/// the few that could be among the k best ([`crate::copies`]: the candidates and their scores
/// are exactly the f32 scan's). Rows without a copy yet (written before schema v12, before the
/// background fill reached them) are read in f32.
struct CopyRanker<'q> {
    qv: &'q [f32],
    k: usize,
    ranker: crate::copies::CopyRanker<'q, i64>,
    halves: Vec<half::f16>,
}

impl<'q> CopyRanker<'q> {
    fn new(qv: &'q [f32], k: usize) -> Self {
        let ranker = crate::copies::CopyRanker::new(qv, k);
        Self { qv, k, ranker, halves: vec![half::f16::ZERO; qv.len()] }
    }

    /// A row and its copy (little-endian f16; `None`: none yet).
    fn offer(&mut self, rowid: i64, copy: Option<&[u8]>) {
        let Some(h) = copy else { return self.ranker.offer(rowid, None) };
        if h.len() != self.halves.len() * 2 {
            return; // a vector from another model; the start-up check prevents this
        }
        for (x, b) in self.halves.iter_mut().zip(h.chunks_exact(2)) {
            *x = half::f16::from_bits(u16::from_le_bytes([b[0], b[1]]));
        }
        self.ranker.offer(rowid, Some(&self.halves));
    }

    /// The k best, scored in f32 (their rowids noted in `rowids`).
    fn finish(self, conn: &Connection, rowids: &mut RowIds) -> Result<HashMap<String, f32>, StoreError> {
        let (qv, n) = (self.qv, self.qv.len());
        let mut again = self.ranker.finish();
        again.sort_unstable(); // neighbouring rows: fewer pages apart
        let mut exact =
            conn.prepare_cached("SELECT event_id, vec FROM event_vectors WHERE rowid=?1").map_err(backend)?;
        let mut best = TopK::new(self.k);
        for rowid in again {
            let mut rows = exact.query([rowid]).map_err(backend)?;
            let Some(r) = rows.next().map_err(backend)? else { continue };
            let blob = r.get_ref(1).map_err(backend)?.as_blob().map_err(backend)?;
            if blob.len() != n * 4 {
                continue;
            }
            best.offer(dot_le_bytes(qv, blob), || {
                let id = r.get_ref(0).map_err(backend)?.as_str().map_err(backend)?.to_string();
                rowids.insert(id.clone(), rowid);
                Ok(id)
            })?;
        }
        Ok(best.into_map())
    }
}

/// Scopes up to this many events are matched by rowid lookups in the full-text index.
const SMALL_SCOPE: usize = 5_000;

#[async_trait]
impl SearchStore for SqliteStore {
    async fn search_candidates(
        &self,
        cid: CollectionId,
        filter: EventFilter,
        q: CandidateQuery,
    ) -> StoreResult<Vec<Candidate>> {
        let cache = self.scope_cache.clone();
        self.read(move |conn| crate::search::candidates(conn, &cache, cid, &filter, &q)).await
    }

    /// Both hops of a search. The first reads the scope's terms and a small scope's vector
    /// copies on a read connection while the vector is computed on the async side, handed over
    /// through a channel; the second, decided by `then` from the first's candidates, is scored
    /// from the scope the first read (not read again) when it was small enough to keep.
    async fn search_candidates_then(
        &self,
        cid: CollectionId,
        filter: EventFilter,
        first: CandidateQuery,
        vector: PendingVector<'_>,
        then: NextTerms<'_>,
    ) -> StoreResult<TwoHops> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Option<Vec<f32>>>(1);
        let (f, q) = (filter.clone(), first.clone());
        // A dropped sender (the request cancelled) ends the wait as "no vector".
        let cache = self.scope_cache.clone();
        let read = self
            .read(move |conn| crate::search::first_hop(conn, &cache, cid, &f, &q, move || rx.recv().ok().flatten()));
        let send = async move {
            let _ = tx.send(vector.await);
        };
        let (read, ()) = tokio::join!(read, send);
        let crate::search::FirstHop { vector, found, kept } = read?;
        let first = CandidateQuery { vector: vector.clone(), ..first };
        let second = self.second_hop(cid, filter, &first, &found, kept, then).await?;
        Ok(TwoHops { vector, first: found, second })
    }

    async fn corpus(&self, cid: CollectionId, tokens: &[String]) -> StoreResult<Corpus> {
        let tokens = tokens.to_vec();
        self.read(move |conn| crate::search::corpus(conn, cid, &tokens)).await
    }
}

impl SqliteStore {
    /// A search's second hop, if `then` asks for one: scored from the first hop's kept scope
    /// when it was small, else searched again.
    async fn second_hop(
        &self,
        cid: CollectionId,
        filter: EventFilter,
        first: &CandidateQuery,
        found: &[Candidate],
        kept: Option<crate::search::Kept>,
        then: NextTerms<'_>,
    ) -> StoreResult<Option<Vec<Candidate>>> {
        let Some(next) = then(found).await else { return Ok(None) };
        let second = first.second_hop(found, next);
        let Some(kept) = kept else {
            return Ok(Some(self.search_candidates(cid, filter, second).await?));
        };
        let (known, cache) = (found.to_vec(), self.scope_cache.clone());
        Ok(Some(self.read(move |conn| kept.search_again(conn, &cache, cid, &second, &known)).await?))
    }
}
