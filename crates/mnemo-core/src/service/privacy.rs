//! Per-user calls: statistics, export and forget.

use super::*;
use crate::error::{CoreError, CoreResult};

impl Service {
    /// `stats`: new memories and hits per day, the most-hit events, the never-hit count, and
    /// extraction jobs with their token cost per day — for a collection, or one user in it.
    pub async fn memory_stats(&self, t: &Target, user_id: Option<String>, days: u32) -> CoreResult<MemoryStats> {
        if !(1..=3650).contains(&days) {
            return Err(CoreError::invalid("days", format!("must be an integer in 1..=3650, got {days}")));
        }
        if let Some(u) = &user_id {
            check_len("user_id", u, 1, MAX_ID_CHARS)?;
        }
        let c = self.collection_for_read(t).await?;
        Ok(self.store.memory_stats(c.id, user_id, days, self.now()).await?)
    }

    /// `user/list`: the collection's users whose id contains `contains`, most recently active
    /// first, with how many events and conversations each has.
    pub async fn list_users(&self, t: &Target, contains: Option<String>, limit: u32) -> CoreResult<Vec<UserSummary>> {
        if let Some(c) = &contains {
            check_len("contains", c, 1, MAX_ID_CHARS)?;
        }
        let c = self.collection_for_read(t).await?;
        Ok(self.store.list_users(c.id, contains, limit).await?)
    }

    // ------------------------------------------------------------------ privacy

    /// The collections a user-level call covers: one, or every collection of the project.
    pub(super) async fn user_scope(
        &self,
        project: &str,
        collection: Option<&str>,
        user_id: &str,
    ) -> CoreResult<Vec<Collection>> {
        check_len("user_id", user_id, 1, MAX_ID_CHARS)?;
        match collection {
            Some(name) => {
                Ok(vec![self.collection_for_read(&Target { project: project.into(), collection: name.into() }).await?])
            }
            None => {
                validate_name("project_name", project)?;
                Ok(self.store.list_collections(project).await?)
            }
        }
    }

    /// `user/export`: everything stored about a user, per collection.
    pub async fn export_user(
        &self,
        project: &str,
        collection: Option<&str>,
        user_id: &str,
    ) -> CoreResult<Vec<(String, UserData)>> {
        let mut out = Vec::new();
        for c in self.user_scope(project, collection, user_id).await? {
            out.push((c.collection_name.clone(), self.store.export_user(c.id, user_id).await?));
        }
        Ok(out)
    }

    /// `user/forget`: deletes everything stored about a user (rows, vectors, full text), per
    /// collection, each in one transaction. Other users' data is untouched.
    pub async fn forget_user(
        &self,
        project: &str,
        collection: Option<&str>,
        user_id: &str,
    ) -> CoreResult<Vec<(String, ForgetCounts)>> {
        let mut out = Vec::new();
        for c in self.user_scope(project, collection, user_id).await? {
            let n = self.store.forget_user(c.id, user_id).await?;
            tracing::info!(collection = %c.collection_name, ?n, "forgot a user");
            out.push((c.collection_name.clone(), n));
        }
        Ok(out)
    }
}
