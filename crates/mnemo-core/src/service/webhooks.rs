//! Webhooks: endpoints per project, and the delivery of the outbox the stores fill in the
//! transaction of each change. Deliveries are signed as [Standard Webhooks] (`webhook-id`,
//! `webhook-timestamp`, `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`),
//! retried with exponential backoff and dead-lettered after `max_attempts`; the sender is the
//! [`WebhookSender`] the binary plugs in (HTTP lives outside core).
//!
//! [Standard Webhooks]: https://www.standardwebhooks.com/

use super::*;
use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// How deliveries are attempted.
#[derive(Clone, Debug)]
pub struct WebhookPolicy {
    /// Attempts before a delivery is dead-lettered.
    pub max_attempts: u32,
    /// Wait after the first failed attempt; doubled after each next one, up to `backoff_max`.
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// One attempt's deadline (connect + answer).
    pub timeout: Duration,
    /// Deliveries claimed and sent concurrently per pass.
    pub batch: u32,
    /// Delivered rows are kept this long (visible in `webhook/deliveries`), then pruned.
    pub keep_delivered: Duration,
    /// Refuse endpoints on loopback or private addresses (`webhook/create` only; config may).
    pub allow_private_urls: bool,
}

impl Default for WebhookPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 8,
            backoff_base: Duration::from_secs(5),
            backoff_max: Duration::from_secs(3600),
            timeout: Duration::from_secs(10),
            batch: 32,
            keep_delivered: Duration::from_secs(7 * 86_400),
            allow_private_urls: true,
        }
    }
}

/// Sends one signed request. Implemented over HTTP by the binary's providers.
#[async_trait]
pub trait WebhookSender: Send + Sync {
    /// POSTs `body` with `headers`. `Ok(status)` when the endpoint answered (any status),
    /// `Err(reason)` when it could not be reached or did not answer within `timeout`.
    async fn post(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: String,
        timeout: Duration,
    ) -> Result<u16, String>;
}

/// An endpoint as the config file or `webhook/create` describes it.
#[derive(Clone, Debug)]
pub struct WebhookSpec {
    pub project_name: String,
    pub url: String,
    /// `None`: a new `whsec_` secret is generated (create only).
    pub secret: Option<String>,
    /// `None` or empty: every kind.
    pub events: Option<Vec<String>>,
    pub description: String,
}

/// A new random signing secret: `whsec_` + base64 of 32 random bytes.
pub fn new_webhook_secret() -> String {
    let mut bytes = Vec::with_capacity(32);
    bytes.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    bytes.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    format!("whsec_{}", B64.encode(bytes))
}

/// The `webhook-signature` value for one delivery: `v1,` + base64 HMAC-SHA256 of
/// `{msg_id}.{timestamp}.{body}`, keyed with the secret's base64 part when it starts with
/// `whsec_` (Standard Webhooks), else with the secret's bytes.
pub fn sign_webhook(secret: &str, msg_id: &str, timestamp: i64, body: &str) -> String {
    let key =
        secret.strip_prefix("whsec_").and_then(|b| B64.decode(b).ok()).unwrap_or_else(|| secret.as_bytes().to_vec());
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&key).expect("HMAC takes any key length");
    mac.update(format!("{msg_id}.{timestamp}.{body}").as_bytes());
    format!("v1,{}", B64.encode(mac.finalize().into_bytes()))
}

/// The request body of a delivery: `{type, timestamp, data}`.
pub fn webhook_body(d: &Delivery) -> String {
    let ts = chrono::DateTime::from_timestamp_millis(d.created_at)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    serde_json::json!({"type": d.kind, "timestamp": ts, "data": d.data}).to_string()
}

const MAX_URL_CHARS: usize = 2048;

fn validate_spec(spec: &WebhookSpec, allow_private: bool) -> CoreResult<Vec<String>> {
    validate_name("project_name", &spec.project_name)?;
    let url = spec.url.trim();
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| CoreError::invalid("url", format!("must start with http:// or https://; got {url:?}")))?;
    if url.len() > MAX_URL_CHARS || url.chars().any(char::is_whitespace) {
        return Err(CoreError::invalid("url", format!("must be at most {MAX_URL_CHARS} characters, without spaces")));
    }
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = host.rsplit_once('@').map(|(_, h)| h).unwrap_or(host);
    let name = if host.starts_with('[') {
        host.split(']').next().unwrap_or("").trim_start_matches('[')
    } else {
        host.split(':').next().unwrap_or("")
    };
    if name.is_empty() {
        return Err(CoreError::invalid("url", format!("has no host: {url:?}")));
    }
    if !allow_private && is_private_host(name) {
        return Err(CoreError::invalid(
            "url",
            format!(
                "{name} is a loopback or private address; this server refuses those (webhook_delivery.allow_private_urls)"
            ),
        ));
    }
    if let Some(s) = &spec.secret
        && !(8..=256).contains(&s.chars().count())
    {
        return Err(CoreError::invalid("secret", "must be 8 to 256 characters"));
    }
    if spec.description.chars().count() > 1000 {
        return Err(CoreError::invalid("description", "must be at most 1000 characters"));
    }
    let events = match &spec.events {
        None => WEBHOOK_EVENTS.iter().map(|s| s.to_string()).collect(),
        Some(v) if v.is_empty() => WEBHOOK_EVENTS.iter().map(|s| s.to_string()).collect(),
        Some(v) => {
            let mut out: Vec<String> = Vec::new();
            for (i, e) in v.iter().enumerate() {
                if !WEBHOOK_EVENTS.contains(&e.as_str()) {
                    return Err(CoreError::invalid(
                        format!("events[{i}]"),
                        format!("must be one of {}; got {e:?}", WEBHOOK_EVENTS.join(", ")),
                    ));
                }
                if !out.contains(e) {
                    out.push(e.clone());
                }
            }
            out
        }
    };
    Ok(events)
}

fn is_private_host(name: &str) -> bool {
    if name.eq_ignore_ascii_case("localhost") || name.ends_with(".localhost") {
        return true;
    }
    match name.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => {
            ip.is_loopback() || ip.is_private() || ip.is_link_local() || ip.is_unspecified()
        }
        Ok(std::net::IpAddr::V6(ip)) => {
            ip.is_loopback() || ip.is_unspecified() || (ip.segments()[0] & 0xfe00) == 0xfc00
        }
        Err(_) => false,
    }
}

/// A config endpoint's id: the same for the same project and URL, so it keeps its pending
/// deliveries across restarts.
fn config_webhook_id(project: &str, url: &str) -> String {
    use sha2::Digest;
    let h = Sha256::digest(format!("{project}\n{url}").as_bytes());
    format!("wh_cfg_{}", h[..8].iter().map(|b| format!("{b:02x}")).collect::<String>())
}

impl Service {
    /// Plugs in the HTTP sender; without one, deliveries stay in the outbox.
    pub fn set_webhook_sender(&self, sender: Arc<dyn WebhookSender>) {
        let _ = self.webhook_sender.set(sender);
    }

    /// Registers an endpoint through the API. Returns it and its signing secret (shown once).
    pub async fn create_webhook(&self, spec: WebhookSpec) -> CoreResult<(Webhook, String)> {
        let events = validate_spec(&spec, self.config.webhooks.allow_private_urls)?;
        let secret = spec.secret.clone().unwrap_or_else(new_webhook_secret);
        let w = NewWebhook {
            id: format!("wh_{}", uuid::Uuid::now_v7().simple()),
            project_name: spec.project_name,
            url: spec.url.trim().to_string(),
            secret: secret.clone(),
            events,
            description: spec.description,
            source: WebhookSource::Api,
            created_at: self.now(),
        };
        Ok((self.store.upsert_webhook(w).await?, secret))
    }

    /// Makes the config file's endpoints the registered config endpoints (at start).
    pub async fn sync_config_webhooks(&self, specs: Vec<WebhookSpec>) -> CoreResult<()> {
        let mut hooks = Vec::new();
        for (i, spec) in specs.into_iter().enumerate() {
            let events = validate_spec(&spec, true).map_err(|e| e.in_item("webhooks", i))?;
            let secret = spec.secret.clone().ok_or_else(|| {
                CoreError::invalid(format!("webhooks[{i}].secret"), "is required (secret or secret_env)")
            })?;
            hooks.push(NewWebhook {
                id: config_webhook_id(&spec.project_name, spec.url.trim()),
                project_name: spec.project_name,
                url: spec.url.trim().to_string(),
                secret,
                events,
                description: spec.description,
                source: WebhookSource::Config,
                created_at: self.now(),
            });
        }
        Ok(self.store.sync_config_webhooks(hooks).await?)
    }

    /// Deliveries of every project's endpoints: (pending, delivered, dead), for `/metrics`.
    pub async fn webhook_delivery_totals(&self) -> CoreResult<(u64, u64, u64)> {
        let hooks = self.store.list_webhooks(None).await?;
        Ok(hooks.iter().fold((0, 0, 0), |(p, d, x), w| (p + w.pending, d + w.delivered, x + w.dead)))
    }

    pub async fn list_webhooks(&self, project: &str) -> CoreResult<Vec<Webhook>> {
        Ok(self.store.list_webhooks(Some(project)).await?)
    }

    /// Deletes an API-registered endpoint and its deliveries.
    pub async fn delete_webhook(&self, project: &str, id: &str) -> CoreResult<()> {
        let hooks = self.store.list_webhooks(Some(project)).await?;
        match hooks.iter().find(|w| w.webhook_id == id) {
            None => Err(CoreError::NotFound(format!("webhook_id: no webhook {id:?} in project {project:?}"))),
            Some(w) if w.source == WebhookSource::Config => Err(CoreError::invalid(
                "webhook_id",
                format!("{id:?} is defined in the config file (webhooks:); remove it there"),
            )),
            Some(_) => {
                self.store.delete_webhook(project, id).await?;
                Ok(())
            }
        }
    }

    pub async fn list_deliveries(&self, project: &str, filter: DeliveryFilter) -> CoreResult<Vec<Delivery>> {
        Ok(self.store.list_deliveries(project, filter).await?)
    }

    /// Dead deliveries back in the queue (all of the endpoint's, or the listed ones).
    pub async fn redeliver(&self, project: &str, webhook_id: &str, ids: Option<Vec<i64>>) -> CoreResult<Vec<i64>> {
        if !self.store.list_webhooks(Some(project)).await?.iter().any(|w| w.webhook_id == webhook_id) {
            return Err(CoreError::NotFound(format!("webhook_id: no webhook {webhook_id:?} in project {project:?}")));
        }
        Ok(self.store.redeliver(project, webhook_id, ids, self.now()).await?)
    }

    /// The wait before attempt `attempts + 1`, after `attempts` failed ones.
    fn webhook_backoff(&self, attempts: u32) -> Duration {
        let p = &self.config.webhooks;
        let exp = p.backoff_base.saturating_mul(1u32 << attempts.saturating_sub(1).min(20));
        let capped = exp.min(p.backoff_max);
        // ±20 % jitter, so endpoints coming back are not hit by every retry at once.
        let r = uuid::Uuid::new_v4().as_bytes()[0] as f64 / 255.0;
        capped.mul_f64(0.8 + 0.4 * r)
    }

    /// One delivery pass: claims the due deliveries, sends them concurrently, records each
    /// outcome. Returns how many were attempted.
    pub async fn deliver_webhooks_once(&self) -> CoreResult<usize> {
        let Some(sender) = self.webhook_sender.get().cloned() else { return Ok(0) };
        let p = self.config.webhooks.clone();
        let now = self.now();
        // A claim outlives one attempt's deadline: an unfinished claim is a crashed sender's.
        let lease_until = now + (p.timeout.as_millis() as Millis) * 2 + 5_000;
        let claimed = self.store.claim_deliveries(now, lease_until, p.batch).await?;
        let n = claimed.len();
        let mut set = tokio::task::JoinSet::new();
        for c in claimed {
            let sender = sender.clone();
            let timeout = p.timeout;
            set.spawn(async move {
                let body = webhook_body(&c.delivery);
                let msg_id = format!("msg_{}", c.delivery.delivery_id);
                let ts = chrono::Utc::now().timestamp();
                let headers = vec![
                    ("content-type".to_string(), "application/json".to_string()),
                    ("webhook-id".to_string(), msg_id.clone()),
                    ("webhook-timestamp".to_string(), ts.to_string()),
                    ("webhook-signature".to_string(), sign_webhook(&c.secret, &msg_id, ts, &body)),
                ];
                let result = sender.post(&c.url, &headers, body, timeout).await;
                (c.delivery, result)
            });
        }
        while let Some(joined) = set.join_next().await {
            let Ok((d, result)) = joined else { continue };
            let attempts = d.attempts + 1;
            let failed = |status: Option<u16>, error: String| DeliveryOutcome::Failed {
                status,
                error,
                retry_at: (attempts < p.max_attempts)
                    .then(|| self.now() + self.webhook_backoff(attempts).as_millis() as Millis),
            };
            let outcome = match result {
                Ok(status) if (200..300).contains(&status) => DeliveryOutcome::Delivered { status },
                Ok(status) => failed(Some(status), format!("the endpoint answered HTTP {status}")),
                Err(e) => failed(None, e),
            };
            if let DeliveryOutcome::Failed { retry_at: None, error, .. } = &outcome {
                tracing::warn!(delivery = d.delivery_id, webhook = %d.webhook_id, kind = %d.kind, attempts, %error, "webhook delivery dead-lettered");
            }
            self.store.finish_delivery(d.delivery_id, outcome, self.now()).await?;
        }
        Ok(n)
    }

    /// Spawns the delivery loop (and the pruning of old delivered rows).
    pub(super) fn spawn_webhooks(
        self: &Arc<Self>,
        shutdown: &tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        let (svc, mut stop) = (self.clone(), shutdown.clone());
        tokio::spawn(async move {
            let mut last_prune: Millis = 0;
            loop {
                if *stop.borrow() {
                    break;
                }
                let busy = match svc.deliver_webhooks_once().await {
                    Ok(n) => n as u32 >= svc.config.webhooks.batch,
                    Err(e) => {
                        tracing::warn!(error = %e, "webhook delivery pass failed");
                        false
                    }
                };
                let now = svc.now();
                if now - last_prune > 3_600_000 {
                    last_prune = now;
                    let before = now - svc.config.webhooks.keep_delivered.as_millis() as Millis;
                    if let Err(e) = svc.store.prune_deliveries(before).await {
                        tracing::warn!(error = %e, "pruning delivered webhooks failed");
                    }
                }
                if busy {
                    continue;
                }
                tokio::select! {
                    _ = stop.changed() => {}
                    _ = tokio::time::sleep(svc.config.poll_interval.min(Duration::from_millis(500))) => {}
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_matches_the_standard_webhooks_reference() {
        // The example of the Standard Webhooks spec's reference libraries.
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = r#"{"test": 2432232314}"#;
        assert_eq!(
            sign_webhook(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn specs_are_validated_field_by_field() {
        let spec = |url: &str, events: Option<Vec<&str>>| WebhookSpec {
            project_name: "default".into(),
            url: url.into(),
            secret: None,
            events: events.map(|v| v.into_iter().map(String::from).collect()),
            description: String::new(),
        };
        assert_eq!(validate_spec(&spec("https://example.com/h", None), false).unwrap().len(), WEBHOOK_EVENTS.len());
        let err = validate_spec(&spec("ftp://x", None), true).unwrap_err().to_string();
        assert!(err.contains("url"), "{err}");
        let err = validate_spec(&spec("https://example.com", Some(vec!["memory.created", "memory.exploded"])), true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("events[1]") && err.contains("memory.exploded"), "{err}");
        for private in [
            "http://127.0.0.1:9/x",
            "http://localhost/x",
            "http://[::1]:80/",
            "http://10.1.2.3/",
            "http://u:p@192.168.0.1/",
        ] {
            assert!(validate_spec(&spec(private, None), false).is_err(), "{private}");
            assert!(validate_spec(&spec(private, None), true).is_ok(), "{private}");
        }
    }
}
