//! What a question names as time: the spans `dates::spans` resolves ("last week", "the week
//! before 16 November 2023", seasons, a month of any recent year).

use super::*;

/// The spans of time a question names ("on May 23, 2023", "last week", 上周三, 2023年5月), resolved
/// against `anchor` (the time it is asked), as `[start, end)` in milliseconds. A day reaches one
/// day either side: a memory is dated when it was said, and what it tells may be of the day
/// before ("yesterday I…") or be told the day after.
///
/// A question also names time in ways a message's anchoring must not resolve:
/// - relative to a date it names ("the week before 16 November 2023", "two weeks before August
///   11, 2023", "the Sunday before October 25, 2022"): from that much before the date to the date
///   (or after it), both ends included — what happened then is usually told on the named day;
/// - "between August 11 and August 15 2023" (a year named once serves both), "the second week of
///   November 2023", "the first half of September 2022";
/// - a month without a year ("in June", 6月份): that month of every year from ten years back to
///   the next one. Which June is meant is unknown; a memory of some June is the better candidate;
/// - seasons ("summer 2021", "last summer", 去年夏天; see [`season_spans`]).
pub fn spans(text: &str, anchor: DateTime<FixedOffset>) -> Vec<(i64, i64)> {
    let offset = *anchor.offset();
    let a = anchor.date_naive();
    let ms = |d: NaiveDate| at_hour(d, 0, offset).unwrap_or(i64::MIN);
    let mentions = find_dates(text, anchor);
    let q = query_rules();
    let (mut out, seasons) = season_spans(text, a, q);
    let mut skip = vec![false; mentions.len()];
    for (i, m) in mentions.iter().enumerate() {
        // 去年夏天: the season names the time, not the whole year.
        if skip[i] || seasons.iter().any(|r| r.start <= m.start && m.end <= r.end) {
            continue;
        }
        let before = &text[..m.start];
        let next = mentions.get(i + 1);
        let mut span = match m.granularity {
            Granularity::Day => (m.date - Duration::days(1), m.date + Duration::days(2)),
            Granularity::Week => (m.date, m.date + Duration::days(7)),
            Granularity::Month => (m.date, add_months(m.date, 1)),
            Granularity::Year => (m.date, add_months(m.date, 12)),
        };
        if let Some(n) = next
            && m.granularity == Granularity::Day
            && n.granularity == Granularity::Day
            && q.between.is_match(before)
            && q.and.is_match(&text[m.end..n.start])
        {
            // "between August 11 and August 15 2023": the first date takes the second's year.
            let from = if m.relative && !n.relative {
                NaiveDate::from_ymd_opt(n.date.year(), m.date.month(), m.date.day()).unwrap_or(m.date)
            } else {
                m.date
            };
            span = (from.min(n.date) - Duration::days(1), from.max(n.date) + Duration::days(2));
            skip[i + 1] = true;
        } else if m.granularity == Granularity::Day
            && let Some(c) = q.relative_to.captures(before)
        {
            let days = match (c.get(1), c.get(2), c.get(3)) {
                (Some(n), Some(unit), _) => num_en(n.as_str()).map_or(7, |n| n as i64) * unit_days(unit.as_str()),
                (_, _, Some(unit)) => unit_days(unit.as_str()),
                _ => 7, // a weekday or a weekend before / after
            };
            let after = c["dir"].eq_ignore_ascii_case("after");
            span = if after {
                (m.date - Duration::days(1), m.date + Duration::days(days + 2))
            } else {
                (m.date - Duration::days(days + 1), m.date + Duration::days(2))
            };
        } else if m.granularity == Granularity::Month
            && let Some(c) = q.part_of.captures(before)
        {
            let end = add_months(m.date, 1);
            let nth = |w: &str| ["first", "second", "third", "fourth"].iter().position(|x| w.eq_ignore_ascii_case(x));
            span = match (c[1].to_ascii_lowercase().as_str(), c[2].to_ascii_lowercase().as_str()) {
                ("last", "week") => (end - Duration::days(7), end),
                (w, "week") => {
                    let from = m.date + Duration::days(7 * nth(w).unwrap_or(0) as i64);
                    (from, (from + Duration::days(7)).min(end))
                }
                ("first", _) => (m.date, m.date + Duration::days(15)),
                _ => (m.date + Duration::days(15), end),
            };
        }
        out.push(span);
    }
    // A month without a year, where no other expression already names it.
    let free = |r: std::ops::Range<usize>| mentions.iter().all(|m| r.end <= m.start || r.start >= m.end);
    let months = q
        .month_en
        .captures_iter(text)
        // "this may take long": a lower-case "may" is the verb.
        .filter(|c| free(c.get(0).expect("whole match").range()) && &c[1] != "may")
        .filter_map(|c| month_en(&c[1]))
        .chain(
            q.month_zh
                .captures_iter(text)
                .filter(|c| {
                    let r = c.get(0).expect("whole match").range();
                    // 2023年5月 and 5月3号 are mentions already; 三个月 is a duration.
                    free(r.clone()) && !text[..r.start].ends_with('年') && !c[0].contains('个')
                })
                .filter_map(|c| num(&c[1]).filter(|m| (1..=12).contains(m))),
        );
    for month in months {
        for from in recent_years(a).filter_map(|y| NaiveDate::from_ymd_opt(y, month, 1)) {
            out.push((from, add_months(from, 1)));
        }
    }
    out.into_iter().map(|(from, to)| (ms(from), ms(to))).collect()
}

/// The years a month or season named without one may mean: ten back from `a`'s to the next.
fn recent_years(a: NaiveDate) -> std::ops::RangeInclusive<i32> {
    a.year() - 10..=a.year() + 1
}

/// The seasons a question names (northern: spring from March, summer from June, autumn from
/// September, winter from December), and where it names them: "summer 2021", "the summer of
/// 2021", "last summer" (the latest one over before `a`), "this winter", "next spring", 去年夏天,
/// 2021年冬天 ("this summer" is this year's, whether over or not); "in / during (the) summer"
/// is the summer of every recent year. A bare "summer" ("I love summer") or "fall" names no time.
fn season_spans(
    text: &str,
    a: NaiveDate,
    q: &QueryRules,
) -> (Vec<(NaiveDate, NaiveDate)>, Vec<std::ops::Range<usize>>) {
    let start = |year: i32, s: u32| NaiveDate::from_ymd_opt(year, [3, 6, 9, 12][s as usize], 1);
    let span = |d: NaiveDate| (d, add_months(d, 3));
    let (mut out, mut ranges) = (Vec::new(), Vec::new());
    let season_en = |w: &str| match w.to_ascii_lowercase().as_str() {
        "spring" => 0,
        "summer" => 1,
        "autumn" | "fall" => 2,
        _ => 3,
    };
    for c in q.season_en.captures_iter(text) {
        let season = season_en(&c["season"]);
        let found: Vec<NaiveDate> = if let Some(y) = c.name("year") {
            y.as_str().parse().ok().and_then(|y| start(y, season)).into_iter().collect()
        } else if let Some(rel) = c.name("rel") {
            let years = (a.year() - 2..=a.year() + 1).filter_map(|y| start(y, season));
            let pick = match rel.as_str().to_ascii_lowercase().as_str() {
                "next" | "coming" => years.filter(|d| *d > a).min(),
                // The one of this year (a winter from the December before, in January and February).
                "this" => start(if season == 3 && a.month() <= 2 { a.year() - 1 } else { a.year() }, season),
                _ => years.filter(|d| add_months(*d, 3) <= a).max(),
            };
            pick.into_iter().collect()
        } else if c.name("prep").is_some() {
            recent_years(a).filter_map(|y| start(y, season)).collect()
        } else {
            continue;
        };
        out.extend(found.into_iter().map(span));
        ranges.push(c.get(0).expect("whole match").range());
    }
    for c in q.season_zh.captures_iter(text) {
        let season = "春夏秋冬".chars().position(|s| c["season"].starts_with(s)).unwrap_or(0) as u32;
        let year = match (c.name("rel").map(|m| m.as_str()), c.name("year")) {
            (_, Some(y)) => y.as_str().parse().ok(),
            (Some("前年"), _) => Some(a.year() - 2),
            (Some("去年"), _) => Some(a.year() - 1),
            (Some("今年"), _) => Some(a.year()),
            (Some("明年"), _) => Some(a.year() + 1),
            _ => None,
        };
        if let Some(d) = year.and_then(|y| start(y, season)) {
            out.push(span(d));
            ranges.push(c.get(0).expect("whole match").range());
        }
    }
    (out, ranges)
}

/// The patterns only a question's time spans read (see [`spans`]).
struct QueryRules {
    season_en: Regex,
    season_zh: Regex,
    between: Regex,
    and: Regex,
    relative_to: Regex,
    part_of: Regex,
    month_en: Regex,
    month_zh: Regex,
}

fn query_rules() -> &'static QueryRules {
    static RULES: OnceLock<QueryRules> = OnceLock::new();
    RULES.get_or_init(|| {
        let r = |p: &str| Regex::new(p).expect("query date rule");
        QueryRules {
            season_en: r(
                r"(?i)\b(?:(?P<rel>last|this|next|coming|past)\s+|(?P<prep>in|during|over)\s+(?:the\s+)?)?(?P<season>spring|summer|autumn|fall|winter)(?:\s+(?:of\s+)?(?P<year>\d{4}))?\b",
            ),
            season_zh: r(r"(?:(?P<rel>前年|去年|今年|明年)|(?P<year>\d{4})\s*年)?\s*的?\s*(?P<season>[春夏秋冬])(?:天|季)"),
            between: r(r"(?i)\b(?:between|from)\s+$"),
            and: r(r"(?i)^\s*(?:and|to|-|–)\s*$"),
            relative_to: r(&format!(
                r"(?i)(?:\b{NUM_EN}\s+(day|week|month)s?|\bthe\s+(day|week|weekend|month)|\b(?:the\s+)?{WD_EN}|\bweekend)\s+(?P<dir>before|after|prior\s+to)\s+(?:on\s+)?$"
            )),
            part_of: r(r"(?i)\b(first|second|third|fourth|last)\s+(week|half)\s+of\s+(?:the\s+month\s+of\s+)?$"),
            month_en: r(&format!(r"(?i)\b(?:in|during|since|until|by|of|early|late|mid|this|last|next)[\s-]+(?:early\s+|late\s+|mid-?\s*)?{MON_EN}\b")),
            month_zh: r(r"(\d{1,2}|十[一二]?|[一二三四五六七八九])\s*(?:个)?月份?"),
        }
    })
}

fn unit_days(unit: &str) -> i64 {
    match unit.to_ascii_lowercase().as_str() {
        "day" => 1,
        "month" => 30,
        _ => 7,
    }
}

fn add_months(d: NaiveDate, n: u32) -> NaiveDate {
    d.checked_add_months(chrono::Months::new(n)).unwrap_or(d)
}
