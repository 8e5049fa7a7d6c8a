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

mod candidates;
mod collections;
mod conversations;
mod events;
mod exact;
mod jobs;
mod maintenance;
mod privacy;
mod profiles;
mod rows;
mod schema;
mod scope_cache;
mod search;
mod sql;
mod stats;
mod terms;
mod tls;
mod vector_index;
mod webhooks;

use crate::sql::backend;
use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use mnemo_core::StoreError;
use mnemo_core::model::*;
use mnemo_core::store::StoreResult;
use mnemo_core::store::prelude::*;

pub use schema::SCHEMA_VERSION;
pub use stats::ESTIMATE_FROM as STATS_ESTIMATE_FROM;

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
    /// A streaming replica (hot standby) of the same database for event searches — `event/search`
    /// and the searches of `get_context` — so search capacity grows with replicas while writes
    /// go to `url`. A search there sees what the replica has replayed (replication lag); on any
    /// error there it runs on the primary instead.
    pub read_url: Option<String>,
    /// `maintenance_work_mem` (MiB, at least) for the index builds after a bulk load.
    pub index_build_mib: u32,
    /// Memory for small scopes' terms and vector copies kept between searches on this replica
    /// (MiB; 0: none; `scope_cache`).
    pub scope_cache_mib: usize,
}

impl PgOptions {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            pool: 16,
            schema: None,
            exact_scope: search::EXACT_SCOPE,
            hnsw: true,
            read_url: None,
            index_build_mib: 1024,
            scope_cache_mib: 64,
        }
    }
}

pub struct PgStore {
    pool: Pool,
    /// Searches go here when a read replica is configured …
    read_pool: Option<Pool>,
    /// … except until this instant (ms since the epoch) after it failed: a replica that is down
    /// costs one failed attempt every few seconds, not one per search.
    read_pool_resting_until: std::sync::atomic::AtomicU64,
    /// How small scopes are searched: the exact scan's bound, the terms kept between searches.
    scopes: scope_cache::Scopes,
    hnsw: bool,
    index_build_mib: u32,
    /// The connection that holds this schema's bulk-load lock, between `begin_bulk_load` and
    /// `end_bulk_load` (see [`schema::BULK_LOAD_LOCK`]).
    bulk: tokio::sync::Mutex<Option<Object>>,
}

/// How often a replica folds the appended BM25 statistics (`compact_stats`).
const COMPACT_EVERY: std::time::Duration = std::time::Duration::from_secs(2);
/// Subject rows from before schema v5 given their search copies per housekeeping call (~0.1 s of
/// the database's time each: a row costs two primary-key reads and an f16 conversion).
const SUBJECT_DOCS_BATCH: i64 = 1_000;

/// How long a connection to the read replica may take (unless its URL sets `connect_timeout`),
/// and how long searches stay on the primary after the replica failed one.
const READ_REPLICA_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);
const READ_REPLICA_REST: std::time::Duration = std::time::Duration::from_secs(5);

/// A pool whose connections see `schema` first.
fn pool_of(
    mut config: tokio_postgres::Config,
    tls: tls::Connector,
    schema: Option<&str>,
    size: usize,
) -> Result<Pool, StoreError> {
    if let Some(schema) = schema {
        let given = config.get_options().map(|o| format!("{o} ")).unwrap_or_default();
        config.options(format!("{given}-c search_path={schema},public"));
    }
    let manager = Manager::from_config(config, tls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    Pool::builder(manager).max_size(size.max(2)).build().map_err(|e| StoreError::backend(format!("postgres pool: {e}")))
}

fn bad_schema_name(s: &str) -> bool {
    s.is_empty() || s.len() > 63 || !s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[async_trait]
impl StoreEngine for PgStore {
    /// Drops the HNSW indexes before a bulk load (pgvector builds an index from existing rows
    /// many times faster than it maintains one row by row); large-scope searches run exact
    /// meanwhile, on every replica. A connection of this store holds the schema's bulk-load lock
    /// until [`Self::end_bulk_load`]: no replica (re)started meanwhile — nor a collection created
    /// by the load — builds an index in the middle of it, and a second bulk load is refused. If
    /// the loading process dies, its connection closes and the lock with it: the next `connect`
    /// (or a collection's creation) builds the missing index.
    async fn begin_bulk_load(&self) -> StoreResult<()> {
        let mut held = self.bulk.lock().await;
        if held.is_some() {
            return Ok(());
        }
        let c = self.client().await?;
        let got: bool = c
            .query_one(&format!("SELECT pg_try_advisory_lock({})", schema::BULK_LOAD_LOCK), &[])
            .await
            .map_err(backend)?
            .get(0);
        if !got {
            return Err(StoreError::Conflict(
                "another bulk load into this schema is in progress (mnemo import --bulk); wait for it to end".into(),
            ));
        }
        let dropped = async {
            let names = c
                .query(
                    "SELECT relname::text FROM pg_class WHERE relkind = 'i'
                     AND (relname LIKE 'event_vectors_hnsw_%' OR relname LIKE 'event_vectors_bits_%')
                     AND relnamespace = current_schema()::regnamespace",
                    &[],
                )
                .await?;
            for r in names {
                let name: String = r.get(0);
                tracing::info!(index = %name, "bulk load: dropping the vector index until the load ends");
                c.batch_execute(&format!("DROP INDEX IF EXISTS {name}")).await?;
            }
            Ok::<_, tokio_postgres::Error>(())
        }
        .await;
        if let Err(e) = dropped {
            let _ = c.batch_execute("SELECT pg_advisory_unlock_all()").await;
            return Err(backend(e));
        }
        *held = Some(c);
        Ok(())
    }

    /// Builds the HNSW indexes of the dimensions in use, with at least `index_build_mib` of
    /// `maintenance_work_mem` (pgvector builds far faster while its graph fits in it), then
    /// releases the bulk-load lock.
    async fn end_bulk_load(&self) -> StoreResult<()> {
        let held = self.bulk.lock().await.take();
        let c = match held {
            Some(c) => c,
            None => self.client().await?,
        };
        let built = self.build_indexes(&c).await;
        // A pooled connection keeps its session settings, and the lock until it is released.
        let _ = c.batch_execute("RESET maintenance_work_mem").await;
        let _ = c.batch_execute("SELECT pg_advisory_unlock_all()").await;
        built
    }

    fn engine(&self) -> &'static str {
        "postgres"
    }

    fn housekeeping_interval(&self) -> Option<std::time::Duration> {
        Some(COMPACT_EVERY)
    }

    fn reads_overlap(&self) -> bool {
        true
    }

    async fn housekeeping(&self) -> StoreResult<bool> {
        self.compact_stats().await?;
        // Rows written before schema v5 get their search copies, a batch a call.
        let filled = terms::fill_subject_docs(&self.pool, SUBJECT_DOCS_BATCH).await?;
        Ok(filled >= SUBJECT_DOCS_BATCH as u64)
    }
}

impl PgStore {
    /// Connects, creates the schema if asked, migrates, and makes sure the vector indexes of the
    /// dimensions in use exist.
    pub async fn connect(o: PgOptions) -> Result<Self, StoreError> {
        let (config, tls) = tls::configure(&o.url)?;
        if let Some(schema) = &o.schema {
            if bad_schema_name(schema) {
                return Err(StoreError::backend(format!(
                    "store.schema: \"{schema}\" must be 1 to 63 ASCII letters, digits or underscores"
                )));
            }
            let (client, conn) = config.connect(tls.clone()).await.map_err(|e| connect_error(&o.url, e))?;
            let task = tokio::spawn(conn);
            client.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}")).await.map_err(backend)?;
            drop(client);
            let _ = task.await;
        }
        let pool = pool_of(config, tls, o.schema.as_deref(), o.pool)?;
        // The replica's pool connects lazily: a replica that is down does not stop the start.
        let read_pool = match &o.read_url {
            Some(url) => {
                let (mut config, tls) = tls::configure(url)?;
                if config.get_connect_timeout().is_none() {
                    // A replica host that does not answer must not hold searches for minutes.
                    config.connect_timeout(READ_REPLICA_CONNECT_TIMEOUT);
                }
                Some(pool_of(config, tls, o.schema.as_deref(), o.pool)?)
            }
            None => None,
        };
        let store = Self {
            pool,
            read_pool,
            read_pool_resting_until: Default::default(),
            scopes: scope_cache::Scopes {
                exact: o.exact_scope.max(1),
                kept: mnemo_core::kept::Kept::new(o.scope_cache_mib),
            },
            hnsw: o.hnsw,
            index_build_mib: o.index_build_mib,
            bulk: Default::default(),
        };
        let mut c = store.pool.get().await.map_err(|e| connect_error(&o.url, e))?;
        schema::migrate(&mut c).await.map_err(StoreError::backend)?;
        for r in c
            .query("SELECT DISTINCT embedding_dim FROM collections WHERE embedding_dim IS NOT NULL", &[])
            .await
            .map_err(backend)?
        {
            store.vector_index(&c, r.get(0)).await?;
        }
        match store.connection_security().await? {
            Some(tls) => tracing::info!(tls, "PostgreSQL: connected over TLS"),
            None => tracing::info!("PostgreSQL: connected unencrypted (sslmode in store.url decides)"),
        }
        Ok(store)
    }

    /// The TLS version of this replica's connections (`"TLSv1.3"`), `None` when unencrypted.
    pub async fn connection_security(&self) -> StoreResult<Option<String>> {
        let c = self.client().await?;
        let row = c
            .query_opt("SELECT version FROM pg_stat_ssl WHERE pid = pg_backend_pid() AND ssl", &[])
            .await
            .map_err(backend)?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Folds the appended BM25 statistics now (the service's housekeeping loop does it every
    /// 2 s); returns how many term rows were folded, 0 if another replica is compacting.
    pub async fn compact_stats(&self) -> StoreResult<u64> {
        terms::compact_stats(&self.pool).await
    }

    async fn build_indexes(&self, c: &Object) -> StoreResult<()> {
        raise_build_memory(c, self.index_build_mib).await.map_err(backend)?;
        let dims = c
            .query("SELECT DISTINCT embedding_dim FROM collections WHERE embedding_dim IS NOT NULL", &[])
            .await
            .map_err(backend)?;
        for r in dims {
            let t = std::time::Instant::now();
            self.vector_index(c, r.get(0)).await?;
            tracing::info!(dim = r.get::<_, i64>(0), secs = t.elapsed().as_secs_f64(), "bulk load: vector index built");
        }
        Ok(())
    }

    async fn vector_index(&self, conn: &Object, dim: i64) -> StoreResult<()> {
        if !self.hnsw
            || vector_index::ensure_vector_index(conn, dim).await.map_err(backend)? == vector_index::Indexed::Ready
        {
            return Ok(());
        }
        // An earlier release's full-vector index: replaced in the background, writes going on.
        let (pool, mib) = (self.pool.clone(), self.index_build_mib);
        tokio::spawn(async move {
            let t = std::time::Instant::now();
            let upgraded = async {
                let c = pool.get().await.map_err(|e| e.to_string())?;
                let r = async {
                    raise_build_memory(&c, mib).await?;
                    vector_index::upgrade_vector_index(&c, dim).await
                }
                .await;
                // A pooled connection keeps its session settings.
                let _ = c.batch_execute("RESET maintenance_work_mem").await;
                r.map_err(|e| e.to_string())
            }
            .await;
            match upgraded {
                Ok(true) => tracing::info!(
                    dim,
                    secs = t.elapsed().as_secs_f64(),
                    "vector index over the signs built; the full-vector index dropped"
                ),
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(dim, error = %e, "replacing the vector index failed; the next start tries again")
                }
            }
        });
        tracing::info!(
            dim,
            "building the vector index over the signs in the background (replaces the full-vector index; writes go on)"
        );
        Ok(())
    }

    /// The read replica's pool, unless there is none or it failed a moment ago.
    fn replica(&self) -> Option<&Pool> {
        let now = sql::now_ms();
        self.read_pool
            .as_ref()
            .filter(|_| now >= self.read_pool_resting_until.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// The replica failed a search: searches stay on the primary for a while.
    fn rest_replica(&self) {
        let until = sql::now_ms() + READ_REPLICA_REST.as_millis() as u64;
        self.read_pool_resting_until.store(until, std::sync::atomic::Ordering::Relaxed);
    }

    async fn client(&self) -> StoreResult<Object> {
        self.pool.get().await.map_err(crate::sql::pool_error)
    }

    /// This database's place in a sharded deployment (`store.shards`): recorded at its first
    /// start as shard `position` of `shards` in deployment `deployment` (shard 0 makes the id and
    /// answers it), and checked at every start after — a user is found through its place, so a
    /// reordered or resized list, a database of another deployment, or one that already holds an
    /// unsharded deployment's memories is refused with what it is.
    pub async fn place_in_shards(
        &self,
        position: usize,
        shards: usize,
        deployment: Option<&str>,
    ) -> StoreResult<String> {
        let conn = self.client().await?;
        conn.batch_execute(
            "CREATE TABLE IF NOT EXISTS mnemo_shard(one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
                 position BIGINT NOT NULL, shards BIGINT NOT NULL, deployment TEXT NOT NULL)",
        )
        .await
        .map_err(backend)?;
        let place =
            |r: &tokio_postgres::Row| (r.get::<_, i64>(0) as usize, r.get::<_, i64>(1) as usize, r.get::<_, String>(2));
        let recorded =
            conn.query_opt("SELECT position, shards, deployment FROM mnemo_shard", &[]).await.map_err(backend)?;
        let (p, n, d) = match recorded {
            Some(r) => place(&r),
            None => {
                let held = conn.query_one("SELECT EXISTS (SELECT 1 FROM events)", &[]).await.map_err(backend)?;
                if held.get::<_, bool>(0) {
                    return Err(StoreError::Invalid(format!(
                        "store.shards[{position}]: this database holds the memories of an unsharded deployment; as one shard \
                         of {shards} the users that hash to the others would not be found (move them with export/import)"
                    )));
                }
                let id = deployment.map_or_else(|| new_id("dep"), String::from);
                let r = conn
                    .query_one(
                        "WITH ins AS (INSERT INTO mnemo_shard(position, shards, deployment) VALUES ($1, $2, $3)
                             ON CONFLICT (one) DO NOTHING RETURNING position, shards, deployment)
                         SELECT * FROM ins UNION ALL SELECT position, shards, deployment FROM mnemo_shard
                         WHERE NOT EXISTS (SELECT 1 FROM ins)",
                        &[&(position as i64), &(shards as i64), &id],
                    )
                    .await
                    .map_err(backend)?;
                place(&r)
            }
        };
        let other = deployment.is_some_and(|want| want != d);
        if p != position || n != shards || other {
            return Err(StoreError::Invalid(format!(
                "store.shards[{position}]: this database is shard {p} of {n} of deployment {d}, but the list makes it shard \
                 {position} of {shards}{} — users are found through their shard, so keep the list's order and length",
                if other { format!(" of deployment {}", deployment.unwrap_or_default()) } else { String::new() }
            )));
        }
        Ok(d)
    }
}

/// Drops a schema and everything in it (benchmarks and tests start from an empty one).
pub async fn drop_schema(url: &str, schema: &str) -> Result<(), StoreError> {
    if bad_schema_name(schema) {
        return Err(StoreError::backend(format!("store.schema: {schema:?} is not a plain name")));
    }
    let (client, task) = one_connection(url).await?;
    client.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).await.map_err(backend)?;
    drop(client);
    let _ = task.await;
    Ok(())
}

/// One connection outside any pool (administration and benchmarks), its driver task running in
/// the background until the client is dropped.
async fn one_connection(url: &str) -> Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>), StoreError> {
    let (config, tls) = tls::configure(url)?;
    let (client, conn) = config.connect(tls).await.map_err(|e| connect_error(url, e))?;
    Ok((client, tokio::spawn(async move { drop(conn.await) })))
}

/// A session-level advisory lock on a schema name, held while this value lives (its connection
/// closes on drop, and the server releases the lock with it). Benchmarks take one before they
/// drop and refill their schema, so that a second run on the same database fails at once instead
/// of dropping the first one's tables under it.
#[derive(Debug)]
pub struct SchemaClaim {
    _client: tokio_postgres::Client,
}

pub async fn claim_schema(url: &str, schema: &str) -> Result<SchemaClaim, StoreError> {
    let (client, _) = one_connection(url).await?;
    let key = format!("mnemo schema {schema}");
    let got: bool = client
        .query_one("SELECT pg_try_advisory_lock(hashtextextended($1, 0))", &[&key])
        .await
        .map_err(backend)?
        .get(0);
    if !got {
        return Err(StoreError::backend(format!(
            "schema {schema:?} is in use by another process on this database (another `mnemo bench` run?); \
             wait for it to finish or point this one at another database"
        )));
    }
    Ok(SchemaClaim { _client: client })
}

/// Creates database `name` on `url`'s server unless it exists; returns `url` pointed at it
/// (benchmarks give each shard a database of its own).
pub async fn ensure_database(url: &str, name: &str) -> Result<String, StoreError> {
    if bad_schema_name(name) {
        return Err(StoreError::backend(format!("database name {name:?} is not a plain name")));
    }
    let (client, task) = one_connection(url).await?;
    let exists = client.query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name]).await.map_err(backend)?;
    if exists.is_none() {
        client.batch_execute(&format!("CREATE DATABASE {name}")).await.map_err(backend)?;
    }
    drop(client);
    let _ = task.await;
    Ok(with_database(url, name))
}

/// `url` naming database `name` instead of its own (or none): `postgres://u@h:5432/db?x=1` →
/// `postgres://u@h:5432/name?x=1`.
fn with_database(url: &str, name: &str) -> String {
    let (head, query) = url.split_once('?').map_or((url, None), |(h, q)| (h, Some(q)));
    let authority_end = head.find("://").map_or(0, |i| i + 3);
    let base = match head[authority_end..].find('/') {
        Some(slash) => &head[..authority_end + slash],
        None => head,
    };
    match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    }
}

fn connect_error(url: &str, e: impl std::error::Error) -> StoreError {
    // The URL may hold a password: show only where it points.
    let at = url.rsplit('@').next().unwrap_or(url);
    // With the causes: "error performing TLS handshake: invalid peer certificate: UnknownIssuer".
    let mut why = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !why.contains(&text) {
            why = format!("{why}: {text}");
        }
        cause = c.source();
    }
    StoreError::backend(format!("cannot connect to PostgreSQL at {at}: {why}"))
}

/// `maintenance_work_mem` of this session raised to at least `mib` for an index build: pgvector
/// builds many times faster while its graph fits.
async fn raise_build_memory(c: &tokio_postgres::Client, mib: u32) -> Result<(), tokio_postgres::Error> {
    c.execute(
        "SELECT set_config('maintenance_work_mem',
             (GREATEST(pg_size_bytes(current_setting('maintenance_work_mem')), $1::bigint * 1024 * 1024) / 1024)::text || 'kB', false)",
        &[&i64::from(mib)],
    )
    .await
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_url_names_another_database() {
        let cases = [
            ("postgres://u@h:5432/db?sslmode=require", "postgres://u@h:5432/x?sslmode=require"),
            ("postgres://u:p@h/db", "postgres://u:p@h/x"),
            ("postgres://h:1", "postgres://h:1/x"),
            ("postgresql://h/?a=b", "postgresql://h/x?a=b"),
        ];
        for (url, want) in cases {
            assert_eq!(super::with_database(url, "x"), want, "{url}");
        }
    }
}
