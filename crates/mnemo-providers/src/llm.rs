//! The `llm` extractor: any OpenAI-compatible `/chat/completions` endpoint (OpenAI, Ollama,
//! vLLM, llama.cpp server, DeepSeek, Doubao/Ark, Qwen).
//!
//! One request per session. The prompt carries the collection's event and profile types, the
//! user's current profiles, the user's related earlier memories (so the model can say which
//! one a new event corrects), and the cleaned, numbered transcript. The answer is JSON, asked for
//! with `response_format: json_schema` where the server supports it (it falls back to
//! `json_object`, then to the prompt alone, when a server refuses), parsed tolerantly, repaired
//! once, and validated item by item: invalid items are dropped and logged, never stored
//! half-formed. Relative dates are kept as said; the service resolves them deterministically.
//!
//! Transport faults (timeouts, connection errors, 429, 5xx) are retried here with backoff
//! (honouring `Retry-After`), then reported as transient so the job backs off; after three calls
//! in a row failed that way a circuit breaker stops calling the endpoint for a while
//! (`breaker_open`, 30 s by default); a semaphore bounds concurrent requests.

use crate::breaker::Breaker;
use crate::rules::{Clean, RulesConfig, clean, original_messages, truncate_chars};
use async_trait::async_trait;
use mnemo_core::TokenCounter;
use mnemo_core::extract::{ExtractError, ExtractedEvent, ExtractionInput, ExtractionOutput, Extractor, ProfileChange};
use mnemo_core::model::{CollectionSchema, EventTypeDef, FieldType, PROFILE_V1, Role, STATED_ENTITIES};
use mnemo_core::service::validate_memory_info;
use serde_json::{Map, Value, json};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Semaphore;

use crate::llm_request::other_token_limit;
pub use crate::llm_request::{JsonMode, TokenLimit};

#[derive(Clone, Debug)]
pub struct LlmConfig {
    /// e.g. `http://127.0.0.1:11434/v1`
    pub base_url: String,
    pub model: String,
    pub api_key: Option<String>,
    /// Per HTTP request.
    pub timeout: Duration,
    pub max_concurrency: usize,
    /// `json_schema`, `json_object` or `none` (prompt only): the strongest the server accepts.
    pub json_mode: JsonMode,
    /// Retries of one request on 429 / 5xx / timeouts before the job backs off.
    pub max_retries: u32,
    pub retry_base: Duration,
    pub max_tokens: u32,
    pub temperature: f32,
    /// Summaries longer than this many characters are cut.
    pub summary_chars: usize,
    pub ignore_system: bool,
    pub ignore_tools: bool,
    /// Characters of transcript sent at most (the newest messages are kept).
    pub max_transcript_chars: usize,
    /// How long the circuit breaker keeps a failing endpoint closed off (after three calls in a
    /// row failed even with their retries).
    pub breaker_open: Duration,
    /// The request field that bounds the answer: `max_tokens`, or `max_completion_tokens` for
    /// models that refuse the former (OpenAI's reasoning models). A refusal naming the other one
    /// switches by itself.
    pub token_limit: TokenLimit,
    /// Azure OpenAI: `?api-version=…` on every request.
    pub api_version: Option<String>,
    /// The header carrying `api_key`: `Authorization: Bearer …` (None) or a named header
    /// (Azure's `api-key`).
    pub api_key_header: Option<String>,
    /// Outbound TLS (extra trusted roots).
    pub tls: crate::http::TlsOptions,
}

impl Default for LlmConfig {
    fn default() -> Self {
        Self {
            base_url: "http://127.0.0.1:11434/v1".into(),
            model: "qwen2.5:1.5b-instruct".into(),
            api_key: None,
            timeout: Duration::from_secs(60),
            max_concurrency: 2,
            json_mode: JsonMode::JsonSchema,
            max_retries: 2,
            retry_base: Duration::from_millis(500),
            max_tokens: 1200,
            temperature: 0.0,
            summary_chars: 200,
            ignore_system: true,
            ignore_tools: true,
            max_transcript_chars: 12_000,
            breaker_open: Duration::from_secs(30),
            token_limit: TokenLimit::MaxTokens,
            api_version: None,
            api_key_header: None,
            tls: Default::default(),
        }
    }
}

pub struct LlmExtractor {
    config: LlmConfig,
    name: String,
    client: reqwest::Client,
    permits: Semaphore,
    breaker: Breaker,
    /// The JSON mode in use: starts at the configured one, steps down when a server refuses it.
    mode: AtomicU8,
    /// The token-limit field in use: starts at the configured one, switches when refused.
    token_limit: AtomicU8,
    /// Whether `temperature` is sent: reasoning models refuse any but their default.
    send_temperature: std::sync::atomic::AtomicBool,
    /// Answers received, and how many of them were repair rounds (for benchmarks and metrics).
    answers: AtomicU64,
    repairs: AtomicU64,
}

/// One chat call's answer.
struct Reply {
    content: String,
    prompt_tokens: u64,
    completion_tokens: u64,
}

impl LlmExtractor {
    pub fn new(config: LlmConfig) -> Result<Self, String> {
        let client = crate::http::client_builder(&config.tls)?
            .timeout(config.timeout)
            .build()
            .map_err(|e| format!("LLM HTTP client: {}", crate::http::error_chain(&e)))?;
        Ok(Self {
            name: format!("llm:{}", config.model),
            permits: Semaphore::new(config.max_concurrency.max(1)),
            breaker: Breaker::new(3, config.breaker_open),
            mode: AtomicU8::new(config.json_mode as u8),
            token_limit: AtomicU8::new(config.token_limit as u8),
            send_temperature: std::sync::atomic::AtomicBool::new(true),
            answers: AtomicU64::new(0),
            repairs: AtomicU64::new(0),
            client,
            config,
        })
    }

    /// (answers received, of which repair rounds).
    pub fn counters(&self) -> (u64, u64) {
        (self.answers.load(Ordering::Relaxed), self.repairs.load(Ordering::Relaxed))
    }

    fn url(&self) -> String {
        let base = format!("{}/chat/completions", self.config.base_url.trim_end_matches('/'));
        match &self.config.api_version {
            Some(v) => format!("{base}?api-version={v}"),
            None => base,
        }
    }

    fn token_limit(&self) -> TokenLimit {
        match self.token_limit.load(Ordering::Relaxed) {
            0 => TokenLimit::MaxTokens,
            _ => TokenLimit::MaxCompletionTokens,
        }
    }

    /// One chat completion, with transport retries. Steps the JSON mode down when the server
    /// refuses `response_format`.
    async fn chat(&self, messages: &[Value], schema: &Value) -> Result<Reply, ExtractError> {
        let url = self.url();
        if !self.breaker.allow() {
            return Err(ExtractError::Transient(format!("{url}: endpoint unavailable (circuit open)")));
        }
        let mut attempt = 0u32;
        // The token-limit field switches once per call (a server that refuses both is refused).
        let mut limit_switched = false;
        loop {
            let mode = JsonMode::from_u8(self.mode.load(Ordering::Relaxed));
            let limit = self.token_limit();
            let mut body = json!({
                "model": self.config.model,
                "messages": messages,
                "stream": false,
            });
            if self.send_temperature.load(Ordering::Relaxed) {
                body["temperature"] = json!(self.config.temperature);
            }
            body[limit.field()] = json!(self.config.max_tokens);
            match mode {
                JsonMode::JsonSchema => {
                    body["response_format"] = json!({
                        "type": "json_schema",
                        "json_schema": {"name": "memories", "schema": schema, "strict": true},
                    })
                }
                JsonMode::JsonObject => body["response_format"] = json!({"type": "json_object"}),
                JsonMode::None => {}
            }
            let mut req = self.client.post(&url).json(&body);
            match (&self.config.api_key, &self.config.api_key_header) {
                (Some(k), Some(header)) => req = req.header(header.as_str(), k),
                (Some(k), None) => req = req.bearer_auth(k),
                (None, _) => {}
            }
            let (retry_after, error) = match req.send().await {
                Err(e) if !crate::http::is_transient(&e) => {
                    self.breaker.record(false);
                    return Err(ExtractError::Permanent(crate::http::describe(&url, &e)));
                }
                Err(e) => (None, crate::http::describe(&url, &e)),
                Ok(resp) => {
                    let status = resp.status();
                    let retry_after = crate::http::retry_after(resp.headers(), Duration::from_secs(60));
                    let text = resp.text().await.unwrap_or_default();
                    if status.is_success() {
                        self.breaker.record(true);
                        return parse_reply(&url, &text);
                    }
                    let snippet = truncate_chars(&text, 300);
                    let refused = status.as_u16() == 400 || status.as_u16() == 422;
                    if refused
                        && !limit_switched
                        && let Some(other) = other_token_limit(limit, &text)
                    {
                        limit_switched = true;
                        tracing::warn!(%status, from = limit.field(), to = other.field(), body = %snippet,
                            "the LLM endpoint refused the token-limit field; switching");
                        self.token_limit.store(other as u8, Ordering::Relaxed);
                        continue;
                    }
                    if refused && text.contains("temperature") && self.send_temperature.swap(false, Ordering::Relaxed) {
                        tracing::warn!(%status, body = %snippet,
                            "the LLM endpoint refused the temperature; sending the model's default from now on");
                        continue;
                    }
                    if refused && mode != JsonMode::None {
                        // Most likely `response_format` is not supported: step down and retry at once.
                        let next = if mode == JsonMode::JsonSchema { JsonMode::JsonObject } else { JsonMode::None };
                        tracing::warn!(%status, from = mode.name(), to = next.name(), body = %snippet,
                            "the LLM endpoint refused the response format; falling back");
                        self.mode.store(next as u8, Ordering::Relaxed);
                        continue;
                    }
                    if status.as_u16() == 400 || status.as_u16() == 422 {
                        return Err(ExtractError::Permanent(format!("{url}: HTTP {status}: {snippet}")));
                    }
                    (retry_after, format!("{url}: HTTP {status}: {snippet}"))
                }
            };
            if attempt >= self.config.max_retries {
                // The breaker counts calls that failed after their retries, not single requests.
                self.breaker.record(false);
                return Err(ExtractError::Transient(error));
            }
            let pause = retry_after.unwrap_or(self.config.retry_base * 2u32.saturating_pow(attempt));
            tracing::warn!(attempt, ?pause, error, "LLM call failed; retrying");
            tokio::time::sleep(pause).await;
            attempt += 1;
        }
    }
}

fn parse_reply(url: &str, text: &str) -> Result<Reply, ExtractError> {
    let v: Value = serde_json::from_str(text).map_err(|e| {
        ExtractError::Transient(format!("{url}: response is not JSON ({e}): {}", truncate_chars(text, 200)))
    })?;
    let content = v["choices"][0]["message"]["content"]
        .as_str()
        .ok_or_else(|| ExtractError::Transient(format!("{url}: no choices[0].message.content in the response")))?
        .to_string();
    let usage = |k: &str| v["usage"][k].as_u64();
    Ok(Reply {
        // Servers that report no usage are estimated, so the token budget still holds.
        prompt_tokens: usage("prompt_tokens").unwrap_or(0),
        completion_tokens: usage("completion_tokens").unwrap_or_else(|| TokenCounter::count(&content) as u64),
        content,
    })
}

#[async_trait]
impl Extractor for LlmExtractor {
    fn name(&self) -> &str {
        &self.name
    }

    fn wants_related_events(&self) -> bool {
        true
    }

    fn uses_tokens(&self) -> bool {
        true
    }

    async fn extract(&self, input: ExtractionInput) -> Result<ExtractionOutput, ExtractError> {
        let rules = RulesConfig {
            ignore_system: self.config.ignore_system,
            ignore_tools: self.config.ignore_tools,
            ..Default::default()
        };
        let cleaned = clean(&input.messages, &rules);
        if !cleaned.iter().any(|m| m.role == Role::User) {
            return Ok(ExtractionOutput::default());
        }
        let transcript = transcript(&cleaned, self.config.max_transcript_chars);
        let schema = output_schema(&input.schema);
        let mut messages = vec![
            json!({"role": "system", "content": system_prompt(&input.schema)}),
            json!({"role": "user", "content": user_prompt(&input, &transcript)}),
        ];
        let _permit = self.permits.acquire().await.map_err(|e| ExtractError::Transient(e.to_string()))?;
        let first = self.chat(&messages, &schema).await?;
        self.answers.fetch_add(1, Ordering::Relaxed);
        let (mut prompt_tokens, mut completion_tokens) = (first.prompt_tokens, first.completion_tokens);
        if first.prompt_tokens == 0 {
            prompt_tokens =
                messages.iter().map(|m| TokenCounter::count(m["content"].as_str().unwrap_or("")) as u64).sum();
        }
        let parsed = match parse_json(&first.content) {
            Ok(v) => v,
            Err(err) => {
                // One repair round: show the model its answer and the parse error.
                tracing::warn!(error = %err, "LLM answer is not valid JSON; asking for a repair");
                messages.push(json!({"role": "assistant", "content": first.content}));
                messages.push(json!({"role": "user", "content": format!(
                    "That answer is not valid JSON ({err}). Reply with the corrected JSON object only, no prose."
                )}));
                self.repairs.fetch_add(1, Ordering::Relaxed);
                let second = self.chat(&messages, &schema).await?;
                self.answers.fetch_add(1, Ordering::Relaxed);
                prompt_tokens += second.prompt_tokens;
                completion_tokens += second.completion_tokens;
                parse_json(&second.content).map_err(|e| {
                    ExtractError::Transient(format!(
                        "the model answered invalid JSON twice ({e}): {}",
                        truncate_chars(&second.content, 200)
                    ))
                })?
            }
        };
        let mut output = validate(&parsed, &input, &cleaned, self.config.summary_chars);
        output.prompt_tokens = prompt_tokens;
        output.completion_tokens = completion_tokens;
        Ok(output)
    }
}

// --------------------------------------------------------------------------------- prompt

fn field_line(name: &str, t: FieldType, values: &[String], required: bool, description: &str) -> String {
    let ty = match t {
        FieldType::String => "string".to_string(),
        FieldType::Int => "integer".into(),
        FieldType::Float => "number".into(),
        FieldType::Bool => "boolean".into(),
        FieldType::Enum => format!("one of {}", values.join(" | ")),
    };
    let req = if required { ", required" } else { "" };
    format!("    - {name} ({ty}{req}): {description}")
}

fn system_prompt(schema: &CollectionSchema) -> String {
    let mut s = String::from(
        "You extract long-term memories about the USER from a conversation between a user and an assistant.\n\
         Answer with one JSON object only: {\"events\": [...], \"profile\": [...]}.\n\n\
         events: things the user did, experienced, decided, planned, or asked for help with that are worth remembering later.\n\
         - One topic per event. Skip small talk and greetings. Never record the assistant's suggestions as facts about the user.\n\
         - Each event: {\"type\": <event type>, \"fields\": {...}, \"source\": [numbers of the messages it comes from], \"supersedes\": <id like \"E2\" of an earlier memory that this event corrects or replaces, or null>, \"entities\": [...]}.\n\
         - entities: the people, places, organisations, pets and other named things (products, activities) the event is about, each {\"name\": <the name, or the role when no name is given, e.g. \"sister\">, \"kind\": \"person\" | \"place\" | \"organization\" | \"pet\" | \"other\", \"aliases\": [other ways the conversation refers to it: \"my sister\", a nickname]}. Not the user.\n\
         - Write summaries in the language of the conversation, in the third person (\"The user ...\" / \"用户……\"), at most 200 characters.\n\
         - Keep time expressions exactly as the user said them (\"yesterday\", \"last Tuesday\", \"上周三\", \"明天\"). Do NOT turn them into dates and do not invent years.\n\n\
         profile: changes to stable facts about the user themselves (not about other people they mention).\n\
         - Each change: {\"type\": <profile type>, \"op\": \"set\" | \"add\" | \"remove\", \"attribute\": <name>, \"value\": <short text>}.\n\
         - \"set\" for single-valued facts (name, city, job, age); \"add\" for one more item of a list (likes, dislikes, languages, allergies); \"remove\" when the user says a fact no longer holds.\n\
         - If a fact contradicts the current profile, \"set\" the new value; do not keep both.\n\
         - Use short snake_case English attribute names (name, city, job, likes, dislikes, diet, family).\n\n\
         Event types:\n",
    );
    for t in &schema.event_types {
        s.push_str(&format!("- {}: {}\n  fields:\n", t.name, t.description));
        for f in &t.fields {
            s.push_str(&field_line(&f.name, f.field_type, &f.values, f.required, &f.description));
            s.push('\n');
        }
    }
    s.push_str("Profile types:\n");
    for t in &schema.profile_types {
        if t.name == PROFILE_V1 {
            s.push_str(&format!("- {}: {} Attributes are free-form names.\n", t.name, t.description));
        } else {
            s.push_str(&format!("- {}: {}\n  attributes (only these):\n", t.name, t.description));
            for f in &t.fields {
                s.push_str(&field_line(&f.name, f.field_type, &f.values, false, &f.description));
                s.push('\n');
            }
        }
    }
    s.push_str("If nothing is worth remembering, answer {\"events\": [], \"profile\": []}.");
    s
}

fn day(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map(|t| t.format("%Y-%m-%d %H:%M").to_string()).unwrap_or_default()
}

fn transcript(cleaned: &[Clean], max_chars: usize) -> Vec<(usize, String)> {
    let mut lines: Vec<(usize, String)> = cleaned
        .iter()
        .enumerate()
        .map(|(i, m)| (i + 1, format!("[{}] {} {}: {}", i + 1, day(m.time), m.role.as_str(), m.content)))
        .collect();
    // Keep the newest messages within the budget.
    let mut total: usize = lines.iter().map(|(_, l)| l.chars().count() + 1).sum();
    while total > max_chars && lines.len() > 1 {
        total -= lines[0].1.chars().count() + 1;
        lines.remove(0);
    }
    lines
}

fn user_prompt(input: &ExtractionInput, transcript: &[(usize, String)]) -> String {
    let mut s = String::new();
    if input.profiles.is_empty() {
        s.push_str("Current profile: (empty)\n");
    }
    for p in &input.profiles {
        s.push_str(&format!("Current profile ({}): {}\n", p.profile_type, Value::Object(p.attributes.clone())));
    }
    if !input.related_events.is_empty() {
        s.push_str("\nEarlier memories of this user (ids for \"supersedes\"):\n");
        for (i, e) in input.related_events.iter().enumerate() {
            s.push_str(&format!("E{} ({}): {}\n", i + 1, day(e.time), truncate_chars(&e.text(), 300)));
        }
    }
    s.push_str("\nConversation (each message with the time it was sent):\n");
    for (_, line) in transcript {
        s.push_str(line);
        s.push('\n');
    }
    s
}

/// The JSON schema of the answer, in the form `strict: true` accepts (OpenAI's structured
/// outputs, and the grammar-constrained decoders of vLLM and llama.cpp): every object closed
/// (`additionalProperties: false`) with every property required — an optional one is nullable —
/// and only keywords strict mode supports. Item counts are bounded so small models under a
/// grammar finish; string lengths are bounded by `max_tokens` and cut after parsing.
fn output_schema(schema: &CollectionSchema) -> Value {
    let mut fields = Map::new();
    for t in &schema.event_types {
        for f in &t.fields {
            let ty = match f.field_type {
                FieldType::String | FieldType::Enum => "string",
                FieldType::Int => "integer",
                FieldType::Float => "number",
                FieldType::Bool => "boolean",
            };
            // Fields of other event types are null in an event: each is nullable.
            let mut v = json!({"type": [ty, "null"]});
            if f.field_type == FieldType::Enum {
                let mut values: Vec<Value> = f.values.iter().map(|x| json!(x)).collect();
                values.push(Value::Null);
                v["enum"] = Value::Array(values);
            }
            fields.entry(f.name.clone()).or_insert(v);
        }
    }
    let field_names: Vec<&String> = fields.keys().collect();
    let event_types: Vec<&str> = schema.event_types.iter().map(|t| t.name.as_str()).collect();
    let profile_types: Vec<&str> = schema.profile_types.iter().map(|t| t.name.as_str()).collect();
    json!({
        "type": "object",
        "properties": {
            "events": {"type": "array", "maxItems": 12, "items": {
                "type": "object",
                "properties": {
                    "type": {"type": "string", "enum": event_types},
                    "fields": {"type": "object", "properties": fields, "required": field_names, "additionalProperties": false},
                    "source": {"type": "array", "maxItems": 40, "items": {"type": "integer"}},
                    "supersedes": {"type": ["string", "null"]},
                    "entities": {"type": "array", "maxItems": 10, "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "kind": {"type": "string", "enum": ["person", "place", "organization", "pet", "other"]},
                            "aliases": {"type": "array", "maxItems": 5, "items": {"type": "string"}},
                        },
                        "required": ["name", "kind", "aliases"],
                        "additionalProperties": false,
                    }},
                },
                "required": ["type", "fields", "source", "supersedes", "entities"],
                "additionalProperties": false,
            }},
            "profile": {"type": "array", "maxItems": 20, "items": {
                "type": "object",
                "properties": {
                    "type": {"type": "string", "enum": profile_types},
                    "op": {"type": "string", "enum": ["set", "add", "remove"]},
                    "attribute": {"type": "string"},
                    "value": {"type": ["string", "null"]},
                },
                "required": ["type", "op", "attribute", "value"],
                "additionalProperties": false,
            }},
        },
        "required": ["events", "profile"],
        "additionalProperties": false,
    })
}

// --------------------------------------------------------------------------------- answer

/// Attributes that hold one value at a time: a new value replaces the old one.
const SINGLE_VALUED: &[&str] = &[
    "name",
    "age",
    "city",
    "location",
    "job",
    "occupation",
    "company",
    "employer",
    "gender",
    "birthday",
    "nationality",
    "hometown",
    "title",
    "role",
    "marital_status",
    "姓名",
    "名字",
    "年龄",
    "城市",
    "居住城市",
    "职业",
    "工作",
    "公司",
    "性别",
    "生日",
];

/// Tolerant parsing: code fences and prose around the object are ignored.
fn parse_json(text: &str) -> Result<Value, String> {
    let t = text.trim();
    if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(t) {
        return Ok(v);
    }
    let (start, end) = (t.find('{'), t.rfind('}'));
    match (start, end) {
        (Some(s), Some(e)) if e > s => match serde_json::from_str::<Value>(&t[s..=e]) {
            Ok(v @ Value::Object(_)) => Ok(v),
            Ok(_) => Err("the answer is not a JSON object".into()),
            Err(err) => Err(err.to_string()),
        },
        _ => Err("no JSON object in the answer".into()),
    }
}

/// Coerces what small models commonly get almost right (numbers as strings, "true"), then
/// checks the event against its type. `None`: dropped.
fn event_fields(def: &EventTypeDef, raw: &Map<String, Value>, summary_chars: usize) -> Option<Map<String, Value>> {
    let mut info = Map::new();
    for f in &def.fields {
        let Some(v) = raw.get(&f.name) else { continue };
        let v = match (f.field_type, v) {
            (_, Value::Null) => continue,
            (FieldType::Int, Value::String(s)) => s.trim().parse::<i64>().map(Value::from).unwrap_or(v.clone()),
            (FieldType::Float, Value::String(s)) => s.trim().parse::<f64>().map(Value::from).unwrap_or(v.clone()),
            (FieldType::Bool, Value::String(s)) if s == "true" || s == "false" => Value::Bool(s == "true"),
            (FieldType::String, Value::String(s)) => {
                let s = s.trim();
                let limit = if f.name == "summary" { summary_chars } else { summary_chars * 5 };
                Value::String(truncate_chars(s, limit.max(20)))
            }
            _ => v.clone(),
        };
        info.insert(f.name.clone(), v);
    }
    match validate_memory_info(def, &info, "fields", true) {
        Ok(()) => Some(info),
        Err(e) => {
            tracing::warn!(event_type = %def.name, error = %e, "LLM event dropped: does not match its type");
            None
        }
    }
}

fn validate(parsed: &Value, input: &ExtractionInput, cleaned: &[Clean], summary_chars: usize) -> ExtractionOutput {
    let mut out = ExtractionOutput::default();
    let session_start = cleaned.first().map(|m| m.time).unwrap_or(input.now);
    for (i, item) in parsed["events"].as_array().into_iter().flatten().enumerate() {
        let ty = item["type"].as_str().or(item["memory_type"].as_str()).unwrap_or("event_v1");
        let Some(def) = input.schema.event_type(ty) else {
            tracing::warn!(item = i, event_type = ty, "LLM event dropped: unknown event type");
            continue;
        };
        // Some models put the fields at the top level instead of under "fields".
        let raw = item["fields"].as_object().or(item.as_object()).cloned().unwrap_or_default();
        let Some(mut info) = event_fields(def, &raw, summary_chars) else { continue };
        let mut sources: Vec<&Clean> = item["source"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| n.as_u64().or_else(|| n.as_str().and_then(|s| s.trim_matches(['[', ']']).parse().ok())))
            .filter_map(|n| cleaned.get((n as usize).checked_sub(1)?))
            .collect();
        sources.sort_by_key(|m| m.message_id);
        sources.dedup_by_key(|m| m.message_id);
        if sources.is_empty() {
            sources = cleaned.iter().filter(|m| m.role == Role::User).collect();
        }
        let chunk: Vec<Clean> = sources.iter().map(|m| (*m).clone()).collect();
        info.insert("original_messages".into(), Value::String(original_messages(&chunk)));
        if let Some(stated) =
            entities::stated(&item["entities"]).filter(|_| !def.fields.iter().any(|f| f.name == STATED_ENTITIES))
        {
            info.insert(STATED_ENTITIES.into(), stated);
        }
        let mut event =
            ExtractedEvent::new(def.name.clone(), info, chunk.first().map(|m| m.time).unwrap_or(session_start));
        event.source_message_ids = chunk.iter().map(|m| m.message_id).collect();
        event.supersedes = item["supersedes"]
            .as_str()
            .and_then(|s| s.trim().trim_start_matches(['E', 'e']).parse::<usize>().ok())
            .and_then(|n| input.related_events.get(n.checked_sub(1)?))
            .map(|e| e.id.clone());
        out.events.push(event);
    }
    let mut typed: Vec<(String, Vec<ProfileChange>)> = Vec::new();
    for (i, item) in parsed["profile"].as_array().into_iter().flatten().enumerate() {
        let ptype = item["type"].as_str().unwrap_or(PROFILE_V1);
        let Some(def) = input.schema.profile_type(ptype) else {
            tracing::warn!(item = i, profile_type = ptype, "LLM profile change dropped: unknown profile type");
            continue;
        };
        let attribute = item["attribute"].as_str().map(str::trim).unwrap_or("");
        let op = item["op"].as_str().unwrap_or("set");
        let value = match &item["value"] {
            Value::String(s) => Some(s.trim().to_string()),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => None,
        }
        .filter(|v| !v.is_empty() && v.chars().count() <= 200);
        let valid_name = !attribute.is_empty()
            && attribute.chars().count() <= 48
            && (def.name == PROFILE_V1 || def.fields.iter().any(|f| f.name == attribute));
        if !valid_name {
            tracing::warn!(item = i, attribute, "LLM profile change dropped: bad attribute name");
            continue;
        }
        let key = attribute.to_string();
        let current = input.profile(ptype).and_then(|p| p.attributes.get(attribute));
        // Small models often "add" to facts that hold one value; those are set instead.
        let single = SINGLE_VALUED.contains(&key.to_lowercase().as_str());
        let change = match (op, value) {
            ("set", Some(v)) => ProfileChange::Set { key, value: Value::String(v) },
            ("add", Some(v)) if single => ProfileChange::Set { key, value: Value::String(v) },
            ("add", Some(v)) => ProfileChange::Append { key, items: vec![v] },
            ("remove", Some(v)) if current.is_some_and(Value::is_array) => {
                ProfileChange::RemoveItems { key, items: vec![v] }
            }
            ("remove", _) => ProfileChange::Remove { key },
            _ => {
                tracing::warn!(item = i, op, "LLM profile change dropped: unknown op or missing value");
                continue;
            }
        };
        match typed.iter_mut().find(|(t, _)| t == ptype) {
            Some((_, list)) => list.push(change),
            None => typed.push((ptype.to_string(), vec![change])),
        }
    }
    for (ptype, changes) in typed {
        if ptype == PROFILE_V1 {
            out.profile_changes = changes;
        } else {
            out.typed_profile_changes.push((ptype, changes));
        }
    }
    out
}

mod entities;
#[cfg(test)]
mod tests;
