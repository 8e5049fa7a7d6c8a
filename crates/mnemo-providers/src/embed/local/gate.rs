//! Admission of query embeddings to the local model's sessions: searches may not take the
//! session writes need, and wait in a bounded queue (past it, a search runs on full text alone).

use mnemo_core::embed::EmbedError;

/// Admission of query embeddings: at most `sessions − 1` at a time (all of them with one
/// session), at most `max_waiting` waiting.
pub struct QueryGate {
    pub(super) running: tokio::sync::Semaphore,
    pub(super) waiting: std::sync::atomic::AtomicUsize,
    pub(super) max_waiting: usize,
}

impl QueryGate {
    pub fn new(sessions: usize, max_waiting: usize) -> Self {
        Self::with_slots(sessions.saturating_sub(1), max_waiting)
    }

    /// `slots` queries at a time (at least one).
    pub(super) fn with_slots(slots: usize, max_waiting: usize) -> Self {
        Self {
            running: tokio::sync::Semaphore::new(slots.max(1)),
            waiting: std::sync::atomic::AtomicUsize::new(0),
            max_waiting,
        }
    }

    /// Waits for a query slot, or refuses at once when too many queries are waiting already.
    pub async fn enter(&self) -> Result<tokio::sync::SemaphorePermit<'_>, EmbedError> {
        use std::sync::atomic::Ordering;
        if let Ok(p) = self.running.try_acquire() {
            return Ok(p);
        }
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= self.max_waiting {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(EmbedError::Transient(format!(
                "query embedding: {} queries already waiting; searching full text only",
                self.max_waiting
            )));
        }
        let p = self.running.acquire().await;
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        p.map_err(|_| EmbedError::Permanent("embedder closed".into()))
    }
}
