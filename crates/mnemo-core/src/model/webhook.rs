//! Webhooks: endpoints a project registers, and the durable outbox of deliveries to them.
//!
//! A change is written to the outbox by the store in the same transaction as the change itself
//! (SQL triggers on both stores), one row per subscribed endpoint; a background loop delivers
//! the rows (signed as Standard Webhooks), retries with backoff, and dead-letters a row after
//! its last attempt.

use super::Millis;
use serde::Serialize;

/// What a webhook may subscribe to, in the order the docs list them.
pub const WEBHOOK_EVENTS: &[&str] = &[
    "memory.created",
    "memory.updated",
    "memory.deleted",
    "memory.superseded",
    "profile.updated",
    "job.failed",
    "user.forgotten",
];

/// Where an endpoint was registered: the config file (re-synced at every start, not deletable
/// through the API) or `webhook/create`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookSource {
    Config,
    Api,
}

impl WebhookSource {
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookSource::Config => "config",
            WebhookSource::Api => "api",
        }
    }

    pub fn parse(s: &str) -> Self {
        if s == "config" { WebhookSource::Config } else { WebhookSource::Api }
    }
}

#[derive(Clone, Debug)]
pub struct NewWebhook {
    pub id: String,
    pub project_name: String,
    pub url: String,
    /// The signing secret, `whsec_` + base64 (Standard Webhooks), or any other string used as is.
    pub secret: String,
    /// Subscribed kinds, each one of [`WEBHOOK_EVENTS`].
    pub events: Vec<String>,
    pub description: String,
    pub source: WebhookSource,
    pub created_at: Millis,
}

impl NewWebhook {
    /// How both stores keep `events`: ` kind kind ` (space-delimited, padded), which their
    /// triggers search for ` <kind> `.
    pub fn events_column(&self) -> String {
        format!(" {} ", self.events.join(" "))
    }
}

/// The kinds of a stored `events` column (see [`NewWebhook::events_column`]).
pub fn parse_events_column(column: &str) -> Vec<String> {
    column.split_whitespace().map(String::from).collect()
}

/// A registered endpoint, with its delivery counts.
#[derive(Clone, Debug, Serialize)]
pub struct Webhook {
    pub webhook_id: String,
    pub project_name: String,
    pub url: String,
    #[serde(skip)]
    pub secret: String,
    pub events: Vec<String>,
    pub description: String,
    pub source: WebhookSource,
    pub created_at: Millis,
    pub pending: u64,
    pub dead: u64,
    pub delivered: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryState {
    Pending,
    Delivered,
    Dead,
}

impl DeliveryState {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Dead => "dead",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => DeliveryState::Pending,
            "delivered" => DeliveryState::Delivered,
            "dead" => DeliveryState::Dead,
            _ => return None,
        })
    }
}

/// One outbox row: a change to announce to one endpoint.
#[derive(Clone, Debug, Serialize)]
pub struct Delivery {
    /// The outbox row id; the `webhook-id` header is `msg_<id>` (the receiver's idempotency key).
    pub delivery_id: i64,
    pub webhook_id: String,
    /// One of [`WEBHOOK_EVENTS`].
    pub kind: String,
    /// The change as the store recorded it (ids, project and collection, and the content for
    /// created/updated memories and profiles).
    pub data: serde_json::Value,
    pub state: DeliveryState,
    pub attempts: u32,
    pub next_attempt_at: Millis,
    pub last_error: Option<String>,
    pub last_status: Option<u16>,
    pub created_at: Millis,
    pub finished_at: Option<Millis>,
}

/// A delivery claimed for sending, with where and how to sign it.
#[derive(Clone, Debug)]
pub struct ClaimedDelivery {
    pub delivery: Delivery,
    pub url: String,
    pub secret: String,
}

/// How one attempt ended.
#[derive(Clone, Debug)]
pub enum DeliveryOutcome {
    /// The endpoint answered 2xx.
    Delivered { status: u16 },
    /// It did not; `retry_at: None` means that was the last attempt (dead letter).
    Failed { status: Option<u16>, error: String, retry_at: Option<Millis> },
}

#[derive(Clone, Debug, Default)]
pub struct DeliveryFilter {
    pub webhook_id: Option<String>,
    pub state: Option<DeliveryState>,
    pub limit: u32,
}
