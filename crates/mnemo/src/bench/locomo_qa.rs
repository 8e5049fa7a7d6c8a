//! `mnemo bench locomo --qa --llm-url URL --model NAME`: the answer-accuracy protocol of the memory
//! literature (mem0's and Zep's LoCoMo evaluations), reproducible by anyone with a model.
//!
//! 1. The conversations go in as in `--e2e` (streaming_write → rules extraction).
//! 2. Each question gets `get_context` (a fresh conversation, query = the question, the
//!    conversation's user, `--max-tokens`), and the model answers from that context alone.
//! 3. A judge model (the same one unless `--judge-model` / `--judge-url`) labels the answer
//!    CORRECT or WRONG against the gold answer — generously: the same topic, or the same date in
//!    another format, counts. J = the share labelled CORRECT.
//!
//! The adversarial category (no gold answer) is left out, as in the literature. Every answer and
//! verdict goes to a JSONL file (`--out`) for inspection; the summary prints J per category, the
//! context tokens per question and the latencies (context, answer, judge).

use super::locomo_data::{Conversation, Question};
use crate::bench::percentile;
use anyhow::{Context, Result, bail};
use mnemo_core::model::*;
use mnemo_core::ranking::TimeDecay;
use mnemo_core::service::{ContextRequest, Include, Service};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `bench locomo`'s QA options.
#[derive(clap::Args)]
pub struct QaArgs {
    /// Answer accuracy instead (the LLM-judge protocol): needs --llm-url and --model.
    #[arg(long, requires = "llm_url")]
    pub qa: bool,
    /// The answering model's OpenAI-compatible endpoint, e.g. http://127.0.0.1:8081/v1.
    #[arg(long)]
    pub llm_url: Option<String>,
    #[arg(long, default_value = "local")]
    pub model: String,
    /// The judge's endpoint and model (default: the answering ones).
    #[arg(long)]
    pub judge_url: Option<String>,
    #[arg(long)]
    pub judge_model: Option<String>,
    /// A bearer key for the endpoints.
    #[arg(long, env = "MNEMO_QA_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// A PEM bundle of extra trusted certificates for the endpoints (a private CA).
    #[arg(long, env = "MNEMO_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// The context budget per question.
    #[arg(long, default_value_t = 1200)]
    pub max_tokens: u32,
    /// Ask every n-th answerable question only (a slow local model).
    #[arg(long, default_value_t = 1)]
    pub every: usize,
    /// Where every answer and verdict goes (JSON lines).
    #[arg(long, default_value = "locomo-qa.jsonl")]
    pub out: PathBuf,
    /// Seconds per model request at most.
    #[arg(long, default_value_t = 300)]
    pub timeout_secs: u64,
}

impl QaArgs {
    /// The options when `--qa` asked for a run.
    pub fn requested(self) -> Option<QaArgs> {
        self.qa.then_some(self)
    }
}

const ANSWER_SYSTEM: &str = "You answer questions about people from memories of their past conversations. \
Use only the memories given. Dates in the memories are absolute; when a memory says \"last week\" relative \
to its date, work out the actual date. Answer in a short phrase (a few words; a date, a name, a list), \
not a sentence. If the memories do not contain the answer, say \"unknown\".";

fn answer_prompt(context: &str, question: &str) -> String {
    format!("Memories:\n{context}\n\nQuestion: {question}\nShort answer:")
}

const JUDGE_SYSTEM: &str = "You grade answers against a gold answer. Be generous: an answer is CORRECT \
when it names the same thing, person, place or topic as the gold answer, even if it is longer, worded \
differently or adds details; for dates and times it is CORRECT when it refers to the same date or period \
in any format (\"May 7th\" and \"7 May 2023\" agree; a relative expression counts when it resolves to the \
gold date). It is WRONG when it contradicts the gold answer, names something else, or says it does not \
know. Reply with one short sentence of reasoning, then a JSON object {\"label\": \"CORRECT\"} or \
{\"label\": \"WRONG\"} — never both labels.";

fn judge_prompt(question: &str, gold: &str, answer: &str) -> String {
    format!("Question: {question}\nGold answer: {gold}\nGenerated answer: {answer}")
}

/// The label of a judge's reply: its JSON object's `label`, else the last of CORRECT / WRONG.
pub fn verdict(reply: &str) -> Option<bool> {
    let upper = reply.to_uppercase();
    if let (Some(a), Some(b)) = (upper.find('{'), upper.rfind('}'))
        && a < b
        && let Ok(v) = serde_json::from_str::<Value>(&reply[a..=b])
        && let Some(l) = v.get("label").or_else(|| v.get("LABEL")).and_then(Value::as_str)
    {
        return match l.to_uppercase().as_str() {
            "CORRECT" => Some(true),
            "WRONG" => Some(false),
            _ => None,
        };
    }
    // The last label word ("INCORRECT" is WRONG).
    upper.split(|c: char| !c.is_ascii_alphabetic()).rev().find_map(|w| match w {
        "CORRECT" => Some(true),
        "WRONG" | "INCORRECT" => Some(false),
        _ => None,
    })
}

struct Chat {
    http: reqwest::Client,
    url: String,
    model: String,
    key: Option<String>,
}

impl Chat {
    /// One completion (temperature 0), retried on transport errors, 429 and 5xx.
    async fn ask(&self, system: &str, user: &str, max_tokens: u32) -> Result<(String, Duration)> {
        let url = format!("{}/chat/completions", self.url.trim_end_matches('/'));
        let body = json!({"model": self.model, "temperature": 0, "max_tokens": max_tokens, "stream": false,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]});
        let t = Instant::now();
        let mut last = String::new();
        for attempt in 0..4u32 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(500 * 2u64.pow(attempt))).await;
            }
            let mut req = self.http.post(&url).json(&body);
            if let Some(k) = &self.key {
                req = req.bearer_auth(k);
            }
            match req.send().await {
                Err(e) if !mnemo_providers::http::is_transient(&e) => bail!(mnemo_providers::http::describe(&url, &e)),
                Err(e) => last = mnemo_providers::http::describe(&url, &e),
                Ok(r) => {
                    let status = r.status();
                    let text = r.text().await.unwrap_or_default();
                    if status.is_success() {
                        let v: Value = serde_json::from_str(&text).with_context(|| format!("{url}: not JSON"))?;
                        let content = v["choices"][0]["message"]["content"]
                            .as_str()
                            .with_context(|| format!("{url}: no choices[0].message.content"))?;
                        return Ok((content.trim().to_string(), t.elapsed()));
                    }
                    last = format!("{url}: HTTP {status}: {}", text.chars().take(200).collect::<String>());
                    if !(status.as_u16() == 429 || status.is_server_error()) {
                        break;
                    }
                }
            }
        }
        bail!("{last}")
    }
}

#[derive(Default)]
struct Tally {
    correct: usize,
    n: usize,
    unlabelled: usize,
}

pub(super) async fn run(svc: &Arc<Service>, convs: &[Conversation], questions: &[Question], cfg: QaArgs) -> Result<()> {
    let tls = mnemo_providers::http::TlsOptions { ca_file: cfg.ca_file.clone() };
    let http = mnemo_providers::http::client_builder(&tls)
        .map_err(anyhow::Error::msg)?
        .timeout(Duration::from_secs(cfg.timeout_secs))
        .build()?;
    let llm_url = cfg.llm_url.clone().context("--llm-url: the answering model's endpoint")?;
    let answerer =
        Chat { http: http.clone(), url: llm_url.clone(), model: cfg.model.clone(), key: cfg.api_key.clone() };
    let judge = Chat {
        http,
        url: cfg.judge_url.clone().unwrap_or(llm_url),
        model: cfg.judge_model.clone().unwrap_or_else(|| cfg.model.clone()),
        key: cfg.api_key.clone(),
    };
    let target = super::locomo_e2e::ingest(svc, convs).await?;
    let user_of: HashMap<&str, &str> = convs.iter().map(|c| (c.conversation_id.as_str(), c.user_id.as_str())).collect();
    let asked: Vec<(usize, &Question)> = questions
        .iter()
        .enumerate()
        .filter(|(_, q)| q.category != "adversarial" && q.answer.as_deref().is_some_and(|a| !a.trim().is_empty()))
        .collect();
    let asked: Vec<(usize, &Question)> = asked.into_iter().step_by(cfg.every.max(1)).collect();
    println!(
        "QA: {} questions (adversarial left out{}), answered by {} at {}, judged by {}, context {} tokens",
        asked.len(),
        if cfg.every > 1 { format!("; every {}th", cfg.every) } else { String::new() },
        answerer.model,
        answerer.url,
        judge.model,
        cfg.max_tokens
    );
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(&cfg.out).with_context(|| format!("creating {}", cfg.out.display()))?,
    );
    let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
    let (mut ctx_ms, mut ans_ms, mut judge_ms, mut tokens) = (vec![], vec![], vec![], vec![]);
    let t0 = Instant::now();
    for (n, (i, q)) in asked.iter().enumerate() {
        let gold = q.answer.as_deref().unwrap_or_default();
        let t = Instant::now();
        let ctx = svc
            .get_context(ContextRequest {
                target: target.clone(),
                conversation_id: format!("qa-{i}"),
                query: Some(q.question.clone()),
                event_filter: EventFilter {
                    user_id: vec![user_of[q.conversation_id.as_str()].to_string()],
                    ..Default::default()
                },
                event_limit: 200,
                decay: TimeDecay::NONE,
                similarity_threshold: None,
                profile_filter: ProfileFilter::default(),
                profile_limit: 1,
                max_tokens: cfg.max_tokens,
                include: Include::default(),
                locale: Some(mnemo_core::context::Locale::En),
            })
            .await?;
        ctx_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        tokens.push(ctx.assembled.token_count as f64);
        let (answer, a_took) =
            answerer.ask(ANSWER_SYSTEM, &answer_prompt(&ctx.assembled.context_str, &q.question), 64).await?;
        let (reply, j_took) = judge.ask(JUDGE_SYSTEM, &judge_prompt(&q.question, gold, &answer), 160).await?;
        ans_ms.push(a_took.as_secs_f64() * 1000.0);
        judge_ms.push(j_took.as_secs_f64() * 1000.0);
        let label = verdict(&reply);
        let tally = tallies.entry(q.category.clone()).or_default();
        tally.n += 1;
        tally.correct += (label == Some(true)) as usize;
        tally.unlabelled += label.is_none() as usize;
        writeln!(
            out,
            "{}",
            json!({"question_index": i, "conversation_id": q.conversation_id, "category": q.category,
                   "question": q.question, "gold": gold, "answer": answer, "judge_reply": reply,
                   "label": label.map(|l| if l { "CORRECT" } else { "WRONG" }),
                   "context_tokens": ctx.assembled.token_count, "context_ms": ctx_ms.last(),
                   "answer_ms": ans_ms.last(), "judge_ms": judge_ms.last()})
        )?;
        if (n + 1) % 25 == 0 {
            out.flush()?;
            eprintln!("  {}/{} questions, {:.0} s", n + 1, asked.len(), t0.elapsed().as_secs_f64());
        }
    }
    out.flush()?;
    println!("\n| category | J | questions | unlabelled |\n| --- | --- | --- | --- |");
    let mut total = Tally::default();
    for (cat, t) in &tallies {
        println!("| {cat} | {:.3} | {} | {} |", t.correct as f64 / t.n.max(1) as f64, t.n, t.unlabelled);
        total.correct += t.correct;
        total.n += t.n;
        total.unlabelled += t.unlabelled;
    }
    println!(
        "| **overall** | {:.3} | {} | {} |",
        total.correct as f64 / total.n.max(1) as f64,
        total.n,
        total.unlabelled
    );
    for v in [&mut tokens, &mut ctx_ms, &mut ans_ms, &mut judge_ms] {
        v.sort_by(f64::total_cmp);
    }
    let p = |v: &Vec<f64>, q: f64| percentile(v, q);
    println!(
        "context tokens per question: median {:.0}, p95 {:.0}; latency p50/p95 ms: get_context {:.1}/{:.1}, answer {:.0}/{:.0}, judge {:.0}/{:.0}",
        p(&tokens, 0.5),
        p(&tokens, 0.95),
        p(&ctx_ms, 0.5),
        p(&ctx_ms, 0.95),
        p(&ans_ms, 0.5),
        p(&ans_ms, 0.95),
        p(&judge_ms, 0.5),
        p(&judge_ms, 0.95),
    );
    println!("every answer and verdict: {}", cfg.out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::verdict;

    #[test]
    fn verdicts_are_read_from_the_json_label_or_the_last_word() {
        assert_eq!(verdict("Same date. {\"label\": \"CORRECT\"}"), Some(true));
        assert_eq!(verdict("It is not WRONG to say so, but {\"label\": \"WRONG\"}"), Some(false));
        assert_eq!(verdict("The answer names another city. WRONG"), Some(false));
        assert_eq!(verdict("Correct, it matches."), Some(true));
        assert_eq!(verdict("I cannot tell."), None);
        assert_eq!(verdict("The answer is incorrect."), Some(false));
    }
}
