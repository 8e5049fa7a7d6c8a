//! The write path's bodies: `streaming_write` / `session/add` (messages, speakers, metadata,
//! trigger), conversation and session look-ups, jobs.

use super::*;

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

/// `ttl_absolute - time` and `ttl_relative` at most this (VikingDB: 315,576,000 s, ten years).
const MAX_TTL_SECS: i64 = 315_576_000;

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
    /// The request, and whether it replaces the conversation (a VikingDB `session_id`).
    pub fn into_request(
        self,
        default_trigger: ExtractTrigger,
        session_add: bool,
    ) -> Result<(mnemo_core::service::WriteRequest, bool), CoreError> {
        let (conversation_id, replace) = match (self.conversation_id, self.session_id, session_add) {
            (Some(_), Some(_), _) => {
                return Err(CoreError::invalid(
                    "session_id",
                    "give conversation_id (mnemo: add a session to a conversation) or session_id (VikingDB: write or replace a session), not both",
                ));
            }
            (None, Some(_), false) => {
                return Err(CoreError::invalid("session_id", "streaming_write takes conversation_id, not session_id"));
            }
            (Some(c), None, _) => (c, false),
            (None, Some(sid), true) => {
                let ok =
                    !sid.is_empty() && sid.len() <= 128 && sid.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !ok {
                    return Err(CoreError::invalid(
                        "session_id",
                        format!("must be 1..=128 characters of letters, digits and '_', got {sid:?}"),
                    ));
                }
                (sid, true)
            }
            (None, None, true) => (format!("ses_{}", uuid::Uuid::now_v7().simple()), true),
            (None, None, false) => return Err(CoreError::invalid("conversation_id", "is required")),
        };
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
        let t = self.extract_trigger.unwrap_or_default();
        let trigger = ExtractTrigger::from_parts(t.token_count, t.message_count, t.wait_timeout, default_trigger)?;
        let mut meta = parse_metadata(self.metadata.unwrap_or_default())?;
        let name_of = |k: &str| meta.extra.get(k).and_then(Value::as_str).map(str::to_string);
        let (user_name, assistant_name) = (name_of("default_user_name"), name_of("default_assistant_name"));
        let default_time = match meta.extra.get("time") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) if n.is_i64() => n.as_i64(),
            Some(other) => {
                return Err(CoreError::invalid(
                    "metadata.time",
                    format!("must be milliseconds since the epoch, got {other}"),
                ));
            }
        };
        let mut messages = Vec::with_capacity(self.messages.len());
        for (i, m) in self.messages.into_iter().enumerate() {
            let role = Role::parse(&m.role).ok_or_else(|| {
                CoreError::invalid(
                    format!("messages[{i}].role"),
                    format!("must be one of user, assistant, system, tool; got {:?}", m.role),
                )
            })?;
            // A group chat: a user message may speak for another user (its events are theirs too).
            let other_speaker = match (&m.role_id, role) {
                (None, _) => None,
                (Some(id), Role::User) if meta.user_id.as_ref() != Some(id) => Some(id.clone()),
                (Some(id), Role::Assistant) if meta.assistant_id.as_ref() != Some(id) => {
                    return Err(CoreError::invalid(
                        format!("messages[{i}].role_id"),
                        format!(
                            "{id:?} is not the conversation's assistant (metadata.default_assistant_id): one assistant per conversation"
                        ),
                    ));
                }
                (Some(_), Role::User | Role::Assistant) => None,
                (Some(_), _) => {
                    return Err(CoreError::invalid(
                        format!("messages[{i}].role_id"),
                        "only user and assistant messages have a speaker id",
                    ));
                }
            };
            let name = match (m.name, m.role_name) {
                (Some(a), Some(b)) if a != b => {
                    return Err(CoreError::invalid(format!("messages[{i}].role_name"), "contradicts name; give one"));
                }
                (a, b) => a.or(b).or_else(|| match role {
                    _ if other_speaker.is_some() => other_speaker.clone(),
                    Role::User => user_name.clone(),
                    Role::Assistant => assistant_name.clone(),
                    _ => None,
                }),
            };
            if let (Some(id), Some(name)) = (other_speaker, &name) {
                match meta.speakers.get(name) {
                    Some(known) if *known != id => {
                        return Err(CoreError::invalid(
                            format!("messages[{i}].role_name"),
                            format!("{name:?} already speaks for {known:?} in this request, not {id:?}"),
                        ));
                    }
                    _ => {
                        meta.speakers.insert(name.clone(), id);
                    }
                }
            }
            messages.push(IncomingMessage {
                role,
                content: content_text(m.content, &format!("messages[{i}].content"))?,
                name,
                time: m.time.or(default_time),
                idempotency_key: m.idempotency_key,
            });
        }
        meta.extract_types = self.extract_memory_type.unwrap_or_default().into_iter().map(canonical_type).collect();
        let latest = messages.iter().filter_map(|m| m.time).max();
        meta.ttl = match (self.ttl_absolute, self.ttl_relative) {
            (Some(at), _) => {
                if let Some(t) = latest.filter(|&t| !(1..=MAX_TTL_SECS * 1000).contains(&(at - t))) {
                    return Err(CoreError::invalid(
                        "ttl_absolute",
                        format!("must be after the messages' time ({t}) by at most {MAX_TTL_SECS} s, got {at}"),
                    ));
                }
                Some(EventTtl::Absolute(at))
            }
            (None, Some(secs)) if (1..=MAX_TTL_SECS).contains(&secs) => Some(EventTtl::RelativeSecs(secs)),
            (None, Some(secs)) => {
                return Err(CoreError::invalid(
                    "ttl_relative",
                    format!("must be in 1..={MAX_TTL_SECS} seconds, got {secs}"),
                ));
            }
            (None, None) => None,
        };
        let req = mnemo_core::service::WriteRequest {
            project: self.project_name,
            collection: self.collection_name,
            conversation_id,
            messages,
            trigger,
            meta,
        };
        Ok((req, replace))
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
