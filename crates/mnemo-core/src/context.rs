//! Assembling the context string for the next LLM call (README "API at a glance"; seed 000): user profile,
//! recent (not yet extracted) turns, this conversation's events, other conversations' events that
//! match the query — in that priority, within a hard token budget.
//!
//! [`assemble`] is pure: it takes the candidates (already ranked) and returns the string and the
//! items that made it in. Budget rule: items are admitted in priority order (profile lines, then
//! short-term turns newest first, then this conversation's events best first, then other
//! conversations' events best first) while the whole string stays within `max_tokens`; so when
//! space runs out, the lowest-priority parts are the ones left out, and short-term memory loses
//! its oldest turns first. Empty sections are left out; nothing at all gives the empty string.

use crate::excerpt::{Excerpter, Focus};
use crate::model::{Millis, Profile, StoredMessage};
use crate::ranking::ScoredEvent;
use crate::tokens::TokenCounter;
use serde_json::Value;

pub use crate::text::Locale;

#[derive(Clone, Debug, Default)]
pub struct Candidates {
    pub profiles: Vec<Profile>,
    /// The latest daily digest, for a conversation that has no turns yet.
    pub recap: Option<ScoredEvent>,
    /// Oldest first, as stored.
    pub short_term: Vec<StoredMessage>,
    /// Best first.
    pub intra_events: Vec<ScoredEvent>,
    /// Best first.
    pub cross_events: Vec<ScoredEvent>,
}

#[derive(Clone, Debug, Default)]
pub struct Assembled {
    pub context_str: String,
    pub token_count: usize,
    /// What made it into the string.
    pub included: Candidates,
    /// How many candidates the budget left out.
    pub dropped: usize,
}

struct Labels {
    header: &'static str,
    profile: &'static str,
    recap: &'static str,
    recent: &'static str,
    events: &'static str,
    intra: &'static str,
    cross: &'static str,
    created: &'static str,
    content: &'static str,
}

const ZH: Labels = Labels {
    header: "以下是需优先参考的用户记忆，按优先级排序：",
    profile: "用户画像",
    recap: "上次对话回顾",
    recent: "最近对话内容",
    events: "事件记忆",
    intra: "本次对话的事件记忆",
    cross: "其他对话的相关事件记忆",
    created: "[创建时间]",
    content: "[内容]",
};

const EN: Labels = Labels {
    header: "The following user memories should be consulted first, in priority order:",
    profile: "User profile",
    recap: "Last time",
    recent: "Recent conversation",
    events: "Event memories",
    intra: "Events from this conversation",
    cross: "Related events from other conversations",
    created: "[created]",
    content: "[content]",
};

pub fn format_time(ms: Millis) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_else(|| ms.to_string())
}

fn attribute_label(key: &str, locale: Locale) -> String {
    let zh = match key {
        "name" => "姓名",
        "age" => "年龄",
        "city" => "居住城市",
        "child_age" => "孩子年龄",
        "workplace" => "工作单位",
        "occupation" => "职业",
        "identity" => "身份",
        "likes" => "喜欢",
        "dislikes" => "不喜欢",
        "prefers" => "偏好",
        "allergies" => "过敏",
        other => other,
    };
    match locale {
        Locale::Zh => zh.to_string(),
        Locale::En => {
            let mut s = key.replace('_', " ");
            if let Some(f) = s.get_mut(0..1) {
                f.make_ascii_uppercase();
            }
            s
        }
    }
}

fn value_text(v: &Value, locale: Locale) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().map(str::to_string).unwrap_or_else(|| i.to_string()))
            .collect::<Vec<_>>()
            .join(if locale == Locale::Zh { "、" } else { ", " }),
        other => other.to_string(),
    }
}

/// The lines a profile contributes: its written description, then its attributes.
pub fn profile_lines(p: &Profile, locale: Locale) -> Vec<String> {
    let mut out = Vec::new();
    let generated = p.content == crate::profile::describe(&p.attributes);
    if !p.content.trim().is_empty() && !generated {
        out.push(format!("- {}", p.content.trim()));
    }
    for (k, v) in &p.attributes {
        out.push(format!("- {}: {}", attribute_label(k, locale), value_text(v, locale)));
    }
    out
}

fn message_line(m: &StoredMessage) -> String {
    let who = match &m.name {
        Some(n) if !n.is_empty() => format!("{}({})", n, m.role.as_str()),
        _ => m.role.as_str().to_string(),
    };
    format!("{} {}: {}", format_time(m.time), who, m.content.split_whitespace().collect::<Vec<_>>().join(" "))
}

fn event_line(e: &ScoredEvent, l: &Labels) -> String {
    format!(
        "- {}{} {}{}",
        l.created,
        format_time(e.event.time),
        l.content,
        e.event.text().split_whitespace().collect::<Vec<_>>().join(" ")
    )
}

/// Renders the sections that have lines.
fn render(sections: &[(&str, Vec<String>)], l: &Labels) -> String {
    let present: Vec<_> = sections.iter().filter(|(_, lines)| !lines.is_empty()).collect();
    if present.is_empty() {
        return String::new();
    }
    let mut s = String::from(l.header);
    for (i, (title, lines)) in present.iter().enumerate() {
        s.push_str(&format!("\n\n{}. {}", i + 1, title));
        for line in lines.iter() {
            s.push('\n');
            s.push_str(line);
        }
    }
    s
}

pub fn assemble(c: Candidates, locale: Locale, max_tokens: usize, focus: &Focus) -> Assembled {
    let l = match locale {
        Locale::Zh => &ZH,
        Locale::En => &EN,
    };
    let (intra_title, cross_title) = match (c.intra_events.is_empty(), c.cross_events.is_empty()) {
        (false, false) => (l.intra, l.cross),
        _ => (l.events, l.events),
    };
    // Section lines as admitted so far; short-term is collected newest first and reversed on render.
    let mut profile: Vec<String> = Vec::new();
    let mut recent_rev: Vec<String> = Vec::new();
    // Event lines: this conversation's, then the other conversations'.
    let mut events: [Vec<String>; 2] = [Vec::new(), Vec::new()];
    let mut included = Candidates::default();
    let mut dropped = 0usize;
    // The recap (a new conversation's opening) sits between the profile and the turns.
    let mut recap: Vec<String> = Vec::new();
    let build = |rc: &[String], p: &[String], r: &[String], [i, x]: &[Vec<String>; 2]| {
        let recent: Vec<String> = r.iter().rev().cloned().collect();
        render(
            &[
                (l.profile, p.to_vec()),
                (l.recap, rc.to_vec()),
                (l.recent, recent),
                (intra_title, i.to_vec()),
                (cross_title, x.to_vec()),
            ],
            l,
        )
    };
    // Admission is decided on an upper-bound estimate (the last exact count plus each admitted
    // line's own tokens and a margin for the separator and a section title); the whole string is
    // counted exactly only when the estimate comes within that margin of the budget. A context of
    // thousands of candidates costs a count per line, not a count of the whole string per line.
    // Near the end of the budget, a line the estimate refuses is counted exactly only while it
    // could still fit: a line adds at least its own tokens (less one, should a boundary merge),
    // so one whose own tokens overshoot `floor` — a lower bound of the admitted string — is left
    // out without counting the whole string again (at 2,400 tokens that was ~30% of get_context).
    let budget = std::cell::Cell::new(Budget { exact: 0, pending: 0, floor: 0 });
    let fits = |whole: &dyn Fn() -> String, line: Option<&String>| {
        let mut b = budget.get();
        let own = TokenCounter::count(line.map_or("", String::as_str));
        let est = b.exact + b.pending + own + LINE_MARGIN;
        if est <= max_tokens {
            b.pending = est - b.exact;
            b.floor += own.saturating_sub(1);
            budget.set(b);
            return true;
        }
        if b.floor + own.saturating_sub(1) > max_tokens {
            return false;
        }
        let n = TokenCounter::count(&whole());
        if n <= max_tokens {
            budget.set(Budget { exact: n, pending: 0, floor: n });
            return true;
        }
        // Without the line the string has at least `n` less the most a line adds.
        b.floor = b.floor.max(n.saturating_sub(own + LINE_MARGIN));
        budget.set(b);
        false
    };

    for p in &c.profiles {
        let lines = profile_lines(p, locale);
        let mut any = false;
        for line in lines {
            profile.push(line);
            if fits(&|| build(&recap, &profile, &recent_rev, &events), profile.last()) {
                any = true;
            } else {
                profile.pop();
                dropped += 1;
            }
        }
        if any {
            included.profiles.push(p.clone());
        }
    }
    if let Some(r) = &c.recap {
        recap.push(event_line(r, l));
        if fits(&|| build(&recap, &profile, &recent_rev, &events), recap.last()) {
            included.recap = Some(r.clone());
        } else {
            recap.clear();
            dropped += 1;
        }
    }
    let mut short_full = false;
    for (i, m) in c.short_term.iter().rev().enumerate() {
        if short_full {
            dropped += 1;
            continue;
        }
        recent_rev.push(message_line(m));
        if fits(&|| build(&recap, &profile, &recent_rev, &events), recent_rev.last()) {
            included.short_term.push(m.clone());
            continue;
        }
        recent_rev.pop();
        // The newest turn alone is too long: keep its beginning rather than lose it entirely.
        if i == 0 {
            let base = TokenCounter::count(&build(&recap, &profile, &recent_rev, &events));
            let room = max_tokens.saturating_sub(base + 24);
            if room > 16 {
                let mut cut = m.clone();
                cut.content = format!("{}…", TokenCounter::truncate(&m.content, room));
                recent_rev.push(message_line(&cut));
                if fits(&|| build(&recap, &profile, &recent_rev, &events), recent_rev.last()) {
                    included.short_term.push(cut);
                    short_full = true;
                    continue;
                }
                recent_rev.pop();
            }
        }
        // Older turns are not admitted past a turn that did not fit: the window stays contiguous.
        short_full = true;
        dropped += 1;
    }
    included.short_term.reverse();
    // Once less room is left than the shortest event line takes (counted exactly: the running
    // figure is an upper bound), the rest is left out without counting each line.
    let no_room = std::cell::Cell::new(false);
    let full = |whole: &dyn Fn() -> String| {
        let b = budget.get();
        if no_room.get() || max_tokens.saturating_sub(b.exact + b.pending) >= MIN_EVENT_LINE {
            return no_room.get();
        }
        let n = TokenCounter::count(&whole());
        budget.set(Budget { exact: n, pending: 0, floor: n });
        no_room.set(max_tokens.saturating_sub(n) < MIN_EVENT_LINE);
        no_room.get()
    };
    // Events, this conversation's first. Once the events shown fill `focus.whole_share` of the
    // budget, and unless all the rest would fit whole, a long one is shown as its turn that
    // matches the query (crate::excerpt); one that does not fit whole is tried so too.
    let mut excerpter = Excerpter::new(focus, c.intra_events.iter().chain(&c.cross_events));
    // What an event takes whole, estimated cheaply (UTF-8 bytes / 4 — near the count for English
    // and Chinese alike — and its labels), and what the events not yet offered take.
    let whole_cost = |e: &ScoredEvent| e.event.text().len() / 4 + 16 + LINE_MARGIN;
    let mut rest: usize =
        if excerpter.enabled() { c.intra_events.iter().chain(&c.cross_events).map(whole_cost).sum() } else { 0 };
    for (section, offered) in [&c.intra_events, &c.cross_events].into_iter().enumerate() {
        for e in offered {
            if excerpter.enabled() {
                rest -= whole_cost(e);
            }
            if full(&|| build(&recap, &profile, &recent_rev, &events)) {
                dropped += 1;
                continue;
            }
            let used = budget.get().exact + budget.get().pending;
            let excerpt = excerpter.applies(used, max_tokens) && used + whole_cost(e) + rest > max_tokens;
            let first = if excerpt { excerpter.excerpt(e, locale) } else { None };
            // Tried already (or never to be): the whole event is the only other way to show it.
            let mut excerpted = excerpt || !excerpter.enabled();
            let mut candidate = first.unwrap_or_else(|| e.clone());
            loop {
                events[section].push(event_line(&candidate, l));
                if fits(&|| build(&recap, &profile, &recent_rev, &events), events[section].last()) {
                    match section {
                        0 => included.intra_events.push(candidate),
                        _ => included.cross_events.push(candidate),
                    }
                    break;
                }
                events[section].pop();
                if !excerpted {
                    excerpted = true;
                    if let Some(x) = excerpter.excerpt(e, locale) {
                        candidate = x;
                        continue;
                    }
                }
                dropped += 1;
                break;
            }
        }
    }
    let mut context_str = build(&recap, &profile, &recent_rev, &events);
    let mut token_count = TokenCounter::count(&context_str);
    // The estimate is an upper bound in practice; should a string still come out over the budget,
    // the lowest-priority lines go until it fits (never more than max_tokens).
    while token_count > max_tokens {
        if events[1].pop().is_some() {
            included.cross_events.pop();
        } else if events[0].pop().is_some() {
            included.intra_events.pop();
        } else if !recent_rev.is_empty() {
            recent_rev.pop();
            included.short_term.remove(0);
        } else if recap.pop().is_some() {
            included.recap = None;
        } else if profile.pop().is_none() {
            break;
        }
        dropped += 1;
        context_str = build(&recap, &profile, &recent_rev, &events);
        token_count = TokenCounter::count(&context_str);
    }
    Assembled { context_str, token_count, included, dropped }
}

/// Tokens reserved per admitted line beyond its own: the newline, and a section title when the
/// line opens a section.
const LINE_MARGIN: usize = 16;
/// The fewest tokens an event line takes: its time and labels, a few words, the margin.
const MIN_EVENT_LINE: usize = 24 + LINE_MARGIN;

#[derive(Clone, Copy)]
struct Budget {
    /// Exact tokens of the string at the last exact count.
    exact: usize,
    /// Estimated tokens admitted since (each line's own plus `LINE_MARGIN`).
    pending: usize,
    /// A lower bound of the string's tokens now.
    floor: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Event, Role};
    use crate::ranking::Scores;
    use serde_json::json;

    const T0: Millis = 1_780_387_830_000; // 2026-06-02 08:10:30 UTC

    fn msg(i: i64, role: Role, content: &str) -> StoredMessage {
        StoredMessage {
            message_id: i,
            conversation_id: "c".into(),
            session_id: None,
            role,
            name: None,
            content: content.into(),
            time: T0 + i * 45_000,
            tokens: 0,
        }
    }

    fn ev(id: &str, summary: &str, t: Millis) -> ScoredEvent {
        ScoredEvent {
            event: Event {
                id: id.into(),
                memory_type: "event_v1".into(),
                user_id: vec!["u".into()],
                assistant_id: vec![],
                group_id: None,
                session_id: None,
                conversation_id: None,
                scope: None,
                class: "conclusion".into(),
                status: "active".into(),
                time: t,
                memory_info: json!({"summary": summary}).as_object().unwrap().clone(),
                source_message_ids: vec![],
                hit_count: 0,
                last_hit_at: None,
                created_at: t,
                updated_at: t,
                expires_at: None,
                superseded_by: None,
            },
            scores: Scores::default(),
            layer: None,
        }
    }

    fn profile() -> Profile {
        Profile {
            id: "p".into(),
            profile_type: "profile_v1".into(),
            user_id: "u".into(),
            assistant_id: None,
            content: "用户为28岁宝妈，宝宝1岁，居住于上海".into(),
            attributes: json!({"prefers": ["无乳糖", "含DHA"]}).as_object().unwrap().clone(),
            source_session_ids: vec![],
            created_at: 0,
            updated_at: 0,
            history: vec![],
        }
    }

    fn seed() -> Candidates {
        Candidates {
            profiles: vec![profile()],
            recap: None,
            short_term: vec![
                msg(1, Role::User, "我家宝宝1岁，最近喝奶粉总胀气，有没有推荐的？"),
                msg(
                    2,
                    Role::Assistant,
                    "您好，宝宝胀气大概率和奶粉乳糖含量有关，建议优先选择无乳糖配方奶粉，我给您推荐2款高性价比的~",
                ),
            ],
            intra_events: vec![],
            cross_events: vec![
                ev("e1", "用户偏好简洁的报告格式", T0 - 86_400_000),
                ev("e2", "用户反馈折线图的颜色主题不适合深色模式，已提交反馈单。", T0 - 86_000_000),
            ],
        }
    }

    /// Many candidates: the budget holds at every size, a bigger budget never shows less, and
    /// what is shown is the best-first prefix that fits (admission decided without recounting
    /// the whole string for every line).
    #[test]
    fn hundreds_of_candidates_stay_within_every_budget() {
        let words = ["coffee", "hike", "Kyoto", "piano", "奶粉", "宝宝", "上海", "garden", "novel", "jazz"];
        let events: Vec<ScoredEvent> = (0..800)
            .map(|i| {
                let text: Vec<&str> = (0..(3 + i % 17)).map(|j| words[(i * 7 + j * 3) % words.len()]).collect();
                ev(&format!("e{i}"), &text.join(" "), T0 + i as i64)
            })
            .collect();
        let mut shown = 0;
        for max in [40, 600, 5000, 20_000] {
            let c = Candidates { cross_events: events.clone(), ..Default::default() };
            let a = assemble(c, Locale::En, max, &Focus::default());
            assert!(a.token_count <= max, "{} > {max}", a.token_count);
            assert_eq!(a.token_count, TokenCounter::count(&a.context_str));
            let n = a.included.cross_events.len();
            assert!(n >= shown, "budget {max} shows {n} < {shown}");
            assert_eq!(n + a.dropped, events.len());
            shown = n;
        }
        assert!(shown > 300, "a 20k budget holds hundreds of short events: {shown}");
    }

    /// Events of four turns each, as the rules extractor writes them; turn 2 of each says where
    /// its speaker went hiking.
    fn chunks(n: usize) -> Vec<ScoredEvent> {
        (0..n)
            .map(|i| {
                let turns = [
                    ("Nate", "user", format!("Morning! I spent day {i} mostly reading at home, as usual.")),
                    ("Joanna", "assistant", format!("Sounds calm. Did anything else happen on day {i}?")),
                    ("Nate", "user", format!("Yes, I went hiking up trail number {i} with my dog.")),
                    ("Joanna", "assistant", "Lovely, I wish I could come along next time you go.".to_string()),
                ];
                let mut e = ev(
                    &format!("e{i}"),
                    &turns.iter().map(|(w, _, c)| format!("{w}: {c}")).collect::<Vec<_>>().join(" "),
                    T0 + i as i64,
                );
                let raw = turns
                    .iter()
                    .map(|(w, r, c)| crate::model::original_message_line(Some(w), Role::parse(r).unwrap(), c))
                    .collect::<Vec<_>>()
                    .join("\n");
                e.event.memory_info.insert("original_messages".into(), raw.into());
                e.event.source_message_ids = (0..4).map(|t| (i * 10 + t) as i64).collect();
                e
            })
            .collect()
    }

    #[test]
    fn past_the_whole_share_long_events_are_shown_by_their_matching_turn() {
        let c = Candidates { cross_events: chunks(40), ..Default::default() };
        let focus = Focus { terms: crate::text::search_tokens("Where did Nate go hiking?"), whole_share: 0.5 };
        let whole = assemble(c.clone(), Locale::En, 1200, &Focus::default());
        let mixed = assemble(c.clone(), Locale::En, 1200, &focus);
        assert!(mixed.token_count <= 1200 && whole.token_count <= 1200);
        assert_eq!(mixed.token_count, TokenCounter::count(&mixed.context_str));
        let (w, m) = (whole.included.cross_events.len(), mixed.included.cross_events.len());
        assert!(m >= w + w / 2, "excerpts let more events in: {m} against {w}");
        let excerpted: Vec<&ScoredEvent> =
            mixed.included.cross_events.iter().filter(|e| e.event.memory_info.contains_key("excerpt")).collect();
        let first = mixed.included.cross_events.len() - excerpted.len();
        assert!(
            first >= 2 && mixed.included.cross_events[..first].iter().all(|e| e.event.source_message_ids.len() == 4)
        );
        for e in &excerpted {
            // The hiking turn alone: it does not ask, so no reply; it cites only itself.
            assert_eq!(e.event.source_message_ids.len(), 1);
            assert_eq!(e.event.source_message_ids[0] % 10, 2);
            let line = event_line(e, &EN);
            assert!(mixed.context_str.contains(&line) && line.contains("went hiking up trail"), "{line}");
        }
        // Everything fits whole: nothing is cut.
        let few = Candidates { cross_events: chunks(3), ..Default::default() };
        let a = assemble(few, Locale::En, 1200, &focus);
        assert!(a.included.cross_events.iter().all(|e| !e.event.memory_info.contains_key("excerpt")));
        // No query: whole.
        let blind = Focus { terms: vec![], whole_share: 0.5 };
        assert_eq!(assemble(c, Locale::En, 1200, &blind).included.cross_events.len(), w);
    }

    #[test]
    fn seed_layout_in_chinese() {
        let a = assemble(seed(), Locale::Zh, 1200, &Focus::default());
        insta::assert_snapshot!(a.context_str);
        assert_eq!(a.dropped, 0);
        assert_eq!(a.token_count, TokenCounter::count(&a.context_str));
    }

    #[test]
    fn english_layout_with_both_event_sections() {
        let mut c = seed();
        c.profiles[0].content = "Mother of a one-year-old, lives in Shanghai".into();
        c.short_term = vec![msg(1, Role::User, "Any formula with DHA?")];
        c.intra_events = vec![ev("e0", "User asked about lactose-free formula", T0 - 60_000)];
        c.cross_events.truncate(1);
        insta::assert_snapshot!(assemble(c, Locale::En, 1200, &Focus::default()).context_str);
    }

    #[test]
    fn empty_sections_are_left_out_and_nothing_gives_empty() {
        assert_eq!(assemble(Candidates::default(), Locale::Zh, 1200, &Focus::default()).context_str, "");
        let mut c = seed();
        c.profiles.clear();
        c.cross_events.clear();
        let s = assemble(c, Locale::Zh, 1200, &Focus::default()).context_str;
        assert!(s.contains("1. 最近对话内容") && !s.contains("用户画像") && !s.contains("事件记忆"), "{s}");
    }

    #[test]
    fn budget_drops_lowest_priority_first_and_trims_oldest_turns() {
        let mut c = seed();
        for i in 3..30 {
            c.short_term.push(msg(i, Role::User, &format!("第{i}条消息：今天聊了很多关于奶粉和辅食的话题")));
        }
        for budget in [50usize, 80, 120, 200, 400, 800, 1200, 4000] {
            let a = assemble(c.clone(), Locale::Zh, budget, &Focus::default());
            assert!(a.token_count <= budget, "budget {budget}: {}", a.token_count);
            let kept = &a.included.short_term;
            if let Some(last) = kept.last() {
                assert_eq!(last.message_id, 29, "budget {budget}: the newest turn is kept");
                let ids: Vec<_> = kept.iter().map(|m| m.message_id).collect();
                assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "budget {budget}: contiguous newest window {ids:?}");
            }
            if !a.included.cross_events.is_empty() {
                assert_eq!(a.included.short_term.len(), c.short_term.len(), "events only once all turns fit");
            }
        }
        let tight = assemble(c.clone(), Locale::Zh, 120, &Focus::default());
        assert!(tight.included.cross_events.is_empty() && tight.dropped > 0);
    }
}
