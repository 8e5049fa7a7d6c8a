//! Events: rows, vectors and terms (the BM25 statistics kept in the same transaction), CRUD, hits,
//! re-index; candidates for search are in `search`.

use crate::PgStore;
use crate::rows::{EVENT_COLS, event_from_row, from_rows, json};
use crate::sql::{
    SqlParam, Tx, backend, begin, begin_read, event_filter_sql, execute, no_nul, query_all, query_one, query_opt,
};
use crate::terms::TermStats;
use async_trait::async_trait;
use mnemo_core::StoreError;
use mnemo_core::model::*;
use mnemo_core::store::StoreResult;
use mnemo_core::store::prelude::*;
use std::collections::BTreeSet;

pub(crate) async fn event_by_id(tx: &Tx<'_>, cid: CollectionId, id: &str) -> StoreResult<Option<Event>> {
    query_opt(tx, &format!("SELECT {EVENT_COLS} FROM events WHERE collection_id=$1 AND id=$2"), &[&cid, &id])
        .await?
        .map(|r| event_from_row(&r))
        .transpose()
}

pub(crate) async fn lock_event(tx: &Tx<'_>, cid: CollectionId, id: &str) -> StoreResult<Option<Event>> {
    query_opt(tx, &format!("SELECT {EVENT_COLS} FROM events WHERE collection_id=$1 AND id=$2 FOR UPDATE"), &[&cid, &id])
        .await?
        .map(|r| event_from_row(&r))
        .transpose()
}

pub(crate) async fn insert_event_row(tx: &Tx<'_>, stats: &mut TermStats, e: &NewEvent) -> StoreResult<String> {
    let mut ids = insert_event_rows(tx, stats, std::slice::from_ref(e)).await?;
    Ok(ids.pop().expect("one id per event"))
}

/// Inserts events — rows, vectors and subjects — in three statements however many there are
/// (each column an array, `unnest`ed), sent in one round trip. Returns their ids in order.
pub(crate) async fn insert_event_rows(
    tx: &Tx<'_>,
    stats: &mut TermStats,
    events: &[NewEvent],
) -> StoreResult<Vec<String>> {
    let n = events.len();
    let ids: Vec<String> = (0..n).map(|_| new_id("evt")).collect();
    // The terms go in with the rows (an UPDATE after them would write every index of a row twice).
    // Lexemes hold no space (`fts_tokens` splits on it), so each row's travel as one string.
    let (mut terms, mut lexemes) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for e in events {
        let (t, l) = analyse(&e.memory_info);
        stats.change(e.collection_id, None, Some(&t));
        terms.push(t);
        lexemes.push(l.join(" "));
    }
    let col = |f: fn(&NewEvent) -> String| events.iter().map(f).collect::<Vec<String>>();
    let opt = |f: fn(&NewEvent) -> Option<&str>| events.iter().map(f).collect::<Vec<Option<&str>>>();
    let cids: Vec<CollectionId> = events.iter().map(|e| e.collection_id).collect();
    let (memory_types, classes) = (col(|e| e.memory_type.clone()), col(|e| e.class.clone()));
    let (user_ids, assistant_ids) = (col(|e| json(&e.user_id)), col(|e| json(&e.assistant_id)));
    let (memory_info, sources) = (col(|e| json(&e.memory_info)), col(|e| json(&e.source_message_ids)));
    let (groups, sessions) = (opt(|e| e.group_id.as_deref()), opt(|e| e.session_id.as_deref()));
    let (conversations, scopes) = (opt(|e| e.conversation_id.as_deref()), opt(|e| e.scope.as_deref()));
    let times: Vec<Millis> = events.iter().map(|e| e.time).collect();
    let nows: Vec<Millis> = events.iter().map(|e| e.now).collect();
    let expiries: Vec<Option<Millis>> = events.iter().map(|e| e.expires_at).collect();
    let valid_from: Vec<Option<Millis>> = events.iter().map(|e| e.valid_from).collect();
    let row_args: [SqlParam<'_>; 18] = [
        &ids,
        &cids,
        &memory_types,
        &user_ids,
        &assistant_ids,
        &groups,
        &sessions,
        &conversations,
        &scopes,
        &classes,
        &times,
        &memory_info,
        &sources,
        &nows,
        &expiries,
        &terms,
        &lexemes,
        &valid_from,
    ];
    let (mut v_ids, mut v_cids, mut v_dims, mut vecs) = (vec![], vec![], vec![], vec![]);
    let (mut t_ids, mut t_blobs) = (vec![], vec![]);
    let (mut s_cids, mut kinds, mut subjects, mut s_ids) = (vec![], vec![], vec![], vec![]);
    for (e, id) in events.iter().zip(&ids) {
        if let Some(v) = &e.embedding {
            v_ids.push(id);
            v_cids.push(e.collection_id);
            v_dims.push(v.len() as i32);
            vecs.push(pgvector::Vector::from(v.clone()));
            if let Some(blob) = e.turn_vectors.as_deref().and_then(mnemo_core::turns::encode) {
                t_ids.push(id);
                t_blobs.push(blob);
            }
        }
        let mine = e.user_id.iter().map(|u| ("u", u)).chain(e.assistant_id.iter().map(|a| ("a", a)));
        for (kind, subject) in mine {
            s_cids.push(e.collection_id);
            kinds.push(kind);
            subjects.push(subject);
            s_ids.push(id);
        }
    }
    // The statements are prepared first: a prepared statement's execution is sent when its
    // future is first polled, so the server gets them in this order — a statement that still had
    // to be prepared would be sent after the ones that did not, and both tables' foreign keys
    // refuse a row before its event.
    // The vectors of new events refresh no subject row (none exists yet: schema v6), said for the
    // vector statement alone.
    let flag = "SELECT set_config('mnemo.new_vectors', $1, true)";
    let (flag_st, row_st, vector_st, subjects_st, turns_st) = tokio::try_join!(
        tx.prepare_cached(flag),
        tx.prepare_cached(
            "INSERT INTO events(id, collection_id, memory_type, user_ids, assistant_ids, group_id, session_id, conversation_id, scope,
                                class, status, time, memory_info, source_message_ids, created_at, updated_at, expires_at, terms, terms_tsv, valid_from)
             SELECT id, cid, mt, u, a, g, s, cv, sc, cl, 'active', t, mi, src, now, now, ex, terms, array_to_tsvector(string_to_array(lex, ' ')), vf
             FROM unnest($1::text[], $2::int8[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
                         $10::text[], $11::int8[], $12::text[], $13::text[], $14::int8[], $15::int8[], $16::text[], $17::text[], $18::int8[])
                  AS r(id, cid, mt, u, a, g, s, cv, sc, cl, t, mi, src, now, ex, terms, lex, vf)"
        ),
        tx.prepare_cached(
            "INSERT INTO event_vectors(event_id, collection_id, dim, vec)
             SELECT * FROM unnest($1::text[], $2::int8[], $3::int4[], $4::vector[])"
        ),
        tx.prepare_cached(
            "INSERT INTO event_subjects(collection_id, kind, subject_id, event_id)
             SELECT * FROM unnest($1::int8[], $2::text[], $3::text[], $4::text[]) ON CONFLICT DO NOTHING"
        ),
        tx.prepare_cached("INSERT INTO event_turn_vectors(event_id, turns) SELECT * FROM unnest($1::text[], $2::bytea[])"),
    )
    .map_err(backend)?;
    let rows = tx.execute(&row_st, &row_args);
    let vectors = async {
        if vecs.is_empty() {
            return Ok(0);
        }
        let args: [SqlParam<'_>; 4] = [&v_ids, &v_cids, &v_dims, &vecs];
        let (on, inserted, off) = tokio::join!(
            tx.query_one(&flag_st, &[&"on"]),
            tx.execute(&vector_st, &args),
            tx.query_one(&flag_st, &[&"off"]),
        );
        on?;
        off?;
        inserted
    };
    let subjects = async {
        if kinds.is_empty() {
            return Ok(0);
        }
        tx.execute(&subjects_st, &[&s_cids, &kinds, &subjects, &s_ids]).await
    };
    // After the vectors (their foreign key).
    let turns = async {
        if t_ids.is_empty() {
            return Ok(0);
        }
        tx.execute(&turns_st, &[&t_ids, &t_blobs]).await
    };
    tokio::try_join!(rows, vectors, subjects, turns).map_err(backend)?;
    Ok(ids)
}

/// An event's analysed terms (space separated, for BM25) and its distinct lexemes (for the GIN index).
pub(crate) fn analyse(memory_info: &serde_json::Map<String, serde_json::Value>) -> (String, Vec<String>) {
    let terms = no_nul(&mnemo_core::text::search_tokens(&event_search_text(memory_info)).join(" ")).into_owned();
    let lexemes = mnemo_core::text::fts_tokens(&terms).collect::<BTreeSet<_>>().into_iter().collect();
    (terms, lexemes)
}

/// An event's text as it is indexed: its content, and the vectors that came with it.
pub(crate) struct Indexed<'a> {
    pub memory_info: &'a serde_json::Map<String, serde_json::Value>,
    pub vector: Option<&'a [f32]>,
    pub turns: Option<&'a [Vec<f32>]>,
}

/// (Re)writes an event's terms (`old_terms`: what it had) and, if given, its vector and its turns'
/// vectors (the turns' earlier vectors go either way: they were of the earlier text).
pub(crate) async fn index_event(
    tx: &Tx<'_>,
    stats: &mut TermStats,
    cid: CollectionId,
    id: &str,
    old_terms: Option<&str>,
    Indexed { memory_info, vector, turns }: Indexed<'_>,
) -> StoreResult<()> {
    let (terms, lexemes) = analyse(memory_info);
    stats.change(cid, old_terms, Some(&terms));
    execute(
        tx,
        "UPDATE events SET terms=$2, terms_tsv=array_to_tsvector($3::text[]) WHERE id=$1",
        &[&id, &terms, &lexemes],
    )
    .await?;
    match vector {
        Some(v) => {
            set_vector(tx, cid, id, v).await?;
            set_turns(tx, id, turns).await
        }
        // The turns' vectors were of the earlier text.
        None => set_turns(tx, id, None).await,
    }
}

/// Replaces an event's turn vectors (`mnemo_core::turns`) with these, or drops them. Its vector
/// row must exist when there are turns (their foreign key).
async fn set_turns(tx: &Tx<'_>, id: &str, turns: Option<&[Vec<f32>]>) -> StoreResult<()> {
    execute(tx, "DELETE FROM event_turn_vectors WHERE event_id=$1", &[&id]).await?;
    if let Some(blob) = turns.and_then(mnemo_core::turns::encode) {
        execute(tx, "INSERT INTO event_turn_vectors(event_id, turns) VALUES ($1, $2)", &[&id, &blob]).await?;
    }
    Ok(())
}

pub(crate) async fn set_vector(tx: &Tx<'_>, cid: CollectionId, id: &str, v: &[f32]) -> StoreResult<()> {
    let dim = v.len() as i32;
    execute(
        tx,
        "INSERT INTO event_vectors(event_id, collection_id, dim, vec) SELECT id, collection_id, $3, $4 FROM events WHERE collection_id=$1 AND id=$2
         ON CONFLICT(event_id) DO UPDATE SET dim=excluded.dim, vec=excluded.vec",
        &[&cid, &id, &dim, &pgvector::Vector::from(v.to_vec())],
    )
    .await?;
    Ok(())
}

pub(crate) async fn event_terms(tx: &Tx<'_>, id: &str) -> StoreResult<Option<String>> {
    Ok(query_opt(tx, "SELECT terms FROM events WHERE id=$1", &[&id]).await?.and_then(|r| r.get(0)))
}

/// Removes an event; its subjects and vector go with it (foreign keys cascade).
pub(crate) async fn delete_event_row(
    tx: &Tx<'_>,
    stats: &mut TermStats,
    cid: CollectionId,
    id: &str,
) -> StoreResult<bool> {
    let Some(row) =
        query_opt(tx, "DELETE FROM events WHERE collection_id=$1 AND id=$2 RETURNING terms", &[&cid, &id]).await?
    else {
        return Ok(false);
    };
    let old: Option<String> = row.get(0);
    if let Some(old) = old {
        stats.change(cid, Some(&old), None);
    }
    Ok(true)
}

pub(crate) async fn delete_events(tx: &Tx<'_>, cid: CollectionId, ids: &[String]) -> StoreResult<u64> {
    let mut stats = TermStats::default();
    let mut n = 0;
    for id in ids {
        n += delete_event_row(tx, &mut stats, cid, id).await? as u64;
    }
    stats.flush(tx).await?;
    Ok(n)
}

pub(crate) async fn ids_of(tx: &Tx<'_>, sql: &str, p: &[SqlParam<'_>]) -> StoreResult<Vec<String>> {
    Ok(query_all(tx, sql, p).await?.iter().map(|r| r.get(0)).collect())
}

/// Refreshes an existing event with a near-duplicate's content (the embedded store's rules).
pub(crate) async fn merge_event_row(
    tx: &Tx<'_>,
    stats: &mut TermStats,
    cid: CollectionId,
    id: &str,
    e: &mnemo_core::extract::ExtractedEvent,
    now: Millis,
) -> StoreResult<bool> {
    let Some(old) = lock_event(tx, cid, id).await? else { return Ok(false) };
    if old.status != "active" {
        return Ok(false);
    }
    let (info, sources) = mnemo_core::extract::merged_content(&old, e);
    let old_terms = event_terms(tx, id).await?;
    let text = Indexed { memory_info: &info, vector: e.embedding.as_deref(), turns: e.turn_vectors.as_deref() };
    index_event(tx, stats, cid, id, old_terms.as_deref(), text).await?;
    execute(
        tx,
        "UPDATE events SET memory_info=$3, time=GREATEST(time, $4), source_message_ids=$5, updated_at=$6,
             expires_at=CASE WHEN expires_at IS NULL THEN NULL ELSE GREATEST(expires_at, COALESCE($7, expires_at)) END,
             valid_from=LEAST(COALESCE(valid_from, time), COALESCE($8, $4))
         WHERE collection_id=$1 AND id=$2",
        &[&cid, &id, &json(&info), &e.time, &json(&sources), &now, &e.expires_at, &e.valid_from],
    )
    .await?;
    Ok(true)
}

#[async_trait]
impl EventStore for PgStore {
    async fn insert_event(&self, e: NewEvent) -> StoreResult<Event> {
        Ok(self.insert_events(vec![e]).await?.pop().expect("one event in, one out"))
    }

    async fn insert_events(&self, events: Vec<NewEvent>) -> StoreResult<Vec<Event>> {
        if events.is_empty() {
            return Ok(vec![]);
        }
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let mut stats = TermStats::default();
        let ids = insert_event_rows(&tx, &mut stats, &events).await?;
        stats.flush(&tx).await?;
        tx.commit().await.map_err(backend)?;
        Ok(events.into_iter().zip(ids).map(|(e, id)| e.stored_as(id)).collect())
    }

    async fn get_event(&self, cid: CollectionId, id: &str) -> StoreResult<Option<Event>> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        event_by_id(&tx, cid, id).await
    }

    async fn update_event(&self, cid: CollectionId, id: &str, patch: EventPatch, now: Millis) -> StoreResult<Event> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let mut e = lock_event(&tx, cid, id)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("event_id: no event \"{id}\"")))?;
        let mut stats = TermStats::default();
        if let Some(TextVectors { vector, turns }) = patch.apply(&mut e) {
            let old = event_terms(&tx, id).await?;
            let text = Indexed { memory_info: &e.memory_info, vector: vector.as_deref(), turns: turns.as_deref() };
            index_event(&tx, &mut stats, cid, id, old.as_deref(), text).await?;
        }
        execute(
            &tx,
            "UPDATE events SET memory_info=$3, time=$4, group_id=$5, scope=$6, class=$7, status=$8, updated_at=$9 WHERE collection_id=$1 AND id=$2",
            &[&cid, &id, &json(&e.memory_info), &e.time, &e.group_id, &e.scope, &e.class, &e.status, &now],
        )
        .await?;
        stats.flush(&tx).await?;
        let out = event_by_id(&tx, cid, id).await?.ok_or_else(|| StoreError::backend("updated event vanished"))?;
        tx.commit().await.map_err(backend)?;
        Ok(out)
    }

    async fn delete_event(&self, cid: CollectionId, id: &str) -> StoreResult<bool> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let n = delete_events(&tx, cid, &[id.to_string()]).await?;
        tx.commit().await.map_err(backend)?;
        Ok(n > 0)
    }

    async fn batch_delete_events(&self, cid: CollectionId, filter: EventFilter) -> StoreResult<u64> {
        let (where_sql, a) = event_filter_sql(cid, &filter);
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let ids = ids_of(&tx, &format!("SELECT id FROM events WHERE {where_sql} ORDER BY id"), &a.refs()).await?;
        let n = delete_events(&tx, cid, &ids).await?;
        tx.commit().await.map_err(backend)?;
        Ok(n)
    }

    async fn list_events(&self, cid: CollectionId, filter: EventFilter, limit: u32) -> StoreResult<Vec<Event>> {
        let (sql, a) = if filter.user_id.len() == 1 && crate::search::user_docs_serve(&filter, None) {
            // One user's newest: ordered in the user-document index, only the rows kept are read.
            let (scope_where, mut a) = crate::search::user_docs_where(cid, &filter);
            let lim = a.push(limit as i64);
            let sql = format!(
                "SELECT {EVENT_COLS} FROM events WHERE id IN (
                     SELECT s.event_id FROM event_subjects s WHERE {scope_where}
                     ORDER BY CASE WHEN s.d_state >= 4 THEN s.d_time ELSE (SELECT time FROM events e WHERE e.id = s.event_id) END DESC,
                              s.event_id DESC
                     LIMIT {lim})
                 ORDER BY time DESC, id DESC"
            );
            (sql, a)
        } else {
            let (where_sql, mut a) = event_filter_sql(cid, &filter);
            let lim = a.push(limit as i64);
            (format!("SELECT {EVENT_COLS} FROM events WHERE {where_sql} ORDER BY time DESC, id DESC LIMIT {lim}"), a)
        };
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        from_rows(query_all(&tx, &sql, &a.refs()).await?, event_from_row)
    }

    async fn event_after(
        &self,
        cid: CollectionId,
        filter: EventFilter,
        time: Millis,
        id: &str,
    ) -> StoreResult<Option<Event>> {
        let (where_sql, mut a) = event_filter_sql(cid, &filter);
        let (t, i) = (a.push(time), a.push(id.to_string()));
        let sql = format!(
            "SELECT {EVENT_COLS} FROM events WHERE {where_sql} AND (time, id) > ({t}, {i}) ORDER BY time, id LIMIT 1"
        );
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        Ok(from_rows(query_all(&tx, &sql, &a.refs()).await?, event_from_row)?.pop())
    }

    /// Counts one hit per id given (an id given twice counts twice), in three statements
    /// whatever the number of ids.
    async fn record_hits(&self, cid: CollectionId, ids: Vec<String>, now: Millis) -> StoreResult<()> {
        let day = now.div_euclid(86_400_000);
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        // Rows locked in id order first: one lock order for every writer (replicas included).
        execute(
            &tx,
            "SELECT 1 FROM events WHERE collection_id=$1 AND id = ANY($2) ORDER BY id FOR UPDATE",
            &[&cid, &ids],
        )
        .await?;
        execute(
            &tx,
            "UPDATE events e SET hit_count = e.hit_count + h.n, last_hit_at = $3
             FROM (SELECT id, count(*) AS n FROM unnest($2::text[]) AS t(id) GROUP BY id) h
             WHERE e.collection_id = $1 AND e.id = h.id",
            &[&cid, &ids, &now],
        )
        .await?;
        execute(
            &tx,
            "INSERT INTO hits_daily(collection_id, day, user_id, hits)
             SELECT $1, $3, COALESCE(e.user_ids::jsonb->>0, ''), count(*) FROM unnest($2::text[]) AS t(id)
             JOIN events e ON e.collection_id = $1 AND e.id = t.id GROUP BY 3 ORDER BY 3
             ON CONFLICT(collection_id, day, user_id) DO UPDATE SET hits = hits_daily.hits + excluded.hits",
            &[&cid, &ids, &day],
        )
        .await?;
        tx.commit().await.map_err(backend)
    }

    async fn events_missing_vectors(&self, cid: CollectionId, limit: u32) -> StoreResult<Vec<Event>> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        // Every vector belongs to its event (deleted with it): equal counts, from two indexes,
        // mean none is missing, without the anti-join over every event (a start-up check).
        let complete: bool = query_one(
            &tx,
            "SELECT (SELECT count(*) FROM events WHERE collection_id=$1)
                 <= (SELECT count(*) FROM event_vectors WHERE collection_id=$1)",
            &[&cid],
        )
        .await?
        .get(0);
        if complete {
            return Ok(Vec::new());
        }
        let rows = query_all(
            &tx,
            &format!(
                "SELECT {EVENT_COLS} FROM events e WHERE collection_id=$1
                 AND NOT EXISTS (SELECT 1 FROM event_vectors v WHERE v.event_id = e.id) LIMIT $2"
            ),
            &[&cid, &(limit as i64)],
        )
        .await?;
        from_rows(rows, event_from_row)
    }

    async fn events_without_turns(
        &self,
        before: Option<String>,
        limit: u32,
    ) -> StoreResult<Option<Vec<(CollectionId, Event)>>> {
        let conn = self.client().await?;
        if query_opt(&conn, "SELECT 1 FROM event_turns_backfill LIMIT 1", &[]).await?.is_none() {
            return Ok(None);
        }
        // Down the primary key from `before`, every collection in one pass (an `OR` would keep
        // `id < $1` out of the index condition).
        let below = if before.is_some() { "id < $1 AND" } else { "$1::text IS NULL AND" };
        let rows = query_all(
            &conn,
            &format!(
                "SELECT {EVENT_COLS}, collection_id FROM events e WHERE {below}
                 EXISTS (SELECT 1 FROM event_vectors v WHERE v.event_id = e.id)
                 AND NOT EXISTS (SELECT 1 FROM event_turn_vectors t WHERE t.event_id = e.id)
                 ORDER BY id DESC LIMIT $2"
            ),
            &[&before, &(limit as i64)],
        )
        .await?;
        rows.iter().map(|r| Ok((r.get("collection_id"), event_from_row(r)?))).collect::<StoreResult<Vec<_>>>().map(Some)
    }

    async fn add_event_turns(
        &self,
        cid: CollectionId,
        id: &str,
        seen: Millis,
        turns: Vec<Vec<f32>>,
    ) -> StoreResult<bool> {
        let Some(blob) = mnemo_core::turns::encode(&turns) else { return Ok(false) };
        let conn = self.client().await?;
        // One statement: the event's row and its vector are checked as the row is inserted (the
        // foreign key to the vector holds it against a concurrent delete). `FOR SHARE` waits for
        // a text update in progress, and then sees its new `updated_at`: turns of the old text
        // are not stored after that update dropped the old ones.
        let added = execute(
            &conn,
            "INSERT INTO event_turn_vectors(event_id, turns)
             SELECT e.id, $4 FROM events e JOIN event_vectors v ON v.event_id = e.id
             WHERE e.collection_id=$1 AND e.id=$2 AND e.updated_at=$3
             FOR SHARE OF e
             ON CONFLICT(event_id) DO NOTHING",
            &[&cid, &id, &seen, &blob],
        )
        .await?;
        Ok(added == 1)
    }

    async fn turns_backfilled(&self) -> StoreResult<()> {
        let conn = self.client().await?;
        execute(&conn, "DELETE FROM event_turns_backfill", &[]).await.map(drop)
    }

    async fn set_event_vector(
        &self,
        cid: CollectionId,
        id: &str,
        vector: Vec<f32>,
        turns: Option<Vec<Vec<f32>>>,
    ) -> StoreResult<()> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        set_vector(&tx, cid, id, &vector).await?;
        set_turns(&tx, id, turns.as_deref()).await?;
        tx.commit().await.map_err(backend)
    }
}
