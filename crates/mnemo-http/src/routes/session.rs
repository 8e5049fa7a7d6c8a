//! `session/streaming_write|add|flush|info` (SPEC §2.1).

use crate::AppState;
use crate::dto::*;
use crate::error::{ApiError, ApiOk, ApiResult};
use crate::json::ApiJson;
use axum::extract::State;
use mnemo_core::model::SessionClosed;
use mnemo_core::service::Target;
use serde_json::{Value, json};

fn closed_json(c: Option<&SessionClosed>) -> Value {
    match c {
        Some(c) => {
            json!({"triggered": true, "session_id": c.session_id, "job_id": c.job_id, "reason": c.reason.as_str()})
        }
        None => json!({"triggered": false, "session_id": null, "job_id": null, "reason": null}),
    }
}

pub async fn streaming_write(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<WriteBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let conversation_id = body.conversation_id.clone();
    let req = body.into_request(s.service.config().default_trigger).map_err(|e| ApiError::from_core(rid, e))?;
    let out = s.service.streaming_write(req).await.map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(
        rid,
        json!({
            "conversation_id": conversation_id,
            "accepted": out.accepted,
            "duplicates": out.duplicates,
            "pending_messages": out.pending_messages,
            "pending_tokens": out.pending_tokens,
            "extraction": closed_json(out.closed.as_ref()),
        }),
    ))
}

pub async fn add(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<WriteBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let conversation_id = body.conversation_id.clone();
    let req = body.into_request(s.service.config().default_trigger).map_err(|e| ApiError::from_core(rid, e))?;
    let closed = s.service.session_add(req).await.map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(
        rid,
        json!({
            "conversation_id": conversation_id,
            "session_id": closed.session_id,
            "job_id": closed.job_id,
            "accepted": closed.message_count,
            "extraction": closed_json(Some(&closed)),
        }),
    ))
}

pub async fn flush(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<ConversationBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let t = Target { project: body.project_name, collection: body.collection_name };
    let closed = s.service.flush(&t, &body.conversation_id).await.map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(rid, json!({"conversation_id": body.conversation_id, "extraction": closed_json(closed.as_ref())})))
}

pub async fn info(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<SessionInfoBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let t = Target { project: body.project_name, collection: body.collection_name };
    match (body.conversation_id, body.session_id) {
        (Some(conv), None) => {
            let info = s.service.conversation_info(&t, &conv).await.map_err(|e| ApiError::from_core(rid, e))?;
            Ok(ApiOk::new(
                rid,
                json!({
                    "conversation_id": info.conversation_id,
                    "metadata": info.meta.extra,
                    "messages": info.short_term.iter().map(message_json).collect::<Vec<_>>(),
                    "pending_messages": info.open_messages,
                    "pending_tokens": info.open_tokens,
                    "idle_deadline": info.idle_deadline,
                    "sessions": info.sessions,
                }),
            ))
        }
        (None, Some(sid)) => {
            let d = s.service.session_info(&t, &sid).await.map_err(|e| ApiError::from_core(rid, e))?;
            let usage = d
                .job
                .as_ref()
                .map(|j| json!({"prompt_tokens": j.prompt_tokens, "completion_tokens": j.completion_tokens}));
            Ok(ApiOk::new(
                rid,
                json!({
                    "session": d.session,
                    "messages": d.messages.iter().map(message_json).collect::<Vec<_>>(),
                    "events": d.events.iter().map(|e| event_json(e, None)).collect::<Vec<_>>(),
                    "job": d.job.as_ref().map(job_json),
                    "token_usage": usage,
                }),
            ))
        }
        _ => Err(ApiError::bad_request(rid, "conversation_id: give exactly one of conversation_id and session_id")),
    }
}
