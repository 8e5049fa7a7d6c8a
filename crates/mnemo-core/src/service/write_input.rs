//! One request model for every front end that writes turns (HTTP's `streaming_write` and
//! `session/add`, MCP's `remember`, the CLI): a write as it was received ([`WriteInput`]) becomes
//! the [`WriteRequest`] the service runs by the same rules everywhere — which conversation (or
//! VikingDB session id), each message's role and speaker (group chats: a user message may speak
//! for another user), names from the metadata's defaults, the default time, TTLs, the trigger.
//! A field's error names the field as the wire names it (`messages[2].role_id`).

use super::*;
use crate::error::CoreError;
use crate::trigger::ExtractTrigger;

/// `ttl_absolute - time` and `ttl_relative` at most this (VikingDB: 315,576,000 s, ten years).
pub const MAX_TTL_SECS: i64 = 315_576_000;

/// A message as a front end received it.
#[derive(Clone, Debug, Default)]
pub struct MessageInput {
    /// `user`, `assistant`, `system` or `tool`.
    pub role: String,
    pub content: String,
    /// The speaker's name (`name`, or VikingDB's `role_name`: at most one of them, or equal).
    pub name: Option<String>,
    pub role_name: Option<String>,
    /// The speaker's id: a user message naming another user than the conversation's speaks for
    /// them (a group chat); an assistant message may only name the conversation's assistant.
    pub role_id: Option<String>,
    pub time: Option<Millis>,
    pub idempotency_key: Option<String>,
}

/// The trigger's thresholds as given (each `None`: the server's default).
#[derive(Clone, Copy, Debug, Default)]
pub struct TriggerInput {
    pub token_count: Option<i64>,
    pub message_count: Option<i64>,
    pub wait_timeout: Option<i64>,
}

/// A write as a front end received it: which conversation, the messages, and the conversation's
/// metadata (ids; in `meta.extra`, `default_user_name`, `default_assistant_name` and `time`, the
/// messages' default time in ms).
#[derive(Clone, Debug, Default)]
pub struct WriteInput {
    pub project: String,
    pub collection: String,
    /// mnemo's conversation id.
    pub conversation_id: Option<String>,
    /// VikingDB's session id (`session/add` only): the session written, or replaced if it exists.
    pub session_id: Option<String>,
    pub messages: Vec<MessageInput>,
    pub meta: ConversationMeta,
    pub trigger: TriggerInput,
    /// Memory types to extract (already in their canonical names).
    pub extract_types: Vec<String>,
    /// When the events extracted from these messages expire: at this time (ms) …
    pub ttl_absolute: Option<Millis>,
    /// … or this many seconds after their time.
    pub ttl_relative: Option<i64>,
}

/// A write's conversation: where it goes, and whether it replaces what that conversation held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteKind {
    /// `streaming_write`: turns added to a conversation.
    Stream,
    /// `session/add`: one closed session; with VikingDB's `session_id` it replaces the session.
    Session,
}

impl WriteInput {
    /// The request the service runs, and whether it replaces the conversation (a VikingDB
    /// `session_id` given again).
    pub fn into_request(
        self,
        kind: WriteKind,
        default_trigger: ExtractTrigger,
    ) -> Result<(WriteRequest, bool), CoreError> {
        let (conversation_id, replace) = conversation(self.conversation_id, self.session_id, kind)?;
        let t = self.trigger;
        let trigger = ExtractTrigger::from_parts(t.token_count, t.message_count, t.wait_timeout, default_trigger)?;
        let mut meta = self.meta;
        let messages = messages(self.messages, &mut meta)?;
        meta.extract_types = self.extract_types;
        let latest = messages.iter().filter_map(|m| m.time).max();
        meta.ttl = ttl(self.ttl_absolute, self.ttl_relative, latest)?;
        let req = WriteRequest {
            project: self.project,
            collection: self.collection,
            conversation_id,
            messages,
            trigger,
            meta,
        };
        Ok((req, replace))
    }
}

/// The conversation a write goes to: its conversation id, or (`session/add`) a VikingDB session
/// id — given, it replaces that session; absent, a new one.
fn conversation(
    conversation_id: Option<String>,
    session_id: Option<String>,
    kind: WriteKind,
) -> Result<(String, bool), CoreError> {
    match (conversation_id, session_id, kind) {
        (Some(_), Some(_), _) => Err(CoreError::invalid(
            "session_id",
            "give conversation_id (mnemo: add a session to a conversation) or session_id (VikingDB: write or replace a session), not both",
        )),
        (None, Some(_), WriteKind::Stream) => {
            Err(CoreError::invalid("session_id", "streaming_write takes conversation_id, not session_id"))
        }
        (Some(c), None, _) => Ok((c, false)),
        (None, Some(sid), WriteKind::Session) => {
            let ok = !sid.is_empty() && sid.len() <= 128 && sid.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok {
                return Err(CoreError::invalid(
                    "session_id",
                    format!("must be 1..=128 characters of letters, digits and '_', got {sid:?}"),
                ));
            }
            Ok((sid, true))
        }
        (None, None, WriteKind::Session) => Ok((format!("ses_{}", uuid::Uuid::now_v7().simple()), true)),
        (None, None, WriteKind::Stream) => Err(CoreError::invalid("conversation_id", "is required")),
    }
}

/// Each message's role, speaker and name; group-chat speakers recorded in `meta.speakers`.
fn messages(input: Vec<MessageInput>, meta: &mut ConversationMeta) -> Result<Vec<IncomingMessage>, CoreError> {
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
    let mut messages = Vec::with_capacity(input.len());
    for (i, m) in input.into_iter().enumerate() {
        let role = Role::parse(&m.role).ok_or_else(|| {
            CoreError::invalid(
                format!("messages[{i}].role"),
                format!("must be one of user, assistant, system, tool; got {:?}", m.role),
            )
        })?;
        let other_speaker = speaker(i, m.role_id, role, meta)?;
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
            content: m.content,
            name,
            time: m.time.or(default_time),
            idempotency_key: m.idempotency_key,
        });
    }
    Ok(messages)
}

/// The other user a message speaks for (a group chat), if its `role_id` names one.
fn speaker(
    i: usize,
    role_id: Option<String>,
    role: Role,
    meta: &ConversationMeta,
) -> Result<Option<String>, CoreError> {
    match (role_id, role) {
        (None, _) => Ok(None),
        (Some(id), Role::User) if meta.user_id.as_ref() != Some(&id) => Ok(Some(id)),
        (Some(id), Role::Assistant) if meta.assistant_id.as_ref() != Some(&id) => Err(CoreError::invalid(
            format!("messages[{i}].role_id"),
            format!(
                "{id:?} is not the conversation's assistant (metadata.default_assistant_id): one assistant per conversation"
            ),
        )),
        (Some(_), Role::User | Role::Assistant) => Ok(None),
        (Some(_), _) => Err(CoreError::invalid(
            format!("messages[{i}].role_id"),
            "only user and assistant messages have a speaker id",
        )),
    }
}

/// The extracted events' expiry: an absolute time after the messages' (by at most
/// [`MAX_TTL_SECS`]), or seconds after their own time.
fn ttl(absolute: Option<Millis>, relative: Option<i64>, latest: Option<Millis>) -> Result<Option<EventTtl>, CoreError> {
    match (absolute, relative) {
        (Some(at), _) => {
            if let Some(t) = latest.filter(|&t| !(1..=MAX_TTL_SECS * 1000).contains(&(at - t))) {
                return Err(CoreError::invalid(
                    "ttl_absolute",
                    format!("must be after the messages' time ({t}) by at most {MAX_TTL_SECS} s, got {at}"),
                ));
            }
            Ok(Some(EventTtl::Absolute(at)))
        }
        (None, Some(secs)) if (1..=MAX_TTL_SECS).contains(&secs) => Ok(Some(EventTtl::RelativeSecs(secs))),
        (None, Some(secs)) => {
            Err(CoreError::invalid("ttl_relative", format!("must be in 1..={MAX_TTL_SECS} seconds, got {secs}")))
        }
        (None, None) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(messages: Vec<MessageInput>) -> WriteInput {
        WriteInput {
            project: "default".into(),
            collection: "c".into(),
            conversation_id: Some("conv".into()),
            messages,
            meta: ConversationMeta { user_id: Some("u1".into()), ..Default::default() },
            ..Default::default()
        }
    }

    fn user(content: &str) -> MessageInput {
        MessageInput { role: "user".into(), content: content.into(), ..Default::default() }
    }

    #[test]
    fn a_group_chat_speaker_gets_their_name_and_is_recorded() {
        let mut m = user("hi");
        m.role_id = Some("u2".into());
        m.role_name = Some("Wen".into());
        let (req, replace) = input(vec![m, user("hello")]).into_request(WriteKind::Stream, Default::default()).unwrap();
        assert!(!replace);
        assert_eq!(req.messages[0].name.as_deref(), Some("Wen"));
        assert_eq!(req.meta.speakers.get("Wen").map(String::as_str), Some("u2"));
        assert_eq!(req.messages[1].name, None);
    }

    #[test]
    fn names_and_time_come_from_the_metadata_defaults() {
        let mut w = input(vec![user("hi")]);
        w.meta.extra.insert("default_user_name".into(), "Ann".into());
        w.meta.extra.insert("time".into(), 1_700_000_000_000_i64.into());
        let (req, _) = w.into_request(WriteKind::Stream, Default::default()).unwrap();
        assert_eq!(req.messages[0].name.as_deref(), Some("Ann"));
        assert_eq!(req.messages[0].time, Some(1_700_000_000_000));
    }

    #[test]
    fn errors_name_the_wire_field() {
        let mut m = user("hi");
        m.role = "robot".into();
        let e = input(vec![m]).into_request(WriteKind::Stream, Default::default()).unwrap_err().to_string();
        assert!(e.starts_with("messages[0].role: must be one of"), "{e}");
        let mut w = input(vec![user("hi")]);
        w.ttl_relative = Some(0);
        let e = w.into_request(WriteKind::Stream, Default::default()).unwrap_err().to_string();
        assert!(e.starts_with("ttl_relative: must be in 1..=315576000"), "{e}");
        let mut w = input(vec![user("hi")]);
        w.conversation_id = None;
        let e = w.into_request(WriteKind::Stream, Default::default()).unwrap_err().to_string();
        assert_eq!(e, "conversation_id: is required");
        let mut w = input(vec![user("hi")]);
        (w.conversation_id, w.session_id) = (None, Some("bad id".into()));
        let e = w.into_request(WriteKind::Session, Default::default()).unwrap_err().to_string();
        assert!(e.starts_with("session_id: must be 1..=128"), "{e}");
    }

    #[test]
    fn a_session_without_an_id_is_new_and_one_with_an_id_replaces() {
        let mut w = input(vec![user("hi")]);
        w.conversation_id = None;
        let (req, replace) = w.clone().into_request(WriteKind::Session, Default::default()).unwrap();
        assert!(req.conversation_id.starts_with("ses_") && replace);
        w.session_id = Some("s_1".into());
        let (req, replace) = w.into_request(WriteKind::Session, Default::default()).unwrap();
        assert_eq!((req.conversation_id.as_str(), replace), ("s_1", true));
    }
}
