//! A small scope's terms kept between searches on this replica: a user's events' terms
//! tokenised (`ScopeTerms`), ~1 KB of text an event that a search otherwise ships from the
//! server and tokenises again, every time — the larger part of its work before the vector.
//!
//! Valid by construction, row by row: each user-document row carries a version (schema v11:
//! the next value of one sequence at every write of its copy), and a search's scope statement
//! returns every row's version with the terms of only those rows whose version is above the
//! greatest this replica kept. A row kept under the version the snapshot shows is the same row;
//! any other row's terms are read (sent, or asked for by id). Versions are handed out in one
//! order and committed in another, so a row at or below the greatest may still be new to the
//! entry: it is asked for, never assumed. What a snapshot shows is all a search uses, so replicas
//! need no signal from each other, and a write pays one sequence value.

use crate::sql::query_all;
use deadpool_postgres::GenericClient;
use mnemo_core::StoreError;
use mnemo_core::kept::{Kept, Weighed};
use mnemo_core::model::{CollectionId, EventFilter};
use mnemo_core::text::ScopeTerms;
use std::collections::HashMap;
use std::sync::Arc;

/// How this replica searches small scopes: up to `exact` events exactly, their terms kept.
pub(crate) struct Scopes {
    pub exact: usize,
    pub kept: Kept<(), KeptTerms>,
}

/// A scope's terms as a search read them, with each event's row version and place.
pub(crate) struct KeptTerms {
    terms: Arc<ScopeTerms>,
    /// Event id → (its row's version, its document's number in `terms`).
    rows: HashMap<String, (i64, u32)>,
    /// The greatest version among `rows`: a scope statement sends the terms of rows above it.
    greatest: i64,
}

impl Weighed for KeptTerms {
    fn bytes(&self) -> usize {
        self.terms.heap_bytes() + self.rows.keys().map(|id| id.len() + 48).sum::<usize>()
    }
}

/// One row of a scope statement: the event, its row's version, and its terms when they were sent
/// (`Some(None)`: sent, and it has none).
pub(crate) struct Row {
    pub id: String,
    pub version: i64,
    pub terms: Option<Option<String>>,
}

/// Where a filter's scope is kept, and what was kept there when its search began.
pub(crate) struct Lookup {
    key: String,
    entry: Option<Arc<KeptTerms>>,
}

impl Lookup {
    /// The greatest version kept (−1: nothing, so a scope statement sends every row's terms).
    pub(crate) fn greatest(&self) -> i64 {
        self.entry.as_ref().map_or(-1, |k| k.greatest)
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

    /// The scope's terms from a statement's `rows` (in its order), asked with `at`'s greatest
    /// version: a row `at`'s entry holds at that version is copied from it, one sent is
    /// tokenised, any other is read by id (`users`' rows). Kept for the next search; counted a
    /// hit when no row's text was read.
    pub(crate) async fn terms(
        &self,
        c: &impl GenericClient,
        cid: CollectionId,
        users: &[String],
        at: Lookup,
        rows: Vec<Row>,
    ) -> Result<Arc<ScopeTerms>, StoreError> {
        let Lookup { key, entry: kept } = at;
        let held = |r: &Row| -> Option<u32> {
            let k = kept.as_ref()?;
            k.rows.get(&r.id).and_then(|&(v, doc)| (v == r.version).then_some(doc))
        };
        let unknown: Vec<String> =
            rows.iter().filter(|r| r.terms.is_none() && held(r).is_none()).map(|r| r.id.clone()).collect();
        let hit = kept.is_some() && unknown.is_empty() && rows.iter().all(|r| r.terms.is_none());
        self.kept.count(hit);
        if let Some(k) = &kept
            && hit
            && rows.len() == k.terms.len()
        {
            return Ok(k.terms.clone());
        }
        let mut read: HashMap<String, (i64, Option<String>)> = HashMap::new();
        if !unknown.is_empty() {
            // Read now, a newer snapshot: a row changed since carries its new version.
            for r in query_all(
                c,
                "SELECT DISTINCT ON (s.event_id) s.event_id, coalesce(s.d_version, 0),
                        CASE WHEN s.d_state & 1 = 1 THEN s.d_terms ELSE (SELECT e.terms FROM events e WHERE e.id = s.event_id) END
                 FROM event_subjects s
                 WHERE s.collection_id = $1 AND s.kind = 'u' AND s.subject_id = ANY($2) AND s.event_id = ANY($3)",
                &[&cid, &users, &unknown],
            )
            .await?
            {
                read.insert(r.get(0), (r.get(1), r.get(2)));
            }
        }
        let mut terms = ScopeTerms::default();
        let mut versions = HashMap::with_capacity(rows.len());
        let mut whole = true;
        for r in rows {
            let doc = terms.len() as u32;
            let from = held(&r);
            let version = match (r.terms, from) {
                (Some(sent), _) => {
                    terms.push(r.id.clone(), sent.as_deref());
                    r.version
                }
                (None, Some(from)) => {
                    terms.push_copied(&kept.as_ref().expect("held").terms, from as usize);
                    r.version
                }
                (None, None) => match read.remove(&r.id) {
                    Some((version, t)) => {
                        terms.push(r.id.clone(), t.as_deref());
                        version
                    }
                    // Gone since the scope was read: no terms, and nothing to keep.
                    None => {
                        terms.push(r.id.clone(), None);
                        whole = false;
                        continue;
                    }
                },
            };
            versions.insert(r.id, (version, doc));
        }
        let terms = Arc::new(terms);
        if whole {
            let greatest = versions.values().map(|&(v, _)| v).max().unwrap_or(-1);
            self.kept.put(key, (), Arc::new(KeptTerms { terms: terms.clone(), rows: versions, greatest }));
        }
        Ok(terms)
    }
}
