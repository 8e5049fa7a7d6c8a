//! The extraction contract: a closed session's messages in, events and profile changes out.
//! Implementations live in `mnemo-providers` (offline `rules`, OpenAI-compatible `llm`).

use crate::model::{CollectionSchema, ConversationMeta, Event, Millis, Profile, StoredMessage};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use thiserror::Error;

#[derive(Clone, Debug)]
pub struct ExtractionInput {
    pub schema: CollectionSchema,
    pub session_id: String,
    pub meta: ConversationMeta,
    /// The session's messages, oldest first, uncleaned: cleaning is the extractor's first step.
    pub messages: Vec<StoredMessage>,
    /// The user's current profiles (every type), so changes can be relative to them.
    pub profiles: Vec<Profile>,
    /// The user's earlier events most related to this session, so an extractor can say that a
    /// new event corrects one of them (`supersedes`). Empty unless the extractor asks for them.
    pub related_events: Vec<Event>,
    pub now: Millis,
}

impl ExtractionInput {
    pub fn profile(&self, profile_type: &str) -> Option<&Profile> {
        self.profiles.iter().find(|p| p.profile_type == profile_type)
    }
}

/// One extracted event, not yet stored.
#[derive(Clone, Debug, PartialEq)]
pub struct ExtractedEvent {
    pub memory_type: String,
    pub memory_info: Map<String, Value>,
    pub time: Millis,
    /// When what it tells became true, when the conversation states it ("since 2013", "last
    /// month"): set by the service from the source turns; `None` means `time`.
    pub valid_from: Option<Millis>,
    pub source_message_ids: Vec<i64>,
    /// Filled by the service before storing (extractors leave it empty).
    pub embedding: Option<Vec<f32>>,
    /// Its turns' vectors ([`crate::turns`]), filled with `embedding` when the event has turns.
    pub turn_vectors: Option<Vec<Vec<f32>>>,
    /// Filled by the service from the event type (extractors leave them empty).
    pub class: Option<String>,
    pub expires_at: Option<Millis>,
    /// The id of an earlier event of the same user that this one corrects: it is marked
    /// `superseded` (kept for history, hidden from search by default).
    pub supersedes: Option<String>,
    /// Set by the service's dedup: the id of an existing near-duplicate event that this one
    /// refreshes (time, text and provenance updated; hits kept) instead of being added.
    pub merge_into: Option<String>,
    /// Set by the service in a group chat: the users whose messages the event came from (the
    /// conversation's user otherwise).
    pub owners: Option<Vec<String>>,
}

impl ExtractedEvent {
    pub fn new(memory_type: impl Into<String>, memory_info: Map<String, Value>, time: Millis) -> Self {
        Self {
            memory_type: memory_type.into(),
            memory_info,
            time,
            valid_from: None,
            source_message_ids: vec![],
            embedding: None,
            turn_vectors: None,
            class: None,
            expires_at: None,
            supersedes: None,
            merge_into: None,
            owners: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum ProfileChange {
    /// Sets an attribute (adds it, or changes its value).
    Set { key: String, value: Value },
    /// Adds items to a list attribute, keeping it free of duplicates.
    Append { key: String, items: Vec<String> },
    /// Removes items from a list attribute.
    RemoveItems { key: String, items: Vec<String> },
    /// Removes an attribute.
    Remove { key: String },
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExtractionOutput {
    pub events: Vec<ExtractedEvent>,
    /// Changes to the user's `profile_v1` profile.
    pub profile_changes: Vec<ProfileChange>,
    /// Changes to the user's profiles of custom types: (profile type, changes).
    pub typed_profile_changes: Vec<(String, Vec<ProfileChange>)>,
    /// Set by the service: when the profile changes became true (the session's last message), so
    /// an attribute's validity follows the conversation, not the moment the job ran (`None`: then).
    pub profile_time: Option<Millis>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Set by the service (`extraction.dedup_similarity`): a store shared by replicas looks
    /// again, under its per-user lock, for a stored twin of each new event — exact text or a
    /// similarity at least this — that a job committing on another replica added meanwhile.
    pub dedup_similarity: Option<f32>,
}

/// Text compared for exact duplicates: case, spacing and punctuation do not count.
pub fn normalized_text(s: &str) -> String {
    s.chars().filter(|c| c.is_alphanumeric()).flat_map(char::to_lowercase).collect()
}

#[derive(Debug, Error)]
pub enum ExtractError {
    /// Worth retrying later (timeouts, 429, 5xx, an injected fault).
    #[error("transient: {0}")]
    Transient(String),
    /// Retrying the same input will fail the same way.
    #[error("permanent: {0}")]
    Permanent(String),
}

#[async_trait]
pub trait Extractor: Send + Sync + 'static {
    /// A stable name recorded with the job, e.g. `rules` or `llm:qwen2.5`.
    fn name(&self) -> &str;
    /// Whether the extractor uses `related_events` (finding them costs a search per job).
    fn wants_related_events(&self) -> bool {
        false
    }
    /// Whether the extractor spends model tokens (then the daily token budget applies).
    fn uses_tokens(&self) -> bool {
        false
    }
    async fn extract(&self, input: ExtractionInput) -> Result<ExtractionOutput, ExtractError>;
}

/// The extractors a server has, by name (`rules`, `llm`), and the one collections use unless
/// their schema names another (`schema.extractor`).
#[derive(Clone)]
pub struct Extractors {
    default: String,
    by_name: Vec<(String, std::sync::Arc<dyn Extractor>)>,
}

impl Extractors {
    /// A registry with one extractor, which is the default.
    pub fn new(name: impl Into<String>, extractor: std::sync::Arc<dyn Extractor>) -> Self {
        let name = name.into();
        Self { default: name.clone(), by_name: vec![(name, extractor)] }
    }

    /// Adds (or replaces) an extractor under `name`.
    pub fn with(mut self, name: impl Into<String>, extractor: std::sync::Arc<dyn Extractor>) -> Self {
        let name = name.into();
        self.by_name.retain(|(n, _)| *n != name);
        self.by_name.push((name, extractor));
        self
    }

    /// Makes `name` the default. Panics if it is not registered (a composition-root bug).
    pub fn default_to(mut self, name: &str) -> Self {
        assert!(self.by_name.iter().any(|(n, _)| n == name), "extractor {name} is not registered");
        self.default = name.into();
        self
    }

    pub fn default_name(&self) -> &str {
        &self.default
    }

    pub fn names(&self) -> Vec<&str> {
        self.by_name.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// The extractor called `name`, or the default for `None`.
    pub fn get(&self, name: Option<&str>) -> Option<&std::sync::Arc<dyn Extractor>> {
        let name = name.unwrap_or(&self.default);
        self.by_name.iter().find(|(n, _)| n == name).map(|(_, e)| e)
    }
}

/// How much of the conversations behind a merged event is kept (characters, newest first).
pub const MERGED_ORIGINAL_CHARS: usize = 8_000;

/// What an event becomes when a near-duplicate `new` is merged into it: the new text wins, what
/// was said in both sessions stays (the newest `MERGED_ORIGINAL_CHARS`), provenance is the union.
/// Time, expiry and the vector are the store's to refresh; id, hits and creation time stay.
pub fn merged_content(
    old: &crate::model::Event,
    new: &ExtractedEvent,
) -> (serde_json::Map<String, serde_json::Value>, Vec<i64>) {
    let mut sources = old.source_message_ids.clone();
    sources.extend(new.source_message_ids.iter().filter(|i| !old.source_message_ids.contains(i)));
    let mut info = new.memory_info.clone();
    if let (Some(serde_json::Value::String(before)), Some(serde_json::Value::String(now_said))) =
        (old.memory_info.get("original_messages"), new.memory_info.get("original_messages"))
    {
        let both = format!("{before}\n{now_said}");
        let skip = both.chars().count().saturating_sub(MERGED_ORIGINAL_CHARS);
        info.insert("original_messages".into(), serde_json::Value::String(both.chars().skip(skip).collect()));
    }
    // The entities stated in either session, one entry per name (aliases joined).
    use crate::model::STATED_ENTITIES;
    if let Some(serde_json::Value::Array(before)) = old.memory_info.get(STATED_ENTITIES) {
        let mut all: Vec<serde_json::Value> = before.clone();
        if let Some(serde_json::Value::Array(now_stated)) = new.memory_info.get(STATED_ENTITIES) {
            for e in now_stated {
                let same = |o: &serde_json::Value| {
                    o["name"].as_str().map(crate::entities::key) == e["name"].as_str().map(crate::entities::key)
                };
                match all.iter_mut().find(|o| same(o)) {
                    Some(o) => {
                        let mut aliases = o["aliases"].as_array().cloned().unwrap_or_default();
                        for a in e["aliases"].as_array().into_iter().flatten() {
                            if !aliases.contains(a) {
                                aliases.push(a.clone());
                            }
                        }
                        o["aliases"] = serde_json::Value::Array(aliases);
                    }
                    None => all.push(e.clone()),
                }
            }
        }
        info.insert(STATED_ENTITIES.into(), serde_json::Value::Array(all));
    }
    (info, sources)
}

impl ExtractedEvent {
    /// The event to store for this extraction of `session` (its subjects and scope come from the
    /// conversation's metadata).
    pub fn to_new_event(
        &self,
        collection_id: crate::model::CollectionId,
        meta: &crate::model::ConversationMeta,
        session: &crate::model::SessionSummary,
        now: crate::model::Millis,
    ) -> crate::model::NewEvent {
        crate::model::NewEvent {
            collection_id,
            memory_type: self.memory_type.clone(),
            user_id: self.owners.clone().unwrap_or_else(|| meta.user_id.iter().cloned().collect()),
            assistant_id: meta.assistant_id.iter().cloned().collect(),
            group_id: meta.group_id.clone(),
            session_id: Some(session.session_id.clone()),
            conversation_id: Some(session.conversation_id.clone()),
            scope: meta.scope.clone(),
            class: self.class.clone().unwrap_or_else(|| "conclusion".into()),
            time: self.time,
            memory_info: self.memory_info.clone(),
            source_message_ids: self.source_message_ids.clone(),
            embedding: self.embedding.clone(),
            turn_vectors: self.turn_vectors.clone(),
            expires_at: self.expires_at,
            valid_from: self.valid_from,
            now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Failed jobs are recognised as transient by the stored message's prefix: the two must agree.
    #[test]
    fn a_transient_error_is_stored_with_the_prefix_recovery_looks_for() {
        let e = ExtractError::Transient("HTTP 503".into()).to_string();
        assert!(e.starts_with(crate::model::TRANSIENT_PREFIX), "{e}");
        let e = ExtractError::Permanent("HTTP 400".into()).to_string();
        assert!(!e.starts_with(crate::model::TRANSIENT_PREFIX), "{e}");
    }
}
