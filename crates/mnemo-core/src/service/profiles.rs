//! Profile CRUD.

use super::*;
use crate::error::{CoreError, CoreResult};
use serde_json::{Map, Value};

impl Service {
    #[allow(clippy::too_many_arguments)] // a profile's fields; a struct would only rename them
    pub async fn add_profile(
        &self,
        t: &Target,
        profile_type: String,
        user_id: String,
        assistant_id: Option<String>,
        content: Option<String>,
        attributes: Map<String, Value>,
        upsert: bool,
    ) -> CoreResult<Profile> {
        check_len("user_id", &user_id, 1, MAX_ID_CHARS)?;
        let c = self.collection_for_write(t).await?;
        if c.schema.profile_type(&profile_type).is_none() {
            return Err(CoreError::invalid(
                "profile_type",
                format!(
                    "unknown profile type \"{profile_type}\"; this collection has: {}",
                    c.schema.profile_types.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        let mut attributes = attributes;
        attributes.values_mut().for_each(|v| self.config.redaction.apply_json(v));
        let content = match content {
            Some(c) => self.config.redaction.apply(&c).into_owned(),
            None => crate::profile::describe(&attributes),
        };
        if upsert {
            let existing = self
                .store
                .list_profiles(
                    c.id,
                    ProfileFilter {
                        user_id: vec![user_id.clone()],
                        assistant_id: assistant_id.iter().cloned().collect(),
                        profile_type: vec![profile_type.clone()],
                    },
                    LIMIT_RANGE.1 as u32,
                )
                .await?
                .into_iter()
                .find(|p| p.assistant_id == assistant_id);
            if let Some(p) = existing {
                let patch = ProfilePatch {
                    content: Some(content),
                    attributes: Some(attributes),
                    replace_attributes: true,
                    source_session_ids: None,
                    versions: None,
                };
                return Ok(self.store.update_profile(c.id, &p.id, patch, self.now()).await?);
            }
        }
        Ok(self
            .store
            .insert_profile(NewProfile {
                collection_id: c.id,
                profile_type,
                user_id,
                assistant_id,
                content,
                attributes,
                now: self.now(),
            })
            .await?)
    }

    pub async fn update_profile(&self, t: &Target, id: &str, patch: ProfilePatch) -> CoreResult<Profile> {
        validate_id("profile_id", id)?;
        let c = self.collection_for_read(t).await?;
        let mut patch = patch;
        if let Some(content) = patch.content.as_mut() {
            *content = self.config.redaction.apply(content).into_owned();
        }
        if let Some(attrs) = patch.attributes.as_mut() {
            attrs.values_mut().for_each(|v| self.config.redaction.apply_json(v));
        }
        Ok(self.store.update_profile(c.id, id, patch, self.now()).await?)
    }

    pub async fn delete_profile(&self, t: &Target, id: &str) -> CoreResult<()> {
        validate_id("profile_id", id)?;
        let c = self.collection_for_read(t).await?;
        if self.store.delete_profile(c.id, id).await? {
            Ok(())
        } else {
            Err(CoreError::NotFound(format!("profile_id: no profile \"{id}\"")))
        }
    }

    pub async fn list_profiles(&self, t: &Target, filter: ProfileFilter, limit: u32) -> CoreResult<Vec<Profile>> {
        let c = self.collection_for_read(t).await?;
        Ok(self.store.list_profiles(c.id, filter, limit).await?)
    }

    /// The matching profiles, with a `query` ranked by how close each one's text is to it
    /// (cosine of the embeddings; a user has a few profiles, embedded on the spot) and scored.
    pub async fn search_profiles(
        &self,
        t: &Target,
        filter: ProfileFilter,
        query: Option<&str>,
        limit: u32,
        as_of: Option<Millis>,
    ) -> CoreResult<Vec<(Profile, Option<f32>)>> {
        if let Some(t) = as_of {
            check_time("as_of", t)?;
        }
        let c = self.collection_for_read(t).await?;
        let Some(query) = query.map(str::trim).filter(|q| !q.is_empty()) else {
            let list = as_of_time(self.store.list_profiles(c.id, filter, limit).await?, as_of);
            return Ok(list.into_iter().map(|p| (p, None)).collect());
        };
        let list = as_of_time(self.store.list_profiles(c.id, filter, LIMIT_RANGE.1 as u32).await?, as_of);
        if list.is_empty() {
            return Ok(vec![]);
        }
        let embed_err = |e| CoreError::internal_caused("embedding for a profile search", e);
        let q = self.embedder.embed(&[query.to_string()], EmbedKind::Query).await.map_err(embed_err)?;
        let texts: Vec<String> = list.iter().map(|p| format!("{} {}", p.profile_type, p.content)).collect();
        let docs = self.embedder.embed(&texts, EmbedKind::Document).await.map_err(embed_err)?;
        let mut scored: Vec<(Profile, Option<f32>)> = list
            .into_iter()
            .zip(docs)
            .map(|(p, d)| {
                let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt().max(f32::EPSILON);
                let s: f32 = q[0].iter().zip(&d).map(|(a, b)| a * b).sum::<f32>() / (norm(&q[0]) * norm(&d));
                (p, Some(s))
            })
            .collect();
        scored.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal));
        scored.truncate(limit as usize);
        Ok(scored)
    }

    /// Deletes the profiles matching a filter that names at least a user or an assistant.
    pub async fn batch_delete_profiles(&self, t: &Target, filter: ProfileFilter) -> CoreResult<u64> {
        if filter.user_id.is_empty() && filter.assistant_id.is_empty() {
            return Err(CoreError::invalid(
                "filter.user_id",
                "at least one of filter.user_id and filter.assistant_id is required",
            ));
        }
        let c = self.collection_for_read(t).await?;
        let mut n = 0;
        for p in self.store.list_profiles(c.id, filter, LIMIT_RANGE.1 as u32).await? {
            n += self.store.delete_profile(c.id, &p.id).await? as u64;
        }
        Ok(n)
    }

    /// Re-derives the matching profiles from the sessions they cite (VikingDB's
    /// TriggerUpdateProfile): answers how many were re-derived.
    pub async fn rederive_profiles(&self, t: &Target, filter: ProfileFilter) -> CoreResult<u64> {
        if filter.user_id.is_empty() && filter.assistant_id.is_empty() {
            return Err(CoreError::invalid("filters.user_id", "at least one of user_id and assistant_id is required"));
        }
        let c = self.collection_for_write(t).await?;
        let mut n = 0;
        for p in self.store.list_profiles(c.id, filter, LIMIT_RANGE.1 as u32).await? {
            let lock = self.user_lock(c.id, Some(&p.user_id));
            let _guard = lock.lock().await;
            self.rederive(&c, &p, &[]).await?;
            n += 1;
        }
        Ok(n)
    }

    /// Withdraws what the `sessions` (now deleted) changed in the users' profiles: each profile
    /// that cites one is re-derived from the sessions it still cites.
    pub(super) async fn withdraw_from_profiles(
        &self,
        c: &Collection,
        users: Vec<String>,
        sessions: &[String],
    ) -> CoreResult<()> {
        let filter = ProfileFilter { user_id: users, ..Default::default() };
        if filter.user_id.is_empty() {
            return Ok(());
        }
        for p in self.store.list_profiles(c.id, filter, LIMIT_RANGE.1 as u32).await? {
            if !p.source_session_ids.iter().any(|s| sessions.contains(s)) {
                continue;
            }
            // Under the user's lock: an extraction of the same user cannot change the profile
            // between the re-derivation's read and its write.
            let lock = self.user_lock(c.id, Some(&p.user_id));
            let _guard = lock.lock().await;
            let fresh = self
                .store
                .list_profiles(
                    c.id,
                    ProfileFilter {
                        user_id: vec![p.user_id.clone()],
                        profile_type: vec![p.profile_type.clone()],
                        ..Default::default()
                    },
                    LIMIT_RANGE.1 as u32,
                )
                .await?;
            if let Some(p) = fresh.into_iter().find(|f| f.id == p.id) {
                self.rederive(c, &p, sessions).await?;
            }
        }
        Ok(())
    }

    /// Runs the collection's extractor again over each session the profile cites (except
    /// `without`), oldest first, applying only this profile type's changes to an empty profile.
    /// A profile left without sessions is deleted. Hand edits (profile/update) are not replayed.
    async fn rederive(&self, c: &Collection, p: &Profile, without: &[String]) -> CoreResult<()> {
        let extractor = self.extractors.get(c.schema.extractor.as_deref()).cloned().ok_or_else(|| {
            CoreError::invalid("extractor", format!("{:?} is not configured on this server", c.schema.extractor))
        })?;
        let mut current = Profile { attributes: Map::new(), source_session_ids: vec![], history: vec![], ..p.clone() };
        let keep_history =
            c.schema.profile_type(&p.profile_type).is_some_and(|t| t.update_mode == ProfileUpdateMode::KeepHistory);
        let mut versions = crate::model::ProfileVersions::default();
        for sid in p.source_session_ids.iter().filter(|s| !without.contains(s)) {
            let Some(d) = self.store.session_info(c.id, sid).await? else { continue };
            // The session's values hold from when it said them, as when it was first extracted.
            let said = d.messages.iter().map(|m| m.time).max().unwrap_or_else(|| self.now());
            let meta = ConversationMeta {
                user_id: Some(p.user_id.clone()),
                assistant_id: p.assistant_id.clone(),
                ..Default::default()
            };
            let input = crate::extract::ExtractionInput {
                schema: c.schema.clone(),
                session_id: sid.clone(),
                meta,
                messages: d.messages,
                profiles: vec![current.clone()],
                related_events: vec![],
                now: self.now(),
            };
            let out = tokio::time::timeout(self.config.extraction_timeout, extractor.extract(input))
                .await
                .map_err(|_| CoreError::internal("re-deriving a profile: the extractor timed out"))?
                .map_err(|e| CoreError::internal_caused("re-deriving a profile", e))?;
            let changes: Vec<_> = if p.profile_type == PROFILE_V1 {
                out.profile_changes
            } else {
                out.typed_profile_changes
                    .into_iter()
                    .filter(|(t, _)| *t == p.profile_type)
                    .flat_map(|(_, c)| c)
                    .collect()
            };
            let before = current.attributes.clone();
            let applied = crate::profile::apply_changes(&mut current.attributes, &changes);
            if keep_history {
                let replaced = crate::profile::replaced_versions(&versions.since, &applied.superseded, Some(sid), said);
                versions.history.extend(replaced);
            }
            crate::profile::update_since(&mut versions.since, &before, &current.attributes, said);
            current.source_session_ids.push(sid.clone());
        }
        if current.source_session_ids.is_empty() {
            self.store.delete_profile(c.id, &p.id).await?;
            return Ok(());
        }
        let patch = ProfilePatch {
            content: None,
            attributes: Some(current.attributes),
            replace_attributes: true,
            source_session_ids: Some(current.source_session_ids),
            versions: Some(versions),
        };
        self.store.update_profile(c.id, &p.id, patch, self.now()).await?;
        Ok(())
    }
}

/// The profiles as they were at `as_of` ([`crate::profile::as_of`]); one made later with nothing
/// known of then is left out. Unchanged without a time.
pub(crate) fn as_of_time(profiles: Vec<Profile>, as_of: Option<Millis>) -> Vec<Profile> {
    let Some(t) = as_of else { return profiles };
    profiles
        .iter()
        .map(|p| crate::profile::as_of(p, t))
        .filter(|p| p.created_at <= t || !p.attributes.is_empty())
        .collect()
}
