//! How the PostgreSQL store lays its data out. Vectors live in their rows: without schema v4 (`toast_tuple_target` a page) every row over
//! 2 KB had its vector moved to the TOAST table, and each read cost a TOAST index look-up and
//! chunk reads.

use mnemo_core::model::*;
use mnemo_core::store::prelude::*;
use mnemo_store_pg::{PgOptions, PgStore};
mod common;

use serde_json::json;

#[tokio::test]
async fn vectors_of_the_default_model_are_stored_in_their_rows() {
    let schema = "vectors_inline";
    let Some((url, store)) = common::fresh_store("vector storage", schema).await else { return };
    let dim = 896; // the default model pair: 3,588 bytes a vector
    let c = common::collection(&store, "c", dim as u32).await;
    let mut ids = Vec::new();
    for i in 0..20 {
        // Incompressible like a real embedding: small pseudo-random components, one dominant.
        let mut v: Vec<f32> = (0..dim).map(|j| ((j * 7919 + i * 104_729) % 1000) as f32 * 1e-5).collect();
        v[i] = 1.0;
        mnemo_core::embed::normalize(&mut v);
        let info = json!({"summary": format!("event {i}")}).as_object().unwrap().clone();
        let e = store
            .insert_event(NewEvent {
                embedding: Some(v.clone()),
                ..NewEvent::of_user(c.id, EVENT_V1, "u", info, i as i64)
            })
            .await
            .unwrap();
        // Schema v10: a chunk's turn vectors in their row too (four turns: 3,588 bytes).
        let turns: Vec<Vec<f32>> = (0..4).map(|t| v.iter().map(|x| x * (t + 1) as f32).collect()).collect();
        store.set_event_vector(c.id, &e.id, v, Some(turns)).await.unwrap();
        ids.push(e.id);
    }
    let client = common::client(&url).await;
    // A table's rows in its TOAST table, and the size of `column` in each of its rows.
    let stored = |table: &'static str, column: &'static str| {
        let client = &client;
        async move {
            let oid =
                format!("SELECT reltoastrelid::regclass::text FROM pg_class WHERE oid = '{schema}.{table}'::regclass");
            let toast: String = client.query_one(&oid, &[]).await.unwrap().get(0);
            let toasted: i64 = client.query_one(&format!("SELECT count(*) FROM {toast}"), &[]).await.unwrap().get(0);
            let sizes = format!("SELECT pg_column_size({column}) FROM {schema}.{table}");
            let sizes: Vec<i32> = client.query(&sizes, &[]).await.unwrap().iter().map(|r| r.get(0)).collect();
            (toasted, sizes)
        }
    };
    // pgvector: an 8-byte header, then 4 bytes a dimension (a TOAST pointer would be 18).
    let (toasted, sizes) = stored("event_vectors", "vec").await;
    assert_eq!(toasted, 0, "nothing of the rows went to the TOAST table");
    assert_eq!(sizes, vec![8 + 4 * dim as i32; ids.len()], "each vector whole in its row");
    // A 4-byte varlena header, then the blob: its dimension (4 bytes) and a byte a dimension.
    let (toasted, sizes) = stored("event_turn_vectors", "turns").await;
    assert_eq!(toasted, 0, "no turn vectors went to the TOAST table");
    assert_eq!(sizes, vec![4 + 4 + 4 * dim as i32; ids.len()], "each event's turns whole in its row");
    // And they are read back whole: each event's own unit vector scores 1 against itself.
    let mut q = vec![0.0f32; dim];
    q[7] = 1.0;
    let got = store
        .search_candidates(
            c.id,
            EventFilter { user_id: vec!["u".into()], active_only: true, ..Default::default() },
            CandidateQuery { vector: Some(q), terms: vec![], k: 3, vector_hits: None, corpus: None },
        )
        .await
        .unwrap();
    let best = got.iter().max_by(|a, b| a.cosine.partial_cmp(&b.cosine).unwrap()).unwrap();
    assert_eq!(best.event.id, ids[7], "the event whose dominant component the query names");
    assert!(best.best_turn.is_some_and(|t| t.cosine > 0.9), "its turns read back whole: {:?}", best.best_turn);
    mnemo_store_pg::drop_schema(&url, schema).await.unwrap();
}

/// Schema v5's user-document index answers a user-scoped search with exactly what the events'
/// own rows give — after updates of status, time, text and vector, for events whose terms or
/// vector do not fit an index entry, for rows written before v5 (not filled yet), and after the
/// housekeeping step has filled them.
#[tokio::test]
async fn the_user_document_index_answers_like_the_event_rows() {
    let schema = "user_docs";
    let Some((url, store)) = common::fresh_store("user documents", schema).await else { return };
    let client = common::client(&url).await;
    let mut x = 99u64;
    let mut next = move || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (x >> 33) as usize
    };
    let words = ["coffee", "hike", "kyoto", "piano", "bees", "咖啡", "上海", "formula", "garden", "train"];
    let mut collections = Vec::new();
    for (name, dim) in [("small", 48usize), ("wide", 1_400)] {
        let c = common::collection(&store, name, dim as u32).await;
        collections.push((c.id, dim));
    }
    let vector = |dim: usize, next: &mut dyn FnMut() -> usize| {
        let mut v: Vec<f32> = (0..dim).map(|_| (next() % 2001) as f32 / 1000.0 - 1.0).collect();
        mnemo_core::embed::normalize(&mut v);
        v
    };
    let mut ids = Vec::new();
    for &(cid, dim) in &collections {
        for i in 0..240 {
            let n = if i % 60 == 7 { 700 } else { 3 + next() % 12 }; // some too long for an index entry
            let text = (0..n).map(|_| words[next() % words.len()]).collect::<Vec<_>>().join(" ");
            let info = json!({"summary": text}).as_object().unwrap().clone();
            let e = NewEvent {
                embedding: (i % 37 != 5).then(|| vector(dim, &mut next)), // and some without a vector
                conversation_id: Some("conv".into()),
                ..NewEvent::of_user(cid, if i % 2 == 0 { "a" } else { "b" }, format!("u{}", i % 3), info, i as i64)
            };
            ids.push((cid, dim, store.insert_event(e).await.unwrap().id));
        }
    }
    // Changes after the write: each must reach the copy.
    for (j, (cid, dim, id)) in ids.iter().enumerate().filter(|(j, _)| j % 11 == 0) {
        let patch = match j % 4 {
            0 => EventPatch { status: Some("archived".into()), ..Default::default() },
            1 => EventPatch { time: Some(10_000 + j as i64), ..Default::default() },
            2 => EventPatch {
                memory_info: Some(json!({"summary": "kyoto piano kyoto"}).as_object().unwrap().clone()),
                embedding: Some(vector(*dim, &mut next)),
                ..Default::default()
            },
            _ => {
                store.set_event_vector(*cid, id, vector(*dim, &mut next), None).await.unwrap();
                continue;
            }
        };
        store.update_event(*cid, id, patch, 50_000).await.unwrap();
    }
    store.compact_stats().await.unwrap();

    async fn states(c: &tokio_postgres::Client, schema: &str) -> Vec<(i16, i64)> {
        let sql =
            format!("SELECT d_state, count(*) FROM {schema}.event_subjects WHERE kind = 'u' GROUP BY 1 ORDER BY 1");
        c.query(&sql, &[]).await.unwrap().iter().map(|r| (r.get(0), r.get(1))).collect()
    }
    let mut queries = Vec::new();
    for _ in 0..12 {
        let terms: Vec<String> = (0..2).map(|_| words[next() % words.len()].to_string()).collect();
        queries.push((terms, next()));
    }
    let check = |label: &'static str| {
        let (store, collections, queries) = (&store, &collections, &queries);
        async move {
            for &(cid, dim) in collections {
                for (qi, (terms, seed)) in queries.iter().enumerate() {
                    let mut s = *seed as u64;
                    let mut qnext = || {
                        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        (s >> 33) as usize
                    };
                    let mut qv: Vec<f32> = (0..dim).map(|_| (qnext() % 2001) as f32 / 1000.0 - 1.0).collect();
                    mnemo_core::embed::normalize(&mut qv);
                    let user_id = if qi % 4 == 3 {
                        vec!["u0".to_string(), "u2".to_string()]
                    } else {
                        vec![format!("u{}", qi % 3)]
                    };
                    let filter = EventFilter {
                        user_id,
                        active_only: true,
                        memory_type: if qi % 5 == 1 { vec!["b".into()] } else { vec![] },
                        start_time: (qi % 6 == 2).then_some(40),
                        end_time: (qi % 6 == 2).then_some(20_000),
                        ..Default::default()
                    };
                    // The same scope through the events' rows: a conversation filter every event matches.
                    let rows_filter = EventFilter { conversation_id: vec!["conv".into()], ..filter.clone() };
                    let q = CandidateQuery {
                        vector: (qi % 7 != 4).then_some(qv),
                        terms: terms.clone(),
                        k: [1, 5, 10, 30][qi % 4],
                        vector_hits: None,
                        corpus: None,
                    };
                    let key = |mut v: Vec<Candidate>| {
                        v.sort_by(|a, b| a.event.id.cmp(&b.event.id));
                        v.into_iter().map(|c| (c.event.id, c.cosine, c.bm25)).collect::<Vec<_>>()
                    };
                    // Listing (newest first) too.
                    let limit = [1, 7, 500][qi % 3];
                    let ids = |v: Vec<Event>| v.into_iter().map(|e| (e.id, e.time)).collect::<Vec<_>>();
                    let listed = ids(store.list_events(cid, filter.clone(), limit).await.unwrap());
                    assert!(!listed.is_empty(), "{label}: collection {cid}, query {qi} lists something");
                    assert_eq!(
                        listed,
                        ids(store.list_events(cid, rows_filter.clone(), limit).await.unwrap()),
                        "{label}: list {qi}"
                    );
                    let fast = key(store.search_candidates(cid, filter, q.clone()).await.unwrap());
                    let rows = key(store.search_candidates(cid, rows_filter, q).await.unwrap());
                    assert!(!rows.is_empty(), "{label}: collection {cid}, query {qi} finds something ({fast:?})");
                    assert_eq!(fast, rows, "{label}: collection {cid}, query {qi}");
                }
            }
        }
    };
    // Filled by the triggers: everything (7), a vector but no terms (6: the long texts), terms
    // but no vector (5: 1,400 f16 dimensions leave no room beside the key), neither (4).
    let filled = states(&client, schema).await;
    assert_eq!(filled.iter().map(|(s, _)| *s).collect::<Vec<_>>(), [4, 5, 6, 7], "{filled:?}");
    check("filled by the triggers").await;

    // Rows as schema v4 left them (the columns v5 added empty), searched, then filled by housekeeping.
    client
        .batch_execute(&format!(
            "ALTER TABLE {schema}.event_subjects DISABLE TRIGGER subject_doc;
             UPDATE {schema}.event_subjects SET d_state = 0, d_active = NULL, d_time = NULL, d_type = NULL, d_terms = NULL, d_vec = NULL;
             ALTER TABLE {schema}.event_subjects ENABLE TRIGGER subject_doc;"
        ))
        .await
        .unwrap();
    check("written before v5").await;
    while store.housekeeping().await.unwrap() {}
    assert_eq!(states(&client, schema).await, filled, "housekeeping fills what the triggers would have");
    check("filled by housekeeping").await;
    mnemo_store_pg::drop_schema(&url, schema).await.unwrap();
}

/// A bulk load drops the vector index and holds the schema's bulk-load lock until it ends: a
/// replica started meanwhile, or a collection created, builds no index in the middle of the load;
/// a second bulk load is refused; a loader that dies releases the lock, and the next start heals.
#[tokio::test]
async fn a_bulk_load_keeps_every_replica_from_building_the_index_until_it_ends() {
    let schema = "bulk_load_lock";
    let Some((url, loader)) = common::fresh_store("bulk-load lock", schema).await else { return };
    common::collection(&loader, "c", 8).await;
    let client = common::client(&url).await;
    let indexed = || async {
        client
            .query_opt(
                "SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE c.relname = 'event_vectors_hnsw_8' AND n.nspname = $1",
                &[&schema],
            )
            .await
            .unwrap()
            .is_some()
    };
    assert!(indexed().await, "a collection's dimension gets its index");
    let replica = || PgStore::connect(PgOptions { pool: 2, schema: Some(schema.into()), ..PgOptions::new(&url) });

    loader.begin_bulk_load().await.unwrap();
    assert!(!indexed().await, "dropped for the load");
    let other = replica().await.unwrap();
    assert!(!indexed().await, "a replica starting during the load leaves the index to the load");
    common::collection(&other, "d", 8).await;
    assert!(!indexed().await, "so does a collection created during the load");
    match other.begin_bulk_load().await {
        Err(mnemo_core::StoreError::Conflict(m)) => assert!(m.contains("bulk load"), "{m}"),
        r => panic!("a second bulk load must be refused, got {r:?}"),
    }
    loader.end_bulk_load().await.unwrap();
    assert!(indexed().await, "the end of the load builds it");

    // A loader that dies mid-load: its connections close, and with them the lock.
    other.begin_bulk_load().await.unwrap();
    assert!(!indexed().await);
    drop(other);
    let mut healed = false;
    for _ in 0..100 {
        drop(replica().await.unwrap());
        if indexed().await {
            healed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(healed, "the next start builds the index once the dead loader's lock is gone");
    // And the lock is free for the next load.
    loader.begin_bulk_load().await.unwrap();
    loader.end_bulk_load().await.unwrap();
    assert!(indexed().await);
}

/// Vectors of a real model's size are indexed by their signs (`binary_quantize`, Hamming HNSW):
/// a search whose scope is too large to scan takes the nearest by their signs through that index
/// and ranks them by the exact inner product — scores exact, the top 10 almost always the exact
/// top 10, a filter honoured. A database whose dimension an earlier release indexed with full
/// vectors gets the new index after its next start — built in the background, writes going on —
/// and loses the old one.
#[tokio::test]
async fn a_large_scope_is_searched_through_the_vectors_signs_and_ranked_exactly() {
    let schema = "vector_bits";
    let Some((url, _)) = common::fresh_store("the sign index", schema).await else { return };
    // A small exact scope, and a planner told to avoid sorting: at this size it would otherwise
    // rank the scope by Hamming distance itself rather than walk the index.
    let sep = if url.contains('?') { '&' } else { '?' };
    let no_sort = format!("{url}{sep}options=-c%20enable_sort%3Doff");
    let open = || {
        PgStore::connect(PgOptions {
            pool: 2,
            schema: Some(schema.into()),
            exact_scope: 50,
            ..PgOptions::new(&no_sort)
        })
    };
    let store = open().await.unwrap();
    let dim = 384;
    let c = common::collection(&store, "c", dim as u32).await;
    // 40 topics; each event is its topic's direction plus noise as large (cosine ~0.7 to its
    // topic), each query too (~0.55). Measured: recall@10 1.0 here, 0.94–0.999 on real 896-d
    // embeddings (docs/history/benchmarks.md, session 17), where the full-vector HNSW gave 0.75–0.96.
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut gauss = move || {
        let mut u = || {
            seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = seed;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        };
        let (a, b) = (u().max(1e-12), u());
        ((-2.0 * a.ln()).sqrt() * (2.0 * std::f64::consts::PI * b).cos()) as f32
    };
    let topics: Vec<Vec<f32>> = (0..40).map(|_| (0..dim).map(|_| gauss()).collect()).collect();
    let mut near = |t: &[f32], noise: f32| {
        let mut v: Vec<f32> = t.iter().map(|x| x + noise * gauss()).collect();
        mnemo_core::embed::normalize(&mut v);
        v
    };
    let users: Vec<String> = (0..30).map(|u| format!("u{u}")).collect();
    let mut stored: Vec<(String, String, Vec<f32>)> = Vec::new();
    for batch in 0..3 {
        let mut events = Vec::new();
        for i in 0..400 {
            let n = batch * 400 + i;
            let v = near(&topics[n % 40], 1.0);
            let info = json!({"summary": format!("event {n}")}).as_object().unwrap().clone();
            let user = &users[n % users.len()];
            events.push(NewEvent { embedding: Some(v), ..NewEvent::of_user(c.id, EVENT_V1, user, info, n as i64) });
        }
        for (e, ne) in store.insert_events(events.clone()).await.unwrap().into_iter().zip(events) {
            stored.push((e.id, e.user_id[0].clone(), ne.embedding.unwrap()));
        }
    }
    let client = common::client(&url).await;
    let indexes = || async {
        let rows = client
            .query(
                "SELECT indexrelname::text FROM pg_stat_user_indexes WHERE schemaname = $1 AND relname = 'event_vectors'
                 AND indexrelname::text LIKE 'event_vectors_%\\_384' ORDER BY 1",
                &[&schema],
            )
            .await
            .unwrap();
        rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>()
    };
    assert_eq!(indexes().await, ["event_vectors_bits_384"]);
    let scans = || async {
        client
            .query_one(
                "SELECT idx_scan FROM pg_stat_user_indexes WHERE schemaname = $1 AND indexrelname = 'event_vectors_bits_384'",
                &[&schema],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    let queries: Vec<Vec<f32>> = (0..40).map(|t| near(&topics[(t * 7) % 40], 1.5)).collect();
    async fn check(
        store: &PgStore,
        cid: CollectionId,
        stored: &[(String, String, Vec<f32>)],
        queries: &[Vec<f32>],
        users: &[String],
    ) -> f64 {
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        let (mut found, mut asked) = (0, 0);
        for q in queries {
            let filter = EventFilter { user_id: users.to_vec(), active_only: true, ..Default::default() };
            let query =
                CandidateQuery { vector: Some(q.clone()), terms: vec![], k: 10, vector_hits: None, corpus: None };
            let got = store.search_candidates(cid, filter, query).await.unwrap();
            let mut exact: Vec<(&str, f32)> = stored
                .iter()
                .filter(|(_, u, _)| users.contains(u))
                .map(|(id, _, v)| (id.as_str(), dot(q, v)))
                .collect();
            exact.sort_by(|a, b| b.1.total_cmp(&a.1));
            assert_eq!(got.len(), 10, "k candidates");
            for g in &got {
                let (_, u, v) = stored.iter().find(|(id, _, _)| *id == g.event.id).unwrap();
                assert!(users.contains(u), "the filter holds");
                assert!((g.cosine.unwrap() - dot(q, v)).abs() < 1e-4, "the exact score");
            }
            found += got.iter().filter(|g| exact[..10].iter().any(|(id, _)| *id == g.event.id)).count();
            asked += 10;
        }
        let recall = found as f64 / asked as f64;
        eprintln!("recall@10 over {} users: {recall}", users.len());
        recall
    }
    let before = scans().await;
    let recall = check(&store, c.id, &stored, &queries, &users).await;
    assert!(recall >= 0.9, "recall@10 against the exact ranking {recall}");
    // (Every topic keeps events in this half: user n % 30, topic n % 40.)
    let half: Vec<String> = users[..15].to_vec();
    let recall = check(&store, c.id, &stored, &queries, &half).await;
    assert!(recall >= 0.9, "recall@10 within half the users {recall}");
    assert!(scans().await > before, "the searches went through the index");

    // A database an earlier release indexed with full vectors.
    client
        .batch_execute(&format!(
            "DROP INDEX {schema}.event_vectors_bits_384;
             CREATE INDEX event_vectors_hnsw_384 ON {schema}.event_vectors USING hnsw ((vec::vector(384)) vector_ip_ops) WHERE dim = 384"
        ))
        .await
        .unwrap();
    assert_eq!(indexes().await, ["event_vectors_hnsw_384"]);
    drop(store);
    let store = open().await.unwrap();
    // Built in the background (CONCURRENTLY: writes go on); an event written right after the
    // start is stored.
    let info = json!({"summary": "written during the upgrade"}).as_object().unwrap().clone();
    let during = store
        .insert_event(NewEvent {
            embedding: Some(near(&topics[0], 1.0)),
            ..NewEvent::of_user(c.id, EVENT_V1, "u0", info, 0)
        })
        .await
        .unwrap();
    let mut replaced = false;
    for _ in 0..300 {
        if indexes().await == ["event_vectors_bits_384"] {
            replaced = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(replaced, "rebuilt over the signs after the start, the old one gone: {:?}", indexes().await);
    let valid: bool = client
        .query_one(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE c.relname = 'event_vectors_bits_384' AND n.nspname = $1",
            &[&schema],
        )
        .await
        .unwrap()
        .get(0);
    assert!(valid);
    store.delete_event(c.id, &during.id).await.unwrap();
    // A build cut short leaves an invalid index (as a killed CREATE INDEX CONCURRENTLY does):
    // the next start drops it and builds it again.
    client
        .batch_execute(&format!(
            "UPDATE pg_index SET indisvalid = false WHERE indexrelid = '{schema}.event_vectors_bits_384'::regclass"
        ))
        .await
        .unwrap();
    drop(store);
    let store = open().await.unwrap();
    let valid: bool = client
        .query_one(
            &format!("SELECT indisvalid FROM pg_index WHERE indexrelid = '{schema}.event_vectors_bits_384'::regclass"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(valid, "rebuilt valid at the start");
    assert!(check(&store, c.id, &stored, &queries, &users).await >= 0.9);
    mnemo_store_pg::drop_schema(&url, schema).await.unwrap();
}

/// A schema claimed by one process (a benchmark) is refused to every other connection until the
/// claim is dropped — the server releases the lock with the claim's connection.
#[tokio::test]
async fn a_claimed_schema_is_refused_to_others_until_released() {
    let Ok(url) = std::env::var("MNEMO_TEST_DATABASE_URL") else {
        eprintln!("schema claims on postgres: SKIPPED (set MNEMO_TEST_DATABASE_URL; see scripts/setup-postgres)");
        return;
    };
    let first = mnemo_store_pg::claim_schema(&url, "claim_test").await.unwrap();
    let err = mnemo_store_pg::claim_schema(&url, "claim_test").await.unwrap_err().to_string();
    assert!(err.contains("\"claim_test\" is in use by another process"), "{err}");
    // Another schema is free all along.
    drop(mnemo_store_pg::claim_schema(&url, "claim_test_other").await.unwrap());
    drop(first);
    // The unlock travels with the connection's close: retry until the server has seen it.
    let mut again = None;
    for _ in 0..100 {
        if let Ok(c) = mnemo_store_pg::claim_schema(&url, "claim_test").await {
            again = Some(c);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(again.is_some(), "the claim was never released");
}

/// A database of schema v6 (before turn vectors) gets the v7 tables with its backfill pending:
/// its events are offered newest first, turns are added only to an unchanged event with a
/// vector, and once done the store offers none, for good. A new database has nothing pending.
#[tokio::test]
async fn a_database_of_schema_v6_has_its_events_offered_for_turn_vectors_once() {
    let schema = "turns_backfill";
    let Some((url, store)) = common::fresh_store("turn vector backfill", schema).await else { return };
    let c = common::collection(&store, "c", 4).await;
    assert_eq!(store.events_without_turns(None, 10).await.unwrap(), None, "a new database");
    let mut ids = Vec::new();
    for i in 0..3 {
        let info = json!({"summary": format!("event {i}")}).as_object().unwrap().clone();
        let mut v = vec![0.0f32; 4];
        v[i] = 1.0;
        let e = NewEvent { embedding: Some(v), ..NewEvent::of_user(c.id, EVENT_V1, "u", info, 1) };
        ids.push(store.insert_event(e).await.unwrap().id);
    }
    let info = json!({"summary": "no vector"}).as_object().unwrap().clone();
    let bare = store.insert_event(NewEvent::of_user(c.id, EVENT_V1, "u", info, 1)).await.unwrap().id;
    drop(store);
    // Back to v6, as the previous release left it.
    let client = common::client(&url).await;
    client
        .batch_execute(&format!(
            "DROP TABLE {schema}.event_turn_vectors, {schema}.event_turns_backfill;
             DROP TRIGGER webhook_events ON {schema}.events;
             ALTER TABLE {schema}.events DROP COLUMN valid_from, DROP COLUMN valid_to;
             ALTER TABLE {schema}.event_subjects DROP COLUMN d_version;
             DROP SEQUENCE {schema}.subject_doc_versions;
             DROP FUNCTION {schema}.mnemo_activity_subject(), {schema}.mnemo_activity_event() CASCADE;
             DROP TABLE {schema}.user_activity, {schema}.user_activity_delta;
             CREATE INDEX event_subjects_docs ON {schema}.event_subjects(collection_id, subject_id)
                 INCLUDE (event_id, d_state, d_active, d_time, d_type, d_terms, d_vec, d_norm) WHERE kind = 'u';
             CREATE TRIGGER webhook_events AFTER INSERT OR DELETE OR UPDATE OF memory_info, memory_type, user_ids, assistant_ids, time, scope, class, expires_at, status ON {schema}.events
                 FOR EACH ROW EXECUTE FUNCTION {schema}.mnemo_webhook_events();
             UPDATE {schema}.mnemo_schema SET version = 6"
        ))
        .await
        .unwrap();
    let open = || PgStore::connect(PgOptions { pool: 2, schema: Some(schema.into()), ..PgOptions::new(&url) });
    let store = open().await.unwrap();
    let ids_of = |events: Option<Vec<(CollectionId, Event)>>| {
        events.unwrap().into_iter().map(|(cid, e)| (cid, e.id)).collect::<Vec<_>>()
    };
    let of_c = |i: usize| (c.id, ids[i].clone());
    assert_eq!(ids_of(store.events_without_turns(None, 2).await.unwrap()), [of_c(2), of_c(1)]);
    assert_eq!(ids_of(store.events_without_turns(Some(ids[1].clone()), 2).await.unwrap()), [of_c(0)]);
    let turns = || vec![vec![1.0, 0.0, 0.0, 0.0], vec![0.0, 0.0, 0.0, 1.0]];
    assert!(!store.add_event_turns(c.id, &ids[2], 2, turns()).await.unwrap(), "the event changed since");
    assert!(!store.add_event_turns(c.id, &bare, 1, turns()).await.unwrap(), "no vector to go with");
    assert!(!store.add_event_turns(c.id + 1, &ids[2], 1, turns()).await.unwrap(), "another collection's event");
    // A text update in progress (its row locked, not yet committed): the add waits for it, then
    // sees its new `updated_at` and stores nothing.
    client
        .batch_execute(&format!("BEGIN; UPDATE {schema}.events SET updated_at = 5 WHERE id = '{}'", ids[0]))
        .await
        .unwrap();
    let (added, _) = tokio::join!(store.add_event_turns(c.id, &ids[0], 1, turns()), async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        client.batch_execute("COMMIT").await.unwrap();
    });
    assert!(!added.unwrap(), "turns of the text before the update");
    assert!(store.add_event_turns(c.id, &ids[2], 1, turns()).await.unwrap());
    assert!(!store.add_event_turns(c.id, &ids[2], 1, turns()).await.unwrap(), "it has turn vectors now");
    assert_eq!(ids_of(store.events_without_turns(None, 10).await.unwrap()), [of_c(1), of_c(0)]);
    let got = store
        .search_candidates(
            c.id,
            EventFilter { user_id: vec!["u".into()], active_only: true, ..Default::default() },
            CandidateQuery {
                vector: Some(vec![0.0, 0.0, 0.0, 1.0]),
                terms: vec![],
                k: 10,
                vector_hits: None,
                corpus: None,
            },
        )
        .await
        .unwrap();
    let turn = got.iter().find(|g| g.event.id == ids[2]).and_then(|g| g.best_turn).expect("its turns are scored");
    assert!((turn.cosine - 1.0).abs() < 0.02, "{turn:?}");
    store.turns_backfilled().await.unwrap();
    assert_eq!(store.events_without_turns(None, 10).await.unwrap(), None);
    drop(store);
    let store = open().await.unwrap();
    assert_eq!(store.events_without_turns(None, 10).await.unwrap(), None, "done for good");
    mnemo_store_pg::drop_schema(&url, schema).await.unwrap();
}
