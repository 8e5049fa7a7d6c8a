//! Errors of the domain layer. Front ends map them to statuses once, at their edge; a message for
//! an `Invalid` error always names the field and the allowed range.

use thiserror::Error;

/// Any error, kept as the cause of a backend or internal failure.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A failure below the domain: what was being done, and the error underneath (if any), so a log
/// can print the whole chain while clients see a generic message.
#[derive(Debug, Error)]
#[error("{message}")]
pub struct Failure {
    pub message: String,
    #[source]
    pub source: Option<BoxError>,
}

impl Failure {
    /// The message and every cause under it, outermost first, joined by `: ` (for logs).
    pub fn chain(&self) -> String {
        let mut out = self.message.clone();
        let mut next = self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static));
        while let Some(e) = next {
            out.push_str(": ");
            out.push_str(&e.to_string());
            next = e.source();
        }
        out
    }
}

/// What a [`crate::Store`] can fail with. Backend failures carry their cause for the log only.
#[derive(Debug, Error)]
pub enum StoreError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    /// Input the backend cannot hold (e.g. a NUL character in a PostgreSQL text filter).
    #[error("{0}")]
    Invalid(String),
    /// The backend cannot be reached right now (a lost or refused database connection): nothing
    /// was done, and the same request may be retried.
    #[error("{0}")]
    Unavailable(String),
    #[error("store backend error: {0}")]
    Backend(#[source] Failure),
}

impl StoreError {
    /// A backend failure described by `message` alone.
    pub fn backend(message: impl Into<String>) -> Self {
        StoreError::Backend(Failure { message: message.into(), source: None })
    }

    /// A backend failure caused by `source`, with what was being done.
    pub fn backend_caused(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        StoreError::Backend(Failure { message: message.into(), source: Some(source.into()) })
    }
}

#[derive(Debug, Error)]
pub enum CoreError {
    /// Bad input: `field` is the JSON path of the offending field.
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Overloaded(String),
    /// A dependency (the database) is unreachable for now; retrying later is the remedy.
    #[error("{0}")]
    Unavailable(String),
    #[error("internal error: {0}")]
    Internal(#[source] Failure),
}

impl CoreError {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        CoreError::Invalid { field: field.into(), message: message.into() }
    }

    /// The error of one item of a list: an `Invalid` field gets the item's path in front
    /// (`memory_info` → `events[3].memory_info`); other errors are kept.
    pub fn in_item(self, list: &str, i: usize) -> Self {
        match self {
            CoreError::Invalid { field, message } => CoreError::invalid(format!("{list}[{i}].{field}"), message),
            other => other,
        }
    }

    /// An internal failure described by `message` alone.
    pub fn internal(message: impl Into<String>) -> Self {
        CoreError::Internal(Failure { message: message.into(), source: None })
    }

    /// An internal failure caused by `source`.
    pub fn internal_caused(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        CoreError::Internal(Failure { message: message.into(), source: Some(source.into()) })
    }
}

impl From<StoreError> for CoreError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(m) => CoreError::NotFound(m),
            StoreError::Conflict(m) => CoreError::Conflict(m),
            StoreError::Invalid(m) => CoreError::invalid("body", m),
            StoreError::Unavailable(m) => CoreError::Unavailable(m),
            e @ StoreError::Backend(_) => CoreError::internal_caused("store", e),
        }
    }
}

pub type CoreResult<T> = Result<T, CoreError>;
