//! Webhook bodies: endpoints per project (`webhook/create|list|delete`) and their deliveries
//! (`webhook/deliveries`, `webhook/redeliver`).

use super::default_project;
use crate::json::Scoped;
use mnemo_core::model::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// `webhook/create`: an endpoint of the project. Without `secret` one is generated; the answer
/// shows it once.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookCreateBody {
    #[serde(default = "default_project")]
    pub project_name: String,
    /// http:// or https://; deliveries are POSTed here.
    pub url: String,
    /// Kinds to receive: memory.created, memory.updated, memory.deleted, memory.superseded,
    /// profile.updated, job.failed, user.forgotten. Omitted or empty: all.
    #[serde(default)]
    pub events: Option<Vec<String>>,
    /// The signing secret (8 to 256 characters; `whsec_` + base64 as Standard Webhooks
    /// libraries expect). Omitted: generated.
    #[serde(default)]
    pub secret: Option<String>,
    #[serde(default)]
    pub description: String,
}

/// `webhook/delete`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookIdBody {
    #[serde(default = "default_project")]
    pub project_name: String,
    pub webhook_id: String,
}

/// `webhook/deliveries`: the project's deliveries, newest first.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookDeliveriesBody {
    #[serde(default = "default_project")]
    pub project_name: String,
    #[serde(default)]
    pub webhook_id: Option<String>,
    /// pending, delivered or dead.
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub limit: Option<i64>,
}

/// `webhook/redeliver`: dead deliveries of one endpoint back in the queue — all of them, or
/// the listed `delivery_ids`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookRedeliverBody {
    #[serde(default = "default_project")]
    pub project_name: String,
    pub webhook_id: String,
    #[serde(default)]
    pub delivery_ids: Option<Vec<i64>>,
}

scoped!(WebhookCreateBody, WebhookIdBody, WebhookDeliveriesBody, WebhookRedeliverBody);

pub fn webhook_json(w: &Webhook) -> Value {
    json!({
        "webhook_id": w.webhook_id,
        "project_name": w.project_name,
        "url": w.url,
        "events": w.events,
        "description": w.description,
        "source": w.source,
        "created_at": w.created_at,
        "deliveries": {"pending": w.pending, "delivered": w.delivered, "dead": w.dead},
    })
}

pub fn delivery_json(d: &Delivery) -> Value {
    json!({
        "delivery_id": d.delivery_id,
        "webhook_id": d.webhook_id,
        "message_id": format!("msg_{}", d.delivery_id),
        "type": d.kind,
        "data": d.data,
        "state": d.state,
        "attempts": d.attempts,
        "next_attempt_at": (d.state == DeliveryState::Pending).then_some(d.next_attempt_at),
        "last_error": d.last_error,
        "last_status": d.last_status,
        "created_at": d.created_at,
        "finished_at": d.finished_at,
    })
}
