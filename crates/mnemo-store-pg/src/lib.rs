//! mnemo-store-pg: the scale-out store. PostgreSQL holds everything — records, the durable job
//! queue, vectors (pgvector, HNSW) and the full-text terms — so any number of stateless mnemo
//! replicas can serve the API and run extraction against one database.
//!
//! It implements the same [`Store`] contract as the embedded store, with the same rules called
//! from the same pure functions of `mnemo-core`; what differs is how concurrency is made safe
//! across processes (see ARCHITECTURE.md, "Many replicas"):
//! - a conversation's writes lock its row (`FOR UPDATE`), so counts and triggers stay exact and
//!   a trigger closes exactly one session whichever replica it fires on;
//! - jobs are claimed with `FOR UPDATE SKIP LOCKED` under a lease; a claim whose lease expired
//!   and was taken again is fenced off by its attempt number ([`JobLease`]);
//! - one user's extraction commits take a transaction-scoped advisory lock, so profile changes of
//!   two sessions are applied one after the other, not over each other;
//! - BM25 statistics are summed per transaction and written in one sorted statement (no
//!   deadlocks between writers touching the same terms).

mod rows;
mod schema;
mod search;
mod sql;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use mnemo_core::extract::ExtractionOutput;
use mnemo_core::model::*;
use mnemo_core::store::{Store, StoreResult};
use mnemo_core::{StoreError, TriggerReason, profile};
use rows::*;
use sql::*;
use std::collections::{BTreeMap, BTreeSet};
use tokio_postgres::{IsolationLevel, NoTls};

pub use schema::SCHEMA_VERSION;

#[derive(Clone, Debug)]
pub struct PgOptions {
    /// `postgres://user:password@host:port/database` (key=value strings work too).
    pub url: String,
    /// Connections in this replica's pool.
    pub pool: usize,
    /// A schema to keep mnemo's tables in (created if missing); `None`: the connection's default.
    pub schema: Option<String>,
    /// Search scopes of up to this many events are searched exactly; larger ones through the
    /// HNSW and GIN indexes.
    pub exact_scope: usize,
    /// Maintain an HNSW index per vector dimension (false: every vector search is exact — fine
    /// when searches are scoped to users, and writes are cheaper; an existing index is kept).
    pub hnsw: bool,
}

impl PgOptions {
    pub fn new(url: impl Into<String>) -> Self {
        Self { url: url.into(), pool: 16, schema: None, exact_scope: search::EXACT_SCOPE, hnsw: true }
    }
}

pub struct PgStore {
    pool: Pool,
    exact_scope: usize,
    hnsw: bool,
    compactor: tokio::task::JoinHandle<()>,
}

impl Drop for PgStore {
    fn drop(&mut self) {
        self.compactor.abort();
    }
}

/// How often a replica folds the appended BM25 statistics (`compact_stats`).
const COMPACT_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

fn bad_schema_name(s: &str) -> bool {
    s.is_empty() || s.len() > 63 || !s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl PgStore {
    /// Connects, creates the schema if asked, migrates, and makes sure the vector indexes of the
    /// dimensions in use exist.
    pub async fn connect(o: PgOptions) -> Result<Self, StoreError> {
        let mut config: tokio_postgres::Config =
            o.url.parse().map_err(|e| StoreError::Backend(format!("store.url: not a PostgreSQL URL ({e})")))?;
        if let Some(schema) = &o.schema {
            if bad_schema_name(schema) {
                return Err(StoreError::Backend(format!(
                    "store.schema: \"{schema}\" must be 1 to 63 ASCII letters, digits or underscores"
                )));
            }
            let (client, conn) = config.connect(NoTls).await.map_err(|e| connect_error(&o.url, e))?;
            let task = tokio::spawn(conn);
            client.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}")).await.map_err(pg)?;
            drop(client);
            let _ = task.await;
            let given = config.get_options().map(|o| format!("{o} ")).unwrap_or_default();
            config.options(format!("{given}-c search_path={schema},public"));
        }
        let manager = Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
        let pool = Pool::builder(manager)
            .max_size(o.pool.max(2))
            .build()
            .map_err(|e| StoreError::Backend(format!("postgres pool: {e}")))?;
        let compactor = {
            let pool = pool.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(COMPACT_EVERY).await;
                    if let Err(e) = compact_stats(&pool).await {
                        tracing::warn!("compacting BM25 statistics failed: {e}");
                    }
                }
            })
        };
        let store = Self { pool, exact_scope: o.exact_scope.max(1), hnsw: o.hnsw, compactor };
        let mut c = store.pool.get().await.map_err(|e| connect_error(&o.url, e))?;
        schema::migrate(&mut c).await.map_err(StoreError::Backend)?;
        for r in c
            .query("SELECT DISTINCT embedding_dim FROM collections WHERE embedding_dim IS NOT NULL", &[])
            .await
            .map_err(pg)?
        {
            store.vector_index(&c, r.get(0)).await?;
        }
        Ok(store)
    }

    /// Folds the appended BM25 statistics now (a background task does it every 2 s); returns
    /// how many term rows were folded, 0 if another replica is compacting.
    pub async fn compact_stats(&self) -> StoreResult<u64> {
        compact_stats(&self.pool).await
    }

    async fn vector_index(&self, conn: &Object, dim: i64) -> StoreResult<()> {
        if self.hnsw { schema::ensure_vector_index(conn, dim).await.map_err(pg) } else { Ok(()) }
    }

    async fn client(&self) -> StoreResult<Object> {
        self.pool.get().await.map_err(|e| StoreError::Backend(format!("postgres pool: {e}")))
    }
}

/// Drops a schema and everything in it (benchmarks and tests start from an empty one).
pub async fn drop_schema(url: &str, schema: &str) -> Result<(), StoreError> {
    if bad_schema_name(schema) {
        return Err(StoreError::Backend(format!("store.schema: {schema:?} is not a plain name")));
    }
    let (client, conn) = tokio_postgres::connect(url, NoTls).await.map_err(|e| connect_error(url, e))?;
    let task = tokio::spawn(conn);
    client.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).await.map_err(pg)?;
    drop(client);
    let _ = task.await;
    Ok(())
}

fn connect_error(url: &str, e: impl std::fmt::Display) -> StoreError {
    // The URL may hold a password: show only where it points.
    let at = url.rsplit('@').next().unwrap_or(url);
    StoreError::Backend(format!("cannot connect to PostgreSQL at {at}: {e}"))
}

/// A read-only transaction on one snapshot (a read of several queries never sees half a commit).
async fn begin_read(c: &mut Object) -> StoreResult<Tx<'_>> {
    c.build_transaction().isolation_level(IsolationLevel::RepeatableRead).read_only(true).start().await.map_err(pg)
}

async fn begin(c: &mut Object) -> StoreResult<Tx<'_>> {
    c.transaction().await.map_err(pg)
}

// ---------------------------------------------------------------------------------------------
// BM25 statistics, summed over a transaction and written once, in key order.

#[derive(Default)]
struct TermStats {
    df: BTreeMap<(CollectionId, String), i64>,
    docs: BTreeMap<CollectionId, (i64, i64)>,
}

impl TermStats {
    fn change(&mut self, cid: CollectionId, old: Option<&str>, new: Option<&str>) {
        use mnemo_core::text::fts_tokens;
        let count = |t: Option<&str>| -> (i64, BTreeSet<String>) {
            match t {
                Some(t) => {
                    let toks: Vec<String> = fts_tokens(t).collect();
                    (toks.len() as i64, toks.into_iter().collect())
                }
                None => (0, BTreeSet::new()),
            }
        };
        let (old_len, old_set) = count(old);
        let (new_len, new_set) = count(new);
        for t in old_set.difference(&new_set) {
            *self.df.entry((cid, t.clone())).or_default() -= 1;
        }
        for t in new_set.difference(&old_set) {
            *self.df.entry((cid, t.clone())).or_default() += 1;
        }
        let d = self.docs.entry(cid).or_default();
        d.0 += i64::from(new.is_some()) - i64::from(old.is_some());
        d.1 += new_len - old_len;
    }

    async fn flush(self, tx: &Tx<'_>) -> StoreResult<()> {
        let (mut cids, mut terms, mut deltas) = (vec![], vec![], vec![]);
        for ((cid, term), d) in self.df.into_iter().filter(|(_, d)| *d != 0) {
            cids.push(cid);
            terms.push(term);
            deltas.push(d);
        }
        if !cids.is_empty() {
            exec(
                tx,
                "INSERT INTO term_stats_delta(collection_id, term, df) SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[])",
                &[&cids, &terms, &deltas],
            )
            .await?;
        }
        for (cid, (docs, tokens)) in self.docs.into_iter().filter(|(_, d)| *d != (0, 0)) {
            exec(
                tx,
                "INSERT INTO collection_stats_delta(collection_id, docs, tokens) VALUES ($1, $2, $3)",
                &[&cid, &docs, &tokens],
            )
            .await?;
        }
        Ok(())
    }
}

/// Key of the advisory lock one compactor at a time holds (across replicas).
const COMPACT_LOCK: i64 = 0x6d6e_656d_6f02;

/// Folds the appended statistics changes into `term_stats` / `collection_stats`, in one
/// transaction; a no-op when another replica is compacting.
async fn compact_stats(pool: &Pool) -> StoreResult<u64> {
    let mut conn = pool.get().await.map_err(|e| StoreError::Backend(format!("postgres pool: {e}")))?;
    let tx = begin(&mut conn).await?;
    let locked: bool = one(&tx, "SELECT pg_try_advisory_xact_lock($1)", &[&COMPACT_LOCK]).await?.get(0);
    if !locked {
        return Ok(0);
    }
    let n = exec(
        &tx,
        "WITH d AS (DELETE FROM term_stats_delta RETURNING collection_id, term, df)
         INSERT INTO term_stats(collection_id, term, df)
         SELECT collection_id, term, SUM(df)::bigint FROM d GROUP BY collection_id, term ORDER BY collection_id, term
         ON CONFLICT(collection_id, term) DO UPDATE SET df = term_stats.df + excluded.df",
        &[],
    )
    .await?;
    exec(
        &tx,
        "WITH d AS (DELETE FROM collection_stats_delta RETURNING collection_id, docs, tokens)
         INSERT INTO collection_stats(collection_id, docs, tokens)
         SELECT collection_id, SUM(docs)::bigint, SUM(tokens)::bigint FROM d GROUP BY collection_id ORDER BY collection_id
         ON CONFLICT(collection_id) DO UPDATE SET docs = collection_stats.docs + excluded.docs,
             tokens = collection_stats.tokens + excluded.tokens",
        &[],
    )
    .await?;
    tx.commit().await.map_err(pg)?;
    Ok(n)
}

// ---------------------------------------------------------------------------------------------
// Transaction bodies

async fn collection_by_name(tx: &Tx<'_>, project: &str, name: &str) -> StoreResult<Option<Collection>> {
    opt(
        tx,
        &format!("SELECT {COLLECTION_COLS} FROM collections WHERE project_name=$1 AND collection_name=$2"),
        &[&project, &name],
    )
    .await?
    .map(|r| collection(&r))
    .transpose()
}

async fn collection_by_id(tx: &Tx<'_>, id: CollectionId) -> StoreResult<Collection> {
    collection(&one(tx, &format!("SELECT {COLLECTION_COLS} FROM collections WHERE id=$1"), &[&id]).await?)
}

/// Inserts the collection unless one of that name exists (`None` then).
async fn insert_collection(tx: &Tx<'_>, c: &NewCollection) -> StoreResult<Option<Collection>> {
    let schema = json(&c.schema);
    let description = no_nul(&c.description);
    let row = opt(
        tx,
        &format!(
            "INSERT INTO collections(project_name, collection_name, description, schema_json, created_at, embedding_model, embedding_dim)
             VALUES ($1,$2,$3,$4,$5,$6,$7) ON CONFLICT (project_name, collection_name) DO NOTHING RETURNING {COLLECTION_COLS}"
        ),
        &[&c.project_name, &c.collection_name, &description, &schema, &c.created_at, &c.embedding_model, &(c.embedding_dim as i64)],
    )
    .await?;
    row.map(|r| collection(&r)).transpose()
}

struct ConversationRow {
    meta: ConversationMeta,
    open_messages: u64,
    open_tokens: u64,
}

/// The conversation's row, locked until the transaction ends.
async fn lock_conversation(tx: &Tx<'_>, cid: CollectionId, conv: &str) -> StoreResult<Option<ConversationRow>> {
    Ok(opt(
        tx,
        "SELECT meta_json, open_messages, open_tokens FROM conversations WHERE collection_id=$1 AND conversation_id=$2 FOR UPDATE",
        &[&cid, &conv],
    )
    .await?
    .map(|r| ConversationRow {
        meta: parse(r.get::<_, &str>(0)),
        open_messages: r.get::<_, i64>(1) as u64,
        open_tokens: r.get::<_, i64>(2) as u64,
    }))
}

/// Creates or locks the conversation row and merges the request's metadata into it.
async fn upsert_conversation(tx: &Tx<'_>, req: &AppendRequest) -> StoreResult<ConversationRow> {
    let wait = req.trigger.wait_timeout_ms();
    exec(
        tx,
        "INSERT INTO conversations(collection_id, conversation_id, meta_json, wait_timeout_ms, last_write_at, created_at)
         VALUES ($1,$2,'{}',$3,$4,$4) ON CONFLICT DO NOTHING",
        &[&req.collection_id, &req.conversation_id, &wait, &req.now],
    )
    .await?;
    let mut row = lock_conversation(tx, req.collection_id, &req.conversation_id)
        .await?
        .ok_or_else(|| StoreError::Backend("conversation row vanished".into()))?;
    row.meta.merge(&req.meta);
    exec(
        tx,
        "UPDATE conversations SET meta_json=$3, wait_timeout_ms=$4, last_write_at=$5 WHERE collection_id=$1 AND conversation_id=$2",
        &[&req.collection_id, &req.conversation_id, &json(&row.meta), &wait, &req.now],
    )
    .await?;
    Ok(row)
}

/// Inserts the messages; returns (stored, duplicates, stored tokens, largest stored message).
async fn insert_messages(
    tx: &Tx<'_>,
    req: &AppendRequest,
    session_id: Option<&str>,
) -> StoreResult<(u64, u64, u64, u64)> {
    let (mut stored, mut dup, mut tokens, mut largest) = (0, 0, 0, 0);
    for m in &req.messages {
        let n = exec(
            tx,
            "INSERT INTO messages(collection_id, conversation_id, session_id, role, name, content, content_raw, time, tokens, idempotency_key, created_at)
             VALUES ($1,$2,$3,$4,$5,$6,$11,$7,$8,$9,$10) ON CONFLICT DO NOTHING",
            &[
                &req.collection_id,
                &req.conversation_id,
                &session_id,
                &m.role.as_str(),
                &m.name.as_deref().map(no_nul),
                &no_nul(&m.content),
                &m.time,
                &(m.tokens as i64),
                &m.idempotency_key,
                &req.now,
                &m.content.contains('\0').then_some(m.content.as_bytes()),
            ],
        )
        .await?;
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

struct SessionCounts {
    reason: TriggerReason,
    messages: u64,
    tokens: u64,
}

async fn insert_session_and_job(
    tx: &Tx<'_>,
    cid: CollectionId,
    conv: &str,
    meta: &ConversationMeta,
    n: SessionCounts,
    now: Millis,
    max_attempts: u32,
) -> StoreResult<SessionClosed> {
    let session_id = new_id("ses");
    let job_id = new_id("job");
    exec(
        tx,
        "INSERT INTO sessions(session_id, collection_id, conversation_id, reason, state, message_count, token_count, meta_json, created_at)
         VALUES ($1,$2,$3,$4,'queued',$5,$6,$7,$8)",
        &[&session_id, &cid, &conv, &n.reason.as_str(), &(n.messages as i64), &(n.tokens as i64), &json(meta), &now],
    )
    .await?;
    exec(
        tx,
        "INSERT INTO jobs(job_id, collection_id, kind, state, conversation_id, session_id, max_attempts, run_after, created_at, updated_at)
         VALUES ($1,$2,'extract','queued',$3,$4,$5,$6,$6,$6)",
        &[&job_id, &cid, &conv, &session_id, &(max_attempts as i64), &now],
    )
    .await?;
    Ok(SessionClosed {
        session_id,
        job_id,
        conversation_id: conv.to_string(),
        reason: n.reason,
        message_count: n.messages,
    })
}

/// Closes the conversation's open messages into a session with a queued job.
async fn close_open_messages(
    tx: &Tx<'_>,
    cid: CollectionId,
    conv: &str,
    reason: TriggerReason,
    now: Millis,
    max_attempts: u32,
) -> StoreResult<Option<SessionClosed>> {
    let Some(row) = lock_conversation(tx, cid, conv).await? else { return Ok(None) };
    if row.open_messages == 0 {
        return Ok(None);
    }
    let counts = SessionCounts { reason, messages: row.open_messages, tokens: row.open_tokens };
    let closed = insert_session_and_job(tx, cid, conv, &row.meta, counts, now, max_attempts).await?;
    exec(
        tx,
        "UPDATE messages SET session_id=$1 WHERE collection_id=$2 AND conversation_id=$3 AND session_id IS NULL",
        &[&closed.session_id, &cid, &conv],
    )
    .await?;
    exec(
        tx,
        "UPDATE conversations SET open_messages=0, open_tokens=0, idle_deadline=NULL WHERE collection_id=$1 AND conversation_id=$2",
        &[&cid, &conv],
    )
    .await?;
    Ok(Some(closed))
}

async fn session_messages(tx: &Tx<'_>, session_id: &str) -> StoreResult<Vec<StoredMessage>> {
    all(
        query(
            tx,
            &format!("SELECT {MESSAGE_COLS} FROM messages m WHERE m.session_id=$1 ORDER BY m.id"),
            &[&session_id],
        )
        .await?,
        message,
    )
}

async fn session_summary(
    tx: &Tx<'_>,
    session_id: &str,
) -> StoreResult<Option<(CollectionId, SessionSummary, ConversationMeta)>> {
    opt(tx, &format!("SELECT {SESSION_COLS} FROM sessions WHERE session_id=$1"), &[&session_id])
        .await?
        .map(|r| session(&r))
        .transpose()
}

async fn job_by_id(tx: &Tx<'_>, job_id: &str, lock: bool) -> StoreResult<Option<(CollectionId, Job)>> {
    let lock = if lock { " FOR UPDATE" } else { "" };
    opt(tx, &format!("SELECT {JOB_COLS} FROM jobs WHERE job_id=$1{lock}"), &[&job_id])
        .await?
        .map(|r| job(&r))
        .transpose()
}

async fn with_history(tx: &Tx<'_>, mut profiles: Vec<Profile>) -> StoreResult<Vec<Profile>> {
    for p in profiles.iter_mut() {
        let rows = query(
            tx,
            "SELECT attribute, value, valid_from, valid_to, session_id FROM profile_history WHERE profile_id=$1 ORDER BY valid_to, id",
            &[&p.id],
        )
        .await?;
        p.history = rows
            .iter()
            .map(|r| AttributeVersion {
                attribute: r.get(0),
                value: serde_json::from_str(r.get::<_, &str>(1)).unwrap_or(serde_json::Value::Null),
                valid_from: r.get(2),
                valid_to: r.get(3),
                session_id: r.get(4),
            })
            .collect();
    }
    Ok(profiles)
}

async fn profiles_where(tx: &Tx<'_>, where_sql: &str, p: &[P<'_>]) -> StoreResult<Vec<Profile>> {
    let rows = query(tx, &format!("SELECT {PROFILE_COLS} FROM profiles WHERE {where_sql}"), p).await?;
    with_history(tx, all(rows, profile)?).await
}

async fn profile_for(
    tx: &Tx<'_>,
    cid: CollectionId,
    ptype: &str,
    user: &str,
    assistant: &str,
) -> StoreResult<Option<Profile>> {
    Ok(profiles_where(
        tx,
        "collection_id=$1 AND profile_type=$2 AND user_id=$3 AND assistant_id=$4",
        &[&cid, &ptype, &user, &assistant],
    )
    .await?
    .pop())
}

async fn profile_by_id(tx: &Tx<'_>, cid: CollectionId, id: &str) -> StoreResult<Option<Profile>> {
    Ok(profiles_where(tx, "collection_id=$1 AND id=$2", &[&cid, &id]).await?.pop())
}

type Since = serde_json::Map<String, serde_json::Value>;

/// Records what a change did to a profile's attributes (since-times; replaced values for
/// `keep_history` types). The same rules as the embedded store's `record_versions`.
#[allow(clippy::too_many_arguments)]
async fn record_versions(
    tx: &Tx<'_>,
    profile_id: &str,
    keep_history: bool,
    before: &serde_json::Map<String, serde_json::Value>,
    after: &serde_json::Map<String, serde_json::Value>,
    superseded: &[(String, serde_json::Value)],
    session_id: Option<&str>,
    now: Millis,
) -> StoreResult<String> {
    let raw = opt(tx, "SELECT attribute_since FROM profiles WHERE id=$1", &[&profile_id]).await?;
    let mut since: Since = raw.and_then(|r| serde_json::from_str(r.get::<_, &str>(0)).ok()).unwrap_or_default();
    if keep_history {
        for (attr, old) in superseded {
            let from = since.get(attr).and_then(|v| v.as_i64());
            exec(
                tx,
                "INSERT INTO profile_history(profile_id, attribute, value, valid_from, valid_to, session_id) VALUES ($1,$2,$3,$4,$5,$6)",
                &[&profile_id, attr, &json(old), &from, &now, &session_id],
            )
            .await?;
        }
    }
    profile::update_since(&mut since, before, after, now);
    Ok(json(&since))
}

async fn keeps_history(tx: &Tx<'_>, cid: CollectionId, profile_type: &str) -> StoreResult<bool> {
    Ok(collection_by_id(tx, cid)
        .await?
        .schema
        .profile_type(profile_type)
        .is_some_and(|t| t.update_mode == ProfileUpdateMode::KeepHistory))
}

async fn event_by_id(tx: &Tx<'_>, cid: CollectionId, id: &str) -> StoreResult<Option<Event>> {
    opt(tx, &format!("SELECT {EVENT_COLS} FROM events WHERE collection_id=$1 AND id=$2"), &[&cid, &id])
        .await?
        .map(|r| event(&r))
        .transpose()
}

async fn lock_event(tx: &Tx<'_>, cid: CollectionId, id: &str) -> StoreResult<Option<Event>> {
    opt(tx, &format!("SELECT {EVENT_COLS} FROM events WHERE collection_id=$1 AND id=$2 FOR UPDATE"), &[&cid, &id])
        .await?
        .map(|r| event(&r))
        .transpose()
}

async fn insert_event_row(tx: &Tx<'_>, stats: &mut TermStats, e: &NewEvent) -> StoreResult<String> {
    let id = new_id("evt");
    // The terms go in with the row (an UPDATE after it would write every index of the row twice).
    let (terms, lexemes) = analyse(&e.memory_info);
    stats.change(e.collection_id, None, Some(&terms));
    exec(
        tx,
        "INSERT INTO events(id, collection_id, memory_type, user_ids, assistant_ids, group_id, session_id, conversation_id, scope,
                            class, status, time, memory_info, source_message_ids, created_at, updated_at, expires_at, terms, terms_tsv)
         VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,'active',$11,$12,$13,$14,$14,$15,$16,array_to_tsvector($17::text[]))",
        &[
            &id,
            &e.collection_id,
            &e.memory_type,
            &json(&e.user_id),
            &json(&e.assistant_id),
            &e.group_id,
            &e.session_id,
            &e.conversation_id,
            &e.scope,
            &e.class,
            &e.time,
            &json(&e.memory_info),
            &json(&e.source_message_ids),
            &e.now,
            &e.expires_at,
            &terms,
            &lexemes,
        ],
    )
    .await?;
    if let Some(v) = &e.embedding {
        set_vector(tx, e.collection_id, &id, v).await?;
    }
    let subjects: Vec<(&str, &String)> =
        e.user_id.iter().map(|u| ("u", u)).chain(e.assistant_id.iter().map(|a| ("a", a))).collect();
    if !subjects.is_empty() {
        let kinds: Vec<&str> = subjects.iter().map(|(k, _)| *k).collect();
        let ids: Vec<&String> = subjects.iter().map(|(_, s)| *s).collect();
        exec(
            tx,
            "INSERT INTO event_subjects(collection_id, kind, subject_id, event_id)
             SELECT $1, k, s, $4 FROM unnest($2::text[], $3::text[]) AS t(k, s) ON CONFLICT DO NOTHING",
            &[&e.collection_id, &kinds, &ids, &id],
        )
        .await?;
    }
    Ok(id)
}

/// An event's analysed terms (space separated, for BM25) and its distinct lexemes (for the GIN index).
fn analyse(memory_info: &serde_json::Map<String, serde_json::Value>) -> (String, Vec<String>) {
    let terms = no_nul(&mnemo_core::text::search_tokens(&event_search_text(memory_info)).join(" ")).into_owned();
    let lexemes = mnemo_core::text::fts_tokens(&terms).collect::<BTreeSet<_>>().into_iter().collect();
    (terms, lexemes)
}

/// (Re)writes an event's terms (`old_terms`: what it had) and, if given, its vector.
async fn index_event(
    tx: &Tx<'_>,
    stats: &mut TermStats,
    cid: CollectionId,
    id: &str,
    old_terms: Option<&str>,
    memory_info: &serde_json::Map<String, serde_json::Value>,
    vector: Option<&[f32]>,
) -> StoreResult<()> {
    let (terms, lexemes) = analyse(memory_info);
    stats.change(cid, old_terms, Some(&terms));
    exec(
        tx,
        "UPDATE events SET terms=$2, terms_tsv=array_to_tsvector($3::text[]) WHERE id=$1",
        &[&id, &terms, &lexemes],
    )
    .await?;
    if let Some(v) = vector {
        set_vector(tx, cid, id, v).await?;
    }
    Ok(())
}

async fn set_vector(tx: &Tx<'_>, cid: CollectionId, id: &str, v: &[f32]) -> StoreResult<()> {
    let dim = v.len() as i32;
    exec(
        tx,
        "INSERT INTO event_vectors(event_id, collection_id, dim, vec) SELECT id, collection_id, $3, $4 FROM events WHERE collection_id=$1 AND id=$2
         ON CONFLICT(event_id) DO UPDATE SET dim=excluded.dim, vec=excluded.vec",
        &[&cid, &id, &dim, &pgvector::Vector::from(v.to_vec())],
    )
    .await?;
    Ok(())
}

async fn event_terms(tx: &Tx<'_>, id: &str) -> StoreResult<Option<String>> {
    Ok(opt(tx, "SELECT terms FROM events WHERE id=$1", &[&id]).await?.and_then(|r| r.get(0)))
}

/// Removes an event; its subjects and vector go with it (foreign keys cascade).
async fn delete_event_row(tx: &Tx<'_>, stats: &mut TermStats, cid: CollectionId, id: &str) -> StoreResult<bool> {
    let Some(row) =
        opt(tx, "DELETE FROM events WHERE collection_id=$1 AND id=$2 RETURNING terms", &[&cid, &id]).await?
    else {
        return Ok(false);
    };
    let old: Option<String> = row.get(0);
    if let Some(old) = old {
        stats.change(cid, Some(&old), None);
    }
    Ok(true)
}

async fn delete_events(tx: &Tx<'_>, cid: CollectionId, ids: &[String]) -> StoreResult<u64> {
    let mut stats = TermStats::default();
    let mut n = 0;
    for id in ids {
        n += delete_event_row(tx, &mut stats, cid, id).await? as u64;
    }
    stats.flush(tx).await?;
    Ok(n)
}

/// Serialises one user's extraction commits across replicas (released at commit).
async fn lock_user(tx: &Tx<'_>, cid: CollectionId, user: &str) -> StoreResult<()> {
    exec(tx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 7))", &[&format!("{cid}/{user}")]).await?;
    Ok(())
}

async fn ids_of(tx: &Tx<'_>, sql: &str, p: &[P<'_>]) -> StoreResult<Vec<String>> {
    Ok(query(tx, sql, p).await?.iter().map(|r| r.get(0)).collect())
}

// ---------------------------------------------------------------------------------------------

#[async_trait]
impl Store for PgStore {
    fn engine(&self) -> &'static str {
        "postgres"
    }

    async fn create_collection(&self, c: NewCollection) -> StoreResult<Collection> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let Some(created) = insert_collection(&tx, &c).await? else {
            return Err(StoreError::Conflict(format!(
                "collection_name: collection \"{}\" already exists in project \"{}\"",
                c.collection_name, c.project_name
            )));
        };
        tx.commit().await.map_err(pg)?;
        self.vector_index(&conn, c.embedding_dim as i64).await?;
        Ok(created)
    }

    async fn get_collection(&self, project: &str, name: &str) -> StoreResult<Option<Collection>> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        collection_by_name(&tx, project, name).await
    }

    async fn ensure_collection(&self, c: NewCollection) -> StoreResult<Collection> {
        if let Some(found) = self.get_collection(&c.project_name, &c.collection_name).await? {
            return Ok(found);
        }
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let out = match insert_collection(&tx, &c).await? {
            Some(created) => created,
            None => collection_by_name(&tx, &c.project_name, &c.collection_name)
                .await?
                .ok_or_else(|| StoreError::Backend("collection vanished".into()))?,
        };
        tx.commit().await.map_err(pg)?;
        self.vector_index(&conn, c.embedding_dim as i64).await?;
        Ok(out)
    }

    async fn all_collections(&self) -> StoreResult<Vec<Collection>> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        all(query(&tx, &format!("SELECT {COLLECTION_COLS} FROM collections ORDER BY id"), &[]).await?, collection)
    }

    async fn set_collection_embedding(&self, id: CollectionId, model: &str, dim: u32) -> StoreResult<()> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        exec(
            &tx,
            "UPDATE collections SET embedding_model=$2, embedding_dim=$3 WHERE id=$1",
            &[&id, &model, &(dim as i64)],
        )
        .await?;
        tx.commit().await.map_err(pg)?;
        self.vector_index(&conn, dim as i64).await
    }

    async fn list_collections(&self, project: &str) -> StoreResult<Vec<Collection>> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        let rows = query(
            &tx,
            &format!("SELECT {COLLECTION_COLS} FROM collections WHERE project_name=$1 ORDER BY collection_name"),
            &[&project],
        )
        .await?;
        all(rows, collection)
    }

    async fn delete_collection(&self, id: CollectionId) -> StoreResult<bool> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        for t in [
            "term_stats",
            "term_stats_delta",
            "collection_stats",
            "collection_stats_delta",
            "hits_daily",
            "maintenance_runs",
        ] {
            exec(&tx, &format!("DELETE FROM {t} WHERE collection_id=$1"), &[&id]).await?;
        }
        // Everything else goes with the collection (ON DELETE CASCADE).
        let n = exec(&tx, "DELETE FROM collections WHERE id=$1", &[&id]).await?;
        tx.commit().await.map_err(pg)?;
        Ok(n > 0)
    }

    async fn append_messages(&self, req: AppendRequest) -> StoreResult<AppendOutcome> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let row = upsert_conversation(&tx, &req).await?;
        let (stored, dup, tokens, largest) = insert_messages(&tx, &req, None).await?;
        let open_messages = row.open_messages + stored;
        let open_tokens = row.open_tokens + tokens;
        let deadline = (open_messages > 0).then(|| req.now + req.trigger.wait_timeout_ms());
        exec(
            &tx,
            "UPDATE conversations SET open_messages=$3, open_tokens=$4, idle_deadline=$5 WHERE collection_id=$1 AND conversation_id=$2",
            &[&req.collection_id, &req.conversation_id, &(open_messages as i64), &(open_tokens as i64), &deadline],
        )
        .await?;
        let reason = if stored > 0 { req.trigger.evaluate(open_tokens, open_messages, largest) } else { None };
        let closed = match reason {
            Some(r) => {
                close_open_messages(&tx, req.collection_id, &req.conversation_id, r, req.now, req.max_job_attempts)
                    .await?
            }
            None => None,
        };
        tx.commit().await.map_err(pg)?;
        let (pending_messages, pending_tokens) = if closed.is_some() { (0, 0) } else { (open_messages, open_tokens) };
        Ok(AppendOutcome { accepted: stored, duplicates: dup, pending_messages, pending_tokens, closed })
    }

    async fn add_session(&self, req: AppendRequest) -> StoreResult<SessionClosed> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let row = upsert_conversation(&tx, &req).await?;
        let placeholder = format!("pending-{}", new_id("ses"));
        let (stored, _dup, tokens, _) = insert_messages(&tx, &req, Some(&placeholder)).await?;
        let counts = SessionCounts { reason: TriggerReason::SessionAdd, messages: stored, tokens };
        let closed = insert_session_and_job(
            &tx,
            req.collection_id,
            &req.conversation_id,
            &row.meta,
            counts,
            req.now,
            req.max_job_attempts,
        )
        .await?;
        exec(&tx, "UPDATE messages SET session_id=$1 WHERE session_id=$2", &[&closed.session_id, &placeholder]).await?;
        tx.commit().await.map_err(pg)?;
        Ok(closed)
    }

    async fn flush_conversation(
        &self,
        cid: CollectionId,
        conversation_id: &str,
        now: Millis,
        max_job_attempts: u32,
    ) -> StoreResult<Option<SessionClosed>> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let out = close_open_messages(&tx, cid, conversation_id, TriggerReason::Flush, now, max_job_attempts).await?;
        tx.commit().await.map_err(pg)?;
        Ok(out)
    }

    async fn close_idle_conversations(
        &self,
        now: Millis,
        limit: u32,
        max_job_attempts: u32,
    ) -> StoreResult<Vec<SessionClosed>> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        // Every replica runs this scheduler; a due conversation is taken by exactly one of them
        // (rows another replica holds are skipped, and re-checked under the lock).
        let due = query(
            &tx,
            "SELECT collection_id, conversation_id FROM conversations WHERE idle_deadline IS NOT NULL AND idle_deadline <= $1
             ORDER BY idle_deadline LIMIT $2 FOR UPDATE SKIP LOCKED",
            &[&now, &(limit as i64)],
        )
        .await?;
        let mut out = Vec::new();
        for r in due {
            let (cid, conv): (CollectionId, String) = (r.get(0), r.get(1));
            match close_open_messages(&tx, cid, &conv, TriggerReason::WaitTimeout, now, max_job_attempts).await? {
                Some(c) => out.push(c),
                None => {
                    exec(
                        &tx,
                        "UPDATE conversations SET idle_deadline=NULL WHERE collection_id=$1 AND conversation_id=$2",
                        &[&cid, &conv],
                    )
                    .await?;
                }
            }
        }
        tx.commit().await.map_err(pg)?;
        Ok(out)
    }

    async fn next_idle_deadline(&self) -> StoreResult<Option<Millis>> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        Ok(one(&tx, "SELECT MIN(idle_deadline) FROM conversations WHERE idle_deadline IS NOT NULL", &[]).await?.get(0))
    }

    async fn conversation_info(
        &self,
        cid: CollectionId,
        conversation_id: &str,
    ) -> StoreResult<Option<ConversationInfo>> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        let Some(row) = opt(
            &tx,
            "SELECT meta_json, open_messages, open_tokens, idle_deadline FROM conversations WHERE collection_id=$1 AND conversation_id=$2",
            &[&cid, &conversation_id],
        )
        .await?
        else {
            return Ok(None);
        };
        let short_term = all(
            query(
                &tx,
                &format!(
                    "SELECT {MESSAGE_COLS} FROM messages m WHERE m.collection_id=$1 AND m.conversation_id=$2 AND (m.session_id IS NULL OR EXISTS
                     (SELECT 1 FROM sessions s WHERE s.session_id=m.session_id AND s.state!='extracted')) ORDER BY m.id"
                ),
                &[&cid, &conversation_id],
            )
            .await?,
            message,
        )?;
        let sessions = all(
            query(
                &tx,
                &format!("SELECT {SESSION_COLS} FROM sessions WHERE collection_id=$1 AND conversation_id=$2 ORDER BY created_at, session_id"),
                &[&cid, &conversation_id],
            )
            .await?,
            session,
        )?;
        Ok(Some(ConversationInfo {
            conversation_id: conversation_id.to_string(),
            meta: parse(row.get::<_, &str>(0)),
            short_term,
            open_messages: row.get::<_, i64>(1) as u64,
            open_tokens: row.get::<_, i64>(2) as u64,
            idle_deadline: row.get(3),
            sessions: sessions.into_iter().map(|(_, s, _)| s).collect(),
        }))
    }

    async fn session_info(&self, cid: CollectionId, session_id: &str) -> StoreResult<Option<SessionDetail>> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        let Some((scid, session, _)) = session_summary(&tx, session_id).await? else { return Ok(None) };
        if scid != cid {
            return Ok(None);
        }
        let messages = session_messages(&tx, session_id).await?;
        let events = all(
            query(
                &tx,
                &format!("SELECT {EVENT_COLS} FROM events WHERE collection_id=$1 AND session_id=$2 ORDER BY time, id"),
                &[&cid, &session_id],
            )
            .await?,
            event,
        )?;
        let job = opt(
            &tx,
            &format!("SELECT {JOB_COLS} FROM jobs WHERE session_id=$1 ORDER BY created_at DESC LIMIT 1"),
            &[&session_id],
        )
        .await?
        .map(|r| job(&r))
        .transpose()?
        .map(|(_, j)| j);
        Ok(Some(SessionDetail { session, messages, events, job }))
    }

    async fn claim_job(&self, now: Millis, lease_ms: i64) -> StoreResult<Option<ClaimedJob>> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        // One due job, skipping those another replica is claiming right now; a running job whose
        // lease ran out (its replica died or stalled) is due again.
        let Some(row) = opt(
            &tx,
            "UPDATE jobs SET state='running', attempts=attempts+1, lease_until=$2, updated_at=$1 WHERE job_id = (
                 SELECT job_id FROM jobs WHERE (state='queued' AND run_after<=$1) OR (state='running' AND lease_until<=$1)
                 ORDER BY run_after, created_at LIMIT 1 FOR UPDATE SKIP LOCKED)
             RETURNING job_id",
            &[&now, &(now + lease_ms)],
        )
        .await?
        else {
            return Ok(None);
        };
        let job_id: String = row.get(0);
        let (cid, job) =
            job_by_id(&tx, &job_id, false).await?.ok_or_else(|| StoreError::Backend("claimed job vanished".into()))?;
        let collection = collection_by_id(&tx, cid).await?;
        let sid = job.session_id.clone().unwrap_or_default();
        let (_, session, meta) = session_summary(&tx, &sid)
            .await?
            .ok_or_else(|| StoreError::Backend(format!("job {job_id} has no session {sid}")))?;
        let messages = session_messages(&tx, &sid).await?;
        let profiles = match &meta.user_id {
            Some(u) => {
                profiles_where(
                    &tx,
                    "collection_id=$1 AND user_id=$2 AND assistant_id='' ORDER BY profile_type",
                    &[&cid, u],
                )
                .await?
            }
            None => vec![],
        };
        tx.commit().await.map_err(pg)?;
        Ok(Some(ClaimedJob { job, collection, session, meta, messages, profiles }))
    }

    async fn complete_job(&self, lease: &JobLease, output: ExtractionOutput, now: Millis) -> StoreResult<Vec<String>> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let job_id = &lease.job_id;
        let (cid, job) = job_by_id(&tx, job_id, true)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("job_id: no job \"{job_id}\"")))?;
        job.check_lease(lease)?;
        let sid = job.session_id.clone().unwrap_or_default();
        let (_, session, meta) =
            session_summary(&tx, &sid).await?.ok_or_else(|| StoreError::Backend("job without session".into()))?;
        if let Some(user) = &meta.user_id {
            lock_user(&tx, cid, user).await?;
        }
        let mut stats = TermStats::default();
        let mut ids = Vec::with_capacity(output.events.len());
        for e in &output.events {
            if let Some(target) = &e.merge_into
                && merge_event_row(&tx, &mut stats, cid, target, e, now).await?
            {
                ids.push(target.clone());
                continue;
            }
            let new = e.to_new_event(cid, &meta, &session, now);
            let id = insert_event_row(&tx, &mut stats, &new).await?;
            if let Some(old) = &e.supersedes {
                exec(
                    &tx,
                    "UPDATE events SET status='superseded', superseded_by=$3, updated_at=$4 WHERE collection_id=$1 AND id=$2 AND status='active'",
                    &[&cid, old, &id, &now],
                )
                .await?;
            }
            ids.push(id);
        }
        if let Some(user) = &meta.user_id {
            let typed = std::iter::once((PROFILE_V1.to_string(), output.profile_changes.clone()))
                .chain(output.typed_profile_changes.iter().cloned());
            for (ptype, changes) in typed.filter(|(_, c)| !c.is_empty()) {
                apply_profile_changes(&tx, cid, &ptype, user, &session.session_id, &changes, now).await?;
            }
        }
        stats.flush(&tx).await?;
        exec(&tx, "UPDATE sessions SET state='extracted', extracted_at=$2 WHERE session_id=$1", &[&sid, &now]).await?;
        exec(
            &tx,
            "UPDATE jobs SET state='done', lease_until=NULL, last_error=NULL, prompt_tokens=prompt_tokens+$2,
             completion_tokens=completion_tokens+$3, updated_at=$4 WHERE job_id=$1",
            &[job_id, &(output.prompt_tokens as i64), &(output.completion_tokens as i64), &now],
        )
        .await?;
        tx.commit().await.map_err(pg)?;
        Ok(ids)
    }

    async fn fail_job(&self, lease: &JobLease, error: &str, retry_at: Option<Millis>, now: Millis) -> StoreResult<()> {
        let error: String = no_nul(error).chars().take(2000).collect();
        let (state, run_after) = match retry_at {
            Some(t) => ("queued", t),
            None => ("failed", now),
        };
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let n = exec(
            &tx,
            "UPDATE jobs SET state=$2, run_after=$3, last_error=$4, lease_until=NULL, updated_at=$5
             WHERE job_id=$1 AND state='running' AND attempts=$6",
            &[&lease.job_id, &state, &run_after, &error, &now, &(lease.attempt as i64)],
        )
        .await?;
        if n == 1 && state == "failed" {
            exec(
                &tx,
                "UPDATE sessions SET state='failed' WHERE session_id=(SELECT session_id FROM jobs WHERE job_id=$1)",
                &[&lease.job_id],
            )
            .await?;
        }
        tx.commit().await.map_err(pg)
    }

    async fn renew_lease(&self, lease: &JobLease, until: Millis) -> StoreResult<bool> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let n = exec(
            &tx,
            "UPDATE jobs SET lease_until=$3 WHERE job_id=$1 AND state='running' AND attempts=$2",
            &[&lease.job_id, &(lease.attempt as i64), &until],
        )
        .await?;
        tx.commit().await.map_err(pg)?;
        Ok(n == 1)
    }

    async fn defer_job(&self, lease: &JobLease, run_after: Millis, note: &str, now: Millis) -> StoreResult<()> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        exec(
            &tx,
            "UPDATE jobs SET state='queued', attempts=GREATEST(attempts-1, 0), run_after=$2, last_error=$3, lease_until=NULL, updated_at=$4
             WHERE job_id=$1 AND state='running' AND attempts=$5",
            &[&lease.job_id, &run_after, &note, &now, &(lease.attempt as i64)],
        )
        .await?;
        tx.commit().await.map_err(pg)
    }

    async fn tokens_used_since(&self, project: &str, since: Millis) -> StoreResult<u64> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        let n: i64 = one(
            &tx,
            "SELECT COALESCE(SUM(j.prompt_tokens + j.completion_tokens), 0)::bigint FROM jobs j
             JOIN collections c ON c.id = j.collection_id WHERE c.project_name=$1 AND j.updated_at>=$2",
            &[&project, &since],
        )
        .await?
        .get(0);
        Ok(n as u64)
    }

    async fn list_jobs(&self, cid: CollectionId, f: JobFilter) -> StoreResult<Vec<Job>> {
        let mut a = Args::default();
        let mut sql = format!("SELECT {JOB_COLS} FROM jobs WHERE collection_id={}", a.push(cid));
        if let Some(s) = f.state {
            sql.push_str(&format!(" AND state={}", a.push(s.as_str().to_string())));
        }
        if let Some(c) = f.conversation_id {
            sql.push_str(&format!(" AND conversation_id={}", a.push(c)));
        }
        if let Some(s) = f.session_id {
            sql.push_str(&format!(" AND session_id={}", a.push(s)));
        }
        sql.push_str(&format!(" ORDER BY created_at DESC, job_id DESC LIMIT {}", a.push(f.limit.max(1) as i64)));
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        Ok(all(query(&tx, &sql, &a.refs()).await?, job)?.into_iter().map(|(_, j)| j).collect())
    }

    async fn next_job_due(&self) -> StoreResult<Option<Millis>> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        Ok(one(
            &tx,
            "SELECT LEAST((SELECT MIN(run_after) FROM jobs WHERE state='queued'), (SELECT MIN(lease_until) FROM jobs WHERE state='running'))",
            &[],
        )
        .await?
        .get(0))
    }

    async fn insert_event(&self, e: NewEvent) -> StoreResult<Event> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let mut stats = TermStats::default();
        let id = insert_event_row(&tx, &mut stats, &e).await?;
        stats.flush(&tx).await?;
        let out = event_by_id(&tx, e.collection_id, &id)
            .await?
            .ok_or_else(|| StoreError::Backend("inserted event vanished".into()))?;
        tx.commit().await.map_err(pg)?;
        Ok(out)
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
        let (text_changed, vector) = patch.apply(&mut e);
        if text_changed {
            let old = event_terms(&tx, id).await?;
            index_event(&tx, &mut stats, cid, id, old.as_deref(), &e.memory_info, vector.as_deref()).await?;
        }
        exec(
            &tx,
            "UPDATE events SET memory_info=$3, time=$4, group_id=$5, scope=$6, class=$7, status=$8, updated_at=$9 WHERE collection_id=$1 AND id=$2",
            &[&cid, &id, &json(&e.memory_info), &e.time, &e.group_id, &e.scope, &e.class, &e.status, &now],
        )
        .await?;
        stats.flush(&tx).await?;
        let out =
            event_by_id(&tx, cid, id).await?.ok_or_else(|| StoreError::Backend("updated event vanished".into()))?;
        tx.commit().await.map_err(pg)?;
        Ok(out)
    }

    async fn delete_event(&self, cid: CollectionId, id: &str) -> StoreResult<bool> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let n = delete_events(&tx, cid, &[id.to_string()]).await?;
        tx.commit().await.map_err(pg)?;
        Ok(n > 0)
    }

    async fn batch_delete_events(&self, cid: CollectionId, filter: EventFilter) -> StoreResult<u64> {
        let (where_sql, a) = event_filter(cid, &filter);
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let ids = ids_of(&tx, &format!("SELECT id FROM events WHERE {where_sql} ORDER BY id"), &a.refs()).await?;
        let n = delete_events(&tx, cid, &ids).await?;
        tx.commit().await.map_err(pg)?;
        Ok(n)
    }

    async fn list_events(&self, cid: CollectionId, filter: EventFilter, limit: u32) -> StoreResult<Vec<Event>> {
        let (where_sql, mut a) = event_filter(cid, &filter);
        let lim = a.push(limit as i64);
        let sql = format!("SELECT {EVENT_COLS} FROM events WHERE {where_sql} ORDER BY time DESC, id DESC LIMIT {lim}");
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        all(query(&tx, &sql, &a.refs()).await?, event)
    }

    async fn search_candidates(
        &self,
        cid: CollectionId,
        filter: EventFilter,
        q: CandidateQuery,
    ) -> StoreResult<Vec<Candidate>> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        search::candidates(&tx, cid, &filter, &q, self.exact_scope).await
    }

    async fn record_hits(&self, cid: CollectionId, mut ids: Vec<String>, now: Millis) -> StoreResult<()> {
        ids.sort(); // one lock order for every writer
        let day = now.div_euclid(86_400_000);
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        for id in &ids {
            exec(
                &tx,
                "UPDATE events SET hit_count=hit_count+1, last_hit_at=$3 WHERE collection_id=$1 AND id=$2",
                &[&cid, id, &now],
            )
            .await?;
            exec(
                &tx,
                "INSERT INTO hits_daily(collection_id, day, user_id, hits)
                 SELECT $1, $3, COALESCE(user_ids::jsonb->>0, ''), 1 FROM events WHERE collection_id=$1 AND id=$2
                 ON CONFLICT(collection_id, day, user_id) DO UPDATE SET hits = hits_daily.hits + 1",
                &[&cid, id, &day],
            )
            .await?;
        }
        tx.commit().await.map_err(pg)
    }

    async fn events_missing_vectors(&self, cid: CollectionId, limit: u32) -> StoreResult<Vec<Event>> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        let rows = query(
            &tx,
            &format!(
                "SELECT {EVENT_COLS} FROM events e WHERE collection_id=$1
                 AND NOT EXISTS (SELECT 1 FROM event_vectors v WHERE v.event_id = e.id) LIMIT $2"
            ),
            &[&cid, &(limit as i64)],
        )
        .await?;
        all(rows, event)
    }

    async fn set_event_vector(&self, cid: CollectionId, id: &str, vector: Vec<f32>) -> StoreResult<()> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        set_vector(&tx, cid, id, &vector).await?;
        tx.commit().await.map_err(pg)
    }

    async fn memory_stats(
        &self,
        cid: CollectionId,
        user: Option<String>,
        days: u32,
        now: Millis,
    ) -> StoreResult<MemoryStats> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        privacy::memory_stats(&tx, cid, user.as_deref(), days, now).await
    }

    async fn run_maintenance(
        &self,
        cid: CollectionId,
        now: Millis,
        archive_before: Millis,
        trigger: &str,
    ) -> StoreResult<MaintenanceRun> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        // Replicas run maintenance on the same schedule; one collection's runs go one at a time.
        exec(&tx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 11))", &[&format!("maintenance/{cid}")]).await?;
        let expired_ids = ids_of(
            &tx,
            "SELECT id FROM events WHERE collection_id=$1 AND expires_at IS NOT NULL AND expires_at <= $2 AND hit_count = 0 ORDER BY id",
            &[&cid, &now],
        )
        .await?;
        let expired = delete_events(&tx, cid, &expired_ids).await?;
        let archived = exec(
            &tx,
            "UPDATE events SET status='archived', updated_at=$3 WHERE collection_id=$1 AND status='active'
             AND COALESCE(last_hit_at, created_at) < $2",
            &[&cid, &archive_before, &now],
        )
        .await?;
        exec(
            &tx,
            "INSERT INTO maintenance_runs(collection_id, trigger, started_at, expired, archived) VALUES ($1,$2,$3,$4,$5)",
            &[&cid, &trigger, &now, &(expired as i64), &(archived as i64)],
        )
        .await?;
        let name: String = one(&tx, "SELECT collection_name FROM collections WHERE id=$1", &[&cid]).await?.get(0);
        tx.commit().await.map_err(pg)?;
        Ok(MaintenanceRun {
            collection_name: name,
            trigger: trigger.to_string(),
            started_at: now,
            expired,
            archived,
            folded: 0,
            digests: 0,
        })
    }

    async fn replace_events(&self, cid: CollectionId, delete: Vec<String>, new: NewEvent) -> StoreResult<Event> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let mut stats = TermStats::default();
        for id in &delete {
            delete_event_row(&tx, &mut stats, cid, id).await?;
        }
        let id = insert_event_row(&tx, &mut stats, &new).await?;
        stats.flush(&tx).await?;
        let out =
            event_by_id(&tx, cid, &id).await?.ok_or_else(|| StoreError::Backend("inserted event vanished".into()))?;
        tx.commit().await.map_err(pg)?;
        Ok(out)
    }

    async fn note_maintenance(&self, cid: CollectionId, folded: u64, digests: u64) -> StoreResult<()> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        exec(
            &tx,
            "UPDATE maintenance_runs SET folded=folded+$2, digests=digests+$3
             WHERE id=(SELECT id FROM maintenance_runs WHERE collection_id=$1 ORDER BY id DESC LIMIT 1)",
            &[&cid, &(folded as i64), &(digests as i64)],
        )
        .await?;
        tx.commit().await.map_err(pg)
    }

    async fn list_maintenance_runs(&self, cid: CollectionId, limit: u32) -> StoreResult<Vec<MaintenanceRun>> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        let rows = query(
            &tx,
            "SELECT c.collection_name, m.trigger, m.started_at, m.expired, m.archived, m.folded, m.digests FROM maintenance_runs m
             JOIN collections c ON c.id = m.collection_id WHERE m.collection_id=$1 ORDER BY m.started_at DESC, m.id DESC LIMIT $2",
            &[&cid, &(limit as i64)],
        )
        .await?;
        Ok(rows
            .iter()
            .map(|r| MaintenanceRun {
                collection_name: r.get(0),
                trigger: r.get(1),
                started_at: r.get(2),
                expired: r.get::<_, i64>(3) as u64,
                archived: r.get::<_, i64>(4) as u64,
                folded: r.get::<_, i64>(5) as u64,
                digests: r.get::<_, i64>(6) as u64,
            })
            .collect())
    }

    async fn stats(&self) -> StoreResult<StoreStats> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        let jobs = query(&tx, "SELECT state, COUNT(*) FROM jobs GROUP BY state ORDER BY state", &[])
            .await?
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1) as u64))
            .collect();
        let count = async |t: &str| -> StoreResult<u64> {
            Ok(one(&tx, &format!("SELECT COUNT(*) FROM {t}"), &[]).await?.get::<_, i64>(0) as u64)
        };
        Ok(StoreStats {
            jobs,
            conversations: count("conversations").await?,
            messages: count("messages").await?,
            events: count("events").await?,
            profiles: count("profiles").await?,
            // Tables, indexes and TOAST of mnemo's schema (not the whole database).
            bytes: one(
                &tx,
                "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
                 WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'",
                &[],
            )
            .await?
            .get::<_, i64>(0) as u64,
        })
    }

    async fn export_user(&self, cid: CollectionId, user_id: &str) -> StoreResult<UserData> {
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        privacy::export(&tx, cid, user_id).await
    }

    async fn forget_user(&self, cid: CollectionId, user_id: &str) -> StoreResult<ForgetCounts> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let counts = privacy::forget(&tx, cid, user_id).await?;
        tx.commit().await.map_err(pg)?;
        // Dead row versions keep the bytes until VACUUM reclaims their space; do it now, in the
        // background (VACUUM cannot run inside a transaction and may take a while on big tables).
        let pool = self.pool.clone();
        tokio::spawn(async move {
            if let Ok(c) = pool.get().await
                && let Err(e) = c
                    .batch_execute("VACUUM messages, events, event_vectors, event_subjects, profiles, profile_history, sessions, jobs, conversations")
                    .await
            {
                tracing::warn!("VACUUM after user/forget failed: {e}");
            }
        });
        Ok(counts)
    }

    async fn insert_profile(&self, p: NewProfile) -> StoreResult<Profile> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let assistant = p.assistant_id.clone().unwrap_or_default();
        if let Some(existing) = profile_for(&tx, p.collection_id, &p.profile_type, &p.user_id, &assistant).await? {
            return Err(StoreError::Conflict(format!(
                "user_id: user \"{}\" already has a {} profile ({}); use profile/update",
                p.user_id, p.profile_type, existing.id
            )));
        }
        let id = new_id("prf");
        let st = tx
            .prepare_cached(
                "INSERT INTO profiles(id, collection_id, profile_type, user_id, assistant_id, content, attributes, created_at, updated_at)
                 VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$8)",
            )
            .await
            .map_err(pg)?;
        if let Err(e) = tx
            .execute(
                &st,
                &[
                    &id,
                    &p.collection_id,
                    &p.profile_type,
                    &p.user_id,
                    &assistant,
                    &no_nul(&p.content),
                    &json(&p.attributes),
                    &p.now,
                ],
            )
            .await
        {
            return Err(if is_unique_violation(&e) {
                StoreError::Conflict(format!(
                    "user_id: user \"{}\" already has a {} profile; use profile/update",
                    p.user_id, p.profile_type
                ))
            } else {
                pg(e)
            });
        }
        let out = profile_by_id(&tx, p.collection_id, &id)
            .await?
            .ok_or_else(|| StoreError::Backend("inserted profile vanished".into()))?;
        tx.commit().await.map_err(pg)?;
        Ok(out)
    }

    async fn update_profile(
        &self,
        cid: CollectionId,
        id: &str,
        patch: ProfilePatch,
        now: Millis,
    ) -> StoreResult<Profile> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        exec(&tx, "SELECT 1 FROM profiles WHERE collection_id=$1 AND id=$2 FOR UPDATE", &[&cid, &id]).await?;
        let mut p = profile_by_id(&tx, cid, id)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("profile_id: no profile \"{id}\"")))?;
        let before = p.attributes.clone();
        let superseded = profile::apply_patch(&mut p, patch);
        let keep = keeps_history(&tx, cid, &p.profile_type).await?;
        let since = record_versions(&tx, id, keep, &before, &p.attributes, &superseded, None, now).await?;
        exec(
            &tx,
            "UPDATE profiles SET content=$3, attributes=$4, updated_at=$5, attribute_since=$6 WHERE collection_id=$1 AND id=$2",
            &[&cid, &id, &no_nul(&p.content), &json(&p.attributes), &now, &since],
        )
        .await?;
        let out =
            profile_by_id(&tx, cid, id).await?.ok_or_else(|| StoreError::Backend("updated profile vanished".into()))?;
        tx.commit().await.map_err(pg)?;
        Ok(out)
    }

    async fn delete_profile(&self, cid: CollectionId, id: &str) -> StoreResult<bool> {
        let mut conn = self.client().await?;
        let tx = begin(&mut conn).await?;
        let n = exec(&tx, "DELETE FROM profiles WHERE collection_id=$1 AND id=$2", &[&cid, &id]).await?;
        tx.commit().await.map_err(pg)?;
        Ok(n > 0)
    }

    async fn list_profiles(&self, cid: CollectionId, f: ProfileFilter, limit: u32) -> StoreResult<Vec<Profile>> {
        let mut a = Args::default();
        let mut sql = format!("collection_id={}", a.push(cid));
        for (col, values) in
            [("user_id", &f.user_id), ("assistant_id", &f.assistant_id), ("profile_type", &f.profile_type)]
        {
            if !values.is_empty() {
                sql.push_str(&format!(" AND {col} = ANY({})", a.push(values.clone())));
            }
        }
        sql.push_str(&format!(" ORDER BY updated_at DESC, id LIMIT {}", a.push(limit as i64)));
        let mut conn = self.client().await?;
        let tx = begin_read(&mut conn).await?;
        profiles_where(&tx, &sql, &a.refs()).await
    }
}

/// Applies extracted profile changes to the user's profile of `ptype`, creating it on first use.
async fn apply_profile_changes(
    tx: &Tx<'_>,
    cid: CollectionId,
    ptype: &str,
    user: &str,
    session_id: &str,
    changes: &[mnemo_core::extract::ProfileChange],
    now: Millis,
) -> StoreResult<()> {
    let existing = profile_for(tx, cid, ptype, user, "").await?;
    let Some(f) = profile::fold_session(existing, changes, session_id) else { return Ok(()) };
    let (id, attrs, sources, content) = (&f.id, &f.attributes, &f.source_sessions, &f.content);
    exec(
        tx,
        "INSERT INTO profiles(id, collection_id, profile_type, user_id, assistant_id, content, attributes, source_sessions, created_at, updated_at)
         VALUES ($1,$2,$3,$4,'',$5,$6,$7,$8,$8)
         ON CONFLICT(id) DO UPDATE SET content=excluded.content, attributes=excluded.attributes,
             source_sessions=excluded.source_sessions, updated_at=excluded.updated_at",
        &[id, &cid, &ptype, &user, &no_nul(content), &json(attrs), &json(sources), &now],
    )
    .await?;
    let keep = keeps_history(tx, cid, ptype).await?;
    let since = record_versions(tx, id, keep, &f.before, attrs, &f.superseded, Some(session_id), now).await?;
    exec(tx, "UPDATE profiles SET attribute_since=$2 WHERE id=$1", &[id, &since]).await?;
    Ok(())
}

/// Refreshes an existing event with a near-duplicate's content (the embedded store's rules).
async fn merge_event_row(
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
    index_event(tx, stats, cid, id, old_terms.as_deref(), &info, e.embedding.as_deref()).await?;
    exec(
        tx,
        "UPDATE events SET memory_info=$3, time=GREATEST(time, $4), source_message_ids=$5, updated_at=$6,
             expires_at=CASE WHEN expires_at IS NULL THEN NULL ELSE GREATEST(expires_at, COALESCE($7, expires_at)) END
         WHERE collection_id=$1 AND id=$2",
        &[&cid, &id, &json(&info), &e.time, &json(&sources), &now, &e.expires_at],
    )
    .await?;
    Ok(true)
}

mod privacy;
