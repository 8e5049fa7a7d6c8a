//! Wire DTOs: what clients send and receive. Conversion to core types is explicit here, so the
//! core's records never become the JSON contract by accident.

use crate::json::Scoped;
use mnemo_core::model::*;
use mnemo_core::service::Target;
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

mod collections;
mod entities;
mod profiles;
mod webhooks;
mod write;
pub use collections::*;
pub use entities::*;
pub use profiles::*;
pub use webhooks::*;
pub use write::*;

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

// ------------------------------------------------------------------------- write path

// ------------------------------------------------------------------------- profiles

/// `search` (VikingDB's SearchMemory): events and profiles of a user or assistant at once.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemorySearchBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    #[serde(default)]
    pub query: Option<String>,
    #[serde(default)]
    pub filter: MemoryFilterDto,
    /// 1..=5000, default 10: at most this many events and this many profiles.
    #[serde(default)]
    pub limit: Option<i64>,
    /// What was true at this time (ms since the epoch): events valid then (superseded ones
    /// included, those begun later left out) and each profile value as it was.
    #[serde(default)]
    pub as_of: Option<i64>,
}

#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryFilterDto {
    #[serde(default)]
    pub user_id: Option<StrOrList>,
    #[serde(default)]
    pub assistant_id: Option<StrOrList>,
    /// Event and profile type names (VikingDB's `sys_event_v1` / `sys_profile_v1` too); all when absent.
    #[serde(default)]
    pub memory_type: Option<StrOrList>,
    #[serde(default)]
    pub group_id: Option<StrOrList>,
    /// VikingDB's session: the id `session/add` was given (a mnemo conversation).
    #[serde(default)]
    pub session_id: Option<StrOrList>,
    #[serde(default)]
    pub start_time: Option<i64>,
    #[serde(default)]
    pub end_time: Option<i64>,
}

// ------------------------------------------------------------------------- jobs

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
    /// What was true at this time (ms since the epoch): events valid then (superseded ones
    /// included, those begun later left out) and each profile value as it was.
    #[serde(default)]
    pub as_of: Option<i64>,
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

/// `user/list`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UserListBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    /// Only users whose id contains this (ASCII case aside; `%` and `_` are plain characters).
    #[serde(default)]
    pub contains: Option<String>,
    /// 1..=5000, default 100.
    #[serde(default)]
    pub limit: Option<i64>,
}

scoped!(
    UserListBody,
    ClockBody,
    MaintenanceBody,
    UserBody,
    UserForgetBody,
    StatsBody,
    GetContextBody,
    CollectionRef,
    ProjectOnly,
    WriteBody,
    ConversationBody,
    SessionInfoBody,
    EventSearchBody,
    EventAddBody,
    EventBatchAddBody,
    EventUpdateBody,
    EventIdBody,
    BatchDeleteBody,
    ProfileSearchBody,
    ProfileAddBody,
    ProfileUpdateBody,
    ProfileIdBody,
    ProfileBatchDeleteBody,
    ProfileTriggerBody,
    MemorySearchBody,
    JobListBody,
    JobRetryBody
);

/// Checks `limit` against 1..=5000 (VikingDB's range), with a default.
pub fn limit(v: Option<i64>, default: u32) -> Result<u32, CoreError> {
    let (lo, hi) = mnemo_core::service::LIMIT_RANGE;
    match v {
        None => Ok(default),
        Some(n) if (lo..=hi).contains(&n) => Ok(n as u32),
        Some(n) => Err(CoreError::invalid("limit", format!("must be an integer in {lo}..={hi}, got {n}"))),
    }
}

/// A maintenance run as answered (`maintenance/run`, `maintenance/list`).
pub fn maintenance_run_json(r: &MaintenanceRun) -> Value {
    json!({
        "collection_name": r.collection_name,
        "trigger": r.trigger,
        "started_at": r.started_at,
        "expired": r.expired,
        "archived": r.archived,
        "folded": r.folded,
        "digests": r.digests,
    })
}
