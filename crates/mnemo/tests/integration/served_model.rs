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

/// The texts of each request an embeddings server was sent.
type Requests = Arc<std::sync::Mutex<Vec<Vec<String>>>>;

/// An embeddings server running EmbeddingGemma; records the requests it was sent.
async fn embeddings_server(model: Arc<LocalEmbedder>) -> (String, Requests) {
    use axum::{Json, Router, routing::post};
    let seen: Requests = Arc::default();
    let got = seen.clone();
    let app = Router::new().route(
        "/v1/embeddings",
        post(move |Json(body): Json<Value>| {
            let (model, got) = (model.clone(), got.clone());
            async move {
                let texts: Vec<String> =
                    body["input"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect();
                got.lock().unwrap().push(texts.clone());
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
        max_batch: 32,
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
    let sent = seen.lock().unwrap().concat();
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

/// Documents on the server, queries here (`embedding.documents`): every memory written — an
/// extraction's chunk and turns, `event/add` — reaches the server with the document prompt, in
/// requests of at most `max_batch` texts; no query does; searches answer on vectors either way,
/// and the directory stays the local model's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_embedded_by_a_server_queries_here_in_one_index() {
    let (url, seen) = embeddings_server(local()).await;
    let dir = tempfile::tempdir().unwrap();
    let (data, cfg_split, cfg_local) =
        (dir.path().join("data"), dir.path().join("split.yaml"), dir.path().join("local.yaml"));
    std::fs::write(&cfg_local, "").unwrap();
    std::fs::write(
        &cfg_split,
        format!(
            "embedding:\n  documents:\n    provider: openai\n    base_url: {url}\n    model: google/embeddinggemma-300m\n    same_as: embeddinggemma-300m\n    max_batch: 2\n"
        ),
    )
    .unwrap();
    let s = Server::spawn(&cfg_split, &data, "127.0.0.1:0", &[]).unwrap();
    for m in &MEMORIES[..3] {
        add(&s, m).await;
    }
    // A conversation extracted by the rules: a chunk of four turns and each turn's vector.
    let turns = [
        ("user", "We finally booked the flights for our anniversary trip to Lisbon in October."),
        ("assistant", "How exciting! Are you staying in Alfama?"),
        ("user", "Yes, a small guesthouse with a view of the river."),
        ("assistant", "That sounds perfect for an anniversary."),
    ];
    s.write("trip", msgs(&turns), json!({"message_count": 4}), "u").await;
    eventually(120, "the conversation extracted", || async {
        let events = s.events("u").await;
        events.iter().any(|e| e["memory_info"]["summary"].as_str().is_some_and(|t| t.contains("Lisbon"))).then_some(())
    })
    .await;
    let requests = seen.lock().unwrap().clone();
    let texts = requests.concat();
    assert!(
        requests.iter().all(|r| !r.is_empty() && r.len() <= 2),
        "max_batch 2: {:?}",
        requests.iter().map(Vec::len).collect::<Vec<_>>()
    );
    assert!(texts.iter().all(|t| t.starts_with("title: none | text: ")), "documents only: {texts:?}");
    for (_, turn) in turns {
        assert!(texts.iter().any(|t| t.contains(turn)), "the turn's vector came from the server: {turn}");
    }
    let sent = texts.len();
    // Queries are embedded here: the server hears nothing of them.
    assert_eq!(search(&s, "which instrument").await[0].0, MEMORIES[2]);
    let trip = search(&s, "where will they celebrate their anniversary").await;
    assert!(trip[0].0.contains("Lisbon"), "{trip:?}");
    assert_eq!(seen.lock().unwrap().concat().len(), sent, "no query reached the server");
    // The directory is the local model's: the local model alone serves it.
    drop(s);
    let s = Server::spawn(&cfg_local, &data, "127.0.0.1:0", &[]).expect("no reindex is asked for");
    assert_eq!(search(&s, "what upsets the infant's stomach").await[0].0, MEMORIES[0]);
}
