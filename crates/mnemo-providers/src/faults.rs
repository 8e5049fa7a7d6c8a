//! Fault injection for extraction: the first `fail_first` calls fail with a transient error,
//! then calls go through to the wrapped extractor. Configured explicitly
//! (`extraction.fault_injection.fail_first_attempts`) for tests and recovery drills.

use async_trait::async_trait;
use mnemo_core::extract::{ExtractError, ExtractionInput, ExtractionOutput, Extractor};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

pub struct FaultInjectingExtractor {
    inner: Arc<dyn Extractor>,
    remaining: AtomicU32,
}

impl FaultInjectingExtractor {
    pub fn new(inner: Arc<dyn Extractor>, fail_first: u32) -> Self {
        Self { inner, remaining: AtomicU32::new(fail_first) }
    }
}

#[async_trait]
impl Extractor for FaultInjectingExtractor {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn extract(&self, input: ExtractionInput) -> Result<ExtractionOutput, ExtractError> {
        let before = self.remaining.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if let Ok(n) = before {
            return Err(ExtractError::Transient(format!("injected fault ({} more to come)", n - 1)));
        }
        self.inner.extract(input).await
    }
}
