//! The `rules` extractor: offline, deterministic, no model — an honest baseline.
//!
//! 1. **Clean** (seed 002 §2.1): `system`/`tool` messages, tool-call markup and bare
//!    acknowledgements ("好的", "thanks") are left out.
//! 2. **Chunk** by topic: user turns open exchanges; exchanges join a chunk until it would pass
//!    `max_chunk_chars`, or until it has `min_chunk_chars` and the next exchange shares almost no
//!    vocabulary with it (a topic shift).
//! 3. **One event per chunk** (`event_v1`): the chunk's turns as "who: what" (speaker names kept,
//!    a long turn cut to half the room), at most `summary_chars` (600) characters;
//!    `original_messages` and the source message ids as provenance; the time of its first message.
//! 4. **Profile** from first-person statements of the user in Chinese and English (我叫/我是/我住在/
//!    我家宝宝…/我喜欢/我不喜欢…, "my name is", "I live in", "I like", "I don't like", "I prefer"…),
//!    as set / append / remove changes that the store applies in place. An English value must be
//!    about the user: "I love your turtles", "I love it when you cook", "I love the idea", "I'm a
//!    huge fan of it" are reactions to the other side, not profile (`about_the_user`).
//!
//! What it cannot do: understand paraphrase, resolve "it"/"that", merge facts across sessions, or
//! judge importance. The `llm` extractor does those.

use async_trait::async_trait;
use mnemo_core::extract::{ExtractError, ExtractedEvent, ExtractionInput, ExtractionOutput, Extractor};
use mnemo_core::model::{EVENT_V1, Role, StoredMessage};
use mnemo_core::text::{asks, is_han};
use regex::Regex;
use serde_json::{Map, Value};
use std::collections::HashSet;
use std::sync::LazyLock;

mod profile;
pub use profile::profile_changes;

#[derive(Clone, Debug)]
pub struct RulesConfig {
    pub ignore_system: bool,
    pub ignore_tools: bool,
    pub min_chunk_chars: usize,
    pub max_chunk_chars: usize,
    pub summary_chars: usize,
}

impl Default for RulesConfig {
    fn default() -> Self {
        Self { ignore_system: true, ignore_tools: true, min_chunk_chars: 200, max_chunk_chars: 500, summary_chars: 600 }
    }
}

pub struct RulesExtractor {
    config: RulesConfig,
}

impl RulesExtractor {
    pub fn new(config: RulesConfig) -> Self {
        Self { config }
    }
}

#[async_trait]
impl Extractor for RulesExtractor {
    fn name(&self) -> &str {
        "rules"
    }

    async fn extract(&self, input: ExtractionInput) -> Result<ExtractionOutput, ExtractError> {
        Ok(self.extract_now(&input))
    }
}

impl RulesExtractor {
    /// The synchronous core of [`Extractor::extract`].
    pub fn extract_now(&self, input: &ExtractionInput) -> ExtractionOutput {
        let cleaned = clean(&input.messages, &self.config);
        let chunks = chunk(&cleaned, &self.config);
        let events = chunks
            .iter()
            .filter_map(|c| {
                let summary = summarize(c, self.config.summary_chars)?;
                let mut info = Map::new();
                info.insert("summary".into(), Value::String(summary));
                info.insert("original_messages".into(), Value::String(original_messages(c)));
                let mut event = ExtractedEvent::new(EVENT_V1, info, c[0].time);
                event.source_message_ids = c.iter().map(|m| m.message_id).collect();
                Some(event)
            })
            .collect();
        let profile_changes =
            profile_changes(cleaned.iter().filter(|m| m.role == Role::User).map(|m| m.content.as_str()));
        ExtractionOutput { events, profile_changes, ..Default::default() }
    }
}

// --------------------------------------------------------------------------------- cleaning

static TOOL_MARKUP: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?s)<(tool_call|tool_result|tool_use|function_call|function_result|system-reminder)\b[^>]*>.*?</(tool_call|tool_result|tool_use|function_call|function_result|system-reminder)>").unwrap()
});
static TOPIC_CUE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^\s*(另外|还有个问题|还有一个问题|换个话题|顺便问一下|顺便说一下|对了|by the way|btw|another question|on another note|changing the subject|unrelated)").unwrap()
});
static ACK_ONLY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^\s*(好的|好|嗯+|哦+|谢谢|谢谢你|多谢|收到|明白了?|ok(ay)?|thanks?( you)?|thx|got it|sure|yes|no|yep|nope|cool|great)[\s。！!.~，,]*$").unwrap()
});

/// A message kept for extraction, with its text cleaned.
#[derive(Clone, Debug)]
pub(crate) struct Clean<'a> {
    pub message_id: i64,
    pub role: Role,
    pub name: Option<&'a str>,
    pub time: i64,
    pub content: String,
}

pub(crate) fn clean<'a>(messages: &'a [StoredMessage], cfg: &RulesConfig) -> Vec<Clean<'a>> {
    messages
        .iter()
        .filter(|m| {
            let skip = (cfg.ignore_system && m.role == Role::System) || (cfg.ignore_tools && m.role == Role::Tool);
            !skip
        })
        .filter_map(|m| {
            let text = if cfg.ignore_tools {
                TOOL_MARKUP.replace_all(&m.content, " ").into_owned()
            } else {
                m.content.clone()
            };
            let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            if text.is_empty() || ACK_ONLY.is_match(&text) || looks_like_tool_json(&text) {
                return None;
            }
            Some(Clean { message_id: m.message_id, role: m.role, name: m.name.as_deref(), time: m.time, content: text })
        })
        .collect()
}

fn looks_like_tool_json(text: &str) -> bool {
    let t = text.trim();
    t.starts_with('{')
        && t.ends_with('}')
        && ["\"tool_calls\"", "\"function_call\"", "\"tool_use\"", "\"tool_call_id\""].iter().any(|k| t.contains(k))
}

// --------------------------------------------------------------------------------- chunking

fn chunk<'a, 'b>(messages: &'b [Clean<'a>], cfg: &RulesConfig) -> Vec<Vec<Clean<'a>>> {
    // Exchanges: a user turn and the turns that answer it (a leading assistant turn stands alone).
    let mut exchanges: Vec<Vec<Clean<'a>>> = Vec::new();
    for m in messages {
        match exchanges.last_mut() {
            Some(ex) if m.role != Role::User => ex.push(m.clone()),
            _ => exchanges.push(vec![m.clone()]),
        }
    }
    let len = |msgs: &[Clean]| msgs.iter().map(|m| m.content.chars().count()).sum::<usize>();
    let mut chunks: Vec<Vec<Clean<'a>>> = Vec::new();
    let mut current: Vec<Clean<'a>> = Vec::new();
    for ex in exchanges {
        let (cur_len, ex_len) = (len(&current), len(&ex));
        // A topic shift splits once the chunk holds a whole exchange: an explicit cue ("另外",
        // "by the way") or almost no shared vocabulary. Chunks stay small rather than mixed.
        let whole_exchange = current.len() >= 2 || cur_len >= cfg.min_chunk_chars;
        let shift = whole_exchange && (TOPIC_CUE.is_match(&ex[0].content) || overlap(&current, &ex) < 0.08);
        if !current.is_empty() && (cur_len + ex_len > cfg.max_chunk_chars || shift) {
            // A turn that asks and the turn that answers it stay together: the question names
            // what the answer is about ("What inspired you to join it?" — "I've always had a
            // great respect for our military"), so the split moves one turn earlier.
            let carried = match current.last() {
                Some(last) if current.len() > 1 && asks(&last.content) => current.pop(),
                _ => None,
            };
            chunks.push(std::mem::take(&mut current));
            current.extend(carried);
        }
        current.extend(ex);
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    chunks
}

/// Vocabulary of a text: lowercase latin words and CJK character bigrams.
fn vocabulary(text: &str) -> HashSet<String> {
    let mut out = HashSet::new();
    let mut word = String::new();
    let mut prev_cjk: Option<char> = None;
    for c in text.chars() {
        if is_han(c) {
            if let Some(p) = prev_cjk {
                out.insert(format!("{p}{c}"));
            }
            prev_cjk = Some(c);
        } else {
            prev_cjk = None;
        }
        if c.is_alphanumeric() && !is_han(c) {
            word.extend(c.to_lowercase());
        } else if !word.is_empty() {
            if word.chars().count() > 2 && !STOPWORDS.contains(&word.as_str()) {
                out.insert(std::mem::take(&mut word));
            }
            word.clear();
        }
    }
    if word.chars().count() > 2 && !STOPWORDS.contains(&word.as_str()) {
        out.insert(word);
    }
    out
}

/// Function words that say nothing about a topic.
const STOPWORDS: &[&str] = &[
    "the", "and", "for", "with", "from", "our", "you", "your", "has", "have", "had", "been", "was", "were", "are",
    "this", "that", "these", "those", "get", "got", "into", "about", "what", "when", "where", "which", "who", "how",
    "but", "not", "can", "will", "would", "should", "could", "all", "any", "some", "just", "also", "very", "too",
    "there", "their", "they", "them", "then", "than", "its", "it's", "i'm", "don't", "yes", "yeah", "okay", "really",
    "try", "trying", "use", "make", "more", "most", "much", "many", "one", "two", "out", "over", "during",
];

/// The share of the smaller vocabulary that the other one also has.
fn overlap(a: &[Clean], b: &[Clean]) -> f64 {
    let va = vocabulary(&a.iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join(" "));
    let vb = vocabulary(&b.iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join(" "));
    let smaller = va.len().min(vb.len());
    if smaller == 0 {
        return 1.0; // nothing to compare: keep together
    }
    va.intersection(&vb).count() as f64 / smaller as f64
}

fn mostly_chinese(text: &str) -> bool {
    let (cjk, letters) = text.chars().fold((0, 0), |(c, l), ch| {
        if is_han(ch) {
            (c + 1, l)
        } else if ch.is_alphabetic() {
            (c, l + 1)
        } else {
            (c, l)
        }
    });
    // One Chinese character carries about as much as a short English word.
    cjk * 4 >= letters && cjk > 0
}

// --------------------------------------------------------------------------------- summaries

/// The event's text: every turn of the chunk as "who: what", in order. Names are kept (questions
/// ask about people: "what did Caroline…"), nothing is paraphrased, and what a question may ask
/// about — names, dates, objects — stays in the text that is shown, embedded and indexed. A long
/// turn keeps its first half of `max_chars`; the whole stays within `max_chars`.
fn summarize(chunk: &[Clean], max_chars: usize) -> Option<String> {
    let all = chunk.iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join(" ");
    let zh = mostly_chinese(&all);
    let (user_label, other_label, colon) = if zh { ("用户", "助手", "：") } else { ("User", "Assistant", ": ") };
    let per_turn = (max_chars / 2).max(80);
    let s = chunk
        .iter()
        .map(|m| {
            let who = match m.name.filter(|n| !n.trim().is_empty()) {
                Some(n) => n,
                None if m.role == Role::User => user_label,
                None => other_label,
            };
            format!("{who}{colon}{}", truncate_chars(&m.content, per_turn))
        })
        .collect::<Vec<_>>()
        .join(" ");
    if s.trim().is_empty() {
        return None;
    }
    Some(truncate_chars(&s, max_chars))
}

pub(crate) fn truncate_chars(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

pub(crate) fn original_messages(chunk: &[Clean]) -> String {
    chunk
        .iter()
        .map(|m| mnemo_core::model::original_message_line(m.name, m.role, &m.content))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::profile::{about_the_user, clean_value};
    use super::*;
    use mnemo_core::extract::ProfileChange;
    use mnemo_core::model::{CollectionSchema, ConversationMeta};
    use serde_json::json;

    fn m(id: i64, role: Role, content: &str) -> StoredMessage {
        StoredMessage {
            message_id: id,
            conversation_id: "c".into(),
            session_id: Some("s".into()),
            role,
            name: None,
            content: content.into(),
            time: 1_000 + id,
            tokens: 1,
        }
    }

    fn run(messages: Vec<StoredMessage>) -> ExtractionOutput {
        RulesExtractor::new(RulesConfig::default()).extract_now(&ExtractionInput {
            schema: CollectionSchema::default(),
            session_id: "s".into(),
            meta: ConversationMeta::default(),
            messages,
            profiles: vec![],
            related_events: vec![],
            now: 0,
        })
    }

    fn apply(changes: &[ProfileChange]) -> Value {
        let mut attrs = Map::new();
        mnemo_core::profile::apply_changes(&mut attrs, changes);
        Value::Object(attrs)
    }

    #[test]
    fn chinese_conversation_gives_events_and_profile() {
        let out = run(vec![
            m(1, Role::System, "你是一个育儿助手"),
            m(2, Role::User, "我家宝宝1岁，最近喝奶粉总胀气，有没有推荐的？我住在上海。"),
            m(
                3,
                Role::Assistant,
                "您好，宝宝胀气大概率和奶粉乳糖含量有关，建议优先选择无乳糖配方奶粉。我给您推荐2款高性价比的~",
            ),
            m(4, Role::Tool, "{\"result\": \"search ok\"}"),
            m(5, Role::User, "好的"),
            m(6, Role::User, "我喜欢性价比高的，我不喜欢进口的太贵的。"),
        ]);
        assert_eq!(out.events.len(), 1, "{:#?}", out.events);
        let e = &out.events[0];
        let summary = e.memory_info["summary"].as_str().unwrap();
        assert!(summary.starts_with("用户：我家宝宝1岁"), "{summary}");
        assert!(summary.chars().count() <= 200);
        assert_eq!(e.source_message_ids, vec![2, 3, 6], "system, tool and bare acks are cleaned out");
        assert!(!e.memory_info["original_messages"].as_str().unwrap().contains("育儿助手"));
        assert_eq!(
            apply(&out.profile_changes),
            json!({"child_age": "1岁", "city": "上海", "likes": ["性价比高"], "dislikes": ["进口的太贵"]})
        );
    }

    #[test]
    fn english_conversation_gives_profile_and_later_statements_win() {
        let out = run(vec![
            m(1, Role::User, "Hi, my name is Alice and I live in Berlin. I love pour-over coffee."),
            m(2, Role::Assistant, "Nice to meet you, Alice! Berlin has great cafés."),
            m(3, Role::User, "Actually I don't like pour-over coffee anymore, I prefer espresso. I'm 34 years old."),
        ]);
        assert_eq!(
            apply(&out.profile_changes),
            json!({"name": "Alice", "city": "Berlin", "dislikes": ["pour-over coffee"], "prefers": ["espresso"], "age": "34"})
        );
        assert_eq!(out.events.len(), 1);
        assert!(out.events[0].memory_info["summary"].as_str().unwrap().starts_with("User: Hi, my name is Alice"));
    }

    #[test]
    fn a_change_replaces_or_ends_the_earlier_value() {
        let said = |texts: &[&str]| {
            let msgs = texts.iter().enumerate().map(|(i, t)| m(i as i64 + 1, Role::User, t)).collect();
            apply(&run(msgs).profile_changes)
        };
        assert_eq!(
            said(&[
                "I live in Berlin and I work at Siemens. My boyfriend Tom cooks.",
                "Big news: I've just moved to Munich last month! I quit my job, and I started working at BMW.",
                "We broke up last week. I adopted a puppy named Max.",
            ]),
            json!({"city": "Munich", "workplace": "BMW", "pets": ["puppy named Max"]})
        );
        assert_eq!(
            said(&[
                "我住在北京，我在百度工作",
                "我们搬到了杭州，我跳槽到阿里巴巴了",
                "我男朋友叫小李",
                "我们分手了。我领养了一只橘猫"
            ]),
            json!({"city": "杭州", "workplace": "阿里巴巴", "pets": ["橘猫"]})
        );
        // No change without one: a lowercase place is no city, leaving a job is not always "quit".
        assert_eq!(said(&["I moved to a new flat", "I left my keys at work"]), json!({}));
        assert_eq!(said(&["I retired last year"]), json!({}), "nothing to end: no workplace was known");
    }

    #[test]
    fn reactions_to_the_other_side_are_not_the_users_profile() {
        // Said in LoCoMo-style chat: praise for the other speaker, reactions to what was just
        // said, and "fan of it" are not facts about the user; the statements about the user are.
        let out = run(vec![
            m(1, Role::User, "I love your turtles! I love it when you make coconut milk ice cream."),
            m(2, Role::User, "I love that you chose pottery. I love the idea, Nate. I'm a huge fan of it!"),
            m(3, Role::User, "I'm a part of it. I love how they take me to other places."),
            m(4, Role::User, "I love hiking and I'm an expert hiker. I love my kids. I'm a huge fan!"),
        ]);
        assert_eq!(apply(&out.profile_changes), json!({"likes": ["hiking", "my kids"], "identity": ["expert hiker"]}));
        for (key, value) in [("likes", "the color"), ("likes", "colors"), ("prefers", "yours")] {
            assert!(!about_the_user(key, clean_value(value).unwrap().as_str()), "{key}: {value}");
        }
        for (key, value) in [
            ("likes", "coffee"),
            ("identity", "nurse"),
            ("city", "Berlin"),
            ("likes", "爬山"),
            ("occupation", "IT consultant"),
            ("likes", "It's Always Sunny"),
        ] {
            assert!(about_the_user(key, value), "{key}: {value}");
        }
    }

    #[test]
    fn a_chinese_subject_shared_across_a_comma_still_counts() {
        let out = run(vec![
            m(1, Role::User, "我住在上海，对花生过敏"),
            m(2, Role::User, "我今年35岁，很喜欢爬山。我老公不吃辣，对海鲜过敏。"),
        ]);
        assert_eq!(
            apply(&out.profile_changes),
            json!({"city": "上海", "allergies": ["花生"], "age": "35岁", "likes": ["爬山"]})
        );
    }

    #[test]
    fn a_subject_shared_across_and_still_counts() {
        let out = run(vec![
            m(1, Role::User, "I live in Lisbon and work as a nurse. My brother lives in Porto and works as a chef."),
            m(2, Role::User, "I moved, and now work for Siemens."),
        ]);
        assert_eq!(
            apply(&out.profile_changes),
            json!({"city": "Lisbon", "occupation": "nurse", "workplace": "Siemens"})
        );
    }

    #[test]
    fn topic_shift_and_length_split_chunks() {
        let coffee = "I have been trying different pour-over coffee recipes with a V60 dripper, adjusting grind size, water temperature and bloom time to get a sweeter cup from light roasted Ethiopian beans.";
        let db = "Separately, our production PostgreSQL database keeps timing out on the billing report query; the connection pool is exhausted during the nightly batch and the index on invoices is missing.";
        let out = run(vec![
            m(1, Role::User, coffee),
            m(2, Role::Assistant, "Try a finer grind and 93 degree water for light roasts."),
            m(3, Role::User, db),
            m(4, Role::Assistant, "Add the index and raise the pool size for the batch window."),
        ]);
        assert_eq!(
            out.events.len(),
            2,
            "{:#?}",
            out.events.iter().map(|e| &e.memory_info["summary"]).collect::<Vec<_>>()
        );
        assert_eq!(out.events[1].source_message_ids, vec![3, 4]);
        assert_eq!(out.events[1].time, 1_003);
    }

    #[test]
    fn a_question_stays_with_its_answer() {
        let long = "We walked the whole ridge trail on Saturday, past the lake and the old fire tower, and the kids kept going the entire way without complaining once, which surprised everyone.";
        let out = run(vec![
            m(1, Role::User, long),
            m(2, Role::Assistant, "That sounds wonderful, what a day for the whole family."),
            m(3, Role::User, long),
            m(4, Role::Assistant, "Wow, John! What inspired you to join the march? [image: a crowd with flags]"),
            m(5, Role::User, "I've always had great respect for the military and wanted to show my support."),
        ]);
        let ids: Vec<_> = out.events.iter().map(|e| e.source_message_ids.clone()).collect();
        assert_eq!(ids, vec![vec![1, 2, 3], vec![4, 5]], "the split moves before the question");
        assert!(asks("Is it?") && asks("好吗？") && asks("Really? [image: a dog]"));
        assert!(!asks("Why? Because I said so.") && !asks("no question here"));
    }

    #[test]
    fn statements_without_a_leading_first_person() {
        let out = run(vec![m(1, Role::User, "我是28岁宝妈，宝宝1岁，我们住在上海。")]);
        assert_eq!(apply(&out.profile_changes), json!({"identity": ["28岁宝妈"], "child_age": "1岁", "city": "上海"}));
    }

    #[test]
    fn short_sessions_still_split_by_topic_and_diet_is_a_fact() {
        let out = run(vec![
            m(1, Role::User, "宝宝喝普通奶粉总是胀气，医生说可能是乳糖不耐受。"),
            m(2, Role::Assistant, "可以选择无乳糖配方。"),
            m(3, Role::User, "另外我周末想带宝宝去公园野餐，需要准备什么？"),
            m(4, Role::Assistant, "带好遮阳帽和驱蚊液。"),
            m(5, Role::User, "I'm vegetarian, by the way."),
        ]);
        let ids: Vec<_> = out.events.iter().map(|e| e.source_message_ids.clone()).collect();
        assert_eq!(ids, vec![vec![1, 2], vec![3, 4], vec![5]], "a cue and a change of subject each start a new event");
        assert_eq!(apply(&out.profile_changes), json!({"diet": "vegetarian"}));
    }

    #[test]
    fn deterministic_and_noise_free() {
        let msgs = vec![
            m(1, Role::User, "<tool_call>{\"x\":1}</tool_call>"),
            m(2, Role::User, "ok"),
            m(3, Role::Assistant, "{\"tool_calls\": []}"),
        ];
        let a = run(msgs.clone());
        assert!(a.events.is_empty() && a.profile_changes.is_empty());
        let msgs = vec![m(1, Role::User, "我叫小明，我是程序员，我对花生过敏。")];
        assert_eq!(run(msgs.clone()), run(msgs.clone()));
        assert_eq!(
            apply(&run(msgs).profile_changes),
            json!({"name": "小明", "identity": ["程序员"], "allergies": ["花生"]})
        );
    }
}
