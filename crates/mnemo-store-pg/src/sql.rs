//! Small helpers over a pooled transaction: prepared-statement caching, error mapping, and
//! dynamically built `WHERE` clauses with their arguments.

use mnemo_core::StoreError;
use mnemo_core::model::{CollectionId, EventFilter};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

pub type Tx<'a> = deadpool_postgres::Transaction<'a>;
pub type P<'a> = &'a (dyn ToSql + Sync);

pub fn pg(e: tokio_postgres::Error) -> StoreError {
    use tokio_postgres::error::SqlState;
    if e.code() == Some(&SqlState::CHARACTER_NOT_IN_REPERTOIRE) || e.code() == Some(&SqlState::UNTRANSLATABLE_CHARACTER)
    {
        return StoreError::Invalid(
            "text values must not contain NUL (\\u0000) characters on the postgres store".into(),
        );
    }
    match e.as_db_error() {
        Some(db) => StoreError::Backend(format!("postgres: {} ({})", db.message(), db.code().code())),
        None => StoreError::Backend(format!("postgres: {e}")),
    }
}

pub fn is_unique_violation(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION)
}

pub async fn query(tx: &Tx<'_>, sql: &str, p: &[P<'_>]) -> Result<Vec<Row>, StoreError> {
    let st = tx.prepare_cached(sql).await.map_err(pg)?;
    tx.query(&st, p).await.map_err(pg)
}

pub async fn opt(tx: &Tx<'_>, sql: &str, p: &[P<'_>]) -> Result<Option<Row>, StoreError> {
    let st = tx.prepare_cached(sql).await.map_err(pg)?;
    tx.query_opt(&st, p).await.map_err(pg)
}

pub async fn one(tx: &Tx<'_>, sql: &str, p: &[P<'_>]) -> Result<Row, StoreError> {
    let st = tx.prepare_cached(sql).await.map_err(pg)?;
    tx.query_one(&st, p).await.map_err(pg)
}

pub async fn exec(tx: &Tx<'_>, sql: &str, p: &[P<'_>]) -> Result<u64, StoreError> {
    let st = tx.prepare_cached(sql).await.map_err(pg)?;
    tx.execute(&st, p).await.map_err(pg)
}

/// Arguments of a dynamically built statement; `push` returns the placeholder.
#[derive(Default)]
pub struct Args(Vec<Box<dyn ToSql + Sync + Send>>);

impl Args {
    pub fn push(&mut self, v: impl ToSql + Sync + Send + 'static) -> String {
        self.0.push(Box::new(v));
        format!("${}", self.0.len())
    }

    pub fn refs(&self) -> Vec<P<'_>> {
        self.0.iter().map(|b| b.as_ref() as P).collect()
    }
}

/// `WHERE` conditions on `events` for a filter (columns unqualified); `$1` is the collection id.
pub fn event_filter(cid: CollectionId, f: &EventFilter) -> (String, Args) {
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
