//! Profiles: rows, attribute versions (`keep_history`), and applying an extraction's profile
//! changes.

use crate::PgStore;
use crate::collections::collection_by_id;
use crate::rows::{PROFILE_COLS, from_rows, json, profile_from_row};
use crate::sql::Args;
use crate::sql::{
    SqlParam, Tx, backend, begin, begin_read, execute, is_unique_violation, no_nul, query_all, query_opt,
};
use async_trait::async_trait;
use mnemo_core::model::*;
use mnemo_core::store::StoreResult;
use mnemo_core::store::prelude::*;
use mnemo_core::{StoreError, profile};

pub(crate) async fn with_history(tx: &Tx<'_>, mut profiles: Vec<Profile>) -> StoreResult<Vec<Profile>> {
    for p in profiles.iter_mut() {
        let rows = query_all(
            tx,
            "SELECT attribute, value, valid_from, valid_to, session_id FROM profile_history WHERE profile_id=$1 ORDER BY valid_to, id",
            &[&p.id],
        )
        .await?;
        p.history = rows
            .iter()
            .map(|r| AttributeVersion {
                attribute: r.get(0),
                value: serde_json::from_str(r.get::<_, &str>(1)).unwrap_or(serde_json::Value::Null),
                valid_from: r.get(2),
                valid_to: r.get(3),
                session_id: r.get(4),
            })
            .collect();
    }
    Ok(profiles)
}

pub(crate) async fn profiles_where(tx: &Tx<'_>, where_sql: &str, p: &[SqlParam<'_>]) -> StoreResult<Vec<Profile>> {
    let rows = query_all(tx, &format!("SELECT {PROFILE_COLS} FROM profiles WHERE {where_sql}"), p).await?;
    with_history(tx, from_rows(rows, profile_from_row)?).await
}

pub(crate) async fn profile_for(
    tx: &Tx<'_>,
    cid: CollectionId,
    ptype: &str,
    user: &str,
    assistant: &str,
) -> StoreResult<Option<Profile>> {
    Ok(profiles_where(
        tx,
        "collection_id=$1 AND profile_type=$2 AND user_id=$3 AND assistant_id=$4",
        &[&cid, &ptype, &user, &assistant],
    )
    .await?
    .pop())
}

pub(crate) async fn profile_by_id(tx: &Tx<'_>, cid: CollectionId, id: &str) -> StoreResult<Option<Profile>> {
    Ok(profiles_where(tx, "collection_id=$1 AND id=$2", &[&cid, &id]).await?.pop())
}

pub(crate) type Since = serde_json::Map<String, serde_json::Value>;

/// Records what a change did to a profile's attributes (since-times; replaced values for
/// `keep_history` types). The same rules as the embedded store's `record_versions`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn record_versions(
    tx: &Tx<'_>,
    profile_id: &str,
    keep_history: bool,
    before: &serde_json::Map<String, serde_json::Value>,
    after: &serde_json::Map<String, serde_json::Value>,
    superseded: &[(String, serde_json::Value)],
    session_id: Option<&str>,
    now: Millis,
) -> StoreResult<String> {
    let raw = query_opt(tx, "SELECT attribute_since FROM profiles WHERE id=$1", &[&profile_id]).await?;
    let mut since: Since = raw.and_then(|r| serde_json::from_str(r.get::<_, &str>(0)).ok()).unwrap_or_default();
    if keep_history {
        insert_versions(tx, profile_id, &profile::replaced_versions(&since, superseded, session_id, now)).await?;
    }
    profile::update_since(&mut since, before, after, now);
    Ok(json(&since))
}

async fn insert_versions(tx: &Tx<'_>, profile_id: &str, versions: &[AttributeVersion]) -> StoreResult<()> {
    for h in versions {
        execute(
            tx,
            "INSERT INTO profile_history(profile_id, attribute, value, valid_from, valid_to, session_id) VALUES ($1,$2,$3,$4,$5,$6)",
            &[&profile_id, &h.attribute, &json(&h.value), &h.valid_from, &h.valid_to, &h.session_id],
        )
        .await?;
    }
    Ok(())
}

pub(crate) async fn keeps_history(tx: &Tx<'_>, cid: CollectionId, profile_type: &str) -> StoreResult<bool> {
    Ok(collection_by_id(tx, cid)
        .await?
        .schema
        .profile_type(profile_type)
        .is_some_and(|t| t.update_mode == ProfileUpdateMode::KeepHistory))
}

/// Applies extracted profile changes to the user's profile of `ptype`, creating it on first use.
pub(crate) async fn apply_profile_changes(
    tx: &Tx<'_>,
    cid: CollectionId,
    ptype: &str,
    user: &str,
    session_id: &str,
    changes: &[mnemo_core::extract::ProfileChange],
    now: Millis,
) -> StoreResult<()> {
    let existing = profile_for(tx, cid, ptype, user, "").await?;
    let Some(f) = profile::fold_session(existing, changes, session_id) else { return Ok(()) };
    let (id, attrs, sources, content) = (&f.id, &f.attributes, &f.source_sessions, &f.content);
    execute(
        tx,
        "INSERT INTO profiles(id, collection_id, profile_type, user_id, assistant_id, content, attributes, source_sessions, created_at, updated_at)
         VALUES ($1,$2,$3,$4,'',$5,$6,$7,$8,$8)
         ON CONFLICT(id) DO UPDATE SET content=excluded.content, attributes=excluded.attributes,
             source_sessions=excluded.source_sessions, updated_at=excluded.updated_at",
        &[id, &cid, &ptype, &user, &no_nul(content), &json(attrs), &json(sources), &now],
    )
    .await?;
    let keep = keeps_history(tx, cid, ptype).await?;
    let since = record_versions(tx, id, keep, &f.before, attrs, &f.superseded, Some(session_id), now).await?;
    execute(tx, "UPDATE profiles SET attribute_since=$2 WHERE id=$1", &[id, &since]).await?;
    Ok(())
}

#[async_trait]
impl ProfileStore for PgStore {
    async fn insert_profile(&self, p: NewProfile) -> StoreResult<Profile> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let assistant = p.assistant_id.clone().unwrap_or_default();
        if let Some(existing) = profile_for(&tx, p.collection_id, &p.profile_type, &p.user_id, &assistant).await? {
            return Err(StoreError::Conflict(format!(
                "user_id: user \"{}\" already has a {} profile ({}); use profile/update",
                p.user_id, p.profile_type, existing.id
            )));
        }
        let id = new_id("prf");
        let st = tx
            .prepare_cached(
                "INSERT INTO profiles(id, collection_id, profile_type, user_id, assistant_id, content, attributes, created_at, updated_at)
                 VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$8)",
            )
            .await
            .map_err(backend)?;
        if let Err(e) = tx
            .execute(
                &st,
                &[
                    &id,
                    &p.collection_id,
                    &p.profile_type,
                    &p.user_id,
                    &assistant,
                    &no_nul(&p.content),
                    &json(&p.attributes),
                    &p.now,
                ],
            )
            .await
        {
            return Err(if is_unique_violation(&e) {
                StoreError::Conflict(format!(
                    "user_id: user \"{}\" already has a {} profile; use profile/update",
                    p.user_id, p.profile_type
                ))
            } else {
                backend(e)
            });
        }
        let out = profile_by_id(&tx, p.collection_id, &id)
            .await?
            .ok_or_else(|| StoreError::backend("inserted profile vanished"))?;
        tx.commit().await.map_err(backend)?;
        Ok(out)
    }

    async fn update_profile(
        &self,
        cid: CollectionId,
        id: &str,
        patch: ProfilePatch,
        now: Millis,
    ) -> StoreResult<Profile> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        execute(&tx, "SELECT 1 FROM profiles WHERE collection_id=$1 AND id=$2 FOR UPDATE", &[&cid, &id]).await?;
        let mut p = profile_by_id(&tx, cid, id)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("profile_id: no profile \"{id}\"")))?;
        let before = p.attributes.clone();
        let mut patch = patch;
        let rebuilt = patch.versions.take();
        let superseded = profile::apply_patch(&mut p, patch);
        let since = match rebuilt {
            Some(v) => {
                // A re-derivation's versions replace the stored ones whole.
                execute(&tx, "DELETE FROM profile_history WHERE profile_id=$1", &[&id]).await?;
                insert_versions(&tx, id, &v.history).await?;
                json(&v.since)
            }
            None => {
                let keep = keeps_history(&tx, cid, &p.profile_type).await?;
                record_versions(&tx, id, keep, &before, &p.attributes, &superseded, None, now).await?
            }
        };
        execute(
            &tx,
            "UPDATE profiles SET content=$3, attributes=$4, updated_at=$5, attribute_since=$6, source_sessions=$7
             WHERE collection_id=$1 AND id=$2",
            &[&cid, &id, &no_nul(&p.content), &json(&p.attributes), &now, &since, &json(&p.source_session_ids)],
        )
        .await?;
        let out = profile_by_id(&tx, cid, id).await?.ok_or_else(|| StoreError::backend("updated profile vanished"))?;
        tx.commit().await.map_err(backend)?;
        Ok(out)
    }

    async fn delete_profile(&self, cid: CollectionId, id: &str) -> StoreResult<bool> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let n = execute(&tx, "DELETE FROM profiles WHERE collection_id=$1 AND id=$2", &[&cid, &id]).await?;
        tx.commit().await.map_err(backend)?;
        Ok(n > 0)
    }

    async fn list_profiles(&self, cid: CollectionId, f: ProfileFilter, limit: u32) -> StoreResult<Vec<Profile>> {
        let mut a = Args::default();
        let mut sql = format!("collection_id={}", a.push(cid));
        for (col, values) in
            [("user_id", &f.user_id), ("assistant_id", &f.assistant_id), ("profile_type", &f.profile_type)]
        {
            if !values.is_empty() {
                sql.push_str(&format!(" AND {col} = ANY({})", a.push(values.clone())));
            }
        }
        sql.push_str(&format!(" ORDER BY updated_at DESC, id LIMIT {}", a.push(limit as i64)));
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        profiles_where(&tx, &sql, &a.refs()).await
    }
}
