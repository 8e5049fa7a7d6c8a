//! Turn vectors: an event made of several turns (the `rules` extractor's chunks, any event whose
//! `memory_info.original_messages` holds two or more lines) also keeps one vector per turn, and a
//! search mixes the best turn's cosine into the event's ([`crate::ranking`] via
//! `retrieval.turn_weight`). A chunk's one vector averages four or five turns of small talk; the
//! turn that answers ("Yeah, I painted that lake sunrise last year!") is much nearer the question
//! than the chunk is (docs/history/benchmarks.md, "The best turn's vector").
//!
//! Stored as one blob per event beside its vector, each turn's unit vector in 8 bits a dimension
//! (`round(x · 127)`): a turn of 768 dimensions takes 768 bytes, and the cosine it gives is within
//! ~0.01 of the float one, far below what moves a ranking. The stores delete it with the event's
//! vector and whenever the event's text changes; they find the [`best`] turn of the candidates
//! [`scored`] picks.

use crate::model::original_message_turns;
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};

/// The texts to embed for an event's turns (`name: content` each, as the chunk shows them), or
/// `None` when the event is not made of two or more turns.
pub fn texts(memory_info: &Map<String, Value>) -> Option<Vec<String>> {
    let Some(Value::String(raw)) = memory_info.get("original_messages") else { return None };
    let turns = original_message_turns(raw)?;
    (turns.len() >= 2).then(|| {
        turns
            .into_iter()
            .map(|(who, role, content)| {
                let who = if who.trim().is_empty() { role.as_str() } else { who };
                format!("{who}: {content}")
            })
            .collect()
    })
}

/// How many of a search hop's candidates have their turns scored: the best this many by cosine and
/// the best this many by BM25. The turn signal reorders the head of a ranking; on LoCoMo the best
/// 32 of each already hold all of its gain (docs/history/benchmarks.md), and a get_context asking for 200
/// events then reads at most 128 turn blobs instead of ~600.
pub const SCORED: usize = 64;

/// The candidates whose turns a store scores ([`SCORED`] of each signal), from a hop's two maps.
pub fn scored<'a, A: PartialOrd + Copy, B: PartialOrd + Copy>(
    cosine: &'a HashMap<String, A>,
    bm25: &'a HashMap<String, B>,
) -> HashSet<&'a str> {
    fn best<T: PartialOrd + Copy>(m: &HashMap<String, T>) -> impl Iterator<Item = &str> {
        let mut v: Vec<(&str, T)> = m.iter().map(|(id, s)| (id.as_str(), *s)).collect();
        // Ties by id, so that every store picks the same candidates.
        v.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal).then(a.0.cmp(b.0)));
        v.into_iter().take(SCORED).map(|(id, _)| id)
    }
    best(cosine).chain(best(bm25)).collect()
}

/// The stored form of an event's turn vectors: their dimension (4 bytes, little-endian), then the
/// vectors concatenated, 8 bits a dimension. `None` when there is nothing to store or the lengths
/// differ.
pub fn encode(vectors: &[Vec<f32>]) -> Option<Vec<u8>> {
    let dim = vectors.first()?.len();
    if dim == 0 || vectors.iter().any(|v| v.len() != dim) {
        return None;
    }
    let mut out = Vec::with_capacity(4 + dim * vectors.len());
    out.extend((dim as u32).to_le_bytes());
    out.extend(vectors.iter().flatten().map(|x| (x * 127.0).round().clamp(-127.0, 127.0) as i8 as u8));
    Some(out)
}

/// The turn of an event nearest a query: its place among the event's turns (the lines of its
/// `original_messages`) and its cosine.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BestTurn {
    pub index: usize,
    pub cosine: f32,
}

/// The stored turn with the largest inner product with `query` (the first of equals); `None`
/// when the blob is not of the query's dimension (another model's).
pub fn best(blob: &[u8], query: &[f32]) -> Option<BestTurn> {
    let (dim, turns) = blob.split_first_chunk::<4>()?;
    if u32::from_le_bytes(*dim) as usize != query.len() || query.is_empty() || turns.len() % query.len() != 0 {
        return None;
    }
    turns
        .chunks_exact(query.len())
        .map(|turn| crate::embed::dot_i8(query, turn) / 127.0)
        .enumerate()
        .map(|(index, cosine)| BestTurn { index, cosine })
        .reduce(|a, b| if b.cosine > a.cosine { b } else { a })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_an_event_of_two_or_more_turns_has_turn_texts() {
        let info = |raw: &str| json!({"summary": "s", "original_messages": raw}).as_object().unwrap().clone();
        assert_eq!(
            texts(&info("Nate(user):I painted a sunrise\nJoanna(assistant):Lovely!")),
            Some(vec!["Nate: I painted a sunrise".to_string(), "Joanna: Lovely!".to_string()])
        );
        assert_eq!(texts(&info("(user):hello\n(assistant):hi")).unwrap()[0], "user: hello");
        assert_eq!(texts(&info("Nate(user):only one")), None);
        assert_eq!(texts(&info("no role tag here\nnor here")), None);
        assert_eq!(texts(json!({"summary": "s"}).as_object().unwrap()), None);
    }

    #[test]
    fn the_best_of_each_signal_are_scored_ties_by_id() {
        let cosine: HashMap<String, f32> = (0..100).map(|i| (format!("v{i:03}"), (i / 5) as f32)).collect();
        let bm25: HashMap<String, f64> =
            (0..10).map(|i| (format!("b{i}"), i as f64)).chain([("v099".to_string(), 1.0)]).collect();
        let got = scored(&cosine, &bm25);
        assert_eq!(got.len(), SCORED + 10, "the best of each, one id in both");
        // 12 groups of five above 7, then four of v035..v039 (all 7): the first by id.
        assert!(got.contains("v099") && got.contains("v035") && got.contains("v038"));
        assert!(!got.contains("v039") && !got.contains("v034"), "ties by id");
        assert!(got.contains("b0"));
    }

    #[test]
    fn the_best_turn_is_scored_within_rounding_and_another_dimension_is_none() {
        let unit = |v: Vec<f32>| {
            let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.into_iter().map(|x| x / n).collect::<Vec<f32>>()
        };
        let turns =
            vec![unit(vec![1.0, 0.0, 0.0, 0.2]), unit(vec![0.1, 0.9, 0.3, 0.0]), unit(vec![0.0, 0.0, 1.0, 0.0])];
        let blob = encode(&turns).unwrap();
        assert_eq!(blob.len(), 4 + 12);
        let q = unit(vec![0.2, 1.0, 0.1, 0.0]);
        let exact = turns.iter().map(|t| t.iter().zip(&q).map(|(a, b)| a * b).sum::<f32>()).fold(f32::MIN, f32::max);
        let BestTurn { index, cosine: got } = best(&blob, &q).unwrap();
        assert!((got - exact).abs() < 0.01, "{got} vs {exact}");
        assert_eq!(index, 1);
        // A scaled query (EmbeddingGemma's 1/(1 − f)) scales the answer alike.
        let scaled: Vec<f32> = q.iter().map(|x| x * 4.0 / 3.0).collect();
        assert!((best(&blob, &scaled).unwrap().cosine - got * 4.0 / 3.0).abs() < 1e-5);
        assert_eq!(best(&blob, &[1.0, 0.0, 0.0]), None);
        assert_eq!(best(&blob[..4 + 6], &q), None);
        assert_eq!(best(&[], &q), None);
        assert_eq!(encode(&[vec![1.0, 0.0], vec![1.0]]), None);
        assert_eq!(encode(&[]), None);
    }
}
