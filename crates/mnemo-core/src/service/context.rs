//! `get_context`: gathers profile, short-term turns and events, and assembles them under the budget.

use super::*;
use crate::context::{Assembled, Locale};
use crate::error::{CoreError, CoreResult};
use crate::ranking::{Scores, TimeDecay};
use crate::store::known_vector;
use futures_util::FutureExt;

pub const MAX_TOKENS_RANGE: (u32, u32) = (1, 200_000);

/// Which parts `get_context` includes (all by default).
#[derive(Clone, Copy, Debug)]
pub struct Include {
    pub profile: bool,
    pub short_term: bool,
    pub intra_events: bool,
    pub cross_events: bool,
    /// A conversation with no turns yet opens with the user's latest daily digest.
    pub recap: bool,
}

impl Default for Include {
    fn default() -> Self {
        Self { profile: true, short_term: true, intra_events: true, cross_events: true, recap: true }
    }
}

/// At most this many events per `get_context` section are ranked and offered to the budget.
pub const MAX_CONTEXT_EVENTS: u32 = 200;

#[derive(Clone, Debug)]
pub struct ContextRequest {
    pub target: Target,
    pub conversation_id: String,
    pub query: Option<String>,
    pub event_filter: EventFilter,
    pub event_limit: u32,
    pub decay: TimeDecay,
    pub similarity_threshold: Option<f64>,
    pub profile_filter: ProfileFilter,
    pub profile_limit: u32,
    pub max_tokens: u32,
    pub include: Include,
    /// `None`: follow the conversation's language.
    pub locale: Option<Locale>,
}

impl ContextRequest {
    /// A request for a conversation's context with the server's retrieval defaults (`defaults`:
    /// the service's `config().retrieval`) — what every front end starts from before applying
    /// what its caller asked: the events' limit, decay and threshold, one profile, the budget,
    /// every section, the conversation's own language.
    pub fn new(target: Target, conversation_id: String, defaults: &RetrievalConfig) -> Self {
        Self {
            target,
            conversation_id,
            query: None,
            event_filter: EventFilter::default(),
            event_limit: defaults.top_k,
            decay: defaults.time_decay,
            similarity_threshold: defaults.similarity_threshold,
            profile_filter: ProfileFilter::default(),
            profile_limit: 1,
            max_tokens: defaults.max_tokens,
            include: Include::default(),
            locale: None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct ContextResult {
    pub assembled: Assembled,
    pub locale: Locale,
    /// Why the event searches ran on full text alone (the query could not be embedded), if so.
    pub full_text_only: Option<String>,
}

impl Service {
    pub async fn get_context(&self, req: ContextRequest) -> CoreResult<ContextResult> {
        let req = checked(req)?;
        let c = self.collection_for_read(&req.target).await?;
        let search = |filter: EventFilter, limit: u32| EventSearch {
            target: req.target.clone(),
            query: req.query.clone(),
            filter,
            limit,
            decay: req.decay,
            custom_weight: 0.0,
            similarity_threshold: req.similarity_threshold,
            freshness_days: None,
            include_archived: false,
            entity: None,
        };
        // The query is embedded once, for both searches — while the conversation is looked up
        // when the request names whose memories to search (else only once a search is sure), and
        // then the other conversations' search reads its scope meanwhile.
        let query = req.query.as_deref().map(str::trim).filter(|q| !q.is_empty());
        let named = !req.event_filter.user_id.is_empty() || !req.event_filter.assistant_id.is_empty();
        // Ask for more than the limit: this conversation's own events are removed after.
        let cross_limit = req.event_limit + 10;
        // Computed once, awaited by every search that starts before it is known.
        let degraded = std::sync::OnceLock::new();
        let named_qv = query.filter(|_| named).map(|q| self.query_vector(q, &degraded).boxed().shared());
        let early = async {
            match &named_qv {
                Some(qv) if req.include.cross_events => {
                    let (found, qv) = self
                        .search_with_vector(&c, &search(req.event_filter.clone(), cross_limit), Box::pin(qv.clone()))
                        .await?;
                    Ok::<_, CoreError>((Some(found), Some(qv)))
                }
                Some(qv) if req.include.intra_events => Ok((None, Some(qv.clone().await))),
                _ => Ok((None, None)),
            }
        };
        // A store whose reads overlap (a database across a socket) searches this conversation's
        // events as soon as its lookup finds it, beside the other conversations' search, when
        // the request names whose memories (the filter is then known before the lookup). The
        // embedded store searches them after (`StoreEngine::reads_overlap`).
        let overlap = self.store.reads_overlap() && req.include.intra_events;
        // This conversation's events: `base` narrowed to it.
        let intra_search = |base: &EventFilter| {
            let mut f = base.clone();
            f.conversation_id = vec![req.conversation_id.clone()];
            search(f, req.event_limit)
        };
        let conversation = async {
            let conv = self.store.conversation_info(c.id, &req.conversation_id).await;
            let intra = match (&conv, &named_qv) {
                (Ok(Some(_)), Some(qv)) if overlap => {
                    let found =
                        self.search_with_vector(&c, &intra_search(&req.event_filter), Box::pin(qv.clone())).await;
                    Some(found.map(|(found, _)| found))
                }
                _ => None,
            };
            (conv, intra)
        };
        // Whose profiles: the profile filter's users, else the memories' (`users`). Read beside
        // the search when the request names them; else once the conversation's metadata has.
        let profile_filter = |users: &[String]| {
            let mut p = req.profile_filter.clone();
            if p.user_id.is_empty() {
                p.user_id = users.to_vec();
            }
            p
        };
        let read_profiles = |p: ProfileFilter| async move {
            match req.include.profile && !p.user_id.is_empty() {
                true => self.store.list_profiles(c.id, p, req.profile_limit).await,
                false => Ok(Vec::new()),
            }
        };
        let profiles = async {
            match named || !req.profile_filter.user_id.is_empty() {
                true => read_profiles(profile_filter(&req.event_filter.user_id)).await.map(Some),
                false => Ok(None),
            }
        };
        let ((conv, intra_found), early, profiles) = tokio::join!(conversation, early, profiles);
        let (cross_found, early) = early?;
        let conv = conv?;
        let filter = whose_memories(&req.event_filter, conv.as_ref().map(|c| &c.meta));
        let known = !filter.user_id.is_empty() || !filter.assistant_id.is_empty();
        let searches = (req.include.intra_events && conv.is_some()) || (req.include.cross_events && known);
        let qv = match (early, query) {
            (Some(qv), _) => qv,
            (None, Some(q)) if searches => self.query_vector(q, &degraded).await,
            (None, _) => None,
        };
        let profiles = match profiles? {
            Some(profiles) => profiles,
            None => read_profiles(profile_filter(&filter.user_id)).await?,
        };
        let as_of = req.event_filter.as_of;
        let profiles = super::profiles::as_of_time(profiles, as_of);
        let mut cands = crate::context::Candidates { profiles, ..Default::default() };
        if req.include.short_term
            && let Some(conv) = &conv
        {
            cands.short_term = conv
                .short_term
                .iter()
                .filter(|m| matches!(m.role, Role::User | Role::Assistant) && as_of.is_none_or(|t| m.time <= t))
                .cloned()
                .collect();
        }
        let fresh = conv.as_ref().is_none_or(|c| c.short_term.is_empty() && c.sessions.is_empty());
        if req.include.recap && fresh && known {
            cands.recap = self.recap(&c, &filter).await?;
        }
        // Otherwise the look-ups run one after another: asked at once they measured slower on
        // SQLite (each read connection keeps its own page cache; in turn they reuse the warm one).
        if req.include.intra_events && conv.is_some() {
            cands.intra_events = match intra_found {
                Some(found) => found?,
                None => self.search_with_vector(&c, &intra_search(&filter), known_vector(qv.clone())).await?.0,
            };
        }
        if req.include.cross_events && known && query.is_some() {
            let found = match cross_found {
                Some(found) => found,
                None => self.search_with_vector(&c, &search(filter.clone(), cross_limit), known_vector(qv)).await?.0,
            };
            cands.cross_events = found
                .into_iter()
                .filter(|e| e.event.conversation_id.as_deref() != Some(req.conversation_id.as_str()))
                .take(req.event_limit as usize)
                .collect();
        }
        let locale = req.locale.unwrap_or_else(|| locale_of(req.query.as_deref(), &cands));
        let focus = crate::excerpt::Focus {
            terms: query.map(crate::text::search_tokens).unwrap_or_default(),
            whole_share: self.config.retrieval.whole_share,
        };
        let assembled = crate::context::assemble(cands, locale, req.max_tokens as usize, &focus);
        let hit: Vec<ScoredEvent> =
            assembled.included.intra_events.iter().chain(&assembled.included.cross_events).cloned().collect();
        self.count_hits(&c, &hit);
        drop(named_qv);
        Ok(ContextResult { assembled, locale, full_text_only: degraded.into_inner() })
    }
}

impl Service {
    /// The newest daily digest of whose memories these are: what a conversation without turns
    /// starts from.
    async fn recap(&self, c: &Collection, filter: &EventFilter) -> CoreResult<Option<ScoredEvent>> {
        let f = EventFilter { memory_type: vec![DAILY_DIGEST.into()], active_only: true, ..filter.clone() };
        let scores = Scores { score: 1.0, origin_score: 1.0, time_score: 1.0, custom_weight_score: 0.0 };
        Ok(self.store.list_events(c.id, f, 1).await?.into_iter().next().map(|e| ScoredEvent::new(e, scores, None)))
    }
}

/// The request checked (conversation id, `max_tokens`, the query's length), its event limit cut
/// to what the budget can show: an event line, with its time and labels, is never under ~24
/// tokens, so ranking more candidates than that only costs time.
fn checked(mut req: ContextRequest) -> CoreResult<ContextRequest> {
    validate_conversation_id(&req.conversation_id)?;
    max_tokens(i64::from(req.max_tokens))?;
    validate_time_range(&req.event_filter)?;
    if let Some(q) = &req.query
        && q.chars().count() > MAX_QUERY_CHARS
    {
        return Err(CoreError::invalid("query", format!("must be at most {MAX_QUERY_CHARS} characters")));
    }
    req.event_limit = req.event_limit.min((req.max_tokens / 24).max(1)).min(MAX_CONTEXT_EVENTS);
    Ok(req)
}

/// `max_tokens` as asked (any integer a client sends) checked against [`MAX_TOKENS_RANGE`].
pub fn max_tokens(n: i64) -> CoreResult<u32> {
    let (lo, hi) = MAX_TOKENS_RANGE;
    match u32::try_from(n) {
        Ok(t) if (lo..=hi).contains(&t) => Ok(t),
        _ => Err(CoreError::invalid("max_tokens", format!("must be an integer in {lo}..={hi}, got {n}"))),
    }
}

/// Whose memories a context shows: the request's filter, else the conversation's user, else its
/// assistant.
fn whose_memories(requested: &EventFilter, meta: Option<&ConversationMeta>) -> EventFilter {
    let mut filter = requested.clone();
    if filter.user_id.is_empty()
        && filter.assistant_id.is_empty()
        && let Some(meta) = meta
    {
        filter.user_id.extend(meta.user_id.clone());
        if filter.user_id.is_empty() {
            filter.assistant_id.extend(meta.assistant_id.clone());
        }
    }
    filter
}

/// The language to write the context in: Chinese when the query, the last turns and the profiles
/// read as Chinese.
fn locale_of(query: Option<&str>, cands: &crate::context::Candidates) -> Locale {
    let mut sample = query.unwrap_or_default().to_string();
    for m in cands.short_term.iter().rev().take(4) {
        sample.push_str(&m.content);
    }
    for p in &cands.profiles {
        sample.push_str(&p.content);
        sample.push_str(&crate::profile::describe(&p.attributes));
    }
    if crate::text::looks_chinese(&sample) { Locale::Zh } else { Locale::En }
}
