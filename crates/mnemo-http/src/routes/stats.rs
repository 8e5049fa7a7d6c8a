//! `stats` (seed 002 §6.2): what is remembered and what is used, per day.

use crate::AppState;
use crate::dto::*;
use crate::error::{ApiError, ApiOk, ApiResult};
use crate::json::ApiJson;
use axum::extract::State;
use mnemo_core::service::Target;
use serde_json::json;

/// `user/list`: who the collection remembers, most recently active first.
pub async fn users(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<UserListBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let limit = limit(body.limit, 100).map_err(|e| ApiError::from_core(rid, e))?;
    let t = Target { project: body.project_name, collection: body.collection_name.clone() };
    let users = s.service.list_users(&t, body.contains, limit).await.map_err(|e| ApiError::from_core(rid, e))?;
    let list: Vec<_> = users
        .iter()
        .map(|u| {
            json!({"user_id": u.user_id, "event_count": u.events, "conversation_count": u.conversations, "last_active": u.last_active})
        })
        .collect();
    Ok(ApiOk::new(rid, json!({"collection_name": body.collection_name, "count": list.len(), "users": list})))
}

pub async fn stats(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<StatsBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let days = match body.days {
        None => 30,
        Some(d) if (1..=3650).contains(&d) => d as u32,
        Some(d) => return Err(ApiError::bad_request(rid, format!("days: must be an integer in 1..=3650, got {d}"))),
    };
    let t = Target { project: body.project_name, collection: body.collection_name.clone() };
    let st = s.service.memory_stats(&t, body.user_id.clone(), days).await.map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(
        rid,
        json!({
            "collection_name": body.collection_name,
            "user_id": body.user_id,
            "days": days,
            "total_events": st.total_events,
            "never_hit": st.never_hit,
            "new_memories_per_day": st.new_memories_per_day.iter().map(|(d, n)| json!({"day": d, "count": n})).collect::<Vec<_>>(),
            "hits_per_day": st.hits_per_day.iter().map(|(d, n)| json!({"day": d, "hits": n})).collect::<Vec<_>>(),
            "top_hit": st.top_hit.iter().map(|(id, text, n)| json!({"event_id": id, "summary": text, "hit_count": n})).collect::<Vec<_>>(),
            "token_usage": {
                "prompt_tokens": st.jobs_per_day.iter().map(|j| j.4).sum::<u64>(),
                "completion_tokens": st.jobs_per_day.iter().map(|j| j.5).sum::<u64>(),
            },
            "jobs_per_day": st.jobs_per_day.iter().map(|(d, n, done, failed, pt, ct)| json!({
                "day": d, "jobs": n, "done": done, "failed": failed,
                "token_usage": {"prompt_tokens": pt, "completion_tokens": ct}
            })).collect::<Vec<_>>(),
        }),
    ))
}
