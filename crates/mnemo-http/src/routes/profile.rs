//! `profile/search|add|update|delete`.

use crate::AppState;
use crate::dto::*;
use crate::error::{ApiError, ApiOk, ApiResult};
use crate::json::ApiJson;
use axum::extract::State;
use mnemo_core::CoreError;
use mnemo_core::model::{PROFILE_V1, ProfilePatch};
use mnemo_core::service::Target;
use serde_json::json;

pub async fn search(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<ProfileSearchBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let filter = body
        .filter
        .into_filter()
        .and_then(|pf| {
            if pf.user_id.is_empty() && pf.assistant_id.is_empty() {
                return Err(CoreError::invalid(
                    "filter.user_id",
                    "at least one of filter.user_id and filter.assistant_id is required",
                ));
            }
            Ok(pf)
        })
        .map_err(|e| ApiError::from_core(rid, e))?;
    let limit = limit(body.limit, 10).map_err(|e| ApiError::from_core(rid, e))?;
    let t = Target { project: body.project_name, collection: body.collection_name.clone() };
    let ps = s
        .service
        .search_profiles(&t, filter, body.query.as_deref(), limit, body.as_of)
        .await
        .map_err(|e| ApiError::from_core(rid, e))?;
    let list: Vec<_> = ps.iter().map(|(p, score)| scored_profile_json(p, *score)).collect();
    Ok(ApiOk::new(rid, json!({"collection_name": body.collection_name, "count": list.len(), "result_list": list})))
}

pub async fn add(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<ProfileAddBody>) -> ApiResult {
    let rid = &ctx.request_id;
    if body.group_id.is_some() {
        return Err(ApiError::bad_request(
            rid,
            "group_id: profiles belong to a user (and assistant), not a group; leave it out",
        ));
    }
    let t = Target { project: body.project_name, collection: body.collection_name };
    let attributes =
        attributes_or_memory_info(body.attributes, body.memory_info).map_err(|e| ApiError::from_core(rid, e))?;
    let p = s
        .service
        .add_profile(
            &t,
            canonical_type(body.profile_type.unwrap_or_else(|| PROFILE_V1.to_string())),
            body.user_id,
            body.assistant_id,
            body.content,
            attributes.unwrap_or_default(),
            body.is_upsert,
        )
        .await
        .map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(rid, json!({"profile_id": p.id, "profile": profile_json(&p)})))
}

pub async fn update(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<ProfileUpdateBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let t = Target { project: body.project_name, collection: body.collection_name };
    let attributes =
        attributes_or_memory_info(body.attributes, body.memory_info).map_err(|e| ApiError::from_core(rid, e))?;
    let patch = ProfilePatch {
        content: body.content,
        attributes,
        replace_attributes: body.replace_attributes,
        source_session_ids: None,
        versions: None,
    };
    let p = s.service.update_profile(&t, &body.profile_id, patch).await.map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(rid, json!({"profile_id": p.id, "profile": profile_json(&p)})))
}

pub async fn delete(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<ProfileIdBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let t = Target { project: body.project_name, collection: body.collection_name };
    s.service.delete_profile(&t, &body.profile_id).await.map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(rid, json!({"profile_id": body.profile_id, "deleted": true})))
}

pub async fn batch_delete(
    State(s): State<AppState>,
    ApiJson { ctx, body }: ApiJson<ProfileBatchDeleteBody>,
) -> ApiResult {
    let rid = &ctx.request_id;
    let t = Target { project: body.project_name, collection: body.collection_name };
    let filter = body.filter.into_filter().map_err(|e| ApiError::from_core(rid, e))?;
    let n = s.service.batch_delete_profiles(&t, filter).await.map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(rid, json!({"deleted": n})))
}

pub async fn trigger_update(
    State(s): State<AppState>,
    ApiJson { ctx, body }: ApiJson<ProfileTriggerBody>,
) -> ApiResult {
    let rid = &ctx.request_id;
    let t = Target { project: body.project_name, collection: body.collection_name };
    let mut filter = body.filters.into_filter_at("filters").map_err(|e| ApiError::from_core(rid, e))?;
    if let Some(types) = body.update_profile_type {
        let types = types.into_checked("update_profile_type").map_err(|e| ApiError::from_core(rid, e))?;
        filter.profile_type.extend(types.into_iter().map(canonical_type));
    }
    let n = s.service.rederive_profiles(&t, filter).await.map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(rid, json!({"updated": n})))
}
