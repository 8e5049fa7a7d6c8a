//! The extraction contract: a closed session's messages in, events and profile changes out.
//! Implementations live in `mnemo-providers` (offline `rules`, OpenAI-compatible `llm`).

use crate::model::{CollectionSchema, ConversationMeta, Millis, Profile, StoredMessage};
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
    /// The user's current `profile_v1` profile, if any, so changes can be relative to it.
    pub profile: Option<Profile>,
    pub now: Millis,
}

/// One extracted event, not yet stored.
#[derive(Clone, Debug, PartialEq)]
pub struct ExtractedEvent {
    pub memory_type: String,
    pub memory_info: Map<String, Value>,
    pub time: Millis,
    pub source_message_ids: Vec<i64>,
    /// Filled by the service before storing (extractors leave it empty).
    pub embedding: Option<Vec<f32>>,
    /// Filled by the service from the event type (extractors leave them empty).
    pub class: Option<String>,
    pub expires_at: Option<Millis>,
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
    pub profile_changes: Vec<ProfileChange>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
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
    async fn extract(&self, input: ExtractionInput) -> Result<ExtractionOutput, ExtractError>;
}
