//! `webhook/*`: a project's endpoints and the deliveries of its outbox.

use crate::AppState;
use crate::dto::*;
use crate::error::{ApiError, ApiOk, ApiResult};
use crate::json::ApiJson;
use axum::extract::State;
use mnemo_core::model::{DeliveryFilter, DeliveryState};
use mnemo_core::service::WebhookSpec;
use serde_json::json;

pub async fn create(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<WebhookCreateBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let spec = WebhookSpec {
        project_name: body.project_name,
        url: body.url,
        secret: body.secret,
        events: body.events,
        description: body.description,
    };
    let (w, secret) = s.service.create_webhook(spec).await.map_err(|e| ApiError::from_core(rid, e))?;
    let mut v = webhook_json(&w);
    v["secret"] = json!(secret);
    Ok(ApiOk::new(rid, v))
}

pub async fn list(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<ProjectOnly>) -> ApiResult {
    let rid = &ctx.request_id;
    let hooks = s.service.list_webhooks(&body.project_name).await.map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(rid, json!({"webhooks": hooks.iter().map(webhook_json).collect::<Vec<_>>(), "count": hooks.len()})))
}

pub async fn delete(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<WebhookIdBody>) -> ApiResult {
    let rid = &ctx.request_id;
    s.service.delete_webhook(&body.project_name, &body.webhook_id).await.map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(rid, json!({"deleted": body.webhook_id})))
}

pub async fn deliveries(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<WebhookDeliveriesBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let state = match body.state.as_deref() {
        None => None,
        Some(st) => Some(DeliveryState::parse(st).ok_or_else(|| {
            ApiError::bad_request(rid, format!("state: must be one of pending, delivered, dead; got {st:?}"))
        })?),
    };
    let limit = limit(body.limit, 50).map_err(|e| ApiError::from_core(rid, e))?;
    let filter = DeliveryFilter { webhook_id: body.webhook_id, state, limit };
    let all = s.service.list_deliveries(&body.project_name, filter).await.map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(rid, json!({"deliveries": all.iter().map(delivery_json).collect::<Vec<_>>(), "count": all.len()})))
}

pub async fn redeliver(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<WebhookRedeliverBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let ids = s
        .service
        .redeliver(&body.project_name, &body.webhook_id, body.delivery_ids)
        .await
        .map_err(|e| ApiError::from_core(rid, e))?;
    Ok(ApiOk::new(rid, json!({"redelivered": ids, "count": ids.len()})))
}
