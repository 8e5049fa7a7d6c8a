//! Chat-history exports → the benchmark JSONL shape `mnemo import` writes: ChatGPT's
//! `conversations.json` (each conversation a `mapping` tree of nodes; the conversation as shown is
//! the path from the root to `current_node`, other branches are edits and regenerations that were
//! abandoned) and Claude's (`chat_messages` in order). Only user and assistant turns with text are
//! kept; attachments and images are named (`[attachment: …]`, `[image: …]`), never fetched. Every
//! message gets an idempotency key from its export id, so a re-run stores nothing twice.

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

pub struct Conversation {
    pub id: String,
    pub title: String,
    pub source: &'static str,
    pub messages: Vec<Message>,
}

pub struct Message {
    pub role: &'static str,
    pub content: String,
    pub time: Option<i64>,
    pub key: String,
}

impl Conversation {
    /// The JSONL line `mnemo import` writes: one conversation, one session.
    pub fn into_line(self, user: &str) -> Value {
        let messages: Vec<Value> = self
            .messages
            .into_iter()
            .map(|m| json!({"role": m.role, "content": m.content, "time": m.time, "key": m.key}))
            .collect();
        json!({
            "conversation_id": format!("{}-{}", self.source, self.id),
            "user_id": user,
            "metadata": {"title": self.title, "source": self.source},
            "sessions": [{"session_id": "export", "messages": messages}],
        })
    }
}

/// Seconds (ChatGPT's floats) or an RFC 3339 string (Claude's) → milliseconds.
fn millis(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_f64().map(|s| (s * 1000.0) as i64),
        Value::String(s) => chrono::DateTime::parse_from_rfc3339(s).ok().map(|t| t.timestamp_millis()),
        _ => None,
    }
}

fn list(v: &Value, what: &str) -> Result<Vec<Value>> {
    match v {
        Value::Array(a) => Ok(a.clone()),
        _ => bail!("{what}: expected a JSON array of conversations"),
    }
}

/// ChatGPT's export.
pub fn chatgpt(v: &Value) -> Result<Vec<Conversation>> {
    let mut out = Vec::new();
    for (i, c) in list(v, "conversations.json")?.iter().enumerate() {
        let id =
            c["conversation_id"].as_str().or(c["id"].as_str()).map(str::to_string).unwrap_or_else(|| i.to_string());
        let mapping = c["mapping"].as_object().with_context(|| format!("conversation {id}: no mapping"))?;
        // The conversation as shown: from current_node up to the root, reversed.
        let mut path = Vec::new();
        let mut node = c["current_node"].as_str().map(str::to_string).or_else(|| {
            // No current node (older exports): the last leaf.
            mapping
                .iter()
                .filter(|(_, n)| n["children"].as_array().is_none_or(|ch| ch.is_empty()))
                .map(|(k, _)| k.clone())
                .next_back()
        });
        let mut seen = std::collections::HashSet::new();
        while let Some(n) = node {
            if !seen.insert(n.clone()) {
                bail!("conversation {id}: the mapping has a cycle at {n}");
            }
            let Some(entry) = mapping.get(&n) else { break };
            path.push(entry.clone());
            node = entry["parent"].as_str().map(str::to_string);
        }
        path.reverse();
        let mut messages = Vec::new();
        for entry in &path {
            let m = &entry["message"];
            let role = match m["author"]["role"].as_str() {
                Some("user") => "user",
                Some("assistant") => "assistant",
                _ => continue, // system, tool and empty nodes
            };
            if m["metadata"]["is_visually_hidden_from_conversation"] == json!(true) {
                continue;
            }
            let content = &m["content"];
            let mut text: Vec<String> = match content["content_type"].as_str() {
                Some("text" | "multimodal_text") => content["parts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|p| match p {
                        Value::String(s) => Some(s.clone()),
                        Value::Object(o) => o
                            .get("asset_pointer")
                            .and_then(Value::as_str)
                            .map(|a| format!("[image: {a}]"))
                            .or_else(|| o.get("text").and_then(Value::as_str).map(str::to_string)),
                        _ => None,
                    })
                    .collect(),
                Some("code") => content["text"].as_str().map(|t| vec![t.to_string()]).unwrap_or_default(),
                _ => vec![], // user_editable_context (custom instructions), browsing output, …
            };
            for a in m["metadata"]["attachments"].as_array().into_iter().flatten() {
                if let Some(name) = a["name"].as_str() {
                    text.push(format!("[attachment: {name}]"));
                }
            }
            let content = text.join("\n").trim().to_string();
            if content.is_empty() {
                continue;
            }
            let key = m["id"].as_str().or(entry["id"].as_str()).unwrap_or_default();
            messages.push(Message {
                role,
                content,
                time: millis(&m["create_time"]).or_else(|| millis(&c["create_time"])),
                key: format!("chatgpt:{id}:{key}"),
            });
        }
        if !messages.is_empty() {
            out.push(Conversation {
                id,
                title: c["title"].as_str().unwrap_or_default().to_string(),
                source: "chatgpt",
                messages,
            });
        }
    }
    Ok(out)
}

/// Claude's export.
pub fn claude(v: &Value) -> Result<Vec<Conversation>> {
    let mut out = Vec::new();
    for (i, c) in list(v, "conversations.json")?.iter().enumerate() {
        let id = c["uuid"].as_str().map(str::to_string).unwrap_or_else(|| i.to_string());
        let mut messages = Vec::new();
        for (j, m) in c["chat_messages"].as_array().into_iter().flatten().enumerate() {
            let role = match m["sender"].as_str() {
                Some("human") => "user",
                Some("assistant") => "assistant",
                _ => continue,
            };
            let mut text: Vec<String> = match m["content"].as_array() {
                Some(parts) if !parts.is_empty() => parts
                    .iter()
                    .filter(|p| p["type"] == "text")
                    .filter_map(|p| p["text"].as_str().map(str::to_string))
                    .collect(),
                _ => m["text"].as_str().map(|t| vec![t.to_string()]).unwrap_or_default(),
            };
            for a in m["attachments"].as_array().into_iter().chain(m["files"].as_array()).flatten() {
                if let Some(name) = a["file_name"].as_str().filter(|n| !n.is_empty()) {
                    text.push(format!("[attachment: {name}]"));
                }
            }
            let content = text.join("\n").trim().to_string();
            if content.is_empty() {
                continue;
            }
            let key = m["uuid"].as_str().map_or_else(|| j.to_string(), str::to_string);
            messages.push(Message {
                role,
                content,
                time: millis(&m["created_at"]).or_else(|| millis(&c["created_at"])),
                key: format!("claude:{id}:{key}"),
            });
        }
        if !messages.is_empty() {
            out.push(Conversation {
                id,
                title: c["name"].as_str().unwrap_or_default().to_string(),
                source: "claude",
                messages,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Value {
        let path = format!("{}/tests/fixtures/exports/{name}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn chatgpt_follows_the_branch_to_the_current_node_and_names_attachments() {
        let convs = chatgpt(&fixture("chatgpt-conversations.json")).unwrap();
        assert_eq!(convs.len(), 2, "the conversation with only a system node is left out");
        let c = &convs[0];
        let said: Vec<(&str, &str)> = c.messages.iter().map(|m| (m.role, m.content.as_str())).collect();
        assert_eq!(
            said,
            vec![
                ("user", "I'm planning a trip to Kyoto in April."),
                // The regenerated answer (the branch current_node is on), not the abandoned one.
                ("assistant", "April is cherry blossom season: book early."),
                ("user", "Here is my itinerary\n[attachment: itinerary.pdf]"),
                ("assistant", "Looks good."),
            ]
        );
        assert_eq!(c.messages[0].time, Some(1_714_000_000_000));
        assert_eq!(c.messages[0].key, "chatgpt:c1:m1");
        assert_eq!(convs[1].messages[0].content, "[image: file-service://file-abc]\nWhat is this plant?");
    }

    #[test]
    fn claude_keeps_turn_order_text_parts_and_file_names() {
        let convs = claude(&fixture("claude-conversations.json")).unwrap();
        assert_eq!(convs.len(), 1, "an empty conversation is left out");
        let said: Vec<(&str, &str)> = convs[0].messages.iter().map(|m| (m.role, m.content.as_str())).collect();
        assert_eq!(
            said,
            vec![
                ("user", "I adopted a cat named Miso.\n[attachment: miso.jpg]"),
                ("assistant", "Congratulations on adopting Miso!"),
            ]
        );
        assert_eq!(convs[0].messages[1].time, Some(1_714_006_800_000));
    }
}
