//! Half-precision copies of stored vectors order a scoped search; the f32 vectors score it.
//!
//! Each event's vector has an f16 copy beside the f32 one (schema v12: half the bytes, and a
//! user's copies side by side). [`CopyRanker`] scores a scope's copies against the f32 query and
//! names the events whose exact score could place them among the `k` best: each f16 score is
//! within a bound of the f32 one, so an event whose f16 score plus that bound stays under the
//! k-th best lower bound cannot be in the top k. The search then reads the exact score of the
//! few named — the answer is exactly what scoring every f32 vector gives.

use mnemo_core::embed::dot_and_magnitude;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// See the module documentation. `Id` names an event (the search's: its rowid).
pub struct CopyRanker<'q, Id> {
    qv: &'q [f32],
    k: usize,
    rel: f32,
    abs: f32,
    /// The k best lower bounds (their least is the bar).
    lows: BinaryHeap<Reverse<Score>>,
    /// The events whose upper bound reached the bar when they were offered.
    maybe: Vec<(Id, f32)>,
    floats: Vec<f32>,
}

impl<'q, Id> CopyRanker<'q, Id> {
    pub fn new(qv: &'q [f32], k: usize) -> Self {
        let n = qv.len();
        // |f16 score − f32 score| ≤ Σ|q·h| · rel + abs: each f16 component within 2⁻¹¹
        // (relative: the copies are rounded to nearest, `half::f16::from_f32`) of its f32 value,
        // or 2⁻²⁴ (absolute) below f16's normal range, and each of the two sums within n·2⁻²⁴ of
        // its exact value — with 10% to spare.
        let rel = (2f32.powi(-11) + 2.0 * n as f32 * 2f32.powi(-24)) * 1.1;
        let abs = qv.iter().map(|x| x.abs()).sum::<f32>() * 2f32.powi(-24);
        Self { qv, k, rel, abs, lows: BinaryHeap::with_capacity(k + 1), maybe: Vec::new(), floats: vec![0f32; n] }
    }

    fn bar(&self) -> f32 {
        match self.lows.peek() {
            Some(Reverse(m)) if self.lows.len() >= self.k => m.0,
            _ => f32::NEG_INFINITY,
        }
    }

    /// One event of the scope and its copy (`None`: no copy yet — its exact score is needed).
    /// A copy of another dimension (another model's vector) is passed over.
    pub fn offer(&mut self, id: Id, copy: Option<&[half::f16]>) {
        use half::slice::HalfFloatSliceExt;
        let Some(h) = copy else {
            self.maybe.push((id, f32::INFINITY));
            return;
        };
        if h.len() != self.qv.len() {
            return;
        }
        let mut floats = std::mem::take(&mut self.floats);
        h.convert_to_f32_slice(&mut floats);
        self.offer_widened(id, Some(&floats));
        self.floats = floats;
    }

    /// [`Self::offer`] with the copy already widened to f32 (each value exactly its f16's), as a
    /// search converts its scope's copies before the query vector exists.
    pub fn offer_widened(&mut self, id: Id, copy: Option<&[f32]>) {
        let Some(floats) = copy else {
            self.maybe.push((id, f32::INFINITY));
            return;
        };
        if floats.len() != self.qv.len() {
            return;
        }
        let (score, magnitude) = dot_and_magnitude(self.qv, floats);
        let err = magnitude * self.rel + self.abs;
        self.lows.push(Reverse(Score(score - err)));
        if self.lows.len() > self.k {
            self.lows.pop();
        }
        let b = self.bar();
        if score + err >= b {
            self.maybe.push((id, score + err));
        }
        if self.maybe.len() >= 4 * self.k + 1024 {
            self.maybe.retain(|(_, upper)| *upper >= b);
        }
    }

    /// The events whose exact score is needed: every event of the exact top k is among them.
    pub fn finish(self) -> Vec<Id> {
        let b = self.bar();
        self.maybe.into_iter().filter(|(_, upper)| *upper >= b).map(|(id, _)| id).collect()
    }
}

/// An f32 with a total order (for a heap).
#[derive(PartialEq)]
pub(crate) struct Score(pub f32);

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Vectors packed closer than f16 can tell apart, some equal, some without a copy: the
    /// events named always hold the exact top k, for every k.
    #[test]
    fn the_events_named_hold_the_exact_top_k() {
        let dim = 96;
        let mut seed = 7u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % 20_001) as f32 / 10_000.0 - 1.0
        };
        let base: Vec<f32> = (0..dim).map(|_| next()).collect();
        let mut vectors: Vec<Vec<f32>> = Vec::new();
        for i in 0..300 {
            let noise: Vec<f32> = (0..dim).map(|_| next()).collect();
            let spread = 0.01 * (1 + i % 20) as f32; // some packed within f16's resolution, most not
            let mut v: Vec<f32> = base.iter().zip(&noise).map(|(b, n)| b + spread * n).collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.iter_mut().for_each(|x| *x /= norm);
            // Every fiftieth the same as the one before: equal scores.
            vectors.push(if i % 50 == 49 { vectors[i - 1].clone() } else { v });
        }
        let q = &base;
        let exact: Vec<f32> = vectors.iter().map(|v| q.iter().zip(v).map(|(a, b)| a * b).sum()).collect();
        let copies: Vec<Option<Vec<half::f16>>> = vectors
            .iter()
            .enumerate()
            .map(|(i, v)| (i % 37 != 36).then(|| v.iter().map(|x| half::f16::from_f32(*x)).collect()))
            .collect();
        for k in [1, 2, 5, 10, 50, 299] {
            let mut ranker = CopyRanker::new(q, k);
            for (i, c) in copies.iter().enumerate() {
                ranker.offer(i, c.as_deref());
            }
            let named: std::collections::HashSet<usize> = ranker.finish().into_iter().collect();
            let mut order: Vec<usize> = (0..vectors.len()).collect();
            order.sort_by(|a, b| exact[*b].total_cmp(&exact[*a]));
            let kth = exact[order[k - 1]];
            for (i, s) in exact.iter().enumerate() {
                if *s >= kth {
                    assert!(named.contains(&i), "k = {k}: event {i} ({s}) is in the top k");
                }
            }
            assert!(named.len() < vectors.len() || k > 200, "k = {k}: the copies pruned nothing");
        }
    }

    /// The worst rounding: every component of A's copy half a step below A, and B — exact in
    /// f16 — scoring just under A, above A's copy. A is still named for k = 1 (a bound a quarter
    /// of the shipped one would leave it out).
    #[test]
    fn an_event_its_copy_underrates_most_is_still_named() {
        let n = 96;
        let h = half::f16::from_f32(0.0625); // 2⁻⁴: the next f16 is 2⁻¹⁰ of it above
        let up = half::f16::from_bits(h.to_bits() + 1);
        let step = up.to_f32() - h.to_f32();
        let q = vec![1.0 / (n as f32).sqrt(); n];
        // A's components: just under the midpoint, where rounding would go up to `up`.
        let a = (h.to_f32() + step / 2.0) * (1.0 - 2f32.powi(-20));
        assert_eq!(half::f16::from_f32(a), h);
        // B: `up` in all but enough components to stay under A.
        let b: Vec<half::f16> = (0..n).map(|i| if i < n / 2 - 1 { up } else { h }).collect();
        let (score_a, score_b): (f32, f32) =
            (q.iter().map(|x| x * a).sum(), q.iter().zip(&b).map(|(x, y)| x * y.to_f32()).sum());
        assert!(score_a > score_b && score_b > q.iter().map(|x| x * h.to_f32()).sum::<f32>());
        let mut ranker = CopyRanker::new(&q, 1);
        ranker.offer("a", Some(&vec![h; n]));
        ranker.offer("b", Some(&b));
        assert!(ranker.finish().contains(&"a"), "A is the top 1");
    }
}
