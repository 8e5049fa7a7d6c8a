//! Events: rows, vectors and terms (the BM25 statistics kept in the same transaction), CRUD, hits,
//! re-index; candidates for search are in `search`.

use crate::rows::{EVENT_COLS, event_from_row, json, vec_to_blob};
use crate::{SqliteStore, backend};
use mnemo_core::StoreError;
use mnemo_core::model::*;
use mnemo_core::store::{NextTerms, PendingVector, StoreResult, TwoHops};
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub(crate) fn event_by_id(conn: &Connection, cid: CollectionId, id: &str) -> StoreResult<Option<Event>> {
    conn.query_row(
        &format!("SELECT {EVENT_COLS} FROM events WHERE collection_id=?1 AND id=?2"),
        params![cid, id],
        event_from_row,
    )
    .optional()
    .map_err(backend)
}

/// Bits of a clustered rowid below the subject's bucket: a bucket holds 2^40 events.
const BUCKET_SHIFT: u32 = 40;
/// Buckets 1 ..= 2^22 − 1 (bucket 0 holds the rowids of events written before schema v11).
const BUCKETS: u64 = (1 << 22) - 1;
/// The first rowid of bucket 1: rows below it were written before schema v11 and are moved into
/// their subject's bucket in the background ([`relocate_legacy`]).
pub(crate) const FIRST_CLUSTERED: i64 = 1 << BUCKET_SHIFT;
/// Vectors of events written before schema v11, keyed by event id, until [`relocate_legacy`]
/// has moved them all into `event_vectors` (then the table is dropped).
pub(crate) const LEGACY_VECTORS: &str = "event_vectors_legacy";

/// Whether `event_vectors_legacy` still exists (a data directory upgraded from schema v10 whose
/// relocation has not finished). A look at the schema table: microseconds.
pub(crate) fn has_legacy_vectors(conn: &Connection) -> StoreResult<bool> {
    table_exists(conn, LEGACY_VECTORS)
}

/// The tables vectors are in: `event_vectors`, and the legacy one while it exists.
pub(crate) fn vector_tables(conn: &Connection) -> StoreResult<&'static [&'static str]> {
    Ok(if has_legacy_vectors(conn)? { &["event_vectors", LEGACY_VECTORS] } else { &["event_vectors"] })
}

/// Removes an event's vector from the legacy table, if that table is still there: the event's
/// vector is being written to `event_vectors` or the event is going.
fn forget_legacy_vector(conn: &Connection, id: &str) -> StoreResult<()> {
    if has_legacy_vectors(conn)? {
        conn.prepare_cached("DELETE FROM event_vectors_legacy WHERE event_id=?1")
            .map_err(backend)?
            .execute([id])
            .map_err(backend)?;
    }
    Ok(())
}

/// The subject an event is clustered by: its first user, else its first assistant.
fn cluster_subject<'a>(user_ids: &'a [String], assistant_ids: &'a [String]) -> &'a str {
    user_ids.first().or(assistant_ids.first()).map(String::as_str).unwrap_or("")
}

/// The rowid for a new event of this collection and subject (its first user, else its first
/// assistant): the next free one in the subject's bucket, so one subject's events are contiguous
/// in `events` and `event_vectors` and a scoped search reads a few pages instead of one per event.
/// Subjects whose buckets collide share a range (interleaved, still correct).
pub(crate) fn clustered_rowid(conn: &Connection, cid: CollectionId, subject: &str) -> StoreResult<i64> {
    // FNV-1a: stable across builds and versions, so a subject keeps its bucket after an upgrade.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in cid.to_le_bytes().iter().chain(subject.as_bytes()) {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    let lo = ((1 + h % BUCKETS) << BUCKET_SHIFT) as i64;
    let hi = lo + (1i64 << BUCKET_SHIFT) - 1;
    let last: Option<i64> = conn
        .prepare_cached("SELECT rowid FROM events WHERE rowid BETWEEN ?1 AND ?2 ORDER BY rowid DESC LIMIT 1")
        .map_err(backend)?
        .query_row([lo, hi], |r| r.get(0))
        .optional()
        .map_err(backend)?;
    match last {
        None => Ok(lo),
        Some(r) if r < hi => Ok(r + 1),
        // 2^40 events of one bucket: SQLite picks a free rowid itself.
        Some(_) => conn.query_row("SELECT max(rowid) + 1 FROM events", [], |r| r.get(0)).map_err(backend),
    }
}

/// Moves up to `limit` events written before schema v11 (rowids below [`FIRST_CLUSTERED`], in
/// write order) to the end of their subject's bucket, with everything keyed by their rowid: the
/// full-text row, the vector (out of the legacy table if it is still there), the subject rows'
/// `event_rowid`. Ids, contents and BM25 statistics do not change and no webhook fires. Returns how
/// many moved; 0 means none is left, and the legacy vector table has been dropped.
pub(crate) fn relocate_legacy(conn: &Connection, limit: usize) -> StoreResult<usize> {
    type Row = (i64, String, CollectionId, String, String, Option<String>);
    let rows: Vec<Row> = conn
        .prepare_cached(
            "SELECT rowid, id, collection_id, user_ids, assistant_ids, terms FROM events WHERE rowid < ?1 ORDER BY rowid LIMIT ?2",
        )
        .map_err(backend)?
        .query_map(params![FIRST_CLUSTERED, limit as i64], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
        })
        .map_err(backend)?
        .collect::<Result<_, _>>()
        .map_err(backend)?;
    let legacy = has_legacy_vectors(conn)?;
    if rows.is_empty() {
        if legacy {
            conn.execute_batch("DROP TABLE event_vectors_legacy").map_err(backend)?;
        }
        return Ok(0);
    }
    let ids = |j: &str| serde_json::from_str::<Vec<String>>(j).unwrap_or_default();
    for (old, id, cid, user_ids, assistant_ids, terms) in &rows {
        let new = clustered_rowid(conn, *cid, cluster_subject(&ids(user_ids), &ids(assistant_ids)))?;
        let run = |sql: &str, p: &[&dyn rusqlite::ToSql]| -> StoreResult<usize> {
            conn.prepare_cached(sql).map_err(backend)?.execute(p).map_err(backend)
        };
        run("UPDATE events SET rowid=?2 WHERE rowid=?1", &[old, &new])?;
        run("DELETE FROM event_fts WHERE rowid=?1", &[old])?;
        if let Some(t) = terms {
            run("INSERT INTO event_fts(rowid, terms) VALUES (?1, ?2)", &[&new, t])?;
        }
        // A vector already re-keyed (an upgrade by the first v11 release, or written since) moves
        // with its event; one in the legacy table moves over, unless a newer one exists.
        run("UPDATE event_vectors SET rowid=?2 WHERE rowid=?1 AND event_id=?3", &[old, &new, id])?;
        if legacy {
            run(
                "INSERT OR IGNORE INTO event_vectors(rowid, event_id, collection_id, vec)
                 SELECT ?2, event_id, collection_id, vec FROM event_vectors_legacy WHERE event_id=?1",
                &[id, &new],
            )?;
            run("DELETE FROM event_vectors_legacy WHERE event_id=?1", &[id])?;
        }
        run("UPDATE event_subjects SET event_rowid=?2 WHERE event_id=?1", &[id, &new])?;
    }
    Ok(rows.len())
}

/// The background relocation of a data directory upgraded from schema v10: whether it is still
/// pending, its adaptive batch size, and its progress for the log.
pub(crate) struct Relocation {
    pending: AtomicBool,
    batch: AtomicUsize,
    moved: AtomicU64,
    started: Mutex<Option<Instant>>,
}

/// A relocation batch aims at this much of the writer's time (it shares a group commit with
/// foreground writes, which wait for it).
const RELOCATE_BATCH_TARGET: Duration = Duration::from_millis(10);

impl Relocation {
    pub(crate) fn new(conn: &Connection) -> StoreResult<Self> {
        let old_rows: bool = conn
            .query_row("SELECT EXISTS (SELECT 1 FROM events WHERE rowid < ?1)", [FIRST_CLUSTERED], |r| r.get(0))
            .map_err(backend)?;
        let pending = old_rows || has_legacy_vectors(conn)?;
        if pending {
            tracing::info!(
                "events written before schema v11 are moved next to their users' in the background; reads find them meanwhile"
            );
        }
        Ok(Self {
            pending: AtomicBool::new(pending),
            batch: AtomicUsize::new(64),
            moved: AtomicU64::new(0),
            started: Mutex::new(None),
        })
    }

    pub(crate) fn pending(&self) -> bool {
        self.pending.load(Ordering::Relaxed)
    }
}

/// The background copy of vectors written before schema v12 into `event_vectors_f16`: whether it
/// is still pending, and its progress for the log.
pub(crate) struct F16Fill {
    pending: AtomicBool,
    copied: AtomicU64,
}

/// Vectors copied per batch: ~5 MB read, ~2 MB written, a few milliseconds of the writer.
const F16_FILL_BATCH: usize = 1_000;

impl F16Fill {
    pub(crate) fn new(conn: &Connection) -> StoreResult<Self> {
        let pending = table_exists(conn, F16_FILL)?;
        if pending {
            tracing::info!(
                "vectors written before schema v12 get their half-precision copy in the background; searches read their f32 rows meanwhile"
            );
        }
        Ok(Self { pending: AtomicBool::new(pending), copied: AtomicU64::new(0) })
    }

    pub(crate) fn pending(&self) -> bool {
        self.pending.load(Ordering::Relaxed)
    }
}

impl SqliteStore {
    /// One batch of the f16 copy's fill (after the relocation: it moves vectors); `Ok(true)` while
    /// more is left.
    pub(crate) async fn fill_f16_step(&self) -> StoreResult<bool> {
        let f = &self.f16_fill;
        if !f.pending() {
            return Ok(false);
        }
        let n = self.writer.write(|conn| fill_f16(conn, F16_FILL_BATCH)).await?;
        let before = f.copied.fetch_add(n as u64, Ordering::Relaxed);
        if n == 0 {
            f.pending.store(false, Ordering::Relaxed);
            tracing::info!(vectors = before, "vectors written before schema v12 have their half-precision copy");
            return Ok(false);
        }
        if (before + n as u64) / 100_000 > before / 100_000 {
            tracing::info!(vectors = before + n as u64, "copying vectors written before schema v12 to half precision");
        }
        Ok(true)
    }

    /// One batch of the relocation; `Ok(true)` while more is left.
    pub(crate) async fn relocate_step(&self) -> StoreResult<bool> {
        let r = &self.relocation;
        if !r.pending() {
            return Ok(false);
        }
        let started = *r.started.lock().expect("relocation clock").get_or_insert_with(Instant::now);
        let limit = r.batch.load(Ordering::Relaxed);
        let t = Instant::now();
        let moved = self.writer.write(move |conn| relocate_legacy(conn, limit)).await?;
        let took = t.elapsed();
        // Batches of about RELOCATE_BATCH_TARGET: halve when slower, double when much faster.
        let next = if took > RELOCATE_BATCH_TARGET * 2 {
            limit / 2
        } else if took < RELOCATE_BATCH_TARGET / 2 {
            limit * 2
        } else {
            limit
        };
        r.batch.store(next.clamp(16, 8192), Ordering::Relaxed);
        let before = r.moved.fetch_add(moved as u64, Ordering::Relaxed);
        let total = before + moved as u64;
        if moved == 0 {
            r.pending.store(false, Ordering::Relaxed);
            tracing::info!(
                events = total,
                seconds = started.elapsed().as_secs(),
                "events written before schema v11 are in place"
            );
            return Ok(false);
        }
        if total / 100_000 > before / 100_000 {
            tracing::info!(events = total, "moving events written before schema v11 next to their users'");
        }
        Ok(true)
    }
}

pub(crate) fn insert_event_row(conn: &Connection, e: &NewEvent) -> StoreResult<String> {
    let id = new_id("evt");
    let rowid = clustered_rowid(conn, e.collection_id, cluster_subject(&e.user_id, &e.assistant_id))?;
    conn.prepare_cached(
        "INSERT INTO events(rowid, id, collection_id, memory_type, user_ids, assistant_ids, group_id, session_id, conversation_id, scope,
                            class, status, time, memory_info, source_message_ids, created_at, updated_at, expires_at)
         VALUES (?16,?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,'active',?11,?12,?13,?14,?14,?15)",
    )
    .map_err(backend)?
    .execute(params![
        id,
        e.collection_id,
        e.memory_type,
        json(&e.user_id),
        json(&e.assistant_id),
        e.group_id,
        e.session_id,
        e.conversation_id,
        e.scope,
        e.class,
        e.time,
        json(&e.memory_info),
        json(&e.source_message_ids),
        e.now,
        e.expires_at,
        rowid
    ])
    .map_err(backend)?;
    index_event(conn, e.collection_id, &id, rowid, &e.memory_info, e.embedding.as_deref(), e.turn_vectors.as_deref())?;
    let mut subj = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO event_subjects(collection_id, kind, subject_id, event_id, event_rowid) VALUES (?1,?2,?3,?4,?5)",
        )
        .map_err(backend)?;
    for u in &e.user_id {
        subj.execute(params![e.collection_id, "u", u, id, rowid]).map_err(backend)?;
    }
    for a in &e.assistant_id {
        subj.execute(params![e.collection_id, "a", a, id, rowid]).map_err(backend)?;
    }
    Ok(id)
}

/// (Re)writes an event's full-text terms and, if given, its vector and its turns' vectors (the
/// turns' earlier vectors go either way: they were of the earlier text).
pub(crate) fn index_event(
    conn: &Connection,
    cid: CollectionId,
    id: &str,
    rowid: i64,
    memory_info: &serde_json::Map<String, serde_json::Value>,
    vector: Option<&[f32]>,
    turns: Option<&[Vec<f32>]>,
) -> StoreResult<()> {
    let terms = mnemo_core::text::search_tokens(&event_search_text(memory_info)).join(" ");
    conn.prepare_cached("DELETE FROM event_fts WHERE rowid=?1").map_err(backend)?.execute([rowid]).map_err(backend)?;
    conn.prepare_cached("INSERT INTO event_fts(rowid, terms) VALUES (?1, ?2)")
        .map_err(backend)?
        .execute(params![rowid, terms])
        .map_err(backend)?;
    set_terms(conn, cid, rowid, Some(&terms))?;
    if let Some(v) = vector {
        // The vector's rowid is its event's: a subject's vectors are as contiguous as its events.
        conn.prepare_cached(
            "INSERT OR REPLACE INTO event_vectors(rowid, event_id, collection_id, vec) VALUES (?4,?1,?2,?3)",
        )
        .map_err(backend)?
        .execute(params![id, cid, vec_to_blob(v), rowid])
        .map_err(backend)?;
        conn.prepare_cached("INSERT OR REPLACE INTO event_vectors_f16(rowid, h) VALUES (?1, ?2)")
            .map_err(backend)?
            .execute(params![rowid, f16_blob(v)])
            .map_err(backend)?;
        forget_legacy_vector(conn, id)?;
    }
    // The turns' vectors were of the earlier text; new ones only beside a vector.
    set_turns(conn, id, vector.and(turns))
}

/// Replaces an event's turn vectors (`mnemo_core::turns`) with these, or drops them.
fn set_turns(conn: &Connection, id: &str, turns: Option<&[Vec<f32>]>) -> StoreResult<()> {
    conn.prepare_cached("DELETE FROM event_turn_vectors WHERE event_id=?1")
        .map_err(backend)?
        .execute([id])
        .map_err(backend)?;
    if let Some(blob) = turns.and_then(mnemo_core::turns::encode) {
        conn.prepare_cached("INSERT INTO event_turn_vectors(event_id, turns) VALUES (?1, ?2)")
            .map_err(backend)?
            .execute(params![id, blob])
            .map_err(backend)?;
    }
    Ok(())
}

/// The next page of [`SqliteStore::events_without_turns`] (`?1` the id to go below, `?2` the page
/// size): down the primary key, every collection in one pass — a page costs its own rows, however
/// far the backfill has come. Events whose vectors still wait in a v11 upgrade's legacy table are
/// passed over (their turns would have no vector row to go with).
pub(crate) fn events_without_turns_sql(below: bool) -> String {
    let below = if below { "id < ?1 AND" } else { "?1 IS NULL AND" };
    format!(
        "SELECT {EVENT_COLS}, collection_id FROM events e WHERE {below}
         EXISTS (SELECT 1 FROM event_vectors v WHERE v.event_id = e.id)
         AND NOT EXISTS (SELECT 1 FROM event_turn_vectors t WHERE t.event_id = e.id)
         ORDER BY id DESC LIMIT ?2"
    )
}

/// A vector's half-precision copy (little-endian IEEE f16), which orders a scoped search (see
/// `search::CopyRanker`).
pub(crate) fn f16_blob(v: &[f32]) -> Vec<u8> {
    use half::slice::HalfFloatSliceExt;
    let mut h = vec![half::f16::ZERO; v.len()];
    h.convert_from_f32_slice(v);
    h.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The table holding the f16 copy's background fill cursor, while vectors written before schema
/// v12 still lack their copy.
pub(crate) const F16_FILL: &str = "event_vectors_f16_fill";

fn table_exists(conn: &Connection, name: &str) -> StoreResult<bool> {
    conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type='table' AND name=?1)")
        .map_err(backend)?
        .query_row([name], |r| r.get(0))
        .map_err(backend)
}

/// Gives up to `limit` vectors written before schema v12 their f16 copy, in rowid order from the
/// cursor. Returns how many it read; 0 means none is left, and the cursor's table is dropped.
pub(crate) fn fill_f16(conn: &Connection, limit: usize) -> StoreResult<usize> {
    if !table_exists(conn, F16_FILL)? {
        return Ok(0);
    }
    let next: i64 =
        conn.query_row("SELECT next_rowid FROM event_vectors_f16_fill", [], |r| r.get(0)).map_err(backend)?;
    let rows: Vec<(i64, Vec<u8>)> = conn
        .prepare_cached("SELECT rowid, vec FROM event_vectors WHERE rowid >= ?1 ORDER BY rowid LIMIT ?2")
        .map_err(backend)?
        .query_map(params![next, limit as i64], |r| Ok((r.get(0)?, r.get(1)?)))
        .map_err(backend)?
        .collect::<Result<_, _>>()
        .map_err(backend)?;
    let Some(last) = rows.last().map(|(r, _)| *r) else {
        conn.execute_batch("DROP TABLE event_vectors_f16_fill").map_err(backend)?;
        return Ok(0);
    };
    // A copy written since the upgrade is the same vector's: kept.
    let mut put =
        conn.prepare_cached("INSERT OR IGNORE INTO event_vectors_f16(rowid, h) VALUES (?1, ?2)").map_err(backend)?;
    for (rowid, vec) in &rows {
        put.execute(params![rowid, f16_blob(&crate::rows::blob_to_vec(vec))]).map_err(backend)?;
    }
    conn.execute("UPDATE event_vectors_f16_fill SET next_rowid=?1", [last + 1]).map_err(backend)?;
    Ok(rows.len())
}

/// Replaces an event's analysed terms (None: removes them) and keeps the collection's BM25
/// statistics — documents, tokens, and per-token document counts — exact.
pub(crate) fn set_terms(conn: &Connection, cid: CollectionId, rowid: i64, terms: Option<&str>) -> StoreResult<()> {
    use mnemo_core::text::fts_tokens;
    use std::collections::HashSet;
    let old: Option<String> = conn
        .prepare_cached("SELECT terms FROM events WHERE rowid=?1")
        .map_err(backend)?
        .query_row([rowid], |r| r.get(0))
        .optional()
        .map_err(backend)?
        .flatten();
    let count = |t: &Option<&str>| -> (i64, HashSet<String>) {
        match t {
            Some(t) => {
                let toks: Vec<String> = fts_tokens(t).collect();
                (toks.len() as i64, toks.into_iter().collect())
            }
            None => (0, HashSet::new()),
        }
    };
    let (old_len, old_set) = count(&old.as_deref());
    let (new_len, new_set) = count(&terms);
    let mut df = conn
        .prepare_cached(
            "INSERT INTO term_stats(collection_id, term, df) VALUES (?1, ?2, ?3)
             ON CONFLICT(collection_id, term) DO UPDATE SET df = df + excluded.df",
        )
        .map_err(backend)?;
    for t in old_set.difference(&new_set) {
        df.execute(params![cid, t, -1]).map_err(backend)?;
    }
    for t in new_set.difference(&old_set) {
        df.execute(params![cid, t, 1]).map_err(backend)?;
    }
    let docs = i64::from(terms.is_some()) - i64::from(old.is_some());
    conn.prepare_cached(
        "INSERT INTO collection_stats(collection_id, docs, tokens) VALUES (?1, ?2, ?3)
         ON CONFLICT(collection_id) DO UPDATE SET docs = docs + excluded.docs, tokens = tokens + excluded.tokens",
    )
    .map_err(backend)?
    .execute(params![cid, docs, new_len - old_len])
    .map_err(backend)?;
    if terms.is_some() {
        conn.prepare_cached("UPDATE events SET terms=?2 WHERE rowid=?1")
            .map_err(backend)?
            .execute(params![rowid, terms])
            .map_err(backend)?;
    }
    Ok(())
}

/// Indexes the terms of events written before v7 (inside the v7 migration's transaction).
pub(crate) fn backfill_terms(conn: &Connection) -> rusqlite::Result<usize> {
    let rows: Vec<(i64, CollectionId, String)> = conn
        .prepare("SELECT rowid, collection_id, memory_info FROM events WHERE terms IS NULL")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<_, _>>()?;
    for (rowid, cid, info) in &rows {
        let info: serde_json::Map<String, serde_json::Value> = serde_json::from_str(info).unwrap_or_default();
        let terms = mnemo_core::text::search_tokens(&event_search_text(&info)).join(" ");
        set_terms(conn, *cid, *rowid, Some(&terms))
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    }
    Ok(rows.len())
}

/// Removes an event and everything indexed about it.
pub(crate) fn delete_event_row(conn: &Connection, cid: CollectionId, id: &str) -> StoreResult<bool> {
    let rowid: Option<i64> = conn
        .prepare_cached("SELECT rowid FROM events WHERE collection_id=?1 AND id=?2")
        .map_err(backend)?
        .query_row(params![cid, id], |r| r.get(0))
        .optional()
        .map_err(backend)?;
    let Some(rowid) = rowid else { return Ok(false) };
    conn.prepare_cached("DELETE FROM event_fts WHERE rowid=?1").map_err(backend)?.execute([rowid]).map_err(backend)?;
    set_terms(conn, cid, rowid, None)?;
    conn.prepare_cached("DELETE FROM event_vectors WHERE event_id=?1")
        .map_err(backend)?
        .execute([id])
        .map_err(backend)?;
    forget_legacy_vector(conn, id)?;
    conn.prepare_cached("DELETE FROM event_subjects WHERE event_id=?1")
        .map_err(backend)?
        .execute([id])
        .map_err(backend)?;
    conn.prepare_cached("DELETE FROM events WHERE rowid=?1").map_err(backend)?.execute([rowid]).map_err(backend)?;
    Ok(true)
}

/// A subject row's event rowid: `event_rowid`, or — for a row written before schema v11 whose
/// event the background relocation has not reached yet — a look-up by event id (`coalesce`
/// evaluates it only then).
const SUBJECT_ROWID: &str =
    "coalesce(event_rowid, (SELECT l.rowid FROM events l WHERE l.id = event_subjects.event_id))";

/// Builds `WHERE` conditions for an event filter; `?1` is always the collection id.
pub(crate) fn event_filter_sql(cid: CollectionId, f: &EventFilter) -> (String, Vec<SqlValue>) {
    // With a user or assistant filter, the subject index must drive the query (a user's events are
    // few); `+` keeps the planner from scanning the whole collection by `collection_id` instead
    // (measured: 43 ms → under 1 ms at 100k events, see docs/benchmarks.md).
    let mut sql = String::from(if f.user_id.is_empty() && f.assistant_id.is_empty() {
        "collection_id = ?1"
    } else {
        "+collection_id = ?1"
    });
    let mut args: Vec<SqlValue> = vec![SqlValue::Integer(cid)];
    let list = |sql: &mut String, args: &mut Vec<SqlValue>, template: &str, values: &[String]| {
        if values.is_empty() {
            return;
        }
        let mut marks = Vec::with_capacity(values.len());
        for v in values {
            args.push(SqlValue::Text(v.clone()));
            marks.push(format!("?{}", args.len()));
        }
        sql.push_str(" AND ");
        sql.push_str(&template.replace("{}", &marks.join(",")));
    };
    list(
        &mut sql,
        &mut args,
        &format!(
            "rowid IN (SELECT {SUBJECT_ROWID} FROM event_subjects WHERE collection_id=?1 AND kind='u' AND subject_id IN ({{}}))"
        ),
        &f.user_id,
    );
    list(
        &mut sql,
        &mut args,
        &format!(
            "rowid IN (SELECT {SUBJECT_ROWID} FROM event_subjects WHERE collection_id=?1 AND kind='a' AND subject_id IN ({{}}))"
        ),
        &f.assistant_id,
    );
    list(&mut sql, &mut args, "memory_type IN ({})", &f.memory_type);
    list(&mut sql, &mut args, "group_id IN ({})", &f.group_id);
    list(&mut sql, &mut args, "session_id IN ({})", &f.session_id);
    list(&mut sql, &mut args, "conversation_id IN ({})", &f.conversation_id);
    list(&mut sql, &mut args, "scope IN ({})", &f.scope);
    if let Some(t) = f.start_time {
        args.push(SqlValue::Integer(t));
        sql.push_str(&format!(" AND time >= ?{}", args.len()));
    }
    if let Some(t) = f.end_time {
        args.push(SqlValue::Integer(t));
        sql.push_str(&format!(" AND time <= ?{}", args.len()));
    }
    if f.active_only {
        sql.push_str(" AND status = 'active'");
    }
    (sql, args)
}

/// Refreshes an existing event with a near-duplicate's content: text, time (the later one),
/// provenance and vector change; hits, id and creation time stay. Returns false (and changes
/// nothing) if the target is gone or no longer active, so the caller inserts instead.
pub(crate) fn merge_event_row(
    conn: &Connection,
    cid: CollectionId,
    id: &str,
    e: &mnemo_core::extract::ExtractedEvent,
    now: Millis,
) -> StoreResult<bool> {
    let Some(old) = event_by_id(conn, cid, id)? else { return Ok(false) };
    if old.status != "active" {
        return Ok(false);
    }
    let (info, sources) = mnemo_core::extract::merged_content(&old, e);
    let rowid: i64 = conn.query_row("SELECT rowid FROM events WHERE id=?1", [id], |r| r.get(0)).map_err(backend)?;
    index_event(conn, cid, id, rowid, &info, e.embedding.as_deref(), e.turn_vectors.as_deref())?;
    conn.execute(
        "UPDATE events SET memory_info=?3, time=MAX(time, ?4), source_message_ids=?5, updated_at=?6,
             expires_at=CASE WHEN expires_at IS NULL THEN NULL ELSE MAX(expires_at, COALESCE(?7, expires_at)) END
         WHERE collection_id=?1 AND id=?2",
        params![cid, id, json(&info), e.time, json(&sources), now, e.expires_at],
    )
    .map_err(backend)?;
    Ok(true)
}

impl SqliteStore {
    pub(crate) async fn insert_event(&self, e: NewEvent) -> StoreResult<Event> {
        self.writer
            .write(move |conn| {
                let id = insert_event_row(conn, &e)?;
                Ok(e.stored_as(id))
            })
            .await
    }

    pub(crate) async fn insert_events(&self, events: Vec<NewEvent>) -> StoreResult<Vec<Event>> {
        // A batch is one request of hundreds of inserts: alone in its transaction (no SAVEPOINT).
        self.writer
            .write_alone(move |conn| {
                let ids = events.iter().map(|e| insert_event_row(conn, e)).collect::<StoreResult<Vec<_>>>()?;
                Ok(events.into_iter().zip(ids).map(|(e, id)| e.stored_as(id)).collect())
            })
            .await
    }

    pub(crate) async fn get_event(&self, cid: CollectionId, id: &str) -> StoreResult<Option<Event>> {
        let id = id.to_string();
        self.read(move |conn| event_by_id(conn, cid, &id)).await
    }

    pub(crate) async fn update_event(
        &self,
        cid: CollectionId,
        id: &str,
        patch: EventPatch,
        now: Millis,
    ) -> StoreResult<Event> {
        let id = id.to_string();
        self.writer
            .write(move |conn| {
                let mut e = event_by_id(conn, cid, &id)?.ok_or_else(|| StoreError::NotFound(format!("event_id: no event \"{id}\"")))?;
                if let Some(TextVectors { vector, turns }) = patch.apply(&mut e) {
                    let rowid: i64 =
                        conn.query_row("SELECT rowid FROM events WHERE id=?1", [&id], |r| r.get(0)).map_err(backend)?;
                    index_event(conn, cid, &id, rowid, &e.memory_info, vector.as_deref(), turns.as_deref())?;
                }
                conn.execute(
                    "UPDATE events SET memory_info=?3, time=?4, group_id=?5, scope=?6, class=?7, status=?8, updated_at=?9 WHERE collection_id=?1 AND id=?2",
                    params![cid, id, json(&e.memory_info), e.time, e.group_id, e.scope, e.class, e.status, now],
                )
                .map_err(backend)?;
                event_by_id(conn, cid, &id)?.ok_or_else(|| StoreError::backend("updated event vanished"))
            })
            .await
    }

    pub(crate) async fn delete_event(&self, cid: CollectionId, id: &str) -> StoreResult<bool> {
        let id = id.to_string();
        self.writer.write(move |conn| delete_event_row(conn, cid, &id)).await
    }

    pub(crate) async fn batch_delete_events(&self, cid: CollectionId, filter: EventFilter) -> StoreResult<u64> {
        self.writer
            .write_alone(move |conn| {
                let (where_sql, args) = event_filter_sql(cid, &filter);
                // Resolve the ids first: the user/assistant filter reads event_subjects.
                let ids: Vec<String> = {
                    let mut stmt =
                        conn.prepare(&format!("SELECT id FROM events WHERE {where_sql}")).map_err(backend)?;
                    let rows = stmt.query_map(params_from_iter(args.iter()), |r| r.get(0)).map_err(backend)?;
                    rows.collect::<Result<_, _>>().map_err(backend)?
                };
                let mut n = 0;
                for id in &ids {
                    n += delete_event_row(conn, cid, id)? as usize;
                }
                Ok(n as u64)
            })
            .await
    }

    pub(crate) async fn event_after(
        &self,
        cid: CollectionId,
        filter: EventFilter,
        time: Millis,
        id: &str,
    ) -> StoreResult<Option<Event>> {
        let id = id.to_string();
        self.read(move |conn| {
            let (where_sql, mut args) = event_filter_sql(cid, &filter);
            args.push(SqlValue::Integer(time));
            args.push(SqlValue::Text(id));
            let (t, i) = (args.len() - 1, args.len());
            let sql = format!(
                "SELECT {EVENT_COLS} FROM events WHERE {where_sql} AND (time > ?{t} OR (time = ?{t} AND id > ?{i}))
                 ORDER BY time, id LIMIT 1"
            );
            let mut stmt = conn.prepare(&sql).map_err(backend)?;
            stmt.query_row(params_from_iter(args.iter()), event_from_row).optional().map_err(backend)
        })
        .await
    }

    pub(crate) async fn list_events(
        &self,
        cid: CollectionId,
        filter: EventFilter,
        limit: u32,
    ) -> StoreResult<Vec<Event>> {
        self.read(move |conn| {
            let (where_sql, mut args) = event_filter_sql(cid, &filter);
            args.push(SqlValue::Integer(limit as i64));
            let sql = format!(
                "SELECT {EVENT_COLS} FROM events WHERE {where_sql} ORDER BY time DESC, id DESC LIMIT ?{}",
                args.len()
            );
            let mut stmt = conn.prepare(&sql).map_err(backend)?;
            let rows = stmt.query_map(params_from_iter(args.iter()), event_from_row).map_err(backend)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(backend)
        })
        .await
    }

    pub(crate) async fn search_candidates(
        &self,
        cid: CollectionId,
        filter: EventFilter,
        q: CandidateQuery,
    ) -> StoreResult<Vec<Candidate>> {
        self.read(move |conn| crate::search::candidates(conn, cid, &filter, &q)).await
    }

    /// Both hops of a search. The first reads the scope's terms and a small scope's vector
    /// copies on a read connection while the vector is computed on the async side, handed over
    /// through a channel; the second, decided by `then` from the first's candidates, is scored
    /// from the scope the first read (not read again) when it was small enough to keep.
    pub(crate) async fn search_candidates_then(
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
        let read = self.read(move |conn| crate::search::first_hop(conn, cid, &f, &q, move || rx.recv().ok().flatten()));
        let send = async move {
            let _ = tx.send(vector.await);
        };
        let (read, ()) = tokio::join!(read, send);
        let crate::search::FirstHop { vector, found, kept } = read?;
        let first = CandidateQuery { vector: vector.clone(), ..first };
        let second = self.second_hop(cid, filter, &first, &found, kept, then).await?;
        Ok(TwoHops { vector, first: found, second })
    }

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
        let known = found.to_vec();
        Ok(Some(self.read(move |conn| kept.search_again(conn, cid, &second, &known)).await?))
    }

    pub(crate) async fn corpus(&self, cid: CollectionId, tokens: Vec<String>) -> StoreResult<Corpus> {
        self.read(move |conn| crate::search::corpus(conn, cid, &tokens)).await
    }

    pub(crate) async fn record_hits(&self, cid: CollectionId, ids: Vec<String>, now: Millis) -> StoreResult<()> {
        self.writer
            .write(move |conn| {
                let mut stmt = conn
                    .prepare_cached(
                        "UPDATE events SET hit_count=hit_count+1, last_hit_at=?3 WHERE collection_id=?1 AND id=?2",
                    )
                    .map_err(backend)?;
                let mut daily = conn
                    .prepare_cached(
                        "INSERT INTO hits_daily(collection_id, day, user_id, hits)
                         SELECT ?1, ?3, COALESCE(json_extract(user_ids, '$[0]'), ''), 1 FROM events WHERE collection_id=?1 AND id=?2
                         ON CONFLICT(collection_id, day, user_id) DO UPDATE SET hits = hits + 1",
                    )
                    .map_err(backend)?;
                let day = now.div_euclid(86_400_000);
                for id in &ids {
                    stmt.execute(params![cid, id, now]).map_err(backend)?;
                    daily.execute(params![cid, id, day]).map_err(backend)?;
                }
                Ok(())
            })
            .await
    }

    pub(crate) async fn events_missing_vectors(&self, cid: CollectionId, limit: u32) -> StoreResult<Vec<Event>> {
        self.read(move |conn| {
            // Every vector belongs to its event (deleted with it): equal counts, read from two
            // small indexes (~80 ms at 1M), mean none is missing — the pass below over every
            // event took 8.5 s there, at each start. While the legacy table exists (an upgrade
            // underway) the pass decides.
            let legacy_table = has_legacy_vectors(conn)?;
            if !legacy_table {
                let count = |sql: &str| -> StoreResult<i64> {
                    conn.prepare_cached(sql).map_err(backend)?.query_row([cid], |r| r.get(0)).map_err(backend)
                };
                if count("SELECT count(*) FROM events WHERE collection_id=?1")?
                    <= count("SELECT count(*) FROM event_vectors WHERE collection_id=?1")?
                {
                    return Ok(Vec::new());
                }
            }
            let legacy = if legacy_table {
                " AND id NOT IN (SELECT event_id FROM event_vectors_legacy WHERE collection_id=?1)"
            } else {
                ""
            };
            let mut stmt = conn
                .prepare(&format!(
                    "SELECT {EVENT_COLS} FROM events WHERE collection_id=?1 AND id NOT IN (SELECT event_id FROM event_vectors WHERE collection_id=?1){legacy} LIMIT ?2"
                ))
                .map_err(backend)?;
            let rows = stmt.query_map(params![cid, limit], event_from_row).map_err(backend)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(backend)
        })
        .await
    }

    pub(crate) async fn events_without_turns(
        &self,
        before: Option<String>,
        limit: u32,
    ) -> StoreResult<Option<Vec<(CollectionId, Event)>>> {
        self.read(move |conn| {
            let pending: bool = conn
                .prepare_cached("SELECT EXISTS (SELECT 1 FROM event_turns_backfill)")
                .map_err(backend)?
                .query_row([], |r| r.get(0))
                .map_err(backend)?;
            if !pending {
                return Ok(None);
            }
            let mut stmt = conn.prepare_cached(&events_without_turns_sql(before.is_some())).map_err(backend)?;
            let rows = stmt
                .query_map(params![before, limit], |r| Ok((r.get("collection_id")?, event_from_row(r)?)))
                .map_err(backend)?;
            Ok(Some(rows.collect::<Result<Vec<_>, _>>().map_err(backend)?))
        })
        .await
    }

    pub(crate) async fn add_event_turns(
        &self,
        cid: CollectionId,
        id: &str,
        seen: Millis,
        turns: Vec<Vec<f32>>,
    ) -> StoreResult<bool> {
        let Some(blob) = mnemo_core::turns::encode(&turns) else { return Ok(false) };
        let id = id.to_string();
        self.writer
            .write(move |conn| {
                let added = conn
                    .prepare_cached(
                        "INSERT INTO event_turn_vectors(event_id, turns) SELECT ?2, ?4
                         WHERE EXISTS (SELECT 1 FROM events WHERE id=?2 AND collection_id=?1 AND updated_at=?3)
                         AND EXISTS (SELECT 1 FROM event_vectors WHERE event_id=?2)
                         ON CONFLICT(event_id) DO NOTHING",
                    )
                    .map_err(backend)?
                    .execute(params![cid, id, seen, blob])
                    .map_err(backend)?;
                Ok(added == 1)
            })
            .await
    }

    pub(crate) async fn turns_backfilled(&self) -> StoreResult<()> {
        self.writer.write(|conn| conn.execute("DELETE FROM event_turns_backfill", []).map(drop).map_err(backend)).await
    }

    pub(crate) async fn set_event_vector(
        &self,
        cid: CollectionId,
        id: &str,
        vector: Vec<f32>,
        turns: Option<Vec<Vec<f32>>>,
    ) -> StoreResult<()> {
        let id = id.to_string();
        self.writer
            .write(move |conn| {
                conn.execute(
                    "INSERT OR REPLACE INTO event_vectors(rowid, event_id, collection_id, vec) SELECT rowid, id, collection_id, ?3 FROM events WHERE collection_id=?1 AND id=?2",
                    params![cid, id, vec_to_blob(&vector)],
                )
                .map_err(backend)?;
                conn.execute(
                    "INSERT OR REPLACE INTO event_vectors_f16(rowid, h) SELECT rowid, ?3 FROM events WHERE collection_id=?1 AND id=?2",
                    params![cid, id, f16_blob(&vector)],
                )
                .map_err(backend)?;
                forget_legacy_vector(conn, &id)?;
                set_turns(conn, &id, turns.as_deref())
            })
            .await
    }
}
