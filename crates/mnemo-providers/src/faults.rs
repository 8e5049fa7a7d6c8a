//! Fault injection for extraction: the first `fail_first` calls fail with a transient error,
//! then calls go through to the wrapped extractor; every call can be slowed by `delay` (a slow
//! model, so a replica can be killed mid-job). Configured explicitly
//! (`extraction.fault_injection.{fail_first_attempts, delay_ms}`) for tests and recovery drills.

use async_trait::async_trait;
use mnemo_core::extract::{ExtractError, ExtractionInput, ExtractionOutput, Extractor};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

pub struct FaultInjectingExtractor {
    inner: Arc<dyn Extractor>,
    remaining: AtomicU32,
    delay: std::time::Duration,
}

impl FaultInjectingExtractor {
    pub fn new(inner: Arc<dyn Extractor>, fail_first: u32, delay: std::time::Duration) -> Self {
        Self { inner, remaining: AtomicU32::new(fail_first), delay }
    }
}

#[async_trait]
impl Extractor for FaultInjectingExtractor {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn extract(&self, input: ExtractionInput) -> Result<ExtractionOutput, ExtractError> {
        tokio::time::sleep(self.delay).await;
        let before = self.remaining.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if let Ok(n) = before {
            return Err(ExtractError::Transient(format!("injected fault ({} more to come)", n - 1)));
        }
        self.inner.extract(input).await
    }
}
