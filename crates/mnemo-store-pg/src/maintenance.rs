//! Lifecycle: expiry and archiving runs, folding (replace events), their records.

use crate::PgStore;
use crate::events::{delete_event_row, delete_events, event_by_id, ids_of, insert_event_row};
use crate::sql::{backend, begin, begin_read, execute, query_all, query_one};
use crate::terms::TermStats;
use async_trait::async_trait;
use mnemo_core::StoreError;
use mnemo_core::model::*;
use mnemo_core::store::StoreResult;
use mnemo_core::store::prelude::*;

#[async_trait]
impl MaintenanceStore for PgStore {
    async fn run_maintenance(
        &self,
        cid: CollectionId,
        now: Millis,
        archive_before: Millis,
        trigger: &str,
    ) -> StoreResult<MaintenanceRun> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        // Replicas run maintenance on the same schedule; one collection's runs go one at a time.
        execute(&tx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 11))", &[&format!("maintenance/{cid}")])
            .await?;
        let expired_ids = ids_of(
            &tx,
            "SELECT id FROM events WHERE collection_id=$1 AND expires_at IS NOT NULL AND expires_at <= $2 AND hit_count = 0 ORDER BY id",
            &[&cid, &now],
        )
        .await?;
        let expired = delete_events(&tx, cid, &expired_ids).await?;
        let archived = execute(
            &tx,
            "UPDATE events SET status='archived', updated_at=$3 WHERE collection_id=$1 AND status='active'
             AND COALESCE(last_hit_at, created_at) < $2",
            &[&cid, &archive_before, &now],
        )
        .await?;
        execute(
            &tx,
            "INSERT INTO maintenance_runs(collection_id, trigger, started_at, expired, archived) VALUES ($1,$2,$3,$4,$5)",
            &[&cid, &trigger, &now, &(expired as i64), &(archived as i64)],
        )
        .await?;
        let name: String = query_one(&tx, "SELECT collection_name FROM collections WHERE id=$1", &[&cid]).await?.get(0);
        tx.commit().await.map_err(backend)?;
        Ok(MaintenanceRun {
            collection_name: name,
            trigger: trigger.to_string(),
            started_at: now,
            expired,
            archived,
            folded: 0,
            digests: 0,
        })
    }

    async fn replace_events(&self, cid: CollectionId, delete: Vec<String>, new: NewEvent) -> StoreResult<Event> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let mut stats = TermStats::default();
        for id in &delete {
            delete_event_row(&tx, &mut stats, cid, id).await?;
        }
        let id = insert_event_row(&tx, &mut stats, &new).await?;
        stats.flush(&tx).await?;
        let out = event_by_id(&tx, cid, &id).await?.ok_or_else(|| StoreError::backend("inserted event vanished"))?;
        tx.commit().await.map_err(backend)?;
        Ok(out)
    }

    async fn note_maintenance(&self, cid: CollectionId, folded: u64, digests: u64) -> StoreResult<()> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        execute(
            &tx,
            "UPDATE maintenance_runs SET folded=folded+$2, digests=digests+$3
             WHERE id=(SELECT id FROM maintenance_runs WHERE collection_id=$1 ORDER BY id DESC LIMIT 1)",
            &[&cid, &(folded as i64), &(digests as i64)],
        )
        .await?;
        tx.commit().await.map_err(backend)
    }

    async fn list_maintenance_runs(&self, cid: CollectionId, limit: u32) -> StoreResult<Vec<MaintenanceRun>> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        let rows = query_all(
            &tx,
            "SELECT c.collection_name, m.trigger, m.started_at, m.expired, m.archived, m.folded, m.digests FROM maintenance_runs m
             JOIN collections c ON c.id = m.collection_id WHERE m.collection_id=$1 ORDER BY m.started_at DESC, m.id DESC LIMIT $2",
            &[&cid, &(limit as i64)],
        )
        .await?;
        Ok(rows
            .iter()
            .map(|r| MaintenanceRun {
                collection_name: r.get(0),
                trigger: r.get(1),
                started_at: r.get(2),
                expired: r.get::<_, i64>(3) as u64,
                archived: r.get::<_, i64>(4) as u64,
                folded: r.get::<_, i64>(5) as u64,
                digests: r.get::<_, i64>(6) as u64,
            })
            .collect())
    }
}
