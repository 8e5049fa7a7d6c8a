//! What is stored about users: `stats`, `user/export` and `user/forget` on SQLite. Forgetting runs in one transaction on the writer;
//! with `secure_delete` on, SQLite overwrites freed content, the FTS5 index is optimised (so
//! deleted terms leave its segments) and the WAL is checkpointed and truncated, so a forgotten
//! user's text is not left in `mnemo.db` or `mnemo.db-wal`.

use crate::events::delete_event_row;
use crate::profiles::with_history;
use crate::rows::{
    EVENT_COLS, JOB_COLS, MESSAGE_COLS, PROFILE_COLS, SESSION_COLS, event_from_row, job_from_row, json,
    message_from_row, parse_meta, profile_from_row, session_from_row,
};
use crate::{SqliteStore, backend};
use async_trait::async_trait;
use mnemo_core::StoreError;
use mnemo_core::model::*;
use mnemo_core::store::StoreResult;
use mnemo_core::store::prelude::*;
use rusqlite::{Connection, OptionalExtension, params};

/// Conversations whose metadata names the user.
fn user_conversations(conn: &Connection, cid: CollectionId, user: &str) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT conversation_id FROM conversations WHERE collection_id=?1 AND json_extract(meta_json, '$.user_id')=?2
             ORDER BY created_at, conversation_id",
        )
        .map_err(backend)?;
    let rows = stmt.query_map(params![cid, user], |r| r.get(0)).map_err(backend)?;
    rows.collect::<Result<_, _>>().map_err(backend)
}

fn user_event_ids(conn: &Connection, cid: CollectionId, user: &str) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn
        .prepare_cached("SELECT event_id FROM event_subjects WHERE collection_id=?1 AND kind='u' AND subject_id=?2")
        .map_err(backend)?;
    let rows = stmt.query_map(params![cid, user], |r| r.get(0)).map_err(backend)?;
    rows.collect::<Result<_, _>>().map_err(backend)
}

pub fn export(conn: &Connection, cid: CollectionId, user: &str) -> Result<UserData, StoreError> {
    let mut out = UserData::default();
    for conv in user_conversations(conn, cid, user)? {
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT {MESSAGE_COLS} FROM messages m WHERE m.collection_id=?1 AND m.conversation_id=?2 ORDER BY m.id"
            ))
            .map_err(backend)?;
        let msgs = stmt.query_map(params![cid, conv], message_from_row).map_err(backend)?;
        for m in msgs {
            out.messages.push(m.map_err(backend)?);
        }
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT {SESSION_COLS} FROM sessions WHERE collection_id=?1 AND conversation_id=?2 ORDER BY created_at"
            ))
            .map_err(backend)?;
        let sessions = stmt.query_map(params![cid, conv], session_from_row).map_err(backend)?;
        for s in sessions {
            out.sessions.push(s.map_err(backend)?.1);
        }
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT {JOB_COLS} FROM jobs WHERE collection_id=?1 AND conversation_id=?2 ORDER BY created_at"
            ))
            .map_err(backend)?;
        let jobs = stmt.query_map(params![cid, conv], job_from_row).map_err(backend)?;
        for j in jobs {
            out.jobs.push(j.map_err(backend)?.1);
        }
        let meta: Option<String> = conn
            .query_row(
                "SELECT meta_json FROM conversations WHERE collection_id=?1 AND conversation_id=?2",
                params![cid, conv],
                |r| r.get(0),
            )
            .optional()
            .map_err(backend)?;
        out.conversations.push(ConversationInfo {
            conversation_id: conv,
            meta: parse_meta(&meta.unwrap_or_default()),
            short_term: vec![],
            open_messages: 0,
            open_tokens: 0,
            idle_deadline: None,
            sessions: vec![],
        });
    }
    for id in user_event_ids(conn, cid, user)? {
        let e = conn
            .query_row(&format!("SELECT {EVENT_COLS} FROM events WHERE id=?1"), [&id], event_from_row)
            .map_err(backend)?;
        out.events.push(e);
    }
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {PROFILE_COLS} FROM profiles WHERE collection_id=?1 AND user_id=?2 ORDER BY created_at"
        ))
        .map_err(backend)?;
    let profiles = stmt.query_map(params![cid, user], profile_from_row).map_err(backend)?;
    let profiles = profiles.collect::<Result<Vec<_>, _>>().map_err(backend)?;
    out.profiles = with_history(conn, profiles)?;
    Ok(out)
}

pub fn forget(conn: &Connection, cid: CollectionId, user: &str) -> Result<ForgetCounts, StoreError> {
    let mut n = ForgetCounts::default();
    crate::webhooks::purge_user(conn, cid, user, &[])?;
    for id in user_event_ids(conn, cid, user)? {
        let users: String =
            conn.query_row("SELECT user_ids FROM events WHERE id=?1", [&id], |r| r.get(0)).map_err(backend)?;
        let users: Vec<String> = serde_json::from_str(&users).unwrap_or_default();
        if users.iter().all(|u| u == user) {
            n.events += delete_event_row(conn, cid, &id)? as u64;
        } else {
            // Shared with other users: keep it for them, without this user.
            let rest: Vec<&String> = users.iter().filter(|u| *u != user).collect();
            conn.execute("UPDATE events SET user_ids=?2 WHERE id=?1", params![id, json(&rest)]).map_err(backend)?;
            conn.execute(
                "DELETE FROM event_subjects WHERE event_id=?1 AND kind='u' AND subject_id=?2",
                params![id, user],
            )
            .map_err(backend)?;
        }
    }
    for conv in user_conversations(conn, cid, user)? {
        let p = params![cid, conv];
        // Events extracted from the user's conversations are about the user even if untagged.
        let extracted: Vec<String> = {
            let mut stmt = conn
                .prepare_cached("SELECT id FROM events WHERE collection_id=?1 AND conversation_id=?2")
                .map_err(backend)?;
            let rows = stmt.query_map(p, |r| r.get(0)).map_err(backend)?;
            rows.collect::<Result<_, _>>().map_err(backend)?
        };
        crate::webhooks::purge_user(conn, cid, user, &extracted)?;
        for id in extracted {
            n.events += delete_event_row(conn, cid, &id)? as u64;
        }
        n.jobs +=
            conn.execute("DELETE FROM jobs WHERE collection_id=?1 AND conversation_id=?2", p).map_err(backend)? as u64;
        n.sessions += conn
            .execute("DELETE FROM sessions WHERE collection_id=?1 AND conversation_id=?2", p)
            .map_err(backend)? as u64;
        n.messages += conn
            .execute("DELETE FROM messages WHERE collection_id=?1 AND conversation_id=?2", p)
            .map_err(backend)? as u64;
        n.conversations += conn
            .execute("DELETE FROM conversations WHERE collection_id=?1 AND conversation_id=?2", p)
            .map_err(backend)? as u64;
    }
    n.profiles += conn
        .execute("DELETE FROM profiles WHERE collection_id=?1 AND user_id=?2", params![cid, user])
        .map_err(backend)? as u64;
    conn.execute("DELETE FROM hits_daily WHERE collection_id=?1 AND user_id=?2", params![cid, user])
        .map_err(backend)?;
    // The user's scope stamps go too (they hold the user's id); the clock keeps counting, so
    // a stamp a cached scope was read under never comes back.
    conn.execute(
        "DELETE FROM scope_versions WHERE collection_id=?1 AND kind='u' AND subject_id=?2",
        params![cid, user],
    )
    .map_err(backend)?;
    // So does their activity row (their events are gone: it counts none).
    conn.execute("DELETE FROM user_activity WHERE collection_id=?1 AND subject_id=?2", params![cid, user])
        .map_err(backend)?;
    // Merge the full-text index so deleted terms leave its segments, not only its doclists.
    conn.execute("INSERT INTO event_fts(event_fts) VALUES('optimize')", []).map_err(backend)?;
    crate::webhooks::announce_forgotten(conn, cid, user, &n)?;
    Ok(n)
}

#[async_trait]
impl PrivacyStore for SqliteStore {
    async fn export_user(&self, cid: CollectionId, user_id: &str) -> StoreResult<UserData> {
        let user = user_id.to_string();
        self.read(move |conn| export(conn, cid, &user)).await
    }

    async fn forget_user(&self, cid: CollectionId, user_id: &str) -> StoreResult<ForgetCounts> {
        let user = user_id.to_string();
        let counts = self.writer.write_alone(move |conn| forget(conn, cid, &user)).await?;
        // After the commit: move the WAL into the main file (where secure_delete zeroed the freed
        // content) and truncate it, so no copy of the forgotten pages stays in mnemo.db-wal.
        let busy: i64 = self
            .writer
            .outside_transaction(|conn| {
                conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0)).map_err(backend)
            })
            .await?;
        if busy != 0 {
            tracing::warn!(
                "WAL checkpoint after user/forget was blocked by a reader; the WAL is truncated at the next one"
            );
        }
        Ok(counts)
    }
}
