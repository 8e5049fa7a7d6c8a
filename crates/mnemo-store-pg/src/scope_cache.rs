//! A small scope kept between searches on this replica: a user's events' terms tokenised
//! (`ScopeTerms`, ~1 KB of text an event that a search otherwise ships from the server and
//! tokenises again, every time — the larger part of its work before the vector) and, from the
//! scope's second search on while the cache has room for them, their vectors' f16 copies, which
//! this replica then scores itself: the server neither computes a kept scope's inner products
//! nor, with the query still embedding, waits for a second statement. Not from the first: the
//! server sends a copy component by component (pgvector's `halfvec_send`, ~13 µs a 768-d row),
//! so copies are worth their cost only for a scope searched again, and a cache too small for
//! its users keeps their terms alone rather than evicting more of them.
//!
//! Valid by construction, row by row: each user-document row carries a version (schema v11:
//! the next value of one sequence at every write of its copy — terms, filter columns or vector),
//! and a search's scope statement returns every row's version with the terms and copy of only
//! those rows whose version is above the greatest this replica kept. A row kept under the
//! version the snapshot shows is the same row; any other row is read (sent, or asked for by id).
//! Versions are handed out in one order and committed in another, so a row at or below the
//! greatest may still be new to the entry: it is asked for, never assumed. What a snapshot shows
//! is all a search uses, so replicas need no signal from each other, and a write pays one
//! sequence value.

use crate::exact::Doc;
use crate::sql::query_all;
use deadpool_postgres::GenericClient;
use mnemo_core::StoreError;
use mnemo_core::kept::{Kept, Weighed};
use mnemo_core::model::{CollectionId, EventFilter};
use mnemo_core::text::ScopeTerms;
use pgvector::HalfVector;
use std::collections::HashMap;
use std::sync::Arc;

/// How this replica searches small scopes: up to `exact` events exactly, their terms and
/// vector copies kept.
pub(crate) struct Scopes {
    pub exact: usize,
    pub kept: Kept<(), KeptScope>,
}

/// An event's vector as its user-document row holds it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum RowVector {
    /// Its f16 copy, and the stored vector's norm (computed in f32): scored here, within
    /// `exact::halfvec_bound` of the f32 score.
    Half(Arc<[half::f16]>, f64),
    /// The event has no vector.
    Absent,
    /// The vector did not fit in the row: only the server scores it (from its f32 row).
    Server,
}

impl RowVector {
    /// From a row's `d_state` (bit 2: the vector is in the row, or there is none), `d_vec` and
    /// `d_norm`.
    pub(crate) fn of(state: i32, copy: Option<HalfVector>, norm: Option<f64>) -> Self {
        match (state & 2 == 2, copy, norm) {
            (true, Some(v), Some(n)) => RowVector::Half(v.to_vec().into(), n),
            (true, None, _) => RowVector::Absent,
            _ => RowVector::Server,
        }
    }

    /// The negated inner product with `q` (pgvector's `<#>`), as the server would give it for
    /// the f16 copy, and the stored vector's norm for the error bound; `None` for another
    /// dimension's vector or none. `widened` is room for the copy in f32.
    pub(crate) fn score(&self, q: &[f32], widened: &mut Vec<f32>) -> Option<(f64, f64)> {
        use half::slice::HalfFloatSliceExt;
        let RowVector::Half(h, norm) = self else { return None };
        if h.len() != q.len() {
            return None;
        }
        widened.resize(h.len(), 0.0);
        h.convert_to_f32_slice(widened);
        // Summed in f32 in eight lanes from the f32 query (pgvector sums f16 × f16 in f32 in
        // one): within `exact::halfvec_bound` as the server's score is.
        let (ip, _) = mnemo_core::embed::dot_and_magnitude(q, widened);
        Some((-f64::from(ip), *norm))
    }

    fn bytes(&self) -> usize {
        match self {
            RowVector::Half(h, _) => 2 * h.len() + 32,
            _ => 16,
        }
    }
}

/// The inner products of a scope's events (`docs`) whose copies are kept (`vectors`, in the same
/// order), computed here — each within `exact::halfvec_bound` of its f32 score, as the server's
/// f16 scores are; an event the server scored keeps its score.
pub(crate) fn score_here(docs: &mut [Doc], vectors: &[RowVector], qv: &[f32]) {
    let mut widened = Vec::with_capacity(qv.len());
    for (d, v) in docs.iter_mut().zip(vectors) {
        if *v != RowVector::Server {
            (d.ip, d.approx_norm) = v.score(qv, &mut widened).map_or((None, None), |(ip, n)| (Some(ip), Some(n)));
        }
    }
}

/// A scope as a search read it: its terms and vector copies (both in the statement's row
/// order), with each event's row version and place.
pub(crate) struct KeptScope {
    terms: Arc<ScopeTerms>,
    /// `None`: kept without copies (the scope's inner products come from the server).
    vectors: Option<Arc<[RowVector]>>,
    /// Event id → (its row's version, its document's number in `terms` and `vectors`).
    rows: HashMap<String, (i64, u32)>,
    /// The greatest version among `rows`: a scope statement sends the rows above it.
    greatest: i64,
}

impl Weighed for KeptScope {
    fn bytes(&self) -> usize {
        self.terms.heap_bytes()
            + self.vectors.iter().flat_map(|v| v.iter()).map(RowVector::bytes).sum::<usize>()
            + self.rows.keys().map(|id| id.len() + 48).sum::<usize>()
    }
}

/// One row of a scope statement: the event, its row's version, and — each when it was sent — its
/// terms (`Some(None)`: it has none) and its vector.
pub(crate) struct Row {
    pub id: String,
    pub version: i64,
    pub terms: Option<Option<String>>,
    pub vector: Option<RowVector>,
}

/// A scope's terms and, when the search asked for them, vector copies, in the statement's row
/// order.
pub(crate) struct ScopeRows {
    pub terms: Arc<ScopeTerms>,
    pub vectors: Option<Arc<[RowVector]>>,
}

/// What a copy may take kept (up to 1,024 dimensions in f16 and its bookkeeping): copies are
/// asked for only while the cache has room for this much a row.
const COPY_BYTES: usize = 2_100;

/// Where a filter's scope is kept, and what was kept there when its search began.
pub(crate) struct Lookup {
    key: String,
    entry: Option<Arc<KeptScope>>,
}

impl Lookup {
    /// The greatest version kept (−1: nothing, so a scope statement sends every row's terms).
    pub(crate) fn greatest(&self) -> i64 {
        self.entry.as_ref().map_or(-1, |k| k.greatest)
    }

    /// Above which version the scope statement sends rows' vector copies, if at all: not for a
    /// scope's first search (none kept), every row's for one kept without them while `room()`
    /// bytes hold them, those above the greatest kept for one kept with them.
    pub(crate) fn copies_above(&self, room: impl FnOnce() -> usize) -> Option<i64> {
        let k = self.entry.as_ref()?;
        match &k.vectors {
            Some(_) => Some(k.greatest),
            None => (room() >= k.rows.len() * COPY_BYTES).then_some(-1),
        }
    }
}

impl Scopes {
    /// A filter's place in the cache and its entry, looked up once per search (`None`: off).
    pub(crate) fn lookup(&self, cid: CollectionId, f: &EventFilter) -> Option<Lookup> {
        if self.kept.is_off() {
            return None;
        }
        let key = format!("{cid}\u{1f}{f:?}");
        let entry = self.kept.get(&key).map(|(_, k)| k);
        Some(Lookup { key, entry })
    }

    /// Bytes the cache can take without evicting.
    pub(crate) fn room(&self) -> usize {
        self.kept.room()
    }

    /// The scope's terms, and its vector copies when `copies` (the statement asked for them),
    /// from a statement's `rows` (in its order), asked with `at`'s greatest version: a row `at`'s
    /// entry holds at that version is copied from it, one sent is tokenised, any other is read by
    /// id (`users`' rows). Kept for the next search; counted a hit when no row's terms were read.
    pub(crate) async fn rows(
        &self,
        c: &impl GenericClient,
        cid: CollectionId,
        users: &[String],
        at: Lookup,
        copies: bool,
        rows: Vec<Row>,
    ) -> Result<ScopeRows, StoreError> {
        let Lookup { key, entry: kept } = at;
        let held = |r: &Row| -> Option<u32> {
            let k = kept.as_ref()?;
            k.rows.get(&r.id).and_then(|&(v, doc)| (v == r.version).then_some(doc))
        };
        let unknown: Vec<String> =
            rows.iter().filter(|r| r.terms.is_none() && held(r).is_none()).map(|r| r.id.clone()).collect();
        // A hit: the entry served every row's terms (copies sent to a scope kept without them
        // are an addition, not a miss).
        let hit = kept.is_some() && unknown.is_empty() && rows.iter().all(|r| r.terms.is_none());
        self.kept.count(hit);
        if let Some(k) = &kept
            && hit
            && rows.iter().all(|r| r.vector.is_none())
            && k.vectors.is_some() == copies
            && rows.len() == k.terms.len()
            && rows.iter().enumerate().all(|(i, r)| held(r) == Some(i as u32))
        {
            return Ok(ScopeRows { terms: k.terms.clone(), vectors: k.vectors.clone() });
        }
        let mut read: HashMap<String, (i64, Option<String>, RowVector)> = HashMap::new();
        if !unknown.is_empty() {
            // Read now, a newer snapshot: a row changed since carries its new version.
            for r in query_all(
                c,
                "SELECT DISTINCT ON (s.event_id) s.event_id, coalesce(s.d_version, 0),
                        CASE WHEN s.d_state & 1 = 1 THEN s.d_terms ELSE (SELECT e.terms FROM events e WHERE e.id = s.event_id) END,
                        s.d_state::int, CASE WHEN $4 THEN s.d_vec END, s.d_norm::float8
                 FROM event_subjects s
                 WHERE s.collection_id = $1 AND s.kind = 'u' AND s.subject_id = ANY($2) AND s.event_id = ANY($3)",
                &[&cid, &users, &unknown, &copies],
            )
            .await?
            {
                read.insert(r.get(0), (r.get(1), r.get(2), RowVector::of(r.get(3), r.get(4), r.get(5))));
            }
        }
        let mut terms = ScopeTerms::default();
        let mut vectors = Vec::with_capacity(if copies { rows.len() } else { 0 });
        let mut versions = HashMap::with_capacity(rows.len());
        let mut whole = true;
        for r in rows {
            let doc = terms.len() as u32;
            let from = held(&r);
            let k = kept.as_ref();
            let (version, vector) = match (r.terms, from) {
                (Some(sent), _) => {
                    terms.push(r.id.clone(), sent.as_deref());
                    (r.version, r.vector)
                }
                (None, Some(from)) => {
                    let k = k.expect("held");
                    terms.push_copied(&k.terms, from as usize);
                    let vector = r.vector.or_else(|| Some(k.vectors.as_ref()?[from as usize].clone()));
                    (r.version, vector)
                }
                (None, None) => match read.remove(&r.id) {
                    Some((version, t, vector)) => {
                        terms.push(r.id.clone(), t.as_deref());
                        (version, Some(vector))
                    }
                    // Gone since the scope was read: no terms, no vector, and nothing kept.
                    None => {
                        terms.push(r.id.clone(), None);
                        whole = false;
                        (r.version, Some(RowVector::Absent))
                    }
                },
            };
            if copies {
                // Asked for: sent, held, or read by id, every row has its own.
                vectors.push(vector.unwrap_or(RowVector::Server));
            }
            versions.insert(r.id, (version, doc));
        }
        let terms = Arc::new(terms);
        let vectors: Option<Arc<[RowVector]>> = copies.then(|| vectors.into());
        if whole {
            let greatest = versions.values().map(|&(v, _)| v).max().unwrap_or(-1);
            let entry = KeptScope { terms: terms.clone(), vectors: vectors.clone(), rows: versions, greatest };
            self.kept.put(key, (), Arc::new(entry));
        }
        Ok(ScopeRows { terms, vectors })
    }
}

#[cfg(test)]
mod tests {
    use super::{COPY_BYTES, KeptScope, Lookup, RowVector};
    use std::sync::Arc;

    #[test]
    fn copies_are_asked_for_from_a_scopes_second_search_while_the_cache_has_room() {
        let entry = |vectors: Option<Arc<[RowVector]>>| KeptScope {
            terms: Arc::default(),
            vectors,
            rows: (0..10).map(|i| (format!("e{i}"), (i, i as u32))).collect(),
            greatest: 9,
        };
        let at = |e: Option<KeptScope>| Lookup { key: "k".into(), entry: e.map(Arc::new) };
        assert_eq!(at(None).copies_above(|| usize::MAX), None, "a first search: the server scores");
        assert_eq!(at(Some(entry(None))).copies_above(|| 10 * COPY_BYTES), Some(-1), "a second: every row's");
        assert_eq!(at(Some(entry(None))).copies_above(|| 10 * COPY_BYTES - 1), None, "no room: none");
        let copies: Arc<[RowVector]> = vec![RowVector::Absent; 10].into();
        assert_eq!(at(Some(entry(Some(copies)))).copies_above(|| 0), Some(9), "kept with copies: rows above");
    }
    use crate::exact::halfvec_bound;
    use pgvector::HalfVector;

    #[test]
    fn a_copy_scores_within_the_bound_of_the_f32_score() {
        let dim = 768;
        let v: Vec<f32> = (0..dim).map(|i| ((i * 37 % 101) as f32 - 50.0) / 97.0).collect();
        let q: Vec<f32> = (0..dim).map(|i| ((i * 53 % 89) as f32 - 44.0) / 61.0).collect();
        let norm = v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        let row = RowVector::of(4 | 2, Some(HalfVector::from_f32_slice(&v)), Some(norm));
        let mut widened = Vec::new();
        let (ip, n) = row.score(&q, &mut widened).expect("a copy of the query's dimension");
        let exact: f64 = v.iter().zip(&q).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
        let q_norm = q.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        assert_eq!(n, norm);
        assert!((ip + exact).abs() <= halfvec_bound(q_norm, norm, dim), "{ip} against −{exact}");
        assert!((ip + exact).abs() > 0.0, "an f16 copy, not the f32 vector");
        // Another dimension's copy, no vector, a vector only the server holds: no score here.
        assert_eq!(row.score(&q[..16], &mut widened), None);
        assert_eq!(RowVector::of(4 | 2, None, None), RowVector::Absent);
        assert_eq!(RowVector::of(4 | 1, None, None), RowVector::Server);
        assert_eq!(RowVector::Absent.score(&q, &mut widened), None);
    }
}
