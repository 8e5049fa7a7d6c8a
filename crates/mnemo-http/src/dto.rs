//! Wire DTOs: what clients send and receive. Conversion to core types is explicit here, so the
//! core's records never become the JSON contract by accident.

use crate::json::Scoped;
use mnemo_core::model::*;
use mnemo_core::service::{IncomingMessage, Target};
use mnemo_core::{CoreError, ExtractTrigger};
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value, json};

mod events;
pub use events::*;

fn default_project() -> String {
    DEFAULT_PROJECT.to_string()
}

/// A string or a list of strings (the seed API accepts both for ids and types).
#[derive(Clone, Debug, Default)]
pub struct StrOrList(pub Vec<String>);

impl JsonSchema for StrOrList {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "StrOrList".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "One id, or a list of ids.",
            "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]
        })
    }
}

impl<'de> Deserialize<'de> for StrOrList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            One(String),
            Many(Vec<String>),
        }
        match Either::deserialize(d) {
            Ok(Either::One(s)) => Ok(StrOrList(vec![s])),
            Ok(Either::Many(v)) => Ok(StrOrList(v)),
            Err(_) => Err(serde::de::Error::custom("must be a string or a list of strings")),
        }
    }
}

impl StrOrList {
    pub fn into_checked(self, field: &str) -> Result<Vec<String>, CoreError> {
        if self.0.len() > 100 {
            return Err(CoreError::invalid(field, format!("must list at most 100 values, got {}", self.0.len())));
        }
        for v in &self.0 {
            if v.is_empty() || v.chars().count() > 256 {
                return Err(CoreError::invalid(field, "each value must be 1..=256 characters"));
            }
        }
        Ok(self.0)
    }
}

macro_rules! scoped {
    ($($t:ty),*) => {$(
        impl Scoped for $t {
            fn project(&self) -> &str {
                &self.project_name
            }
        }
    )*};
}

/// The collection a request addresses.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CollectionRef {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
}

impl CollectionRef {
    pub fn target(&self) -> Target {
        Target { project: self.project_name.clone(), collection: self.collection_name.clone() }
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProjectOnly {
    #[serde(default = "default_project")]
    pub project_name: String,
}

// ------------------------------------------------------------------------- collections

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CollectionCreate {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub event_types: Vec<EventTypeDef>,
    #[serde(default)]
    pub profile_types: Vec<ProfileTypeDef>,
    #[serde(default)]
    pub temporary_ttl_days: Option<f64>,
    /// `rules` or `llm` (when the server has one); the server default when absent.
    #[serde(default)]
    pub extractor: Option<String>,
}

pub fn collection_json(c: &Collection) -> Value {
    json!({
        "collection_name": c.collection_name,
        "project_name": c.project_name,
        "description": c.description,
        "event_types": c.schema.event_types,
        "profile_types": c.schema.profile_types,
        "temporary_ttl_days": c.schema.temporary_ttl_days,
        "extractor": c.schema.extractor,
        "created_at": c.created_at,
    })
}

// ------------------------------------------------------------------------- write path

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MessageDto {
    pub role: String,
    pub content: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub time: Option<i64>,
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TriggerDto {
    pub token_count: Option<i64>,
    pub message_count: Option<i64>,
    pub wait_timeout: Option<i64>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    pub conversation_id: String,
    pub messages: Vec<MessageDto>,
    #[serde(default)]
    pub extract_trigger: Option<TriggerDto>,
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
}

impl WriteBody {
    pub fn into_request(self, default_trigger: ExtractTrigger) -> Result<mnemo_core::service::WriteRequest, CoreError> {
        let t = self.extract_trigger.unwrap_or_default();
        let trigger = ExtractTrigger::from_parts(t.token_count, t.message_count, t.wait_timeout, default_trigger)?;
        let mut messages = Vec::with_capacity(self.messages.len());
        for (i, m) in self.messages.into_iter().enumerate() {
            let role = Role::parse(&m.role).ok_or_else(|| {
                CoreError::invalid(
                    format!("messages[{i}].role"),
                    format!("must be one of user, assistant, system, tool; got {:?}", m.role),
                )
            })?;
            messages.push(IncomingMessage {
                role,
                content: m.content,
                name: m.name,
                time: m.time,
                idempotency_key: m.idempotency_key,
            });
        }
        Ok(mnemo_core::service::WriteRequest {
            project: self.project_name,
            collection: self.collection_name,
            conversation_id: self.conversation_id,
            messages,
            trigger,
            meta: parse_metadata(self.metadata.unwrap_or_default())?,
        })
    }
}

fn parse_metadata(m: Map<String, Value>) -> Result<ConversationMeta, CoreError> {
    let get = |k: &str| -> Result<Option<String>, CoreError> {
        match m.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(other) => Err(CoreError::invalid(format!("metadata.{k}"), format!("must be a string, got {other}"))),
        }
    };
    // VikingDB names the owners `default_user_id` / `default_assistant_id`: the same thing.
    let either = |ours: &str, theirs: &str| -> Result<Option<String>, CoreError> {
        match (get(ours)?, get(theirs)?) {
            (Some(a), Some(b)) if a != b => Err(CoreError::invalid(
                format!("metadata.{theirs}"),
                format!("names another {ours} ({b:?}) than metadata.{ours} ({a:?}); give one"),
            )),
            (a, b) => Ok(a.or(b)),
        }
    };
    Ok(ConversationMeta {
        user_id: either("user_id", "default_user_id")?,
        assistant_id: either("assistant_id", "default_assistant_id")?,
        group_id: get("group_id")?,
        scope: get("scope")?,
        extra: m,
    })
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConversationBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    pub conversation_id: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionInfoBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    pub conversation_id: Option<String>,
    pub session_id: Option<String>,
}

pub fn message_json(m: &StoredMessage) -> Value {
    json!({
        "message_id": m.message_id,
        "role": m.role.as_str(),
        "name": m.name,
        "content": m.content,
        "time": m.time,
        "tokens": m.tokens,
        "session_id": m.session_id,
    })
}

pub fn job_json(j: &Job) -> Value {
    json!({
        "job_id": j.job_id,
        "kind": j.kind,
        "state": j.state.as_str(),
        "conversation_id": j.conversation_id,
        "session_id": j.session_id,
        "attempts": j.attempts,
        "max_attempts": j.max_attempts,
        "last_error": j.last_error,
        "run_after": j.run_after,
        "token_usage": {"prompt_tokens": j.prompt_tokens, "completion_tokens": j.completion_tokens},
        "created_at": j.created_at,
        "updated_at": j.updated_at,
        "started_at": j.started_at,
        "finished_at": j.finished_at,
        "duration_ms": j.duration_ms(),
        "requeues": j.requeues,
    })
}

// ------------------------------------------------------------------------- profiles

#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProfileFilterDto {
    #[serde(default)]
    pub user_id: Option<StrOrList>,
    #[serde(default)]
    pub assistant_id: Option<StrOrList>,
    #[serde(default, alias = "memory_type")]
    pub profile_type: Option<StrOrList>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProfileSearchBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    // A `query` is accepted and ignored: a user has one profile per type, returned whole.
    #[serde(default)]
    pub filter: ProfileFilterDto,
    #[serde(default)]
    pub limit: Option<i64>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProfileAddBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    #[serde(default, alias = "memory_type")]
    pub profile_type: Option<String>,
    pub user_id: String,
    #[serde(default)]
    pub assistant_id: Option<String>,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub attributes: Map<String, Value>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProfileUpdateBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    pub profile_id: String,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub attributes: Option<Map<String, Value>>,
    #[serde(default)]
    pub replace_attributes: bool,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProfileIdBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    pub profile_id: String,
}

pub fn profile_json(p: &Profile) -> Value {
    json!({
        "id": p.id,
        "profile_id": p.id,
        "memory_type": p.profile_type,
        "profile_type": p.profile_type,
        "user_id": p.user_id,
        "assistant_id": p.assistant_id,
        "memory_info": {"content": p.content, "attributes": p.attributes},
        "content": p.content,
        "attributes": p.attributes,
        "source_session_ids": p.source_session_ids,
        "history": p.history,
        "created_at": p.created_at,
        "updated_at": p.updated_at,
    })
}

// ------------------------------------------------------------------------- jobs

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobListBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub conversation_id: Option<String>,
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub limit: Option<i64>,
}

/// `job/retry`: one failed job by id, or (without `job_id`) every failed job of the collection.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobRetryBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    #[serde(default)]
    pub job_id: Option<String>,
}

#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventSearchConfigDto {
    #[serde(default)]
    pub filter: EventFilterDto,
    #[serde(default)]
    pub limit: Option<i64>,
    #[serde(default)]
    pub time_decay_config: Option<TimeDecayDto>,
    #[serde(default)]
    pub similarity_threshold: Option<f64>,
}

#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProfileSearchConfigDto {
    #[serde(default)]
    pub filter: ProfileFilterDto,
    #[serde(default)]
    pub limit: Option<i64>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IncludeDto {
    #[serde(default = "yes")]
    pub profile: bool,
    #[serde(default = "yes")]
    pub short_term: bool,
    #[serde(default = "yes")]
    pub intra_events: bool,
    #[serde(default = "yes")]
    pub cross_events: bool,
    #[serde(default = "yes")]
    pub recap: bool,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetContextBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    pub conversation_id: String,
    #[serde(default)]
    pub query: Option<String>,
    #[serde(default)]
    pub event_search_config: EventSearchConfigDto,
    #[serde(default)]
    pub profile_search_config: ProfileSearchConfigDto,
    #[serde(default)]
    pub max_tokens: Option<i64>,
    #[serde(default)]
    pub include: Option<IncludeDto>,
    #[serde(default)]
    pub locale: Option<String>,
}

impl ProfileFilterDto {
    pub fn into_filter(self) -> Result<mnemo_core::model::ProfileFilter, CoreError> {
        Ok(mnemo_core::model::ProfileFilter {
            user_id: self.user_id.unwrap_or_default().into_checked("filter.user_id")?,
            assistant_id: self.assistant_id.unwrap_or_default().into_checked("filter.assistant_id")?,
            profile_type: self.profile_type.unwrap_or_default().into_checked("filter.profile_type")?,
        })
    }
}

pub fn message_short_json(m: &StoredMessage) -> Value {
    json!({"message_id": m.message_id, "role": m.role.as_str(), "name": m.name, "content": m.content, "time": m.time})
}

pub fn scored_event_json(r: &mnemo_core::service::ScoredEvent) -> Value {
    let sc = r.scores;
    let mut v = event_json(
        &r.event,
        Some(Scores {
            score: sc.score,
            origin_score: sc.origin_score,
            time_score: sc.time_score,
            custom_weight_score: sc.custom_weight_score,
        }),
    );
    v["layer"] = json!(r.layer);
    v
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatsBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    #[serde(default)]
    pub user_id: Option<String>,
    #[serde(default)]
    pub days: Option<i64>,
}

/// `user/export` and `user/forget`: one collection, or every collection of the project.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UserBody {
    #[serde(default)]
    pub collection_name: Option<String>,
    #[serde(default = "default_project")]
    pub project_name: String,
    pub user_id: String,
}

/// `user/forget`: everything about the user, for good — or, with `dry_run`, what that would be.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UserForgetBody {
    #[serde(default)]
    pub collection_name: Option<String>,
    #[serde(default = "default_project")]
    pub project_name: String,
    pub user_id: String,
    #[serde(default)]
    pub dry_run: bool,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MaintenanceBody {
    #[serde(default = "default_project")]
    pub project_name: String,
    #[serde(default)]
    pub collection_name: Option<String>,
    #[serde(default)]
    pub limit: Option<i64>,
}

/// Test-only clock control (`testing.clock_control`).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClockBody {
    #[serde(default = "default_project")]
    pub project_name: String,
    pub advance_ms: i64,
}

scoped!(
    ClockBody,
    MaintenanceBody,
    UserBody,
    UserForgetBody,
    StatsBody,
    GetContextBody,
    CollectionRef,
    ProjectOnly,
    CollectionCreate,
    WriteBody,
    ConversationBody,
    SessionInfoBody,
    EventSearchBody,
    EventAddBody,
    EventUpdateBody,
    EventIdBody,
    BatchDeleteBody,
    ProfileSearchBody,
    ProfileAddBody,
    ProfileUpdateBody,
    ProfileIdBody,
    JobListBody,
    JobRetryBody
);

/// Checks `limit` against 1..=5000 (SPEC §2.3), with a default.
pub fn limit(v: Option<i64>, default: u32) -> Result<u32, CoreError> {
    let (lo, hi) = mnemo_core::service::LIMIT_RANGE;
    match v {
        None => Ok(default),
        Some(n) if (lo..=hi).contains(&n) => Ok(n as u32),
        Some(n) => Err(CoreError::invalid("limit", format!("must be an integer in {lo}..={hi}, got {n}"))),
    }
}
