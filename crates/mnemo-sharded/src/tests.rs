//! The sharded store over in-memory shards: the conformance suite, batches over shards, the turn
//! backfill's paging, the routing hash.

use super::*;
use mnemo_testing::{MemoryStore, StoreHarness, run_all};

/// Collection `p/c` of a model with `dim` dimensions.
fn collection(dim: u32) -> NewCollection {
    NewCollection {
        id: None,
        project_name: "p".into(),
        collection_name: "c".into(),
        description: String::new(),
        schema: Default::default(),
        embedding_model: "m".into(),
        embedding_dim: dim,
        created_at: 1,
    }
}

/// Three in-memory shards; every open is a reopen of the same three.
struct ShardedHarness(Vec<MemoryStore>);

#[async_trait]
impl StoreHarness for ShardedHarness {
    async fn open(&self) -> Arc<dyn Store> {
        let shards = self.0.iter().map(|s| Arc::new(s.reopen()) as Arc<dyn Store>).collect();
        Arc::new(ShardedStore::open(shards).await.unwrap())
    }
    fn has_webhooks(&self) -> bool {
        false
    }
    fn sharded(&self) -> bool {
        true
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_shards_pass_the_conformance_suite() {
    run_all(async || ShardedHarness((0..3).map(|_| MemoryStore::new()).collect())).await;
}

/// A batch over two shards whose second part fails leaves nothing: the first shard's
/// committed part is taken back.
#[tokio::test]
async fn a_batch_over_shards_is_taken_back_when_a_later_shard_refuses_its_part() {
    let shards: Vec<Arc<dyn Store>> = (0..3).map(|_| Arc::new(MemoryStore::new()) as Arc<dyn Store>).collect();
    let s = ShardedStore::open(shards.clone()).await.unwrap();
    let c = s.ensure_collection(collection(4)).await.unwrap();
    for shard in &shards {
        assert_eq!(shard.get_collection("p", "c").await.unwrap().map(|x| x.id), Some(c.id), "a copy, same id");
    }
    let (a, b) = ("u0", "u1");
    assert!(shard_of(a, 3) < shard_of(b, 3), "the good part is written first");
    let info = |t: &str| serde_json::json!({ "summary": t }).as_object().unwrap().clone();
    let good = NewEvent::of_user(c.id, crate::EVENT_V1, a, info("kept?"), 1);
    let orphan = NewEvent::of_user(c.id + 99, crate::EVENT_V1, b, info("no such collection"), 2);
    assert!(s.insert_events(vec![good.clone(), orphan]).await.is_err());
    let all = EventFilter { user_id: vec![a.into(), b.into()], ..Default::default() };
    assert!(s.list_events(c.id, all.clone(), 10).await.unwrap().is_empty(), "nothing of the batch stays");
    let stored = s.insert_events(vec![good, NewEvent::of_user(c.id, crate::EVENT_V1, b, info("b"), 3)]).await.unwrap();
    assert_eq!(stored.iter().map(|e| e.user_id[0].as_str()).collect::<Vec<_>>(), [a, b], "in the order given");
    for e in &stored {
        let home = &shards[shard_of(&e.user_id[0], 3)];
        assert!(home.get_event(c.id, &e.id).await.unwrap().is_some(), "on its user's shard");
    }
}

/// The turn-vector backfill pages through every shard's events, newest first across them,
/// adds turns on the event's own shard, and is done when every shard says so.
#[tokio::test]
async fn the_turn_backfill_pages_through_every_shard_newest_first() {
    let memories: Vec<MemoryStore> = (0..3).map(|_| MemoryStore::new()).collect();
    let shards = memories.iter().map(|m| Arc::new(m.clone()) as Arc<dyn Store>).collect();
    let s = ShardedStore::open(shards).await.unwrap();
    let c = s.ensure_collection(collection(2)).await.unwrap();
    let mut ids = Vec::new();
    for u in ["u0", "u1", "u2", "u3", "u4", "u5"] {
        let info = serde_json::json!({ "summary": u }).as_object().unwrap().clone();
        let e = NewEvent { embedding: Some(vec![1.0, 0.0]), ..NewEvent::of_user(c.id, crate::EVENT_V1, u, info, 1) };
        ids.push(s.insert_event(e).await.unwrap().id);
    }
    let homes: std::collections::HashSet<usize> =
        ["u0", "u1", "u2", "u3", "u4", "u5"].iter().map(|u| shard_of(u, 3)).collect();
    assert!(homes.len() > 1, "the events are spread");
    assert_eq!(s.events_without_turns(None, 10).await.unwrap(), None, "nothing written before");
    memories.iter().for_each(MemoryStore::as_written_before_turns);
    let mut seen = Vec::new();
    let mut before = None;
    while let Some(page) = s.events_without_turns(before.clone(), 4).await.unwrap() {
        let Some((_, last)) = page.last() else { break };
        before = Some(last.id.clone());
        assert!(page.iter().all(|(cid, _)| *cid == c.id));
        seen.extend(page.into_iter().map(|(_, e)| e.id));
    }
    ids.reverse();
    assert_eq!(seen, ids, "each once, newest first");
    assert!(s.add_event_turns(c.id, &ids[0], 1, vec![vec![1.0, 0.0], vec![0.0, 1.0]]).await.unwrap());
    assert_eq!(memories.iter().map(MemoryStore::events_with_turns).sum::<usize>(), 1);
    s.turns_backfilled().await.unwrap();
    assert_eq!(s.events_without_turns(None, 10).await.unwrap(), None);
}

#[test]
fn the_routing_hash_never_changes() {
    // Data written under these is found through them: a change here strands it.
    // FNV-1a's published test vectors, then where three users live among four shards.
    assert_eq!([fnv1a(""), fnv1a("a"), fnv1a("foobar")], [0xcbf29ce484222325, 0xaf63dc4c8601ec8c, 0x85944171f73967e8]);
    assert_eq!([shard_of("u1", 4), shard_of("alice", 4), shard_of("用户", 4)], [3, 3, 1]);
    let spread: Vec<usize> =
        (0..4).map(|i| (0..4000).filter(|u| shard_of(&format!("user{u}"), 4) == i).count()).collect();
    assert!(spread.iter().all(|n| (900..1100).contains(n)), "{spread:?}");
}
