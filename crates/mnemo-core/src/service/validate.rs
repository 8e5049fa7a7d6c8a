//! Validation helpers shared by the service's calls: lengths, names, ids, times, schemas.

use super::*;
use crate::error::{CoreError, CoreResult};
use serde_json::{Map, Value};

pub const MAX_CONVERSATION_ID_CHARS: usize = 256;
pub const MAX_MESSAGES_PER_WRITE: usize = 1000;
pub const MAX_NAME_CHARS: usize = 256;
pub const MAX_ID_CHARS: usize = 256;
pub const MAX_CONTENT_CHARS: usize = 200_000;
pub const LIMIT_RANGE: (i64, i64) = (1, 5000);

pub(super) fn check_len(field: &str, v: &str, min: usize, max: usize) -> CoreResult<()> {
    let n = v.chars().count();
    if n < min || n > max || (min > 0 && v.trim().is_empty()) {
        return Err(CoreError::invalid(field, format!("must be {min}..={max} characters and not blank, got {n}")));
    }
    if v.contains('\0') {
        return Err(CoreError::invalid(field, "must not contain NUL (\\u0000) characters"));
    }
    Ok(())
}

pub(super) fn check_time(field: &str, t: Millis) -> CoreResult<()> {
    // 0 ..= year 9999: anything else is almost surely seconds-vs-ms confusion or garbage.
    const MAX: Millis = 253_402_300_799_999;
    if !(0..=MAX).contains(&t) {
        return Err(CoreError::invalid(
            field,
            format!("must be milliseconds since the Unix epoch in 0..={MAX}, got {t}"),
        ));
    }
    Ok(())
}

pub(super) fn validate_names(t: &Target) -> CoreResult<()> {
    validate_name("project_name", &t.project)?;
    validate_name("collection_name", &t.collection)
}

pub(super) fn validate_name(field: &str, v: &str) -> CoreResult<()> {
    let ok =
        !v.is_empty() && v.len() <= 128 && v.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-' || c == '.');
    if !ok {
        return Err(CoreError::invalid(
            field,
            format!("must be 1..=128 characters of letters, digits, '_', '-', '.', got {v:?}"),
        ));
    }
    Ok(())
}

pub fn validate_conversation_id(id: &str) -> CoreResult<()> {
    check_len("conversation_id", id, 1, MAX_CONVERSATION_ID_CHARS)
}

pub(super) fn validate_id(field: &str, id: &str) -> CoreResult<()> {
    check_len(field, id, 1, MAX_ID_CHARS)
}

pub(super) fn validate_meta(m: &ConversationMeta) -> CoreResult<()> {
    for (field, v) in [
        ("metadata.user_id", &m.user_id),
        ("metadata.assistant_id", &m.assistant_id),
        ("metadata.group_id", &m.group_id),
        ("metadata.scope", &m.scope),
    ] {
        if let Some(v) = v {
            check_len(field, v, 1, MAX_ID_CHARS)?;
        }
    }
    Ok(())
}

pub(super) fn validate_class(class: Option<String>) -> CoreResult<String> {
    match class {
        None => Ok("conclusion".into()),
        Some(c) if EVENT_CLASSES.contains(&c.as_str()) => Ok(c),
        Some(c) => Err(CoreError::invalid("class", format!("must be one of {EVENT_CLASSES:?}, got {c:?}"))),
    }
}

pub(super) fn validate_time_range(f: &EventFilter) -> CoreResult<()> {
    if let (Some(s), Some(e)) = (f.start_time, f.end_time)
        && s > e
    {
        return Err(CoreError::invalid("filter.start_time", format!("must be <= filter.end_time ({s} > {e})")));
    }
    f.as_of.map_or(Ok(()), |t| check_time("as_of", t))
}

pub(super) fn validate_schema(events: &[EventTypeDef], profiles: &[ProfileTypeDef]) -> CoreResult<()> {
    let name_ok = |s: &str| !s.is_empty() && s.len() <= 64 && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    for (i, t) in events.iter().enumerate() {
        if !name_ok(&t.name) {
            return Err(CoreError::invalid(format!("event_types[{i}].name"), "must be 1..=64 of [A-Za-z0-9_]"));
        }
        if t.fields.is_empty() {
            return Err(CoreError::invalid(format!("event_types[{i}].fields"), "must list at least one field"));
        }
        if let Some(c) = &t.default_class
            && !EVENT_CLASSES.contains(&c.as_str())
        {
            return Err(CoreError::invalid(
                format!("event_types[{i}].default_class"),
                format!("must be one of {EVENT_CLASSES:?}, got {c:?}"),
            ));
        }
        if let Some(w) = t.weight
            && !(0.0..=1.0).contains(&w)
        {
            return Err(CoreError::invalid(format!("event_types[{i}].weight"), format!("must be in [0,1], got {w}")));
        }
        for (j, f) in t.fields.iter().enumerate() {
            if !name_ok(&f.name) || f.name == "original_messages" {
                return Err(CoreError::invalid(
                    format!("event_types[{i}].fields[{j}].name"),
                    "must be 1..=64 of [A-Za-z0-9_] and not \"original_messages\"",
                ));
            }
            if f.field_type == FieldType::Enum && f.values.is_empty() {
                return Err(CoreError::invalid(
                    format!("event_types[{i}].fields[{j}].values"),
                    "an enum field needs values",
                ));
            }
        }
        if let Some(wf) = &t.weight_field
            && !t.fields.iter().any(|f| &f.name == wf && matches!(f.field_type, FieldType::Int | FieldType::Float))
        {
            return Err(CoreError::invalid(
                format!("event_types[{i}].weight_field"),
                format!("must name an int or float field of the type, got {wf:?}"),
            ));
        }
    }
    for (i, t) in profiles.iter().enumerate() {
        if !name_ok(&t.name) {
            return Err(CoreError::invalid(format!("profile_types[{i}].name"), "must be 1..=64 of [A-Za-z0-9_]"));
        }
    }
    Ok(())
}

/// Checks `info` against an event type's fields. `full` requires every required field.
pub fn validate_memory_info(def: &EventTypeDef, info: &Map<String, Value>, path: &str, full: bool) -> CoreResult<()> {
    for (k, v) in info {
        if k == "original_messages" {
            if !v.is_string() {
                return Err(CoreError::invalid(format!("{path}.original_messages"), "must be a string"));
            }
            continue;
        }
        let field = def.fields.iter().find(|f| &f.name == k);
        if k == STATED_ENTITIES && field.is_none() {
            let stated = |e: &Value| e["name"].as_str().is_some_and(|n| (1..=200).contains(&n.chars().count()));
            if !v.as_array().is_some_and(|a| a.len() <= 50 && a.iter().all(stated)) {
                return Err(CoreError::invalid(
                    format!("{path}.{STATED_ENTITIES}"),
                    "must be a list of at most 50 entities, each {\"name\": 1..=200 characters, \"kind\", \"aliases\"}",
                ));
            }
            continue;
        }
        let Some(f) = field else {
            return Err(CoreError::invalid(
                format!("{path}.{k}"),
                format!(
                    "is not a field of event type \"{}\" (fields: {})",
                    def.name,
                    def.fields.iter().map(|f| f.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
            ));
        };
        let ok = match f.field_type {
            FieldType::String => v.as_str().is_some_and(|s| s.chars().count() <= MAX_CONTENT_CHARS),
            FieldType::Int => v.as_i64().is_some(),
            FieldType::Float => v.as_f64().is_some(),
            FieldType::Bool => v.is_boolean(),
            FieldType::Enum => v.as_str().is_some_and(|s| f.values.iter().any(|x| x == s)),
        };
        if !ok {
            let want = match f.field_type {
                FieldType::Enum => format!("one of {:?}", f.values),
                other => format!("a {other:?}").to_lowercase(),
            };
            return Err(CoreError::invalid(format!("{path}.{k}"), format!("must be {want}, got {v}")));
        }
    }
    if full {
        for f in def.fields.iter().filter(|f| f.required) {
            match info.get(&f.name) {
                None => {
                    return Err(CoreError::invalid(format!("{path}.{}", f.name), "is required"));
                }
                Some(Value::String(s)) if s.trim().is_empty() => {
                    return Err(CoreError::invalid(format!("{path}.{}", f.name), "must not be empty"));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    pub(super) fn memory_info_is_checked_against_the_type() {
        let def = CollectionSchema::builtin_event_v1();
        let ok = json!({"summary": "用户喜欢手冲咖啡", "original_messages": "u: …",
                        "entities": [{"name": "小雨", "kind": "person", "aliases": ["姐姐"]}]});
        assert!(validate_memory_info(&def, ok.as_object().unwrap(), "memory_info", true).is_ok());
        for (bad, field) in [
            (json!({}), "memory_info.summary"),
            (json!({"summary": 3}), "memory_info.summary"),
            (json!({"summary": "x", "mood": "ok"}), "memory_info.mood"),
            (json!({"summary": "   "}), "memory_info.summary"),
            (json!({"summary": "x", "entities": "Wen"}), "memory_info.entities"),
            (json!({"summary": "x", "entities": [{"kind": "person"}]}), "memory_info.entities"),
        ] {
            match validate_memory_info(&def, bad.as_object().unwrap(), "memory_info", true) {
                Err(CoreError::Invalid { field: f, .. }) => assert_eq!(f, field, "{bad}"),
                other => panic!("{bad}: expected invalid, got {other:?}"),
            }
        }
    }

    #[test]
    pub(super) fn enum_and_numeric_fields() {
        let def = EventTypeDef {
            name: "lesson".into(),
            description: String::new(),
            fields: vec![
                FieldDef {
                    name: "rating".into(),
                    field_type: FieldType::Enum,
                    description: String::new(),
                    values: vec!["good".into(), "bad".into()],
                    required: true,
                },
                FieldDef {
                    name: "score".into(),
                    field_type: FieldType::Int,
                    description: String::new(),
                    values: vec![],
                    required: false,
                },
            ],
            weight: None,
            weight_field: Some("score".into()),
            default_class: None,
        };
        assert!(
            validate_memory_info(&def, json!({"rating": "good", "score": 7}).as_object().unwrap(), "m", true).is_ok()
        );
        assert!(validate_memory_info(&def, json!({"rating": "meh"}).as_object().unwrap(), "m", true).is_err());
        assert!(
            validate_memory_info(&def, json!({"rating": "bad", "score": 1.5}).as_object().unwrap(), "m", true).is_err()
        );
        assert!(validate_schema(&[def], &[]).is_ok());
    }
}
