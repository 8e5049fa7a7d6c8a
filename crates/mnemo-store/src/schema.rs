//! The on-disk schema and its migrations. `PRAGMA user_version` records the version; each
//! migration runs once, in order, in one transaction, so old data directories keep opening.

use crate::backend;
use mnemo_core::store::StoreResult;
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
    // v10: webhooks. Endpoints per project, and the outbox: one row per (change, subscribed
    // endpoint), written by the triggers below in the transaction of the change itself, so a
    // change and its announcement commit or vanish together. With no endpoint registered a
    // trigger costs one look at an empty table. `events` is ' kind kind ' (space-delimited).
    r#"
    CREATE TABLE webhooks(
        id TEXT PRIMARY KEY,
        project_name TEXT NOT NULL,
        url TEXT NOT NULL,
        secret TEXT NOT NULL,
        events TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        source TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX webhooks_project ON webhooks(project_name);
    CREATE TABLE webhook_outbox(
        id INTEGER PRIMARY KEY AUTOINCREMENT,   -- never reused: `msg_<id>` is the receiver's idempotency key
        webhook_id TEXT NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        collection_id INTEGER NOT NULL,
        subject_id TEXT NOT NULL,         -- the event, profile or job the change is about
        user_ids TEXT NOT NULL,           -- JSON array: whom it is about (user/forget purges)
        payload TEXT NOT NULL,            -- JSON: the delivery's `data`
        state TEXT NOT NULL DEFAULT 'pending',
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_at INTEGER NOT NULL DEFAULT 0,
        last_error TEXT,
        last_status INTEGER,
        created_at INTEGER NOT NULL,
        finished_at INTEGER
    );
    CREATE INDEX webhook_outbox_due ON webhook_outbox(next_attempt_at) WHERE state = 'pending';
    CREATE INDEX webhook_outbox_hook ON webhook_outbox(webhook_id, state, id);
    CREATE INDEX webhook_outbox_subject ON webhook_outbox(collection_id, subject_id);
    CREATE INDEX webhook_outbox_finished ON webhook_outbox(finished_at) WHERE state = 'delivered';
    CREATE TRIGGER webhook_event_created AFTER INSERT ON events WHEN EXISTS (SELECT 1 FROM webhooks)
    BEGIN
        INSERT INTO webhook_outbox(webhook_id, kind, collection_id, subject_id, user_ids, payload, created_at)
        SELECT w.id, 'memory.created', c.id, NEW.id, NEW.user_ids, json_object('project_name', c.project_name, 'collection_name', c.collection_name, 'event_id', NEW.id, 'event_type', NEW.memory_type, 'user_ids', json(NEW.user_ids), 'assistant_ids', json(NEW.assistant_ids), 'group_id', NEW.group_id, 'conversation_id', NEW.conversation_id, 'session_id', NEW.session_id, 'scope', NEW.scope, 'class', NEW.class, 'status', NEW.status, 'time', NEW.time, 'memory_info', json(NEW.memory_info), 'created_at', NEW.created_at, 'updated_at', NEW.updated_at, 'expires_at', NEW.expires_at, 'superseded_by', NEW.superseded_by), NEW.updated_at
        FROM collections c JOIN webhooks w ON w.project_name = c.project_name
        WHERE c.id = NEW.collection_id AND instr(w.events, ' memory.created ') > 0;
    END;

    CREATE TRIGGER webhook_event_updated AFTER UPDATE OF memory_info, memory_type, user_ids, assistant_ids, time, scope, class, status, expires_at ON events
    WHEN EXISTS (SELECT 1 FROM webhooks) AND NOT (NEW.status = 'superseded' AND OLD.status IS NOT 'superseded') AND (NEW.memory_info IS NOT OLD.memory_info OR NEW.memory_type IS NOT OLD.memory_type OR NEW.user_ids IS NOT OLD.user_ids OR NEW.assistant_ids IS NOT OLD.assistant_ids OR NEW.time IS NOT OLD.time OR NEW.scope IS NOT OLD.scope OR NEW.class IS NOT OLD.class OR NEW.expires_at IS NOT OLD.expires_at OR NEW.status IS NOT OLD.status)
    BEGIN
        INSERT INTO webhook_outbox(webhook_id, kind, collection_id, subject_id, user_ids, payload, created_at)
        SELECT w.id, 'memory.updated', c.id, NEW.id, NEW.user_ids, json_object('project_name', c.project_name, 'collection_name', c.collection_name, 'event_id', NEW.id, 'event_type', NEW.memory_type, 'user_ids', json(NEW.user_ids), 'assistant_ids', json(NEW.assistant_ids), 'group_id', NEW.group_id, 'conversation_id', NEW.conversation_id, 'session_id', NEW.session_id, 'scope', NEW.scope, 'class', NEW.class, 'status', NEW.status, 'time', NEW.time, 'memory_info', json(NEW.memory_info), 'created_at', NEW.created_at, 'updated_at', NEW.updated_at, 'expires_at', NEW.expires_at, 'superseded_by', NEW.superseded_by), NEW.updated_at
        FROM collections c JOIN webhooks w ON w.project_name = c.project_name
        WHERE c.id = NEW.collection_id AND instr(w.events, ' memory.updated ') > 0;
    END;

    CREATE TRIGGER webhook_event_superseded AFTER UPDATE OF status ON events
    WHEN EXISTS (SELECT 1 FROM webhooks) AND NEW.status = 'superseded' AND OLD.status IS NOT 'superseded'
    BEGIN
        INSERT INTO webhook_outbox(webhook_id, kind, collection_id, subject_id, user_ids, payload, created_at)
        SELECT w.id, 'memory.superseded', c.id, NEW.id, NEW.user_ids, json_object('project_name', c.project_name, 'collection_name', c.collection_name, 'event_id', NEW.id, 'event_type', NEW.memory_type, 'user_ids', json(NEW.user_ids), 'assistant_ids', json(NEW.assistant_ids), 'group_id', NEW.group_id, 'conversation_id', NEW.conversation_id, 'session_id', NEW.session_id, 'scope', NEW.scope, 'class', NEW.class, 'status', NEW.status, 'time', NEW.time, 'memory_info', json(NEW.memory_info), 'created_at', NEW.created_at, 'updated_at', NEW.updated_at, 'expires_at', NEW.expires_at, 'superseded_by', NEW.superseded_by), NEW.updated_at
        FROM collections c JOIN webhooks w ON w.project_name = c.project_name
        WHERE c.id = NEW.collection_id AND instr(w.events, ' memory.superseded ') > 0;
    END;

    CREATE TRIGGER webhook_event_deleted AFTER DELETE ON events WHEN EXISTS (SELECT 1 FROM webhooks)
    BEGIN
        INSERT INTO webhook_outbox(webhook_id, kind, collection_id, subject_id, user_ids, payload, created_at)
        SELECT w.id, 'memory.deleted', c.id, OLD.id, OLD.user_ids, json_object('project_name', c.project_name, 'collection_name', c.collection_name, 'event_id', OLD.id, 'event_type', OLD.memory_type, 'user_ids', json(OLD.user_ids), 'assistant_ids', json(OLD.assistant_ids), 'conversation_id', OLD.conversation_id, 'session_id', OLD.session_id), CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)
        FROM collections c JOIN webhooks w ON w.project_name = c.project_name
        WHERE c.id = OLD.collection_id AND instr(w.events, ' memory.deleted ') > 0;
    END;

    CREATE TRIGGER webhook_profile_created AFTER INSERT ON profiles WHEN EXISTS (SELECT 1 FROM webhooks)
    BEGIN
        INSERT INTO webhook_outbox(webhook_id, kind, collection_id, subject_id, user_ids, payload, created_at)
        SELECT w.id, 'profile.updated', c.id, NEW.id, json_array(NEW.user_id), json_object('project_name', c.project_name, 'collection_name', c.collection_name, 'profile_id', NEW.id, 'profile_type', NEW.profile_type, 'user_id', NEW.user_id, 'assistant_id', NEW.assistant_id, 'content', NEW.content, 'memory_info', json(NEW.attributes), 'updated_at', NEW.updated_at, 'deleted', json('false')), NEW.updated_at
        FROM collections c JOIN webhooks w ON w.project_name = c.project_name
        WHERE c.id = NEW.collection_id AND instr(w.events, ' profile.updated ') > 0;
    END;

    CREATE TRIGGER webhook_profile_updated AFTER UPDATE OF content, attributes, user_id, assistant_id, profile_type ON profiles
    WHEN EXISTS (SELECT 1 FROM webhooks) AND (NEW.content IS NOT OLD.content OR NEW.attributes IS NOT OLD.attributes OR NEW.user_id IS NOT OLD.user_id OR NEW.assistant_id IS NOT OLD.assistant_id OR NEW.profile_type IS NOT OLD.profile_type)
    BEGIN
        INSERT INTO webhook_outbox(webhook_id, kind, collection_id, subject_id, user_ids, payload, created_at)
        SELECT w.id, 'profile.updated', c.id, NEW.id, json_array(NEW.user_id), json_object('project_name', c.project_name, 'collection_name', c.collection_name, 'profile_id', NEW.id, 'profile_type', NEW.profile_type, 'user_id', NEW.user_id, 'assistant_id', NEW.assistant_id, 'content', NEW.content, 'memory_info', json(NEW.attributes), 'updated_at', NEW.updated_at, 'deleted', json('false')), NEW.updated_at
        FROM collections c JOIN webhooks w ON w.project_name = c.project_name
        WHERE c.id = NEW.collection_id AND instr(w.events, ' profile.updated ') > 0;
    END;

    CREATE TRIGGER webhook_profile_deleted AFTER DELETE ON profiles WHEN EXISTS (SELECT 1 FROM webhooks)
    BEGIN
        INSERT INTO webhook_outbox(webhook_id, kind, collection_id, subject_id, user_ids, payload, created_at)
        SELECT w.id, 'profile.updated', c.id, OLD.id, json_array(OLD.user_id), json_object('project_name', c.project_name, 'collection_name', c.collection_name, 'profile_id', OLD.id, 'profile_type', OLD.profile_type, 'user_id', OLD.user_id, 'assistant_id', OLD.assistant_id, 'deleted', json('true')), CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)
        FROM collections c JOIN webhooks w ON w.project_name = c.project_name
        WHERE c.id = OLD.collection_id AND instr(w.events, ' profile.updated ') > 0;
    END;

    CREATE TRIGGER webhook_job_failed AFTER UPDATE OF state ON jobs
    WHEN EXISTS (SELECT 1 FROM webhooks) AND NEW.state = 'failed' AND OLD.state IS NOT 'failed'
    BEGIN
        INSERT INTO webhook_outbox(webhook_id, kind, collection_id, subject_id, user_ids, payload, created_at)
        SELECT w.id, 'job.failed', c.id, NEW.job_id, '[]', json_object('project_name', c.project_name, 'collection_name', c.collection_name, 'job_id', NEW.job_id, 'kind', NEW.kind, 'conversation_id', NEW.conversation_id, 'session_id', NEW.session_id, 'attempts', NEW.attempts, 'max_attempts', NEW.max_attempts, 'error', NEW.last_error, 'updated_at', NEW.updated_at), NEW.updated_at
        FROM collections c JOIN webhooks w ON w.project_name = c.project_name
        WHERE c.id = NEW.collection_id AND instr(w.events, ' job.failed ') > 0;
    END;
    "#,
    // v11: per-user locality. New events take rowids clustered by their first user (or
    // assistant) — `events::clustered_rowid` — so one user's rows sit next to each other in
    // the table; a vector's rowid is its event's, so its vectors do too; a subject row carries the
    // event's rowid, so a scoped search goes from the subject index to the rows without the id
    // index. The upgrade itself only renames: rows written before keep their rowids, their
    // vectors stay in `event_vectors_legacy` (keyed by event id) and their subject rows have no
    // `event_rowid`; reads find them all the same, and `events::relocate_legacy` moves them into
    // place in the background. (The first v11 release copied every vector here, before listening:
    // 384 s and a file twice the size at 1M events. Directories it upgraded are valid v11 ones.)
    // An empty legacy table (a new data directory) is dropped right after (`SqliteStore::open`).
    r#"
    ALTER TABLE event_subjects ADD COLUMN event_rowid INTEGER;
    ALTER TABLE event_vectors RENAME TO event_vectors_legacy;
    CREATE TABLE event_vectors(
        event_id TEXT PRIMARY KEY REFERENCES events(id) ON DELETE CASCADE,
        collection_id INTEGER NOT NULL,
        vec BLOB NOT NULL              -- little-endian f32, unit length; rowid = events.rowid
    );
    CREATE INDEX event_vectors_by_collection ON event_vectors(collection_id);
    "#,
    // v12: a half-precision copy of each vector, keyed by the same rowid (so clustered by user
    // too): a scoped search orders its scope by these (1.8 KB a row, two to a page, instead of
    // one 3.6 KB f32 row per page) and re-scores in f32 only the rows that could be in its top k
    // (`search::CopyRanker`), so results are exact. Writers add the copy beside the vector; a
    // vector deleted or changed in place loses its copy here (the search then reads its f32 row).
    // Vectors written before are copied in the background (`events::F16Fill`, its cursor in
    // `event_vectors_f16_fill`, dropped when done); until then the search reads their f32 rows.
    r#"
    CREATE TABLE event_vectors_f16(h BLOB NOT NULL);
    CREATE TRIGGER event_vectors_f16_deleted AFTER DELETE ON event_vectors
    BEGIN
        DELETE FROM event_vectors_f16 WHERE rowid = OLD.rowid;
    END;
    CREATE TRIGGER event_vectors_f16_updated AFTER UPDATE ON event_vectors
    BEGIN
        DELETE FROM event_vectors_f16 WHERE rowid = OLD.rowid;
    END;
    CREATE TABLE event_vectors_f16_fill(next_rowid INTEGER NOT NULL);
    INSERT INTO event_vectors_f16_fill VALUES (-9223372036854775808);
    "#,
    // v13: an event made of several turns keeps their vectors too (`mnemo_core::turns`: one blob,
    // 8 bits a dimension), written with its vector; they go with the vector (this trigger: the
    // event deleted, the collection's model changed) and whenever the text changes (the writers).
    // Events written before have none and rank by their one vector until the service's backfill
    // (`Service::backfill_turns`) has embedded their turns: pending while `event_turns_backfill`
    // holds its row, which only a directory that already had events gets.
    r#"
    CREATE TABLE event_turn_vectors(
        event_id TEXT PRIMARY KEY,
        turns BLOB NOT NULL     -- a few KB: a rowid table, so the key's index stays small
    );
    CREATE TRIGGER event_turn_vectors_deleted AFTER DELETE ON event_vectors
    BEGIN
        DELETE FROM event_turn_vectors WHERE event_id = OLD.event_id;
    END;
    CREATE TABLE event_turns_backfill(pending INTEGER NOT NULL);
    INSERT INTO event_turns_backfill SELECT 1 WHERE EXISTS (SELECT 1 FROM events);
    "#,
    // v14: time validity. `valid_from`: when what an event tells became true, if the conversation
    // states it ("since 2013"; NULL: its `time`); `valid_to`: when a correction superseded it (the
    // successor's validity start), backfilled for the events corrected before.
    r#"
    ALTER TABLE events ADD COLUMN valid_from INTEGER;
    ALTER TABLE events ADD COLUMN valid_to INTEGER;
    UPDATE events SET valid_to = (SELECT coalesce(n.valid_from, n.time) FROM events n WHERE n.id = events.superseded_by)
    WHERE superseded_by IS NOT NULL;
    "#,
    // v15: the memory.* webhooks' payloads carry the event's validity (`valid_from`, `valid_to`),
    // and a change of it alone is a memory.updated. The triggers of v10, written again with them.
    r#"
    DROP TRIGGER webhook_event_created;
    DROP TRIGGER webhook_event_updated;
    DROP TRIGGER webhook_event_superseded;
    CREATE TRIGGER webhook_event_created AFTER INSERT ON events WHEN EXISTS (SELECT 1 FROM webhooks)
    BEGIN
        INSERT INTO webhook_outbox(webhook_id, kind, collection_id, subject_id, user_ids, payload, created_at)
        SELECT w.id, 'memory.created', c.id, NEW.id, NEW.user_ids, json_object('project_name', c.project_name, 'collection_name', c.collection_name, 'event_id', NEW.id, 'event_type', NEW.memory_type, 'user_ids', json(NEW.user_ids), 'assistant_ids', json(NEW.assistant_ids), 'group_id', NEW.group_id, 'conversation_id', NEW.conversation_id, 'session_id', NEW.session_id, 'scope', NEW.scope, 'class', NEW.class, 'status', NEW.status, 'time', NEW.time, 'memory_info', json(NEW.memory_info), 'created_at', NEW.created_at, 'updated_at', NEW.updated_at, 'expires_at', NEW.expires_at, 'superseded_by', NEW.superseded_by, 'valid_from', NEW.valid_from, 'valid_to', NEW.valid_to), NEW.updated_at
        FROM collections c JOIN webhooks w ON w.project_name = c.project_name
        WHERE c.id = NEW.collection_id AND instr(w.events, ' memory.created ') > 0;
    END;
    CREATE TRIGGER webhook_event_updated AFTER UPDATE OF memory_info, memory_type, user_ids, assistant_ids, time, scope, class, status, expires_at, valid_from, valid_to ON events
    WHEN EXISTS (SELECT 1 FROM webhooks) AND NOT (NEW.status = 'superseded' AND OLD.status IS NOT 'superseded') AND (NEW.memory_info IS NOT OLD.memory_info OR NEW.memory_type IS NOT OLD.memory_type OR NEW.user_ids IS NOT OLD.user_ids OR NEW.assistant_ids IS NOT OLD.assistant_ids OR NEW.time IS NOT OLD.time OR NEW.scope IS NOT OLD.scope OR NEW.class IS NOT OLD.class OR NEW.expires_at IS NOT OLD.expires_at OR NEW.status IS NOT OLD.status OR NEW.valid_from IS NOT OLD.valid_from OR NEW.valid_to IS NOT OLD.valid_to)
    BEGIN
        INSERT INTO webhook_outbox(webhook_id, kind, collection_id, subject_id, user_ids, payload, created_at)
        SELECT w.id, 'memory.updated', c.id, NEW.id, NEW.user_ids, json_object('project_name', c.project_name, 'collection_name', c.collection_name, 'event_id', NEW.id, 'event_type', NEW.memory_type, 'user_ids', json(NEW.user_ids), 'assistant_ids', json(NEW.assistant_ids), 'group_id', NEW.group_id, 'conversation_id', NEW.conversation_id, 'session_id', NEW.session_id, 'scope', NEW.scope, 'class', NEW.class, 'status', NEW.status, 'time', NEW.time, 'memory_info', json(NEW.memory_info), 'created_at', NEW.created_at, 'updated_at', NEW.updated_at, 'expires_at', NEW.expires_at, 'superseded_by', NEW.superseded_by, 'valid_from', NEW.valid_from, 'valid_to', NEW.valid_to), NEW.updated_at
        FROM collections c JOIN webhooks w ON w.project_name = c.project_name
        WHERE c.id = NEW.collection_id AND instr(w.events, ' memory.updated ') > 0;
    END;
    CREATE TRIGGER webhook_event_superseded AFTER UPDATE OF status ON events
    WHEN EXISTS (SELECT 1 FROM webhooks) AND NEW.status = 'superseded' AND OLD.status IS NOT 'superseded'
    BEGIN
        INSERT INTO webhook_outbox(webhook_id, kind, collection_id, subject_id, user_ids, payload, created_at)
        SELECT w.id, 'memory.superseded', c.id, NEW.id, NEW.user_ids, json_object('project_name', c.project_name, 'collection_name', c.collection_name, 'event_id', NEW.id, 'event_type', NEW.memory_type, 'user_ids', json(NEW.user_ids), 'assistant_ids', json(NEW.assistant_ids), 'group_id', NEW.group_id, 'conversation_id', NEW.conversation_id, 'session_id', NEW.session_id, 'scope', NEW.scope, 'class', NEW.class, 'status', NEW.status, 'time', NEW.time, 'memory_info', json(NEW.memory_info), 'created_at', NEW.created_at, 'updated_at', NEW.updated_at, 'expires_at', NEW.expires_at, 'superseded_by', NEW.superseded_by, 'valid_from', NEW.valid_from, 'valid_to', NEW.valid_to), NEW.updated_at
        FROM collections c JOIN webhooks w ON w.project_name = c.project_name
        WHERE c.id = NEW.collection_id AND instr(w.events, ' memory.superseded ') > 0;
    END;
    "#,
    // v16: scope versions, for the search's scope cache (`scope_cache`). Every change a scoped
    // search could see — a subject row added or removed, an event's terms, rowid or any column a
    // filter reads changed, an event deleted, a vector copy replaced or removed (a copy added
    // needs no stamp: a scope kept without it reads that event's f32 vector, the same score) —
    // stamps each of the event's subjects (user or assistant) with the next value of one clock,
    // in the transaction of the change. (An event's first terms come in the transaction that
    // adds it, whose subject rows stamp it: no stamp of their own.) A cached scope is used only
    // while its subjects' stamps are those it was read under; the clock never goes back, so a
    // stamp is never reused (not after a forgotten user's rows are deleted either).
    r#"
    CREATE TABLE scope_clock(n INTEGER NOT NULL);
    INSERT INTO scope_clock VALUES (1);
    CREATE TABLE scope_versions(
        collection_id INTEGER NOT NULL,
        kind TEXT NOT NULL,
        subject_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        PRIMARY KEY(collection_id, kind, subject_id)
    ) WITHOUT ROWID;
    -- Every subject that has events is stamped from the start: an unstamped subject (no row:
    -- stamp "none of zero") then has never had an event in this collection, and the only scope
    -- ever read under that stamp is empty — even after a deleted collection's id is reused.
    INSERT INTO scope_versions SELECT DISTINCT collection_id, kind, subject_id, 1 FROM event_subjects WHERE true;
    CREATE TRIGGER scope_subject_added AFTER INSERT ON event_subjects
    BEGIN
        UPDATE scope_clock SET n = n + 1;
        INSERT INTO scope_versions SELECT NEW.collection_id, NEW.kind, NEW.subject_id, n FROM scope_clock WHERE true
        ON CONFLICT DO UPDATE SET version = excluded.version;
    END;
    CREATE TRIGGER scope_subject_removed AFTER DELETE ON event_subjects
    BEGIN
        UPDATE scope_clock SET n = n + 1;
        INSERT INTO scope_versions SELECT OLD.collection_id, OLD.kind, OLD.subject_id, n FROM scope_clock WHERE true
        ON CONFLICT DO UPDATE SET version = excluded.version;
    END;
    CREATE TRIGGER scope_event_changed AFTER UPDATE OF rowid, id, collection_id, terms, status, time, valid_from,
        valid_to, memory_type, group_id, session_id, conversation_id, scope ON events
    WHEN OLD.rowid IS NOT NEW.rowid OR OLD.id IS NOT NEW.id OR OLD.collection_id IS NOT NEW.collection_id
        OR (OLD.terms IS NOT NEW.terms AND OLD.terms IS NOT NULL) OR OLD.status IS NOT NEW.status OR OLD.time IS NOT NEW.time
        OR OLD.valid_from IS NOT NEW.valid_from OR OLD.valid_to IS NOT NEW.valid_to
        OR OLD.memory_type IS NOT NEW.memory_type OR OLD.group_id IS NOT NEW.group_id
        OR OLD.session_id IS NOT NEW.session_id OR OLD.conversation_id IS NOT NEW.conversation_id
        OR OLD.scope IS NOT NEW.scope
    BEGIN
        UPDATE scope_clock SET n = n + 1;
        INSERT INTO scope_versions SELECT s.collection_id, s.kind, s.subject_id, c.n FROM event_subjects s, scope_clock c
        WHERE s.event_id IN (OLD.id, NEW.id)
        ON CONFLICT DO UPDATE SET version = excluded.version;
    END;
    CREATE TRIGGER scope_event_deleted BEFORE DELETE ON events
    BEGIN
        UPDATE scope_clock SET n = n + 1;
        INSERT INTO scope_versions SELECT s.collection_id, s.kind, s.subject_id, c.n FROM event_subjects s, scope_clock c
        WHERE s.event_id = OLD.id
        ON CONFLICT DO UPDATE SET version = excluded.version;
    END;
    CREATE TRIGGER scope_copy_replaced BEFORE INSERT ON event_vectors_f16
    WHEN EXISTS (SELECT 1 FROM event_vectors_f16 WHERE rowid = NEW.rowid)
    BEGIN
        UPDATE scope_clock SET n = n + 1;
        INSERT INTO scope_versions SELECT s.collection_id, s.kind, s.subject_id, c.n FROM event_subjects s, scope_clock c
        WHERE s.event_id = (SELECT e.id FROM events e WHERE e.rowid = NEW.rowid)
        ON CONFLICT DO UPDATE SET version = excluded.version;
    END;
    CREATE TRIGGER scope_copy_removed AFTER DELETE ON event_vectors_f16
    BEGIN
        UPDATE scope_clock SET n = n + 1;
        INSERT INTO scope_versions SELECT s.collection_id, s.kind, s.subject_id, c.n FROM event_subjects s, scope_clock c
        WHERE s.event_id = (SELECT e.id FROM events e WHERE e.rowid = OLD.rowid)
        ON CONFLICT DO UPDATE SET version = excluded.version;
    END;
    "#,
    // v17: each user's active events counted, with the latest change among them — what
    // `user/list` (the dashboard's first page) shows — kept by triggers in the transaction of
    // every change, instead of reading every active event's row when asked (163 ms at 100k
    // events, 9 s from a cold cache). A count moves by one; the latest change moves up with a
    // change, and is read again from the user's events only when the event that held it stops
    // being theirs or active.
    r#"
    CREATE TABLE user_activity(
        collection_id INTEGER NOT NULL,
        subject_id TEXT NOT NULL,
        events INTEGER NOT NULL,       -- active events about the user
        last INTEGER,                  -- the latest updated_at among them
        PRIMARY KEY(collection_id, subject_id)
    ) WITHOUT ROWID;
    INSERT INTO user_activity SELECT s.collection_id, s.subject_id, count(*), max(e.updated_at)
    FROM event_subjects s JOIN events e ON e.id = s.event_id
    WHERE s.kind = 'u' AND e.status = 'active' GROUP BY s.collection_id, s.subject_id;
    CREATE TRIGGER activity_subject_added AFTER INSERT ON event_subjects WHEN NEW.kind = 'u'
    BEGIN
        INSERT INTO user_activity SELECT NEW.collection_id, NEW.subject_id, 1, e.updated_at FROM events e
        WHERE e.id = NEW.event_id AND e.status = 'active'
        ON CONFLICT DO UPDATE SET events = events + 1, last = max(coalesce(last, excluded.last), excluded.last);
    END;
    CREATE TRIGGER activity_subject_removed AFTER DELETE ON event_subjects
    WHEN OLD.kind = 'u' AND EXISTS (SELECT 1 FROM events e WHERE e.id = OLD.event_id AND e.status = 'active')
    BEGIN
        UPDATE user_activity SET events = events - 1,
            last = CASE WHEN (SELECT e.updated_at FROM events e WHERE e.id = OLD.event_id) < last THEN last
                ELSE (SELECT max(e.updated_at) FROM event_subjects s
                JOIN events e ON e.rowid = coalesce(s.event_rowid, (SELECT l.rowid FROM events l WHERE l.id = s.event_id))
                WHERE s.collection_id = OLD.collection_id AND s.kind = 'u' AND s.subject_id = OLD.subject_id AND e.status = 'active') END
        WHERE collection_id = OLD.collection_id AND subject_id = OLD.subject_id;
    END;
    CREATE TRIGGER activity_event_changed AFTER UPDATE OF status, updated_at ON events
    WHEN (OLD.status = 'active' OR NEW.status = 'active')
        AND (OLD.status IS NOT NEW.status OR OLD.updated_at IS NOT NEW.updated_at)
    BEGIN
        INSERT INTO user_activity
        SELECT s.collection_id, s.subject_id, (NEW.status = 'active') - (OLD.status = 'active'),
            CASE WHEN NEW.status = 'active' THEN NEW.updated_at END
        FROM event_subjects s WHERE s.event_id = NEW.id AND s.kind = 'u'
        ON CONFLICT DO UPDATE SET events = events + excluded.events,
            last = CASE
                WHEN excluded.last >= coalesce(last, excluded.last) THEN excluded.last
                WHEN OLD.status = 'active' AND OLD.updated_at >= last
                    THEN (SELECT max(e.updated_at) FROM event_subjects s
                JOIN events e ON e.rowid = coalesce(s.event_rowid, (SELECT l.rowid FROM events l WHERE l.id = s.event_id))
                WHERE s.collection_id = excluded.collection_id AND s.kind = 'u' AND s.subject_id = excluded.subject_id AND e.status = 'active')
                ELSE last END;
    END;
    "#,
    // v18: a kept scope keeps its events decoded too (`candidates::Decoded`), so every column a
    // search returns stamps the scope when it changes — the event's memory_info, subjects, class,
    // sources, times and supersession as well as what v16 named — but its hit count and last hit,
    // which change on every search that returns it (those events are forgotten by the scope
    // cache itself when their hits are counted).
    r#"
    DROP TRIGGER scope_event_changed;
    CREATE TRIGGER scope_event_changed AFTER UPDATE ON events
    WHEN OLD.rowid IS NOT NEW.rowid OR OLD.id IS NOT NEW.id OR OLD.collection_id IS NOT NEW.collection_id
        OR (OLD.terms IS NOT NEW.terms AND OLD.terms IS NOT NULL) OR OLD.status IS NOT NEW.status OR OLD.time IS NOT NEW.time
        OR OLD.valid_from IS NOT NEW.valid_from OR OLD.valid_to IS NOT NEW.valid_to
        OR OLD.memory_type IS NOT NEW.memory_type OR OLD.group_id IS NOT NEW.group_id
        OR OLD.session_id IS NOT NEW.session_id OR OLD.conversation_id IS NOT NEW.conversation_id
        OR OLD.scope IS NOT NEW.scope OR OLD.memory_info IS NOT NEW.memory_info OR OLD.user_ids IS NOT NEW.user_ids
        OR OLD.assistant_ids IS NOT NEW.assistant_ids OR OLD.class IS NOT NEW.class
        OR OLD.source_message_ids IS NOT NEW.source_message_ids OR OLD.created_at IS NOT NEW.created_at
        OR OLD.updated_at IS NOT NEW.updated_at OR OLD.expires_at IS NOT NEW.expires_at
        OR OLD.superseded_by IS NOT NEW.superseded_by
    BEGIN
        UPDATE scope_clock SET n = n + 1;
        INSERT INTO scope_versions SELECT s.collection_id, s.kind, s.subject_id, c.n FROM event_subjects s, scope_clock c
        WHERE s.event_id IN (OLD.id, NEW.id)
        ON CONFLICT DO UPDATE SET version = excluded.version;
    END;
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
    migrate_to(conn, SCHEMA_VERSION, after)
}

/// [`migrate_with`] up to `target` only (tests build the data directory of an older release).
pub(crate) fn migrate_to(
    conn: &mut Connection,
    target: i64,
    after: impl Fn(&rusqlite::Transaction, usize) -> rusqlite::Result<()>,
) -> rusqlite::Result<Result<(), String>> {
    let current: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if current > SCHEMA_VERSION {
        return Ok(Err(format!(
            "the data directory has schema version {current}, newer than this mnemo understands ({SCHEMA_VERSION}); upgrade mnemo"
        )));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().take(target as usize).skip(current as usize) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        after(&tx, i + 1)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tx.commit()?;
        tracing::info!(version = i + 1, "applied store migration");
    }
    Ok(Ok(()))
}

/// Vectors of events written before schema v11, keyed by event id, until [`relocate_legacy`]
/// has moved them all into `event_vectors` (then the table is dropped).
pub(crate) const LEGACY_VECTORS: &str = "event_vectors_legacy";

/// Whether `event_vectors_legacy` still exists (a data directory upgraded from schema v10 whose
/// relocation has not finished). A look at the schema table: microseconds.
pub(crate) fn has_legacy_vectors(conn: &Connection) -> StoreResult<bool> {
    table_exists(conn, LEGACY_VECTORS)
}

/// The tables vectors are in: `event_vectors`, and the legacy one while it exists.
pub(crate) fn vector_tables(conn: &Connection) -> StoreResult<&'static [&'static str]> {
    Ok(if has_legacy_vectors(conn)? { &["event_vectors", LEGACY_VECTORS] } else { &["event_vectors"] })
}

/// Removes an event's vector from the legacy table, if that table is still there: the event's
/// vector is being written to `event_vectors` or the event is going.
pub(crate) fn forget_legacy_vector(conn: &Connection, id: &str) -> StoreResult<()> {
    if has_legacy_vectors(conn)? {
        conn.prepare_cached("DELETE FROM event_vectors_legacy WHERE event_id=?1")
            .map_err(backend)?
            .execute([id])
            .map_err(backend)?;
    }
    Ok(())
}

pub(crate) fn table_exists(conn: &Connection, name: &str) -> StoreResult<bool> {
    conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type='table' AND name=?1)")
        .map_err(backend)?
        .query_row([name], |r| r.get(0))
        .map_err(backend)
}
