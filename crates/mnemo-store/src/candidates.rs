//! A SQLite search's candidates loaded: the events either signal found, each row read once (by
//! the rowid the search saw, or taken from what an earlier hop or the wait for the query vector
//! read), the cosine of a BM25-only hit filled in, the best turn cosine of those
//! `turns::scored` picks.

use crate::backend;
use crate::rows::{EVENT_COLS, event_from_row};
use mnemo_core::StoreError;
use mnemo_core::embed::dot_le_bytes;
use mnemo_core::model::*;
use rusqlite::{Connection, OptionalExtension};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Event id → rowid, for the events a search has seen: a row read by rowid skips the id's
/// index, whose leaves are spread over the whole file (ids are random), and lands in the
/// user's clustered rows (the event's, its vector's).
pub(crate) type RowIds = HashMap<String, i64>;

/// A kept scope's events as its searches read them, decoded: the next search of the scope takes
/// them from here instead of reading and decoding their rows again (a candidate row read was
/// ~a third of a repeated search). Valid while the scope is — its stamps move on any change to an
/// event's row (schema v18) — but for hit counts, which change on every search that returns an
/// event and move no stamp: counting hits forgets the events counted
/// ([`crate::scope_cache::ScopeCache::hits_counted`]), and a row read in a snapshot older than a
/// count is not kept after it ([`Rows::epoch`]).
///
/// At most `cap` bytes: a scope's searches read a fraction of its events, and a scope made too
/// large to keep would lose its terms too.
pub(crate) struct Decoded {
    events: Mutex<HashMap<String, Event>>,
    bytes: AtomicUsize,
    cap: usize,
}

impl Decoded {
    pub(crate) fn new(cap: usize) -> Self {
        Self { events: Mutex::default(), bytes: AtomicUsize::new(0), cap }
    }

    fn get(&self, id: &str) -> Option<Event> {
        self.events.lock().expect("decoded events").get(id).cloned()
    }

    /// Keeps `event`, read in a snapshot begun after the hit clock read `epoch`, unless hits were
    /// counted since.
    fn keep(&self, event: &Event, epoch: u64, hits: &AtomicU64) {
        let mut events = self.events.lock().expect("decoded events");
        // Under the lock: a count's forgetting (after its clock moved) waits for this insert.
        let bytes = event_bytes(event);
        if hits.load(Ordering::SeqCst) != epoch
            || events.contains_key(&event.id)
            || self.bytes.load(Ordering::Relaxed) + bytes > self.cap
        {
            return;
        }
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        events.insert(event.id.clone(), event.clone());
    }

    /// Forgets the events whose hits were counted.
    pub(crate) fn forget(&self, ids: &[String]) {
        let mut events = self.events.lock().expect("decoded events");
        for id in ids {
            if let Some(e) = events.remove(id) {
                self.bytes.fetch_sub(event_bytes(&e), Ordering::Relaxed);
            }
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// About the memory an event holds: its strings and their map's overhead.
fn event_bytes(e: &Event) -> usize {
    let info: usize = e.memory_info.iter().map(|(k, v)| k.len() + v.as_str().map_or(32, str::len) + 64).sum();
    let ids: usize = e.user_id.iter().chain(&e.assistant_id).map(|s| s.len() + 24).sum();
    std::mem::size_of::<Event>() + 2 * e.id.len() + info + ids + e.source_message_ids.len() * 8 + 128
}

/// What a search knows of its scope's rows before reading them: their rowids, and a kept
/// scope's decoded events with the hit clock they are checked against.
#[derive(Clone, Copy)]
pub(crate) struct Rows<'a> {
    pub rowids: &'a RowIds,
    pub decoded: Option<&'a Decoded>,
    /// Moves whenever hits are counted (`ScopeCache::hits_counted`).
    pub hits: &'a AtomicU64,
    /// `hits` as read before the read's snapshot began (before its first statement): a count
    /// committed after the snapshot began, whose hits the rows read lack, moved it.
    pub epoch: u64,
}

/// Full-text hits read before the query vector exists (see `search::first_hop`): each event, its
/// vector, and — for those `turns::scored` will pick by BM25 — its turns' vectors.
#[derive(Default)]
pub(crate) struct Early {
    rows: HashMap<String, EarlyRow>,
}

struct EarlyRow {
    event: Event,
    /// The event's vector (`None`: it has none).
    vector: Option<Vec<u8>>,
    /// Its turns' vectors (`None`: it has none, or it is not among those scored).
    turns: Option<Vec<u8>>,
}

impl Early {
    pub(crate) fn read(conn: &Connection, bm25: &HashMap<String, f64>, known: Rows<'_>) -> Result<Self, StoreError> {
        let mut early = Early::default();
        if bm25.is_empty() || crate::schema::has_legacy_vectors(conn)? {
            return Ok(early);
        }
        let mut rows = RowReader::new(conn, Some(known))?;
        let none = HashMap::<String, f32>::new();
        let scored = mnemo_core::turns::scored(&none, bm25);
        for id in bm25.keys() {
            let rowid = known.rowids.get(id).copied();
            let Some(event) = rows.event(id, rowid)? else { continue };
            let vector = rows.vector(id, rowid)?;
            let turns = match scored.contains(id.as_str()) {
                true => rows.turns(id)?,
                false => None,
            };
            early.rows.insert(id.clone(), EarlyRow { event, vector, turns });
        }
        Ok(early)
    }
}

/// The per-event reads of a search's candidates: the event, its vector, its turns' vectors.
/// By rowid where the search saw it (then checked against the id: a background relocation may
/// have moved the event since), else by id; an event a kept scope holds decoded is not read.
pub(crate) struct RowReader<'c> {
    known: Option<Rows<'c>>,
    event_by_id: rusqlite::CachedStatement<'c>,
    event_by_rowid: rusqlite::CachedStatement<'c>,
    vector_by_id: rusqlite::CachedStatement<'c>,
    vector_by_rowid: rusqlite::CachedStatement<'c>,
    turns: rusqlite::CachedStatement<'c>,
}

impl<'c> RowReader<'c> {
    pub(crate) fn new(conn: &'c Connection, known: Option<Rows<'c>>) -> Result<Self, StoreError> {
        let prepare = |sql: &str| conn.prepare_cached(sql).map_err(backend);
        Ok(Self {
            known,
            event_by_id: prepare(&format!("SELECT {EVENT_COLS} FROM events WHERE id=?1"))?,
            event_by_rowid: prepare(&format!("SELECT {EVENT_COLS} FROM events WHERE rowid=?1"))?,
            vector_by_id: prepare(if crate::schema::has_legacy_vectors(conn)? {
                "SELECT vec FROM event_vectors WHERE event_id=?1 UNION ALL SELECT vec FROM event_vectors_legacy WHERE event_id=?1 LIMIT 1"
            } else {
                "SELECT vec FROM event_vectors WHERE event_id=?1"
            })?,
            vector_by_rowid: prepare("SELECT event_id, vec FROM event_vectors WHERE rowid=?1")?,
            turns: prepare("SELECT turns FROM event_turn_vectors WHERE event_id=?1")?,
        })
    }

    pub(crate) fn event(&mut self, id: &str, rowid: Option<i64>) -> Result<Option<Event>, StoreError> {
        let Some(Rows { decoded: Some(decoded), hits, epoch, .. }) = self.known else {
            return self.read_event(id, rowid);
        };
        if let Some(e) = decoded.get(id) {
            return Ok(Some(e));
        }
        let event = self.read_event(id, rowid)?;
        if let Some(e) = &event {
            decoded.keep(e, epoch, hits);
        }
        Ok(event)
    }

    fn read_event(&mut self, id: &str, rowid: Option<i64>) -> Result<Option<Event>, StoreError> {
        if let Some(rowid) = rowid
            && let Some(e) = self.event_by_rowid.query_row([rowid], event_from_row).optional().map_err(backend)?
            && e.id == id
        {
            return Ok(Some(e));
        }
        self.event_by_id.query_row([id], event_from_row).optional().map_err(backend)
    }

    pub(crate) fn vector(&mut self, id: &str, rowid: Option<i64>) -> Result<Option<Vec<u8>>, StoreError> {
        if let Some(rowid) = rowid {
            let mut rows = self.vector_by_rowid.query([rowid]).map_err(backend)?;
            if let Some(r) = rows.next().map_err(backend)?
                && r.get_ref(0).map_err(backend)?.as_str().map_err(backend)? == id
            {
                return r.get(1).map_err(backend);
            }
        }
        self.vector_by_id.query_row([id], |r| r.get(0)).optional().map_err(backend)
    }

    fn turns(&mut self, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.turns.query_row([id], |r| r.get(0)).optional().map_err(backend)
    }
}

/// Events found by either signal, loaded once; the cosine of a BM25-only hit is filled in, and the
/// best turn cosine of those `turns::scored` picks read. A candidate an earlier hop of the same search returned
/// (`known`) is not read again, nor one read `early`.
pub(crate) fn load_candidates(
    conn: &Connection,
    cosine: HashMap<String, f32>,
    bm25: HashMap<String, f64>,
    q: &CandidateQuery,
    known: &[Candidate],
    mut early: Early,
    scope: Rows<'_>,
) -> Result<Vec<Candidate>, StoreError> {
    let known: HashMap<&str, &Candidate> = known.iter().map(|c| (c.event.id.as_str(), c)).collect();
    let ids = mnemo_core::store::candidate_ids(&cosine, &bm25);
    if ids.is_empty() {
        return Ok(vec![]);
    }
    let mut out = Vec::with_capacity(ids.len());
    let mut rows = RowReader::new(conn, Some(scope))?;
    let scored = mnemo_core::turns::scored(&cosine, &bm25);
    for id in ids {
        let seen = known.get(id.as_str());
        // What was read early is moved out, not copied.
        let (pre_event, pre_vector, pre_turns) = match early.rows.remove(&id) {
            Some(EarlyRow { event, vector, turns }) => (Some(event), Some(vector), turns),
            None => (None, None, None),
        };
        let rowid = scope.rowids.get(&id).copied();
        let event = match (seen, pre_event) {
            (Some(c), _) => c.event.clone(),
            (None, Some(e)) => e,
            // A row deleted since an earlier read of the same search (its first hop): gone.
            (None, None) => match rows.event(&id, rowid)? {
                Some(e) => e,
                None => continue,
            },
        };
        let cos = match (cosine.get(&id), &q.vector) {
            (Some(c), _) => Some(*c),
            (None, Some(_)) if seen.is_some_and(|c| c.cosine.is_some()) => seen.and_then(|c| c.cosine),
            (None, Some(qv)) => {
                let read;
                let blob = match &pre_vector {
                    Some(v) => v.as_deref(),
                    None => {
                        read = rows.vector(&id, rowid)?;
                        read.as_deref()
                    }
                };
                blob.filter(|b| b.len() == qv.len() * 4).map(|b| dot_le_bytes(qv, b))
            }
            (None, None) => None,
        };
        let best_turn = match (seen, &q.vector) {
            (Some(c), _) => c.best_turn,
            (None, Some(qv)) if scored.contains(id.as_str()) => {
                let read;
                let blob = match pre_turns.as_deref() {
                    Some(b) => Some(b),
                    None => {
                        read = rows.turns(&id)?;
                        read.as_deref()
                    }
                };
                blob.and_then(|b| mnemo_core::turns::best(b, qv))
            }
            (None, _) => None,
        };
        let b = bm25.get(&id).copied();
        out.push(Candidate { event, cosine: cos, bm25: b, best_turn });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_read_before_hits_were_counted_is_not_kept_after() {
        let (decoded, hits) = (Decoded::new(1 << 20), AtomicU64::new(0));
        let e = Event { id: "e1".into(), hit_count: 0, ..Default::default() };
        let epoch = hits.load(Ordering::SeqCst);
        hits.fetch_add(1, Ordering::SeqCst); // hits counted while the row was being read
        decoded.keep(&e, epoch, &hits);
        assert!(decoded.get("e1").is_none(), "read under an older clock");
        decoded.keep(&e, hits.load(Ordering::SeqCst), &hits);
        assert_eq!(decoded.get("e1"), Some(e.clone()));
        decoded.forget(&["e1".into()]);
        assert_eq!((decoded.get("e1"), decoded.bytes()), (None, 0));
        let small = Decoded::new(event_bytes(&e) - 1);
        small.keep(&e, 1, &hits);
        assert!(small.get("e1").is_none(), "beyond its cap");
    }
}
