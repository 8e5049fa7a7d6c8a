//! `mnemo bench locomo DIR`: retrieval quality and latency on LoCoMo (shared/bench/locomo/dev).
//!
//! Retrieval: every turn of a conversation becomes an event of its user (the `event/add` path,
//! with the session's time); every question is asked with `event/search` (limit 10) and scored by
//! whether its evidence turns are in the top 5 / 10. Three rankers run in the same process on the
//! same index: BM25 only (mnemo's FTS5 index: jieba + stemming), vector only (the embedding
//! model), and mnemo's hybrid ranking (the default) — the first two are the baselines.
//!
//! End to end (`--e2e`): the turns go through `streaming_write` (default trigger) → rules
//! extraction → `get_context` (max_tokens 1200, a fresh conversation, query = the question). An
//! evidence turn counts as found when an event in the context has it in its provenance.

use super::locomo_data::*;
use crate::bench::percentile;
use crate::config::Config;
use anyhow::{Context, Result};
use mnemo_core::SystemClock;
use mnemo_core::model::*;
use mnemo_core::service::{AddEventRequest, EventSearch, Target};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// Per-category accumulators: all@5, all@10, share@5, share@10, count.
#[derive(Default, Clone)]
struct Tally {
    all5: f64,
    all10: f64,
    share5: f64,
    share10: f64,
    n: usize,
}

impl Tally {
    fn add(&mut self, evidence: &[String], ranked: &[HashSet<String>]) {
        if evidence.is_empty() {
            return;
        }
        let found = |k: usize| {
            let mut got: HashSet<&str> = HashSet::new();
            for turns in ranked.iter().take(k) {
                got.extend(turns.iter().map(String::as_str));
            }
            evidence.iter().filter(|e| got.contains(e.as_str())).count() as f64 / evidence.len() as f64
        };
        let (s5, s10) = (found(5), found(10));
        self.all5 += (s5 == 1.0) as u8 as f64;
        self.all10 += (s10 == 1.0) as u8 as f64;
        self.share5 += s5;
        self.share10 += s10;
        self.n += 1;
    }

    fn row(&self) -> String {
        let n = self.n.max(1) as f64;
        format!(
            "{:.3} | {:.3} | {:.3} | {:.3} | {}",
            self.all5 / n,
            self.all10 / n,
            self.share5 / n,
            self.share10 / n,
            self.n
        )
    }
}

fn report(name: &str, tallies: &BTreeMap<String, Tally>, lat: &mut [f64]) {
    lat.sort_by(|a, b| a.total_cmp(b));
    println!(
        "\n{name}: search latency p50 {:.2} ms, p95 {:.2} ms ({} queries)",
        percentile(lat, 0.5),
        percentile(lat, 0.95),
        lat.len()
    );
    println!("| category | all@5 | all@10 | share@5 | share@10 | questions |");
    println!("| --- | --- | --- | --- | --- | --- |");
    let mut total = Tally::default();
    for (cat, t) in tallies {
        println!("| {cat} | {} |", t.row());
        total.all5 += t.all5;
        total.all10 += t.all10;
        total.share5 += t.share5;
        total.share10 += t.share10;
        total.n += t.n;
    }
    println!("| **overall** | {} |", total.row());
}

pub async fn run(
    dir: &Path,
    e2e: bool,
    e2e_only: bool,
    haystack: Option<&Path>,
    qa: Option<super::locomo_qa::QaArgs>,
    mut cfg: Config,
) -> Result<()> {
    let mut convs: Vec<Conversation> = read_jsonl(&dir.join("conversations.jsonl"))?;
    if let Some(hay) = haystack {
        let hay: Vec<Conversation> = read_jsonl(&hay.join("conversations.jsonl"))?;
        convs = with_haystack(convs, &hay)?;
    }
    let questions: Vec<Question> = read_jsonl(&dir.join("questions.jsonl"))?;
    let tmp = tempfile::tempdir()?;
    // MNEMO_BENCH_KEEP=DIR (end to end only): the store is kept in DIR, and a later run on it
    // measures the same extracted events again instead of writing and extracting them anew.
    let kept = std::env::var_os("MNEMO_BENCH_KEEP").filter(|_| e2e_only).map(std::path::PathBuf::from);
    cfg.store.path = kept.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    // The benchmark reads raw store signals (the one-signal baselines) beside the service.
    let store = crate::app::open_store(&cfg).await?;
    let svc = crate::app::service_on(&cfg, Arc::new(SystemClock), crate::app::build_embedder(&cfg)?, store.clone())?;
    crate::app::prepare(&svc).await?;
    let target = Target { project: "default".into(), collection: "locomo".into() };
    let turns: usize = convs.iter().flat_map(|c| &c.sessions).map(|s| s.messages.len()).sum();
    println!(
        "LoCoMo {}: {} conversations ({turns} turns{}), {} questions; model {}",
        dir.display(),
        convs.len(),
        haystack.map(|h| format!(", with {}'s as distractors", h.display())).unwrap_or_default(),
        questions.len(),
        svc.embedder().model_id()
    );

    if let Some(qa) = qa {
        return super::locomo_qa::run(&svc, &convs, &questions, qa).await;
    }
    if e2e_only {
        return super::locomo_e2e::run(&svc, &store, &convs, &questions, kept.is_some()).await;
    }
    // ---- ingest every turn as an event
    let t0 = Instant::now();
    let mut turn_of: HashMap<String, String> = HashMap::new();
    let mut turns = 0;
    for c in &convs {
        for s in &c.sessions {
            let base = parse_time(&s.time)?;
            for (i, m) in s.messages.iter().enumerate() {
                let mut info = Map::new();
                info.insert("summary".into(), Value::String(format!("{}: {}", m.speaker, m.content)));
                let e = svc
                    .add_event(AddEventRequest {
                        target: target.clone(),
                        memory_type: EVENT_V1.into(),
                        user_id: vec![c.user_id.clone()],
                        assistant_id: vec![],
                        group_id: None,
                        session_id: Some(s.session_id.clone()),
                        conversation_id: Some(c.conversation_id.clone()),
                        scope: None,
                        class: None,
                        time: Some(base + i as i64 * 1000),
                        memory_info: info,
                        ttl_relative: None,
                        ttl_absolute: None,
                    })
                    .await?;
                turn_of.insert(e.id, m.turn_id.clone());
                turns += 1;
            }
        }
    }
    let ingest = t0.elapsed().as_secs_f64();
    println!("ingested {turns} turns in {ingest:.1} s ({:.0} events/s, embedding included)", turns as f64 / ingest);

    let user_of: HashMap<&str, &str> = convs.iter().map(|c| (c.conversation_id.as_str(), c.user_id.as_str())).collect();
    let coll = svc.collection_for_read(&target).await?;
    let mut results: Vec<(&str, BTreeMap<String, Tally>, Vec<f64>)> = vec![
        ("BM25 only (baseline)", BTreeMap::new(), vec![]),
        ("vector only (baseline)", BTreeMap::new(), vec![]),
        ("mnemo hybrid", BTreeMap::new(), vec![]),
    ];
    // Relevance-floor calibration: for each question, the relevance of its best evidence turn in
    // its own conversation, and of the best turn in the other conversations (other people: noise).
    let (mut evidence_scores, mut noise_scores): (Vec<f64>, Vec<f64>) = (vec![], vec![]);
    // Fusion variants over the same candidates (both signals, 50 each), for calibrating `fuse`.
    let mut fusions = fusion_variants(svc.embedder().fusion());
    // MNEMO_BENCH_DUMP=FILE: every question's candidates (turn, similarity, BM25) as JSON lines,
    // for trying ranking ideas offline.
    let mut dump = match std::env::var_os("MNEMO_BENCH_DUMP") {
        Some(p) => Some(std::io::BufWriter::new(std::fs::File::create(p)?)),
        None => None,
    };
    // With a dump, every turn of the user (a LoCoMo user has < 1,000) is a candidate.
    let dump_k = if dump.is_some() { 1000 } else { 50 };
    for q in &questions {
        let user = user_of.get(q.conversation_id.as_str()).context("question of an unknown conversation")?.to_string();
        let as_of = q.as_of_ms()?;
        let filter = EventFilter { user_id: vec![user.clone()], active_only: true, as_of, ..Default::default() };
        let to_turns = |ids: Vec<String>| -> Vec<HashSet<String>> {
            ids.into_iter().map(|id| turn_of.get(&id).cloned().into_iter().collect()).collect()
        };
        // Baselines: one signal each, straight from the same index.
        let t = Instant::now();
        let terms = mnemo_core::text::search_tokens(&q.question);
        let mut c = store
            .search_candidates(
                coll.id,
                filter.clone(),
                CandidateQuery { vector: None, terms, k: 10, vector_hits: None, corpus: None },
            )
            .await?;
        c.sort_by(|a, b| b.bm25.unwrap_or(0.0).total_cmp(&a.bm25.unwrap_or(0.0)));
        results[0].2.push(t.elapsed().as_secs_f64() * 1000.0);
        results[0]
            .1
            .entry(q.category.clone())
            .or_default()
            .add(&q.evidence_turn_ids, &to_turns(c.into_iter().map(|c| c.event.id).collect()));

        let t = Instant::now();
        let qv = svc.embedder().embed(std::slice::from_ref(&q.question), mnemo_core::EmbedKind::Query).await?.remove(0);
        let mut c = store
            .search_candidates(
                coll.id,
                filter.clone(),
                CandidateQuery { vector: Some(qv.clone()), terms: vec![], k: 10, vector_hits: None, corpus: None },
            )
            .await?;
        c.sort_by(|a, b| b.cosine.unwrap_or(-1.0).total_cmp(&a.cosine.unwrap_or(-1.0)));
        results[1].2.push(t.elapsed().as_secs_f64() * 1000.0);
        results[1]
            .1
            .entry(q.category.clone())
            .or_default()
            .add(&q.evidence_turn_ids, &to_turns(c.into_iter().map(|c| c.event.id).collect()));

        let t = Instant::now();
        let found = svc
            .search_events(EventSearch::new(
                target.clone(),
                Some(q.question.clone()),
                EventFilter { user_id: vec![user.clone()], as_of, ..Default::default() },
                10,
            ))
            .await?;
        results[2].2.push(t.elapsed().as_secs_f64() * 1000.0);
        let mut cands = store
            .search_candidates(
                coll.id,
                filter.clone(),
                CandidateQuery {
                    vector: Some(qv.clone()),
                    terms: mnemo_core::text::search_tokens(&q.question),
                    k: dump_k,
                    vector_hits: None,
                    corpus: None,
                },
            )
            .await?;
        // The similarity the search fuses: the dot product plus the model's query offset.
        let offset = svc.embedder().query_offset(&q.question);
        cands.iter_mut().for_each(|c| c.cosine = c.cosine.map(|v| v + offset));
        if let Some(out) = dump.as_mut() {
            use std::io::Write;
            let rows: Vec<Value> =
                cands.iter().map(|c| serde_json::json!([turn_of.get(&c.event.id), c.cosine, c.bm25])).collect();
            let line = serde_json::json!({"q": q.question, "cat": q.category, "conv": q.conversation_id, "evidence": q.evidence_turn_ids, "cands": rows});
            writeln!(out, "{line}")?;
        }
        for (_, fuse, tally) in fusions.iter_mut() {
            let scores = fuse(&cands);
            let mut order: Vec<usize> = (0..cands.len()).collect();
            order.sort_by(|a, b| scores[*b].total_cmp(&scores[*a]));
            tally.add(&q.evidence_turn_ids, &to_turns(order.iter().map(|i| cands[*i].event.id.clone()).collect()));
        }
        if let Some(best) = found
            .iter()
            .filter(|r| turn_of.get(&r.event.id).is_some_and(|t| q.evidence_turn_ids.contains(t)))
            .map(|r| r.scores.origin_score)
            .reduce(f64::max)
        {
            evidence_scores.push(best);
        }
        let others: Vec<String> = user_of.values().filter(|u| **u != user).map(|u| u.to_string()).collect();
        if !others.is_empty() {
            let noise = svc
                .search_events(EventSearch::new(
                    target.clone(),
                    Some(q.question.clone()),
                    EventFilter { user_id: others, ..Default::default() },
                    1,
                ))
                .await?;
            noise_scores.push(noise.first().map_or(0.0, |r| r.scores.origin_score));
        }
        results[2]
            .1
            .entry(q.category.clone())
            .or_default()
            .add(&q.evidence_turn_ids, &to_turns(found.into_iter().map(|r| r.event.id).collect()));
    }
    if let Some(mut out) = dump.take() {
        use std::io::Write;
        out.flush()?;
    }
    calibration(&mut evidence_scores, &mut noise_scores);
    println!("\nfusion variants over the same 50+50 candidates (all@5 | all@10 | share@5 | share@10 | n):");
    for (name, _, tally) in &fusions {
        println!("| {name} | {} |", tally.row());
    }
    for (name, tallies, lat) in results.iter_mut() {
        report(name, tallies, lat);
    }
    if e2e {
        super::locomo_e2e::run(&svc, &store, &convs, &questions, false).await?;
    }
    Ok(())
}

type Fusion = Box<dyn Fn(&[Candidate]) -> Vec<f64>>;

/// Ways to fuse a candidate's cosine and BM25 into one score, measured side by side.
fn fusion_variants(current: mnemo_core::ranking::Fusion) -> Vec<(String, Fusion, Tally)> {
    let mut out: Vec<(String, Fusion, Tally)> = vec![(
        format!("current (the model's: {current:?})"),
        Box::new(move |c: &[Candidate]| c.iter().map(|x| current.fuse(x.cosine, x.bm25)).collect()),
        Tally::default(),
    )];
    // Reciprocal rank fusion of the two rankings.
    for k in [10.0, 60.0] {
        out.push((
            format!("RRF k={k}"),
            Box::new(move |c: &[Candidate]| {
                let rank = |key: &dyn Fn(&Candidate) -> f64| {
                    let mut idx: Vec<usize> = (0..c.len()).collect();
                    idx.sort_by(|a, b| key(&c[*b]).total_cmp(&key(&c[*a])));
                    let mut r = vec![0usize; c.len()];
                    for (pos, i) in idx.into_iter().enumerate() {
                        r[i] = pos;
                    }
                    r
                };
                let rv = rank(&|x| x.cosine.map_or(-1.0, f64::from));
                let rb = rank(&|x| x.bm25.unwrap_or(0.0));
                (0..c.len())
                    .map(|i| {
                        let b = if c[i].bm25.is_some_and(|b| b > 0.0) { 1.0 / (k + rb[i] as f64) } else { 0.0 };
                        1.0 / (k + rv[i] as f64) + b
                    })
                    .collect()
            }),
            Tally::default(),
        ));
    }
    // Convex combination of cosine and BM25 normalised by the best BM25 among the candidates.
    for w in [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9] {
        out.push((
            format!("convex text weight {w}"),
            Box::new(move |c: &[Candidate]| {
                let max = c.iter().filter_map(|x| x.bm25).fold(0.0f64, f64::max).max(1e-9);
                c.iter()
                    .map(|x| {
                        w * x.bm25.unwrap_or(0.0) / max + (1.0 - w) * x.cosine.map_or(0.0, |v| f64::from(v).max(0.0))
                    })
                    .collect()
            }),
            Tally::default(),
        ));
    }
    // The shape of `ranking::Fusion` with other constants: with and without the cosine floor.
    for keep_cosine in [true, false] {
        for text_weight in [0.2, 0.3, 0.4, 0.5, 0.6, 0.8] {
            for bm25_half in [4.0, 8.0] {
                let f = mnemo_core::ranking::Fusion { text_weight, bm25_half, keep_cosine };
                let shape = if keep_cosine { "max(v, mixed)" } else { "mixed" };
                out.push((
                    format!("{shape}, mixed = {text_weight}·t + {:.1}·v, t = b/(b+{bm25_half})", 1.0 - text_weight),
                    Box::new(move |c: &[Candidate]| c.iter().map(|x| f.fuse(x.cosine, x.bm25)).collect()),
                    Tally::default(),
                ));
            }
        }
    }
    out
}

/// Prints how a relevance floor on `origin_score` would split evidence from noise: for each
/// candidate floor, the share of questions whose best noise hit it removes and the share of found
/// evidence it would lose.
fn calibration(evidence: &mut [f64], noise: &mut [f64]) {
    evidence.sort_by(f64::total_cmp);
    noise.sort_by(f64::total_cmp);
    let below = |v: &[f64], x: f64| v.partition_point(|s| *s < x) as f64 / v.len().max(1) as f64;
    println!(
        "\nrelevance floor calibration (origin_score; noise = best turn of another conversation, {} questions;",
        noise.len()
    );
    println!("evidence = best evidence turn found in the top 10, {} questions)", evidence.len());
    println!("| floor | noise removed | evidence lost |\n| --- | --- | --- |");
    for floor in [0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5] {
        println!("| {floor:.2} | {:.3} | {:.3} |", below(noise, floor), below(evidence, floor));
    }
    println!(
        "noise p50 / p90 / p99: {:.3} / {:.3} / {:.3}; evidence p10 / p50: {:.3} / {:.3}",
        percentile(noise, 0.5),
        percentile(noise, 0.9),
        percentile(noise, 0.99),
        percentile(evidence, 0.1),
        percentile(evidence, 0.5)
    );
}
