//! The `Service` at its own boundary: the in-memory store, the hashing embedder, a scripted
//! extractor and a clock that moves only when told — so ranking with the global-layer fallback,
//! `get_context` assembly and dedup/supersede are tested in milliseconds, with snapshots of what a
//! client would see (ids left out: they are random).

use async_trait::async_trait;
use mnemo_core::embed::HashingEmbedder;
use mnemo_core::extract::{ExtractedEvent, Extractor, ProfileChange};
use mnemo_core::ranking;
use mnemo_core::service::*;
use mnemo_core::store::prelude::*;
use mnemo_core::*;
use mnemo_testing::MemoryStore;
use serde_json::{Map, Value, json};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

/// 2026-01-01T00:00:00Z, moved forward by the tests.
struct TestClock(AtomicI64);

impl Clock for TestClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Hands out prepared outputs in order; with none left, one `event_v1` per user message.
#[derive(Default)]
struct Scripted(Mutex<VecDeque<ExtractionOutput>>);

#[async_trait]
impl Extractor for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }

    /// Corrections are only accepted for events the extractor was shown.
    fn wants_related_events(&self) -> bool {
        true
    }

    async fn extract(&self, input: ExtractionInput) -> Result<ExtractionOutput, ExtractError> {
        if let Some(out) = self.0.lock().unwrap().pop_front() {
            return Ok(out);
        }
        let events = input
            .messages
            .iter()
            .filter(|m| m.role == Role::User)
            .map(|m| {
                let mut e = ExtractedEvent::new(EVENT_V1, info(&m.content), m.time);
                e.source_message_ids = vec![m.message_id];
                e
            })
            .collect();
        Ok(ExtractionOutput { events, ..Default::default() })
    }
}

fn info(summary: &str) -> Map<String, Value> {
    json!({"summary": summary}).as_object().unwrap().clone()
}

struct Fixture {
    svc: Arc<Service>,
    clock: Arc<TestClock>,
    script: Arc<Scripted>,
    embedder: Arc<Counting>,
}

/// The hashing embedder, counting the queries it embeds and the calls for documents.
struct Counting(HashingEmbedder, std::sync::atomic::AtomicUsize, std::sync::atomic::AtomicUsize);

#[async_trait]
impl Embedder for Counting {
    fn model_id(&self) -> &str {
        self.0.model_id()
    }

    fn dimension(&self) -> usize {
        self.0.dimension()
    }

    async fn embed(&self, texts: &[String], kind: EmbedKind) -> Result<Vec<Vec<f32>>, mnemo_core::embed::EmbedError> {
        match kind {
            EmbedKind::Query => self.1.fetch_add(texts.len(), Ordering::SeqCst),
            EmbedKind::Document => self.2.fetch_add(1, Ordering::SeqCst),
        };
        self.0.embed(texts, kind).await
    }
}

const T0: i64 = 1_767_225_600_000;
const HOUR: i64 = 3_600_000;

fn fixture() -> Fixture {
    let clock = Arc::new(TestClock(AtomicI64::new(T0)));
    let script = Arc::new(Scripted::default());
    let embedder = Arc::new(Counting(HashingEmbedder { dim: 256 }, Default::default(), Default::default()));
    let svc = Service::new(
        Arc::new(MemoryStore::new()),
        Extractors::new("scripted", script.clone()),
        embedder.clone(),
        clock.clone(),
        ServiceConfig::default(),
    );
    Fixture { svc, clock, script, embedder }
}

fn target() -> Target {
    Target { project: "default".into(), collection: "c".into() }
}

impl Fixture {
    fn tick(&self, ms: i64) {
        self.clock.0.fetch_add(ms, Ordering::SeqCst);
    }

    async fn add(&self, user: &str, scope: Option<&str>, summary: &str) -> Event {
        self.tick(HOUR);
        self.svc
            .add_event(AddEventRequest {
                target: target(),
                memory_type: EVENT_V1.into(),
                user_id: vec![user.into()],
                assistant_id: vec![],
                group_id: None,
                session_id: None,
                conversation_id: None,
                scope: scope.map(String::from),
                class: None,
                time: None,
                memory_info: info(summary),
                ttl_relative: None,
                ttl_absolute: None,
            })
            .await
            .unwrap()
    }

    /// Writes the turns as one conversation's messages; the trigger closes them into a session
    /// after `close_after` messages, and every due extraction runs.
    async fn converse(&self, conv: &str, user: &str, turns: &[(&str, &str)], close_after: i64) -> AppendOutcome {
        self.tick(HOUR);
        let messages = turns
            .iter()
            .map(|(role, content)| IncomingMessage {
                role: Role::parse(role).unwrap(),
                content: content.to_string(),
                name: None,
                time: None,
                idempotency_key: None,
            })
            .collect();
        let out = self
            .svc
            .streaming_write(WriteRequest {
                project: "default".into(),
                collection: "c".into(),
                conversation_id: conv.into(),
                messages,
                trigger: ExtractTrigger::from_parts(None, Some(close_after), None, ExtractTrigger::default()).unwrap(),
                meta: ConversationMeta { user_id: Some(user.into()), ..Default::default() },
            })
            .await
            .unwrap();
        while self.svc.try_run_one().await.unwrap() {}
        out
    }

    async fn search(&self, query: &str, scope: &[&str], limit: u32) -> Vec<ScoredEvent> {
        let filter = EventFilter {
            user_id: vec!["u1".into()],
            scope: scope.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        self.svc.search_events(EventSearch::new(target(), Some(query.into()), filter, limit)).await.unwrap()
    }
}

/// One line per result: layer, score, text — what ranking decided, without the random ids.
fn render(results: &[ScoredEvent]) -> String {
    results
        .iter()
        .map(|r| {
            format!(
                "{:<7} {:.3} [{}] {}",
                r.layer.as_deref().unwrap_or("-"),
                r.scores.score,
                r.event.status,
                r.event.text()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn ranking_prefers_the_matching_memories_and_falls_back_to_the_global_layer() {
    let f = fixture();
    f.add("u1", Some("work"), "Deploys the billing service every Friday afternoon").await;
    f.add("u1", Some("work"), "The billing service is written in Rust").await;
    f.add("u1", Some("global"), "Prefers short answers with code examples").await;
    f.add("u1", Some("global"), "Lives in Lisbon and works remotely").await;
    f.add("u2", Some("work"), "Another user's billing notes").await;
    f.add("u1", Some("home"), "Waters the plants on Sundays").await;

    let scoped = f.search("billing service deploy", &["work"], 4).await;
    // Two work memories rank first (best match first), then global ones fill the page; another
    // user's memory and the `home` scope never appear.
    insta::assert_snapshot!(render(&scoped), @r"
    work    0.707 [active] Deploys the billing service every Friday afternoon
    work    0.577 [active] The billing service is written in Rust
    global  0.000 [active] Lives in Lisbon and works remotely
    global  0.000 [active] Prefers short answers with code examples
    ");
    // A full page from the scope needs no fallback.
    let full = f.search("billing service", &["work"], 2).await;
    assert!(full.iter().all(|r| r.layer.as_deref() == Some("work")), "{}", render(&full));
    // Without a scope filter every scope of the user is searched; the best match still leads.
    let all = f.search("plants sundays", &[], 3).await;
    assert_eq!(all[0].event.text(), "Waters the plants on Sundays", "{}", render(&all));
}

#[tokio::test]
async fn get_context_assembles_profile_turns_and_events_within_the_budget() {
    let f = fixture();
    // An earlier conversation, extracted: its events are "other conversations" for the next one.
    f.converse(
        "trip",
        "u1",
        &[("user", "I am planning a trip to Kyoto in April"), ("assistant", "Lovely season for it.")],
        2,
    )
    .await;
    f.converse("coffee", "u1", &[("user", "I switched to decaf coffee"), ("assistant", "Noted.")], 2).await;
    f.svc
        .add_profile(
            &target(),
            PROFILE_V1.into(),
            "u1".into(),
            None,
            None,
            json!({"city": "Lisbon", "name": "Ana"}).as_object().unwrap().clone(),
            false,
        )
        .await
        .unwrap();
    // The current conversation: one extracted session, then turns still in short-term memory.
    f.converse("now", "u1", &[("user", "Book a hotel near the Kyoto station"), ("assistant", "Which dates?")], 2).await;
    let pending = f.converse("now", "u1", &[("user", "The first week of April")], 20).await;
    assert_eq!(pending.pending_messages, 1);

    let ask = |max_tokens: u32| ContextRequest {
        target: target(),
        conversation_id: "now".into(),
        query: Some("Kyoto trip in April".into()),
        event_filter: EventFilter { user_id: vec!["u1".into()], ..Default::default() },
        event_limit: 5,
        decay: ranking::TimeDecay::NONE,
        similarity_threshold: None,
        profile_filter: ProfileFilter { user_id: vec!["u1".into()], ..Default::default() },
        profile_limit: 1,
        max_tokens,
        include: Include::default(),
        locale: None,
    };
    let queries = || f.embedder.1.load(Ordering::SeqCst);
    let before = queries();
    let full = f.svc.get_context(ask(1200)).await.unwrap().assembled;
    assert_eq!(queries(), before + 1, "one query embedding serves both searches");
    assert!(full.token_count <= 1200);
    insta::assert_snapshot!(full.context_str);
    // A tight budget keeps the string under it and drops the lowest-priority parts first.
    let before = queries();
    let tight = f.svc.get_context(ask(60)).await.unwrap().assembled;
    assert_eq!(queries(), before, "the same query again: its vector is cached, not embedded again");
    assert!(tight.token_count <= 60, "{} tokens", tight.token_count);
    assert!(tight.dropped > 0);
    insta::assert_snapshot!(tight.context_str);
    // Nobody to search for (no user named, a conversation nobody started): nothing embedded.
    let before = queries();
    let nobody = ContextRequest {
        conversation_id: "unknown".into(),
        event_filter: EventFilter::default(),
        profile_filter: ProfileFilter::default(),
        ..ask(1200)
    };
    f.svc.get_context(nobody).await.unwrap();
    assert_eq!(queries(), before, "no search, no embedding");
}

#[tokio::test]
async fn near_duplicates_merge_and_a_correction_supersedes_the_old_memory() {
    let f = fixture();
    f.converse("a", "u1", &[("user", "My favourite tea is jasmine green tea")], 1).await;
    // The same fact again, in another conversation: refreshed in place, not stored twice.
    f.converse("b", "u1", &[("user", "My favourite tea is jasmine green tea")], 1).await;
    let listed = |include_archived| {
        let svc = f.svc.clone();
        async move {
            let mut req =
                EventSearch::new(target(), None, EventFilter { user_id: vec!["u1".into()], ..Default::default() }, 50);
            req.include_archived = include_archived;
            render(&svc.search_events(req).await.unwrap())
        }
    };
    insta::assert_snapshot!(listed(false).await, @"-       1.000 [active] My favourite tea is jasmine green tea");
    let merged = &f.search("jasmine tea", &[], 5).await[0].event;
    assert_eq!(merged.source_message_ids.len(), 2, "both conversations' messages are its sources");

    // A correction: the extractor names the event it replaces.
    let old = merged.id.clone();
    let mut correction = ExtractedEvent::new(EVENT_V1, info("My favourite tea is now oolong"), f.svc.now());
    correction.supersedes = Some(old.clone());
    f.script.0.lock().unwrap().push_back(ExtractionOutput {
        events: vec![correction],
        profile_changes: vec![ProfileChange::Set { key: "favourite_tea".into(), value: json!("oolong") }],
        ..Default::default()
    });
    f.converse("c", "u1", &[("user", "Actually I drink oolong these days")], 1).await;
    insta::assert_snapshot!(listed(false).await, @"-       1.000 [active] My favourite tea is now oolong");
    insta::assert_snapshot!(listed(true).await, @r"
    -       1.000 [active] My favourite tea is now oolong
    -       1.000 [superseded] My favourite tea is jasmine green tea
    ");
    let profile = &f
        .svc
        .list_profiles(&target(), ProfileFilter { user_id: vec!["u1".into()], ..Default::default() }, 5)
        .await
        .unwrap()[0];
    assert_eq!(profile.attributes["favourite_tea"], "oolong");
}

#[tokio::test]
async fn a_question_naming_a_time_lifts_the_memories_of_that_time() {
    let svc = service_with(RetrievalConfig { date_weight: 0.3, ..Default::default() }, Default::default());
    let day = |y, m, d| {
        chrono::NaiveDate::from_ymd_opt(y, m, d).unwrap().and_hms_opt(12, 0, 0).unwrap().and_utc().timestamp_millis()
    };
    let add = |summary: &'static str, time: i64| add_at(&svc, None, time, summary);
    let may = add("Took the kids to the aquarium", day(2025, 5, 23)).await;
    let august = add("Took the kids to the aquarium", day(2025, 8, 10)).await;
    let december = add("Took the kids to the aquarium", day(2025, 12, 27)).await;
    let search = |q: &str| {
        let svc = svc.clone();
        let q = q.to_string();
        async move {
            let filter = EventFilter { user_id: vec!["u1".into()], ..Default::default() };
            svc.search_events(EventSearch::new(target(), Some(q), filter, 3)).await.unwrap()
        }
    };
    // The same text three times: only the named time tells them apart.
    for (q, want) in [
        ("When did we go to the aquarium on May 23, 2025?", &may),
        ("the aquarium in August 2025", &august),
        // Asked on Thursday 2026-01-01: last week is Monday 22 to Sunday 28 December.
        ("aquarium last week", &december),
    ] {
        let got = search(q).await;
        assert_eq!(got[0].event.id, want.id, "{q}: {}", render(&got));
        let (lifted, other) = (&got[0].scores, &got[1].scores);
        assert!((lifted.score - lifted.origin_score * 1.3).abs() < 1e-9, "{q}: ranked ×1.3, origin_score unchanged");
        assert_eq!(other.score, other.origin_score, "{q}: the others keep their relevance");
    }
    let got = search("the aquarium").await;
    assert!(got.iter().all(|r| r.scores.score == r.scores.origin_score), "no time named: no lift");
}

/// Adds one turn as an event of `session` (no provenance), `seconds` after `T0`.
async fn add_turn(svc: &Service, session: Option<&str>, seconds: i64, text: &str) -> Event {
    add_at(svc, session, T0 + seconds * 1000, text).await
}

/// A service over the in-memory store with these retrieval settings and extractor script.
fn service_with(retrieval: RetrievalConfig, script: Arc<Scripted>) -> Arc<Service> {
    Service::new(
        Arc::new(MemoryStore::new()),
        Extractors::new("scripted", script),
        Arc::new(HashingEmbedder { dim: 256 }),
        Arc::new(TestClock(AtomicI64::new(T0))),
        ServiceConfig { retrieval, ..Default::default() },
    )
}

/// Writes one session of user `u1` (conversation `conv`, closed by its last message) and runs its
/// extraction (the extractor's script decides the events).
async fn write_session(svc: &Service, messages: Vec<IncomingMessage>) {
    let n = messages.len() as i64;
    svc.streaming_write(WriteRequest {
        project: "default".into(),
        collection: "c".into(),
        conversation_id: "conv".into(),
        messages,
        trigger: ExtractTrigger::from_parts(None, Some(n), None, ExtractTrigger::default()).unwrap(),
        meta: ConversationMeta { user_id: Some("u1".into()), ..Default::default() },
    })
    .await
    .unwrap();
    while svc.try_run_one().await.unwrap() {}
}

/// Adds one event of user `u1` in `session` (no provenance) at `time`.
async fn add_at(svc: &Service, session: Option<&str>, time: i64, text: &str) -> Event {
    svc.add_event(AddEventRequest {
        target: target(),
        memory_type: EVENT_V1.into(),
        user_id: vec!["u1".into()],
        assistant_id: vec![],
        group_id: None,
        session_id: session.map(String::from),
        conversation_id: None,
        scope: None,
        class: None,
        time: Some(time),
        memory_info: info(text),
        ttl_relative: None,
        ttl_absolute: None,
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn a_hit_that_asks_brings_the_reply_that_shares_no_word_with_the_query() {
    let search = |svc: Arc<Service>, q: &'static str, limit: u32| async move {
        let filter = EventFilter { user_id: vec!["u1".into()], ..Default::default() };
        let found = svc.search_events(EventSearch::new(target(), Some(q.into()), filter, limit)).await.unwrap();
        found.into_iter().map(|r| r.event.text()).collect::<Vec<_>>()
    };
    for reply_hits in [0, 5] {
        let svc = service_with(RetrievalConfig { reply_hits, ..Default::default() }, Default::default());
        // Written out of order: the reply is the next of its session by time, not by insertion.
        add_turn(&svc, Some("s1"), 30, "Tim: Cool! What position are you playing?").await;
        add_turn(&svc, Some("s1"), 10, "Tim: Congrats on the new team! Which team did you sign with?").await;
        add_turn(&svc, Some("s1"), 20, "John: The Minnesota Wolves! I can't wait.").await;
        // Another session's next turn, and a turn without a session: never a reply to s1.
        add_turn(&svc, Some("s2"), 11, "John: Pizza with extra cheese.").await;
        add_turn(&svc, None, 12, "John: Blue, always blue.").await;
        let found = search(svc.clone(), "which team did he sign with", 2).await;
        if reply_hits == 0 {
            assert!(!found.iter().any(|t| t.contains("Wolves")), "{found:?}");
            continue;
        }
        assert_eq!(
            found,
            [
                "Tim: Congrats on the new team! Which team did you sign with?",
                "John: The Minnesota Wolves! I can't wait."
            ]
        );
        // A hit that does not ask brings nothing; the reply's question stays above it.
        let found = search(svc.clone(), "what position are you playing", 2).await;
        assert_eq!(found[0], "Tim: Cool! What position are you playing?");
        assert!(!found.iter().any(|t| t.contains("Pizza") || t.contains("Blue")), "{found:?}");
        // A question outside the search's filter brings nothing into it.
        let filter = EventFilter { user_id: vec!["u1".into()], session_id: vec!["s2".into()], ..Default::default() };
        let found = svc.search_events(EventSearch::new(target(), Some("which team".into()), filter, 3)).await.unwrap();
        assert!(found.iter().all(|r| r.event.session_id.as_deref() == Some("s2")), "{found:?}");
        // A busy session (many more turns that day) still answers: the next turn is read directly.
        add_turn(&svc, Some("s3"), 100, "Tim: And which drink do you order there?").await;
        add_turn(&svc, Some("s3"), 101, "John: Orange juice.").await;
        for i in 0..40 {
            add_turn(&svc, Some("s3"), 200 + i, &format!("John: note {i}")).await;
        }
        let found = search(svc.clone(), "which drink do you order there", 2).await;
        assert_eq!(found, ["Tim: And which drink do you order there?", "John: Orange juice."]);
    }
}

#[tokio::test]
async fn an_extracted_question_is_answered_by_the_event_citing_the_next_message() {
    for reply_hits in [0, 5] {
        let script = Arc::new(Scripted::default());
        let svc = service_with(RetrievalConfig { reply_hits, ..Default::default() }, script.clone());
        let chunk = |text: &str, messages: &[i64], time: i64| {
            let mut e = ExtractedEvent::new(EVENT_V1, info(text), time);
            e.source_message_ids = messages.to_vec();
            e
        };
        // Times out of step with the turns (a merged event takes the later time): provenance
        // decides, and a gap in it (message 5) is no reply.
        script.0.lock().unwrap().push_back(ExtractionOutput {
            events: vec![
                chunk("Anna: I moved last spring. Guess which city I picked?", &[1, 2], T0 + 5_000),
                chunk("Ben: Lisbon? — Porto, the old town.", &[3, 4], T0 + 1_000),
                chunk("Ben: I tried surfing there. Did you?", &[6], T0 + 2_000),
            ],
            ..Default::default()
        });
        let turns: Vec<IncomingMessage> =
            ["I moved last spring.", "Guess which city I picked?", "Lisbon?", "Porto.", "Nice.", "Surfing."]
                .iter()
                .enumerate()
                .map(|(i, content)| IncomingMessage {
                    role: if i % 2 == 0 { Role::User } else { Role::Assistant },
                    content: content.to_string(),
                    name: None,
                    time: None,
                    idempotency_key: None,
                })
                .collect();
        write_session(&svc, turns).await;
        // What outranks the reply without the rule: words of the query.
        add_turn(&svc, None, 1, "Anna moved to a new desk in the city office.").await;
        let filter = EventFilter { user_id: vec!["u1".into()], ..Default::default() };
        let query = EventSearch::new(target(), Some("which city did Anna move to".into()), filter, 2);
        let found: Vec<String> = svc.search_events(query).await.unwrap().iter().map(|r| r.event.text()).collect();
        assert_eq!(found[0], "Anna: I moved last spring. Guess which city I picked?");
        match reply_hits {
            0 => assert!(!found.iter().any(|t| t.contains("Porto")), "{found:?}"),
            _ => assert_eq!(found[1], "Ben: Lisbon? — Porto, the old town."),
        }
    }
}

/// One extracted chunk of four turns where only the third answers "when did Joanna paint the lake
/// at sunrise", and a short event that shares fewer of the question's words, undiluted.
async fn write_lake_chunk(svc: &Service, script: &Scripted) {
    let turns = [
        (Role::User, "Nate", "hey there how was your week honestly"),
        (Role::Assistant, "Joanna", "busy busy with work errands and the kids all week long"),
        (Role::User, "Nate", "Joanna painted the lake at sunrise"),
        (Role::Assistant, "Joanna", "thanks so much glad you like it a lot"),
    ];
    let raw: Vec<String> =
        turns.iter().map(|(r, n, c)| mnemo_core::model::original_message_line(Some(n), *r, c)).collect();
    let mut chunk = Map::new();
    chunk.insert(
        "summary".into(),
        json!(turns.iter().map(|(_, n, c)| format!("{n}: {c}")).collect::<Vec<_>>().join(" ")),
    );
    chunk.insert("original_messages".into(), json!(raw.join("\n")));
    let mut e = ExtractedEvent::new(EVENT_V1, chunk, T0);
    e.source_message_ids = vec![1, 2, 3, 4];
    script.0.lock().unwrap().push_back(ExtractionOutput { events: vec![e], ..Default::default() });
    let messages: Vec<IncomingMessage> = turns
        .iter()
        .map(|(role, name, content)| IncomingMessage {
            role: *role,
            content: content.to_string(),
            name: Some(name.to_string()),
            time: None,
            idempotency_key: None,
        })
        .collect();
    write_session(svc, messages).await;
    add_turn(svc, None, 1, "Joanna saw the lake").await;
}

/// The first of the two events `write_lake_chunk` wrote, for its question, with both scores.
async fn lake_search(svc: &Service) -> (String, Vec<f64>) {
    let filter = EventFilter { user_id: vec!["u1".into()], ..Default::default() };
    let query = EventSearch::new(target(), Some("when did Joanna paint the lake at sunrise".into()), filter, 2);
    let found = svc.search_events(query).await.unwrap();
    assert_eq!(found.len(), 2);
    (found[0].event.text(), found.iter().map(|r| r.scores.origin_score).collect())
}

#[tokio::test]
async fn a_chunk_is_found_by_the_turn_that_answers_not_by_its_small_talk() {
    for turn_weight in [0.0, 0.5] {
        let script = Arc::new(Scripted::default());
        let svc = service_with(RetrievalConfig { turn_weight, ..Default::default() }, script.clone());
        write_lake_chunk(&svc, &script).await;
        let (first, scores) = lake_search(&svc).await;
        match turn_weight {
            0.0 => assert_eq!(first, "Joanna saw the lake", "{scores:?}"),
            _ => assert!(first.contains("painted the lake at sunrise"), "{first} {scores:?}"),
        }
    }
}

#[tokio::test]
async fn events_an_older_release_stored_get_their_turns_vectors_in_the_background() {
    let store = MemoryStore::new();
    let script = Arc::new(Scripted::default());
    let on = |turn_weight| {
        Service::new(
            Arc::new(store.clone()),
            Extractors::new("scripted", script.clone()),
            Arc::new(HashingEmbedder { dim: 256 }),
            Arc::new(TestClock(AtomicI64::new(T0))),
            ServiceConfig { retrieval: RetrievalConfig { turn_weight, ..Default::default() }, ..Default::default() },
        )
    };
    let svc = on(0.5);
    write_lake_chunk(&svc, &script).await;
    assert_eq!(store.events_with_turns(), 1);
    store.as_written_before_turns();
    // Until the backfill, the chunk ranks by its one vector, as it did.
    assert_eq!(lake_search(&svc).await.0, "Joanna saw the lake");
    // A server that does not use turn vectors leaves the backfill for one that does.
    assert_eq!(on(0.0).backfill_turns(false).await.unwrap(), 0);
    assert_eq!(store.events_with_turns(), 0);
    assert_eq!(svc.backfill_turns(false).await.unwrap(), 1, "the chunk of four turns; the one-turn event has none");
    assert_eq!(store.events_with_turns(), 1);
    let (first, scores) = lake_search(&svc).await;
    assert!(first.contains("painted the lake at sunrise"), "{first} {scores:?}");
    // Done once: the store no longer offers events to look at.
    assert!(store.events_without_turns(None, 10).await.unwrap().is_none());
    assert_eq!(svc.backfill_turns(false).await.unwrap(), 0);
}

#[tokio::test]
async fn a_past_day_dates_an_event_and_a_plan_is_remembered_from_when_it_was_said() {
    let f = fixture();
    f.converse(
        "conv",
        "u1",
        &[("user", "Yesterday I cleaned the garage."), ("user", "Tomorrow I will clean the kitchen.")],
        2,
    )
    .await;
    let said = T0 + HOUR; // 2026-01-01T01:00Z
    let find = |q: &'static str, as_of: Option<i64>| {
        let svc = f.svc.clone();
        async move {
            let filter = EventFilter { user_id: vec!["u1".into()], as_of, ..Default::default() };
            let got = svc.search_events(EventSearch::new(target(), Some(q.into()), filter, 5)).await.unwrap();
            got.into_iter()
                .map(|r| r.event)
                .find(|e| e.text().contains(q))
                .unwrap_or_else(|| panic!("{q} as of {as_of:?}"))
        }
    };
    let garage = find("garage", None).await;
    assert_eq!(garage.text(), "Yesterday (2025-12-31) I cleaned the garage.");
    let noon = chrono::NaiveDate::from_ymd_opt(2025, 12, 31).unwrap().and_hms_opt(12, 0, 0).unwrap();
    assert_eq!(garage.time, noon.and_utc().timestamp_millis(), "dated by the day it names");
    let kitchen = find("kitchen", None).await;
    assert_eq!(kitchen.text(), "Tomorrow (2026-01-02) I will clean the kitchen.");
    assert_eq!((kitchen.time, kitchen.valid_from), (said, said), "not dated in the future: made when it was said");
    // As of the moment after it was said, the plan is known.
    assert_eq!(find("kitchen", Some(said + 1_000)).await.id, kitchen.id);
}

#[tokio::test]
async fn a_question_naming_a_day_finds_the_plan_for_that_day() {
    let f = fixture();
    f.tick(3 * 24 * HOUR);
    // Said on Sunday 2026-01-04: the plan is made then, for Friday the 9th.
    f.converse(
        "conv",
        "u1",
        &[
            ("user", "I cleaned the garage and the car."),
            ("user", "In five days I will clean the kitchen."),
            ("user", "The windows are clean now."),
        ],
        3,
    )
    .await;
    let ranked = |q: &'static str| {
        let svc = f.svc.clone();
        async move {
            let filter = EventFilter { user_id: vec!["u1".into()], ..Default::default() };
            let got = svc.search_events(EventSearch::new(target(), Some(q.into()), filter, 5)).await.unwrap();
            got.into_iter().map(|r| r.event.text()).collect::<Vec<_>>()
        }
    };
    // Its own time is Sunday, days before the day asked about: only its text says Friday.
    let plan = "In five days (2026-01-09) I will clean the kitchen.";
    assert_eq!(ranked("What will I clean on January 9?").await[0], plan, "lifted by the day its text names");
    assert_ne!(ranked("What will I clean?").await[0], plan, "without a day asked, the other events match better");
    assert_ne!(ranked("What will I clean on January 20?").await[0], plan, "nor with another day");
}

#[tokio::test]
async fn a_reindex_embeds_its_events_in_batches() {
    let store = MemoryStore::new();
    let on = |embedder: Arc<dyn Embedder>| {
        Service::new(
            Arc::new(store.clone()),
            Extractors::new("scripted", Arc::new(Scripted::default())),
            embedder,
            Arc::new(TestClock(AtomicI64::new(T0))),
            ServiceConfig::default(),
        )
    };
    let old = on(Arc::new(HashingEmbedder { dim: 256 }));
    for i in 0..40 {
        add_at(&old, None, T0 + i, &format!("the {i}th walk by the lake")).await;
    }
    // A server of another model moves the collection: 40 texts in calls of 16, not 40 calls.
    let counting = Arc::new(Counting(HashingEmbedder { dim: 128 }, Default::default(), Default::default()));
    let new = on(counting.clone());
    let todo = new.collections_to_reindex().await.unwrap();
    assert_eq!(todo.len(), 1);
    assert_eq!(new.reindex_collection(&todo[0], |_, _| {}).await.unwrap(), 40);
    assert_eq!(counting.2.load(Ordering::SeqCst), 3);
    assert!(new.collections_to_reindex().await.unwrap().is_empty());
    let filter = EventFilter { user_id: vec!["u1".into()], ..Default::default() };
    let found = new.search_events(EventSearch::new(target(), Some("the 7th walk".into()), filter, 3)).await.unwrap();
    assert_eq!(found[0].event.text(), "the 7th walk by the lake", "searched by the new vectors");
}
