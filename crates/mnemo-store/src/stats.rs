//! Numbers: per-user memory statistics and the whole store's counts.

use crate::rows::{EVENT_COLS, event_from_row};
use crate::{SqliteStore, backend};
use async_trait::async_trait;
use mnemo_core::StoreError;
use mnemo_core::model::*;
use mnemo_core::store::StoreResult;
use mnemo_core::store::prelude::*;
use rusqlite::{Connection, params};
use std::path::Path;

/// `YYYY-MM-DD` of a day number (days since the Unix epoch, UTC).
fn day_name(day: i64) -> String {
    chrono::DateTime::from_timestamp(day * 86_400, 0)
        .map(|t| t.format("%Y-%m-%d").to_string())
        .unwrap_or_else(|| day.to_string())
}

pub fn memory_stats(
    conn: &Connection,
    cid: CollectionId,
    user: Option<&str>,
    days: u32,
    now: Millis,
) -> Result<MemoryStats, StoreError> {
    const DAY: i64 = 86_400_000;
    let from_day = now.div_euclid(DAY) - days as i64 + 1;
    // Events of the scope: the collection, or one user's events in it.
    let scope = match user {
        Some(_) => {
            "collection_id=?1 AND id IN (SELECT event_id FROM event_subjects WHERE collection_id=?1 AND kind='u' AND subject_id=?2)"
        }
        None => "collection_id=?1 AND ?2 IS NULL",
    };
    let pairs = |sql: &str, from: i64| -> Result<Vec<(String, u64)>, StoreError> {
        let mut stmt = conn.prepare(sql).map_err(backend)?;
        let rows = stmt
            .query_map(params![cid, user, from], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))
            .map_err(backend)?;
        rows.map(|r| r.map(|(d, n)| (day_name(d), n as u64)).map_err(backend)).collect()
    };
    let mut out = MemoryStats {
        new_memories_per_day: pairs(
            &format!(
                "SELECT created_at / {DAY} AS d, COUNT(*) FROM events WHERE {scope} AND created_at >= ?3 GROUP BY d ORDER BY d DESC"
            ),
            from_day * DAY,
        )?,
        hits_per_day: pairs(
            "SELECT day, SUM(hits) FROM hits_daily WHERE collection_id=?1 AND (?2 IS NULL OR user_id=?2) AND day >= ?3
             GROUP BY day ORDER BY day DESC",
            from_day,
        )?,
        ..Default::default()
    };
    let mut stmt = conn
        .prepare(&format!(
            "SELECT {EVENT_COLS} FROM events WHERE {scope} AND hit_count > 0 ORDER BY hit_count DESC, id LIMIT 10"
        ))
        .map_err(backend)?;
    for e in stmt.query_map(params![cid, user], event_from_row).map_err(backend)? {
        let e = e.map_err(backend)?;
        out.top_hit.push((e.id.clone(), e.text().chars().take(120).collect(), e.hit_count));
    }
    let count = |extra: &str| -> Result<u64, StoreError> {
        conn.query_row(&format!("SELECT COUNT(*) FROM events WHERE {scope}{extra}"), params![cid, user], |r| {
            r.get::<_, i64>(0)
        })
        .map(|n| n as u64)
        .map_err(backend)
    };
    out.never_hit = count(" AND hit_count = 0")?;
    out.total_events = count("")?;
    let mut stmt = conn
        .prepare(&format!(
            "SELECT j.created_at / {DAY} AS d, COUNT(*), SUM(j.state='done'), SUM(j.state='failed'), SUM(j.prompt_tokens), SUM(j.completion_tokens)
             FROM jobs j WHERE j.collection_id=?1 AND j.created_at >= ?3
               AND (?2 IS NULL OR EXISTS (SELECT 1 FROM sessions s WHERE s.session_id=j.session_id AND json_extract(s.meta_json, '$.user_id')=?2))
             GROUP BY d ORDER BY d DESC"
        ))
        .map_err(backend)?;
    let rows = stmt
        .query_map(params![cid, user, from_day * DAY], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, i64>(4)?,
                r.get::<_, i64>(5)?,
            ))
        })
        .map_err(backend)?;
    for r in rows {
        let (d, n, done, failed, pt, ct) = r.map_err(backend)?;
        out.jobs_per_day.push((day_name(d), n as u64, done as u64, failed as u64, pt as u64, ct as u64));
    }
    Ok(out)
}

/// The users of a collection: conversations by their metadata's user, active events by the
/// counts schema v17's triggers keep (`user_activity`).
const USERS_SQL: &str = "
    WITH ev AS (SELECT subject_id AS u, events AS n, last FROM user_activity WHERE collection_id = ?1 AND events > 0),
    cv AS (
        SELECT json_extract(meta_json, '$.user_id') AS u, count(*) AS n, max(last_write_at) AS last
        FROM conversations WHERE collection_id = ?1 AND json_extract(meta_json, '$.user_id') IS NOT NULL GROUP BY 1),
    users AS (SELECT u FROM ev UNION SELECT u FROM cv)
    SELECT users.u, coalesce(ev.n, 0), coalesce(cv.n, 0), nullif(max(coalesce(ev.last, 0), coalesce(cv.last, 0)), 0) AS active
    FROM users LEFT JOIN ev ON ev.u = users.u LEFT JOIN cv ON cv.u = users.u
    WHERE ?2 IS NULL OR users.u LIKE ?2 ESCAPE '\\'
    ORDER BY active IS NULL, active DESC, users.u LIMIT ?3";

#[async_trait]
impl StatsStore for SqliteStore {
    async fn list_users(
        &self,
        cid: CollectionId,
        contains: Option<String>,
        limit: u32,
    ) -> StoreResult<Vec<UserSummary>> {
        let pattern = contains.as_deref().map(like_contains);
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(USERS_SQL).map_err(backend)?;
            let rows = stmt
                .query_map(params![cid, pattern, limit], |r| {
                    Ok(UserSummary {
                        user_id: r.get(0)?,
                        events: r.get::<_, i64>(1)? as u64,
                        conversations: r.get::<_, i64>(2)? as u64,
                        last_active: r.get(3)?,
                    })
                })
                .map_err(backend)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(backend)
        })
        .await
    }

    async fn memory_stats(
        &self,
        cid: CollectionId,
        user: Option<String>,
        days: u32,
        now: Millis,
    ) -> StoreResult<MemoryStats> {
        self.read(move |conn| memory_stats(conn, cid, user.as_deref(), days, now)).await
    }

    async fn stats(&self) -> StoreResult<StoreStats> {
        let path = self.path.clone();
        let (hits, misses, bytes) = self.scope_cache.counts();
        let kept = ScopeCacheStats { hits, misses, bytes: bytes as u64 };
        let stats = self
            .read(move |conn| {
                let count = |sql: &str| -> StoreResult<u64> {
                    conn.query_row(sql, [], |r| r.get::<_, i64>(0)).map(|n| n as u64).map_err(backend)
                };
                let mut stmt = conn.prepare("SELECT state, COUNT(*) FROM jobs GROUP BY state").map_err(backend)?;
                let jobs = stmt
                    .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64)))
                    .map_err(backend)?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(backend)?;
                let file = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
                let wal = path.with_extension("db-wal");
                Ok(StoreStats {
                    jobs,
                    conversations: count("SELECT COUNT(*) FROM conversations")?,
                    messages: count("SELECT COUNT(*) FROM messages")?,
                    events: count("SELECT COUNT(*) FROM events")?,
                    profiles: count("SELECT COUNT(*) FROM profiles")?,
                    bytes: file(&path) + file(&wal),
                    scope_cache: None,
                })
            })
            .await?;
        Ok(StoreStats { scope_cache: Some(kept), ..stats })
    }
}
