//! `event/search|add|update|delete|batch_delete` (SPEC §2.3, seed 001).

use crate::AppState;
use crate::dto::*;
use crate::error::{ApiError, ApiOk, ApiResult};
use crate::json::ApiJson;
use axum::extract::State;
use mnemo_core::CoreError;
use mnemo_core::model::EventPatch;
use mnemo_core::ranking::{TimeDecay, check_custom_weight};
use mnemo_core::service::{AddEventRequest, EventSearch, Target};
use serde_json::json;

pub async fn search(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<EventSearchBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let collection_name = body.collection_name.clone();
    let req = (move || -> Result<EventSearch, CoreError> {
        let decay = match &body.time_decay_config {
            Some(d) => TimeDecay::new(d.weight, d.no_decay_period, 30.0)?,
            None => TimeDecay::NONE,
        };
        Ok(EventSearch {
            target: Target { project: body.project_name, collection: body.collection_name },
            query: body.query.clone(),
            limit: limit(body.limit, 10)?,
            custom_weight: check_custom_weight(body.custom_weight)?,
            similarity_threshold: body.similarity_threshold,
            freshness_days: body.freshness_days,
            include_archived: body.include_archived,
            decay,
            filter: body.filter.into_filter()?,
        })
    })()
    .map_err(|e| ApiError::from_core(rid, e))?;
    let results = s.service.search_events(req).await.map_err(|e| ApiError::from_core(rid, e))?;
    let list: Vec<_> = results.iter().map(scored_event_json).collect();
    Ok(ApiOk::new(
        rid,
        json!({"collection_name": collection_name, "count": list.len(), "result_list": list, "token_usage": 0}),
    ))
}

pub async fn add(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<EventAddBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let req = (|| -> Result<AddEventRequest, CoreError> {
        Ok(AddEventRequest {
            target: Target { project: body.project_name, collection: body.collection_name },
            memory_type: body.event_type,
            user_id: body.user_id.unwrap_or_default().into_checked("user_id")?,
            assistant_id: body.assistant_id.unwrap_or_default().into_checked("assistant_id")?,
            group_id: body.group_id,
            session_id: body.session_id,
            conversation_id: body.conversation_id,
            scope: body.scope,
            class: body.class,
            time: body.time,
            memory_info: body.memory_info,
            ttl_relative: body.ttl_relative,
            ttl_absolute: body.ttl_absolute,
        })
    })()
    .map_err(|e| ApiError::from_core(rid, e))?;
    let e = s.service.add_event(req).await.map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(rid, json!({"event_id": e.id, "event": event_json(&e, None)})))
}

pub async fn update(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<EventUpdateBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let t = Target { project: body.project_name, collection: body.collection_name };
    let patch = EventPatch {
        memory_info: body.memory_info,
        time: body.time,
        group_id: body.group_id,
        scope: body.scope,
        class: body.class,
        status: body.status,
        embedding: None,
    };
    if let Some(st) = &patch.status
        && !["active", "archived", "superseded"].contains(&st.as_str())
    {
        return Err(ApiError::bad_request(
            rid,
            format!("status: must be one of active, archived, superseded; got {st:?}"),
        ));
    }
    let e = s.service.update_event(&t, &body.event_id, patch).await.map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(rid, json!({"event_id": e.id, "event": event_json(&e, None)})))
}

pub async fn delete(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<EventIdBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let t = Target { project: body.project_name, collection: body.collection_name };
    s.service.delete_event(&t, &body.event_id).await.map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(rid, json!({"event_id": body.event_id, "deleted": true})))
}

pub async fn batch_delete(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<BatchDeleteBody>) -> ApiResult {
    let rid = &ctx.request_id;
    match body.delete_type.as_deref() {
        None | Some("full") => {}
        Some(other) => {
            return Err(ApiError::bad_request(rid, format!("delete_type: must be \"full\", got {other:?}")));
        }
    }
    let t = Target { project: body.project_name, collection: body.collection_name };
    let confirm_all = match body.confirm.as_deref() {
        None => false,
        Some("all") => true,
        Some(other) => return Err(ApiError::bad_request(rid, format!("confirm: must be \"all\", got {other:?}"))),
    };
    let filter = body.filter.into_filter().map_err(|e| ApiError::from_core(rid, e))?;
    let mode = mnemo_core::service::BatchDelete { dry_run: body.dry_run, confirm_all };
    let out = s.service.batch_delete_events(&t, filter, mode).await.map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(
        rid,
        if body.dry_run {
            json!({"would_delete": out.count, "event_ids": out.sample_ids, "dry_run": true})
        } else {
            json!({"deleted": out.count})
        },
    ))
}
