//! Events, written on their first user's shard, and search: every shard asked for its candidates
//! with the summed BM25 statistics, the union ranked as one store's.

use super::*;

/// What one store holding every shard's events would answer from the shards' answers: the `k`
/// nearest and the `k` best by BM25 of their union (a shard's candidates outside its own `k`
/// nearest are farther than its `k`-th, so the union holds the overall `k` nearest; BM25 alike).
fn best_of(mut all: Vec<Candidate>, k: usize) -> Vec<Candidate> {
    let by = |score: fn(&Candidate) -> Option<f64>, all: &mut Vec<Candidate>| -> Vec<String> {
        all.sort_by(|a, b| {
            score(b)
                .unwrap_or(f64::NEG_INFINITY)
                .total_cmp(&score(a).unwrap_or(f64::NEG_INFINITY))
                .then_with(|| a.event.id.cmp(&b.event.id))
        });
        all.iter().filter(|c| score(c).is_some()).take(k).map(|c| c.event.id.clone()).collect()
    };
    let mut keep: std::collections::HashSet<String> = by(|c| c.cosine.map(f64::from), &mut all).into_iter().collect();
    keep.extend(by(|c| c.bm25, &mut all));
    all.retain(|c| keep.contains(&c.event.id));
    all
}

#[async_trait]
impl EventStore for ShardedStore {
    // --- events: written on their first user's shard, read from all
    async fn insert_event(&self, e: NewEvent) -> StoreResult<Event> {
        self.shard(Write::Event(&e)).await?.insert_event(e).await
    }

    async fn insert_events(&self, events: Vec<NewEvent>) -> StoreResult<Vec<Event>> {
        let mut parts: BTreeMap<usize, Vec<(usize, NewEvent)>> = BTreeMap::new();
        for (pos, e) in events.into_iter().enumerate() {
            let i = self.place(Write::Event(&e)).await?.unwrap_or(0);
            parts.entry(i).or_default().push((pos, e));
        }
        let total = parts.values().map(Vec::len).sum();
        let mut out: Vec<Option<Event>> = vec![None; total];
        let mut written: Vec<(usize, CollectionId, Vec<String>)> = Vec::new();
        for (i, part) in parts {
            let (positions, batch): (Vec<usize>, Vec<NewEvent>) = part.into_iter().unzip();
            let collection_id = batch[0].collection_id;
            match self.shards[i].insert_events(batch).await {
                Ok(stored) => {
                    written.push((i, collection_id, stored.iter().map(|e| e.id.clone()).collect()));
                    for (pos, e) in positions.into_iter().zip(stored) {
                        out[pos] = Some(e);
                    }
                }
                Err(e) => {
                    // All or none: take back what the shards before committed.
                    for (j, c, ids) in written {
                        for id in ids {
                            self.shards[j].delete_event(c, &id).await?;
                        }
                    }
                    return Err(e);
                }
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    async fn get_event(&self, collection_id: CollectionId, id: &str) -> StoreResult<Option<Event>> {
        Ok(first_some(each!(self, |s| s.get_event(collection_id, id))?).map(|(_, e)| e))
    }

    async fn update_event(
        &self,
        collection_id: CollectionId,
        id: &str,
        patch: EventPatch,
        now: Millis,
    ) -> StoreResult<Event> {
        let Some(i) = self.place(Write::StoredEvent(collection_id, id)).await? else {
            return Err(StoreError::NotFound(format!("event_id: no event \"{id}\"")));
        };
        self.shards[i].update_event(collection_id, id, patch, now).await
    }

    async fn delete_event(&self, collection_id: CollectionId, id: &str) -> StoreResult<bool> {
        Ok(each!(self, |s| s.delete_event(collection_id, id))?.into_iter().any(|d| d))
    }

    async fn batch_delete_events(&self, collection_id: CollectionId, filter: EventFilter) -> StoreResult<u64> {
        Ok(each!(self, |s| s.batch_delete_events(collection_id, filter.clone()))?.into_iter().sum())
    }

    async fn list_events(
        &self,
        collection_id: CollectionId,
        filter: EventFilter,
        limit: u32,
    ) -> StoreResult<Vec<Event>> {
        let mut events = each!(self, |s| s.list_events(collection_id, filter.clone(), limit))?.concat();
        events.sort_by(|a, b| b.time.cmp(&a.time).then_with(|| b.id.cmp(&a.id)));
        events.truncate(limit as usize);
        Ok(events)
    }

    async fn event_after(
        &self,
        collection_id: CollectionId,
        filter: EventFilter,
        time: Millis,
        id: &str,
    ) -> StoreResult<Option<Event>> {
        let firsts = each!(self, |s| s.event_after(collection_id, filter.clone(), time, id))?;
        Ok(firsts.into_iter().flatten().min_by(|a, b| (a.time, &a.id).cmp(&(b.time, &b.id))))
    }

    async fn record_hits(&self, collection_id: CollectionId, ids: Vec<String>, now: Millis) -> StoreResult<()> {
        each!(self, |s| s.record_hits(collection_id, ids.clone(), now)).map(drop)
    }

    async fn events_missing_vectors(&self, collection_id: CollectionId, limit: u32) -> StoreResult<Vec<Event>> {
        let mut events = each!(self, |s| s.events_missing_vectors(collection_id, limit))?.concat();
        events.truncate(limit as usize);
        Ok(events)
    }

    async fn set_event_vector(
        &self,
        collection_id: CollectionId,
        id: &str,
        vector: Vec<f32>,
        turns: Option<Vec<Vec<f32>>>,
    ) -> StoreResult<()> {
        let Some(i) = self.place(Write::StoredEvent(collection_id, id)).await? else { return Ok(()) };
        self.shards[i].set_event_vector(collection_id, id, vector, turns).await
    }

    async fn events_without_turns(
        &self,
        before: Option<String>,
        limit: u32,
    ) -> StoreResult<Option<Vec<(CollectionId, Event)>>> {
        let parts = each!(self, |s| s.events_without_turns(before.clone(), limit))?;
        if parts.iter().all(Option::is_none) {
            return Ok(None);
        }
        let mut events = parts.into_iter().flatten().flatten().collect::<Vec<_>>();
        events.sort_by(|a, b| b.1.id.cmp(&a.1.id));
        events.truncate(limit as usize);
        Ok(Some(events))
    }

    async fn add_event_turns(
        &self,
        collection_id: CollectionId,
        id: &str,
        seen: Millis,
        turns: Vec<Vec<f32>>,
    ) -> StoreResult<bool> {
        let Some(i) = self.place(Write::StoredEvent(collection_id, id)).await? else { return Ok(false) };
        self.shards[i].add_event_turns(collection_id, id, seen, turns).await
    }

    async fn turns_backfilled(&self) -> StoreResult<()> {
        each!(self, |s| s.turns_backfilled()).map(drop)
    }
}

#[async_trait]
impl SearchStore for ShardedStore {
    async fn search_candidates(
        &self,
        collection_id: CollectionId,
        filter: EventFilter,
        query: CandidateQuery,
    ) -> StoreResult<Vec<Candidate>> {
        // A vector part given (a second hop's) names events of every shard and a shard loads
        // what it is given: each scans its own again instead (`search_candidates_then` hands
        // every shard its own part).
        let query = self.with_corpus(collection_id, CandidateQuery { vector_hits: None, ..query }).await?;
        let found = each!(self, |s| s.search_candidates(collection_id, filter.clone(), query.clone()))?;
        Ok(best_of(found.concat(), query.k))
    }

    /// Every shard runs its own two-hop search (so a store that keeps what its first search
    /// read — PostgreSQL's small scopes — scores the second from it, and one that reads its
    /// scope while the vector is computed — SQLite — does), while the second hop is decided
    /// once, here: each shard's `then` hands its first answer over and waits; when all have, the
    /// union's `k` best decide the terms (the caller's `then`), their statistics are summed over
    /// the shards, and every shard goes on with the same second query (and its own first hop's
    /// vector part). The vector is handed to every shard as it arrives (a watch channel).
    async fn search_candidates_then(
        &self,
        collection_id: CollectionId,
        filter: EventFilter,
        first: CandidateQuery,
        vector: PendingVector<'_>,
        then: NextTerms<'_>,
    ) -> StoreResult<TwoHops> {
        let k = first.k;
        let (found_tx, mut found_rx) = tokio::sync::mpsc::unbounded_channel::<Vec<Candidate>>();
        let (hop_tx, hop_rx) = tokio::sync::watch::channel::<Option<Option<NextHop>>>(None);
        let (vector_tx, vector_rx) = tokio::sync::watch::channel::<Option<Option<Vec<f32>>>>(None);
        let publish = async {
            let v = vector.await;
            let _ = vector_tx.send(Some(v.clone()));
            Ok::<_, StoreError>(v)
        };
        let searches = async {
            let found_tx = found_tx; // moved in: dropped below, once every shard holds its own
            let first = self.with_corpus(collection_id, first.clone()).await?;
            let searches = self.shards.iter().map(|s| {
                let (found_tx, mut hop_rx, mut vector_rx) = (found_tx.clone(), hop_rx.clone(), vector_rx.clone());
                let ask: NextTerms<'static> = Box::new(move |found: &[Candidate]| {
                    let _ = found_tx.send(found.to_vec());
                    Box::pin(async move {
                        hop_rx.wait_for(Option::is_some).await.ok().and_then(|hop| hop.clone().flatten())
                    })
                });
                let vector: PendingVector<'static> = Box::pin(async move {
                    vector_rx.wait_for(Option::is_some).await.ok().and_then(|v| v.clone().flatten())
                });
                s.search_candidates_then(collection_id, filter.clone(), first.clone(), vector, ask)
            });
            let searches = try_join_all(searches);
            drop(found_tx);
            searches.await
        };
        let decide = async {
            // Until every shard has answered (a shard that ends without asking drops its sender).
            let mut parts = Vec::new();
            while let Some(found) = found_rx.recv().await {
                parts.extend(found);
            }
            let hop = match then(&best_of(parts, k)).await {
                Some(next) => {
                    let corpus = self.summed_corpus(collection_id, &next.terms, next.corpus).await?;
                    Some(NextHop { terms: next.terms, corpus })
                }
                None => None,
            };
            let _ = hop_tx.send(Some(hop));
            Ok::<_, StoreError>(())
        };
        let (vector, answers, ()) = tokio::try_join!(publish, searches, decide)?;
        let mut firsts = Vec::new();
        let mut seconds: Option<Vec<Candidate>> = None;
        for TwoHops { first, second, .. } in answers {
            firsts.extend(first);
            if let Some(more) = second {
                seconds.get_or_insert_with(Vec::new).extend(more);
            }
        }
        Ok(TwoHops { vector, first: best_of(firsts, k), second: seconds.map(|more| best_of(more, k)) })
    }

    async fn corpus(&self, collection_id: CollectionId, tokens: &[String]) -> StoreResult<Corpus> {
        let mut sum = Corpus::default();
        for part in each!(self, |s| s.corpus(collection_id, tokens))? {
            sum.add(part);
        }
        Ok(sum)
    }
}
