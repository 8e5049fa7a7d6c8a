//! Extraction jobs: claim with a lease, complete (events and profile changes in one transaction),
//! fail, defer, renew; token usage.

use crate::collections::collection_by_id;
use crate::conversations::{messages_where, session_summary};
use crate::events::{insert_event_row, merge_event_row};
use crate::profiles::{apply_profile_changes, with_history};
use crate::rows::{JOB_COLS, PROFILE_COLS, job_from_row, profile_from_row};
use crate::{SqliteStore, backend};
use async_trait::async_trait;
use mnemo_core::StoreError;
use mnemo_core::extract::ExtractionOutput;
use mnemo_core::model::*;
use mnemo_core::store::StoreResult;
use mnemo_core::store::prelude::*;
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};

pub(crate) fn job_by_id(conn: &Connection, job_id: &str) -> StoreResult<Option<(CollectionId, Job)>> {
    conn.query_row(&format!("SELECT {JOB_COLS} FROM jobs WHERE job_id=?1"), [job_id], job_from_row)
        .optional()
        .map_err(backend)
}

/// A failed job queued again from its first attempt (its session too); `automatic` counts it.
fn requeue(conn: &Connection, job_id: &str, now: Millis, automatic: bool) -> StoreResult<()> {
    conn.execute(
        "UPDATE jobs SET state='queued', attempts=0, run_after=?2, lease_until=NULL, updated_at=?2, finished_at=NULL,
             requeues=requeues + ?3 WHERE job_id=?1 AND state='failed'",
        params![job_id, now, automatic as i64],
    )
    .map_err(backend)?;
    conn.execute(
        "UPDATE sessions SET state='queued' WHERE session_id=(SELECT session_id FROM jobs WHERE job_id=?1) AND state='failed'",
        [job_id],
    )
    .map_err(backend)?;
    Ok(())
}

#[async_trait]
impl JobStore for SqliteStore {
    async fn claim_job(&self, now: Millis, lease_ms: i64) -> StoreResult<Option<ClaimedJob>> {
        self.writer
            .write(move |conn| {
                let id: Option<String> = conn
                    .query_row(
                        "SELECT job_id FROM jobs WHERE (state='queued' AND run_after<=?1) OR (state='running' AND lease_until<=?1)
                         ORDER BY run_after, created_at LIMIT 1",
                        [now],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(backend)?;
                let Some(job_id) = id else { return Ok(None) };
                conn.execute(
                    "UPDATE jobs SET state='running', attempts=attempts+1, lease_until=?2, updated_at=?3, started_at=?3, finished_at=NULL WHERE job_id=?1",
                    params![job_id, now + lease_ms, now],
                )
                .map_err(backend)?;
                let (cid, job) = job_by_id(conn, &job_id)?.ok_or_else(|| StoreError::backend("claimed job vanished"))?;
                let collection = collection_by_id(conn, cid)?;
                let sid = job.session_id.clone().unwrap_or_default();
                let (_, session, meta) =
                    session_summary(conn, &sid)?.ok_or_else(|| StoreError::backend(format!("job {job_id} has no session {sid}")))?;
                let messages = messages_where(conn, "m.session_id=?1", &[SqlValue::Text(sid)])?;
                let profiles = match &meta.user_id {
                    Some(u) => {
                        let mut stmt = conn
                            .prepare_cached(&format!(
                                "SELECT {PROFILE_COLS} FROM profiles WHERE collection_id=?1 AND user_id=?2 AND assistant_id='' ORDER BY profile_type"
                            ))
                            .map_err(backend)?;
                        let rows = stmt.query_map(params![cid, u], profile_from_row).map_err(backend)?;
                        with_history(conn, rows.collect::<Result<Vec<_>, _>>().map_err(backend)?)?
                    }
                    None => vec![],
                };
                Ok(Some(ClaimedJob { job, collection, session, meta, messages, profiles }))
            })
            .await
    }

    async fn complete_job(&self, lease: &JobLease, output: ExtractionOutput, now: Millis) -> StoreResult<Vec<String>> {
        let lease = lease.clone();
        self.writer
            .write(move |conn| {
                let job_id = lease.job_id.clone();
                let (cid, job) = job_by_id(conn, &job_id)?
                    .ok_or_else(|| StoreError::NotFound(format!("job_id: no job \"{job_id}\"")))?;
                job.check_lease(&lease)?;
                let sid = job.session_id.clone().unwrap_or_default();
                let (_, session, meta) =
                    session_summary(conn, &sid)?.ok_or_else(|| StoreError::backend("job without session"))?;
                let mut ids = Vec::with_capacity(output.events.len());
                for e in &output.events {
                    if let Some(target) = &e.merge_into
                        && merge_event_row(conn, cid, target, e, now)?
                    {
                        ids.push(target.clone());
                        continue;
                    }
                    let new = e.to_new_event(cid, &meta, &session, now);
                    let id = insert_event_row(conn, &new)?;
                    if let Some(old) = &e.supersedes {
                        conn.execute(
                            "UPDATE events SET status='superseded', superseded_by=?3, updated_at=?4, valid_to=?5
                             WHERE collection_id=?1 AND id=?2 AND status='active'",
                            params![cid, old, id, now, new.valid_from.unwrap_or(new.time)],
                        )
                        .map_err(backend)?;
                    }
                    ids.push(id);
                }
                let changed_at = output.profile_time.unwrap_or(now);
                if let Some(user) = &meta.user_id {
                    let typed = std::iter::once((PROFILE_V1.to_string(), output.profile_changes.clone()))
                        .chain(output.typed_profile_changes.iter().cloned());
                    for (ptype, changes) in typed.filter(|(_, c)| !c.is_empty()) {
                        apply_profile_changes(conn, cid, &ptype, user, &session.session_id, &changes, changed_at)?;
                    }
                }
                conn.execute(
                    "UPDATE sessions SET state='extracted', extracted_at=?2 WHERE session_id=?1",
                    params![sid, now],
                )
                .map_err(backend)?;
                conn.execute(
                    "UPDATE jobs SET state='done', lease_until=NULL, last_error=NULL, prompt_tokens=prompt_tokens+?2,
                     completion_tokens=completion_tokens+?3, updated_at=?4, finished_at=?4 WHERE job_id=?1",
                    params![job_id, output.prompt_tokens as i64, output.completion_tokens as i64, now],
                )
                .map_err(backend)?;
                Ok(ids)
            })
            .await
    }

    async fn fail_job(&self, lease: &JobLease, error: &str, retry_at: Option<Millis>, now: Millis) -> StoreResult<()> {
        let (job_id, attempt, error) =
            (lease.job_id.clone(), lease.attempt, error.chars().take(2000).collect::<String>());
        self.writer
            .write(move |conn| {
                let (state, run_after) = match retry_at {
                    Some(t) => ("queued", t),
                    None => ("failed", now),
                };
                let n = conn
                    .execute(
                        "UPDATE jobs SET state=?2, run_after=?3, last_error=?4, lease_until=NULL, updated_at=?5,
                             finished_at=CASE WHEN ?2='failed' THEN ?5 END
                         WHERE job_id=?1 AND state='running' AND attempts=?6",
                        params![job_id, state, run_after, error, now, attempt],
                    )
                    .map_err(backend)?;
                if n == 1 && state == "failed" {
                    conn.execute("UPDATE sessions SET state='failed' WHERE session_id=(SELECT session_id FROM jobs WHERE job_id=?1)", [&job_id])
                        .map_err(backend)?;
                }
                Ok(())
            })
            .await
    }

    async fn renew_lease(&self, lease: &JobLease, until: Millis) -> StoreResult<bool> {
        let (job_id, attempt) = (lease.job_id.clone(), lease.attempt);
        self.writer
            .write(move |conn| {
                let n = conn
                    .execute(
                        "UPDATE jobs SET lease_until=?3 WHERE job_id=?1 AND state='running' AND attempts=?2",
                        params![job_id, attempt, until],
                    )
                    .map_err(backend)?;
                Ok(n == 1)
            })
            .await
    }

    async fn defer_job(&self, lease: &JobLease, run_after: Millis, note: &str, now: Millis) -> StoreResult<()> {
        let (job_id, attempt, note) = (lease.job_id.clone(), lease.attempt, note.to_string());
        self.writer
            .write(move |conn| {
                conn.execute(
                    "UPDATE jobs SET state='queued', attempts=MAX(attempts-1, 0), run_after=?2, last_error=?3, lease_until=NULL, updated_at=?4
                     WHERE job_id=?1 AND state='running' AND attempts=?5",
                    params![job_id, run_after, note, now, attempt],
                )
                .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn retry_jobs(&self, cid: CollectionId, job_id: Option<&str>, now: Millis) -> StoreResult<Vec<String>> {
        let job_id = job_id.map(String::from);
        self.writer
            .write(move |conn| {
                let ids: Vec<String> = {
                    let mut stmt = conn
                        .prepare_cached(
                            "SELECT job_id FROM jobs WHERE collection_id=?1 AND state='failed' AND (?2 IS NULL OR job_id=?2)
                             ORDER BY created_at, job_id",
                        )
                        .map_err(backend)?;
                    let rows = stmt.query_map(params![cid, job_id], |r| r.get(0)).map_err(backend)?;
                    rows.collect::<Result<_, _>>().map_err(backend)?
                };
                for id in &ids {
                    requeue(conn, id, now, false)?;
                }
                Ok(ids)
            })
            .await
    }

    async fn requeue_transient_failures(&self, max_requeues: u32, now: Millis) -> StoreResult<Vec<String>> {
        self.writer
            .write(move |conn| {
                let ids: Vec<String> = {
                    let mut stmt = conn
                        .prepare_cached(
                            "SELECT job_id FROM jobs WHERE state='failed' AND requeues < ?1 AND substr(last_error, 1, ?2) = ?3
                             ORDER BY created_at, job_id",
                        )
                        .map_err(backend)?;
                    let prefix = TRANSIENT_PREFIX;
                    let rows = stmt
                        .query_map(params![max_requeues, prefix.len() as i64, prefix], |r| r.get(0))
                        .map_err(backend)?;
                    rows.collect::<Result<_, _>>().map_err(backend)?
                };
                for id in &ids {
                    requeue(conn, id, now, true)?;
                }
                Ok(ids)
            })
            .await
    }

    async fn tokens_used_since(&self, project: &str, since: Millis) -> StoreResult<u64> {
        let project = project.to_string();
        self.read(move |conn| {
            conn.query_row(
                "SELECT COALESCE(SUM(j.prompt_tokens + j.completion_tokens), 0) FROM jobs j
                 JOIN collections c ON c.id = j.collection_id WHERE c.project_name=?1 AND j.updated_at>=?2",
                params![project, since],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n as u64)
            .map_err(backend)
        })
        .await
    }

    async fn list_jobs(&self, cid: CollectionId, f: JobFilter) -> StoreResult<Vec<Job>> {
        self.read(move |conn| {
            let mut sql = format!("SELECT {JOB_COLS} FROM jobs WHERE collection_id=?1");
            let mut args = vec![SqlValue::Integer(cid)];
            if let Some(s) = f.state {
                args.push(SqlValue::Text(s.as_str().into()));
                sql.push_str(&format!(" AND state=?{}", args.len()));
            }
            if let Some(c) = f.conversation_id {
                args.push(SqlValue::Text(c));
                sql.push_str(&format!(" AND conversation_id=?{}", args.len()));
            }
            if let Some(s) = f.session_id {
                args.push(SqlValue::Text(s));
                sql.push_str(&format!(" AND session_id=?{}", args.len()));
            }
            args.push(SqlValue::Integer(f.limit.max(1) as i64));
            sql.push_str(&format!(" ORDER BY created_at DESC, job_id DESC LIMIT ?{}", args.len()));
            let mut stmt = conn.prepare(&sql).map_err(backend)?;
            let rows = stmt.query_map(params_from_iter(args.iter()), job_from_row).map_err(backend)?;
            rows.map(|r| r.map(|(_, j)| j)).collect::<Result<Vec<_>, _>>().map_err(backend)
        })
        .await
    }

    async fn next_job_due(&self) -> StoreResult<Option<Millis>> {
        self.read(|conn| {
            conn.query_row(
                "SELECT MIN(t) FROM (SELECT MIN(run_after) t FROM jobs WHERE state='queued' UNION ALL SELECT MIN(lease_until) FROM jobs WHERE state='running')",
                [],
                |r| r.get(0),
            )
            .map_err(backend)
        })
        .await
    }
}
