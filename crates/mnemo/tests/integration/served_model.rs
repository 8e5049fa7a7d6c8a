//! EmbeddingGemma served elsewhere: the `openai` provider with `same_as: embeddinggemma-300m`
//! against an OpenAI-compatible embeddings server running the same model (here the local graph
//! behind `/v1/embeddings`, answering for the text as sent, as a text-embeddings server does).
//! Its vectors stand in for the local ones — same model id, prompts and calibration — so a data
//! directory moves between the two without reindexing, and searches rank alike.

use crate::harness::*;
use mnemo_core::embed::{EmbedKind, Embedder, dot};
use mnemo_providers::embed::{LocalEmbedder, LocalModel, OpenAiEmbedder, OpenAiEmbedderConfig, find_model_dir};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// An embeddings server running EmbeddingGemma; records the texts it was sent.
async fn embeddings_server(model: Arc<LocalEmbedder>) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
    use axum::{Json, Router, routing::post};
    let seen: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let got = seen.clone();
    let app = Router::new().route(
        "/v1/embeddings",
        post(move |Json(body): Json<Value>| {
            let (model, got) = (model.clone(), got.clone());
            async move {
                let texts: Vec<String> =
                    body["input"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect();
                got.lock().unwrap().extend(texts.iter().cloned());
                let vectors = tokio::task::spawn_blocking(move || {
                    texts.iter().map(|t| model.embed_unprompted(t).unwrap()).collect::<Vec<_>>()
                })
                .await
                .unwrap();
                let data: Vec<Value> = vectors
                    .into_iter()
                    .enumerate()
                    .map(|(i, v)| json!({"object": "embedding", "index": i, "embedding": v}))
                    .collect();
                Json(json!({"object": "list", "model": body["model"], "data": data}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

fn local() -> Arc<LocalEmbedder> {
    let dir = find_model_dir(None, LocalModel::Gemma).expect("./scripts/setup-model installs EmbeddingGemma");
    Arc::new(LocalEmbedder::open(&dir, LocalModel::Gemma, 1).unwrap())
}

/// (summary, origin_score) of a query search's results, which must have run on vectors.
async fn search(s: &Server, q: &str) -> Vec<(String, f64)> {
    let body = json!({"collection_name": "c", "query": q, "filter": {"user_id": "u"}, "limit": 4});
    let r = s.ok("event/search", body).await;
    assert_eq!(r["semantic"], true, "{r}");
    r["result_list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["memory_info"]["summary"].as_str().unwrap().to_string(), e["origin_score"].as_f64().unwrap()))
        .collect()
}

async fn add(s: &Server, text: &str) {
    let body =
        json!({"collection_name": "c", "event_type": "event_v1", "user_id": "u", "memory_info": {"summary": text}});
    s.ok("event/add", body).await;
}

const MEMORIES: [&str; 4] = [
    "The baby gets gassy after drinking formula.",
    "用户下个月去京都旅行，住在祇园附近。",
    "The user plays the cello in a community orchestra on Thursdays.",
    "The user is allergic to peanuts.",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_embeddinggemma_stands_in_for_the_local_model_without_reindexing() {
    let model = local();
    let (url, seen) = embeddings_server(model.clone()).await;
    let served = OpenAiEmbedder::new(OpenAiEmbedderConfig {
        base_url: url.clone(),
        model: "google/embeddinggemma-300m".into(),
        dimension: 768,
        api_key: None,
        timeout: Duration::from_secs(30),
        api_version: None,
        api_key_header: None,
        served: Some(LocalModel::Gemma.served().unwrap()),
        tls: Default::default(),
    })
    .unwrap();
    // The same id, calibration and fusion as the local model: one index serves both.
    assert_eq!(served.model_id(), model.model_id());
    assert_eq!(served.query_offset("x"), model.query_offset("x"));
    assert_eq!(served.fusion(), model.fusion());
    assert_eq!(served.relevance_floor(), model.relevance_floor());
    let texts: Vec<String> = MEMORIES.iter().map(|s| s.to_string()).collect();
    for kind in [EmbedKind::Document, EmbedKind::Query] {
        let remote = served.embed(&texts, kind).await.unwrap();
        let here = model.embed(&texts, kind).await.unwrap();
        for (r, h) in remote.iter().zip(&here) {
            let cos = dot(r, h) / (dot(r, r).sqrt() * dot(h, h).sqrt());
            assert!(cos >= 0.99, "{kind:?}: cosine {cos} to the local vector");
            let (nr, nh) = (dot(r, r).sqrt(), dot(h, h).sqrt());
            assert!((nr - nh).abs() < 1e-3, "{kind:?}: scaled alike ({nr} vs {nh})");
        }
    }
    let sent = seen.lock().unwrap().clone();
    assert!(sent.iter().any(|t| t.starts_with("title: none | text: The baby")), "document prompt sent: {sent:?}");
    assert!(sent.iter().any(|t| t.starts_with("task: search result | query: ")), "query prompt sent: {sent:?}");

    // A data directory indexed locally is searched through the server, and back.
    let dir = tempfile::tempdir().unwrap();
    let (data, cfg_local, cfg_served) =
        (dir.path().join("data"), dir.path().join("local.yaml"), dir.path().join("served.yaml"));
    std::fs::write(&cfg_local, "").unwrap();
    std::fs::write(
        &cfg_served,
        format!(
            "embedding:\n  provider: openai\n  base_url: {url}\n  model: google/embeddinggemma-300m\n  same_as: embeddinggemma-300m\n"
        ),
    )
    .unwrap();
    let mut s = Server::spawn(&cfg_local, &data, "127.0.0.1:0", &[]).unwrap();
    for m in &MEMORIES[..3] {
        add(&s, m).await;
    }
    // Words the memories do not share: only the vectors can find them.
    let queries = ["what upsets the infant's stomach", "日本旅行的计划", "which instrument"];
    let mut before = Vec::new();
    for q in queries {
        before.push(search(&s, q).await);
    }
    s.kill9();
    let s = Server::spawn(&cfg_served, &data, "127.0.0.1:0", &[]).expect("no reindex is asked for");
    for (q, b) in queries.iter().zip(&before) {
        let now = search(&s, q).await;
        assert_eq!(now[0].0, b[0].0, "{q}: the same memory first");
        assert!((now[0].1 - b[0].1).abs() < 0.02, "{q}: relevance {} served vs {} local", now[0].1, b[0].1);
    }
    add(&s, MEMORIES[3]).await;
    drop(s);
    let s = Server::spawn(&cfg_local, &data, "127.0.0.1:0", &[]).unwrap();
    assert_eq!(search(&s, "food allergy").await[0].0, MEMORIES[3], "a served vector is found by the local model");
}
