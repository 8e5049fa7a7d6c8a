//! Collections and their schema: event and profile types with typed fields, the built-ins.

use super::{CollectionId, EVENT_V1, Millis, PROFILE_V1};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    String,
    Int,
    Float,
    Bool,
    Enum,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FieldDef {
    pub name: String,
    #[serde(rename = "type")]
    pub field_type: FieldType,
    #[serde(default)]
    pub description: String,
    /// Allowed values of an `enum` field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    #[serde(default)]
    pub required: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventTypeDef {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub fields: Vec<FieldDef>,
    /// Importance in [0,1] used by `custom_weight` ranking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    /// A numeric field whose value (clamped to [0,1]) is the importance instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_field: Option<String>,
    /// The class of events of this type unless a write says otherwise: `temporary`,
    /// `conclusion` (the default) or `process`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_class: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProfileUpdateMode {
    #[default]
    Overwrite,
    KeepHistory,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProfileTypeDef {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub fields: Vec<FieldDef>,
    #[serde(default)]
    pub update_mode: ProfileUpdateMode,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CollectionSchema {
    pub event_types: Vec<EventTypeDef>,
    pub profile_types: Vec<ProfileTypeDef>,
    /// TTL of `temporary` events in this collection (days); the server default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temporary_ttl_days: Option<f64>,
    /// The extractor this collection's sessions go to (`rules`, `llm`); the server default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extractor: Option<String>,
    /// How long any other event of this collection lives (seconds; VikingDB's `TtlRelative`);
    /// never expires when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_ttl_secs: Option<i64>,
}

impl CollectionSchema {
    pub fn builtin_event_v1() -> EventTypeDef {
        EventTypeDef {
            name: EVENT_V1.into(),
            description: "Something the user did, said, decided or asked about, in one sentence or two.".into(),
            fields: vec![FieldDef {
                name: "summary".into(),
                field_type: FieldType::String,
                description: "a short summary (about 200 characters at most)".into(),
                values: vec![],
                required: true,
            }],
            weight: None,
            weight_field: None,
            default_class: None,
        }
    }

    pub fn builtin_profile_v1() -> ProfileTypeDef {
        ProfileTypeDef {
            name: PROFILE_V1.into(),
            description: "Stable facts about the user: who they are, where they live, what they like.".into(),
            fields: vec![
                FieldDef {
                    name: "content".into(),
                    field_type: FieldType::String,
                    description: "a short description of the user".into(),
                    values: vec![],
                    required: false,
                },
                FieldDef {
                    name: "attributes".into(),
                    field_type: FieldType::String,
                    description: "name → value".into(),
                    values: vec![],
                    required: false,
                },
            ],
            // What a user's facts were keeps mattering ("lived in Berlin until 2024-04"): the
            // replaced values are kept with their validity, and as-of reads answer from them.
            update_mode: ProfileUpdateMode::KeepHistory,
        }
    }

    /// The built-in schema; custom types are added beside the built-ins, which always exist.
    pub fn with_builtins(mut event_types: Vec<EventTypeDef>, mut profile_types: Vec<ProfileTypeDef>) -> Self {
        if !event_types.iter().any(|t| t.name == EVENT_V1) {
            event_types.insert(0, Self::builtin_event_v1());
        }
        if !profile_types.iter().any(|t| t.name == PROFILE_V1) {
            profile_types.insert(0, Self::builtin_profile_v1());
        }
        Self { event_types, profile_types, temporary_ttl_days: None, extractor: None, event_ttl_secs: None }
    }

    pub fn event_type(&self, name: &str) -> Option<&EventTypeDef> {
        self.event_types.iter().find(|t| t.name == name)
    }

    pub fn profile_type(&self, name: &str) -> Option<&ProfileTypeDef> {
        self.profile_types.iter().find(|t| t.name == name)
    }
}

impl Default for CollectionSchema {
    fn default() -> Self {
        Self::with_builtins(vec![], vec![])
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Collection {
    pub id: CollectionId,
    pub project_name: String,
    pub collection_name: String,
    pub description: String,
    pub schema: CollectionSchema,
    /// The embedding model the collection's vectors come from (None: not yet recorded).
    pub embedding_model: Option<String>,
    pub embedding_dim: Option<u32>,
    pub created_at: Millis,
}

#[derive(Clone, Debug)]
pub struct NewCollection {
    /// The id to create it with; `None` (everywhere but a sharded store's other shards): the
    /// store allocates one.
    pub id: Option<CollectionId>,
    pub project_name: String,
    pub collection_name: String,
    pub description: String,
    pub schema: CollectionSchema,
    pub embedding_model: String,
    pub embedding_dim: u32,
    pub created_at: Millis,
}
