//! Candidate generation for search: an exact cosine scan over the vectors in the filter's scope
//! (every search is scoped by user or assistant, so the scope is small; see docs/benchmarks.md for
//! where an ANN index would start to pay) and BM25 over the FTS5 index of jieba-segmented terms,
//! restricted to the same scope. Fusing the two signals into a score is core's job.

use crate::rows::*;
use crate::{backend, filter_sql};
use mnemo_core::StoreError;
use mnemo_core::embed::dot;
use mnemo_core::model::*;
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, params_from_iter};
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

pub fn candidates(
    conn: &Connection,
    cid: CollectionId,
    f: &EventFilter,
    q: &CandidateQuery,
) -> Result<Vec<Candidate>, StoreError> {
    let (where_sql, args) = filter_sql(cid, f);
    let mut cosine: HashMap<String, f32> = HashMap::new();
    if let Some(qv) = &q.vector {
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT v.event_id, v.vec FROM event_vectors v WHERE v.event_id IN (SELECT id FROM events WHERE {where_sql})"
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
        let mut a = args.clone();
        a.push(SqlValue::Text(expr));
        let match_idx = a.len();
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
    // Events found by either signal, loaded once; the cosine of a BM25-only hit is filled in.
    let mut ids: Vec<String> = cosine.keys().chain(bm25.keys()).cloned().collect();
    ids.sort();
    ids.dedup();
    if ids.is_empty() {
        return Ok(vec![]);
    }
    let mut out = Vec::with_capacity(ids.len());
    let mut load = conn.prepare_cached(&format!("SELECT {EVENT_COLS} FROM events WHERE id=?1")).map_err(backend)?;
    let mut vec_of = conn.prepare_cached("SELECT vec FROM event_vectors WHERE event_id=?1").map_err(backend)?;
    for id in ids {
        let event = load.query_row([&id], event_from_row).map_err(backend)?;
        let cos = match (cosine.get(&id), &q.vector) {
            (Some(c), _) => Some(*c),
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
