//! Row ↔ record mapping for PostgreSQL: the same column lists as the embedded store, read with
//! tokio-postgres. JSON columns are text, parsed here.

use mnemo_core::StoreError;
use mnemo_core::model::*;
use mnemo_core::store::StoreResult;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_postgres::Row;

pub const COLLECTION_COLS: &str =
    "id, project_name, collection_name, description, schema_json, created_at, embedding_model, embedding_dim";
pub const MESSAGE_COLS: &str =
    "m.id, m.conversation_id, m.session_id, m.role, m.name, m.content, m.time, m.tokens, m.content_raw";
pub const SESSION_COLS: &str = "collection_id, session_id, conversation_id, reason, state, message_count, token_count, meta_json, created_at, extracted_at";
pub const JOB_COLS: &str = "collection_id, job_id, kind, state, conversation_id, session_id, attempts, max_attempts, last_error, \
     run_after, prompt_tokens, completion_tokens, created_at, updated_at, started_at, finished_at, requeues";
pub const EVENT_COLS: &str = "id, memory_type, user_ids, assistant_ids, group_id, session_id, conversation_id, scope, class, \
     status, time, memory_info, source_message_ids, hit_count, last_hit_at, created_at, updated_at, expires_at, superseded_by, \
     coalesce(valid_from, time), valid_to";
pub const PROFILE_COLS: &str = "id, profile_type, user_id, assistant_id, content, attributes, source_sessions, created_at, updated_at, attribute_since";

pub fn json<T: Serialize + ?Sized>(v: &T) -> String {
    serde_json::to_string(v).expect("plain data serializes")
}

pub fn parse<T: DeserializeOwned + Default>(s: &str) -> T {
    serde_json::from_str(s).unwrap_or_default()
}

fn bad(what: &str) -> StoreError {
    StoreError::backend(format!("unreadable {what} in the database"))
}

pub fn collection_from_row(r: &Row) -> StoreResult<Collection> {
    let schema: String = r.get(4);
    Ok(Collection {
        id: r.get(0),
        project_name: r.get(1),
        collection_name: r.get(2),
        description: r.get(3),
        schema: serde_json::from_str(&schema).map_err(|_| bad("collection schema"))?,
        created_at: r.get(5),
        embedding_model: r.get(6),
        embedding_dim: r.get::<_, Option<i64>>(7).map(|d| d as u32),
    })
}

pub fn message_from_row(r: &Row) -> StoreResult<StoredMessage> {
    let role: String = r.get(3);
    Ok(StoredMessage {
        message_id: r.get(0),
        conversation_id: r.get(1),
        session_id: r.get(2),
        role: Role::parse(&role).ok_or_else(|| bad("role"))?,
        name: r.get(4),
        content: match r.get::<_, Option<Vec<u8>>>(8) {
            Some(raw) => String::from_utf8(raw).map_err(|_| bad("message content"))?,
            None => r.get(5),
        },
        time: r.get(6),
        tokens: r.get::<_, i64>(7) as u64,
    })
}

pub fn session_from_row(r: &Row) -> StoreResult<(CollectionId, SessionSummary, ConversationMeta)> {
    let meta: ConversationMeta = parse(r.get::<_, &str>(7));
    Ok((
        r.get(0),
        SessionSummary {
            session_id: r.get(1),
            conversation_id: r.get(2),
            reason: r.get(3),
            state: r.get(4),
            message_count: r.get::<_, i64>(5) as u64,
            token_count: r.get::<_, i64>(6) as u64,
            user_id: meta.user_id.clone(),
            assistant_id: meta.assistant_id.clone(),
            created_at: r.get(8),
            extracted_at: r.get(9),
        },
        meta,
    ))
}

pub fn job_from_row(r: &Row) -> StoreResult<(CollectionId, Job)> {
    let state: String = r.get(3);
    Ok((
        r.get(0),
        Job {
            job_id: r.get(1),
            kind: r.get(2),
            state: JobState::parse(&state).ok_or_else(|| bad("job state"))?,
            conversation_id: r.get(4),
            session_id: r.get(5),
            attempts: r.get::<_, i64>(6) as u32,
            max_attempts: r.get::<_, i64>(7) as u32,
            last_error: r.get(8),
            run_after: r.get(9),
            prompt_tokens: r.get::<_, i64>(10) as u64,
            completion_tokens: r.get::<_, i64>(11) as u64,
            created_at: r.get(12),
            updated_at: r.get(13),
            started_at: r.get(14),
            finished_at: r.get(15),
            requeues: r.get::<_, i64>(16) as u32,
        },
    ))
}

pub fn event_from_row(r: &Row) -> StoreResult<Event> {
    Ok(Event {
        id: r.get(0),
        memory_type: r.get(1),
        user_id: parse(r.get::<_, &str>(2)),
        assistant_id: parse(r.get::<_, &str>(3)),
        group_id: r.get(4),
        session_id: r.get(5),
        conversation_id: r.get(6),
        scope: r.get(7),
        class: r.get(8),
        status: r.get(9),
        time: r.get(10),
        memory_info: parse(r.get::<_, &str>(11)),
        source_message_ids: parse(r.get::<_, &str>(12)),
        hit_count: r.get::<_, i64>(13) as u64,
        last_hit_at: r.get(14),
        created_at: r.get(15),
        updated_at: r.get(16),
        expires_at: r.get(17),
        superseded_by: r.get(18),
        valid_from: r.get(19),
        valid_to: r.get(20),
    })
}

pub fn profile_from_row(r: &Row) -> StoreResult<Profile> {
    let assistant: String = r.get(3);
    Ok(Profile {
        id: r.get(0),
        profile_type: r.get(1),
        user_id: r.get(2),
        assistant_id: (!assistant.is_empty()).then_some(assistant),
        content: r.get(4),
        attributes: parse(r.get::<_, &str>(5)),
        source_session_ids: parse(r.get::<_, &str>(6)),
        created_at: r.get(7),
        updated_at: r.get(8),
        history: vec![],
        since: parse(r.get::<_, &str>(9)),
    })
}

pub fn from_rows<T>(rows: Vec<Row>, f: impl Fn(&Row) -> StoreResult<T>) -> StoreResult<Vec<T>> {
    rows.iter().map(f).collect()
}
