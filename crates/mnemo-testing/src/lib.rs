//! Test support shared by the crates: the store conformance suite every [`mnemo_core::Store`] backend
//! runs ([`conformance`], re-exported here), and [`MemoryStore`], an in-memory store that passes
//! it — so the `Service` can be tested at its own boundary without a database.

mod conformance;
mod memory;

pub use conformance::*;
pub use memory::MemoryStore;

#[cfg(test)]
mod tests {
    use super::*;
    use mnemo_core::store::Store;
    use std::sync::Arc;

    /// Every open is a reopen of the same data (what survives a restart is checked).
    struct MemoryHarness(MemoryStore);

    #[async_trait::async_trait]
    impl StoreHarness for MemoryHarness {
        async fn open(&self) -> Arc<dyn Store> {
            Arc::new(self.0.reopen())
        }
        fn has_webhooks(&self) -> bool {
            false
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_memory_store_passes_the_conformance_suite() {
        run_all(async || MemoryHarness(MemoryStore::new())).await;
    }
}
