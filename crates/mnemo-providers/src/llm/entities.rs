//! The entities the `llm` extractor names for each event (its answer's `entities`), checked and
//! kept in the event's `memory_info.entities`, where core's entity catalog reads them first.

use serde_json::{Value, json};

fn short(v: &Value) -> Option<&str> {
    v.as_str().map(str::trim).filter(|s| !s.is_empty() && s.chars().count() <= 80)
}

/// An event's `entities` as the model gave them, when any is usable: names and aliases trimmed
/// and at most 80 characters, at most 10 entities of 5 aliases, an unknown kind read as `other`.
pub(super) fn stated(raw: &Value) -> Option<Value> {
    let kept: Vec<Value> = raw
        .as_array()?
        .iter()
        .filter_map(|e| {
            let name = short(&e["name"])?;
            let kind = e["kind"].as_str().filter(|k| ["person", "place", "organization", "pet"].contains(k));
            let aliases: Vec<&str> = e["aliases"].as_array().into_iter().flatten().filter_map(short).take(5).collect();
            Some(json!({"name": name, "kind": kind.unwrap_or("other"), "aliases": aliases}))
        })
        .take(10)
        .collect();
    (!kept.is_empty()).then_some(Value::Array(kept))
}
