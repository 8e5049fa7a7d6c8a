//! The on-disk schema and its migrations. `PRAGMA user_version` records the version; each
//! migration runs once, in order, in one transaction, so old data directories keep opening.

use rusqlite::Connection;

/// Each entry upgrades the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // v1: the foundation.
    r#"
    CREATE TABLE collections(
        id INTEGER PRIMARY KEY,
        project_name TEXT NOT NULL,
        collection_name TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        schema_json TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        UNIQUE(project_name, collection_name)
    );
    CREATE TABLE conversations(
        collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        conversation_id TEXT NOT NULL,
        meta_json TEXT NOT NULL,
        open_messages INTEGER NOT NULL DEFAULT 0,
        open_tokens INTEGER NOT NULL DEFAULT 0,
        wait_timeout_ms INTEGER NOT NULL,
        last_write_at INTEGER NOT NULL,
        idle_deadline INTEGER,
        created_at INTEGER NOT NULL,
        PRIMARY KEY(collection_id, conversation_id)
    ) WITHOUT ROWID;
    CREATE INDEX conversations_deadline ON conversations(idle_deadline) WHERE idle_deadline IS NOT NULL;
    CREATE TABLE messages(
        id INTEGER PRIMARY KEY,
        collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        conversation_id TEXT NOT NULL,
        session_id TEXT,
        role TEXT NOT NULL,
        name TEXT,
        content TEXT NOT NULL,
        time INTEGER NOT NULL,
        tokens INTEGER NOT NULL,
        idempotency_key TEXT,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX messages_conversation ON messages(collection_id, conversation_id, id);
    CREATE INDEX messages_session ON messages(session_id) WHERE session_id IS NOT NULL;
    CREATE UNIQUE INDEX messages_idempotency ON messages(collection_id, conversation_id, idempotency_key)
        WHERE idempotency_key IS NOT NULL;
    CREATE TABLE sessions(
        session_id TEXT PRIMARY KEY,
        collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        conversation_id TEXT NOT NULL,
        reason TEXT NOT NULL,
        state TEXT NOT NULL,
        message_count INTEGER NOT NULL,
        token_count INTEGER NOT NULL,
        meta_json TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        extracted_at INTEGER
    );
    CREATE INDEX sessions_conversation ON sessions(collection_id, conversation_id, created_at);
    CREATE TABLE jobs(
        job_id TEXT PRIMARY KEY,
        collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        state TEXT NOT NULL,
        conversation_id TEXT,
        session_id TEXT,
        attempts INTEGER NOT NULL DEFAULT 0,
        max_attempts INTEGER NOT NULL,
        last_error TEXT,
        run_after INTEGER NOT NULL,
        lease_until INTEGER,
        prompt_tokens INTEGER NOT NULL DEFAULT 0,
        completion_tokens INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );
    CREATE INDEX jobs_runnable ON jobs(state, run_after);
    CREATE INDEX jobs_collection ON jobs(collection_id, created_at);
    CREATE INDEX jobs_session ON jobs(session_id);
    CREATE TABLE events(
        id TEXT PRIMARY KEY,
        collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        memory_type TEXT NOT NULL,
        user_ids TEXT NOT NULL,
        assistant_ids TEXT NOT NULL,
        group_id TEXT,
        session_id TEXT,
        conversation_id TEXT,
        scope TEXT,
        class TEXT NOT NULL,
        status TEXT NOT NULL,
        time INTEGER NOT NULL,
        memory_info TEXT NOT NULL,
        source_message_ids TEXT NOT NULL,
        hit_count INTEGER NOT NULL DEFAULT 0,
        last_hit_at INTEGER,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );
    CREATE INDEX events_collection_time ON events(collection_id, time);
    CREATE INDEX events_session ON events(session_id) WHERE session_id IS NOT NULL;
    -- Who an event is about, one row per user or assistant id, so filters use an index.
    CREATE TABLE event_subjects(
        collection_id INTEGER NOT NULL,
        kind TEXT NOT NULL,            -- 'u' user, 'a' assistant
        subject_id TEXT NOT NULL,
        event_id TEXT NOT NULL REFERENCES events(id) ON DELETE CASCADE,
        PRIMARY KEY(collection_id, kind, subject_id, event_id)
    ) WITHOUT ROWID;
    CREATE INDEX event_subjects_event ON event_subjects(event_id);
    CREATE TABLE profiles(
        id TEXT PRIMARY KEY,
        collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        profile_type TEXT NOT NULL,
        user_id TEXT NOT NULL,
        assistant_id TEXT NOT NULL DEFAULT '',
        content TEXT NOT NULL,
        attributes TEXT NOT NULL,
        source_sessions TEXT NOT NULL DEFAULT '[]',
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        UNIQUE(collection_id, profile_type, user_id, assistant_id)
    );
    "#,
    // v2: retrieval — the model a collection is indexed with, event vectors, full text.
    r#"
    ALTER TABLE collections ADD COLUMN embedding_model TEXT;
    ALTER TABLE collections ADD COLUMN embedding_dim INTEGER;
    CREATE TABLE event_vectors(
        event_id TEXT PRIMARY KEY REFERENCES events(id) ON DELETE CASCADE,
        collection_id INTEGER NOT NULL,
        vec BLOB NOT NULL              -- little-endian f32, unit length
    );
    CREATE INDEX event_vectors_collection ON event_vectors(collection_id);
    -- Terms from mnemo_core::text::search_tokens (jieba for Chinese, stemmed English), space
    -- separated; rowid = events.rowid. Contentless: the text lives in events.memory_info.
    CREATE VIRTUAL TABLE event_fts USING fts5(terms, content='', contentless_delete=1);
    "#,
    // v3: hits per day and user, for `stats` (seed 002 §6.2).
    r#"
    CREATE TABLE hits_daily(
        collection_id INTEGER NOT NULL,
        day INTEGER NOT NULL,              -- days since the Unix epoch (UTC)
        user_id TEXT NOT NULL,             -- '' when the event has no user
        hits INTEGER NOT NULL,
        PRIMARY KEY(collection_id, day, user_id)
    ) WITHOUT ROWID;
    "#,
    // v4: lifecycle — expiry of temporary memories, and a record of maintenance runs.
    r#"
    ALTER TABLE events ADD COLUMN expires_at INTEGER;
    CREATE INDEX events_expiry ON events(collection_id, expires_at) WHERE expires_at IS NOT NULL;
    CREATE TABLE maintenance_runs(
        id INTEGER PRIMARY KEY,
        collection_id INTEGER NOT NULL,
        trigger TEXT NOT NULL,          -- schedule | request
        started_at INTEGER NOT NULL,
        expired INTEGER NOT NULL,
        archived INTEGER NOT NULL
    );
    CREATE INDEX maintenance_runs_collection ON maintenance_runs(collection_id, started_at);
    "#,
    // v5: folding and digests are counted per maintenance run.
    r#"
    ALTER TABLE maintenance_runs ADD COLUMN folded INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE maintenance_runs ADD COLUMN digests INTEGER NOT NULL DEFAULT 0;
    "#,
    // v6: living memories — corrected events point at their successor; profile attributes know
    // since when they hold, and `keep_history` profile types keep the values they replaced.
    r#"
    ALTER TABLE events ADD COLUMN superseded_by TEXT;
    ALTER TABLE profiles ADD COLUMN attribute_since TEXT NOT NULL DEFAULT '{}';
    CREATE TABLE profile_history(
        id INTEGER PRIMARY KEY,
        profile_id TEXT NOT NULL REFERENCES profiles(id) ON DELETE CASCADE,
        attribute TEXT NOT NULL,
        value TEXT NOT NULL,            -- JSON
        valid_from INTEGER,
        valid_to INTEGER NOT NULL,
        session_id TEXT
    );
    CREATE INDEX profile_history_profile ON profile_history(profile_id, valid_to);
    CREATE INDEX jobs_updated ON jobs(updated_at);
    "#,
    // v7: BM25 over a small scope is computed from each event's analysed terms and per-collection
    // token statistics (the full-text index's own bm25() walks every matching document of the
    // collection to count them). Existing rows are backfilled at open (`backfill_terms`).
    r#"
    ALTER TABLE events ADD COLUMN terms TEXT;
    CREATE TABLE term_stats(
        collection_id INTEGER NOT NULL,
        term TEXT NOT NULL,
        df INTEGER NOT NULL,
        PRIMARY KEY(collection_id, term)
    ) WITHOUT ROWID;
    CREATE TABLE collection_stats(
        collection_id INTEGER PRIMARY KEY,
        docs INTEGER NOT NULL,
        tokens INTEGER NOT NULL
    );
    "#,
    // v8: a job's latest attempt has a start and (when done or failed) an end; failed jobs are
    // re-queued automatically a bounded number of times (`requeues`).
    r#"
    ALTER TABLE jobs ADD COLUMN started_at INTEGER;
    ALTER TABLE jobs ADD COLUMN finished_at INTEGER;
    ALTER TABLE jobs ADD COLUMN requeues INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX jobs_failed ON jobs(state) WHERE state = 'failed';
    "#,
    // v9: a conversation is replaced whole (VikingDB's session/add on a re-used session_id).
    r#"
    CREATE INDEX events_conversation ON events(collection_id, conversation_id) WHERE conversation_id IS NOT NULL;
    "#,
];

pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings the database up to [`SCHEMA_VERSION`]. Refuses a database written by a newer mnemo.
/// `after(tx, version)` runs inside each migration's transaction, after its SQL,
/// for the data changes SQL alone cannot make (e.g. analysing text in Rust).
pub fn migrate_with(
    conn: &mut Connection,
    after: impl Fn(&rusqlite::Transaction, usize) -> rusqlite::Result<()>,
) -> rusqlite::Result<Result<(), String>> {
    let current: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if current > SCHEMA_VERSION {
        return Ok(Err(format!(
            "the data directory has schema version {current}, newer than this mnemo understands ({SCHEMA_VERSION}); upgrade mnemo"
        )));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        after(&tx, i + 1)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tx.commit()?;
        tracing::info!(version = i + 1, "applied store migration");
    }
    Ok(Ok(()))
}
