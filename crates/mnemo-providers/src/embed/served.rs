//! A local model served elsewhere: EmbeddingGemma on an OpenAI-compatible embeddings server,
//! read by the `openai` provider exactly as the local embedder reads its own vectors.

use super::local::{GEMMA_COSINE_FLOOR, GEMMA_DOCUMENT_PROMPT, GEMMA_QUERY_PROMPT, LocalModel};
use mnemo_core::ranking::Fusion;

/// A local model computed elsewhere — a text-embeddings server running the same model behind
/// the `openai` provider (`embedding.same_as: embeddinggemma-300m`): the prompts to send, and
/// how the answer is read, so its vectors stand in for the local ones (same model id: no
/// reindex either way).
#[derive(Clone, Debug, PartialEq)]
pub struct ServedModel {
    pub id: &'static str,
    pub dimension: usize,
    pub query_prompt: &'static str,
    pub document_prompt: &'static str,
    /// A query's unit vector is multiplied by this…
    pub query_scale: f32,
    /// …and this is its `Embedder::query_offset`.
    pub query_offset: f32,
    pub fusion: Fusion,
    pub relevance_floor: f64,
    pub duplicate_similarity: f32,
}

impl LocalModel {
    /// How a server running this model is read; only EmbeddingGemma is served that way (USE and
    /// the pair run graphs converted for mnemo alone).
    pub fn served(self) -> Result<ServedModel, String> {
        if self != Self::Gemma {
            return Err("embedding.same_as: only embeddinggemma-300m can be served by an embeddings server".into());
        }
        let spec = self.spec();
        Ok(ServedModel {
            id: spec.id,
            dimension: spec.dimension,
            query_prompt: GEMMA_QUERY_PROMPT,
            document_prompt: GEMMA_DOCUMENT_PROMPT,
            query_scale: 1.0 / (1.0 - GEMMA_COSINE_FLOOR),
            query_offset: -GEMMA_COSINE_FLOOR / (1.0 - GEMMA_COSINE_FLOOR),
            fusion: spec.fusion,
            relevance_floor: spec.relevance_floor,
            duplicate_similarity: spec.duplicate_similarity,
        })
    }
}
