//! Webhook endpoints and the delivery side of the outbox on PostgreSQL. The outbox rows are
//! written by the schema's triggers (v3) in the transaction of each change; deliveries are
//! claimed with `FOR UPDATE SKIP LOCKED` under a lease, so replicas share the work and a
//! crashed replica's claims are taken over when their lease ends.

use crate::PgStore;
use crate::sql::{Args, Tx, backend, begin, begin_read, execute, query_all, query_opt};
use async_trait::async_trait;
use mnemo_core::StoreError;
use mnemo_core::model::*;
use mnemo_core::store::StoreResult;
use mnemo_core::store::prelude::*;
use tokio_postgres::Row;

const WEBHOOK_COLS: &str = "w.id, w.project_name, w.url, w.secret, w.events, w.description, w.source, w.created_at,
    (SELECT COUNT(*) FROM webhook_outbox o WHERE o.webhook_id = w.id AND o.state = 'pending'),
    (SELECT COUNT(*) FROM webhook_outbox o WHERE o.webhook_id = w.id AND o.state = 'dead'),
    (SELECT COUNT(*) FROM webhook_outbox o WHERE o.webhook_id = w.id AND o.state = 'delivered')";

fn webhook_from_row(r: &Row) -> Webhook {
    Webhook {
        webhook_id: r.get(0),
        project_name: r.get(1),
        url: r.get(2),
        secret: r.get(3),
        events: parse_events_column(r.get(4)),
        description: r.get(5),
        source: WebhookSource::parse(r.get(6)),
        created_at: r.get(7),
        pending: r.get::<_, i64>(8) as u64,
        dead: r.get::<_, i64>(9) as u64,
        delivered: r.get::<_, i64>(10) as u64,
    }
}

const DELIVERY_COLS: &str = "o.id, o.webhook_id, o.kind, o.payload, o.state, o.attempts, o.next_attempt_at, o.last_error, o.last_status, o.created_at, o.finished_at";

fn delivery_from_row(r: &Row) -> Delivery {
    Delivery {
        delivery_id: r.get(0),
        webhook_id: r.get(1),
        kind: r.get(2),
        data: serde_json::from_str(r.get(3)).unwrap_or(serde_json::Value::Null),
        state: DeliveryState::parse(r.get(4)).unwrap_or(DeliveryState::Pending),
        attempts: r.get::<_, i64>(5) as u32,
        next_attempt_at: r.get(6),
        last_error: r.get(7),
        last_status: r.get::<_, Option<i64>>(8).map(|s| s as u16),
        created_at: r.get(9),
        finished_at: r.get(10),
    }
}

async fn upsert(tx: &Tx<'_>, w: &NewWebhook) -> Result<(), StoreError> {
    execute(
        tx,
        "INSERT INTO webhooks(id, project_name, url, secret, events, description, source, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT(id) DO UPDATE SET project_name=excluded.project_name, url=excluded.url, secret=excluded.secret,
             events=excluded.events, description=excluded.description, source=excluded.source",
        &[
            &w.id,
            &w.project_name,
            &w.url,
            &w.secret,
            &w.events_column(),
            &w.description,
            &w.source.as_str(),
            &w.created_at,
        ],
    )
    .await?;
    Ok(())
}

/// The `user/forget` part of the outbox, in its transaction (see the SQLite store's twin).
pub(crate) async fn purge_user(tx: &Tx<'_>, cid: CollectionId, user: &str, subjects: &[String]) -> StoreResult<()> {
    const CONTENT: &str = "kind IN ('memory.created', 'memory.updated', 'memory.superseded', 'profile.updated')";
    execute(
        tx,
        &format!(
            "DELETE FROM webhook_outbox WHERE collection_id=$1 AND {CONTENT}
             AND EXISTS (SELECT 1 FROM json_array_elements_text(user_ids::json) u WHERE u = $2)"
        ),
        &[&cid, &user],
    )
    .await?;
    if !subjects.is_empty() {
        execute(
            tx,
            &format!("DELETE FROM webhook_outbox WHERE collection_id=$1 AND subject_id = ANY($2) AND {CONTENT}"),
            &[&cid, &subjects],
        )
        .await?;
    }
    Ok(())
}

pub(crate) async fn announce_forgotten(
    tx: &Tx<'_>,
    cid: CollectionId,
    user: &str,
    n: &ForgetCounts,
) -> StoreResult<()> {
    let counts = [n.conversations, n.messages, n.sessions, n.jobs, n.events, n.profiles].map(|c| c as i64);
    execute(
        tx,
        "INSERT INTO webhook_outbox(webhook_id, kind, collection_id, subject_id, user_ids, payload, created_at)
         SELECT w.id, 'user.forgotten', c.id, $2, json_build_array($2::TEXT)::TEXT,
             json_build_object('project_name', c.project_name, 'collection_name', c.collection_name, 'user_id', $2::TEXT,
                 'deleted', json_build_object('conversations', $3::BIGINT, 'messages', $4::BIGINT, 'sessions', $5::BIGINT,
                     'jobs', $6::BIGINT, 'events', $7::BIGINT, 'profiles', $8::BIGINT))::TEXT,
             mnemo_webhook_now()
         FROM collections c JOIN webhooks w ON w.project_name = c.project_name
         WHERE c.id = $1 AND strpos(w.events, ' user.forgotten ') > 0",
        &[&cid, &user, &counts[0], &counts[1], &counts[2], &counts[3], &counts[4], &counts[5]],
    )
    .await?;
    Ok(())
}

#[async_trait]
impl WebhookStore for PgStore {
    async fn upsert_webhook(&self, w: NewWebhook) -> StoreResult<Webhook> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        upsert(&tx, &w).await?;
        let row = query_opt(&tx, &format!("SELECT {WEBHOOK_COLS} FROM webhooks w WHERE w.id=$1"), &[&w.id]).await?;
        tx.commit().await.map_err(backend)?;
        row.map(|r| webhook_from_row(&r)).ok_or_else(|| StoreError::backend("webhook vanished after its insert"))
    }

    async fn sync_config_webhooks(&self, hooks: Vec<NewWebhook>) -> StoreResult<()> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        // Replicas starting together sync the same list: one at a time.
        execute(&tx, "LOCK TABLE webhooks IN SHARE ROW EXCLUSIVE MODE", &[]).await?;
        let keep: Vec<String> = hooks.iter().map(|h| h.id.clone()).collect();
        execute(
            &tx,
            "DELETE FROM webhook_outbox WHERE webhook_id IN (SELECT id FROM webhooks WHERE source='config' AND NOT (id = ANY($1)))",
            &[&keep],
        )
        .await?;
        execute(&tx, "DELETE FROM webhooks WHERE source='config' AND NOT (id = ANY($1))", &[&keep]).await?;
        for h in &hooks {
            upsert(&tx, h).await?;
        }
        tx.commit().await.map_err(backend)
    }

    async fn list_webhooks(&self, project: Option<&str>) -> StoreResult<Vec<Webhook>> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        let rows = query_all(
            &tx,
            &format!(
                "SELECT {WEBHOOK_COLS} FROM webhooks w WHERE ($1::TEXT IS NULL OR w.project_name=$1) ORDER BY w.created_at, w.id"
            ),
            &[&project],
        )
        .await?;
        Ok(rows.iter().map(webhook_from_row).collect())
    }

    async fn delete_webhook(&self, project: &str, id: &str) -> StoreResult<bool> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let found =
            query_opt(&tx, "SELECT id FROM webhooks WHERE id=$1 AND project_name=$2 FOR UPDATE", &[&id, &project])
                .await?
                .is_some();
        if found {
            execute(&tx, "DELETE FROM webhook_outbox WHERE webhook_id=$1", &[&id]).await?;
            execute(&tx, "DELETE FROM webhooks WHERE id=$1", &[&id]).await?;
        }
        tx.commit().await.map_err(backend)?;
        Ok(found)
    }

    async fn claim_deliveries(
        &self,
        now: Millis,
        lease_until: Millis,
        limit: u32,
    ) -> StoreResult<Vec<ClaimedDelivery>> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let rows = query_all(
            &tx,
            &format!(
                "WITH due AS (
                     SELECT id, next_attempt_at AS was_due FROM webhook_outbox WHERE state='pending' AND next_attempt_at <= $1
                     ORDER BY next_attempt_at, id LIMIT $2 FOR UPDATE SKIP LOCKED),
                 claimed AS (
                     UPDATE webhook_outbox o SET next_attempt_at=$3 FROM due WHERE o.id = due.id
                     RETURNING o.*, due.was_due)
                 SELECT {DELIVERY_COLS}, w.url, w.secret, o.was_due FROM claimed o JOIN webhooks w ON w.id = o.webhook_id
                 ORDER BY o.was_due, o.id"
            ),
            &[&now, &(limit as i64), &lease_until],
        )
        .await?;
        tx.commit().await.map_err(backend)?;
        Ok(rows
            .iter()
            .map(|r| {
                let mut d = delivery_from_row(r);
                d.next_attempt_at = r.get(13);
                ClaimedDelivery { delivery: d, url: r.get(11), secret: r.get(12) }
            })
            .collect())
    }

    async fn finish_delivery(&self, id: i64, outcome: DeliveryOutcome, now: Millis) -> StoreResult<()> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        match outcome {
            DeliveryOutcome::Delivered { status } => {
                execute(
                    &tx,
                    "UPDATE webhook_outbox SET state='delivered', attempts=attempts+1, last_status=$2, last_error=NULL,
                         finished_at=$3 WHERE id=$1 AND state='pending'",
                    &[&id, &(status as i64), &now],
                )
                .await?
            }
            DeliveryOutcome::Failed { status, error, retry_at: Some(at) } => {
                execute(
                    &tx,
                    "UPDATE webhook_outbox SET attempts=attempts+1, last_status=$2, last_error=$3, next_attempt_at=$4
                         WHERE id=$1 AND state='pending'",
                    &[&id, &status.map(|s| s as i64), &crate::sql::no_nul(&error), &at],
                )
                .await?
            }
            DeliveryOutcome::Failed { status, error, retry_at: None } => {
                execute(
                    &tx,
                    "UPDATE webhook_outbox SET state='dead', attempts=attempts+1, last_status=$2, last_error=$3,
                         finished_at=$4 WHERE id=$1 AND state='pending'",
                    &[&id, &status.map(|s| s as i64), &crate::sql::no_nul(&error), &now],
                )
                .await?
            }
        };
        tx.commit().await.map_err(backend)
    }

    async fn list_deliveries(&self, project: &str, f: DeliveryFilter) -> StoreResult<Vec<Delivery>> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        let mut a = Args::default();
        let mut sql = format!(
            "SELECT {DELIVERY_COLS} FROM webhook_outbox o JOIN webhooks w ON w.id = o.webhook_id WHERE w.project_name={}",
            a.push(project.to_string())
        );
        if let Some(id) = f.webhook_id {
            sql.push_str(&format!(" AND o.webhook_id={}", a.push(id)));
        }
        if let Some(s) = f.state {
            sql.push_str(&format!(" AND o.state={}", a.push(s.as_str().to_string())));
        }
        sql.push_str(&format!(" ORDER BY o.id DESC LIMIT {}", a.push(f.limit.max(1) as i64)));
        let rows = query_all(&tx, &sql, &a.refs()).await?;
        Ok(rows.iter().map(delivery_from_row).collect())
    }

    async fn redeliver(
        &self,
        project: &str,
        webhook_id: &str,
        ids: Option<Vec<i64>>,
        now: Millis,
    ) -> StoreResult<Vec<i64>> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let rows = query_all(
            &tx,
            "UPDATE webhook_outbox o SET state='pending', attempts=0, next_attempt_at=$4, finished_at=NULL
             FROM webhooks w WHERE w.id = o.webhook_id AND w.project_name=$1 AND o.webhook_id=$2 AND o.state='dead'
                 AND ($3::BIGINT[] IS NULL OR o.id = ANY($3))
             RETURNING o.id",
            &[&project, &webhook_id, &ids, &now],
        )
        .await?;
        tx.commit().await.map_err(backend)?;
        let mut ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        ids.sort_unstable();
        Ok(ids)
    }

    async fn prune_deliveries(&self, before: Millis) -> StoreResult<u64> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let n =
            execute(&tx, "DELETE FROM webhook_outbox WHERE state='delivered' AND finished_at < $1", &[&before]).await?;
        tx.commit().await.map_err(backend)?;
        Ok(n)
    }
}
