//! End-user tokens: a key with a `user_id` acts for that user only. Before a request body is
//! read, every field that names a user is forced to the token's user (absent: filled in; another
//! user: 403), and a conversation the request names must be the user's own (or new). Endpoints
//! this cannot make safe are refused for such tokens (an allow-list: a new endpoint is refused
//! until it is listed here).

use serde_json::{Map, Value, json};

/// What the route handler's input becomes, or why the token may not make this call. `Ok` carries
/// the conversation whose owner must be checked, if the call names one.
pub fn confine(path: &str, body: &mut Map<String, Value>, user: &str) -> Result<Option<String>, String> {
    // VikingDB's session/add names its conversation `session_id`.
    let conversation = body
        .get("conversation_id")
        .or(if path == "/session/add" { body.get("session_id") } else { None })
        .and_then(Value::as_str)
        .map(String::from);
    match path {
        "/session/streaming_write" | "/session/add" => {
            let meta = object(body, "metadata")?;
            force_one(meta, "metadata.user_id", "user_id", user)?;
            if let Some(v) = meta.get("default_user_id")
                && v.as_str() != Some(user)
            {
                return Err(denied("metadata.default_user_id", user));
            }
            // A group chat's other speakers would own memories: not through a user's token.
            if let Some(Value::Array(msgs)) = body.get("messages") {
                for (i, m) in msgs.iter().enumerate() {
                    if m.get("role") == Some(&json!("user"))
                        && let Some(id) = m.get("role_id").filter(|v| !v.is_null())
                        && id.as_str() != Some(user)
                    {
                        return Err(denied(&format!("messages[{i}].role_id"), user));
                    }
                }
            }
            Ok(conversation.clone())
        }
        "/get_context" => {
            for section in ["event_search_config", "profile_search_config"] {
                let cfg = object(body, section)?;
                force_list(object(cfg, "filter")?, &format!("{section}.filter.user_id"), user)?;
            }
            Ok(conversation.clone())
        }
        "/event/search" | "/profile/search" | "/event/batch_delete" | "/search" | "/profile/batch_delete" => {
            force_list(object(body, "filter")?, "filter.user_id", user)?;
            Ok(None)
        }
        "/profile/trigger_update" => {
            force_list(object(body, "filters")?, "filters.user_id", user)?;
            Ok(None)
        }
        "/event/add" => {
            force_list(body, "user_id", user)?;
            Ok(None)
        }
        "/event/batch_add" => {
            if let Some(Value::Array(events)) = body.get_mut("events") {
                for (i, e) in events.iter_mut().enumerate() {
                    let e = e.as_object_mut().ok_or_else(|| format!("events[{i}]: must be an object"))?;
                    force_list(e, &format!("events[{i}].user_id"), user)?;
                }
            }
            Ok(None)
        }
        "/profile/add" | "/stats" | "/user/export" | "/user/forget" => {
            force_one(body, "user_id", "user_id", user)?;
            Ok(None)
        }
        "/session/info" | "/session/flush" | "/session/delete" => {
            if body.contains_key("session_id") {
                return Err("session_id: a token confined to a user looks sessions up by its conversation_id".into());
            }
            Ok(conversation.clone())
        }
        "/collection/list" | "/collection/info" => Ok(None),
        other => Err(format!(
            "Authorization: {other} is not available to a token confined to a user (it could reach other \
             users' data); use a project key"
        )),
    }
}

fn denied(field: &str, user: &str) -> String {
    format!("{field}: this token may only act for user \"{user}\"")
}

/// The object at `key` (created when absent).
fn object<'a>(m: &'a mut Map<String, Value>, key: &str) -> Result<&'a mut Map<String, Value>, String> {
    m.entry(key).or_insert_with(|| json!({})).as_object_mut().ok_or_else(|| format!("{key}: must be an object"))
}

/// A single-user field: absent → the user; the user → kept; anything else → refused.
fn force_one(m: &mut Map<String, Value>, path: &str, key: &str, user: &str) -> Result<(), String> {
    match m.get(key) {
        None | Some(Value::Null) => {
            m.insert(key.into(), json!(user));
            Ok(())
        }
        Some(Value::String(s)) if s == user => Ok(()),
        Some(_) => Err(denied(path, user)),
    }
}

/// A field that takes a user or a list of users: absent → the user; naming only the user → kept.
fn force_list(m: &mut Map<String, Value>, path: &str, user: &str) -> Result<(), String> {
    match m.get("user_id") {
        None | Some(Value::Null) => {
            m.insert("user_id".into(), json!(user));
            Ok(())
        }
        Some(Value::String(s)) if s == user => Ok(()),
        Some(Value::Array(a)) if !a.is_empty() && a.iter().all(|v| v.as_str() == Some(user)) => Ok(()),
        Some(_) => Err(denied(path, user)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(path: &str, v: Value) -> Result<Value, String> {
        let mut m = v.as_object().unwrap().clone();
        confine(path, &mut m, "alice").map(|_| Value::Object(m))
    }

    #[test]
    fn fields_naming_a_user_are_forced_or_refused() {
        let v = run("/event/search", json!({"collection_name": "c", "query": "x"})).unwrap();
        assert_eq!(v["filter"]["user_id"], "alice");
        assert!(run("/event/search", json!({"filter": {"user_id": ["alice", "bob"]}})).is_err());
        assert!(
            run("/event/search", json!({"filter": {"assistant_id": "a"}})).unwrap()["filter"]["user_id"] == "alice"
        );
        let v = run("/session/streaming_write", json!({"conversation_id": "c1", "messages": []})).unwrap();
        assert_eq!(v["metadata"]["user_id"], "alice");
        assert!(run("/session/add", json!({"metadata": {"user_id": "bob"}})).is_err());
        assert!(run("/session/add", json!({"metadata": {"default_user_id": "bob"}})).is_err());
        let group = json!({"messages": [{"role": "user", "content": "x", "role_id": "bob"}]});
        assert!(run("/session/add", group).is_err(), "another speaker would own memories");
        let own = json!({"messages": [{"role": "user", "content": "x", "role_id": "alice"}]});
        assert!(run("/session/add", own).is_ok());
        let v = run("/get_context", json!({"conversation_id": "c1"})).unwrap();
        assert_eq!(v["event_search_config"]["filter"]["user_id"], "alice");
        assert_eq!(v["profile_search_config"]["filter"]["user_id"], "alice");
        assert!(run("/user/forget", json!({"user_id": "bob"})).is_err());
        let v = run("/event/batch_add", json!({"events": [{"memory_info": {}}, {"user_id": "alice"}]})).unwrap();
        assert_eq!((&v["events"][0]["user_id"], &v["events"][1]["user_id"]), (&json!("alice"), &json!("alice")));
        assert!(run("/event/batch_add", json!({"events": [{"user_id": "alice"}, {"user_id": ["bob"]}]})).is_err());
        assert!(run("/event/batch_add", json!({"events": ["x"]})).is_err());
        for refused in ["/event/delete", "/event/update", "/profile/update", "/collection/delete", "/job/list"] {
            assert!(run(refused, json!({})).is_err(), "{refused}");
        }
        assert!(run("/session/info", json!({"session_id": "s"})).is_err());
    }
}
