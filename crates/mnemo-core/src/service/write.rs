//! The write path: `streaming_write`, `session_add`, `flush`, and what a conversation holds.

use super::*;
use crate::error::{CoreError, CoreResult};
use crate::tokens::TokenCounter;
use crate::trigger::ExtractTrigger;

/// A message as a client sends it, before validation.
#[derive(Clone, Debug)]
pub struct IncomingMessage {
    pub role: Role,
    pub content: String,
    pub name: Option<String>,
    pub time: Option<Millis>,
    pub idempotency_key: Option<String>,
}

#[derive(Clone, Debug)]
pub struct WriteRequest {
    pub project: String,
    pub collection: String,
    pub conversation_id: String,
    pub messages: Vec<IncomingMessage>,
    pub trigger: ExtractTrigger,
    pub meta: ConversationMeta,
}

impl Service {
    /// Whose a conversation is: `None` when it (or its collection) does not exist yet, else the
    /// user its metadata names (if any).
    pub async fn conversation_owner(&self, t: &Target, conversation_id: &str) -> CoreResult<Option<Option<String>>> {
        let c = match self.collection_for_read(t).await {
            Ok(c) => c,
            Err(CoreError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(self.store.conversation_info(c.id, conversation_id).await?.map(|i| i.meta.user_id))
    }

    pub async fn streaming_write(&self, req: WriteRequest) -> CoreResult<AppendOutcome> {
        let append = self.prepare_append(req).await?;
        let out = self.store.append_messages(append).await?;
        if out.closed.is_some() {
            self.job_queued.notify_waiters();
        }
        Ok(out)
    }

    /// Writes a whole session and queues its extraction. With `replace` (VikingDB's session/add
    /// on a re-used `session_id`, kept as the conversation id) the conversation's earlier
    /// messages, sessions and events are deleted first and their profile changes withdrawn; the
    /// answer says whether the session existed (even with pending turns only).
    pub async fn session_add(&self, req: WriteRequest, replace: bool) -> CoreResult<(SessionClosed, bool)> {
        let t = Target { project: req.project.clone(), collection: req.collection.clone() };
        let new_user = req.meta.user_id.clone();
        let append = self.prepare_append(req).await?;
        let (cid, conv) = (append.collection_id, append.conversation_id.clone());
        let (withdrawn, old_user, existed) = match replace {
            false => (vec![], None, false),
            true => match self.store.conversation_info(cid, &conv).await? {
                None => (vec![], None, false),
                Some(old) => (self.store.delete_conversation(cid, &conv).await?, old.meta.user_id, true),
            },
        };
        let closed = self.store.add_session(append).await?;
        self.job_queued.notify_waiters();
        if !withdrawn.is_empty() {
            let c = self.collection_for_write(&t).await?;
            let users: Vec<String> = old_user.into_iter().chain(new_user).collect();
            self.withdraw_from_profiles(&c, users, &withdrawn).await?;
        }
        Ok((closed, existed))
    }

    /// Deletes a conversation — its messages, sessions, jobs and events — and withdraws what its
    /// sessions changed in profiles; answers how many sessions it had.
    pub async fn delete_conversation(&self, t: &Target, conversation_id: &str) -> CoreResult<usize> {
        validate_conversation_id(conversation_id)?;
        let c = self.collection_for_read(t).await?;
        let Some(info) = self.store.conversation_info(c.id, conversation_id).await? else {
            return Err(CoreError::NotFound(format!("conversation_id: no conversation \"{conversation_id}\"")));
        };
        let sessions = self.store.delete_conversation(c.id, conversation_id).await?;
        if !sessions.is_empty() {
            self.withdraw_from_profiles(&c, info.meta.user_id.into_iter().collect(), &sessions).await?;
        }
        Ok(sessions.len())
    }

    pub async fn flush(&self, t: &Target, conversation_id: &str) -> CoreResult<Option<SessionClosed>> {
        validate_conversation_id(conversation_id)?;
        let c = self.collection_for_read(t).await?;
        let closed =
            self.store.flush_conversation(c.id, conversation_id, self.now(), self.config.max_job_attempts).await?;
        if closed.is_some() {
            self.job_queued.notify_waiters();
        }
        Ok(closed)
    }

    pub async fn conversation_info(&self, t: &Target, conversation_id: &str) -> CoreResult<ConversationInfo> {
        validate_conversation_id(conversation_id)?;
        let c = self.collection_for_read(t).await?;
        self.store
            .conversation_info(c.id, conversation_id)
            .await?
            .ok_or_else(|| CoreError::NotFound(format!("conversation_id: no conversation \"{conversation_id}\"")))
    }

    pub async fn session_info(&self, t: &Target, session_id: &str) -> CoreResult<SessionDetail> {
        validate_id("session_id", session_id)?;
        let c = self.collection_for_read(t).await?;
        self.store
            .session_info(c.id, session_id)
            .await?
            .ok_or_else(|| CoreError::NotFound(format!("session_id: no session \"{session_id}\"")))
    }

    pub(super) async fn prepare_append(&self, req: WriteRequest) -> CoreResult<AppendRequest> {
        validate_conversation_id(&req.conversation_id)?;
        if req.messages.is_empty() || req.messages.len() > MAX_MESSAGES_PER_WRITE {
            return Err(CoreError::invalid(
                "messages",
                format!("must hold 1..={MAX_MESSAGES_PER_WRITE} messages, got {}", req.messages.len()),
            ));
        }
        let now = self.now();
        let mut messages = Vec::with_capacity(req.messages.len());
        for (i, mut m) in req.messages.into_iter().enumerate() {
            if m.content.trim().is_empty() {
                return Err(CoreError::invalid(format!("messages[{i}].content"), "must not be empty"));
            }
            if let std::borrow::Cow::Owned(r) = self.config.redaction.apply(&m.content) {
                m.content = r;
            }
            if m.content.trim().is_empty() {
                return Err(CoreError::invalid(format!("messages[{i}].content"), "must not be empty"));
            }
            let chars = m.content.chars().count();
            if chars > MAX_CONTENT_CHARS {
                return Err(CoreError::invalid(
                    format!("messages[{i}].content"),
                    format!("must be at most {MAX_CONTENT_CHARS} characters, got {chars}"),
                ));
            }
            if let Some(name) = &m.name {
                check_len(&format!("messages[{i}].name"), name, 1, MAX_NAME_CHARS)?;
            }
            if let Some(key) = &m.idempotency_key {
                check_len(&format!("messages[{i}].idempotency_key"), key, 1, MAX_ID_CHARS)?;
            }
            if let Some(t) = m.time {
                check_time(&format!("messages[{i}].time"), t)?;
            }
            let tokens = TokenCounter::count(&m.content) as u64;
            messages.push(NewMessage {
                role: m.role,
                tokens,
                content: m.content,
                name: m.name,
                time: m.time.unwrap_or(now),
                idempotency_key: m.idempotency_key,
            });
        }
        validate_meta(&req.meta)?;
        let mut meta = req.meta;
        for v in meta.extra.values_mut() {
            self.config.redaction.apply_json(v);
        }
        let collection =
            self.collection_for_write(&Target { project: req.project, collection: req.collection }).await?;
        let append = AppendRequest {
            collection_id: collection.id,
            conversation_id: req.conversation_id,
            meta,
            messages,
            trigger: req.trigger,
            now,
            max_job_attempts: self.config.max_job_attempts,
        };
        Ok(append)
    }
}
