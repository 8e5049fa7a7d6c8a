//! Store-level tests on a real SQLite file in a temporary directory.

use super::*;
use mnemo_core::model::*;
use serde_json::json;

pub(crate) fn new_coll() -> NewCollection {
    NewCollection {
        id: None,
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

/// The store conformance suite (`mnemo_testing`), on a fresh SQLite file per scenario.
struct SqliteHarness(tempfile::TempDir);

#[async_trait::async_trait]
impl mnemo_testing::StoreHarness for SqliteHarness {
    async fn open(&self) -> Arc<dyn Store> {
        Arc::new(SqliteStore::open(self.0.path(), SqliteOptions::default()).unwrap())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance() {
    mnemo_testing::run_all(async || SqliteHarness(tempfile::tempdir().unwrap())).await;
}

/// The conformance suite on a sharded store over three SQLite files (webhook outboxes included:
/// delivery ids carry their shard).
struct ShardedSqliteHarness(Vec<tempfile::TempDir>);

#[async_trait::async_trait]
impl mnemo_testing::StoreHarness for ShardedSqliteHarness {
    async fn open(&self) -> Arc<dyn Store> {
        let shards = self
            .0
            .iter()
            .map(|d| Arc::new(SqliteStore::open(d.path(), SqliteOptions::default()).unwrap()) as _)
            .collect();
        Arc::new(mnemo_sharded::ShardedStore::open(shards).await.unwrap())
    }
    fn sharded(&self) -> bool {
        true
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_over_three_shards() {
    let fresh = async || ShardedSqliteHarness((0..3).map(|_| tempfile::tempdir().unwrap()).collect());
    mnemo_testing::run_all(fresh).await;
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
                &crate::scope_cache::ScopeCache::new(0),
                cid,
                &EventFilter { user_id: vec!["u0".into(), "u1".into()], active_only: true, ..Default::default() },
                &CandidateQuery { vector: None, terms: q.clone(), k: 100, vector_hits: None, corpus: None },
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

pub(crate) fn unit(seed: u64, dim: usize) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v: Vec<f32> = (0..dim)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect();
    mnemo_core::embed::normalize(&mut v);
    v
}

/// (rowids of each user's events, vectors whose rowid is not their event's, subject rows whose
/// `event_rowid` is not their event's).
async fn layout(s: &SqliteStore, users: usize) -> (Vec<Vec<i64>>, i64, i64) {
    s.read(move |conn| {
        let mut per_user = Vec::new();
        for u in 0..users {
            let mut stmt = conn
                .prepare("SELECT e.rowid FROM events e JOIN event_subjects s ON s.event_id = e.id WHERE s.subject_id = ?1 ORDER BY e.rowid")
                .unwrap();
            let rows: Vec<i64> =
                stmt.query_map([format!("u{u}")], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap();
            per_user.push(rows);
        }
        let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        Ok((
            per_user,
            count("SELECT count(*) FROM event_vectors v JOIN events e ON e.id = v.event_id WHERE v.rowid != e.rowid"),
            count("SELECT count(*) FROM event_subjects s JOIN events e ON e.id = s.event_id WHERE s.event_rowid IS NOT e.rowid"),
        ))
    })
    .await
    .unwrap()
}

/// A scoped vector search returns exactly the user's events, each with its exact cosine.
async fn assert_scoped_search(s: &SqliteStore, cid: CollectionId, user: &str, want: &[(String, Vec<f32>)]) {
    let q = unit(999, 64);
    let got = s
        .search_candidates(
            cid,
            EventFilter { user_id: vec![user.into()], active_only: true, ..Default::default() },
            CandidateQuery { vector: Some(q.clone()), terms: vec![], k: 100, vector_hits: None, corpus: None },
        )
        .await
        .unwrap();
    assert_eq!(got.len(), want.len(), "{user}: every event of the user and no other");
    for (id, v) in want {
        let c = got.iter().find(|c| &c.event.id == id).unwrap_or_else(|| panic!("{user}: {id} missing"));
        assert_eq!(c.cosine, Some(mnemo_core::embed::dot(&q, v)), "{id}: the cosine of its own vector");
    }
}

#[tokio::test]
async fn a_users_events_and_vectors_are_contiguous_however_writes_interleave() {
    let (_d, s, c) = setup().await;
    let mut written: Vec<Vec<(String, Vec<f32>)>> = vec![vec![]; 3];
    for i in 0..30u64 {
        let u = (i % 3) as usize;
        let v = unit(i, 64);
        let e = s
            .insert_event(NewEvent {
                embedding: Some(v.clone()),
                ..NewEvent::of_user(
                    c.id,
                    EVENT_V1,
                    format!("u{u}"),
                    json!({"summary": format!("event {i}")}).as_object().unwrap().clone(),
                    i as i64,
                )
            })
            .await
            .unwrap();
        written[u].push((e.id, v));
    }
    let (per_user, bad_vectors, bad_subjects) = layout(&s, 3).await;
    assert_eq!((bad_vectors, bad_subjects), (0, 0), "vectors and subject rows carry their event's rowid");
    for (u, rows) in per_user.iter().enumerate() {
        assert_eq!(rows.len(), 10);
        assert_eq!(rows[9] - rows[0], 9, "u{u}'s ten events take ten consecutive rowids: {rows:?}");
    }
    for (u, want) in written.iter().enumerate() {
        assert_scoped_search(&s, c.id, &format!("u{u}"), want).await;
    }
}

/// A scoped full-text search for `word` finds exactly `id` (the event's terms moved with it).
async fn assert_term_search(s: &SqliteStore, cid: CollectionId, user: &str, word: &str, id: &str) {
    let got = s
        .search_candidates(
            cid,
            EventFilter { user_id: vec![user.into()], active_only: true, ..Default::default() },
            CandidateQuery { vector: None, terms: vec![word.into()], k: 100, vector_hits: None, corpus: None },
        )
        .await
        .unwrap();
    let hits: Vec<&str> = got.iter().filter(|c| c.bm25.is_some()).map(|c| c.event.id.as_str()).collect();
    assert_eq!(hits, vec![id], "{user}: full-text \"{word}\"");
}

/// Rows of the legacy vector table (None: the table is gone).
async fn legacy_vectors(s: &SqliteStore) -> Option<i64> {
    s.read(|conn| {
        Ok(crate::schema::has_legacy_vectors(conn)?
            .then(|| conn.query_row("SELECT count(*) FROM event_vectors_legacy", [], |r| r.get(0)).unwrap()))
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn a_data_directory_of_schema_v10_is_usable_at_once_and_relocated_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let mut written: Vec<Vec<(String, Vec<f32>)>> = vec![vec![]; 2];
    {
        // The previous release's layout: SQLite's own rowids, vectors with rowids of their own.
        let mut conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
        schema::migrate_to(&mut conn, 10, |_, _| Ok(())).unwrap().unwrap();
        conn.execute(
            "INSERT INTO collections(id, project_name, collection_name, schema_json, created_at, embedding_model, embedding_dim)
             VALUES (1, 'default', 'c1', ?1, 1, 'test-hashing', 64)",
            [serde_json::to_string(&CollectionSchema::default()).unwrap()],
        )
        .unwrap();
        for i in 0..10u64 {
            let (id, u, v) = (format!("evt_{i}"), (i % 2) as usize, unit(i, 64));
            conn.execute(
                "INSERT INTO events(id, collection_id, memory_type, user_ids, assistant_ids, class, status, time, memory_info, source_message_ids, created_at, updated_at, terms)
                 VALUES (?1, 1, ?2, ?3, '[]', 'conclusion', 'active', ?4, '{\"summary\":\"x\"}', '[]', 1, 1, ?5)",
                rusqlite::params![id, EVENT_V1, format!("[\"u{u}\"]"), i as i64, format!("word{i}")],
            )
            .unwrap();
            conn.execute("INSERT INTO event_fts(rowid, terms) SELECT rowid, terms FROM events WHERE id=?1", [&id])
                .unwrap();
            conn.execute(
                "INSERT INTO event_subjects(collection_id, kind, subject_id, event_id) VALUES (1, 'u', ?1, ?2)",
                rusqlite::params![format!("u{u}"), id],
            )
            .unwrap();
            written[u].push((id, v));
        }
        conn.execute("INSERT INTO collection_stats(collection_id, docs, tokens) VALUES (1, 10, 10)", []).unwrap();
        // Vectors written in the other order: their rowids are not their events'.
        for (id, v) in written.iter().flatten().rev() {
            conn.execute(
                "INSERT INTO event_vectors(event_id, collection_id, vec) VALUES (?1, 1, ?2)",
                rusqlite::params![id, crate::rows::vec_to_blob(v)],
            )
            .unwrap();
        }
    }
    let s = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
    let stamped: i64 = s
        .read(|conn| conn.query_row("SELECT count(*) FROM scope_versions", [], |r| r.get(0)).map_err(backend))
        .await
        .unwrap();
    assert_eq!(stamped, 2, "the upgrade stamps each user who has events (scope_cache)");
    let users = s.list_users(1, None, 10).await.unwrap();
    let counted: Vec<(&str, u64, Option<i64>)> =
        users.iter().map(|u| (u.user_id.as_str(), u.events, u.last_active)).collect();
    assert_eq!(counted, [("u0", 5, Some(1)), ("u1", 5, Some(1))], "the upgrade counts each user's events (v17)");
    // Right after the upgrade nothing has moved, and every read already finds everything.
    assert!(s.relocation.pending());
    assert_eq!(legacy_vectors(&s).await, Some(10), "the vectors wait in the legacy table");
    for (u, want) in written.iter().enumerate() {
        assert_scoped_search(&s, 1, &format!("u{u}"), want).await;
    }
    assert_term_search(&s, 1, "u1", "word3", "evt_3").await;
    // Writes meanwhile: a new event of an old user goes to the user's bucket; a re-embedded old
    // event's vector leaves the legacy table; a deleted one takes its legacy vector along.
    let v = unit(100, 64);
    let e = s
        .insert_event(NewEvent {
            embedding: Some(v.clone()),
            ..NewEvent::of_user(1, EVENT_V1, "u0", json!({"summary": "new"}).as_object().unwrap().clone(), 100)
        })
        .await
        .unwrap();
    written[0].push((e.id, v));
    let v = unit(200, 64);
    s.set_event_vector(1, "evt_2", v.clone(), None).await.unwrap();
    written[0][1].1 = v;
    assert!(s.delete_event(1, "evt_4").await.unwrap());
    written[0].remove(2);
    assert_eq!(legacy_vectors(&s).await, Some(8));
    for (u, want) in written.iter().enumerate() {
        assert_scoped_search(&s, 1, &format!("u{u}"), want).await;
    }
    // The background steps, run to the end: every old event in its user's bucket, contiguous,
    // vectors and terms moved along, the legacy table gone; reads answer exactly as before.
    let mut steps = 0;
    while s.relocate_step().await.unwrap() {
        steps += 1;
        assert!(steps < 100, "the relocation ends");
    }
    assert!(!s.relocation.pending());
    assert_eq!(legacy_vectors(&s).await, None, "the legacy table is dropped at the end");
    let (per_user, bad_vectors, bad_subjects) = layout(&s, 2).await;
    assert_eq!((bad_vectors, bad_subjects), (0, 0), "vectors and subject rows carry their event's new rowid");
    for (u, rows) in per_user.iter().enumerate() {
        assert!(rows[0] >= crate::events::FIRST_CLUSTERED, "u{u}: {rows:?}");
        assert_eq!(rows.last().unwrap() - rows[0], rows.len() as i64 - 1, "u{u}'s events are contiguous: {rows:?}");
    }
    for (u, want) in written.iter().enumerate() {
        assert_scoped_search(&s, 1, &format!("u{u}"), want).await;
    }
    assert_term_search(&s, 1, "u1", "word3", "evt_3").await;
    assert_term_search(&s, 1, "u0", "word8", "evt_8").await;
    // The full-text index (what scopes over 5,000 events match through) points at the new rowids.
    let matched: Vec<(String, String)> = s
        .read(|conn| {
            let mut stmt = conn
                .prepare("SELECT e.terms, e.id FROM event_fts JOIN events e ON e.rowid = event_fts.rowid WHERE event_fts MATCH ?1")
                .unwrap();
            let mut all = Vec::new();
            for i in 0..10 {
                let rows = stmt.query_map([format!("word{i}")], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
                all.extend(rows.map(Result::unwrap));
            }
            Ok(all)
        })
        .await
        .unwrap();
    let want: Vec<(String, String)> =
        (0..10).filter(|i| *i != 4).map(|i| (format!("word{i}"), format!("evt_{i}"))).collect();
    assert_eq!(matched, want, "each old event's full-text row follows it");
    let docs: i64 =
        s.read(|c| Ok(c.query_row("SELECT docs FROM collection_stats", [], |r| r.get(0)).unwrap())).await.unwrap();
    assert_eq!(docs, 10, "BM25 statistics untouched by the move (one of the ten was deleted, one added)");
    // Then the vectors get their f16 copies (schema v12), and searches answer the same.
    assert!(s.f16_fill.pending());
    while s.housekeeping().await.unwrap() {}
    assert_eq!(f16_copies(&s).await, (10, 10), "every vector has its f16 copy, under its rowid");
    for (u, want) in written.iter().enumerate() {
        assert_scoped_search(&s, 1, &format!("u{u}"), want).await;
    }
    // Reopened: nothing left to do.
    drop(s);
    let s = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
    assert!(!s.relocation.pending());
    assert!(!s.f16_fill.pending());
    assert!(s.housekeeping_interval().is_none());
}

/// (vectors, f16 copies whose rowid is a vector's).
async fn f16_copies(s: &SqliteStore) -> (i64, i64) {
    s.read(|conn| {
        let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        Ok((
            count("SELECT count(*) FROM event_vectors"),
            count("SELECT count(*) FROM event_vectors_f16 h JOIN event_vectors v ON v.rowid = h.rowid"),
        ))
    })
    .await
    .unwrap()
}

/// The exact top k of `vectors` against `q`, by score and then by id.
fn exact_top_k(q: &[f32], vectors: &[(String, Vec<f32>)], k: usize) -> Vec<(String, f32)> {
    let mut all: Vec<(usize, f32)> =
        vectors.iter().enumerate().map(|(i, (_, v))| (i, mnemo_core::embed::dot(q, v))).collect();
    all.sort_by(|a, b| b.1.total_cmp(&a.1).then(vectors[b.0].0.cmp(&vectors[a.0].0)));
    let mut top: Vec<(String, f32)> = all.into_iter().take(k).map(|(i, s)| (vectors[i].0.clone(), s)).collect();
    top.sort_by(|a, b| a.0.cmp(&b.0));
    top
}

/// The vector part of a user's search, both as a search with its vector does it (streaming the
/// copies) and as one whose vector comes later does (the copies read first); asserted equal.
async fn vector_top_k(s: &SqliteStore, cid: CollectionId, user: &str, q: &[f32], k: usize) -> Vec<(String, f32)> {
    let f = EventFilter { user_id: vec![user.into()], active_only: true, ..Default::default() };
    let hits = |found: Vec<Candidate>| {
        let mut got: Vec<(String, f32)> =
            found.into_iter().map(|c| (c.event.id, c.cosine.expect("a vector hit has its cosine"))).collect();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        got
    };
    let query = CandidateQuery { vector: Some(q.to_vec()), terms: vec![], k, vector_hits: None, corpus: None };
    let streamed = hits(s.search_candidates(cid, f.clone(), query.clone()).await.unwrap());
    // A term no event has: no full-text hit, but the scope is read (and kept) first.
    let later = CandidateQuery { vector: None, terms: vec!["zzyzx".into()], ..query };
    let v = q.to_vec();
    let hops = s
        .search_candidates_then(
            cid,
            f,
            later,
            Box::pin(async move { Some(v) }),
            Box::new(|_| Box::pin(std::future::ready(None))),
        )
        .await
        .unwrap();
    assert_eq!(hits(hops.first), streamed, "read ahead or streamed, the same vector part");
    streamed
}

#[tokio::test]
async fn the_f16_copies_only_order_a_search_and_the_f32_rows_score_it() {
    let (_d, s, c) = setup().await;
    let dim = 384;
    // 400 vectors around one direction, their scores against it packed within ~10⁻³ (tighter
    // than f16 can tell apart), some equal; a few events without a vector; and a quarter of the
    // vectors without their copy (as if written before schema v12), read in f32.
    let base = unit(7, dim);
    let mut vectors: Vec<(String, Vec<f32>)> = Vec::new();
    for i in 0..420u64 {
        let noise = unit(1000 + i % 380, dim);
        let mut v: Vec<f32> = base.iter().zip(&noise).map(|(b, n)| b + 0.02 * n).collect();
        mnemo_core::embed::normalize(&mut v);
        let embedding = (i % 41 != 40).then(|| v.clone());
        let e = s
            .insert_event(NewEvent {
                embedding: embedding.clone(),
                ..NewEvent::of_user(
                    c.id,
                    EVENT_V1,
                    "u0",
                    json!({"summary": format!("e{i}")}).as_object().unwrap().clone(),
                    1,
                )
            })
            .await
            .unwrap();
        if embedding.is_some() {
            vectors.push((e.id, v));
        }
    }
    s.writer
        .write(|conn| {
            conn.execute("DELETE FROM event_vectors_f16 WHERE rowid % 4 = 0", []).map_err(crate::backend)?;
            Ok(())
        })
        .await
        .unwrap();
    let (n, copies) = f16_copies(&s).await;
    assert_eq!(n, vectors.len() as i64);
    assert!(copies < n && copies > n / 2, "{copies} of {n} vectors keep their copy");
    for (qi, q) in [base.clone(), unit(8, dim), vectors[17].1.clone()].iter().enumerate() {
        for k in [1, 3, 10, 50, 200, 500] {
            let want = exact_top_k(q, &vectors, k);
            assert_eq!(vector_top_k(&s, c.id, "u0", q, k).await, want, "query {qi}, k {k}: ids and exact scores");
        }
    }
    // A deleted event takes its copy along: the next event of the user, which reuses its rowid
    // and has no vector yet, is not scored by the old copy.
    let last = s.insert_event(NewEvent {
        embedding: Some(base.clone()),
        ..NewEvent::of_user(c.id, EVENT_V1, "u0", json!({"summary": "last"}).as_object().unwrap().clone(), 1)
    });
    let last = last.await.unwrap();
    assert_eq!(
        vector_top_k(&s, c.id, "u0", &base, 1).await,
        vec![(last.id.clone(), mnemo_core::embed::dot(&base, &base))]
    );
    assert!(s.delete_event(c.id, &last.id).await.unwrap());
    let orphans: i64 = s
        .read(|conn| {
            Ok(conn
                .query_row(
                    "SELECT count(*) FROM event_vectors_f16 WHERE rowid NOT IN (SELECT rowid FROM event_vectors)",
                    [],
                    |r| r.get(0),
                )
                .unwrap())
        })
        .await
        .unwrap();
    assert_eq!(orphans, 0, "no copy outlives its vector");
    let next = s
        .insert_event(NewEvent::of_user(
            c.id,
            EVENT_V1,
            "u0",
            json!({"summary": "next"}).as_object().unwrap().clone(),
            1,
        ))
        .await
        .unwrap();
    let rowid = |id: String| async {
        s.read(move |conn| {
            Ok(conn.query_row("SELECT rowid FROM events WHERE id=?1", [id], |r| r.get::<_, i64>(0)).unwrap())
        })
        .await
        .unwrap()
    };
    let next_rowid = rowid(next.id.clone()).await;
    let top = vector_top_k(&s, c.id, "u0", &base, 500).await;
    assert!(!top.iter().any(|(id, _)| *id == next.id), "event at rowid {next_rowid} without a vector is not scored");
    assert_eq!(top, exact_top_k(&base, &vectors, 500));
    // A vector set later gets its copy; one replaced gets a new one.
    let v = unit(5, dim);
    s.set_event_vector(c.id, &next.id, v.clone(), None).await.unwrap();
    vectors.push((next.id, v));
    let (n, copies_after) = f16_copies(&s).await;
    assert_eq!((n, copies_after), (vectors.len() as i64, copies + 1));
    assert_eq!(vector_top_k(&s, c.id, "u0", &unit(5, dim), 20).await, exact_top_k(&unit(5, dim), &vectors, 20));
    // Forgetting the user leaves no copy behind.
    s.forget_user(c.id, "u0").await.unwrap();
    let left: i64 = s
        .read(|conn| Ok(conn.query_row("SELECT count(*) FROM event_vectors_f16", [], |r| r.get(0)).unwrap()))
        .await
        .unwrap();
    assert_eq!(left, 0, "user/forget takes the f16 copies too");
}

#[test]
fn reads_map_as_much_of_the_file_as_asked() {
    // SQLite caps the map at 2 GB unless the bundled build raises SQLITE_MAX_MMAP_SIZE
    // (.cargo/config.toml): a 1M-event store is ~4.8 GB.
    let dir = tempfile::tempdir().unwrap();
    let mapped = |mmap_mib: u32| -> i64 {
        let conn =
            open_conn(&dir.path().join(DB_FILE), &SqliteOptions { mmap_mib, ..Default::default() }, false).unwrap();
        conn.query_row("PRAGMA mmap_size", [], |r| r.get(0)).unwrap()
    };
    assert_eq!(mapped(16_384), 16_384 << 20);
    assert_eq!(mapped(0), 0);
}

/// A request written alone (an `event/batch_add` batch) commits whole or leaves nothing, while
/// grouped requests around it commit as usual — and what was acknowledged is there after a reopen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_alone_commits_or_rolls_back_whole_beside_grouped_ones() {
    let (dir, store, _c) = setup().await;
    store.writer.write(|c| c.execute_batch("CREATE TABLE t(x INTEGER)").map_err(backend)).await.unwrap();
    let insert = |c: &rusqlite::Connection, range: std::ops::Range<i64>| -> StoreResult<()> {
        for i in range {
            c.execute("INSERT INTO t VALUES (?1)", [i]).map_err(backend)?;
        }
        Ok(())
    };
    let grouped: Vec<_> = (0..20)
        .map(|i| {
            let w = store.writer.clone();
            tokio::spawn(async move { w.write(move |c| insert(c, i..i + 1)).await })
        })
        .collect();
    let failed = store.writer.write_alone(move |c| {
        insert(c, 100..600)?;
        Err::<(), _>(StoreError::backend("refused after 500 rows"))
    });
    let stored = store.writer.write_alone(move |c| insert(c, 1_000..1_500));
    let (failed, stored) = tokio::join!(failed, stored);
    assert!(failed.is_err());
    stored.unwrap();
    for g in grouped {
        g.await.unwrap().unwrap();
    }
    async fn count(s: &SqliteStore) -> (i64, i64) {
        s.read(|c| {
            c.query_row("SELECT count(*), count(*) FILTER (WHERE x BETWEEN 100 AND 599) FROM t", [], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
            })
            .map_err(backend)
        })
        .await
        .unwrap()
    }
    assert_eq!(count(&store).await, (520, 0), "the refused request left nothing, the others everything");
    drop(store);
    let reopened = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
    assert_eq!(count(&reopened).await, (520, 0));
}

/// Commits are copied from the WAL into the database file by the checkpoint thread, not inside
/// a commit: 1.2 MB written in small commits (~450 pages, under SQLite's own 1,000-page automatic
/// checkpoint, which the writer no longer runs below 16,384) reach the main file while the store
/// is open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_is_checkpointed_beside_the_writer() {
    let (dir, store, _c) = setup().await;
    let main_file = dir.path().join(DB_FILE);
    store.writer.write(|c| c.execute_batch("CREATE TABLE t(x BLOB)").map_err(backend)).await.unwrap();
    let before = std::fs::metadata(&main_file).unwrap().len();
    for i in 0..150u32 {
        let blob: Vec<u8> = (0..8_192u32).map(|j| (i.wrapping_mul(31) ^ j) as u8).collect();
        store
            .writer
            .write(move |c| c.execute("INSERT INTO t VALUES (?1)", [blob]).map(|_| ()).map_err(backend))
            .await
            .unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let now = std::fs::metadata(&main_file).unwrap().len();
        if now >= before + 1_200_000 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the main file stayed at {now} bytes (from {before})");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let n = store.read(|c| c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0)).map_err(backend)).await;
    assert_eq!(n.unwrap(), 150);
}

#[tokio::test]
async fn turn_vectors_leave_no_row_behind_their_event_or_its_vector() {
    let (_dir, s, c) = setup().await;
    let turns = || Some(vec![unit(1, 64), unit(2, 64), unit(3, 64)]);
    let mut ids = Vec::new();
    for i in 0..3 {
        let e = NewEvent {
            embedding: Some(unit(10 + i, 64)),
            turn_vectors: turns(),
            ..NewEvent::of_user(
                c.id,
                "event_v1",
                "u1",
                json!({"summary": format!("e{i}")}).as_object().unwrap().clone(),
                1,
            )
        };
        ids.push(s.insert_event(e).await.unwrap().id);
    }
    let rows = || async {
        s.read(|c| Ok(c.query_row("SELECT count(*) FROM event_turn_vectors", [], |r| r.get::<_, i64>(0)).unwrap()))
            .await
            .unwrap()
    };
    assert_eq!(rows().await, 3);
    assert!(s.delete_event(c.id, &ids[0]).await.unwrap());
    assert_eq!(rows().await, 2, "deleted with its event");
    let patch = EventPatch { memory_info: json!({"summary": "new"}).as_object().cloned(), ..Default::default() };
    s.update_event(c.id, &ids[1], patch, 2).await.unwrap();
    assert_eq!(rows().await, 1, "a new text without new turn vectors drops the old");
    s.set_collection_embedding(c.id, "another-model", 64).await.unwrap();
    assert_eq!(rows().await, 0, "dropped with the vectors");
}

#[tokio::test]
async fn a_data_directory_of_schema_v12_has_its_events_offered_for_turn_vectors_once() {
    // A new directory has nothing to backfill.
    let (_fresh, s, _) = setup().await;
    assert_eq!(s.events_without_turns(None, 10).await.unwrap(), None);
    drop(s);
    let dir = tempfile::tempdir().unwrap();
    {
        // The previous release's directory, with one event (no vector: it is passed over).
        let mut conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
        schema::migrate_to(&mut conn, 12, |_, _| Ok(())).unwrap().unwrap();
        conn.execute(
            "INSERT INTO collections(id, project_name, collection_name, schema_json, created_at, embedding_model, embedding_dim)
             VALUES (1, 'default', 'c1', ?1, 1, 'test-hashing', 64)",
            [serde_json::to_string(&CollectionSchema::default()).unwrap()],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO events(id, collection_id, memory_type, user_ids, assistant_ids, class, status, time, memory_info, source_message_ids, created_at, updated_at, terms)
             VALUES ('evt_0', 1, ?1, '[\"u1\"]', '[]', 'conclusion', 'active', 1, '{\"summary\":\"x\"}', '[]', 1, 1, 'x')",
            [EVENT_V1],
        )
        .unwrap();
    }
    let s = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
    let mut ids = Vec::new();
    for i in 0..3u64 {
        let e = NewEvent {
            embedding: Some(unit(i, 64)),
            ..NewEvent::of_user(1, EVENT_V1, "u1", json!({"summary": format!("e{i}")}).as_object().unwrap().clone(), 1)
        };
        ids.push(s.insert_event(e).await.unwrap().id);
    }
    let ids_of = |events: Option<Vec<(CollectionId, Event)>>| {
        events.unwrap().into_iter().map(|(c, e)| format!("{c}/{}", e.id)).collect::<Vec<_>>()
    };
    let ids_in_1: Vec<String> = ids.iter().map(|id| format!("1/{id}")).collect();
    // Newest first, a page at a time, each with its collection; only events with a vector.
    assert_eq!(ids_of(s.events_without_turns(None, 2).await.unwrap()), [ids_in_1[2].clone(), ids_in_1[1].clone()]);
    assert_eq!(ids_of(s.events_without_turns(Some(ids[1].clone()), 2).await.unwrap()), [ids_in_1[0].clone()]);
    let turns = || vec![unit(7, 64), unit(8, 64)];
    assert!(!s.add_event_turns(1, &ids[2], 2, turns()).await.unwrap(), "the event changed since it was read");
    assert!(!s.add_event_turns(1, "evt_0", 1, turns()).await.unwrap(), "no vector to go with");
    assert!(!s.add_event_turns(2, &ids[2], 1, turns()).await.unwrap(), "another collection's event");
    assert!(s.add_event_turns(1, &ids[2], 1, turns()).await.unwrap());
    assert!(!s.add_event_turns(1, &ids[2], 1, turns()).await.unwrap(), "it has turn vectors now");
    assert_eq!(ids_of(s.events_without_turns(None, 10).await.unwrap()), [ids_in_1[1].clone(), ids_in_1[0].clone()]);
    // Stored as a write stores them: a search scores them.
    let q = unit(7, 64);
    let found = s
        .search_candidates(
            1,
            EventFilter::default(),
            CandidateQuery { vector: Some(q), terms: vec![], k: 10, vector_hits: None, corpus: None },
        )
        .await
        .unwrap();
    let best = found.iter().find(|c| c.event.id == ids[2]).and_then(|c| c.best_turn).unwrap();
    assert!((best.cosine - 1.0).abs() < 0.02 && best.index == 0, "{best:?}");
    // A page is read down the primary key, not by sorting a collection (a plan that would make
    // the backfill quadratic).
    for below in [false, true] {
        let plan: Vec<String> = s
            .read(move |conn| {
                let sql = format!("EXPLAIN QUERY PLAN {}", crate::events::events_without_turns_sql(below));
                let mut stmt = conn.prepare(&sql).unwrap();
                let rows = stmt.query_map(rusqlite::params!["evt_z", 64], |r| r.get::<_, String>(3)).unwrap();
                Ok(rows.map(Result::unwrap).collect())
            })
            .await
            .unwrap();
        assert!(plan[0].contains("USING INDEX sqlite_autoindex_events_1"), "{plan:?}");
        assert!(!plan.iter().any(|step| step.contains("TEMP B-TREE")), "{plan:?}");
    }
    s.turns_backfilled().await.unwrap();
    assert_eq!(s.events_without_turns(None, 10).await.unwrap(), None);
    drop(s);
    let s = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
    assert_eq!(s.events_without_turns(None, 10).await.unwrap(), None, "done for good");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_beyond_the_readers_wait_their_turn_instead_of_opening_connections() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(SqliteStore::open(dir.path(), SqliteOptions { readers: 2, ..Default::default() }).unwrap());
    let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let reads: Vec<_> = (0..32)
        .map(|_| {
            let (s, now, most) = (s.clone(), now.clone(), most.clone());
            tokio::spawn(async move {
                s.read(move |conn| {
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(n, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    let one: i64 = conn.query_row("SELECT 1", [], |r| r.get(0)).map_err(backend)?;
                    now.fetch_sub(1, Ordering::SeqCst);
                    Ok(one)
                })
                .await
            })
        })
        .collect();
    for r in reads {
        assert_eq!(r.await.unwrap().unwrap(), 1);
    }
    assert_eq!(most.load(Ordering::SeqCst), 2, "at most `readers` reads at once, and both used");
    assert_eq!(s.readers.lock().unwrap().len(), 2, "their connections are kept");
}

#[tokio::test]
async fn a_rowid_a_search_noted_is_checked_against_the_event_it_names() {
    // The last event of a user's bucket deleted, the next one takes its rowid: a read by the
    // rowid a search noted for the first must not return the second as the first.
    let (_d, s, c) = setup().await;
    let write = |i: u64| {
        let s = &s;
        async move {
            let e = NewEvent {
                embedding: Some(unit(i, 64)),
                ..NewEvent::of_user(
                    c.id,
                    EVENT_V1,
                    "u0".to_string(),
                    json!({"summary": format!("event {i}")}).as_object().unwrap().clone(),
                    i as i64,
                )
            };
            let e = s.insert_event(e).await.unwrap();
            let id = e.id.clone();
            let rowid: i64 = s
                .read(move |conn| {
                    Ok(conn.query_row("SELECT rowid FROM events WHERE id=?1", [&id], |r| r.get(0)).unwrap())
                })
                .await
                .unwrap();
            (e.id, rowid)
        }
    };
    let (first, rowid) = write(1).await;
    assert!(s.delete_event(c.id, &first).await.unwrap());
    let (second, reused) = write(2).await;
    assert_eq!(reused, rowid, "the bucket's next rowid is the deleted one's");
    s.read(move |conn| {
        let mut rows = crate::candidates::RowReader::new(conn, None)?;
        assert!(rows.event(&first, Some(rowid))?.is_none(), "the deleted event is not read as the new one");
        assert!(rows.vector(&first, Some(rowid))?.is_none(), "nor its vector");
        assert_eq!(rows.event(&second, Some(rowid))?.map(|e| e.id), Some(second.clone()));
        assert_eq!(rows.vector(&second, Some(rowid))?.map(|v| v.len()), Some(64 * 4));
        assert_eq!(rows.event(&second, None)?.map(|e| e.id), Some(second.clone()), "by id alone");
        Ok(())
    })
    .await
    .unwrap();
}
