//! What a kept scope's searches read of its events' rows, kept with the scope for the next search
//! of it: each event decoded, its vector, its turns' vectors. A repeated search then reads only
//! the rows it has not met — and every commit in between (a server streams turns between nearly
//! all of its reads) has emptied each read connection's page cache, so a row read again is a
//! `pread` again.
//!
//! Valid while the scope is: its stamps move on every change to an event's row (schema v18),
//! its turns' vectors going (set again with its text) and its vector replaced. Not on a first
//! vector or first turns an event gets (a backfill): a vector is kept only once read, turns
//! either way, and a first set of turns comes only to an event that had none — so "none" is not
//! kept. Nor on hit counts, which change on every search that returns an event: counting hits
//! forgets the events counted ([`crate::scope_cache::ScopeCache::hits_counted`]), and a row read
//! in a snapshot older than a count is not kept after it ([`Rows::epoch`]).

use crate::candidates::RowIds;
use mnemo_core::model::Event;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// See the module documentation. At most `cap` bytes (a scope's searches read a fraction of its
/// events), and only what the cache has room for without evicting ([`Rows::room`]): a scope
/// made too large to keep would lose its terms too, and other users' scopes are worth more.
pub(crate) struct Decoded {
    rows: Mutex<HashMap<String, Row>>,
    bytes: AtomicUsize,
    cap: usize,
}

#[derive(Default)]
struct Row {
    event: Option<Event>,
    vector: Option<Vec<u8>>,
    turns: Option<Vec<u8>>,
}

/// What a search knows of its scope's rows before reading them: their rowids, and a kept
/// scope's decoded rows with the hit clock they are checked against.
#[derive(Clone, Copy)]
pub(crate) struct Rows<'a> {
    pub rowids: &'a RowIds,
    pub decoded: Option<&'a Decoded>,
    /// Moves whenever hits are counted (`ScopeCache::hits_counted`).
    pub hits: &'a AtomicU64,
    /// `hits` as read before the read's snapshot began (before its first statement): a count
    /// committed after the snapshot began, whose hits the rows read lack, moved it.
    pub epoch: u64,
    /// Bytes the search may add to the decoded rows: what the cache had room for when it began.
    pub room: usize,
}

impl Decoded {
    pub(crate) fn new(cap: usize) -> Self {
        Self { rows: Mutex::default(), bytes: AtomicUsize::new(0), cap }
    }

    pub(crate) fn event(&self, id: &str) -> Option<Event> {
        self.rows.lock().expect("decoded rows").get(id)?.event.clone()
    }

    pub(crate) fn vector(&self, id: &str) -> Option<Vec<u8>> {
        self.rows.lock().expect("decoded rows").get(id)?.vector.clone()
    }

    pub(crate) fn turns(&self, id: &str) -> Option<Vec<u8>> {
        self.rows.lock().expect("decoded rows").get(id)?.turns.clone()
    }

    /// Keeps `event`, read in a snapshot begun after the hit clock read `epoch`, unless hits were
    /// counted since.
    pub(crate) fn keep_event(&self, event: &Event, epoch: u64, hits: &AtomicU64, room: &mut usize) {
        // Checked under the lock: a count's forgetting (after its clock moved) waits for this.
        self.keep(&event.id, event_bytes(event), room, |row| {
            let fresh = hits.load(Ordering::SeqCst) == epoch && row.event.is_none();
            fresh.then(|| row.event = Some(event.clone())).is_some()
        });
    }

    /// Keeps an event's vector (hit counts do not change it).
    pub(crate) fn keep_vector(&self, id: &str, vector: &[u8], room: &mut usize) {
        self.keep(id, vector.len(), room, |row| {
            row.vector.is_none().then(|| row.vector = Some(vector.to_vec())).is_some()
        });
    }

    /// Keeps an event's turns' vectors.
    pub(crate) fn keep_turns(&self, id: &str, turns: &[u8], room: &mut usize) {
        self.keep(id, turns.len(), room, |row| row.turns.is_none().then(|| row.turns = Some(turns.to_vec())).is_some());
    }

    /// Adds `bytes` to `id`'s row by `add` (which answers whether it added) if the cap and the
    /// search's `room` allow (taken from it).
    fn keep(&self, id: &str, bytes: usize, room: &mut usize, add: impl FnOnce(&mut Row) -> bool) {
        let mut rows = self.rows.lock().expect("decoded rows");
        let bytes = bytes + if rows.contains_key(id) { 0 } else { ROW_BYTES + 2 * id.len() };
        if bytes > *room || self.bytes.load(Ordering::Relaxed) + bytes > self.cap {
            return;
        }
        let row = rows.entry(id.to_string()).or_default();
        if add(row) {
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
            *room -= bytes;
        } else if row.event.is_none() && row.vector.is_none() && row.turns.is_none() {
            rows.remove(id);
        }
    }

    /// Forgets the events whose hits were counted (their vectors stay).
    pub(crate) fn forget(&self, ids: &[String]) {
        let mut rows = self.rows.lock().expect("decoded rows");
        for id in ids {
            if let Some(e) = rows.get_mut(id).and_then(|r| r.event.take()) {
                self.bytes.fetch_sub(event_bytes(&e), Ordering::Relaxed);
            }
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// A row's own memory beside what it holds, and its key's map entry.
const ROW_BYTES: usize = std::mem::size_of::<Row>() + 64;

/// About the memory an event holds: its strings and their map's overhead.
fn event_bytes(e: &Event) -> usize {
    let info: usize = e.memory_info.iter().map(|(k, v)| k.len() + v.as_str().map_or(32, str::len) + 64).sum();
    let ids: usize = e.user_id.iter().chain(&e.assistant_id).map(|s| s.len() + 24).sum();
    std::mem::size_of::<Event>() + e.id.len() + info + ids + e.source_message_ids.len() * 8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_read_before_hits_were_counted_is_not_kept_after() {
        let (decoded, hits, room) = (Decoded::new(1 << 20), AtomicU64::new(0), &mut (1 << 20));
        let e = Event { id: "e1".into(), ..Default::default() };
        let epoch = hits.load(Ordering::SeqCst);
        hits.fetch_add(1, Ordering::SeqCst); // hits counted while the row was being read
        decoded.keep_event(&e, epoch, &hits, room);
        assert!(decoded.event("e1").is_none(), "read under an older clock");
        decoded.keep_event(&e, hits.load(Ordering::SeqCst), &hits, room);
        decoded.keep_vector("e1", &[1, 2, 3, 4], room);
        assert_eq!(*room, (1 << 20) - decoded.bytes(), "taken from the search's room");
        assert_eq!((decoded.event("e1"), decoded.vector("e1")), (Some(e.clone()), Some(vec![1, 2, 3, 4])));
        let before = decoded.bytes();
        decoded.forget(&["e1".into()]);
        assert_eq!((decoded.event("e1"), decoded.vector("e1")), (None, Some(vec![1, 2, 3, 4])), "its vector stays");
        assert_eq!(decoded.bytes(), before - event_bytes(&e));
        let small = Decoded::new(event_bytes(&e) + ROW_BYTES + 2 * 2 + 3);
        small.keep_event(&e, 1, &hits, room);
        small.keep_turns("e1", &[0; 8], room);
        assert_eq!((small.event("e1").is_some(), small.turns("e1")), (true, None), "beyond its cap");
        decoded.keep_turns("e1", &[0; 8], &mut 7);
        assert_eq!(decoded.turns("e1"), None, "beyond the search's room");
    }
}
