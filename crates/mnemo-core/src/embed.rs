//! The embedding contract. One model per collection: a collection records the model id and
//! dimension it was indexed with, and a server started with another model refuses to serve it
//! (vectors from two models are not comparable — seed 002 §2.2).

use async_trait::async_trait;
use thiserror::Error;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmbedKind {
    /// A search query.
    Query,
    /// A memory being stored.
    Document,
}

#[derive(Debug, Error)]
pub enum EmbedError {
    #[error("transient: {0}")]
    Transient(String),
    #[error("{0}")]
    Permanent(String),
}

#[async_trait]
pub trait Embedder: Send + Sync + 'static {
    /// Identifies the model and its preprocessing, e.g. `use-multilingual-v3-int8`.
    fn model_id(&self) -> &str;
    fn dimension(&self) -> usize;
    /// Added to a query's dot product with a stored vector to make the cosine the search fuses
    /// and thresholds (a model whose cosines are compressed maps them onto [0,1] this way; the
    /// scale is in the query vector). 0 for a plain cosine.
    fn query_offset(&self, _query: &str) -> f32 {
        0.0
    }
    /// How a hybrid search weighs full text against this model's similarity.
    fn fusion(&self) -> crate::ranking::Fusion {
        crate::ranking::Fusion::LEXICAL_LED
    }
    /// The query relevance (`origin_score`) below which a match is noise rather than memory, for
    /// callers that leave weak matches out (MCP's `search_memory` and `recall`). 0.2 was measured
    /// on the earlier local models' short memories; a model with calibrated similarities sets its own.
    fn relevance_floor(&self) -> f64 {
        0.2
    }
    /// The similarity of two stored vectors at or above which their texts are the same memory
    /// (extraction's dedup), unless configured.
    fn duplicate_similarity(&self) -> f32 {
        0.9
    }
    /// One vector per text, in order: stored vectors (`Document`) have unit length; a query's
    /// dot product with them, plus `query_offset`, is its similarity.
    async fn embed(&self, texts: &[String], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError>;
}

/// Cosine similarity of two unit vectors (their dot product).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `(Σ q·h, Σ |q·h|)` in eight lanes the compiler keeps in vector registers (a sum in one
/// accumulator cannot be vectorised: each addition waits for the last). The order of the
/// additions differs from a sequential sum; an error bound over the products (the stores' f16 copies) holds for any order.
pub fn dot_and_magnitude(q: &[f32], h: &[f32]) -> (f32, f32) {
    const L: usize = 8;
    let (mut s, mut m) = ([0f32; L], [0f32; L]);
    let (qc, hc) = (q.chunks_exact(L), h.chunks_exact(L));
    let (qr, hr) = (qc.remainder(), hc.remainder());
    for (a, b) in qc.zip(hc) {
        for i in 0..L {
            let p = a[i] * b[i];
            s[i] += p;
            m[i] += p.abs();
        }
    }
    for (a, b) in qr.iter().zip(hr) {
        s[0] += a * b;
        m[0] += (a * b).abs();
    }
    (s.iter().sum(), m.iter().sum())
}

pub fn normalize(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        v.iter_mut().for_each(|x| *x /= n);
    }
}

/// A deterministic hashing embedder (token hashes into buckets) — for unit tests only: it knows
/// word overlap, not meaning. Never configured in a running server.
pub struct HashingEmbedder {
    pub dim: usize,
}

#[async_trait]
impl Embedder for HashingEmbedder {
    fn model_id(&self) -> &str {
        "test-hashing"
    }

    fn dimension(&self) -> usize {
        self.dim
    }

    async fn embed(&self, texts: &[String], _kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0f32; self.dim];
                for tok in crate::text::search_tokens(t) {
                    let h = tok.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3));
                    v[(h % self.dim as u64) as usize] += 1.0;
                }
                normalize(&mut v);
                v
            })
            .collect())
    }
}
