//! The HTTP side of webhook delivery: one POST per attempt, no redirects followed (an endpoint
//! moving elsewhere is an error the operator should see, not a hop to an address nobody
//! registered), a deadline per attempt.

use async_trait::async_trait;
use mnemo_core::service::WebhookSender;
use std::time::Duration;

pub struct HttpWebhookSender {
    client: reqwest::Client,
}

impl HttpWebhookSender {
    pub fn new() -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("mnemo-webhooks/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("webhook HTTP client: {e}"))?;
        Ok(Self { client })
    }
}

#[async_trait]
impl WebhookSender for HttpWebhookSender {
    async fn post(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: String,
        timeout: Duration,
    ) -> Result<u16, String> {
        let mut req = self.client.post(url).timeout(timeout).body(body);
        for (k, v) in headers {
            req = req.header(k, v);
        }
        match req.send().await {
            Ok(resp) => Ok(resp.status().as_u16()),
            Err(e) if e.is_timeout() => Err(format!("no answer within {} ms", timeout.as_millis())),
            Err(e) if e.is_connect() => Err(format!("cannot connect: {}", root_cause(&e))),
            Err(e) => Err(root_cause(&e)),
        }
    }
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s = format!("{s}: {c}");
        cur = c.source();
    }
    s
}
