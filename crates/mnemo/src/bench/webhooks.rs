//! `mnemo bench webhooks`: what the outbox costs a write, and how fast it is delivered.
//!
//! Per store, in one process: event inserts with no endpoint registered (the baseline: each
//! trigger only looks at an empty table) against inserts with one subscribed endpoint (one outbox
//! row per event, in the event's transaction), alternating rounds so a busy machine affects both
//! alike; then the outbox of the last round delivered to a local receiver (signed, over HTTP).

use crate::bench::{Rng, percentile, synthetic_event};
use crate::config::Config;
use anyhow::{Context, Result};
use mnemo_core::model::*;
use mnemo_core::service::Service;
use mnemo_core::store::Store;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

const ROUNDS: usize = 3;

async fn insert_round(store: &Arc<dyn Store>, cid: CollectionId, n: usize, seed: u64) -> Result<f64> {
    let mut rng = Rng(seed);
    let mut pending = Vec::new();
    let t0 = Instant::now();
    for i in 0..n {
        let mut v: Vec<f32> = (0..512).map(|_| rng.f()).collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
        v.iter_mut().for_each(|x| *x /= norm);
        let event = synthetic_event(cid, format!("user-{}", i % 100), rng.words(10), v, 1_700_000_000_000 + i as i64);
        let s = store.clone();
        pending.push(tokio::spawn(async move { s.insert_event(event).await }));
        if pending.len() >= 512 {
            for p in pending.drain(..) {
                p.await??;
            }
        }
    }
    for p in pending {
        p.await??;
    }
    Ok(n as f64 / t0.elapsed().as_secs_f64())
}

fn hook(url: &str) -> NewWebhook {
    NewWebhook {
        id: "bench".into(),
        project_name: "default".into(),
        url: url.into(),
        secret: mnemo_core::service::new_webhook_secret(),
        events: WEBHOOK_EVENTS.iter().map(|s| s.to_string()).collect(),
        description: String::new(),
        source: WebhookSource::Api,
        created_at: 0,
    }
}

/// A receiver that answers 204 and counts.
async fn receiver() -> Result<(Arc<AtomicUsize>, String)> {
    use axum::{Router, http::StatusCode, routing::post};
    let got = Arc::new(AtomicUsize::new(0));
    let count = got.clone();
    let app = Router::new().route(
        "/hook",
        post(move || {
            let c = count.clone();
            async move {
                c.fetch_add(1, Ordering::Relaxed);
                StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((got, url))
}

pub async fn run(events: usize, stores: crate::bench::Stores, mut cfg: Config) -> Result<()> {
    println!(
        "webhooks benchmark: {ROUNDS} alternating rounds of {events} event inserts (512 in flight), stores {:?}",
        stores.stores
    );
    let mut rows = Vec::new();
    for store_kind in &stores.stores {
        stores.prepare(store_kind, "webhooks", &mut cfg).await?;
        let dir = tempfile::tempdir()?;
        cfg.store.path = dir.path().to_path_buf();
        let store = crate::app::open_store(&cfg).await?;
        let c = store
            .ensure_collection(NewCollection {
                id: None,
                project_name: "default".into(),
                collection_name: "hooks".into(),
                description: String::new(),
                schema: CollectionSchema::default(),
                embedding_model: "bench".into(),
                embedding_dim: 512,
                created_at: 0,
            })
            .await?;
        let (got, url) = receiver().await?;
        let (mut base, mut with) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            store.delete_webhook("default", "bench").await?;
            base.push(insert_round(&store, c.id, events, 2 * round as u64 + 1).await?);
            store.upsert_webhook(hook(&url)).await?;
            with.push(insert_round(&store, c.id, events, 2 * round as u64 + 2).await?);
            println!(
                "  {store_kind} round {}: {:.0} events/s without an endpoint, {:.0} with one",
                round + 1,
                base[round],
                with[round]
            );
        }
        base.sort_by(f64::total_cmp);
        with.sort_by(f64::total_cmp);
        let pending = store.list_webhooks(Some("default")).await?.first().map(|w| w.pending).context("the endpoint")?;

        // Delivery of the outbox (one endpoint, every row of the last round).
        let embedder: Arc<dyn mnemo_core::Embedder> = Arc::new(mnemo_core::embed::HashingEmbedder { dim: 512 });
        let service: Arc<Service> =
            crate::app::service_on(&cfg, Arc::new(mnemo_core::SystemClock), embedder, store.clone())?;
        service.set_webhook_sender(Arc::new(
            mnemo_providers::webhook::HttpWebhookSender::new(&Default::default()).map_err(|e| anyhow::anyhow!(e))?,
        ));
        let t0 = Instant::now();
        while service.deliver_webhooks_once().await? > 0 {}
        let secs = t0.elapsed().as_secs_f64();
        let delivered = got.load(Ordering::Relaxed);
        println!(
            "  {store_kind}: {delivered} of {pending} deliveries in {secs:.1} s ({:.0}/s)",
            delivered as f64 / secs
        );
        rows.push((store_kind.clone(), percentile(&base, 0.5), percentile(&with, 0.5), delivered as f64 / secs));
    }
    println!(
        "\n| store | inserts/s, no endpoint (baseline) | inserts/s, one endpoint | ratio | deliveries/s (batch {}) |",
        cfg.webhook_delivery.batch
    );
    println!("| --- | --- | --- | --- | --- |");
    for (store, b, w, d) in rows {
        println!("| {store} | {b:.0} | {w:.0} | {:.2} | {d:.0} |", w / b);
    }
    Ok(())
}
