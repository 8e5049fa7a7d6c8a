//! What is stored about users: `stats`, `user/export` and `user/forget` on SQLite. Forgetting runs in one transaction on the writer;
//! with `secure_delete` on, SQLite overwrites freed content, the FTS5 index is optimised (so
//! deleted terms leave its segments) and the WAL is checkpointed and truncated, so a forgotten
//! user's text is not left in `mnemo.db` or `mnemo.db-wal`.

use crate::rows::*;
use crate::{backend, delete_event_row};
use mnemo_core::StoreError;
use mnemo_core::model::*;
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
    out.profiles = crate::with_history(conn, profiles)?;
    Ok(out)
}

pub fn forget(conn: &Connection, cid: CollectionId, user: &str) -> Result<ForgetCounts, StoreError> {
    let mut n = ForgetCounts::default();
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
    // Merge the full-text index so deleted terms leave its segments, not only its doclists.
    conn.execute("INSERT INTO event_fts(event_fts) VALUES('optimize')", []).map_err(backend)?;
    Ok(n)
}

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
