//! `entity/list`, `entity/get` and `event/search`'s `filter.entity`: a user's entities, resolved
//! from the active events that name them (`crate::entities`) when asked. They are derived, not
//! kept in a table of their own: they are exported and forgotten with the events they come from,
//! and always agree with them (an edited or deleted event changes them at once).

use super::*;
use crate::entities::{Entity, Kind, catalog};
use crate::error::{CoreError, CoreResult};

/// A profile value that names an entity (by its name or an alias).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileMention {
    pub profile_type: String,
    pub attribute: String,
    pub value: String,
}

/// A user has at most this many profiles read for an entity (one per profile type).
const MAX_PROFILE_TYPES: u32 = 50;

/// The values of `profiles` (strings, and the strings of lists) that name `entity`: its name or
/// an alias of two characters or more that is not a role ("sister" could be another sister),
/// case folded, not inside a longer word ("Max" is not in "maximum"; Chinese has no word breaks,
/// so any occurrence counts).
pub fn profile_mentions(entity: &Entity, profiles: &[Profile]) -> Vec<ProfileMention> {
    let names: Vec<String> = std::iter::once(&entity.name)
        .chain(entity.aliases.iter().filter(|a| !crate::entities::is_role(a)))
        .map(|n| crate::entities::key(n))
        .filter(|n| n.chars().count() >= 2)
        .collect();
    let names_it = |value: &str| {
        let v = value.to_lowercase();
        names.iter().any(|n| {
            v.match_indices(n.as_str()).any(|(at, _)| {
                let before = v[..at].chars().next_back();
                let after = v[at + n.len()..].chars().next();
                let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
                let glued_before = word(before) && n.starts_with(|c: char| c.is_ascii_alphanumeric());
                let glued_after = word(after) && n.ends_with(|c: char| c.is_ascii_alphanumeric());
                !glued_before && !glued_after
            })
        })
    };
    let mut out = Vec::new();
    for p in profiles {
        for (attribute, v) in &p.attributes {
            let values: Vec<&str> = match v {
                serde_json::Value::String(s) => vec![s.as_str()],
                serde_json::Value::Array(items) => items.iter().filter_map(serde_json::Value::as_str).collect(),
                _ => Vec::new(),
            };
            for value in values.into_iter().filter(|v| names_it(v)) {
                out.push(ProfileMention {
                    profile_type: p.profile_type.clone(),
                    attribute: attribute.clone(),
                    value: value.to_string(),
                });
            }
        }
    }
    out
}

/// At most this many of a user's newest events are read to resolve their entities.
pub const ENTITY_SCAN_EVENTS: u32 = 20_000;
pub const MAX_ENTITY_LIMIT: u32 = 1000;

#[derive(Clone, Debug)]
pub struct EntityList {
    pub target: Target,
    pub user_id: String,
    /// Only entities of this kind.
    pub kind: Option<Kind>,
    /// Only entities whose name or an alias contains this (case folded).
    pub name: Option<String>,
    pub limit: u32,
}

impl Service {
    /// `entity/list`: a user's entities, most events first.
    pub async fn list_entities(&self, req: EntityList) -> CoreResult<Vec<Entity>> {
        if !(1..=MAX_ENTITY_LIMIT).contains(&req.limit) {
            return Err(CoreError::invalid(
                "limit",
                format!("must be an integer in 1..={MAX_ENTITY_LIMIT}, got {}", req.limit),
            ));
        }
        let c = self.collection_for_read(&req.target).await?;
        let needle = req.name.as_deref().map(crate::entities::key).filter(|n| !n.is_empty());
        Ok(self
            .entities_of(&c, &req.user_id)
            .await?
            .into_iter()
            .filter(|e| req.kind.is_none_or(|k| e.kind == k))
            .filter(|e| {
                needle.as_deref().is_none_or(|n| {
                    std::iter::once(&e.name).chain(&e.aliases).any(|a| crate::entities::key(a).contains(n))
                })
            })
            .take(req.limit as usize)
            .collect())
    }

    /// `entity/get`: one of a user's entities (by id, name or alias), its newest `limit` events
    /// and the user's current profile values that name it.
    pub async fn entity_events(
        &self,
        target: &Target,
        user_id: &str,
        entity: &str,
        limit: u32,
    ) -> CoreResult<(Entity, Vec<Event>, Vec<ProfileMention>)> {
        if !(1..=MAX_ENTITY_LIMIT).contains(&limit) {
            return Err(CoreError::invalid(
                "limit",
                format!("must be an integer in 1..={MAX_ENTITY_LIMIT}, got {limit}"),
            ));
        }
        let c = self.collection_for_read(target).await?;
        let found = self.entity_named(&c, user_id, entity).await?;
        let ids: Vec<String> = found.event_ids.iter().take(limit as usize).cloned().collect();
        let filter = EventFilter { user_id: vec![user_id.to_string()], event_ids: ids, ..Default::default() };
        let events = self.store.list_events(c.id, filter, limit).await?;
        let p = ProfileFilter { user_id: vec![user_id.to_string()], ..Default::default() };
        let profiles = self.store.list_profiles(c.id, p, MAX_PROFILE_TYPES).await?;
        let mentions = profile_mentions(&found, &profiles);
        Ok((found, events, mentions))
    }

    /// The entity a user's memory knows by this id, name or alias; a 404 when none.
    pub(super) async fn entity_named(&self, c: &Collection, user_id: &str, entity: &str) -> CoreResult<Entity> {
        check_len("entity", entity, 1, MAX_ID_CHARS)?;
        self.entities_of(c, user_id)
            .await?
            .into_iter()
            .find(|e| e.is(entity))
            .ok_or_else(|| CoreError::NotFound(format!("entity {entity:?} of user {user_id:?}")))
    }

    /// Every entity of a user's active events in this collection.
    async fn entities_of(&self, c: &Collection, user_id: &str) -> CoreResult<Vec<Entity>> {
        check_len("user_id", user_id, 1, MAX_ID_CHARS)?;
        let filter = EventFilter { user_id: vec![user_id.to_string()], active_only: true, ..Default::default() };
        let events = self.store.list_events(c.id, filter, ENTITY_SCAN_EVENTS).await?;
        Ok(catalog(user_id, &events))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_values_that_name_an_entity() {
        let wen = Entity {
            entity_id: "ent_1".into(),
            name: "Wen".into(),
            kind: Kind::Person,
            aliases: vec!["sister".into(), "小雨".into()],
            first_seen: 0,
            last_seen: 0,
            event_ids: vec![],
        };
        let attributes = serde_json::json!({
            "family": ["sister Wen (lives in Munich)", "brother Tom", "sister Lina"],
            "best_friend": "Wendy",
            "nickname_of_sibling": "小雨",
            "age": 34,
        });
        let profile = Profile {
            profile_type: "profile_v1".into(),
            attributes: attributes.as_object().unwrap().clone(),
            ..Default::default()
        };
        let got: Vec<(String, String)> =
            profile_mentions(&wen, &[profile]).into_iter().map(|m| (m.attribute, m.value)).collect();
        assert_eq!(
            got,
            vec![
                ("family".to_string(), "sister Wen (lives in Munich)".to_string()),
                ("nickname_of_sibling".to_string(), "小雨".to_string()),
            ],
            "Wendy is not Wen, and another sister is not her"
        );
    }
}
