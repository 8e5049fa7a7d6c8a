//! Conversations: messages appended under the trigger, sessions closed (by trigger, flush or idle
//! deadline), and what a conversation or session holds.

use crate::PgStore;
use crate::rows::{
    EVENT_COLS, JOB_COLS, MESSAGE_COLS, SESSION_COLS, event_from_row, from_rows, job_from_row, json, message_from_row,
    parse, session_from_row,
};
use crate::sql::{Tx, backend, begin, begin_read, execute, no_nul, query_all, query_one, query_opt};
use mnemo_core::model::*;
use mnemo_core::store::StoreResult;
use mnemo_core::{StoreError, TriggerReason};

pub(crate) struct ConversationRow {
    meta: ConversationMeta,
    open_messages: u64,
    open_tokens: u64,
}

/// The conversation's row, locked until the transaction ends.
pub(crate) async fn lock_conversation(
    tx: &Tx<'_>,
    cid: CollectionId,
    conv: &str,
) -> StoreResult<Option<ConversationRow>> {
    Ok(query_opt(
        tx,
        "SELECT meta_json, open_messages, open_tokens FROM conversations WHERE collection_id=$1 AND conversation_id=$2 FOR UPDATE",
        &[&cid, &conv],
    )
    .await?
    .map(|r| ConversationRow {
        meta: parse(r.get::<_, &str>(0)),
        open_messages: r.get::<_, i64>(1) as u64,
        open_tokens: r.get::<_, i64>(2) as u64,
    }))
}

/// Creates or locks the conversation row and merges the request's metadata into it.
pub(crate) async fn upsert_conversation(tx: &Tx<'_>, req: &AppendRequest) -> StoreResult<ConversationRow> {
    let wait = req.trigger.wait_timeout_ms();
    execute(
        tx,
        "INSERT INTO conversations(collection_id, conversation_id, meta_json, wait_timeout_ms, last_write_at, created_at)
         VALUES ($1,$2,'{}',$3,$4,$4) ON CONFLICT DO NOTHING",
        &[&req.collection_id, &req.conversation_id, &wait, &req.now],
    )
    .await?;
    let mut row = lock_conversation(tx, req.collection_id, &req.conversation_id)
        .await?
        .ok_or_else(|| StoreError::backend("conversation row vanished"))?;
    row.meta.merge(&req.meta);
    execute(
        tx,
        "UPDATE conversations SET meta_json=$3, wait_timeout_ms=$4, last_write_at=$5 WHERE collection_id=$1 AND conversation_id=$2",
        &[&req.collection_id, &req.conversation_id, &json(&row.meta), &wait, &req.now],
    )
    .await?;
    Ok(row)
}

/// Inserts the messages; returns (stored, duplicates, stored tokens, largest stored message).
pub(crate) async fn insert_messages(
    tx: &Tx<'_>,
    req: &AppendRequest,
    session_id: Option<&str>,
) -> StoreResult<MessageTally> {
    let mut tally = MessageTally::default();
    for m in &req.messages {
        let n = execute(
            tx,
            "INSERT INTO messages(collection_id, conversation_id, session_id, role, name, content, content_raw, time, tokens, idempotency_key, created_at)
             VALUES ($1,$2,$3,$4,$5,$6,$11,$7,$8,$9,$10) ON CONFLICT DO NOTHING",
            &[
                &req.collection_id,
                &req.conversation_id,
                &session_id,
                &m.role.as_str(),
                &m.name.as_deref().map(no_nul),
                &no_nul(&m.content),
                &m.time,
                &(m.tokens as i64),
                &m.idempotency_key,
                &req.now,
                &m.content.contains('\0').then_some(m.content.as_bytes()),
            ],
        )
        .await?;
        tally.add(n == 1, m.tokens);
    }
    Ok(tally)
}

pub(crate) struct SessionCounts {
    reason: TriggerReason,
    messages: u64,
    tokens: u64,
}

pub(crate) async fn insert_session_and_job(
    tx: &Tx<'_>,
    cid: CollectionId,
    conv: &str,
    meta: &ConversationMeta,
    n: SessionCounts,
    now: Millis,
    max_attempts: u32,
) -> StoreResult<SessionClosed> {
    let session_id = new_id("ses");
    let job_id = new_id("job");
    execute(
        tx,
        "INSERT INTO sessions(session_id, collection_id, conversation_id, reason, state, message_count, token_count, meta_json, created_at)
         VALUES ($1,$2,$3,$4,'queued',$5,$6,$7,$8)",
        &[&session_id, &cid, &conv, &n.reason.as_str(), &(n.messages as i64), &(n.tokens as i64), &json(meta), &now],
    )
    .await?;
    execute(
        tx,
        "INSERT INTO jobs(job_id, collection_id, kind, state, conversation_id, session_id, max_attempts, run_after, created_at, updated_at)
         VALUES ($1,$2,'extract','queued',$3,$4,$5,$6,$6,$6)",
        &[&job_id, &cid, &conv, &session_id, &(max_attempts as i64), &now],
    )
    .await?;
    Ok(SessionClosed {
        session_id,
        job_id,
        conversation_id: conv.to_string(),
        reason: n.reason,
        message_count: n.messages,
    })
}

/// Closes the conversation's open messages into a session with a queued job.
pub(crate) async fn close_open_messages(
    tx: &Tx<'_>,
    cid: CollectionId,
    conv: &str,
    reason: TriggerReason,
    now: Millis,
    max_attempts: u32,
) -> StoreResult<Option<SessionClosed>> {
    let Some(row) = lock_conversation(tx, cid, conv).await? else { return Ok(None) };
    if row.open_messages == 0 {
        return Ok(None);
    }
    let counts = SessionCounts { reason, messages: row.open_messages, tokens: row.open_tokens };
    let closed = insert_session_and_job(tx, cid, conv, &row.meta, counts, now, max_attempts).await?;
    execute(
        tx,
        "UPDATE messages SET session_id=$1 WHERE collection_id=$2 AND conversation_id=$3 AND session_id IS NULL",
        &[&closed.session_id, &cid, &conv],
    )
    .await?;
    execute(
        tx,
        "UPDATE conversations SET open_messages=0, open_tokens=0, idle_deadline=NULL WHERE collection_id=$1 AND conversation_id=$2",
        &[&cid, &conv],
    )
    .await?;
    Ok(Some(closed))
}

pub(crate) async fn session_messages(tx: &Tx<'_>, session_id: &str) -> StoreResult<Vec<StoredMessage>> {
    from_rows(
        query_all(
            tx,
            &format!("SELECT {MESSAGE_COLS} FROM messages m WHERE m.session_id=$1 ORDER BY m.id"),
            &[&session_id],
        )
        .await?,
        message_from_row,
    )
}

pub(crate) async fn session_summary(
    tx: &Tx<'_>,
    session_id: &str,
) -> StoreResult<Option<(CollectionId, SessionSummary, ConversationMeta)>> {
    query_opt(tx, &format!("SELECT {SESSION_COLS} FROM sessions WHERE session_id=$1"), &[&session_id])
        .await?
        .map(|r| session_from_row(&r))
        .transpose()
}

impl PgStore {
    pub(crate) async fn append_messages(&self, req: AppendRequest) -> StoreResult<AppendOutcome> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let row = upsert_conversation(&tx, &req).await?;
        let MessageTally { stored, duplicates: dup, tokens, largest } = insert_messages(&tx, &req, None).await?;
        let open_messages = row.open_messages + stored;
        let open_tokens = row.open_tokens + tokens;
        let deadline = (open_messages > 0).then(|| req.now + req.trigger.wait_timeout_ms());
        execute(
            &tx,
            "UPDATE conversations SET open_messages=$3, open_tokens=$4, idle_deadline=$5 WHERE collection_id=$1 AND conversation_id=$2",
            &[&req.collection_id, &req.conversation_id, &(open_messages as i64), &(open_tokens as i64), &deadline],
        )
        .await?;
        let reason = if stored > 0 { req.trigger.evaluate(open_tokens, open_messages, largest) } else { None };
        let closed = match reason {
            Some(r) => {
                close_open_messages(&tx, req.collection_id, &req.conversation_id, r, req.now, req.max_job_attempts)
                    .await?
            }
            None => None,
        };
        tx.commit().await.map_err(backend)?;
        let (pending_messages, pending_tokens) = if closed.is_some() { (0, 0) } else { (open_messages, open_tokens) };
        Ok(AppendOutcome { accepted: stored, duplicates: dup, pending_messages, pending_tokens, closed })
    }

    pub(crate) async fn add_session(&self, req: AppendRequest) -> StoreResult<SessionClosed> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let row = upsert_conversation(&tx, &req).await?;
        let placeholder = format!("pending-{}", new_id("ses"));
        let MessageTally { stored, tokens, .. } = insert_messages(&tx, &req, Some(&placeholder)).await?;
        let counts = SessionCounts { reason: TriggerReason::SessionAdd, messages: stored, tokens };
        let closed = insert_session_and_job(
            &tx,
            req.collection_id,
            &req.conversation_id,
            &row.meta,
            counts,
            req.now,
            req.max_job_attempts,
        )
        .await?;
        execute(&tx, "UPDATE messages SET session_id=$1 WHERE session_id=$2", &[&closed.session_id, &placeholder])
            .await?;
        tx.commit().await.map_err(backend)?;
        Ok(closed)
    }

    pub(crate) async fn delete_conversation(&self, cid: CollectionId, conv: &str) -> StoreResult<Vec<String>> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        if lock_conversation(&tx, cid, conv).await?.is_none() {
            return Ok(vec![]);
        }
        let ids = |rows: Vec<tokio_postgres::Row>| rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>();
        let p: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&cid, &conv];
        let sessions =
            ids(query_all(&tx, "SELECT session_id FROM sessions WHERE collection_id=$1 AND conversation_id=$2", &p)
                .await?);
        let events =
            ids(query_all(&tx, "SELECT id FROM events WHERE collection_id=$1 AND conversation_id=$2", &p).await?);
        crate::events::delete_events(&tx, cid, &events).await?;
        for table in ["messages", "jobs", "sessions", "conversations"] {
            execute(&tx, &format!("DELETE FROM {table} WHERE collection_id=$1 AND conversation_id=$2"), &p).await?;
        }
        tx.commit().await.map_err(backend)?;
        Ok(sessions)
    }

    pub(crate) async fn flush_conversation(
        &self,
        cid: CollectionId,
        conversation_id: &str,
        now: Millis,
        max_job_attempts: u32,
    ) -> StoreResult<Option<SessionClosed>> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let out = close_open_messages(&tx, cid, conversation_id, TriggerReason::Flush, now, max_job_attempts).await?;
        tx.commit().await.map_err(backend)?;
        Ok(out)
    }

    pub(crate) async fn close_idle_conversations(
        &self,
        now: Millis,
        limit: u32,
        max_job_attempts: u32,
    ) -> StoreResult<Vec<SessionClosed>> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        // Every replica runs this scheduler; a due conversation is taken by exactly one of them
        // (rows another replica holds are skipped, and re-checked under the lock).
        let due = query_all(
            &tx,
            "SELECT collection_id, conversation_id FROM conversations WHERE idle_deadline IS NOT NULL AND idle_deadline <= $1
             ORDER BY idle_deadline LIMIT $2 FOR UPDATE SKIP LOCKED",
            &[&now, &(limit as i64)],
        )
        .await?;
        let mut out = Vec::new();
        for r in due {
            let (cid, conv): (CollectionId, String) = (r.get(0), r.get(1));
            match close_open_messages(&tx, cid, &conv, TriggerReason::WaitTimeout, now, max_job_attempts).await? {
                Some(c) => out.push(c),
                None => {
                    execute(
                        &tx,
                        "UPDATE conversations SET idle_deadline=NULL WHERE collection_id=$1 AND conversation_id=$2",
                        &[&cid, &conv],
                    )
                    .await?;
                }
            }
        }
        tx.commit().await.map_err(backend)?;
        Ok(out)
    }

    pub(crate) async fn next_idle_deadline(&self) -> StoreResult<Option<Millis>> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        Ok(query_one(&tx, "SELECT MIN(idle_deadline) FROM conversations WHERE idle_deadline IS NOT NULL", &[])
            .await?
            .get(0))
    }

    pub(crate) async fn conversation_info(
        &self,
        cid: CollectionId,
        conversation_id: &str,
    ) -> StoreResult<Option<ConversationInfo>> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        let Some(row) = query_opt(
            &tx,
            "SELECT meta_json, open_messages, open_tokens, idle_deadline FROM conversations WHERE collection_id=$1 AND conversation_id=$2",
            &[&cid, &conversation_id],
        )
        .await?
        else {
            return Ok(None);
        };
        let short_term = from_rows(
            query_all(
                &tx,
                &format!(
                    "SELECT {MESSAGE_COLS} FROM messages m WHERE m.collection_id=$1 AND m.conversation_id=$2 AND (m.session_id IS NULL OR EXISTS
                     (SELECT 1 FROM sessions s WHERE s.session_id=m.session_id AND s.state!='extracted')) ORDER BY m.id"
                ),
                &[&cid, &conversation_id],
            )
            .await?,
            message_from_row,
        )?;
        let sessions = from_rows(
            query_all(
                &tx,
                &format!("SELECT {SESSION_COLS} FROM sessions WHERE collection_id=$1 AND conversation_id=$2 ORDER BY created_at, session_id"),
                &[&cid, &conversation_id],
            )
            .await?,
            session_from_row,
        )?;
        Ok(Some(ConversationInfo {
            conversation_id: conversation_id.to_string(),
            meta: parse(row.get::<_, &str>(0)),
            short_term,
            open_messages: row.get::<_, i64>(1) as u64,
            open_tokens: row.get::<_, i64>(2) as u64,
            idle_deadline: row.get(3),
            sessions: sessions.into_iter().map(|(_, s, _)| s).collect(),
        }))
    }

    pub(crate) async fn session_info(&self, cid: CollectionId, session_id: &str) -> StoreResult<Option<SessionDetail>> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        let Some((scid, session, _)) = session_summary(&tx, session_id).await? else { return Ok(None) };
        if scid != cid {
            return Ok(None);
        }
        let messages = session_messages(&tx, session_id).await?;
        let events = from_rows(
            query_all(
                &tx,
                &format!("SELECT {EVENT_COLS} FROM events WHERE collection_id=$1 AND session_id=$2 ORDER BY time, id"),
                &[&cid, &session_id],
            )
            .await?,
            event_from_row,
        )?;
        let job = query_opt(
            &tx,
            &format!("SELECT {JOB_COLS} FROM jobs WHERE session_id=$1 ORDER BY created_at DESC LIMIT 1"),
            &[&session_id],
        )
        .await?
        .map(|r| job_from_row(&r))
        .transpose()?
        .map(|(_, j)| j);
        Ok(Some(SessionDetail { session, messages, events, job }))
    }
}
