//! Conversations: messages appended under the trigger, sessions closed (by trigger, flush or idle
//! deadline), and what a conversation or session holds.

use crate::PgStore;
use crate::rows::{
    EVENT_COLS, JOB_COLS, MESSAGE_COLS, SESSION_COLS, event_from_row, from_rows, job_from_row, json, message_from_row,
    parse, session_from_row,
};
use crate::sql::{
    Pipelined, SqlParam, Tx, backend, begin, begin_read, execute, no_nul, query_all, query_one, query_opt,
};
use async_trait::async_trait;
use deadpool_postgres::GenericClient;
use mnemo_core::TriggerReason;
use mnemo_core::model::*;
use mnemo_core::store::StoreResult;
use mnemo_core::store::prelude::*;
use tokio_postgres::Statement;

pub(crate) struct ConversationRow {
    meta: ConversationMeta,
    open_messages: u64,
    open_tokens: u64,
    idle_deadline: Option<Millis>,
}

fn conversation_row(r: &tokio_postgres::Row) -> ConversationRow {
    ConversationRow {
        meta: parse(r.get::<_, &str>(0)),
        open_messages: r.get::<_, i64>(1) as u64,
        open_tokens: r.get::<_, i64>(2) as u64,
        idle_deadline: r.get(3),
    }
}

/// The conversation's row, locked until the transaction ends.
pub(crate) async fn lock_conversation(
    tx: &Tx<'_>,
    cid: CollectionId,
    conv: &str,
) -> StoreResult<Option<ConversationRow>> {
    Ok(query_opt(
        tx,
        "SELECT meta_json, open_messages, open_tokens, idle_deadline FROM conversations WHERE collection_id=$1 AND conversation_id=$2 FOR UPDATE",
        &[&cid, &conv],
    )
    .await?
    .map(|r| conversation_row(&r)))
}

const UPSERT_CONVERSATION: &str =
    "INSERT INTO conversations(collection_id, conversation_id, meta_json, wait_timeout_ms, last_write_at, created_at)
     VALUES ($1,$2,'{}',$3,$4,$4)
     ON CONFLICT (collection_id, conversation_id) DO UPDATE SET last_write_at = EXCLUDED.last_write_at
     RETURNING meta_json, open_messages, open_tokens, idle_deadline";

/// The request's messages in one statement, in their order; a known idempotency key is skipped.
/// `$3` is the session they belong to (NULL: open, short-term).
const INSERT_MESSAGES: &str =
    "INSERT INTO messages(collection_id, conversation_id, session_id, role, name, content, content_raw, time, tokens, idempotency_key, created_at)
     SELECT $1, $2, $3, m.role, m.name, m.content, m.content_raw, m.time, m.tokens, m.key, $4
     FROM unnest($5::text[], $6::text[], $7::text[], $8::bytea[], $9::int8[], $10::int8[], $11::text[])
          WITH ORDINALITY AS m(role, name, content, content_raw, time, tokens, key, ord)
     ORDER BY m.ord
     ON CONFLICT DO NOTHING
     RETURNING tokens";

/// Writes a conversation's row back: the merged metadata, the request's wait and time, and the
/// open counters with the idle deadline.
const STORE_CONVERSATION: &str =
    "UPDATE conversations SET meta_json=$3, wait_timeout_ms=$4, last_write_at=$5, open_messages=$6, open_tokens=$7, idle_deadline=$8
     WHERE collection_id=$1 AND conversation_id=$2";

/// Creates or locks the conversation row (one statement: an upsert that returns it) and inserts
/// the request's messages, both sent before either answers — one round trip. The upsert goes
/// first, so the row is locked before a message is written. Returns the row with the request's
/// metadata merged in, and the statement that writes it back, prepared ([`store_conversation`]).
pub(crate) async fn upsert_with_messages(
    tx: &impl GenericClient,
    req: &AppendRequest,
    session_id: Option<&str>,
) -> StoreResult<(ConversationRow, MessageTally, Statement)> {
    let (upsert, insert, store) = tokio::try_join!(
        tx.prepare_cached(UPSERT_CONVERSATION),
        tx.prepare_cached(INSERT_MESSAGES),
        tx.prepare_cached(STORE_CONVERSATION)
    )
    .map_err(backend)?;
    let wait = req.trigger.wait_timeout_ms();
    let ms = &req.messages;
    let roles: Vec<&str> = ms.iter().map(|m| m.role.as_str()).collect();
    let names: Vec<Option<std::borrow::Cow<str>>> = ms.iter().map(|m| m.name.as_deref().map(no_nul)).collect();
    let contents: Vec<std::borrow::Cow<str>> = ms.iter().map(|m| no_nul(&m.content)).collect();
    let raws: Vec<Option<&[u8]>> =
        ms.iter().map(|m| m.content.contains('\0').then_some(m.content.as_bytes())).collect();
    let times: Vec<i64> = ms.iter().map(|m| m.time).collect();
    let tokens: Vec<i64> = ms.iter().map(|m| m.tokens as i64).collect();
    let keys: Vec<Option<&str>> = ms.iter().map(|m| m.idempotency_key.as_deref()).collect();
    let conversation: [SqlParam; 4] = [&req.collection_id, &req.conversation_id, &wait, &req.now];
    let messages: [SqlParam; 11] = [
        &req.collection_id,
        &req.conversation_id,
        &session_id,
        &req.now,
        &roles,
        &names,
        &contents,
        &raws,
        &times,
        &tokens,
        &keys,
    ];
    // Polled in this order, so sent in this order: each request goes out on its first poll.
    let (row, stored) =
        tokio::try_join!(tx.query_one(&upsert, &conversation), tx.query(&insert, &messages)).map_err(backend)?;
    let mut row = conversation_row(&row);
    row.meta.merge(&req.meta);
    let mut tally = MessageTally::default();
    for r in &stored {
        tally.add(true, r.get::<_, i64>(0) as u64);
    }
    tally.duplicates = (ms.len() - stored.len()) as u64;
    Ok((row, tally, store))
}

/// What [`STORE_CONVERSATION`] writes back of what [`upsert_with_messages`] read.
struct RowWrite<'a> {
    req: &'a AppendRequest,
    meta: String,
    wait: i64,
    open_messages: i64,
    open_tokens: i64,
    idle_deadline: Option<Millis>,
}

impl<'a> RowWrite<'a> {
    fn new(req: &'a AppendRequest, row: &ConversationRow) -> Self {
        RowWrite {
            req,
            meta: json(&row.meta),
            wait: req.trigger.wait_timeout_ms(),
            open_messages: row.open_messages as i64,
            open_tokens: row.open_tokens as i64,
            idle_deadline: row.idle_deadline,
        }
    }

    fn params(&self) -> [SqlParam<'_>; 8] {
        let r = self.req;
        [
            &r.collection_id,
            &r.conversation_id,
            &self.meta,
            &self.wait,
            &r.now,
            &self.open_messages,
            &self.open_tokens,
            &self.idle_deadline,
        ]
    }
}

/// Writes back what [`upsert_with_messages`] read, with the statement it prepared.
pub(crate) async fn store_conversation(
    tx: &impl GenericClient,
    store: &Statement,
    req: &AppendRequest,
    row: &ConversationRow,
) -> StoreResult<()> {
    tx.execute(store, &RowWrite::new(req, row).params()).await.map_err(backend)?;
    Ok(())
}

pub(crate) struct SessionCounts {
    reason: TriggerReason,
    messages: u64,
    tokens: u64,
}

pub(crate) async fn insert_session_and_job(
    tx: &impl GenericClient,
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
    close_locked(tx, cid, conv, &row, reason, now, max_attempts).await
}

/// [`close_open_messages`] for a conversation whose row this transaction holds locked, as `row`.
async fn close_locked(
    tx: &impl GenericClient,
    cid: CollectionId,
    conv: &str,
    row: &ConversationRow,
    reason: TriggerReason,
    now: Millis,
    max_attempts: u32,
) -> StoreResult<Option<SessionClosed>> {
    if row.open_messages == 0 {
        return Ok(None);
    }
    let counts = SessionCounts { reason, messages: row.open_messages, tokens: row.open_tokens };
    let closed = close_session(tx, cid, conv, &row.meta, counts, now, max_attempts).await?;
    execute(
        tx,
        "UPDATE conversations SET open_messages=0, open_tokens=0, idle_deadline=NULL WHERE collection_id=$1 AND conversation_id=$2",
        &[&cid, &conv],
    )
    .await?;
    Ok(Some(closed))
}

/// The session and job for a conversation's open messages, and the messages moved into it; the
/// conversation's counters are the caller's to reset.
async fn close_session(
    tx: &impl GenericClient,
    cid: CollectionId,
    conv: &str,
    meta: &ConversationMeta,
    counts: SessionCounts,
    now: Millis,
    max_attempts: u32,
) -> StoreResult<SessionClosed> {
    let closed = insert_session_and_job(tx, cid, conv, meta, counts, now, max_attempts).await?;
    execute(
        tx,
        "UPDATE messages SET session_id=$1 WHERE collection_id=$2 AND conversation_id=$3 AND session_id IS NULL",
        &[&closed.session_id, &cid, &conv],
    )
    .await?;
    Ok(closed)
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

#[async_trait]
impl ConversationStore for PgStore {
    /// Two round trips when no session closes: `BEGIN` + the upsert + the messages, then the
    /// row written back + `COMMIT` ([`Pipelined`]).
    async fn append_messages(&self, req: AppendRequest) -> StoreResult<AppendOutcome> {
        let tx = Pipelined::new(self.client().await?);
        let c = tx.client();
        let ((), (mut row, MessageTally { stored, duplicates: dup, tokens, largest }, store)) =
            tokio::try_join!(tx.begin(), upsert_with_messages(c, &req, None))?;
        row.open_messages += stored;
        row.open_tokens += tokens;
        let (open_messages, open_tokens) = (row.open_messages, row.open_tokens);
        row.idle_deadline = (open_messages > 0).then(|| req.now + req.trigger.wait_timeout_ms());
        let reason = if stored > 0 { req.trigger.evaluate(open_tokens, open_messages, largest) } else { None };
        let closed = match reason {
            None => {
                tx.execute_and_commit(&store, &RowWrite::new(&req, &row).params()).await?;
                None
            }
            // The row is locked already (no second read of it), and written once, with the
            // counters the closed session leaves: none open, no deadline.
            Some(r) => {
                let counts = SessionCounts { reason: r, messages: open_messages, tokens: open_tokens };
                let closed = close_session(
                    c,
                    req.collection_id,
                    &req.conversation_id,
                    &row.meta,
                    counts,
                    req.now,
                    req.max_job_attempts,
                )
                .await?;
                (row.open_messages, row.open_tokens, row.idle_deadline) = (0, 0, None);
                tx.execute_and_commit(&store, &RowWrite::new(&req, &row).params()).await?;
                Some(closed)
            }
        };
        let (pending_messages, pending_tokens) = if closed.is_some() { (0, 0) } else { (open_messages, open_tokens) };
        Ok(AppendOutcome { accepted: stored, duplicates: dup, pending_messages, pending_tokens, closed })
    }

    async fn add_session(&self, req: AppendRequest) -> StoreResult<SessionClosed> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let placeholder = format!("pending-{}", new_id("ses"));
        let (row, MessageTally { stored, tokens, .. }, store) =
            upsert_with_messages(&tx, &req, Some(&placeholder)).await?;
        // The conversation's open messages and their deadline stay as they are: the session holds
        // only these.
        store_conversation(&tx, &store, &req, &row).await?;
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

    async fn delete_conversation(&self, cid: CollectionId, conv: &str) -> StoreResult<Vec<String>> {
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

    async fn flush_conversation(
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

    async fn close_idle_conversations(
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

    async fn next_idle_deadline(&self) -> StoreResult<Option<Millis>> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        Ok(query_one(&tx, "SELECT MIN(idle_deadline) FROM conversations WHERE idle_deadline IS NOT NULL", &[])
            .await?
            .get(0))
    }

    async fn conversation_info(
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

    async fn session_info(&self, cid: CollectionId, session_id: &str) -> StoreResult<Option<SessionDetail>> {
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
