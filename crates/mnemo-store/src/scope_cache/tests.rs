//! The scope cache on a real SQLite file: a kept scope answers while nothing in it changed, and
//! every change a search could see makes the next search read the scope again.

use super::ScopeCache;
use crate::tests::{new_coll, unit};
use crate::{SqliteOptions, SqliteStore};
use mnemo_core::model::*;
use mnemo_core::store::prelude::*;
use serde_json::json;

type Row = (String, Option<f32>, Option<f64>);

fn query() -> CandidateQuery {
    CandidateQuery {
        vector: Some(unit(999, 64)),
        terms: vec!["coffee".into()],
        k: 100,
        vector_hits: None,
        corpus: None,
    }
}

fn filter(user: &str) -> EventFilter {
    EventFilter { user_id: vec![user.into()], active_only: true, ..Default::default() }
}

fn rows(found: Vec<Candidate>) -> Vec<Row> {
    let mut r: Vec<Row> = found.into_iter().map(|c| (c.event.id, c.cosine, c.bm25)).collect();
    r.sort_by(|a, b| a.0.cmp(&b.0));
    r
}

/// The user's search through the store (its cache), the same search with no cache, and the
/// cache's (hits, misses) after it.
async fn search(s: &SqliteStore, cid: CollectionId, user: &str) -> (Vec<Row>, Vec<Row>, (u64, u64)) {
    both(s, cid, user, rows).await
}

/// The user's candidates through the store (its cache) and with no cache, each as `view` shows
/// them, and the cache's (hits, misses) after.
async fn both<T>(
    s: &SqliteStore,
    cid: CollectionId,
    user: &str,
    view: impl Fn(Vec<Candidate>) -> T,
) -> (T, T, (u64, u64)) {
    let cached = view(s.search_candidates(cid, filter(user), query()).await.unwrap());
    let f = filter(user);
    let fresh = s
        .read(move |conn| crate::search::candidates(conn, &ScopeCache::new(0), cid, &f, &query()))
        .await
        .map(&view)
        .unwrap();
    let (hits, misses, _) = s.scope_cache.counts();
    (cached, fresh, (hits, misses))
}

async fn add(s: &SqliteStore, cid: CollectionId, user: &str, text: &str, seed: u64) -> String {
    let info = json!({"summary": text}).as_object().unwrap().clone();
    let e = NewEvent { embedding: Some(unit(seed, 64)), ..NewEvent::of_user(cid, EVENT_V1, user, info, 1) };
    s.insert_event(e).await.unwrap().id
}

#[tokio::test]
async fn a_kept_scope_answers_until_something_in_it_changes() {
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
    let c = s.ensure_collection(new_coll()).await.unwrap();
    let cid = c.id;
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(add(&s, cid, "u0", &format!("coffee number {i}"), i).await);
    }
    add(&s, cid, "u1", "coffee elsewhere", 10).await;

    let (first, fresh, counts) = search(&s, cid, "u0").await;
    assert_eq!((first.len(), &first), (4, &fresh));
    assert_eq!(counts, (0, 1), "the first search reads the scope");
    let (again, _, counts) = search(&s, cid, "u0").await;
    assert_eq!((&again, counts), (&first, (1, 1)), "the second is answered from it");

    // Another user's change leaves u0's scope as it was.
    add(&s, cid, "u1", "more coffee", 11).await;
    let (again, _, counts) = search(&s, cid, "u0").await;
    assert_eq!((&again, counts), (&first, (2, 1)), "u1's event does not touch u0's scope");

    // Each change of u0's: the next search reads the scope again and sees it.
    let mut misses = 1;
    let mut changed = |what: &str, (cached, fresh, counts): (Vec<Row>, Vec<Row>, (u64, u64))| {
        misses += 1;
        assert_eq!(cached, fresh, "{what}: the same as a search without the cache");
        assert_eq!(counts.1, misses, "{what}: read again");
        cached
    };
    let patch = EventPatch {
        memory_info: Some(json!({"summary": "tea only"}).as_object().unwrap().clone()),
        ..Default::default()
    };
    s.update_event(cid, &ids[1], patch, 5).await.unwrap();
    let r = changed("terms", search(&s, cid, "u0").await);
    assert_eq!(r.iter().find(|r| r.0 == ids[1]).and_then(|r| r.2), None, "'tea only' is no full-text hit");

    let v = unit(77, 64);
    s.set_event_vector(cid, &ids[2], v.clone(), None).await.unwrap();
    let r = changed("vector", search(&s, cid, "u0").await);
    let q = unit(999, 64);
    assert_eq!(r.iter().find(|r| r.0 == ids[2]).unwrap().1, Some(mnemo_core::embed::dot(&q, &v)));

    let archive = EventPatch { status: Some("archived".into()), ..Default::default() };
    s.update_event(cid, &ids[0], archive, 6).await.unwrap();
    let r = changed("status", search(&s, cid, "u0").await);
    assert!(r.iter().all(|r| r.0 != ids[0]), "an archived event leaves an active-only scope");

    s.delete_event(cid, &ids[3]).await.unwrap();
    let r = changed("deleted", search(&s, cid, "u0").await);
    assert!(r.iter().all(|r| r.0 != ids[3]));

    let new = add(&s, cid, "u0", "coffee again", 20).await;
    let r = changed("added", search(&s, cid, "u0").await);
    assert!(r.iter().any(|r| r.0 == new));

    s.forget_user(cid, "u0").await.unwrap();
    let r = changed("forgotten", search(&s, cid, "u0").await);
    assert!(r.is_empty());
    let stamps: i64 = s
        .read(|conn| {
            conn.query_row("SELECT count(*) FROM scope_versions WHERE subject_id = 'u0'", [], |r| r.get(0))
                .map_err(crate::backend)
        })
        .await
        .unwrap();
    assert_eq!(stamps, 0, "a forgotten user's id leaves the stamps too");
}

#[tokio::test]
async fn the_cache_holds_no_more_than_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteStore::open(dir.path(), SqliteOptions { scope_cache_mib: 1, ..Default::default() }).unwrap();
    let c = s.ensure_collection(new_coll()).await.unwrap();
    let words = "coffee ".repeat(2000);
    for u in 0..8 {
        let batch = (0..40)
            .map(|i| NewEvent {
                embedding: Some(unit(u * 100 + i, 64)),
                ..NewEvent::of_user(
                    c.id,
                    EVENT_V1,
                    format!("u{u}"),
                    json!({"summary": format!("{words} {i}")}).as_object().unwrap().clone(),
                    1,
                )
            })
            .collect();
        s.insert_events(batch).await.unwrap();
    }
    for u in 0..8 {
        search(&s, c.id, &format!("u{u}")).await;
    }
    let (_, misses, bytes) = s.scope_cache.counts();
    assert_eq!(misses, 8);
    assert!(bytes > 0 && bytes <= 1 << 20, "{bytes} bytes kept");
    // The least recently used went first: the last user is still there, the first is not.
    search(&s, c.id, "u7").await;
    search(&s, c.id, "u0").await;
    let (hits, misses, _) = s.scope_cache.counts();
    assert_eq!((hits, misses), (1, 9));
}

#[tokio::test]
async fn a_deleted_collections_scopes_are_not_served_to_one_that_takes_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
    let old = s.ensure_collection(new_coll()).await.unwrap();
    add(&s, old.id, "u0", "coffee before", 1).await;
    let (before, _, _) = search(&s, old.id, "u0").await;
    assert_eq!(before.len(), 1);
    assert!(s.delete_collection(old.id).await.unwrap());
    let new = s.ensure_collection(new_coll()).await.unwrap();
    assert_eq!(new.id, old.id, "SQLite gives the new collection the deleted one's id");
    let (after, fresh, _) = search(&s, new.id, "u0").await;
    assert_eq!((after.len(), &after), (0, &fresh), "nothing of the deleted collection");
    let id = add(&s, new.id, "u0", "coffee after", 2).await;
    let (after, fresh, _) = search(&s, new.id, "u0").await;
    assert_eq!((after.len(), &after[0].0, &after), (1, &id, &fresh));
}

/// The events of the user's search through the store (its cache) and of the same search with
/// no cache, by id, and the cache's (hits, misses) after it.
async fn events(s: &SqliteStore, cid: CollectionId, user: &str) -> (Vec<Event>, Vec<Event>, (u64, u64)) {
    let by_id = |found: Vec<Candidate>| {
        let mut e: Vec<Event> = found.into_iter().map(|c| c.event).collect();
        e.sort_by(|a, b| a.id.cmp(&b.id));
        e
    };
    both(s, cid, user, by_id).await
}

#[tokio::test]
async fn a_kept_scope_shows_its_events_as_they_are_now() {
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
    let cid = s.ensure_collection(new_coll()).await.unwrap().id;
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(add(&s, cid, "u0", &format!("coffee number {i}"), i).await);
    }
    let (first, fresh, counts) = events(&s, cid, "u0").await;
    assert_eq!((first.len(), &first, counts), (3, &fresh, (0, 1)));
    let (again, _, counts) = events(&s, cid, "u0").await;
    assert_eq!((&again, counts), (&first, (1, 1)), "answered from the kept scope and its decoded events");

    // A change to what a search returns but does not search by: the terms stay as they were.
    let raw = |sql: &'static str, id: String| {
        s.writer.write(move |conn| conn.execute(sql, [id]).map(|_| ()).map_err(crate::backend))
    };
    raw("UPDATE events SET expires_at = 123 WHERE id = ?1", ids[0].clone()).await.unwrap();
    let (now, fresh, counts) = events(&s, cid, "u0").await;
    assert_eq!((&now, counts.1), (&fresh, 2), "expires_at: the scope is read again");
    assert_eq!(now[0].expires_at, Some(123));
    raw("UPDATE events SET memory_info = json_set(memory_info, '$.note', 'decaf') WHERE id = ?1", ids[1].clone())
        .await
        .unwrap();
    let (now, fresh, counts) = events(&s, cid, "u0").await;
    assert_eq!((&now, counts.1), (&fresh, 3), "memory_info");
    assert_eq!(now[1].memory_info["note"], "decaf");

    // Hits move no stamp: the scope stays, and the events counted are read again.
    events(&s, cid, "u0").await;
    s.record_hits(cid, vec![ids[2].clone()], 1_000).await.unwrap();
    let (now, fresh, counts) = events(&s, cid, "u0").await;
    assert_eq!(counts.1, 3, "a hit leaves the scope kept");
    assert_eq!(now, fresh, "hits");
    assert_eq!((now[2].hit_count, now[2].last_hit_at), (1, Some(1_000)));
}
