//! `maintenance/run` (on demand, for the caller's project) and `maintenance/list` (recorded runs
//! of a collection), plus the test-only clock control.

use crate::AppState;
use crate::dto::*;
use crate::error::{ApiError, ApiOk, ApiResult};
use crate::json::ApiJson;
use axum::extract::State;
use axum::http::StatusCode;
use mnemo_core::service::Target;
use serde_json::json;

pub async fn run(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<MaintenanceBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let runs =
        s.service.maintain(Some(&body.project_name), "request").await.map_err(|e| ApiError::from_core(rid, e))?;
    let runs: Vec<_> = match &body.collection_name {
        Some(c) => runs.into_iter().filter(|r| &r.collection_name == c).collect(),
        None => runs,
    };
    Ok(ApiOk::new(rid, json!({"runs": runs.iter().map(maintenance_run_json).collect::<Vec<_>>(), "count": runs.len()})))
}

pub async fn list(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<MaintenanceBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let Some(collection) = body.collection_name else {
        return Err(ApiError::bad_request(rid, "collection_name: is required"));
    };
    let limit = limit(body.limit, 20).map_err(|e| ApiError::from_core(rid, e))?;
    let t = Target { project: body.project_name, collection };
    let runs = s.service.maintenance_runs(&t, limit).await.map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(rid, json!({"runs": runs.iter().map(maintenance_run_json).collect::<Vec<_>>(), "count": runs.len()})))
}

/// Moves the server's clock forward — only when `testing.clock_control` is on (never by default),
/// so tests can show expiry and archiving without sleeping for days.
pub async fn advance_clock(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<ClockBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let Some(clock) = &s.clock else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            rid,
            "path: no endpoint /api/memory/admin/clock (enable testing.clock_control)",
        ));
    };
    if !(0..=3_650 * 86_400_000).contains(&body.advance_ms) {
        return Err(ApiError::bad_request(rid, "advance_ms: must be in 0..=315360000000"));
    }
    clock.advance(body.advance_ms);
    Ok(ApiOk::new(rid, json!({"now": s.service.now()})))
}
