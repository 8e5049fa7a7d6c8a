//! `mnemo bench locomo --qa`: the answer-accuracy protocol against a scripted OpenAI-compatible
//! server (the protocol, not a score): each answerable question gets mnemo's context, the model's
//! answer and the judge's verdict; the adversarial category is left out; a 503 is retried; every
//! answer and verdict is written as JSON lines and J is printed per category.

use crate::harness::BIN;
use crate::llm::{Answer, fake_llm, prompt};
use serde_json::{Value, json};
use std::path::Path;

/// `mnemo bench locomo DIR --qa ARGS…`, off the async runtime; answers (stdout, the JSON lines).
async fn bench_qa(dir: &Path, args: &[&str]) -> (String, Vec<Value>) {
    let out = dir.join(format!("qa-{}.jsonl", args.len()));
    let mut cmd = std::process::Command::new(BIN);
    cmd.args(["bench", "locomo"]).arg(dir).arg("--qa").args(args).arg("--out").arg(&out).env("MNEMO_LOG", "warn");
    let run = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(run.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    let records = std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    (stdout, records)
}

#[tokio::test]
async fn the_qa_protocol_answers_from_the_context_and_judges_against_the_gold_answer() {
    let dir = tempfile::tempdir().unwrap();
    let turn = |id: &str, role: &str, speaker: &str, text: &str| json!({"role": role, "speaker": speaker, "content": text, "turn_id": id});
    let conv = json!({"conversation_id": "conv-x", "user_id": "caroline", "sessions": [
        {"session_id": "session_1", "time": "2023-05-08T13:56:00", "messages": [
            turn("D1:1", "user", "Caroline", "I moved to Lisbon last month for my new job."),
            turn("D1:2", "assistant", "Melanie", "Lisbon is lovely! How is the job?")]},
        {"session_id": "session_2", "time": "2023-06-01T10:00:00", "messages": [
            turn("D2:1", "user", "Caroline", "I started painting sunsets on weekends."),
            turn("D2:2", "assistant", "Melanie", "That sounds relaxing.")]}]});
    std::fs::write(dir.path().join("conversations.jsonl"), format!("{conv}\n")).unwrap();
    let q = |question: &str, answer: Option<&str>, category: &str, ev: &str| {
        json!({"conversation_id": "conv-x", "question": question, "answer": answer, "category": category,
               "evidence_turn_ids": [ev]})
        .to_string()
    };
    std::fs::write(
        dir.path().join("questions.jsonl"),
        [
            q("Where did Caroline move?", Some("Lisbon"), "single-hop", "D1:1"),
            q("What does Caroline paint?", Some("sunsets"), "single-hop", "D2:1"),
            q("What is Caroline's cat called?", None, "adversarial", "D1:1"),
            q("What job does Caroline have?", Some("nurse"), "multi-hop", "D1:1"),
        ]
        .join("\n"),
    )
    .unwrap();
    // The scripted model: answers with the first known word its context holds, "unknown"
    // otherwise; judges by containment. The very first request fails once (503).
    let llm = fake_llm(false, |body: &Value, _| {
        let system = body["messages"][0]["content"].as_str().unwrap_or_default().to_string();
        let user = prompt(body);
        if system.starts_with("You answer") {
            let (ctx, question) = user.split_once("Question:").unwrap();
            let word = if question.contains("move") {
                "Lisbon"
            } else if question.contains("paint") {
                "sunsets"
            } else {
                "a teacher"
            };
            return Answer::Raw(if ctx.contains(word) { word.to_string() } else { "unknown".to_string() });
        }
        let gold = user.split("Gold answer: ").nth(1).unwrap().lines().next().unwrap().to_lowercase();
        let answer = user.split("Generated answer: ").nth(1).unwrap().to_lowercase();
        Answer::Raw(format!(
            "Compared. {{\"label\": \"{}\"}}",
            if answer.contains(&gold) { "CORRECT" } else { "WRONG" }
        ))
    })
    .await;
    // (The fake counts per prompt: each verdict's first request fails.)
    let flaky =
        fake_llm(
            false,
            |_, n| if n == 0 { Answer::Status(503) } else { Answer::Raw("{\"label\": \"CORRECT\"}".into()) },
        )
        .await;
    let (stdout, records) = bench_qa(dir.path(), &["--llm-url", &llm.url, "--model", "scripted"]).await;
    assert!(stdout.contains("QA: 3 questions (adversarial left out)"), "{stdout}");
    assert!(stdout.contains("| single-hop | 1.000 | 2 | 0 |"), "{stdout}");
    assert!(stdout.contains("| multi-hop | 0.000 | 1 | 0 |"), "{stdout}");
    assert!(stdout.contains("| **overall** | 0.667 | 3 | 0 |"), "{stdout}");
    assert_eq!(records.len(), 3);
    assert_eq!(records[0]["answer"], "Lisbon");
    assert_eq!(records[0]["label"], "CORRECT");
    assert_eq!(records[2]["answer"], "unknown");
    assert_eq!(records[2]["label"], "WRONG");
    assert!(records.iter().all(|r| r["context_tokens"].as_u64().unwrap() > 0 && r["judge_reply"].is_string()));
    assert_eq!(llm.count(), 6, "an answer and a verdict per question");

    // A separate judge endpoint that fails once: retried, and used for every verdict.
    let args = ["--llm-url", &llm.url, "--judge-url", &flaky.url, "--judge-model", "judge", "--every", "2"];
    let (stdout, _) = bench_qa(dir.path(), &args).await;
    assert!(stdout.contains("QA: 2 questions (adversarial left out; every 2th)"), "{stdout}");
    assert_eq!(flaky.count(), 4, "two verdicts, each after a retried 503");
    assert!(stdout.contains("| **overall** | 1.000 | 2 | 0 |"), "{stdout}");
}
