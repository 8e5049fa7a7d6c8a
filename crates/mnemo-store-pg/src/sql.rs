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
    if let Some(t) = f.start_time {
        sql.push_str(&format!(" AND time >= {}", a.push(t)));
    }
    if let Some(t) = f.end_time {
        sql.push_str(&format!(" AND time <= {}", a.push(t)));
    }
    if f.active_only {
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
