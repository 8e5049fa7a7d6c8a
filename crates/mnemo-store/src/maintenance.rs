//! Lifecycle: expiry and archiving runs, folding (replace events), their records.

use crate::events::{delete_event_row, event_by_id, insert_event_row};
use crate::{SqliteStore, backend};
use async_trait::async_trait;
use mnemo_core::StoreError;
use mnemo_core::model::*;
use mnemo_core::store::StoreResult;
use mnemo_core::store::prelude::*;
use rusqlite::params;

#[async_trait]
impl MaintenanceStore for SqliteStore {
    async fn run_maintenance(
        &self,
        cid: CollectionId,
        now: Millis,
        archive_before: Millis,
        trigger: &str,
    ) -> StoreResult<MaintenanceRun> {
        let trigger = trigger.to_string();
        // Expiry may delete thousands of events: alone in its transaction (see `Writer::write_alone`).
        self.writer
            .write_alone(move |conn| {
                let expired_ids: Vec<String> = {
                    let mut stmt = conn
                        .prepare_cached(
                            "SELECT id FROM events WHERE collection_id=?1 AND expires_at IS NOT NULL AND expires_at <= ?2 AND hit_count = 0",
                        )
                        .map_err(backend)?;
                    let rows = stmt.query_map(params![cid, now], |r| r.get(0)).map_err(backend)?;
                    rows.collect::<Result<_, _>>().map_err(backend)?
                };
                let mut expired = 0;
                for id in &expired_ids {
                    expired += delete_event_row(conn, cid, id)? as u64;
                }
                let archived = conn
                    .execute(
                        "UPDATE events SET status='archived', updated_at=?3 WHERE collection_id=?1 AND status='active'
                         AND COALESCE(last_hit_at, created_at) < ?2",
                        params![cid, archive_before, now],
                    )
                    .map_err(backend)? as u64;
                conn.execute(
                    "INSERT INTO maintenance_runs(collection_id, trigger, started_at, expired, archived) VALUES (?1,?2,?3,?4,?5)",
                    params![cid, trigger, now, expired as i64, archived as i64],
                )
                .map_err(backend)?;
                let name: String =
                    conn.query_row("SELECT collection_name FROM collections WHERE id=?1", [cid], |r| r.get(0)).map_err(backend)?;
                Ok(MaintenanceRun { collection_name: name, trigger, started_at: now, expired, archived, folded: 0, digests: 0 })
            })
            .await
    }

    async fn replace_events(&self, cid: CollectionId, delete: Vec<String>, new: NewEvent) -> StoreResult<Event> {
        self.writer
            .write(move |conn| {
                for id in &delete {
                    delete_event_row(conn, cid, id)?;
                }
                let id = insert_event_row(conn, &new)?;
                event_by_id(conn, cid, &id)?.ok_or_else(|| StoreError::backend("inserted event vanished"))
            })
            .await
    }

    async fn note_maintenance(&self, cid: CollectionId, folded: u64, digests: u64) -> StoreResult<()> {
        self.writer
            .write(move |conn| {
                conn.execute(
                    "UPDATE maintenance_runs SET folded=folded+?2, digests=digests+?3
                     WHERE id=(SELECT id FROM maintenance_runs WHERE collection_id=?1 ORDER BY id DESC LIMIT 1)",
                    params![cid, folded as i64, digests as i64],
                )
                .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn list_maintenance_runs(&self, cid: CollectionId, limit: u32) -> StoreResult<Vec<MaintenanceRun>> {
        self.read(move |conn| {
            let mut stmt = conn
                .prepare(
                    "SELECT c.collection_name, m.trigger, m.started_at, m.expired, m.archived, m.folded, m.digests FROM maintenance_runs m
                     JOIN collections c ON c.id = m.collection_id WHERE m.collection_id=?1 ORDER BY m.started_at DESC, m.id DESC LIMIT ?2",
                )
                .map_err(backend)?;
            let rows = stmt
                .query_map(params![cid, limit], |r| {
                    Ok(MaintenanceRun {
                        collection_name: r.get(0)?,
                        trigger: r.get(1)?,
                        started_at: r.get(2)?,
                        expired: r.get::<_, i64>(3)? as u64,
                        archived: r.get::<_, i64>(4)? as u64,
                        folded: r.get::<_, i64>(5)? as u64,
                        digests: r.get::<_, i64>(6)? as u64,
                    })
                })
                .map_err(backend)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(backend)
        })
        .await
    }
}
