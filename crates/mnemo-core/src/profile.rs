//! How profile changes apply to a profile's attributes. Pure, so every store applies them alike
//! inside its own transaction: attributes change in place and lists never hold duplicates.

use crate::extract::ProfileChange;
use serde_json::{Map, Value};

/// What applying changes did.
#[derive(Debug, Default, PartialEq)]
pub struct Applied {
    pub changed: bool,
    /// The values that changed or went, as they were before: (attribute, old value) — a list
    /// that gained or lost items reports the whole list it was. Kept as history by `keep_history`
    /// profiles, so every version of an attribute is a value it held from one time to another.
    pub superseded: Vec<(String, Value)>,
}

/// Applies `changes` in order.
pub fn apply_changes(attributes: &mut Map<String, Value>, changes: &[ProfileChange]) -> Applied {
    let before = attributes.clone();
    for change in changes {
        match change {
            ProfileChange::Set { key, value } => {
                attributes.insert(key.clone(), value.clone());
            }
            ProfileChange::Remove { key } => {
                attributes.remove(key);
            }
            ProfileChange::Append { key, items } => {
                let list = attributes.entry(key.clone()).or_insert_with(|| Value::Array(vec![]));
                if !list.is_array() {
                    // A scalar becomes the first item of the list.
                    *list = Value::Array(vec![list.clone()]);
                }
                let arr = list.as_array_mut().expect("made an array above");
                for item in items {
                    if !arr.iter().any(|v| v.as_str().is_some_and(|s| same_item(s, item))) {
                        arr.push(Value::String(item.clone()));
                    }
                }
            }
            ProfileChange::RemoveItems { key, items } => {
                if let Some(Value::Array(arr)) = attributes.get_mut(key) {
                    arr.retain(|v| !v.as_str().is_some_and(|s| items.iter().any(|i| same_item(s, i))));
                    if arr.is_empty() {
                        attributes.remove(key);
                    }
                }
            }
        }
    }
    let changed = *attributes != before;
    let superseded = before.into_iter().filter(|(k, v)| attributes.get(k) != Some(v)).collect();
    Applied { changed, superseded }
}

fn same_item(a: &str, b: &str) -> bool {
    a.trim().to_lowercase() == b.trim().to_lowercase()
}

/// Applies an API edit (`profile/update`) to a profile in place: attributes merged (a `null`
/// removes the key) or replaced; the content follows the attributes unless it was written by hand
/// or is given. Returns the values the edit replaced or removed (for `keep_history`).
pub fn apply_patch(p: &mut crate::model::Profile, patch: crate::model::ProfilePatch) -> Vec<(String, Value)> {
    let auto_content = p.content == describe(&p.attributes);
    let before = p.attributes.clone();
    if let Some(attrs) = patch.attributes {
        if patch.replace_attributes {
            p.attributes = attrs.into_iter().filter(|(_, v)| !v.is_null()).collect();
        } else {
            for (k, v) in attrs {
                if v.is_null() {
                    p.attributes.remove(&k);
                } else {
                    p.attributes.insert(k, v);
                }
            }
        }
    }
    if let Some(sources) = patch.source_session_ids {
        p.source_session_ids = sources;
    }
    match patch.content {
        Some(c) => p.content = c,
        None if auto_content => p.content = describe(&p.attributes),
        None => {}
    }
    before.into_iter().filter(|(k, v)| p.attributes.get(k) != Some(v)).collect()
}

/// The versions a change leaves behind: each replaced value, valid from since when its attribute
/// held it (`since`, before the change) to `at`. Every store records these (`keep_history`).
pub fn replaced_versions(
    since: &Map<String, Value>,
    superseded: &[(String, Value)],
    session_id: Option<&str>,
    at: i64,
) -> Vec<crate::model::AttributeVersion> {
    superseded
        .iter()
        .map(|(attribute, value)| crate::model::AttributeVersion {
            attribute: attribute.clone(),
            value: value.clone(),
            valid_from: since.get(attribute).and_then(Value::as_i64),
            valid_to: at,
            session_id: session_id.map(String::from),
        })
        .collect()
}

/// Since when each attribute holds: attributes whose value changed from `before` to `after` hold
/// since `now`; removed ones are dropped. `since` maps attribute → milliseconds.
pub fn update_since(since: &mut Map<String, Value>, before: &Map<String, Value>, after: &Map<String, Value>, now: i64) {
    for (k, v) in after {
        if before.get(k) != Some(v) {
            since.insert(k.clone(), now.into());
        }
    }
    since.retain(|k, _| after.contains_key(k));
}

/// The profile as it was at `t` (ms): each attribute's value then — a value set after `t` gives
/// way to the version it replaced, or goes if there was none; a value removed after `t` comes
/// back. Values with no known start (added with the profile, or before history was kept) count
/// as holding from the beginning. A profile type that keeps no history answers with what it has.
pub fn as_of(p: &crate::model::Profile, t: i64) -> crate::model::Profile {
    let mut attributes: Map<String, Value> = p
        .attributes
        .iter()
        .filter(|(k, _)| p.since.get(*k).and_then(Value::as_i64).is_none_or(|since| since <= t))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    // Oldest first: of two versions covering `t` (a start unknown), the later one is the value then.
    for h in p.history.iter().filter(|h| h.valid_from.is_none_or(|from| from <= t) && t < h.valid_to) {
        attributes.insert(h.attribute.clone(), h.value.clone());
    }
    let auto_content = p.content == describe(&p.attributes);
    let content = if auto_content || attributes != p.attributes { describe(&attributes) } else { p.content.clone() };
    let history = p.history.iter().filter(|h| h.valid_to <= t).cloned().collect();
    let since = p
        .since
        .iter()
        .filter(|(k, _)| attributes.get(*k) == p.attributes.get(*k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    crate::model::Profile { attributes, content, history, since, ..p.clone() }
}

/// An attribute's latest earlier value and when it ended, if the profile kept it.
pub fn previous(p: &crate::model::Profile, attribute: &str) -> Option<(Value, i64)> {
    p.history
        .iter()
        .filter(|h| h.attribute == attribute)
        .max_by_key(|h| h.valid_to)
        .map(|h| (h.value.clone(), h.valid_to))
}

/// A profile after one session's extracted changes: what to store and what it replaced.
pub struct SessionFold {
    pub id: String,
    pub before: Map<String, Value>,
    pub attributes: Map<String, Value>,
    pub source_sessions: Vec<String>,
    pub content: String,
    pub superseded: Vec<(String, Value)>,
}

/// Applies one session's `changes` to the user's existing profile of a type (or a new one).
/// `None` when an existing profile is left as it was.
pub fn fold_session(
    existing: Option<crate::model::Profile>,
    changes: &[ProfileChange],
    session_id: &str,
) -> Option<SessionFold> {
    let (id, mut attributes, mut source_sessions, created) = match existing {
        Some(p) => (p.id, p.attributes, p.source_session_ids, false),
        None => (crate::model::new_id("prf"), Map::new(), vec![], true),
    };
    let before = attributes.clone();
    let applied = apply_changes(&mut attributes, changes);
    if !applied.changed && !created {
        return None;
    }
    add_source(&mut source_sessions, session_id);
    let content = describe(&attributes);
    Some(SessionFold { id, before, attributes, source_sessions, content, superseded: applied.superseded })
}

/// The source sessions a profile remembers (newest last, at most 50).
pub fn add_source(sources: &mut Vec<String>, session_id: &str) {
    sources.push(session_id.to_string());
    if sources.len() > 50 {
        sources.drain(..sources.len() - 50);
    }
}

/// A one-line description of the attributes, used as `content` when no one wrote one.
pub fn describe(attributes: &Map<String, Value>) -> String {
    attributes
        .iter()
        .map(|(k, v)| match v {
            Value::String(s) => format!("{k}: {s}"),
            Value::Array(items) => format!(
                "{k}: {}",
                items
                    .iter()
                    .map(|i| i.as_str().map(str::to_string).unwrap_or_else(|| i.to_string()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            other => format!("{k}: {other}"),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(k: &str, v: Value) -> ProfileChange {
        ProfileChange::Set { key: k.into(), value: v }
    }

    #[test]
    fn set_overwrites_in_place() {
        let mut a = Map::new();
        assert_eq!(apply_changes(&mut a, &[set("city", json!("北京"))]), Applied { changed: true, superseded: vec![] });
        let moved = apply_changes(&mut a, &[set("city", json!("上海"))]);
        assert_eq!(Value::Object(a.clone()), json!({"city": "上海"}));
        assert_eq!(moved.superseded, vec![("city".to_string(), json!("北京"))], "the old value is reported");
        assert!(!apply_changes(&mut a, &[set("city", json!("上海"))]).changed, "same value is no change");
    }

    #[test]
    fn lists_stay_free_of_duplicates() {
        let mut a = Map::new();
        let add = |items: &[&str]| ProfileChange::Append {
            key: "likes".into(),
            items: items.iter().map(|s| s.to_string()).collect(),
        };
        apply_changes(&mut a, &[add(&["coffee", "tea"]), add(&["Coffee ", "jazz"])]);
        assert_eq!(Value::Object(a.clone()), json!({"likes": ["coffee", "tea", "jazz"]}));
        let r = apply_changes(&mut a, &[ProfileChange::RemoveItems { key: "likes".into(), items: vec!["TEA".into()] }]);
        assert_eq!(Value::Object(a.clone()), json!({"likes": ["coffee", "jazz"]}));
        assert_eq!(r.superseded, vec![("likes".to_string(), json!(["coffee", "tea", "jazz"]))], "the list it was");
        let r = apply_changes(&mut a, &[ProfileChange::Remove { key: "likes".into() }]);
        assert_eq!(r.superseded, vec![("likes".to_string(), json!(["coffee", "jazz"]))]);
        assert!(a.is_empty());
    }

    #[test]
    fn describe_is_readable() {
        let a = json!({"city": "上海", "likes": ["coffee", "jazz"]});
        assert_eq!(describe(a.as_object().unwrap()), "city: 上海; likes: coffee, jazz");
    }
}
