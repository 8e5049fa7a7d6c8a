//! Conversations: messages appended under the trigger, sessions closed (by trigger, flush or idle
//! deadline), and what a conversation or session holds.

use crate::rows::{
    EVENT_COLS, JOB_COLS, MESSAGE_COLS, SESSION_COLS, event_from_row, job_from_row, message_from_row, meta_json,
    parse_meta, session_from_row,
};
use crate::{SqliteStore, backend};
use async_trait::async_trait;
use mnemo_core::TriggerReason;
use mnemo_core::model::*;
use mnemo_core::store::StoreResult;
use mnemo_core::store::prelude::*;
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};

pub(crate) struct ConversationRow {
    meta: ConversationMeta,
    open_messages: u64,
    open_tokens: u64,
}

pub(crate) fn load_conversation(
    conn: &Connection,
    cid: CollectionId,
    conv: &str,
) -> StoreResult<Option<ConversationRow>> {
    conn.prepare_cached(
        "SELECT meta_json, open_messages, open_tokens FROM conversations WHERE collection_id=?1 AND conversation_id=?2",
    )
    .map_err(backend)?
    .query_row(params![cid, conv], |r| {
        Ok(ConversationRow {
            meta: parse_meta(&r.get::<_, String>(0)?),
            open_messages: r.get::<_, i64>(1)? as u64,
            open_tokens: r.get::<_, i64>(2)? as u64,
        })
    })
    .optional()
    .map_err(backend)
}

/// Creates or updates the conversation row with merged metadata; returns the merged state.
pub(crate) fn upsert_conversation(conn: &Connection, req: &AppendRequest) -> StoreResult<ConversationRow> {
    let mut row = load_conversation(conn, req.collection_id, &req.conversation_id)?.unwrap_or(ConversationRow {
        meta: ConversationMeta::default(),
        open_messages: 0,
        open_tokens: 0,
    });
    row.meta.merge(&req.meta);
    conn.prepare_cached(
        "INSERT INTO conversations(collection_id, conversation_id, meta_json, wait_timeout_ms, last_write_at, created_at)
         VALUES (?1,?2,?3,?4,?5,?5)
         ON CONFLICT(collection_id, conversation_id) DO UPDATE SET meta_json=excluded.meta_json,
             wait_timeout_ms=excluded.wait_timeout_ms, last_write_at=excluded.last_write_at",
    )
    .map_err(backend)?
    .execute(params![req.collection_id, req.conversation_id, meta_json(&row.meta), req.trigger.wait_timeout_ms(), req.now])
    .map_err(backend)?;
    Ok(row)
}

/// Inserts the messages; returns (stored, duplicates, stored tokens, largest stored message).
pub(crate) fn insert_messages(
    conn: &Connection,
    req: &AppendRequest,
    session_id: Option<&str>,
) -> StoreResult<MessageTally> {
    let mut stmt = conn
        .prepare_cached(
            "INSERT INTO messages(collection_id, conversation_id, session_id, role, name, content, time, tokens, idempotency_key, created_at)
             VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10) ON CONFLICT DO NOTHING",
        )
        .map_err(backend)?;
    let mut tally = MessageTally::default();
    for m in &req.messages {
        let n = stmt
            .execute(params![
                req.collection_id,
                req.conversation_id,
                session_id,
                m.role.as_str(),
                m.name,
                m.content,
                m.time,
                m.tokens as i64,
                m.idempotency_key,
                req.now
            ])
            .map_err(backend)?;
        tally.add(n == 1, m.tokens);
    }
    Ok(tally)
}

#[allow(clippy::too_many_arguments)] // one row's worth of columns; a struct would only rename them
pub(crate) fn insert_session_and_job(
    conn: &Connection,
    cid: CollectionId,
    conv: &str,
    meta: &ConversationMeta,
    reason: TriggerReason,
    messages: u64,
    tokens: u64,
    now: Millis,
    max_attempts: u32,
) -> StoreResult<SessionClosed> {
    let session_id = new_id("ses");
    let job_id = new_id("job");
    conn.execute(
        "INSERT INTO sessions(session_id, collection_id, conversation_id, reason, state, message_count, token_count, meta_json, created_at)
         VALUES (?1,?2,?3,?4,'queued',?5,?6,?7,?8)",
        params![session_id, cid, conv, reason.as_str(), messages as i64, tokens as i64, meta_json(meta), now],
    )
    .map_err(backend)?;
    conn.execute(
        "INSERT INTO jobs(job_id, collection_id, kind, state, conversation_id, session_id, max_attempts, run_after, created_at, updated_at)
         VALUES (?1,?2,'extract','queued',?3,?4,?5,?6,?6,?6)",
        params![job_id, cid, conv, session_id, max_attempts, now],
    )
    .map_err(backend)?;
    Ok(SessionClosed { session_id, job_id, conversation_id: conv.to_string(), reason, message_count: messages })
}

/// Closes the conversation's open messages into a session with a queued job.
pub(crate) fn close_open_messages(
    conn: &Connection,
    cid: CollectionId,
    conv: &str,
    reason: TriggerReason,
    now: Millis,
    max_attempts: u32,
) -> StoreResult<Option<SessionClosed>> {
    let Some(row) = load_conversation(conn, cid, conv)? else {
        return Ok(None);
    };
    if row.open_messages == 0 {
        return Ok(None);
    }
    let closed = insert_session_and_job(
        conn,
        cid,
        conv,
        &row.meta,
        reason,
        row.open_messages,
        row.open_tokens,
        now,
        max_attempts,
    )?;
    let moved = conn
        .execute(
            "UPDATE messages SET session_id=?1 WHERE collection_id=?2 AND conversation_id=?3 AND session_id IS NULL",
            params![closed.session_id, cid, conv],
        )
        .map_err(backend)?;
    debug_assert_eq!(moved as u64, row.open_messages);
    conn.execute(
        "UPDATE conversations SET open_messages=0, open_tokens=0, idle_deadline=NULL WHERE collection_id=?1 AND conversation_id=?2",
        params![cid, conv],
    )
    .map_err(backend)?;
    Ok(Some(closed))
}

pub(crate) fn messages_where(conn: &Connection, where_sql: &str, args: &[SqlValue]) -> StoreResult<Vec<StoredMessage>> {
    let mut stmt = conn
        .prepare_cached(&format!("SELECT {MESSAGE_COLS} FROM messages m WHERE {where_sql} ORDER BY m.id"))
        .map_err(backend)?;
    let rows = stmt.query_map(params_from_iter(args.iter()), message_from_row).map_err(backend)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(backend)
}

pub(crate) fn session_summary(
    conn: &Connection,
    session_id: &str,
) -> StoreResult<Option<(CollectionId, SessionSummary, ConversationMeta)>> {
    conn.query_row(&format!("SELECT {SESSION_COLS} FROM sessions WHERE session_id=?1"), [session_id], session_from_row)
        .optional()
        .map_err(backend)
}

#[async_trait]
impl ConversationStore for SqliteStore {
    async fn append_messages(&self, req: AppendRequest) -> StoreResult<AppendOutcome> {
        self.writer
            .write(move |conn| {
                let row = upsert_conversation(conn, &req)?;
                let MessageTally { stored, duplicates: dup, tokens, largest } = insert_messages(conn, &req, None)?;
                let open_messages = row.open_messages + stored;
                let open_tokens = row.open_tokens + tokens;
                let deadline = (open_messages > 0).then(|| req.now + req.trigger.wait_timeout_ms());
                conn.prepare_cached(
                    "UPDATE conversations SET open_messages=?3, open_tokens=?4, idle_deadline=?5 WHERE collection_id=?1 AND conversation_id=?2",
                )
                .map_err(backend)?
                .execute(params![req.collection_id, req.conversation_id, open_messages as i64, open_tokens as i64, deadline])
                .map_err(backend)?;
                let reason = if stored > 0 { req.trigger.evaluate(open_tokens, open_messages, largest) } else { None };
                let closed = match reason {
                    Some(r) => close_open_messages(conn, req.collection_id, &req.conversation_id, r, req.now, req.max_job_attempts)?,
                    None => None,
                };
                let (pending_messages, pending_tokens) =
                    if closed.is_some() { (0, 0) } else { (open_messages, open_tokens) };
                Ok(AppendOutcome { accepted: stored, duplicates: dup, pending_messages, pending_tokens, closed })
            })
            .await
    }

    async fn add_session(&self, req: AppendRequest) -> StoreResult<SessionClosed> {
        self.writer
            .write(move |conn| {
                let row = upsert_conversation(conn, &req)?;
                // Insert first under a placeholder session id, then create the session with the counts.
                let placeholder = format!("pending-{}", new_id("ses"));
                let MessageTally { stored, tokens, .. } = insert_messages(conn, &req, Some(&placeholder))?;
                let closed = insert_session_and_job(
                    conn,
                    req.collection_id,
                    &req.conversation_id,
                    &row.meta,
                    TriggerReason::SessionAdd,
                    stored,
                    tokens,
                    req.now,
                    req.max_job_attempts,
                )?;
                conn.execute(
                    "UPDATE messages SET session_id=?1 WHERE session_id=?2",
                    params![closed.session_id, placeholder],
                )
                .map_err(backend)?;
                Ok(closed)
            })
            .await
    }

    async fn delete_conversation(&self, cid: CollectionId, conversation_id: &str) -> StoreResult<Vec<String>> {
        let conv = conversation_id.to_string();
        self.writer
            .write(move |conn| {
                if load_conversation(conn, cid, &conv)?.is_none() {
                    return Ok(vec![]);
                }
                let ids = |sql: &str| -> StoreResult<Vec<String>> {
                    let mut stmt = conn.prepare(sql).map_err(backend)?;
                    let rows = stmt.query_map(params![cid, conv], |r| r.get(0)).map_err(backend)?;
                    rows.collect::<Result<_, _>>().map_err(backend)
                };
                let sessions = ids("SELECT session_id FROM sessions WHERE collection_id=?1 AND conversation_id=?2")?;
                for id in ids("SELECT id FROM events WHERE collection_id=?1 AND conversation_id=?2")? {
                    crate::events::delete_event_row(conn, cid, &id)?;
                }
                for table in ["messages", "jobs", "sessions", "conversations"] {
                    conn.execute(
                        &format!("DELETE FROM {table} WHERE collection_id=?1 AND conversation_id=?2"),
                        params![cid, conv],
                    )
                    .map_err(backend)?;
                }
                Ok(sessions)
            })
            .await
    }

    async fn flush_conversation(
        &self,
        collection_id: CollectionId,
        conversation_id: &str,
        now: Millis,
        max_job_attempts: u32,
    ) -> StoreResult<Option<SessionClosed>> {
        let conv = conversation_id.to_string();
        self.writer
            .write(move |conn| {
                close_open_messages(conn, collection_id, &conv, TriggerReason::Flush, now, max_job_attempts)
            })
            .await
    }

    async fn close_idle_conversations(
        &self,
        now: Millis,
        limit: u32,
        max_job_attempts: u32,
    ) -> StoreResult<Vec<SessionClosed>> {
        self.writer
            .write(move |conn| {
                let due: Vec<(CollectionId, String)> = {
                    let mut stmt = conn
                        .prepare_cached(
                            "SELECT collection_id, conversation_id FROM conversations
                             WHERE idle_deadline IS NOT NULL AND idle_deadline <= ?1 ORDER BY idle_deadline LIMIT ?2",
                        )
                        .map_err(backend)?;
                    let rows = stmt.query_map(params![now, limit], |r| Ok((r.get(0)?, r.get(1)?))).map_err(backend)?;
                    rows.collect::<Result<_, _>>().map_err(backend)?
                };
                let mut out = Vec::new();
                for (cid, conv) in due {
                    match close_open_messages(conn, cid, &conv, TriggerReason::WaitTimeout, now, max_job_attempts)? {
                        Some(c) => out.push(c),
                        None => {
                            conn.execute(
                                "UPDATE conversations SET idle_deadline=NULL WHERE collection_id=?1 AND conversation_id=?2",
                                params![cid, conv],
                            )
                            .map_err(backend)?;
                        }
                    }
                }
                Ok(out)
            })
            .await
    }

    async fn next_idle_deadline(&self) -> StoreResult<Option<Millis>> {
        self.read(|conn| {
            conn.query_row("SELECT MIN(idle_deadline) FROM conversations WHERE idle_deadline IS NOT NULL", [], |r| {
                r.get(0)
            })
            .map_err(backend)
        })
        .await
    }

    async fn conversation_info(
        &self,
        cid: CollectionId,
        conversation_id: &str,
    ) -> StoreResult<Option<ConversationInfo>> {
        let conv = conversation_id.to_string();
        self.read(move |conn| {
            let row: Option<(String, i64, i64, Option<i64>)> = conn
                .query_row(
                    "SELECT meta_json, open_messages, open_tokens, idle_deadline FROM conversations WHERE collection_id=?1 AND conversation_id=?2",
                    params![cid, conv],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .optional()
                .map_err(backend)?;
            let Some((meta, open_messages, open_tokens, idle_deadline)) = row else { return Ok(None) };
            let short_term = messages_where(
                conn,
                "m.collection_id=?1 AND m.conversation_id=?2 AND (m.session_id IS NULL OR EXISTS (SELECT 1 FROM sessions s WHERE s.session_id=m.session_id AND s.state!='extracted'))",
                &[SqlValue::Integer(cid), SqlValue::Text(conv.clone())],
            )?;
            let mut stmt = conn
                .prepare_cached(&format!("SELECT {SESSION_COLS} FROM sessions WHERE collection_id=?1 AND conversation_id=?2 ORDER BY created_at, session_id"))
                .map_err(backend)?;
            let sessions = stmt
                .query_map(params![cid, conv], session_from_row)
                .map_err(backend)?
                .map(|r| r.map(|(_, s, _)| s))
                .collect::<Result<Vec<_>, _>>()
                .map_err(backend)?;
            Ok(Some(ConversationInfo {
                conversation_id: conv,
                meta: parse_meta(&meta),
                short_term,
                open_messages: open_messages as u64,
                open_tokens: open_tokens as u64,
                idle_deadline,
                sessions,
            }))
        })
        .await
    }

    async fn session_info(&self, cid: CollectionId, session_id: &str) -> StoreResult<Option<SessionDetail>> {
        let sid = session_id.to_string();
        self.read(move |conn| {
            let Some((scid, session, _)) = session_summary(conn, &sid)? else { return Ok(None) };
            if scid != cid {
                return Ok(None);
            }
            let messages = messages_where(conn, "m.session_id=?1", &[SqlValue::Text(sid.clone())])?;
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT {EVENT_COLS} FROM events WHERE collection_id=?1 AND session_id=?2 ORDER BY time, id"
                ))
                .map_err(backend)?;
            let events = stmt
                .query_map(params![cid, sid], event_from_row)
                .map_err(backend)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(backend)?;
            let job = conn
                .query_row(
                    &format!("SELECT {JOB_COLS} FROM jobs WHERE session_id=?1 ORDER BY created_at DESC LIMIT 1"),
                    [&sid],
                    job_from_row,
                )
                .optional()
                .map_err(backend)?
                .map(|(_, j)| j);
            Ok(Some(SessionDetail { session, messages, events, job }))
        })
        .await
    }
}
