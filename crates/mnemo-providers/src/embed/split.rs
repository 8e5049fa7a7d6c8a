//! Queries here, documents elsewhere (`embedding.documents`): a search's query is embedded by one
//! embedder — the local model, no network in the way of a search — and the memories being
//! stored (extraction's chunks and turns, `event/add`, imports, reindex) by another running the
//! same model, e.g. EmbeddingGemma on a GPU's text-embeddings server with `same_as`. One model id,
//! one dimension, one calibration: the vectors meet in one index.

use async_trait::async_trait;
use mnemo_core::embed::{EmbedError, EmbedKind, Embedder};
use mnemo_core::ranking::Fusion;
use std::sync::Arc;

pub struct SplitEmbedder {
    queries: Arc<dyn Embedder>,
    documents: Arc<dyn Embedder>,
}

impl SplitEmbedder {
    /// Refused unless both run the same model (its id and dimension): vectors of two models are
    /// not comparable.
    pub fn new(queries: Arc<dyn Embedder>, documents: Arc<dyn Embedder>) -> Result<Self, String> {
        if queries.model_id() != documents.model_id() || queries.dimension() != documents.dimension() {
            return Err(format!(
                "embedding.documents: runs {} ({} dimensions) but queries run {} ({}); vectors of two models are \
                 not comparable — a server running the local model says so with embedding.documents.same_as",
                documents.model_id(),
                documents.dimension(),
                queries.model_id(),
                queries.dimension()
            ));
        }
        Ok(Self { queries, documents })
    }
}

#[async_trait]
impl Embedder for SplitEmbedder {
    fn model_id(&self) -> &str {
        self.queries.model_id()
    }

    fn dimension(&self) -> usize {
        self.queries.dimension()
    }

    fn query_offset(&self, query: &str) -> f32 {
        self.queries.query_offset(query)
    }

    fn fusion(&self) -> Fusion {
        self.queries.fusion()
    }

    fn relevance_floor(&self) -> f64 {
        self.queries.relevance_floor()
    }

    fn duplicate_similarity(&self) -> f32 {
        self.queries.duplicate_similarity()
    }

    async fn embed(&self, texts: &[String], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        match kind {
            EmbedKind::Query => self.queries.embed(texts, kind).await,
            EmbedKind::Document => self.documents.embed(texts, kind).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mnemo_core::embed::HashingEmbedder;

    /// Records the kinds it was asked for.
    struct Recording {
        inner: HashingEmbedder,
        id: &'static str,
        seen: std::sync::Mutex<Vec<EmbedKind>>,
    }

    #[async_trait]
    impl Embedder for Recording {
        fn model_id(&self) -> &str {
            self.id
        }
        fn dimension(&self) -> usize {
            self.inner.dim
        }
        async fn embed(&self, texts: &[String], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.seen.lock().unwrap().push(kind);
            self.inner.embed(texts, kind).await
        }
    }

    fn recording(id: &'static str, dim: usize) -> Arc<Recording> {
        Arc::new(Recording { inner: HashingEmbedder { dim }, id, seen: Default::default() })
    }

    #[tokio::test]
    async fn queries_and_documents_go_their_own_ways() {
        let (q, d) = (recording("m", 8), recording("m", 8));
        let split = SplitEmbedder::new(q.clone(), d.clone()).unwrap();
        let texts = vec!["peanut allergy".to_string()];
        let a = split.embed(&texts, EmbedKind::Query).await.unwrap();
        let b = split.embed(&texts, EmbedKind::Document).await.unwrap();
        assert_eq!(a, b, "the same model either way");
        assert_eq!(*q.seen.lock().unwrap(), [EmbedKind::Query]);
        assert_eq!(*d.seen.lock().unwrap(), [EmbedKind::Document]);
        assert_eq!(split.model_id(), "m");
    }

    #[test]
    fn two_models_are_refused() {
        for (id, dim) in [("other", 8), ("m", 16)] {
            let e = SplitEmbedder::new(recording("m", 8), recording(id, dim)).err().unwrap();
            assert!(e.starts_with("embedding.documents: runs") && e.contains("same_as"), "{e}");
        }
    }
}
