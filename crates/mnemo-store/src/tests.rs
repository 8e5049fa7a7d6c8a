//! Store-level tests on a real SQLite file in a temporary directory.

use super::*;
use mnemo_core::ExtractTrigger;
use mnemo_core::extract::{ExtractedEvent, ProfileChange};
use serde_json::json;

fn msg(role: Role, content: &str, tokens: u64, key: Option<&str>) -> NewMessage {
    NewMessage {
        role,
        content: content.into(),
        name: None,
        time: 1_000,
        tokens,
        idempotency_key: key.map(String::from),
    }
}

fn new_coll() -> NewCollection {
    NewCollection {
        project_name: "default".into(),
        collection_name: "c1".into(),
        description: String::new(),
        schema: CollectionSchema::default(),
        embedding_model: "test-hashing".into(),
        embedding_dim: 64,
        created_at: 1,
    }
}

async fn setup() -> (tempfile::TempDir, SqliteStore, Collection) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
    let c = store.ensure_collection(new_coll()).await.unwrap();
    (dir, store, c)
}

fn append(
    c: &Collection,
    conv: &str,
    messages: Vec<NewMessage>,
    trigger: ExtractTrigger,
    now: Millis,
) -> AppendRequest {
    AppendRequest {
        collection_id: c.id,
        conversation_id: conv.into(),
        meta: ConversationMeta { user_id: Some("u1".into()), ..Default::default() },
        messages,
        trigger,
        now,
        max_job_attempts: 3,
    }
}

#[tokio::test]
async fn trigger_closes_a_session_and_queues_a_job_atomically() {
    let (_d, s, c) = setup().await;
    let t = ExtractTrigger { token_count: 100, message_count: 3, wait_timeout: 60 };
    let o = s
        .append_messages(append(
            &c,
            "conv",
            vec![msg(Role::User, "a", 1, None), msg(Role::Assistant, "b", 1, None)],
            t,
            10,
        ))
        .await
        .unwrap();
    assert_eq!((o.accepted, o.pending_messages, o.closed.is_none()), (2, 2, true));
    let o = s.append_messages(append(&c, "conv", vec![msg(Role::User, "c", 1, None)], t, 20)).await.unwrap();
    let closed = o.closed.expect("message_count reached");
    assert_eq!(closed.reason, TriggerReason::MessageCount);
    assert_eq!((o.pending_messages, closed.message_count), (0, 3));
    let jobs = s.list_jobs(c.id, JobFilter { limit: 10, ..Default::default() }).await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].session_id.as_deref(), Some(closed.session_id.as_str()));
    // Still short-term until extracted.
    let info = s.conversation_info(c.id, "conv").await.unwrap().unwrap();
    assert_eq!(info.short_term.len(), 3);
    assert_eq!(info.open_messages, 0);
}

#[tokio::test]
async fn idempotent_retries_are_stored_once() {
    let (_d, s, c) = setup().await;
    let t = ExtractTrigger::default();
    for _ in 0..3 {
        s.append_messages(append(&c, "conv", vec![msg(Role::User, "hello", 1, Some("k1"))], t, 10)).await.unwrap();
    }
    let info = s.conversation_info(c.id, "conv").await.unwrap().unwrap();
    assert_eq!(info.short_term.len(), 1);
    assert_eq!(info.open_messages, 1);
}

#[tokio::test]
async fn job_lifecycle_moves_messages_out_of_short_term_and_updates_profile() {
    let (_d, s, c) = setup().await;
    let t = ExtractTrigger { token_count: 1, message_count: 100, wait_timeout: 60 };
    let o = s.append_messages(append(&c, "conv", vec![msg(Role::User, "我住在上海", 5, None)], t, 10)).await.unwrap();
    let closed = o.closed.unwrap();
    let job = s.claim_job(100, 1000).await.unwrap().expect("a due job");
    assert_eq!(job.messages.len(), 1);
    assert!(s.claim_job(100, 1000).await.unwrap().is_none(), "leased job is not handed out twice");
    // A failed attempt keeps the messages short-term and re-queues.
    s.fail_job(&job.lease(), "boom", Some(200), 150).await.unwrap();
    assert!(s.claim_job(150, 1000).await.unwrap().is_none(), "not due yet");
    let job = s.claim_job(200, 1000).await.unwrap().unwrap();
    assert_eq!(job.job.attempts, 2);
    let out = ExtractionOutput {
        events: vec![ExtractedEvent {
            source_message_ids: vec![job.messages[0].message_id],
            ..ExtractedEvent::new(EVENT_V1, json!({"summary": "用户住在上海"}).as_object().unwrap().clone(), 10)
        }],
        profile_changes: vec![ProfileChange::Set { key: "city".into(), value: json!("上海") }],
        ..Default::default()
    };
    let ids = s.complete_job(&job.lease(), out, 300).await.unwrap();
    assert_eq!(ids.len(), 1);
    let info = s.conversation_info(c.id, "conv").await.unwrap().unwrap();
    assert!(info.short_term.is_empty());
    let detail = s.session_info(c.id, &closed.session_id).await.unwrap().unwrap();
    assert_eq!(detail.events[0].user_id, vec!["u1".to_string()]);
    assert_eq!(detail.job.unwrap().state, JobState::Done);
    let profiles =
        s.list_profiles(c.id, ProfileFilter { user_id: vec!["u1".into()], ..Default::default() }, 5).await.unwrap();
    assert_eq!(profiles[0].attributes.get("city"), Some(&json!("上海")));
}

/// Runs one session of `text` through a job that returns `out` (with the session's message ids).
async fn extract_session(
    s: &SqliteStore,
    c: &Collection,
    text: &str,
    now: Millis,
    out: impl FnOnce(i64) -> ExtractionOutput,
) -> Vec<String> {
    let t = ExtractTrigger::from_parts(None, Some(1), None, Default::default()).unwrap();
    s.append_messages(append(c, "conv", vec![msg(Role::User, text, 5, None)], t, now)).await.unwrap();
    let job = s.claim_job(now, 1000).await.unwrap().expect("a due job");
    let mid = job.messages[0].message_id;
    s.complete_job(&job.lease(), out(mid), now).await.unwrap()
}

fn summary(text: &str) -> serde_json::Map<String, serde_json::Value> {
    json!({"summary": text}).as_object().unwrap().clone()
}

#[tokio::test]
async fn merges_refresh_supersedes_hide_and_keep_history_profiles_remember() {
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
    let mut nc = new_coll();
    let mut pt = CollectionSchema::builtin_profile_v1();
    pt.update_mode = mnemo_core::model::ProfileUpdateMode::KeepHistory;
    nc.schema = CollectionSchema::with_builtins(vec![], vec![pt]);
    let c = s.ensure_collection(nc).await.unwrap();

    let first = extract_session(&s, &c, "我住在北京，周末去跑步", 1_000, |mid| ExtractionOutput {
        events: vec![
            ExtractedEvent {
                source_message_ids: vec![mid],
                ..ExtractedEvent::new(EVENT_V1, summary("用户周末跑步"), 1_000)
            },
            ExtractedEvent {
                source_message_ids: vec![mid],
                ..ExtractedEvent::new(EVENT_V1, summary("用户下周去上海出差"), 1_000)
            },
        ],
        profile_changes: vec![ProfileChange::Set { key: "city".into(), value: json!("北京") }],
        ..Default::default()
    })
    .await;
    s.record_hits(c.id, vec![first[0].clone()], 1_500).await.unwrap();

    let (run, trip) = (first[0].clone(), first[1].clone());
    let second = extract_session(&s, &c, "搬到上海了，还是周末跑步；出差取消了", 2_000, |mid| {
        ExtractionOutput {
            events: vec![
                ExtractedEvent {
                    source_message_ids: vec![mid],
                    merge_into: Some(run.clone()),
                    ..ExtractedEvent::new(EVENT_V1, summary("用户每个周末跑步"), 2_000)
                },
                ExtractedEvent {
                    source_message_ids: vec![mid],
                    supersedes: Some(trip.clone()),
                    ..ExtractedEvent::new(EVENT_V1, summary("用户取消了上海出差"), 2_000)
                },
            ],
            profile_changes: vec![ProfileChange::Set { key: "city".into(), value: json!("上海") }],
            ..Default::default()
        }
    })
    .await;
    assert_eq!(second[0], run, "the near-duplicate refreshed the existing event");
    let merged = s.get_event(c.id, &run).await.unwrap().unwrap();
    assert_eq!(merged.memory_info["summary"], json!("用户每个周末跑步"));
    assert_eq!((merged.time, merged.hit_count), (2_000, 1), "time refreshed, hits kept");
    assert_eq!(merged.source_message_ids.len(), 2, "provenance of both sessions");
    let old = s.get_event(c.id, &trip).await.unwrap().unwrap();
    assert_eq!((old.status.as_str(), old.superseded_by.as_deref()), ("superseded", Some(second[1].as_str())));
    let active = s.list_events(c.id, EventFilter { active_only: true, ..Default::default() }, 10).await.unwrap();
    assert_eq!(active.len(), 2, "the superseded event is hidden from active listings");

    let p = s.list_profiles(c.id, ProfileFilter::default(), 5).await.unwrap().remove(0);
    assert_eq!(p.attributes["city"], json!("上海"));
    assert_eq!(p.history.len(), 1);
    let h = &p.history[0];
    assert_eq!(
        (h.attribute.as_str(), &h.value, h.valid_from, h.valid_to),
        ("city", &json!("北京"), Some(1_000), 2_000)
    );
    // An API edit of a keep_history profile is versioned too.
    let patch =
        ProfilePatch { attributes: Some(json!({"city": "杭州"}).as_object().unwrap().clone()), ..Default::default() };
    let p = s.update_profile(c.id, &p.id, patch, 3_000).await.unwrap();
    assert_eq!(p.history.iter().map(|h| h.value.clone()).collect::<Vec<_>>(), vec![json!("北京"), json!("上海")]);
    assert_eq!(p.history[1].valid_from, Some(2_000));
}

#[tokio::test]
async fn idle_deadline_closes_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let c;
    {
        let s = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
        c = s.ensure_collection(new_coll()).await.unwrap();
        let t = ExtractTrigger { token_count: 1000, message_count: 100, wait_timeout: 5 };
        s.append_messages(append(&c, "conv", vec![msg(Role::User, "hi", 1, None)], t, 1_000)).await.unwrap();
        assert_eq!(s.next_idle_deadline().await.unwrap(), Some(6_000));
        assert!(s.close_idle_conversations(5_999, 10, 3).await.unwrap().is_empty());
    }
    let s = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
    let closed = s.close_idle_conversations(6_000, 10, 3).await.unwrap();
    assert_eq!(closed.len(), 1);
    assert_eq!(closed[0].reason, TriggerReason::WaitTimeout);
    assert_eq!(s.next_idle_deadline().await.unwrap(), None);
    let _ = c;
}

#[tokio::test]
async fn event_filters_and_batch_delete() {
    let (_d, s, c) = setup().await;
    let mk = |user: &str, ty: &str, time: Millis| NewEvent {
        collection_id: c.id,
        memory_type: ty.into(),
        user_id: vec![user.into()],
        assistant_id: vec!["bot".into()],
        group_id: None,
        session_id: None,
        conversation_id: None,
        scope: None,
        class: "conclusion".into(),
        time,
        memory_info: json!({"summary": format!("{user} {ty} {time}")}).as_object().unwrap().clone(),
        source_message_ids: vec![],
        embedding: None,
        expires_at: None,
        now: time,
    };
    for (u, ty, t) in [("a", "event_v1", 1), ("a", "event_v1", 3), ("b", "event_v1", 2), ("a", "x", 4)] {
        s.insert_event(mk(u, ty, t)).await.unwrap();
    }
    let f = |u: &[&str], ty: &[&str]| EventFilter {
        user_id: u.iter().map(|s| s.to_string()).collect(),
        memory_type: ty.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    let got = s.list_events(c.id, f(&["a"], &["event_v1"]), 10).await.unwrap();
    assert_eq!(got.iter().map(|e| e.time).collect::<Vec<_>>(), vec![3, 1], "newest first");
    let got =
        s.list_events(c.id, EventFilter { start_time: Some(2), end_time: Some(3), ..f(&[], &[]) }, 10).await.unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(s.batch_delete_events(c.id, f(&["a"], &[])).await.unwrap(), 3);
    let rest = s.list_events(c.id, f(&[], &[]), 10).await.unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].user_id, vec!["b".to_string()]);
}

#[tokio::test]
async fn concurrent_writes_are_group_committed_and_all_durable() {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap());
    let c = s.ensure_collection(new_coll()).await.unwrap();
    let t = ExtractTrigger { token_count: 1_000_000, message_count: 100_000, wait_timeout: 60 };
    let mut tasks = Vec::new();
    for w in 0..16 {
        let s = s.clone();
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..25 {
                s.append_messages(append(
                    &c,
                    &format!("conv{w}"),
                    vec![msg(Role::User, &format!("m{i}"), 1, None)],
                    t,
                    5,
                ))
                .await
                .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    drop(s);
    let s = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
    for w in 0..16 {
        let info = s.conversation_info(c.id, &format!("conv{w}")).await.unwrap().unwrap();
        assert_eq!(info.short_term.len(), 25);
    }
}

#[tokio::test]
async fn candidates_come_from_vectors_and_full_text_and_deletes_leave_no_trace() {
    use mnemo_core::embed::{EmbedKind, Embedder, HashingEmbedder};
    let (_d, s, c) = setup().await;
    let emb = HashingEmbedder { dim: 64 };
    let texts = ["用户喜欢手冲咖啡", "The user adopted a puppy named Max", "用户住在上海"];
    let mut ids = Vec::new();
    for (i, t) in texts.iter().enumerate() {
        let v = emb.embed(&[t.to_string()], EmbedKind::Document).await.unwrap().remove(0);
        let e = s
            .insert_event(NewEvent {
                embedding: Some(v),
                ..NewEvent::of_user(
                    c.id,
                    EVENT_V1,
                    if i < 2 { "u1" } else { "u2" },
                    json!({"summary": t}).as_object().unwrap().clone(),
                    i as i64,
                )
            })
            .await
            .unwrap();
        ids.push(e.id);
    }
    let f = EventFilter { user_id: vec!["u1".into()], active_only: true, ..Default::default() };
    let q =
        |terms: &[&str]| CandidateQuery { vector: None, terms: terms.iter().map(|t| t.to_string()).collect(), k: 10 };
    let got = s.search_candidates(c.id, f.clone(), q(&["咖啡"])).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].event.id, ids[0]);
    assert!(got[0].bm25.unwrap() > 0.0);
    // Other users' events never come back, even when they match.
    assert!(s.search_candidates(c.id, f.clone(), q(&["上海"])).await.unwrap().is_empty());
    // FTS syntax in user text is quoted, never parsed.
    assert!(s.search_candidates(c.id, f.clone(), q(&["\"a\" OR *", "NEAR(", "puppi"])).await.is_ok());
    let qv = emb.embed(&["puppy named Max".to_string()], EmbedKind::Query).await.unwrap().remove(0);
    let got = s
        .search_candidates(c.id, f.clone(), CandidateQuery { vector: Some(qv.clone()), terms: vec![], k: 1 })
        .await
        .unwrap();
    assert_eq!(got[0].event.id, ids[1]);
    assert!(got[0].cosine.unwrap() > 0.5);
    // Deleting removes the row, the vector and the full-text entry.
    assert!(s.delete_event(c.id, &ids[1]).await.unwrap());
    let got = s
        .search_candidates(c.id, f.clone(), CandidateQuery { vector: Some(qv), terms: vec!["max".into()], k: 10 })
        .await
        .unwrap();
    assert!(got.iter().all(|g| g.event.id != ids[1]));
    assert!(s.events_missing_vectors(c.id, 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn small_scope_bm25_equals_fts5_and_statistics_stay_exact() {
    let (_d, s, c) = setup().await;
    let words = ["coffee", "hike", "baby", "formula", "kyoto", "奶粉", "咖啡", "上海", "宝宝", "piano"];
    let mut x = 7u64;
    let mut ids = Vec::new();
    for i in 0..60 {
        let text: Vec<&str> = (0..(3 + i % 9))
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                words[(x >> 33) as usize % words.len()]
            })
            .collect();
        let e = s
            .insert_event(NewEvent::of_user(
                c.id,
                EVENT_V1,
                format!("u{}", i % 2),
                json!({"summary": text.join(" ")}).as_object().unwrap().clone(),
                i,
            ))
            .await
            .unwrap();
        ids.push(e.id);
    }
    let query: Vec<String> = ["kyoto", "咖啡", "piano"].iter().map(|t| t.to_string()).collect();
    let cid = c.id;
    let q = query.clone();
    let (fts, ours, stats) = s
        .read(move |conn| {
            let expr = q.iter().map(|t| format!("\"{t}\"")).collect::<Vec<_>>().join(" OR ");
            let fts: Vec<(String, f64)> = conn
                .prepare("SELECT e.id, -bm25(event_fts) FROM event_fts JOIN events e ON e.rowid = event_fts.rowid WHERE event_fts MATCH ?1")
                .unwrap()
                .query_map([expr], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let stats: (i64, i64, i64) = conn
                .query_row(
                    "SELECT (SELECT docs FROM collection_stats), (SELECT tokens FROM collection_stats), (SELECT count(*) FROM events)",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .unwrap();
            let ours = crate::search::candidates(
                conn,
                cid,
                &EventFilter { user_id: vec!["u0".into(), "u1".into()], active_only: true, ..Default::default() },
                &CandidateQuery { vector: None, terms: q.clone(), k: 100 },
            )
            .unwrap();
            Ok((fts, ours, stats))
        })
        .await
        .unwrap();
    assert_eq!(stats.0, stats.2, "document count follows inserts and deletes");
    assert_eq!(ours.len(), fts.len(), "the same documents match");
    for (id, want) in fts {
        let got = ours.iter().find(|c| c.event.id == id).and_then(|c| c.bm25).unwrap();
        assert!((got - want).abs() < 1e-9, "{id}: ours {got} vs FTS5 {want}");
    }
    // Churn: an update re-indexes, a delete removes; our statistics follow exactly (FTS5's own
    // totals do not shrink on a contentless delete, so from here its bm25() drifts; ours does not).
    let patch = EventPatch {
        memory_info: Some(json!({"summary": "kyoto kyoto piano"}).as_object().unwrap().clone()),
        ..Default::default()
    };
    s.update_event(c.id, &ids[3], patch, 100).await.unwrap();
    s.delete_event(c.id, &ids[4]).await.unwrap();
    let (docs, events, bad_df): (i64, i64, i64) = s
        .read(move |conn| {
            let bad: i64 = conn
                .query_row(
                    "SELECT count(*) FROM term_stats t WHERE t.df != (SELECT count(*) FROM event_fts WHERE event_fts MATCH '\"' || t.term || '\"')",
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            Ok((
                conn.query_row("SELECT docs FROM collection_stats", [], |r| r.get(0)).unwrap(),
                conn.query_row("SELECT count(*) FROM events", [], |r| r.get(0)).unwrap(),
                bad,
            ))
        })
        .await
        .unwrap();
    assert_eq!((docs, bad_df), (events, 0), "document and per-term counts are exact after updates and deletes");
}
