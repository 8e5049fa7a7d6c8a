//! Tests of `dates`.

use super::*;

/// Sunday 2026-11-29, 10:00 at UTC+8.
fn anchor() -> DateTime<FixedOffset> {
    FixedOffset::east_opt(8 * 3600).unwrap().with_ymd_and_hms(2026, 11, 29, 10, 0, 0).unwrap()
}

/// Midnight of a day at the anchor's offset, in milliseconds.
fn day(y: i32, m: u32, d: u32) -> i64 {
    FixedOffset::east_opt(8 * 3600).unwrap().with_ymd_and_hms(y, m, d, 0, 0, 0).unwrap().timestamp_millis()
}

fn resolve(text: &str) -> Vec<String> {
    find_dates(text, anchor()).iter().map(|m| format!("{}={}", &text[m.start..m.end], m.render())).collect()
}

#[test]
fn a_question_names_spans_of_time() {
    assert_eq!(spans("What did Jon do on May 23, 2023?", anchor()), vec![(day(2023, 5, 22), day(2023, 5, 25))]);
    assert_eq!(spans("what happened on 25 February, 2022", anchor()), vec![(day(2022, 2, 24), day(2022, 2, 27))]);
    assert_eq!(
        spans("Which class did Maria start in December 2023?", anchor()),
        vec![(day(2023, 12, 1), day(2024, 1, 1))]
    );
    assert_eq!(spans("我2023年5月去了哪里", anchor()), vec![(day(2023, 5, 1), day(2023, 6, 1))]);
    // Relative to when it is asked (Sunday 2026-11-29): last week is Monday 16 to Monday 23.
    assert_eq!(spans("what did we discuss last week?", anchor()), vec![(day(2026, 11, 16), day(2026, 11, 23))]);
    assert_eq!(spans("昨天聊了什么", anchor()), vec![(day(2026, 11, 27), day(2026, 11, 30))]);
    assert!(spans("What are Nate's pets?", anchor()).is_empty());
}

#[test]
fn a_question_names_time_relative_to_a_date_between_dates_and_in_parts_of_a_month() {
    // From that much before the named day to the day itself, one day either side.
    assert_eq!(
        spans("Where was Tim in the week before 16 November 2023?", anchor()),
        vec![(day(2023, 11, 8), day(2023, 11, 18))]
    );
    assert_eq!(
        spans("What puppy did she get two weeks before August 11, 2023?", anchor()),
        vec![(day(2023, 7, 27), day(2023, 8, 13))]
    );
    assert_eq!(
        spans("what did she do the Sunday before October 25, 2022", anchor()),
        vec![(day(2022, 10, 17), day(2022, 10, 27))]
    );
    assert_eq!(
        spans("What did Maria do last weekend before April 10, 2023?", anchor()),
        vec![(day(2023, 4, 2), day(2023, 4, 12))]
    );
    assert_eq!(spans("the day after May 3, 2023", anchor()), vec![(day(2023, 5, 2), day(2023, 5, 6))]);
    // One year serves both ends.
    assert_eq!(
        spans("Where was John between August 11 and August 15 2023?", anchor()),
        vec![(day(2023, 8, 10), day(2023, 8, 17))]
    );
    assert_eq!(spans("the first half of September 2022", anchor()), vec![(day(2022, 9, 1), day(2022, 9, 16))]);
    assert_eq!(spans("in the second week of March 2024", anchor()), vec![(day(2024, 3, 8), day(2024, 3, 15))]);
    assert_eq!(spans("the last week of February 2023", anchor()), vec![(day(2023, 2, 22), day(2023, 3, 1))]);
    // A message's anchoring reads none of it: only the dates themselves.
    assert_eq!(resolve("two weeks before August 11, 2023"), ["August 11, 2023=2023-08-11"]);
}

#[test]
fn a_month_without_a_year_is_that_month_of_every_recent_year() {
    let junes: Vec<(i64, i64)> = (2016..=2027).map(|y| (day(y, 6, 1), day(y, 7, 1))).collect();
    assert_eq!(spans("When did Melanie go camping in June?", anchor()), junes);
    assert_eq!(spans("what did I buy in early June", anchor()), junes);
    assert_eq!(spans("我6月份去了哪里", anchor()), junes);
    assert_eq!(spans("六月买了什么", anchor()), junes);
    // Not a month: a duration, a modal verb, a month already dated.
    assert!(spans("三个月前的事", anchor()).iter().all(|s| *s != junes[0]));
    assert!(spans("I may go there", anchor()).is_empty());
    assert!(spans("this may take a while", anchor()).is_empty());
    assert_eq!(spans("What did I do in May?", anchor()).len(), 12);
    assert_eq!(spans("in June 2023", anchor()), vec![(day(2023, 6, 1), day(2023, 7, 1))]);
    assert_eq!(spans("on June 5, 2023", anchor()), vec![(day(2023, 6, 4), day(2023, 6, 7))]);
    // Nothing is read into the anchoring of a message.
    assert!(resolve("we met in June").is_empty());
}

#[test]
fn a_question_names_seasons() {
    // Asked on Sunday 2026-11-29.
    let summer = |y| (day(y, 6, 1), day(y, 9, 1));
    assert_eq!(spans("What state did Joanna visit in summer 2021?", anchor()), vec![summer(2021)]);
    assert_eq!(spans("the summer of 2022", anchor()), vec![summer(2022)]);
    assert_eq!(spans("What did we see last summer?", anchor()), vec![summer(2026)]);
    assert_eq!(spans("where do we go next summer", anchor()), vec![summer(2027)]);
    assert_eq!(spans("what did I plan for this winter", anchor()), vec![(day(2026, 12, 1), day(2027, 3, 1))]);
    assert_eq!(spans("last winter", anchor()), vec![(day(2025, 12, 1), day(2026, 3, 1))]);
    assert_eq!(spans("去年夏天去了哪里", anchor()), vec![summer(2025)]);
    assert_eq!(spans("2023年冬天", anchor()), vec![(day(2023, 12, 1), day(2024, 3, 1))]);
    assert_eq!(
        spans("When did Caroline go to a pride parade during the summer?", anchor()),
        (2016..=2027).map(summer).collect::<Vec<_>>()
    );
    // Not a time: a season liked, a fall taken, 夏天 without a year.
    assert!(spans("I love summer", anchor()).is_empty());
    assert!(spans("she had a fall in the kitchen", anchor()).is_empty());
    assert!(spans("我喜欢夏天", anchor()).is_empty());
}

#[test]
fn english_relative_days() {
    assert_eq!(resolve("I went hiking yesterday"), ["yesterday=2026-11-28"]);
    assert_eq!(resolve("the day before yesterday"), ["the day before yesterday=2026-11-27"]);
    assert_eq!(resolve("Tomorrow I fly"), ["Tomorrow=2026-11-30"]);
    assert_eq!(resolve("last Tuesday and next Friday"), ["last Tuesday=2026-11-24", "next Friday=2026-12-04"]);
    assert_eq!(resolve("3 days ago"), ["3 days ago=2026-11-26"]);
    assert_eq!(resolve("two weeks ago"), ["two weeks ago=2026-11-15"]);
    assert_eq!(resolve("in 2 days"), ["in 2 days=2026-12-01"]);
    assert_eq!(resolve("I'm not sure, but I'll be back in a few days"), ["in a few days=2026-12-02"]);
    // A span up to now, no day ahead.
    assert!(resolve("We haven't talked in a few days").is_empty());
    assert!(resolve("Rome wasn't built in a day").is_empty());
    assert!(resolve("the first time in two years that I went skiing").is_empty());
    assert_eq!(resolve("last week"), ["last week=2026-11-16 week"]);
    assert_eq!(resolve("next month"), ["next month=2026-12"]);
    assert_eq!(resolve("on April 6th"), ["April 6th=2027-04-06"]);
    assert_eq!(resolve("on 3 November"), ["3 November=2026-11-03"]);
    assert_eq!(resolve("May 7, 2023"), ["May 7, 2023=2023-05-07"]);
}

#[test]
fn chinese_relative_days() {
    assert_eq!(resolve("我昨天去爬山了"), ["昨天=2026-11-28"]);
    assert_eq!(resolve("前天和大后天"), ["前天=2026-11-27", "大后天=2026-12-02"]);
    // Chinese weeks are calendar weeks: 上周三 is the Wednesday of last week.
    assert_eq!(resolve("上周三开会"), ["上周三=2026-11-18"]);
    assert_eq!(resolve("下周一出差"), ["下周一=2026-11-30"]);
    assert_eq!(resolve("这周五"), ["这周五=2026-11-27"]);
    assert_eq!(resolve("三天前"), ["三天前=2026-11-26"]);
    assert_eq!(resolve("两周后"), ["两周后=2026-12-13"]);
    assert_eq!(resolve("十一月五号"), ["十一月五号=2026-11-05"]);
    assert_eq!(resolve("5月3日"), ["5月3日=2027-05-03"]);
    assert_eq!(resolve("2025年3月1日"), ["2025年3月1日=2025-03-01"]);
    assert_eq!(resolve("去年"), ["去年=2025"]);
    assert_eq!(resolve("上个月"), ["上个月=2026-10"]);
}

#[test]
fn the_anchor_is_the_message_time_in_its_offset() {
    // 2026-11-28 23:30 UTC is already the 29th at UTC+8.
    let ms = chrono::Utc.with_ymd_and_hms(2026, 11, 28, 23, 30, 0).unwrap().timestamp_millis();
    let at8 = local(ms, parse_offset("+08:00").unwrap());
    let utc = local(ms, parse_offset("UTC").unwrap());
    assert_eq!(find_dates("昨天", at8)[0].date.to_string(), "2026-11-28");
    assert_eq!(find_dates("昨天", utc)[0].date.to_string(), "2026-11-27");
    assert_eq!(parse_offset("-05:30"), FixedOffset::west_opt(5 * 3600 + 1800));
    assert_eq!(parse_offset("8"), None);
}

#[test]
fn anchoring_annotates_relative_dates_once() {
    let a = anchor_text("我昨天去爬山，下周三要出差", anchor());
    assert_eq!(a.text, "我昨天（2026-11-28）去爬山，下周三（2026-12-02）要出差");
    assert_eq!(a.event_date, NaiveDate::from_ymd_opt(2026, 11, 28));
    assert_eq!(anchor_text(&a.text, anchor()).text, a.text, "idempotent");
    let e = anchor_text("Went to the gym yesterday; on 2026-11-01 too.", anchor());
    assert_eq!(e.text, "Went to the gym yesterday (2026-11-28); on 2026-11-01 too.");
    // A day ahead has not happened: the event is of the first past day named, or of none.
    let plan = anchor_text("Tomorrow I fly to Rome; yesterday I packed.", anchor());
    assert_eq!(plan.event_date, NaiveDate::from_ymd_opt(2026, 11, 28));
    assert_eq!(anchor_text("下周三要出差", anchor()).event_date, None);
    let none = anchor_text("no dates here, just words like todays or mayday", anchor());
    assert_eq!(none.event_date, None);
}

#[test]
fn a_weekday_named_alone_goes_the_way_its_clause_tells() {
    // Anchor: Sunday 2026-11-29. Alone, "on Friday" is the nearest (the 27th, two days back) and
    // 周五 this week's (the 27th too).
    assert_eq!(resolve("We met on Friday at noon"), vec!["on Friday=2026-11-27"]);
    assert_eq!(resolve("周五去体检"), vec!["周五=2026-11-27"]);
    // A plan is the coming one.
    assert_eq!(resolve("On Friday I'll see the dentist."), vec!["On Friday=2026-12-04"]);
    assert_eq!(resolve("I am going to paint on Friday, then rest"), vec!["on Friday=2026-12-04"]);
    assert_eq!(resolve("周五要去体检"), vec!["周五=2026-12-04"]);
    // Only its own clause counts; a prefix says it already.
    assert_eq!(resolve("I will call you. We met on Friday"), vec!["on Friday=2026-11-27"]);
    assert_eq!(resolve("下周五要去体检"), vec!["下周五=2026-12-04"]);
    assert_eq!(
        resolve("我想再给他报个游泳。周日上午比较合适"),
        vec!["周日=2026-11-29"],
        "after a full stop of three bytes"
    );
    assert_eq!(resolve("报个游泳。周五要去"), vec!["周五=2026-12-04"]);
    // Told in the past, a day ahead is last week's: Tuesday's "on Thursday I went" is the 19th.
    let tuesday = FixedOffset::east_opt(8 * 3600).unwrap().with_ymd_and_hms(2026, 11, 24, 10, 0, 0).unwrap();
    let at_tuesday = |t: &str| find_dates(t, tuesday).iter().map(|m| m.render()).collect::<Vec<_>>();
    assert_eq!(at_tuesday("On Thursday I went hiking"), vec!["2026-11-19"]);
    assert_eq!(at_tuesday("On Thursday I finished the book"), vec!["2026-11-19"]);
    assert_eq!(at_tuesday("On Thursday I need a break"), vec!["2026-11-26"], "\"need\" is no past tense");
    assert_eq!(at_tuesday("On Thursday I will go hiking"), vec!["2026-11-26"]);
}

#[test]
fn the_days_a_text_writes_out_are_found_in_order() {
    let d = |y, m, dd| NaiveDate::from_ymd_opt(y, m, dd).unwrap();
    let plan = anchor_text("我昨天去爬山，下周三要出差. Tomorrow I fly.", anchor()).text;
    assert_eq!(days_named(&plan), vec![d(2026, 11, 28), d(2026, 12, 2), d(2026, 11, 30)]);
    assert_eq!(days_named("2026-01-05 at the start, and at the end 2026-02-28"), vec![d(2026, 1, 5), d(2026, 2, 28)]);
    // Not a day: more digits around it, an impossible date, a month, a version number.
    for text in
        ["12026-01-05", "2026-01-051", "2026-02-30", "(2026-09)", "v2026.01.05", "2026-1-5", "会议（2026-13-01）"]
    {
        assert_eq!(days_named(text), vec![], "{text}");
    }
    assert_eq!(days_named("第一次（2026-11-28）"), vec![d(2026, 11, 28)], "after a multi-byte character");
    let noon = at_hour(d(2026, 11, 28), 12, *anchor().offset()).unwrap();
    assert_eq!(noon, day(2026, 11, 28) + 12 * 3_600_000);
}

#[test]
fn a_stated_start_is_when_a_fact_became_true() {
    let start = |t: &str| stated_start(t, anchor()).map(|d| d.to_string());
    // Anchor: Sunday 2026-11-29.
    assert_eq!(start("I've lived in Munich since 2013").as_deref(), Some("2013-01-01"));
    assert_eq!(start("Last month I moved to Munich").as_deref(), Some("2026-10-01"));
    assert_eq!(start("I have been running for three years").as_deref(), Some("2023-11-29"));
    assert_eq!(start("since March 3, 2024 I work at Acme").as_deref(), Some("2024-03-03"));
    assert_eq!(start("我从2019年起就在上海工作").as_deref(), Some("2019-01-01"));
    assert_eq!(start("上个月我搬到了杭州").as_deref(), Some("2026-10-01"));
    // A named day dates the event itself; the future and the unresolved start nothing.
    assert_eq!(start("Yesterday I went hiking"), None);
    assert_eq!(start("Next month I move to Paris"), None);
    assert_eq!(start("I have skied since I was ten"), None);
    assert_eq!(start("豆豆的妹妹朵朵今年三岁"), None, "this year is not over: no start");
    assert_eq!(start("去年我开始学书法").as_deref(), Some("2025-01-01"));
    assert_eq!(start("我2023年5月去了成都").as_deref(), Some("2023-05-01"));
}

#[test]
fn every_weekday_is_no_date() {
    assert!(resolve("我每周日上午学粤语，每周三下午接孙子").is_empty());
    assert!(resolve("每个星期五都去吃小龙虾").is_empty());
    assert_eq!(resolve("上周日去了西湖"), vec!["上周日=2026-11-22"]);
}
