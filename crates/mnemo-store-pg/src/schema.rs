//! The PostgreSQL schema and its migrations, the same tables as the embedded store (integers are
//! `BIGINT`, JSON stays text so both stores map rows the same way). `mnemo_schema` records the
//! version; each migration runs once, in one transaction, under an advisory lock so replicas that
//! start together do not race.

use tokio_postgres::Client;

/// Key of the advisory lock held while migrating (any constant unique to mnemo).
pub(crate) const MIGRATION_LOCK: i64 = 0x6d6e_656d_6f01;

/// The advisory lock a bulk load holds (on one connection, for the whole load) in this schema —
/// advisory locks are database-wide, so the key is derived from the schema's name. While it is
/// held by another session, a missing vector index is not built (see [`ensure_vector_index`]).
pub const BULK_LOAD_LOCK: &str = "hashtextextended('mnemo bulk load ' || current_schema(), 0)";

mod later;

const MIGRATIONS: &[&str] = &[
    // v1: everything the embedded store has at its v7, in one step.
    r#"
    CREATE TABLE collections(
        id BIGSERIAL PRIMARY KEY,
        project_name TEXT NOT NULL,
        collection_name TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        schema_json TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        embedding_model TEXT,
        embedding_dim BIGINT,
        UNIQUE(project_name, collection_name)
    );
    CREATE TABLE conversations(
        collection_id BIGINT NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        conversation_id TEXT NOT NULL,
        meta_json TEXT NOT NULL,
        open_messages BIGINT NOT NULL DEFAULT 0,
        open_tokens BIGINT NOT NULL DEFAULT 0,
        wait_timeout_ms BIGINT NOT NULL,
        last_write_at BIGINT NOT NULL,
        idle_deadline BIGINT,
        created_at BIGINT NOT NULL,
        PRIMARY KEY(collection_id, conversation_id)
    );
    CREATE INDEX conversations_deadline ON conversations(idle_deadline) WHERE idle_deadline IS NOT NULL;
    CREATE TABLE messages(
        id BIGSERIAL PRIMARY KEY,
        collection_id BIGINT NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        conversation_id TEXT NOT NULL,
        session_id TEXT,
        role TEXT NOT NULL,
        name TEXT,
        content TEXT NOT NULL,
        content_raw BYTEA,             -- the exact UTF-8 when the text holds NUL (TEXT cannot)
        time BIGINT NOT NULL,
        tokens BIGINT NOT NULL,
        idempotency_key TEXT,
        created_at BIGINT NOT NULL
    );
    CREATE INDEX messages_conversation ON messages(collection_id, conversation_id, id);
    CREATE INDEX messages_session ON messages(session_id) WHERE session_id IS NOT NULL;
    -- Unique across every replica: a retried write is stored once whichever replica gets it.
    CREATE UNIQUE INDEX messages_idempotency ON messages(collection_id, conversation_id, idempotency_key)
        WHERE idempotency_key IS NOT NULL;
    CREATE TABLE sessions(
        session_id TEXT PRIMARY KEY,
        collection_id BIGINT NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        conversation_id TEXT NOT NULL,
        reason TEXT NOT NULL,
        state TEXT NOT NULL,
        message_count BIGINT NOT NULL,
        token_count BIGINT NOT NULL,
        meta_json TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        extracted_at BIGINT
    );
    CREATE INDEX sessions_conversation ON sessions(collection_id, conversation_id, created_at);
    CREATE TABLE jobs(
        job_id TEXT PRIMARY KEY,
        collection_id BIGINT NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        state TEXT NOT NULL,
        conversation_id TEXT,
        session_id TEXT,
        attempts BIGINT NOT NULL DEFAULT 0,
        max_attempts BIGINT NOT NULL,
        last_error TEXT,
        run_after BIGINT NOT NULL,
        lease_until BIGINT,
        prompt_tokens BIGINT NOT NULL DEFAULT 0,
        completion_tokens BIGINT NOT NULL DEFAULT 0,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL
    );
    CREATE INDEX jobs_queued ON jobs(run_after) WHERE state = 'queued';
    CREATE INDEX jobs_running ON jobs(lease_until) WHERE state = 'running';
    CREATE INDEX jobs_collection ON jobs(collection_id, created_at);
    CREATE INDEX jobs_session ON jobs(session_id);
    CREATE INDEX jobs_updated ON jobs(updated_at);
    CREATE TABLE events(
        id TEXT PRIMARY KEY,
        collection_id BIGINT NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        memory_type TEXT NOT NULL,
        user_ids TEXT NOT NULL,
        assistant_ids TEXT NOT NULL,
        group_id TEXT,
        session_id TEXT,
        conversation_id TEXT,
        scope TEXT,
        class TEXT NOT NULL,
        status TEXT NOT NULL,
        time BIGINT NOT NULL,
        memory_info TEXT NOT NULL,
        source_message_ids TEXT NOT NULL,
        hit_count BIGINT NOT NULL DEFAULT 0,
        last_hit_at BIGINT,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        expires_at BIGINT,
        superseded_by TEXT,
        -- mnemo_core::text::search_tokens, space separated (BM25 is scored in Rust from these) …
        terms TEXT,
        -- … and the same tokens as lexemes, for the GIN index that finds matches in large scopes.
        terms_tsv TSVECTOR
    );
    CREATE INDEX events_collection_time ON events(collection_id, time);
    CREATE INDEX events_session ON events(session_id) WHERE session_id IS NOT NULL;
    CREATE INDEX events_conversation ON events(collection_id, conversation_id);
    CREATE INDEX events_expiry ON events(collection_id, expires_at) WHERE expires_at IS NOT NULL;
    CREATE INDEX events_terms ON events USING gin(terms_tsv);
    CREATE TABLE event_subjects(
        collection_id BIGINT NOT NULL,
        kind TEXT NOT NULL,
        subject_id TEXT NOT NULL,
        event_id TEXT NOT NULL REFERENCES events(id) ON DELETE CASCADE,
        PRIMARY KEY(collection_id, kind, subject_id, event_id)
    );
    CREATE INDEX event_subjects_event ON event_subjects(event_id);
    -- Any dimension; each dimension in use gets its own partial HNSW index (see VectorIndex).
    CREATE TABLE event_vectors(
        event_id TEXT PRIMARY KEY REFERENCES events(id) ON DELETE CASCADE,
        collection_id BIGINT NOT NULL,
        dim INT NOT NULL,
        vec vector NOT NULL
    );
    CREATE INDEX event_vectors_collection ON event_vectors(collection_id);
    CREATE TABLE profiles(
        id TEXT PRIMARY KEY,
        collection_id BIGINT NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        profile_type TEXT NOT NULL,
        user_id TEXT NOT NULL,
        assistant_id TEXT NOT NULL DEFAULT '',
        content TEXT NOT NULL,
        attributes TEXT NOT NULL,
        source_sessions TEXT NOT NULL DEFAULT '[]',
        attribute_since TEXT NOT NULL DEFAULT '{}',
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        UNIQUE(collection_id, profile_type, user_id, assistant_id)
    );
    CREATE TABLE profile_history(
        id BIGSERIAL PRIMARY KEY,
        profile_id TEXT NOT NULL REFERENCES profiles(id) ON DELETE CASCADE,
        attribute TEXT NOT NULL,
        value TEXT NOT NULL,
        valid_from BIGINT,
        valid_to BIGINT NOT NULL,
        session_id TEXT
    );
    CREATE INDEX profile_history_profile ON profile_history(profile_id, valid_to);
    CREATE TABLE hits_daily(
        collection_id BIGINT NOT NULL,
        day BIGINT NOT NULL,
        user_id TEXT NOT NULL,
        hits BIGINT NOT NULL,
        PRIMARY KEY(collection_id, day, user_id)
    );
    CREATE TABLE maintenance_runs(
        id BIGSERIAL PRIMARY KEY,
        collection_id BIGINT NOT NULL,
        trigger TEXT NOT NULL,
        started_at BIGINT NOT NULL,
        expired BIGINT NOT NULL,
        archived BIGINT NOT NULL,
        folded BIGINT NOT NULL DEFAULT 0,
        digests BIGINT NOT NULL DEFAULT 0
    );
    CREATE INDEX maintenance_runs_collection ON maintenance_runs(collection_id, started_at);
    CREATE TABLE term_stats(
        collection_id BIGINT NOT NULL,
        term TEXT NOT NULL,
        df BIGINT NOT NULL,
        PRIMARY KEY(collection_id, term)
    );
    CREATE TABLE collection_stats(
        collection_id BIGINT PRIMARY KEY,
        docs BIGINT NOT NULL,
        tokens BIGINT NOT NULL
    );
    -- Writers only append their changes to these (no row every writer updates, so no lock every
    -- writer waits for); a compactor folds them into the tables above every few seconds, and
    -- readers add both. Exact at every snapshot.
    CREATE TABLE term_stats_delta(
        collection_id BIGINT NOT NULL,
        term TEXT NOT NULL,
        df BIGINT NOT NULL
    );
    CREATE INDEX term_stats_delta_term ON term_stats_delta(collection_id, term);
    CREATE TABLE collection_stats_delta(
        collection_id BIGINT NOT NULL,
        docs BIGINT NOT NULL,
        tokens BIGINT NOT NULL
    );
    CREATE INDEX collection_stats_delta_collection ON collection_stats_delta(collection_id);
    "#,
    // v2: a job's latest attempt has a start and (when done or failed) an end; failed jobs are
    // re-queued automatically a bounded number of times (`requeues`).
    r#"
    ALTER TABLE jobs ADD COLUMN started_at BIGINT;
    ALTER TABLE jobs ADD COLUMN finished_at BIGINT;
    ALTER TABLE jobs ADD COLUMN requeues BIGINT NOT NULL DEFAULT 0;
    CREATE INDEX jobs_failed ON jobs(state) WHERE state = 'failed';
    "#,
    // v3: webhooks — endpoints per project and the outbox, one row per (change, subscribed
    // endpoint), written by the triggers below in the transaction of the change (the same rules
    // as the embedded store's v10). Payloads are built as `json`, not `jsonb`: stored JSON may
    // hold \u0000 escapes, which jsonb refuses.
    r#"
    CREATE TABLE webhooks(
        id TEXT PRIMARY KEY,
        project_name TEXT NOT NULL,
        url TEXT NOT NULL,
        secret TEXT NOT NULL,
        events TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        source TEXT NOT NULL,
        created_at BIGINT NOT NULL
    );
    CREATE INDEX webhooks_project ON webhooks(project_name);
    CREATE TABLE webhook_outbox(
        id BIGSERIAL PRIMARY KEY,
        webhook_id TEXT NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        collection_id BIGINT NOT NULL,
        subject_id TEXT NOT NULL,
        user_ids TEXT NOT NULL,
        payload TEXT NOT NULL,
        state TEXT NOT NULL DEFAULT 'pending',
        attempts BIGINT NOT NULL DEFAULT 0,
        next_attempt_at BIGINT NOT NULL DEFAULT 0,
        last_error TEXT,
        last_status BIGINT,
        created_at BIGINT NOT NULL,
        finished_at BIGINT
    );
    CREATE INDEX webhook_outbox_due ON webhook_outbox(next_attempt_at) WHERE state = 'pending';
    CREATE INDEX webhook_outbox_hook ON webhook_outbox(webhook_id, state, id);
    CREATE INDEX webhook_outbox_subject ON webhook_outbox(collection_id, subject_id);
    CREATE INDEX webhook_outbox_finished ON webhook_outbox(finished_at) WHERE state = 'delivered';

    CREATE FUNCTION mnemo_webhook_now() RETURNS BIGINT LANGUAGE sql AS
        $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT $$;

    CREATE FUNCTION mnemo_webhook_events() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE r events; v_kind TEXT; v_at BIGINT;
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM webhooks) THEN RETURN NULL; END IF;
        IF TG_OP = 'INSERT' THEN
            r := NEW; v_kind := 'memory.created'; v_at := NEW.updated_at;
        ELSIF TG_OP = 'DELETE' THEN
            r := OLD; v_kind := 'memory.deleted'; v_at := mnemo_webhook_now();
        ELSIF NEW.status = 'superseded' AND OLD.status IS DISTINCT FROM 'superseded' THEN
            r := NEW; v_kind := 'memory.superseded'; v_at := NEW.updated_at;
        ELSIF (NEW.memory_info, NEW.memory_type, NEW.user_ids, NEW.assistant_ids, NEW.time, NEW.scope, NEW.class, NEW.expires_at, NEW.status) IS DISTINCT FROM (OLD.memory_info, OLD.memory_type, OLD.user_ids, OLD.assistant_ids, OLD.time, OLD.scope, OLD.class, OLD.expires_at, OLD.status) THEN
            r := NEW; v_kind := 'memory.updated'; v_at := NEW.updated_at;
        ELSE
            RETURN NULL;
        END IF;
        INSERT INTO webhook_outbox(webhook_id, kind, collection_id, subject_id, user_ids, payload, created_at)
        SELECT w.id, v_kind, c.id, r.id, r.user_ids,
            (CASE WHEN TG_OP = 'DELETE'
                THEN json_build_object('project_name', c.project_name, 'collection_name', c.collection_name, 'event_id', r.id, 'event_type', r.memory_type, 'user_ids', r.user_ids::json, 'assistant_ids', r.assistant_ids::json, 'conversation_id', r.conversation_id, 'session_id', r.session_id)
                ELSE json_build_object('project_name', c.project_name, 'collection_name', c.collection_name, 'event_id', r.id, 'event_type', r.memory_type, 'user_ids', r.user_ids::json, 'assistant_ids', r.assistant_ids::json, 'group_id', r.group_id, 'conversation_id', r.conversation_id, 'session_id', r.session_id, 'scope', r.scope, 'class', r.class, 'status', r.status, 'time', r.time, 'memory_info', r.memory_info::json, 'created_at', r.created_at, 'updated_at', r.updated_at, 'expires_at', r.expires_at, 'superseded_by', r.superseded_by)
            END)::TEXT,
            v_at
        FROM collections c JOIN webhooks w ON w.project_name = c.project_name
        WHERE c.id = r.collection_id AND strpos(w.events, ' ' || v_kind || ' ') > 0;
        RETURN NULL;
    END $$;
    CREATE TRIGGER webhook_events AFTER INSERT OR DELETE OR UPDATE OF memory_info, memory_type, user_ids, assistant_ids, time, scope, class, expires_at, status ON events
        FOR EACH ROW EXECUTE FUNCTION mnemo_webhook_events();

    CREATE FUNCTION mnemo_webhook_profiles() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE r profiles; v_at BIGINT;
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM webhooks) THEN RETURN NULL; END IF;
        IF TG_OP = 'DELETE' THEN
            r := OLD; v_at := mnemo_webhook_now();
        ELSIF TG_OP = 'UPDATE' AND (NEW.content, NEW.attributes, NEW.user_id, NEW.assistant_id, NEW.profile_type)
                IS NOT DISTINCT FROM (OLD.content, OLD.attributes, OLD.user_id, OLD.assistant_id, OLD.profile_type) THEN
            RETURN NULL;
        ELSE
            r := NEW; v_at := NEW.updated_at;
        END IF;
        INSERT INTO webhook_outbox(webhook_id, kind, collection_id, subject_id, user_ids, payload, created_at)
        SELECT w.id, 'profile.updated', c.id, r.id, json_build_array(r.user_id)::TEXT,
            (CASE WHEN TG_OP = 'DELETE'
                THEN json_build_object('project_name', c.project_name, 'collection_name', c.collection_name,
                    'profile_id', r.id, 'profile_type', r.profile_type, 'user_id', r.user_id, 'assistant_id', r.assistant_id,
                    'deleted', true)
                ELSE json_build_object('project_name', c.project_name, 'collection_name', c.collection_name,
                    'profile_id', r.id, 'profile_type', r.profile_type, 'user_id', r.user_id, 'assistant_id', r.assistant_id,
                    'content', r.content, 'memory_info', r.attributes::json, 'updated_at', r.updated_at, 'deleted', false)
            END)::TEXT,
            v_at
        FROM collections c JOIN webhooks w ON w.project_name = c.project_name
        WHERE c.id = r.collection_id AND strpos(w.events, ' profile.updated ') > 0;
        RETURN NULL;
    END $$;
    CREATE TRIGGER webhook_profiles AFTER INSERT OR DELETE OR UPDATE OF content, attributes, user_id, assistant_id, profile_type
        ON profiles FOR EACH ROW EXECUTE FUNCTION mnemo_webhook_profiles();

    CREATE FUNCTION mnemo_webhook_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM webhooks) OR NEW.state <> 'failed' OR OLD.state = 'failed' THEN RETURN NULL; END IF;
        INSERT INTO webhook_outbox(webhook_id, kind, collection_id, subject_id, user_ids, payload, created_at)
        SELECT w.id, 'job.failed', c.id, NEW.job_id, '[]',
            json_build_object('project_name', c.project_name, 'collection_name', c.collection_name,
                'job_id', NEW.job_id, 'kind', NEW.kind, 'conversation_id', NEW.conversation_id, 'session_id', NEW.session_id,
                'attempts', NEW.attempts, 'max_attempts', NEW.max_attempts, 'error', NEW.last_error, 'updated_at', NEW.updated_at)::TEXT,
            NEW.updated_at
        FROM collections c JOIN webhooks w ON w.project_name = c.project_name
        WHERE c.id = NEW.collection_id AND strpos(w.events, ' job.failed ') > 0;
        RETURN NULL;
    END $$;
    CREATE TRIGGER webhook_jobs AFTER UPDATE OF state ON jobs FOR EACH ROW EXECUTE FUNCTION mnemo_webhook_jobs();
    "#,
    // v4: vectors in their rows. A row over 2 KB (every vector of 512 dimensions or more) had its
    // vector moved to the TOAST table, so reading one cost a TOAST index look-up and two chunk
    // reads besides the row. With the target at a page, only a row that cannot fit one (~2,000
    // dimensions) goes out of line. (`SET STORAGE MAIN` on `vec` is not it: the toaster then
    // moves `event_id` out instead.) Rows written before keep their TOASTed vectors.
    r#"
    ALTER TABLE event_vectors SET (toast_tuple_target = 8160);
    "#,
    // v5: a user's search documents side by side. A heap keeps rows in write order, so a user's
    // events are scattered and a scoped search fetched every one of them twice by primary key
    // (its row for the terms, its vector) — ~8 buffer touches an event. Each user subject row now
    // carries what a scoped search reads: the filter columns, the terms and the vector as
    // `halfvec` (f16) with the vector's norm, and one covering btree keyed by (collection, user) holds them all, so the
    // search is an index-only range scan over a few hundred consecutive entries. Half precision
    // only *orders*: `search::small_scope` re-reads the exact vector of every event whose f16
    // score cannot be told apart from the k-th (`exact::halfvec_bound`), so the candidates and
    // scores are exactly the f32 ones.
    //
    // `d_state` says what the copy holds: 4 = filter columns, | 2 = the vector (or the event has
    // none), | 1 = the terms; 0 = not filled yet (rows written before v5, which the housekeeping
    // step fills in batches: `terms::fill_subject_docs`). What is missing is read from the
    // event's own rows, so every row is searchable at every moment. The triggers keep the copy
    // in step with `events` and `event_vectors` whichever statement changes them. A btree entry
    // holds at most 2,704 bytes: a vector or terms that would not fit stay out (read from their
    // rows), as does a vector that f16 cannot represent (a component past ±65,000).
    r#"
    ALTER TABLE event_subjects
        ADD COLUMN d_state SMALLINT NOT NULL DEFAULT 0,
        ADD COLUMN d_active BOOLEAN,
        ADD COLUMN d_time BIGINT,
        ADD COLUMN d_type TEXT,
        ADD COLUMN d_terms TEXT,
        ADD COLUMN d_vec halfvec,
        ADD COLUMN d_norm REAL;
    CREATE INDEX event_subjects_docs ON event_subjects(collection_id, subject_id)
        INCLUDE (event_id, d_state, d_active, d_time, d_type, d_terms, d_vec, d_norm) WHERE kind = 'u';
    CREATE INDEX event_subjects_unfilled ON event_subjects(collection_id) WHERE kind = 'u' AND d_state = 0;
    -- An index-only scan reads the heap for every entry on a page not yet marked all-visible,
    -- which only VACUUM does: vacuum after 1% of the rows changed or arrived, not 20%. And a
    -- row with its copies (~2 KB) stays whole in its page rather than sending the f16 vector to
    -- TOAST (as for event_vectors in v4: no TOAST row and TOAST index entry per write).
    ALTER TABLE event_subjects SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_insert_scale_factor = 0.01,
                                    toast_tuple_target = 8160);

    CREATE FUNCTION mnemo_subject_doc() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE e RECORD; v RECORD; room INT;
    BEGIN
        IF NEW.kind <> 'u' THEN RETURN NEW; END IF;
        SELECT status, time, memory_type, terms INTO e FROM events WHERE id = NEW.event_id;
        SELECT dim, vec INTO v FROM event_vectors WHERE event_id = NEW.event_id;
        NEW.d_active := e.status = 'active';
        NEW.d_time := e.time;
        NEW.d_type := e.memory_type;
        NEW.d_terms := NULL;
        NEW.d_vec := NULL;
        NEW.d_norm := NULL;
        NEW.d_state := 4;
        -- What is left of an index entry's 2,704 bytes (with room for headers and alignment).
        room := 2556 - octet_length(NEW.subject_id) - octet_length(NEW.event_id) - COALESCE(octet_length(e.memory_type), 0);
        IF v.vec IS NULL THEN
            NEW.d_state := NEW.d_state | 2;
        -- f16 holds every component when the norm is under 65,000 (no component exceeds it).
        ELSIF 8 + 2 * v.dim <= room AND -(v.vec <#> v.vec) < 65000.0 * 65000.0 THEN
            NEW.d_vec := v.vec::halfvec;
            NEW.d_norm := sqrt(-(v.vec <#> v.vec));
            NEW.d_state := NEW.d_state | 2;
            room := room - 8 - 2 * v.dim;
        END IF;
        IF e.terms IS NULL THEN
            NEW.d_state := NEW.d_state | 1;
        ELSIF octet_length(e.terms) <= room THEN
            NEW.d_terms := e.terms;
            NEW.d_state := NEW.d_state | 1;
        END IF;
        RETURN NEW;
    END $$;
    CREATE TRIGGER subject_doc BEFORE INSERT OR UPDATE ON event_subjects
        FOR EACH ROW EXECUTE FUNCTION mnemo_subject_doc();

    -- A change to what the copy holds refills it (the trigger above does the work).
    CREATE FUNCTION mnemo_subject_doc_refresh() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE v_id TEXT;
    BEGIN
        IF TG_TABLE_NAME = 'events' THEN
            v_id := NEW.id;
        ELSIF TG_OP = 'DELETE' THEN
            -- A vector deleted with its event (the cascade): the subject rows go too.
            IF NOT EXISTS (SELECT 1 FROM events WHERE id = OLD.event_id) THEN RETURN NULL; END IF;
            v_id := OLD.event_id;
        ELSE
            v_id := NEW.event_id;
        END IF;
        UPDATE event_subjects SET d_state = 0 WHERE event_id = v_id AND kind = 'u';
        RETURN NULL;
    END $$;
    CREATE TRIGGER subject_doc_event AFTER UPDATE OF status, time, memory_type, terms ON events
        FOR EACH ROW EXECUTE FUNCTION mnemo_subject_doc_refresh();
    CREATE TRIGGER subject_doc_vector AFTER INSERT OR DELETE OR UPDATE OF dim, vec ON event_vectors
        FOR EACH ROW EXECUTE FUNCTION mnemo_subject_doc_refresh();
    "#,
    // v6: a new event's vector refreshes nothing. Its subject rows are written after it (and
    // read it then), so the refresh's UPDATE found no row — yet cost a look-up per vector, and
    // PL/pgSQL's cached plan for it, made while the table was small, scanned the whole table
    // until autovacuum analysed it: a fresh database's first 20,000 batched inserts grew
    // quadratically (8.8 s for the 38th batch of 500). The insert path says so in the
    // transaction (`mnemo.new_vectors`); every other vector write refreshes as before.
    r#"
    CREATE OR REPLACE FUNCTION mnemo_subject_doc_refresh() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE v_id TEXT;
    BEGIN
        IF TG_TABLE_NAME = 'events' THEN
            v_id := NEW.id;
        ELSIF TG_OP = 'INSERT' AND current_setting('mnemo.new_vectors', true) = 'on' THEN
            RETURN NULL;
        ELSIF TG_OP = 'DELETE' THEN
            -- A vector deleted with its event (the cascade): the subject rows go too.
            IF NOT EXISTS (SELECT 1 FROM events WHERE id = OLD.event_id) THEN RETURN NULL; END IF;
            v_id := OLD.event_id;
        ELSE
            v_id := NEW.event_id;
        END IF;
        UPDATE event_subjects SET d_state = 0 WHERE event_id = v_id AND kind = 'u';
        RETURN NULL;
    END $$;
    "#,
    // v7: an event made of several turns keeps their vectors too (`mnemo_core::turns`: one blob,
    // 8 bits a dimension), written with its vector and gone with it (the cascade: the event
    // deleted, the collection's model changed); the writers drop them when the text changes.
    // Events written before get theirs from the service's backfill (`Service::backfill_turns`),
    // pending while `event_turns_backfill` holds its row (only a database that had events).
    r#"
    CREATE TABLE event_turn_vectors(
        event_id TEXT PRIMARY KEY REFERENCES event_vectors(event_id) ON DELETE CASCADE,
        turns BYTEA NOT NULL
    );
    CREATE TABLE event_turns_backfill(pending BOOLEAN NOT NULL);
    INSERT INTO event_turns_backfill SELECT true WHERE EXISTS (SELECT 1 FROM events);
    "#,
    // v8: time validity. `valid_from`: when what an event tells became true, if the conversation
    // states it ("since 2013"; NULL: its `time`); `valid_to`: when a correction superseded it (the
    // successor's validity start), backfilled for the events corrected before. An as-of read
    // filters on them through the event rows (the user-document index holds current events).
    r#"
    ALTER TABLE events ADD COLUMN valid_from BIGINT, ADD COLUMN valid_to BIGINT;
    UPDATE events o SET valid_to = coalesce(n.valid_from, n.time)
    FROM events n WHERE n.id = o.superseded_by AND o.superseded_by IS NOT NULL;
    "#,
    // v9: the memory.* webhooks' payloads carry the event's validity (`valid_from`, `valid_to`),
    // and a change of it alone is a memory.updated: v3's function and trigger, written again.
    r#"
    CREATE OR REPLACE FUNCTION mnemo_webhook_events() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE r events; v_kind TEXT; v_at BIGINT;
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM webhooks) THEN RETURN NULL; END IF;
        IF TG_OP = 'INSERT' THEN
            r := NEW; v_kind := 'memory.created'; v_at := NEW.updated_at;
        ELSIF TG_OP = 'DELETE' THEN
            r := OLD; v_kind := 'memory.deleted'; v_at := mnemo_webhook_now();
        ELSIF NEW.status = 'superseded' AND OLD.status IS DISTINCT FROM 'superseded' THEN
            r := NEW; v_kind := 'memory.superseded'; v_at := NEW.updated_at;
        ELSIF (NEW.memory_info, NEW.memory_type, NEW.user_ids, NEW.assistant_ids, NEW.time, NEW.scope, NEW.class, NEW.expires_at, NEW.status, NEW.valid_from, NEW.valid_to) IS DISTINCT FROM (OLD.memory_info, OLD.memory_type, OLD.user_ids, OLD.assistant_ids, OLD.time, OLD.scope, OLD.class, OLD.expires_at, OLD.status, OLD.valid_from, OLD.valid_to) THEN
            r := NEW; v_kind := 'memory.updated'; v_at := NEW.updated_at;
        ELSE
            RETURN NULL;
        END IF;
        INSERT INTO webhook_outbox(webhook_id, kind, collection_id, subject_id, user_ids, payload, created_at)
        SELECT w.id, v_kind, c.id, r.id, r.user_ids,
            (CASE WHEN TG_OP = 'DELETE'
                THEN json_build_object('project_name', c.project_name, 'collection_name', c.collection_name, 'event_id', r.id, 'event_type', r.memory_type, 'user_ids', r.user_ids::json, 'assistant_ids', r.assistant_ids::json, 'conversation_id', r.conversation_id, 'session_id', r.session_id)
                ELSE json_build_object('project_name', c.project_name, 'collection_name', c.collection_name, 'event_id', r.id, 'event_type', r.memory_type, 'user_ids', r.user_ids::json, 'assistant_ids', r.assistant_ids::json, 'group_id', r.group_id, 'conversation_id', r.conversation_id, 'session_id', r.session_id, 'scope', r.scope, 'class', r.class, 'status', r.status, 'time', r.time, 'memory_info', r.memory_info::json, 'created_at', r.created_at, 'updated_at', r.updated_at, 'expires_at', r.expires_at, 'superseded_by', r.superseded_by, 'valid_from', r.valid_from, 'valid_to', r.valid_to)
            END)::TEXT,
            v_at
        FROM collections c JOIN webhooks w ON w.project_name = c.project_name
        WHERE c.id = r.collection_id AND strpos(w.events, ' ' || v_kind || ' ') > 0;
        RETURN NULL;
    END $$;
    DROP TRIGGER webhook_events ON events;
    CREATE TRIGGER webhook_events AFTER INSERT OR DELETE OR UPDATE OF memory_info, memory_type, user_ids, assistant_ids, time, scope, class, expires_at, status, valid_from, valid_to ON events
        FOR EACH ROW EXECUTE FUNCTION mnemo_webhook_events();
    "#,
    // v10: turn vectors in their rows, as v4 did for the event vectors. A chunk's turns (~3 KB at
    // 768 dimensions, 8 bits a dimension) went to the TOAST table, so every candidate's turns cost
    // a TOAST index look-up and chunk reads besides the row: twice the buffers of a search's
    // turns read (804 against 388 for 97 candidates, 1.3–2.4 against 0.7–0.9 ms). Rows written
    // before keep their TOASTed turns until the table is rewritten (`VACUUM FULL
    // event_turn_vectors`, which takes the table's lock: README, Scaling out).
    r#"
    ALTER TABLE event_turn_vectors SET (toast_tuple_target = 8160);
    "#,
    later::V11_SUBJECT_VERSIONS,
    later::V12_USER_ACTIVITY,
];

pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings the database up to [`SCHEMA_VERSION`]; refuses one written by a newer mnemo.
pub async fn migrate(client: &mut Client) -> Result<(), String> {
    let e = |e: tokio_postgres::Error| e.to_string();
    client.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK]).await.map_err(e)?;
    let result = migrate_locked(client).await;
    let _ = client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]).await;
    result
}

async fn migrate_locked(client: &mut Client) -> Result<(), String> {
    let e = |e: tokio_postgres::Error| e.to_string();
    if let Err(err) = client.batch_execute("CREATE EXTENSION IF NOT EXISTS vector").await {
        return Err(format!(
            "the pgvector extension is not available in this database ({err}); install pgvector \
             (scripts/setup-postgres does) and run `CREATE EXTENSION vector` as a superuser"
        ));
    }
    let version: String =
        client.query_one("SELECT extversion FROM pg_extension WHERE extname = 'vector'", &[]).await.map_err(e)?.get(0);
    if !pgvector_suffices(&version) {
        return Err(format!(
            "pgvector {version} is too old: mnemo needs 0.7.0 or later (halfvec, binary_quantize); \
             install a newer pgvector and run `ALTER EXTENSION vector UPDATE`"
        ));
    }
    client.batch_execute("CREATE TABLE IF NOT EXISTS mnemo_schema(version BIGINT NOT NULL)").await.map_err(e)?;
    let current: i64 =
        client.query_opt("SELECT version FROM mnemo_schema", &[]).await.map_err(e)?.map(|r| r.get(0)).unwrap_or(0);
    if current > SCHEMA_VERSION {
        return Err(format!(
            "the database has mnemo schema version {current}, newer than this mnemo understands ({SCHEMA_VERSION}); upgrade mnemo"
        ));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let tx = client.transaction().await.map_err(e)?;
        tx.batch_execute(sql).await.map_err(e)?;
        tx.execute("DELETE FROM mnemo_schema", &[]).await.map_err(e)?;
        tx.execute("INSERT INTO mnemo_schema(version) VALUES ($1)", &[&((i + 1) as i64)]).await.map_err(e)?;
        tx.commit().await.map_err(e)?;
        tracing::info!(version = i + 1, "applied postgres store migration");
    }
    Ok(())
}

/// pgvector 0.7.0 brought what the schema uses: `halfvec` (the user-document index) and
/// `binary_quantize` with Hamming HNSW (the vector index).
fn pgvector_suffices(version: &str) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (0, 7)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgvector_from_0_7_suffices() {
        for v in ["0.7.0", "0.8.0", "0.10.1", "1.0"] {
            assert!(pgvector_suffices(v), "{v}");
        }
        for v in ["0.5.1", "0.6.2", "", "x"] {
            assert!(!pgvector_suffices(v), "{v}");
        }
    }
}
