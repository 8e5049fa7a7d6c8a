//! `event/search|add|update|delete|batch_delete` (seed 001).

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
        let (mut filter, entity) = body.filter.split_entity()?;
        filter.as_of = body.as_of;
        Ok(EventSearch {
            target: Target { project: body.project_name, collection: body.collection_name },
            query: body.query.clone(),
            limit: limit(body.limit, 10)?,
            custom_weight: check_custom_weight(body.custom_weight)?,
            similarity_threshold: body.similarity_threshold,
            freshness_days: body.freshness_days,
            include_archived: body.include_archived,
            decay,
            filter,
            entity,
        })
    })()
    .map_err(|e| ApiError::from_core(rid, e))?;
    let queried = req.query.as_deref().is_some_and(|q| !q.trim().is_empty());
    let answer = s.service.search(req).await.map_err(|e| ApiError::from_core(rid, e))?;
    let list: Vec<_> = answer.results.iter().map(scored_event_json).collect();
    let mut data =
        json!({"collection_name": collection_name, "count": list.len(), "result_list": list, "token_usage": 0});
    if queried {
        semantic_fields(&mut data, answer.full_text_only);
    }
    Ok(ApiOk::new(rid, data))
}

/// A query's answer says whether its semantic half ran: `"semantic": false` and the reason
/// (`semantic_error`) when the query could not be embedded and full text alone ranked it.
pub fn semantic_fields(data: &mut serde_json::Value, full_text_only: Option<String>) {
    data["semantic"] = json!(full_text_only.is_none());
    if let Some(reason) = full_text_only {
        data["semantic_error"] = json!(reason);
    }
}

pub async fn add(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<EventAddBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let (project, collection, item) = body.split();
    let req = add_request(Target { project, collection }, item).map_err(|e| ApiError::from_core(rid, e))?;
    let e = s.service.add_event(req).await.map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(rid, json!({"event_id": e.id, "event": event_json(&e, None)})))
}

pub async fn batch_add(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<EventBatchAddBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let target = Target { project: body.project_name, collection: body.collection_name };
    let reqs = (body.events.into_iter().enumerate())
        .map(|(i, item)| add_request(target.clone(), item).map_err(|e| e.in_item("events", i)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ApiError::from_core(rid, e))?;
    let events = s.service.add_events(&target, reqs).await.map_err(|e| ApiError::from_core(rid, e))?;
    let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
    Ok(ApiOk::new(rid, json!({"count": ids.len(), "event_ids": ids})))
}

fn add_request(target: Target, item: EventAddItem) -> Result<AddEventRequest, CoreError> {
    Ok(AddEventRequest {
        target,
        memory_type: canonical_type(item.event_type),
        user_id: item.user_id.unwrap_or_default().into_checked("user_id")?,
        assistant_id: item.assistant_id.unwrap_or_default().into_checked("assistant_id")?,
        group_id: item.group_id,
        session_id: item.session_id,
        conversation_id: item.conversation_id,
        scope: item.scope,
        class: item.class,
        time: item.time,
        memory_info: item.memory_info,
        ttl_relative: item.ttl_relative,
        ttl_absolute: item.ttl_absolute,
    })
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
        turn_vectors: None,
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

/// `search` (VikingDB's SearchMemory): the profiles and the events matching one query, profiles
/// first (each item says which it is in `memory_category`); scores compare within a kind only.
pub async fn search_memory(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<MemorySearchBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let err = |e| ApiError::from_core(rid, e);
    let t = Target { project: body.project_name, collection: body.collection_name.clone() };
    let c = s.service.collection_for_read(&t).await.map_err(err)?;
    let f = body.filter;
    let list = |v: Option<StrOrList>, name: &str| v.unwrap_or_default().into_checked(&format!("filter.{name}"));
    let user_id = list(f.user_id, "user_id").map_err(err)?;
    let assistant_id = list(f.assistant_id, "assistant_id").map_err(err)?;
    if user_id.is_empty() && assistant_id.is_empty() {
        return Err(err(CoreError::invalid(
            "filter.user_id",
            "at least one of filter.user_id and filter.assistant_id is required",
        )));
    }
    let types: Vec<String> = list(f.memory_type, "memory_type").map_err(err)?.into_iter().map(canonical_type).collect();
    for ty in &types {
        if c.schema.event_type(ty).is_none() && c.schema.profile_type(ty).is_none() {
            return Err(err(CoreError::invalid(
                "filter.memory_type",
                format!("unknown type {ty:?}: not an event or profile type of this collection"),
            )));
        }
    }
    let event_types: Vec<String> = types.iter().filter(|t| c.schema.event_type(t).is_some()).cloned().collect();
    let profile_types: Vec<String> = types.iter().filter(|t| c.schema.profile_type(t).is_some()).cloned().collect();
    let limit = limit(body.limit, 10).map_err(err)?;
    let mut out = Vec::new();
    let profiles_wanted = types.is_empty() || !profile_types.is_empty();
    let events_wanted = types.is_empty() || !event_types.is_empty();
    if profiles_wanted
        && f.group_id.is_none()
        && f.session_id.is_none()
        && f.start_time.is_none()
        && f.end_time.is_none()
    {
        let pf = mnemo_core::model::ProfileFilter {
            user_id: user_id.clone(),
            assistant_id: assistant_id.clone(),
            profile_type: profile_types,
        };
        for (p, score) in
            s.service.search_profiles(&t, pf, body.query.as_deref(), limit, body.as_of).await.map_err(err)?
        {
            let mut v = scored_profile_json(&p, score);
            v["memory_category"] = json!("profile");
            out.push(v);
        }
    }
    if events_wanted {
        let filter = mnemo_core::model::EventFilter {
            user_id,
            assistant_id,
            memory_type: event_types,
            group_id: list(f.group_id, "group_id").map_err(err)?,
            conversation_id: list(f.session_id, "session_id").map_err(err)?,
            start_time: f.start_time,
            end_time: f.end_time,
            as_of: body.as_of,
            ..Default::default()
        };
        let req = EventSearch {
            target: t,
            query: body.query,
            limit,
            custom_weight: check_custom_weight(None).map_err(err)?,
            similarity_threshold: None,
            freshness_days: None,
            include_archived: false,
            decay: TimeDecay::NONE,
            filter,
            entity: None,
        };
        for r in s.service.search_events(req).await.map_err(err)? {
            let mut v = scored_event_json(&r);
            v["memory_category"] = json!("event");
            out.push(v);
        }
    }
    Ok(ApiOk::new(rid, json!({"collection_name": body.collection_name, "count": out.len(), "result_list": out})))
}
