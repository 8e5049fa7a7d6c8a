//! The store conformance suite (`mnemo_testing`) on PostgreSQL, a fresh schema per
//! scenario. Runs when `MNEMO_TEST_DATABASE_URL` is set (`eval "$(./scripts/setup-postgres)"`);
//! otherwise it says it was skipped. `./scripts/test` always sets it.

use mnemo_core::store::Store;
use mnemo_store_pg::{PgOptions, PgStore};
use mnemo_testing::{StoreHarness, run_all};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

struct PgHarness {
    url: String,
    schema: String,
}

#[async_trait::async_trait]
impl StoreHarness for PgHarness {
    async fn open(&self) -> Arc<dyn Store> {
        // A small exact scope, and a planner told to avoid sorting, so the scenarios' filtered
        // vector searches go through the HNSW index — where a post-filtered scan can come back
        // short (measured here: 4 of 10 rows without `hnsw.iterative_scan`).
        let sep = if self.url.contains('?') { '&' } else { '?' };
        let url = format!("{}{sep}options=-c%20enable_sort%3Doff", self.url);
        let o = PgOptions { pool: 8, schema: Some(self.schema.clone()), exact_scope: 50, ..PgOptions::new(url) };
        Arc::new(PgStore::connect(o).await.expect("connect to MNEMO_TEST_DATABASE_URL"))
    }

    async fn settle(&self) {
        let o = PgOptions { schema: Some(self.schema.clone()), ..PgOptions::new(&self.url) };
        PgStore::connect(o).await.unwrap().compact_stats().await.unwrap();
        let (client, conn) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        client.batch_execute(&format!("ANALYZE {0}.events, {0}.event_vectors", self.schema)).await.unwrap();
    }
}

/// Two PostgreSQL stores (two schemas of the test cluster standing in for two databases) behind
/// a sharded store, as `store.shards` opens them.
struct ShardedPgHarness(Vec<PgHarness>);

#[async_trait::async_trait]
impl StoreHarness for ShardedPgHarness {
    async fn open(&self) -> Arc<dyn Store> {
        let mut shards = Vec::new();
        for h in &self.0 {
            shards.push(h.open().await);
        }
        Arc::new(mnemo_sharded::ShardedStore::open(shards).await.unwrap())
    }

    async fn settle(&self) {
        for h in &self.0 {
            h.settle().await;
        }
    }

    fn sharded(&self) -> bool {
        true
    }
}

/// A schema name no other run uses.
fn fresh_schema() -> Option<(String, String)> {
    let Ok(url) = std::env::var("MNEMO_TEST_DATABASE_URL") else {
        eprintln!("conformance on postgres: SKIPPED (set MNEMO_TEST_DATABASE_URL; see scripts/setup-postgres)");
        return None;
    };
    static N: AtomicU32 = AtomicU32::new(0);
    let run = format!(
        "c{}_{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
    );
    Some((url, format!("{run}_{}", N.fetch_add(1, Ordering::Relaxed))))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance() {
    if fresh_schema().is_none() {
        return;
    }
    run_all(async || {
        let (url, schema) = fresh_schema().unwrap();
        PgHarness { url, schema }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_over_two_shards() {
    if fresh_schema().is_none() {
        return;
    }
    run_all(async || {
        ShardedPgHarness(
            (0..2)
                .map(|_| {
                    let (url, schema) = fresh_schema().unwrap();
                    PgHarness { url, schema }
                })
                .collect(),
        )
    })
    .await;
}
