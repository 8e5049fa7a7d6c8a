//! Profiles: rows, attribute versions (`keep_history`), and applying an extraction's profile
//! changes.

use crate::collections::collection_by_id;
use crate::rows::{PROFILE_COLS, json, profile_from_row};
use crate::{SqliteStore, backend};
use async_trait::async_trait;
use mnemo_core::model::*;
use mnemo_core::store::StoreResult;
use mnemo_core::store::prelude::*;
use mnemo_core::{StoreError, profile};
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};

pub(crate) fn profile_for(
    conn: &Connection,
    cid: CollectionId,
    ptype: &str,
    user: &str,
    assistant: &str,
) -> StoreResult<Option<Profile>> {
    conn.query_row(
        &format!("SELECT {PROFILE_COLS} FROM profiles WHERE collection_id=?1 AND profile_type=?2 AND user_id=?3 AND assistant_id=?4"),
        params![cid, ptype, user, assistant],
        profile_from_row,
    )
    .optional()
    .map_err(backend)
    .and_then(|p| one_with_history(conn, p))
}

pub(crate) fn profile_by_id(conn: &Connection, cid: CollectionId, id: &str) -> StoreResult<Option<Profile>> {
    conn.query_row(
        &format!("SELECT {PROFILE_COLS} FROM profiles WHERE collection_id=?1 AND id=?2"),
        params![cid, id],
        profile_from_row,
    )
    .optional()
    .map_err(backend)
    .and_then(|p| one_with_history(conn, p))
}

/// Fills in the attribute history of each profile.
pub(crate) fn with_history(conn: &Connection, mut profiles: Vec<Profile>) -> StoreResult<Vec<Profile>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT attribute, value, valid_from, valid_to, session_id FROM profile_history WHERE profile_id=?1 ORDER BY valid_to, id",
        )
        .map_err(backend)?;
    for p in profiles.iter_mut() {
        let rows = stmt
            .query_map([&p.id], |r| {
                Ok(AttributeVersion {
                    attribute: r.get(0)?,
                    value: serde_json::from_str(&r.get::<_, String>(1)?).unwrap_or(serde_json::Value::Null),
                    valid_from: r.get(2)?,
                    valid_to: r.get(3)?,
                    session_id: r.get(4)?,
                })
            })
            .map_err(backend)?;
        p.history = rows.collect::<Result<Vec<_>, _>>().map_err(backend)?;
    }
    Ok(profiles)
}

pub(crate) fn one_with_history(conn: &Connection, p: Option<Profile>) -> StoreResult<Option<Profile>> {
    Ok(match p {
        Some(p) => with_history(conn, vec![p])?.pop(),
        None => None,
    })
}

/// Attribute values and since when they hold (`profiles.attribute_since`).
pub(crate) type Since = serde_json::Map<String, serde_json::Value>;

pub(crate) fn attribute_since(conn: &Connection, id: &str) -> StoreResult<Since> {
    let raw: Option<String> = conn
        .query_row("SELECT attribute_since FROM profiles WHERE id=?1", [id], |r| r.get(0))
        .optional()
        .map_err(backend)?;
    Ok(raw.and_then(|r| serde_json::from_str(&r).ok()).unwrap_or_default())
}

/// Records what a change did to a profile's attributes: since-times of changed attributes, and,
/// for `keep_history` types, the replaced values with their validity end.
pub(crate) struct AttributeChange<'a> {
    before: &'a serde_json::Map<String, serde_json::Value>,
    after: &'a serde_json::Map<String, serde_json::Value>,
    superseded: &'a [(String, serde_json::Value)],
}

pub(crate) fn record_versions(
    conn: &Connection,
    profile_id: &str,
    keep_history: bool,
    change: AttributeChange,
    session_id: Option<&str>,
    now: Millis,
) -> StoreResult<String> {
    let AttributeChange { before, after, superseded } = change;
    let mut since = attribute_since(conn, profile_id)?;
    if keep_history {
        insert_versions(conn, profile_id, &profile::replaced_versions(&since, superseded, session_id, now))?;
    }
    profile::update_since(&mut since, before, after, now);
    Ok(json(&since))
}

fn insert_versions(conn: &Connection, profile_id: &str, versions: &[AttributeVersion]) -> StoreResult<()> {
    let mut ins = conn
        .prepare_cached(
            "INSERT INTO profile_history(profile_id, attribute, value, valid_from, valid_to, session_id) VALUES (?1,?2,?3,?4,?5,?6)",
        )
        .map_err(backend)?;
    for h in versions {
        ins.execute(params![profile_id, h.attribute, json(&h.value), h.valid_from, h.valid_to, h.session_id])
            .map_err(backend)?;
    }
    Ok(())
}

/// Replaces a profile's history and since-times with a re-derivation's; answers the since JSON.
fn replace_versions(
    conn: &Connection,
    profile_id: &str,
    v: &mnemo_core::model::ProfileVersions,
) -> StoreResult<String> {
    conn.execute("DELETE FROM profile_history WHERE profile_id=?1", [profile_id]).map_err(backend)?;
    insert_versions(conn, profile_id, &v.history)?;
    Ok(json(&v.since))
}

pub(crate) fn keeps_history(conn: &Connection, cid: CollectionId, profile_type: &str) -> StoreResult<bool> {
    Ok(collection_by_id(conn, cid)?
        .schema
        .profile_type(profile_type)
        .is_some_and(|t| t.update_mode == mnemo_core::model::ProfileUpdateMode::KeepHistory))
}

/// Applies extracted profile changes to the user's profile of `ptype`, creating it on first use.
pub(crate) fn apply_profile_changes(
    conn: &Connection,
    cid: CollectionId,
    ptype: &str,
    user: &str,
    session_id: &str,
    changes: &[mnemo_core::extract::ProfileChange],
    now: Millis,
) -> StoreResult<()> {
    let existing = profile_for(conn, cid, ptype, user, "")?;
    let Some(f) = profile::fold_session(existing, changes, session_id) else { return Ok(()) };
    let (id, attrs, sources, content) = (&f.id, &f.attributes, &f.source_sessions, &f.content);
    conn.execute(
        "INSERT INTO profiles(id, collection_id, profile_type, user_id, assistant_id, content, attributes, source_sessions, created_at, updated_at)
         VALUES (?1,?2,?3,?4,'',?5,?6,?7,?8,?8)
         ON CONFLICT(id) DO UPDATE SET content=excluded.content, attributes=excluded.attributes,
             source_sessions=excluded.source_sessions, updated_at=excluded.updated_at",
        params![id, cid, ptype, user, content, json(&attrs), json(&sources), now],
    )
    .map_err(backend)?;
    let keep = keeps_history(conn, cid, ptype)?;
    let since = record_versions(
        conn,
        id,
        keep,
        AttributeChange { before: &f.before, after: attrs, superseded: &f.superseded },
        Some(session_id),
        now,
    )?;
    conn.execute("UPDATE profiles SET attribute_since=?2 WHERE id=?1", params![id, since]).map_err(backend)?;
    Ok(())
}

#[async_trait]
impl ProfileStore for SqliteStore {
    async fn insert_profile(&self, p: NewProfile) -> StoreResult<Profile> {
        self.writer
            .write(move |conn| {
                let assistant = p.assistant_id.clone().unwrap_or_default();
                if let Some(existing) = profile_for(conn, p.collection_id, &p.profile_type, &p.user_id, &assistant)? {
                    return Err(StoreError::Conflict(format!(
                        "user_id: user \"{}\" already has a {} profile ({}); use profile/update",
                        p.user_id, p.profile_type, existing.id
                    )));
                }
                let id = new_id("prf");
                conn.execute(
                    "INSERT INTO profiles(id, collection_id, profile_type, user_id, assistant_id, content, attributes, created_at, updated_at)
                     VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?8)",
                    params![id, p.collection_id, p.profile_type, p.user_id, assistant, p.content, json(&p.attributes), p.now],
                )
                .map_err(backend)?;
                profile_by_id(conn, p.collection_id, &id)?.ok_or_else(|| StoreError::backend("inserted profile vanished"))
            })
            .await
    }

    async fn update_profile(
        &self,
        cid: CollectionId,
        id: &str,
        patch: ProfilePatch,
        now: Millis,
    ) -> StoreResult<Profile> {
        let id = id.to_string();
        self.writer
            .write(move |conn| {
                let mut p = profile_by_id(conn, cid, &id)?
                    .ok_or_else(|| StoreError::NotFound(format!("profile_id: no profile \"{id}\"")))?;
                let before = p.attributes.clone();
                let mut patch = patch;
                let rebuilt = patch.versions.take();
                let superseded = profile::apply_patch(&mut p, patch);
                let since = match rebuilt {
                    Some(v) => replace_versions(conn, &id, &v)?,
                    None => {
                        let keep = keeps_history(conn, cid, &p.profile_type)?;
                        let change = AttributeChange { before: &before, after: &p.attributes, superseded: &superseded };
                        record_versions(conn, &id, keep, change, None, now)?
                    }
                };
                conn.execute(
                    "UPDATE profiles SET content=?3, attributes=?4, updated_at=?5, attribute_since=?6, source_sessions=?7
                     WHERE collection_id=?1 AND id=?2",
                    params![cid, id, p.content, json(&p.attributes), now, since, json(&p.source_session_ids)],
                )
                .map_err(backend)?;
                profile_by_id(conn, cid, &id)?.ok_or_else(|| StoreError::backend("updated profile vanished"))
            })
            .await
    }

    async fn delete_profile(&self, cid: CollectionId, id: &str) -> StoreResult<bool> {
        let id = id.to_string();
        self.writer
            .write(move |conn| {
                Ok(conn
                    .execute("DELETE FROM profiles WHERE collection_id=?1 AND id=?2", params![cid, id])
                    .map_err(backend)?
                    > 0)
            })
            .await
    }

    async fn list_profiles(&self, cid: CollectionId, f: ProfileFilter, limit: u32) -> StoreResult<Vec<Profile>> {
        self.read(move |conn| {
            let mut sql = format!("SELECT {PROFILE_COLS} FROM profiles WHERE collection_id=?1");
            let mut args = vec![SqlValue::Integer(cid)];
            for (col, values) in
                [("user_id", &f.user_id), ("assistant_id", &f.assistant_id), ("profile_type", &f.profile_type)]
            {
                if values.is_empty() {
                    continue;
                }
                let mut marks = Vec::new();
                for v in values {
                    args.push(SqlValue::Text(v.clone()));
                    marks.push(format!("?{}", args.len()));
                }
                sql.push_str(&format!(" AND {col} IN ({})", marks.join(",")));
            }
            args.push(SqlValue::Integer(limit as i64));
            sql.push_str(&format!(" ORDER BY updated_at DESC, id LIMIT ?{}", args.len()));
            let mut stmt = conn.prepare(&sql).map_err(backend)?;
            let rows = stmt.query_map(params_from_iter(args.iter()), profile_from_row).map_err(backend)?;
            let profiles = rows.collect::<Result<Vec<_>, _>>().map_err(backend)?;
            with_history(conn, profiles)
        })
        .await
    }
}
