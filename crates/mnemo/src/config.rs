//! The configuration: documented defaults < YAML file (`--config`) < `MNEMO_<SECTION>__<KEY>`
//! environment variables < command-line flags. Every key is optional; `mnemo.example.yaml` at the
//! repository root lists them all with their defaults.

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

mod server;
pub use server::*;

#[derive(Debug, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub store: StoreConfig,
    pub extraction: ExtractionConfig,
    pub session: SessionConfig,
    pub embedding: EmbeddingConfig,
    pub retrieval: RetrievalConfig,
    pub inject: InjectConfig,
    pub redaction: RedactionConfig,
    pub lifecycle: LifecycleConfig,
    /// Who the MCP tools act for (`mnemo mcp` on stdio, and `/mcp` unless headers say otherwise).
    pub mcp: mnemo_mcp::McpScope,
    pub testing: TestingConfig,
    pub log: LogConfig,
    /// Endpoints told about changes (re-registered at every start; `webhook/create` adds more).
    pub webhooks: Vec<WebhookConfig>,
    pub webhook_delivery: WebhookDeliveryConfig,
    /// Outbound TLS: the LLM, embedding and webhook endpoints.
    pub tls: TlsConfig,
}

/// How the server logs (to standard error). The level comes from `MNEMO_LOG` (e.g.
/// `info,mnemo_core=debug`); the default is `info` for `serve`, `warn` for one-shot commands.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `text` (one line per event; colours only on a terminal) or `json` (one object per line,
    /// for log shippers).
    pub format: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self { format: "text".into() }
    }
}

/// Forgetting: temporary memories expire, unused ones are archived (seed 002 §4.2).
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LifecycleConfig {
    pub temporary_ttl_days: f64,
    pub archive_after_days: f64,
    pub maintenance_interval_secs: u64,
    /// `process` events older than this are folded per user and day into one summary.
    pub fold_process_after_days: f64,
    /// Write a daily digest per user (and open new conversations with the latest one).
    pub daily_digest: bool,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        Self {
            temporary_ttl_days: 7.0,
            archive_after_days: 90.0,
            maintenance_interval_secs: 86_400,
            fold_process_after_days: 1.0,
            daily_digest: true,
        }
    }
}

/// For tests only; never on in production.
#[derive(Debug, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct TestingConfig {
    /// Expose `POST /api/memory/admin/clock` to move the server's clock forward.
    pub clock_control: bool,
}

/// What is removed or masked before anything is stored (messages, events, profiles, metadata).
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedactionConfig {
    /// Remove text inside <private>…</private>.
    pub private_tags: bool,
    /// Mask API keys, tokens, passwords in key=value form, private keys and card numbers.
    pub secrets: bool,
}

impl Default for RedactionConfig {
    fn default() -> Self {
        Self { private_tags: true, secrets: true }
    }
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbeddingConfig {
    /// `local` (the installed multilingual model) or `openai` (any OpenAI-compatible endpoint).
    pub provider: String,
    /// local: where the model is (default: $MNEMO_MODEL_DIR, then ./models/use-m3 or beside the binary).
    pub model_dir: Option<PathBuf>,
    /// local: `embeddinggemma-300m`, `use-m3+e5-small` (USE and e5 in one vector, mixed per
    /// query by language: the default before 0.6) or `use-m3` (USE alone, the default before
    /// 0.5). Unset: EmbeddingGemma, or the pair (with a warning) while EmbeddingGemma is not
    /// installed. `mnemo reindex` moves a data directory from one to another.
    pub local_model: Option<String>,
    /// local: parallel inference sessions (one thread each).
    pub sessions: usize,
    /// local: `cpu` (default), or `cuda` / `cuda:N` (an NVIDIA GPU: a build with the `cuda`
    /// feature and ONNX Runtime's GPU library from `./scripts/setup-model --gpu`). Same vectors,
    /// same model id: no reindex either way.
    pub device: String,
    /// local: the ONNX Runtime shared library to load (default: the model directory's, or its
    /// `gpu/` one for CUDA).
    pub onnxruntime: Option<PathBuf>,
    /// local, on an x86 CPU without VNNI (AVX2 alone): multiply the int8 weights the fast way,
    /// whose 16-bit sums saturate (~15 % faster embedding there, vectors further from the
    /// model's: LoCoMo dev 0.865 → 0.837 evidence present at 1,200 tokens). Off (exact) by
    /// default there; no effect on a CPU with VNNI (exact on the fast path, which it keeps) or on
    /// a GPU. Either way vectors stay comparable: no reindex.
    pub fast_int8: bool,
    /// local: searches waiting for the model at most; past it a search runs on full text alone
    /// instead of queueing (0: never fall back — searches always wait for their embedding).
    pub max_waiting_queries: usize,
    /// Query vectors kept for repeated queries (least recently used out; 3 KB each at 768
    /// dimensions; 0: off). Any provider.
    pub query_cache: usize,
    /// openai: e.g. http://127.0.0.1:11434/v1
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub dimension: Option<usize>,
    pub api_key_env: Option<String>,
    /// openai: Azure OpenAI's `api-version` query parameter (e.g. 2024-10-21).
    pub api_version: Option<String>,
    /// openai: the header carrying the key, e.g. `api-key` for Azure; unset: `Authorization: Bearer`.
    pub api_key_header: Option<String>,
    /// openai: the endpoint runs this local model (`embeddinggemma-300m`, e.g. on a
    /// text-embeddings server): its prompts are sent and its vectors read as the local ones, under
    /// the local model's id — no reindex when moving embedding there or back.
    pub same_as: Option<String>,
    /// openai: texts per request at most (text-embeddings-inference refuses more than its
    /// `--max-client-batch-size`, 32 by default; OpenAI more than 2,048); 1..=2048.
    pub max_batch: usize,
    pub timeout_secs: u64,
    /// Memories being stored embedded by another provider running the same model (e.g.
    /// EmbeddingGemma on a GPU's text-embeddings server: `{provider: openai, base_url, model,
    /// same_as: embeddinggemma-300m}`); searches' queries stay with the settings above. Unset:
    /// one provider for both.
    pub documents: Option<Box<EmbeddingConfig>>,
}

impl Default for EmbeddingConfig {
    fn default() -> Self {
        Self {
            provider: "local".into(),
            model_dir: None,
            local_model: None,
            sessions: 2,
            device: "cpu".into(),
            onnxruntime: None,
            fast_int8: false,
            max_waiting_queries: mnemo_providers::embed::local::MAX_WAITING_QUERIES,
            query_cache: 4096,
            base_url: None,
            model: None,
            dimension: None,
            api_key_env: None,
            api_version: None,
            api_key_header: None,
            same_as: None,
            max_batch: 32,
            timeout_secs: 30,
            documents: None,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetrievalConfig {
    /// Events per get_context section unless the request says otherwise.
    pub top_k: u32,
    /// Leave out results whose relevance (origin_score) is below this; none by default.
    pub similarity_threshold: Option<f64>,
    /// Only events from the last N days; none by default.
    pub freshness_days: Option<f64>,
    pub time_decay: TimeDecayConfig,
    /// A second retrieval hop: up to this many terms shared by the first hits join the query, and
    /// the two rankings are fused by rank (0 = off; 16 by default. On LoCoMo with EmbeddingGemma,
    /// evidence in get_context at 1,200 tokens 0.851 / 0.859 / 0.860 with 0 / 8 / 16 terms,
    /// multi-hop 0.380 / 0.408 / 0.430; no measurable latency).
    pub feedback_terms: usize,
    /// An extracted event's full-text score counts this share of the BM25 score of the candidate
    /// citing the messages right before or after its own in the same conversation, so a reply is
    /// found through the words of the turn it answers (0 = off; 0.3 by default: LoCoMo evidence in
    /// get_context +2.0 / +2.1 points at 1,200 / 2,400 tokens over lending a tenth of the
    /// neighbour's whole relevance, the earlier rule).
    pub neighbour_weight: f64,
    /// A question that names a time — "on May 23, 2023", "in December 2023", "last week",
    /// "yesterday", 上周三, 2023年5月 (resolved against the time it is asked, at
    /// `extraction.utc_offset`) — lifts the events dated then, or whose text writes out a day
    /// then (a plan's), by this share of their relevance (ranking only; a named day reaches one
    /// day either side). 0 = off.
    pub date_weight: f64,
    /// A question naming someone ("What does Ingrid do for a living?") lifts the events that name
    /// them by a role the candidates tie to that name alone ("my sister Ingrid", "Fiona, my
    /// wife", 我姐姐小雨 → "my sister is a veterinarian") by this share of their relevance, and the
    /// search's second hop looks for the role's word too. A name most candidates hold (the user,
    /// a speaker of every turn) lifts nothing. 0 = off (0.3 by default: own sets with LoCoMo
    /// distractors +2 questions each at 1,200 tokens, LoCoMo dev unchanged; docs/benchmarks.md).
    pub entity_weight: f64,
    /// get_context shows events whole until they fill this share of its budget; past it (and
    /// unless all the rest would fit whole), an event of several turns is shown as its turn that
    /// best matches the query, with the reply when that turn asks (1 = always whole; 0.5 by
    /// default: LoCoMo evidence in get_context +1.3 / +1.9 / +0.8 points at 600 / 1,200 / 2,400
    /// tokens, multi-hop +9 at 1,200).
    pub whole_share: f64,
    /// Each of the first this many results whose last turn asks ("Which team did you sign
    /// with?") brings the event that answers it right after it: the next event of its session
    /// (by provenance, else by time within a day), even when the reply shares no word with the
    /// query ("The Minnesota Wolves!"). 0 = off.
    pub reply_hits: usize,
    /// An event made of several turns (the `rules` extractor's) is stored with each turn's
    /// vector too, and matched by `(1 − w) ·` its own cosine `+ w ·` its best turn's: the turn
    /// that answers is nearer the question than the chunk's small talk is (LoCoMo evidence in
    /// get_context +0.8 points at 1,200 tokens, multi-hop +2.8; docs/history/benchmarks.md). Costs one
    /// embedding per turn at write time. 0 = off (no turn is embedded).
    pub turn_weight: f64,
}

/// Core's defaults (`mnemo_core::service::RetrievalConfig::default`), declared there once.
impl Default for RetrievalConfig {
    fn default() -> Self {
        let d = mnemo_core::service::RetrievalConfig::default();
        Self {
            top_k: d.top_k,
            similarity_threshold: d.similarity_threshold,
            freshness_days: d.freshness_days,
            time_decay: TimeDecayConfig::default(),
            feedback_terms: d.feedback_terms,
            neighbour_weight: d.neighbour_weight,
            date_weight: d.date_weight,
            entity_weight: d.entity_weight,
            whole_share: d.whole_share,
            reply_hits: d.reply_hits,
            turn_weight: f64::from(d.turn_weight),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimeDecayConfig {
    /// 0 = time has no effect (the default); seed 002's preset is 0.8.
    pub weight: f64,
    pub no_decay_period: f64,
    pub half_life_days: f64,
}

impl Default for TimeDecayConfig {
    fn default() -> Self {
        Self { weight: 0.0, no_decay_period: 0.0, half_life_days: 30.0 }
    }
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// `sqlite` (embedded, the default) or `postgres` (PostgreSQL + pgvector, shared by replicas).
    pub engine: String,
    pub path: PathBuf,
    /// sqlite: `process` (survives kill -9) or `power_loss` (fsync on every group commit).
    pub durability: String,
    pub cache_mib: u32,
    /// sqlite: how much of the file reads map into memory (MiB; default 0: none). Mapped, a
    /// connection reads the operating system's page cache in place instead of copying pages into
    /// its own — 2–3 ms faster per get_context at 1M events while nothing is written — but after
    /// every commit SQLite unmaps the file in each read connection, and the next read faults its
    /// pages in again: +12 ms for a get_context right after a write at 1M (+0 unmapped). A
    /// server that is written to between its reads (every app streaming turns) is faster
    /// without; a read-mostly store may set it. Mapped pages count in RSS as file pages.
    pub mmap_mib: u32,
    /// sqlite: reads running at once, each on a connection of its own (1..=64; default 4);
    /// others wait their turn. More helps a store that reads from disk; on a cached one, more
    /// than twice the cores only adds threads.
    pub readers: usize,
    /// Memory for scopes kept between searches (MiB, 0..=65536; default 64; 0: none). A search
    /// reads its user's events' terms (and, on sqlite, vector copies) before its query vector
    /// exists; kept, the same user's next search (every `get_context` of a conversation) reads
    /// neither while nothing of the user's changed. ~2.6 MB for a user of 1,000 events on
    /// sqlite; postgres keeps the same per replica (~2.2 MB; the copies from a user's second
    /// search on, while there is room), reads the rows whose version changed, and scores a
    /// kept scope's vectors on the replica.
    pub scope_cache_mib: usize,
    /// postgres: `postgres://user:password@host:port/database`.
    pub url: Option<String>,
    /// postgres: connections in this replica's pool.
    pub pool: usize,
    /// postgres: the schema holding mnemo's tables (created if missing); default: `public`.
    pub schema: Option<String>,
    /// postgres: keep an HNSW index per vector dimension (for searches whose scope exceeds
    /// 5,000 events); false makes writes cheaper when every search is scoped to a user.
    pub hnsw: bool,
    /// postgres: a streaming replica (hot standby) of `url` that serves event searches.
    pub read_url: Option<String>,
    /// postgres, instead of `url`: several databases, each holding a share of the users
    /// (`shard = FNV-1a(user_id) mod N`; collections and webhooks on every one). The list is
    /// the routing table: keep its order, and do not add or remove databases once data is
    /// written. E.g. `MNEMO_STORE__SHARDS='[postgres://db1/mnemo, postgres://db2/mnemo]'`.
    pub shards: Vec<String>,
    /// postgres: `maintenance_work_mem` (MiB, at least) for building the HNSW index after a bulk
    /// load (`mnemo import --bulk`). pgvector builds many times faster while the graph fits:
    /// about 0.5 KB per vector of a real model (indexed by its signs; 1M events: ~0.5 GB).
    pub index_build_mib: u32,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            engine: "sqlite".into(),
            path: PathBuf::from("./mnemo-data"),
            durability: "process".into(),
            cache_mib: 64,
            mmap_mib: 0,
            readers: 4,
            scope_cache_mib: 64,
            url: None,
            pool: 16,
            schema: None,
            hnsw: true,
            read_url: None,
            shards: Vec::new(),
            index_build_mib: 1024,
        }
    }
}

impl StoreConfig {
    /// A PostgreSQL setting given while the engine is SQLite (the default) would otherwise be
    /// ignored in silence — the server would run on a local file the operator never asked for.
    /// Also the settings both engines read: `scope_cache_mib`'s range.
    pub fn check_engine(&self) -> Result<()> {
        if self.scope_cache_mib > 65_536 {
            bail!("store.scope_cache_mib: must be 0..=65536, got {}", self.scope_cache_mib);
        }
        if self.engine != "sqlite" {
            return Ok(());
        }
        let set = [
            ("url", self.url.is_some()),
            ("read_url", self.read_url.is_some()),
            ("shards", !self.shards.is_empty()),
            ("schema", self.schema.is_some()),
        ];
        if let Some((key, _)) = set.iter().find(|(_, given)| *given) {
            bail!(
                "store.{key}: is a postgres setting, but store.engine is sqlite (the default): set store.engine: postgres (env MNEMO_STORE__ENGINE=postgres), or remove store.{key}"
            );
        }
        Ok(())
    }
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExtractionConfig {
    /// The default extractor: `rules` (offline) or `llm`. Collections may pick another one that
    /// is configured (`extractor` in `collection/create`).
    pub provider: String,
    pub workers: usize,
    pub max_attempts: u32,
    pub retry_base_ms: u64,
    pub retry_max_ms: u64,
    /// One extraction job at most (all its LLM calls and retries).
    pub timeout_secs: u64,
    /// A claimed job's lease; the worker renews it every third of this while the job runs. A job
    /// whose replica died is taken by another one after at most this long.
    pub job_lease_secs: u64,
    /// llm: the OpenAI-compatible endpoint, e.g. http://127.0.0.1:11434/v1. With `base_url` and
    /// `model` set, the `llm` extractor is available even when `provider` is `rules`.
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key_env: Option<String>,
    /// llm: one HTTP request at most.
    pub request_timeout_secs: u64,
    /// llm: requests in flight at most.
    pub max_concurrency: usize,
    /// llm: `json_schema`, `json_object` or `none`; steps down by itself if the server refuses.
    pub json_mode: String,
    /// llm: retries of one request on 429 / 5xx / timeouts before the job backs off.
    pub max_retries: u32,
    pub max_tokens: u32,
    /// llm: the request field carrying `max_tokens`: `max_tokens` or `max_completion_tokens`
    /// (OpenAI's reasoning models); a refusal naming the other one switches by itself.
    pub token_limit_param: String,
    /// llm: Azure OpenAI's `api-version` query parameter (e.g. 2024-10-21).
    pub api_version: Option<String>,
    /// llm: the header carrying the key, e.g. `api-key` for Azure; unset: `Authorization: Bearer`.
    pub api_key_header: Option<String>,
    pub temperature: f32,
    /// llm: after three calls in a row failed (with their retries), the endpoint is not called for this long.
    pub breaker_open_secs: u64,
    /// Jobs that failed for a transient reason (provider down, timeouts) are put back in the
    /// queue this often, at start-up, and as soon as another extraction succeeds again…
    pub recover_interval_secs: u64,
    /// …at most this many times each (a session that always fails stays failed, with its reason).
    pub max_requeues: u32,
    /// A new event whose embedding is at least this similar to one of the user's events of the
    /// same type refreshes it instead of being added; 0 turns similarity dedup off (exact text
    /// duplicates still merge). Unset: the embedding model's own figure (0.93 for the local
    /// pair, whose stored vectors are closer for like texts; 0.9 otherwise).
    pub dedup_similarity: Option<f32>,
    /// The users' UTC offset (e.g. "+08:00"), for resolving "yesterday" / 昨天.
    pub utc_offset: String,
    /// Tokens a project's LLM extraction may spend per UTC day; 0: no limit. Jobs over budget
    /// wait for the next day (nothing is lost) and say so in `job/list`.
    pub daily_token_budget: u64,
    /// Per-project budgets overriding `daily_token_budget`.
    pub project_token_budgets: std::collections::HashMap<String, u64>,
    pub fault_injection: FaultInjectionConfig,
}

impl Default for ExtractionConfig {
    fn default() -> Self {
        Self {
            provider: "rules".into(),
            workers: 2,
            max_attempts: 10,
            retry_base_ms: 2000,
            retry_max_ms: 600_000,
            timeout_secs: 300,
            job_lease_secs: 30,
            base_url: None,
            model: None,
            api_key_env: None,
            request_timeout_secs: 120,
            max_concurrency: 2,
            json_mode: "json_schema".into(),
            max_retries: 2,
            max_tokens: 1200,
            token_limit_param: "max_tokens".into(),
            api_version: None,
            api_key_header: None,
            temperature: 0.0,
            breaker_open_secs: 30,
            recover_interval_secs: 300,
            max_requeues: 3,
            dedup_similarity: None,
            utc_offset: "+00:00".into(),
            daily_token_budget: 0,
            project_token_budgets: Default::default(),
            fault_injection: FaultInjectionConfig::default(),
        }
    }
}

/// For resilience tests and drills only: make the first N extraction attempts fail.
#[derive(Debug, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct FaultInjectionConfig {
    pub fail_first_attempts: u32,
    /// Every extraction waits this long first (a slow model).
    pub delay_ms: u64,
    /// Every job waits this long between its near-duplicate check and its commit (the window in
    /// which another replica can commit the same memory).
    pub commit_delay_ms: u64,
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionConfig {
    pub ignore_tools: bool,
    pub ignore_system: bool,
    pub auto_create_collections: bool,
    pub token_count: u64,
    pub message_count: u64,
    pub wait_timeout: u64,
    /// How often (at most) the background loops look for due work, ms.
    pub poll_interval_ms: u64,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            ignore_tools: true,
            ignore_system: true,
            auto_create_collections: true,
            token_count: 1000,
            message_count: 20,
            wait_timeout: 604_800,
            poll_interval_ms: 1000,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InjectConfig {
    pub max_tokens: u32,
}

impl Default for InjectConfig {
    fn default() -> Self {
        Self { max_tokens: mnemo_core::service::RetrievalConfig::default().max_tokens }
    }
}

impl Config {
    /// Loads the layers: file (if given), then `MNEMO_*` variables from `env`.
    pub fn load(file: Option<&Path>, env: impl Iterator<Item = (String, String)>) -> Result<Self> {
        let mut tree: Value = match file {
            Some(p) => {
                let text =
                    std::fs::read_to_string(p).with_context(|| format!("reading config file {}", p.display()))?;
                if text.trim().is_empty() {
                    Value::Object(Default::default())
                } else {
                    serde_norway::from_str(&text).with_context(|| format!("parsing config file {}", p.display()))?
                }
            }
            None => Value::Object(Default::default()),
        };
        if tree.is_null() {
            tree = Value::Object(Default::default());
        }
        for (k, v) in env {
            let Some(rest) = k.strip_prefix("MNEMO_") else {
                continue;
            };
            if !rest.contains("__") {
                continue; // e.g. MNEMO_KEY_A: a key referenced by key_env, not an override
            }
            let path: Vec<String> = rest.split("__").map(|s| s.to_lowercase()).collect();
            let value: Value = serde_norway::from_str(&v).unwrap_or(Value::String(v.clone()));
            set_path(&mut tree, &path, value).with_context(|| format!("applying {k}"))?;
        }
        serde_json::from_value(tree).context("invalid configuration (see mnemo.example.yaml for every key)")
    }

    /// Resolves API keys from their environment variables.
    pub fn api_keys(&self) -> Result<Vec<mnemo_http::ApiKey>> {
        let mut out = Vec::new();
        for (i, k) in self.server.api_keys.iter().enumerate() {
            let secret = |env: &Option<String>, value: &Option<String>, what: &str| -> Result<Option<String>> {
                Ok(match (env, value) {
                    (Some(var), _) => Some(std::env::var(var).with_context(|| {
                        format!("server.api_keys[{i}].{what}_env: environment variable {var} is not set")
                    })?),
                    (None, v) => v.clone(),
                })
            };
            let key = secret(&k.key_env, &k.key, "key")?;
            let sk = secret(&k.secret_key_env, &k.secret_key, "secret_key")?;
            let (key, secret_key) = match (key, &k.access_key, sk) {
                (Some(key), None, None) => (key, None),
                (None, Some(ak), Some(sk)) => {
                    if ak.is_empty() || sk.len() < 16 {
                        bail!(
                            "server.api_keys[{i}]: an access_key must not be empty and its secret key must be at least 16 characters"
                        );
                    }
                    (ak.clone(), Some(sk))
                }
                (None, Some(_), None) => {
                    bail!("server.api_keys[{i}]: access_key needs secret_key_env (preferred) or secret_key")
                }
                (Some(_), Some(_), _) | (Some(_), None, Some(_)) => {
                    bail!(
                        "server.api_keys[{i}]: give either a key (key_env/key) or an IAM pair (access_key with secret_key_env/secret_key), not both"
                    )
                }
                (None, None, _) => bail!(
                    "server.api_keys[{i}]: give key_env (preferred) or key, or an IAM pair (access_key and secret_key_env)"
                ),
            };
            if secret_key.is_none() && key.len() < 16 {
                bail!("server.api_keys[{i}]: a key must be at least 16 characters");
            }
            if k.scopes.is_empty() {
                bail!("server.api_keys[{i}].scopes: give at least one of read, write, admin");
            }
            out.push(mnemo_http::ApiKey {
                key,
                projects: k.projects.clone(),
                scopes: k.scopes.clone(),
                user_id: k.user_id.clone(),
                secret_key,
            });
        }
        Ok(out)
    }

    pub fn bind_addr(&self) -> Result<SocketAddr> {
        self.server
            .bind
            .parse()
            .with_context(|| format!("server.bind: {:?} is not an address like 127.0.0.1:8600", self.server.bind))
    }
}

fn set_path(tree: &mut Value, path: &[String], value: Value) -> Result<()> {
    let mut node = tree;
    for (i, key) in path.iter().enumerate() {
        if !node.is_object() {
            bail!("{} is not a section", path[..i].join("."));
        }
        let obj = node.as_object_mut().expect("checked above");
        if i + 1 == path.len() {
            obj.insert(key.clone(), value);
            return Ok(());
        }
        node = obj.entry(key.clone()).or_insert_with(|| Value::Object(Default::default()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_postgres_setting_on_the_sqlite_engine_is_refused() {
        let mut store = StoreConfig { url: Some("postgres://db/mnemo".into()), ..Default::default() };
        let e = store.check_engine().unwrap_err().to_string();
        assert!(e.starts_with("store.url: is a postgres setting, but store.engine is sqlite"), "{e}");
        store.url = None;
        store.shards = vec!["postgres://db1/m".into()];
        assert!(store.check_engine().unwrap_err().to_string().starts_with("store.shards:"));
        store.engine = "postgres".into();
        store.check_engine().unwrap();
        store.scope_cache_mib = 65_537;
        let e = store.check_engine().unwrap_err().to_string();
        assert_eq!(e, "store.scope_cache_mib: must be 0..=65536, got 65537", "either engine");
        StoreConfig::default().check_engine().unwrap();
    }

    #[test]
    fn layers_apply_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("m.yaml");
        std::fs::write(&f, "server:\n  bind: 127.0.0.1:9000\ninject: {max_tokens: 800}\n").unwrap();
        let env = vec![
            ("MNEMO_INJECT__MAX_TOKENS".to_string(), "900".to_string()),
            ("MNEMO_EXTRACTION__PROVIDER".to_string(), "rules".to_string()),
            ("MNEMO_KEY_A".to_string(), "not an override".to_string()),
        ];
        let c = Config::load(Some(&f), env.into_iter()).unwrap();
        assert_eq!(c.server.bind, "127.0.0.1:9000");
        assert_eq!(c.inject.max_tokens, 900);
        assert_eq!(c.session.message_count, 20);
    }

    /// The example lists every key with its default: it must load, and change nothing.
    #[test]
    fn the_example_config_loads() {
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../mnemo.example.yaml");
        let c = Config::load(Some(&example), std::iter::empty()).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(c.tls.ca_file, None);
        assert_eq!(c.embedding.local_model, None, "unset: EmbeddingGemma with the pair as fallback");
        assert_eq!(c.extraction.token_limit_param, "max_tokens");
    }

    #[test]
    fn unknown_keys_are_errors() {
        let env = vec![("MNEMO_SERVER__BINDD".to_string(), "x".to_string())];
        let err = Config::load(None, env.into_iter()).unwrap_err();
        assert!(format!("{err:#}").contains("bindd"), "{err:#}");
    }
}
