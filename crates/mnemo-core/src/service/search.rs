//! `event/search`: hybrid ranking over the store's raw signals, the global-layer fallback, and the
//! hit buffer.

use super::*;
use crate::embed::EmbedKind;
use crate::error::{CoreError, CoreResult};
use crate::ranking::{self, Scores, TimeDecay};

/// Retrieval settings (README "Scoring"): out of the box nothing hides a memory silently — no threshold,
/// no freshness window, no decay unless configured or asked for per request.
#[derive(Clone, Debug)]
pub struct RetrievalConfig {
    /// Events per context section (`event_search_config.limit` default).
    pub top_k: u32,
    pub similarity_threshold: Option<f64>,
    pub freshness_days: Option<f64>,
    pub time_decay: TimeDecay,
    pub max_tokens: u32,
    /// A second hop: terms shared by the first hits join the query (0 = off).
    pub feedback_terms: usize,
    /// An event's BM25 score counts this share of the BM25 score of the candidate from the adjacent
    /// turns of the same conversation (provenance), so an answer is found through the words of the
    /// question it replies to (0 = off).
    pub neighbour_weight: f64,
    /// A question naming a time ("on May 23, 2023", "last week", 上周三) lifts the events dated
    /// then, or whose text writes out a day then, by this share of their relevance (0 = off).
    pub date_weight: f64,
    /// A question naming someone ("What does Ingrid do?") lifts the events that name them by a
    /// role the candidates tie to that name ("my sister Ingrid" → "my sister is a vet") by this
    /// share of their relevance, and its second hop looks for the role too
    /// (`crate::entities::Aliases`; 0 = off).
    pub entity_weight: f64,
    /// get_context shows events whole until they fill this share of its budget; past it, an
    /// event of several turns is shown as its turn that matches the query (crate::excerpt;
    /// 1 = always whole).
    pub whole_share: f64,
    /// Each of the first this many results that ends by asking brings the event that answers it
    /// (the next of its thread) right after it (0 = off).
    pub reply_hits: usize,
    /// An event made of several turns is matched by `(1 − w) ·` its vector's cosine `+ w ·` its
    /// best turn's (crate::turns); when above 0, events with turns are stored with their turns'
    /// vectors too (0 = off: none are embedded).
    pub turn_weight: f32,
}

/// The defaults a server runs with — declared here once: the binary's `retrieval` config section
/// starts from them and core's tests rank with them (figures: docs/history/benchmarks.md).
impl Default for RetrievalConfig {
    fn default() -> Self {
        Self {
            top_k: 5,
            similarity_threshold: None,
            freshness_days: None,
            time_decay: TimeDecay::NONE,
            max_tokens: 1200,
            feedback_terms: 16,
            neighbour_weight: 0.3,
            date_weight: 0.3,
            entity_weight: 0.3,
            whole_share: 0.5,
            reply_hits: 3,
            turn_weight: 0.5,
        }
    }
}

pub const MAX_QUERY_CHARS: usize = 4000;

pub const GLOBAL_SCOPE: &str = "global";

#[derive(Clone, Debug)]
pub struct EventSearch {
    pub target: Target,
    pub query: Option<String>,
    pub filter: EventFilter,
    pub limit: u32,
    pub decay: TimeDecay,
    pub custom_weight: f64,
    /// Overrides the configured threshold (`origin_score` below it is left out).
    pub similarity_threshold: Option<f64>,
    pub freshness_days: Option<f64>,
    /// Also search archived events.
    pub include_archived: bool,
    /// Only the events naming this entity of the (one) filtered user: its id, name or alias.
    pub entity: Option<String>,
}

impl EventSearch {
    /// A plain search: no decay, custom weight, threshold or freshness window; active events only.
    pub fn new(target: Target, query: Option<String>, filter: EventFilter, limit: u32) -> Self {
        Self {
            target,
            query,
            filter,
            limit,
            decay: TimeDecay::NONE,
            custom_weight: 0.0,
            similarity_threshold: None,
            freshness_days: None,
            include_archived: false,
            entity: None,
        }
    }
}

/// What a search found, and — when its query could not be embedded (the embedder's queue was
/// full, or it failed) and it ran on full text alone — why.
#[derive(Clone, Debug, Default)]
pub struct SearchAnswer {
    pub results: Vec<ScoredEvent>,
    pub full_text_only: Option<String>,
}

impl Service {
    /// `event/search`: with a query, ranked by relevance, time and custom weight; without one,
    /// the newest first (scores still reported).
    pub async fn search_events(&self, req: EventSearch) -> CoreResult<Vec<ScoredEvent>> {
        Ok(self.search(req).await?.results)
    }

    /// [`Self::search_events`], saying whether the query's semantic half ran.
    pub async fn search(&self, mut req: EventSearch) -> CoreResult<SearchAnswer> {
        if req.filter.user_id.is_empty() && req.filter.assistant_id.is_empty() {
            return Err(CoreError::invalid(
                "filter.user_id",
                "at least one of filter.user_id and filter.assistant_id is required",
            ));
        }
        if let Some(q) = &req.query {
            let n = q.chars().count();
            if n > MAX_QUERY_CHARS {
                return Err(CoreError::invalid(
                    "query",
                    format!("must be at most {MAX_QUERY_CHARS} characters, got {n}"),
                ));
            }
        }
        validate_time_range(&req.filter)?;
        if let Some(t) = req.similarity_threshold
            && !(0.0..=1.0).contains(&t)
        {
            return Err(CoreError::invalid("similarity_threshold", format!("must be in [0,1], got {t}")));
        }
        if let Some(d) = req.freshness_days
            && !(0.0..=100_000.0).contains(&d)
        {
            return Err(CoreError::invalid(
                "freshness_days",
                format!("must be a number of days in [0,100000], got {d}"),
            ));
        }
        let c = self.collection_for_read(&req.target).await?;
        if let Some(entity) = req.entity.take() {
            let [user] = req.filter.user_id.as_slice() else {
                return Err(CoreError::invalid(
                    "filter.entity",
                    "needs exactly one filter.user_id (entities are a user's)",
                ));
            };
            let found = self.entity_named(&c, user, &entity).await?;
            if found.event_ids.is_empty() {
                return Ok(SearchAnswer::default());
            }
            req.filter.event_ids = found.event_ids;
        }
        let degraded = std::sync::OnceLock::new();
        let results = self.search_in(&c, &req, &degraded).await?;
        // A hit is a recall: a query search or a context. Listing (no query) is browsing — it
        // must not keep memories alive against expiry and archiving.
        if req.query.as_deref().is_some_and(|q| !q.trim().is_empty()) {
            self.count_hits(&c, &results);
        }
        Ok(SearchAnswer { results, full_text_only: degraded.into_inner() })
    }

    /// Queues hits for the returned events; the hits loop writes them in batches, so a search
    /// never waits for a write.
    pub(super) fn count_hits(&self, c: &Collection, results: &[ScoredEvent]) {
        if results.is_empty() {
            return;
        }
        let now = self.now();
        let mut pending = self.pending_hits.lock().expect("hit buffer");
        pending.push((c.id, results.iter().map(|r| r.event.id.clone()).collect(), now));
    }

    /// Writes the queued hits. Returns how many events were counted.
    pub async fn flush_hits(&self) -> CoreResult<usize> {
        let batch = std::mem::take(&mut *self.pending_hits.lock().expect("hit buffer"));
        let mut n = 0;
        for (cid, ids, at) in batch {
            n += ids.len();
            self.store.record_hits(cid, ids, at).await?;
        }
        Ok(n)
    }

    /// Search within one collection, with the layered scope fallback (seed 002 §6.1). A query
    /// that could not be embedded leaves the reason in `degraded`.
    pub(super) async fn search_in(
        &self,
        c: &Collection,
        req: &EventSearch,
        degraded: &std::sync::OnceLock<String>,
    ) -> CoreResult<Vec<ScoredEvent>> {
        let qv = match req.query.as_deref().map(str::trim).filter(|q| !q.is_empty()) {
            // Embedded while the store reads the scope (the future runs when the store polls it).
            Some(q) => Box::pin(self.query_vector(q, degraded)),
            None => crate::store::known_vector(None),
        };
        Ok(self.search_with_vector(c, req, qv).await?.0)
    }

    /// The query's vector (a repeated query's from [`Service::query_cache`]); `None` when the
    /// embedder fails, and the search degrades to full text instead of failing — the reason goes into `degraded` (the answer says so) and the count
    /// into [`Service::full_text_searches`].
    pub(super) async fn query_vector(&self, query: &str, degraded: &std::sync::OnceLock<String>) -> Option<Vec<f32>> {
        let model = self.embedder.model_id();
        if let Some(v) = self.query_cache.get(model, query) {
            return Some(v);
        }
        match self.embed_one(query, EmbedKind::Query).await {
            Ok(v) => {
                self.query_cache.put(model, query, &v);
                Some(v)
            }
            Err(e) => {
                let _ = degraded.set(e.to_string());
                self.full_text_searches.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                // Expected under overload (the embedder's query queue is full) as well as in an
                // outage: say so at most every 10 s, not once per search.
                static LAST_WARN: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(i64::MIN);
                let (now, last) = (self.now(), LAST_WARN.load(std::sync::atomic::Ordering::Relaxed));
                if now.saturating_sub(last) >= 10_000 {
                    LAST_WARN.store(now, std::sync::atomic::Ordering::Relaxed);
                    tracing::warn!(error = %e, "query embedding failed; searching full text only (repeats muted for 10 s)");
                } else {
                    tracing::debug!(error = %e, "query embedding failed; searching full text only");
                }
                None
            }
        }
    }

    /// [`Self::search_in`] with the query's vector computed or being computed; returns the
    /// vector too (`None`: full text only).
    pub(super) async fn search_with_vector(
        &self,
        c: &Collection,
        req: &EventSearch,
        qv: crate::store::PendingVector<'_>,
    ) -> CoreResult<(Vec<ScoredEvent>, Option<Vec<f32>>)> {
        // As of a time, the search is asked then: decay, freshness and "last week" count from it.
        let now = req.filter.as_of.unwrap_or_else(|| self.now());
        let filter = self.search_scope(req, now);
        let Some(query) = req.query.as_deref().map(str::trim).filter(|q| !q.is_empty()) else {
            return Ok((self.listing(c, req, filter, now).await?, None));
        };
        let ranker = self.ranker(c, req, query, now);
        let k = (req.limit as usize * 3).max(50);
        let mut cq = CandidateQuery {
            vector: None,
            terms: crate::text::search_tokens(query),
            k,
            vector_hits: None,
            corpus: None,
        };
        // Second hop: the query plus what its best hits share (same vector and filter), fused
        // with the first by rank.
        let n_feedback = self.config.retrieval.feedback_terms;
        let mut first_ranked = None;
        let then: crate::store::NextTerms<'_> = Box::new(|found| {
            let results = ranker.rank(found, None);
            let mut extra = (n_feedback > 0 && results.len() >= 2)
                .then(|| feedback_terms(&results, &cq.terms, n_feedback))
                .flatten();
            // What the query names goes by a role in the hits ("my sister Ingrid"): the second
            // hop also looks for the role ("my sister is a vet in Oslo").
            let roles = ranker.role_terms(found, &cq.terms);
            if !roles.is_empty() {
                let extra = extra.get_or_insert_with(Vec::new);
                for r in roles {
                    if !extra.contains(&r) {
                        extra.push(r);
                    }
                }
            }
            first_ranked = Some(results);
            let next = extra.map(|extra| crate::store::NextHop::terms(cq.terms.iter().cloned().chain(extra).collect()));
            Box::pin(std::future::ready(next))
        });
        let crate::store::TwoHops { vector, first, second } =
            self.store.search_candidates_then(c.id, filter.clone(), cq.clone(), qv, then).await?;
        cq.vector = vector;
        let mut results = first_ranked.unwrap_or_else(|| ranker.rank(&first, None));
        if let Some(second) = second {
            results = fuse_by_rank(results, ranker.rank(&second, None), req.limit as usize);
        }
        self.bring_replies(c, &filter, &ranker, &mut results).await?;
        self.fall_back_to_global(c, &filter, &cq, &ranker, &mut results).await?;
        Ok((results, cq.vector))
    }

    /// What a search looks in: the request's filter, active events unless archived ones are
    /// asked for, within the freshness window when there is one.
    fn search_scope(&self, req: &EventSearch, now: Millis) -> EventFilter {
        let mut filter = req.filter.clone();
        filter.active_only = !req.include_archived;
        if let Some(days) = req.freshness_days.or(self.config.retrieval.freshness_days) {
            let from = now - (days * ranking::DAY_MS) as i64;
            filter.start_time = Some(filter.start_time.map_or(from, |s| s.max(from)));
        }
        filter
    }

    /// Without a query: the newest events of the filter, scored by time and weight alone.
    async fn listing(
        &self,
        c: &Collection,
        req: &EventSearch,
        filter: EventFilter,
        now: Millis,
    ) -> CoreResult<Vec<ScoredEvent>> {
        let events = self.store.list_events(c.id, filter, req.limit).await?;
        Ok(events
            .into_iter()
            .map(|e| {
                let scores = ranking::score(1.0, &e, &c.schema, now, &req.decay, req.custom_weight);
                let layer = e.scope.clone();
                ScoredEvent::new(e, scores, layer)
            })
            .collect())
    }

    /// How this search scores its candidates.
    fn ranker<'a>(&self, c: &'a Collection, req: &'a EventSearch, query: &str, now: Millis) -> Ranker<'a> {
        let r = &self.config.retrieval;
        // A question that names a time ("on May 23, 2023", "last week", 上周三) lifts the events of
        // that time by `date_weight` of their relevance (ranking only, as the neighbours' words).
        let spans = if r.date_weight > 0.0 {
            crate::dates::spans(query, crate::dates::local(now, self.config.extraction.utc_offset))
        } else {
            Vec::new()
        };
        Ranker {
            c,
            req,
            now,
            offset: self.embedder.query_offset(query),
            fusion: self.embedder.fusion(),
            threshold: req.similarity_threshold.or(r.similarity_threshold).unwrap_or(0.0),
            neighbour_weight: r.neighbour_weight,
            date_weight: r.date_weight,
            spans,
            entity_weight: r.entity_weight,
            entity_names: match r.entity_weight > 0.0 {
                true => crate::entities::Question::of(query, &[]).names,
                false => Vec::new(),
            },
            aliases: Default::default(),
            tz: self.config.extraction.utc_offset,
            turn_weight: r.turn_weight,
        }
    }

    /// Each of the first `retrieval.reply_hits` results whose last turn asks brings the event
    /// that answers it right after it (scored with the question's relevance).
    async fn bring_replies(
        &self,
        c: &Collection,
        filter: &EventFilter,
        ranker: &Ranker<'_>,
        results: &mut Vec<ScoredEvent>,
    ) -> CoreResult<()> {
        let reply_hits = self.config.retrieval.reply_hits.min(results.len());
        if reply_hits == 0 {
            return Ok(());
        }
        let replies = self.replies(c.id, filter, &results[..reply_hits]).await?;
        for (at, reply) in replies.into_iter().enumerate().rev() {
            let Some(reply) = reply else { continue };
            let origin = results[at].scores.origin_score;
            if origin < ranker.threshold {
                continue;
            }
            let req = ranker.req;
            let mut scores = ranking::score(origin, &reply, &c.schema, ranker.now, &req.decay, req.custom_weight);
            scores.origin_score = origin;
            match results.iter().position(|r| r.event.id == reply.id) {
                Some(i) if i <= at => continue,
                Some(i) => {
                    results.remove(i);
                }
                None => {}
            }
            let layer = reply.scope.clone();
            results.insert(at + 1, ScoredEvent::new(reply, scores, layer));
        }
        results.truncate(ranker.req.limit as usize);
        Ok(())
    }

    /// Layers: a search in a scope other than global falls back to global when it is short.
    async fn fall_back_to_global(
        &self,
        c: &Collection,
        filter: &EventFilter,
        cq: &CandidateQuery,
        ranker: &Ranker<'_>,
        results: &mut Vec<ScoredEvent>,
    ) -> CoreResult<()> {
        let limit = ranker.req.limit as usize;
        let scoped = !filter.scope.is_empty() && !filter.scope.iter().any(|s| s == GLOBAL_SCOPE);
        if !scoped || results.len() >= limit {
            return Ok(());
        }
        let mut global = filter.clone();
        global.scope = vec![GLOBAL_SCOPE.to_string()];
        for r in ranker.rank(&self.store.search_candidates(c.id, global, cq.clone()).await?, Some(GLOBAL_SCOPE)) {
            if results.len() >= limit {
                break;
            }
            if !results.iter().any(|x| x.event.id == r.event.id) {
                results.push(r);
            }
        }
        Ok(())
    }
}

/// How far after a turn that asks its reply is looked for.
const REPLY_WITHIN_MS: Millis = 86_400_000;
/// An extracted question's thread read at most to find the event citing the next message; more
/// within [`REPLY_WITHIN_MS`] either side and the reply is not guessed (a session closed by the
/// trigger holds a few events).
const REPLY_SCAN: u32 = 32;

impl Service {
    /// Per hit, the event that answers it when the hit ends by asking ("Which team did you sign
    /// with?" — "The Minnesota Wolves!"): the next event of its thread (session, else
    /// conversation) within the search's filter — by provenance when the hit has it (the event
    /// citing the message right after its last), else the next by time (within a day).
    async fn replies(
        &self,
        cid: CollectionId,
        filter: &EventFilter,
        hits: &[ScoredEvent],
    ) -> CoreResult<Vec<Option<Event>>> {
        futures_util::future::try_join_all(hits.iter().map(|hit| self.reply_to(cid, filter, &hit.event))).await
    }

    async fn reply_to(&self, cid: CollectionId, filter: &EventFilter, e: &Event) -> CoreResult<Option<Event>> {
        if !ends_asking(e) {
            return Ok(None);
        }
        let mut thread = filter.clone();
        match (&e.session_id, &e.conversation_id) {
            (Some(s), _) => thread.session_id = vec![s.clone()],
            (None, Some(conv)) => thread.conversation_id = vec![conv.clone()],
            (None, None) => return Ok(None),
        }
        let to = e.time.saturating_add(REPLY_WITHIN_MS);
        thread.end_time = Some(thread.end_time.map_or(to, |t| t.min(to)));
        let Some(last) = e.source_message_ids.iter().max().copied() else {
            // The next turn written as an event: one indexed read of the thread, however long.
            let next = self.store.event_after(cid, thread, e.time, &e.id).await?;
            return Ok(next.filter(|r| r.source_message_ids.is_empty()));
        };
        // A merged event takes the later time of the two: by provenance, look either side.
        let from = e.time.saturating_sub(REPLY_WITHIN_MS);
        thread.start_time = Some(thread.start_time.map_or(from, |t| t.max(from)));
        let events = self.store.list_events(cid, thread, REPLY_SCAN).await?;
        if events.len() as u32 >= REPLY_SCAN {
            return Ok(None);
        }
        Ok(events.into_iter().find(|r| r.source_message_ids.iter().min() == Some(&(last + 1))))
    }
}

/// Whether an event's last turn ends by asking (its last line of `original_messages`, else its
/// text).
fn ends_asking(e: &Event) -> bool {
    let turns = match e.memory_info.get("original_messages") {
        Some(serde_json::Value::String(raw)) => crate::model::original_message_turns(raw),
        _ => None,
    };
    match turns.as_deref().and_then(<[_]>::last) {
        Some((_, _, content)) => crate::text::asks(content),
        None => crate::text::asks(&crate::model::event_text(&e.memory_info)),
    }
}

/// Terms that at least two of the first three hits share and the query lacks, most shared first.
fn feedback_terms(hits: &[ScoredEvent], query: &[String], n: usize) -> Option<Vec<String>> {
    let mut df: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for h in hits.iter().take(3) {
        // The distinct terms, as search_tokens gives them (an English text without the segmenter).
        for t in crate::text::term_set(&event_search_text(&h.event.memory_info)) {
            if t.chars().count() >= 3 && !query.contains(&t) {
                *df.entry(t).or_default() += 1;
            }
        }
    }
    let mut shared: Vec<(String, usize)> = df.into_iter().filter(|(_, d)| *d >= 2).collect();
    shared.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    shared.truncate(n);
    (!shared.is_empty()).then(|| shared.into_iter().map(|(t, _)| t).collect())
}

/// Reciprocal-rank fusion of two rankings of the same search (k = 60).
fn fuse_by_rank(first: Vec<ScoredEvent>, second: Vec<ScoredEvent>, limit: usize) -> Vec<ScoredEvent> {
    let mut fused: Vec<(f64, ScoredEvent)> = Vec::with_capacity(first.len() + second.len());
    let rank_in = |list: &[ScoredEvent], id: &str| list.iter().position(|r| r.event.id == id);
    for (i, r) in first.iter().enumerate() {
        let s = 1.0 / (60.0 + i as f64) + rank_in(&second, &r.event.id).map_or(0.0, |j| 1.0 / (60.0 + j as f64));
        fused.push((s, r.clone()));
    }
    for (j, r) in second.into_iter().enumerate() {
        if rank_in(&first, &r.event.id).is_none() {
            fused.push((1.0 / (60.0 + j as f64), r));
        }
    }
    fused.sort_by(|a, b| b.0.total_cmp(&a.0));
    fused.into_iter().take(limit).map(|(_, r)| r).collect()
}

mod rank;
use rank::Ranker;

#[cfg(test)]
mod tests {
    use super::*;
    use rank::neighbour_boosts;

    fn hit(id: &str, summary: &str) -> ScoredEvent {
        let mut memory_info = serde_json::Map::new();
        memory_info.insert("summary".into(), serde_json::Value::String(summary.into()));
        ScoredEvent::new(Event { id: id.into(), memory_info, ..Default::default() }, Scores::default(), None)
    }

    #[test]
    fn feedback_terms_are_what_the_first_hits_share_beyond_the_query() {
        let hits = [
            hit("a", "Melanie took her kids camping at the lake"),
            hit("b", "The kids loved the camping trip"),
            hit("c", "Melanie painted a lake at sunset"),
            hit("d", "Unrelated: camping camping camping"),
        ];
        let query = crate::text::search_tokens("Where did Melanie go camping?");
        let terms = feedback_terms(&hits, &query, 5).expect("shared terms");
        // "camping" and "melanie" are in the query; "kids" and "lake" are shared by two of the
        // first three hits; the fourth hit is not read.
        assert_eq!(terms, vec!["kid".to_string(), "lake".to_string()], "stemmed like the index");
        assert!(feedback_terms(&hits[..1], &query, 5).is_none(), "one hit shares nothing");
    }

    fn in_session(id: &str, session: &str, messages: &[i64], score: f64) -> ScoredEvent {
        let mut h = hit(id, "");
        h.event.session_id = Some(session.into());
        h.event.source_message_ids = messages.to_vec();
        h.scores.score = score;
        h
    }

    #[test]
    fn an_event_borrows_the_adjacent_turns_words_within_its_conversation_only() {
        let cand = |h: ScoredEvent, cosine: f32, bm25: Option<f64>| Candidate {
            event: h.event,
            cosine: Some(cosine),
            bm25,
            best_turn: None,
        };
        let cands: Vec<Candidate> = vec![
            cand(in_session("question", "s1", &[10, 11], 0.0), 0.5, Some(12.0)),
            cand(in_session("answer", "s1", &[12, 13], 0.0), 0.3, Some(1.0)),
            cand(in_session("later", "s1", &[20], 0.0), 0.2, Some(8.0)),
            cand(in_session("elsewhere", "s2", &[14], 0.0), 0.2, None),
        ];
        let fusion = ranking::Fusion::LEXICAL_LED;
        let origins: Vec<f64> = cands.iter().map(|c| fusion.fuse(c.cosine, c.bm25)).collect();
        let cosines: Vec<Option<f32>> = cands.iter().map(|c| c.cosine).collect();
        let b = neighbour_boosts(&cands, &cosines, &origins, 0.0, &fusion, 0.5);
        // The answer is scored with 1 + 0.5 × 12 of BM25; the question with 12 + 0.5 × 1.
        let answer = fusion.fuse(Some(0.3), Some(7.0)) - origins[1];
        let question = fusion.fuse(Some(0.5), Some(12.5)) - origins[0];
        assert!((b[1] - answer).abs() < 1e-9 && answer > 0.2, "{b:?}");
        assert!((b[0] - question).abs() < 1e-9 && question < 0.02, "{b:?}");
        assert_eq!((b[2], b[3]), (0.0, 0.0), "not adjacent, or another session");
        assert_eq!(neighbour_boosts(&cands, &cosines, &origins, 0.0, &fusion, 0.0), vec![0.0; 4]);
        // One conversation closed into two sessions: its turns are still adjacent across them.
        let mut split = cands.clone();
        for (c, session) in split.iter_mut().zip(["s1", "s2", "s1", "s9"]) {
            c.event.session_id = Some(session.into());
            c.event.conversation_id = Some(if session == "s9" { "other" } else { "conv" }.into());
        }
        let b = neighbour_boosts(&split, &cosines, &origins, 0.0, &fusion, 0.5);
        assert!((b[1] - answer).abs() < 1e-9 && b[3] == 0.0, "{b:?}");
    }

    #[test]
    fn rank_fusion_favours_what_both_hops_find_and_keeps_the_limit() {
        let first = vec![hit("a", ""), hit("b", ""), hit("c", "")];
        let second = vec![hit("c", ""), hit("d", ""), hit("a", "")];
        let ids: Vec<String> = fuse_by_rank(first, second, 3).into_iter().map(|r| r.event.id).collect();
        assert_eq!(ids, vec!["a", "c", "b"]);
    }
}
