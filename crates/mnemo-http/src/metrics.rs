//! `GET /metrics` in the Prometheus/OpenMetrics text format: request counts and latency
//! histograms per route, and at scrape time the job queue by state, extraction outcomes since
//! start, and the store's row counts and bytes. Labels use the matched route (never the raw path),
//! so unknown paths cannot grow the series without bound.

use crate::AppState;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::Ordering;
use std::time::Instant;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

fn latency_histogram() -> Histogram {
    // 0.25 ms … ~4 s
    Histogram::new(exponential_buckets(0.000_25, 2.0, 15))
}

pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<RouteLabels, Histogram, fn() -> Histogram>,
    jobs: Family<StateLabels, Gauge>,
    outcomes: Family<OutcomeLabels, Gauge>,
    rows: Family<KindLabels, Gauge>,
    bytes: Gauge,
    webhooks: Family<StateLabels, Gauge>,
    full_text_searches: Gauge,
    query_cache: Family<OutcomeLabels, Gauge>,
    query_cache_entries: Gauge,
    scope_cache: Family<OutcomeLabels, Gauge>,
    scope_cache_bytes: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("mnemo");
        let requests = Family::<RequestLabels, Counter>::default();
        let latency = Family::<RouteLabels, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram);
        let (jobs, outcomes, rows, bytes) = (Family::default(), Family::default(), Family::default(), Gauge::default());
        registry.register("http_requests", "HTTP requests by route and status", requests.clone());
        registry.register("http_request_duration_seconds", "HTTP request latency by route", latency.clone());
        registry.register(
            "jobs",
            "Extraction jobs in the store by state (queue depth: queued + running)",
            jobs.clone(),
        );
        registry.register(
            "job_attempts",
            "Extraction attempts since start by outcome (done, retried, failed, deferred by the token budget)",
            outcomes.clone(),
        );
        registry.register("store_rows", "Rows in the store by kind", rows.clone());
        registry.register("store_bytes", "Bytes of the store's files", bytes.clone());
        let webhooks = Family::default();
        registry.register(
            "webhook_deliveries",
            "Webhook deliveries in the outbox by state (dead: attempts exhausted, see webhook/deliveries)",
            webhooks.clone(),
        );
        let full_text_searches = Gauge::default();
        registry.register(
            "full_text_only_searches",
            "Query searches and contexts since start that ran on full text alone: the query could not be embedded \
             (the embedder's queue was full, or it failed); each answer says so with \"semantic\": false",
            full_text_searches.clone(),
        );
        let (query_cache, query_cache_entries) = (Family::default(), Gauge::default());
        registry.register(
            "query_cache_lookups",
            "Query embeddings looked up in the cache since start, by outcome (hit: not embedded again)",
            query_cache.clone(),
        );
        registry.register("query_cache_entries", "Query vectors in the cache now", query_cache_entries.clone());
        let (scope_cache, scope_cache_bytes) = (Family::default(), Gauge::default());
        registry.register(
            "scope_cache_lookups",
            "Scoped searches since start by outcome (hit: the user's events' terms — and on SQLite their vector \
             copies — kept from an earlier search, nothing of theirs changed since; miss: read from the store)",
            scope_cache.clone(),
        );
        registry.register("scope_cache_bytes", "Memory the kept search scopes hold now", scope_cache_bytes.clone());
        Self {
            registry,
            requests,
            latency,
            jobs,
            outcomes,
            rows,
            bytes,
            webhooks,
            full_text_searches,
            query_cache,
            query_cache_entries,
            scope_cache,
            scope_cache_bytes,
        }
    }
}

/// Records every request's route, status and latency.
pub async fn track(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let route =
        req.extensions().get::<MatchedPath>().map(|p| p.as_str().to_string()).unwrap_or_else(|| "unmatched".into());
    let start = Instant::now();
    let resp = next.run(req).await;
    let m = &state.metrics;
    m.latency.get_or_create(&RouteLabels { route: route.clone() }).observe(start.elapsed().as_secs_f64());
    m.requests.get_or_create(&RequestLabels { route, status: resp.status().as_u16() }).inc();
    resp
}

pub async fn scrape(State(state): State<AppState>, req: axum::extract::Request) -> Response {
    // The figures are every tenant's: open (loopback without keys), `server.metrics_key`, or an
    // admin key for every project. A project's key sees its own figures through `stats`.
    if !state.metrics_key_matches(req.headers()) {
        match state.authenticate(req, "metrics").await {
            Ok((p, _)) if p.sees_every_tenant() => {}
            Ok(_) => {
                return crate::error::ApiError::new(
                    StatusCode::FORBIDDEN,
                    "metrics",
                    "Authorization: /metrics shows every tenant's figures; use server.metrics_key or an admin key \
                     for all projects (a project's own figures: POST /api/memory/stats)",
                )
                .into_response();
            }
            Err(e) => return e.into_response(),
        }
    }
    let svc = &state.service;
    let m = &state.metrics;
    if let Ok(stats) = svc.store_stats().await {
        for st in ["queued", "running", "done", "failed"] {
            let n = stats.jobs.iter().find(|(s, _)| s == st).map_or(0, |(_, n)| *n);
            m.jobs.get_or_create(&StateLabels { state: st.into() }).set(n as i64);
        }
        for (kind, n) in [
            ("conversations", stats.conversations),
            ("messages", stats.messages),
            ("events", stats.events),
            ("profiles", stats.profiles),
        ] {
            m.rows.get_or_create(&KindLabels { kind: kind.into() }).set(n as i64);
        }
        m.bytes.set(stats.bytes as i64);
        if let Some(kept) = stats.scope_cache {
            for (outcome, n) in [("hit", kept.hits), ("miss", kept.misses)] {
                m.scope_cache.get_or_create(&OutcomeLabels { outcome: outcome.into() }).set(n as i64);
            }
            m.scope_cache_bytes.set(kept.bytes as i64);
        }
    }
    if let Ok((pending, delivered, dead)) = svc.webhook_delivery_totals().await {
        for (st, n) in [("pending", pending), ("delivered", delivered), ("dead", dead)] {
            m.webhooks.get_or_create(&StateLabels { state: st.into() }).set(n as i64);
        }
    }
    let o = &svc.job_outcomes;
    for (kind, n) in [("done", &o.done), ("retried", &o.retried), ("failed", &o.failed), ("deferred", &o.deferred)] {
        m.outcomes.get_or_create(&OutcomeLabels { outcome: kind.into() }).set(n.load(Ordering::Relaxed) as i64);
    }
    m.full_text_searches.set(svc.full_text_searches.load(Ordering::Relaxed) as i64);
    let qc = &svc.query_cache;
    for (outcome, n) in [("hit", &qc.hits), ("miss", &qc.misses)] {
        m.query_cache.get_or_create(&OutcomeLabels { outcome: outcome.into() }).set(n.load(Ordering::Relaxed) as i64);
    }
    m.query_cache_entries.set(qc.len() as i64);
    let mut body = String::new();
    if encode(&mut body, &m.registry).is_err() {
        return (StatusCode::INTERNAL_SERVER_ERROR, "encoding metrics failed").into_response();
    }
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], body).into_response()
}
