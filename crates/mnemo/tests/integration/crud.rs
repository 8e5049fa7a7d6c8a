//! Direct memory CRUD: collections with custom schemas, events, batch delete, profiles.

use crate::harness::*;
use serde_json::json;

#[tokio::test]
async fn collections_create_list_info_delete() {
    let s = Server::start("");
    let d = s
        .ok(
            "collection/create",
            json!({"collection_name": "tutor", "description": "lessons",
                   "event_types": [{"name": "lesson", "description": "a graded answer", "weight_field": "rating_score",
                                    "fields": [{"name": "question", "type": "string"},
                                               {"name": "rating", "type": "enum", "values": ["good", "bad"], "required": true},
                                               {"name": "rating_score", "type": "int"}]}]}),
        )
        .await;
    let names: Vec<_> =
        d["event_types"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(names, vec!["event_v1", "lesson"], "built-ins always exist");
    let (st, v) = s.post("collection/create", json!({"collection_name": "tutor"})).await;
    assert_eq!((st, v["code"].clone()), (409, json!(40900)));
    let l = s.ok("collection/list", json!({})).await;
    assert_eq!(l["count"], 1);
    // Typed memory_info is checked against the custom type.
    let ok = json!({"collection_name": "tutor", "event_type": "lesson", "user_id": "s1",
                    "memory_info": {"question": "weather?", "rating": "good", "rating_score": 7}});
    s.ok("event/add", ok).await;
    let (st, v) = s
        .post("event/add", json!({"collection_name": "tutor", "event_type": "lesson", "user_id": "s1", "memory_info": {"rating": "meh"}}))
        .await;
    assert_eq!(st, 400);
    assert!(v["message"].as_str().unwrap().starts_with("memory_info.rating:"), "{v}");
    s.ok("collection/delete", json!({"collection_name": "tutor"})).await;
    let (st, _) = s.post("collection/info", json!({"collection_name": "tutor"})).await;
    assert_eq!(st, 404);
}

#[tokio::test]
async fn events_add_update_delete_and_newest_first() {
    let s = Server::start("");
    let add = |summary: &str, time: i64, user: &str| {
        json!({"collection_name": "c", "event_type": "event_v1", "user_id": user, "assistant_id": "bot",
               "memory_info": {"summary": summary}, "time": time})
    };
    let e1 = s.ok("event/add", add("用户说周末想去一家新的咖啡店", 1_000, "u1")).await["event_id"]
        .as_str()
        .unwrap()
        .to_string();
    s.ok("event/add", add("用户在学习意式浓缩", 3_000, "u1")).await;
    s.ok("event/add", add("other user", 2_000, "u2")).await;
    // Searchable at once (read-your-writes), newest first, filtered by user.
    let ev = s.events("u1").await;
    assert_eq!(ev.iter().map(|e| e["time"].as_i64().unwrap()).collect::<Vec<_>>(), vec![3_000, 1_000]);
    assert!(ev[0]["score"].is_number() && ev[0]["time_score"].is_number() && ev[0]["custom_weight_score"].is_number());
    let upd = s
        .ok(
            "event/update",
            json!({"collection_name": "c", "event_id": e1, "memory_info": {"summary": "改了"}, "time": 5_000}),
        )
        .await;
    assert_eq!(upd["event"]["memory_info"]["summary"], "改了");
    assert_eq!(s.events("u1").await[0]["event_id"], e1.as_str(), "new time moves it first");
    s.ok("event/delete", json!({"collection_name": "c", "event_id": e1})).await;
    let (st, v) = s.post("event/delete", json!({"collection_name": "c", "event_id": e1})).await;
    assert_eq!((st, v["code"].clone()), (404, json!(40400)));
    assert_eq!(s.events("u1").await.len(), 1);
    // Time range and type filters.
    let r = s
        .ok("event/search", json!({"collection_name": "c", "filter": {"assistant_id": "bot", "start_time": 1_500, "end_time": 2_500, "memory_type": ["event_v1"]}}))
        .await;
    assert_eq!(r["count"], 1);
    assert_eq!(r["result_list"][0]["user_id"], json!(["u2"]));
}

#[tokio::test]
async fn batch_add_stores_every_event_or_none_and_names_the_bad_one() {
    let s = Server::start("");
    let ev = |summary: &str, time: i64, user: &str| json!({"event_type": "event_v1", "user_id": user, "memory_info": {"summary": summary}, "time": time});
    let batch = json!({"collection_name": "c", "events": [ev("用户住在上海", 1_000, "u1"), ev("the user keeps bees", 2_000, "u1"), ev("other", 3_000, "u2")]});
    let r = s.ok("event/batch_add", batch).await;
    assert_eq!(r["count"], 3);
    let ids: Vec<&str> = r["event_ids"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    let mine = s.events("u1").await;
    assert_eq!(
        mine.iter().map(|e| e["event_id"].as_str().unwrap()).collect::<Vec<_>>(),
        [ids[1], ids[0]],
        "newest first"
    );
    // Embedded like event/add: a Chinese query finds the English memory by meaning alone.
    let hits = s
        .ok("event/search", json!({"collection_name": "c", "query": "养蜂", "filter": {"user_id": "u1"}, "limit": 1}))
        .await;
    assert_eq!(hits["result_list"][0]["event_id"], ids[1], "{hits}");

    // One bad event: 400 naming it, and none of the batch is stored.
    let bad = json!({"collection_name": "c", "events": [ev("fine", 4_000, "u3"), {"event_type": "event_v1", "user_id": "u3", "memory_info": {"summary": "x"}, "ttl_relative": 0}]});
    let (st, v) = s.post("event/batch_add", bad).await;
    assert_eq!(st, 400, "{v}");
    assert!(v["message"].as_str().unwrap().starts_with("events[1].ttl_relative:"), "{v}");
    let unknown = json!({"collection_name": "c", "events": [{"event_type": "event_v1", "user_id": "u3", "memory_info": {}, "colour": 1}]});
    let (st, v) = s.post("event/batch_add", unknown).await;
    assert_eq!(st, 400, "{v}");
    assert!(v["message"].as_str().unwrap().contains("colour"), "{v}");
    let (st, v) = s.post("event/batch_add", json!({"collection_name": "c", "events": []})).await;
    assert_eq!(st, 400, "{v}");
    assert!(v["message"].as_str().unwrap().starts_with("events: must hold 1 to 500"), "{v}");
    assert!(s.events("u3").await.is_empty(), "nothing of a refused batch is stored");
}

#[tokio::test]
async fn batch_delete_by_filter_touches_only_matches() {
    let s = Server::start("");
    for (u, sum, t) in [("u1", "a", 1_000), ("u1", "b", 2_000), ("u2", "c", 1_500)] {
        s.ok("event/add", json!({"collection_name": "c", "event_type": "event_v1", "user_id": u, "memory_info": {"summary": sum}, "time": t})).await;
    }
    let d = s
        .ok("event/batch_delete", json!({"collection_name": "c", "filter": {"user_id": "u1", "event_type": "event_v1", "end_time": 1_200}, "delete_type": "full"}))
        .await;
    assert_eq!(d["deleted"], 1);
    // A filter of only the user selects all of the user's events: previewed, refused, confirmed.
    let all_of_u1 = json!({"collection_name": "c", "filter": {"user_id": "u1"}, "delete_type": "full"});
    let mut dry = all_of_u1.clone();
    dry["dry_run"] = json!(true);
    let d = s.ok("event/batch_delete", dry).await;
    assert_eq!((d["would_delete"].as_u64(), d["event_ids"].as_array().map(Vec::len)), (Some(1), Some(1)), "{d}");
    assert_eq!(s.events("u1").await.len(), 1, "a dry run deletes nothing");
    let (st, v) = s.post("event/batch_delete", all_of_u1.clone()).await;
    assert_eq!(st, 400, "{v}");
    assert!(v["message"].as_str().unwrap().starts_with("confirm:"), "{v}");
    let mut confirmed = all_of_u1;
    confirmed["confirm"] = json!("all");
    let d = s.ok("event/batch_delete", confirmed).await;
    assert_eq!(d["deleted"], 1);
    assert!(s.events("u1").await.is_empty());
    assert_eq!(s.events("u2").await.len(), 1, "another user's events are untouched");
    let (st, v) =
        s.post("event/batch_delete", json!({"collection_name": "c", "filter": {}, "delete_type": "full"})).await;
    assert_eq!(st, 400, "an empty filter must not wipe the collection: {v}");
    assert_eq!(s.events("u2").await.len(), 1);
}

#[tokio::test]
async fn profiles_add_update_delete_search() {
    let s = Server::start("");
    let d = s
        .ok(
            "profile/add",
            json!({"collection_name": "c", "user_id": "u1", "attributes": {"city": "上海", "child_age": "1岁"}}),
        )
        .await;
    let pid = d["profile_id"].as_str().unwrap().to_string();
    assert_eq!(d["profile"]["content"], "child_age: 1岁; city: 上海");
    let (st, v) = s.post("profile/add", json!({"collection_name": "c", "user_id": "u1"})).await;
    assert_eq!(st, 409, "one profile per user and type: {v}");
    let d = s
        .ok(
            "profile/update",
            json!({"collection_name": "c", "profile_id": pid, "attributes": {"city": "北京", "child_age": null}}),
        )
        .await;
    assert_eq!(d["profile"]["attributes"], json!({"city": "北京"}));
    assert_eq!(d["profile"]["content"], "city: 北京", "generated content follows the attributes");
    let d = s
        .ok("profile/update", json!({"collection_name": "c", "profile_id": pid, "content": "28岁宝妈，住在北京"}))
        .await;
    assert_eq!(d["profile"]["content"], "28岁宝妈，住在北京");
    let r = s.ok("profile/search", json!({"collection_name": "c", "filter": {"user_id": ["u1", "u9"]}})).await;
    assert_eq!(r["count"], 1);
    s.ok("profile/delete", json!({"collection_name": "c", "profile_id": pid})).await;
    let r = s.ok("profile/search", json!({"collection_name": "c", "filter": {"user_id": "u1"}})).await;
    assert_eq!(r["count"], 0);
}

/// VikingDB's CreateCollection body is mapped onto mnemo's: custom event and profile types with
/// their properties, a fixed or field weight, `TtlRelative` as the events' lifetime; cloud knobs
/// and what mnemo cannot do are refused by name.
#[tokio::test]
async fn collection_create_takes_vikingdb_s_body() {
    let s = Server::start("");
    let c = s
        .ok(
            "collection/create",
            json!({
                "CollectionName": "english_learning", "Description": "study log", "TtlRelative": 3600,
                "BuiltinEventTypes": ["sys_event_v1"], "BuiltinProfileTypes": ["sys_profile_v1"],
                "CustomEventTypeSchemas": [{"EventType": "english_study", "Description": "a lesson",
                    "Properties": [{"PropertyName": "knowledge_point_name", "PropertyValueType": "string", "Description": "topic"},
                                   {"PropertyName": "rating_score", "PropertyValueType": "float32", "Description": "score"}],
                    "CustomWeightExpression": "rating_score"}],
                "CustomProfileTypeSchemas": [{"ProfileType": "learner", "Description": "the learner", "Role": "user",
                    "Properties": [{"PropertyName": "level", "PropertyValueType": "string", "Description": "CEFR level"}]}],
            }),
        )
        .await;
    assert_eq!(c["event_ttl_secs"], 3600);
    assert_eq!(c["resource_id"], "default/english_learning");
    let study = c["event_types"].as_array().unwrap().iter().find(|t| t["name"] == "english_study").unwrap().clone();
    assert_eq!(study["weight_field"], "rating_score");
    assert_eq!(
        study["fields"][1],
        json!({"name": "rating_score", "type": "float", "description": "score", "required": false})
    );
    assert!(c["profile_types"].as_array().unwrap().iter().any(|t| t["name"] == "learner"));
    // The collection's TTL applies to events written without one.
    let e = s
        .ok(
            "event/add",
            json!({"resource_id": "default/english_learning", "event_type": "english_study", "user_id": "u1",
                   "memory_info": {"knowledge_point_name": "past tense", "rating_score": 0.8}}),
        )
        .await;
    let ev = &e["event"];
    let (created, expires) = (ev["created_at"].as_i64().unwrap(), ev["expires_at"].as_i64().expect("an expiry"));
    assert_eq!(expires - created, 3_600_000, "{ev}");
    for (body, field) in [
        (json!({"CollectionName": "x1", "CpuQuota": 2}), "CpuQuota:"),
        (json!({"CollectionName": "x2", "CollectionModalType": "multimodal"}), "CollectionModalType:"),
        (json!({"CollectionName": "x3", "BuiltinEventTypes": ["sys_common"]}), "BuiltinEventTypes:"),
        (json!({"CollectionName": "x4", "TtlRelative": 0}), "event_ttl_secs:"),
        (
            json!({"CollectionName": "x5", "CustomEventTypeSchemas": [{"EventType": "t", "Properties": [{"PropertyName": "p", "PropertyValueType": "list"}]}]}),
            "CustomEventTypeSchemas[0].Properties[0].PropertyValueType:",
        ),
        (
            json!({"CollectionName": "x6", "CustomProfileTypeSchemas": [{"ProfileType": "t", "Properties": [{"PropertyName": "p", "PropertyValueType": "int64", "AggregateExpression": {"Op": "MAX"}}]}]}),
            "CustomProfileTypeSchemas[0].Properties[0].AggregateExpression:",
        ),
        (
            json!({"CollectionName": "x7", "CustomEventTypeSchemas": [{"EventType": "t", "Properties": [], "HasMultiEvent": true}]}),
            "CustomEventTypeSchemas[0].HasMultiEvent: unknown field",
        ),
        (json!({"CollectionName": "x8", "Descripton": "typo"}), "Descripton: unknown field"),
    ] {
        let (st, v) = s.post("collection/create", body.clone()).await;
        assert_eq!(st, 400, "{body} → {v}");
        assert!(v["message"].as_str().unwrap().starts_with(field), "{body} → {v}");
    }
    let names: Vec<serde_json::Value> = s.ok("collection/list", json!({})).await["collections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["collection_name"].clone())
        .collect();
    assert!(!names.iter().any(|n| n.as_str().unwrap().starts_with('x')), "nothing refused was created: {names:?}");
}
