//! What is stored about users on PostgreSQL: `stats`, `user/export` and `user/forget`, with the
//! same selection rules as the embedded store.

use crate::PgStore;
use crate::events::{delete_event_row, ids_of};
use crate::profiles::profiles_where;
use crate::rows::{
    EVENT_COLS, JOB_COLS, MESSAGE_COLS, SESSION_COLS, event_from_row, from_rows, job_from_row, json, message_from_row,
    parse, session_from_row,
};
use crate::sql::{SqlParam, Tx, backend, begin, begin_read, execute, query_all, query_one, query_opt};
use crate::terms::TermStats;
use async_trait::async_trait;
use mnemo_core::model::*;
use mnemo_core::store::StoreResult;
use mnemo_core::store::prelude::*;

/// Conversations whose metadata names the user.
async fn user_conversations(tx: &Tx<'_>, cid: CollectionId, user: &str) -> StoreResult<Vec<String>> {
    ids_of(
        tx,
        "SELECT conversation_id FROM conversations WHERE collection_id=$1 AND meta_json::jsonb->>'user_id' = $2
         ORDER BY created_at, conversation_id",
        &[&cid, &user],
    )
    .await
}

async fn user_event_ids(tx: &Tx<'_>, cid: CollectionId, user: &str) -> StoreResult<Vec<String>> {
    ids_of(
        tx,
        "SELECT event_id FROM event_subjects WHERE collection_id=$1 AND kind='u' AND subject_id=$2 ORDER BY event_id",
        &[&cid, &user],
    )
    .await
}

pub async fn export(tx: &Tx<'_>, cid: CollectionId, user: &str) -> StoreResult<UserData> {
    let mut out = UserData::default();
    for conv in user_conversations(tx, cid, user).await? {
        let p: [SqlParam<'_>; 2] = [&cid, &conv];
        let rows = query_all(
            tx,
            &format!(
                "SELECT {MESSAGE_COLS} FROM messages m WHERE m.collection_id=$1 AND m.conversation_id=$2 ORDER BY m.id"
            ),
            &p,
        )
        .await?;
        out.messages.extend(from_rows(rows, message_from_row)?);
        let rows = query_all(
            tx,
            &format!(
                "SELECT {SESSION_COLS} FROM sessions WHERE collection_id=$1 AND conversation_id=$2 ORDER BY created_at"
            ),
            &p,
        )
        .await?;
        out.sessions.extend(from_rows(rows, session_from_row)?.into_iter().map(|(_, s, _)| s));
        let rows = query_all(
            tx,
            &format!("SELECT {JOB_COLS} FROM jobs WHERE collection_id=$1 AND conversation_id=$2 ORDER BY created_at"),
            &p,
        )
        .await?;
        out.jobs.extend(from_rows(rows, job_from_row)?.into_iter().map(|(_, j)| j));
        let meta =
            query_opt(tx, "SELECT meta_json FROM conversations WHERE collection_id=$1 AND conversation_id=$2", &p)
                .await?;
        out.conversations.push(ConversationInfo {
            conversation_id: conv,
            meta: meta.map(|r| parse(r.get::<_, &str>(0))).unwrap_or_default(),
            short_term: vec![],
            open_messages: 0,
            open_tokens: 0,
            idle_deadline: None,
            sessions: vec![],
        });
    }
    let ids = user_event_ids(tx, cid, user).await?;
    let rows =
        query_all(tx, &format!("SELECT {EVENT_COLS} FROM events WHERE id = ANY($1) ORDER BY id"), &[&ids]).await?;
    out.events = from_rows(rows, event_from_row)?;
    out.profiles = profiles_where(tx, "collection_id=$1 AND user_id=$2 ORDER BY created_at", &[&cid, &user]).await?;
    Ok(out)
}

pub async fn forget(tx: &Tx<'_>, cid: CollectionId, user: &str) -> StoreResult<ForgetCounts> {
    let mut n = ForgetCounts::default();
    let mut stats = TermStats::default();
    crate::webhooks::purge_user(tx, cid, user, &[]).await?;
    for id in user_event_ids(tx, cid, user).await? {
        let users: Vec<String> =
            parse(query_one(tx, "SELECT user_ids FROM events WHERE id=$1 FOR UPDATE", &[&id]).await?.get::<_, &str>(0));
        if users.iter().all(|u| u == user) {
            n.events += delete_event_row(tx, &mut stats, cid, &id).await? as u64;
        } else {
            // Shared with other users: keep it for them, without this user.
            let rest: Vec<&String> = users.iter().filter(|u| *u != user).collect();
            execute(tx, "UPDATE events SET user_ids=$2 WHERE id=$1", &[&id, &json(&rest)]).await?;
            execute(tx, "DELETE FROM event_subjects WHERE event_id=$1 AND kind='u' AND subject_id=$2", &[&id, &user])
                .await?;
        }
    }
    for conv in user_conversations(tx, cid, user).await? {
        let p: [SqlParam<'_>; 2] = [&cid, &conv];
        // Events extracted from the user's conversations are about the user even if untagged.
        let extracted =
            ids_of(tx, "SELECT id FROM events WHERE collection_id=$1 AND conversation_id=$2 ORDER BY id", &p).await?;
        crate::webhooks::purge_user(tx, cid, user, &extracted).await?;
        for id in extracted {
            n.events += delete_event_row(tx, &mut stats, cid, &id).await? as u64;
        }
        n.jobs += execute(tx, "DELETE FROM jobs WHERE collection_id=$1 AND conversation_id=$2", &p).await?;
        n.sessions += execute(tx, "DELETE FROM sessions WHERE collection_id=$1 AND conversation_id=$2", &p).await?;
        n.messages += execute(tx, "DELETE FROM messages WHERE collection_id=$1 AND conversation_id=$2", &p).await?;
        n.conversations +=
            execute(tx, "DELETE FROM conversations WHERE collection_id=$1 AND conversation_id=$2", &p).await?;
    }
    n.profiles += execute(tx, "DELETE FROM profiles WHERE collection_id=$1 AND user_id=$2", &[&cid, &user]).await?;
    execute(tx, "DELETE FROM hits_daily WHERE collection_id=$1 AND user_id=$2", &[&cid, &user]).await?;
    // Their activity (it holds their id, and counts none of their events now).
    for t in ["user_activity", "user_activity_delta"] {
        execute(tx, &format!("DELETE FROM {t} WHERE collection_id=$1 AND subject_id=$2"), &[&cid, &user]).await?;
    }
    stats.flush(tx).await?;
    crate::webhooks::announce_forgotten(tx, cid, user, &n).await?;
    Ok(n)
}

#[async_trait]
impl PrivacyStore for PgStore {
    async fn export_user(&self, cid: CollectionId, user_id: &str) -> StoreResult<UserData> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        export(&tx, cid, user_id).await
    }

    async fn forget_user(&self, cid: CollectionId, user_id: &str) -> StoreResult<ForgetCounts> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let counts = forget(&tx, cid, user_id).await?;
        tx.commit().await.map_err(backend)?;
        // Dead row versions keep the bytes until VACUUM reclaims their space; do it now, in the
        // background (VACUUM cannot run inside a transaction and may take a while on big tables).
        let pool = self.pool.clone();
        tokio::spawn(async move {
            if let Ok(c) = pool.get().await
                && let Err(e) = c
                    .batch_execute("VACUUM messages, events, event_vectors, event_subjects, profiles, profile_history, sessions, jobs, conversations, webhook_outbox")
                    .await
            {
                tracing::warn!("VACUUM after user/forget failed: {e}");
            }
        });
        Ok(counts)
    }
}
