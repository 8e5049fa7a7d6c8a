//! `stats()` on PostgreSQL: exact counts for small tables, PostgreSQL's own estimate
//! (`pg_class.reltuples`) for big ones, so `/metrics` never scans a million rows. A big table is
//! made here by setting the estimate (superuser) rather than by writing 100,000 rows.

use mnemo_core::store::prelude::*;
mod common;

#[tokio::test]
async fn big_tables_are_estimated_small_ones_counted() {
    let schema = "stats_estimates";
    let Some((url, store)) = common::fresh_store("stats", schema).await else { return };
    let s = store.stats().await.unwrap();
    assert_eq!((s.events, s.messages, s.profiles, s.conversations), (0, 0, 0, 0));
    assert!(s.jobs.is_empty(), "{:?}", s.jobs);

    let client = common::client(&url).await;
    let set =
        |table: &str, n: i64| format!("UPDATE pg_class SET reltuples = {n} WHERE oid = '{schema}.{table}'::regclass");
    // Below the threshold the estimate is ignored: the empty table counts 0.
    client.batch_execute(&set("events", 99_999)).await.unwrap();
    assert_eq!(store.stats().await.unwrap().events, 0);
    // From it on, the estimate is what is reported; jobs: the rest of the estimate is `done`.
    client.batch_execute(&set("events", mnemo_store_pg::STATS_ESTIMATE_FROM)).await.unwrap();
    client.batch_execute(&set("messages", 3_000_000)).await.unwrap();
    client.batch_execute(&set("jobs", 250_000)).await.unwrap();
    let s = store.stats().await.unwrap();
    assert_eq!((s.events, s.messages, s.profiles), (mnemo_store_pg::STATS_ESTIMATE_FROM as u64, 3_000_000, 0));
    assert_eq!(s.jobs, vec![("done".to_string(), 250_000)]);
    assert!(s.bytes > 0);
    mnemo_store_pg::drop_schema(&url, schema).await.unwrap();
}

/// A fold of a bulk load's statistics (≥ 100,000 appended rows) vacuums the delta table at once
/// (its dead rows would slow every reader's look-up into it until autovacuum came); a small
/// fold leaves it to autovacuum. Either way the folded figures are exact.
#[tokio::test]
async fn a_big_fold_vacuums_the_delta_table() {
    let schema = "stats_big_fold";
    let Some((url, store)) = common::fresh_store("big fold", schema).await else { return };
    let client = common::client(&url).await;
    let vacuums = async || -> i64 {
        client
            .query_one(
                "SELECT vacuum_count FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'term_stats_delta'",
                &[&schema],
            )
            .await
            .unwrap()
            .get(0)
    };
    let append = |n: i64| {
        format!("INSERT INTO {schema}.term_stats_delta SELECT 1, 't' || (g % 5000), 1 FROM generate_series(1, {n}) g")
    };
    client.batch_execute(&append(1_000)).await.unwrap();
    store.compact_stats().await.unwrap();
    assert_eq!(vacuums().await, 0, "a small fold leaves the delta table to autovacuum");
    client.batch_execute(&append(120_000)).await.unwrap();
    store.compact_stats().await.unwrap();
    assert_eq!(vacuums().await, 1, "a big fold vacuums it");
    let df: i64 = client
        .query_one(&format!("SELECT df FROM {schema}.term_stats WHERE collection_id = 1 AND term = 't7'"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        df,
        1 + 120_000 / 5_000,
        "every appended change folded once (t7: once in the first 1,000, then every 5,000th)"
    );
    mnemo_store_pg::drop_schema(&url, schema).await.unwrap();
}
