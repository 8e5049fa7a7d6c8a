//! A scoped search's scope kept between searches (`search::Scope`: its events' ids and rowids,
//! their terms tokenised and their f16 vector copies — what a search reads before its query
//! vector exists, ~1 KB of terms and 1.5 KB of copy an event). The user asking again (every
//! `get_context` of a running conversation) finds it here instead of reading and tokenising it.
//!
//! Valid by construction: a scope's subjects (its filter's users and assistants) carry stamps
//! that every change a search could see renews, in the change's own transaction (schema v16's
//! triggers). An entry is used only while the stamps read now are those it was read under; the
//! stamps are read before the scope is, so an entry is never older than its stamps say.
//! Bounded by bytes, least recently used out first.

use crate::backend;
use mnemo_core::StoreError;
use mnemo_core::kept::{Kept, Weighed};
use mnemo_core::model::EventFilter;
use rusqlite::{Connection, params_from_iter};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// What a scope's subjects' stamps were when it was read: the greatest and how many there are.
/// Any change renews one stamp with a value above every other (the greatest grows); a forgotten
/// subject's row goes (the count falls) — either way the stamp differs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Stamp {
    greatest: Option<i64>,
    count: i64,
}

/// Scopes kept under the stamps they were read under (`mnemo_core::kept`), and the clock of
/// counted hits their decoded events are checked against (`candidates::Decoded`).
pub(crate) struct ScopeCache<V>(Kept<Stamp, V>, AtomicU64);

impl<V: Weighed> ScopeCache<V> {
    /// At most `mib` MiB of scopes (0: off).
    pub(crate) fn new(mib: usize) -> Self {
        Self(Kept::new(mib), AtomicU64::new(0))
    }

    /// Moves on every count of hits, before the events counted are forgotten.
    pub(crate) fn hits(&self) -> &AtomicU64 {
        &self.1
    }

    /// Each scope kept (the cache is locked meanwhile).
    pub(crate) fn each(&self, f: impl FnMut(&V)) {
        self.0.each(f)
    }

    /// The cache key of a filter's scope and its subjects' stamp, or `None` when the filter is
    /// not scoped by a user or an assistant (nothing stamps it) or the cache is off.
    pub(crate) fn stamp(
        &self,
        conn: &Connection,
        where_sql: &str,
        args: &[rusqlite::types::Value],
        f: &EventFilter,
    ) -> Result<Option<(String, Stamp)>, StoreError> {
        if self.0.is_off() || (f.user_id.is_empty() && f.assistant_id.is_empty()) {
            return Ok(None);
        }
        // ?1 is the collection; the subjects follow.
        let mut a: Vec<rusqlite::types::Value> = vec![args[0].clone()];
        let mut marks = |kind: &str, ids: &[String]| {
            let m: Vec<String> = ids
                .iter()
                .map(|id| {
                    a.push(rusqlite::types::Value::Text(id.clone()));
                    format!("?{}", a.len())
                })
                .collect();
            format!("(kind = '{kind}' AND subject_id IN ({}))", if m.is_empty() { "NULL".into() } else { m.join(",") })
        };
        let (users, assistants) = (marks("u", &f.user_id), marks("a", &f.assistant_id));
        let sql = format!(
            "SELECT max(version), count(*) FROM scope_versions WHERE collection_id = ?1 AND ({users} OR {assistants})"
        );
        let stamp = conn
            .prepare_cached(&sql)
            .map_err(backend)?
            .query_row(params_from_iter(a.iter()), |r| Ok(Stamp { greatest: r.get(0)?, count: r.get(1)? }))
            .map_err(backend)?;
        Ok(Some((format!("{where_sql}\u{1f}{args:?}"), stamp)))
    }

    /// The scope kept under `key`, if it was read under `stamp` (counted as a hit or a miss).
    pub(crate) fn get(&self, key: &str, stamp: Stamp) -> Option<Arc<V>> {
        let found = self.0.get(key).and_then(|(s, scope)| (s == stamp).then_some(scope));
        self.0.count(found.is_some());
        found
    }

    /// Keeps `scope`, read under `stamp` (an entry older than it is replaced), and makes room.
    pub(crate) fn put(&self, key: String, stamp: Stamp, scope: Arc<V>) {
        self.0.put(key, stamp, scope)
    }

    /// The entry's size again, once its copies were added (they are read after it is kept).
    pub(crate) fn resize(&self, key: &str, scope: &Arc<V>) {
        self.0.resize(key, scope)
    }

    /// Searches answered from a kept scope and those that read theirs, since start; bytes held.
    pub(crate) fn counts(&self) -> (u64, u64, usize) {
        self.0.counts()
    }
}

#[cfg(test)]
mod tests;
