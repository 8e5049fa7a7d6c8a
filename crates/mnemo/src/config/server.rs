//! The server's edge: bind address, API keys and their scopes, TLS roots for outbound calls,
//! webhook endpoints and delivery.

use super::*;

/// Outbound TLS. Trusted: the public (Mozilla) roots, the system's (`SSL_CERT_FILE` /
/// `SSL_CERT_DIR` honoured), and `ca_file`.
#[derive(Debug, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// A PEM bundle of extra trusted certificates, for endpoints behind a private CA.
    pub ca_file: Option<PathBuf>,
}

impl TlsConfig {
    pub fn options(&self) -> mnemo_providers::http::TlsOptions {
        mnemo_providers::http::TlsOptions { ca_file: self.ca_file.clone() }
    }
}

/// One webhook endpoint from the config file.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    #[serde(default = "default_project")]
    pub project_name: String,
    pub url: String,
    /// The signing secret: the name of an environment variable holding it (preferred)…
    pub secret_env: Option<String>,
    /// …or the secret itself. `whsec_` + base64 as Standard Webhooks libraries expect, or any
    /// string of 8 to 256 characters.
    pub secret: Option<String>,
    /// Subscribed kinds; empty: all of them.
    #[serde(default)]
    pub events: Vec<String>,
    #[serde(default)]
    pub description: String,
}

fn default_project() -> String {
    "default".into()
}

/// How webhook deliveries are attempted.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhookDeliveryConfig {
    /// Attempts before a delivery is dead-lettered (visible in `webhook/deliveries`).
    pub max_attempts: u32,
    /// Wait after the first failed attempt, doubled after each next one up to `backoff_max_secs`.
    pub backoff_base_ms: u64,
    pub backoff_max_secs: u64,
    /// One attempt's deadline.
    pub timeout_ms: u64,
    /// Deliveries sent concurrently per pass.
    pub batch: u32,
    /// Delivered rows are kept this long, then pruned.
    pub keep_delivered_days: f64,
    /// Whether `webhook/create` may register loopback and private addresses. Unset: only when
    /// the server itself binds loopback (local development); config endpoints always may.
    pub allow_private_urls: Option<bool>,
}

impl Default for WebhookDeliveryConfig {
    fn default() -> Self {
        Self {
            max_attempts: 8,
            backoff_base_ms: 5_000,
            backoff_max_secs: 3_600,
            timeout_ms: 10_000,
            batch: 32,
            keep_delivered_days: 7.0,
            allow_private_urls: None,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    pub bind: String,
    pub api_keys: Vec<ApiKeyConfig>,
    pub max_body_bytes: usize,
    pub max_in_flight: usize,
    /// Host names the server also answers to besides loopback and its bound address (behind a
    /// proxy or a DNS name); any other `Host` is refused (DNS rebinding).
    pub allowed_hosts: Vec<String>,
    /// Browser origins of other sites allowed to call the API (CORS), e.g.
    /// `https://app.example.org`; requests from any other site's page are refused.
    pub cors_origins: Vec<String>,
    /// The environment variable holding a bearer token for `/metrics` (a scraper's; with keys
    /// configured, `/metrics` otherwise needs an admin key for every project).
    pub metrics_key_env: Option<String>,
    /// Reads (search, get_context, listings) running longer than this are stopped with 503.
    pub request_timeout_ms: u64,
    /// Reads (search, get_context, listings) running at once (null, the default: 4 per core; 0:
    /// no limit; at most 100,000). Past it a read waits for its turn, up to `read_queue_ms`, then is shed:
    /// 503 with `Retry-After`, so an overloaded server answers the reads it admits in bounded
    /// time and tells the rest to come back instead of queueing every one for seconds. A read
    /// mostly waits for the embedding model (two sessions on two cores), so more in flight only
    /// lengthens each one; a server whose reads wait on I/O (PostgreSQL, a store larger than
    /// the page cache) may raise it.
    pub max_concurrent_reads: Option<usize>,
    /// How long a read may wait for its turn before it is shed (ms, 1..=600,000; default 500).
    /// An answered read's latency is at most about this plus its own time.
    pub read_queue_ms: u64,
}

impl ServerConfig {
    /// `max_concurrent_reads`, the default resolved: 4 per core.
    pub fn concurrent_reads(&self) -> usize {
        self.max_concurrent_reads.unwrap_or_else(|| 4 * std::thread::available_parallelism().map_or(2, usize::from))
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1:8600".into(),
            api_keys: vec![],
            max_body_bytes: 4 * 1024 * 1024,
            max_in_flight: 2048,
            allowed_hosts: vec![],
            cors_origins: vec![],
            metrics_key_env: None,
            request_timeout_ms: 30_000,
            max_concurrent_reads: None,
            read_queue_ms: 500,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyConfig {
    /// Name of the environment variable holding the key (preferred).
    pub key_env: Option<String>,
    /// The key itself (for local use).
    pub key: Option<String>,
    #[serde(default = "all_projects")]
    pub projects: Vec<String>,
    /// What the key may do: `read` (search, context, listings, export), `write` (messages, events,
    /// profiles, flush, job retry, new collections), `admin` (delete collections, forget users,
    /// maintenance, `/metrics` of every tenant). Default: all three.
    #[serde(default = "all_scopes")]
    pub scopes: Vec<mnemo_core::access::Scope>,
    /// An end-user token: every call made with this key is confined to this user — it reads,
    /// writes and forgets only this user's memories, whatever the body or MCP headers say.
    pub user_id: Option<String>,
    /// A VikingDB IAM pair instead of a key: the access key id (AK) the VikingDB SDK's
    /// `IAM(ak=..., sk=...)` sends, with its secret in `secret_key_env` (preferred) or `secret_key`.
    pub access_key: Option<String>,
    pub secret_key_env: Option<String>,
    pub secret_key: Option<String>,
}

fn all_projects() -> Vec<String> {
    vec!["*".into()]
}

fn all_scopes() -> Vec<mnemo_core::access::Scope> {
    use mnemo_core::access::Scope;
    vec![Scope::Read, Scope::Write, Scope::Admin]
}
