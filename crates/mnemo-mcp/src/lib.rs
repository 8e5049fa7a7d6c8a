//! The MCP front end (official Rust SDK `rmcp`): five tools an agent can follow — `remember`,
//! `recall`, `search_memory`, `add_memory`, `forget_memory` — over the same `Service` as the HTTP
//! API. Served on stdio by `mnemo mcp`, and as streamable HTTP at `/mcp` under the main server
//! (behind the same API keys).
//!
//! Every call is scoped: project, collection and user come from the configuration (`mcp:`) or,
//! over HTTP, from `X-Mnemo-Project` / `X-Mnemo-Collection` / `X-Mnemo-User` headers; the API key
//! must allow the project. Agents never pass tenant ids in tool arguments.

use mnemo_core::access::{Principal, Scope};
use mnemo_core::model::{EventFilter, ProfileFilter};
use mnemo_core::service::{
    AddEventRequest, ContextRequest, EventSearch, MAX_CONTENT_CHARS, MAX_TOKENS_RANGE, MessageInput, Target,
    WriteInput, WriteKind,
};
use mnemo_core::{CoreError, Service};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, InitializeRequestParams,
    InitializeResult, JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// Who and where the tools act for (config section `mcp:`).
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpScope {
    pub project: String,
    pub collection: String,
    pub user_id: String,
    /// The conversation `remember` writes to and `recall` reads.
    pub conversation_id: String,
    /// Relevance floor of `search_memory` and `recall` (on `origin_score`, the query relevance in
    /// [0,1]): weaker matches are left out rather than shown as noise. Unset: the embedding
    /// model's own ([`mnemo_core::embed::Embedder::relevance_floor`], calibrated per model,
    /// docs/history/benchmarks.md); `X-Mnemo-Min-Score` overrides it per request.
    pub min_score: Option<f64>,
    /// How long `remember` waits for its turn to be extracted before answering (seconds); the
    /// extraction continues in the background either way.
    pub remember_wait_secs: f64,
}

impl Default for McpScope {
    fn default() -> Self {
        Self {
            project: "default".into(),
            collection: "default".into(),
            user_id: "default".into(),
            conversation_id: "mcp".into(),
            min_score: None,
            remember_wait_secs: 5.0,
        }
    }
}

#[derive(Clone)]
pub struct MemoryTools {
    service: Arc<Service>,
    scope: McpScope,
    reads: Option<ReadGate>,
}

/// The HTTP server's read admission (`server.max_concurrent_reads`, `server.read_queue_ms`):
/// `recall` and `search_memory` over `/mcp` take one of the same permits as an HTTP read, and a
/// call that waits past the queue is answered with a tool error telling the agent to retry —
/// writes (`remember`, `add_memory`, `forget_memory`) are never shed.
#[derive(Clone)]
pub struct ReadGate {
    pub permits: Arc<tokio::sync::Semaphore>,
    /// `server.max_concurrent_reads`, for the message.
    pub max: usize,
    pub queue: std::time::Duration,
}

impl MemoryTools {
    pub fn new(service: Arc<Service>, scope: McpScope) -> Self {
        Self { service, scope, reads: None }
    }

    /// Reading tools admitted by `gate` (the HTTP server's).
    pub fn with_read_gate(mut self, gate: Option<ReadGate>) -> Self {
        self.reads = gate;
        self
    }

    /// The scope of one call: the configured one, narrowed by HTTP headers, checked against the key.
    fn scope_for(&self, ctx: &RequestContext<RoleServer>, tool: &str) -> Result<McpScope, String> {
        let mut scope = self.scope.clone();
        let Some(parts) = ctx.extensions.get::<http::request::Parts>() else {
            return Ok(scope); // stdio: the local user's own configuration
        };
        let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        if let Some(p) = header("x-mnemo-project") {
            scope.project = p;
        }
        if let Some(c) = header("x-mnemo-collection") {
            scope.collection = c;
        }
        if let Some(v) = header("x-mnemo-min-score") {
            scope.min_score = Some(
                v.parse::<f64>()
                    .ok()
                    .filter(|s| (0.0..=1.0).contains(s))
                    .ok_or_else(|| format!("X-Mnemo-Min-Score: must be a number in [0,1], got {v:?}"))?,
            );
        }
        if let Some(c) = header("x-mnemo-conversation") {
            scope.conversation_id = c;
        }
        let principal = parts.extensions.get::<Principal>().cloned().unwrap_or(Principal::Open);
        principal.check_project(&scope.project)?;
        // Reading tools need `read`; the others change memory and need `write`.
        let need = if is_read(tool) { Scope::Read } else { Scope::Write };
        principal.check_scope(need)?;
        // An end-user token acts for its user only.
        if let Some(user) = principal.user() {
            if header("x-mnemo-user").is_some_and(|u| u != user) {
                return Err(format!("X-Mnemo-User: this token may only act for user \"{user}\""));
            }
            scope.user_id = user.to_string();
            return Ok(scope);
        }
        match header("x-mnemo-user") {
            Some(u) => scope.user_id = u,
            // A shared endpoint must not file one agent's memories under a default user.
            None if scope.user_id == McpScope::default().user_id => {
                return Err("X-Mnemo-User: the header is required over HTTP (the user the memories belong to), \
                            unless the server config names one (mcp.user_id)"
                    .into());
            }
            None => {}
        }
        Ok(scope)
    }

    async fn run(&self, name: &str, args: &Map<String, Value>, scope: &McpScope) -> Result<String, CoreError> {
        let target = Target { project: scope.project.clone(), collection: scope.collection.clone() };
        let user_filter = || EventFilter { user_id: vec![scope.user_id.clone()], ..Default::default() };
        let str_arg = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_string);
        let int_arg = |k: &str, default: u32, max: u32| -> Result<u32, CoreError> {
            match args.get(k) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => match v.as_u64() {
                    Some(n) if (1..=max as u64).contains(&n) => Ok(n as u32),
                    _ => Err(CoreError::invalid(k, format!("must be an integer in 1..={max}, got {v}"))),
                },
            }
        };
        let required =
            |k: &str| str_arg(k).filter(|s| !s.trim().is_empty()).ok_or_else(|| CoreError::invalid(k, "is required"));
        let bool_arg = |k: &str| -> Result<bool, CoreError> {
            match args.get(k) {
                None | Some(Value::Null) => Ok(false),
                Some(Value::Bool(b)) => Ok(*b),
                Some(v) => Err(CoreError::invalid(k, format!("must be true or false, got {v}"))),
            }
        };
        let floor = scope.min_score.unwrap_or_else(|| self.service.embedder().relevance_floor());
        let as_of = as_of(str_arg("as_of").as_deref(), self.service.config().extraction.utc_offset)?;
        match name {
            "remember" => {
                let conversation_id = str_arg("conversation_id").unwrap_or_else(|| scope.conversation_id.clone());
                let (batched, end) = (bool_arg("batched")?, bool_arg("end_conversation")?);
                // The same normalisation as every front end's writes (core's WriteInput).
                let input = WriteInput {
                    project: target.project.clone(),
                    collection: target.collection.clone(),
                    conversation_id: Some(conversation_id.clone()),
                    messages: vec![MessageInput {
                        role: str_arg("role").unwrap_or_else(|| "user".into()),
                        content: required("content")?,
                        ..Default::default()
                    }],
                    meta: mnemo_core::model::ConversationMeta {
                        user_id: Some(scope.user_id.clone()),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                let (req, _) = input.into_request(WriteKind::Stream, self.service.config().default_trigger)?;
                let o = self.service.streaming_write(req).await?;
                // Unless the agent batches, what it remembers becomes long-term memory now: the
                // conversation's waiting turns close into a session and are extracted at once.
                let closed = match o.closed {
                    Some(c) => Some(c),
                    None if !batched || end => self.service.flush(&target, &conversation_id).await?,
                    None => None,
                };
                let Some(closed) = closed else {
                    let n = o.pending_messages;
                    return Ok(format!(
                        "Remembered as short-term memory of this conversation ({n} {} waiting). Batched turns become \
                         long-term memory when the conversation ends (remember with end_conversation: true) or \
                         after {} turns.",
                        if n == 1 { "turn" } else { "turns" },
                        self.service.config().default_trigger.message_count
                    ));
                };
                let wait = std::time::Duration::from_secs_f64(scope.remember_wait_secs.clamp(0.0, 60.0));
                Ok(match self.service.wait_for_session(&target, &closed.session_id, wait).await? {
                    Some(mnemo_core::model::JobState::Done) => format!(
                        "Remembered: stored and extracted into long-term memory ({} {}); recall and search_memory \
                         find it in any conversation of this user.",
                        closed.message_count,
                        if closed.message_count == 1 { "turn" } else { "turns" }
                    ),
                    Some(mnemo_core::model::JobState::Failed) => format!(
                        "Stored, but extracting it failed (session {}); it is kept and retried (job/retry).",
                        closed.session_id
                    ),
                    _ => format!(
                        "Remembered: stored; it is being extracted into long-term memory in the background \
                         (session {}) and will be found by recall and search_memory once done.",
                        closed.session_id
                    ),
                })
            }
            "recall" => {
                let d = &self.service.config().retrieval;
                let conversation_id = str_arg("conversation_id").unwrap_or_else(|| scope.conversation_id.clone());
                let mut req = ContextRequest::new(target, conversation_id, d);
                req.query = str_arg("query").filter(|q| !q.trim().is_empty());
                req.event_filter = EventFilter { as_of, ..user_filter() };
                req.similarity_threshold = Some(d.similarity_threshold.unwrap_or(0.0).max(floor));
                req.profile_filter = ProfileFilter { user_id: vec![scope.user_id.clone()], ..Default::default() };
                req.max_tokens = int_arg("max_tokens", d.max_tokens, MAX_TOKENS_RANGE.1)?;
                let r = self.service.get_context(req).await?;
                Ok(if r.assembled.context_str.is_empty() {
                    "Nothing is remembered about this user yet.".into()
                } else {
                    r.assembled.context_str
                })
            }
            "search_memory" => {
                let filter = EventFilter { as_of, ..user_filter() };
                let mut req = EventSearch::new(target, Some(required("query")?), filter, int_arg("limit", 5, 50)?);
                req.similarity_threshold = Some(floor);
                let answer = self.service.search(req).await?;
                // Matched by words alone (the query could not be embedded): the agent should know.
                let caveat = answer.full_text_only.map(|why| {
                    format!("(searched by words only — meaning-based search is unavailable right now: {why})")
                });
                let found = answer.results;
                if found.is_empty() {
                    let none = format!(
                        "Nothing relevant: no memory of this user reaches the relevance floor {floor:.2} for this query."
                    );
                    return Ok(caveat.map_or(none.clone(), |c| format!("{none}\n{c}")));
                }
                Ok(found
                    .iter()
                    .map(|s| {
                        let when = chrono::DateTime::from_timestamp_millis(s.event.time)
                            .map(|t| t.format("%Y-%m-%d").to_string())
                            .unwrap_or_default();
                        format!("[{}] {when} (relevance {:.2}) {}", s.event.id, s.scores.origin_score, s.event.text())
                    })
                    .chain(std::iter::once(format!("(relevance floor {floor:.2})")))
                    .chain(caveat)
                    .collect::<Vec<_>>()
                    .join("\n"))
            }
            "add_memory" => {
                let mut info = Map::new();
                info.insert("summary".into(), Value::String(required("summary")?));
                let e = self
                    .service
                    .add_event(AddEventRequest {
                        target,
                        memory_type: mnemo_core::model::EVENT_V1.into(),
                        user_id: vec![scope.user_id.clone()],
                        assistant_id: vec![],
                        group_id: None,
                        session_id: None,
                        conversation_id: None,
                        scope: None,
                        class: str_arg("class"),
                        time: None,
                        memory_info: info,
                        ttl_relative: None,
                        ttl_absolute: None,
                    })
                    .await?;
                Ok(format!("Saved as memory {}.", e.id))
            }
            "forget_memory" => {
                let id = required("memory_id")?;
                // Only the scoped user's own memories can be forgotten.
                let owned = match self.service.get_event(&target, &id).await {
                    Ok(e) => e.user_id.contains(&scope.user_id),
                    Err(CoreError::NotFound(_)) => false,
                    Err(e) => return Err(e),
                };
                if !owned {
                    return Err(CoreError::NotFound(format!("memory_id: no memory \"{id}\" for this user")));
                }
                self.service.delete_event(&target, &id).await?;
                Ok(format!("Forgot memory {id}."))
            }
            other => Err(CoreError::invalid("name", format!("no tool {other:?}"))),
        }
    }
}

/// The tools that only read memory.
fn is_read(tool: &str) -> bool {
    matches!(tool, "recall" | "search_memory")
}

/// A tool's `as_of`: a date (`YYYY-MM-DD`: what was true at the end of that day, in the server's
/// `extraction.utc_offset`) or an RFC 3339 time; as milliseconds, which core checks for range.
fn as_of(v: Option<&str>, offset: chrono::FixedOffset) -> Result<Option<i64>, CoreError> {
    let Some(v) = v.map(str::trim).filter(|v| !v.is_empty()) else { return Ok(None) };
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(v) {
        return Ok(Some(t.timestamp_millis()));
    }
    let end_of_day = chrono::NaiveDate::parse_from_str(v, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_milli_opt(23, 59, 59, 999))
        .and_then(|t| t.and_local_timezone(offset).single());
    match end_of_day {
        Some(t) => Ok(Some(t.timestamp_millis())),
        None => Err(CoreError::invalid(
            "as_of",
            format!("must be a date (YYYY-MM-DD) or an RFC 3339 time (2024-06-01T12:00:00Z), got {v:?}"),
        )),
    }
}

/// Checks a call's arguments against the tool's input schema (the subset the tools use: closed
/// objects, `required`, `type` string / integer / boolean, `enum`, `minimum` / `maximum`,
/// `minLength` / `maxLength`). The message names the argument, what it may be, and the tool's
/// arguments.
pub fn check_arguments(tool: &Tool, args: &Map<String, Value>) -> Result<(), String> {
    let schema = &tool.input_schema;
    let props = schema.get("properties").and_then(Value::as_object).cloned().unwrap_or_default();
    let names: Vec<&str> = props.keys().map(String::as_str).collect();
    let expected = format!("the arguments of {} are {}", tool.name, names.join(", "));
    if let Some(k) = args.keys().find(|k| !props.contains_key(k.as_str())) {
        return Err(format!("{k}: unknown argument; {expected}"));
    }
    for r in schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        if args.get(r).is_none_or(Value::is_null) {
            return Err(format!("{r}: is required; {expected}"));
        }
    }
    for (k, v) in args {
        let p = &props[k];
        if v.is_null() {
            continue; // an optional argument left out
        }
        let ty = p.get("type").and_then(Value::as_str).unwrap_or("string");
        let mut bad = match ty {
            "string" => match v.as_str() {
                None => Some("must be a string".to_string()),
                Some(s) => {
                    let n = s.chars().count() as u64;
                    let min = p.get("minLength").and_then(Value::as_u64).unwrap_or(0);
                    let max = p.get("maxLength").and_then(Value::as_u64).unwrap_or(u64::MAX);
                    (n < min || n > max || (min > 0 && s.trim().is_empty())).then(|| match max {
                        u64::MAX => format!("must be a non-empty string (at least {min} characters)"),
                        _ => format!("must be a string of {min} to {max} characters"),
                    })
                }
            },
            "integer" => {
                let (min, max) = (
                    p.get("minimum").and_then(Value::as_i64).unwrap_or(i64::MIN),
                    p.get("maximum").and_then(Value::as_i64).unwrap_or(i64::MAX),
                );
                match v.as_i64() {
                    Some(n) if (min..=max).contains(&n) => None,
                    _ => Some(format!("must be an integer in {min}..={max}")),
                }
            }
            "boolean" => (!v.is_boolean()).then(|| "must be true or false".to_string()),
            _ => None,
        };
        if bad.is_none()
            && let Some(values) = p.get("enum").and_then(Value::as_array)
            && !values.contains(v)
        {
            let list: Vec<String> = values.iter().map(Value::to_string).collect();
            bad = Some(format!("must be one of {}", list.join(", ")));
        }
        if let Some(why) = bad {
            let shown: String = v.to_string().chars().take(80).collect();
            return Err(format!("{k}: {why}, got {shown}"));
        }
    }
    Ok(())
}

fn schema(v: Value) -> Arc<JsonObject> {
    Arc::new(v.as_object().cloned().expect("a schema is an object"))
}

/// `as_of` of the reading tools.
const AS_OF_DOC: &str = "Optional: answer with what was true then — a date (YYYY-MM-DD, the end of that day) or an \
                         RFC 3339 time. Facts that changed later (a move, a new job) show their value of that time; \
                         memories from after it are left out.";

/// The tools, with schemas and descriptions written for an agent to follow.
pub fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "remember",
            "Store a turn of the conversation in the user's memory: what the user said (or, with role \"assistant\", \
             your reply). Immediate by default: the turn (with any turns of this conversation still waiting) is \
             extracted into long-term memory — events and the user's profile — before this call answers (up to a \
             few seconds; the answer says if it is still running), so recall and search_memory find it in any later \
             conversation of this user. With batched: true the turn waits as short-term memory until the \
             conversation ends (end_conversation: true) or reaches the server's turn limit.",
            schema(json!({"type": "object", "properties": {
                "content": {"type": "string", "description": "The text of the turn.", "minLength": 1, "maxLength": MAX_CONTENT_CHARS},
                "role": {"type": "string", "enum": ["user", "assistant"], "default": "user", "description": "Who said it."},
                "conversation_id": {"type": "string", "description": "Optional: the conversation to add to (default: the configured one)."},
                "batched": {"type": "boolean", "default": false, "description": "Keep the turn as short-term memory for now instead of extracting it at once (for agents that remember every turn)."},
                "end_conversation": {"type": "boolean", "default": false, "description": "The conversation is over: turn all its waiting turns (this one included) into long-term memory now."}
            }, "required": ["content"], "additionalProperties": false})),
        ),
        Tool::new(
            "recall",
            "Get what you should know about the user before answering: their profile, the recent turns, and the \
             memories related to the query (weak matches below the relevance floor left out), as one prompt-ready \
             text within a token budget. Call it at the start of a task or whenever the user refers to something \
             from before.",
            schema(json!({"type": "object", "properties": {
                "query": {"type": "string", "description": "What the user is asking about now (improves which memories come back)."},
                "max_tokens": {"type": "integer", "minimum": MAX_TOKENS_RANGE.0, "maximum": MAX_TOKENS_RANGE.1, "description": "Budget for the returned text (default: the server's inject.max_tokens)."},
                "conversation_id": {"type": "string", "description": "Optional: the conversation whose recent turns to include."},
                "as_of": {"type": "string", "description": AS_OF_DOC}
            }, "additionalProperties": false})),
        ),
        Tool::new(
            "search_memory",
            "Search the user's long-term memories by meaning (Chinese or English). Returns one line per memory: \
             [memory_id] date (relevance) text, best first; memories below the relevance floor (shown on the last \
             line) are left out, so an empty answer means nothing relevant is remembered. Use the memory_id with \
             forget_memory.",
            schema(json!({"type": "object", "properties": {
                "query": {"type": "string", "description": "What to look for.", "minLength": 1, "maxLength": 4000},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5},
                "as_of": {"type": "string", "description": AS_OF_DOC}
            }, "required": ["query"], "additionalProperties": false})),
        ),
        Tool::new(
            "add_memory",
            "Save one fact or event about the user directly as a long-term memory (one topic, one or two sentences), \
             e.g. \"The user prefers answers in Chinese.\"",
            schema(json!({"type": "object", "properties": {
                "summary": {"type": "string", "description": "The memory, in one or two sentences.", "minLength": 1, "maxLength": 2000},
                "class": {"type": "string", "enum": ["temporary", "conclusion", "process"], "description": "temporary: expires after a week unless used; conclusion (default): kept."}
            }, "required": ["summary"], "additionalProperties": false})),
        ),
        Tool::new(
            "forget_memory",
            "Delete one of the user's memories for good, by the memory_id that search_memory shows. Use it when the \
             user asks you to forget something or a memory is wrong.",
            schema(json!({"type": "object", "properties": {
                "memory_id": {"type": "string", "description": "The id shown in brackets by search_memory.", "minLength": 1}
            }, "required": ["memory_id"], "additionalProperties": false})),
        ),
    ]
}

impl ServerHandler for MemoryTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("mnemo", env!("CARGO_PKG_VERSION")).with_description(
                    "Long-term memory for LLM agents: profiles, events and recall across conversations.",
                ),
            )
            .with_instructions(
                "mnemo is the user's long-term memory. Call `recall` before answering to learn who the user is and \
                 what happened before; call `remember` with each user turn worth keeping; use `search_memory`, \
                 `add_memory` and `forget_memory` to look up, save or delete specific memories.",
            )
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        tracing::debug!(
            client = %request.client_info.name,
            client_version = %request.client_info.version,
            protocol = %request.protocol_version,
            "MCP session set up"
        );
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if !tools().iter().any(|t| t.name == request.name) {
            return Err(McpError::invalid_params(format!("no tool named {:?}", request.name), None));
        }
        let scope = match self.scope_for(&context, &request.name) {
            Ok(s) => s,
            Err(msg) => return Ok(CallToolResult::error(vec![ContentBlock::text(msg)]).into()),
        };
        let args = request.arguments.unwrap_or_default();
        // Input validation failures are tool execution errors (MCP 2025-11-25, SEP-1303): the
        // model sees the message, which names the argument and what it may be, and corrects the
        // call. Only an unknown tool (above) or a malformed request is a protocol error.
        let tool = tools().into_iter().find(|t| t.name == request.name).expect("checked above");
        if let Err(msg) = check_arguments(&tool, &args) {
            return Ok(CallToolResult::error(vec![ContentBlock::text(msg)]).into());
        }
        // A reading tool waits its turn among the server's reads, or is shed with a message.
        let _running = match (&self.reads, is_read(&request.name)) {
            (Some(gate), true) => match tokio::time::timeout(gate.queue, gate.permits.clone().acquire_owned()).await {
                Ok(Ok(permit)) => Some(permit),
                _ => {
                    let msg = format!(
                        "overloaded: {} reads are running (server.max_concurrent_reads) and this call waited {} ms for \
                         its turn (server.read_queue_ms); retry in a second",
                        gate.max,
                        gate.queue.as_millis()
                    );
                    return Ok(CallToolResult::error(vec![ContentBlock::text(msg)]).into());
                }
            },
            _ => None,
        };
        Ok(match self.run(&request.name, &args, &scope).await {
            Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
            // Tool-level errors: the agent sees the message (which names the argument and the range).
            Err(CoreError::Internal(e)) => {
                tracing::error!(error = %e.chain(), tool = %request.name, "MCP tool failed");
                CallToolResult::error(vec![ContentBlock::text("internal error; see the server log")])
            }
            Err(e) => CallToolResult::error(vec![ContentBlock::text(e.to_string())]),
        }
        .into())
    }
}

/// The streamable-HTTP MCP endpoint for the main router (mounted at `/mcp`).
pub fn http_service(
    service: Arc<Service>,
    scope: McpScope,
    keys_configured: bool,
    reads: Option<ReadGate>,
) -> rmcp::transport::streamable_http_server::StreamableHttpService<
    MemoryTools,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
> {
    use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
    let mut config = StreamableHttpServerConfig::default().with_legacy_session_mode(false).with_json_response(true);
    if keys_configured {
        // Bearer keys guard the endpoint; Host checks (against DNS rebinding of an open loopback
        // server) would only get in the way of a non-loopback bind.
        config = config.disable_allowed_hosts();
    }
    let tools = MemoryTools::new(service, scope).with_read_gate(reads);
    StreamableHttpService::new(move || Ok(tools.clone()), Default::default(), config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(tool: &str, args: Value) -> Result<(), String> {
        let t = tools().into_iter().find(|t| t.name == tool).unwrap();
        check_arguments(&t, args.as_object().unwrap())
    }

    #[test]
    fn arguments_are_checked_against_the_schema_naming_the_argument() {
        assert!(check("search_memory", json!({"query": "x", "limit": 3})).is_ok());
        assert!(check("recall", json!({})).is_ok());
        assert!(check("remember", json!({"content": "x", "role": null})).is_ok(), "null: left out");
        let e = check("search_memory", json!({"query": "x", "limt": 3})).unwrap_err();
        assert_eq!(e, "limt: unknown argument; the arguments of search_memory are as_of, limit, query");
        let e = check("search_memory", json!({"limit": 3})).unwrap_err();
        assert!(e.starts_with("query: is required;"), "{e}");
        let e = check("search_memory", json!({"query": "x", "limit": 51})).unwrap_err();
        assert_eq!(e, "limit: must be an integer in 1..=50, got 51");
        let e = check("search_memory", json!({"query": "x", "limit": "5"})).unwrap_err();
        assert_eq!(e, "limit: must be an integer in 1..=50, got \"5\"");
        let e = check("remember", json!({"content": 42})).unwrap_err();
        assert_eq!(e, "content: must be a string, got 42");
        let e = check("remember", json!({"content": "  "})).unwrap_err();
        assert!(e.starts_with("content: must be a string of 1 to 200000 characters"), "{e}");
        let e = check("remember", json!({"content": "x", "role": "system"})).unwrap_err();
        assert_eq!(e, "role: must be one of \"user\", \"assistant\", got \"system\"");
        let e = check("remember", json!({"content": "x", "batched": "yes"})).unwrap_err();
        assert_eq!(e, "batched: must be true or false, got \"yes\"");
        let e = check("add_memory", json!({"summary": "x", "class": "forever"})).unwrap_err();
        assert!(e.starts_with("class: must be one of \"temporary\", \"conclusion\", \"process\""), "{e}");
    }

    #[test]
    fn as_of_is_a_date_or_a_time_and_a_clear_error_otherwise() {
        let utc = chrono::FixedOffset::east_opt(0).unwrap();
        let cst = chrono::FixedOffset::east_opt(8 * 3600).unwrap();
        assert_eq!(as_of(None, utc).unwrap(), None);
        assert_eq!(as_of(Some(" "), utc).unwrap(), None);
        // The end of the day, in the server's offset.
        assert_eq!(as_of(Some("2024-06-01"), utc).unwrap(), Some(1_717_286_399_999));
        assert_eq!(as_of(Some("2024-06-01"), cst).unwrap(), Some(1_717_286_399_999 - 8 * 3_600_000));
        assert_eq!(as_of(Some("2024-06-01T12:00:00+02:00"), cst).unwrap(), Some(1_717_236_000_000));
        for bad in ["June 2024", "2024-13-01", "1717286399999"] {
            let e = as_of(Some(bad), utc).unwrap_err().to_string();
            assert!(e.contains("as_of") && e.contains("YYYY-MM-DD"), "{bad}: {e}");
        }
    }
}
