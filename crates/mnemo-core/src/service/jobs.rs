//! Running one extraction job: budget check, extraction, then what the service does to every
//! extractor's output before it is stored — validation, date anchoring, embedding, and dedup /
//! supersede against the user's earlier events. Extractors stay simple; the rules that keep
//! memories clean live here once.

use super::*;
use crate::StoreError;
use crate::dates;
use crate::embed::dot;
use crate::extract::ExtractedEvent;
use std::collections::HashSet;
use std::sync::atomic::Ordering;

/// What the service does with extraction output (config `extraction.*`).
#[derive(Clone, Debug)]
pub struct ExtractionPolicy {
    /// Cosine similarity at or above which a new event of the same user and type refreshes an
    /// existing one instead of being added (`None`: only exact normalised-text duplicates merge).
    pub dedup_similarity: Option<f32>,
    /// The users' clock, for resolving "yesterday" / 昨天 against a message's time.
    pub utc_offset: chrono::FixedOffset,
    /// Tokens (prompt + completion) a project's extraction may spend per UTC day; `None`: no limit.
    pub daily_token_budget: Option<u64>,
    /// Per-project budgets overriding `daily_token_budget`.
    pub project_token_budgets: HashMap<String, u64>,
    /// Drills only (`extraction.fault_injection.commit_delay_ms`): a wait between a job's dedup
    /// and its commit, widening the window in which another replica commits a twin.
    pub commit_delay: std::time::Duration,
}

impl Default for ExtractionPolicy {
    fn default() -> Self {
        Self {
            dedup_similarity: Some(0.9),
            utc_offset: chrono::FixedOffset::east_opt(0).expect("UTC"),
            daily_token_budget: None,
            project_token_budgets: HashMap::new(),
            commit_delay: std::time::Duration::ZERO,
        }
    }
}

const DAY_MS: Millis = 86_400_000;

impl Service {
    pub async fn list_jobs(&self, t: &Target, filter: JobFilter) -> CoreResult<Vec<Job>> {
        let c = self.collection_for_read(t).await?;
        Ok(self.store.list_jobs(c.id, filter).await?)
    }

    /// `job/retry`: puts one failed job (or every failed job of the collection) back in the queue,
    /// from its first attempt. Returns the ids; a named job that is not failed is a `Conflict`.
    pub async fn retry_jobs(&self, t: &Target, job_id: Option<String>) -> CoreResult<Vec<String>> {
        if let Some(id) = &job_id {
            check_len("job_id", id, 1, MAX_ID_CHARS)?;
        }
        let c = self.collection_for_read(t).await?;
        let ids = self.store.retry_jobs(c.id, job_id.as_deref(), self.now()).await?;
        if let Some(id) = job_id
            && ids.is_empty()
        {
            let found = self.store.list_jobs(c.id, JobFilter { limit: 5000, ..Default::default() }).await?;
            return Err(match found.iter().find(|j| j.job_id == id) {
                None => CoreError::NotFound(format!("job_id: no job \"{id}\"")),
                Some(j) => CoreError::Conflict(format!(
                    "job_id: job \"{id}\" is {}, not failed; only failed jobs are retried",
                    j.state.as_str()
                )),
            });
        }
        if !ids.is_empty() {
            tracing::info!(jobs = ids.len(), "failed jobs queued again by request");
            self.job_queued.notify_waiters();
        }
        Ok(ids)
    }

    /// Waits (polling, at most `timeout`) until the job of a closed session has ended; returns
    /// its state then (`None`: the session has no job). The write path never waits for
    /// extraction — this is for front ends that promise their caller more, like MCP's `remember`.
    pub async fn wait_for_session(
        &self,
        t: &Target,
        session_id: &str,
        timeout: Duration,
    ) -> CoreResult<Option<JobState>> {
        let c = self.collection_for_read(t).await?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let filter = JobFilter { session_id: Some(session_id.to_string()), limit: 1, ..Default::default() };
            let state = self.store.list_jobs(c.id, filter).await?.first().map(|j| j.state);
            let ended = matches!(state, Some(JobState::Done | JobState::Failed) | None);
            if ended || tokio::time::Instant::now() >= deadline {
                return Ok(state);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Re-queues jobs that failed for a transient reason (each at most `max_requeues` times).
    /// Returns how many.
    pub async fn recover_failed_jobs(&self) -> CoreResult<usize> {
        self.transient_failures.store(false, Ordering::SeqCst);
        let ids = self.store.requeue_transient_failures(self.config.max_requeues, self.now()).await?;
        if !ids.is_empty() {
            tracing::info!(jobs = ids.len(), "jobs that failed for a transient reason are queued again");
            self.job_queued.notify_waiters();
        }
        Ok(ids.len())
    }

    /// Runs one due extraction job, if any. Returns whether a job was taken (done, retried,
    /// failed or deferred).
    pub async fn try_run_one(&self) -> CoreResult<bool> {
        let now = self.now();
        let lease_ms = self.config.job_lease.as_millis() as i64;
        let Some(claimed) = self.store.claim_job(now, lease_ms).await? else {
            return Ok(false);
        };
        let lease = claimed.lease();
        // The heartbeat renews the lease while the job runs, so a short lease is enough for
        // another replica to take over quickly when this one dies. If the lease is lost, the
        // work stops (another worker owns the job now).
        let heartbeat = async {
            loop {
                tokio::time::sleep(self.config.job_lease / 3).await;
                match self.store.renew_lease(&lease, self.now() + lease_ms).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(job_id = lease.job_id, attempt = lease.attempt, "job lease lost; abandoning it");
                        return;
                    }
                    Err(e) => tracing::warn!(job_id = lease.job_id, "cannot renew the job lease: {e}"),
                }
            }
        };
        tokio::select! {
            r = self.run_claimed(claimed, now) => r,
            () = heartbeat => Ok(true),
        }
    }

    async fn run_claimed(&self, claimed: ClaimedJob, now: Millis) -> CoreResult<bool> {
        let job_id = claimed.job.job_id.clone();
        let lease = claimed.lease();
        let attempt = claimed.job.attempts; // already counts this attempt
        let Some(extractor) = self.extractors.get(claimed.collection.schema.extractor.as_deref()).cloned() else {
            let name = claimed.collection.schema.extractor.clone().unwrap_or_default();
            let msg = format!("extractor \"{name}\" is not configured on this server");
            self.store.fail_job(&lease, &msg, Some(now + self.config.retry_max.as_millis() as i64), now).await?;
            return Ok(true);
        };
        if extractor.uses_tokens()
            && let Some(note) = self.over_budget(&claimed.collection.project_name, now).await?
        {
            let tomorrow = (now.div_euclid(DAY_MS) + 1) * DAY_MS;
            tracing::info!(job_id, "{note}");
            self.store.defer_job(&lease, tomorrow, &note, now).await?;
            self.job_outcomes.deferred.fetch_add(1, Ordering::Relaxed);
            return Ok(true);
        }
        let related_events = match (&claimed.meta.user_id, extractor.wants_related_events()) {
            (Some(user), true) => self.related_events(&claimed.collection, user, &claimed.messages).await,
            _ => vec![],
        };
        let input = ExtractionInput {
            schema: claimed.collection.schema.clone(),
            session_id: claimed.session.session_id.clone(),
            meta: claimed.meta.clone(),
            messages: claimed.messages.clone(),
            profiles: claimed.profiles.clone(),
            related_events: related_events.clone(),
            now,
        };
        let result = match tokio::time::timeout(self.config.extraction_timeout, extractor.extract(input)).await {
            Ok(r) => r,
            Err(_) => Err(ExtractError::Transient(format!(
                "extraction timed out after {} s",
                self.config.extraction_timeout.as_secs()
            ))),
        };
        let result = match result {
            Ok(output) => self.prepare_output(&claimed, &related_events, output, now).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(mut output) => {
                // Near-duplicates merge: within this session, then with the user's stored events.
                // One user's jobs dedup and commit one at a time, so two sessions finishing together
                // cannot both add the same event.
                let lock = self.user_lock(claimed.collection.id, claimed.meta.user_id.as_deref());
                let _guard = lock.lock().await;
                output.events = self.dedup(&claimed, std::mem::take(&mut output.events)).await;
                output.dedup_similarity = self.config.extraction.dedup_similarity;
                if !self.config.extraction.commit_delay.is_zero() {
                    tokio::time::sleep(self.config.extraction.commit_delay).await;
                }
                let (n, merged) =
                    (output.events.len(), output.events.iter().filter(|e| e.merge_into.is_some()).count());
                match self.store.complete_job(&lease, output, self.now()).await {
                    Ok(_) => {
                        self.job_outcomes.done.fetch_add(1, Ordering::Relaxed);
                        // The provider answers again: jobs it failed while it was down go back in.
                        if self.transient_failures.load(Ordering::SeqCst)
                            && let Err(e) = self.recover_failed_jobs().await
                        {
                            tracing::warn!(error = %e, "re-queueing failed jobs");
                        }
                        tracing::info!(job_id, session_id = %claimed.session.session_id, events = n, merged, "extraction done");
                    }
                    // The lease ran out and another worker took the job: its result counts, not ours.
                    Err(StoreError::Conflict(why)) => tracing::warn!(job_id, attempt, "extraction discarded: {why}"),
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => {
                let retry_at = match &e {
                    ExtractError::Transient(_) if attempt < claimed.job.max_attempts => {
                        Some(self.now() + self.backoff(attempt).as_millis() as i64)
                    }
                    _ => None,
                };
                tracing::warn!(job_id, attempt, error = %e, retry_at, "extraction failed");
                self.store.fail_job(&lease, &e.to_string(), retry_at, self.now()).await?;
                if retry_at.is_none() && matches!(e, ExtractError::Transient(_)) {
                    self.transient_failures.store(true, Ordering::SeqCst);
                }
                let counter = if retry_at.is_some() { &self.job_outcomes.retried } else { &self.job_outcomes.failed };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(true)
    }

    /// The lock that orders one user's extraction commits (entries are dropped when unused).
    pub(super) fn user_lock(&self, cid: CollectionId, user: Option<&str>) -> UserLock {
        let mut locks = self.user_locks.lock().expect("user locks");
        locks.retain(|_, l| Arc::strong_count(l) > 1);
        locks.entry((cid, user.unwrap_or_default().to_string())).or_default().clone()
    }

    /// Exponential backoff: base · 2^(attempt-1), capped.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.saturating_sub(1).min(20)).unwrap_or(u32::MAX);
        self.config.retry_base.saturating_mul(factor).min(self.config.retry_max)
    }

    /// `Some(reason)` when the project has spent its daily token budget.
    async fn over_budget(&self, project: &str, now: Millis) -> CoreResult<Option<String>> {
        let p = &self.config.extraction;
        let Some(budget) = p.project_token_budgets.get(project).copied().or(p.daily_token_budget) else {
            return Ok(None);
        };
        let day_start = now.div_euclid(DAY_MS) * DAY_MS;
        let used = self.store.tokens_used_since(project, day_start).await?;
        Ok((used >= budget).then(|| {
            format!(
                "deferred: project \"{project}\" spent {used} of its daily budget of {budget} tokens; the job runs after 00:00 UTC"
            )
        }))
    }

    /// The user's earlier events most related to the session: the best hybrid matches for what
    /// the user said, and the newest few. Best effort: a failed search gives none.
    async fn related_events(&self, c: &Collection, user: &str, messages: &[StoredMessage]) -> Vec<Event> {
        let text: String = messages
            .iter()
            .filter(|m| m.role == crate::model::Role::User)
            .map(|m| m.content.as_str())
            .collect::<Vec<_>>()
            .join("\n")
            .chars()
            .take(2000)
            .collect();
        let filter = EventFilter { user_id: vec![user.to_string()], active_only: true, ..Default::default() };
        let vector = self.embed_one(&text, EmbedKind::Query).await.ok();
        let (offset, fusion) = (self.embedder.query_offset(&text), self.embedder.fusion());
        let query =
            CandidateQuery { vector, terms: crate::text::search_tokens(&text), k: 6, vector_hits: None, corpus: None };
        let mut out: Vec<Event> = match self.store.search_candidates(c.id, filter.clone(), query).await {
            Ok(cands) => {
                let mut scored: Vec<(f64, Event)> =
                    cands.into_iter().map(|c| (fusion.fuse(c.cosine.map(|x| x + offset), c.bm25), c.event)).collect();
                scored.sort_by(|a, b| b.0.total_cmp(&a.0));
                scored.into_iter().take(6).map(|(_, e)| e).collect()
            }
            Err(e) => {
                tracing::warn!(error = %e, "related events: search failed");
                vec![]
            }
        };
        if let Ok(recent) = self.store.list_events(c.id, filter, 4).await {
            for e in recent {
                if !out.iter().any(|o| o.id == e.id) {
                    out.push(e);
                }
            }
        }
        out
    }

    /// What every extractor's output goes through before it is stored.
    async fn prepare_output(
        &self,
        claimed: &ClaimedJob,
        related: &[Event],
        mut output: ExtractionOutput,
        now: Millis,
    ) -> Result<ExtractionOutput, ExtractError> {
        let schema = &claimed.collection.schema;
        let first_time = claimed.messages.first().map(|m| m.time).unwrap_or(now);
        // Only the types the writer asked for (`extract_memory_type`), when it named any.
        let wanted =
            |t: &str| claimed.meta.extract_types.is_empty() || claimed.meta.extract_types.iter().any(|w| w == t);
        if !wanted(PROFILE_V1) {
            output.profile_changes.clear();
        }
        output.typed_profile_changes.retain(|(t, _)| wanted(t));
        let mut kept: Vec<ExtractedEvent> = Vec::with_capacity(output.events.len());
        for mut e in std::mem::take(&mut output.events) {
            if !wanted(&e.memory_type) {
                continue;
            }
            // 1. Valid against the collection's schema, or dropped (never stored half-formed).
            let Some(def) = schema.event_type(&e.memory_type) else {
                tracing::warn!(memory_type = %e.memory_type, "extraction: dropped an event of an unknown type");
                continue;
            };
            if let Err(err) = validate_memory_info(def, &e.memory_info, "memory_info", true) {
                tracing::warn!(error = %err, "extraction: dropped an invalid event");
                continue;
            }
            // 2. Relative dates resolved against the time of the message the event came from.
            let anchor_ms = claimed
                .messages
                .iter()
                .filter(|m| e.source_message_ids.contains(&m.message_id))
                .map(|m| m.time)
                .min()
                .unwrap_or(first_time);
            let anchor = dates::local(anchor_ms, self.config.extraction.utc_offset);
            let (mut event_date, mut start) = (None, None);
            for (k, v) in e.memory_info.iter_mut() {
                if k == "original_messages" {
                    continue;
                }
                if let Value::String(s) = v {
                    let a = dates::anchor_text(s, anchor);
                    start = start.into_iter().chain(a.start).min();
                    event_date = event_date.or(a.event_date);
                    *s = a.text;
                }
            }
            let at = |d, h| dates::at_hour(d, h, self.config.extraction.utc_offset);
            // The event's time: the past day its text names ("yesterday", "on 3 May"), else its
            // message's — never later (VikingDB's `time` is when the memory was made): a plan
            // ("tomorrow I will…") is remembered from when it was said, its day in the text.
            e.time = event_date.and_then(|d| at(d, 12)).unwrap_or(anchor_ms);
            // 2b. When what it tells became true, if the conversation says ("since 2013").
            e.valid_from = start.and_then(|d| at(d, 0)).filter(|from| *from < e.time);
            // 3. Corrections only of the user's own earlier events that the extractor was shown.
            if let Some(old) = &e.supersedes
                && !related.iter().any(|r| &r.id == old)
            {
                tracing::warn!(supersedes = %old, "extraction: ignored a correction of an event it was not shown");
                e.supersedes = None;
            }
            // 4. In a group chat, the event is each speaker's whose message it came from.
            if !claimed.meta.speakers.is_empty() {
                let mut owners: Vec<String> = Vec::new();
                for m in claimed.messages.iter().filter(|m| e.source_message_ids.contains(&m.message_id)) {
                    if m.role != Role::User {
                        continue;
                    }
                    let who =
                        m.name.as_ref().and_then(|n| claimed.meta.speakers.get(n)).or(claimed.meta.user_id.as_ref());
                    if let Some(w) = who.filter(|w| !owners.contains(w)) {
                        owners.push(w.clone());
                    }
                }
                if !owners.is_empty() {
                    e.owners = Some(owners);
                }
            }
            let class = def.default_class.clone();
            e.expires_at = match claimed.meta.ttl {
                Some(EventTtl::Absolute(at)) => Some(at),
                Some(EventTtl::RelativeSecs(secs)) => Some(now + secs * 1000),
                None => self.default_expiry(schema, class.as_deref(), now),
            };
            e.class = class;
            kept.push(e);
        }
        // 5. Embedded before the store transaction: a failed embedding retries the job.
        if !kept.is_empty() {
            let texts: Vec<String> = kept.iter().map(|e| event_text(&e.memory_info)).collect();
            let vectors = self
                .embedder
                .embed(&texts, EmbedKind::Document)
                .await
                .map_err(|err| ExtractError::Transient(format!("embedding failed: {err}")))?;
            let turns = self
                .turn_vectors(kept.iter().map(|e| &e.memory_info))
                .await
                .map_err(|err| ExtractError::Transient(format!("embedding failed: {err}")))?;
            for ((e, v), t) in kept.iter_mut().zip(vectors).zip(turns) {
                e.embedding = Some(v);
                e.turn_vectors = t;
            }
        }
        output.events = kept;
        // Profile values hold from when the session said them, not from when the job ran.
        output.profile_time = claimed.messages.iter().map(|m| m.time).max();
        Ok(output)
    }

    async fn dedup(&self, claimed: &ClaimedJob, events: Vec<ExtractedEvent>) -> Vec<ExtractedEvent> {
        let threshold = self.config.extraction.dedup_similarity;
        let same = |a: &ExtractedEvent, b_text: &str, b_vec: Option<&[f32]>| {
            normalized(&event_text(&a.memory_info)) == normalized(b_text)
                || matches!((threshold, a.embedding.as_deref(), b_vec), (Some(t), Some(x), Some(y)) if dot(x, y) >= t)
        };
        let mut out: Vec<ExtractedEvent> = Vec::with_capacity(events.len());
        for e in events {
            if let Some(first) = out.iter_mut().find(|o| {
                o.memory_type == e.memory_type && same(&e, &event_text(&o.memory_info), o.embedding.as_deref())
            }) {
                let known: HashSet<i64> = first.source_message_ids.iter().copied().collect();
                first.source_message_ids.extend(e.source_message_ids.iter().filter(|i| !known.contains(i)));
                continue;
            }
            out.push(e);
        }
        let Some(user) = &claimed.meta.user_id else { return out };
        for e in out.iter_mut() {
            let filter = EventFilter {
                user_id: vec![user.clone()],
                memory_type: vec![e.memory_type.clone()],
                active_only: true,
                ..Default::default()
            };
            let text = event_text(&e.memory_info);
            // Vector nearest only: an exact duplicate is its own nearest neighbour (cosine 1).
            let query =
                CandidateQuery { vector: e.embedding.clone(), terms: vec![], k: 3, vector_hits: None, corpus: None };
            let Ok(cands) = self.store.search_candidates(claimed.collection.id, filter, query).await else {
                continue;
            };
            let twin = cands
                .into_iter()
                .filter(|c| Some(&c.event.id) != e.supersedes.as_ref())
                .filter(|c| {
                    normalized(&c.event.text()) == normalized(&text)
                        || matches!((threshold, c.cosine), (Some(t), Some(cos)) if cos >= t)
                })
                .max_by(|a, b| a.cosine.unwrap_or(1.0).total_cmp(&b.cosine.unwrap_or(1.0)));
            if let Some(twin) = twin {
                e.merge_into = Some(twin.event.id);
            }
        }
        out
    }
}

use crate::extract::normalized_text as normalized;
