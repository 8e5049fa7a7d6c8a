//! Webhook endpoints and the delivery side of the outbox on SQLite. The outbox rows themselves
//! are written by the schema's triggers (v10) in the transaction of each change; `user/forget`
//! purges the rows that carry the user's content and announces `user.forgotten` (privacy.rs).

use crate::{SqliteStore, backend};
use async_trait::async_trait;
use mnemo_core::StoreError;
use mnemo_core::model::*;
use mnemo_core::store::StoreResult;
use mnemo_core::store::prelude::*;
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, Row, params, params_from_iter};

const WEBHOOK_COLS: &str = "w.id, w.project_name, w.url, w.secret, w.events, w.description, w.source, w.created_at,
    (SELECT COUNT(*) FROM webhook_outbox o WHERE o.webhook_id = w.id AND o.state = 'pending'),
    (SELECT COUNT(*) FROM webhook_outbox o WHERE o.webhook_id = w.id AND o.state = 'dead'),
    (SELECT COUNT(*) FROM webhook_outbox o WHERE o.webhook_id = w.id AND o.state = 'delivered')";

fn webhook_from_row(r: &Row) -> rusqlite::Result<Webhook> {
    let events: String = r.get(4)?;
    Ok(Webhook {
        webhook_id: r.get(0)?,
        project_name: r.get(1)?,
        url: r.get(2)?,
        secret: r.get(3)?,
        events: parse_events_column(&events),
        description: r.get(5)?,
        source: WebhookSource::parse(&r.get::<_, String>(6)?),
        created_at: r.get(7)?,
        pending: r.get::<_, i64>(8)? as u64,
        dead: r.get::<_, i64>(9)? as u64,
        delivered: r.get::<_, i64>(10)? as u64,
    })
}

const DELIVERY_COLS: &str = "o.id, o.webhook_id, o.kind, o.payload, o.state, o.attempts, o.next_attempt_at, o.last_error, o.last_status, o.created_at, o.finished_at";

fn delivery_from_row(r: &Row) -> rusqlite::Result<Delivery> {
    let payload: String = r.get(3)?;
    Ok(Delivery {
        delivery_id: r.get(0)?,
        webhook_id: r.get(1)?,
        kind: r.get(2)?,
        data: serde_json::from_str(&payload).unwrap_or(serde_json::Value::Null),
        state: DeliveryState::parse(&r.get::<_, String>(4)?).unwrap_or(DeliveryState::Pending),
        attempts: r.get::<_, i64>(5)? as u32,
        next_attempt_at: r.get(6)?,
        last_error: r.get(7)?,
        last_status: r.get::<_, Option<i64>>(8)?.map(|s| s as u16),
        created_at: r.get(9)?,
        finished_at: r.get(10)?,
    })
}

fn upsert(conn: &Connection, w: &NewWebhook) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO webhooks(id, project_name, url, secret, events, description, source, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
         ON CONFLICT(id) DO UPDATE SET project_name=excluded.project_name, url=excluded.url, secret=excluded.secret,
             events=excluded.events, description=excluded.description, source=excluded.source",
        params![
            w.id,
            w.project_name,
            w.url,
            w.secret,
            w.events_column(),
            w.description,
            w.source.as_str(),
            w.created_at
        ],
    )
    .map_err(backend)?;
    Ok(())
}

fn get(conn: &Connection, id: &str) -> Result<Option<Webhook>, StoreError> {
    conn.query_row(&format!("SELECT {WEBHOOK_COLS} FROM webhooks w WHERE w.id=?1"), [id], webhook_from_row)
        .optional()
        .map_err(backend)
}

/// The `user/forget` part of the outbox, in its transaction: rows about `user` (or about the
/// events in `subjects`) that carry content are deleted — delivered or not —, and every endpoint
/// subscribed to `user.forgotten` gets one.
pub(crate) fn purge_user(
    conn: &Connection,
    cid: CollectionId,
    user: &str,
    subjects: &[String],
) -> Result<(), StoreError> {
    const CONTENT: &str = "kind IN ('memory.created', 'memory.updated', 'memory.superseded', 'profile.updated')";
    conn.execute(
        &format!(
            "DELETE FROM webhook_outbox WHERE collection_id=?1 AND {CONTENT}
             AND EXISTS (SELECT 1 FROM json_each(webhook_outbox.user_ids) WHERE value=?2)"
        ),
        params![cid, user],
    )
    .map_err(backend)?;
    let mut stmt = conn
        .prepare_cached(&format!("DELETE FROM webhook_outbox WHERE collection_id=?1 AND subject_id=?2 AND {CONTENT}"))
        .map_err(backend)?;
    for id in subjects {
        stmt.execute(params![cid, id]).map_err(backend)?;
    }
    Ok(())
}

pub(crate) fn announce_forgotten(
    conn: &Connection,
    cid: CollectionId,
    user: &str,
    n: &ForgetCounts,
) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO webhook_outbox(webhook_id, kind, collection_id, subject_id, user_ids, payload, created_at)
         SELECT w.id, 'user.forgotten', c.id, ?2, json_array(?2),
             json_object('project_name', c.project_name, 'collection_name', c.collection_name, 'user_id', ?2,
                 'deleted', json_object('conversations', ?3, 'messages', ?4, 'sessions', ?5, 'jobs', ?6, 'events', ?7, 'profiles', ?8)),
             CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)
         FROM collections c JOIN webhooks w ON w.project_name = c.project_name
         WHERE c.id = ?1 AND instr(w.events, ' user.forgotten ') > 0",
        params![
            cid,
            user,
            n.conversations as i64,
            n.messages as i64,
            n.sessions as i64,
            n.jobs as i64,
            n.events as i64,
            n.profiles as i64
        ],
    )
    .map_err(backend)?;
    Ok(())
}

#[async_trait]
impl WebhookStore for SqliteStore {
    async fn upsert_webhook(&self, w: NewWebhook) -> StoreResult<Webhook> {
        self.writer
            .write(move |conn| {
                upsert(conn, &w)?;
                get(conn, &w.id)?.ok_or_else(|| StoreError::backend("webhook vanished after its insert"))
            })
            .await
    }

    async fn sync_config_webhooks(&self, hooks: Vec<NewWebhook>) -> StoreResult<()> {
        self.writer
            .write(move |conn| {
                let keep: Vec<&str> = hooks.iter().map(|h| h.id.as_str()).collect();
                let stale: Vec<String> = {
                    let mut stmt = conn.prepare("SELECT id FROM webhooks WHERE source='config'").map_err(backend)?;
                    let rows = stmt.query_map([], |r| r.get::<_, String>(0)).map_err(backend)?;
                    rows.collect::<Result<Vec<_>, _>>().map_err(backend)?
                };
                for id in stale.iter().filter(|id| !keep.contains(&id.as_str())) {
                    conn.execute("DELETE FROM webhook_outbox WHERE webhook_id=?1", [id]).map_err(backend)?;
                    conn.execute("DELETE FROM webhooks WHERE id=?1", [id]).map_err(backend)?;
                }
                for h in &hooks {
                    upsert(conn, h)?;
                }
                Ok(())
            })
            .await
    }

    async fn list_webhooks(&self, project: Option<&str>) -> StoreResult<Vec<Webhook>> {
        let project = project.map(String::from);
        self.read(move |conn| {
            let mut stmt = conn
                .prepare(&format!(
                    "SELECT {WEBHOOK_COLS} FROM webhooks w WHERE (?1 IS NULL OR w.project_name=?1) ORDER BY w.created_at, w.id"
                ))
                .map_err(backend)?;
            let rows = stmt.query_map([project], webhook_from_row).map_err(backend)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(backend)
        })
        .await
    }

    async fn delete_webhook(&self, project: &str, id: &str) -> StoreResult<bool> {
        let (project, id) = (project.to_string(), id.to_string());
        self.writer
            .write(move |conn| {
                let found: Option<String> = conn
                    .query_row("SELECT id FROM webhooks WHERE id=?1 AND project_name=?2", params![id, project], |r| {
                        r.get(0)
                    })
                    .optional()
                    .map_err(backend)?;
                if found.is_none() {
                    return Ok(false);
                }
                conn.execute("DELETE FROM webhook_outbox WHERE webhook_id=?1", [&id]).map_err(backend)?;
                conn.execute("DELETE FROM webhooks WHERE id=?1", [&id]).map_err(backend)?;
                Ok(true)
            })
            .await
    }

    async fn claim_deliveries(
        &self,
        now: Millis,
        lease_until: Millis,
        limit: u32,
    ) -> StoreResult<Vec<ClaimedDelivery>> {
        self.writer
            .write(move |conn| {
                let claimed: Vec<ClaimedDelivery> = {
                    let mut stmt = conn
                        .prepare_cached(&format!(
                            "SELECT {DELIVERY_COLS}, w.url, w.secret FROM webhook_outbox o JOIN webhooks w ON w.id = o.webhook_id
                             WHERE o.state='pending' AND o.next_attempt_at <= ?1 ORDER BY o.next_attempt_at, o.id LIMIT ?2"
                        ))
                        .map_err(backend)?;
                    let rows = stmt
                        .query_map(params![now, limit as i64], |r| {
                            Ok(ClaimedDelivery { delivery: delivery_from_row(r)?, url: r.get(11)?, secret: r.get(12)? })
                        })
                        .map_err(backend)?;
                    rows.collect::<Result<_, _>>().map_err(backend)?
                };
                let mut stmt =
                    conn.prepare_cached("UPDATE webhook_outbox SET next_attempt_at=?2 WHERE id=?1").map_err(backend)?;
                for c in &claimed {
                    stmt.execute(params![c.delivery.delivery_id, lease_until]).map_err(backend)?;
                }
                Ok(claimed)
            })
            .await
    }

    async fn finish_delivery(&self, id: i64, outcome: DeliveryOutcome, now: Millis) -> StoreResult<()> {
        self.writer
            .write(move |conn| {
                match outcome {
                    DeliveryOutcome::Delivered { status } => conn.execute(
                        "UPDATE webhook_outbox SET state='delivered', attempts=attempts+1, last_status=?2, last_error=NULL,
                             finished_at=?3 WHERE id=?1 AND state='pending'",
                        params![id, status as i64, now],
                    ),
                    DeliveryOutcome::Failed { status, error, retry_at: Some(at) } => conn.execute(
                        "UPDATE webhook_outbox SET attempts=attempts+1, last_status=?2, last_error=?3, next_attempt_at=?4
                             WHERE id=?1 AND state='pending'",
                        params![id, status.map(|s| s as i64), error, at],
                    ),
                    DeliveryOutcome::Failed { status, error, retry_at: None } => conn.execute(
                        "UPDATE webhook_outbox SET state='dead', attempts=attempts+1, last_status=?2, last_error=?3,
                             finished_at=?4 WHERE id=?1 AND state='pending'",
                        params![id, status.map(|s| s as i64), error, now],
                    ),
                }
                .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn list_deliveries(&self, project: &str, f: DeliveryFilter) -> StoreResult<Vec<Delivery>> {
        let project = project.to_string();
        self.read(move |conn| {
            let mut sql = format!(
                "SELECT {DELIVERY_COLS} FROM webhook_outbox o JOIN webhooks w ON w.id = o.webhook_id WHERE w.project_name=?1"
            );
            let mut args = vec![SqlValue::Text(project)];
            if let Some(id) = f.webhook_id {
                args.push(SqlValue::Text(id));
                sql.push_str(&format!(" AND o.webhook_id=?{}", args.len()));
            }
            if let Some(s) = f.state {
                args.push(SqlValue::Text(s.as_str().into()));
                sql.push_str(&format!(" AND o.state=?{}", args.len()));
            }
            args.push(SqlValue::Integer(f.limit.max(1) as i64));
            sql.push_str(&format!(" ORDER BY o.id DESC LIMIT ?{}", args.len()));
            let mut stmt = conn.prepare(&sql).map_err(backend)?;
            let rows = stmt.query_map(params_from_iter(args.iter()), delivery_from_row).map_err(backend)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(backend)
        })
        .await
    }

    async fn redeliver(
        &self,
        project: &str,
        webhook_id: &str,
        ids: Option<Vec<i64>>,
        now: Millis,
    ) -> StoreResult<Vec<i64>> {
        let (project, webhook_id) = (project.to_string(), webhook_id.to_string());
        self.writer
            .write(move |conn| {
                let dead: Vec<i64> = {
                    let mut stmt = conn
                        .prepare(
                            "SELECT o.id FROM webhook_outbox o JOIN webhooks w ON w.id = o.webhook_id
                             WHERE w.project_name=?1 AND o.webhook_id=?2 AND o.state='dead' ORDER BY o.id",
                        )
                        .map_err(backend)?;
                    let rows = stmt.query_map(params![project, webhook_id], |r| r.get(0)).map_err(backend)?;
                    rows.collect::<Result<_, _>>().map_err(backend)?
                };
                let chosen: Vec<i64> = match &ids {
                    Some(ids) => dead.into_iter().filter(|d| ids.contains(d)).collect(),
                    None => dead,
                };
                let mut stmt = conn
                    .prepare_cached(
                        "UPDATE webhook_outbox SET state='pending', attempts=0, next_attempt_at=?2, finished_at=NULL WHERE id=?1",
                    )
                    .map_err(backend)?;
                for id in &chosen {
                    stmt.execute(params![id, now]).map_err(backend)?;
                }
                Ok(chosen)
            })
            .await
    }

    async fn prune_deliveries(&self, before: Millis) -> StoreResult<u64> {
        self.writer
            .write(move |conn| {
                conn.execute("DELETE FROM webhook_outbox WHERE state='delivered' AND finished_at < ?1", [before])
                    .map(|n| n as u64)
                    .map_err(backend)
            })
            .await
    }
}
