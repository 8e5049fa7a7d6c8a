//! Events: rows, vectors and terms (the BM25 statistics kept in the same transaction), CRUD, hits,
//! re-index; candidates for search are in `search`.

use crate::filter::event_filter_sql;
use crate::rows::{EVENT_COLS, event_from_row, json, vec_to_blob};
use crate::schema::{forget_legacy_vector, has_legacy_vectors};
use crate::{SqliteStore, backend};
use async_trait::async_trait;
use mnemo_core::StoreError;
use mnemo_core::model::*;
use mnemo_core::store::StoreResult;
use mnemo_core::store::prelude::*;
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};

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

/// The subject an event is clustered by: its first user, else its first assistant.
pub(crate) fn cluster_subject<'a>(user_ids: &'a [String], assistant_ids: &'a [String]) -> &'a str {
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

pub(crate) fn insert_event_row(conn: &Connection, e: &NewEvent) -> StoreResult<String> {
    let id = new_id("evt");
    let rowid = clustered_rowid(conn, e.collection_id, cluster_subject(&e.user_id, &e.assistant_id))?;
    conn.prepare_cached(
        "INSERT INTO events(rowid, id, collection_id, memory_type, user_ids, assistant_ids, group_id, session_id, conversation_id, scope,
                            class, status, time, memory_info, source_message_ids, created_at, updated_at, expires_at, valid_from)
         VALUES (?16,?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,'active',?11,?12,?13,?14,?14,?15,?17)",
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
        rowid,
        e.valid_from
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
             expires_at=CASE WHEN expires_at IS NULL THEN NULL ELSE MAX(expires_at, COALESCE(?7, expires_at)) END,
             valid_from=MIN(COALESCE(valid_from, time), COALESCE(?8, ?4))
         WHERE collection_id=?1 AND id=?2",
        params![cid, id, json(&info), e.time, json(&sources), now, e.expires_at, e.valid_from],
    )
    .map_err(backend)?;
    Ok(true)
}

#[async_trait]
impl EventStore for SqliteStore {
    async fn insert_event(&self, e: NewEvent) -> StoreResult<Event> {
        self.writer
            .write(move |conn| {
                let id = insert_event_row(conn, &e)?;
                Ok(e.stored_as(id))
            })
            .await
    }

    async fn insert_events(&self, events: Vec<NewEvent>) -> StoreResult<Vec<Event>> {
        // A batch is one request of hundreds of inserts: alone in its transaction (no SAVEPOINT).
        self.writer
            .write_alone(move |conn| {
                let ids = events.iter().map(|e| insert_event_row(conn, e)).collect::<StoreResult<Vec<_>>>()?;
                Ok(events.into_iter().zip(ids).map(|(e, id)| e.stored_as(id)).collect())
            })
            .await
    }

    async fn get_event(&self, cid: CollectionId, id: &str) -> StoreResult<Option<Event>> {
        let id = id.to_string();
        self.read(move |conn| event_by_id(conn, cid, &id)).await
    }

    async fn update_event(&self, cid: CollectionId, id: &str, patch: EventPatch, now: Millis) -> StoreResult<Event> {
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

    async fn delete_event(&self, cid: CollectionId, id: &str) -> StoreResult<bool> {
        let id = id.to_string();
        self.writer.write(move |conn| delete_event_row(conn, cid, &id)).await
    }

    async fn batch_delete_events(&self, cid: CollectionId, filter: EventFilter) -> StoreResult<u64> {
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

    async fn event_after(
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

    async fn list_events(&self, cid: CollectionId, filter: EventFilter, limit: u32) -> StoreResult<Vec<Event>> {
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

    async fn record_hits(&self, cid: CollectionId, ids: Vec<String>, now: Millis) -> StoreResult<()> {
        let counted = ids.clone();
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
            .await?;
        // Committed: the kept scopes' decoded copies of these events have the old counts.
        self.scope_cache.hits_counted(&counted);
        Ok(())
    }

    async fn events_missing_vectors(&self, cid: CollectionId, limit: u32) -> StoreResult<Vec<Event>> {
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

    async fn events_without_turns(
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

    async fn add_event_turns(
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

    async fn turns_backfilled(&self) -> StoreResult<()> {
        self.writer.write(|conn| conn.execute("DELETE FROM event_turns_backfill", []).map(drop).map_err(backend)).await
    }

    async fn set_event_vector(
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
