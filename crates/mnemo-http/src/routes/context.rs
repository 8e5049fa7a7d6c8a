//! `get_context` (seed 000): the prompt-ready memory string and its structured parts.

use crate::AppState;
use crate::dto::*;
use crate::error::{ApiError, ApiOk, ApiResult};
use crate::json::ApiJson;
use axum::extract::State;
use mnemo_core::CoreError;
use mnemo_core::context::Locale;
use mnemo_core::ranking::TimeDecay;
use mnemo_core::service::{ContextRequest, Include, Target};
use serde_json::json;

pub async fn get_context(State(s): State<AppState>, ApiJson { ctx, body }: ApiJson<GetContextBody>) -> ApiResult {
    let rid = &ctx.request_id;
    let defaults = &s.service.config().retrieval;
    let req = (|| -> Result<ContextRequest, CoreError> {
        let ec = body.event_search_config;
        let decay = match &ec.time_decay_config {
            Some(d) => TimeDecay::new(d.weight, d.no_decay_period, defaults.time_decay.half_life_days)
                .map_err(|e| prefix("event_search_config.", e))?,
            None => defaults.time_decay,
        };
        let event_limit = limit(ec.limit, defaults.top_k).map_err(|e| prefix("event_search_config.", e))?;
        let profile_limit =
            limit(body.profile_search_config.limit, 1).map_err(|e| prefix("profile_search_config.", e))?;
        let max_tokens = body.max_tokens.map_or(Ok(defaults.max_tokens), mnemo_core::service::max_tokens)?;
        if let Some(t) = ec.similarity_threshold
            && !(0.0..=1.0).contains(&t)
        {
            return Err(CoreError::invalid(
                "event_search_config.similarity_threshold",
                format!("must be in [0,1], got {t}"),
            ));
        }
        let locale = match body.locale.as_deref() {
            None | Some("auto") => None,
            Some("zh") => Some(Locale::Zh),
            Some("en") => Some(Locale::En),
            Some(other) => return Err(CoreError::invalid("locale", format!("must be zh, en or auto, got {other:?}"))),
        };
        let include = body.include.map_or_else(Include::default, |i| Include {
            profile: i.profile,
            short_term: i.short_term,
            intra_events: i.intra_events,
            cross_events: i.cross_events,
            recap: i.recap,
        });
        let mut req = ContextRequest::new(
            Target { project: body.project_name, collection: body.collection_name },
            body.conversation_id,
            defaults,
        );
        req.query = body.query;
        req.event_filter = ec.filter.into_filter().map_err(|e| prefix("event_search_config.", e))?;
        req.event_filter.as_of = body.as_of;
        req.event_limit = event_limit;
        req.decay = decay;
        req.similarity_threshold = ec.similarity_threshold;
        req.profile_filter =
            body.profile_search_config.filter.into_filter().map_err(|e| prefix("profile_search_config.", e))?;
        req.profile_limit = profile_limit;
        req.max_tokens = max_tokens;
        req.include = include;
        req.locale = locale;
        Ok(req)
    })()
    .map_err(|e| ApiError::from_core(rid, e))?;
    let queried = req.query.as_deref().is_some_and(|q| !q.trim().is_empty());
    let out = s.service.get_context(req).await.map_err(|e| ApiError::from_core(rid, e))?;
    let a = &out.assembled;
    let mut data = json!({
            "context_str": a.context_str,
            "token_count": a.token_count,
            "locale": match out.locale { Locale::Zh => "zh", Locale::En => "en" },
            "dropped_items": a.dropped,
            "context_parts": {
                "profiles": a.included.profiles.iter().map(profile_json).collect::<Vec<_>>(),
                "recap": a.included.recap.as_ref().map(scored_event_json),
                "short_term_memory": a.included.short_term.iter().map(message_short_json).collect::<Vec<_>>(),
                "intra_conversation_events": a.included.intra_events.iter().map(scored_event_json).collect::<Vec<_>>(),
                "cross_conversation_events": a.included.cross_events.iter().map(scored_event_json).collect::<Vec<_>>(),
            },
    });
    if queried {
        super::event::semantic_fields(&mut data, out.full_text_only.clone());
    }
    Ok(ApiOk::new(rid, data))
}

/// Puts the request section in front of a field name, so the message names the full path.
fn prefix(section: &str, e: CoreError) -> CoreError {
    match e {
        CoreError::Invalid { field, message } => CoreError::Invalid { field: format!("{section}{field}"), message },
        other => other,
    }
}
