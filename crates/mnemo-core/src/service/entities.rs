//! `entity/list`, `entity/get` and `event/search`'s `filter.entity`: a user's entities, resolved
//! from the active events that name them (`crate::entities`) when asked. They are derived, not
//! kept in a table of their own: they are exported and forgotten with the events they come from,
//! and always agree with them (an edited or deleted event changes them at once).

use super::*;
use crate::entities::{Entity, Kind, catalog};
use crate::error::{CoreError, CoreResult};

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

    /// `entity/get`: one of a user's entities (by id, name or alias) and its newest `limit` events.
    pub async fn entity_events(
        &self,
        target: &Target,
        user_id: &str,
        entity: &str,
        limit: u32,
    ) -> CoreResult<(Entity, Vec<Event>)> {
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
        Ok((found, events))
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
