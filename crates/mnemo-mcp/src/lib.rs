//! The MCP front end (official Rust SDK `rmcp`): five tools an agent can follow — `remember`,
//! `recall`, `search_memory`, `add_memory`, `forget_memory` — over the same `Service` as the HTTP
//! API. Served on stdio by `mnemo mcp`, and as streamable HTTP at `/mcp` under the main server
//! (behind the same API keys).
//!
//! Every call is scoped: project, collection and user come from the configuration (`mcp:`) or,
//! over HTTP, from `X-Mnemo-Project` / `X-Mnemo-Collection` / `X-Mnemo-User` headers; the API key
//! must allow the project. Agents never pass tenant ids in tool arguments.

use mnemo_core::access::Principal;
use mnemo_core::context::Locale;
use mnemo_core::model::{EventFilter, ProfileFilter, Role};
use mnemo_core::service::{
    AddEventRequest, ContextRequest, EventSearch, Include, IncomingMessage, Target, WriteRequest,
};
use mnemo_core::{CoreError, Service};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonObject, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
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
}

impl Default for McpScope {
    fn default() -> Self {
        Self {
            project: "default".into(),
            collection: "default".into(),
            user_id: "default".into(),
            conversation_id: "mcp".into(),
        }
    }
}

#[derive(Clone)]
pub struct MemoryTools {
    service: Arc<Service>,
    scope: McpScope,
}

impl MemoryTools {
    pub fn new(service: Arc<Service>, scope: McpScope) -> Self {
        Self { service, scope }
    }

    /// The scope of one call: the configured one, narrowed by HTTP headers, checked against the key.
    fn scope_for(&self, ctx: &RequestContext<RoleServer>) -> Result<McpScope, String> {
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
        if let Some(u) = header("x-mnemo-user") {
            scope.user_id = u;
        }
        if let Some(c) = header("x-mnemo-conversation") {
            scope.conversation_id = c;
        }
        let principal = parts.extensions.get::<Principal>().cloned().unwrap_or(Principal::Open);
        principal.check_project(&scope.project)?;
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
        match name {
            "remember" => {
                let role = match str_arg("role").as_deref() {
                    None | Some("user") => Role::User,
                    Some("assistant") => Role::Assistant,
                    Some(other) => {
                        return Err(CoreError::invalid("role", format!("must be user or assistant, got {other:?}")));
                    }
                };
                let req = WriteRequest {
                    project: target.project,
                    collection: target.collection,
                    conversation_id: str_arg("conversation_id").unwrap_or_else(|| scope.conversation_id.clone()),
                    messages: vec![IncomingMessage {
                        role,
                        content: required("content")?,
                        name: None,
                        time: None,
                        idempotency_key: None,
                    }],
                    trigger: self.service.config().default_trigger,
                    meta: mnemo_core::model::ConversationMeta {
                        user_id: Some(scope.user_id.clone()),
                        ..Default::default()
                    },
                };
                let o = self.service.streaming_write(req).await?;
                Ok(match o.closed {
                    Some(c) => format!(
                        "Remembered. The conversation's recent turns are being turned into long-term memories (session {}).",
                        c.session_id
                    ),
                    None => format!(
                        "Remembered ({} turns waiting to be turned into long-term memories).",
                        o.pending_messages
                    ),
                })
            }
            "recall" => {
                let d = &self.service.config().retrieval;
                let req = ContextRequest {
                    target,
                    conversation_id: str_arg("conversation_id").unwrap_or_else(|| scope.conversation_id.clone()),
                    query: str_arg("query").filter(|q| !q.trim().is_empty()),
                    event_filter: user_filter(),
                    event_limit: d.top_k,
                    decay: d.time_decay,
                    similarity_threshold: d.similarity_threshold,
                    profile_filter: ProfileFilter { user_id: vec![scope.user_id.clone()], ..Default::default() },
                    profile_limit: 1,
                    max_tokens: int_arg("max_tokens", d.max_tokens, 200_000)?,
                    include: Include::default(),
                    locale: None::<Locale>,
                };
                let r = self.service.get_context(req).await?;
                Ok(if r.assembled.context_str.is_empty() {
                    "Nothing is remembered about this user yet.".into()
                } else {
                    r.assembled.context_str
                })
            }
            "search_memory" => {
                let req = EventSearch::new(target, Some(required("query")?), user_filter(), int_arg("limit", 5, 50)?);
                let found = self.service.search_events(req).await?;
                if found.is_empty() {
                    return Ok("No matching memories.".into());
                }
                Ok(found
                    .iter()
                    .map(|s| {
                        let when = chrono::DateTime::from_timestamp_millis(s.event.time)
                            .map(|t| t.format("%Y-%m-%d").to_string())
                            .unwrap_or_default();
                        format!("[{}] {when} (score {:.2}) {}", s.event.id, s.scores.score, s.event.text())
                    })
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

fn schema(v: Value) -> Arc<JsonObject> {
    Arc::new(v.as_object().cloned().expect("a schema is an object"))
}

/// The tools, with schemas and descriptions written for an agent to follow.
pub fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "remember",
            "Store one turn of the conversation in the user's memory. Call it with what the user said (and, if useful, \
             your reply with role \"assistant\"). mnemo keeps recent turns as short-term memory and turns them into \
             long-term memories (events and the user's profile) in the background.",
            schema(json!({"type": "object", "properties": {
                "content": {"type": "string", "description": "The text of the turn.", "minLength": 1, "maxLength": 200000},
                "role": {"type": "string", "enum": ["user", "assistant"], "default": "user", "description": "Who said it."},
                "conversation_id": {"type": "string", "description": "Optional: the conversation to add to (default: the configured one)."}
            }, "required": ["content"], "additionalProperties": false})),
        ),
        Tool::new(
            "recall",
            "Get what you should know about the user before answering: their profile, the recent turns, and the \
             memories most related to the query, as one prompt-ready text within a token budget. Call it at the start \
             of a task or whenever the user refers to something from before.",
            schema(json!({"type": "object", "properties": {
                "query": {"type": "string", "description": "What the user is asking about now (improves which memories come back)."},
                "max_tokens": {"type": "integer", "minimum": 1, "maximum": 200000, "description": "Budget for the returned text (default 1200)."},
                "conversation_id": {"type": "string", "description": "Optional: the conversation whose recent turns to include."}
            }, "additionalProperties": false})),
        ),
        Tool::new(
            "search_memory",
            "Search the user's long-term memories by meaning (Chinese or English). Returns one line per memory: \
             [memory_id] date (score) text. Use the memory_id with forget_memory.",
            schema(json!({"type": "object", "properties": {
                "query": {"type": "string", "description": "What to look for.", "minLength": 1, "maxLength": 4000},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5}
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
            .with_server_info(Implementation::new("mnemo", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "mnemo is the user's long-term memory. Call `recall` before answering to learn who the user is and \
                 what happened before; call `remember` with each user turn worth keeping; use `search_memory`, \
                 `add_memory` and `forget_memory` to look up, save or delete specific memories.",
            )
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
        let scope = match self.scope_for(&context) {
            Ok(s) => s,
            Err(msg) => return Ok(CallToolResult::error(vec![ContentBlock::text(msg)]).into()),
        };
        let args = request.arguments.unwrap_or_default();
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
    let tools = MemoryTools::new(service, scope);
    StreamableHttpService::new(move || Ok(tools.clone()), Default::default(), config)
}
