//! `mnemo bench scope`: how search latency grows with the number of events in one user's scope —
//! the measurement behind "exact scan within a scope, an ANN index only where a scope is large".
//! For each size N, N events of one user (synthetic 512-d unit vectors and texts, written through
//! the store with their vectors and full-text terms) are searched 200 times: vector only, and
//! hybrid (vector + BM25 terms). Baseline in the same process: a plain in-memory dot-product scan
//! over the same N vectors (the floor any exact search pays).

use crate::bench::{Rng, WORDS, percentile, synthetic_event};
use anyhow::Result;
use mnemo_core::embed::{dot, normalize};
use mnemo_core::model::*;
use mnemo_core::store::prelude::*;
use mnemo_store::{SqliteOptions, SqliteStore};
use std::time::Instant;

fn vector(rng: &mut Rng, centre: &[f32]) -> Vec<f32> {
    // Clustered like text embeddings: a topic centre plus noise.
    let mut v: Vec<f32> = centre.iter().map(|c| c + 0.6 * rng.f()).collect();
    normalize(&mut v);
    v
}

pub async fn run(sizes: &[usize]) -> Result<()> {
    println!("scope benchmark: one user's scope of N events, 512-d vectors, 200 queries per size, k = 10");
    println!(
        "| events in scope | in-memory scan (baseline) p50 / p95 | store vector search p50 / p95 | hybrid p50 / p95 | ratio vector/baseline p50 |"
    );
    println!("| --- | --- | --- | --- | --- |");
    for &n in sizes {
        let dir = tempfile::tempdir()?;
        let store = SqliteStore::open(dir.path(), SqliteOptions::default())?;
        let c = store
            .ensure_collection(NewCollection {
                id: None,
                project_name: "default".into(),
                collection_name: "bench".into(),
                description: String::new(),
                schema: CollectionSchema::default(),
                embedding_model: "synthetic".into(),
                embedding_dim: 512,
                created_at: 0,
            })
            .await?;
        let mut rng = Rng(0x9E3779B97F4A7C15 ^ n as u64);
        let centres: Vec<Vec<f32>> = (0..50).map(|_| (0..512).map(|_| rng.f()).collect()).collect();
        let mut all = Vec::with_capacity(n);
        let t0 = Instant::now();
        // Written concurrently so the writer's group commit batches them, as under real load.
        let store = std::sync::Arc::new(store);
        let mut pending = Vec::new();
        for i in 0..n {
            let v = vector(&mut rng, &centres[i % centres.len()]);
            all.push(v.clone());
            let s = store.clone();
            let event = synthetic_event(c.id, "u".into(), format!("event {i}: {}", rng.words(8)), v, i as i64);
            pending.push(tokio::spawn(async move { s.insert_event(event).await }));
            if pending.len() >= 256 {
                for p in pending.drain(..) {
                    p.await??;
                }
            }
        }
        for p in pending {
            p.await??;
        }
        let ingest = t0.elapsed().as_secs_f64();
        let filter = EventFilter { user_id: vec!["u".into()], active_only: true, ..Default::default() };
        let (mut base, mut vec_only, mut hybrid) = (vec![], vec![], vec![]);
        for q in 0..200 {
            let qv = vector(&mut rng, &centres[q % centres.len()]);
            let t = Instant::now();
            let mut best: Vec<(f32, usize)> = all.iter().enumerate().map(|(i, v)| (dot(&qv, v), i)).collect();
            best.select_nth_unstable_by(9.min(n - 1), |a, b| b.0.total_cmp(&a.0));
            std::hint::black_box(&best[..10.min(n)]);
            base.push(t.elapsed().as_secs_f64() * 1000.0);
            let t = Instant::now();
            store
                .search_candidates(
                    c.id,
                    filter.clone(),
                    CandidateQuery { vector: Some(qv.clone()), terms: vec![], k: 10, vector_hits: None, corpus: None },
                )
                .await?;
            vec_only.push(t.elapsed().as_secs_f64() * 1000.0);
            let terms = vec![WORDS[q % WORDS.len()].to_string(), WORDS[(q * 7) % WORDS.len()].to_string()];
            let t = Instant::now();
            store
                .search_candidates(
                    c.id,
                    filter.clone(),
                    CandidateQuery { vector: Some(qv), terms, k: 10, vector_hits: None, corpus: None },
                )
                .await?;
            hybrid.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        for v in [&mut base, &mut vec_only, &mut hybrid] {
            v.sort_by(|a, b| a.total_cmp(b));
        }
        println!(
            "| {n} (ingest {:.0}/s) | {:.2} / {:.2} ms | {:.2} / {:.2} ms | {:.2} / {:.2} ms | {:.1}× |",
            n as f64 / ingest,
            percentile(&base, 0.5),
            percentile(&base, 0.95),
            percentile(&vec_only, 0.5),
            percentile(&vec_only, 0.95),
            percentile(&hybrid, 0.5),
            percentile(&hybrid, 0.95),
            percentile(&vec_only, 0.5) / percentile(&base, 0.5)
        );
    }
    Ok(())
}
