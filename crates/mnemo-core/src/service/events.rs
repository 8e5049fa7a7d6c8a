//! Event CRUD: add (validated against the collection's schema), update, get, delete, list.

use super::*;
use crate::embed::EmbedKind;
use crate::error::{CoreError, CoreResult};
use crate::ranking::{self};
use serde_json::{Map, Value};

#[derive(Clone, Debug)]
pub struct AddEventRequest {
    pub target: Target,
    pub memory_type: String,
    pub user_id: Vec<String>,
    pub assistant_id: Vec<String>,
    pub group_id: Option<String>,
    pub session_id: Option<String>,
    pub conversation_id: Option<String>,
    pub scope: Option<String>,
    pub class: Option<String>,
    pub time: Option<Millis>,
    pub memory_info: Map<String, Value>,
    /// Seconds until a never-hit event may be deleted; overrides the class default.
    pub ttl_relative: Option<i64>,
    /// The moment (ms) after which a never-hit event may be deleted; overrides the class default.
    pub ttl_absolute: Option<Millis>,
}

pub const EVENT_CLASSES: [&str; 3] = ["temporary", "conclusion", "process"];

/// The most events one `event/batch_add` takes.
pub const MAX_BATCH_EVENTS: usize = 500;

/// How `event/batch_delete` runs: for real or as a preview, and whether a filter that selects
/// every event of a user may run.
#[derive(Clone, Copy, Debug, Default)]
pub struct BatchDelete {
    pub dry_run: bool,
    pub confirm_all: bool,
}

/// What a batch delete removed — or, on a dry run, would remove (with up to 100 of the ids).
#[derive(Clone, Debug)]
pub struct BatchDeleted {
    pub count: u64,
    pub sample_ids: Vec<String>,
}

impl Service {
    /// When an event of `class` expires unless hit: `temporary` events after the collection's
    /// `temporary_ttl_days`, else the server's `lifecycle.temporary_ttl_days`; others never.
    pub(super) fn default_expiry(&self, schema: &CollectionSchema, class: Option<&str>, now: Millis) -> Option<Millis> {
        if class == Some("temporary") {
            let ttl = schema
                .temporary_ttl_days
                .map(|d| (d * ranking::DAY_MS) as i64)
                .unwrap_or(self.config.lifecycle.temporary_ttl.as_millis() as i64);
            return Some(now + ttl);
        }
        schema.event_ttl_secs.map(|s| now + s * 1000)
    }

    pub async fn add_event(&self, req: AddEventRequest) -> CoreResult<Event> {
        let c = self.collection_for_write(&req.target).await?;
        let mut e = self.new_event(&c, req, self.now())?;
        // A failing embedding provider must not lose the write: the event is stored without a
        // vector (full text still finds it) and the re-index loop embeds it once the provider is back.
        e.embedding = self.embed_or_defer(vec![event_text(&e.memory_info)]).await.pop().flatten();
        Ok(self.store.insert_event(e).await?)
    }

    /// Adds up to [`MAX_BATCH_EVENTS`] events to one collection: all of them or, if any is
    /// invalid (the error names it: `events[3].memory_info.…`), none. Embedded in one call and
    /// stored in one transaction.
    pub async fn add_events(&self, target: &Target, reqs: Vec<AddEventRequest>) -> CoreResult<Vec<Event>> {
        if reqs.is_empty() || reqs.len() > MAX_BATCH_EVENTS {
            return Err(CoreError::invalid(
                "events",
                format!("must hold 1 to {MAX_BATCH_EVENTS} events, got {}", reqs.len()),
            ));
        }
        let c = self.collection_for_write(target).await?;
        let now = self.now();
        let mut events = reqs
            .into_iter()
            .enumerate()
            .map(|(i, req)| self.new_event(&c, req, now).map_err(|e| e.in_item("events", i)))
            .collect::<CoreResult<Vec<_>>>()?;
        let texts = events.iter().map(|e| event_text(&e.memory_info)).collect();
        for (e, v) in events.iter_mut().zip(self.embed_or_defer(texts).await) {
            e.embedding = v;
        }
        // Turn vectors only beside a vector; an event whose turns fail to embed is stored without
        // them (it ranks by its one vector).
        let with_vector: Vec<usize> = (0..events.len()).filter(|&i| events[i].embedding.is_some()).collect();
        match self.turn_vectors(with_vector.iter().map(|&i| &events[i].memory_info)).await {
            Ok(turns) => with_vector.iter().zip(turns).for_each(|(&i, t)| events[i].turn_vectors = t),
            Err(error) => tracing::warn!(%error, "storing events without their turns' vectors"),
        }
        Ok(self.store.insert_events(events).await?)
    }

    /// The texts' vectors; none for those whose embedding failed (the write goes on; the re-index
    /// loop embeds those events when the provider is back). Embedded 16 at a time, so a large
    /// batch holds a model session no longer than a few stored texts do and queries go between.
    async fn embed_or_defer(&self, texts: Vec<String>) -> Vec<Option<Vec<f32>>> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(16) {
            match self.embed_documents(chunk).await {
                Ok(vs) => out.extend(vs.into_iter().map(Some)),
                Err(error) => {
                    tracing::warn!(%error, "storing events without a vector; they are embedded when the provider recovers");
                    self.vectors_missing.store(true, std::sync::atomic::Ordering::SeqCst);
                    out.extend(chunk.iter().map(|_| None));
                }
            }
        }
        out
    }

    /// A request checked against the collection's schema and limits, redacted, with its class
    /// and expiry decided (no vector yet).
    fn new_event(&self, c: &Collection, req: AddEventRequest, now: Millis) -> CoreResult<NewEvent> {
        let def = c.schema.event_type(&req.memory_type).ok_or_else(|| {
            CoreError::invalid(
                "event_type",
                format!(
                    "unknown event type \"{}\"; this collection has: {}",
                    req.memory_type,
                    c.schema.event_types.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
            )
        })?;
        if req.user_id.is_empty() && req.assistant_id.is_empty() {
            return Err(CoreError::invalid("user_id", "at least one of user_id and assistant_id is required"));
        }
        for (field, ids) in [("user_id", &req.user_id), ("assistant_id", &req.assistant_id)] {
            for id in ids {
                check_len(field, id, 1, MAX_ID_CHARS)?;
            }
        }
        validate_memory_info(def, &req.memory_info, "memory_info", true)?;
        let mut req = req;
        for v in req.memory_info.values_mut() {
            self.config.redaction.apply_json(v);
        }
        let class = validate_class(req.class.clone().or_else(|| def.default_class.clone()))?;
        if let Some(t) = req.time {
            check_time("time", t)?;
        }
        let expires_at = match (req.ttl_absolute, req.ttl_relative) {
            (Some(_), Some(_)) => {
                return Err(CoreError::invalid("ttl_relative", "give ttl_relative or ttl_absolute, not both"));
            }
            (Some(t), None) => {
                check_time("ttl_absolute", t)?;
                Some(t)
            }
            (None, Some(secs)) if (1..=315_360_000).contains(&secs) => Some(now + secs * 1000),
            (None, Some(secs)) => {
                return Err(CoreError::invalid(
                    "ttl_relative",
                    format!("must be seconds in 1..=315360000, got {secs}"),
                ));
            }
            (None, None) => self.default_expiry(&c.schema, Some(&class), now),
        };
        Ok(NewEvent {
            collection_id: c.id,
            memory_type: req.memory_type,
            user_id: req.user_id,
            assistant_id: req.assistant_id,
            group_id: req.group_id,
            session_id: req.session_id,
            conversation_id: req.conversation_id,
            scope: req.scope,
            class,
            time: req.time.unwrap_or(now),
            memory_info: req.memory_info,
            source_message_ids: vec![],
            embedding: None,
            turn_vectors: None,
            expires_at,
            // A write's `time` is when the fact became true.
            valid_from: None,
            now,
        })
    }

    pub async fn update_event(&self, t: &Target, id: &str, patch: EventPatch) -> CoreResult<Event> {
        validate_id("event_id", id)?;
        let c = self.collection_for_read(t).await?;
        let existing = self
            .store
            .get_event(c.id, id)
            .await?
            .ok_or_else(|| CoreError::NotFound(format!("event_id: no event \"{id}\"")))?;
        if let Some(info) = &patch.memory_info {
            let def = c.schema.event_type(&existing.memory_type).ok_or_else(|| {
                CoreError::Conflict(format!("event type \"{}\" is no longer in the schema", existing.memory_type))
            })?;
            validate_memory_info(def, info, "memory_info", false)?;
        }
        if let Some(t) = patch.time {
            check_time("time", t)?;
        }
        let mut patch = EventPatch { class: patch.class.map(|c| validate_class(Some(c))).transpose()?, ..patch };
        if let Some(info) = patch.memory_info.as_mut() {
            info.values_mut().for_each(|v| self.config.redaction.apply_json(v));
        }
        if let Some(info) = &patch.memory_info {
            let mut merged = existing.memory_info.clone();
            merged.extend(info.clone());
            patch.embedding = Some(self.embed_one(&event_text(&merged), EmbedKind::Document).await?);
            patch.turn_vectors = self
                .turn_vectors([&merged])
                .await
                .map_err(|e| CoreError::internal(format!("embedding failed: {e}")))?
                .pop()
                .flatten();
        }
        Ok(self.store.update_event(c.id, id, patch, self.now()).await?)
    }

    pub async fn get_event(&self, t: &Target, id: &str) -> CoreResult<Event> {
        validate_id("event_id", id)?;
        let c = self.collection_for_read(t).await?;
        self.store.get_event(c.id, id).await?.ok_or_else(|| CoreError::NotFound(format!("event_id: no event \"{id}\"")))
    }

    pub async fn delete_event(&self, t: &Target, id: &str) -> CoreResult<()> {
        validate_id("event_id", id)?;
        let c = self.collection_for_read(t).await?;
        if self.store.delete_event(c.id, id).await? {
            Ok(())
        } else {
            Err(CoreError::NotFound(format!("event_id: no event \"{id}\"")))
        }
    }

    pub async fn batch_delete_events(
        &self,
        t: &Target,
        filter: EventFilter,
        mode: BatchDelete,
    ) -> CoreResult<BatchDeleted> {
        if filter.is_empty() {
            return Err(CoreError::invalid(
                "filter",
                "must name at least one of user_id, assistant_id, group_id, event_type, session_id, start_time, end_time (an empty filter would delete the whole collection; use collection/delete for that)",
            ));
        }
        let whole_subject = EventFilter { user_id: vec![], assistant_id: vec![], ..filter.clone() }.is_empty();
        if whole_subject && !mode.confirm_all && !mode.dry_run {
            return Err(CoreError::invalid(
                "confirm",
                "the filter selects every event of its user(s)/assistant(s); narrow it (event_type, group_id, session_id, time…), preview with \"dry_run\": true, or confirm with \"confirm\": \"all\"",
            ));
        }
        validate_time_range(&filter)?;
        let c = self.collection_for_read(t).await?;
        if mode.dry_run {
            let found = self.store.list_events(c.id, filter, u32::MAX).await?;
            let sample_ids = found.iter().take(100).map(|e| e.id.clone()).collect();
            return Ok(BatchDeleted { count: found.len() as u64, sample_ids });
        }
        Ok(BatchDeleted { count: self.store.batch_delete_events(c.id, filter).await?, sample_ids: vec![] })
    }

    /// Events matching the filter, newest first (the no-query form of `event/search`).
    pub async fn list_events(&self, t: &Target, filter: EventFilter, limit: u32) -> CoreResult<Vec<Event>> {
        validate_time_range(&filter)?;
        let c = self.collection_for_read(t).await?;
        Ok(self.store.list_events(c.id, filter, limit).await?)
    }
}
