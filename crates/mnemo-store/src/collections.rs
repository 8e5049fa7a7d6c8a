//! Collections: create, find, list, delete, and their embedding model.

use crate::rows::{COLLECTION_COLS, collection_from_row};
use crate::{SqliteStore, backend};
use async_trait::async_trait;
use mnemo_core::StoreError;
use mnemo_core::model::*;
use mnemo_core::store::StoreResult;
use mnemo_core::store::prelude::*;
use rusqlite::{Connection, OptionalExtension, params};

pub(crate) fn collection_by_name(conn: &Connection, project: &str, name: &str) -> StoreResult<Option<Collection>> {
    conn.query_row(
        &format!("SELECT {COLLECTION_COLS} FROM collections WHERE project_name=?1 AND collection_name=?2"),
        params![project, name],
        collection_from_row,
    )
    .optional()
    .map_err(backend)
}

pub(crate) fn collection_by_id(conn: &Connection, id: CollectionId) -> StoreResult<Collection> {
    conn.query_row(&format!("SELECT {COLLECTION_COLS} FROM collections WHERE id=?1"), [id], collection_from_row)
        .map_err(backend)
}

pub(crate) fn insert_collection(conn: &Connection, c: &NewCollection) -> StoreResult<Collection> {
    let schema = serde_json::to_string(&c.schema).map_err(backend)?;
    conn.execute(
        "INSERT INTO collections(id, project_name, collection_name, description, schema_json, created_at, embedding_model, embedding_dim)
         VALUES (?8,?1,?2,?3,?4,?5,?6,?7)",
        params![c.project_name, c.collection_name, c.description, schema, c.created_at, c.embedding_model, c.embedding_dim, c.id],
    )
    .map_err(backend)?;
    collection_by_id(conn, conn.last_insert_rowid())
}

#[async_trait]
impl CollectionStore for SqliteStore {
    async fn create_collection(&self, c: NewCollection) -> StoreResult<Collection> {
        self.writer
            .write(move |conn| {
                if collection_by_name(conn, &c.project_name, &c.collection_name)?.is_some() {
                    return Err(StoreError::Conflict(format!(
                        "collection_name: collection \"{}\" already exists in project \"{}\"",
                        c.collection_name, c.project_name
                    )));
                }
                insert_collection(conn, &c)
            })
            .await
    }

    async fn get_collection(&self, project: &str, name: &str) -> StoreResult<Option<Collection>> {
        let (p, n) = (project.to_string(), name.to_string());
        self.read(move |conn| collection_by_name(conn, &p, &n)).await
    }

    async fn ensure_collection(&self, c: NewCollection) -> StoreResult<Collection> {
        if let Some(found) = self.get_collection(&c.project_name, &c.collection_name).await? {
            return Ok(found);
        }
        self.writer
            .write(move |conn| match collection_by_name(conn, &c.project_name, &c.collection_name)? {
                Some(found) => Ok(found),
                None => insert_collection(conn, &c),
            })
            .await
    }

    async fn all_collections(&self) -> StoreResult<Vec<Collection>> {
        self.read(|conn| {
            let mut stmt =
                conn.prepare(&format!("SELECT {COLLECTION_COLS} FROM collections ORDER BY id")).map_err(backend)?;
            let rows = stmt.query_map([], collection_from_row).map_err(backend)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(backend)
        })
        .await
    }

    async fn set_collection_embedding(&self, id: CollectionId, model: &str, dim: u32) -> StoreResult<()> {
        let model = model.to_string();
        self.writer
            .write(move |conn| {
                // Vectors of another model recorded before are not comparable: they go.
                for table in crate::schema::vector_tables(conn)? {
                    conn.execute(
                        &format!("DELETE FROM {table} WHERE collection_id=?1 AND EXISTS (SELECT 1 FROM collections WHERE id=?1 AND embedding_model IS NOT NULL AND (embedding_model<>?2 OR embedding_dim IS NOT ?3))"),
                        params![id, model, dim],
                    )
                    .map_err(backend)?;
                }
                conn.execute(
                    "UPDATE collections SET embedding_model=?2, embedding_dim=?3 WHERE id=?1",
                    params![id, model, dim],
                )
                .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn list_collections(&self, project: &str) -> StoreResult<Vec<Collection>> {
        let p = project.to_string();
        self.read(move |conn| {
            let mut stmt = conn
                .prepare(&format!(
                    "SELECT {COLLECTION_COLS} FROM collections WHERE project_name=?1 ORDER BY collection_name"
                ))
                .map_err(backend)?;
            let rows = stmt.query_map([p], collection_from_row).map_err(backend)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(backend)
        })
        .await
    }

    async fn delete_collection(&self, id: CollectionId) -> StoreResult<bool> {
        self.writer
            .write_alone(move |conn| {
                // Children first (explicitly, so it does not depend on foreign-key enforcement).
                conn.execute(
                    "DELETE FROM event_fts WHERE rowid IN (SELECT rowid FROM events WHERE collection_id=?1)",
                    [id],
                )
                .map_err(backend)?;
                conn.execute("DELETE FROM term_stats WHERE collection_id=?1", [id]).map_err(backend)?;
                conn.execute("DELETE FROM collection_stats WHERE collection_id=?1", [id]).map_err(backend)?;
                let rest = [
                    "event_subjects",
                    "events",
                    "scope_versions",
                    "user_activity",
                    "profiles",
                    "jobs",
                    "sessions",
                    "messages",
                    "conversations",
                ];
                for t in crate::schema::vector_tables(conn)?.iter().chain(&rest) {
                    conn.execute(&format!("DELETE FROM {t} WHERE collection_id=?1"), [id]).map_err(backend)?;
                }
                Ok(conn.execute("DELETE FROM collections WHERE id=?1", [id]).map_err(backend)? > 0)
            })
            .await
    }
}
