//! Upkeep an upgrade leaves: the relocation of events written before schema v11 next to their
//! users' (clustered rowids), the half-precision copies of vectors written before schema v12, and
//! the terms of events written before schema v7. Each runs in the background in small batches
//! (`StoreEngine::housekeeping`); reads find the old rows meanwhile.

use crate::events::*;
use crate::schema::{has_legacy_vectors, table_exists};
use crate::{SqliteStore, backend};
use mnemo_core::model::CollectionId;
use mnemo_core::store::StoreResult;
use rusqlite::{Connection, params};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

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

/// The table holding the f16 copy's background fill cursor, while vectors written before schema
/// v12 still lack their copy.
pub(crate) const F16_FILL: &str = "event_vectors_f16_fill";

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

/// Indexes the terms of events written before v7 (inside the v7 migration's transaction).
pub(crate) fn backfill_terms(conn: &Connection) -> rusqlite::Result<usize> {
    let rows: Vec<(i64, CollectionId, String)> = conn
        .prepare("SELECT rowid, collection_id, memory_info FROM events WHERE terms IS NULL")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<_, _>>()?;
    for (rowid, cid, info) in &rows {
        let info: serde_json::Map<String, serde_json::Value> = serde_json::from_str(info).unwrap_or_default();
        let terms = mnemo_core::text::search_tokens(&mnemo_core::model::event_search_text(&info)).join(" ");
        set_terms(conn, *cid, *rowid, Some(&terms))
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    }
    Ok(rows.len())
}
