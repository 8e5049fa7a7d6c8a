//! Event requests (search, add, update, delete) and how events are shown.

use super::*;

#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventFilterDto {
    #[serde(default)]
    pub user_id: Option<StrOrList>,
    #[serde(default)]
    pub assistant_id: Option<StrOrList>,
    #[serde(default)]
    pub memory_type: Option<StrOrList>,
    /// `batch_delete_event` names the type `event_type`.
    #[serde(default)]
    pub event_type: Option<StrOrList>,
    #[serde(default)]
    pub group_id: Option<StrOrList>,
    #[serde(default)]
    pub session_id: Option<StrOrList>,
    #[serde(default)]
    pub conversation_id: Option<StrOrList>,
    #[serde(default)]
    pub scope: Option<StrOrList>,
    #[serde(default)]
    pub start_time: Option<i64>,
    #[serde(default)]
    pub end_time: Option<i64>,
    /// `event/search` only: the events naming this entity of the (one) `user_id` — its
    /// `entity_id`, name or an alias (`entity/list`).
    #[serde(default)]
    pub entity: Option<String>,
}

impl EventFilterDto {
    /// The filter and its entity (`event/search`).
    pub fn split_entity(mut self) -> Result<(EventFilter, Option<String>), CoreError> {
        let entity = self.entity.take();
        Ok((self.into_filter()?, entity))
    }

    /// The filter; `filter.entity` is refused (only `event/search` takes it, through
    /// [`EventFilterDto::split_entity`]).
    pub fn into_filter(self) -> Result<EventFilter, CoreError> {
        if self.entity.is_some() {
            return Err(CoreError::invalid("filter.entity", "is accepted by event/search only"));
        }
        let list = |v: Option<StrOrList>, f: &str| v.unwrap_or_default().into_checked(&format!("filter.{f}"));
        let mut memory_type = list(self.memory_type, "memory_type")?;
        memory_type.extend(list(self.event_type, "event_type")?);
        let memory_type = memory_type.into_iter().map(canonical_type).collect();
        Ok(EventFilter {
            user_id: list(self.user_id, "user_id")?,
            assistant_id: list(self.assistant_id, "assistant_id")?,
            memory_type,
            group_id: list(self.group_id, "group_id")?,
            session_id: list(self.session_id, "session_id")?,
            conversation_id: list(self.conversation_id, "conversation_id")?,
            scope: list(self.scope, "scope")?,
            event_ids: Vec::new(),
            start_time: self.start_time,
            end_time: self.end_time,
            active_only: false,
            as_of: None,
        })
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TimeDecayDto {
    pub weight: f64,
    #[serde(default)]
    pub no_decay_period: Option<f64>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventSearchBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    #[serde(default)]
    pub query: Option<String>,
    #[serde(default)]
    pub filter: EventFilterDto,
    #[serde(default)]
    pub limit: Option<i64>,
    #[serde(default)]
    pub time_decay_config: Option<TimeDecayDto>,
    #[serde(default)]
    pub custom_weight: Option<f64>,
    #[serde(default)]
    pub similarity_threshold: Option<f64>,
    #[serde(default)]
    pub freshness_days: Option<f64>,
    #[serde(default)]
    pub include_archived: bool,
    /// What was true at this time (ms since the epoch): events valid then (superseded ones
    /// included, those begun later left out) and each profile value as it was.
    #[serde(default)]
    pub as_of: Option<i64>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventAddBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    #[serde(alias = "memory_type")]
    pub event_type: String,
    #[serde(default)]
    pub user_id: Option<StrOrList>,
    #[serde(default)]
    pub assistant_id: Option<StrOrList>,
    pub memory_info: Map<String, Value>,
    #[serde(default)]
    pub time: Option<i64>,
    #[serde(default)]
    pub group_id: Option<String>,
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub conversation_id: Option<String>,
    #[serde(default)]
    pub scope: Option<String>,
    #[serde(default)]
    pub class: Option<String>,
    #[serde(default)]
    pub ttl_relative: Option<i64>,
    #[serde(default)]
    pub ttl_absolute: Option<i64>,
}

impl EventAddBody {
    /// Where the event goes, and the event.
    pub fn split(self) -> (String, String, EventAddItem) {
        let item = EventAddItem {
            event_type: self.event_type,
            user_id: self.user_id,
            assistant_id: self.assistant_id,
            memory_info: self.memory_info,
            time: self.time,
            group_id: self.group_id,
            session_id: self.session_id,
            conversation_id: self.conversation_id,
            scope: self.scope,
            class: self.class,
            ttl_relative: self.ttl_relative,
            ttl_absolute: self.ttl_absolute,
        };
        (self.project_name, self.collection_name, item)
    }
}

/// One event of `event/batch_add`: the fields of `event/add` without the collection. (Spelled
/// out again rather than `#[serde(flatten)]`ed into `EventAddBody`: serde cannot refuse unknown
/// fields through a flattened struct.)
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventAddItem {
    #[serde(alias = "memory_type")]
    pub event_type: String,
    #[serde(default)]
    pub user_id: Option<StrOrList>,
    #[serde(default)]
    pub assistant_id: Option<StrOrList>,
    pub memory_info: Map<String, Value>,
    #[serde(default)]
    pub time: Option<i64>,
    #[serde(default)]
    pub group_id: Option<String>,
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub conversation_id: Option<String>,
    #[serde(default)]
    pub scope: Option<String>,
    #[serde(default)]
    pub class: Option<String>,
    #[serde(default)]
    pub ttl_relative: Option<i64>,
    #[serde(default)]
    pub ttl_absolute: Option<i64>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventBatchAddBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    /// 1 to 500 events, stored all together or (if any is invalid) not at all.
    pub events: Vec<EventAddItem>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventUpdateBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    pub event_id: String,
    #[serde(default)]
    pub memory_info: Option<Map<String, Value>>,
    #[serde(default)]
    pub time: Option<i64>,
    #[serde(default, deserialize_with = "some_nullable")]
    #[schemars(with = "Option<String>")]
    pub group_id: Option<Option<String>>,
    #[serde(default, deserialize_with = "some_nullable")]
    #[schemars(with = "Option<String>")]
    pub scope: Option<Option<String>>,
    #[serde(default)]
    pub class: Option<String>,
    #[serde(default)]
    pub status: Option<String>,
}

/// Distinguishes an absent field (`None`) from an explicit `null` (`Some(None)`).
fn some_nullable<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventIdBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    pub event_id: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchDeleteBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    pub filter: EventFilterDto,
    #[serde(default)]
    pub delete_type: Option<String>,
    /// Answer what would be deleted (count and the first ids) without deleting.
    #[serde(default)]
    pub dry_run: bool,
    /// `"all"`: the filter may select every event of its user(s) (otherwise refused).
    #[serde(default)]
    pub confirm: Option<String>,
}

/// Scores attached to an event in a search result.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Scores {
    pub score: f64,
    pub origin_score: f64,
    pub time_score: f64,
    pub custom_weight_score: f64,
}

pub fn event_json(e: &Event, s: Option<Scores>) -> Value {
    let mut v = json!({
        "id": e.id,
        "event_id": e.id,
        "memory_type": e.memory_type,
        "event_type": e.memory_type,
        "user_id": e.user_id,
        "assistant_id": e.assistant_id,
        "session_id": e.session_id,
        "conversation_id": e.conversation_id,
        "group_id": e.group_id,
        "scope": e.scope,
        "class": e.class,
        "time": e.time,
        "status": e.status,
        "labels": "",
        "memory_info": e.memory_info,
        "source_message_ids": e.source_message_ids,
        "hit_count": e.hit_count,
        "last_hit_at": e.last_hit_at,
        "created_at": e.created_at,
        "updated_at": e.updated_at,
        "expires_at": e.expires_at,
        "superseded_by": e.superseded_by,
        "valid_from": e.valid_from,
        "valid_to": e.valid_to,
    });
    if let Some(s) = s {
        let o = v.as_object_mut().expect("object");
        o.insert("score".into(), json!(s.score));
        o.insert("origin_score".into(), json!(s.origin_score));
        o.insert("time_score".into(), json!(s.time_score));
        o.insert("custom_weight_score".into(), json!(s.custom_weight_score));
    }
    v
}
