//! Tests of `llm`.

use super::*;
use mnemo_core::model::{ConversationMeta, Event, StoredMessage};

fn msg(id: i64, role: Role, content: &str) -> StoredMessage {
    StoredMessage {
        message_id: id,
        conversation_id: "c".into(),
        session_id: None,
        role,
        name: None,
        content: content.into(),
        time: 1_764_400_000_000 + id * 1000,
        tokens: 0,
    }
}

fn input() -> ExtractionInput {
    ExtractionInput {
        schema: CollectionSchema::default(),
        session_id: "s".into(),
        meta: ConversationMeta::default(),
        messages: vec![
            msg(10, Role::User, "I moved to Berlin last month and I'm vegetarian now."),
            msg(11, Role::Assistant, "Nice! Berlin has great vegetarian food."),
        ],
        profiles: vec![],
        related_events: vec![Event { id: "evt_old".into(), ..Default::default() }],
        now: 0,
    }
}

#[test]
fn tolerant_parsing_skips_fences_and_prose() {
    assert!(parse_json("```json\n{\"events\": []}\n```").is_ok());
    assert!(parse_json("Sure! Here it is: {\"events\": [], \"profile\": []} Hope that helps").is_ok());
    assert!(parse_json("{\"events\": [").is_err());
    assert!(parse_json("[1, 2]").is_err());
}

#[test]
fn valid_items_kept_invalid_dropped() {
    let inp = input();
    let cleaned = clean(&inp.messages, &RulesConfig::default());
    let answer = json!({
        "events": [
            {"type": "event_v1", "fields": {"summary": "The user moved to Berlin last month."}, "source": [1], "supersedes": "E1",
             "entities": [{"name": " Berlin ", "kind": "place", "aliases": []}, {"name": "Wen", "kind": "sibling", "aliases": ["my sister", ""]}, {"kind": "person"}]},
            {"type": "event_v1", "fields": {"summary": 42}, "source": [1]},
            {"type": "no_such_type", "fields": {"summary": "x"}, "source": [1]},
            {"type": "event_v1", "fields": {}, "source": [1]},
        ],
        "profile": [
            {"op": "set", "attribute": "city", "value": "Berlin"},
            {"op": "add", "attribute": "diet", "value": "vegetarian"},
            {"op": "add", "attribute": "job", "value": "designer"},
            {"op": "explode", "attribute": "x", "value": "y"},
            {"op": "set", "attribute": "", "value": "y"},
            {"type": "nope", "op": "set", "attribute": "x", "value": "y"},
        ],
    });
    let out = validate(&answer, &inp, &cleaned, 200);
    assert_eq!(out.events.len(), 1, "{:?}", out.events);
    let e = &out.events[0];
    assert_eq!(e.source_message_ids, vec![10]);
    assert_eq!(e.supersedes.as_deref(), Some("evt_old"));
    assert!(e.memory_info["original_messages"].as_str().unwrap().contains("Berlin"));
    // The entities it named, trimmed; an unknown kind is "other", a nameless one dropped.
    assert_eq!(
        e.memory_info["entities"],
        json!([{"name": "Berlin", "kind": "place", "aliases": []}, {"name": "Wen", "kind": "other", "aliases": ["my sister"]}])
    );
    assert_eq!(out.profile_changes.len(), 3);
    assert!(
        matches!(&out.profile_changes[2], ProfileChange::Set { key, .. } if key == "job"),
        "a single-valued attribute is set, not appended"
    );
}

#[test]
fn the_schema_names_every_type_and_bounds_lengths() {
    let s = output_schema(&CollectionSchema::default());
    assert_eq!(s["properties"]["events"]["items"]["properties"]["type"]["enum"], json!(["event_v1"]));
    assert_eq!(s["properties"]["events"]["maxItems"], 12);
    // Strict mode: every object closed, every property required, no unsupported keyword.
    fn strict(v: &Value, path: &str) {
        match v {
            Value::Object(o) => {
                assert!(!o.contains_key("maxLength") && !o.contains_key("minLength"), "{path}");
                if o.get("type") == Some(&json!("object")) {
                    assert_eq!(o["additionalProperties"], false, "{path}");
                    let props: Vec<&String> = o["properties"].as_object().unwrap().keys().collect();
                    let req: Vec<&str> =
                        o["required"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
                    assert!(props.iter().all(|p| req.contains(&p.as_str())), "{path}: {props:?} vs {req:?}");
                }
                o.iter().for_each(|(k, x)| strict(x, &format!("{path}.{k}")));
            }
            Value::Array(a) => a.iter().for_each(|x| strict(x, path)),
            _ => {}
        }
    }
    strict(&s, "$");
    let p = system_prompt(&CollectionSchema::default());
    assert!(p.contains("event_v1") && p.contains("profile_v1") && p.contains("Do NOT turn them into dates"));
}
