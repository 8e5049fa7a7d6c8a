//! Domain records. These are not the wire format: front ends convert to and from their own DTOs.
//! Times are milliseconds since the Unix epoch; ids are opaque strings with a kind prefix.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

mod jobs;
mod schema;
mod search;
mod stats;
mod webhook;
pub use jobs::*;
pub use schema::*;
pub use search::*;
pub use stats::*;
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
    /// When what the event tells became true: a time the conversation states ("since 2013",
    /// "last month"), else `time`.
    pub valid_from: Millis,
    /// When a correction superseded it (the successor's `valid_from`); `None` while current.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_to: Option<Millis>,
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

/// The `memory_info` key of the entities an extractor stated for an event (the `llm` extractor:
/// `[{"name", "kind", "aliases"}]`), beside `original_messages`; an event type with a field of
/// this name keeps it as its field.
pub const STATED_ENTITIES: &str = "entities";

/// The text of an event's `memory_info`: its summary, or its fields (not the raw messages, nor
/// the stated entities).
pub fn event_text(memory_info: &Map<String, Value>) -> String {
    {
        if let Some(Value::String(s)) = memory_info.get("summary") {
            return s.clone();
        }
        memory_info
            .iter()
            .filter(|(k, v)| k.as_str() != "original_messages" && !(k.as_str() == STATED_ENTITIES && v.is_array()))
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
    /// When it became true, if not at `time` (a stated "since …").
    pub valid_from: Option<Millis>,
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
            valid_from: None,
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
            valid_from: self.valid_from.unwrap_or(self.time),
            valid_to: None,
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
            // A validity that was the event's time follows it (the stores keep it unset).
            if e.valid_from == e.time {
                e.valid_from = t;
            }
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
    /// These events alone (by id): an entity's events (`event/search`'s `filter.entity`).
    pub event_ids: Vec<String>,
    pub start_time: Option<Millis>,
    pub end_time: Option<Millis>,
    /// Only `active` events (search and context); otherwise any status (listing, deleting).
    pub active_only: bool,
    /// What was true at this time (ms) instead: active or superseded events with `valid_from` at
    /// or before it and no `valid_to` at or before it. Overrides `active_only`.
    pub as_of: Option<Millis>,
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
            && self.event_ids.is_empty()
            && self.start_time.is_none()
            && self.end_time.is_none()
            && self.as_of.is_none()
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
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
    /// Attribute → since when its value holds (ms), for values an extraction or an edit set
    /// (values added with the profile have none: valid as far back as is known).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub since: Map<String, Value>,
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
    /// A re-derivation's own versions, replacing the stored history and since-times whole (the
    /// edit then records none of its own): a deleted session's values leave the history too.
    pub versions: Option<ProfileVersions>,
}

/// A profile's versions: the values its attributes held before (oldest first) and since when the
/// current ones hold.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProfileVersions {
    pub history: Vec<AttributeVersion>,
    pub since: Map<String, Value>,
}

#[derive(Clone, Debug, Default)]
pub struct ProfileFilter {
    pub user_id: Vec<String>,
    pub assistant_id: Vec<String>,
    pub profile_type: Vec<String>,
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
