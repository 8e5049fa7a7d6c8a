//! Small helpers over a pooled transaction: prepared-statement caching, error mapping, and
//! dynamically built `WHERE` clauses with their arguments.

use deadpool_postgres::{GenericClient, Object};
use mnemo_core::StoreError;
use mnemo_core::model::{CollectionId, EventFilter};
use mnemo_core::store::StoreResult;
use tokio_postgres::types::ToSql;
use tokio_postgres::{IsolationLevel, Row};

pub type Tx<'a> = deadpool_postgres::Transaction<'a>;
pub type SqlParam<'a> = &'a (dyn ToSql + Sync);

pub fn backend(e: tokio_postgres::Error) -> StoreError {
    use tokio_postgres::error::SqlState;
    if e.code() == Some(&SqlState::CHARACTER_NOT_IN_REPERTOIRE) || e.code() == Some(&SqlState::UNTRANSLATABLE_CHARACTER)
    {
        return StoreError::Invalid(
            "text values must not contain NUL (\\u0000) characters on the postgres store".into(),
        );
    }
    if lost_connection(&e) {
        // Every request fails the same way while the database is away: said every 5 s at most.
        warn_muted(&format!("postgres: the database is unreachable ({e}); requests answer 503 until it is back"));
        return StoreError::Unavailable(UNAVAILABLE.into());
    }
    match e.as_db_error() {
        Some(db) => StoreError::backend_caused(format!("postgres: {} ({})", db.message(), db.code().code()), e),
        None => StoreError::backend_caused("postgres", e),
    }
}

/// Milliseconds since the Unix epoch, by the wall clock.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A warning that every request would repeat while a database is away: logged once every 5 s
/// per call site at most (a debug line otherwise).
#[track_caller]
pub fn warn_muted(what: &str) {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static LAST: Mutex<Option<HashMap<(&'static str, u32), u64>>> = Mutex::new(None);
    let at = std::panic::Location::caller();
    let now = now_ms() / 1000;
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    let seen = last.get_or_insert_with(HashMap::new).entry((at.file(), at.line())).or_insert(0);
    if now >= *seen + 5 {
        *seen = now;
        tracing::warn!("{what} (repeats muted for 5 s)");
    } else {
        tracing::debug!("{what}");
    }
}

/// What a client is told while the database cannot be reached (HTTP 503, `Retry-After`).
pub const UNAVAILABLE: &str = "the database is unreachable (connection lost or refused); retry the request shortly (a write retried with its idempotency key is stored once)";

/// A connection that broke or could not be made, or a server shutting down or starting up:
/// nothing was committed by the failed statement, and a retry on a new connection may succeed.
pub fn lost_connection(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        // Class 08: connection exception; 57P01..57P03: admin/crash shutdown, cannot connect now.
        return code.code().starts_with("08")
            || [SqlState::ADMIN_SHUTDOWN, SqlState::CRASH_SHUTDOWN, SqlState::CANNOT_CONNECT_NOW].contains(code);
    }
    // No SQLSTATE: an I/O error on the socket (reset, broken pipe, end of stream).
    std::error::Error::source(e).is_some_and(|s| s.downcast_ref::<std::io::Error>().is_some())
}

/// A connection could not be had from the pool: a refused or failed new connection is the
/// database being away (503); anything else is a fault.
pub fn pool_error(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => backend(e),
        deadpool_postgres::PoolError::Timeout(_) => StoreError::Unavailable(UNAVAILABLE.into()),
        other => StoreError::backend(format!("postgres pool: {other}")),
    }
}

pub fn is_unique_violation(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION)
}

pub async fn query_all(tx: &impl GenericClient, sql: &str, p: &[SqlParam<'_>]) -> Result<Vec<Row>, StoreError> {
    let st = tx.prepare_cached(sql).await.map_err(backend)?;
    tx.query(&st, p).await.map_err(backend)
}

pub async fn query_opt(tx: &impl GenericClient, sql: &str, p: &[SqlParam<'_>]) -> Result<Option<Row>, StoreError> {
    let st = tx.prepare_cached(sql).await.map_err(backend)?;
    tx.query_opt(&st, p).await.map_err(backend)
}

pub async fn query_one(tx: &impl GenericClient, sql: &str, p: &[SqlParam<'_>]) -> Result<Row, StoreError> {
    let st = tx.prepare_cached(sql).await.map_err(backend)?;
    tx.query_one(&st, p).await.map_err(backend)
}

pub async fn execute(tx: &impl GenericClient, sql: &str, p: &[SqlParam<'_>]) -> Result<u64, StoreError> {
    let st = tx.prepare_cached(sql).await.map_err(backend)?;
    tx.execute(&st, p).await.map_err(backend)
}

/// Arguments of a dynamically built statement; `push` returns the placeholder.
#[derive(Default)]
pub struct Args(Vec<Box<dyn ToSql + Sync + Send>>);

impl Args {
    pub fn push(&mut self, v: impl ToSql + Sync + Send + 'static) -> String {
        self.0.push(Box::new(v));
        format!("${}", self.0.len())
    }

    pub fn refs(&self) -> Vec<SqlParam<'_>> {
        self.0.iter().map(|b| b.as_ref() as SqlParam).collect()
    }
}

/// `WHERE` conditions on `events` for a filter (columns unqualified); `$1` is the collection id.
pub fn event_filter_sql(cid: CollectionId, f: &EventFilter) -> (String, Args) {
    let mut a = Args::default();
    let c = a.push(cid);
    let mut sql = format!("collection_id = {c}");
    let mut list = |template: &str, values: &[String]| {
        if !values.is_empty() {
            let mark = a.push(values.to_vec());
            sql.push_str(" AND ");
            sql.push_str(&template.replace("{c}", &c).replace("{}", &mark));
        }
    };
    list(
        "id IN (SELECT event_id FROM event_subjects WHERE collection_id={c} AND kind='u' AND subject_id = ANY({}))",
        &f.user_id,
    );
    list(
        "id IN (SELECT event_id FROM event_subjects WHERE collection_id={c} AND kind='a' AND subject_id = ANY({}))",
        &f.assistant_id,
    );
    list("memory_type = ANY({})", &f.memory_type);
    list("group_id = ANY({})", &f.group_id);
    list("session_id = ANY({})", &f.session_id);
    list("conversation_id = ANY({})", &f.conversation_id);
    list("scope = ANY({})", &f.scope);
    list("id = ANY({})", &f.event_ids);
    if let Some(t) = f.start_time {
        sql.push_str(&format!(" AND time >= {}", a.push(t)));
    }
    if let Some(t) = f.end_time {
        sql.push_str(&format!(" AND time <= {}", a.push(t)));
    }
    if let Some(t) = f.as_of {
        let t = a.push(t);
        sql.push_str(&format!(
            " AND status IN ('active', 'superseded') AND coalesce(valid_from, time) <= {t} AND (valid_to IS NULL OR valid_to > {t})"
        ));
    } else if f.active_only {
        sql.push_str(" AND status = 'active'");
    }
    (sql, a)
}

/// PostgreSQL text cannot hold NUL: where a value need not round-trip byte for byte (terms,
/// descriptions, error notes, profile text) NUL becomes U+FFFD. Message text round-trips through
/// `messages.content_raw` instead.
pub fn no_nul(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains('\0') { s.replace('\0', "\u{FFFD}").into() } else { s.into() }
}

/// A read-only transaction on one snapshot (a read of several queries never sees half a commit).
pub async fn begin_read(c: &mut Object) -> StoreResult<Tx<'_>> {
    c.build_transaction().isolation_level(IsolationLevel::RepeatableRead).read_only(true).start().await.map_err(backend)
}

pub async fn begin(c: &mut Object) -> StoreResult<Tx<'_>> {
    c.transaction().await.map_err(backend)
}

/// A write transaction whose `BEGIN` is sent with its first statements and whose `COMMIT` can be
/// sent with its last (pipelined on one connection: no round trip of their own). Requests on a
/// connection go out in the order their futures are first polled, so `BEGIN` is joined first;
/// the statement sent with `COMMIT` is a prepared one ([`Pipelined::execute_and_commit`]): an
/// unprepared one would wait for its `Parse` and go out after the `COMMIT`.
///
/// Until a `COMMIT` has succeeded the connection is not given back to the pool: dropped before
/// that — an error, or the request's future cancelled half-way — the connection is taken out of
/// the pool and closed, so the server rolls the transaction back and no later user of the pool
/// inherits it. (`tokio_postgres::Transaction` queues a `ROLLBACK` on drop through an API of its
/// own; closing the connection is the public equivalent, paid only on the failure path.)
pub struct Pipelined {
    conn: Option<Object>,
    committed: std::sync::atomic::AtomicBool,
}

impl Pipelined {
    pub fn new(conn: Object) -> Self {
        Self { conn: Some(conn), committed: false.into() }
    }

    pub fn client(&self) -> &Object {
        self.conn.as_ref().expect("held until dropped")
    }

    /// `BEGIN`: sent on the first poll, so join it before the transaction's first statements.
    pub async fn begin(&self) -> StoreResult<()> {
        self.client().batch_execute("BEGIN").await.map_err(backend)
    }

    /// Executes `st` (prepared: it goes out on the first poll, before the `COMMIT`) and commits,
    /// in one round trip. A failed statement aborts the transaction, and the `COMMIT` behind it
    /// then rolls back.
    pub async fn execute_and_commit(
        &self,
        st: &tokio_postgres::Statement,
        params: &[SqlParam<'_>],
    ) -> StoreResult<u64> {
        let c = self.client();
        let commit = async { c.batch_execute("COMMIT").await.map_err(backend) };
        let (n, ()) = tokio::try_join!(async { c.execute(st, params).await.map_err(backend) }, commit)?;
        // Only now: the join polls its futures in turn, so the `COMMIT` (which, behind a failed
        // statement, answers as a rollback) may be seen done before the statement's error.
        self.committed.store(true, std::sync::atomic::Ordering::Release);
        Ok(n)
    }
}

impl Drop for Pipelined {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take()
            && !self.committed.load(std::sync::atomic::Ordering::Acquire)
        {
            drop(Object::take(conn));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};

    async fn backend_pid(c: &Object) -> i32 {
        c.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0)
    }

    async fn xid(c: &Object) -> Option<String> {
        c.query_one("SELECT pg_current_xact_id_if_assigned()::text", &[]).await.unwrap().get(0)
    }

    #[tokio::test]
    async fn a_pipelined_transaction_is_one_transaction_and_never_handed_on_unfinished() {
        let Ok(url) = std::env::var("MNEMO_TEST_DATABASE_URL") else {
            eprintln!("pipelined transactions on postgres: SKIPPED (set MNEMO_TEST_DATABASE_URL)");
            return;
        };
        let manager = Manager::from_config(
            url.parse().unwrap(),
            tokio_postgres::NoTls,
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let pool = Pool::builder(manager).max_size(1).build().unwrap();

        // BEGIN sent with the first statement, the last statement sent with COMMIT: all of it is
        // one transaction (in autocommit each statement would have an id of its own), and after
        // COMMIT the connection is back in the pool.
        let c = pool.get().await.unwrap();
        c.batch_execute("CREATE TEMP TABLE probe(x text)").await.unwrap();
        let pid = backend_pid(&c).await;
        let tx = Pipelined::new(c);
        let first = tx.client().prepare("SELECT pg_current_xact_id()::text").await.unwrap();
        let last =
            tx.client().prepare("INSERT INTO probe SELECT pg_current_xact_id_if_assigned()::text").await.unwrap();
        let ((), first) =
            tokio::try_join!(tx.begin(), async { tx.client().query_one(&first, &[]).await.map_err(backend) }).unwrap();
        assert_eq!(tx.execute_and_commit(&last, &[]).await.unwrap(), 1);
        drop(tx);
        let c = pool.get().await.unwrap();
        assert_eq!(backend_pid(&c).await, pid, "a committed transaction gives its connection back");
        let x: Option<String> = c.query_one("SELECT x FROM probe", &[]).await.unwrap().get(0);
        assert_eq!(x, Some(first.get::<_, String>(0)), "one transaction from BEGIN to COMMIT");
        assert_eq!(xid(&c).await, None, "and none left open");
        drop(c);

        // Dropped before COMMIT (an error, a cancelled request): the connection is closed, not
        // handed to the next user inside the open transaction.
        let tx = Pipelined::new(pool.get().await.unwrap());
        tx.begin().await.unwrap();
        tx.client().query_one("SELECT pg_current_xact_id()", &[]).await.unwrap();
        let pid = backend_pid(tx.client()).await;
        drop(tx);
        let c = pool.get().await.unwrap();
        assert_ne!(backend_pid(&c).await, pid, "an unfinished transaction's connection is not reused");
        assert_eq!(xid(&c).await, None);
        drop(c);

        // The last statement fails: the COMMIT behind it rolls back, the error is returned, and
        // the connection is not reused either.
        let tx = Pipelined::new(pool.get().await.unwrap());
        tx.begin().await.unwrap();
        let pid = backend_pid(tx.client()).await;
        let failing = tx.client().prepare("SELECT 1 / 0").await.unwrap();
        assert!(tx.execute_and_commit(&failing, &[]).await.is_err());
        drop(tx);
        let c = pool.get().await.unwrap();
        assert_ne!(backend_pid(&c).await, pid);
        assert_eq!(xid(&c).await, None);
    }
}
