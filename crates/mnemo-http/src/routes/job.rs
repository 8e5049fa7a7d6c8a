//! `job/list`: extraction jobs, newest first, with state, attempts, last error and timing;
//! `job/retry`: failed jobs back in the queue.

use crate::AppState;
use crate::dto::*;
use crate::error::{ApiError, ApiOk, ApiResult};
use crate::json::ApiJson;
use axum::extract::State;
use mnemo_core::model::{JobFilter, JobState};
use mnemo_core::service::Target;
use serde_json::json;

pub async fn list(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<JobListBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let state = match body.state.as_deref() {
        None => None,
        Some(st) => Some(JobState::parse(st).ok_or_else(|| {
            ApiError::bad_request(rid, format!("state: must be one of queued, running, done, failed; got {st:?}"))
        })?),
    };
    let limit = limit(body.limit, 50).map_err(|e| ApiError::from_core(rid, e))?;
    let t = Target { project: body.project_name, collection: body.collection_name };
    let filter = JobFilter { state, conversation_id: body.conversation_id, session_id: body.session_id, limit };
    let jobs = s.service.list_jobs(&t, filter).await.map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(rid, json!({"jobs": jobs.iter().map(job_json).collect::<Vec<_>>(), "count": jobs.len()})))
}

pub async fn retry(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<JobRetryBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let t = Target { project: body.project_name, collection: body.collection_name };
    let ids = s.service.retry_jobs(&t, body.job_id).await.map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(rid, json!({"retried": ids, "count": ids.len()})))
}
