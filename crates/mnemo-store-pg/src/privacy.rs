//! What is stored about users on PostgreSQL: `stats`, `user/export` and `user/forget`, with the
//! same selection rules as the embedded store.

use crate::rows::*;
use crate::sql::*;
use crate::{TermStats, delete_event_row, profiles_where};
use mnemo_core::StoreError;
use mnemo_core::model::*;

type R<T> = Result<T, StoreError>;

/// Conversations whose metadata names the user.
async fn user_conversations(tx: &Tx<'_>, cid: CollectionId, user: &str) -> R<Vec<String>> {
    crate::ids_of(
        tx,
        "SELECT conversation_id FROM conversations WHERE collection_id=$1 AND meta_json::jsonb->>'user_id' = $2
         ORDER BY created_at, conversation_id",
        &[&cid, &user],
    )
    .await
}

async fn user_event_ids(tx: &Tx<'_>, cid: CollectionId, user: &str) -> R<Vec<String>> {
    crate::ids_of(
        tx,
        "SELECT event_id FROM event_subjects WHERE collection_id=$1 AND kind='u' AND subject_id=$2 ORDER BY event_id",
        &[&cid, &user],
    )
    .await
}

pub async fn export(tx: &Tx<'_>, cid: CollectionId, user: &str) -> R<UserData> {
    let mut out = UserData::default();
    for conv in user_conversations(tx, cid, user).await? {
        let p: [P<'_>; 2] = [&cid, &conv];
        let rows = query(
            tx,
            &format!(
                "SELECT {MESSAGE_COLS} FROM messages m WHERE m.collection_id=$1 AND m.conversation_id=$2 ORDER BY m.id"
            ),
            &p,
        )
        .await?;
        out.messages.extend(all(rows, message)?);
        let rows = query(
            tx,
            &format!(
                "SELECT {SESSION_COLS} FROM sessions WHERE collection_id=$1 AND conversation_id=$2 ORDER BY created_at"
            ),
            &p,
        )
        .await?;
        out.sessions.extend(all(rows, session)?.into_iter().map(|(_, s, _)| s));
        let rows = query(
            tx,
            &format!("SELECT {JOB_COLS} FROM jobs WHERE collection_id=$1 AND conversation_id=$2 ORDER BY created_at"),
            &p,
        )
        .await?;
        out.jobs.extend(all(rows, job)?.into_iter().map(|(_, j)| j));
        let meta =
            opt(tx, "SELECT meta_json FROM conversations WHERE collection_id=$1 AND conversation_id=$2", &p).await?;
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
    let rows = query(tx, &format!("SELECT {EVENT_COLS} FROM events WHERE id = ANY($1) ORDER BY id"), &[&ids]).await?;
    out.events = all(rows, event)?;
    out.profiles = profiles_where(tx, "collection_id=$1 AND user_id=$2 ORDER BY created_at", &[&cid, &user]).await?;
    Ok(out)
}

pub async fn forget(tx: &Tx<'_>, cid: CollectionId, user: &str) -> R<ForgetCounts> {
    let mut n = ForgetCounts::default();
    let mut stats = TermStats::default();
    for id in user_event_ids(tx, cid, user).await? {
        let users: Vec<String> =
            parse(one(tx, "SELECT user_ids FROM events WHERE id=$1 FOR UPDATE", &[&id]).await?.get::<_, &str>(0));
        if users.iter().all(|u| u == user) {
            n.events += delete_event_row(tx, &mut stats, cid, &id).await? as u64;
        } else {
            // Shared with other users: keep it for them, without this user.
            let rest: Vec<&String> = users.iter().filter(|u| *u != user).collect();
            exec(tx, "UPDATE events SET user_ids=$2 WHERE id=$1", &[&id, &json(&rest)]).await?;
            exec(tx, "DELETE FROM event_subjects WHERE event_id=$1 AND kind='u' AND subject_id=$2", &[&id, &user])
                .await?;
        }
    }
    for conv in user_conversations(tx, cid, user).await? {
        let p: [P<'_>; 2] = [&cid, &conv];
        // Events extracted from the user's conversations are about the user even if untagged.
        let extracted =
            crate::ids_of(tx, "SELECT id FROM events WHERE collection_id=$1 AND conversation_id=$2 ORDER BY id", &p)
                .await?;
        for id in extracted {
            n.events += delete_event_row(tx, &mut stats, cid, &id).await? as u64;
        }
        n.jobs += exec(tx, "DELETE FROM jobs WHERE collection_id=$1 AND conversation_id=$2", &p).await?;
        n.sessions += exec(tx, "DELETE FROM sessions WHERE collection_id=$1 AND conversation_id=$2", &p).await?;
        n.messages += exec(tx, "DELETE FROM messages WHERE collection_id=$1 AND conversation_id=$2", &p).await?;
        n.conversations +=
            exec(tx, "DELETE FROM conversations WHERE collection_id=$1 AND conversation_id=$2", &p).await?;
    }
    n.profiles += exec(tx, "DELETE FROM profiles WHERE collection_id=$1 AND user_id=$2", &[&cid, &user]).await?;
    exec(tx, "DELETE FROM hits_daily WHERE collection_id=$1 AND user_id=$2", &[&cid, &user]).await?;
    stats.flush(tx).await?;
    Ok(n)
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
) -> R<MemoryStats> {
    const DAY: i64 = 86_400_000;
    let from_day = now.div_euclid(DAY) - days as i64 + 1;
    let scope = match user {
        Some(_) => {
            "collection_id=$1 AND id IN (SELECT event_id FROM event_subjects WHERE collection_id=$1 AND kind='u' AND subject_id=$2)"
        }
        None => "collection_id=$1 AND $2::text IS NULL",
    };
    let pairs = async |sql: &str, from: i64| -> R<Vec<(String, u64)>> {
        let rows = query(tx, sql, &[&cid, &user, &from]).await?;
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
    let rows = query(
        tx,
        &format!(
            "SELECT {EVENT_COLS} FROM events WHERE {scope} AND hit_count > 0 ORDER BY hit_count DESC, id LIMIT 10"
        ),
        &[&cid, &user],
    )
    .await?;
    for e in all(rows, event)? {
        out.top_hit.push((e.id.clone(), e.text().chars().take(120).collect(), e.hit_count));
    }
    let count =
        async |extra: &str| -> R<u64> {
            Ok(one(tx, &format!("SELECT COUNT(*) FROM events WHERE {scope}{extra}"), &[&cid, &user])
                .await?
                .get::<_, i64>(0) as u64)
        };
    out.never_hit = count(" AND hit_count = 0").await?;
    out.total_events = count("").await?;
    let rows = query(
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
