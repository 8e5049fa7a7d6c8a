//! mnemo-store: the embedded store. One SQLite file in WAL mode holds collections,
//! conversations, messages, sessions, the durable job queue, events and profiles.
//!
//! Writes go through one writer thread with group commit ([`writer`]); reads use a small pool of
//! connections on `spawn_blocking`. Every `Store` method is one transaction, so a method that
//! returned `Ok` is on disk (WAL, `synchronous=NORMAL` survives a killed process; `full` also
//! survives power loss). This crate knows SQL and nothing of HTTP or models.

mod privacy;
mod rows;
mod schema;
mod search;
mod writer;

use async_trait::async_trait;
use mnemo_core::extract::ExtractionOutput;
use mnemo_core::model::*;
use mnemo_core::store::{Store, StoreResult};
use mnemo_core::{StoreError, TriggerReason, profile};
use rows::*;
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params, params_from_iter};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use writer::Writer;

pub use schema::SCHEMA_VERSION;

/// How hard a commit waits for the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// WAL + `synchronous=NORMAL`: a committed write survives the process being killed.
    #[default]
    Process,
    /// WAL + `synchronous=FULL`: also survives power loss (an fsync per group commit).
    PowerLoss,
}

#[derive(Clone, Debug)]
pub struct SqliteOptions {
    pub durability: Durability,
    /// Page cache per connection, MiB (the default 2 MiB made inserts ~5× slower here).
    pub cache_mib: u32,
    pub readers: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self { durability: Durability::Process, cache_mib: 64, readers: 4 }
    }
}

pub struct SqliteStore {
    path: PathBuf,
    writer: Writer,
    readers: Arc<Mutex<Vec<Connection>>>,
    options: SqliteOptions,
}

pub const DB_FILE: &str = "mnemo.db";

impl SqliteStore {
    /// Opens (creating if needed) the store in `dir`, migrating it to the current schema.
    pub fn open(dir: &Path, options: SqliteOptions) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| StoreError::Backend(format!("cannot create data directory {}: {e}", dir.display())))?;
        let path = dir.join(DB_FILE);
        let mut conn = open_conn(&path, &options, false).map_err(backend)?;
        schema::migrate_with(&mut conn, |tx, version| match version {
            7 => backfill_terms(tx)
                .map(|n| tracing::info!(events = n, "indexed the terms of events written before schema v7")),
            _ => Ok(()),
        })
        .map_err(backend)?
        .map_err(StoreError::Backend)?;
        // Jobs left `running` by a previous process of this single-process store resume now.
        conn.execute("UPDATE jobs SET state='queued', lease_until=NULL WHERE state='running'", []).map_err(backend)?;
        Ok(Self { path, writer: Writer::spawn(conn), readers: Arc::new(Mutex::new(Vec::new())), options })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn read<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    {
        let pool = self.readers.clone();
        let path = self.path.clone();
        let options = self.options.clone();
        tokio::task::spawn_blocking(move || {
            let conn = pool.lock().expect("reader pool").pop();
            let conn = match conn {
                Some(c) => c,
                None => open_conn(&path, &options, true).map_err(backend)?,
            };
            // One snapshot for the whole read: a read made of several queries must not see a
            // commit land between them (e.g. a job `done` without its events).
            conn.execute_batch("BEGIN").map_err(backend)?;
            let out = f(&conn);
            let _ = conn.execute_batch("COMMIT");
            let mut pool = pool.lock().expect("reader pool");
            if pool.len() < options.readers {
                pool.push(conn);
            }
            out
        })
        .await
        .map_err(|e| StoreError::Backend(format!("read task failed: {e}")))?
    }
}

fn open_conn(path: &Path, o: &SqliteOptions, read_only: bool) -> rusqlite::Result<Connection> {
    let flags = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX
    };
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    if !read_only {
        conn.pragma_update(None, "journal_mode", "WAL")?;
    }
    let sync = match o.durability {
        Durability::Process => "NORMAL",
        Durability::PowerLoss => "FULL",
    };
    conn.execute_batch(&format!(
        "PRAGMA synchronous={sync}; PRAGMA foreign_keys=ON; PRAGMA cache_size=-{}; PRAGMA temp_store=MEMORY; PRAGMA secure_delete=ON;",
        o.cache_mib as i64 * 1024
    ))?;
    Ok(conn)
}

pub(crate) use event_filter_sql as filter_sql;

pub(crate) fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

// ---------------------------------------------------------------------------------------------
// Transaction bodies (run on the writer connection, inside the writer's transaction)

fn collection_by_name(conn: &Connection, project: &str, name: &str) -> StoreResult<Option<Collection>> {
    conn.query_row(
        &format!("SELECT {COLLECTION_COLS} FROM collections WHERE project_name=?1 AND collection_name=?2"),
        params![project, name],
        collection_from_row,
    )
    .optional()
    .map_err(backend)
}

fn collection_by_id(conn: &Connection, id: CollectionId) -> StoreResult<Collection> {
    conn.query_row(&format!("SELECT {COLLECTION_COLS} FROM collections WHERE id=?1"), [id], collection_from_row)
        .map_err(backend)
}

fn insert_collection(conn: &Connection, c: &NewCollection) -> StoreResult<Collection> {
    let schema = serde_json::to_string(&c.schema).map_err(backend)?;
    conn.execute(
        "INSERT INTO collections(project_name, collection_name, description, schema_json, created_at, embedding_model, embedding_dim)
         VALUES (?1,?2,?3,?4,?5,?6,?7)",
        params![c.project_name, c.collection_name, c.description, schema, c.created_at, c.embedding_model, c.embedding_dim],
    )
    .map_err(backend)?;
    collection_by_id(conn, conn.last_insert_rowid())
}

struct ConversationRow {
    meta: ConversationMeta,
    open_messages: u64,
    open_tokens: u64,
}

fn load_conversation(conn: &Connection, cid: CollectionId, conv: &str) -> StoreResult<Option<ConversationRow>> {
    conn.query_row(
        "SELECT meta_json, open_messages, open_tokens FROM conversations WHERE collection_id=?1 AND conversation_id=?2",
        params![cid, conv],
        |r| {
            Ok(ConversationRow {
                meta: parse_meta(&r.get::<_, String>(0)?),
                open_messages: r.get::<_, i64>(1)? as u64,
                open_tokens: r.get::<_, i64>(2)? as u64,
            })
        },
    )
    .optional()
    .map_err(backend)
}

/// Creates or updates the conversation row with merged metadata; returns the merged state.
fn upsert_conversation(conn: &Connection, req: &AppendRequest) -> StoreResult<ConversationRow> {
    let mut row = load_conversation(conn, req.collection_id, &req.conversation_id)?.unwrap_or(ConversationRow {
        meta: ConversationMeta::default(),
        open_messages: 0,
        open_tokens: 0,
    });
    row.meta.merge(&req.meta);
    conn.execute(
        "INSERT INTO conversations(collection_id, conversation_id, meta_json, wait_timeout_ms, last_write_at, created_at)
         VALUES (?1,?2,?3,?4,?5,?5)
         ON CONFLICT(collection_id, conversation_id) DO UPDATE SET meta_json=excluded.meta_json,
             wait_timeout_ms=excluded.wait_timeout_ms, last_write_at=excluded.last_write_at",
        params![req.collection_id, req.conversation_id, meta_json(&row.meta), req.trigger.wait_timeout_ms(), req.now],
    )
    .map_err(backend)?;
    Ok(row)
}

/// Inserts the messages; returns (stored, duplicates, stored tokens, largest stored message).
fn insert_messages(
    conn: &Connection,
    req: &AppendRequest,
    session_id: Option<&str>,
) -> StoreResult<(u64, u64, u64, u64)> {
    let mut stmt = conn
        .prepare_cached(
            "INSERT INTO messages(collection_id, conversation_id, session_id, role, name, content, time, tokens, idempotency_key, created_at)
             VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10) ON CONFLICT DO NOTHING",
        )
        .map_err(backend)?;
    let (mut stored, mut dup, mut tokens, mut largest) = (0, 0, 0, 0);
    for m in &req.messages {
        let n = stmt
            .execute(params![
                req.collection_id,
                req.conversation_id,
                session_id,
                m.role.as_str(),
                m.name,
                m.content,
                m.time,
                m.tokens as i64,
                m.idempotency_key,
                req.now
            ])
            .map_err(backend)?;
        if n == 1 {
            stored += 1;
            tokens += m.tokens;
            largest = largest.max(m.tokens);
        } else {
            dup += 1;
        }
    }
    Ok((stored, dup, tokens, largest))
}

#[allow(clippy::too_many_arguments)] // one row's worth of columns; a struct would only rename them
fn insert_session_and_job(
    conn: &Connection,
    cid: CollectionId,
    conv: &str,
    meta: &ConversationMeta,
    reason: TriggerReason,
    messages: u64,
    tokens: u64,
    now: Millis,
    max_attempts: u32,
) -> StoreResult<SessionClosed> {
    let session_id = new_id("ses");
    let job_id = new_id("job");
    conn.execute(
        "INSERT INTO sessions(session_id, collection_id, conversation_id, reason, state, message_count, token_count, meta_json, created_at)
         VALUES (?1,?2,?3,?4,'queued',?5,?6,?7,?8)",
        params![session_id, cid, conv, reason.as_str(), messages as i64, tokens as i64, meta_json(meta), now],
    )
    .map_err(backend)?;
    conn.execute(
        "INSERT INTO jobs(job_id, collection_id, kind, state, conversation_id, session_id, max_attempts, run_after, created_at, updated_at)
         VALUES (?1,?2,'extract','queued',?3,?4,?5,?6,?6,?6)",
        params![job_id, cid, conv, session_id, max_attempts, now],
    )
    .map_err(backend)?;
    Ok(SessionClosed { session_id, job_id, conversation_id: conv.to_string(), reason, message_count: messages })
}

/// Closes the conversation's open messages into a session with a queued job.
fn close_open_messages(
    conn: &Connection,
    cid: CollectionId,
    conv: &str,
    reason: TriggerReason,
    now: Millis,
    max_attempts: u32,
) -> StoreResult<Option<SessionClosed>> {
    let Some(row) = load_conversation(conn, cid, conv)? else {
        return Ok(None);
    };
    if row.open_messages == 0 {
        return Ok(None);
    }
    let closed = insert_session_and_job(
        conn,
        cid,
        conv,
        &row.meta,
        reason,
        row.open_messages,
        row.open_tokens,
        now,
        max_attempts,
    )?;
    let moved = conn
        .execute(
            "UPDATE messages SET session_id=?1 WHERE collection_id=?2 AND conversation_id=?3 AND session_id IS NULL",
            params![closed.session_id, cid, conv],
        )
        .map_err(backend)?;
    debug_assert_eq!(moved as u64, row.open_messages);
    conn.execute(
        "UPDATE conversations SET open_messages=0, open_tokens=0, idle_deadline=NULL WHERE collection_id=?1 AND conversation_id=?2",
        params![cid, conv],
    )
    .map_err(backend)?;
    Ok(Some(closed))
}

fn messages_where(conn: &Connection, where_sql: &str, args: &[SqlValue]) -> StoreResult<Vec<StoredMessage>> {
    let mut stmt = conn
        .prepare_cached(&format!("SELECT {MESSAGE_COLS} FROM messages m WHERE {where_sql} ORDER BY m.id"))
        .map_err(backend)?;
    let rows = stmt.query_map(params_from_iter(args.iter()), message_from_row).map_err(backend)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(backend)
}

fn session_summary(
    conn: &Connection,
    session_id: &str,
) -> StoreResult<Option<(CollectionId, SessionSummary, ConversationMeta)>> {
    conn.query_row(&format!("SELECT {SESSION_COLS} FROM sessions WHERE session_id=?1"), [session_id], session_from_row)
        .optional()
        .map_err(backend)
}

fn job_by_id(conn: &Connection, job_id: &str) -> StoreResult<Option<(CollectionId, Job)>> {
    conn.query_row(&format!("SELECT {JOB_COLS} FROM jobs WHERE job_id=?1"), [job_id], job_from_row)
        .optional()
        .map_err(backend)
}

fn profile_for(
    conn: &Connection,
    cid: CollectionId,
    ptype: &str,
    user: &str,
    assistant: &str,
) -> StoreResult<Option<Profile>> {
    conn.query_row(
        &format!("SELECT {PROFILE_COLS} FROM profiles WHERE collection_id=?1 AND profile_type=?2 AND user_id=?3 AND assistant_id=?4"),
        params![cid, ptype, user, assistant],
        profile_from_row,
    )
    .optional()
    .map_err(backend)
    .and_then(|p| one_with_history(conn, p))
}

fn profile_by_id(conn: &Connection, cid: CollectionId, id: &str) -> StoreResult<Option<Profile>> {
    conn.query_row(
        &format!("SELECT {PROFILE_COLS} FROM profiles WHERE collection_id=?1 AND id=?2"),
        params![cid, id],
        profile_from_row,
    )
    .optional()
    .map_err(backend)
    .and_then(|p| one_with_history(conn, p))
}

/// Fills in the attribute history of each profile.
pub(crate) fn with_history(conn: &Connection, mut profiles: Vec<Profile>) -> StoreResult<Vec<Profile>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT attribute, value, valid_from, valid_to, session_id FROM profile_history WHERE profile_id=?1 ORDER BY valid_to, id",
        )
        .map_err(backend)?;
    for p in profiles.iter_mut() {
        let rows = stmt
            .query_map([&p.id], |r| {
                Ok(AttributeVersion {
                    attribute: r.get(0)?,
                    value: serde_json::from_str(&r.get::<_, String>(1)?).unwrap_or(serde_json::Value::Null),
                    valid_from: r.get(2)?,
                    valid_to: r.get(3)?,
                    session_id: r.get(4)?,
                })
            })
            .map_err(backend)?;
        p.history = rows.collect::<Result<Vec<_>, _>>().map_err(backend)?;
    }
    Ok(profiles)
}

fn one_with_history(conn: &Connection, p: Option<Profile>) -> StoreResult<Option<Profile>> {
    Ok(match p {
        Some(p) => with_history(conn, vec![p])?.pop(),
        None => None,
    })
}

/// Attribute values and since when they hold (`profiles.attribute_since`).
type Since = serde_json::Map<String, serde_json::Value>;

fn attribute_since(conn: &Connection, id: &str) -> StoreResult<Since> {
    let raw: Option<String> = conn
        .query_row("SELECT attribute_since FROM profiles WHERE id=?1", [id], |r| r.get(0))
        .optional()
        .map_err(backend)?;
    Ok(raw.and_then(|r| serde_json::from_str(&r).ok()).unwrap_or_default())
}

/// Records what a change did to a profile's attributes: since-times of changed attributes, and,
/// for `keep_history` types, the replaced values with their validity end.
struct AttributeChange<'a> {
    before: &'a serde_json::Map<String, serde_json::Value>,
    after: &'a serde_json::Map<String, serde_json::Value>,
    superseded: &'a [(String, serde_json::Value)],
}

fn record_versions(
    conn: &Connection,
    profile_id: &str,
    keep_history: bool,
    change: AttributeChange,
    session_id: Option<&str>,
    now: Millis,
) -> StoreResult<String> {
    let AttributeChange { before, after, superseded } = change;
    let mut since = attribute_since(conn, profile_id)?;
    if keep_history {
        let mut ins = conn
            .prepare_cached(
                "INSERT INTO profile_history(profile_id, attribute, value, valid_from, valid_to, session_id) VALUES (?1,?2,?3,?4,?5,?6)",
            )
            .map_err(backend)?;
        for (attr, old) in superseded {
            let from = since.get(attr).and_then(|v| v.as_i64());
            ins.execute(params![profile_id, attr, json(old), from, now, session_id]).map_err(backend)?;
        }
    }
    profile::update_since(&mut since, before, after, now);
    Ok(json(&since))
}

fn keeps_history(conn: &Connection, cid: CollectionId, profile_type: &str) -> StoreResult<bool> {
    Ok(collection_by_id(conn, cid)?
        .schema
        .profile_type(profile_type)
        .is_some_and(|t| t.update_mode == mnemo_core::model::ProfileUpdateMode::KeepHistory))
}

fn event_by_id(conn: &Connection, cid: CollectionId, id: &str) -> StoreResult<Option<Event>> {
    conn.query_row(
        &format!("SELECT {EVENT_COLS} FROM events WHERE collection_id=?1 AND id=?2"),
        params![cid, id],
        event_from_row,
    )
    .optional()
    .map_err(backend)
}

fn insert_event_row(conn: &Connection, e: &NewEvent) -> StoreResult<String> {
    let id = new_id("evt");
    conn.prepare_cached(
        "INSERT INTO events(id, collection_id, memory_type, user_ids, assistant_ids, group_id, session_id, conversation_id, scope,
                            class, status, time, memory_info, source_message_ids, created_at, updated_at, expires_at)
         VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,'active',?11,?12,?13,?14,?14,?15)",
    )
    .map_err(backend)?
    .execute(params![
        id,
        e.collection_id,
        e.memory_type,
        json(&e.user_id),
        json(&e.assistant_id),
        e.group_id,
        e.session_id,
        e.conversation_id,
        e.scope,
        e.class,
        e.time,
        json(&e.memory_info),
        json(&e.source_message_ids),
        e.now,
        e.expires_at
    ])
    .map_err(backend)?;
    let rowid = conn.last_insert_rowid();
    index_event(conn, e.collection_id, &id, rowid, &e.memory_info, e.embedding.as_deref())?;
    let mut subj = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO event_subjects(collection_id, kind, subject_id, event_id) VALUES (?1,?2,?3,?4)",
        )
        .map_err(backend)?;
    for u in &e.user_id {
        subj.execute(params![e.collection_id, "u", u, id]).map_err(backend)?;
    }
    for a in &e.assistant_id {
        subj.execute(params![e.collection_id, "a", a, id]).map_err(backend)?;
    }
    Ok(id)
}

/// (Re)writes an event's full-text terms and, if given, its vector.
fn index_event(
    conn: &Connection,
    cid: CollectionId,
    id: &str,
    rowid: i64,
    memory_info: &serde_json::Map<String, serde_json::Value>,
    vector: Option<&[f32]>,
) -> StoreResult<()> {
    let terms = mnemo_core::text::search_tokens(&event_search_text(memory_info)).join(" ");
    conn.prepare_cached("DELETE FROM event_fts WHERE rowid=?1").map_err(backend)?.execute([rowid]).map_err(backend)?;
    conn.prepare_cached("INSERT INTO event_fts(rowid, terms) VALUES (?1, ?2)")
        .map_err(backend)?
        .execute(params![rowid, terms])
        .map_err(backend)?;
    set_terms(conn, cid, rowid, Some(&terms))?;
    if let Some(v) = vector {
        conn.prepare_cached("INSERT OR REPLACE INTO event_vectors(event_id, collection_id, vec) VALUES (?1,?2,?3)")
            .map_err(backend)?
            .execute(params![id, cid, vec_to_blob(v)])
            .map_err(backend)?;
    }
    Ok(())
}

/// Replaces an event's analysed terms (None: removes them) and keeps the collection's BM25
/// statistics — documents, tokens, and per-token document counts — exact.
fn set_terms(conn: &Connection, cid: CollectionId, rowid: i64, terms: Option<&str>) -> StoreResult<()> {
    use mnemo_core::text::fts_tokens;
    use std::collections::HashSet;
    let old: Option<String> = conn
        .prepare_cached("SELECT terms FROM events WHERE rowid=?1")
        .map_err(backend)?
        .query_row([rowid], |r| r.get(0))
        .optional()
        .map_err(backend)?
        .flatten();
    let count = |t: &Option<&str>| -> (i64, HashSet<String>) {
        match t {
            Some(t) => {
                let toks: Vec<String> = fts_tokens(t).collect();
                (toks.len() as i64, toks.into_iter().collect())
            }
            None => (0, HashSet::new()),
        }
    };
    let (old_len, old_set) = count(&old.as_deref());
    let (new_len, new_set) = count(&terms);
    let mut df = conn
        .prepare_cached(
            "INSERT INTO term_stats(collection_id, term, df) VALUES (?1, ?2, ?3)
             ON CONFLICT(collection_id, term) DO UPDATE SET df = df + excluded.df",
        )
        .map_err(backend)?;
    for t in old_set.difference(&new_set) {
        df.execute(params![cid, t, -1]).map_err(backend)?;
    }
    for t in new_set.difference(&old_set) {
        df.execute(params![cid, t, 1]).map_err(backend)?;
    }
    let docs = i64::from(terms.is_some()) - i64::from(old.is_some());
    conn.prepare_cached(
        "INSERT INTO collection_stats(collection_id, docs, tokens) VALUES (?1, ?2, ?3)
         ON CONFLICT(collection_id) DO UPDATE SET docs = docs + excluded.docs, tokens = tokens + excluded.tokens",
    )
    .map_err(backend)?
    .execute(params![cid, docs, new_len - old_len])
    .map_err(backend)?;
    if terms.is_some() {
        conn.prepare_cached("UPDATE events SET terms=?2 WHERE rowid=?1")
            .map_err(backend)?
            .execute(params![rowid, terms])
            .map_err(backend)?;
    }
    Ok(())
}

/// Indexes the terms of events written before v7 (inside the v7 migration's transaction).
fn backfill_terms(conn: &Connection) -> rusqlite::Result<usize> {
    let rows: Vec<(i64, CollectionId, String)> = conn
        .prepare("SELECT rowid, collection_id, memory_info FROM events WHERE terms IS NULL")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<_, _>>()?;
    for (rowid, cid, info) in &rows {
        let info: serde_json::Map<String, serde_json::Value> = serde_json::from_str(info).unwrap_or_default();
        let terms = mnemo_core::text::search_tokens(&event_search_text(&info)).join(" ");
        set_terms(conn, *cid, *rowid, Some(&terms))
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    }
    Ok(rows.len())
}

/// Removes an event and everything indexed about it.
pub(crate) fn delete_event_row(conn: &Connection, cid: CollectionId, id: &str) -> StoreResult<bool> {
    let rowid: Option<i64> = conn
        .prepare_cached("SELECT rowid FROM events WHERE collection_id=?1 AND id=?2")
        .map_err(backend)?
        .query_row(params![cid, id], |r| r.get(0))
        .optional()
        .map_err(backend)?;
    let Some(rowid) = rowid else { return Ok(false) };
    conn.prepare_cached("DELETE FROM event_fts WHERE rowid=?1").map_err(backend)?.execute([rowid]).map_err(backend)?;
    set_terms(conn, cid, rowid, None)?;
    conn.prepare_cached("DELETE FROM event_vectors WHERE event_id=?1")
        .map_err(backend)?
        .execute([id])
        .map_err(backend)?;
    conn.prepare_cached("DELETE FROM event_subjects WHERE event_id=?1")
        .map_err(backend)?
        .execute([id])
        .map_err(backend)?;
    conn.prepare_cached("DELETE FROM events WHERE rowid=?1").map_err(backend)?.execute([rowid]).map_err(backend)?;
    Ok(true)
}

/// Builds `WHERE` conditions for an event filter; `?1` is always the collection id.
fn event_filter_sql(cid: CollectionId, f: &EventFilter) -> (String, Vec<SqlValue>) {
    // With a user or assistant filter, the subject index must drive the query (a user's events are
    // few); `+` keeps the planner from scanning the whole collection by `collection_id` instead
    // (measured: 43 ms → under 1 ms at 100k events, see docs/benchmarks.md).
    let mut sql = String::from(if f.user_id.is_empty() && f.assistant_id.is_empty() {
        "collection_id = ?1"
    } else {
        "+collection_id = ?1"
    });
    let mut args: Vec<SqlValue> = vec![SqlValue::Integer(cid)];
    let list = |sql: &mut String, args: &mut Vec<SqlValue>, template: &str, values: &[String]| {
        if values.is_empty() {
            return;
        }
        let mut marks = Vec::with_capacity(values.len());
        for v in values {
            args.push(SqlValue::Text(v.clone()));
            marks.push(format!("?{}", args.len()));
        }
        sql.push_str(" AND ");
        sql.push_str(&template.replace("{}", &marks.join(",")));
    };
    list(
        &mut sql,
        &mut args,
        "id IN (SELECT event_id FROM event_subjects WHERE collection_id=?1 AND kind='u' AND subject_id IN ({}))",
        &f.user_id,
    );
    list(
        &mut sql,
        &mut args,
        "id IN (SELECT event_id FROM event_subjects WHERE collection_id=?1 AND kind='a' AND subject_id IN ({}))",
        &f.assistant_id,
    );
    list(&mut sql, &mut args, "memory_type IN ({})", &f.memory_type);
    list(&mut sql, &mut args, "group_id IN ({})", &f.group_id);
    list(&mut sql, &mut args, "session_id IN ({})", &f.session_id);
    list(&mut sql, &mut args, "conversation_id IN ({})", &f.conversation_id);
    list(&mut sql, &mut args, "scope IN ({})", &f.scope);
    if let Some(t) = f.start_time {
        args.push(SqlValue::Integer(t));
        sql.push_str(&format!(" AND time >= ?{}", args.len()));
    }
    if let Some(t) = f.end_time {
        args.push(SqlValue::Integer(t));
        sql.push_str(&format!(" AND time <= ?{}", args.len()));
    }
    if f.active_only {
        sql.push_str(" AND status = 'active'");
    }
    (sql, args)
}

// ---------------------------------------------------------------------------------------------

#[async_trait]
impl Store for SqliteStore {
    fn engine(&self) -> &'static str {
        "sqlite"
    }

    async fn create_collection(&self, c: NewCollection) -> StoreResult<Collection> {
        self.writer
            .write(move |conn| {
                if collection_by_name(conn, &c.project_name, &c.collection_name)?.is_some() {
                    return Err(StoreError::Conflict(format!(
                        "collection_name: collection \"{}\" already exists in project \"{}\"",
                        c.collection_name, c.project_name
                    )));
                }
                insert_collection(conn, &c)
            })
            .await
    }

    async fn get_collection(&self, project: &str, name: &str) -> StoreResult<Option<Collection>> {
        let (p, n) = (project.to_string(), name.to_string());
        self.read(move |conn| collection_by_name(conn, &p, &n)).await
    }

    async fn ensure_collection(&self, c: NewCollection) -> StoreResult<Collection> {
        if let Some(found) = self.get_collection(&c.project_name, &c.collection_name).await? {
            return Ok(found);
        }
        self.writer
            .write(move |conn| match collection_by_name(conn, &c.project_name, &c.collection_name)? {
                Some(found) => Ok(found),
                None => insert_collection(conn, &c),
            })
            .await
    }

    async fn all_collections(&self) -> StoreResult<Vec<Collection>> {
        self.read(|conn| {
            let mut stmt =
                conn.prepare(&format!("SELECT {COLLECTION_COLS} FROM collections ORDER BY id")).map_err(backend)?;
            let rows = stmt.query_map([], collection_from_row).map_err(backend)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(backend)
        })
        .await
    }

    async fn set_collection_embedding(&self, id: CollectionId, model: &str, dim: u32) -> StoreResult<()> {
        let model = model.to_string();
        self.writer
            .write(move |conn| {
                conn.execute(
                    "UPDATE collections SET embedding_model=?2, embedding_dim=?3 WHERE id=?1",
                    params![id, model, dim],
                )
                .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn list_collections(&self, project: &str) -> StoreResult<Vec<Collection>> {
        let p = project.to_string();
        self.read(move |conn| {
            let mut stmt = conn
                .prepare(&format!(
                    "SELECT {COLLECTION_COLS} FROM collections WHERE project_name=?1 ORDER BY collection_name"
                ))
                .map_err(backend)?;
            let rows = stmt.query_map([p], collection_from_row).map_err(backend)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(backend)
        })
        .await
    }

    async fn delete_collection(&self, id: CollectionId) -> StoreResult<bool> {
        self.writer
            .write(move |conn| {
                // Children first (explicitly, so it does not depend on foreign-key enforcement).
                conn.execute(
                    "DELETE FROM event_fts WHERE rowid IN (SELECT rowid FROM events WHERE collection_id=?1)",
                    [id],
                )
                .map_err(backend)?;
                conn.execute("DELETE FROM term_stats WHERE collection_id=?1", [id]).map_err(backend)?;
                conn.execute("DELETE FROM collection_stats WHERE collection_id=?1", [id]).map_err(backend)?;
                for t in [
                    "event_vectors",
                    "event_subjects",
                    "events",
                    "profiles",
                    "jobs",
                    "sessions",
                    "messages",
                    "conversations",
                ] {
                    conn.execute(&format!("DELETE FROM {t} WHERE collection_id=?1"), [id]).map_err(backend)?;
                }
                Ok(conn.execute("DELETE FROM collections WHERE id=?1", [id]).map_err(backend)? > 0)
            })
            .await
    }

    async fn append_messages(&self, req: AppendRequest) -> StoreResult<AppendOutcome> {
        self.writer
            .write(move |conn| {
                let row = upsert_conversation(conn, &req)?;
                let (stored, dup, tokens, largest) = insert_messages(conn, &req, None)?;
                let open_messages = row.open_messages + stored;
                let open_tokens = row.open_tokens + tokens;
                let deadline = (open_messages > 0).then(|| req.now + req.trigger.wait_timeout_ms());
                conn.execute(
                    "UPDATE conversations SET open_messages=?3, open_tokens=?4, idle_deadline=?5 WHERE collection_id=?1 AND conversation_id=?2",
                    params![req.collection_id, req.conversation_id, open_messages as i64, open_tokens as i64, deadline],
                )
                .map_err(backend)?;
                let reason = if stored > 0 { req.trigger.evaluate(open_tokens, open_messages, largest) } else { None };
                let closed = match reason {
                    Some(r) => close_open_messages(conn, req.collection_id, &req.conversation_id, r, req.now, req.max_job_attempts)?,
                    None => None,
                };
                let (pending_messages, pending_tokens) =
                    if closed.is_some() { (0, 0) } else { (open_messages, open_tokens) };
                Ok(AppendOutcome { accepted: stored, duplicates: dup, pending_messages, pending_tokens, closed })
            })
            .await
    }

    async fn add_session(&self, req: AppendRequest) -> StoreResult<SessionClosed> {
        self.writer
            .write(move |conn| {
                let row = upsert_conversation(conn, &req)?;
                // Insert first under a placeholder session id, then create the session with the counts.
                let placeholder = format!("pending-{}", new_id("ses"));
                let (stored, _dup, tokens, _) = insert_messages(conn, &req, Some(&placeholder))?;
                let closed = insert_session_and_job(
                    conn,
                    req.collection_id,
                    &req.conversation_id,
                    &row.meta,
                    TriggerReason::SessionAdd,
                    stored,
                    tokens,
                    req.now,
                    req.max_job_attempts,
                )?;
                conn.execute(
                    "UPDATE messages SET session_id=?1 WHERE session_id=?2",
                    params![closed.session_id, placeholder],
                )
                .map_err(backend)?;
                Ok(closed)
            })
            .await
    }

    async fn flush_conversation(
        &self,
        collection_id: CollectionId,
        conversation_id: &str,
        now: Millis,
        max_job_attempts: u32,
    ) -> StoreResult<Option<SessionClosed>> {
        let conv = conversation_id.to_string();
        self.writer
            .write(move |conn| {
                close_open_messages(conn, collection_id, &conv, TriggerReason::Flush, now, max_job_attempts)
            })
            .await
    }

    async fn close_idle_conversations(
        &self,
        now: Millis,
        limit: u32,
        max_job_attempts: u32,
    ) -> StoreResult<Vec<SessionClosed>> {
        self.writer
            .write(move |conn| {
                let due: Vec<(CollectionId, String)> = {
                    let mut stmt = conn
                        .prepare_cached(
                            "SELECT collection_id, conversation_id FROM conversations
                             WHERE idle_deadline IS NOT NULL AND idle_deadline <= ?1 ORDER BY idle_deadline LIMIT ?2",
                        )
                        .map_err(backend)?;
                    let rows = stmt.query_map(params![now, limit], |r| Ok((r.get(0)?, r.get(1)?))).map_err(backend)?;
                    rows.collect::<Result<_, _>>().map_err(backend)?
                };
                let mut out = Vec::new();
                for (cid, conv) in due {
                    match close_open_messages(conn, cid, &conv, TriggerReason::WaitTimeout, now, max_job_attempts)? {
                        Some(c) => out.push(c),
                        None => {
                            conn.execute(
                                "UPDATE conversations SET idle_deadline=NULL WHERE collection_id=?1 AND conversation_id=?2",
                                params![cid, conv],
                            )
                            .map_err(backend)?;
                        }
                    }
                }
                Ok(out)
            })
            .await
    }

    async fn next_idle_deadline(&self) -> StoreResult<Option<Millis>> {
        self.read(|conn| {
            conn.query_row("SELECT MIN(idle_deadline) FROM conversations WHERE idle_deadline IS NOT NULL", [], |r| {
                r.get(0)
            })
            .map_err(backend)
        })
        .await
    }

    async fn conversation_info(
        &self,
        cid: CollectionId,
        conversation_id: &str,
    ) -> StoreResult<Option<ConversationInfo>> {
        let conv = conversation_id.to_string();
        self.read(move |conn| {
            let row: Option<(String, i64, i64, Option<i64>)> = conn
                .query_row(
                    "SELECT meta_json, open_messages, open_tokens, idle_deadline FROM conversations WHERE collection_id=?1 AND conversation_id=?2",
                    params![cid, conv],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .optional()
                .map_err(backend)?;
            let Some((meta, open_messages, open_tokens, idle_deadline)) = row else { return Ok(None) };
            let short_term = messages_where(
                conn,
                "m.collection_id=?1 AND m.conversation_id=?2 AND (m.session_id IS NULL OR EXISTS (SELECT 1 FROM sessions s WHERE s.session_id=m.session_id AND s.state!='extracted'))",
                &[SqlValue::Integer(cid), SqlValue::Text(conv.clone())],
            )?;
            let mut stmt = conn
                .prepare_cached(&format!("SELECT {SESSION_COLS} FROM sessions WHERE collection_id=?1 AND conversation_id=?2 ORDER BY created_at, session_id"))
                .map_err(backend)?;
            let sessions = stmt
                .query_map(params![cid, conv], session_from_row)
                .map_err(backend)?
                .map(|r| r.map(|(_, s, _)| s))
                .collect::<Result<Vec<_>, _>>()
                .map_err(backend)?;
            Ok(Some(ConversationInfo {
                conversation_id: conv,
                meta: parse_meta(&meta),
                short_term,
                open_messages: open_messages as u64,
                open_tokens: open_tokens as u64,
                idle_deadline,
                sessions,
            }))
        })
        .await
    }

    async fn session_info(&self, cid: CollectionId, session_id: &str) -> StoreResult<Option<SessionDetail>> {
        let sid = session_id.to_string();
        self.read(move |conn| {
            let Some((scid, session, _)) = session_summary(conn, &sid)? else { return Ok(None) };
            if scid != cid {
                return Ok(None);
            }
            let messages = messages_where(conn, "m.session_id=?1", &[SqlValue::Text(sid.clone())])?;
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT {EVENT_COLS} FROM events WHERE collection_id=?1 AND session_id=?2 ORDER BY time, id"
                ))
                .map_err(backend)?;
            let events = stmt
                .query_map(params![cid, sid], event_from_row)
                .map_err(backend)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(backend)?;
            let job = conn
                .query_row(
                    &format!("SELECT {JOB_COLS} FROM jobs WHERE session_id=?1 ORDER BY created_at DESC LIMIT 1"),
                    [&sid],
                    job_from_row,
                )
                .optional()
                .map_err(backend)?
                .map(|(_, j)| j);
            Ok(Some(SessionDetail { session, messages, events, job }))
        })
        .await
    }

    async fn claim_job(&self, now: Millis, lease_ms: i64) -> StoreResult<Option<ClaimedJob>> {
        self.writer
            .write(move |conn| {
                let id: Option<String> = conn
                    .query_row(
                        "SELECT job_id FROM jobs WHERE (state='queued' AND run_after<=?1) OR (state='running' AND lease_until<=?1)
                         ORDER BY run_after, created_at LIMIT 1",
                        [now],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(backend)?;
                let Some(job_id) = id else { return Ok(None) };
                conn.execute(
                    "UPDATE jobs SET state='running', attempts=attempts+1, lease_until=?2, updated_at=?3 WHERE job_id=?1",
                    params![job_id, now + lease_ms, now],
                )
                .map_err(backend)?;
                let (cid, job) = job_by_id(conn, &job_id)?.ok_or_else(|| backend("claimed job vanished"))?;
                let collection = collection_by_id(conn, cid)?;
                let sid = job.session_id.clone().unwrap_or_default();
                let (_, session, meta) =
                    session_summary(conn, &sid)?.ok_or_else(|| backend(format!("job {job_id} has no session {sid}")))?;
                let messages = messages_where(conn, "m.session_id=?1", &[SqlValue::Text(sid)])?;
                let profiles = match &meta.user_id {
                    Some(u) => {
                        let mut stmt = conn
                            .prepare_cached(&format!(
                                "SELECT {PROFILE_COLS} FROM profiles WHERE collection_id=?1 AND user_id=?2 AND assistant_id='' ORDER BY profile_type"
                            ))
                            .map_err(backend)?;
                        let rows = stmt.query_map(params![cid, u], profile_from_row).map_err(backend)?;
                        with_history(conn, rows.collect::<Result<Vec<_>, _>>().map_err(backend)?)?
                    }
                    None => vec![],
                };
                Ok(Some(ClaimedJob { job, collection, session, meta, messages, profiles }))
            })
            .await
    }

    async fn complete_job(&self, lease: &JobLease, output: ExtractionOutput, now: Millis) -> StoreResult<Vec<String>> {
        let lease = lease.clone();
        self.writer
            .write(move |conn| {
                let job_id = lease.job_id.clone();
                let (cid, job) = job_by_id(conn, &job_id)?
                    .ok_or_else(|| StoreError::NotFound(format!("job_id: no job \"{job_id}\"")))?;
                job.check_lease(&lease)?;
                let sid = job.session_id.clone().unwrap_or_default();
                let (_, session, meta) = session_summary(conn, &sid)?.ok_or_else(|| backend("job without session"))?;
                let mut ids = Vec::with_capacity(output.events.len());
                for e in &output.events {
                    if let Some(target) = &e.merge_into
                        && merge_event_row(conn, cid, target, e, now)?
                    {
                        ids.push(target.clone());
                        continue;
                    }
                    let id = insert_event_row(conn, &e.to_new_event(cid, &meta, &session, now))?;
                    if let Some(old) = &e.supersedes {
                        conn.execute(
                            "UPDATE events SET status='superseded', superseded_by=?3, updated_at=?4
                             WHERE collection_id=?1 AND id=?2 AND status='active'",
                            params![cid, old, id, now],
                        )
                        .map_err(backend)?;
                    }
                    ids.push(id);
                }
                if let Some(user) = &meta.user_id {
                    let typed = std::iter::once((PROFILE_V1.to_string(), output.profile_changes.clone()))
                        .chain(output.typed_profile_changes.iter().cloned());
                    for (ptype, changes) in typed.filter(|(_, c)| !c.is_empty()) {
                        apply_profile_changes(conn, cid, &ptype, user, &session.session_id, &changes, now)?;
                    }
                }
                conn.execute(
                    "UPDATE sessions SET state='extracted', extracted_at=?2 WHERE session_id=?1",
                    params![sid, now],
                )
                .map_err(backend)?;
                conn.execute(
                    "UPDATE jobs SET state='done', lease_until=NULL, last_error=NULL, prompt_tokens=prompt_tokens+?2,
                     completion_tokens=completion_tokens+?3, updated_at=?4 WHERE job_id=?1",
                    params![job_id, output.prompt_tokens as i64, output.completion_tokens as i64, now],
                )
                .map_err(backend)?;
                Ok(ids)
            })
            .await
    }

    async fn fail_job(&self, lease: &JobLease, error: &str, retry_at: Option<Millis>, now: Millis) -> StoreResult<()> {
        let (job_id, attempt, error) =
            (lease.job_id.clone(), lease.attempt, error.chars().take(2000).collect::<String>());
        self.writer
            .write(move |conn| {
                let (state, run_after) = match retry_at {
                    Some(t) => ("queued", t),
                    None => ("failed", now),
                };
                let n = conn
                    .execute(
                        "UPDATE jobs SET state=?2, run_after=?3, last_error=?4, lease_until=NULL, updated_at=?5
                         WHERE job_id=?1 AND state='running' AND attempts=?6",
                        params![job_id, state, run_after, error, now, attempt],
                    )
                    .map_err(backend)?;
                if n == 1 && state == "failed" {
                    conn.execute("UPDATE sessions SET state='failed' WHERE session_id=(SELECT session_id FROM jobs WHERE job_id=?1)", [&job_id])
                        .map_err(backend)?;
                }
                Ok(())
            })
            .await
    }

    async fn renew_lease(&self, lease: &JobLease, until: Millis) -> StoreResult<bool> {
        let (job_id, attempt) = (lease.job_id.clone(), lease.attempt);
        self.writer
            .write(move |conn| {
                let n = conn
                    .execute(
                        "UPDATE jobs SET lease_until=?3 WHERE job_id=?1 AND state='running' AND attempts=?2",
                        params![job_id, attempt, until],
                    )
                    .map_err(backend)?;
                Ok(n == 1)
            })
            .await
    }

    async fn defer_job(&self, lease: &JobLease, run_after: Millis, note: &str, now: Millis) -> StoreResult<()> {
        let (job_id, attempt, note) = (lease.job_id.clone(), lease.attempt, note.to_string());
        self.writer
            .write(move |conn| {
                conn.execute(
                    "UPDATE jobs SET state='queued', attempts=MAX(attempts-1, 0), run_after=?2, last_error=?3, lease_until=NULL, updated_at=?4
                     WHERE job_id=?1 AND state='running' AND attempts=?5",
                    params![job_id, run_after, note, now, attempt],
                )
                .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn tokens_used_since(&self, project: &str, since: Millis) -> StoreResult<u64> {
        let project = project.to_string();
        self.read(move |conn| {
            conn.query_row(
                "SELECT COALESCE(SUM(j.prompt_tokens + j.completion_tokens), 0) FROM jobs j
                 JOIN collections c ON c.id = j.collection_id WHERE c.project_name=?1 AND j.updated_at>=?2",
                params![project, since],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n as u64)
            .map_err(backend)
        })
        .await
    }

    async fn list_jobs(&self, cid: CollectionId, f: JobFilter) -> StoreResult<Vec<Job>> {
        self.read(move |conn| {
            let mut sql = format!("SELECT {JOB_COLS} FROM jobs WHERE collection_id=?1");
            let mut args = vec![SqlValue::Integer(cid)];
            if let Some(s) = f.state {
                args.push(SqlValue::Text(s.as_str().into()));
                sql.push_str(&format!(" AND state=?{}", args.len()));
            }
            if let Some(c) = f.conversation_id {
                args.push(SqlValue::Text(c));
                sql.push_str(&format!(" AND conversation_id=?{}", args.len()));
            }
            if let Some(s) = f.session_id {
                args.push(SqlValue::Text(s));
                sql.push_str(&format!(" AND session_id=?{}", args.len()));
            }
            args.push(SqlValue::Integer(f.limit.max(1) as i64));
            sql.push_str(&format!(" ORDER BY created_at DESC, job_id DESC LIMIT ?{}", args.len()));
            let mut stmt = conn.prepare(&sql).map_err(backend)?;
            let rows = stmt.query_map(params_from_iter(args.iter()), job_from_row).map_err(backend)?;
            rows.map(|r| r.map(|(_, j)| j)).collect::<Result<Vec<_>, _>>().map_err(backend)
        })
        .await
    }

    async fn next_job_due(&self) -> StoreResult<Option<Millis>> {
        self.read(|conn| {
            conn.query_row(
                "SELECT MIN(t) FROM (SELECT MIN(run_after) t FROM jobs WHERE state='queued' UNION ALL SELECT MIN(lease_until) FROM jobs WHERE state='running')",
                [],
                |r| r.get(0),
            )
            .map_err(backend)
        })
        .await
    }

    async fn insert_event(&self, e: NewEvent) -> StoreResult<Event> {
        self.writer
            .write(move |conn| {
                let id = insert_event_row(conn, &e)?;
                event_by_id(conn, e.collection_id, &id)?.ok_or_else(|| backend("inserted event vanished"))
            })
            .await
    }

    async fn get_event(&self, cid: CollectionId, id: &str) -> StoreResult<Option<Event>> {
        let id = id.to_string();
        self.read(move |conn| event_by_id(conn, cid, &id)).await
    }

    async fn update_event(&self, cid: CollectionId, id: &str, patch: EventPatch, now: Millis) -> StoreResult<Event> {
        let id = id.to_string();
        self.writer
            .write(move |conn| {
                let mut e = event_by_id(conn, cid, &id)?.ok_or_else(|| StoreError::NotFound(format!("event_id: no event \"{id}\"")))?;
                let (text_changed, vector) = patch.apply(&mut e);
                if text_changed {
                    let rowid: i64 =
                        conn.query_row("SELECT rowid FROM events WHERE id=?1", [&id], |r| r.get(0)).map_err(backend)?;
                    index_event(conn, cid, &id, rowid, &e.memory_info, vector.as_deref())?;
                }
                conn.execute(
                    "UPDATE events SET memory_info=?3, time=?4, group_id=?5, scope=?6, class=?7, status=?8, updated_at=?9 WHERE collection_id=?1 AND id=?2",
                    params![cid, id, json(&e.memory_info), e.time, e.group_id, e.scope, e.class, e.status, now],
                )
                .map_err(backend)?;
                event_by_id(conn, cid, &id)?.ok_or_else(|| backend("updated event vanished"))
            })
            .await
    }

    async fn delete_event(&self, cid: CollectionId, id: &str) -> StoreResult<bool> {
        let id = id.to_string();
        self.writer.write(move |conn| delete_event_row(conn, cid, &id)).await
    }

    async fn batch_delete_events(&self, cid: CollectionId, filter: EventFilter) -> StoreResult<u64> {
        self.writer
            .write(move |conn| {
                let (where_sql, args) = event_filter_sql(cid, &filter);
                // Resolve the ids first: the user/assistant filter reads event_subjects.
                let ids: Vec<String> = {
                    let mut stmt =
                        conn.prepare(&format!("SELECT id FROM events WHERE {where_sql}")).map_err(backend)?;
                    let rows = stmt.query_map(params_from_iter(args.iter()), |r| r.get(0)).map_err(backend)?;
                    rows.collect::<Result<_, _>>().map_err(backend)?
                };
                let mut n = 0;
                for id in &ids {
                    n += delete_event_row(conn, cid, id)? as usize;
                }
                Ok(n as u64)
            })
            .await
    }

    async fn list_events(&self, cid: CollectionId, filter: EventFilter, limit: u32) -> StoreResult<Vec<Event>> {
        self.read(move |conn| {
            let (where_sql, mut args) = event_filter_sql(cid, &filter);
            args.push(SqlValue::Integer(limit as i64));
            let sql = format!(
                "SELECT {EVENT_COLS} FROM events WHERE {where_sql} ORDER BY time DESC, id DESC LIMIT ?{}",
                args.len()
            );
            let mut stmt = conn.prepare(&sql).map_err(backend)?;
            let rows = stmt.query_map(params_from_iter(args.iter()), event_from_row).map_err(backend)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(backend)
        })
        .await
    }

    async fn search_candidates(
        &self,
        cid: CollectionId,
        filter: EventFilter,
        q: CandidateQuery,
    ) -> StoreResult<Vec<Candidate>> {
        self.read(move |conn| search::candidates(conn, cid, &filter, &q)).await
    }

    async fn record_hits(&self, cid: CollectionId, ids: Vec<String>, now: Millis) -> StoreResult<()> {
        self.writer
            .write(move |conn| {
                let mut stmt = conn
                    .prepare_cached(
                        "UPDATE events SET hit_count=hit_count+1, last_hit_at=?3 WHERE collection_id=?1 AND id=?2",
                    )
                    .map_err(backend)?;
                let mut daily = conn
                    .prepare_cached(
                        "INSERT INTO hits_daily(collection_id, day, user_id, hits)
                         SELECT ?1, ?3, COALESCE(json_extract(user_ids, '$[0]'), ''), 1 FROM events WHERE collection_id=?1 AND id=?2
                         ON CONFLICT(collection_id, day, user_id) DO UPDATE SET hits = hits + 1",
                    )
                    .map_err(backend)?;
                let day = now.div_euclid(86_400_000);
                for id in &ids {
                    stmt.execute(params![cid, id, now]).map_err(backend)?;
                    daily.execute(params![cid, id, day]).map_err(backend)?;
                }
                Ok(())
            })
            .await
    }

    async fn events_missing_vectors(&self, cid: CollectionId, limit: u32) -> StoreResult<Vec<Event>> {
        self.read(move |conn| {
            let mut stmt = conn
                .prepare(&format!(
                    "SELECT {EVENT_COLS} FROM events WHERE collection_id=?1 AND id NOT IN (SELECT event_id FROM event_vectors WHERE collection_id=?1) LIMIT ?2"
                ))
                .map_err(backend)?;
            let rows = stmt.query_map(params![cid, limit], event_from_row).map_err(backend)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(backend)
        })
        .await
    }

    async fn set_event_vector(&self, cid: CollectionId, id: &str, vector: Vec<f32>) -> StoreResult<()> {
        let id = id.to_string();
        self.writer
            .write(move |conn| {
                conn.execute(
                    "INSERT OR REPLACE INTO event_vectors(event_id, collection_id, vec) SELECT id, collection_id, ?3 FROM events WHERE collection_id=?1 AND id=?2",
                    params![cid, id, vec_to_blob(&vector)],
                )
                .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn memory_stats(
        &self,
        cid: CollectionId,
        user: Option<String>,
        days: u32,
        now: Millis,
    ) -> StoreResult<MemoryStats> {
        self.read(move |conn| privacy::memory_stats(conn, cid, user.as_deref(), days, now)).await
    }

    async fn run_maintenance(
        &self,
        cid: CollectionId,
        now: Millis,
        archive_before: Millis,
        trigger: &str,
    ) -> StoreResult<MaintenanceRun> {
        let trigger = trigger.to_string();
        self.writer
            .write(move |conn| {
                let expired_ids: Vec<String> = {
                    let mut stmt = conn
                        .prepare_cached(
                            "SELECT id FROM events WHERE collection_id=?1 AND expires_at IS NOT NULL AND expires_at <= ?2 AND hit_count = 0",
                        )
                        .map_err(backend)?;
                    let rows = stmt.query_map(params![cid, now], |r| r.get(0)).map_err(backend)?;
                    rows.collect::<Result<_, _>>().map_err(backend)?
                };
                let mut expired = 0;
                for id in &expired_ids {
                    expired += delete_event_row(conn, cid, id)? as u64;
                }
                let archived = conn
                    .execute(
                        "UPDATE events SET status='archived', updated_at=?3 WHERE collection_id=?1 AND status='active'
                         AND COALESCE(last_hit_at, created_at) < ?2",
                        params![cid, archive_before, now],
                    )
                    .map_err(backend)? as u64;
                conn.execute(
                    "INSERT INTO maintenance_runs(collection_id, trigger, started_at, expired, archived) VALUES (?1,?2,?3,?4,?5)",
                    params![cid, trigger, now, expired as i64, archived as i64],
                )
                .map_err(backend)?;
                let name: String =
                    conn.query_row("SELECT collection_name FROM collections WHERE id=?1", [cid], |r| r.get(0)).map_err(backend)?;
                Ok(MaintenanceRun { collection_name: name, trigger, started_at: now, expired, archived, folded: 0, digests: 0 })
            })
            .await
    }

    async fn replace_events(&self, cid: CollectionId, delete: Vec<String>, new: NewEvent) -> StoreResult<Event> {
        self.writer
            .write(move |conn| {
                for id in &delete {
                    delete_event_row(conn, cid, id)?;
                }
                let id = insert_event_row(conn, &new)?;
                event_by_id(conn, cid, &id)?.ok_or_else(|| backend("inserted event vanished"))
            })
            .await
    }

    async fn note_maintenance(&self, cid: CollectionId, folded: u64, digests: u64) -> StoreResult<()> {
        self.writer
            .write(move |conn| {
                conn.execute(
                    "UPDATE maintenance_runs SET folded=folded+?2, digests=digests+?3
                     WHERE id=(SELECT id FROM maintenance_runs WHERE collection_id=?1 ORDER BY id DESC LIMIT 1)",
                    params![cid, folded as i64, digests as i64],
                )
                .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn list_maintenance_runs(&self, cid: CollectionId, limit: u32) -> StoreResult<Vec<MaintenanceRun>> {
        self.read(move |conn| {
            let mut stmt = conn
                .prepare(
                    "SELECT c.collection_name, m.trigger, m.started_at, m.expired, m.archived, m.folded, m.digests FROM maintenance_runs m
                     JOIN collections c ON c.id = m.collection_id WHERE m.collection_id=?1 ORDER BY m.started_at DESC, m.id DESC LIMIT ?2",
                )
                .map_err(backend)?;
            let rows = stmt
                .query_map(params![cid, limit], |r| {
                    Ok(MaintenanceRun {
                        collection_name: r.get(0)?,
                        trigger: r.get(1)?,
                        started_at: r.get(2)?,
                        expired: r.get::<_, i64>(3)? as u64,
                        archived: r.get::<_, i64>(4)? as u64,
                        folded: r.get::<_, i64>(5)? as u64,
                        digests: r.get::<_, i64>(6)? as u64,
                    })
                })
                .map_err(backend)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(backend)
        })
        .await
    }

    async fn stats(&self) -> StoreResult<StoreStats> {
        let path = self.path.clone();
        self.read(move |conn| {
            let count = |sql: &str| -> StoreResult<u64> {
                conn.query_row(sql, [], |r| r.get::<_, i64>(0)).map(|n| n as u64).map_err(backend)
            };
            let mut stmt = conn.prepare("SELECT state, COUNT(*) FROM jobs GROUP BY state").map_err(backend)?;
            let jobs = stmt
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64)))
                .map_err(backend)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(backend)?;
            let file = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
            let wal = path.with_extension("db-wal");
            Ok(StoreStats {
                jobs,
                conversations: count("SELECT COUNT(*) FROM conversations")?,
                messages: count("SELECT COUNT(*) FROM messages")?,
                events: count("SELECT COUNT(*) FROM events")?,
                profiles: count("SELECT COUNT(*) FROM profiles")?,
                bytes: file(&path) + file(&wal),
            })
        })
        .await
    }

    async fn export_user(&self, cid: CollectionId, user_id: &str) -> StoreResult<UserData> {
        let user = user_id.to_string();
        self.read(move |conn| privacy::export(conn, cid, &user)).await
    }

    async fn forget_user(&self, cid: CollectionId, user_id: &str) -> StoreResult<ForgetCounts> {
        let user = user_id.to_string();
        let counts = self.writer.write(move |conn| privacy::forget(conn, cid, &user)).await?;
        // After the commit: move the WAL into the main file (where secure_delete zeroed the freed
        // content) and truncate it, so no copy of the forgotten pages stays in mnemo.db-wal.
        let busy: i64 = self
            .writer
            .outside_transaction(|conn| {
                conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0)).map_err(backend)
            })
            .await?;
        if busy != 0 {
            tracing::warn!(
                "WAL checkpoint after user/forget was blocked by a reader; the WAL is truncated at the next one"
            );
        }
        Ok(counts)
    }

    async fn insert_profile(&self, p: NewProfile) -> StoreResult<Profile> {
        self.writer
            .write(move |conn| {
                let assistant = p.assistant_id.clone().unwrap_or_default();
                if let Some(existing) = profile_for(conn, p.collection_id, &p.profile_type, &p.user_id, &assistant)? {
                    return Err(StoreError::Conflict(format!(
                        "user_id: user \"{}\" already has a {} profile ({}); use profile/update",
                        p.user_id, p.profile_type, existing.id
                    )));
                }
                let id = new_id("prf");
                conn.execute(
                    "INSERT INTO profiles(id, collection_id, profile_type, user_id, assistant_id, content, attributes, created_at, updated_at)
                     VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?8)",
                    params![id, p.collection_id, p.profile_type, p.user_id, assistant, p.content, json(&p.attributes), p.now],
                )
                .map_err(backend)?;
                profile_by_id(conn, p.collection_id, &id)?.ok_or_else(|| backend("inserted profile vanished"))
            })
            .await
    }

    async fn update_profile(
        &self,
        cid: CollectionId,
        id: &str,
        patch: ProfilePatch,
        now: Millis,
    ) -> StoreResult<Profile> {
        let id = id.to_string();
        self.writer
            .write(move |conn| {
                let mut p = profile_by_id(conn, cid, &id)?
                    .ok_or_else(|| StoreError::NotFound(format!("profile_id: no profile \"{id}\"")))?;
                let before = p.attributes.clone();
                let superseded = profile::apply_patch(&mut p, patch);
                let keep = keeps_history(conn, cid, &p.profile_type)?;
                let since = record_versions(
                    conn,
                    &id,
                    keep,
                    AttributeChange { before: &before, after: &p.attributes, superseded: &superseded },
                    None,
                    now,
                )?;
                conn.execute(
                    "UPDATE profiles SET content=?3, attributes=?4, updated_at=?5, attribute_since=?6 WHERE collection_id=?1 AND id=?2",
                    params![cid, id, p.content, json(&p.attributes), now, since],
                )
                .map_err(backend)?;
                profile_by_id(conn, cid, &id)?.ok_or_else(|| backend("updated profile vanished"))
            })
            .await
    }

    async fn delete_profile(&self, cid: CollectionId, id: &str) -> StoreResult<bool> {
        let id = id.to_string();
        self.writer
            .write(move |conn| {
                Ok(conn
                    .execute("DELETE FROM profiles WHERE collection_id=?1 AND id=?2", params![cid, id])
                    .map_err(backend)?
                    > 0)
            })
            .await
    }

    async fn list_profiles(&self, cid: CollectionId, f: ProfileFilter, limit: u32) -> StoreResult<Vec<Profile>> {
        self.read(move |conn| {
            let mut sql = format!("SELECT {PROFILE_COLS} FROM profiles WHERE collection_id=?1");
            let mut args = vec![SqlValue::Integer(cid)];
            for (col, values) in
                [("user_id", &f.user_id), ("assistant_id", &f.assistant_id), ("profile_type", &f.profile_type)]
            {
                if values.is_empty() {
                    continue;
                }
                let mut marks = Vec::new();
                for v in values {
                    args.push(SqlValue::Text(v.clone()));
                    marks.push(format!("?{}", args.len()));
                }
                sql.push_str(&format!(" AND {col} IN ({})", marks.join(",")));
            }
            args.push(SqlValue::Integer(limit as i64));
            sql.push_str(&format!(" ORDER BY updated_at DESC, id LIMIT ?{}", args.len()));
            let mut stmt = conn.prepare(&sql).map_err(backend)?;
            let rows = stmt.query_map(params_from_iter(args.iter()), profile_from_row).map_err(backend)?;
            let profiles = rows.collect::<Result<Vec<_>, _>>().map_err(backend)?;
            with_history(conn, profiles)
        })
        .await
    }
}

/// Applies extracted profile changes to the user's profile of `ptype`, creating it on first use.
fn apply_profile_changes(
    conn: &Connection,
    cid: CollectionId,
    ptype: &str,
    user: &str,
    session_id: &str,
    changes: &[mnemo_core::extract::ProfileChange],
    now: Millis,
) -> StoreResult<()> {
    let existing = profile_for(conn, cid, ptype, user, "")?;
    let Some(f) = profile::fold_session(existing, changes, session_id) else { return Ok(()) };
    let (id, attrs, sources, content) = (&f.id, &f.attributes, &f.source_sessions, &f.content);
    conn.execute(
        "INSERT INTO profiles(id, collection_id, profile_type, user_id, assistant_id, content, attributes, source_sessions, created_at, updated_at)
         VALUES (?1,?2,?3,?4,'',?5,?6,?7,?8,?8)
         ON CONFLICT(id) DO UPDATE SET content=excluded.content, attributes=excluded.attributes,
             source_sessions=excluded.source_sessions, updated_at=excluded.updated_at",
        params![id, cid, ptype, user, content, json(&attrs), json(&sources), now],
    )
    .map_err(backend)?;
    let keep = keeps_history(conn, cid, ptype)?;
    let since = record_versions(
        conn,
        id,
        keep,
        AttributeChange { before: &f.before, after: attrs, superseded: &f.superseded },
        Some(session_id),
        now,
    )?;
    conn.execute("UPDATE profiles SET attribute_since=?2 WHERE id=?1", params![id, since]).map_err(backend)?;
    Ok(())
}

/// Refreshes an existing event with a near-duplicate's content: text, time (the later one),
/// provenance and vector change; hits, id and creation time stay. Returns false (and changes
/// nothing) if the target is gone or no longer active, so the caller inserts instead.
fn merge_event_row(
    conn: &Connection,
    cid: CollectionId,
    id: &str,
    e: &mnemo_core::extract::ExtractedEvent,
    now: Millis,
) -> StoreResult<bool> {
    let Some(old) = event_by_id(conn, cid, id)? else { return Ok(false) };
    if old.status != "active" {
        return Ok(false);
    }
    let (info, sources) = mnemo_core::extract::merged_content(&old, e);
    let rowid: i64 = conn.query_row("SELECT rowid FROM events WHERE id=?1", [id], |r| r.get(0)).map_err(backend)?;
    index_event(conn, cid, id, rowid, &info, e.embedding.as_deref())?;
    conn.execute(
        "UPDATE events SET memory_info=?3, time=MAX(time, ?4), source_message_ids=?5, updated_at=?6,
             expires_at=CASE WHEN expires_at IS NULL THEN NULL ELSE MAX(expires_at, COALESCE(?7, expires_at)) END
         WHERE collection_id=?1 AND id=?2",
        params![cid, id, json(&info), e.time, json(&sources), now, e.expires_at],
    )
    .map_err(backend)?;
    Ok(true)
}

#[cfg(test)]
mod tests;
