//! Candidate generation for search: an exact cosine scan over the vectors in the filter's scope
//! (every search is scoped by user or assistant, so the scope is small; see docs/benchmarks.md for
//! where an ANN index would start to pay) and BM25 over the FTS5 index of jieba-segmented terms,
//! restricted to the same scope. Fusing the two signals into a score is core's job.

use crate::backend;
use crate::events::event_filter_sql;
use crate::rows::{EVENT_COLS, blob_to_vec, event_from_row};
use mnemo_core::StoreError;
use mnemo_core::embed::dot;
use mnemo_core::model::*;
use mnemo_core::text::{CorpusStats, fts_tokens};
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};

/// An f32 with a total order (for the top-k heap).
#[derive(PartialEq)]
struct OrdF32(f32);

impl Eq for OrdF32 {}

impl PartialOrd for OrdF32 {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OrdF32 {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Dot product of a query vector and a stored little-endian f32 blob, without decoding it first.
fn dot_blob(q: &[f32], blob: &[u8]) -> f32 {
    q.iter().zip(blob.chunks_exact(4)).map(|(a, b)| a * f32::from_le_bytes([b[0], b[1], b[2], b[3]])).sum()
}

/// The collection's BM25 statistics for `tokens` (see `Store::corpus`).
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
    cid: CollectionId,
    f: &EventFilter,
    q: &CandidateQuery,
) -> Result<Vec<Candidate>, StoreError> {
    Ok(candidates_kept(conn, cid, f, q)?.0)
}

/// What a small scope's search read, kept for a search's second hop over the same scope: the
/// scope's events with their terms.
pub struct Kept {
    in_scope: Vec<(String, Option<String>)>,
}

impl Kept {
    /// The same scope searched again with `q` (its `vector_hits` from the first hop): BM25 over
    /// the kept terms — the scope is not read again —, and only the rows of candidates the first
    /// hop (`found`) did not return loaded. Answers what [`candidates`] would.
    pub fn search_again(
        &self,
        conn: &Connection,
        cid: CollectionId,
        q: &CandidateQuery,
        found: &[Candidate],
    ) -> Result<Vec<Candidate>, StoreError> {
        let cosine: HashMap<String, f32> = q.vector_hits.iter().flatten().cloned().collect();
        let mut bm25 = HashMap::new();
        if !q.terms.is_empty() {
            let tokens: Vec<String> = q.terms.iter().flat_map(|t| fts_tokens(t).collect::<Vec<_>>()).collect();
            let Corpus { stats, df } = if q.corpus.is_some() { Corpus::default() } else { corpus(conn, cid, &tokens)? };
            let docs = self.in_scope.iter().map(|(id, terms)| (id.as_str(), terms.as_deref()));
            bm25 = q.bm25(stats, |t| df.get(t).copied().unwrap_or(0)).top_k(docs, q.k);
        }
        load_candidates(conn, cosine, bm25, q, found)
    }
}

/// [`candidates`], and the scope it read when it was small enough to keep (see [`Kept`]).
pub fn candidates_kept(
    conn: &Connection,
    cid: CollectionId,
    f: &EventFilter,
    q: &CandidateQuery,
) -> Result<(Vec<Candidate>, Option<Kept>), StoreError> {
    let (where_sql, args) = event_filter_sql(cid, f);
    let mut cosine: HashMap<String, f32> = HashMap::new();
    if let Some(hits) = q.vector.as_ref().and(q.vector_hits.as_ref()) {
        cosine = hits.iter().cloned().collect();
    } else if let Some(qv) = &q.vector {
        // Until the background relocation has moved them, vectors of events written before
        // schema v11 are in the legacy table, keyed by event id.
        let legacy = if crate::events::has_legacy_vectors(conn)? {
            format!(
                " UNION ALL SELECT lv.event_id, lv.vec FROM event_vectors_legacy lv WHERE lv.event_id IN (SELECT id FROM events WHERE {where_sql})"
            )
        } else {
            String::new()
        };
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT v.event_id, v.vec FROM event_vectors v WHERE v.rowid IN (SELECT rowid FROM events WHERE {where_sql}){legacy}"
            ))
            .map_err(backend)?;
        let mut rows = stmt.query(params_from_iter(args.iter())).map_err(backend)?;
        // A bounded min-heap of the best k; scores are computed from the blob's bytes in place and
        // an id is copied only when it enters the top k.
        let mut heap: BinaryHeap<Reverse<(OrdF32, String)>> = BinaryHeap::with_capacity(q.k + 1);
        while let Some(r) = rows.next().map_err(backend)? {
            let blob = r.get_ref(1).map_err(backend)?.as_blob().map_err(backend)?;
            if blob.len() != qv.len() * 4 {
                continue; // a vector from another model; the start-up check prevents this
            }
            let score = dot_blob(qv, blob);
            if heap.len() < q.k || heap.peek().is_some_and(|Reverse((min, _))| score > min.0) {
                let id = r.get_ref(0).map_err(backend)?.as_str().map_err(backend)?.to_string();
                heap.push(Reverse((OrdF32(score), id)));
                if heap.len() > q.k {
                    heap.pop();
                }
            }
        }
        let scored: Vec<(f32, String)> = heap.into_iter().map(|Reverse((s, id))| (s.0, id)).collect();
        cosine = scored.into_iter().map(|(s, id)| (id, s)).collect();
    }
    let mut bm25: HashMap<String, f64> = HashMap::new();
    if !q.terms.is_empty() {
        // Each term quoted: user text can never be read as FTS5 query syntax.
        let expr = q.terms.iter().map(|t| format!("\"{}\"", t.replace('"', "\"\""))).collect::<Vec<_>>().join(" OR ");
        // A small scope (the usual: one user's events) is scored here from the events' terms and
        // the collection's statistics — FTS5's bm25() would walk every document of the collection
        // that holds a query term (measured: 105 ms at 100k events; see docs/benchmarks.md).
        let mut scope = conn
            .prepare_cached(&format!("SELECT id, terms FROM events WHERE {where_sql} LIMIT ?{}", args.len() + 1))
            .map_err(backend)?;
        let mut a = args.clone();
        a.push(SqlValue::Integer(SMALL_SCOPE as i64 + 1));
        let in_scope: Vec<(String, Option<String>)> = scope
            .query_map(params_from_iter(a.iter()), |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(backend)?
            .collect::<Result<_, _>>()
            .map_err(backend)?;
        if in_scope.len() <= SMALL_SCOPE {
            let tokens: Vec<String> = q.terms.iter().flat_map(|t| fts_tokens(t).collect::<Vec<_>>()).collect();
            let Corpus { stats, df } = if q.corpus.is_some() { Corpus::default() } else { corpus(conn, cid, &tokens)? };
            let docs = in_scope.iter().map(|(id, terms)| (id.as_str(), terms.as_deref()));
            bm25 = q.bm25(stats, |t| df.get(t).copied().unwrap_or(0)).top_k(docs, q.k);
            return Ok((load_candidates(conn, cosine, bm25, q, &[])?, Some(Kept { in_scope })));
        }
        let mut a = args.clone();
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
            bm25 = q.bm25(CorpusStats::default(), |_| 0).top_k(matches, q.k);
            return Ok((load_candidates(conn, cosine, bm25, q, &[])?, None));
        }
        a.push(SqlValue::Integer(q.k as i64));
        let sql = format!(
            // CROSS JOIN keeps the full-text match as the outer loop: otherwise the planner may
            // run the MATCH once per event in scope (measured: 112 ms → see docs/benchmarks.md).
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
    }
    Ok((load_candidates(conn, cosine, bm25, q, &[])?, None))
}

/// Scopes up to this many events are matched by rowid lookups in the full-text index.
const SMALL_SCOPE: usize = 5_000;

/// Events found by either signal, loaded once; the cosine of a BM25-only hit is filled in. A
/// candidate an earlier hop of the same search returned (`known`) is not read again.
fn load_candidates(
    conn: &Connection,
    cosine: HashMap<String, f32>,
    bm25: HashMap<String, f64>,
    q: &CandidateQuery,
    known: &[Candidate],
) -> Result<Vec<Candidate>, StoreError> {
    let known: HashMap<&str, &Candidate> = known.iter().map(|c| (c.event.id.as_str(), c)).collect();
    let ids = mnemo_core::store::candidate_ids(&cosine, &bm25);
    if ids.is_empty() {
        return Ok(vec![]);
    }
    let mut out = Vec::with_capacity(ids.len());
    let mut load = conn.prepare_cached(&format!("SELECT {EVENT_COLS} FROM events WHERE id=?1")).map_err(backend)?;
    let mut vec_of = conn
        .prepare_cached(if crate::events::has_legacy_vectors(conn)? {
            "SELECT vec FROM event_vectors WHERE event_id=?1 UNION ALL SELECT vec FROM event_vectors_legacy WHERE event_id=?1 LIMIT 1"
        } else {
            "SELECT vec FROM event_vectors WHERE event_id=?1"
        })
        .map_err(backend)?;
    for id in ids {
        let seen = known.get(id.as_str());
        let event = match seen {
            Some(c) => c.event.clone(),
            None => load.query_row([&id], event_from_row).map_err(backend)?,
        };
        let cos = match (cosine.get(&id), &q.vector) {
            (Some(c), _) => Some(*c),
            (None, Some(_)) if seen.is_some_and(|c| c.cosine.is_some()) => seen.and_then(|c| c.cosine),
            (None, Some(qv)) => {
                let blob: Option<Vec<u8>> = vec_of.query_row([&id], |r| r.get(0)).ok();
                blob.map(|b| blob_to_vec(&b)).filter(|v| v.len() == qv.len()).map(|v| dot(qv, &v))
            }
            (None, None) => None,
        };
        let b = bm25.get(&id).copied();
        out.push(Candidate { event, cosine: cos, bm25: b });
    }
    Ok(out)
}
