//! How a search result's score is made (documented in README "Scoring"). Decided once here
//! so every store ranks alike:
//!
//! ```text
//! score = origin_score × (1 − w + w · time_score) × (1 − c + c · custom_weight_score)
//! ```
//! - `origin_score` ∈ [0,1]: relevance to the query (1 when there is no query);
//! - `time_score` ∈ (0,1]: `0.5 ^ (age_days_past_no_decay_period / half_life_days)`, 1 inside the
//!   no-decay period; `w` = `time_decay_config.weight` ∈ [0,1) — `w = 0` ⇒ time has no effect;
//! - `custom_weight_score` ∈ [0,1]: the event type's `weight`, or its `weight_field`'s value
//!   clamped to [0,1] (values above 1 are read as a 0–10 scale), 0.5 when the type has neither;
//!   `c` = `custom_weight` ∈ [0,1) — `c = 0` ⇒ no effect.

use crate::error::CoreError;
use crate::model::{CollectionSchema, Event, Millis};

pub const DAY_MS: f64 = 86_400_000.0;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimeDecay {
    pub weight: f64,
    pub no_decay_period_days: f64,
    pub half_life_days: f64,
}

impl TimeDecay {
    pub const NONE: TimeDecay = TimeDecay { weight: 0.0, no_decay_period_days: 0.0, half_life_days: 30.0 };

    pub fn new(weight: f64, no_decay_period_days: Option<f64>, half_life_days: f64) -> Result<Self, CoreError> {
        if !(0.0..1.0).contains(&weight) {
            return Err(CoreError::invalid("time_decay_config.weight", format!("must be in [0,1), got {weight}")));
        }
        let nd = no_decay_period_days.unwrap_or(0.0);
        if !(0.0..=10_000.0).contains(&nd) {
            return Err(CoreError::invalid(
                "time_decay_config.no_decay_period",
                format!("must be a number of days in [0,10000], got {nd}"),
            ));
        }
        Ok(Self { weight, no_decay_period_days: nd, half_life_days })
    }
}

pub fn check_custom_weight(c: Option<f64>) -> Result<f64, CoreError> {
    match c {
        None => Ok(0.0),
        Some(c) if (0.0..1.0).contains(&c) => Ok(c),
        Some(c) => Err(CoreError::invalid("custom_weight", format!("must be in [0,1), got {c}"))),
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Scores {
    pub score: f64,
    pub origin_score: f64,
    pub time_score: f64,
    pub custom_weight_score: f64,
}

/// An event with how it scored against a search: what search answers and context assembly
/// lays out.
#[derive(Clone, Debug)]
pub struct ScoredEvent {
    pub event: Event,
    pub scores: Scores,
    /// The scope layer the result came from (`global` when found by the fallback).
    pub layer: Option<String>,
    /// Which of its turns is nearest the query by meaning ([`crate::turns::best`]), when the
    /// search scored its turn vectors: what an excerpt shows when no query term matches.
    pub best_turn: Option<usize>,
}

impl ScoredEvent {
    /// A result found otherwise than by its turns' vectors (a listing, an added reply).
    pub fn new(event: Event, scores: Scores, layer: Option<String>) -> Self {
        Self { event, scores, layer, best_turn: None }
    }
}

/// How a search fuses a candidate's two signals into its relevance in [0,1]:
///
/// `mixed = text_weight · t + (1 − text_weight) · v`, with `t = bm25 / (bm25 + bm25_half)`
///
/// where `v` = cosine similarity (as the embedder calibrates it) clamped to [0,1]; the relevance
/// is `max(v, mixed)` when `keep_cosine`, else `mixed`. The embedder chooses
/// ([`crate::embed::Embedder::fusion`]): how far its vectors can be trusted is a property of the
/// model, measured on LoCoMo dev (docs/history/benchmarks.md).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fusion {
    /// The weight of the full-text signal.
    pub text_weight: f64,
    /// The BM25 score at which the full-text signal counts half: one match of a rare term,
    /// roughly. A match on a word most memories share ("user", "用户") scores far below it.
    pub bm25_half: f64,
    /// A memory never scores below its own cosine: a cross-lingual match with no shared words
    /// keeps its full semantic score, and a `similarity_threshold` keeps its meaning as a cosine
    /// floor.
    pub keep_cosine: bool,
}

impl Fusion {
    /// Strong lexical evidence leads, weak lexical evidence (one common word) barely counts, and
    /// a memory never scores below its own cosine: for models whose vectors alone find far less
    /// than BM25 (USE, the USE + e5 pair, and any configured model by default).
    pub const LEXICAL_LED: Fusion = Fusion { text_weight: 0.8, bm25_half: 4.0, keep_cosine: true };

    pub fn fuse(&self, cosine: Option<f32>, bm25: Option<f64>) -> f64 {
        let v = cosine.map(|c| (c as f64).clamp(0.0, 1.0)).unwrap_or(0.0);
        let t = bm25.map(|b| b.max(0.0) / (b.max(0.0) + self.bm25_half)).unwrap_or(0.0);
        let mixed = self.text_weight * t + (1.0 - self.text_weight) * v;
        if self.keep_cosine { v.max(mixed) } else { mixed }
    }
}

pub fn time_score(event_time: Millis, now: Millis, d: &TimeDecay) -> f64 {
    let age_days = ((now - event_time) as f64 / DAY_MS - d.no_decay_period_days).max(0.0);
    0.5f64.powf(age_days / d.half_life_days.max(1e-9))
}

pub fn custom_weight_score(e: &Event, schema: &CollectionSchema) -> f64 {
    let Some(def) = schema.event_type(&e.memory_type) else {
        return 0.5;
    };
    if let Some(f) = &def.weight_field
        && let Some(v) = e.memory_info.get(f).and_then(|v| v.as_f64())
    {
        return if v > 1.0 { (v / 10.0).clamp(0.0, 1.0) } else { v.max(0.0) };
    }
    def.weight.unwrap_or(0.5)
}

pub fn score(origin: f64, e: &Event, schema: &CollectionSchema, now: Millis, decay: &TimeDecay, custom: f64) -> Scores {
    let t = time_score(e.time, now, decay);
    let cw = custom_weight_score(e, schema);
    let s = origin * (1.0 - decay.weight + decay.weight * t) * (1.0 - custom + custom * cw);
    Scores { score: s, origin_score: origin, time_score: t, custom_weight_score: cw }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(time: Millis) -> Event {
        crate::model::NewEvent::of_user(1, "event_v1", "u", Default::default(), time).stored_as("e".into())
    }

    #[test]
    fn weight_zero_means_time_has_no_effect() {
        let s = CollectionSchema::default();
        let now = 1_000 * DAY_MS as i64;
        let d = TimeDecay::new(0.0, None, 30.0).unwrap();
        assert_eq!(score(0.8, &ev(now), &s, now, &d, 0.0).score, score(0.8, &ev(0), &s, now, &d, 0.0).score);
    }

    #[test]
    fn no_decay_inside_the_period_then_halves_per_half_life() {
        let now = 1_000 * DAY_MS as i64;
        let d = TimeDecay::new(0.5, Some(3.0), 30.0).unwrap();
        assert_eq!(time_score(now - 2 * DAY_MS as i64, now, &d), 1.0);
        assert!((time_score(now - 33 * DAY_MS as i64, now, &d) - 0.5).abs() < 1e-9);
        let s = CollectionSchema::default();
        assert!(
            score(1.0, &ev(now), &s, now, &d, 0.0).score
                > score(1.0, &ev(now - 60 * DAY_MS as i64), &s, now, &d, 0.0).score
        );
    }

    #[test]
    fn fusion_never_scores_below_the_cosine() {
        let fuse = |c, b| Fusion::LEXICAL_LED.fuse(c, b);
        assert_eq!(fuse(Some(0.7), None), 0.7f32 as f64);
        assert!((fuse(Some(0.3), Some(4.0)) - (0.8 * 0.5 + 0.2 * 0.3f32 as f64)).abs() < 1e-9);
        assert_eq!(fuse(Some(0.9), Some(0.1)), 0.9f32 as f64, "a weak lexical match cannot lower a strong cosine");
        assert!(fuse(Some(0.2), Some(0.7)) < fuse(Some(0.45), None), "one common word does not beat meaning");
        assert!(fuse(Some(0.2), Some(20.0)) > fuse(Some(0.6), None), "a strong lexical match leads");
        assert_eq!(fuse(None, None), 0.0);
        assert_eq!(fuse(Some(-0.2), None), 0.0);
        // A vector-led fusion (EmbeddingGemma's shape), and one without the cosine floor.
        let led = Fusion { text_weight: 0.4, bm25_half: 8.0, keep_cosine: true };
        assert!((led.fuse(Some(0.5), Some(8.0)) - (0.4 * 0.5 + 0.6 * 0.5)).abs() < 1e-9);
        assert_eq!(led.fuse(Some(0.6), Some(1.0)), 0.6f32 as f64);
        let convex = Fusion { keep_cosine: false, ..led };
        assert!(convex.fuse(Some(0.6), Some(1.0)) < 0.6, "without the floor a weak match pulls it down");
    }

    #[test]
    fn ranges_are_checked() {
        assert!(TimeDecay::new(1.0, None, 30.0).is_err());
        assert!(TimeDecay::new(-0.1, None, 30.0).is_err());
        assert!(TimeDecay::new(0.5, Some(10_001.0), 30.0).is_err());
        assert!(check_custom_weight(Some(1.0)).is_err());
        assert_eq!(check_custom_weight(None).unwrap(), 0.0);
    }
}
