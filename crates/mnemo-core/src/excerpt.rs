//! Excerpts: when the budget is shared among many memories, a long one is shown by the turn that
//! answers the question, so that the context holds more distinct memories.
//!
//! An event the rules extractor made from several turns keeps each turn in
//! `memory_info.original_messages`, one line per source message (`name(role):content`). Once
//! the events shown whole fill [`Focus::whole_share`] of the budget, each further such event is
//! shown as its turn that best matches the query, and the turn after it when that turn asks (the
//! answer is the reply). A turn matches by the query's terms, each weighted by its rarity among
//! the candidates' turns; a turn by someone the query names counts as one more of its rarest
//! terms ("What does Nate play?": the answer is Nate's turn far more often than the other
//! side's). An event no query term matches (found by meaning alone) is shown by the turn whose
//! vector its search found nearest the query ([`ScoredEvent::best_turn`]), and whole when the
//! search did not score its turns.
//!
//! The copy reported as included says what was shown: its `summary` is the excerpt, its
//! `source_message_ids` are the shown turns', and `memory_info.excerpt` is `true`; the stored
//! event is unchanged.

use crate::model::{Event, Role, original_message_turns};
use crate::ranking::ScoredEvent;
use crate::text::Locale;
use serde_json::Value;
use std::collections::HashMap;

/// How a context shows long memories.
#[derive(Clone, Debug)]
pub struct Focus {
    /// The query's search terms ([`crate::text::search_tokens`]).
    pub terms: Vec<String>,
    /// Events are shown whole until they fill this share of the budget (1 = always whole).
    pub whole_share: f64,
}

impl Default for Focus {
    fn default() -> Self {
        Self { terms: Vec::new(), whole_share: 1.0 }
    }
}

/// A turn of an event, as its `original_messages` line holds it.
struct Turn<'a> {
    who: &'a str,
    role: Role,
    content: &'a str,
    message_id: i64,
}

/// The turns of an event, when each line of `original_messages` is one of its source messages.
fn turns(e: &Event) -> Option<Vec<Turn<'_>>> {
    let Some(Value::String(raw)) = e.memory_info.get("original_messages") else { return None };
    let lines = original_message_turns(raw)?;
    (lines.len() == e.source_message_ids.len()).then(|| {
        lines
            .into_iter()
            .zip(&e.source_message_ids)
            .map(|((who, role, content), &message_id)| Turn { who, role, content, message_id })
            .collect()
    })
}

/// A turn longer than this is shown cut, as the rules extractor's summary cuts it (half of its
/// default 600 characters).
const TURN_CHARS: usize = 300;

/// Builds excerpts for one context. The first time one is asked for, every turn of the
/// candidates is matched against the query's terms once: the terms' weights come from how many of
/// those turns hold them (rarer weighs more), and each turn keeps which terms it holds.
pub struct Excerpter<'a> {
    focus: &'a Focus,
    /// The query's distinct terms (at most 64: a turn's matches are a bit set).
    terms: Vec<&'a str>,
    candidates: Vec<&'a ScoredEvent>,
    matched: Option<Matches>,
}

struct Matches {
    /// Per term, ln(1 + turns / (1 + turns holding it)).
    weight: Vec<f64>,
    /// Per candidate event id, per turn, the terms it holds.
    turns: HashMap<String, Vec<u64>>,
}

fn holds(terms: &[&str], text: &str) -> u64 {
    let have = crate::text::term_set(text);
    terms.iter().enumerate().filter(|(_, t)| have.contains(**t)).fold(0, |m, (i, _)| m | 1 << i)
}

impl<'a> Excerpter<'a> {
    pub fn new(focus: &'a Focus, candidates: impl IntoIterator<Item = &'a ScoredEvent>) -> Self {
        let mut terms: Vec<&str> = Vec::new();
        for t in &focus.terms {
            if !terms.contains(&t.as_str()) && terms.len() < 64 {
                terms.push(t);
            }
        }
        Self { focus, terms, candidates: candidates.into_iter().collect(), matched: None }
    }

    /// Whether excerpts are shown at all.
    pub fn enabled(&self) -> bool {
        !self.terms.is_empty() && self.focus.whole_share < 1.0
    }

    /// Whether an event is to be shown as an excerpt, `used` tokens of `budget` being taken.
    pub fn applies(&self, used: usize, budget: usize) -> bool {
        self.enabled() && used as f64 >= self.focus.whole_share * budget as f64
    }

    fn matches(&mut self) -> &Matches {
        let (terms, candidates) = (&self.terms, &self.candidates);
        self.matched.get_or_insert_with(|| {
            let mut held = vec![0usize; terms.len()];
            let mut n = 0usize;
            let mut turns_of = HashMap::new();
            for e in candidates {
                let Some(ts) = turns(&e.event) else { continue };
                let masks: Vec<u64> = ts.iter().map(|t| holds(terms, t.content)).collect();
                for m in &masks {
                    n += 1;
                    for (i, h) in held.iter_mut().enumerate() {
                        *h += (m >> i & 1) as usize;
                    }
                }
                turns_of.insert(e.event.id.clone(), masks);
            }
            let weight = held.iter().map(|&h| (1.0 + n as f64 / (1.0 + h as f64)).ln()).collect();
            Matches { weight, turns: turns_of }
        })
    }

    /// The event shown as its best-matching turns, or `None` when it is to be shown whole.
    pub fn excerpt(&mut self, e: &ScoredEvent, locale: Locale) -> Option<ScoredEvent> {
        let ts = turns(&e.event)?;
        if ts.len() < 2 || !self.enabled() {
            return None;
        }
        let terms = self.terms.clone();
        let m = self.matches();
        let masks = match m.turns.get(&e.event.id) {
            Some(masks) => masks.clone(),
            None => ts.iter().map(|t| holds(&terms, t.content)).collect(),
        };
        let score = |mask: u64| -> f64 {
            m.weight.iter().enumerate().filter(|(i, _)| mask >> i & 1 == 1).map(|(_, w)| w).sum()
        };
        let best = if masks.iter().all(|&mask| score(mask) <= 0.0) {
            // Found by meaning alone: the turn its search found nearest, if it scored them.
            e.best_turn.filter(|&i| i < ts.len())?
        } else {
            let named_bonus = m.weight.iter().copied().fold(0.0, f64::max);
            let turn_score = |(t, &mask): (&Turn, &u64)| -> f64 {
                let named = crate::text::term_set(t.who).iter().any(|w| terms.contains(&w.as_str()));
                score(mask) + if named { named_bonus } else { 0.0 }
            };
            // The first of the best-scoring turns.
            let scores: Vec<f64> = ts.iter().zip(&masks).map(turn_score).collect();
            (0..scores.len()).fold(0, |b, i| if scores[i] > scores[b] { i } else { b })
        };
        let to = if best + 1 < ts.len() && crate::text::asks(ts[best].content) { best + 1 } else { best };
        let from = best;
        let (user, assistant, colon) = match locale {
            Locale::Zh => ("用户", "助手", "："),
            Locale::En => ("User", "Assistant", ": "),
        };
        let mut text: Vec<String> = Vec::new();
        if from > 0 {
            text.push("…".into());
        }
        for t in &ts[from..=to] {
            let who = match (t.who, t.role) {
                (w, r) if w != r.as_str() && !w.trim().is_empty() => w,
                (_, Role::User) => user,
                _ => assistant,
            };
            text.push(format!("{who}{colon}{}", cut(t.content, TURN_CHARS)));
        }
        if to + 1 < ts.len() {
            text.push("…".into());
        }
        // Only a memory whose text is its turns (the rules extractor's) is shown by one of them,
        // and only when that is shorter: a written summary (the llm extractor's) stays as written.
        // (Most of the turn's words in the text: extraction may have anchored a date in it.)
        let whole = e.event.text();
        let said = crate::text::term_set(&cut(ts[best].content, TURN_CHARS));
        let shown_whole = crate::text::term_set(&whole);
        let text = text.join(" ");
        if said.iter().filter(|w| shown_whole.contains(*w)).count() * 5 < said.len() * 4 || text.len() >= whole.len() {
            return None;
        }
        let mut shown = e.clone();
        shown.event.source_message_ids = ts[from..=to].iter().map(|t| t.message_id).collect();
        shown.event.memory_info.insert("summary".into(), Value::String(text));
        shown.event.memory_info.insert("excerpt".into(), Value::Bool(true));
        Some(shown)
    }
}

fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::original_message_line;
    use crate::ranking::Scores;
    use serde_json::json;

    /// An event the rules extractor would make of these turns (`(speaker, role, content)`).
    fn chunk(id: &str, first_message: i64, turns: &[(&str, &str, &str)]) -> ScoredEvent {
        let summary = turns.iter().map(|(w, _, c)| format!("{w}: {c}")).collect::<Vec<_>>().join(" ");
        let raw = turns
            .iter()
            .map(|(w, r, c)| original_message_line(Some(w), Role::parse(r).unwrap(), c))
            .collect::<Vec<_>>()
            .join("\n");
        let event = Event {
            id: id.into(),
            memory_info: json!({"summary": summary, "original_messages": raw}).as_object().unwrap().clone(),
            source_message_ids: (first_message..first_message + turns.len() as i64).collect(),
            ..Default::default()
        };
        ScoredEvent::new(event, Scores::default(), None)
    }

    fn march() -> ScoredEvent {
        chunk(
            "march",
            10,
            &[
                ("John", "user", "I went to a veterans' march last weekend, it was amazing."),
                ("Maria", "assistant", "Wow, John! What inspired you to join the march?"),
                ("John", "user", "I've always had a great respect for our military."),
                ("Maria", "assistant", "That is lovely. I baked bread for the shelter today."),
            ],
        )
    }

    fn focus(q: &str) -> Focus {
        Focus { terms: crate::text::search_tokens(q), whole_share: 0.0 }
    }

    #[test]
    fn the_best_matching_turn_is_shown_with_its_reply_and_cites_only_what_is_shown() {
        let e = march();
        let f = focus("What inspired John to join the march?");
        let x = Excerpter::new(&f, [&e]).excerpt(&e, Locale::En).expect("an excerpt");
        assert_eq!(
            x.event.text(),
            "… Maria: Wow, John! What inspired you to join the march? John: I've always had a great respect for our military. …"
        );
        assert_eq!(x.event.source_message_ids, vec![11, 12]);
        assert_eq!(x.event.memory_info["excerpt"], json!(true));
        assert_eq!(x.event.id, "march");
    }

    #[test]
    fn a_turn_that_does_not_ask_is_shown_alone() {
        let e = march();
        let f = focus("Who baked bread for the shelter?");
        let x = Excerpter::new(&f, [&e]).excerpt(&e, Locale::En).expect("an excerpt");
        assert_eq!(x.event.source_message_ids, vec![13]);
        assert_eq!(x.event.text(), "… Maria: That is lovely. I baked bread for the shelter today.");
    }

    #[test]
    fn a_turn_by_the_person_the_query_names_wins_a_tie() {
        // "weekend" is in John's first turn and Maria's last; the query names John.
        let e = chunk(
            "w",
            1,
            &[
                ("John", "user", "This weekend I ran my first marathon."),
                ("Maria", "assistant", "Amazing!"),
                ("Maria", "assistant", "This weekend I painted the fence."),
            ],
        );
        let x = Excerpter::new(&focus("What did John do this weekend?"), [&e]).excerpt(&e, Locale::En).unwrap();
        assert_eq!(x.event.source_message_ids, vec![1]);
        let x = Excerpter::new(&focus("What did Maria do this weekend?"), [&e]).excerpt(&e, Locale::En).unwrap();
        assert_eq!(x.event.source_message_ids, vec![3]);
    }

    #[test]
    fn rare_terms_decide_among_turns() {
        // "march" is in every turn of the other candidates; "military" only here.
        let others: Vec<ScoredEvent> = (0..5)
            .map(|i| {
                chunk(
                    &format!("o{i}"),
                    100 + i * 10,
                    &[("A", "user", "the march"), ("B", "assistant", "a march"), ("A", "user", "march on")],
                )
            })
            .collect();
        let e = march();
        let f = focus("military march");
        let mut x = Excerpter::new(&f, others.iter().chain([&e]));
        assert_eq!(x.excerpt(&e, Locale::En).unwrap().event.source_message_ids, vec![12]);
    }

    #[test]
    fn an_event_found_by_meaning_alone_is_shown_by_its_nearest_turn() {
        let mut e = march();
        e.best_turn = Some(2);
        let f = focus("Why does he admire soldiers?");
        let x = Excerpter::new(&f, [&e]).excerpt(&e, Locale::En).expect("an excerpt");
        assert_eq!(x.event.text(), "… John: I've always had a great respect for our military. …");
        assert_eq!(x.event.source_message_ids, vec![12]);
        // A turn that asks brings its reply, as with a term's match.
        e.best_turn = Some(1);
        let x = Excerpter::new(&f, [&e]).excerpt(&e, Locale::En).unwrap();
        assert_eq!(x.event.source_message_ids, vec![11, 12]);
        // A term's match decides over the vector's turn.
        let x = Excerpter::new(&focus("bread for the shelter"), [&e]).excerpt(&e, Locale::En).unwrap();
        assert_eq!(x.event.source_message_ids, vec![13]);
        e.best_turn = Some(4);
        assert!(Excerpter::new(&f, [&e]).excerpt(&e, Locale::En).is_none(), "a turn it does not have: whole");
    }

    #[test]
    fn whole_when_no_term_matches_or_the_turns_are_unknown() {
        let e = march();
        let f = focus("favourite pasta recipe");
        assert!(
            Excerpter::new(&f, [&e]).excerpt(&e, Locale::En).is_none(),
            "found by meaning alone, its turns not scored: shown whole"
        );
        let mut odd = march();
        odd.event.source_message_ids.pop();
        let f = focus("military");
        assert!(Excerpter::new(&f, [&odd]).excerpt(&odd, Locale::En).is_none(), "lines and messages disagree");
        let one = chunk("s", 1, &[("A", "user", "military march")]);
        assert!(Excerpter::new(&f, [&one]).excerpt(&one, Locale::En).is_none(), "one turn: shown whole");
        let off = Focus { whole_share: 1.0, ..focus("military") };
        assert!(!Excerpter::new(&off, [&e]).enabled());
        assert!(!Excerpter::new(&focus(""), [&e]).enabled(), "no query: whole");
    }

    #[test]
    fn a_written_summary_stays_as_written() {
        // The llm extractor's events cite their turns but show a summary of them.
        let mut e = march();
        e.event
            .memory_info
            .insert("summary".into(), json!("John joined a veterans' march out of respect for the military."));
        let f = focus("What inspired John to join the march?");
        assert!(Excerpter::new(&f, [&e]).excerpt(&e, Locale::En).is_none());
    }

    #[test]
    fn turns_without_a_name_take_the_locale_labels() {
        let e = chunk(
            "zh",
            1,
            &[
                ("user", "user", "我家宝宝1岁"),
                ("assistant", "assistant", "好的"),
                ("user", "user", "最近喝奶粉总胀气"),
                ("assistant", "assistant", "建议无乳糖配方"),
            ],
        );
        let f = focus("奶粉胀气");
        let x = Excerpter::new(&f, [&e]).excerpt(&e, Locale::Zh).expect("an excerpt");
        assert_eq!(x.event.text(), "… 用户：最近喝奶粉总胀气 …");
    }
}
