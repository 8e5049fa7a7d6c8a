//! Shared by the PostgreSQL integration tests that work in one named schema.

use mnemo_core::model::{Collection, CollectionSchema, NewCollection};
use mnemo_core::store::prelude::*;
use mnemo_store_pg::{PgOptions, PgStore};

/// `MNEMO_TEST_DATABASE_URL` and a store on a fresh, empty `schema` (2 connections), or `None`
/// after saying the test `what` was skipped because no database is configured.
#[allow(dead_code)] // each test file uses what it needs
pub async fn fresh_store(what: &str, schema: &str) -> Option<(String, PgStore)> {
    let Ok(url) = std::env::var("MNEMO_TEST_DATABASE_URL") else {
        eprintln!("{what} on postgres: SKIPPED (set MNEMO_TEST_DATABASE_URL; see scripts/setup-postgres)");
        return None;
    };
    mnemo_store_pg::drop_schema(&url, schema).await.unwrap();
    let store =
        PgStore::connect(PgOptions { pool: 2, schema: Some(schema.into()), ..PgOptions::new(&url) }).await.unwrap();
    Some((url, store))
}

/// A collection `name` in project `default` whose model has `dim` dimensions.
#[allow(dead_code)]
pub async fn collection(store: &PgStore, name: &str, dim: u32) -> Collection {
    store
        .create_collection(NewCollection {
            id: None,
            project_name: "default".into(),
            collection_name: name.into(),
            description: String::new(),
            schema: CollectionSchema::default(),
            embedding_model: "test".into(),
            embedding_dim: dim,
            created_at: 0,
        })
        .await
        .unwrap()
}

/// A plain connection for looking at the tables directly (its driver task runs in the background).
#[allow(dead_code)]
pub async fn client(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    client
}
