//! Numbers: per-user memory statistics and the whole store's counts.

use crate::PgStore;
use crate::rows::{EVENT_COLS, event_from_row, from_rows};
use crate::sql::{Tx, begin_read, query_all, query_one};
use async_trait::async_trait;
use mnemo_core::model::*;
use mnemo_core::store::StoreResult;
use mnemo_core::store::prelude::*;

/// Folds the appended activity changes into `user_activity` and reads again the latest change
/// of the users whose latest may have left (in the caller's transaction, under its lock). Only
/// rows marked `recheck` are visited after the fold (its partial index): a count falls only
/// with a change that marks it, so a user counted down to none is among them.
pub(crate) async fn fold_activity(tx: &Tx<'_>) -> StoreResult<()> {
    let folded = crate::sql::execute(
        tx,
        "WITH d AS (DELETE FROM user_activity_delta RETURNING collection_id, subject_id, events, last, recheck)
         INSERT INTO user_activity(collection_id, subject_id, events, last, recheck)
         SELECT collection_id, subject_id, sum(events), max(last), bool_or(recheck) FROM d
         GROUP BY collection_id, subject_id ORDER BY collection_id, subject_id
         ON CONFLICT(collection_id, subject_id) DO UPDATE SET events = user_activity.events + excluded.events,
             last = greatest(user_activity.last, excluded.last), recheck = user_activity.recheck OR excluded.recheck",
        &[],
    )
    .await?;
    if folded == 0 {
        return Ok(());
    }
    crate::sql::execute(tx, "DELETE FROM user_activity WHERE recheck AND events = 0", &[]).await?;
    crate::sql::execute(
        tx,
        "UPDATE user_activity a SET recheck = false, last = (
             SELECT max(e.updated_at) FROM event_subjects s JOIN events e ON e.id = s.event_id
             WHERE s.collection_id = a.collection_id AND s.kind = 'u' AND s.subject_id = a.subject_id AND e.status = 'active')
         WHERE recheck",
        &[],
    )
    .await?;
    Ok(())
}

/// `YYYY-MM-DD` of a day number (days since the Unix epoch, UTC).
fn day_name(day: i64) -> String {
    chrono::DateTime::from_timestamp(day * 86_400, 0)
        .map(|t| t.format("%Y-%m-%d").to_string())
        .unwrap_or_else(|| day.to_string())
}

pub async fn memory_stats(
    tx: &Tx<'_>,
    cid: CollectionId,
    user: Option<&str>,
    days: u32,
    now: Millis,
) -> StoreResult<MemoryStats> {
    const DAY: i64 = 86_400_000;
    let from_day = now.div_euclid(DAY) - days as i64 + 1;
    let scope = match user {
        Some(_) => {
            "collection_id=$1 AND id IN (SELECT event_id FROM event_subjects WHERE collection_id=$1 AND kind='u' AND subject_id=$2)"
        }
        None => "collection_id=$1 AND $2::text IS NULL",
    };
    let pairs = async |sql: &str, from: i64| -> StoreResult<Vec<(String, u64)>> {
        let rows = query_all(tx, sql, &[&cid, &user, &from]).await?;
        Ok(rows.iter().map(|r| (day_name(r.get(0)), r.get::<_, i64>(1) as u64)).collect())
    };
    let mut out = MemoryStats {
        new_memories_per_day: pairs(
            &format!("SELECT created_at / {DAY} AS d, COUNT(*) FROM events WHERE {scope} AND created_at >= $3 GROUP BY d ORDER BY d DESC"),
            from_day * DAY,
        )
        .await?,
        hits_per_day: pairs(
            "SELECT day, SUM(hits)::bigint FROM hits_daily WHERE collection_id=$1 AND ($2::text IS NULL OR user_id=$2) AND day >= $3
             GROUP BY day ORDER BY day DESC",
            from_day,
        )
        .await?,
        ..Default::default()
    };
    let rows = query_all(
        tx,
        &format!(
            "SELECT {EVENT_COLS} FROM events WHERE {scope} AND hit_count > 0 ORDER BY hit_count DESC, id LIMIT 10"
        ),
        &[&cid, &user],
    )
    .await?;
    for e in from_rows(rows, event_from_row)? {
        out.top_hit.push((e.id.clone(), e.text().chars().take(120).collect(), e.hit_count));
    }
    let count = async |extra: &str| -> StoreResult<u64> {
        Ok(query_one(tx, &format!("SELECT COUNT(*) FROM events WHERE {scope}{extra}"), &[&cid, &user])
            .await?
            .get::<_, i64>(0) as u64)
    };
    out.never_hit = count(" AND hit_count = 0").await?;
    out.total_events = count("").await?;
    let rows = query_all(
        tx,
        &format!(
            "SELECT j.created_at / {DAY} AS d, COUNT(*), COUNT(*) FILTER (WHERE j.state='done'), COUNT(*) FILTER (WHERE j.state='failed'),
                    SUM(j.prompt_tokens)::bigint, SUM(j.completion_tokens)::bigint
             FROM jobs j WHERE j.collection_id=$1 AND j.created_at >= $3
               AND ($2::text IS NULL OR EXISTS (SELECT 1 FROM sessions s WHERE s.session_id=j.session_id AND s.meta_json::jsonb->>'user_id' = $2))
             GROUP BY d ORDER BY d DESC"
        ),
        &[&cid, &user, &(from_day * DAY)],
    )
    .await?;
    for r in rows {
        let g = |i| r.get::<_, i64>(i) as u64;
        out.jobs_per_day.push((day_name(r.get(0)), g(1), g(2), g(3), g(4), g(5)));
    }
    Ok(out)
}

/// The users of a collection: conversations by their metadata's user, active events by the
/// counts schema v12's triggers keep (`user_activity` and the changes appended since its fold).
/// The latest change of a user marked `recheck` is read from their events — in one grouped read
/// for them all (a hash join when there are many, as right after a batch of deletes).
const USERS_SQL: &str = "
    WITH d AS (
        SELECT subject_id, sum(events) AS n, max(last) AS last, bool_or(recheck) AS recheck
        FROM user_activity_delta WHERE collection_id = $1 GROUP BY subject_id),
    a AS MATERIALIZED (
        SELECT coalesce(f.subject_id, d.subject_id) AS subject_id,
               coalesce(f.events, 0) + coalesce(d.n, 0) AS n, greatest(f.last, d.last) AS last,
               coalesce(f.recheck, false) OR coalesce(d.recheck, false) AS recheck
        FROM (SELECT * FROM user_activity WHERE collection_id = $1) f FULL JOIN d ON d.subject_id = f.subject_id),
    r AS (
        SELECT s.subject_id, max(e.updated_at) AS last FROM event_subjects s JOIN events e ON e.id = s.event_id
        WHERE s.collection_id = $1 AND s.kind = 'u' AND e.status = 'active'
          AND s.subject_id IN (SELECT subject_id FROM a WHERE recheck)
        GROUP BY s.subject_id),
    ev AS (
        SELECT a.subject_id AS u, a.n, CASE WHEN a.recheck THEN r.last ELSE a.last END AS last
        FROM a LEFT JOIN r ON r.subject_id = a.subject_id WHERE a.n > 0),
    cv AS (
        SELECT meta_json::jsonb ->> 'user_id' AS u, count(*) AS n, max(last_write_at) AS last
        FROM conversations WHERE collection_id = $1 AND meta_json::jsonb ->> 'user_id' IS NOT NULL GROUP BY 1),
    users AS (SELECT u FROM ev UNION SELECT u FROM cv)
    SELECT users.u, coalesce(ev.n, 0)::int8, coalesce(cv.n, 0)::int8, nullif(greatest(coalesce(ev.last, 0), coalesce(cv.last, 0)), 0)::int8 AS active
    FROM users LEFT JOIN ev ON ev.u = users.u LEFT JOIN cv ON cv.u = users.u
    WHERE $2::text IS NULL OR users.u ILIKE $2::text ESCAPE '\\'
    ORDER BY active DESC NULLS LAST, users.u COLLATE \"C\" LIMIT $3";

#[async_trait]
impl StatsStore for PgStore {
    async fn list_users(
        &self,
        cid: CollectionId,
        contains: Option<String>,
        limit: u32,
    ) -> StoreResult<Vec<UserSummary>> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        let pattern = contains.as_deref().map(like_contains);
        let rows = query_all(&tx, USERS_SQL, &[&cid, &pattern, &i64::from(limit)]).await?;
        Ok(rows
            .iter()
            .map(|r| UserSummary {
                user_id: r.get(0),
                events: r.get::<_, i64>(1) as u64,
                conversations: r.get::<_, i64>(2) as u64,
                last_active: r.get(3),
            })
            .collect())
    }

    async fn memory_stats(
        &self,
        cid: CollectionId,
        user: Option<String>,
        days: u32,
        now: Millis,
    ) -> StoreResult<MemoryStats> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        memory_stats(&tx, cid, user.as_deref(), days, now).await
    }

    /// Row counts without scanning big tables: PostgreSQL's own estimate (`pg_class.reltuples`,
    /// kept by autovacuum / ANALYZE, within a few per cent) once a table holds
    /// [`ESTIMATE_FROM`] rows, an exact `COUNT(*)` below that (cheap, and exact where tests and
    /// small deployments look). Jobs: the few queued / running / failed are counted through
    /// their partial indexes; `done` is the rest.
    async fn stats(&self) -> StoreResult<StoreStats> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        let estimates: std::collections::HashMap<String, i64> = query_all(
            &tx,
            "SELECT relname::text, reltuples::bigint FROM pg_class
             WHERE relnamespace = current_schema()::regnamespace AND relkind = 'r'
               AND relname IN ('jobs', 'conversations', 'messages', 'events', 'profiles')",
            &[],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
        let count = async |t: &str| -> StoreResult<u64> {
            match estimates.get(t) {
                Some(&n) if n >= ESTIMATE_FROM => Ok(n as u64),
                _ => Ok(query_one(&tx, &format!("SELECT COUNT(*) FROM {t}"), &[]).await?.get::<_, i64>(0) as u64),
            }
        };
        let by_state = async |st: &str| -> StoreResult<u64> {
            Ok(query_one(&tx, "SELECT COUNT(*) FROM jobs WHERE state = $1", &[&st]).await?.get::<_, i64>(0) as u64)
        };
        let (queued, running, failed) =
            (by_state("queued").await?, by_state("running").await?, by_state("failed").await?);
        let done = count("jobs").await?.saturating_sub(queued + running + failed);
        let jobs = [("done", done), ("failed", failed), ("queued", queued), ("running", running)]
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(s, n)| (s.to_string(), n))
            .collect();
        Ok(StoreStats {
            jobs,
            conversations: count("conversations").await?,
            messages: count("messages").await?,
            events: count("events").await?,
            profiles: count("profiles").await?,
            // Tables, indexes and TOAST of mnemo's schema (not the whole database).
            bytes: query_one(
                &tx,
                "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
                 WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'",
                &[],
            )
            .await?
            .get::<_, i64>(0) as u64,
            scope_cache: Some({
                let (hits, misses, bytes) = self.scopes.kept.counts();
                mnemo_core::model::ScopeCacheStats { hits, misses, bytes: bytes as u64 }
            }),
        })
    }
}

/// From this many rows on (by PostgreSQL's estimate), `stats()` reports the estimate instead of
/// counting: a `COUNT(*)` over a million events reads the whole table on every `/metrics` scrape.
pub const ESTIMATE_FROM: i64 = 100_000;
