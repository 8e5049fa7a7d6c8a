//! Searches on a read replica: with `read_url` set, event searches run on the hot standby (they
//! see what it has replayed — proved by pausing its replay), writes and listings on the primary,
//! and a replica that cannot answer hands the search to the primary.

use mnemo_core::model::*;
use mnemo_core::store::prelude::*;
use mnemo_store_pg::{PgOptions, PgStore};
mod common;
use serde_json::json;
use std::time::{Duration, Instant};

/// Waits until the standby has replayed everything the primary has written so far.
async fn caught_up(primary: &tokio_postgres::Client, standby: &tokio_postgres::Client) {
    let lsn: String = primary.query_one("SELECT pg_current_wal_lsn()::text", &[]).await.unwrap().get(0);
    let t = Instant::now();
    loop {
        let done: bool =
            standby.query_one("SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn", &[&lsn]).await.unwrap().get(0);
        if done {
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "the standby did not catch up with {lsn} in 60 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn event(cid: CollectionId, text: &str, time: i64) -> NewEvent {
    let info = json!({"summary": text}).as_object().unwrap().clone();
    let mut v = vec![0.0f32; 8];
    v[time as usize % 8] = 1.0;
    NewEvent { embedding: Some(v), ..NewEvent::of_user(cid, EVENT_V1, "u", info, time) }
}

#[tokio::test]
async fn searches_run_on_the_read_replica_and_fall_back_to_the_primary() {
    let (Ok(url), Ok(standby_url)) =
        (std::env::var("MNEMO_TEST_DATABASE_URL"), std::env::var("MNEMO_TEST_PG_STANDBY_URL"))
    else {
        assert!(
            std::env::var_os("CI").is_none() || std::env::var_os("MNEMO_TEST_DATABASE_URL").is_none(),
            "CI runs this test: scripts/test starts the standby (./scripts/setup-postgres standby)"
        );
        eprintln!(
            "read replica on postgres: SKIPPED (set MNEMO_TEST_DATABASE_URL and MNEMO_TEST_PG_STANDBY_URL; see scripts/setup-postgres standby)"
        );
        return;
    };
    let schema = "read_replica";
    let (primary, standby) = (common::client(&url).await, common::client(&standby_url).await);
    // A run that failed half-way may have left replay paused.
    standby.batch_execute("SELECT pg_wal_replay_resume()").await.unwrap();
    mnemo_store_pg::drop_schema(&url, schema).await.unwrap();
    let opts = |read_url: &str| PgOptions {
        pool: 2,
        schema: Some(schema.into()),
        read_url: Some(read_url.into()),
        ..PgOptions::new(&url)
    };
    let store = PgStore::connect(opts(&standby_url)).await.unwrap();
    let c = common::collection(&store, "c", 8).await;
    let first = store.insert_event(event(c.id, "the user keeps bees in the garden", 1)).await.unwrap();
    store.compact_stats().await.unwrap();
    caught_up(&primary, &standby).await;
    let filter = EventFilter { user_id: vec!["u".into()], active_only: true, ..Default::default() };
    let search = |terms: &str| CandidateQuery {
        vector: Some(vec![1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]),
        terms: mnemo_core::text::search_tokens(terms),
        k: 10,
        vector_hits: None,
        corpus: None,
    };
    let ids = |v: Vec<Candidate>| {
        let mut ids: Vec<String> = v.into_iter().map(|c| c.event.id).collect();
        ids.sort();
        ids
    };
    assert_eq!(
        ids(store.search_candidates(c.id, filter.clone(), search("bees")).await.unwrap()),
        vec![first.id.clone()]
    );

    // Replay paused: what the primary writes now is not on the replica yet — and the search
    // does not see it, so it ran there. The listing runs on the primary and does.
    standby.batch_execute("SELECT pg_wal_replay_pause()").await.unwrap();
    let second = store.insert_event(event(c.id, "the user keeps bees on the roof", 2)).await.unwrap();
    store.compact_stats().await.unwrap();
    assert_eq!(
        ids(store.search_candidates(c.id, filter.clone(), search("bees")).await.unwrap()),
        vec![first.id.clone()],
        "the search ran on the paused replica"
    );
    assert_eq!(store.list_events(c.id, filter.clone(), 10).await.unwrap().len(), 2, "listings read the primary");
    standby.batch_execute("SELECT pg_wal_replay_resume()").await.unwrap();
    caught_up(&primary, &standby).await;
    let mut both = vec![first.id.clone(), second.id.clone()];
    both.sort();
    assert_eq!(ids(store.search_candidates(c.id, filter.clone(), search("bees")).await.unwrap()), both);

    // A replica nobody listens on: the store still starts, and searches run on the primary.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let gone = PgStore::connect(opts(&format!("postgres://postgres@127.0.0.1:{port}/x"))).await.unwrap();
    assert_eq!(ids(gone.search_candidates(c.id, filter, search("bees")).await.unwrap()), both);
    mnemo_store_pg::drop_schema(&url, schema).await.unwrap();
}
