//! `stats()` on PostgreSQL: exact counts for small tables, PostgreSQL's own estimate
//! (`pg_class.reltuples`) for big ones, so `/metrics` never scans a million rows. A big table is
//! made here by setting the estimate (superuser) rather than by writing 100,000 rows.

use mnemo_core::store::Store;
mod common;

#[tokio::test]
async fn big_tables_are_estimated_small_ones_counted() {
    let schema = "stats_estimates";
    let Some((url, store)) = common::fresh_store("stats", schema).await else { return };
    let s = store.stats().await.unwrap();
    assert_eq!((s.events, s.messages, s.profiles, s.conversations), (0, 0, 0, 0));
    assert!(s.jobs.is_empty(), "{:?}", s.jobs);

    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
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
