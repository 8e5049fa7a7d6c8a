//! `collection/create|list|info|delete`.

use crate::AppState;
use crate::dto::*;
use crate::error::{ApiError, ApiOk, ApiResult};
use crate::json::ApiJson;
use axum::extract::State;
use serde_json::json;

pub async fn create(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<CollectionCreate>) -> ApiResult {
    let rid = &ctx.request_id;
    let t = mnemo_core::service::Target { project: body.project_name, collection: body.collection_name };
    let c = s
        .service
        .create_collection(
            &t,
            body.description,
            body.event_types,
            body.profile_types,
            mnemo_core::service::CollectionOptions {
                temporary_ttl_days: body.temporary_ttl_days,
                extractor: body.extractor,
                event_ttl_secs: body.event_ttl_secs,
            },
        )
        .await
        .map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(rid, collection_json(&c)))
}

pub async fn list(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<ProjectOnly>) -> ApiResult {
    let rid = &ctx.request_id;
    let cs = s.service.list_collections(&body.project_name).await.map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(rid, json!({"collections": cs.iter().map(collection_json).collect::<Vec<_>>(), "count": cs.len()})))
}

pub async fn info(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<CollectionRef>) -> ApiResult {
    let rid = &ctx.request_id;
    let c = s.service.collection_for_read(&body.target()).await.map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(rid, collection_json(&c)))
}

pub async fn delete(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<CollectionRef>) -> ApiResult {
    let rid = &ctx.request_id;
    s.service.delete_collection(&body.target()).await.map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(rid, json!({"collection_name": body.collection_name, "deleted": true})))
}
