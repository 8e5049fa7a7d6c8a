//! Upkeep on every shard at once: housekeeping and bulk loads, statistics summed, maintenance runs
//! merged, a user's export and forgetting.

use super::*;

fn sum_by_key<K: Ord + Clone>(parts: impl IntoIterator<Item = Vec<(K, u64)>>) -> Vec<(K, u64)> {
    let mut m: BTreeMap<K, u64> = BTreeMap::new();
    for part in parts {
        for (k, v) in part {
            *m.entry(k).or_default() += v;
        }
    }
    m.into_iter().collect()
}

#[async_trait]
impl StoreEngine for ShardedStore {
    fn engine(&self) -> &'static str {
        "sharded"
    }

    fn housekeeping_interval(&self) -> Option<std::time::Duration> {
        self.shards.iter().filter_map(|s| s.housekeeping_interval()).min()
    }

    async fn housekeeping(&self) -> StoreResult<bool> {
        Ok(each!(self, |s| s.housekeeping())?.into_iter().any(|more| more))
    }

    fn reads_overlap(&self) -> bool {
        self.shards.iter().all(|s| s.reads_overlap())
    }

    async fn begin_bulk_load(&self) -> StoreResult<()> {
        each!(self, |s| s.begin_bulk_load()).map(drop)
    }

    async fn end_bulk_load(&self) -> StoreResult<()> {
        each!(self, |s| s.end_bulk_load()).map(drop)
    }
}

#[async_trait]
impl StatsStore for ShardedStore {
    /// A user's rows live on the shard their id hashes to, but the lists are merged by user all
    /// the same (an event shared by users of two shards is counted where it is stored).
    async fn list_users(
        &self,
        collection_id: CollectionId,
        contains: Option<String>,
        limit: u32,
    ) -> StoreResult<Vec<UserSummary>> {
        let parts = each!(self, |s| s.list_users(collection_id, contains.clone(), limit))?;
        let mut by_user: BTreeMap<String, UserSummary> = BTreeMap::new();
        for u in parts.into_iter().flatten() {
            let merged = by_user
                .entry(u.user_id.clone())
                .or_insert_with(|| UserSummary { user_id: u.user_id.clone(), ..Default::default() });
            merged.events += u.events;
            merged.conversations += u.conversations;
            merged.last_active = merged.last_active.max(u.last_active);
        }
        let mut users: Vec<UserSummary> = by_user.into_values().collect();
        order_users(&mut users, limit);
        Ok(users)
    }

    async fn memory_stats(
        &self,
        collection_id: CollectionId,
        user_id: Option<String>,
        days: u32,
        now: Millis,
    ) -> StoreResult<MemoryStats> {
        let parts = each!(self, |s| s.memory_stats(collection_id, user_id.clone(), days, now))?;
        let top_len = parts.iter().map(|p| p.top_hit.len()).max().unwrap_or(0);
        let mut top: Vec<(String, String, u64)> = parts.iter().flat_map(|p| p.top_hit.clone()).collect();
        top.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
        top.truncate(top_len);
        let mut jobs: BTreeMap<String, [u64; 5]> = BTreeMap::new();
        for (day, a, b, c, d, e) in parts.iter().flat_map(|p| p.jobs_per_day.clone()) {
            let row = jobs.entry(day).or_default();
            for (slot, v) in row.iter_mut().zip([a, b, c, d, e]) {
                *slot += v;
            }
        }
        Ok(MemoryStats {
            new_memories_per_day: sum_by_key(parts.iter().map(|p| p.new_memories_per_day.clone())),
            hits_per_day: sum_by_key(parts.iter().map(|p| p.hits_per_day.clone())),
            top_hit: top,
            never_hit: parts.iter().map(|p| p.never_hit).sum(),
            total_events: parts.iter().map(|p| p.total_events).sum(),
            jobs_per_day: jobs.into_iter().map(|(day, [a, b, c, d, e])| (day, a, b, c, d, e)).collect(),
        })
    }

    async fn stats(&self) -> StoreResult<StoreStats> {
        let parts = each!(self, |s| s.stats())?;
        Ok(StoreStats {
            jobs: sum_by_key(parts.iter().map(|p| p.jobs.clone())),
            conversations: parts.iter().map(|p| p.conversations).sum(),
            messages: parts.iter().map(|p| p.messages).sum(),
            events: parts.iter().map(|p| p.events).sum(),
            profiles: parts.iter().map(|p| p.profiles).sum(),
            bytes: parts.iter().map(|p| p.bytes).sum(),
            scope_cache: parts.iter().filter_map(|p| p.scope_cache).reduce(|a, b| ScopeCacheStats {
                hits: a.hits + b.hits,
                misses: a.misses + b.misses,
                bytes: a.bytes + b.bytes,
            }),
        })
    }
}

#[async_trait]
impl MaintenanceStore for ShardedStore {
    /// Every shard runs (and records) its part; the answer adds them up.
    async fn run_maintenance(
        &self,
        collection_id: CollectionId,
        now: Millis,
        archive_before: Millis,
        trigger: &str,
    ) -> StoreResult<MaintenanceRun> {
        let parts = each!(self, |s| s.run_maintenance(collection_id, now, archive_before, trigger))?;
        let mut run = parts[0].clone();
        for p in &parts[1..] {
            run.add_counts(p);
        }
        Ok(run)
    }

    /// The new event on its user's shard, in one transaction with the deletions there; events of
    /// the list on other shards are deleted after it.
    async fn replace_events(
        &self,
        collection_id: CollectionId,
        delete: Vec<String>,
        new: NewEvent,
    ) -> StoreResult<Event> {
        let home = self.place(Write::Event(&new)).await?.unwrap_or(0);
        let event = self.shards[home].replace_events(collection_id, delete.clone(), new).await?;
        for (i, s) in self.shards.iter().enumerate() {
            if i != home {
                for id in &delete {
                    s.delete_event(collection_id, id).await?;
                }
            }
        }
        Ok(event)
    }

    /// On shard 0's run: the listing adds the shards' runs of the same start together.
    async fn note_maintenance(&self, collection_id: CollectionId, folded: u64, digests: u64) -> StoreResult<()> {
        self.shard(Write::Catalog).await?.note_maintenance(collection_id, folded, digests).await
    }

    async fn list_maintenance_runs(&self, collection_id: CollectionId, limit: u32) -> StoreResult<Vec<MaintenanceRun>> {
        let parts = each!(self, |s| s.list_maintenance_runs(collection_id, limit))?;
        let mut runs: BTreeMap<(Millis, String), MaintenanceRun> = BTreeMap::new();
        for r in parts.into_iter().flatten() {
            match runs.get_mut(&(r.started_at, r.trigger.clone())) {
                Some(run) => run.add_counts(&r),
                None => {
                    runs.insert((r.started_at, r.trigger.clone()), r);
                }
            }
        }
        Ok(runs.into_values().rev().take(limit as usize).collect())
    }
}

#[async_trait]
impl PrivacyStore for ShardedStore {
    // --- privacy: a user's data may sit on several shards (a group chat's speakers)
    async fn export_user(&self, collection_id: CollectionId, user_id: &str) -> StoreResult<UserData> {
        let mut out = UserData::default();
        for part in each!(self, |s| s.export_user(collection_id, user_id))? {
            out.conversations.extend(part.conversations);
            out.messages.extend(part.messages);
            out.sessions.extend(part.sessions);
            out.jobs.extend(part.jobs);
            out.events.extend(part.events);
            out.profiles.extend(part.profiles);
        }
        Ok(out)
    }

    async fn forget_user(&self, collection_id: CollectionId, user_id: &str) -> StoreResult<ForgetCounts> {
        let mut out = ForgetCounts::default();
        for c in each!(self, |s| s.forget_user(collection_id, user_id))? {
            out += c;
        }
        Ok(out)
    }
}
