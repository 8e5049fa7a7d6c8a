//! Collections: lookup with a short-lived cache, create/list/delete, and the start-up check that
//! every collection was indexed with this server's embedding model.

use super::*;
use crate::error::{CoreError, CoreResult};

impl Service {
    /// Start-up check: every collection was indexed with this server's embedding model, or is
    /// adopted by it now (no model recorded yet). A mismatch is refused with both models named.
    pub async fn check_embedding_model(&self) -> CoreResult<()> {
        let (model, dim) = (self.embedder.model_id(), self.embedder.dimension() as u32);
        for c in self.store.all_collections().await? {
            match (&c.embedding_model, c.embedding_dim) {
                (Some(m), Some(d)) if m == model && d == dim => {}
                (None, _) => self.store.set_collection_embedding(c.id, model, dim).await?,
                (m, d) => {
                    return Err(CoreError::Conflict(format!(
                        "collection \"{}\" in project \"{}\" was indexed with embedding model {} ({} dims), but this server is configured with {model} ({dim} dims); vectors of different models are not comparable. Run `mnemo reindex` (same config) to re-embed it with {model}, or start with the collection's model (the earlier local defaults: embedding.local_model: use-m3+e5-small, or use-m3).",
                        c.collection_name,
                        c.project_name,
                        m.as_deref().unwrap_or("?"),
                        d.map(|d| d.to_string()).unwrap_or_else(|| "?".into())
                    )));
                }
            }
        }
        Ok(())
    }

    /// Collections whose vectors come from another model than this server's (`mnemo reindex`).
    pub async fn collections_to_reindex(&self) -> CoreResult<Vec<Collection>> {
        let (model, dim) = (self.embedder.model_id(), self.embedder.dimension() as u32);
        Ok(self
            .store
            .all_collections()
            .await?
            .into_iter()
            .filter(|c| {
                c.embedding_model.as_deref().is_some_and(|m| m != model) || c.embedding_dim.is_some_and(|d| d != dim)
            })
            .collect())
    }

    /// Marks every collection of this server's model to be embedded again (`mnemo reindex
    /// --all`): each is recorded under another name of the model for the time being, so the
    /// store drops its vectors in that transaction and [`Self::collections_to_reindex`] lists it —
    /// a run stopped midway is finished by the next `mnemo reindex`, as a model change is, and a
    /// server refuses the collection until then. Returns how many.
    pub async fn mark_for_reembedding(&self) -> CoreResult<usize> {
        let (model, dim) = (self.embedder.model_id(), self.embedder.dimension() as u32);
        let mut n = 0;
        for c in self.store.all_collections().await? {
            if c.embedding_model.as_deref() == Some(model) {
                self.store.set_collection_embedding(c.id, &format!("{model} (to re-embed)"), dim).await?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Moves a collection to this server's model: records the model (which drops the old
    /// vectors), then embeds every event, calling `progress(done, total)` after each batch.
    /// Resumable: run again (or start the server, whose re-index loop does the same) and it
    /// embeds what is still missing. Returns how many events were embedded.
    pub async fn reindex_collection(
        &self,
        c: &Collection,
        mut progress: impl FnMut(usize, usize),
    ) -> CoreResult<usize> {
        let (model, dim) = (self.embedder.model_id(), self.embedder.dimension() as u32);
        if c.embedding_model.as_deref() != Some(model) || c.embedding_dim != Some(dim) {
            self.store.set_collection_embedding(c.id, model, dim).await?;
        }
        self.forget_collection(&Target { project: c.project_name.clone(), collection: c.collection_name.clone() });
        let total = self.store.memory_stats(c.id, None, 1, self.now()).await?.total_events as usize;
        self.embed_missing(c.id, |done| progress(done, total.max(done))).await
    }

    /// Embeds events that have no vector yet (e.g. written by an older version). Returns how many.
    pub async fn reindex_missing(&self) -> CoreResult<usize> {
        let mut n = 0;
        for c in self.store.all_collections().await? {
            n += self.embed_missing(c.id, |_| {}).await?;
        }
        Ok(n)
    }

    /// Embeds a collection's events that have no vector, a batch at a time, calling
    /// `progress(done)` after each batch. Returns how many.
    async fn embed_missing(&self, cid: CollectionId, mut progress: impl FnMut(usize)) -> CoreResult<usize> {
        let mut done = 0;
        loop {
            let events = self.store.events_missing_vectors(cid, 256).await?;
            if events.is_empty() {
                return Ok(done);
            }
            // The page's texts, then its turns, as batches: a batch spreads over the embedder's
            // sessions (the local model's two), one text at a time kept one of them busy.
            let failed = |e: crate::embed::EmbedError| CoreError::internal(format!("embedding failed: {e}"));
            let texts: Vec<String> = events.iter().map(Event::text).collect();
            let vectors = self.embed_documents(&texts).await.map_err(failed)?;
            let turns = self.turn_vectors(events.iter().map(|e| &e.memory_info)).await.map_err(failed)?;
            for ((e, v), turns) in events.iter().zip(vectors).zip(turns) {
                self.store.set_event_vector(cid, &e.id, v, turns).await?;
                done += 1;
            }
            progress(done);
        }
    }

    /// Embeds the turns of the events an older release stored without turn vectors
    /// ([`crate::turns`]), newest first, a page at a time, until the store has none left to look
    /// at; then records the backfill done. After each page it rests three times as long as the
    /// page took, so it takes at most a quarter of the embedder (on the local model a million
    /// chunks of ~4.5 turns take days; the newest, most asked about, come first). A collection
    /// of another model is passed over (`mnemo reindex` writes both vectors). Nothing happens
    /// while `retrieval.turn_weight` is 0 (the backfill waits for a server that uses them).
    /// Returns how many events got turn vectors.
    pub async fn backfill_turns(&self, pace: bool) -> CoreResult<usize> {
        if self.config.retrieval.turn_weight <= 0.0 {
            return Ok(0);
        }
        let (model, dim) = (self.embedder.model_id(), self.embedder.dimension() as u32);
        let ours: std::collections::HashSet<CollectionId> = self
            .store
            .all_collections()
            .await?
            .into_iter()
            .filter(|c| c.embedding_model.as_deref() == Some(model) && c.embedding_dim == Some(dim))
            .map(|c| c.id)
            .collect();
        let (mut added, mut before) = (0, None);
        loop {
            let started = std::time::Instant::now();
            let Some(mut page) = self.store.events_without_turns(before, 64).await? else { return Ok(added) };
            let Some((_, last)) = page.last() else { break };
            before = Some(last.id.clone());
            page.retain(|(c, _)| ours.contains(c));
            let turns = self
                .turn_vectors(page.iter().map(|(_, e)| &e.memory_info))
                .await
                .map_err(|e| CoreError::Unavailable(format!("embedding failed: {e}")))?;
            for ((c, e), turns) in page.iter().zip(turns) {
                if let Some(turns) = turns
                    && self.store.add_event_turns(*c, &e.id, e.updated_at, turns).await?
                {
                    added += 1;
                }
            }
            if pace {
                tokio::time::sleep(started.elapsed() * 3).await;
            }
        }
        self.store.turns_backfilled().await?;
        Ok(added)
    }

    pub(super) fn new_collection(&self, t: &Target, description: String, schema: CollectionSchema) -> NewCollection {
        NewCollection {
            id: None,
            project_name: t.project.clone(),
            collection_name: t.collection.clone(),
            description,
            schema,
            embedding_model: self.embedder.model_id().to_string(),
            embedding_dim: self.embedder.dimension() as u32,
            created_at: self.now(),
        }
    }

    /// The collection a write goes to: created with the default schema on first use.
    pub async fn collection_for_write(&self, t: &Target) -> CoreResult<Collection> {
        if !self.config.auto_create_collections {
            return self.collection_for_read(t).await;
        }
        match self.collection_for_read(t).await {
            Err(CoreError::NotFound(_)) => Ok(self
                .store
                .ensure_collection(self.new_collection(t, String::new(), CollectionSchema::default()))
                .await?),
            other => other,
        }
    }

    /// The collection a read goes to: it must exist.
    pub async fn collection_for_read(&self, t: &Target) -> CoreResult<Collection> {
        validate_names(t)?;
        let key = (t.project.clone(), t.collection.clone());
        let now = self.now();
        if let Some((at, c)) = self.collections.read().expect("collection cache").get(&key)
            && now - at < COLLECTION_CACHE_MS
        {
            return Ok(c.clone());
        }
        let c = self.store.get_collection(&t.project, &t.collection).await?.ok_or_else(|| {
            CoreError::NotFound(format!(
                "collection_name: no collection \"{}\" in project \"{}\" (it is created by the first write, or by collection/create)",
                t.collection, t.project
            ))
        })?;
        self.collections.write().expect("collection cache").insert(key, (now, c.clone()));
        Ok(c)
    }

    pub(super) fn forget_collection(&self, t: &Target) {
        self.collections.write().expect("collection cache").remove(&(t.project.clone(), t.collection.clone()));
    }

    pub async fn create_collection(
        &self,
        t: &Target,
        description: String,
        event_types: Vec<EventTypeDef>,
        profile_types: Vec<ProfileTypeDef>,
        options: CollectionOptions,
    ) -> CoreResult<Collection> {
        let CollectionOptions { temporary_ttl_days, extractor, event_ttl_secs } = options;
        validate_names(t)?;
        if let Some(s) = event_ttl_secs
            && !(1..=315_576_000).contains(&s)
        {
            return Err(CoreError::invalid("event_ttl_secs", format!("must be in 1..=315576000 seconds, got {s}")));
        }
        validate_schema(&event_types, &profile_types)?;
        if let Some(name) = &extractor
            && self.extractors.get(Some(name)).is_none()
        {
            return Err(CoreError::invalid(
                "extractor",
                format!(
                    "\"{name}\" is not configured on this server (configured: {})",
                    self.extractors.names().join(", ")
                ),
            ));
        }
        if let Some(d) = temporary_ttl_days
            && !(d > 0.0 && d <= 36_500.0)
        {
            return Err(CoreError::invalid(
                "temporary_ttl_days",
                format!("must be a number of days in (0,36500], got {d}"),
            ));
        }
        let mut schema = CollectionSchema::with_builtins(event_types, profile_types);
        schema.temporary_ttl_days = temporary_ttl_days;
        schema.extractor = extractor;
        schema.event_ttl_secs = event_ttl_secs;
        Ok(self.store.create_collection(self.new_collection(t, description, schema)).await?)
    }

    pub async fn list_collections(&self, project: &str) -> CoreResult<Vec<Collection>> {
        Ok(self.store.list_collections(project).await?)
    }

    pub async fn delete_collection(&self, t: &Target) -> CoreResult<()> {
        let c = self.collection_for_read(t).await?;
        self.forget_collection(t);
        self.store.delete_collection(c.id).await?;
        self.forget_collection(t);
        Ok(())
    }
}

/// A new collection's settings beside its types.
#[derive(Clone, Debug, Default)]
pub struct CollectionOptions {
    /// Days a `temporary` event lives (the server default when absent).
    pub temporary_ttl_days: Option<f64>,
    /// `rules` or `llm`; the server default when absent.
    pub extractor: Option<String>,
    /// Seconds any other event lives (never expires when absent).
    pub event_ttl_secs: Option<i64>,
}
