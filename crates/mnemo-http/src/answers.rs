//! What each endpoint answers in `data`, as OpenAPI 3.0 schemas: the records every answer is
//! made of (`Event`, `Profile`, `Job`…, components of the document) and one schema per route
//! (`answer`). Hand-written beside the `json!` that builds each answer; the Python SDK's suite
//! checks every answer it receives against them (`sdk/python/tests/conftest.py`), so they cannot
//! drift unnoticed. The TypeScript SDK's answer types are generated from them.

use serde_json::{Map, Value, json};

fn nullable(ty: &str) -> Value {
    json!({"type": ty, "nullable": true})
}

fn array(items: Value) -> Value {
    json!({"type": "array", "items": items})
}

fn r(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn object(required: &[&str], properties: Value) -> Value {
    let mut o = json!({"type": "object", "properties": properties});
    if !required.is_empty() {
        o["required"] = json!(required);
    }
    o
}

fn any_object() -> Value {
    json!({"type": "object", "additionalProperties": true})
}

fn token_usage() -> Value {
    object(
        &["prompt_tokens", "completion_tokens"],
        json!({"prompt_tokens": {"type": "integer"}, "completion_tokens": {"type": "integer"}}),
    )
}

/// The records answers are made of (added to `components.schemas`).
pub fn components() -> Map<String, Value> {
    let strings = || array(json!({"type": "string"}));
    let mut m = Map::new();
    m.insert(
        "Entity".into(),
        object(
            &["entity_id", "name", "kind", "aliases", "event_count", "first_seen", "last_seen"],
            json!({
                "entity_id": {"type": "string"}, "name": {"type": "string"},
                "kind": {"type": "string", "enum": ["person", "place", "organization", "pet", "other"]},
                "aliases": strings(), "event_count": {"type": "integer"},
                "first_seen": {"type": "integer", "description": "The time of its first event (ms since the epoch)."},
                "last_seen": {"type": "integer", "description": "The time of its latest event."},
            }),
        ),
    );
    m.insert(
        "Event".into(),
        object(
            &["event_id", "memory_type", "user_id", "assistant_id", "time", "status", "memory_info", "created_at"],
            json!({
                "id": {"type": "string"}, "event_id": {"type": "string"},
                "memory_type": {"type": "string"}, "event_type": {"type": "string"},
                "user_id": strings(), "assistant_id": strings(),
                "session_id": nullable("string"), "conversation_id": nullable("string"),
                "group_id": nullable("string"), "scope": nullable("string"), "class": nullable("string"),
                "time": {"type": "integer", "description": "When it happened (ms since the epoch)."},
                "status": {"type": "string", "description": "active, archived or superseded."},
                "labels": {"type": "string"},
                "memory_info": {"type": "object", "additionalProperties": true, "description": "The event type's fields (summary, original_messages, …)."},
                "source_message_ids": array(json!({"type": "integer"})),
                "hit_count": {"type": "integer"}, "last_hit_at": nullable("integer"),
                "created_at": {"type": "integer"}, "updated_at": {"type": "integer"},
                "expires_at": nullable("integer"), "superseded_by": nullable("string"),
                "valid_from": {"type": "integer", "description": "When what it tells became true (ms): a time the conversation states, else `time`."},
                "valid_to": nullable("integer"),
            }),
        ),
    );
    m.insert(
        "ScoredEvent".into(),
        json!({"allOf": [r("Event"), object(&["score", "origin_score", "time_score", "custom_weight_score"], json!({
            "score": {"type": "number", "description": "What the results are ordered by."},
            "origin_score": {"type": "number", "description": "The query relevance in [0,1] (1 without a query)."},
            "time_score": {"type": "number"}, "custom_weight_score": {"type": "number"},
            "layer": nullable("string"),
        }))]}),
    );
    m.insert(
        "Profile".into(),
        object(
            &["profile_id", "profile_type", "user_id", "attributes", "created_at", "updated_at"],
            json!({
                "id": {"type": "string"}, "profile_id": {"type": "string"}, "primary_key": {"type": "string"},
                "memory_type": {"type": "string"}, "profile_type": {"type": "string"},
                "user_id": nullable("string"), "assistant_id": nullable("string"),
                "memory_info": any_object(), "attributes": any_object(),
                "content": {"type": "string"},
                "source_session_ids": strings(),
                "history": array(any_object()),
                "since": {"type": "object", "additionalProperties": {"type": "integer"}, "description": "Attribute → since when its value holds (ms), when known."},
                "created_at": {"type": "integer"}, "updated_at": {"type": "integer"},
                "score": {"type": "number", "description": "Closeness to the query, when one ranked it."},
            }),
        ),
    );
    m.insert(
        "Message".into(),
        object(
            &["message_id", "role", "content", "time"],
            json!({
                "message_id": {"type": "integer"}, "role": {"type": "string"}, "name": nullable("string"),
                "content": {"type": "string"}, "time": {"type": "integer"},
                "tokens": {"type": "integer"}, "session_id": nullable("string"),
            }),
        ),
    );
    m.insert(
        "Job".into(),
        object(
            &["job_id", "state", "conversation_id", "session_id", "attempts", "token_usage"],
            json!({
                "job_id": {"type": "string"}, "kind": {"type": "string"},
                "state": {"type": "string", "enum": ["queued", "running", "done", "failed"]},
                "conversation_id": {"type": "string"}, "session_id": {"type": "string"},
                "attempts": {"type": "integer"}, "max_attempts": {"type": "integer"},
                "last_error": nullable("string"), "run_after": {"type": "integer"},
                "token_usage": token_usage(),
                "created_at": {"type": "integer"}, "updated_at": {"type": "integer"},
                "started_at": nullable("integer"), "finished_at": nullable("integer"),
                "duration_ms": nullable("integer"), "requeues": {"type": "integer"},
            }),
        ),
    );
    m.insert(
        "Collection".into(),
        object(
            &["collection_name", "project_name", "event_types", "profile_types", "resource_id"],
            json!({
                "collection_name": {"type": "string"}, "project_name": {"type": "string"},
                "description": {"type": "string"},
                "event_types": array(any_object()), "profile_types": array(any_object()),
                "temporary_ttl_days": nullable("number"), "extractor": nullable("string"),
                "event_ttl_secs": nullable("integer"), "created_at": {"type": "integer"},
                "resource_id": {"type": "string", "description": "`<project_name>/<collection_name>`"},
            }),
        ),
    );
    m.insert(
        "Extraction".into(),
        object(
            &["triggered"],
            json!({
                "triggered": {"type": "boolean", "description": "Whether this call closed a session for extraction."},
                "session_id": nullable("string"), "job_id": nullable("string"),
                "reason": {"type": "string", "nullable": true, "description": "token_count, message_count, idle, flush, …"},
            }),
        ),
    );
    m.insert(
        "Webhook".into(),
        object(
            &["webhook_id", "url", "events"],
            json!({
                "webhook_id": {"type": "string"}, "project_name": {"type": "string"}, "url": {"type": "string"},
                "events": strings(), "description": {"type": "string"}, "source": {"type": "string"},
                "created_at": {"type": "integer"},
                "deliveries": object(&[], json!({"pending": {"type": "integer"}, "delivered": {"type": "integer"}, "dead": {"type": "integer"}})),
                "secret": {"type": "string", "description": "webhook/create only: the signing secret, shown once."},
            }),
        ),
    );
    m.insert(
        "Delivery".into(),
        object(
            &["delivery_id", "webhook_id", "type", "state", "attempts"],
            json!({
                "delivery_id": {"type": "integer"}, "webhook_id": {"type": "string"}, "message_id": {"type": "string"},
                "type": {"type": "string"}, "data": {}, "state": {"type": "string"},
                "attempts": {"type": "integer"}, "next_attempt_at": nullable("integer"),
                "last_error": nullable("string"), "last_status": nullable("integer"),
                "created_at": {"type": "integer"}, "finished_at": nullable("integer"),
            }),
        ),
    );
    m
}

/// The schema of `data` in `path`'s successful answer.
pub fn answer(path: &str) -> Value {
    let count = json!({"type": "integer"});
    let deleted = |id: &str| object(&[id, "deleted"], json!({id: {"type": "string"}, "deleted": {"type": "boolean"}}));
    let list = |key: &str, item: Value| object(&[key, "count"], json!({key: array(item), "count": count}));
    let results = |item: Value| {
        object(
            &["count", "result_list"],
            json!({"collection_name": {"type": "string"}, "count": count, "result_list": array(item)}),
        )
    };
    let semantic = json!({
        "semantic": {"type": "boolean", "description": "With a query: whether its semantic half ran (false: full text alone, the query could not be embedded)."},
        "semantic_error": {"type": "string", "description": "Why the semantic half did not run."},
    });
    match path {
        "/admin/clock" => object(&["now"], json!({"now": {"type": "integer"}})),
        "/collection/create" | "/collection/info" => r("Collection"),
        "/collection/list" => list("collections", r("Collection")),
        "/collection/delete" => deleted("collection_name"),
        "/session/streaming_write" => object(
            &["conversation_id", "accepted", "pending_messages", "extraction"],
            json!({
                "conversation_id": {"type": "string"}, "accepted": count, "duplicates": count,
                "pending_messages": count, "pending_tokens": count, "extraction": r("Extraction"),
            }),
        ),
        "/session/add" => object(
            &["conversation_id", "session_id", "job_id", "accepted", "extraction"],
            json!({
                "conversation_id": {"type": "string"}, "session_id": {"type": "string"},
                "extraction_session_id": {"type": "string"}, "replaced": {"type": "boolean"},
                "job_id": {"type": "string"}, "accepted": count, "extraction": r("Extraction"),
            }),
        ),
        "/session/flush" => object(
            &["conversation_id", "extraction"],
            json!({"conversation_id": {"type": "string"}, "extraction": r("Extraction")}),
        ),
        "/session/delete" => object(
            &["conversation_id", "deleted"],
            json!({"conversation_id": {"type": "string"}, "deleted": {"type": "boolean"}, "sessions": count}),
        ),
        "/session/info" => json!({
            "description": "By conversation_id: its short-term memory and sessions; by session_id: the session's messages, events, usage and jobs.",
            "type": "object",
            "properties": {
                "conversation_id": nullable("string"), "session_id": {"type": "string"},
                "metadata": any_object(), "messages": array(r("Message")),
                "pending_messages": count, "pending_tokens": count, "idle_deadline": nullable("integer"),
                "sessions": array(any_object()), "event_memory": array(r("Event")), "jobs": array(r("Job")),
                "usage": object(&[], json!({
                    "embedding_tokens": count, "llm_input_tokens": count, "llm_output_tokens": count,
                    "llm_input_tokens_details": any_object(),
                })),
            },
        }),
        "/event/search" => {
            let mut o = results(r("ScoredEvent"));
            o["properties"]["token_usage"] = count.clone();
            for (k, v) in semantic.as_object().expect("object") {
                o["properties"][k] = v.clone();
            }
            o
        }
        "/search" => results(
            json!({"type": "object", "additionalProperties": true, "description": "A profile or a scored event; memory_category says which.",
            "properties": {"memory_category": {"type": "string", "enum": ["profile", "event"]}}, "required": ["memory_category"]}),
        ),
        "/event/add" | "/event/update" => {
            object(&["event_id", "event"], json!({"event_id": {"type": "string"}, "event": r("Event")}))
        }
        "/event/batch_add" => {
            object(&["count", "event_ids"], json!({"count": count, "event_ids": array(json!({"type": "string"}))}))
        }
        "/event/delete" => deleted("event_id"),
        "/event/batch_delete" => json!({"type": "object", "properties": {
            "deleted": count, "would_delete": count, "dry_run": {"type": "boolean"},
            "event_ids": array(json!({"type": "string"})),
        }}),
        "/profile/search" => results(r("Profile")),
        "/entity/list" => object(
            &["count", "entities"],
            json!({"collection_name": {"type": "string"}, "count": count, "entities": array(r("Entity"))}),
        ),
        "/entity/get" => object(
            &["entity", "count", "events", "profile_values"],
            json!({"entity": r("Entity"), "count": count, "events": array(r("Event")), "profile_values": array(object(
                &["profile_type", "attribute", "value"],
                json!({"profile_type": {"type": "string"}, "attribute": {"type": "string"}, "value": {"type": "string"}}),
            ))}),
        ),
        "/profile/add" | "/profile/update" => {
            object(&["profile_id", "profile"], json!({"profile_id": {"type": "string"}, "profile": r("Profile")}))
        }
        "/profile/delete" => deleted("profile_id"),
        "/profile/batch_delete" => object(&["deleted"], json!({"deleted": count})),
        "/profile/trigger_update" => object(&["updated"], json!({"updated": count})),
        "/get_context" => {
            let mut o = object(
                &["context_str", "token_count", "locale", "context_parts"],
                json!({
                    "context_str": {"type": "string", "description": "The prompt-ready memory, at most max_tokens tokens."},
                    "token_count": count, "locale": {"type": "string", "enum": ["zh", "en"]},
                    "dropped_items": count,
                    "context_parts": object(&["profiles", "short_term_memory", "intra_conversation_events", "cross_conversation_events"], json!({
                        "profiles": array(r("Profile")),
                        // OpenAPI 3.0 has no nullable $ref: one of the event or null.
                        "recap": {"oneOf": [r("ScoredEvent"), {"type": "object", "nullable": true, "enum": [null]}]},
                        "short_term_memory": array(object(&["message_id", "role", "content", "time"], json!({
                            "message_id": count, "role": {"type": "string"}, "name": nullable("string"),
                            "content": {"type": "string"}, "time": {"type": "integer"},
                        }))),
                        "intra_conversation_events": array(r("ScoredEvent")),
                        "cross_conversation_events": array(r("ScoredEvent")),
                    })),
                }),
            );
            for (k, v) in semantic.as_object().expect("object") {
                o["properties"][k] = v.clone();
            }
            o
        }
        "/job/list" => list("jobs", r("Job")),
        "/job/retry" => list("retried", json!({"type": "string"})),
        "/maintenance/run" | "/maintenance/list" => list("runs", any_object()),
        "/stats" => object(
            &["collection_name", "total_events"],
            json!({
                "collection_name": {"type": "string"}, "user_id": nullable("string"), "days": count,
                "total_events": count, "never_hit": count,
                "new_memories_per_day": array(object(&["day", "count"], json!({"day": {"type": "string"}, "count": count}))),
                "hits_per_day": array(object(&["day", "hits"], json!({"day": {"type": "string"}, "hits": count}))),
                "top_hit": array(object(&["event_id", "hit_count"], json!({"event_id": {"type": "string"}, "summary": {"type": "string"}, "hit_count": count}))),
                "token_usage": token_usage(),
                "jobs_per_day": array(object(&["day", "jobs"], json!({
                    "day": {"type": "string"}, "jobs": count, "done": count, "failed": count, "token_usage": token_usage(),
                }))),
            }),
        ),
        "/user/list" => object(
            &["count", "users"],
            json!({"collection_name": {"type": "string"}, "count": count, "users": array(object(
                &["user_id", "event_count", "conversation_count"],
                json!({
                    "user_id": {"type": "string"}, "event_count": count, "conversation_count": count,
                    "last_active": {"type": "integer", "nullable": true, "description": "The latest write to their conversations or change to their events (ms)."},
                }),
            ))}),
        ),
        "/user/export" => {
            json!({"description": "Not the envelope: JSON lines — a header, then {kind, collection_name, record} per record.", "type": "object", "additionalProperties": true})
        }
        "/user/forget" => json!({"type": "object", "required": ["user_id"], "properties": {
            "user_id": {"type": "string"}, "dry_run": {"type": "boolean"},
            "deleted": {"type": "object", "additionalProperties": {"type": "integer"}, "description": "Rows deleted, by kind."},
            "would_delete": any_object(), "collections": any_object(),
        }}),
        "/webhook/create" => r("Webhook"),
        "/webhook/list" => list("webhooks", r("Webhook")),
        "/webhook/delete" => object(&["deleted"], json!({"deleted": {"type": "string"}})),
        "/webhook/deliveries" => list("deliveries", r("Delivery")),
        "/webhook/redeliver" => list("redelivered", json!({"type": "integer"})),
        other => panic!("no answer schema for {other}: add it to mnemo-http/src/answers.rs"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_endpoint_says_what_it_answers() {
        for e in crate::routes::endpoints() {
            let a = super::answer(e.path);
            assert!(a.is_object(), "{}", e.path);
        }
    }
}
