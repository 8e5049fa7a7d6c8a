//! The LoCoMo data set as the benches read it: conversations (sessions of turns with their
//! times) and questions with their evidence turns, one JSON object per line.

use anyhow::{Context, Result};
use serde::Deserialize;
use std::path::Path;

#[derive(Deserialize, Clone)]
pub(super) struct Conversation {
    pub(super) conversation_id: String,
    pub(super) user_id: String,
    pub(super) sessions: Vec<Session>,
}

#[derive(Deserialize, Clone)]
pub(super) struct Session {
    pub(super) session_id: String,
    pub(super) time: String,
    pub(super) messages: Vec<Turn>,
}

#[derive(Deserialize, Clone)]
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

/// `--haystack DIR`: each conversation of the set also holds the sessions of other conversations
/// (DIR's, dealt out in turn; when DIR has fewer, they are dealt out again), spoken by its own
/// user and assistant — what a long-lived user's memory holds beside the few sessions a question
/// is about (LongMemEval's haystacks). A distractor session keeps its place in its own
/// conversation's time line, stretched onto the set's conversation's first to last session, and
/// sessions are written in time order. Its turns' ids start with `hay:`, so they are never
/// evidence; its text is unchanged (other people's names, other facts).
pub(super) fn with_haystack(set: Vec<Conversation>, hay: &[Conversation]) -> Result<Vec<Conversation>> {
    let mut set = set;
    if set.is_empty() {
        return Ok(set);
    }
    let n = set.len();
    if hay.len() >= n {
        for (j, h) in hay.iter().enumerate() {
            add_haystack(&mut set[j % n], h)?;
        }
    } else if !hay.is_empty() {
        for (i, c) in set.iter_mut().enumerate() {
            add_haystack(c, &hay[i % hay.len()])?;
        }
    }
    for c in &mut set {
        let mut timed: Vec<(i64, Session)> =
            c.sessions.drain(..).map(|s| Ok((parse_time(&s.time)?, s))).collect::<Result<_>>()?;
        timed.sort_by_key(|(t, _)| *t);
        c.sessions = timed.into_iter().map(|(_, s)| s).collect();
    }
    Ok(set)
}

fn add_haystack(c: &mut Conversation, h: &Conversation) -> Result<()> {
    let speaker =
        |role: &str| c.sessions.iter().flat_map(|s| &s.messages).find(|m| m.role == role).map(|m| m.speaker.clone());
    let (user, assistant) =
        (speaker("user").unwrap_or("User".into()), speaker("assistant").unwrap_or("Assistant".into()));
    let span = |sessions: &[Session]| -> Result<(i64, i64)> {
        let times: Vec<i64> = sessions.iter().map(|s| parse_time(&s.time)).collect::<Result<_>>()?;
        Ok((times.iter().copied().min().unwrap_or(0), times.iter().copied().max().unwrap_or(0)))
    };
    let ((from, to), (h_from, h_to)) = (span(&c.sessions)?, span(&h.sessions)?);
    for s in &h.sessions {
        let t = parse_time(&s.time)?;
        let at = match h_to > h_from {
            true => from + ((t - h_from) as f64 / (h_to - h_from) as f64 * (to - from) as f64) as i64,
            false => from,
        };
        let time = chrono::DateTime::from_timestamp_millis(at).context("a haystack session's time")?;
        c.sessions.push(Session {
            session_id: format!("hay-{}-{}", h.conversation_id, s.session_id),
            time: time.naive_utc().format("%Y-%m-%dT%H:%M:%S").to_string(),
            messages: s
                .messages
                .iter()
                .map(|m| Turn {
                    role: m.role.clone(),
                    speaker: if m.role == "user" { user.clone() } else { assistant.clone() },
                    content: m.content.clone(),
                    turn_id: format!("hay:{}:{}", h.conversation_id, m.turn_id),
                })
                .collect(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(id: &str, speakers: (&str, &str), times: &[&str]) -> Conversation {
        let sessions = times
            .iter()
            .enumerate()
            .map(|(i, t)| Session {
                session_id: format!("session_{}", i + 1),
                time: t.to_string(),
                messages: [("user", speakers.0), ("assistant", speakers.1)]
                    .iter()
                    .enumerate()
                    .map(|(j, (role, speaker))| Turn {
                        role: role.to_string(),
                        speaker: speaker.to_string(),
                        content: format!("{speaker} in {id} session {}", i + 1),
                        turn_id: format!("D{}:{}", i + 1, j + 1),
                    })
                    .collect(),
            })
            .collect();
        Conversation { conversation_id: id.into(), user_id: format!("u-{id}"), sessions }
    }

    #[test]
    fn a_haystack_is_dealt_out_spoken_by_the_user_and_stretched_onto_its_time_line() {
        let set = vec![
            conv("maya", ("Maya", "Assistant"), &["2024-01-01T10:00:00", "2024-01-11T10:00:00"]),
            conv("sam", ("Sam", "Assistant"), &["2024-03-01T10:00:00", "2024-03-05T10:00:00"]),
        ];
        let hay = [
            conv("a", ("Caroline", "Melanie"), &["2023-05-01T00:00:00", "2023-05-03T00:00:00", "2023-05-11T00:00:00"]),
            conv("b", ("Jon", "Gina"), &["2022-01-01T00:00:00"]),
            conv("c", ("Tim", "John"), &["2021-01-01T00:00:00"]),
        ];
        let out = with_haystack(set, &hay).unwrap();
        let ids = |c: &Conversation| c.sessions.iter().map(|s| s.session_id.clone()).collect::<Vec<_>>();
        // "a" and "c" go to the first conversation, "b" to the second; sessions in time order.
        assert_eq!(
            ids(&out[0]),
            ["session_1", "hay-a-session_1", "hay-c-session_1", "hay-a-session_2", "session_2", "hay-a-session_3"]
        );
        assert_eq!(ids(&out[1]), ["session_1", "hay-b-session_1", "session_2"]);
        // Stretched: a's 10 days onto maya's 10, one session alone at the start.
        let time = |c: &Conversation, id: &str| c.sessions.iter().find(|s| s.session_id == id).unwrap().time.clone();
        assert_eq!(time(&out[0], "hay-a-session_2"), "2024-01-03T10:00:00");
        assert_eq!(time(&out[0], "hay-a-session_3"), "2024-01-11T10:00:00");
        assert_eq!(time(&out[1], "hay-b-session_1"), "2024-03-01T10:00:00");
        // Spoken by the conversation's own user and assistant; never evidence; text unchanged.
        let s = out[0].sessions.iter().find(|s| s.session_id == "hay-a-session_1").unwrap();
        let spoken: Vec<(&str, &str, &str)> =
            s.messages.iter().map(|m| (m.role.as_str(), m.speaker.as_str(), m.turn_id.as_str())).collect();
        assert_eq!(spoken, [("user", "Maya", "hay:a:D1:1"), ("assistant", "Assistant", "hay:a:D1:2")]);
        assert_eq!(s.messages[0].content, "Caroline in a session 1");
        // Fewer distractors than conversations: dealt out again.
        let set =
            vec![conv("x", ("X", "A"), &["2024-01-01T00:00:00"]), conv("y", ("Y", "A"), &["2024-01-01T00:00:00"])];
        let out = with_haystack(set, &hay[1..2]).unwrap();
        assert!(out.iter().all(|c| c.sessions.iter().any(|s| s.session_id == "hay-b-session_1")));
    }
}
