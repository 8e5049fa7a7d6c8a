//! `session/streaming_write|add|flush|info` (seed 000).

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
    let (req, _) =
        body.into_request(s.service.config().default_trigger, false).map_err(|e| ApiError::from_core(rid, e))?;
    let conversation_id = req.conversation_id.clone();
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
    let (req, replace) =
        body.into_request(s.service.config().default_trigger, true).map_err(|e| ApiError::from_core(rid, e))?;
    let conversation_id = req.conversation_id.clone();
    let (closed, replaced) = s.service.session_add(req, replace).await.map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(
        rid,
        json!({
            "conversation_id": conversation_id,
            // VikingDB's session: the id it was written under (mnemo's conversation).
            "session_id": if replace { &conversation_id } else { &closed.session_id },
            "extraction_session_id": closed.session_id,
            "replaced": replaced,
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

pub async fn delete(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<ConversationBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let t = Target { project: body.project_name, collection: body.collection_name };
    let n = s.service.delete_conversation(&t, &body.conversation_id).await.map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(rid, json!({"conversation_id": body.conversation_id, "deleted": true, "sessions": n})))
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
                    "sessions": info.sessions.iter().map(session_summary_json).collect::<Vec<_>>(),
                }),
            ))
        }
        (None, Some(sid)) => {
            // mnemo's session id, or VikingDB's (a conversation written by session/add). The
            // collection is looked up first, so a NotFound below is about the session.
            s.service.collection_for_read(&t).await.map_err(|e| ApiError::from_core(rid, e))?;
            let details = match s.service.session_info(&t, &sid).await {
                Ok(d) => vec![d],
                Err(mnemo_core::CoreError::NotFound(m)) => {
                    let conv = s
                        .service
                        .conversation_info(&t, &sid)
                        .await
                        .map_err(|_| ApiError::from_core(rid, mnemo_core::CoreError::NotFound(m)))?;
                    let mut out = Vec::with_capacity(conv.sessions.len());
                    for summary in &conv.sessions {
                        out.push(
                            s.service
                                .session_info(&t, &summary.session_id)
                                .await
                                .map_err(|e| ApiError::from_core(rid, e))?,
                        );
                    }
                    out
                }
                Err(e) => return Err(ApiError::from_core(rid, e)),
            };
            Ok(ApiOk::new(rid, session_detail_json(&sid, &details)))
        }
        _ => Err(ApiError::bad_request(rid, "conversation_id: give exactly one of conversation_id and session_id")),
    }
}

/// One clean shape for a session, VikingDB's names first: `messages`, `event_memory`, `usage`
/// (LLM tokens from the extraction jobs; `embedding_tokens` counts the embedded event texts with
/// the o200k tokenizer, an estimate for a local model), then mnemo's `sessions` and `jobs`.
fn session_detail_json(asked: &str, details: &[mnemo_core::model::SessionDetail]) -> Value {
    let events: Vec<_> = details.iter().flat_map(|d| &d.events).collect();
    let jobs: Vec<_> = details.iter().filter_map(|d| d.job.as_ref()).collect();
    let (prompt, completion) = jobs.iter().fold((0, 0), |(p, c), j| (p + j.prompt_tokens, c + j.completion_tokens));
    let embedded: usize = events.iter().map(|e| mnemo_core::tokens::TokenCounter::count(&e.text())).sum();
    json!({
        "session_id": asked,
        "conversation_id": details.first().map(|d| d.session.conversation_id.clone()),
        "messages": details.iter().flat_map(|d| d.messages.iter().map(message_json)).collect::<Vec<_>>(),
        "event_memory": events.iter().map(|e| event_json(e, None)).collect::<Vec<_>>(),
        "usage": {
            "embedding_tokens": embedded,
            "llm_input_tokens": prompt,
            "llm_output_tokens": completion,
            "llm_input_tokens_details": {"cached_tokens": null},
        },
        "sessions": details.iter().map(|d| session_summary_json(&d.session)).collect::<Vec<_>>(),
        "jobs": jobs.iter().map(|j| job_json(j)).collect::<Vec<_>>(),
    })
}
