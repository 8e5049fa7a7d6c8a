//! Route table: one module per route group; handlers translate DTOs and call the `Service`.

mod collection;
mod context;
mod event;
mod job;
mod maintenance;
mod profile;
mod session;
mod stats;
mod user;

use crate::{AppState, p, post_routes};
use axum::Json;
use axum::Router;
use axum::extract::State;
use serde_json::{Value, json};

pub fn api_routes() -> Router<AppState> {
    post_routes(&[
        ("/collection/create", p(collection::create)),
        ("/collection/list", p(collection::list)),
        ("/collection/info", p(collection::info)),
        ("/collection/delete", p(collection::delete)),
        ("/session/streaming_write", p(session::streaming_write)),
        ("/session/add", p(session::add)),
        ("/session/flush", p(session::flush)),
        ("/session/info", p(session::info)),
        ("/event/search", p(event::search)),
        ("/event/add", p(event::add)),
        ("/event/update", p(event::update)),
        ("/event/delete", p(event::delete)),
        ("/event/batch_delete", p(event::batch_delete)),
        ("/profile/search", p(profile::search)),
        ("/profile/add", p(profile::add)),
        ("/profile/update", p(profile::update)),
        ("/profile/delete", p(profile::delete)),
        ("/job/list", p(job::list)),
        ("/get_context", p(context::get_context)),
        ("/stats", p(stats::stats)),
        ("/maintenance/run", p(maintenance::run)),
        ("/maintenance/list", p(maintenance::list)),
        ("/admin/clock", p(maintenance::advance_clock)),
        ("/user/export", p(user::export)),
        ("/user/forget", p(user::forget)),
    ])
}

pub async fn healthz(State(state): State<AppState>) -> Json<Value> {
    let svc = &state.service;
    Json(json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "store": svc.store().engine(),
        "extractor": svc.extractor_name(),
        "embedding_model": svc.embedder().model_id(),
    }))
}
