//! `mnemo bench embed`: the floor every search and write stands on — the configured embedding
//! model on this machine. Single-text latency by length (a stored text and a query), then
//! throughput (texts/s) by how the texts arrive: one call with a batch of B texts, and C callers
//! at once with one text each. A search is judged against its query's embedding measured here,
//! not against a figure from another host.
//!
//! The local models run one text per inference (their int8 graphs quantise activations per
//! batch, so a batched run would make a text's vector depend on its neighbours): a batch call
//! runs its texts one after another on a session, and parallelism comes from the sessions
//! (`embedding.sessions`). An `openai` provider sends a batch as one request.

use crate::bench::percentile;
use crate::config::Config;
use anyhow::{Context, Result};
use mnemo_core::TokenCounter;
use mnemo_core::embed::{EmbedKind, Embedder};
use std::sync::Arc;
use std::time::Instant;

const SENTENCES: &[&str] = &[
    "The user went hiking near the lake on Sunday and saw a heron.",
    "用户上周在上海的一家咖啡馆和朋友聊起了换工作的计划。",
    "She asked whether the pottery class on Thursday still has places.",
    "宝宝一岁了，最近喝奶粉总胀气，换了无乳糖配方后好多了。",
];

/// A text of about `tokens` o200k tokens, mixed English and Chinese like the stored memories.
fn text_of(tokens: usize) -> String {
    let mut s = String::new();
    let mut i = 0;
    while TokenCounter::count(&s) < tokens {
        s.push_str(SENTENCES[i % SENTENCES.len()]);
        s.push(' ');
        i += 1;
    }
    TokenCounter::truncate(&s, tokens)
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

fn p50_p95(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (percentile(&v, 0.5), percentile(&v, 0.95))
}

pub async fn run(cfg: Config, runs: usize) -> Result<()> {
    let embedder: Arc<dyn Embedder> = crate::app::build_embedder(&cfg)?;
    let sessions = cfg.embedding.sessions.max(1);
    println!(
        "embedding benchmark: {} ({} dims), provider {}, {} inference sessions, {runs} runs per figure",
        embedder.model_id(),
        embedder.dimension(),
        cfg.embedding.provider,
        sessions
    );
    // Warm-up: the first runs of a session pay its allocations.
    for _ in 0..3 {
        embedder.embed(&[text_of(32)], EmbedKind::Document).await.context("warm-up")?;
    }
    println!("\n| one text | tokens (o200k) | p50 / p95 ms |\n| --- | --- | --- |");
    for (kind, label) in [(EmbedKind::Query, "query"), (EmbedKind::Document, "stored text")] {
        for tokens in [8, 32, 128, 512] {
            let text = text_of(tokens);
            let mut v = Vec::with_capacity(runs);
            for _ in 0..runs {
                let t = Instant::now();
                embedder.embed(std::slice::from_ref(&text), kind).await?;
                v.push(ms(t));
            }
            let (p50, p95) = p50_p95(v);
            println!("| {label} | {tokens} | {p50:.2} / {p95:.2} |");
        }
    }
    println!("\n| texts arrive as | tokens each | texts/s |\n| --- | --- | --- |");
    for tokens in [32, 128] {
        let text = text_of(tokens);
        for batch in [1usize, 8, 32] {
            let texts = vec![text.clone(); batch];
            let calls = (runs * 4 / batch).max(2);
            let t = Instant::now();
            for _ in 0..calls {
                embedder.embed(&texts, EmbedKind::Document).await?;
            }
            let rate = (calls * batch) as f64 / t.elapsed().as_secs_f64();
            println!("| one call of {batch} | {tokens} | {rate:.1} |");
        }
        for callers in [2usize, 4, 8] {
            let per = (runs * 4 / callers).max(2);
            let t = Instant::now();
            let tasks: Vec<_> = (0..callers)
                .map(|_| {
                    let (e, text) = (embedder.clone(), text.clone());
                    tokio::spawn(async move {
                        for _ in 0..per {
                            e.embed(std::slice::from_ref(&text), EmbedKind::Document).await?;
                        }
                        Ok::<_, mnemo_core::embed::EmbedError>(())
                    })
                })
                .collect();
            for task in tasks {
                task.await??;
            }
            let rate = (callers * per) as f64 / t.elapsed().as_secs_f64();
            println!("| {callers} callers at once, one text each | {tokens} | {rate:.1} |");
        }
    }
    Ok(())
}
