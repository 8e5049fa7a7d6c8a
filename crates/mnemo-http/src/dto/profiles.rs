//! Profile bodies: `profile/search|add|update|delete|batch_delete|trigger` and the profile record
//! as answered.

use super::*;

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
    /// What was true at this time (ms since the epoch): events valid then (superseded ones
    /// included, those begun later left out) and each profile value as it was.
    #[serde(default)]
    pub as_of: Option<i64>,
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
        "since": p.since,
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

#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProfileSearchConfigDto {
    #[serde(default)]
    pub filter: ProfileFilterDto,
    #[serde(default)]
    pub limit: Option<i64>,
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
