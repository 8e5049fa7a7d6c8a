//! What every shard holds: collections (shard 0 allocates and lists, every shard keeps a copy with
//! the same id) and webhook endpoints (each shard's triggers queue its own changes' deliveries).

use super::*;

fn delivery_to_global(id: i64, shard: usize) -> i64 {
    id * MAX_SHARDS as i64 + shard as i64
}

fn delivery_to_local(id: i64) -> (i64, usize) {
    (id.div_euclid(MAX_SHARDS as i64), id.rem_euclid(MAX_SHARDS as i64) as usize)
}

#[async_trait]
impl CollectionStore for ShardedStore {
    // --- collections: shard 0 allocates and lists, every shard holds a copy
    async fn create_collection(&self, c: NewCollection) -> StoreResult<Collection> {
        let created = self.shards[0].create_collection(c).await?;
        self.copy_collection(&created).await?;
        Ok(created)
    }

    async fn get_collection(&self, project: &str, name: &str) -> StoreResult<Option<Collection>> {
        self.shards[0].get_collection(project, name).await
    }

    async fn ensure_collection(&self, c: NewCollection) -> StoreResult<Collection> {
        let found = self.shards[0].ensure_collection(c).await?;
        self.copy_collection(&found).await?;
        Ok(found)
    }

    async fn all_collections(&self) -> StoreResult<Vec<Collection>> {
        self.shards[0].all_collections().await
    }

    async fn set_collection_embedding(&self, id: CollectionId, model: &str, dim: u32) -> StoreResult<()> {
        each!(self, |s| s.set_collection_embedding(id, model, dim)).map(drop)
    }

    async fn list_collections(&self, project: &str) -> StoreResult<Vec<Collection>> {
        self.shards[0].list_collections(project).await
    }

    async fn delete_collection(&self, id: CollectionId) -> StoreResult<bool> {
        // The catalog last: a failure midway leaves the collection listed, and deleting it
        // again finishes the job.
        for s in &self.shards[1..] {
            s.delete_collection(id).await?;
        }
        self.shards[0].delete_collection(id).await
    }
}

#[async_trait]
impl WebhookStore for ShardedStore {
    // --- webhooks: endpoints on every shard, each shard's outbox delivered from it
    async fn upsert_webhook(&self, w: NewWebhook) -> StoreResult<Webhook> {
        let mut out = each!(self, |s| s.upsert_webhook(w.clone()))?;
        Ok(out.swap_remove(0))
    }

    async fn sync_config_webhooks(&self, hooks: Vec<NewWebhook>) -> StoreResult<()> {
        each!(self, |s| s.sync_config_webhooks(hooks.clone())).map(drop)
    }

    async fn list_webhooks(&self, project: Option<&str>) -> StoreResult<Vec<Webhook>> {
        let mut parts = each!(self, |s| s.list_webhooks(project))?.into_iter();
        let mut hooks = parts.next().unwrap_or_default();
        for part in parts {
            for other in part {
                if let Some(h) = hooks.iter_mut().find(|h| h.webhook_id == other.webhook_id) {
                    h.pending += other.pending;
                    h.dead += other.dead;
                    h.delivered += other.delivered;
                }
            }
        }
        Ok(hooks)
    }

    async fn delete_webhook(&self, project: &str, id: &str) -> StoreResult<bool> {
        Ok(each!(self, |s| s.delete_webhook(project, id))?.into_iter().any(|d| d))
    }

    /// Up to `limit` in all: shard after shard (from a rotating first one, so every outbox is
    /// served), each asked for what is left, so nothing is leased that is not handed out.
    async fn claim_deliveries(
        &self,
        now: Millis,
        lease_until: Millis,
        limit: u32,
    ) -> StoreResult<Vec<ClaimedDelivery>> {
        let n = self.shards.len();
        let start = self.next_claim.fetch_add(1, Ordering::Relaxed) % n;
        let mut out = Vec::new();
        for k in 0..n {
            let left = limit.saturating_sub(out.len() as u32);
            if left == 0 {
                break;
            }
            let i = (start + k) % n;
            for mut d in self.shards[i].claim_deliveries(now, lease_until, left).await? {
                d.delivery.delivery_id = delivery_to_global(d.delivery.delivery_id, i);
                out.push(d);
            }
        }
        Ok(out)
    }

    async fn finish_delivery(&self, delivery_id: i64, outcome: DeliveryOutcome, now: Millis) -> StoreResult<()> {
        let (local, i) = delivery_to_local(delivery_id);
        let Some(s) = self.shards.get(i) else {
            return Err(StoreError::NotFound(format!("delivery_id: no delivery {delivery_id}")));
        };
        s.finish_delivery(local, outcome, now).await
    }

    async fn list_deliveries(&self, project: &str, filter: DeliveryFilter) -> StoreResult<Vec<Delivery>> {
        let limit = filter.limit.max(1) as usize;
        let parts = each!(self, |s| s.list_deliveries(project, filter.clone()))?;
        let mut out = Vec::new();
        for (i, part) in parts.into_iter().enumerate() {
            for mut d in part {
                d.delivery_id = delivery_to_global(d.delivery_id, i);
                out.push(d);
            }
        }
        out.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.delivery_id.cmp(&a.delivery_id)));
        out.truncate(limit);
        Ok(out)
    }

    async fn redeliver(
        &self,
        project: &str,
        webhook_id: &str,
        ids: Option<Vec<i64>>,
        now: Millis,
    ) -> StoreResult<Vec<i64>> {
        let mut out = Vec::new();
        for (i, s) in self.shards.iter().enumerate() {
            let local = ids.as_ref().map(|ids| {
                ids.iter().map(|id| delivery_to_local(*id)).filter(|(_, shard)| *shard == i).map(|(l, _)| l).collect()
            });
            if local.as_ref().is_some_and(|l: &Vec<i64>| l.is_empty()) {
                continue;
            }
            out.extend(
                s.redeliver(project, webhook_id, local, now).await?.into_iter().map(|l| delivery_to_global(l, i)),
            );
        }
        Ok(out)
    }

    async fn prune_deliveries(&self, before: Millis) -> StoreResult<u64> {
        Ok(each!(self, |s| s.prune_deliveries(before))?.into_iter().sum())
    }
}
