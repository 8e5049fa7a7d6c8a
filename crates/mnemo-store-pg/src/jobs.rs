//! Extraction jobs: claim with a lease, complete (events and profile changes in one transaction),
//! fail, defer, renew; token usage.

use crate::PgStore;
use crate::collections::collection_by_id;
use crate::conversations::{session_messages, session_summary};
use crate::events::{insert_event_row, merge_event_row};
use crate::profiles::{apply_profile_changes, profiles_where};
use crate::rows::{JOB_COLS, from_rows, job_from_row};
use crate::sql::{Args, SqlParam, Tx, backend, begin, begin_read, execute, no_nul, query_all, query_one, query_opt};
use crate::terms::TermStats;
use async_trait::async_trait;
use mnemo_core::StoreError;
use mnemo_core::extract::ExtractionOutput;
use mnemo_core::model::*;
use mnemo_core::store::StoreResult;
use mnemo_core::store::prelude::*;

pub(crate) async fn job_by_id(tx: &Tx<'_>, job_id: &str, lock: bool) -> StoreResult<Option<(CollectionId, Job)>> {
    let lock = if lock { " FOR UPDATE" } else { "" };
    query_opt(tx, &format!("SELECT {JOB_COLS} FROM jobs WHERE job_id=$1{lock}"), &[&job_id])
        .await?
        .map(|r| job_from_row(&r))
        .transpose()
}

/// Serialises one user's extraction commits across replicas (released at commit).
pub(crate) async fn lock_user(tx: &Tx<'_>, cid: CollectionId, user: &str) -> StoreResult<()> {
    execute(tx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 7))", &[&format!("{cid}/{user}")]).await?;
    Ok(())
}

/// The user's stored active event of the same type that `e` duplicates — the same text, or a
/// similarity of at least `threshold` — among its three nearest, as the service's own dedup
/// decides (an exact duplicate is its own nearest neighbour).
async fn stored_twin(
    tx: &Tx<'_>,
    cid: CollectionId,
    user: &str,
    e: &mnemo_core::extract::ExtractedEvent,
    threshold: Option<f32>,
) -> StoreResult<Option<String>> {
    use mnemo_core::extract::normalized_text;
    let Some(v) = e.embedding.as_ref() else { return Ok(None) };
    let rows = query_all(
        tx,
        "SELECT e.id, e.memory_info, (-(v.vec <#> $4))::real FROM events e
         JOIN event_subjects s ON s.event_id = e.id AND s.collection_id = $1 AND s.kind = 'u' AND s.subject_id = $2
         JOIN event_vectors v ON v.event_id = e.id AND v.dim = $5
         WHERE e.collection_id = $1 AND e.memory_type = $3 AND e.status = 'active' AND e.id <> COALESCE($6, '')
         ORDER BY v.vec <#> $4, e.id LIMIT 3",
        &[&cid, &user, &e.memory_type, &pgvector::Vector::from(v.clone()), &(v.len() as i32), &e.supersedes],
    )
    .await?;
    let text = normalized_text(&event_text(&e.memory_info));
    Ok(rows
        .iter()
        .find(|r| {
            let info: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(r.get::<_, &str>(1)).unwrap_or_default();
            normalized_text(&event_text(&info)) == text || threshold.is_some_and(|t| r.get::<_, f32>(2) >= t)
        })
        .map(|r| r.get(0)))
}

/// Failed jobs matching `filter` (over `$2`…; `$1` is now) queued again from their first attempt,
/// their sessions too; `automatic` counts the re-queue. Returns the ids.
async fn requeue(tx: &Tx<'_>, filter: &str, params: &[SqlParam<'_>], automatic: bool) -> StoreResult<Vec<String>> {
    let bump = if automatic { 1i64 } else { 0 };
    let rows = query_all(
        tx,
        &format!(
            "UPDATE jobs SET state='queued', attempts=0, run_after=$1, lease_until=NULL, updated_at=$1, finished_at=NULL,
                 requeues=requeues + {bump} WHERE state='failed' AND {filter} RETURNING job_id, session_id"
        ),
        params,
    )
    .await?;
    let (ids, sessions): (Vec<String>, Vec<Option<String>>) =
        rows.iter().map(|r| (r.get::<_, String>(0), r.get::<_, Option<String>>(1))).unzip();
    let sessions: Vec<String> = sessions.into_iter().flatten().collect();
    execute(tx, "UPDATE sessions SET state='queued' WHERE session_id = ANY($1) AND state='failed'", &[&sessions])
        .await?;
    let mut ids = ids;
    ids.sort();
    Ok(ids)
}

#[async_trait]
impl JobStore for PgStore {
    async fn claim_job(&self, now: Millis, lease_ms: i64) -> StoreResult<Option<ClaimedJob>> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        // One due job, skipping those another replica is claiming right now; a running job whose
        // lease ran out (its replica died or stalled) is due again.
        let Some(row) = query_opt(
            &tx,
            "UPDATE jobs SET state='running', attempts=attempts+1, lease_until=$2, updated_at=$1, started_at=$1,
                 finished_at=NULL WHERE job_id = (
                 SELECT job_id FROM jobs WHERE (state='queued' AND run_after<=$1) OR (state='running' AND lease_until<=$1)
                 ORDER BY run_after, created_at LIMIT 1 FOR UPDATE SKIP LOCKED)
             RETURNING job_id",
            &[&now, &(now + lease_ms)],
        )
        .await?
        else {
            return Ok(None);
        };
        let job_id: String = row.get(0);
        let (cid, job) =
            job_by_id(&tx, &job_id, false).await?.ok_or_else(|| StoreError::backend("claimed job vanished"))?;
        let collection = collection_by_id(&tx, cid).await?;
        let sid = job.session_id.clone().unwrap_or_default();
        let (_, session, meta) = session_summary(&tx, &sid)
            .await?
            .ok_or_else(|| StoreError::backend(format!("job {job_id} has no session {sid}")))?;
        let messages = session_messages(&tx, &sid).await?;
        let profiles = match &meta.user_id {
            Some(u) => {
                profiles_where(
                    &tx,
                    "collection_id=$1 AND user_id=$2 AND assistant_id='' ORDER BY profile_type",
                    &[&cid, u],
                )
                .await?
            }
            None => vec![],
        };
        tx.commit().await.map_err(backend)?;
        Ok(Some(ClaimedJob { job, collection, session, meta, messages, profiles }))
    }

    async fn complete_job(&self, lease: &JobLease, output: ExtractionOutput, now: Millis) -> StoreResult<Vec<String>> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let job_id = &lease.job_id;
        let (cid, job) = job_by_id(&tx, job_id, true)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("job_id: no job \"{job_id}\"")))?;
        job.check_lease(lease)?;
        let sid = job.session_id.clone().unwrap_or_default();
        let (_, session, meta) =
            session_summary(&tx, &sid).await?.ok_or_else(|| StoreError::backend("job without session"))?;
        let changed_at = output.profile_time.unwrap_or(now);
        if let Some(user) = &meta.user_id {
            lock_user(&tx, cid, user).await?;
        }
        let mut stats = TermStats::default();
        let mut ids = Vec::with_capacity(output.events.len());
        for e in &output.events {
            // Another replica may have committed a twin of this event for the same user after
            // this job's own dedup looked (the lock above orders the two commits).
            let twin = match (&meta.user_id, &e.merge_into) {
                (Some(user), None) => stored_twin(&tx, cid, user, e, output.dedup_similarity).await?,
                _ => None,
            };
            if let Some(target) = e.merge_into.as_ref().or(twin.as_ref())
                && merge_event_row(&tx, &mut stats, cid, target, e, now).await?
            {
                ids.push(target.clone());
                continue;
            }
            let new = e.to_new_event(cid, &meta, &session, now);
            let id = insert_event_row(&tx, &mut stats, &new).await?;
            if let Some(old) = &e.supersedes {
                execute(
                    &tx,
                    "UPDATE events SET status='superseded', superseded_by=$3, updated_at=$4, valid_to=$5 WHERE collection_id=$1 AND id=$2 AND status='active'",
                    &[&cid, old, &id, &now, &new.valid_from.unwrap_or(new.time)],
                )
                .await?;
            }
            ids.push(id);
        }
        if let Some(user) = &meta.user_id {
            let typed = std::iter::once((PROFILE_V1.to_string(), output.profile_changes.clone()))
                .chain(output.typed_profile_changes.iter().cloned());
            for (ptype, changes) in typed.filter(|(_, c)| !c.is_empty()) {
                apply_profile_changes(&tx, cid, &ptype, user, &session.session_id, &changes, changed_at).await?;
            }
        }
        stats.flush(&tx).await?;
        execute(&tx, "UPDATE sessions SET state='extracted', extracted_at=$2 WHERE session_id=$1", &[&sid, &now])
            .await?;
        execute(
            &tx,
            "UPDATE jobs SET state='done', lease_until=NULL, last_error=NULL, prompt_tokens=prompt_tokens+$2,
             completion_tokens=completion_tokens+$3, updated_at=$4, finished_at=$4 WHERE job_id=$1",
            &[job_id, &(output.prompt_tokens as i64), &(output.completion_tokens as i64), &now],
        )
        .await?;
        tx.commit().await.map_err(backend)?;
        Ok(ids)
    }

    async fn fail_job(&self, lease: &JobLease, error: &str, retry_at: Option<Millis>, now: Millis) -> StoreResult<()> {
        let error: String = no_nul(error).chars().take(2000).collect();
        let (state, run_after) = match retry_at {
            Some(t) => ("queued", t),
            None => ("failed", now),
        };
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let n = execute(
            &tx,
            "UPDATE jobs SET state=$2, run_after=$3, last_error=$4, lease_until=NULL, updated_at=$5,
                 finished_at=CASE WHEN $2='failed' THEN $5::BIGINT END
             WHERE job_id=$1 AND state='running' AND attempts=$6",
            &[&lease.job_id, &state, &run_after, &error, &now, &(lease.attempt as i64)],
        )
        .await?;
        if n == 1 && state == "failed" {
            execute(
                &tx,
                "UPDATE sessions SET state='failed' WHERE session_id=(SELECT session_id FROM jobs WHERE job_id=$1)",
                &[&lease.job_id],
            )
            .await?;
        }
        tx.commit().await.map_err(backend)
    }

    async fn retry_jobs(&self, cid: CollectionId, job_id: Option<&str>, now: Millis) -> StoreResult<Vec<String>> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let ids =
            requeue(&tx, "collection_id=$2 AND ($3::TEXT IS NULL OR job_id=$3)", &[&now, &cid, &job_id], false).await?;
        tx.commit().await.map_err(backend)?;
        Ok(ids)
    }

    async fn requeue_transient_failures(&self, max_requeues: u32, now: Millis) -> StoreResult<Vec<String>> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let ids = requeue(
            &tx,
            "requeues < $2 AND starts_with(last_error, $3)",
            &[&now, &(max_requeues as i64), &TRANSIENT_PREFIX],
            true,
        )
        .await?;
        tx.commit().await.map_err(backend)?;
        Ok(ids)
    }

    async fn renew_lease(&self, lease: &JobLease, until: Millis) -> StoreResult<bool> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let n = execute(
            &tx,
            "UPDATE jobs SET lease_until=$3 WHERE job_id=$1 AND state='running' AND attempts=$2",
            &[&lease.job_id, &(lease.attempt as i64), &until],
        )
        .await?;
        tx.commit().await.map_err(backend)?;
        Ok(n == 1)
    }

    async fn defer_job(&self, lease: &JobLease, run_after: Millis, note: &str, now: Millis) -> StoreResult<()> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        execute(
            &tx,
            "UPDATE jobs SET state='queued', attempts=GREATEST(attempts-1, 0), run_after=$2, last_error=$3, lease_until=NULL, updated_at=$4
             WHERE job_id=$1 AND state='running' AND attempts=$5",
            &[&lease.job_id, &run_after, &note, &now, &(lease.attempt as i64)],
        )
        .await?;
        tx.commit().await.map_err(backend)
    }

    async fn tokens_used_since(&self, project: &str, since: Millis) -> StoreResult<u64> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        let n: i64 = query_one(
            &tx,
            "SELECT COALESCE(SUM(j.prompt_tokens + j.completion_tokens), 0)::bigint FROM jobs j
             JOIN collections c ON c.id = j.collection_id WHERE c.project_name=$1 AND j.updated_at>=$2",
            &[&project, &since],
        )
        .await?
        .get(0);
        Ok(n as u64)
    }

    async fn list_jobs(&self, cid: CollectionId, f: JobFilter) -> StoreResult<Vec<Job>> {
        let mut a = Args::default();
        let mut sql = format!("SELECT {JOB_COLS} FROM jobs WHERE collection_id={}", a.push(cid));
        if let Some(s) = f.state {
            sql.push_str(&format!(" AND state={}", a.push(s.as_str().to_string())));
        }
        if let Some(c) = f.conversation_id {
            sql.push_str(&format!(" AND conversation_id={}", a.push(c)));
        }
        if let Some(s) = f.session_id {
            sql.push_str(&format!(" AND session_id={}", a.push(s)));
        }
        sql.push_str(&format!(" ORDER BY created_at DESC, job_id DESC LIMIT {}", a.push(f.limit.max(1) as i64)));
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        Ok(from_rows(query_all(&tx, &sql, &a.refs()).await?, job_from_row)?.into_iter().map(|(_, j)| j).collect())
    }

    async fn next_job_due(&self) -> StoreResult<Option<Millis>> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        Ok(query_one(
            &tx,
            "SELECT LEAST((SELECT MIN(run_after) FROM jobs WHERE state='queued'), (SELECT MIN(lease_until) FROM jobs WHERE state='running'))",
            &[],
        )
        .await?
        .get(0))
    }
}
