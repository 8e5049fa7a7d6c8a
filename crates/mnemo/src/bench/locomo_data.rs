//! The LoCoMo data set as the benches read it: conversations (sessions of turns with their
//! times) and questions with their evidence turns, one JSON object per line.

use anyhow::{Context, Result};
use serde::Deserialize;
use std::path::Path;

#[derive(Deserialize)]
pub(super) struct Conversation {
    pub(super) conversation_id: String,
    pub(super) user_id: String,
    pub(super) sessions: Vec<Session>,
}

#[derive(Deserialize)]
pub(super) struct Session {
    pub(super) session_id: String,
    pub(super) time: String,
    pub(super) messages: Vec<Turn>,
}

#[derive(Deserialize)]
pub(super) struct Turn {
    pub(super) role: String,
    pub(super) speaker: String,
    pub(super) content: String,
    pub(super) turn_id: String,
}

#[derive(Deserialize)]
pub(super) struct Question {
    pub(super) conversation_id: String,
    pub(super) question: String,
    pub(super) category: String,
    pub(super) evidence_turn_ids: Vec<String>,
    #[serde(default)]
    pub(super) answer: Option<String>,
    /// Asked as of this time (`YYYY-MM-DDTHH:MM:SS`, UTC): the reads answer with what was true
    /// then (`as_of`). The project's own sets have such questions; LoCoMo has none.
    #[serde(default)]
    pub(super) as_of: Option<String>,
    /// Words that must not be in the context: a value not yet (or no longer) true at `as_of`.
    #[serde(default)]
    pub(super) not_shown: Vec<String>,
}

impl Question {
    /// [`Question::as_of`] in milliseconds.
    pub(super) fn as_of_ms(&self) -> Result<Option<i64>> {
        self.as_of.as_deref().map(parse_time).transpose()
    }
}

pub(super) fn read_jsonl<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).context("parsing a line")).collect()
}

pub(super) fn parse_time(s: &str) -> Result<i64> {
    let t = chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S").with_context(|| format!("time {s:?}"))?;
    Ok(t.and_utc().timestamp_millis())
}
