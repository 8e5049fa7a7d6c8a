//! `mnemo bench locomo --e2e`: what a user's LLM would actually see. The turns go through
//! `streaming_write` (default trigger) → rules extraction → `get_context` (a fresh conversation,
//! query = the question, the conversation's user) at 600, 1,200 and 2,400 tokens with the event
//! limit left to the budget (200: `min(limit, max_tokens/24)` events are ranked), and at 1,200
//! tokens with limit 10 (the setting of the figures before 2026-12-01).
//!
//! - **present**: every evidence turn of the question is in the context — an event in it cites
//!   the turn (provenance) *and* most (> 50 %) of the turn's words of 3+ letters appear in
//!   `context_str`. A cited turn that the summary or the budget cut away does not count.
//! - **cited**: provenance alone (what earlier versions reported), for comparison.
//! - **answer**: the gold answer, normalised (case, punctuation, number words; dates as the
//!   context writes them, `2023-05-07`; a list answer needs every item), appears in
//!   `context_str`. Questions without an answer (adversarial) are left out of this column.

use super::locomo_data::{Conversation, Question, parse_time};
use crate::bench::percentile;
use anyhow::{Context, Result};
use mnemo_core::ExtractTrigger;
use mnemo_core::model::*;
use mnemo_core::ranking::TimeDecay;
use mnemo_core::service::{ContextRequest, Include, IncomingMessage, Service, Target, WriteRequest};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

/// (max_tokens, event limit) per run.
pub const RUNS: [(u32, u32); 4] = [(600, 200), (1200, 200), (2400, 200), (1200, 10)];

/// The runs: [`RUNS`], or `MNEMO_BENCH_RUNS=300/200,600/200` (max_tokens/event limit each) to
/// look where a set's contexts do not hold everything (a small set saturates at 1,200 tokens).
fn runs() -> anyhow::Result<Vec<(u32, u32)>> {
    let Ok(spec) = std::env::var("MNEMO_BENCH_RUNS") else { return Ok(RUNS.to_vec()) };
    spec.split(',')
        .map(|r| {
            let (t, l) = r.trim().split_once('/').unwrap_or((r.trim(), "200"));
            Ok((t.parse()?, l.parse()?))
        })
        .collect::<Result<_, std::num::ParseIntError>>()
        .map_err(|e| anyhow::anyhow!("MNEMO_BENCH_RUNS: {e} (expected e.g. 300/200,600/200)"))
}

#[derive(Default, Clone, Copy)]
struct Tally {
    present: usize,
    /// Present in the line of an event that cites it (not only somewhere in the context).
    own_line: usize,
    cited: usize,
    answer: usize,
    answerable: usize,
    n: usize,
}

impl Tally {
    fn add(&mut self, o: &Tally) {
        self.present += o.present;
        self.own_line += o.own_line;
        self.cited += o.cited;
        self.answer += o.answer;
        self.answerable += o.answerable;
        self.n += o.n;
    }

    fn row(&self) -> String {
        let r = |a: usize, n: usize| if n == 0 { "—".to_string() } else { format!("{:.3}", a as f64 / n as f64) };
        format!(
            "{} | {} | {} | {} | {} | {}",
            r(self.present, self.n),
            r(self.own_line, self.n),
            r(self.cited, self.n),
            r(self.answer, self.answerable),
            self.n,
            self.answerable
        )
    }
}

/// The words of a text, lowercased; Chinese has no spaces, so a run of Chinese characters gives
/// its character pairs (a date the service writes into a turn — `周日（2024-12-01）` — then
/// splits no word it would have been part of).
pub fn words(text: &str) -> Vec<String> {
    let han = mnemo_core::text::is_han;
    let mut out = Vec::new();
    for token in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        let chars: Vec<char> = token.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let cjk = han(chars[i]);
            let j = (i..chars.len()).find(|&k| han(chars[k]) != cjk).unwrap_or(chars.len());
            let run = &chars[i..j];
            match (cjk, run.len()) {
                (true, n) if n > 1 => out.extend(run.windows(2).map(|p| p.iter().collect::<String>())),
                _ => out.push(run.iter().collect::<String>().to_lowercase()),
            }
            i = j;
        }
    }
    out
}

/// Whether most of a turn's words (those of 3+ letters and Chinese character pairs, or all when
/// it has none) are in `shown`.
pub fn mostly_shown(turn: &str, shown: &HashSet<String>) -> bool {
    let all = words(turn);
    let long: Vec<&String> =
        all.iter().filter(|w| w.chars().count() >= 3 || w.chars().any(mnemo_core::text::is_han)).collect();
    let ws: Vec<&String> = if long.is_empty() { all.iter().collect() } else { long };
    if ws.is_empty() {
        return true;
    }
    ws.iter().filter(|w| shown.contains(w.as_str())).count() * 2 > ws.len()
}

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];
const NUMBERS: [&str; 21] = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
];

/// Words with number words as digits and dates as the context writes them (`2023 05 07`,
/// `2023 05` for a month): "7 May 2023", "May 7, 2023" and "May 2023" all become ISO order.
pub fn normalize(text: &str) -> String {
    let ws: Vec<String> =
        words(text).into_iter().map(|w| NUMBERS.iter().position(|n| *n == w).map_or(w, |i| i.to_string())).collect();
    let month =
        |w: &str| MONTHS.iter().position(|m| *m == w || (w.len() >= 3 && w.len() < m.len() && m.starts_with(w)));
    let day = |w: &str| w.parse::<u32>().ok().filter(|d| (1..=31).contains(d));
    let year = |w: &str| w.parse::<u32>().ok().filter(|y| (1900..=2100).contains(y));
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ws.len() {
        let w = |k: usize| ws.get(i + k).map(String::as_str).unwrap_or("");
        // 7 May 2023
        if let (Some(d), Some(m), Some(y)) = (day(w(0)), month(w(1)), year(w(2))) {
            out.push(format!("{y} {:02} {d:02}", m + 1));
            i += 3;
        // May 7 2023
        } else if let (Some(m), Some(d), Some(y)) = (month(w(0)), day(w(1)), year(w(2))) {
            out.push(format!("{y} {:02} {d:02}", m + 1));
            i += 3;
        // May 2023
        } else if let (Some(m), Some(y)) = (month(w(0)), year(w(1))) {
            out.push(format!("{y} {:02}", m + 1));
            i += 2;
        } else {
            out.push(ws[i].clone());
            i += 1;
        }
    }
    out.join(" ")
}

/// Whether the gold answer is in the (normalised) context: the whole answer, or every item of a
/// list answer ("pottery, camping, painting"), or — for a date relative to another date ("the
/// week before 9 June 2023") — the dates it names.
pub fn answer_in(answer: &str, context_norm: &str) -> bool {
    let padded = format!(" {context_norm} ");
    // Chinese has no spaces between words: there a normalised answer only has to be a substring.
    let cjk = |s: &str| s.chars().any(mnemo_core::text::is_han);
    let unspaced = context_norm.replace(' ', "");
    let has = |a: &str| {
        let a = normalize(a);
        if cjk(&a) {
            return unspaced.contains(&a.replace(' ', ""));
        }
        !a.is_empty() && padded.contains(&format!(" {a} "))
    };
    if has(answer) {
        return true;
    }
    let items: Vec<&str> = answer
        .split([',', ';', '，', '、', '；', '（', '）', '(', ')'])
        .flat_map(|p| p.split(" and "))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    if items.len() > 1 && items.iter().all(|i| has(i)) {
        return true;
    }
    let dates: Vec<String> = normalize(answer)
        .split(' ')
        .collect::<Vec<_>>()
        .windows(3)
        .filter(|w| {
            w[0].len() == 4
                && w[1].len() == 2
                && w[2].len() == 2
                && w.iter().all(|p| p.chars().all(|c| c.is_ascii_digit()))
        })
        .map(|w| w.join(" "))
        .collect();
    let relative = ["before", "after", "week", "weekend", "of"].iter().any(|r| words(answer).iter().any(|w| w == r));
    relative && !dates.is_empty() && dates.iter().all(|d| padded.contains(&format!(" {d} ")))
}

const E2E_COLLECTION: &str = "locomo_e2e";

/// Every turn through `streaming_write` (default trigger, each LoCoMo session closed at its end)
/// and the rules extraction run to completion: what a user's deployment would hold.
pub(super) async fn ingest(svc: &Arc<Service>, convs: &[Conversation]) -> Result<Target> {
    let target = Target { project: "default".into(), collection: E2E_COLLECTION.into() };
    let t0 = Instant::now();
    let mut msgs = 0usize;
    for c in convs {
        for s in &c.sessions {
            let base = parse_time(&s.time)?;
            let conv = format!("{}/{}", c.conversation_id, s.session_id);
            for (i, m) in s.messages.iter().enumerate() {
                let role = if m.role == "user" { Role::User } else { Role::Assistant };
                svc.streaming_write(WriteRequest {
                    project: target.project.clone(),
                    collection: target.collection.clone(),
                    conversation_id: conv.clone(),
                    messages: vec![IncomingMessage {
                        role,
                        content: m.content.clone(),
                        name: Some(m.speaker.clone()),
                        time: Some(base + i as i64 * 1000),
                        idempotency_key: Some(m.turn_id.clone()),
                    }],
                    trigger: ExtractTrigger::default(),
                    meta: ConversationMeta { user_id: Some(c.user_id.clone()), ..Default::default() },
                })
                .await?;
                msgs += 1;
            }
            // The session ends: close what is pending (what an idle timeout would do later).
            svc.flush(&target, &conv).await?;
        }
    }
    while svc.try_run_one().await? {}
    println!("\nend to end: {msgs} turns written and extracted in {:.1} s", t0.elapsed().as_secs_f64());
    Ok(target)
}

pub(super) async fn run(
    svc: &Arc<Service>,
    store: &Arc<dyn mnemo_core::store::Store>,
    convs: &[Conversation],
    questions: &[Question],
    kept: bool,
) -> Result<()> {
    let target = Target { project: "default".into(), collection: E2E_COLLECTION.into() };
    let held = match kept {
        true => store.stats().await?.events,
        false => 0,
    };
    if held > 0 {
        println!("\nend to end: the kept store already holds {held} events; not written again");
    } else {
        ingest(svc, convs).await?;
    }
    let msgs: usize = convs.iter().flat_map(|c| &c.sessions).map(|s| s.messages.len()).sum();

    // message id → turn id, from each conversation's sessions; turn id → its text.
    let coll = svc.collection_for_read(&target).await?;
    let mut turn_of_msg: HashMap<i64, String> = HashMap::new();
    let mut text_of_turn: HashMap<String, String> = HashMap::new();
    // turn key ("conv/turn") → the id of the event citing it (for MNEMO_BENCH_DEBUG), through
    // message id → event id.
    let mut event_of_turn: HashMap<String, String> = HashMap::new();
    let mut event_of_msg: HashMap<i64, String> = HashMap::new();
    let mut events = 0usize;
    for c in convs {
        for s in &c.sessions {
            let conv = format!("{}/{}", c.conversation_id, s.session_id);
            let info = store.conversation_info(coll.id, &conv).await?.context("conversation")?;
            let mut stored = Vec::new();
            for sess in &info.sessions {
                let d = store.session_info(coll.id, &sess.session_id).await?.context("session")?;
                events += d.events.len();
                for e in &d.events {
                    for m in &e.source_message_ids {
                        event_of_msg.insert(*m, e.id.clone());
                    }
                }
                stored.extend(d.messages);
            }
            stored.sort_by_key(|m| m.message_id);
            for (m, t) in stored.iter().zip(&s.messages) {
                turn_of_msg.insert(m.message_id, t.turn_id.clone());
                if let Some(e) = event_of_msg.get(&m.message_id) {
                    event_of_turn.insert(format!("{}/{}", c.conversation_id, t.turn_id), e.clone());
                }
                // Turn ids repeat across conversations ("D1:3"): the text is keyed by both.
                text_of_turn.insert(format!("{}/{}", c.conversation_id, t.turn_id), t.content.clone());
            }
        }
    }
    println!("rules extraction produced {events} events from {msgs} turns");
    let user_of: HashMap<&str, &str> = convs.iter().map(|c| (c.conversation_id.as_str(), c.user_id.as_str())).collect();
    entities(svc, &target, convs).await?;
    let mut dump = match std::env::var_os("MNEMO_BENCH_DUMP_E2E") {
        Some(p) => Some(std::io::BufWriter::new(std::fs::File::create(p)?)),
        None => None,
    };
    for (max_tokens, event_limit) in runs()? {
        let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
        let debug = std::env::var_os("MNEMO_BENCH_DEBUG").is_some();
        // MNEMO_BENCH_DEBUG=list: one line per question whose evidence is missing.
        let list = std::env::var("MNEMO_BENCH_DEBUG").is_ok_and(|v| v == "list");
        // MNEMO_BENCH_SHOW=TEXT: print the context of the questions containing TEXT, at each budget.
        let show = std::env::var("MNEMO_BENCH_SHOW").ok();
        let mut depths: BTreeMap<&str, usize> = BTreeMap::new();
        let mut missing: BTreeMap<&str, usize> = BTreeMap::new();
        let (mut lat, mut tokens) = (Vec::new(), Vec::new());
        // (questions whose context shows a value not true at their as_of, questions with such values)
        let mut stale = (0usize, 0usize);
        for (i, q) in questions.iter().enumerate() {
            let user = user_of[q.conversation_id.as_str()].to_string();
            let as_of = q.as_of_ms()?;
            let t = Instant::now();
            let out = svc
                .get_context(ContextRequest {
                    target: target.clone(),
                    conversation_id: format!("question-{i}"),
                    query: Some(q.question.clone()),
                    event_filter: EventFilter { user_id: vec![user], as_of, ..Default::default() },
                    event_limit,
                    decay: TimeDecay::NONE,
                    similarity_threshold: None,
                    profile_filter: ProfileFilter::default(),
                    profile_limit: 1,
                    max_tokens,
                    include: Include::default(),
                    locale: Some(mnemo_core::context::Locale::En),
                })
                .await?;
            lat.push(t.elapsed().as_secs_f64() * 1000.0);
            if show.as_deref().is_some_and(|s| q.question.contains(s)) {
                println!(
                    "\n{} ({max_tokens} tokens, evidence {:?}):\n{}",
                    q.question, q.evidence_turn_ids, out.assembled.context_str
                );
            }
            tokens.push(out.assembled.token_count as f64);
            // The turns cited by the events in the context, and the words the context shows.
            let inc = &out.assembled.included;
            let cited: HashSet<&str> = inc
                .cross_events
                .iter()
                .chain(&inc.intra_events)
                .flat_map(|e| e.event.source_message_ids.iter().filter_map(|m| turn_of_msg.get(m).map(String::as_str)))
                .collect();
            let shown: HashSet<String> = words(&out.assembled.context_str).into_iter().collect();
            if !q.not_shown.is_empty() {
                let context = out.assembled.context_str.to_lowercase();
                let leaked = q.not_shown.iter().any(|w| context.contains(&w.to_lowercase()));
                stale.0 += leaked as usize;
                stale.1 += 1;
                if leaked && list {
                    println!("not true then, shown at {max_tokens}/{event_limit}: {}", q.question);
                }
            }
            let tally = tallies.entry(q.category.clone()).or_default();
            if q.evidence_turn_ids.is_empty() {
                continue;
            }
            tally.n += 1;
            tally.cited += q.evidence_turn_ids.iter().all(|t| cited.contains(t.as_str())) as usize;
            // MNEMO_BENCH_DEBUG: for a question whose evidence is not all present, how deep in
            // the ranking (the first 60 events) all of it is — budget or ranking?
            let present = q.evidence_turn_ids.iter().all(|t| {
                cited.contains(t.as_str())
                    && text_of_turn
                        .get(&format!("{}/{t}", q.conversation_id))
                        .is_some_and(|text| mostly_shown(text, &shown))
            });
            if !present && debug {
                // Each evidence turn not present: its event not in the context, or in it as an
                // excerpt that left the turn out.
                let in_context: HashMap<&str, bool> = inc
                    .cross_events
                    .iter()
                    .chain(&inc.intra_events)
                    .map(|e| (e.event.id.as_str(), e.event.memory_info.contains_key("excerpt")))
                    .collect();
                for t in &q.evidence_turn_ids {
                    if cited.contains(t.as_str()) {
                        continue;
                    }
                    let why = match event_of_turn.get(&format!("{}/{t}", q.conversation_id)) {
                        None => "no event cites it",
                        Some(e) => match in_context.get(e.as_str()) {
                            Some(true) => "an excerpt of its event left it out",
                            Some(false) => "its event is shown whole",
                            None => "its event is not in the context",
                        },
                    };
                    *missing.entry(why).or_default() += 1;
                }
                let user = user_of[q.conversation_id.as_str()].to_string();
                let found = svc
                    .search_events(mnemo_core::service::EventSearch::new(
                        target.clone(),
                        Some(q.question.clone()),
                        EventFilter { user_id: vec![user], as_of, ..Default::default() },
                        60,
                    ))
                    .await?;
                let mut need: HashSet<&str> = q.evidence_turn_ids.iter().map(String::as_str).collect();
                let mut depth = None;
                for (rank, r) in found.iter().enumerate() {
                    for m in &r.event.source_message_ids {
                        if let Some(t) = turn_of_msg.get(m) {
                            need.remove(t.as_str());
                        }
                    }
                    if need.is_empty() {
                        depth = Some(rank + 1);
                        break;
                    }
                }
                let bucket = match depth {
                    Some(d) if d <= 10 => "≤10",
                    Some(d) if d <= 20 => "11–20",
                    Some(d) if d <= 40 => "21–40",
                    Some(_) => "41–60",
                    None => ">60",
                };
                *depths.entry(bucket).or_default() += 1;
                if list {
                    println!("missing at {max_tokens}/{event_limit}: [{}] depth {bucket}: {}", q.category, q.question);
                }
            }
            tally.present += present as usize;
            // Stricter: most of the turn's words in the line of an event that cites it.
            let lines: Vec<(HashSet<&str>, HashSet<String>)> = inc
                .cross_events
                .iter()
                .chain(&inc.intra_events)
                .map(|e| {
                    let turns =
                        e.event.source_message_ids.iter().filter_map(|m| turn_of_msg.get(m).map(String::as_str));
                    (turns.collect(), words(&e.event.text()).into_iter().collect())
                })
                .collect();
            let own_line = q.evidence_turn_ids.iter().all(|t| {
                let Some(text) = text_of_turn.get(&format!("{}/{t}", q.conversation_id)) else { return false };
                lines.iter().any(|(turns, shown)| turns.contains(t.as_str()) && mostly_shown(text, shown))
            });
            tally.own_line += own_line as usize;
            // MNEMO_BENCH_DUMP_E2E=FILE: each question's candidates — every event of the user, with
            // the turns it cites, similarity, BM25, time, id and text — and the service's final
            // ranking of the first 100 (the turns each event cites), once, for trying ranking
            // ideas offline.
            if let (Some(out), 1200, 200) = (dump.as_mut(), max_tokens, event_limit) {
                use std::io::Write;
                let user = user_of[q.conversation_id.as_str()].to_string();
                let ranked: Vec<Vec<&String>> = svc
                    .search_events(mnemo_core::service::EventSearch::new(
                        target.clone(),
                        Some(q.question.clone()),
                        EventFilter { user_id: vec![user.clone()], as_of, ..Default::default() },
                        100,
                    ))
                    .await?
                    .iter()
                    .map(|r| r.event.source_message_ids.iter().filter_map(|m| turn_of_msg.get(m)).collect())
                    .collect();
                let filter = EventFilter { user_id: vec![user], active_only: true, as_of, ..Default::default() };
                let qv = svc
                    .embedder()
                    .embed(std::slice::from_ref(&q.question), mnemo_core::EmbedKind::Query)
                    .await?
                    .remove(0);
                let offset = svc.embedder().query_offset(&q.question);
                let cands = store
                    .search_candidates(
                        coll.id,
                        filter,
                        CandidateQuery {
                            vector: Some(qv),
                            terms: mnemo_core::text::search_tokens(&q.question),
                            // Every event of the user (a LoCoMo user has a few hundred), so
                            // that another ranking can be tried over all of them.
                            k: 1000,
                            vector_hits: None,
                            corpus: None,
                        },
                    )
                    .await?;
                let rows: Vec<serde_json::Value> = cands
                    .iter()
                    .map(|c| {
                        let turns: Vec<&String> =
                            c.event.source_message_ids.iter().filter_map(|m| turn_of_msg.get(m)).collect();
                        let (id, text) = (&c.event.id, c.event.text());
                        serde_json::json!([turns, c.cosine.map(|v| v + offset), c.bm25, c.event.time, id, text])
                    })
                    .collect();
                writeln!(
                    out,
                    "{}",
                    serde_json::json!({
                        "conversation": q.conversation_id, "question": q.question, "cat": q.category,
                        "evidence": q.evidence_turn_ids, "cands": rows, "ranked": ranked,
                    })
                )?;
            }
            if let Some(a) = q.answer.as_deref().filter(|a| !a.trim().is_empty()) {
                tally.answerable += 1;
                tally.answer += answer_in(a, &normalize(&out.assembled.context_str)) as usize;
            }
        }
        tokens.sort_by(|a, b| a.total_cmp(b));
        lat.sort_by(|a, b| a.total_cmp(b));
        println!(
            "\nend to end at max_tokens {max_tokens}, event limit {event_limit}: get_context p50 {:.2} ms, p95 {:.2} ms; median {:.0} tokens used",
            percentile(&lat, 0.5),
            percentile(&lat, 0.95),
            percentile(&tokens, 0.5)
        );
        println!(
            "| category | present (cited + shown) | shown by the citing event | cited | answer in context | questions | with an answer |"
        );
        println!("| --- | --- | --- | --- | --- | --- | --- |");
        let mut total = Tally::default();
        for (cat, t) in &tallies {
            println!("| {cat} | {} |", t.row());
            total.add(t);
        }
        println!("| **overall** | {} |", total.row());
        if stale.1 > 0 {
            println!(
                "values not true at the question's as_of shown in the context: {} of {} questions",
                stale.0, stale.1
            );
        }
        if debug {
            println!("evidence not present: depth at which the ranking holds all of it: {depths:?}");
            println!("evidence turns not cited: {missing:?}");
        }
    }
    if let Some(mut out) = dump.take() {
        use std::io::Write;
        out.flush()?;
    }
    Ok(())
}

/// Each user's entities as `entity/list` resolves them: how long that takes, how many, and the
/// five with the most events (a look at what the rules find in real conversations).
async fn entities(svc: &Arc<Service>, target: &Target, convs: &[Conversation]) -> Result<()> {
    let mut lat = Vec::new();
    let mut seen = HashSet::new();
    for c in convs.iter().filter(|c| seen.insert(c.user_id.clone())) {
        let t = Instant::now();
        let found = svc
            .list_entities(mnemo_core::service::EntityList {
                target: target.clone(),
                user_id: c.user_id.clone(),
                kind: None,
                name: None,
                limit: mnemo_core::service::MAX_ENTITY_LIMIT,
            })
            .await?;
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
        let top: Vec<String> = found
            .iter()
            .take(5)
            .map(|e| {
                format!(
                    "{} ({}, {} events{})",
                    e.name,
                    e.kind.as_str(),
                    e.event_ids.len(),
                    if e.aliases.is_empty() { String::new() } else { format!(", aka {}", e.aliases.join("/")) }
                )
            })
            .collect();
        println!("entities of {}: {} — {}", c.user_id, found.len(), top.join("; "));
    }
    lat.sort_by(|a, b| a.total_cmp(b));
    println!(
        "entity/list per user: p50 {:.1} ms, max {:.1} ms",
        percentile(&lat, 0.5),
        lat.last().copied().unwrap_or(0.0)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_found_in_the_forms_the_context_writes() {
        let ctx = normalize(
            "- [created]2023-05-08 13:56:00 [content]Caroline: I went to two LGBTQ support groups; pottery and camping!",
        );
        assert!(answer_in("2 groups", &ctx) || answer_in("two", &ctx));
        assert!(answer_in("pottery, camping", &ctx));
        assert!(!answer_in("pottery, swimming", &ctx));
        assert!(answer_in("The week before 8 May 2023", &ctx), "a relative date needs its anchor date");
        assert!(!answer_in("7 May 2023", &ctx));
        assert!(answer_in("May 8, 2023", &normalize("on 2023-05-08")));
        assert_eq!(normalize("7 May 2023"), "2023 05 07");
        assert_eq!(normalize("June 2023"), "2023 06");
        let zh =
            normalize("- [创建时间]2025-03-16 21:00:00 [内容]王芳：上次说的奶粉，我们换成了羊奶粉，朵朵胀气好多了。");
        assert!(answer_in("羊奶粉", &zh) && answer_in("羊奶粉，胀气", &zh) && !answer_in("牛奶粉", &zh));
    }

    #[test]
    fn a_turn_is_shown_when_most_of_its_words_are() {
        let shown: HashSet<String> = words("Caroline: I went to a LGBTQ support group yesterday").into_iter().collect();
        assert!(mostly_shown("I went to a LGBTQ support group yesterday and it was so powerful", &shown));
        assert!(!mostly_shown("The transgender stories were inspiring and I felt accepted by everyone there", &shown));
        // A date written into a Chinese turn does not hide it; another turn is not shown.
        let shown: HashSet<String> = words("张晓：我周末在学粤语，每周日（2024-12-01）上午。").into_iter().collect();
        assert!(mostly_shown("我周末在学粤语，每周日上午。", &shown));
        assert!(!mostly_shown("我买了明年二月五月天上海场的票。", &shown));
    }
}
