//! A user's conversations, their jobs and profiles: written on one shard ([`Write`]), listed from all.

use super::*;

#[async_trait]
impl ConversationStore for ShardedStore {
    // --- write path: a conversation on its user's shard
    async fn append_messages(&self, req: AppendRequest) -> StoreResult<AppendOutcome> {
        self.shard(Write::Conversation(&req)).await?.append_messages(req).await
    }

    async fn add_session(&self, req: AppendRequest) -> StoreResult<SessionClosed> {
        self.shard(Write::Conversation(&req)).await?.add_session(req).await
    }

    async fn delete_conversation(
        &self,
        collection_id: CollectionId,
        conversation_id: &str,
    ) -> StoreResult<Vec<String>> {
        Ok(each!(self, |s| s.delete_conversation(collection_id, conversation_id))?.concat())
    }

    async fn flush_conversation(
        &self,
        collection_id: CollectionId,
        conversation_id: &str,
        now: Millis,
        max_job_attempts: u32,
    ) -> StoreResult<Option<SessionClosed>> {
        let found =
            first_some(each!(self, |s| s.flush_conversation(collection_id, conversation_id, now, max_job_attempts))?);
        Ok(found.map(|(_, closed)| closed))
    }

    async fn close_idle_conversations(
        &self,
        now: Millis,
        limit: u32,
        max_job_attempts: u32,
    ) -> StoreResult<Vec<SessionClosed>> {
        Ok(each!(self, |s| s.close_idle_conversations(now, limit, max_job_attempts))?.concat())
    }

    async fn next_idle_deadline(&self) -> StoreResult<Option<Millis>> {
        Ok(each!(self, |s| s.next_idle_deadline())?.into_iter().flatten().min())
    }

    async fn conversation_info(
        &self,
        collection_id: CollectionId,
        conversation_id: &str,
    ) -> StoreResult<Option<ConversationInfo>> {
        Ok(first_some(each!(self, |s| s.conversation_info(collection_id, conversation_id))?).map(|(_, c)| c))
    }

    async fn session_info(&self, collection_id: CollectionId, session_id: &str) -> StoreResult<Option<SessionDetail>> {
        Ok(first_some(each!(self, |s| s.session_info(collection_id, session_id))?).map(|(_, d)| d))
    }
}

#[async_trait]
impl JobStore for ShardedStore {
    // --- jobs: claimed shard by shard, finished where claimed
    async fn claim_job(&self, now: Millis, lease_ms: i64) -> StoreResult<Option<ClaimedJob>> {
        let n = self.shards.len();
        let start = self.next_claim.fetch_add(1, Ordering::Relaxed) % n;
        for k in 0..n {
            let i = (start + k) % n;
            if let Some(claimed) = self.shards[i].claim_job(now, lease_ms).await? {
                let mut claims = self.claims.lock().unwrap_or_else(|e| e.into_inner());
                if claims.len() >= MAX_CLAIMS {
                    // Long finished jobs, almost all: a live claim forgotten here ends as a lost
                    // lease (fenced off, the job claimed again when the lease runs out).
                    claims.clear();
                }
                claims.insert(claimed.job.job_id.clone(), i);
                return Ok(Some(claimed));
            }
        }
        Ok(None)
    }

    async fn complete_job(&self, lease: &JobLease, output: ExtractionOutput, now: Millis) -> StoreResult<Vec<String>> {
        self.shard(Write::Claim(lease)).await?.complete_job(lease, output, now).await
    }

    async fn renew_lease(&self, lease: &JobLease, until: Millis) -> StoreResult<bool> {
        let Ok(shard) = self.shard(Write::Claim(lease)).await else { return Ok(false) };
        shard.renew_lease(lease, until).await
    }

    async fn fail_job(&self, lease: &JobLease, error: &str, retry_at: Option<Millis>, now: Millis) -> StoreResult<()> {
        let Ok(shard) = self.shard(Write::Claim(lease)).await else { return Ok(()) };
        shard.fail_job(lease, error, retry_at, now).await
    }

    async fn defer_job(&self, lease: &JobLease, run_after: Millis, note: &str, now: Millis) -> StoreResult<()> {
        let Ok(shard) = self.shard(Write::Claim(lease)).await else { return Ok(()) };
        shard.defer_job(lease, run_after, note, now).await
    }

    async fn retry_jobs(
        &self,
        collection_id: CollectionId,
        job_id: Option<&str>,
        now: Millis,
    ) -> StoreResult<Vec<String>> {
        Ok(each!(self, |s| s.retry_jobs(collection_id, job_id, now))?.concat())
    }

    async fn requeue_transient_failures(&self, max_requeues: u32, now: Millis) -> StoreResult<Vec<String>> {
        Ok(each!(self, |s| s.requeue_transient_failures(max_requeues, now))?.concat())
    }

    async fn tokens_used_since(&self, project: &str, since: Millis) -> StoreResult<u64> {
        Ok(each!(self, |s| s.tokens_used_since(project, since))?.into_iter().sum())
    }

    async fn list_jobs(&self, collection_id: CollectionId, filter: JobFilter) -> StoreResult<Vec<Job>> {
        let limit = filter.limit.max(1) as usize;
        let mut jobs = each!(self, |s| s.list_jobs(collection_id, filter.clone()))?.concat();
        jobs.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| b.job_id.cmp(&a.job_id)));
        jobs.truncate(limit);
        Ok(jobs)
    }

    async fn next_job_due(&self) -> StoreResult<Option<Millis>> {
        Ok(each!(self, |s| s.next_job_due())?.into_iter().flatten().min())
    }
}

#[async_trait]
impl ProfileStore for ShardedStore {
    // --- profiles: on their user's shard
    async fn insert_profile(&self, p: NewProfile) -> StoreResult<Profile> {
        self.shard(Write::Profile(&p)).await?.insert_profile(p).await
    }

    async fn update_profile(
        &self,
        collection_id: CollectionId,
        id: &str,
        patch: ProfilePatch,
        now: Millis,
    ) -> StoreResult<Profile> {
        let patch = &patch;
        let answers = each!(self, |s| async move {
            match s.update_profile(collection_id, id, patch.clone(), now).await {
                Ok(p) => Ok(Some(p)),
                Err(StoreError::NotFound(_)) => Ok(None),
                Err(e) => Err(e),
            }
        })?;
        first_some(answers)
            .map(|(_, p)| p)
            .ok_or_else(|| StoreError::NotFound(format!("profile_id: no profile \"{id}\"")))
    }

    async fn delete_profile(&self, collection_id: CollectionId, id: &str) -> StoreResult<bool> {
        Ok(each!(self, |s| s.delete_profile(collection_id, id))?.into_iter().any(|d| d))
    }

    async fn list_profiles(
        &self,
        collection_id: CollectionId,
        filter: ProfileFilter,
        limit: u32,
    ) -> StoreResult<Vec<Profile>> {
        let mut profiles = each!(self, |s| s.list_profiles(collection_id, filter.clone(), limit))?.concat();
        profiles.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then_with(|| a.id.cmp(&b.id)));
        profiles.truncate(limit as usize);
        Ok(profiles)
    }
}
