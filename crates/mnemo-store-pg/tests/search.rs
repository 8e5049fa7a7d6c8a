//! A small scope's search on PostgreSQL while its query is still being embedded: the scope's
//! terms are read meanwhile, and its vector scores once the vector arrives — from the server in
//! a second statement (two snapshots) when the replica keeps no copies of the vectors, here
//! from the copies the first statement sent (one snapshot) when it does. What changes between
//! the two must not surface as a wrong answer.

use mnemo_core::model::*;
use mnemo_core::store::prelude::*;
use mnemo_core::store::{NextTerms, PendingVector, TwoHops};
use mnemo_store_pg::{PgOptions, PgStore};
mod common;

use serde_json::json;

const DIM: usize = 16;

/// A unit vector near axis `i`.
fn vector(i: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..DIM).map(|j| ((i * 31 + j * 7) % 11) as f32 * 0.01).collect();
    v[i % DIM] = 1.0;
    mnemo_core::embed::normalize(&mut v);
    v
}

fn event(cid: CollectionId, i: usize, text: &str) -> NewEvent {
    let info = json!({"summary": text}).as_object().unwrap().clone();
    NewEvent { embedding: Some(vector(i)), ..NewEvent::of_user(cid, EVENT_V1, "u", info, i as i64) }
}

fn no_second<'a>() -> NextTerms<'a> {
    Box::new(|_| Box::pin(std::future::ready(None)))
}

fn ids(found: &[Candidate]) -> Vec<String> {
    let mut ids: Vec<String> = found.iter().map(|c| c.event.id.clone()).collect();
    ids.sort();
    ids
}

/// A store on `schema` whose connections name themselves after it (`application_name`), keeping
/// scopes (and so their vector copies) with `kept` MiB.
async fn open(url: &str, schema: &str, exact_scope: usize, kept: usize) -> PgStore {
    let sep = if url.contains('?') { '&' } else { '?' };
    let named = format!("{url}{sep}application_name={schema}");
    let o = PgOptions {
        pool: 3,
        schema: Some(schema.into()),
        exact_scope,
        scope_cache_mib: kept,
        ..PgOptions::new(&named)
    };
    PgStore::connect(o).await.unwrap()
}

/// Until one of `schema`'s connections has read a small scope, then its BM25 hits' rows and turns
/// (the last statements before the vector is needed), and gone idle waiting for the vector: what
/// the "embedding" below does happens after those reads, every time. The two are pipelined on one
/// connection, in either order (each connection prepares and caches its statements on first use,
/// so a cached one goes out first): whichever it ran last, idle means both are done.
async fn after_the_terms_read(url: &str, schema: &str) {
    let client = common::client(url).await;
    for _ in 0..6000 {
        let read: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state = 'idle'
                 AND (query LIKE '%FROM event_turn_vectors WHERE event_id = ANY%'
                      OR query LIKE '%FROM events WHERE id = ANY($1)')",
                &[&schema],
            )
            .await
            .unwrap()
            .get(0);
        if read > 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    panic!("the search never read its scope while the vector was pending");
}

/// A store on a fresh `schema` whose exact scan stops at `exact_scope` events, keeping scopes with
/// `kept` MiB, with user u's four events (two about piano in Kyoto), or `None` without a database.
async fn setup(
    what: &str,
    schema: &str,
    exact_scope: usize,
    kept: usize,
) -> Option<(String, PgStore, Collection, Vec<Event>)> {
    let (url, _) = common::fresh_store(what, schema).await?;
    let store = open(&url, schema, exact_scope, kept).await;
    let c = common::collection(&store, "c", DIM as u32).await;
    let texts = ["kyoto piano lessons", "piano in kyoto", "a hike in kyoto", "coffee at noon"];
    let events = store.insert_events((0..4).map(|i| event(c.id, i, texts[i])).collect()).await.unwrap();
    Some((url, store, c, events))
}

/// u's active events, searched for "kyoto piano" (the vector comes apart).
fn user_query() -> (EventFilter, CandidateQuery) {
    let f = EventFilter { user_id: vec!["u".into()], active_only: true, ..Default::default() };
    let terms = vec!["kyoto".into(), "piano".into()];
    (f, CandidateQuery { vector: None, terms, k: 10, vector_hits: None, corpus: None })
}

/// u's search for "kyoto piano" with its vector pending: while the query "embeds" (after the
/// terms were read), the best vector and full-text hit (`events[1]`) goes and a new piano event
/// comes.
async fn searched_while_changed(
    url: &str,
    schema: &str,
    store: &PgStore,
    cid: CollectionId,
    events: &[Event],
) -> TwoHops {
    let (f, q) = user_query();
    let gone = events[1].id.clone();
    let embedding: PendingVector<'_> = Box::pin(async move {
        after_the_terms_read(url, schema).await;
        assert!(store.delete_event(cid, &gone).await.unwrap());
        store.insert_event(event(cid, 5, "piano piano piano")).await.unwrap();
        Some(vector(1))
    });
    store.search_candidates_then(cid, f, q, embedding, no_second()).await.unwrap()
}

#[tokio::test]
async fn an_event_deleted_or_added_while_the_query_embeds_is_answered_as_it_is_then() {
    let schema = "search_while_embedding";
    let Some((url, store, c, events)) = setup("a search while its query embeds", schema, 5_000, 0).await else {
        return;
    };
    let (f, q) = user_query();
    let hops = searched_while_changed(&url, schema, &store, c.id, &events).await;
    let found = ids(&hops.first);
    assert!(!found.contains(&events[1].id), "a deleted event is no candidate: {found:?}");
    assert_eq!(found.len(), 4, "three of the first four and the new one: {found:?}");
    for cand in &hops.first {
        assert!(cand.cosine.is_some(), "{}: every candidate has its cosine", cand.event.id);
    }
    // The new event was written after the terms were read: found by its vector alone.
    let new = hops.first.iter().find(|c| !events.iter().any(|e| e.id == c.event.id)).unwrap();
    assert_eq!(new.bm25, None, "the terms were read before it was written");
    // Asked again with the vector known: the same candidates and cosines (now the new event's
    // terms count too).
    let again = store.search_candidates(c.id, f, CandidateQuery { vector: Some(vector(1)), ..q }).await.unwrap();
    assert_eq!(ids(&again), found);
    for (a, b) in again.iter().zip(&hops.first) {
        assert_eq!(a.cosine, b.cosine, "{}", a.event.id);
    }
}

#[tokio::test]
async fn a_scope_that_outgrows_the_exact_scan_while_the_query_embeds_is_searched_as_a_large_one() {
    let schema = "search_outgrown";
    let Some((url, store, c, _)) = setup("a scope outgrown while its query embeds", schema, 4, 0).await else { return };
    let (f, q) = user_query();
    let (store_ref, cid, url) = (&store, c.id, &url);
    let embedding: PendingVector<'_> = Box::pin(async move {
        after_the_terms_read(url, schema).await;
        store_ref.insert_event(event(cid, 6, "kyoto piano again")).await.unwrap();
        Some(vector(2))
    });
    let hops = store.search_candidates_then(c.id, f.clone(), q.clone(), embedding, no_second()).await.unwrap();
    assert_eq!(hops.first.len(), 5, "the five events, found by the large scope's indexes");
    let again = store.search_candidates(c.id, f, CandidateQuery { vector: Some(vector(2)), ..q }).await.unwrap();
    assert_eq!(ids(&again), ids(&hops.first));
    for (a, b) in again.iter().zip(&hops.first) {
        assert_eq!((a.cosine, a.bm25), (b.cosine, b.bm25), "{}", a.event.id);
    }
}

#[tokio::test]
async fn with_the_vectors_kept_here_a_search_answers_from_the_snapshot_that_read_its_scope() {
    let schema = "search_kept_copies";
    let Some((url, store, c, events)) = setup("a kept scope while its query embeds", schema, 5_000, 64).await else {
        return;
    };
    let (f, q) = user_query();
    let known = CandidateQuery { vector: Some(vector(1)), ..q.clone() };
    // The scope kept by a first search (its terms) and a second (its vector copies); what it
    // answers before the changes.
    store.search_candidates(c.id, f.clone(), known.clone()).await.unwrap();
    let before = store.search_candidates(c.id, f.clone(), known.clone()).await.unwrap();
    assert_eq!(before.len(), 4);
    let misses = store.stats().await.unwrap().scope_cache.unwrap().misses;
    let hops = searched_while_changed(&url, schema, &store, c.id, &events).await;
    let kept = store.stats().await.unwrap().scope_cache.unwrap();
    assert_eq!(kept.misses, misses, "the kept scope served the search");
    // No second statement: the scores come from the copies the scope statement's snapshot
    // holds, so the search answers as the scope was then — but for the deleted event, whose f32
    // vector, read to place it exactly, was gone: no candidate. The new one is not yet seen.
    let then: Vec<&Candidate> = before.iter().filter(|b| b.event.id != events[1].id).collect();
    let then_ids: Vec<String> = then.iter().map(|b| b.event.id.clone()).collect();
    assert_eq!(ids(&hops.first), then_ids, "as before the changes, without the deleted event");
    for (a, b) in hops.first.iter().zip(&then) {
        assert_eq!((a.cosine, a.bm25), (b.cosine, b.bm25), "{}: scored here as the server scored it", a.event.id);
    }
    // The next search sees both changes, and scores as a store without copies does.
    let after = store.search_candidates(c.id, f.clone(), known.clone()).await.unwrap();
    let plain = open(&url, schema, 5_000, 0).await;
    let fresh = plain.search_candidates(c.id, f, known).await.unwrap();
    assert_eq!(ids(&after), ids(&fresh));
    assert!(!ids(&after).contains(&events[1].id) && after.len() == 4, "{:?}", ids(&after));
    for (a, b) in after.iter().zip(&fresh) {
        assert_eq!((a.cosine, a.bm25), (b.cosine, b.bm25), "{}", a.event.id);
    }
}
