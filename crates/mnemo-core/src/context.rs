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
        out.push(format!(
            "- {}: {}{}",
            attribute_label(k, locale),
            value_text(v, locale),
            change_span(p, k, v, locale)
        ));
    }
    out
}

/// A changed single value with its span — " (since 2024-04-03; before: Berlin)" — when the
/// profile kept what it replaced, so a reader tells the current fact from the old one.
fn change_span(p: &Profile, key: &str, value: &Value, locale: Locale) -> String {
    let Some((old, until)) = crate::profile::previous(p, key).filter(|(old, _)| !old.is_array() && old != value) else {
        return String::new();
    };
    if value.is_array() {
        return String::new();
    }
    let day =
        chrono::DateTime::from_timestamp_millis(until).map(|t| t.format("%Y-%m-%d").to_string()).unwrap_or_default();
    match locale {
        Locale::Zh => format!("（{day}起；此前：{}）", value_text(&old, locale)),
        Locale::En => format!(" (since {day}; before: {})", value_text(&old, locale)),
    }
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
fn render(sections: &[(&str, &[String])], l: &Labels) -> String {
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

/// The sections of a context being assembled, in the order they render.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Section {
    Profile,
    Recap,
    /// Short-term turns, collected newest first and reversed on render.
    Recent,
    Intra,
    Cross,
}

/// A context being assembled: the lines admitted to each section, and what the budget knows of
/// the string they make.
///
/// Admission is decided on an upper-bound estimate (the last exact count plus each admitted
/// line's own tokens and a margin for the separator and a section title); the whole string is
/// counted exactly only when the estimate comes within that margin of the budget. A context of
/// thousands of candidates costs a count per line, not a count of the whole string per line.
/// Near the end of the budget, a line the estimate refuses is counted exactly only while it could
/// still fit: a line adds at least its own tokens (less one, should a boundary merge), so one
/// whose own tokens overshoot `floor` — a lower bound of the admitted string — is left out
/// without counting the whole string again (at 2,400 tokens that was ~30% of get_context).
struct Draft<'l> {
    l: &'l Labels,
    titles: (&'static str, &'static str),
    max_tokens: usize,
    profile: Vec<String>,
    recap: Vec<String>,
    recent_rev: Vec<String>,
    events: [Vec<String>; 2],
    budget: Budget,
    /// Less room is left than the shortest event line takes (see [`Draft::full`]).
    no_room: bool,
    dropped: usize,
}

impl<'l> Draft<'l> {
    fn new(l: &'l Labels, c: &Candidates, max_tokens: usize) -> Self {
        let titles = match (c.intra_events.is_empty(), c.cross_events.is_empty()) {
            (false, false) => (l.intra, l.cross),
            _ => (l.events, l.events),
        };
        Self {
            l,
            titles,
            max_tokens,
            profile: Vec::new(),
            recap: Vec::new(),
            recent_rev: Vec::new(),
            events: [Vec::new(), Vec::new()],
            budget: Budget { exact: 0, pending: 0, floor: 0 },
            no_room: false,
            dropped: 0,
        }
    }

    fn lines(&mut self, s: Section) -> &mut Vec<String> {
        match s {
            Section::Profile => &mut self.profile,
            Section::Recap => &mut self.recap,
            Section::Recent => &mut self.recent_rev,
            Section::Intra => &mut self.events[0],
            Section::Cross => &mut self.events[1],
        }
    }

    fn render(&self) -> String {
        let recent: Vec<String> = self.recent_rev.iter().rev().cloned().collect();
        render(
            &[
                (self.l.profile, &self.profile),
                (self.l.recap, &self.recap),
                (self.l.recent, &recent),
                (self.titles.0, &self.events[0]),
                (self.titles.1, &self.events[1]),
            ],
            self.l,
        )
    }

    /// Adds `line` to the section if the string stays within the budget; whether it did.
    fn admit(&mut self, s: Section, line: String) -> bool {
        let own = TokenCounter::count(&line);
        self.lines(s).push(line);
        if self.fits(own) {
            return true;
        }
        self.lines(s).pop();
        false
    }

    /// Whether the string, with a last line of `own` tokens just added, is within the budget.
    fn fits(&mut self, own: usize) -> bool {
        let max = self.max_tokens;
        let mut b = self.budget;
        let est = b.exact + b.pending + own + LINE_MARGIN;
        if est <= max {
            b.pending = est - b.exact;
            b.floor += own.saturating_sub(1);
            self.budget = b;
            return true;
        }
        if b.floor + own.saturating_sub(1) > max {
            return false;
        }
        let n = TokenCounter::count(&self.render());
        if n <= max {
            self.budget = Budget { exact: n, pending: 0, floor: n };
            return true;
        }
        // Without the line the string has at least `n` less the most a line adds.
        b.floor = b.floor.max(n.saturating_sub(own + LINE_MARGIN));
        self.budget = b;
        false
    }

    /// Whether less room is left than the shortest event line takes (counted exactly once the
    /// running figure, an upper bound, says so): the rest is then left out without counting
    /// each line.
    fn full(&mut self) -> bool {
        let b = self.budget;
        if self.no_room || self.max_tokens.saturating_sub(b.exact + b.pending) >= MIN_EVENT_LINE {
            return self.no_room;
        }
        let n = TokenCounter::count(&self.render());
        self.budget = Budget { exact: n, pending: 0, floor: n };
        self.no_room = self.max_tokens.saturating_sub(n) < MIN_EVENT_LINE;
        self.no_room
    }

    fn used(&self) -> usize {
        self.budget.exact + self.budget.pending
    }
}

/// Admits the candidates in priority order — profiles, the recap, the newest turns, this
/// conversation's events, the other conversations' — while the whole string stays within
/// `max_tokens` (never over it).
pub fn assemble(c: Candidates, locale: Locale, max_tokens: usize, focus: &Focus) -> Assembled {
    let l = match locale {
        Locale::Zh => &ZH,
        Locale::En => &EN,
    };
    let mut draft = Draft::new(l, &c, max_tokens);
    let mut included = Candidates::default();
    admit_profiles(&mut draft, &c, locale, &mut included);
    if let Some(r) = &c.recap {
        if draft.admit(Section::Recap, event_line(r, l)) {
            included.recap = Some(r.clone());
        } else {
            draft.dropped += 1;
        }
    }
    admit_turns(&mut draft, &c, &mut included);
    admit_events(&mut draft, &c, locale, focus, &mut included);
    trim_to_budget(draft, included)
}

fn admit_profiles(draft: &mut Draft, c: &Candidates, locale: Locale, included: &mut Candidates) {
    for p in &c.profiles {
        let mut any = false;
        for line in profile_lines(p, locale) {
            if draft.admit(Section::Profile, line) {
                any = true;
            } else {
                draft.dropped += 1;
            }
        }
        if any {
            included.profiles.push(p.clone());
        }
    }
}

/// The newest turns, as many as fit: older turns are not admitted past a turn that did not fit,
/// so the window stays contiguous; the newest turn alone too long keeps its beginning.
fn admit_turns(draft: &mut Draft, c: &Candidates, included: &mut Candidates) {
    let mut short_full = false;
    for (i, m) in c.short_term.iter().rev().enumerate() {
        if short_full {
            draft.dropped += 1;
            continue;
        }
        if draft.admit(Section::Recent, message_line(m)) {
            included.short_term.push(m.clone());
            continue;
        }
        if i == 0 {
            let base = TokenCounter::count(&draft.render());
            let room = draft.max_tokens.saturating_sub(base + 24);
            if room > 16 {
                let mut cut = m.clone();
                cut.content = format!("{}…", TokenCounter::truncate(&m.content, room));
                if draft.admit(Section::Recent, message_line(&cut)) {
                    included.short_term.push(cut);
                    short_full = true;
                    continue;
                }
            }
        }
        short_full = true;
        draft.dropped += 1;
    }
    included.short_term.reverse();
}

/// Events, this conversation's first. Once the events shown fill `focus.whole_share` of the
/// budget, and unless all the rest would fit whole, a long one is shown as its turn that matches
/// the query (crate::excerpt); one that does not fit whole is tried so too.
fn admit_events(draft: &mut Draft, c: &Candidates, locale: Locale, focus: &Focus, included: &mut Candidates) {
    let mut excerpter = Excerpter::new(focus, c.intra_events.iter().chain(&c.cross_events));
    // What an event takes whole, estimated cheaply (UTF-8 bytes / 4 — near the count for English
    // and Chinese alike — and its labels), and what the events not yet offered take.
    let whole_cost = |e: &ScoredEvent| e.event.text().len() / 4 + 16 + LINE_MARGIN;
    let mut rest: usize =
        if excerpter.enabled() { c.intra_events.iter().chain(&c.cross_events).map(whole_cost).sum() } else { 0 };
    for (section, offered) in [(Section::Intra, &c.intra_events), (Section::Cross, &c.cross_events)] {
        for e in offered {
            if excerpter.enabled() {
                rest -= whole_cost(e);
            }
            if draft.full() {
                draft.dropped += 1;
                continue;
            }
            let used = draft.used();
            let excerpt = excerpter.applies(used, draft.max_tokens) && used + whole_cost(e) + rest > draft.max_tokens;
            let first = if excerpt { excerpter.excerpt(e, locale) } else { None };
            // Tried already (or never to be): the whole event is the only other way to show it.
            let mut excerpted = excerpt || !excerpter.enabled();
            let mut candidate = first.unwrap_or_else(|| e.clone());
            loop {
                if draft.admit(section, event_line(&candidate, draft.l)) {
                    match section {
                        Section::Intra => included.intra_events.push(candidate),
                        _ => included.cross_events.push(candidate),
                    }
                    break;
                }
                if !excerpted {
                    excerpted = true;
                    if let Some(x) = excerpter.excerpt(e, locale) {
                        candidate = x;
                        continue;
                    }
                }
                draft.dropped += 1;
                break;
            }
        }
    }
}

/// The string, exactly counted. The estimate is an upper bound in practice; should a string still
/// come out over the budget, the lowest-priority lines go until it fits.
fn trim_to_budget(mut draft: Draft, mut included: Candidates) -> Assembled {
    let mut context_str = draft.render();
    let mut token_count = TokenCounter::count(&context_str);
    while token_count > draft.max_tokens {
        if draft.events[1].pop().is_some() {
            included.cross_events.pop();
        } else if draft.events[0].pop().is_some() {
            included.intra_events.pop();
        } else if !draft.recent_rev.is_empty() {
            draft.recent_rev.pop();
            included.short_term.remove(0);
        } else if draft.recap.pop().is_some() {
            included.recap = None;
        } else if draft.profile.pop().is_none() {
            break;
        }
        draft.dropped += 1;
        context_str = draft.render();
        token_count = TokenCounter::count(&context_str);
    }
    Assembled { context_str, token_count, included, dropped: draft.dropped }
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
mod tests;
