//! Route table: one module per route group; handlers translate DTOs and call the `Service`.

mod collection;
mod context;
mod entity;
mod event;
mod job;
mod maintenance;
mod profile;
mod session;
mod stats;
mod user;
mod webhook;

use crate::{AppState, p};
use axum::Json;
use axum::Router;
use axum::extract::State;
use mnemo_core::access::Scope;
use serde_json::{Value, json};

/// One API endpoint: what the router serves and what the OpenAPI document says about it, from
/// the same table (so the document cannot drift from the routes).
pub struct Endpoint {
    pub path: &'static str,
    pub summary: &'static str,
    pub handler: axum::routing::MethodRouter<AppState>,
    /// The JSON schema of the request body (its DTO).
    pub body: fn(&mut schemars::SchemaGenerator) -> schemars::Schema,
}

fn ep<B: schemars::JsonSchema, H, T>(path: &'static str, summary: &'static str, h: H) -> Endpoint
where
    H: axum::handler::Handler<T, AppState>,
    T: 'static,
{
    Endpoint { path, summary, handler: p(h), body: |g| g.subschema_for::<B>() }
}

pub fn endpoints() -> Vec<Endpoint> {
    use crate::dto::*;
    vec![
        Endpoint {
            path: "/collection/create",
            summary: "Create a collection with custom event and profile types (the built-ins event_v1 and profile_v1 always exist), and optionally its extractor. Also takes VikingDB's CreateCollection body (CollectionName, CustomEventTypeSchemas, TtlRelative, …), mapped onto mnemo's.",
            handler: crate::p(collection::create),
            body: |g| {
                let ours = g.subschema_for::<CollectionCreate>();
                let vikingdb = g.subschema_for::<VikingCollectionCreate>();
                schemars::json_schema!({"oneOf": [ours, vikingdb]})
            },
        },
        ep::<ProjectOnly, _, _>("/collection/list", "List the project's collections.", collection::list),
        ep::<CollectionRef, _, _>(
            "/collection/info",
            "A collection's schema, embedding model and sizes.",
            collection::info,
        ),
        ep::<CollectionRef, _, _>(
            "/collection/delete",
            "Delete a collection and everything in it.",
            collection::delete,
        ),
        ep::<WriteBody, _, _>(
            "/session/streaming_write",
            "Stream conversation turns; when the extract trigger fires (tokens, messages, or idle time) the open turns close into a session that is extracted in the background. The call never waits for extraction.",
            session::streaming_write,
        ),
        ep::<WriteBody, _, _>(
            "/session/add",
            "Write a whole session at once; it is closed and queued for extraction immediately.",
            session::add,
        ),
        ep::<ConversationBody, _, _>(
            "/session/flush",
            "Close a conversation's open turns into a session now.",
            session::flush,
        ),
        ep::<ConversationBody, _, _>(
            "/session/delete",
            "Delete a conversation — its messages, sessions and events — and withdraw what it changed in profiles (they are re-derived from their other sessions).",
            session::delete,
        ),
        ep::<SessionInfoBody, _, _>(
            "/session/info",
            "A conversation's short-term memory and sessions, or one session with its messages, events and job.",
            session::info,
        ),
        ep::<EventSearchBody, _, _>(
            "/event/search",
            "Search events: hybrid semantic + full-text ranking with a query (time decay, custom weight, threshold), newest first without.",
            event::search,
        ),
        ep::<MemorySearchBody, _, _>(
            "/search",
            "Search a user's (or assistant's) profiles and events at once (VikingDB's SearchMemory): profiles first, ranked by closeness to the query, then events ranked as event/search ranks them; each item's memory_category says which it is.",
            event::search_memory,
        ),
        ep::<EventAddBody, _, _>("/event/add", "Add an event directly (validated against its type).", event::add),
        ep::<EventBatchAddBody, _, _>(
            "/event/batch_add",
            "Add 1 to 500 events to a collection at once: all stored in one transaction, or none if any is invalid (the error names it, e.g. events[3].memory_info).",
            event::batch_add,
        ),
        ep::<EventUpdateBody, _, _>(
            "/event/update",
            "Change an event's fields, time, scope, class or status.",
            event::update,
        ),
        ep::<EventIdBody, _, _>("/event/delete", "Delete one event.", event::delete),
        ep::<BatchDeleteBody, _, _>(
            "/event/batch_delete",
            "Delete the events matching a (non-empty) filter; a filter of only user_id/assistant_id needs confirm: \"all\"; dry_run answers what would be deleted.",
            event::batch_delete,
        ),
        ep::<EntityListBody, _, _>(
            "/entity/list",
            "A user's entities — the people, places, organisations and pets their memories name — with kind, aliases (\"sister\" for \"my sister Wen\"), event count and first/last seen; most events first. Resolved from the user's active events when asked.",
            entity::list,
        ),
        ep::<EntityGetBody, _, _>(
            "/entity/get",
            "One of a user's entities (by entity_id, name or alias) and its events, newest first.",
            entity::get,
        ),
        ep::<ProfileSearchBody, _, _>(
            "/profile/search",
            "List profiles by user, assistant and type (with attribute history for keep_history types).",
            profile::search,
        ),
        ep::<ProfileAddBody, _, _>("/profile/add", "Create or replace a user's profile of a type.", profile::add),
        ep::<ProfileUpdateBody, _, _>(
            "/profile/update",
            "Change a profile's attributes (merged, or replaced) or content.",
            profile::update,
        ),
        ep::<ProfileIdBody, _, _>("/profile/delete", "Delete a profile.", profile::delete),
        ep::<ProfileBatchDeleteBody, _, _>(
            "/profile/batch_delete",
            "Delete the profiles matching a filter that names a user or an assistant.",
            profile::batch_delete,
        ),
        ep::<ProfileTriggerBody, _, _>(
            "/profile/trigger_update",
            "Re-derive the matching profiles from the sessions they came from (the extractor runs again over each; hand edits are not replayed).",
            profile::trigger_update,
        ),
        ep::<JobListBody, _, _>(
            "/job/list",
            "Extraction jobs with state, attempts, last error and token usage.",
            job::list,
        ),
        ep::<JobRetryBody, _, _>(
            "/job/retry",
            "Put a failed job (job_id) or every failed job of the collection back in the queue, from its first attempt.",
            job::retry,
        ),
        ep::<GetContextBody, _, _>(
            "/get_context",
            "One prompt-ready context string within max_tokens: user profile, recent turns, this conversation's events and other conversations' events matching the query; with its structured parts.",
            context::get_context,
        ),
        ep::<UserListBody, _, _>(
            "/user/list",
            "The collection's users (id search by `contains`), most recently active first, with their event and conversation counts.",
            stats::users,
        ),
        ep::<StatsBody, _, _>(
            "/stats",
            "Memories created and hit per day, top and never-hit events, jobs and token usage.",
            stats::stats,
        ),
        ep::<MaintenanceBody, _, _>(
            "/maintenance/run",
            "Run maintenance now: expire, archive, fold, digest.",
            maintenance::run,
        ),
        ep::<MaintenanceBody, _, _>("/maintenance/list", "Recent maintenance runs.", maintenance::list),
        ep::<ClockBody, _, _>(
            "/admin/clock",
            "Tests only (testing.clock_control): move the server's clock forward.",
            maintenance::advance_clock,
        ),
        ep::<UserBody, _, _>("/user/export", "Everything stored about a user, as JSON lines.", user::export),
        ep::<UserForgetBody, _, _>(
            "/user/forget",
            "Delete everything stored about a user, for good (dry_run: only say what that would be).",
            user::forget,
        ),
        ep::<WebhookCreateBody, _, _>(
            "/webhook/create",
            "Register an endpoint that receives the project's changes (memory.created|updated|deleted|superseded, profile.updated, job.failed, user.forgotten), signed as Standard Webhooks; the answer shows the signing secret once.",
            webhook::create,
        ),
        ep::<ProjectOnly, _, _>(
            "/webhook/list",
            "The project's webhook endpoints (from the config file and the API) with their pending, delivered and dead deliveries.",
            webhook::list,
        ),
        ep::<WebhookIdBody, _, _>(
            "/webhook/delete",
            "Delete an endpoint registered through the API, and its deliveries.",
            webhook::delete,
        ),
        ep::<WebhookDeliveriesBody, _, _>(
            "/webhook/deliveries",
            "The project's webhook deliveries, newest first: payload, state (pending, delivered, dead), attempts, last error.",
            webhook::deliveries,
        ),
        ep::<WebhookRedeliverBody, _, _>(
            "/webhook/redeliver",
            "Put an endpoint's dead deliveries (all, or delivery_ids) back in the queue.",
            webhook::redeliver,
        ),
    ]
}

/// The scope a key needs for each endpoint (least privilege: a read-only key cannot write, only
/// an admin key deletes collections, forgets users or runs maintenance).
pub fn scope_of(path: &str) -> Scope {
    match path {
        "/collection/list" | "/collection/info" | "/session/info" | "/event/search" | "/profile/search" | "/search"
        | "/entity/list" | "/entity/get" | "/job/list" | "/get_context" | "/stats" | "/user/list" | "/user/export" => {
            Scope::Read
        }
        "/collection/delete" | "/user/forget" | "/maintenance/run" | "/maintenance/list" | "/admin/clock" => {
            Scope::Admin
        }
        p if p.starts_with("/webhook/") => Scope::Admin,
        _ => Scope::Write,
    }
}

pub fn api_routes(state: &AppState) -> Router<AppState> {
    endpoints().into_iter().fold(Router::new(), |r, e| {
        let need = scope_of(e.path);
        let handler = e.handler.route_layer(axum::middleware::from_fn(move |req, next| require(need, req, next)));
        // Reads (search, context) wait for their turn and have a deadline (outermost, so it
        // counts the wait too); writes are short and must not be cut midway.
        let handler = if need == Scope::Read {
            handler
                .route_layer(axum::middleware::from_fn_with_state(state.clone(), admit))
                .route_layer(axum::middleware::from_fn_with_state(state.clone(), deadline))
        } else {
            handler
        };
        r.route(e.path, handler)
    })
}

/// Lets a read run when fewer than `server.max_concurrent_reads` are running; one that waited
/// `server.read_queue_ms` for its turn is shed with 503 and `Retry-After` at once. Past the
/// machine's capacity, reads queued without this bound: with 200 clients on 2 cores and every
/// query new, get_context p99 was 6.9 s and the slowest request 8.2 s (docs/benchmarks.md,
/// "Overload"); now an answered read waits at most the queue bound, and the rest hear at once
/// that they should come back.
async fn admit(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let Some(reads) = state.reads.clone() else { return next.run(req).await };
    match tokio::time::timeout(state.read_queue, reads.acquire_owned()).await {
        Ok(Ok(_running)) => next.run(req).await,
        _ => unavailable(
            &request_id(&req),
            format!(
                "overloaded: {} reads are running (server.max_concurrent_reads) and this one waited {} ms for its turn (server.read_queue_ms); retry after Retry-After seconds",
                state.max_reads,
                state.read_queue.as_millis()
            ),
        ),
    }
}

fn request_id(req: &axum::extract::Request) -> String {
    req.extensions().get::<crate::Ctx>().map(|c| c.request_id.clone()).unwrap_or_default()
}

/// 503 with `Retry-After` (set by `ApiError` for every 503).
fn unavailable(rid: &str, message: String) -> axum::response::Response {
    use axum::response::IntoResponse;
    crate::error::ApiError::new(axum::http::StatusCode::SERVICE_UNAVAILABLE, rid, message).into_response()
}

/// Answers 503 when a read runs past `server.request_timeout_ms`, and stops its work.
async fn deadline(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let rid = request_id(&req);
    match tokio::time::timeout(state.request_timeout, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => unavailable(
            &rid,
            format!(
                "request_timeout: the request ran past {} ms and was stopped; narrow it (limit, max_tokens) or retry",
                state.request_timeout.as_millis()
            ),
        ),
    }
}

/// Refuses (403) a caller whose key lacks the endpoint's scope.
async fn require(need: Scope, req: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    use axum::response::IntoResponse;
    let ctx = req.extensions().get::<crate::Ctx>().cloned().expect("the auth layer runs first");
    match ctx.principal.check_scope(need) {
        Ok(()) => next.run(req).await,
        Err(m) => crate::error::ApiError::new(axum::http::StatusCode::FORBIDDEN, &ctx.request_id, m).into_response(),
    }
}

pub async fn healthz(State(state): State<AppState>) -> Json<Value> {
    let svc = &state.service;
    Json(json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "store": svc.store_engine(),
        "extractor": svc.extractor_name(),
        "embedding_model": svc.embedder().model_id(),
    }))
}

/// `GET /api/memory/ping` (VikingDB's Ping): the credentials were good if this answers.
pub async fn ping(axum::Extension(ctx): axum::Extension<crate::Ctx>, State(state): State<AppState>) -> crate::ApiOk {
    crate::ApiOk::new(
        &ctx.request_id,
        json!({"status": "ok", "version": env!("CARGO_PKG_VERSION"), "store": state.service.store_engine()}),
    )
}
