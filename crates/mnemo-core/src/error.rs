//! Errors of the domain layer. Front ends map them to statuses once, at their edge; a message for
//! an `Invalid` error always names the field and the allowed range.

use thiserror::Error;

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
    #[error("store backend error: {0}")]
    Backend(String),
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
    #[error("internal error: {0}")]
    Internal(String),
}

impl CoreError {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        CoreError::Invalid { field: field.into(), message: message.into() }
    }
}

impl From<StoreError> for CoreError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(m) => CoreError::NotFound(m),
            StoreError::Conflict(m) => CoreError::Conflict(m),
            StoreError::Invalid(m) => CoreError::invalid("body", m),
            StoreError::Backend(m) => CoreError::Internal(m),
        }
    }
}

pub type CoreResult<T> = Result<T, CoreError>;
