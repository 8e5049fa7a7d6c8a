//! `entity/list` and `entity/get`: who and what a user's memory names.

use crate::AppState;
use crate::dto::*;
use crate::error::{ApiError, ApiOk, ApiResult};
use crate::json::ApiJson;
use axum::extract::State;
use mnemo_core::service::{EntityList, Target};
use serde_json::json;

pub async fn list(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<EntityListBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let err = |e| ApiError::from_core(rid, e);
    let req = EntityList {
        target: Target { project: body.project_name, collection: body.collection_name.clone() },
        kind: entity_kind(body.filter.kind.as_deref()).map_err(err)?,
        name: body.filter.name,
        user_id: body.filter.user_id,
        limit: entity_limit(body.limit).map_err(err)?,
    };
    let found = s.service.list_entities(req).await.map_err(err)?;
    let list: Vec<_> = found.iter().map(entity_json).collect();
    Ok(ApiOk::new(rid, json!({"collection_name": body.collection_name, "count": list.len(), "entities": list})))
}

pub async fn get(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<EntityGetBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let err = |e| ApiError::from_core(rid, e);
    let limit = entity_limit(body.limit).map_err(err)?;
    let target = Target { project: body.project_name, collection: body.collection_name };
    let (entity, events, mentions) =
        s.service.entity_events(&target, &body.user_id, &body.entity, limit).await.map_err(err)?;
    let events: Vec<_> = events.iter().map(|e| event_json(e, None)).collect();
    let profile_values: Vec<_> = mentions
        .iter()
        .map(|m| json!({"profile_type": m.profile_type, "attribute": m.attribute, "value": m.value}))
        .collect();
    Ok(ApiOk::new(
        rid,
        json!({"entity": entity_json(&entity), "count": events.len(), "events": events, "profile_values": profile_values}),
    ))
}
