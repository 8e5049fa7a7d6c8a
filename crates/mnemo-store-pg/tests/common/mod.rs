//! Shared by the PostgreSQL integration tests that work in one named schema.

use mnemo_store_pg::{PgOptions, PgStore};

/// `MNEMO_TEST_DATABASE_URL` and a store on a fresh, empty `schema` (2 connections), or `None`
/// after saying the test `what` was skipped because no database is configured.
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
