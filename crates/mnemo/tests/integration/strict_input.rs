//! Nothing a client sends is silently dropped: every endpoint answers a body with an unknown
//! field — at the top level or nested (filters, triggers, messages, configs, schemas) — or a
//! misspelled known field with 400 naming the field and the fields it expected, and the store is
//! unchanged afterwards. The table must cover every endpoint the server routes.

use crate::harness::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// One endpoint: a body the server accepts, and misspellings of it (path → expected field path).
struct Case {
    path: &'static str,
    valid: Value,
    /// (a JSON pointer of an object inside `valid`, a key to add there, the field path the error names)
    bad: Vec<(&'static str, &'static str, &'static str)>,
}

fn with_key(body: &Value, pointer: &str, key: &str) -> Value {
    let mut b = body.clone();
    let target = if pointer.is_empty() { &mut b } else { b.pointer_mut(pointer).expect("pointer into the valid body") };
    target.as_object_mut().expect("an object").insert(key.to_string(), json!(1));
    b
}

/// Everything the store holds about the test user, plus the collections — what must not change.
async fn snapshot(s: &Server) -> Value {
    // user/export answers JSON lines; the first (header) line carries the time and request id.
    let text = s
        .client
        .post(format!("{}/api/memory/user/export", s.base))
        .json(&json!({"collection_name": "c", "user_id": "u1"}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let export: Vec<&str> = text.lines().skip(1).collect();
    let collections = s.ok("collection/list", json!({})).await;
    let jobs = s.jobs().await;
    json!({"export": export, "collections": collections, "jobs": jobs.len()})
}

#[tokio::test]
async fn unknown_and_misspelled_fields_are_refused_on_every_endpoint() {
    let s = Server::start("testing:\n  clock_control: true\n");
    s.write("base", msgs(&[("user", "I live in Rome"), ("assistant", "Noted.")]), json!({"message_count": 2}), "u1")
        .await;
    let e = s
        .ok(
            "event/add",
            json!({"collection_name": "c", "event_type": "event_v1", "user_id": "u1", "memory_info": {"summary": "kept"}}),
        )
        .await;
    let event_id = e["event_id"].as_str().expect("event id").to_string();
    // A user no extraction touches (the base session may already have made u1's profile).
    let p = s.ok("profile/add", json!({"collection_name": "c", "user_id": "u9", "attributes": {"city": "Rome"}})).await;
    let profile_id = p["profile_id"].as_str().expect("profile id").to_string();
    let w = s.ok("webhook/create", json!({"url": "http://127.0.0.1:9/strict", "events": ["job.failed"]})).await;
    let webhook_id = w["webhook_id"].as_str().expect("webhook id").to_string();
    eventually(20, "the base session is extracted", || async {
        s.jobs().await.iter().all(|j| j["state"] == "done").then_some(())
    })
    .await;

    let write = json!({"collection_name": "c", "conversation_id": "strict", "messages": [{"role": "user", "content": "hi", "idempotency_key": "k1"}],
                       "extract_trigger": {"message_count": 5}, "metadata": {"user_id": "u1"}});
    let search = json!({"collection_name": "c", "query": "Rome", "filter": {"user_id": "u1"}, "limit": 3,
                        "time_decay_config": {"weight": 0.5, "no_decay_period": 1}});
    let cases = vec![
        Case {
            path: "collection/create",
            valid: json!({"collection_name": "strict_new", "description": "x",
                          "event_types": [{"name": "t", "fields": [{"name": "f", "type": "string"}]}],
                          "profile_types": [{"name": "pt", "fields": []}]}),
            bad: vec![
                ("", "descripton", "descripton"),
                ("/event_types/0", "wieght", "event_types[0].wieght"),
                ("/event_types/0/fields/0", "requred", "event_types[0].fields[0].requred"),
                ("/profile_types/0", "update_mod", "profile_types[0].update_mod"),
            ],
        },
        Case { path: "collection/list", valid: json!({}), bad: vec![("", "project_nam", "project_nam")] },
        Case {
            path: "collection/info",
            valid: json!({"collection_name": "c"}),
            bad: vec![("", "colection", "colection")],
        },
        Case {
            path: "collection/delete",
            valid: json!({"collection_name": "c"}),
            bad: vec![("", "project_nmae", "project_nmae")],
        },
        Case {
            path: "session/streaming_write",
            valid: write.clone(),
            bad: vec![
                ("", "metdata_", "metdata_"),
                ("/extract_trigger", "mesage_count", "extract_trigger.mesage_count"),
                ("/messages/0", "idempotency_ky", "messages[0].idempotency_ky"),
            ],
        },
        Case {
            path: "session/add",
            valid: write.clone(),
            bad: vec![("", "extract_triger", "extract_triger"), ("/messages/0", "tme", "messages[0].tme")],
        },
        Case {
            path: "session/flush",
            valid: json!({"collection_name": "c", "conversation_id": "base"}),
            bad: vec![("", "force", "force")],
        },
        Case {
            path: "session/delete",
            valid: json!({"collection_name": "c", "conversation_id": "base"}),
            bad: vec![("", "sesion_id", "sesion_id")],
        },
        Case {
            path: "session/info",
            valid: json!({"collection_name": "c", "conversation_id": "base"}),
            bad: vec![("", "sesion_id", "sesion_id")],
        },
        Case {
            path: "event/search",
            valid: search.clone(),
            bad: vec![
                ("", "limt", "limt"),
                ("/filter", "grup_id", "filter.grup_id"),
                ("/time_decay_config", "wieght", "time_decay_config.wieght"),
            ],
        },
        Case {
            path: "event/add",
            valid: json!({"collection_name": "c", "event_type": "event_v1", "user_id": "u1", "memory_info": {"summary": "new"}}),
            bad: vec![("", "clas", "clas")],
        },
        Case {
            path: "event/batch_add",
            valid: json!({"collection_name": "c", "events": [{"event_type": "event_v1", "user_id": "u1", "memory_info": {"summary": "new"}}]}),
            bad: vec![("", "event", "event"), ("/events/0", "tme", "events[0].tme")],
        },
        Case {
            path: "event/update",
            valid: json!({"collection_name": "c", "event_id": event_id, "memory_info": {"summary": "changed"}}),
            bad: vec![("", "memory_inf", "memory_inf")],
        },
        Case {
            path: "event/delete",
            valid: json!({"collection_name": "c", "event_id": event_id}),
            bad: vec![("", "hard", "hard")],
        },
        Case {
            path: "event/batch_delete",
            valid: json!({"collection_name": "c", "filter": {"user_id": "u1", "group_id": "g"}}),
            bad: vec![("/filter", "grup_id", "filter.grup_id"), ("", "delete_typ", "delete_typ")],
        },
        Case {
            path: "entity/list",
            valid: json!({"collection_name": "c", "filter": {"user_id": "u1", "kind": "place"}, "limit": 5}),
            bad: vec![("/filter", "knd", "filter.knd"), ("", "limt", "limt")],
        },
        Case {
            path: "entity/get",
            valid: json!({"collection_name": "c", "user_id": "u1", "entity": "Rome", "limit": 5}),
            bad: vec![("", "entity_id", "entity_id"), ("", "user", "user")],
        },
        Case {
            path: "user/list",
            valid: json!({"collection_name": "c", "contains": "u", "limit": 5}),
            bad: vec![("", "contain", "contain"), ("", "filter", "filter")],
        },
        Case {
            path: "profile/search",
            valid: json!({"collection_name": "c", "filter": {"user_id": "u1"}}),
            bad: vec![("/filter", "profle_type", "filter.profle_type"), ("", "limt", "limt")],
        },
        Case {
            path: "profile/add",
            valid: json!({"collection_name": "c", "user_id": "u2", "attributes": {"city": "Oslo"}}),
            bad: vec![("", "memory_inf", "memory_inf"), ("", "is_upsrt", "is_upsrt")],
        },
        Case {
            path: "profile/update",
            valid: json!({"collection_name": "c", "profile_id": profile_id, "attributes": {"city": "Oslo"}}),
            bad: vec![("", "memory_inf", "memory_inf"), ("", "replace_atributes", "replace_atributes")],
        },
        Case {
            path: "profile/delete",
            valid: json!({"collection_name": "c", "profile_id": profile_id}),
            bad: vec![("", "profile_typ", "profile_typ")],
        },
        Case {
            path: "profile/batch_delete",
            valid: json!({"collection_name": "c", "filter": {"user_id": "u2"}}),
            bad: vec![("/filter", "usr_id", "filter.usr_id"), ("", "delete_type", "delete_type")],
        },
        Case {
            path: "profile/trigger_update",
            valid: json!({"collection_name": "c", "update_profile_type": "sys_profile_v1", "filters": {"user_id": "u1"}}),
            bad: vec![("/filters", "usr_id", "filters.usr_id"), ("", "update_profile_typ", "update_profile_typ")],
        },
        Case {
            path: "search",
            valid: json!({"collection_name": "c", "query": "Rome", "filter": {"user_id": "u1", "memory_type": ["sys_event_v1", "profile_v1"]}, "limit": 3}),
            bad: vec![("/filter", "primary_ky", "filter.primary_ky"), ("", "limt", "limt")],
        },
        Case { path: "job/list", valid: json!({"collection_name": "c", "limit": 3}), bad: vec![("", "limt", "limt")] },
        Case { path: "job/retry", valid: json!({"collection_name": "c"}), bad: vec![("", "job", "job")] },
        Case {
            path: "get_context",
            valid: json!({"collection_name": "c", "conversation_id": "base", "query": "Rome",
                          "event_search_config": {"filter": {"user_id": "u1"}, "limit": 3},
                          "profile_search_config": {"filter": {"user_id": "u1"}}, "include": {"recap": false}}),
            bad: vec![
                ("/event_search_config", "limt", "event_search_config.limt"),
                ("/event_search_config/filter", "grup_id", "event_search_config.filter.grup_id"),
                ("/profile_search_config", "limt", "profile_search_config.limt"),
                ("/include", "profil", "include.profil"),
                ("", "max_token", "max_token"),
            ],
        },
        Case { path: "stats", valid: json!({"collection_name": "c"}), bad: vec![("", "dayz", "dayz")] },
        Case { path: "maintenance/run", valid: json!({"collection_name": "c"}), bad: vec![("", "dry_run", "dry_run")] },
        Case { path: "maintenance/list", valid: json!({"collection_name": "c"}), bad: vec![("", "limt", "limt")] },
        Case { path: "admin/clock", valid: json!({"advance_ms": 1}), bad: vec![("", "advance", "advance")] },
        Case {
            path: "user/export",
            valid: json!({"collection_name": "c", "user_id": "u1"}),
            bad: vec![("", "user", "user")],
        },
        Case {
            path: "user/forget",
            valid: json!({"collection_name": "c", "user_id": "u1"}),
            bad: vec![("", "confirm", "confirm")],
        },
        Case {
            path: "webhook/create",
            valid: json!({"url": "https://example.com/hook", "events": ["memory.created"], "description": "d"}),
            bad: vec![("", "event", "event"), ("", "secret_env", "secret_env")],
        },
        Case { path: "webhook/list", valid: json!({}), bad: vec![("", "webhook_id", "webhook_id")] },
        Case { path: "webhook/delete", valid: json!({"webhook_id": webhook_id}), bad: vec![("", "id", "id")] },
        Case {
            path: "webhook/deliveries",
            valid: json!({"webhook_id": webhook_id, "state": "dead", "limit": 5}),
            bad: vec![("", "status", "status"), ("", "limt", "limt")],
        },
        Case {
            path: "webhook/redeliver",
            valid: json!({"webhook_id": webhook_id, "delivery_ids": [1]}),
            bad: vec![("", "delivery_id", "delivery_id")],
        },
    ];

    // The table covers every endpoint the server documents (and so routes).
    let spec: Value = s.client.get(format!("{}/openapi.json", s.base)).send().await.unwrap().json().await.unwrap();
    let routed: BTreeSet<String> = spec["paths"]
        .as_object()
        .unwrap()
        .keys()
        .filter_map(|p| p.strip_prefix("/api/memory/").map(str::to_string))
        .filter(|p| p != "ping") // GET, no body
        .collect();
    let covered: BTreeSet<String> = cases.iter().map(|c| c.path.to_string()).collect();
    assert_eq!(routed, covered, "every endpoint needs a strict-input case");

    let before = snapshot(&s).await;
    let mut failures = Vec::new();
    let mut sent = 0;
    for case in &cases {
        let mut bodies = vec![(with_key(&case.valid, "", "zz_unknown"), "zz_unknown".to_string())];
        for (pointer, key, field) in &case.bad {
            bodies.push((with_key(&case.valid, pointer, key), field.to_string()));
        }
        for (body, field) in bodies {
            sent += 1;
            let (st, v) = s.post(case.path, body.clone()).await;
            let message = v["message"].as_str().unwrap_or_default();
            let want = format!("{field}: unknown field; expected one of ");
            if st != 400 || v["code"] != 40000 || !message.starts_with(&want) {
                failures.push(format!("{} {body}: got {st} {v}, want 400 starting {want:?}", case.path));
            }
        }
    }
    assert!(failures.is_empty(), "{} of {sent} wrong:\n{}", failures.len(), failures.join("\n"));
    assert_eq!(snapshot(&s).await, before, "a refused request changed the store");

    // The valid bodies are accepted (so each refusal above was about the one bad key), in an
    // order where nothing is deleted before it is used.
    for case in &cases {
        // (user/export answers JSON lines; snapshot() reads it.)
        if [
            "collection/delete",
            "event/delete",
            "profile/delete",
            "user/forget",
            "event/batch_delete",
            "user/export",
            "session/delete",
            "webhook/delete",
        ]
        .contains(&case.path)
        {
            continue;
        }
        s.ok(case.path, case.valid.clone()).await;
    }
}

/// VikingDB's metadata names for the owners are read, not stored and ignored: the extracted
/// events belong to `default_user_id`; two different owners in one request are refused.
#[tokio::test]
async fn vikingdb_owner_names_in_metadata_own_the_extracted_events() {
    let s = Server::start("");
    s.ok(
        "session/streaming_write",
        json!({"collection_name": "c", "conversation_id": "v1", "extract_trigger": {"message_count": 2},
               "messages": [{"role": "user", "content": "I moved to Lisbon"}, {"role": "assistant", "content": "Nice!"}],
               "metadata": {"default_user_id": "vu", "default_assistant_id": "va"}}),
    )
    .await;
    let events = eventually(20, "events owned by vu", || async {
        let e = s.events("vu").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(events[0]["user_id"], json!(["vu"]));
    assert_eq!(events[0]["assistant_id"], json!(["va"]));
    let (st, v) = s
        .post(
            "session/streaming_write",
            json!({"collection_name": "c", "conversation_id": "v2", "messages": [{"role": "user", "content": "x"}],
                   "metadata": {"user_id": "a", "default_user_id": "b"}}),
        )
        .await;
    assert_eq!(st, 400, "{v}");
    assert!(v["message"].as_str().unwrap().starts_with("metadata.default_user_id:"), "{v}");
}
