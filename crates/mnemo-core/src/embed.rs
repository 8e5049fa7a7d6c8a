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

/// Cosine similarity of two unit vectors (their dot product), summed in [`LANES`] lanes.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let [s] = lanes(a, b, |h| h, |p| [p]);
    s
}

/// [`dot`] of `q` and a vector stored as little-endian f32 bytes: the same lanes, so the same sum
/// to the bit as [`dot`] of the decoded vector.
pub fn dot_le_bytes(q: &[f32], blob: &[u8]) -> f32 {
    let [s] = lanes(q, blob.as_chunks::<4>().0, f32::from_le_bytes, |p| [p]);
    s
}

/// [`dot`] of `q` and a vector quantised to one signed byte a value (`round(x · 127)`, as
/// `crate::turns` keeps turn vectors), not yet divided by 127.
pub fn dot_i8(q: &[f32], bytes: &[u8]) -> f32 {
    let [s] = lanes(q, bytes, |b| b as i8 as f32, |p| [p]);
    s
}

/// `(Σ q·h, Σ |q·h|)`, both summed as [`dot`] sums. An error bound over the products (the
/// stores' f16 copies) holds for any order of the additions.
pub fn dot_and_magnitude(q: &[f32], h: &[f32]) -> (f32, f32) {
    let [s, m] = lanes(q, h, |h| h, |p| [p, p.abs()]);
    (s, m)
}

/// How many partial sums a dot product keeps. A sum in one accumulator cannot be vectorised:
/// each addition waits for the last, ~5× slower at 768 dimensions than eight lanes.
pub const LANES: usize = 8;

/// `M` sums of `terms(q[i] · widen(h[i]))` in [`LANES`] lanes each, which the compiler keeps in
/// vector registers: lane `i` sums the terms at `i`, `i + 8`, …, the tail goes to lane 0, and the
/// lanes are added in order. Every dot product here sums in this one order. Of vectors of unequal
/// length, the shorter one's length is summed (as a `zip` would).
#[inline(always)]
fn lanes<T: Copy, const M: usize>(
    q: &[f32],
    h: &[T],
    widen: impl Fn(T) -> f32,
    terms: impl Fn(f32) -> [f32; M],
) -> [f32; M] {
    let n = q.len().min(h.len());
    let (q, h) = (&q[..n], &h[..n]);
    let mut s = [[0f32; LANES]; M];
    let (qc, hc) = (q.as_chunks::<LANES>(), h.as_chunks::<LANES>());
    for (a, b) in qc.0.iter().zip(hc.0) {
        for i in 0..LANES {
            let t = terms(a[i] * widen(b[i]));
            for k in 0..M {
                s[k][i] += t[k];
            }
        }
    }
    for (a, &b) in qc.1.iter().zip(hc.1) {
        let t = terms(a * widen(b));
        for k in 0..M {
            s[k][0] += t[k];
        }
    }
    s.map(|lanes| lanes.iter().sum())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn vector(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 2001) as f32 / 1000.0 - 1.0)
            .collect()
    }

    /// Every form of a stored vector gives the same sum to the bit as [`dot`] of its values, at
    /// lengths with and without a tail past the last lane, and that sum is the sequential one's
    /// up to rounding.
    #[test]
    fn every_dot_product_sums_in_one_order() {
        for n in [1, 7, 8, 13, 768] {
            let (q, h) = (vector(n, 1), vector(n, 2));
            let bytes: Vec<u8> = h.iter().flat_map(|x| x.to_le_bytes()).collect();
            assert_eq!(dot_le_bytes(&q, &bytes).to_bits(), dot(&q, &h).to_bits(), "n = {n}");
            assert_eq!(dot_and_magnitude(&q, &h).0.to_bits(), dot(&q, &h).to_bits(), "n = {n}");
            let sequential: f64 = q.iter().zip(&h).map(|(a, b)| *a as f64 * *b as f64).sum();
            assert!((dot(&q, &h) as f64 - sequential).abs() < 1e-4, "n = {n}");

            let quantised: Vec<u8> = h.iter().map(|x| (x * 127.0).round() as i8 as u8).collect();
            let widened: Vec<f32> = quantised.iter().map(|&b| b as i8 as f32).collect();
            assert_eq!(dot_i8(&q, &quantised).to_bits(), dot(&q, &widened).to_bits(), "n = {n}");
            // Unequal lengths pair the values at the same index, up to the shorter's length.
            assert_eq!(dot(&vector(n + 9, 1), &h).to_bits(), dot(&q, &h).to_bits(), "n = {n}");
            assert_eq!(dot_le_bytes(&vector(n + 9, 1), &bytes).to_bits(), dot(&q, &h).to_bits(), "n = {n}");
        }
    }
}
