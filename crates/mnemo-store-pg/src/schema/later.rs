//! The PostgreSQL migrations from v11 on (`schema::MIGRATIONS` lists them in order).

/// v11: a version on each user-document row, for the search's kept scopes (`scope_cache`).
/// Every write of a row's search copy — the event added, its terms, filter columns or vector
/// changed (v5's refresh rewrites the row) — takes the next value of one sequence, so a row's
/// (event, version) names what it holds: a replica that kept a scope's terms tokenised asks
/// for the versions alone (the index-only scan) and for the terms of the rows whose version
/// it does not hold. Per-row, not per user: a sequence's values are handed out in one order
/// and committed in another, so "the greatest version of a user" can stay the same while an
/// older one appears; the versions a snapshot shows, row by row, cannot. A row written before
/// has none (NULL): it has not changed since, which is as good a version. The covering index
/// is built again to hold it (one build over every user row, at start, under the migration lock).
pub(super) const V11_SUBJECT_VERSIONS: &str = r#"
    CREATE SEQUENCE subject_doc_versions;
    ALTER TABLE event_subjects ADD COLUMN d_version BIGINT;
    CREATE OR REPLACE FUNCTION mnemo_subject_doc() RETURNS trigger LANGUAGE plpgsql AS $$
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
        NEW.d_version := nextval('subject_doc_versions');
        -- What is left of an index entry's 2,704 bytes (with room for headers, alignment and
        -- the version).
        room := 2540 - octet_length(NEW.subject_id) - octet_length(NEW.event_id) - COALESCE(octet_length(e.memory_type), 0);
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
    DROP INDEX event_subjects_docs;
    CREATE INDEX event_subjects_docs ON event_subjects(collection_id, subject_id)
        INCLUDE (event_id, d_state, d_active, d_time, d_type, d_terms, d_vec, d_norm, d_version) WHERE kind = 'u';
    "#;

/// v12: each user's active events counted, with the latest change among them — what
/// `user/list` (the dashboard's first page) shows — instead of reading every active event's
/// row when asked. As for the BM25 statistics (v2), the triggers append a change per event
/// and subject (`user_activity_delta`: no row two writers wait on, no lock order to deadlock
/// on) and housekeeping folds them into `user_activity` (`stats::fold_activity`). A count
/// moves by one; the latest change moves up with a change, and when an active event stops
/// being active or the user's, `recheck` says the latest must be read again from the user's
/// events (by the reader until the fold has done it). The functions keep the schema they were
/// made in (`search_path FROM CURRENT`): a statement from any session finds their tables.
pub(super) const V12_USER_ACTIVITY: &str = r#"
    CREATE TABLE user_activity(
        collection_id BIGINT NOT NULL,
        subject_id TEXT NOT NULL,
        events BIGINT NOT NULL,
        last BIGINT,
        recheck BOOLEAN NOT NULL DEFAULT false,
        PRIMARY KEY(collection_id, subject_id)
    );
    CREATE TABLE user_activity_delta(
        collection_id BIGINT NOT NULL,
        subject_id TEXT NOT NULL,
        events BIGINT NOT NULL,
        last BIGINT,
        recheck BOOLEAN NOT NULL
    );
    CREATE INDEX user_activity_delta_collection ON user_activity_delta(collection_id);
    CREATE INDEX user_activity_recheck ON user_activity(collection_id) WHERE recheck;
    INSERT INTO user_activity(collection_id, subject_id, events, last)
    SELECT s.collection_id, s.subject_id, count(*), max(e.updated_at)
    FROM event_subjects s JOIN events e ON e.id = s.event_id
    WHERE s.kind = 'u' AND e.status = 'active' GROUP BY s.collection_id, s.subject_id;

    CREATE FUNCTION mnemo_activity_subject() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            IF NEW.kind = 'u' THEN
                INSERT INTO user_activity_delta
                SELECT NEW.collection_id, NEW.subject_id, 1, e.updated_at, false FROM events e
                WHERE e.id = NEW.event_id AND e.status = 'active';
            END IF;
        -- A subject row removed while its event stays (an event deleted takes its rows along
        -- after it is gone: `mnemo_activity_event` counted that).
        ELSIF OLD.kind = 'u' THEN
            INSERT INTO user_activity_delta
            SELECT OLD.collection_id, OLD.subject_id, -1, NULL, true FROM events e
            WHERE e.id = OLD.event_id AND e.status = 'active';
        END IF;
        RETURN NULL;
    END $$;
    CREATE TRIGGER activity_subject AFTER INSERT OR DELETE ON event_subjects
        FOR EACH ROW EXECUTE FUNCTION mnemo_activity_subject();

    CREATE FUNCTION mnemo_activity_event() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    BEGIN
        IF TG_OP = 'DELETE' THEN
            IF OLD.status = 'active' THEN
                INSERT INTO user_activity_delta
                SELECT s.collection_id, s.subject_id, -1, NULL, true FROM event_subjects s
                WHERE s.event_id = OLD.id AND s.kind = 'u';
            END IF;
            RETURN OLD;
        END IF;
        IF (OLD.status = 'active' OR NEW.status = 'active')
            AND (OLD.status IS DISTINCT FROM NEW.status OR OLD.updated_at IS DISTINCT FROM NEW.updated_at) THEN
            INSERT INTO user_activity_delta
            SELECT s.collection_id, s.subject_id,
                (NEW.status = 'active')::int - (OLD.status = 'active')::int,
                CASE WHEN NEW.status = 'active' THEN NEW.updated_at END,
                OLD.status = 'active' AND (NEW.status <> 'active' OR NEW.updated_at < OLD.updated_at)
            FROM event_subjects s WHERE s.event_id = NEW.id AND s.kind = 'u';
        END IF;
        RETURN NULL;
    END $$;
    CREATE TRIGGER activity_event_deleted BEFORE DELETE ON events
        FOR EACH ROW EXECUTE FUNCTION mnemo_activity_event();
    CREATE TRIGGER activity_event_changed AFTER UPDATE OF status, updated_at ON events
        FOR EACH ROW EXECUTE FUNCTION mnemo_activity_event();
    "#;
