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
    pub fn new(tls: &crate::http::TlsOptions) -> Result<Self, String> {
        let client = crate::http::client_builder(tls)?
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
            Err(e) if e.is_connect() && crate::http::is_transient(&e) => {
                Err(format!("cannot connect: {}", crate::http::error_chain(&e)))
            }
            // A certificate the roots do not trust says so, and what to configure.
            Err(e) => Err(crate::http::describe(url, &e)),
        }
    }
}
