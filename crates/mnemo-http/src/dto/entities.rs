//! `entity/list` and `entity/get`: a user's entities, and one entity with its events.

use super::*;
use mnemo_core::entities::{Entity, Kind};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EntityListBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    pub filter: EntityFilterDto,
    /// 1..=1000, default 100.
    #[serde(default)]
    pub limit: Option<i64>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EntityFilterDto {
    pub user_id: String,
    /// person, place, organization, pet or other.
    #[serde(default)]
    pub kind: Option<String>,
    /// Entities whose name or an alias contains this.
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EntityGetBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    pub user_id: String,
    /// Its `entity_id`, name or an alias.
    pub entity: String,
    /// Its newest events: 1..=1000, default 100.
    #[serde(default)]
    pub limit: Option<i64>,
}

/// The entity limit: 1..=1000, with a default of 100.
pub fn entity_limit(v: Option<i64>) -> Result<u32, CoreError> {
    let hi = mnemo_core::service::MAX_ENTITY_LIMIT;
    match v {
        None => Ok(100),
        Some(n) if (1..=i64::from(hi)).contains(&n) => Ok(n as u32),
        Some(n) => Err(CoreError::invalid("limit", format!("must be an integer in 1..={hi}, got {n}"))),
    }
}

/// `filter.kind` checked.
pub fn entity_kind(v: Option<&str>) -> Result<Option<Kind>, CoreError> {
    v.map(|k| {
        Kind::parse(k).ok_or_else(|| {
            CoreError::invalid("filter.kind", format!("must be person, place, organization, pet or other, got {k:?}"))
        })
    })
    .transpose()
}

pub fn entity_json(e: &Entity) -> Value {
    json!({
        "entity_id": e.entity_id, "name": e.name, "kind": e.kind.as_str(), "aliases": e.aliases,
        "event_count": e.event_ids.len(), "first_seen": e.first_seen, "last_seen": e.last_seen,
    })
}

scoped!(EntityListBody, EntityGetBody);
