//! Collections: create, find, list, delete, and their embedding model.

use crate::PgStore;
use crate::rows::{COLLECTION_COLS, collection_from_row, from_rows, json};
use crate::sql::{Tx, backend, begin, begin_read, execute, no_nul, query_all, query_one, query_opt};
use async_trait::async_trait;
use mnemo_core::StoreError;
use mnemo_core::model::*;
use mnemo_core::store::StoreResult;
use mnemo_core::store::prelude::*;

pub(crate) async fn collection_by_name(tx: &Tx<'_>, project: &str, name: &str) -> StoreResult<Option<Collection>> {
    query_opt(
        tx,
        &format!("SELECT {COLLECTION_COLS} FROM collections WHERE project_name=$1 AND collection_name=$2"),
        &[&project, &name],
    )
    .await?
    .map(|r| collection_from_row(&r))
    .transpose()
}

pub(crate) async fn collection_by_id(tx: &Tx<'_>, id: CollectionId) -> StoreResult<Collection> {
    collection_from_row(
        &query_one(tx, &format!("SELECT {COLLECTION_COLS} FROM collections WHERE id=$1"), &[&id]).await?,
    )
}

/// Inserts the collection unless one of that name exists (`None` then).
pub(crate) async fn insert_collection(tx: &Tx<'_>, c: &NewCollection) -> StoreResult<Option<Collection>> {
    let schema = json(&c.schema);
    let description = no_nul(&c.description);
    let row = query_opt(
        tx,
        &format!(
            "INSERT INTO collections(id, project_name, collection_name, description, schema_json, created_at, embedding_model, embedding_dim)
             VALUES (COALESCE($8, nextval(pg_get_serial_sequence('collections', 'id'))),$1,$2,$3,$4,$5,$6,$7)
             ON CONFLICT (project_name, collection_name) DO NOTHING RETURNING {COLLECTION_COLS}"
        ),
        &[&c.project_name, &c.collection_name, &description, &schema, &c.created_at, &c.embedding_model, &(c.embedding_dim as i64), &c.id],
    )
    .await?;
    row.map(|r| collection_from_row(&r)).transpose()
}

#[async_trait]
impl CollectionStore for PgStore {
    async fn create_collection(&self, c: NewCollection) -> StoreResult<Collection> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let Some(created) = insert_collection(&tx, &c).await? else {
            return Err(StoreError::Conflict(format!(
                "collection_name: collection \"{}\" already exists in project \"{}\"",
                c.collection_name, c.project_name
            )));
        };
        tx.commit().await.map_err(backend)?;
        self.vector_index(&conn, c.embedding_dim as i64).await?;
        Ok(created)
    }

    async fn get_collection(&self, project: &str, name: &str) -> StoreResult<Option<Collection>> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        collection_by_name(&tx, project, name).await
    }

    async fn ensure_collection(&self, c: NewCollection) -> StoreResult<Collection> {
        if let Some(found) = self.get_collection(&c.project_name, &c.collection_name).await? {
            return Ok(found);
        }
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let out = match insert_collection(&tx, &c).await? {
            Some(created) => created,
            None => collection_by_name(&tx, &c.project_name, &c.collection_name)
                .await?
                .ok_or_else(|| StoreError::backend("collection vanished"))?,
        };
        tx.commit().await.map_err(backend)?;
        self.vector_index(&conn, c.embedding_dim as i64).await?;
        Ok(out)
    }

    async fn all_collections(&self) -> StoreResult<Vec<Collection>> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        from_rows(
            query_all(&tx, &format!("SELECT {COLLECTION_COLS} FROM collections ORDER BY id"), &[]).await?,
            collection_from_row,
        )
    }

    async fn set_collection_embedding(&self, id: CollectionId, model: &str, dim: u32) -> StoreResult<()> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        // Vectors of another model recorded before are not comparable: they go.
        execute(
            &tx,
            "DELETE FROM event_vectors WHERE collection_id=$1 AND EXISTS (SELECT 1 FROM collections WHERE id=$1 AND embedding_model IS NOT NULL AND (embedding_model<>$2 OR embedding_dim IS DISTINCT FROM $3))",
            &[&id, &model, &(dim as i64)],
        )
        .await?;
        execute(
            &tx,
            "UPDATE collections SET embedding_model=$2, embedding_dim=$3 WHERE id=$1",
            &[&id, &model, &(dim as i64)],
        )
        .await?;
        tx.commit().await.map_err(backend)?;
        self.vector_index(&conn, dim as i64).await
    }

    async fn list_collections(&self, project: &str) -> StoreResult<Vec<Collection>> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        let rows = query_all(
            &tx,
            &format!("SELECT {COLLECTION_COLS} FROM collections WHERE project_name=$1 ORDER BY collection_name"),
            &[&project],
        )
        .await?;
        from_rows(rows, collection_from_row)
    }

    async fn delete_collection(&self, id: CollectionId) -> StoreResult<bool> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        for t in [
            "term_stats",
            "term_stats_delta",
            "collection_stats",
            "collection_stats_delta",
            "hits_daily",
            "maintenance_runs",
        ] {
            execute(&tx, &format!("DELETE FROM {t} WHERE collection_id=$1"), &[&id]).await?;
        }
        // Everything else goes with the collection (ON DELETE CASCADE) — then the activity its
        // events' triggers appended on their way out.
        let n = execute(&tx, "DELETE FROM collections WHERE id=$1", &[&id]).await?;
        for t in ["user_activity", "user_activity_delta"] {
            execute(&tx, &format!("DELETE FROM {t} WHERE collection_id=$1"), &[&id]).await?;
        }
        tx.commit().await.map_err(backend)?;
        Ok(n > 0)
    }
}
