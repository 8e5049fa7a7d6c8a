//! Tests of `context`: layouts (insta snapshots), the budget, the order of admission.

use super::*;
use crate::model::{NewEvent, Role};
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
    let info = json!({"summary": summary}).as_object().unwrap().clone();
    ScoredEvent::new(NewEvent::of_user(1, "event_v1", "u", info, t).stored_as(id.into()), Scores::default(), None)
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
        since: Default::default(),
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
    assert!(first >= 2 && mixed.included.cross_events[..first].iter().all(|e| e.event.source_message_ids.len() == 4));
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

#[test]
fn a_changed_value_is_shown_with_its_span() {
    let mut p = profile();
    p.content = String::new();
    p.attributes = json!({"city": "Munich", "likes": ["tea", "jazz"]}).as_object().unwrap().clone();
    let version = |attribute: &str, value: Value, valid_to| crate::model::AttributeVersion {
        attribute: attribute.into(),
        value,
        valid_from: None,
        valid_to,
        session_id: None,
    };
    // 2024-04-03 and 2023-01-01: the latest replaced value is the one shown; a list shows none.
    p.history = vec![
        version("city", json!("Hamburg"), 1_672_531_200_000),
        version("city", json!("Berlin"), 1_712_102_400_000),
        version("likes", json!(["tea"]), 1_712_102_400_000),
    ];
    assert_eq!(
        profile_lines(&p, Locale::En),
        vec!["- City: Munich (since 2024-04-03; before: Berlin)".to_string(), "- Likes: tea, jazz".to_string()]
    );
    assert_eq!(profile_lines(&p, Locale::Zh)[0], "- 居住城市: Munich（2024-04-03起；此前：Berlin）");
    p.history.truncate(1);
    p.history[0].value = json!("Munich");
    assert_eq!(profile_lines(&p, Locale::En)[0], "- City: Munich", "a value set again is no change");
}
