//! Store-level tests on a real SQLite file in a temporary directory.

use super::*;
use serde_json::json;

fn new_coll() -> NewCollection {
    NewCollection {
        project_name: "default".into(),
        collection_name: "c1".into(),
        description: String::new(),
        schema: CollectionSchema::default(),
        embedding_model: "test-hashing".into(),
        embedding_dim: 64,
        created_at: 1,
    }
}

async fn setup() -> (tempfile::TempDir, SqliteStore, Collection) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
    let c = store.ensure_collection(new_coll()).await.unwrap();
    (dir, store, c)
}

/// The store conformance suite (`mnemo_core::testing`), on a fresh SQLite file per scenario.
struct SqliteHarness(tempfile::TempDir);

#[async_trait::async_trait]
impl mnemo_core::testing::StoreHarness for SqliteHarness {
    async fn open(&self) -> Arc<dyn Store> {
        Arc::new(SqliteStore::open(self.0.path(), SqliteOptions::default()).unwrap())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance() {
    mnemo_core::testing::run_all(async || SqliteHarness(tempfile::tempdir().unwrap())).await;
}

#[tokio::test]
async fn small_scope_bm25_equals_fts5_and_statistics_stay_exact() {
    let (_d, s, c) = setup().await;
    let words = ["coffee", "hike", "baby", "formula", "kyoto", "奶粉", "咖啡", "上海", "宝宝", "piano"];
    let mut x = 7u64;
    let mut ids = Vec::new();
    for i in 0..60 {
        let text: Vec<&str> = (0..(3 + i % 9))
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                words[(x >> 33) as usize % words.len()]
            })
            .collect();
        let e = s
            .insert_event(NewEvent::of_user(
                c.id,
                EVENT_V1,
                format!("u{}", i % 2),
                json!({"summary": text.join(" ")}).as_object().unwrap().clone(),
                i,
            ))
            .await
            .unwrap();
        ids.push(e.id);
    }
    let query: Vec<String> = ["kyoto", "咖啡", "piano"].iter().map(|t| t.to_string()).collect();
    let cid = c.id;
    let q = query.clone();
    let (fts, ours, stats) = s
        .read(move |conn| {
            let expr = q.iter().map(|t| format!("\"{t}\"")).collect::<Vec<_>>().join(" OR ");
            let fts: Vec<(String, f64)> = conn
                .prepare("SELECT e.id, -bm25(event_fts) FROM event_fts JOIN events e ON e.rowid = event_fts.rowid WHERE event_fts MATCH ?1")
                .unwrap()
                .query_map([expr], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let stats: (i64, i64, i64) = conn
                .query_row(
                    "SELECT (SELECT docs FROM collection_stats), (SELECT tokens FROM collection_stats), (SELECT count(*) FROM events)",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .unwrap();
            let ours = crate::search::candidates(
                conn,
                cid,
                &EventFilter { user_id: vec!["u0".into(), "u1".into()], active_only: true, ..Default::default() },
                &CandidateQuery { vector: None, terms: q.clone(), k: 100 },
            )
            .unwrap();
            Ok((fts, ours, stats))
        })
        .await
        .unwrap();
    assert_eq!(stats.0, stats.2, "document count follows inserts and deletes");
    assert_eq!(ours.len(), fts.len(), "the same documents match");
    for (id, want) in fts {
        let got = ours.iter().find(|c| c.event.id == id).and_then(|c| c.bm25).unwrap();
        assert!((got - want).abs() < 1e-9, "{id}: ours {got} vs FTS5 {want}");
    }
    // Churn: an update re-indexes, a delete removes; our statistics follow exactly (FTS5's own
    // totals do not shrink on a contentless delete, so from here its bm25() drifts; ours does not).
    let patch = EventPatch {
        memory_info: Some(json!({"summary": "kyoto kyoto piano"}).as_object().unwrap().clone()),
        ..Default::default()
    };
    s.update_event(c.id, &ids[3], patch, 100).await.unwrap();
    s.delete_event(c.id, &ids[4]).await.unwrap();
    let (docs, events, bad_df): (i64, i64, i64) = s
        .read(move |conn| {
            let bad: i64 = conn
                .query_row(
                    "SELECT count(*) FROM term_stats t WHERE t.df != (SELECT count(*) FROM event_fts WHERE event_fts MATCH '\"' || t.term || '\"')",
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            Ok((
                conn.query_row("SELECT docs FROM collection_stats", [], |r| r.get(0)).unwrap(),
                conn.query_row("SELECT count(*) FROM events", [], |r| r.get(0)).unwrap(),
                bad,
            ))
        })
        .await
        .unwrap();
    assert_eq!((docs, bad_df), (events, 0), "document and per-term counts are exact after updates and deletes");
}
