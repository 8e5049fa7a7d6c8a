//! Opt-in tier: the `llm` extractor against a real local model (`scripts/setup-llm qwen0.5b
//! --serve 8081`, then `MNEMO_TEST_LLM_URL=http://127.0.0.1:8081/v1`). Small models on two CPU
//! cores are slow and their content varies, so this asserts the contract — the job completes,
//! what is stored is valid, dates are anchored, the context shows it — not the wording.

use crate::harness::*;
use serde_json::json;

#[tokio::test]
async fn a_real_model_extracts_valid_memories_end_to_end() {
    let Ok(url) = std::env::var("MNEMO_TEST_LLM_URL") else {
        eprintln!("skipped: MNEMO_TEST_LLM_URL is not set (run scripts/setup-llm qwen0.5b --serve 8081)");
        return;
    };
    let s = Server::start(&format!(
        "extraction:\n  provider: llm\n  base_url: {url}\n  model: local\n  request_timeout_secs: 600\n  timeout_secs: 1200\n  utc_offset: \"+08:00\"\n"
    ));
    let t = 1_795_917_600_000i64; // 2026-11-29 10:00 at UTC+8
    let messages = json!([
        {"role": "user", "content": "你好，我叫李明，在杭州做后端开发。昨天我带女儿去了西湖。", "time": t},
        {"role": "assistant", "content": "听起来很不错！西湖这个季节很美。", "time": t + 30_000},
        {"role": "user", "content": "下周六我想带她去上海迪士尼，我对花生过敏，园区吃饭要注意什么？", "time": t + 60_000},
        {"role": "assistant", "content": "点餐时告诉服务员过敏原，随身带抗过敏药。", "time": t + 90_000},
    ]);
    s.write("zh", messages, json!({"message_count": 4}), "liming").await;
    let jobs = eventually(1200, "the real model's extraction", || async {
        let jobs = s.jobs().await;
        jobs.iter().all(|j| j["state"] == "done" || j["state"] == "failed").then_some(jobs)
    })
    .await;
    assert_eq!(jobs[0]["state"], "done", "{jobs:?}");
    assert!(jobs[0]["token_usage"]["prompt_tokens"].as_u64().unwrap() > 100, "usage recorded: {jobs:?}");
    let events = s.events("liming").await;
    eprintln!("real model events: {:#?}", events.iter().map(|e| &e["memory_info"]["summary"]).collect::<Vec<_>>());
    assert!(!events.is_empty(), "the model found something worth remembering");
    for e in &events {
        let summary = e["memory_info"]["summary"].as_str().expect("every stored event has a summary");
        assert!(!summary.trim().is_empty() && summary.chars().count() <= 200, "short summaries: {summary}");
        assert!(!e["source_message_ids"].as_array().unwrap().is_empty(), "provenance kept");
    }
    let profiles = s.ok("profile/search", json!({"collection_name": "c", "filter": {"user_id": "liming"}})).await;
    eprintln!("real model profile: {}", profiles["result_list"]);
    let ctx = s.ok("get_context", json!({"collection_name": "c", "conversation_id": "zh", "query": "迪士尼"})).await;
    assert!(!ctx["context_str"].as_str().unwrap().is_empty());
}
