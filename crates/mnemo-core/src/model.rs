//! Domain records. These are not the wire format: front ends convert to and from their own DTOs.
//! Times are milliseconds since the Unix epoch; ids are opaque strings with a kind prefix.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

mod schema;
mod webhook;
pub use schema::*;
pub use webhook::*;

pub type Millis = i64;
pub type CollectionId = i64;

pub const DEFAULT_PROJECT: &str = "default";
pub const EVENT_V1: &str = "event_v1";
pub const PROFILE_V1: &str = "profile_v1";
/// System memory type of the per-user daily digest written by maintenance.
pub const DAILY_DIGEST: &str = "daily_digest";

/// A new id: a prefix and a time-ordered UUIDv7, e.g. `evt_0193…`.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
    System,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::System => "system",
            Role::Tool => "tool",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "system" => Role::System,
            "tool" => Role::Tool,
            _ => return None,
        })
    }
}

/// A message as accepted from a client, already validated and token-counted.
#[derive(Clone, Debug)]
pub struct NewMessage {
    pub role: Role,
    pub content: String,
    pub name: Option<String>,
    pub time: Millis,
    pub tokens: u64,
    pub idempotency_key: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StoredMessage {
    pub message_id: i64,
    pub conversation_id: String,
    pub session_id: Option<String>,
    pub role: Role,
    pub name: Option<String>,
    pub content: String,
    pub time: Millis,
    pub tokens: u64,
}

/// Who a conversation is about: the well-known keys of `metadata`, plus the free ones.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ConversationMeta {
    pub user_id: Option<String>,
    pub assistant_id: Option<String>,
    pub group_id: Option<String>,
    pub scope: Option<String>,
    /// Every key the client sent (including the well-known ones).
    pub extra: Map<String, Value>,
    /// Only these event and profile types are extracted (VikingDB's `extract_memory_type`);
    /// empty: every type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extract_types: Vec<String>,
    /// When the extracted events expire (VikingDB's `ttl_absolute` / `ttl_relative`); `None`:
    /// the collection's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<EventTtl>,
    /// A group chat's other speakers: a user message's `name` → the user id it speaks for
    /// (VikingDB's `role_name` / `role_id`); events from their messages are theirs too.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub speakers: std::collections::BTreeMap<String, String>,
}

/// An expiry given with the messages, for the events extracted from them.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum EventTtl {
    /// At this time (ms since the epoch).
    Absolute(Millis),
    /// This many seconds after extraction.
    RelativeSecs(i64),
}

impl ConversationMeta {
    /// Later writes win key by key; absent keys keep their old value.
    pub fn merge(&mut self, newer: &ConversationMeta) {
        for (k, v) in &newer.extra {
            self.extra.insert(k.clone(), v.clone());
        }
        if newer.user_id.is_some() {
            self.user_id.clone_from(&newer.user_id);
        }
        if newer.assistant_id.is_some() {
            self.assistant_id.clone_from(&newer.assistant_id);
        }
        if newer.group_id.is_some() {
            self.group_id.clone_from(&newer.group_id);
        }
        if newer.scope.is_some() {
            self.scope.clone_from(&newer.scope);
        }
        if !newer.extract_types.is_empty() {
            self.extract_types.clone_from(&newer.extract_types);
        }
        if newer.ttl.is_some() {
            self.ttl = newer.ttl;
        }
        self.speakers.extend(newer.speakers.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
}

// ---------------------------------------------------------------------------------------------
// Write path

#[derive(Clone, Debug)]
pub struct AppendRequest {
    pub collection_id: CollectionId,
    pub conversation_id: String,
    pub meta: ConversationMeta,
    pub messages: Vec<NewMessage>,
    pub trigger: crate::ExtractTrigger,
    pub now: Millis,
    pub max_job_attempts: u32,
}

/// What one batch of messages added to a conversation: stored and duplicate counts, the tokens
/// stored, and the largest stored message (the trigger's inputs). Every store tallies alike.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MessageTally {
    pub stored: u64,
    pub duplicates: u64,
    pub tokens: u64,
    pub largest: u64,
}

impl MessageTally {
    /// Counts one message: stored (with its tokens), or a duplicate (a known idempotency key).
    pub fn add(&mut self, stored: bool, tokens: u64) {
        if stored {
            self.stored += 1;
            self.tokens += tokens;
            self.largest = self.largest.max(tokens);
        } else {
            self.duplicates += 1;
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct AppendOutcome {
    /// Messages stored by this call (retries with a known idempotency key are not stored again).
    pub accepted: u64,
    pub duplicates: u64,
    pub pending_messages: u64,
    pub pending_tokens: u64,
    pub closed: Option<SessionClosed>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SessionClosed {
    pub session_id: String,
    pub job_id: String,
    pub conversation_id: String,
    pub reason: crate::TriggerReason,
    pub message_count: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct SessionSummary {
    pub session_id: String,
    pub conversation_id: String,
    pub reason: String,
    pub state: String,
    pub message_count: u64,
    pub token_count: u64,
    pub user_id: Option<String>,
    pub assistant_id: Option<String>,
    pub created_at: Millis,
    pub extracted_at: Option<Millis>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ConversationInfo {
    pub conversation_id: String,
    pub meta: ConversationMeta,
    /// Pending (not yet extracted) messages, oldest first: the short-term memory.
    pub short_term: Vec<StoredMessage>,
    pub open_messages: u64,
    pub open_tokens: u64,
    /// When the conversation closes on its own if no message arrives.
    pub idle_deadline: Option<Millis>,
    pub sessions: Vec<SessionSummary>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SessionDetail {
    pub session: SessionSummary,
    pub messages: Vec<StoredMessage>,
    pub events: Vec<Event>,
    pub job: Option<Job>,
}

// ---------------------------------------------------------------------------------------------
// Jobs

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Queued,
    Running,
    Done,
    Failed,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "queued" => JobState::Queued,
            "running" => JobState::Running,
            "done" => JobState::Done,
            "failed" => JobState::Failed,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Job {
    pub job_id: String,
    pub kind: String,
    pub state: JobState,
    pub conversation_id: Option<String>,
    pub session_id: Option<String>,
    pub attempts: u32,
    pub max_attempts: u32,
    pub last_error: Option<String>,
    pub run_after: Millis,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub created_at: Millis,
    pub updated_at: Millis,
    /// When the latest attempt started (claimed by a worker).
    pub started_at: Option<Millis>,
    /// When the job ended (`done`, or `failed` for good); `None` while it may still run.
    pub finished_at: Option<Millis>,
    /// How often a failed job was put back in the queue automatically (bounded).
    pub requeues: u32,
}

impl Job {
    /// How long the latest attempt took, once the job has ended.
    pub fn duration_ms(&self) -> Option<Millis> {
        Some(self.finished_at? - self.started_at?)
    }

    /// Whether the job failed for a reason worth trying again later (the extractor said
    /// `transient`: timeouts, 429, 5xx, a provider outage) rather than for its input.
    pub fn failed_transiently(&self) -> bool {
        self.state == JobState::Failed && self.last_error.as_deref().is_some_and(|e| e.starts_with(TRANSIENT_PREFIX))
    }
}

/// How a transient extraction error starts (`ExtractError::Transient`'s message).
pub const TRANSIENT_PREFIX: &str = "transient: ";

#[derive(Clone, Debug, Default)]
pub struct JobFilter {
    pub state: Option<JobState>,
    pub conversation_id: Option<String>,
    pub session_id: Option<String>,
    pub limit: u32,
}

/// A job handed to a worker, with everything extraction needs.
/// One claim of a job: the fencing token a worker presents when it reports the outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobLease {
    pub job_id: String,
    /// The job's `attempts` after the claim; a later claim of the same job has a higher one.
    pub attempt: u32,
}

impl Job {
    /// `Conflict` unless the job is running under this lease.
    pub fn check_lease(&self, lease: &JobLease) -> Result<(), crate::StoreError> {
        if self.state != JobState::Running || self.attempts != lease.attempt {
            return Err(crate::StoreError::Conflict(format!(
                "job {} lost its lease (attempt {} claimed it; it is now {} at attempt {})",
                self.job_id,
                lease.attempt,
                self.state.as_str(),
                self.attempts
            )));
        }
        Ok(())
    }
}

impl ClaimedJob {
    pub fn lease(&self) -> JobLease {
        JobLease { job_id: self.job.job_id.clone(), attempt: self.job.attempts }
    }
}

#[derive(Clone, Debug)]
pub struct ClaimedJob {
    pub job: Job,
    pub collection: Collection,
    pub session: SessionSummary,
    pub meta: ConversationMeta,
    pub messages: Vec<StoredMessage>,
    /// The user's current profiles (every profile type), so changes can be relative to them.
    pub profiles: Vec<Profile>,
}

// ---------------------------------------------------------------------------------------------
// Events and profiles

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Event {
    pub id: String,
    pub memory_type: String,
    pub user_id: Vec<String>,
    pub assistant_id: Vec<String>,
    pub group_id: Option<String>,
    pub session_id: Option<String>,
    pub conversation_id: Option<String>,
    pub scope: Option<String>,
    pub class: String,
    pub status: String,
    pub time: Millis,
    pub memory_info: Map<String, Value>,
    /// Provenance: the stored message ids the event was extracted from.
    pub source_message_ids: Vec<i64>,
    pub hit_count: u64,
    pub last_hit_at: Option<Millis>,
    pub created_at: Millis,
    pub updated_at: Millis,
    /// When a never-hit event is deleted by maintenance (temporary memories, explicit TTLs).
    pub expires_at: Option<Millis>,
    /// The newer event that corrected this one (its status is then `superseded`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<String>,
}

impl Event {
    /// The text that represents the event in search and context: its summary, or its fields.
    pub fn text(&self) -> String {
        event_text(&self.memory_info)
    }
}

/// The text full-text search indexes for an event: its text plus the messages it came from, so a
/// search finds what was said even when the summary left it out (the summary stays what a
/// context shows, and what is embedded).
pub fn event_search_text(memory_info: &Map<String, Value>) -> String {
    let mut text = event_text(memory_info);
    if let Some(Value::String(raw)) = memory_info.get("original_messages") {
        text.push('\n');
        text.push_str(raw);
    }
    text
}

/// One line of an event's `memory_info.original_messages`: `name(role):content`, the role standing
/// for the name when the speaker has none. Extractors write one line per source message, in the
/// order of `source_message_ids`.
pub fn original_message_line(name: Option<&str>, role: Role, content: &str) -> String {
    format!("{}({}):{content}", name.unwrap_or(role.as_str()), role.as_str())
}

/// The turns of an `original_messages` text as (name, role, content), one per line; `None` when a
/// line is not of the [`original_message_line`] form. A content holding a line break spans two
/// lines, so a caller pairing turns with `source_message_ids` checks that the counts agree.
pub fn original_message_turns(raw: &str) -> Option<Vec<(&str, Role, &str)>> {
    raw.lines()
        .map(|line| {
            // The first role tag ends the name; a later one belongs to the content.
            [Role::User, Role::Assistant, Role::System, Role::Tool]
                .into_iter()
                .filter_map(|r| line.find(&format!("({}):", r.as_str())).map(|at| (at, r)))
                .min_by_key(|(at, _)| *at)
                .map(|(at, r)| (&line[..at], r, &line[at + r.as_str().len() + 3..]))
        })
        .collect()
}

/// The text of an event's `memory_info`: its summary, or its fields (not the raw messages).
pub fn event_text(memory_info: &Map<String, Value>) -> String {
    {
        if let Some(Value::String(s)) = memory_info.get("summary") {
            return s.clone();
        }
        memory_info
            .iter()
            .filter(|(k, _)| k.as_str() != "original_messages")
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}: {s}"),
                other => format!("{k}: {other}"),
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

#[derive(Clone, Debug)]
pub struct NewEvent {
    pub collection_id: CollectionId,
    pub memory_type: String,
    pub user_id: Vec<String>,
    pub assistant_id: Vec<String>,
    pub group_id: Option<String>,
    pub session_id: Option<String>,
    pub conversation_id: Option<String>,
    pub scope: Option<String>,
    pub class: String,
    pub time: Millis,
    pub memory_info: Map<String, Value>,
    pub source_message_ids: Vec<i64>,
    /// The unit vector of `event_text(memory_info)`, from the collection's model.
    pub embedding: Option<Vec<f32>>,
    /// The unit vectors of its turns ([`crate::turns`]), stored only beside `embedding`.
    pub turn_vectors: Option<Vec<Vec<f32>>>,
    pub expires_at: Option<Millis>,
    pub now: Millis,
}

impl NewEvent {
    /// An event of one user with everything else empty: class `conclusion`, no vector, no expiry,
    /// written at `time`. Set the rest with struct-update syntax.
    pub fn of_user(
        collection_id: CollectionId,
        memory_type: impl Into<String>,
        user: impl Into<String>,
        memory_info: Map<String, Value>,
        time: Millis,
    ) -> Self {
        Self {
            collection_id,
            memory_type: memory_type.into(),
            user_id: vec![user.into()],
            assistant_id: vec![],
            group_id: None,
            session_id: None,
            conversation_id: None,
            scope: None,
            class: "conclusion".into(),
            time,
            memory_info,
            source_message_ids: vec![],
            embedding: None,
            turn_vectors: None,
            expires_at: None,
            now: time,
        }
    }

    /// The event as its insert stores it under `id`: active, never hit, created and updated at
    /// `now` (a store returns this instead of reading the row back).
    pub fn stored_as(self, id: String) -> Event {
        Event {
            id,
            memory_type: self.memory_type,
            user_id: self.user_id,
            assistant_id: self.assistant_id,
            group_id: self.group_id,
            session_id: self.session_id,
            conversation_id: self.conversation_id,
            scope: self.scope,
            class: self.class,
            status: "active".into(),
            time: self.time,
            memory_info: self.memory_info,
            source_message_ids: self.source_message_ids,
            hit_count: 0,
            last_hit_at: None,
            created_at: self.now,
            updated_at: self.now,
            expires_at: self.expires_at,
            superseded_by: None,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct EventPatch {
    pub memory_info: Option<Map<String, Value>>,
    /// A new vector, when `memory_info` changed the event's text.
    pub embedding: Option<Vec<f32>>,
    /// Its turns' new vectors ([`crate::turns`]); a changed text drops the old ones either way.
    pub turn_vectors: Option<Vec<Vec<f32>>>,
    pub time: Option<Millis>,
    pub group_id: Option<Option<String>>,
    pub scope: Option<Option<String>>,
    pub class: Option<String>,
    pub status: Option<String>,
}

impl EventPatch {
    /// Applies the patch to `e` (memory_info keys merged). When the text changed, returns what the
    /// store re-indexes it with: the new vector and turn vectors that came with the patch (the old
    /// turn vectors go either way).
    pub fn apply(self, e: &mut Event) -> Option<TextVectors> {
        let text_changed = self.memory_info.is_some();
        for (k, v) in self.memory_info.into_iter().flatten() {
            e.memory_info.insert(k, v);
        }
        if let Some(t) = self.time {
            e.time = t;
        }
        if let Some(g) = self.group_id {
            e.group_id = g;
        }
        if let Some(s) = self.scope {
            e.scope = s;
        }
        if let Some(c) = self.class {
            e.class = c;
        }
        if let Some(s) = self.status {
            e.status = s;
        }
        text_changed.then_some(TextVectors { vector: self.embedding, turns: self.turn_vectors })
    }
}

/// The vectors an event's text is indexed with: its own, and its turns' ([`crate::turns`]), stored
/// only beside its own.
#[derive(Clone, Debug, Default)]
pub struct TextVectors {
    pub vector: Option<Vec<f32>>,
    pub turns: Option<Vec<Vec<f32>>>,
}

/// A filter over events; empty lists mean "any".
#[derive(Clone, Debug, Default)]
pub struct EventFilter {
    pub user_id: Vec<String>,
    pub assistant_id: Vec<String>,
    pub memory_type: Vec<String>,
    pub group_id: Vec<String>,
    pub session_id: Vec<String>,
    pub conversation_id: Vec<String>,
    pub scope: Vec<String>,
    pub start_time: Option<Millis>,
    pub end_time: Option<Millis>,
    /// Only `active` events (search and context); otherwise any status (listing, deleting).
    pub active_only: bool,
}

impl EventFilter {
    pub fn is_empty(&self) -> bool {
        self.user_id.is_empty()
            && self.assistant_id.is_empty()
            && self.memory_type.is_empty()
            && self.group_id.is_empty()
            && self.session_id.is_empty()
            && self.conversation_id.is_empty()
            && self.scope.is_empty()
            && self.start_time.is_none()
            && self.end_time.is_none()
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Profile {
    pub id: String,
    pub profile_type: String,
    pub user_id: String,
    pub assistant_id: Option<String>,
    pub content: String,
    pub attributes: Map<String, Value>,
    /// Provenance: sessions whose extraction changed this profile, oldest first (bounded).
    pub source_session_ids: Vec<String>,
    pub created_at: Millis,
    pub updated_at: Millis,
    /// Earlier values of attributes (profile types with `update_mode: keep_history`), oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<AttributeVersion>,
}

/// A value an attribute held until it was changed or removed.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AttributeVersion {
    pub attribute: String,
    pub value: Value,
    /// When the value was set, if known (values older than the history are not).
    pub valid_from: Option<Millis>,
    pub valid_to: Millis,
    /// The session whose extraction changed it (None: an API call).
    pub session_id: Option<String>,
}

#[derive(Clone, Debug)]
pub struct NewProfile {
    pub collection_id: CollectionId,
    pub profile_type: String,
    pub user_id: String,
    pub assistant_id: Option<String>,
    pub content: String,
    pub attributes: Map<String, Value>,
    pub now: Millis,
}

#[derive(Clone, Debug, Default)]
pub struct ProfilePatch {
    pub content: Option<String>,
    /// Keys to set; a `null` value removes the key.
    pub attributes: Option<Map<String, Value>>,
    /// Replace all attributes instead of merging.
    pub replace_attributes: bool,
    /// New provenance (a re-derivation from fewer sessions); `None`: unchanged.
    pub source_session_ids: Option<Vec<String>>,
}

#[derive(Clone, Debug, Default)]
pub struct ProfileFilter {
    pub user_id: Vec<String>,
    pub assistant_id: Vec<String>,
    pub profile_type: Vec<String>,
}

/// What a search asks the store for: candidates by vector similarity and by full text.
#[derive(Clone, Debug)]
pub struct CandidateQuery {
    pub vector: Option<Vec<f32>>,
    /// Analysed query terms (`text::search_tokens`); empty: no full-text part.
    pub terms: Vec<String>,
    /// How many candidates each part returns at most.
    pub k: usize,
    /// The vector part's answer — (event id, cosine), best first — already known from a query
    /// with the same vector, filter and `k` (a search's second hop): the store uses it instead
    /// of scanning the scope again. The cosines of full-text hits outside it are still computed.
    pub vector_hits: Option<Vec<(String, f32)>>,
    /// BM25 statistics to score with instead of the store's own — a sharded store's sums over
    /// its shards, so each shard ranks and scores as one database holding everything would.
    /// `None`: the store's. They cover this query's terms only (a second hop asks again).
    pub corpus: Option<std::sync::Arc<Corpus>>,
}

/// A collection's BM25 statistics for a query: documents and tokens, and the document frequency
/// of each of the query's full-text tokens ([`crate::store::SearchStore::corpus`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Corpus {
    pub stats: crate::text::CorpusStats,
    pub df: std::collections::HashMap<String, u64>,
}

impl Corpus {
    /// Adds another part's statistics (a shard's) to these.
    pub fn add(&mut self, other: Corpus) {
        self.stats.docs += other.stats.docs;
        self.stats.tokens += other.stats.tokens;
        for (t, n) in other.df {
            *self.df.entry(t).or_default() += n;
        }
    }
}

/// What a search's second hop asks: its terms and, from a sharded store, the BM25 statistics to
/// score them with ([`CandidateQuery::corpus`]).
#[derive(Clone, Debug)]
pub struct NextHop {
    pub terms: Vec<String>,
    pub corpus: Option<std::sync::Arc<Corpus>>,
}

impl NextHop {
    /// A second hop with these terms, scored with the store's own statistics.
    pub fn terms(terms: Vec<String>) -> Self {
        Self { terms, corpus: None }
    }
}

impl CandidateQuery {
    /// The BM25 scorer of this query's terms: over [`CandidateQuery::corpus`] when given, else
    /// over the store's own statistics (`stats`, `df`).
    pub fn bm25(&self, stats: crate::text::CorpusStats, df: impl Fn(&str) -> u64) -> crate::text::Bm25Query {
        match &self.corpus {
            Some(c) => crate::text::Bm25Query::new(&self.terms, c.stats, |t| c.df.get(t).copied().unwrap_or(0)),
            None => crate::text::Bm25Query::new(&self.terms, stats, df),
        }
    }

    /// A search's second hop after this query found `found`: `next`'s terms (and statistics)
    /// with the vector part as found ([`Self::vector_hits_of`]), the rest unchanged.
    pub fn second_hop(&self, found: &[Candidate], next: NextHop) -> CandidateQuery {
        CandidateQuery {
            terms: next.terms,
            vector_hits: self.vector_hits_of(found),
            corpus: next.corpus,
            ..self.clone()
        }
    }

    /// The vector part of a candidate list this query returned: the `k` candidates of highest
    /// cosine. With an exact scan (every user-scoped search) it is the store's vector part, since
    /// a full-text hit outside it scores at most its lowest cosine — up to which of several
    /// exactly equal cosines at the k-th place is kept. Over a large scope on PostgreSQL (HNSW,
    /// approximate) it may hold a full-text hit of higher cosine than an HNSW hit: no worse.
    pub fn vector_hits_of(&self, candidates: &[Candidate]) -> Option<Vec<(String, f32)>> {
        self.vector.as_ref()?;
        let mut hits: Vec<(String, f32)> =
            candidates.iter().filter_map(|c| Some((c.event.id.clone(), c.cosine?))).collect();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        hits.truncate(self.k);
        Some(hits)
    }
}

/// A search candidate with its raw signals; core fuses them into a score.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub event: Event,
    /// Cosine similarity to the query vector, if the event has a vector.
    pub cosine: Option<f32>,
    /// BM25 relevance (higher is better), if the event matched a query term.
    pub bm25: Option<f64>,
    /// The best cosine of its turns' vectors ([`crate::turns::best_cosine`]), if it has them.
    pub turn_cosine: Option<f32>,
}

/// Everything stored about one user in one collection (`user/export`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct UserData {
    pub conversations: Vec<ConversationInfo>,
    /// Every message of the user's conversations, extracted or not.
    pub messages: Vec<StoredMessage>,
    pub sessions: Vec<SessionSummary>,
    pub jobs: Vec<Job>,
    pub events: Vec<Event>,
    pub profiles: Vec<Profile>,
}

/// What `user/forget` removed, per kind.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct ForgetCounts {
    pub conversations: u64,
    pub messages: u64,
    pub sessions: u64,
    pub jobs: u64,
    pub events: u64,
    pub profiles: u64,
}

impl std::ops::AddAssign for ForgetCounts {
    fn add_assign(&mut self, n: Self) {
        self.conversations += n.conversations;
        self.messages += n.messages;
        self.sessions += n.sessions;
        self.jobs += n.jobs;
        self.events += n.events;
        self.profiles += n.profiles;
    }
}

/// Sizes of a store, for `/metrics`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StoreStats {
    /// Jobs per state (`queued`, `running`, `done`, `failed`).
    pub jobs: Vec<(String, u64)>,
    pub conversations: u64,
    pub messages: u64,
    pub events: u64,
    pub profiles: u64,
    /// Bytes on disk (data file and log), where the store can tell.
    pub bytes: u64,
}

/// `stats` (seed 002 §6.2): what is remembered and what is used, per day.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MemoryStats {
    /// (day `YYYY-MM-DD`, events created), newest first.
    pub new_memories_per_day: Vec<(String, u64)>,
    /// (day, hits counted by search and get_context), newest first.
    pub hits_per_day: Vec<(String, u64)>,
    /// The most-hit events: (event id, summary, hit count).
    pub top_hit: Vec<(String, String, u64)>,
    pub never_hit: u64,
    pub total_events: u64,
    /// (day, jobs created, done, failed, prompt tokens, completion tokens), newest first.
    pub jobs_per_day: Vec<(String, u64, u64, u64, u64, u64)>,
}

/// One maintenance run over a collection.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MaintenanceRun {
    pub collection_name: String,
    pub trigger: String,
    pub started_at: Millis,
    /// Expired events that were never hit, deleted.
    pub expired: u64,
    /// Events not hit for the archive period, archived (kept, not searched by default).
    pub archived: u64,
    /// `process` events folded into summaries (the originals are replaced).
    #[serde(default)]
    pub folded: u64,
    /// Daily digests written.
    #[serde(default)]
    pub digests: u64,
}

impl MaintenanceRun {
    /// Adds another part's counts (a shard's run of the same start) to these.
    pub fn add_counts(&mut self, other: &MaintenanceRun) {
        self.expired += other.expired;
        self.archived += other.archived;
        self.folded += other.folded;
        self.digests += other.digests;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn original_message_lines_read_back_as_written() {
        let raw = [
            original_message_line(Some("Nate"), Role::User, "I said (assistant): that, once."),
            original_message_line(None, Role::Assistant, "好的（稍后回复）"),
            original_message_line(Some("Bob (work)"), Role::Tool, ""),
        ]
        .join("\n");
        assert_eq!(
            original_message_turns(&raw).unwrap(),
            vec![
                ("Nate", Role::User, "I said (assistant): that, once."),
                ("assistant", Role::Assistant, "好的（稍后回复）"),
                ("Bob (work)", Role::Tool, ""),
            ]
        );
        assert_eq!(original_message_turns("no role tag here"), None);
    }
}
