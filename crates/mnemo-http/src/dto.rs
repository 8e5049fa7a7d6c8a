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

mod webhooks;
pub use webhooks::*;

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
    /// How long the collection's other events live, in seconds (1..=315576000; VikingDB's
    /// `TtlRelative`); never expire when absent.
    #[serde(default)]
    pub event_ttl_secs: Option<i64>,
}

/// VikingDB's CreateCollection body (PascalCase), accepted on `collection/create` beside mnemo's
/// and mapped onto it. Cloud capacity knobs and what mnemo cannot do are refused by name.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
pub struct VikingCollectionCreate {
    pub collection_name: String,
    #[serde(default)]
    pub project_name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    /// Seconds, 1..=315576000.
    #[serde(default)]
    pub ttl_relative: Option<i64>,
    /// `sys_event_v1` (always present in mnemo), `sys_profile_collect_v1` (folded into `sys_profile_v1`).
    #[serde(default)]
    pub builtin_event_types: Option<Vec<String>>,
    /// `sys_profile_v1` (always present in mnemo).
    #[serde(default, alias = "BuiltinEntityTypes")]
    pub builtin_profile_types: Option<Vec<String>>,
    #[serde(default)]
    pub custom_event_type_schemas: Option<Vec<VikingEventType>>,
    #[serde(default, alias = "CustomEntityTypeSchemas")]
    pub custom_profile_type_schemas: Option<Vec<VikingProfileType>>,
    /// Refused: cloud capacity (mnemo's is the machine it runs on).
    #[serde(default)]
    #[schemars(with = "Option<Value>")]
    pub collection_type: Option<Value>,
    /// Refused: cloud capacity.
    #[serde(default)]
    #[schemars(with = "Option<Value>")]
    pub cpu_quota: Option<Value>,
    /// Refused: cloud billing tags.
    #[serde(default)]
    #[schemars(with = "Option<Value>")]
    pub tags: Option<Value>,
    /// `text` only (image understanding needs an image-capable extractor).
    #[serde(default)]
    pub collection_modal_type: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
pub struct VikingEventType {
    pub event_type: String,
    #[serde(default)]
    pub description: String,
    pub properties: Vec<VikingProperty>,
    /// A number (a fixed weight in [0,1]) or one numeric property's name.
    #[serde(default)]
    pub custom_weight_expression: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
pub struct VikingProfileType {
    pub profile_type: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub properties: Vec<VikingProperty>,
    /// `user` only.
    #[serde(default)]
    pub role: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
pub struct VikingProperty {
    pub property_name: String,
    /// `string`, `int64`, `float32`, `bool`.
    pub property_value_type: String,
    #[serde(default)]
    pub description: String,
    /// Refused when true: one profile per user and type (no keyed sub-profiles).
    #[serde(default)]
    pub is_primary_key: Option<bool>,
    /// Refused: aggregates over events are not supported.
    #[serde(default)]
    #[schemars(with = "Option<Value>")]
    pub aggregate_expression: Option<Value>,
}

fn viking_fields(props: Vec<VikingProperty>, at: &str) -> Result<Vec<Value>, CoreError> {
    let mut out = Vec::with_capacity(props.len());
    for (i, p) in props.into_iter().enumerate() {
        let f = format!("{at}.Properties[{i}]");
        let ty = match p.property_value_type.as_str() {
            "string" => "string",
            "int64" | "int32" | "int" => "int",
            "float32" | "float64" | "float" => "float",
            "bool" => "bool",
            other => {
                return Err(CoreError::invalid(
                    format!("{f}.PropertyValueType"),
                    format!("must be one of string, int64, float32, bool (lists are not supported yet), got {other:?}"),
                ));
            }
        };
        if p.is_primary_key == Some(true) {
            return Err(CoreError::invalid(
                format!("{f}.IsPrimaryKey"),
                "keyed profiles are not supported: a user has one profile per type",
            ));
        }
        if p.aggregate_expression.is_some() {
            return Err(CoreError::invalid(
                format!("{f}.AggregateExpression"),
                "aggregates over events are not supported; profile attributes come from extraction",
            ));
        }
        out.push(json!({"name": p.property_name, "type": ty, "description": p.description}));
    }
    Ok(out)
}

impl VikingCollectionCreate {
    /// mnemo's body for the same collection.
    pub fn into_mnemo(self) -> Result<Map<String, Value>, CoreError> {
        for (field, v) in
            [("CollectionType", &self.collection_type), ("CpuQuota", &self.cpu_quota), ("Tags", &self.tags)]
        {
            if v.is_some() {
                return Err(CoreError::invalid(
                    field,
                    "a cloud capacity or billing setting; a self-hosted mnemo's capacity is its machine — leave it out",
                ));
            }
        }
        if let Some(m) = self.collection_modal_type.as_deref().filter(|m| *m != "text") {
            return Err(CoreError::invalid(
                "CollectionModalType",
                format!("only \"text\": images are kept as references, not understood (got {m:?})"),
            ));
        }
        let builtins = |v: Option<Vec<String>>, field: &str, allowed: &[&str]| -> Result<(), CoreError> {
            match v.unwrap_or_default().into_iter().find(|t| !allowed.contains(&t.as_str())) {
                Some(t) => Err(CoreError::invalid(field, format!("must list only {}; got {t:?}", allowed.join(", ")))),
                None => Ok(()),
            }
        };
        builtins(self.builtin_event_types, "BuiltinEventTypes", &["sys_event_v1", "sys_profile_collect_v1"])?;
        builtins(self.builtin_profile_types, "BuiltinProfileTypes", &["sys_profile_v1"])?;
        let mut event_types = Vec::new();
        for (i, t) in self.custom_event_type_schemas.unwrap_or_default().into_iter().enumerate() {
            let at = format!("CustomEventTypeSchemas[{i}]");
            let fields = viking_fields(t.properties, &at)?;
            let mut def = json!({"name": t.event_type, "description": t.description, "fields": fields});
            match t.custom_weight_expression.as_deref().map(str::trim) {
                None | Some("") => {}
                Some(e) => match e.parse::<f64>() {
                    Ok(w) => def["weight"] = json!(w),
                    Err(_) if def["fields"].as_array().is_some_and(|f| f.iter().any(|f| f["name"] == e)) => {
                        def["weight_field"] = json!(e)
                    }
                    Err(_) => {
                        return Err(CoreError::invalid(
                            format!("{at}.CustomWeightExpression"),
                            format!(
                                "must be a number or one property's name (expressions are not supported yet), got {e:?}"
                            ),
                        ));
                    }
                },
            }
            event_types.push(def);
        }
        let mut profile_types = Vec::new();
        for (i, t) in self.custom_profile_type_schemas.unwrap_or_default().into_iter().enumerate() {
            let at = format!("CustomProfileTypeSchemas[{i}]");
            if let Some(r) = t.role.as_deref().filter(|r| *r != "user") {
                return Err(CoreError::invalid(format!("{at}.Role"), format!("only \"user\" profiles, got {r:?}")));
            }
            let fields = viking_fields(t.properties, &at)?;
            profile_types.push(json!({"name": t.profile_type, "description": t.description, "fields": fields}));
        }
        let mut body = json!({
            "collection_name": self.collection_name,
            "project_name": self.project_name.unwrap_or_else(default_project),
            "description": self.description.unwrap_or_default(),
            "event_types": event_types,
            "profile_types": profile_types,
        });
        if let Some(ttl) = self.ttl_relative {
            body["event_ttl_secs"] = json!(ttl);
        }
        Ok(body.as_object().expect("an object").clone())
    }
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
        "event_ttl_secs": c.schema.event_ttl_secs,
        "created_at": c.created_at,
        "resource_id": format!("{}/{}", c.project_name, c.collection_name),
    })
}

// ------------------------------------------------------------------------- write path

/// VikingDB's names for the built-in types, accepted wherever a type is named.
pub fn canonical_type(name: String) -> String {
    match name.as_str() {
        "sys_event_v1" => EVENT_V1.to_string(),
        "sys_profile_v1" => PROFILE_V1.to_string(),
        _ => name,
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MessageDto {
    pub role: String,
    /// A string, or (VikingDB's multimodal form) a list of parts `{type: "text", text}` /
    /// `{type: "image_url" | "input_image", image_url: {url} | "url"}`: text parts are what is
    /// extracted; an image is kept as a reference (`[image: url]`) and never fetched.
    #[schemars(with = "Value")]
    pub content: Value,
    #[serde(default)]
    pub name: Option<String>,
    /// VikingDB's speaker name in a group chat: the message's `name`.
    #[serde(default)]
    pub role_name: Option<String>,
    /// VikingDB's speaker id in a group chat: a user message naming another user than the
    /// conversation's makes the events extracted from it that user's too (by `role_name`, or the id
    /// as the name). An assistant message must name the conversation's assistant.
    #[serde(default)]
    pub role_id: Option<String>,
    #[serde(default)]
    pub time: Option<i64>,
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// A message's content as text: a string, or the text of its parts with images as references.
fn content_text(v: Value, field: &str) -> Result<String, CoreError> {
    let parts = match v {
        Value::String(s) => return Ok(s),
        Value::Array(parts) => parts,
        other => return Err(CoreError::invalid(field, format!("must be a string or a list of parts, got {other}"))),
    };
    let mut out: Vec<String> = Vec::with_capacity(parts.len());
    for (i, part) in parts.into_iter().enumerate() {
        let f = format!("{field}[{i}]");
        let Value::Object(mut o) = part else {
            return Err(CoreError::invalid(f, "must be an object {type, text | image_url}"));
        };
        let kind = o.remove("type");
        let (kind, key) = match kind.as_ref().and_then(Value::as_str) {
            Some("text") => ("text", "text"),
            Some(k @ ("image_url" | "input_image")) => (k, "image_url"),
            _ => {
                return Err(CoreError::invalid(
                    format!("{f}.type"),
                    format!("must be one of text, image_url, input_image; got {}", kind.unwrap_or(Value::Null)),
                ));
            }
        };
        let value = o.remove(key);
        if let Some(extra) = o.keys().next() {
            return Err(CoreError::invalid(
                format!("{f}.{extra}"),
                format!("unknown field; expected one of type, {key}"),
            ));
        }
        match (kind, value) {
            ("text", Some(Value::String(t))) => out.push(t),
            ("text", _) => return Err(CoreError::invalid(format!("{f}.text"), "must be a string")),
            (_, Some(Value::String(url))) => out.push(format!("[image: {url}]")),
            (_, Some(Value::Object(mut img))) => match (img.remove("url"), img.remove("detail"), img.keys().next()) {
                (Some(Value::String(url)), _, None) => out.push(format!("[image: {url}]")),
                (_, _, Some(extra)) => {
                    return Err(CoreError::invalid(
                        format!("{f}.image_url.{extra}"),
                        "unknown field; expected one of url, detail",
                    ));
                }
                _ => return Err(CoreError::invalid(format!("{f}.image_url.url"), "must be a string")),
            },
            _ => return Err(CoreError::invalid(format!("{f}.image_url"), "must be a URL string or {url}")),
        }
    }
    Ok(out.join("\n"))
}

#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TriggerDto {
    pub token_count: Option<i64>,
    pub message_count: Option<i64>,
    pub wait_timeout: Option<i64>,
}

/// `ttl_absolute - time` and `ttl_relative` at most this (VikingDB: 315,576,000 s, ten years).
const MAX_TTL_SECS: i64 = 315_576_000;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    /// mnemo's conversation; `streaming_write` requires it. On `session/add` give it or
    /// VikingDB's `session_id`, not both.
    #[serde(default)]
    pub conversation_id: Option<String>,
    /// `session/add` only (VikingDB): the session's id — mnemo keeps it as the conversation's id —
    /// generated when absent; [1,128] letters, digits, '_'. **Re-using one replaces that session**:
    /// its earlier events are deleted and its profile changes withdrawn.
    #[serde(default)]
    pub session_id: Option<String>,
    pub messages: Vec<MessageDto>,
    #[serde(default)]
    pub extract_trigger: Option<TriggerDto>,
    /// Who the conversation is about: `user_id` / `assistant_id` (or VikingDB's
    /// `default_user_id` / `default_assistant_id`), `default_user_name` /
    /// `default_assistant_name` (the speakers' names), `time` (the messages' time when they have
    /// none, ms), `group_id`, `scope`; other keys are kept as they are.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// Only these event and profile types are extracted (VikingDB's names accepted).
    #[serde(default)]
    pub extract_memory_type: Option<Vec<String>>,
    /// When the extracted events expire: ms since the epoch, after the messages' time by at most
    /// ten years. Wins over `ttl_relative`.
    #[serde(default)]
    pub ttl_absolute: Option<i64>,
    /// When the extracted events expire: seconds after extraction, 1..=315576000.
    #[serde(default)]
    pub ttl_relative: Option<i64>,
    /// VikingDB's "keep the raw messages": mnemo always keeps them (session/info, provenance);
    /// `true` is accepted, `false` refused.
    #[serde(default)]
    pub store_file: Option<bool>,
    /// VikingDB's profiles to focus on: not supported (refused when not empty).
    #[serde(default)]
    #[schemars(with = "Option<Vec<Value>>")]
    pub profiles: Option<Vec<Value>>,
}

impl WriteBody {
    /// The request, and whether it replaces the conversation (a VikingDB `session_id`).
    pub fn into_request(
        self,
        default_trigger: ExtractTrigger,
        session_add: bool,
    ) -> Result<(mnemo_core::service::WriteRequest, bool), CoreError> {
        let (conversation_id, replace) = match (self.conversation_id, self.session_id, session_add) {
            (Some(_), Some(_), _) => {
                return Err(CoreError::invalid(
                    "session_id",
                    "give conversation_id (mnemo: add a session to a conversation) or session_id (VikingDB: write or replace a session), not both",
                ));
            }
            (None, Some(_), false) => {
                return Err(CoreError::invalid("session_id", "streaming_write takes conversation_id, not session_id"));
            }
            (Some(c), None, _) => (c, false),
            (None, Some(sid), true) => {
                let ok =
                    !sid.is_empty() && sid.len() <= 128 && sid.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !ok {
                    return Err(CoreError::invalid(
                        "session_id",
                        format!("must be 1..=128 characters of letters, digits and '_', got {sid:?}"),
                    ));
                }
                (sid, true)
            }
            (None, None, true) => (format!("ses_{}", uuid::Uuid::now_v7().simple()), true),
            (None, None, false) => return Err(CoreError::invalid("conversation_id", "is required")),
        };
        if self.store_file == Some(false) {
            return Err(CoreError::invalid(
                "store_file",
                "mnemo always keeps a session's messages (session/info, provenance, user/forget deletes them); leave store_file out or true",
            ));
        }
        if self.profiles.as_ref().is_some_and(|p| !p.is_empty()) {
            return Err(CoreError::invalid(
                "profiles",
                "not supported: profiles are updated from what the messages say (use extract_memory_type to choose the types)",
            ));
        }
        let t = self.extract_trigger.unwrap_or_default();
        let trigger = ExtractTrigger::from_parts(t.token_count, t.message_count, t.wait_timeout, default_trigger)?;
        let mut meta = parse_metadata(self.metadata.unwrap_or_default())?;
        let name_of = |k: &str| meta.extra.get(k).and_then(Value::as_str).map(str::to_string);
        let (user_name, assistant_name) = (name_of("default_user_name"), name_of("default_assistant_name"));
        let default_time = match meta.extra.get("time") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) if n.is_i64() => n.as_i64(),
            Some(other) => {
                return Err(CoreError::invalid(
                    "metadata.time",
                    format!("must be milliseconds since the epoch, got {other}"),
                ));
            }
        };
        let mut messages = Vec::with_capacity(self.messages.len());
        for (i, m) in self.messages.into_iter().enumerate() {
            let role = Role::parse(&m.role).ok_or_else(|| {
                CoreError::invalid(
                    format!("messages[{i}].role"),
                    format!("must be one of user, assistant, system, tool; got {:?}", m.role),
                )
            })?;
            // A group chat: a user message may speak for another user (its events are theirs too).
            let other_speaker = match (&m.role_id, role) {
                (None, _) => None,
                (Some(id), Role::User) if meta.user_id.as_ref() != Some(id) => Some(id.clone()),
                (Some(id), Role::Assistant) if meta.assistant_id.as_ref() != Some(id) => {
                    return Err(CoreError::invalid(
                        format!("messages[{i}].role_id"),
                        format!(
                            "{id:?} is not the conversation's assistant (metadata.default_assistant_id): one assistant per conversation"
                        ),
                    ));
                }
                (Some(_), Role::User | Role::Assistant) => None,
                (Some(_), _) => {
                    return Err(CoreError::invalid(
                        format!("messages[{i}].role_id"),
                        "only user and assistant messages have a speaker id",
                    ));
                }
            };
            let name = match (m.name, m.role_name) {
                (Some(a), Some(b)) if a != b => {
                    return Err(CoreError::invalid(format!("messages[{i}].role_name"), "contradicts name; give one"));
                }
                (a, b) => a.or(b).or_else(|| match role {
                    _ if other_speaker.is_some() => other_speaker.clone(),
                    Role::User => user_name.clone(),
                    Role::Assistant => assistant_name.clone(),
                    _ => None,
                }),
            };
            if let (Some(id), Some(name)) = (other_speaker, &name) {
                match meta.speakers.get(name) {
                    Some(known) if *known != id => {
                        return Err(CoreError::invalid(
                            format!("messages[{i}].role_name"),
                            format!("{name:?} already speaks for {known:?} in this request, not {id:?}"),
                        ));
                    }
                    _ => {
                        meta.speakers.insert(name.clone(), id);
                    }
                }
            }
            messages.push(IncomingMessage {
                role,
                content: content_text(m.content, &format!("messages[{i}].content"))?,
                name,
                time: m.time.or(default_time),
                idempotency_key: m.idempotency_key,
            });
        }
        meta.extract_types = self.extract_memory_type.unwrap_or_default().into_iter().map(canonical_type).collect();
        let latest = messages.iter().filter_map(|m| m.time).max();
        meta.ttl = match (self.ttl_absolute, self.ttl_relative) {
            (Some(at), _) => {
                if let Some(t) = latest.filter(|&t| !(1..=MAX_TTL_SECS * 1000).contains(&(at - t))) {
                    return Err(CoreError::invalid(
                        "ttl_absolute",
                        format!("must be after the messages' time ({t}) by at most {MAX_TTL_SECS} s, got {at}"),
                    ));
                }
                Some(EventTtl::Absolute(at))
            }
            (None, Some(secs)) if (1..=MAX_TTL_SECS).contains(&secs) => Some(EventTtl::RelativeSecs(secs)),
            (None, Some(secs)) => {
                return Err(CoreError::invalid(
                    "ttl_relative",
                    format!("must be in 1..={MAX_TTL_SECS} seconds, got {secs}"),
                ));
            }
            (None, None) => None,
        };
        let req = mnemo_core::service::WriteRequest {
            project: self.project_name,
            collection: self.collection_name,
            conversation_id,
            messages,
            trigger,
            meta,
        };
        Ok((req, replace))
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
    for k in ["default_user_name", "default_assistant_name"] {
        get(k)?;
    }
    Ok(ConversationMeta {
        user_id: either("user_id", "default_user_id")?,
        assistant_id: either("assistant_id", "default_assistant_id")?,
        group_id: get("group_id")?,
        scope: get("scope")?,
        extra: m,
        extract_types: vec![],
        ttl: None,
        speakers: Default::default(),
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
    /// Ranks the profiles by how close their text is to it (each answer then has a `score`).
    #[serde(default)]
    pub query: Option<String>,
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
    pub attributes: Option<Map<String, Value>>,
    /// VikingDB's name for the attributes.
    #[serde(default)]
    pub memory_info: Option<Map<String, Value>>,
    /// Replace the user's profile of this type if there is one (otherwise: 409).
    #[serde(default)]
    pub is_upsert: bool,
    /// Profiles belong to a user (and assistant), not a group: refused unless null.
    #[serde(default)]
    pub group_id: Option<String>,
}

/// `attributes`, or VikingDB's `memory_info`: one of them.
pub fn attributes_or_memory_info(
    attributes: Option<Map<String, Value>>,
    memory_info: Option<Map<String, Value>>,
) -> Result<Option<Map<String, Value>>, CoreError> {
    match (attributes, memory_info) {
        (Some(_), Some(_)) => {
            Err(CoreError::invalid("memory_info", "give attributes or memory_info (the same thing), not both"))
        }
        (a, m) => Ok(a.or(m)),
    }
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
    /// VikingDB's name for the attributes (merged like them).
    #[serde(default)]
    pub memory_info: Option<Map<String, Value>>,
    #[serde(default)]
    pub replace_attributes: bool,
}

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

/// `profile/batch_delete`: the profiles matching a filter naming a user or an assistant.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProfileBatchDeleteBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    pub filter: ProfileFilterDto,
}

/// `profile/trigger_update` (VikingDB's TriggerUpdateProfile): re-derive the matching profiles
/// from the sessions they came from.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProfileTriggerBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    /// The profile types to re-derive (all when absent).
    #[serde(default)]
    pub update_profile_type: Option<StrOrList>,
    /// Whose profiles: `user_id` and/or `assistant_id` (one is required).
    pub filters: ProfileFilterDto,
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
        "primary_key": p.id,
        "memory_type": p.profile_type,
        "profile_type": p.profile_type,
        "user_id": p.user_id,
        "assistant_id": p.assistant_id,
        "memory_info": p.attributes,
        "content": p.content,
        "attributes": p.attributes,
        "source_session_ids": p.source_session_ids,
        "history": p.history,
        "created_at": p.created_at,
        "updated_at": p.updated_at,
    })
}

/// A profile found by a search: its `score` when a query ranked it.
pub fn scored_profile_json(p: &Profile, score: Option<f32>) -> Value {
    let mut v = profile_json(p);
    if let Some(score) = score {
        v["score"] = json!(score);
    }
    v
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
        self.into_filter_at("filter")
    }

    pub fn into_filter_at(self, at: &str) -> Result<mnemo_core::model::ProfileFilter, CoreError> {
        Ok(mnemo_core::model::ProfileFilter {
            user_id: self.user_id.unwrap_or_default().into_checked(&format!("{at}.user_id"))?,
            assistant_id: self.assistant_id.unwrap_or_default().into_checked(&format!("{at}.assistant_id"))?,
            profile_type: self
                .profile_type
                .unwrap_or_default()
                .into_checked(&format!("{at}.profile_type"))?
                .into_iter()
                .map(canonical_type)
                .collect(),
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

impl Scoped for CollectionCreate {
    fn project(&self) -> &str {
        &self.project_name
    }

    const REWRITES: bool = true;

    /// VikingDB's body (it names `CollectionName`) becomes mnemo's.
    fn rewrite(v: Map<String, Value>) -> Result<Map<String, Value>, crate::json::RewriteError> {
        use crate::json::RewriteError;
        if !v.contains_key("CollectionName") {
            return Ok(v);
        }
        let viking: VikingCollectionCreate =
            serde_path_to_error::deserialize(Value::Object(v)).map_err(RewriteError::Parse)?;
        viking.into_mnemo().map_err(RewriteError::Invalid)
    }
}

/// Checks `limit` against 1..=5000 (SPEC §2.3), with a default.
pub fn limit(v: Option<i64>, default: u32) -> Result<u32, CoreError> {
    let (lo, hi) = mnemo_core::service::LIMIT_RANGE;
    match v {
        None => Ok(default),
        Some(n) if (lo..=hi).contains(&n) => Ok(n as u32),
        Some(n) => Err(CoreError::invalid("limit", format!("must be an integer in {lo}..={hi}, got {n}"))),
    }
}
