//! A replica's kept scopes on a real PostgreSQL: while a user's rows keep their versions the
//! terms and vector copies come from memory, and whatever changed — by this replica, another one, or a transaction
//! that took its version before the search and committed after it — is read again, so every
//! search answers as one without the cache.

use mnemo_core::model::*;
use mnemo_core::store::prelude::*;
use mnemo_store_pg::{PgOptions, PgStore};
use serde_json::json;
mod common;

const DIM: usize = 16;

type Found = Vec<(String, Option<f32>, Option<f64>)>;

fn vector(i: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..DIM).map(|j| ((i * 13 + j * 5) % 7) as f32 * 0.02).collect();
    v[i % DIM] = 1.0;
    mnemo_core::embed::normalize(&mut v);
    v
}

fn filter(user: &str) -> EventFilter {
    EventFilter { user_id: vec![user.into()], active_only: true, ..Default::default() }
}

fn query(k: usize) -> CandidateQuery {
    CandidateQuery {
        vector: Some(vector(3)),
        terms: vec!["coffee".into(), "zebra".into()],
        k,
        vector_hits: None,
        corpus: None,
    }
}

/// u's candidates, every event of the scope (`k` 100).
async fn found(s: &PgStore, cid: CollectionId, user: &str) -> Found {
    found_k(s, cid, user, 100).await
}

/// The two nearest: which two depends on every event's score, which the kept copies give.
async fn nearest(s: &PgStore, cid: CollectionId, user: &str) -> Found {
    found_k(s, cid, user, 2).await
}

async fn found_k(s: &PgStore, cid: CollectionId, user: &str, k: usize) -> Found {
    let mut r: Found = s
        .search_candidates(cid, filter(user), query(k))
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.event.id, c.cosine, c.bm25))
        .collect();
    r.sort_by(|a, b| a.0.cmp(&b.0));
    r
}

async fn add(s: &PgStore, cid: CollectionId, user: &str, text: &str, i: usize) -> String {
    let info = json!({"summary": text}).as_object().unwrap().clone();
    let e = NewEvent { embedding: Some(vector(i)), ..NewEvent::of_user(cid, EVENT_V1, user, info, i as i64) };
    s.insert_event(e).await.unwrap().id
}

async fn counts(s: &PgStore) -> (u64, u64) {
    let kept = s.stats().await.unwrap().scope_cache.expect("postgres reports its kept scopes");
    (kept.hits, kept.misses)
}

#[tokio::test]
async fn kept_terms_answer_as_a_search_without_them_whatever_changed() {
    let schema = "scope_cache";
    let Some((url, writer)) = common::fresh_store("kept scope terms", schema).await else { return };
    let open = |mib| {
        PgStore::connect(PgOptions {
            pool: 2,
            schema: Some(schema.into()),
            scope_cache_mib: mib,
            ..PgOptions::new(&url)
        })
    };
    let (kept, plain) = (open(64).await.unwrap(), open(0).await.unwrap());
    let c = common::collection(&writer, "c", DIM as u32).await;
    let cid = c.id;
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(add(&writer, cid, "u0", &format!("coffee number {i}"), i).await);
    }
    add(&writer, cid, "u1", "coffee elsewhere", 9).await;

    let first = found(&kept, cid, "u0").await;
    assert_eq!((first.len(), &first), (4, &found(&plain, cid, "u0").await));
    assert_eq!(counts(&kept).await, (0, 1), "the first search reads the terms");
    assert_eq!(nearest(&kept, cid, "u0").await, nearest(&plain, cid, "u0").await);
    assert_eq!(counts(&kept).await, (1, 1), "the second has the terms, and reads the vector copies");
    assert_eq!(nearest(&kept, cid, "u0").await.len(), 2);
    assert_eq!(found(&kept, cid, "u0").await, first);
    assert_eq!(counts(&kept).await, (3, 1), "the next ones have both");
    add(&writer, cid, "u1", "more coffee", 10).await;
    assert_eq!(found(&kept, cid, "u0").await, first);
    assert_eq!(counts(&kept).await, (4, 1), "another user's event leaves u0's rows as they were");

    // Each change of u0's, written by another store (another replica): answered as it is now,
    // with the changed rows' terms read (`read`), or none when rows only left the scope.
    let mut misses = 1;
    let mut same = async |what: &str, read: bool| {
        let (now, fresh) = (found(&kept, cid, "u0").await, found(&plain, cid, "u0").await);
        assert_eq!(now, fresh, "{what}: as without the cache");
        misses += u64::from(read);
        assert_eq!(counts(&kept).await.1, misses, "{what}: terms read again: {read}");
        assert_eq!(nearest(&kept, cid, "u0").await, nearest(&plain, cid, "u0").await, "{what}: the nearest two");
        now
    };
    let patch = |text: &str| EventPatch {
        memory_info: Some(json!({"summary": text}).as_object().unwrap().clone()),
        ..Default::default()
    };
    writer.update_event(cid, &ids[1], patch("zebra only"), 5).await.unwrap();
    let r = same("terms", true).await;
    let zebra = r.iter().find(|r| r.0 == ids[1]).unwrap();
    assert!(zebra.2.is_some(), "'zebra only' is a full-text hit now: {zebra:?}");

    let archive = EventPatch { status: Some("archived".into()), ..Default::default() };
    writer.update_event(cid, &ids[0], archive, 6).await.unwrap();
    assert!(same("status", false).await.iter().all(|r| r.0 != ids[0]));
    writer.delete_event(cid, &ids[3]).await.unwrap();
    assert!(same("deleted", false).await.iter().all(|r| r.0 != ids[3]));
    let new = add(&writer, cid, "u0", "coffee and zebra", 20).await;
    assert!(same("added", true).await.iter().any(|r| r.0 == new && r.2.is_some()));

    // A version taken before the search and committed after it: the row is at or below the
    // greatest version kept, and yet new to the entry.
    let raw = common::client(&url).await;
    raw.batch_execute(&format!(
        "SET search_path TO {schema}, public; BEGIN;
         UPDATE events SET terms = 'zebra zebra zebra' WHERE id = '{}'",
        ids[2]
    ))
    .await
    .unwrap();
    let later = add(&writer, cid, "u0", "coffee later", 21).await;
    let r = same("a later event, committed first", true).await;
    assert!(r.iter().any(|r| r.0 == later));
    let before = r.iter().find(|r| r.0 == ids[2]).unwrap().2;
    raw.batch_execute("COMMIT").await.unwrap();
    let r = same("the earlier version, committed after", true).await;
    let after = r.iter().find(|r| r.0 == ids[2]).unwrap().2;
    assert!(after > before, "the new terms count: {before:?} → {after:?}");

    // A new vector (re-indexing): the row's copy is sent again, and it is now the nearest.
    writer.set_event_vector(cid, &ids[2], vector(3), None).await.unwrap();
    same("a new vector", true).await;
    let near = nearest(&kept, cid, "u0").await;
    assert!(near.iter().any(|r| r.0 == ids[2] && r.1 > Some(0.99)), "{near:?}");

    writer.forget_user(cid, "u0").await.unwrap();
    assert!(same("forgotten", false).await.is_empty());
}
