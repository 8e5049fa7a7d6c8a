//! `user/export` (everything stored about a user, as JSON lines) and `user/forget` (delete all of
//! it). `collection_name` is optional: without it the call covers every collection of the project.

use crate::AppState;
use crate::dto::*;
use crate::error::{ApiError, ApiOk, ApiResult};
use crate::json::ApiJson;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// JSON lines: a header line, then one line per record: `{"kind", "collection_name", "record"}`.
pub async fn export(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<UserBody>) -> Result<Response, ApiError> {
    let rid = &ctx.request_id;
    let data = s
        .service
        .export_user(&body.project_name, body.collection_name.as_deref(), &body.user_id)
        .await
        .map_err(|e| ApiError::from_core(rid, e))?;
    let mut out = String::new();
    let mut line = |v: Value| {
        out.push_str(&v.to_string());
        out.push('\n');
    };
    line(json!({"kind": "export", "user_id": body.user_id, "project_name": body.project_name, "request_id": rid,
                "exported_at": s.service.now(), "collections": data.iter().map(|(c, _)| c).collect::<Vec<_>>()}));
    for (coll, d) in &data {
        let mut rec =
            |kind: &str, record: Value| line(json!({"kind": kind, "collection_name": coll, "record": record}));
        for c in &d.conversations {
            rec("conversation", json!({"conversation_id": c.conversation_id, "metadata": c.meta.extra}));
        }
        for m in &d.messages {
            let mut v = message_json(m);
            v["conversation_id"] = json!(m.conversation_id);
            rec("message", v);
        }
        for x in &d.sessions {
            rec("session", session_summary_json(x));
        }
        for j in &d.jobs {
            rec("job", job_json(j));
        }
        for e in &d.events {
            rec("event", event_json(e, None));
        }
        for p in &d.profiles {
            rec("profile", profile_json(p));
        }
    }
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson; charset=utf-8")], out).into_response())
}

pub async fn forget(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<UserForgetBody>) -> ApiResult {
    let rid = &ctx.request_id;
    if body.dry_run {
        // What forgetting would remove: the user's conversations with their messages, sessions
        // and jobs, the events about the user (an event shared with another user only loses this
        // user), and the user's profiles.
        let data = s
            .service
            .export_user(&body.project_name, body.collection_name.as_deref(), &body.user_id)
            .await
            .map_err(|e| ApiError::from_core(rid, e))?;
        let per: serde_json::Map<String, Value> = data
            .iter()
            .map(|(c, d)| {
                (
                    c.clone(),
                    json!({"conversations": d.conversations.len(), "messages": d.messages.len(),
                           "sessions": d.sessions.len(), "jobs": d.jobs.len(), "events": d.events.len(),
                           "profiles": d.profiles.len()}),
                )
            })
            .collect();
        return Ok(ApiOk::new(rid, json!({"user_id": body.user_id, "dry_run": true, "would_delete": per})));
    }
    let done = s
        .service
        .forget_user(&body.project_name, body.collection_name.as_deref(), &body.user_id)
        .await
        .map_err(|e| ApiError::from_core(rid, e))?;
    let mut total = mnemo_core::model::ForgetCounts::default();
    for (_, n) in &done {
        total += *n;
    }
    let per: serde_json::Map<String, Value> = done.iter().map(|(c, n)| (c.clone(), forget_counts_json(n))).collect();
    Ok(ApiOk::new(rid, json!({"user_id": body.user_id, "deleted": forget_counts_json(&total), "collections": per})))
}
