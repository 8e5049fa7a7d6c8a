//! The write path's bodies: `streaming_write` / `session/add` (messages, speakers, metadata,
//! trigger), conversation and session look-ups, jobs.

use super::*;
use mnemo_core::service::{MessageInput, TriggerInput, WriteInput, WriteKind};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MessageDto {
    pub role: String,
    /// A string, or (VikingDB's multimodal form) a list of parts `{type: "text", text}` /
    /// `{type: "image_url" | "input_image", image_url: {url} | "url"}`: text parts are what is
    /// extracted; an image is kept as a reference (`[image: url]`) and never fetched.
    #[schemars(with = "Value")]
    pub content: Value,
    #[serde(default)]
    pub name: Option<String>,
    /// VikingDB's speaker name in a group chat: the message's `name`.
    #[serde(default)]
    pub role_name: Option<String>,
    /// VikingDB's speaker id in a group chat: a user message naming another user than the
    /// conversation's makes the events extracted from it that user's too (by `role_name`, or the id
    /// as the name). An assistant message must name the conversation's assistant.
    #[serde(default)]
    pub role_id: Option<String>,
    #[serde(default)]
    pub time: Option<i64>,
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// A message's content as text: a string, or the text of its parts with images as references.
fn content_text(v: Value, field: &str) -> Result<String, CoreError> {
    let parts = match v {
        Value::String(s) => return Ok(s),
        Value::Array(parts) => parts,
        other => return Err(CoreError::invalid(field, format!("must be a string or a list of parts, got {other}"))),
    };
    let mut out: Vec<String> = Vec::with_capacity(parts.len());
    for (i, part) in parts.into_iter().enumerate() {
        let f = format!("{field}[{i}]");
        let Value::Object(mut o) = part else {
            return Err(CoreError::invalid(f, "must be an object {type, text | image_url}"));
        };
        let kind = o.remove("type");
        let (kind, key) = match kind.as_ref().and_then(Value::as_str) {
            Some("text") => ("text", "text"),
            Some(k @ ("image_url" | "input_image")) => (k, "image_url"),
            _ => {
                return Err(CoreError::invalid(
                    format!("{f}.type"),
                    format!("must be one of text, image_url, input_image; got {}", kind.unwrap_or(Value::Null)),
                ));
            }
        };
        let value = o.remove(key);
        if let Some(extra) = o.keys().next() {
            return Err(CoreError::invalid(
                format!("{f}.{extra}"),
                format!("unknown field; expected one of type, {key}"),
            ));
        }
        match (kind, value) {
            ("text", Some(Value::String(t))) => out.push(t),
            ("text", _) => return Err(CoreError::invalid(format!("{f}.text"), "must be a string")),
            (_, Some(Value::String(url))) => out.push(format!("[image: {url}]")),
            (_, Some(Value::Object(mut img))) => match (img.remove("url"), img.remove("detail"), img.keys().next()) {
                (Some(Value::String(url)), _, None) => out.push(format!("[image: {url}]")),
                (_, _, Some(extra)) => {
                    return Err(CoreError::invalid(
                        format!("{f}.image_url.{extra}"),
                        "unknown field; expected one of url, detail",
                    ));
                }
                _ => return Err(CoreError::invalid(format!("{f}.image_url.url"), "must be a string")),
            },
            _ => return Err(CoreError::invalid(format!("{f}.image_url"), "must be a URL string or {url}")),
        }
    }
    Ok(out.join("\n"))
}

#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TriggerDto {
    pub token_count: Option<i64>,
    pub message_count: Option<i64>,
    pub wait_timeout: Option<i64>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    /// mnemo's conversation; `streaming_write` requires it. On `session/add` give it or
    /// VikingDB's `session_id`, not both.
    #[serde(default)]
    pub conversation_id: Option<String>,
    /// `session/add` only (VikingDB): the session's id — mnemo keeps it as the conversation's id —
    /// generated when absent; [1,128] letters, digits, '_'. **Re-using one replaces that session**:
    /// its earlier events are deleted and its profile changes withdrawn.
    #[serde(default)]
    pub session_id: Option<String>,
    pub messages: Vec<MessageDto>,
    #[serde(default)]
    pub extract_trigger: Option<TriggerDto>,
    /// Who the conversation is about: `user_id` / `assistant_id` (or VikingDB's
    /// `default_user_id` / `default_assistant_id`), `default_user_name` /
    /// `default_assistant_name` (the speakers' names), `time` (the messages' time when they have
    /// none, ms), `group_id`, `scope`; other keys are kept as they are.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// Only these event and profile types are extracted (VikingDB's names accepted).
    #[serde(default)]
    pub extract_memory_type: Option<Vec<String>>,
    /// When the extracted events expire: ms since the epoch, after the messages' time by at most
    /// ten years. Wins over `ttl_relative`.
    #[serde(default)]
    pub ttl_absolute: Option<i64>,
    /// When the extracted events expire: seconds after extraction, 1..=315576000.
    #[serde(default)]
    pub ttl_relative: Option<i64>,
    /// VikingDB's "keep the raw messages": mnemo always keeps them (session/info, provenance);
    /// `true` is accepted, `false` refused.
    #[serde(default)]
    pub store_file: Option<bool>,
    /// VikingDB's profiles to focus on: not supported (refused when not empty).
    #[serde(default)]
    #[schemars(with = "Option<Vec<Value>>")]
    pub profiles: Option<Vec<Value>>,
}

impl WriteBody {
    /// The request, and whether it replaces the conversation (a VikingDB `session_id`): the wire's
    /// own fields checked and converted here (content parts, metadata, VikingDB's type names),
    /// the rest normalised by core's [`WriteInput`] as every front end's writes are.
    pub fn into_request(
        self,
        default_trigger: ExtractTrigger,
        session_add: bool,
    ) -> Result<(mnemo_core::service::WriteRequest, bool), CoreError> {
        if self.store_file == Some(false) {
            return Err(CoreError::invalid(
                "store_file",
                "mnemo always keeps a session's messages (session/info, provenance, user/forget deletes them); leave store_file out or true",
            ));
        }
        if self.profiles.as_ref().is_some_and(|p| !p.is_empty()) {
            return Err(CoreError::invalid(
                "profiles",
                "not supported: profiles are updated from what the messages say (use extract_memory_type to choose the types)",
            ));
        }
        let messages = self
            .messages
            .into_iter()
            .enumerate()
            .map(|(i, m)| {
                Ok(MessageInput {
                    role: m.role,
                    content: content_text(m.content, &format!("messages[{i}].content"))?,
                    name: m.name,
                    role_name: m.role_name,
                    role_id: m.role_id,
                    time: m.time,
                    idempotency_key: m.idempotency_key,
                })
            })
            .collect::<Result<Vec<_>, CoreError>>()?;
        let t = self.extract_trigger.unwrap_or_default();
        let input = WriteInput {
            project: self.project_name,
            collection: self.collection_name,
            conversation_id: self.conversation_id,
            session_id: self.session_id,
            messages,
            meta: parse_metadata(self.metadata.unwrap_or_default())?,
            trigger: TriggerInput {
                token_count: t.token_count,
                message_count: t.message_count,
                wait_timeout: t.wait_timeout,
            },
            extract_types: self.extract_memory_type.unwrap_or_default().into_iter().map(canonical_type).collect(),
            ttl_absolute: self.ttl_absolute,
            ttl_relative: self.ttl_relative,
        };
        input.into_request(if session_add { WriteKind::Session } else { WriteKind::Stream }, default_trigger)
    }
}

fn parse_metadata(m: Map<String, Value>) -> Result<ConversationMeta, CoreError> {
    let get = |k: &str| -> Result<Option<String>, CoreError> {
        match m.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(other) => Err(CoreError::invalid(format!("metadata.{k}"), format!("must be a string, got {other}"))),
        }
    };
    // VikingDB names the owners `default_user_id` / `default_assistant_id`: the same thing.
    let either = |ours: &str, theirs: &str| -> Result<Option<String>, CoreError> {
        match (get(ours)?, get(theirs)?) {
            (Some(a), Some(b)) if a != b => Err(CoreError::invalid(
                format!("metadata.{theirs}"),
                format!("names another {ours} ({b:?}) than metadata.{ours} ({a:?}); give one"),
            )),
            (a, b) => Ok(a.or(b)),
        }
    };
    for k in ["default_user_name", "default_assistant_name"] {
        get(k)?;
    }
    Ok(ConversationMeta {
        user_id: either("user_id", "default_user_id")?,
        assistant_id: either("assistant_id", "default_assistant_id")?,
        group_id: get("group_id")?,
        scope: get("scope")?,
        extra: m,
        extract_types: vec![],
        ttl: None,
        speakers: Default::default(),
    })
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConversationBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    pub conversation_id: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionInfoBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    pub conversation_id: Option<String>,
    pub session_id: Option<String>,
}

pub fn message_json(m: &StoredMessage) -> Value {
    json!({
        "message_id": m.message_id,
        "role": m.role.as_str(),
        "name": m.name,
        "content": m.content,
        "time": m.time,
        "tokens": m.tokens,
        "session_id": m.session_id,
    })
}

pub fn job_json(j: &Job) -> Value {
    json!({
        "job_id": j.job_id,
        "kind": j.kind,
        "state": j.state.as_str(),
        "conversation_id": j.conversation_id,
        "session_id": j.session_id,
        "attempts": j.attempts,
        "max_attempts": j.max_attempts,
        "last_error": j.last_error,
        "run_after": j.run_after,
        "token_usage": {"prompt_tokens": j.prompt_tokens, "completion_tokens": j.completion_tokens},
        "created_at": j.created_at,
        "updated_at": j.updated_at,
        "started_at": j.started_at,
        "finished_at": j.finished_at,
        "duration_ms": j.duration_ms(),
        "requeues": j.requeues,
    })
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobListBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub conversation_id: Option<String>,
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub limit: Option<i64>,
}

/// `job/retry`: one failed job by id, or (without `job_id`) every failed job of the collection.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobRetryBody {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    #[serde(default)]
    pub job_id: Option<String>,
}

pub fn message_short_json(m: &StoredMessage) -> Value {
    json!({"message_id": m.message_id, "role": m.role.as_str(), "name": m.name, "content": m.content, "time": m.time})
}

/// A session as answered (`session/info`, `user/export`).
pub fn session_summary_json(s: &SessionSummary) -> Value {
    json!({
        "session_id": s.session_id,
        "conversation_id": s.conversation_id,
        "reason": s.reason,
        "state": s.state,
        "message_count": s.message_count,
        "token_count": s.token_count,
        "user_id": s.user_id,
        "assistant_id": s.assistant_id,
        "created_at": s.created_at,
        "extracted_at": s.extracted_at,
    })
}

/// What `user/forget` deleted.
pub fn forget_counts_json(n: &ForgetCounts) -> Value {
    json!({
        "conversations": n.conversations,
        "messages": n.messages,
        "sessions": n.sessions,
        "jobs": n.jobs,
        "events": n.events,
        "profiles": n.profiles,
    })
}
