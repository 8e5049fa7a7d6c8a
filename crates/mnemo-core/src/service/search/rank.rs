//! How one search ranks its candidates: `Ranker` (fusion, turns, the neighbours' words, a time
//! the query names, threshold, decay and custom weight) and `neighbour_boosts`.

use super::*;

/// How one search scores candidates: fusion of the vector and BM25 signals (an event with turn
/// vectors is as near as its own vector and its best turn together), the neighbours' words, a
/// time the query names, then the threshold, decay and custom weight.
pub(super) struct Ranker<'a> {
    pub(super) c: &'a Collection,
    pub(super) req: &'a EventSearch,
    pub(super) now: Millis,
    pub(super) offset: f32,
    pub(super) fusion: ranking::Fusion,
    pub(super) threshold: f64,
    pub(super) neighbour_weight: f64,
    pub(super) date_weight: f64,
    pub(super) spans: Vec<(Millis, Millis)>,
    pub(super) entity_weight: f64,
    /// The names the query is about (`crate::entities::Question::of`).
    pub(super) entity_names: Vec<String>,
    /// The roles the first candidates ranked tie to those names: found once a search.
    pub(super) aliases: std::sync::OnceLock<crate::entities::Aliases>,
    /// Where the days an event's text writes out are read (the extraction's offset, which wrote them).
    pub(super) tz: chrono::FixedOffset,
    pub(super) turn_weight: f32,
}

impl Ranker<'_> {
    /// The roles the candidates give what the query names ("sister" for "Ingrid"), as search
    /// terms not already in `terms`: the second hop looks for them.
    pub(super) fn role_terms(&self, cands: &[Candidate], terms: &[String]) -> Vec<String> {
        let aliases = self.aliases(cands);
        let mut out: Vec<String> = aliases.roles().iter().flat_map(|r| crate::text::search_tokens(r)).collect();
        out.retain(|t| !terms.contains(t));
        out.dedup();
        out
    }

    /// The roles of what the query names, from the first candidates this search ranks (none
    /// when it names no one, or the lift is off).
    fn aliases(&self, cands: &[Candidate]) -> &crate::entities::Aliases {
        self.aliases.get_or_init(|| match self.entity_names.is_empty() || self.entity_weight <= 0.0 {
            true => Default::default(),
            false => {
                let texts = search_texts(cands);
                crate::entities::Aliases::of(&self.entity_names, &texts.iter().map(String::as_str).collect::<Vec<_>>())
            }
        })
    }

    fn cosine(&self, c: &Candidate) -> Option<f32> {
        match (c.cosine, c.best_turn) {
            (Some(whole), Some(turn)) if self.turn_weight > 0.0 => {
                Some((1.0 - self.turn_weight) * whole + self.turn_weight * turn.cosine)
            }
            (cosine, _) => cosine,
        }
    }

    /// Scores every candidate, keeps the best `limit`, and copies only their events.
    pub(super) fn rank(&self, cands: &[Candidate], layer: Option<&str>) -> Vec<ScoredEvent> {
        let (offset, fusion) = (self.offset, &self.fusion);
        let cosines: Vec<Option<f32>> = cands.iter().map(|c| self.cosine(c)).collect();
        let origins: Vec<f64> =
            cands.iter().zip(&cosines).map(|(c, cos)| fusion.fuse(cos.map(|x| x + offset), c.bm25)).collect();
        let boosts = neighbour_boosts(cands, &cosines, &origins, offset, fusion, self.neighbour_weight);
        let in_spans = |t: Millis| self.spans.iter().any(|(from, to)| (*from..*to).contains(&t));
        // Dated then: made then, or about a day then that its text writes out — a plan is made
        // before its day ("Tomorrow (2026-12-07) I will…") and a story may tell of several days.
        // The text's fields are read where they are (extraction anchors every one but the turns).
        let dated_then = |e: &Event| {
            in_spans(e.time)
                || (!self.spans.is_empty()
                    && e.memory_info
                        .iter()
                        .filter(|(k, _)| *k != "original_messages")
                        .filter_map(|(_, v)| v.as_str())
                        .flat_map(crate::dates::days_named)
                        .any(|d| crate::dates::at_hour(d, 12, self.tz).is_some_and(in_spans)))
        };
        // Names someone the query names by the role the candidates tie to that name (the name's
        // own words are BM25's).
        let aliases = self.aliases(cands);
        let about: Vec<bool> = match aliases.is_empty() {
            true => vec![false; cands.len()],
            false => search_texts(cands).iter().map(|t| aliases.about(&crate::text::lowercase(t))).collect(),
        };
        let req = self.req;
        let mut kept: Vec<(usize, Scores)> = origins
            .into_iter()
            .zip(boosts)
            .enumerate()
            .filter(|(_, (origin, _))| *origin >= self.threshold)
            .map(|(i, (origin, boost))| {
                let e = &cands[i].event;
                let dated = if dated_then(e) { origin * self.date_weight } else { 0.0 };
                let named = if about[i] { origin * self.entity_weight } else { 0.0 };
                let mut scores = ranking::score(
                    origin + boost + dated + named,
                    e,
                    &self.c.schema,
                    self.now,
                    &req.decay,
                    req.custom_weight,
                );
                scores.origin_score = origin;
                (i, scores)
            })
            .collect();
        kept.sort_by(|(i, a), (j, b)| {
            b.score.total_cmp(&a.score).then(cands[*j].event.time.cmp(&cands[*i].event.time))
        });
        kept.truncate(req.limit as usize);
        kept.into_iter()
            .map(|(i, scores)| {
                let event = cands[i].event.clone();
                let layer = layer.map(str::to_string).or_else(|| event.scope.clone());
                ScoredEvent { event, scores, layer, best_turn: cands[i].best_turn.map(|t| t.index) }
            })
            .collect()
    }
}

/// What full-text search reads of each candidate (its text and the messages it came from).
fn search_texts(cands: &[Candidate]) -> Vec<String> {
    cands.iter().map(|c| crate::model::event_search_text(&c.event.memory_info)).collect()
}

/// Per candidate, what the adjacent turns add to its relevance: an event is scored again with
/// `weight` × the BM25 score of the candidate citing the messages right before or after its own
/// (same conversation, else session; message ids one apart) added to its own BM25 score, and
/// gains the difference when that beats its own relevance. The words of a question and of the
/// reply that answers it count together, wherever the chunk boundary fell ("What inspired you to
/// join?" — "I've always had a great respect for our military"). Lending the neighbour's whole
/// relevance instead (an earlier rule) let a strong neighbour lift an unrelated reply.
pub(super) fn neighbour_boosts(
    cands: &[Candidate],
    cosines: &[Option<f32>],
    origins: &[f64],
    offset: f32,
    fusion: &ranking::Fusion,
    weight: f64,
) -> Vec<f64> {
    let mut boosts = vec![0.0; cands.len()];
    if weight <= 0.0 {
        return boosts;
    }
    // Message ids grow within a conversation, across the sessions it was closed into. Each
    // candidate with provenance: (thread, first message id, last message id).
    let spans: Vec<Option<(&str, i64, i64)>> = cands
        .iter()
        .map(|c| {
            let e = &c.event;
            let thread = e.conversation_id.as_deref().or(e.session_id.as_deref())?;
            Some((thread, *e.source_message_ids.iter().min()?, *e.source_message_ids.iter().max()?))
        })
        .collect();
    // The best BM25 score among the candidates starting (ending) at a message: O(n), a search
    // may rank thousands of candidates.
    let mut by_first: HashMap<(&str, i64), f64> = HashMap::new();
    let mut by_last: HashMap<(&str, i64), f64> = HashMap::new();
    for (span, c) in spans.iter().zip(cands) {
        if let (Some((t, lo, hi)), Some(b)) = (span, c.bm25) {
            let first = by_first.entry((t, *lo)).or_insert(b);
            *first = first.max(b);
            let last = by_last.entry((t, *hi)).or_insert(b);
            *last = last.max(b);
        }
    }
    for i in 0..cands.len() {
        let Some((t, lo, hi)) = spans[i] else { continue };
        let after = by_first.get(&(t, hi + 1)).copied().unwrap_or(0.0);
        let before = by_last.get(&(t, lo - 1)).copied().unwrap_or(0.0);
        let lent = after.max(before);
        if lent > 0.0 {
            let own = cands[i].bm25.unwrap_or(0.0).max(0.0);
            let together = fusion.fuse(cosines[i].map(|x| x + offset), Some(own + weight * lent));
            boosts[i] = (together - origins[i]).max(0.0);
        }
    }
    boosts
}
