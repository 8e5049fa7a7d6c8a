//! Profile CRUD.

use super::*;
use crate::error::{CoreError, CoreResult};
use serde_json::{Map, Value};

impl Service {
    pub async fn add_profile(
        &self,
        t: &Target,
        profile_type: String,
        user_id: String,
        assistant_id: Option<String>,
        content: Option<String>,
        attributes: Map<String, Value>,
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
}
