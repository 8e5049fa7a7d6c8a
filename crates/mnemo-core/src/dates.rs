//! Relative dates, resolved deterministically against the time a message was written.
//!
//! "yesterday", "last Tuesday", "3 days ago", 上周三, 明天, 两周后, 5月3号 mean different days
//! depending on when they were said. Extractors (and LLMs) keep them as said; the service
//! resolves them here against the source message's own time and writes the absolute date next to
//! the expression (`昨天（2026-11-28）`), so a memory read a month later still means the right day.
//! Nothing here trusts a model: the same text and anchor always give the same dates.

use chrono::{DateTime, Datelike, Duration, FixedOffset, Months, NaiveDate, TimeZone, Weekday};
use regex::{Captures, Regex};
use std::sync::OnceLock;

/// How precise a resolved mention is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Granularity {
    Day,
    /// The week starting on `date` (a Monday).
    Week,
    /// The month containing `date` (the first).
    Month,
    /// The year containing `date` (1 January).
    Year,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DateMention {
    /// Byte range of the expression in the text.
    pub start: usize,
    pub end: usize,
    pub date: NaiveDate,
    pub granularity: Granularity,
    /// Whether the expression needed the anchor (`yesterday`, `5月3号`) rather than naming the
    /// date in full (`2026-05-03`).
    pub relative: bool,
}

impl DateMention {
    /// The absolute form written next to a relative expression.
    pub fn render(&self) -> String {
        match self.granularity {
            Granularity::Day => self.date.format("%Y-%m-%d").to_string(),
            Granularity::Week => format!("{} week", self.date.format("%Y-%m-%d")),
            Granularity::Month => self.date.format("%Y-%m").to_string(),
            Granularity::Year => self.date.format("%Y").to_string(),
        }
    }
}

type Resolve = fn(&Captures, NaiveDate) -> Option<(NaiveDate, Granularity)>;

const WD_EN: &str = r"(monday|tuesday|wednesday|thursday|friday|saturday|sunday|mon|tues?|wed|thu(?:rs?)?|fri|sat|sun)";
const MON_EN: &str = r"(january|february|march|april|may|june|july|august|september|october|november|december|jan|feb|mar|apr|jun|jul|aug|sept?|oct|nov|dec)";
const NUM_EN: &str = r"(\d{1,3}|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a couple of|a few)";
const NUM_ZH: &str = r"(\d{1,3}|[一二两三四五六七八九十]{1,3})";

struct Rule {
    re: Regex,
    resolve: Resolve,
    relative: bool,
    /// A weekday named alone: which way it goes is its clause's tense ([`by_tense`]).
    tensed: bool,
}

impl Rule {
    fn tensed(self) -> Self {
        Rule { tensed: true, ..self }
    }
}

fn rules() -> &'static [Rule] {
    static RULES: OnceLock<Vec<Rule>> = OnceLock::new();
    RULES.get_or_init(|| {
        let r = |p: &str, resolve: Resolve, relative: bool| Rule {
            re: Regex::new(p).expect("date rule"),
            resolve,
            relative,
            tensed: false,
        };
        vec![
            // Absolute dates first: they also set an event's time, but need no annotation.
            r(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b", |c, _| ymd(num(&c[1])?, num(&c[2])?, num(&c[3])?), false),
            r(r"(\d{4})\s*年\s*(\d{1,2}|[一二三四五六七八九十]{1,3})\s*月\s*(\d{1,2}|[一二三四五六七八九十]{1,3})\s*[日号]", |c, _| {
                ymd(num(&c[1])?, num(&c[2])?, num(&c[3])?)
            }, false),
            r(&format!(r"(?i)\b{MON_EN}\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b"), |c, _| {
                ymd(num(&c[3])?, month_en(&c[1])?, num(&c[2])?)
            }, false),
            r(&format!(r"(?i)\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{MON_EN}\.?,?\s+(\d{{4}})\b"), |c, _| {
                ymd(num(&c[3])?, month_en(&c[2])?, num(&c[1])?)
            }, false),
            // A month of a year: "May 2023", "in December, 2023", 2023年5月.
            r(&format!(r"(?i)\b{MON_EN}\.?,?\s+(\d{{4}})\b"), |c, _| {
                Some((NaiveDate::from_ymd_opt(num(&c[2])? as i32, month_en(&c[1])?, 1)?, Granularity::Month))
            }, false),
            r(r"(\d{4})\s*年\s*(\d{1,2}|[一二三四五六七八九十]{1,3})\s*月", |c, _| {
                Some((NaiveDate::from_ymd_opt(num(&c[1])? as i32, num(&c[2])?, 1)?, Granularity::Month))
            }, false),
            // Month and day without a year: the occurrence nearest to the anchor.
            r(r"(\d{1,2}|[一二三四五六七八九十]{1,3})\s*月\s*(\d{1,2}|[一二三四五六七八九十]{1,3})\s*[日号]", |c, a| {
                nearest_md(a, num(&c[1])?, num(&c[2])?)
            }, true),
            r(&format!(r"(?i)\b{MON_EN}\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b"), |c, a| nearest_md(a, month_en(&c[1])?, num(&c[2])?), true),
            r(&format!(r"(?i)\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{MON_EN}\b"), |c, a| nearest_md(a, month_en(&c[2])?, num(&c[1])?), true),
            // English relative days.
            r(r"(?i)\bthe\s+day\s+before\s+yesterday\b", |_, a| day(a, -2), true),
            r(r"(?i)\bthe\s+day\s+after\s+tomorrow\b", |_, a| day(a, 2), true),
            r(r"(?i)\byesterday\b", |_, a| day(a, -1), true),
            r(r"(?i)\b(?:today|tonight|this\s+(?:morning|afternoon|evening))\b", |_, a| day(a, 0), true),
            r(r"(?i)\btomorrow\b", |_, a| day(a, 1), true),
            r(&format!(r"(?i)\b(last|next|this|coming)\s+{WD_EN}\b"), |c, a| {
                let wd = weekday_en(&c[2])?;
                match c[1].to_ascii_lowercase().as_str() {
                    "last" => Some((prev_weekday(a, wd), Granularity::Day)),
                    "next" | "coming" => Some((next_weekday(a, wd), Granularity::Day)),
                    _ => Some((week_start(a) + Duration::days(wd.num_days_from_monday() as i64), Granularity::Day)),
                }
            }, true),
            // "on Friday": said of the past or the future; the nearest one within the week around.
            r(&format!(r"(?i)\bon\s+{WD_EN}\b"), |c, a| Some((nearest_weekday(a, weekday_en(&c[1])?), Granularity::Day)), true)
                .tensed(),
            r(&format!(r"(?i)\b{NUM_EN}\s+(day|week|month|year)s?\s+ago\b"), |c, a| shift(a, -(num_en(&c[1])? as i64), &c[2]), true),
            r(&format!(r"(?i)\bin\s+{NUM_EN}\s+(day|week|month|year)s?\b"), |c, a| shift(a, num_en(&c[1])? as i64, &c[2]), true),
            r(r"(?i)\b(last|next|this)\s+(week|month|year)\b", |c, a| {
                let n = match c[1].to_ascii_lowercase().as_str() {
                    "last" => -1,
                    "next" => 1,
                    _ => 0,
                };
                period(a, n, &c[2].to_ascii_lowercase())
            }, true),
            // Chinese relative days.
            r(r"大前天", |_, a| day(a, -3), true),
            r(r"大后天", |_, a| day(a, 3), true),
            r(r"前天", |_, a| day(a, -2), true),
            r(r"后天", |_, a| day(a, 2), true),
            r(r"昨[天日晚]", |_, a| day(a, -1), true),
            r(r"(?:今[天日晚早]|今儿)", |_, a| day(a, 0), true),
            r(r"明[天日晚早]", |_, a| day(a, 1), true),
            r(r"(上上|下下|上|下|这|本)\s*(?:个)?(?:周|星期|礼拜)([一二三四五六日天])", |c, a| {
                let wd = weekday_zh(&c[2])?;
                Some((week_start(a) + Duration::days(7 * step_zh(&c[1]) + wd.num_days_from_monday() as i64), Granularity::Day))
            }, true),
            // 周五 alone: this week's.
            r(r"(?:周|星期|礼拜)([一二三四五六日天])", |c, a| {
                Some((week_start(a) + Duration::days(weekday_zh(&c[1])?.num_days_from_monday() as i64), Granularity::Day))
            }, true)
            .tensed(),
            r(&format!(r"{NUM_ZH}\s*(?:个)?(天|日|周|星期|礼拜|月|年)(?:以|之)?(前|后)"), |c, a| {
                let n = num(&c[1])? as i64;
                let n = if &c[3] == "前" { -n } else { n };
                let unit = match &c[2] {
                    "天" | "日" => "day",
                    "周" | "星期" | "礼拜" => "week",
                    "月" => "month",
                    _ => "year",
                };
                shift(a, n, unit)
            }, true),
            r(r"(上上|下下|上|下|这|本)(?:个)?(周|星期|礼拜|月)", |c, a| {
                period(a, step_zh(&c[1]), if &c[2] == "月" { "month" } else { "week" })
            }, true),
            r(r"(去年|前年|明年|今年|后年)", |c, a| {
                let n = match &c[1] {
                    "前年" => -2,
                    "去年" => -1,
                    "明年" => 1,
                    "后年" => 2,
                    _ => 0,
                };
                period(a, n, "year")
            }, true),
        ]
    })
}

/// Whether the clause that ends `before` is negated ("we haven't talked", "never") or counts a
/// first time.
fn negated(before: &str) -> bool {
    static NEG: OnceLock<Regex> = OnceLock::new();
    let neg = NEG.get_or_init(|| Regex::new(r"(?i)(?:n['’]t\b|\b(?:not|never|first time)\b)").expect("negation"));
    neg.is_match(before.rsplit(['.', '!', '?', ';', ',', '\n']).next().unwrap_or(before))
}

/// A weekday named alone ("on Friday", 周五) is the nearest one (English) or this week's (Chinese)
/// — unless its clause says which way: "On Friday I'll see the dentist", 周五要去体检 said on a
/// Sunday is the coming Friday; "on Friday I went" (said on a Tuesday) the last one.
fn by_tense(text: &str, at: std::ops::Range<usize>, date: NaiveDate, a: NaiveDate) -> NaiveDate {
    static FUTURE: OnceLock<Regex> = OnceLock::new();
    static PAST: OnceLock<Regex> = OnceLock::new();
    let english = text[at.clone()].is_ascii();
    const ENDS: [char; 9] = ['.', '!', '?', ';', '\n', '。', '！', '？', '；'];
    let from =
        text[..at.start].char_indices().rfind(|(_, ch)| ENDS.contains(ch)).map_or(0, |(i, ch)| i + ch.len_utf8());
    let to = text[at.end..].find(ENDS).map_or(text.len(), |i| at.end + i);
    let clause = &text[from..to];
    let future = FUTURE.get_or_init(|| {
        Regex::new(r"(?i)\b(?:will|shall|gonna|going\s+to|plan(?:ning)?\s+to)\b|['’]ll\b|要|会|打算|准备|将")
            .expect("future")
    });
    let past = PAST.get_or_init(|| {
        Regex::new(r"(?i)\b(?:went|did|was|were|had|got|saw|met|came|took|made|([a-z]{2,}ed))\b").expect("past")
    });
    // "-ed" words that are no past tense.
    const NOT_PAST: &[&str] = &[
        "need", "feed", "seed", "speed", "proceed", "succeed", "exceed", "indeed", "embed", "hundred", "shed", "bleed",
        "breed", "weed", "naked", "wicked", "sacred",
    ];
    let told_past = past
        .captures_iter(clause)
        .any(|c| c.get(1).is_none_or(|w| !NOT_PAST.contains(&w.as_str().to_lowercase().as_str())));
    let told_future = future.is_match(clause);
    if date < a && told_future {
        date + Duration::days(7)
    } else if english && date > a && told_past && !told_future {
        date - Duration::days(7)
    } else {
        date
    }
}

/// Every date expression in `text`, resolved against `anchor`, in text order, never overlapping
/// (the longest match wins).
pub fn find_dates(text: &str, anchor: DateTime<FixedOffset>) -> Vec<DateMention> {
    let a = anchor.date_naive();
    let mut found: Vec<DateMention> = Vec::new();
    for rule in rules() {
        for c in rule.re.captures_iter(text) {
            let m = c.get(0).expect("whole match");
            // "the last week of June" names a part of June, not last week; 每周日 is every
            // Sunday, no one day.
            let of = text[m.end()..].trim_start().get(..3).is_some_and(|w| w.eq_ignore_ascii_case("of "));
            let every = text[..m.start()].trim_end().ends_with('每') || text[..m.start()].ends_with("每个");
            // "haven't talked in a few days", "wasn't built in a day", "the first time in two
            // years": a span up to now, no day ahead.
            let span =
                m.as_str().get(..3).is_some_and(|w| w.eq_ignore_ascii_case("in ")) && negated(&text[..m.start()]);
            if rule.relative && (of || every || span) {
                continue;
            }
            if let Some((date, granularity)) = (rule.resolve)(&c, a) {
                let date = if rule.tensed { by_tense(text, m.range(), date, a) } else { date };
                found.push(DateMention { start: m.start(), end: m.end(), date, granularity, relative: rule.relative });
            }
        }
    }
    found.sort_by(|x, y| x.start.cmp(&y.start).then((y.end - y.start).cmp(&(x.end - x.start))));
    let mut out: Vec<DateMention> = Vec::new();
    for m in found {
        if out.last().is_none_or(|last| m.start >= last.end) {
            out.push(m);
        }
    }
    out
}

/// What anchoring did to a text.
#[derive(Clone, Debug, PartialEq)]
pub struct Anchored {
    pub text: String,
    /// The first past day the text names, if any: when the event happened. A day ahead ("tomorrow
    /// I will…") has not happened; the event is then of its message's day.
    pub event_date: Option<NaiveDate>,
    /// When what the text tells became true, if it says ([`stated_start`]).
    pub start: Option<NaiveDate>,
}

/// Writes the absolute date after each relative expression (`yesterday (2026-11-28)`,
/// `上周三（2026-11-18）`). Idempotent: an expression already followed by a bracketed date is left
/// alone, so anchoring twice changes nothing.
pub fn anchor_text(text: &str, anchor: DateTime<FixedOffset>) -> Anchored {
    let mentions = find_dates(text, anchor);
    let event_date =
        mentions.iter().find(|m| m.granularity == Granularity::Day && m.date < anchor.date_naive()).map(|m| m.date);
    let start = start_among(text, &mentions, anchor);
    let mut out = String::with_capacity(text.len() + mentions.len() * 14);
    let mut at = 0;
    for m in &mentions {
        out.push_str(&text[at..m.end]);
        at = m.end;
        let rest = text[m.end..].trim_start_matches(' ');
        let annotated = rest.starts_with('(') || rest.starts_with('（');
        if m.relative && !annotated {
            let zh = text[m.start..m.end].chars().any(crate::text::is_han);
            if zh {
                out.push_str(&format!("（{}）", m.render()));
            } else {
                out.push_str(&format!(" ({})", m.render()));
            }
        }
    }
    out.push_str(&text[at..]);
    Anchored { text: out, event_date, start }
}

/// When what a text tells became true, if it says so: a time after "since", "from", "started",
/// 自从/从/自 ("since 2013", "since last May", 从2019年起), a duration back from the anchor ("for
/// three years", "for 6 months"), or a past month or year named on its own ("last month I moved":
/// the month's first day — a named day sets an event's time instead). The earliest such start
/// before the anchor's day; `None` when the text names none ("since I was ten" is not resolved).
pub fn stated_start(text: &str, anchor: DateTime<FixedOffset>) -> Option<NaiveDate> {
    start_among(text, &find_dates(text, anchor), anchor)
}

/// [`stated_start`] given the text's date mentions (found once for anchoring and this alike).
fn start_among(text: &str, mentions: &[DateMention], anchor: DateTime<FixedOffset>) -> Option<NaiveDate> {
    static CUES: OnceLock<[Regex; 3]> = OnceLock::new();
    let [cue, year, lasting] = CUES.get_or_init(|| {
        [
            Regex::new(r"(?i)(?:\bsince|\bfrom|\bstarted(?: \w+){0,3}? in|自从|从|自)\s*$").expect("cue"),
            Regex::new(
                r"(?i)(?:\b(?:since|in|from|back in)\s+(\d{4})\b|(\d{4})\s*年(?:起|开始|以来|初|底)?(?:[^\d月]|$))",
            )
            .expect("year"),
            Regex::new(&format!(r"(?i)\bfor\s+(?:the\s+(?:last|past)\s+)?{NUM_EN}\s+(month|year)s?\b")).expect("for"),
        ]
    });
    let a = anchor.date_naive();
    let mut starts: Vec<NaiveDate> = Vec::new();
    for m in mentions {
        let cued = cue.is_match(&text[..m.start]);
        // A month or a year on its own counts once it is over: "last month", 去年 — not "this
        // year" (今年三岁 says nothing of when it began).
        let past_period = match m.granularity {
            Granularity::Month => (m.date.year(), m.date.month()) < (a.year(), a.month()),
            Granularity::Year => m.date.year() < a.year(),
            _ => false,
        };
        if m.date < a && (cued || past_period) {
            starts.push(m.date);
        }
    }
    for c in year.captures_iter(text) {
        let y = c.get(1).or(c.get(2)).and_then(|y| y.as_str().parse::<i32>().ok());
        if let Some(d) = y.filter(|y| (1900..a.year()).contains(y)).and_then(|y| NaiveDate::from_ymd_opt(y, 1, 1)) {
            starts.push(d);
        }
    }
    for c in lasting.captures_iter(text) {
        if let Some((d, _)) = num_en(&c[1]).and_then(|n| shift(a, -(n as i64), &c[2].to_ascii_lowercase())) {
            starts.push(d);
        }
    }
    starts.into_iter().filter(|d| *d < a).min()
}

/// The days a text writes out in full (`2026-12-07`, as [`anchor_text`] writes them after a
/// relative expression, or as a user types them), in order: a plan's day ("Tomorrow
/// (2026-12-07) I will…") is in its text, not in its time.
pub fn days_named(text: &str) -> Vec<NaiveDate> {
    let b = text.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    let mut out = Vec::new();
    let mut i = 0;
    while i + 10 <= b.len() {
        let starts = i == 0 || !b[i - 1].is_ascii_digit();
        let ends = b.get(i + 10).is_none_or(|c| !c.is_ascii_digit());
        if starts
            && ends
            && b[i + 4] == b'-'
            && b[i + 7] == b'-'
            && digits(i..i + 4)
            && digits(i + 5..i + 7)
            && digits(i + 8..i + 10)
        {
            if let Ok(d) = NaiveDate::parse_from_str(&text[i..i + 10], "%Y-%m-%d") {
                out.push(d);
            }
            i += 10;
        } else {
            i += 1;
        }
    }
    out
}

/// A day's hour `hour` at `offset`, in milliseconds (`None` where that local time does not exist).
pub fn at_hour(day: NaiveDate, hour: u32, offset: FixedOffset) -> Option<i64> {
    day.and_hms_opt(hour, 0, 0)?.and_local_timezone(offset).single().map(|t| t.timestamp_millis())
}

/// Milliseconds → the wall-clock time at `offset`.
pub fn local(ms: i64, offset: FixedOffset) -> DateTime<FixedOffset> {
    offset.timestamp_millis_opt(ms).single().unwrap_or_else(|| offset.timestamp_millis_opt(0).unwrap())
}

/// Parses `+08:00`, `-05:30`, `Z` or `UTC`.
pub fn parse_offset(s: &str) -> Option<FixedOffset> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("z") || s.eq_ignore_ascii_case("utc") {
        return FixedOffset::east_opt(0);
    }
    let (sign, rest) = match s.as_bytes().first()? {
        b'+' => (1, &s[1..]),
        b'-' => (-1, &s[1..]),
        _ => return None,
    };
    let (h, m) = rest.split_once(':').unwrap_or((rest, "0"));
    let (h, m): (i32, i32) = (h.parse().ok()?, m.parse().ok()?);
    if h > 14 || m > 59 {
        return None;
    }
    FixedOffset::east_opt(sign * (h * 3600 + m * 60))
}

// ------------------------------------------------------------------ helpers

fn day(a: NaiveDate, n: i64) -> Option<(NaiveDate, Granularity)> {
    Some((a + Duration::days(n), Granularity::Day))
}

fn ymd(y: u32, m: u32, d: u32) -> Option<(NaiveDate, Granularity)> {
    Some((NaiveDate::from_ymd_opt(y as i32, m, d)?, Granularity::Day))
}

fn nearest_md(a: NaiveDate, m: u32, d: u32) -> Option<(NaiveDate, Granularity)> {
    let best = [a.year() - 1, a.year(), a.year() + 1]
        .iter()
        .filter_map(|y| NaiveDate::from_ymd_opt(*y, m, d))
        .min_by_key(|c| (*c - a).num_days().abs())?;
    Some((best, Granularity::Day))
}

fn week_start(a: NaiveDate) -> NaiveDate {
    a - Duration::days(a.weekday().num_days_from_monday() as i64)
}

fn prev_weekday(a: NaiveDate, wd: Weekday) -> NaiveDate {
    let back = (a.weekday().num_days_from_monday() as i64 - wd.num_days_from_monday() as i64).rem_euclid(7);
    a - Duration::days(if back == 0 { 7 } else { back })
}

fn next_weekday(a: NaiveDate, wd: Weekday) -> NaiveDate {
    let fwd = (wd.num_days_from_monday() as i64 - a.weekday().num_days_from_monday() as i64).rem_euclid(7);
    a + Duration::days(if fwd == 0 { 7 } else { fwd })
}

fn nearest_weekday(a: NaiveDate, wd: Weekday) -> NaiveDate {
    let fwd = (wd.num_days_from_monday() as i64 - a.weekday().num_days_from_monday() as i64).rem_euclid(7);
    if fwd <= 3 { a + Duration::days(fwd) } else { a - Duration::days(7 - fwd) }
}

fn shift(a: NaiveDate, n: i64, unit: &str) -> Option<(NaiveDate, Granularity)> {
    let months = |k: i64| {
        if k >= 0 {
            a.checked_add_months(Months::new(k as u32))
        } else {
            a.checked_sub_months(Months::new((-k) as u32))
        }
    };
    match unit.to_ascii_lowercase().as_str() {
        "day" => Some((a + Duration::days(n), Granularity::Day)),
        "week" => Some((a + Duration::days(7 * n), Granularity::Day)),
        "month" => Some((months(n)?, Granularity::Day)),
        "year" => Some((months(12 * n)?, Granularity::Day)),
        _ => None,
    }
}

fn period(a: NaiveDate, n: i64, unit: &str) -> Option<(NaiveDate, Granularity)> {
    match unit {
        "week" => Some((week_start(a) + Duration::days(7 * n), Granularity::Week)),
        "month" => {
            let first = a.with_day(1)?;
            let d = if n >= 0 {
                first.checked_add_months(Months::new(n as u32))?
            } else {
                first.checked_sub_months(Months::new((-n) as u32))?
            };
            Some((d, Granularity::Month))
        }
        "year" => Some((NaiveDate::from_ymd_opt(a.year() + n as i32, 1, 1)?, Granularity::Year)),
        _ => None,
    }
}

/// Arabic digits or a Chinese numeral up to 99 (`三`, `十一`, `二十五`, `两`).
fn num(s: &str) -> Option<u32> {
    if let Ok(n) = s.parse() {
        return Some(n);
    }
    let digit =
        |c: char| "零一二三四五六七八九".find(c).map(|i| (i / 3) as u32).or(if c == '两' { Some(2) } else { None });
    let chars: Vec<char> = s.chars().collect();
    match chars.as_slice() {
        [c] if *c == '十' => Some(10),
        [c] => digit(*c),
        ['十', u] => Some(10 + digit(*u)?),
        [t, '十'] => Some(digit(*t)? * 10),
        [t, '十', u] => Some(digit(*t)? * 10 + digit(*u)?),
        _ => None,
    }
}

fn num_en(s: &str) -> Option<u32> {
    let words =
        ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"];
    let s = s.to_ascii_lowercase();
    match s.as_str() {
        "a" | "an" => Some(1),
        "a couple of" => Some(2),
        "a few" => Some(3),
        _ => s.parse().ok().or_else(|| words.iter().position(|w| *w == s).map(|i| i as u32)),
    }
}

fn month_en(s: &str) -> Option<u32> {
    let s = s.to_ascii_lowercase();
    let names = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
    names.iter().position(|n| s.starts_with(n)).map(|i| i as u32 + 1)
}

fn weekday_en(s: &str) -> Option<Weekday> {
    let s = s.to_ascii_lowercase();
    let names = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
    names.iter().position(|n| s.starts_with(n)).and_then(|i| Weekday::try_from(i as u8).ok())
}

/// How many weeks or months 上上 / 上 / 这 / 本 / 下 / 下下 step from this one.
fn step_zh(s: &str) -> i64 {
    match s {
        "上上" => -2,
        "上" => -1,
        "下" => 1,
        "下下" => 2,
        _ => 0,
    }
}

fn weekday_zh(s: &str) -> Option<Weekday> {
    let i = match s {
        "一" => 0,
        "二" => 1,
        "三" => 2,
        "四" => 3,
        "五" => 4,
        "六" => 5,
        "日" | "天" => 6,
        _ => return None,
    };
    Weekday::try_from(i as u8).ok()
}

mod query;
pub use query::spans;

#[cfg(test)]
mod tests;
