//! `mnemo bench extraction`: extraction quality on a small labelled set of Chinese and English
//! conversations (`data/extraction_set.json`), for the offline `rules` extractor (the baseline,
//! always run) and, with `--llm-url`, a real OpenAI-compatible model, side by side.
//!
//! Per conversation the set names the events that should be found (keywords that must all occur
//! in one event's summary) and profile facts (a keyword that must occur in some attribute value
//! or name). Reported: events found / expected, events extracted in all, profile facts found /
//! expected, answers that were valid JSON at once (no repair), and seconds per extraction.

use anyhow::{Context, Result};
use mnemo_core::extract::{ExtractionInput, ExtractionOutput, Extractor, ProfileChange};
use mnemo_core::model::{CollectionSchema, ConversationMeta, Role, StoredMessage};
use mnemo_providers::{LlmConfig, LlmExtractor, RulesConfig, RulesExtractor};
use serde::Deserialize;
use std::time::{Duration, Instant};

const SET: &str = include_str!("../../data/extraction_set.json");

#[derive(Deserialize)]
struct Case {
    id: String,
    messages: Vec<Msg>,
    events: Vec<Vec<String>>,
    profile: Vec<String>,
}

#[derive(Deserialize)]
struct Msg {
    role: String,
    content: String,
}

#[derive(Default)]
struct Tally {
    events_expected: usize,
    events_found: usize,
    events_extracted: usize,
    facts_expected: usize,
    facts_found: usize,
    failed: usize,
    seconds: Vec<f64>,
    summary_chars: Vec<usize>,
}

fn input(case: &Case) -> ExtractionInput {
    let t0 = 1_795_917_600_000; // 2026-11-29 02:00 UTC
    let messages = case
        .messages
        .iter()
        .enumerate()
        .map(|(i, m)| StoredMessage {
            message_id: i as i64 + 1,
            conversation_id: case.id.clone(),
            session_id: None,
            role: if m.role == "user" { Role::User } else { Role::Assistant },
            name: None,
            content: m.content.clone(),
            time: t0 + i as i64 * 30_000,
            tokens: 0,
        })
        .collect();
    ExtractionInput {
        schema: CollectionSchema::default(),
        session_id: format!("ses_{}", case.id),
        meta: ConversationMeta { user_id: Some("u".into()), ..Default::default() },
        messages,
        profiles: vec![],
        related_events: vec![],
        now: t0 + 600_000,
    }
}

fn profile_text(out: &ExtractionOutput) -> String {
    let mut s = String::new();
    for c in out.profile_changes.iter().chain(out.typed_profile_changes.iter().flat_map(|(_, c)| c)) {
        match c {
            ProfileChange::Set { key, value } => s.push_str(&format!("{key}={value};")),
            ProfileChange::Append { key, items } => s.push_str(&format!("{key}={};", items.join(","))),
            _ => {}
        }
    }
    s.to_lowercase()
}

fn score(case: &Case, out: &ExtractionOutput, t: &mut Tally, verbose: bool, name: &str) {
    let summaries: Vec<String> = out
        .events
        .iter()
        .map(|e| e.memory_info.get("summary").and_then(|v| v.as_str()).unwrap_or("").to_lowercase())
        .collect();
    let found = case
        .events
        .iter()
        .filter(|kws| summaries.iter().any(|s| kws.iter().all(|k| s.contains(&k.to_lowercase()))))
        .count();
    let profile = profile_text(out);
    let facts = case.profile.iter().filter(|k| profile.contains(&k.to_lowercase())).count();
    t.events_expected += case.events.len();
    t.events_found += found;
    t.events_extracted += out.events.len();
    t.summary_chars.extend(summaries.iter().map(|s| s.chars().count()));
    t.facts_expected += case.profile.len();
    t.facts_found += facts;
    if verbose {
        println!(
            "  [{name}] {}: events {found}/{} ({} extracted), profile {facts}/{}\n    events: {summaries:?}\n    profile: {profile}",
            case.id,
            case.events.len(),
            out.events.len(),
            case.profile.len()
        );
    }
}

async fn run_one(name: &str, x: &dyn Extractor, cases: &[Case], verbose: bool) -> Tally {
    let mut t = Tally::default();
    for case in cases {
        let start = Instant::now();
        match x.extract(input(case)).await {
            Ok(out) => {
                t.seconds.push(start.elapsed().as_secs_f64());
                score(case, &out, &mut t, verbose, name);
            }
            Err(e) => {
                t.failed += 1;
                t.events_expected += case.events.len();
                t.facts_expected += case.profile.len();
                println!("  [{name}] {}: extraction failed: {e}", case.id);
            }
        }
    }
    t
}

fn row(name: &str, t: &Tally, json_first: Option<(u64, u64)>) -> String {
    let mut secs = t.seconds.clone();
    secs.sort_by(f64::total_cmp);
    let median = secs.get(secs.len() / 2).copied().unwrap_or(0.0);
    let mut chars = t.summary_chars.clone();
    chars.sort();
    let median_chars = chars.get(chars.len() / 2).copied().unwrap_or(0);
    let json = match json_first {
        Some((ok, all)) => format!("{ok}/{all}"),
        None => "n/a".into(),
    };
    format!(
        "| {name} | {}/{} ({:.0}%) | {} | {median_chars} | {}/{} ({:.0}%) | {json} | {} | {median:.2} |",
        t.events_found,
        t.events_expected,
        100.0 * t.events_found as f64 / t.events_expected.max(1) as f64,
        t.events_extracted,
        t.facts_found,
        t.facts_expected,
        100.0 * t.facts_found as f64 / t.facts_expected.max(1) as f64,
        t.failed,
    )
}

pub async fn run(llm_url: Option<String>, model: String, timeout_secs: u64, verbose: bool) -> Result<()> {
    let cases: Vec<Case> = serde_json::from_str(SET).context("data/extraction_set.json")?;
    println!("extraction quality on {} labelled conversations (zh + en)", cases.len());
    let rules = RulesExtractor::new(RulesConfig::default());
    let base = run_one("rules", &rules, &cases, verbose).await;
    let mut rows = vec![row("rules (baseline)", &base, None)];
    if let Some(url) = llm_url {
        let llm = LlmExtractor::new(LlmConfig {
            base_url: url,
            model: model.clone(),
            timeout: Duration::from_secs(timeout_secs),
            max_retries: 0,
            ..Default::default()
        })
        .map_err(anyhow::Error::msg)?;
        let t = run_one("llm", &llm, &cases, verbose).await;
        let (requests, repairs) = llm.counters();
        let answers = requests.saturating_sub(repairs);
        rows.push(row(&format!("llm: {model}"), &t, Some((answers.saturating_sub(repairs), answers))));
    }
    println!(
        "| extractor | events found | events extracted | median summary chars | profile facts found | JSON valid at once | failed | median s |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for r in rows {
        println!("{r}");
    }
    Ok(())
}
