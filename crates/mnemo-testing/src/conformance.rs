//! The store conformance suite: one set of scenarios every [`Store`] backend runs, with the same
//! inputs and the same expected results (the embedded store in `mnemo-store`'s tests, PostgreSQL
//! in `mnemo-store-pg`'s). Each scenario opens the store through a [`StoreHarness`], which may
//! reopen it on the same data to check what survives.
//!
//! The integration suite (`crates/mnemo/tests/integration`) is the other half: the whole HTTP
//! product against the real binary, run once per store by `./scripts/test`.

use async_trait::async_trait;
use mnemo_core::embed::{EmbedKind, Embedder, HashingEmbedder};
use mnemo_core::extract::{ExtractedEvent, ExtractionOutput, ProfileChange};
use mnemo_core::model::*;
use mnemo_core::store::Store;
use mnemo_core::text::{Bm25Query, CorpusStats, fts_tokens, search_tokens};
use mnemo_core::turns::BestTurn;
use mnemo_core::{ExtractTrigger, StoreError, TriggerReason};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;

#[async_trait]
pub trait StoreHarness: Send + Sync {
    /// Opens the store under test; every call opens the same data (a reopen after a drop).
    async fn open(&self) -> Arc<dyn Store>;
    /// Lets the store do now the housekeeping it would do by itself a little later (PostgreSQL:
    /// fold the appended BM25 statistics, and `ANALYZE`, after which a filtered vector search
    /// is planned through the HNSW index). Results must be the same before and after.
    async fn settle(&self) {}
    /// Whether the store keeps a webhook outbox (the in-memory test store does not).
    fn has_webhooks(&self) -> bool {
        true
    }
    /// Whether the store spreads a collection over several databases
    /// ([`crate::sharded::ShardedStore`]): changes on different shards have no order between
    /// them (webhook deliveries compare as sets, and their ids grow only within a shard).
    fn sharded(&self) -> bool {
        false
    }
}

/// Runs every scenario, in order, each on fresh data from `fresh()`.
pub async fn run_all<H: StoreHarness, F: AsyncFn() -> H>(fresh: F) {
    macro_rules! scenario {
        ($name:ident) => {{
            let t = std::time::Instant::now();
            $name(&fresh().await).await;
            eprintln!("conformance: {} ok ({} ms)", stringify!($name), t.elapsed().as_millis());
        }};
    }
    scenario!(trigger_closes_a_session_and_queues_a_job_atomically);
    scenario!(idempotent_retries_are_stored_once);
    scenario!(job_lifecycle_moves_messages_out_of_short_term_and_updates_profile);
    scenario!(a_lost_lease_is_fenced_off);
    scenario!(failed_jobs_are_retried_by_hand_and_transient_failures_requeued_a_bounded_number_of_times);
    scenario!(merges_refresh_supersedes_hide_and_keep_history_profiles_remember);
    scenario!(as_of_reads_what_was_true_then);
    scenario!(users_are_listed_most_recently_active_first);
    scenario!(idle_deadline_closes_once_and_survives_reopen);
    scenario!(event_filters_and_batch_delete);
    scenario!(concurrent_writes_are_all_durable);
    scenario!(candidates_come_from_vectors_and_full_text_and_deletes_leave_no_trace);
    scenario!(both_signals_equal_the_reference_computation);
    scenario!(a_batch_is_stored_whole_or_not_at_all);
    scenario!(scores_closer_than_half_precision_rank_exactly);
    scenario!(a_filtered_search_over_a_large_scope_finds_the_filtered_events);
    scenario!(export_and_forget_a_user);
    scenario!(a_new_embedding_model_drops_the_old_vectors_and_keeps_full_text);
    scenario!(an_event_keeps_its_turns_vectors_until_its_text_or_model_changes);
    scenario!(a_deleted_conversation_leaves_nothing_and_spares_the_others);
    if fresh().await.has_webhooks() {
        scenario!(every_change_is_announced_in_its_own_transaction);
    }
}

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

fn new_coll(schema: CollectionSchema) -> NewCollection {
    NewCollection {
        id: None,
        project_name: "default".into(),
        collection_name: "c1".into(),
        description: String::new(),
        schema,
        embedding_model: "test-hashing".into(),
        embedding_dim: 64,
        created_at: 1,
    }
}

async fn setup(h: &impl StoreHarness) -> (Arc<dyn Store>, Collection) {
    let s = h.open().await;
    let c = s.ensure_collection(new_coll(CollectionSchema::default())).await.unwrap();
    (s, c)
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

fn info(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    v.as_object().unwrap().clone()
}

fn summary(text: &str) -> serde_json::Map<String, serde_json::Value> {
    info(json!({ "summary": text }))
}

pub async fn trigger_closes_a_session_and_queues_a_job_atomically(h: &impl StoreHarness) {
    let (s, c) = setup(h).await;
    let t = ExtractTrigger { token_count: 100, message_count: 3, wait_timeout: 60 };
    let two = vec![msg(Role::User, "a", 1, None), msg(Role::Assistant, "b", 1, None)];
    let o = s.append_messages(append(&c, "conv", two, t, 10)).await.unwrap();
    assert_eq!((o.accepted, o.pending_messages, o.closed.is_none()), (2, 2, true));
    let o = s.append_messages(append(&c, "conv", vec![msg(Role::User, "c", 1, None)], t, 20)).await.unwrap();
    let closed = o.closed.expect("message_count reached");
    assert_eq!(closed.reason, TriggerReason::MessageCount);
    assert_eq!((o.pending_messages, closed.message_count), (0, 3));
    let jobs = s.list_jobs(c.id, JobFilter { limit: 10, ..Default::default() }).await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].session_id.as_deref(), Some(closed.session_id.as_str()));
    let info = s.conversation_info(c.id, "conv").await.unwrap().unwrap();
    assert_eq!((info.short_term.len(), info.open_messages), (3, 0), "short-term until extracted");
    let ids: Vec<i64> = info.short_term.iter().map(|m| m.message_id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "messages in write order: {ids:?}");
    // The closed session took the idle deadline with it, and counting starts again from zero.
    assert_eq!(s.next_idle_deadline().await.unwrap(), None);
    let o = s.append_messages(append(&c, "conv", vec![msg(Role::User, "d", 1, None)], t, 30)).await.unwrap();
    assert_eq!((o.pending_messages, o.pending_tokens, o.closed.is_none()), (1, 1, true));
    assert_eq!(s.next_idle_deadline().await.unwrap(), Some(30 + 60_000));
}

pub async fn idempotent_retries_are_stored_once(h: &impl StoreHarness) {
    let (s, c) = setup(h).await;
    for _ in 0..3 {
        let m = vec![msg(Role::User, "hello", 1, Some("k1"))];
        s.append_messages(append(&c, "conv", m, ExtractTrigger::default(), 10)).await.unwrap();
    }
    let info = s.conversation_info(c.id, "conv").await.unwrap().unwrap();
    assert_eq!((info.short_term.len(), info.open_messages), (1, 1));
    // One request: a known key, a new key twice, and messages without a key — many of them, in
    // the order written.
    let mut m = vec![msg(Role::User, "hello", 1, Some("k1")), msg(Role::User, "again", 1, Some("k2"))];
    m.push(msg(Role::User, "again", 1, Some("k2")));
    m.extend((0..40).map(|i| msg(Role::Assistant, &format!("plain {i}"), 1, None)));
    let t = ExtractTrigger { token_count: 100_000, message_count: 1_000, wait_timeout: 60 };
    let o = s.append_messages(append(&c, "conv", m, t, 20)).await.unwrap();
    assert_eq!((o.accepted, o.duplicates, o.pending_messages), (41, 2, 42));
    let info = s.conversation_info(c.id, "conv").await.unwrap().unwrap();
    let said: Vec<&str> = info.short_term.iter().map(|m| m.content.as_str()).collect();
    let expected: Vec<String> =
        ["hello", "again"].into_iter().map(String::from).chain((0..40).map(|i| format!("plain {i}"))).collect();
    assert_eq!(said, expected, "stored once each, in the order written");
}

pub async fn job_lifecycle_moves_messages_out_of_short_term_and_updates_profile(h: &impl StoreHarness) {
    let (s, c) = setup(h).await;
    let t = ExtractTrigger { token_count: 1, message_count: 100, wait_timeout: 60 };
    let o = s.append_messages(append(&c, "conv", vec![msg(Role::User, "我住在上海", 5, None)], t, 10)).await.unwrap();
    let closed = o.closed.unwrap();
    let job = s.claim_job(100, 1000).await.unwrap().expect("a due job");
    assert_eq!(job.messages.len(), 1);
    assert!(s.claim_job(100, 1000).await.unwrap().is_none(), "a leased job is not handed out twice");
    s.fail_job(&job.lease(), "boom", Some(200), 150).await.unwrap();
    assert!(s.claim_job(150, 1000).await.unwrap().is_none(), "not due yet");
    let job = s.claim_job(200, 1000).await.unwrap().unwrap();
    assert_eq!(job.job.attempts, 2);
    let out = ExtractionOutput {
        events: vec![ExtractedEvent {
            source_message_ids: vec![job.messages[0].message_id],
            ..ExtractedEvent::new(EVENT_V1, summary("用户住在上海"), 10)
        }],
        profile_changes: vec![ProfileChange::Set { key: "city".into(), value: json!("上海") }],
        prompt_tokens: 7,
        completion_tokens: 3,
        ..Default::default()
    };
    assert_eq!(s.complete_job(&job.lease(), out, 300).await.unwrap().len(), 1);
    assert!(s.conversation_info(c.id, "conv").await.unwrap().unwrap().short_term.is_empty());
    let detail = s.session_info(c.id, &closed.session_id).await.unwrap().unwrap();
    assert_eq!(detail.events[0].user_id, vec!["u1".to_string()]);
    assert_eq!(detail.job.unwrap().state, JobState::Done);
    assert_eq!(s.tokens_used_since("default", 0).await.unwrap(), 10);
    let profiles =
        s.list_profiles(c.id, ProfileFilter { user_id: vec!["u1".into()], ..Default::default() }, 5).await.unwrap();
    assert_eq!(profiles[0].attributes.get("city"), Some(&json!("上海")));
}

/// A worker whose lease ran out and whose job another worker took cannot complete, fail or
/// defer it: its late result is refused and nothing of it is stored.
pub async fn a_lost_lease_is_fenced_off(h: &impl StoreHarness) {
    let (s, c) = setup(h).await;
    let t = ExtractTrigger { token_count: 1, message_count: 100, wait_timeout: 60 };
    s.append_messages(append(&c, "conv", vec![msg(Role::User, "late worker", 5, None)], t, 10)).await.unwrap();
    let slow = s.claim_job(100, 1000).await.unwrap().unwrap();
    assert!(s.renew_lease(&slow.lease(), 1_500).await.unwrap(), "the owner renews its lease");
    assert!(s.claim_job(1_400, 1000).await.unwrap().is_none(), "renewed: not due before 1500");
    let fast = s.claim_job(1_500, 1000).await.unwrap().expect("the lease expired; the job is due again");
    assert_eq!(fast.job.attempts, slow.job.attempts + 1);
    let out = |text: &str| ExtractionOutput {
        events: vec![ExtractedEvent::new(EVENT_V1, summary(text), 10)],
        ..Default::default()
    };
    assert!(matches!(s.complete_job(&slow.lease(), out("stale"), 1_600).await, Err(StoreError::Conflict(_))));
    assert!(!s.renew_lease(&slow.lease(), 9_000).await.unwrap());
    s.fail_job(&slow.lease(), "late failure", None, 1_600).await.unwrap();
    s.defer_job(&slow.lease(), 9_000, "late deferral", 1_600).await.unwrap();
    assert_eq!(s.complete_job(&fast.lease(), out("fresh"), 1_700).await.unwrap().len(), 1);
    let events = s.list_events(c.id, EventFilter::default(), 10).await.unwrap();
    assert_eq!(events.iter().map(|e| e.text()).collect::<Vec<_>>(), vec!["fresh".to_string()]);
    let jobs = s.list_jobs(c.id, JobFilter { limit: 10, ..Default::default() }).await.unwrap();
    assert_eq!((jobs[0].state, jobs[0].attempts), (JobState::Done, 2));
}

/// A job's attempt has a start and an end; a failed job goes back to the queue by hand (any
/// failure) or automatically (transient failures only, at most `max_requeues` times).
pub async fn failed_jobs_are_retried_by_hand_and_transient_failures_requeued_a_bounded_number_of_times(
    h: &impl StoreHarness,
) {
    let (s, c) = setup(h).await;
    let t = ExtractTrigger { token_count: 1, message_count: 100, wait_timeout: 60 };
    for conv in ["outage", "poison"] {
        s.append_messages(append(&c, conv, vec![msg(Role::User, conv, 5, None)], t, 10)).await.unwrap();
    }
    let fail_for_good = async |error: &str, at: Millis| {
        let j = s.claim_job(at, 1000).await.unwrap().expect("a due job");
        s.fail_job(&j.lease(), error, None, at + 5).await.unwrap();
        j.job.job_id
    };
    let job = |id: String| {
        let s = s.clone();
        async move {
            let all = s.list_jobs(c.id, JobFilter { limit: 10, ..Default::default() }).await.unwrap();
            all.into_iter().find(|j| j.job_id == id).unwrap()
        }
    };
    let transient = fail_for_good(&format!("{TRANSIENT_PREFIX}provider down"), 100).await;
    let permanent = fail_for_good("permanent: the session cannot be read", 200).await;
    let j = job(transient.clone()).await;
    assert_eq!((j.state, j.started_at.is_some(), j.duration_ms()), (JobState::Failed, true, Some(5)));
    assert!(j.failed_transiently());
    assert!(!job(permanent.clone()).await.failed_transiently());

    // Automatic: only the transient failure, and only while under the cap.
    assert_eq!(s.requeue_transient_failures(2, 300).await.unwrap(), vec![transient.clone()]);
    let j = job(transient.clone()).await;
    assert_eq!((j.state, j.attempts, j.requeues, j.finished_at), (JobState::Queued, 0, 1, None));
    let session = s.session_info(c.id, j.session_id.as_deref().unwrap()).await.unwrap().unwrap();
    assert_eq!(session.session.state, "queued");
    let again = s.claim_job(300, 1000).await.unwrap().unwrap();
    assert_eq!((again.job.job_id.as_str(), again.job.attempts), (transient.as_str(), 1));
    s.fail_job(&again.lease(), &format!("{TRANSIENT_PREFIX}still down"), None, 310).await.unwrap();
    assert_eq!(s.requeue_transient_failures(2, 400).await.unwrap(), vec![transient.clone()]);
    let again = s.claim_job(400, 1000).await.unwrap().unwrap();
    s.fail_job(&again.lease(), &format!("{TRANSIENT_PREFIX}still down"), None, 410).await.unwrap();
    assert!(s.requeue_transient_failures(2, 500).await.unwrap().is_empty(), "the cap stops a poison loop");

    // By hand: one job, or every failed job of the collection, whatever the failure.
    assert_eq!(s.retry_jobs(c.id, Some(&permanent), 600).await.unwrap(), vec![permanent.clone()]);
    assert!(s.retry_jobs(c.id, Some(&permanent), 600).await.unwrap().is_empty(), "queued, not failed");
    assert_eq!(s.retry_jobs(c.id, None, 600).await.unwrap(), vec![transient.clone()]);
    let done = s.claim_job(700, 1000).await.unwrap().unwrap();
    s.complete_job(&done.lease(), ExtractionOutput::default(), 750).await.unwrap();
    let j = job(done.job.job_id).await;
    assert_eq!(
        (j.state, j.started_at, j.finished_at, j.duration_ms()),
        (JobState::Done, Some(700), Some(750), Some(50))
    );
}

/// Runs one session of `text` through a job that returns `out` (with the session's message ids).
async fn extract_session(
    s: &Arc<dyn Store>,
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

pub async fn merges_refresh_supersedes_hide_and_keep_history_profiles_remember(h: &impl StoreHarness) {
    let s = h.open().await;
    let mut pt = CollectionSchema::builtin_profile_v1();
    pt.update_mode = ProfileUpdateMode::KeepHistory;
    let c = s.ensure_collection(new_coll(CollectionSchema::with_builtins(vec![], vec![pt]))).await.unwrap();
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
    assert_eq!(merged.valid_from, 1_000, "true since the first mention");
    assert_eq!(merged.source_message_ids.len(), 2, "provenance of both sessions");
    let old = s.get_event(c.id, &trip).await.unwrap().unwrap();
    assert_eq!((old.status.as_str(), old.superseded_by.as_deref()), ("superseded", Some(second[1].as_str())));
    let active = s.list_events(c.id, EventFilter { active_only: true, ..Default::default() }, 10).await.unwrap();
    assert_eq!(active.len(), 2, "the superseded event is hidden from active listings");
    let p = s.list_profiles(c.id, ProfileFilter::default(), 5).await.unwrap().remove(0);
    assert_eq!(p.attributes["city"], json!("上海"));
    let h0 = &p.history[0];
    assert_eq!(
        (p.history.len(), h0.attribute.as_str(), &h0.value, h0.valid_from, h0.valid_to),
        (1, "city", &json!("北京"), Some(1_000), 2_000)
    );
    let patch = ProfilePatch { attributes: Some(info(json!({"city": "杭州"}))), ..Default::default() };
    let p = s.update_profile(c.id, &p.id, patch, 3_000).await.unwrap();
    assert_eq!(p.history.iter().map(|h| h.value.clone()).collect::<Vec<_>>(), vec![json!("北京"), json!("上海")]);
    assert_eq!(p.history[1].valid_from, Some(2_000));
    let stats = s.memory_stats(c.id, Some("u1".into()), 7, 3_000).await.unwrap();
    assert_eq!((stats.total_events, stats.never_hit), (3, 2));
}

/// Time validity: an event holds from its `valid_from` (a stated start, else its time) until a
/// correction supersedes it (`valid_to`: the successor's start); an as-of filter returns what
/// held then, superseded events included, in listings and in the search's scope alike. Profile
/// values carry since when they hold (the time the extraction says), so the history answers too.
pub async fn as_of_reads_what_was_true_then(h: &impl StoreHarness) {
    let (s, c) = setup(h).await;
    let first = extract_session(&s, &c, "I live in Berlin since 2013", 1_000, |mid| ExtractionOutput {
        events: vec![ExtractedEvent {
            source_message_ids: vec![mid],
            valid_from: Some(500),
            ..ExtractedEvent::new(EVENT_V1, summary("The user lives in Berlin"), 1_000)
        }],
        profile_changes: vec![ProfileChange::Set { key: "city".into(), value: json!("Berlin") }],
        profile_time: Some(900),
        ..Default::default()
    })
    .await;
    let second = extract_session(&s, &c, "I moved to Munich last month", 3_000, |mid| ExtractionOutput {
        events: vec![ExtractedEvent {
            source_message_ids: vec![mid],
            valid_from: Some(2_500),
            supersedes: Some(first[0].clone()),
            ..ExtractedEvent::new(EVENT_V1, summary("The user moved to Munich"), 3_000)
        }],
        profile_changes: vec![ProfileChange::Set { key: "city".into(), value: json!("Munich") }],
        profile_time: Some(2_800),
        ..Default::default()
    })
    .await;
    let (berlin, munich) = (first[0].clone(), second[0].clone());
    let old = s.get_event(c.id, &berlin).await.unwrap().unwrap();
    assert_eq!((old.valid_from, old.valid_to, old.status.as_str()), (500, Some(2_500), "superseded"));
    let new = s.get_event(c.id, &munich).await.unwrap().unwrap();
    assert_eq!((new.valid_from, new.valid_to, new.time), (2_500, None, 3_000));
    let at = |t: Millis| EventFilter { user_id: vec!["u1".into()], as_of: Some(t), ..Default::default() };
    for (t, want) in
        [(400, vec![]), (500, vec![&berlin]), (2_499, vec![&berlin]), (2_500, vec![&munich]), (9_000, vec![&munich])]
    {
        let got = s.list_events(c.id, at(t), 10).await.unwrap();
        assert_eq!(got.iter().map(|e| &e.id).collect::<Vec<_>>(), want, "as of {t}");
    }
    let q = CandidateQuery { vector: None, terms: vec!["user".into()], k: 10, vector_hits: None, corpus: None };
    let found = s.search_candidates(c.id, at(1_000), q.clone()).await.unwrap();
    assert_eq!(found.iter().map(|f| &f.event.id).collect::<Vec<_>>(), vec![&berlin], "the search's scope too");
    let found = s.search_candidates(c.id, EventFilter { as_of: None, active_only: true, ..at(0) }, q).await.unwrap();
    assert_eq!(found.iter().map(|f| &f.event.id).collect::<Vec<_>>(), vec![&munich], "without a time: current only");
    let p = s.list_profiles(c.id, ProfileFilter::default(), 5).await.unwrap().remove(0);
    assert_eq!(p.since.get("city"), Some(&json!(2_800)));
    let h0 = &p.history[0];
    assert_eq!((&h0.value, h0.valid_from, h0.valid_to), (&json!("Berlin"), Some(900), 2_800));
    let city = |t| mnemo_core::profile::as_of(&p, t).attributes.get("city").cloned();
    assert_eq!((city(800), city(1_000), city(2_800)), (None, Some(json!("Berlin")), Some(json!("Munich"))));
    // A re-derivation (a session deleted) replaces the versions whole: the gone values leave.
    let versions = ProfileVersions { history: vec![], since: info(json!({"city": 2_800})) };
    let patch = ProfilePatch {
        attributes: Some(info(json!({"city": "Munich"}))),
        replace_attributes: true,
        versions: Some(versions),
        ..Default::default()
    };
    let p = s.update_profile(c.id, &p.id, patch, 4_000).await.unwrap();
    let listed = s.list_profiles(c.id, ProfileFilter::default(), 5).await.unwrap().remove(0);
    for p in [p, listed] {
        assert!(p.history.is_empty(), "{:?}", p.history);
        assert_eq!(p.since, info(json!({"city": 2_800})));
    }
}

/// `user/list`: the users a conversation's metadata or an active event names, with their counts
/// and last activity (a conversation's last write, an event's last change), most recent first;
/// `contains` matches part of the id, its `%` and `_` literally.
pub async fn users_are_listed_most_recently_active_first(h: &impl StoreHarness) {
    let (s, c) = setup(h).await;
    let t = ExtractTrigger::from_parts(None, Some(100), None, Default::default()).unwrap();
    s.append_messages(append(&c, "c-u1", vec![msg(Role::User, "hi", 5, None)], t, 1_000)).await.unwrap();
    let bob = AppendRequest {
        meta: ConversationMeta { user_id: Some("Bob_1".into()), ..Default::default() },
        ..append(&c, "c-bob", vec![msg(Role::User, "hello", 5, None)], t, 2_000)
    };
    s.append_messages(bob).await.unwrap();
    let mut alice = None;
    for (user, at) in [("u1", 500), ("u1", 600), ("alice", 3_000)] {
        alice = Some(s.insert_event(NewEvent::of_user(c.id, EVENT_V1, user, summary("x"), at)).await.unwrap().id);
    }
    let gone = s.insert_event(NewEvent::of_user(c.id, EVENT_V1, "carol", summary("x"), 9_000)).await.unwrap();
    assert!(s.delete_event(c.id, &gone.id).await.unwrap());
    let other = NewCollection { collection_name: "other".into(), ..new_coll(CollectionSchema::default()) };
    let other = s.ensure_collection(other).await.unwrap();
    s.insert_event(NewEvent::of_user(other.id, EVENT_V1, "dave", summary("x"), 9_000)).await.unwrap();
    let list = |contains: Option<&str>, limit| s.list_users(c.id, contains.map(String::from), limit);
    let users = list(None, 10).await.unwrap();
    let row = |u: &str, events, conversations, last| UserSummary {
        user_id: u.into(),
        events,
        conversations,
        last_active: Some(last),
    };
    assert_eq!(users, vec![row("alice", 1, 0, 3_000), row("Bob_1", 0, 1, 2_000), row("u1", 2, 1, 1_000)]);
    assert_eq!(list(Some("b_"), 10).await.unwrap(), vec![row("Bob_1", 0, 1, 2_000)], "part of the id, any case");
    assert!(list(Some("%"), 10).await.unwrap().is_empty(), "% is no wildcard");
    assert_eq!(list(None, 1).await.unwrap(), vec![row("alice", 1, 0, 3_000)]);

    // The latest change leaving (archived) and coming back, a later change, and an event of two
    // users forgotten for one of them: counts and last activity as the events say.
    let alice_now = async || list(Some("alice"), 10).await.unwrap();
    let newer = s.insert_event(NewEvent::of_user(c.id, EVENT_V1, "alice", summary("y"), 4_000)).await.unwrap();
    assert_eq!(alice_now().await, vec![row("alice", 2, 0, 4_000)]);
    let status = |st: &str| EventPatch { status: Some(st.into()), ..Default::default() };
    s.update_event(c.id, &newer.id, status("archived"), 5_000).await.unwrap();
    assert_eq!(alice_now().await, vec![row("alice", 1, 0, 3_000)], "an archived event counts no more, nor its change");
    s.update_event(c.id, &newer.id, status("active"), 6_000).await.unwrap();
    assert_eq!(alice_now().await, vec![row("alice", 2, 0, 6_000)], "restored: counted, changed at 6,000");
    let text = EventPatch { memory_info: Some(summary("z")), ..Default::default() };
    s.update_event(c.id, alice.as_deref().unwrap(), text, 7_000).await.unwrap();
    assert_eq!(alice_now().await, vec![row("alice", 2, 0, 7_000)]);
    let both = NewEvent {
        user_id: vec!["erin".into(), "frank".into()],
        ..NewEvent::of_user(c.id, EVENT_V1, "erin", summary("w"), 8_000)
    };
    let both = s.insert_event(both).await.unwrap();
    s.insert_event(NewEvent::of_user(c.id, EVENT_V1, "frank", summary("v"), 7_500)).await.unwrap();
    s.forget_user(c.id, "erin").await.unwrap();
    assert!(list(Some("erin"), 10).await.unwrap().is_empty(), "forgotten");
    assert_eq!(
        list(Some("frank"), 10).await.unwrap(),
        vec![row("frank", 2, 0, 8_000)],
        "the shared event stays frank's"
    );
    assert!(s.delete_event(c.id, &both.id).await.unwrap());
    assert_eq!(list(Some("frank"), 10).await.unwrap(), vec![row("frank", 1, 0, 7_500)], "deleted: counted once");
    // The same once the store has done its upkeep (PostgreSQL folds what its triggers appended).
    while s.housekeeping().await.unwrap() {}
    assert_eq!(list(Some("frank"), 10).await.unwrap(), vec![row("frank", 1, 0, 7_500)]);
    assert_eq!(alice_now().await, vec![row("alice", 2, 0, 7_000)]);
}

pub async fn idle_deadline_closes_once_and_survives_reopen(h: &impl StoreHarness) {
    let c = {
        let (s, c) = setup(h).await;
        let t = ExtractTrigger { token_count: 1000, message_count: 100, wait_timeout: 5 };
        s.append_messages(append(&c, "conv", vec![msg(Role::User, "hi", 1, None)], t, 1_000)).await.unwrap();
        assert_eq!(s.next_idle_deadline().await.unwrap(), Some(6_000));
        assert!(s.close_idle_conversations(5_999, 10, 3).await.unwrap().is_empty());
        c
    };
    let s = h.open().await;
    // Two schedulers (two replicas, or two loops) racing: the session is closed exactly once.
    let (a, b) = tokio::join!(s.close_idle_conversations(6_000, 10, 3), s.close_idle_conversations(6_000, 10, 3));
    let closed: Vec<SessionClosed> = a.unwrap().into_iter().chain(b.unwrap()).collect();
    assert_eq!(closed.len(), 1);
    assert_eq!(closed[0].reason, TriggerReason::WaitTimeout);
    assert_eq!(s.next_idle_deadline().await.unwrap(), None);
    assert_eq!(s.list_jobs(c.id, JobFilter { limit: 10, ..Default::default() }).await.unwrap().len(), 1);
}

pub async fn event_filters_and_batch_delete(h: &impl StoreHarness) {
    let (s, c) = setup(h).await;
    for (u, ty, t) in [("a", "event_v1", 1), ("a", "event_v1", 3), ("b", "event_v1", 2), ("a", "x", 4)] {
        let e = NewEvent {
            assistant_id: vec!["bot".into()],
            ..NewEvent::of_user(c.id, ty, u, summary(&format!("{u} {ty} {t}")), t)
        };
        s.insert_event(e).await.unwrap();
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
    let by_bot = EventFilter { assistant_id: vec!["bot".into()], ..Default::default() };
    assert_eq!(s.list_events(c.id, by_bot, 10).await.unwrap().len(), 4);
    // A session's events over a time window (how a search finds the reply to a turn that asks).
    for (session, t) in [("s1", 10), ("s1", 20), ("s2", 15), ("s1", 30)] {
        let e = NewEvent {
            session_id: Some(session.into()),
            ..NewEvent::of_user(c.id, "event_v1", "c", summary(&format!("{session} {t}")), t)
        };
        s.insert_event(e).await.unwrap();
    }
    let thread = EventFilter {
        user_id: vec!["c".into()],
        session_id: vec!["s1".into()],
        start_time: Some(10),
        end_time: Some(25),
        active_only: true,
        ..Default::default()
    };
    let got = s.list_events(c.id, thread.clone(), 32).await.unwrap();
    assert_eq!(got.iter().map(|e| e.time).collect::<Vec<_>>(), vec![20, 10]);
    // Named events alone (an entity's): listed, and searched, within the rest of the filter.
    let ids: Vec<String> = got.iter().map(|e| e.id.clone()).collect();
    let named = EventFilter { event_ids: vec![ids[1].clone(), "evt_unknown".into()], ..thread.clone() };
    let listed = s.list_events(c.id, named.clone(), 32).await.unwrap();
    assert_eq!(listed.iter().map(|e| e.time).collect::<Vec<_>>(), vec![10]);
    let q = CandidateQuery { vector: None, terms: vec!["s1".into()], k: 10, vector_hits: None, corpus: None };
    let found = s.search_candidates(c.id, named, q).await.unwrap();
    assert_eq!(found.iter().map(|c| c.event.time).collect::<Vec<_>>(), vec![10], "search keeps to the ids");
    // The next event of the session: after a time, and after an id at the same time.
    let open = EventFilter { start_time: None, end_time: None, ..thread };
    let next = |time, id: &str| {
        let (s, open) = (&s, open.clone());
        let id = id.to_string();
        async move { s.event_after(c.id, open, time, &id).await.unwrap().map(|e| e.time) }
    };
    assert_eq!(next(10, &got[1].id).await, Some(20), "s2's event at 15 is another session's");
    assert_eq!(next(20, "").await, Some(20), "same time, greater id");
    assert_eq!(next(20, &got[0].id).await, Some(30));
    assert_eq!(next(30, "~").await, None);
    assert_eq!(s.batch_delete_events(c.id, f(&["c"], &[])).await.unwrap(), 4);
    assert_eq!(s.batch_delete_events(c.id, f(&["a"], &[])).await.unwrap(), 3);
    let rest = s.list_events(c.id, f(&[], &[]), 10).await.unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].user_id, vec!["b".to_string()]);

    // What an insert returns is what a read finds (stores build it instead of reading it back).
    let full = NewEvent {
        assistant_id: vec!["bot".into(), "bot2".into()],
        group_id: Some("g".into()),
        session_id: Some("s1".into()),
        conversation_id: Some("conv1".into()),
        scope: Some("project".into()),
        class: "fact".into(),
        source_message_ids: vec![3, 4],
        embedding: Some(embed("kyoto trip", EmbedKind::Document).await),
        expires_at: Some(99_000),
        now: 7_000,
        ..NewEvent::of_user(
            c.id,
            "event_v1",
            "c",
            info(serde_json::json!({"summary": "Kyoto 京都 \"trip\"", "n": 1.5})),
            5_000,
        )
    };
    let inserted = s.insert_event(full).await.unwrap();
    assert_eq!(s.get_event(c.id, &inserted.id).await.unwrap().as_ref(), Some(&inserted));
    assert_eq!((inserted.status.as_str(), inserted.created_at, inserted.updated_at), ("active", 7_000, 7_000));

    // Hits: one per id given, an id given twice counts twice; per day and user in the statistics.
    let day = 3 * 86_400_000;
    s.record_hits(c.id, vec![inserted.id.clone(), rest[0].id.clone(), inserted.id.clone()], day + 5).await.unwrap();
    let hit = |id: String| {
        let s = s.clone();
        async move { s.get_event(c.id, &id).await.unwrap().map(|e| (e.hit_count, e.last_hit_at)) }
    };
    assert_eq!(hit(inserted.id.clone()).await, Some((2, Some(day + 5))));
    assert_eq!(hit(rest[0].id.clone()).await, Some((1, Some(day + 5))));
    let per_day = |user: Option<&str>| {
        let s = s.clone();
        let user = user.map(str::to_string);
        async move { s.memory_stats(c.id, user, 7, day + 10).await.unwrap().hits_per_day }
    };
    let total: u64 = per_day(None).await.iter().map(|(_, n)| n).sum();
    let of_c: u64 = per_day(Some("c")).await.iter().map(|(_, n)| n).sum();
    let of_b: u64 = per_day(Some("b")).await.iter().map(|(_, n)| n).sum();
    assert_eq!((total, of_c, of_b), (3, 2, 1));
}

pub async fn concurrent_writes_are_all_durable(h: &impl StoreHarness) {
    let c = {
        let (s, c) = setup(h).await;
        let t = ExtractTrigger { token_count: 1_000_000, message_count: 100_000, wait_timeout: 60 };
        let mut tasks = Vec::new();
        for w in 0..16 {
            let (s, c) = (s.clone(), c.clone());
            tasks.push(tokio::spawn(async move {
                for i in 0..25 {
                    // Two writers per conversation: the counts must still add up.
                    let m = vec![msg(Role::User, &format!("w{w} m{i}"), 1, None)];
                    s.append_messages(append(&c, &format!("conv{}", w % 8), m, t, 5)).await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        c
    };
    let s = h.open().await;
    for conv in 0..8 {
        let info = s.conversation_info(c.id, &format!("conv{conv}")).await.unwrap().unwrap();
        assert_eq!((info.short_term.len(), info.open_messages), (50, 50));
    }
}

async fn embed(text: &str, kind: EmbedKind) -> Vec<f32> {
    HashingEmbedder { dim: 64 }.embed(&[text.to_string()], kind).await.unwrap().remove(0)
}

pub async fn candidates_come_from_vectors_and_full_text_and_deletes_leave_no_trace(h: &impl StoreHarness) {
    let (s, c) = setup(h).await;
    let texts = ["用户喜欢手冲咖啡", "The user adopted a puppy named Max", "用户住在上海"];
    let mut ids = Vec::new();
    for (i, t) in texts.iter().enumerate() {
        let user = if i < 2 { "u1" } else { "u2" };
        let e = NewEvent {
            embedding: Some(embed(t, EmbedKind::Document).await),
            ..NewEvent::of_user(c.id, EVENT_V1, user, summary(t), i as i64)
        };
        ids.push(s.insert_event(e).await.unwrap().id);
    }
    let f = EventFilter { user_id: vec!["u1".into()], active_only: true, ..Default::default() };
    let q = |terms: &[&str]| CandidateQuery {
        vector: None,
        terms: terms.iter().map(|t| t.to_string()).collect(),
        k: 10,
        vector_hits: None,
        corpus: None,
    };
    let got = s.search_candidates(c.id, f.clone(), q(&["咖啡"])).await.unwrap();
    assert_eq!((got.len(), got[0].event.id.as_str()), (1, ids[0].as_str()));
    assert!(got[0].bm25.unwrap() > 0.0);
    assert!(
        s.search_candidates(c.id, f.clone(), q(&["上海"])).await.unwrap().is_empty(),
        "other users' events never come back"
    );
    assert!(
        s.search_candidates(c.id, f.clone(), q(&["\"a\" OR *", "NEAR(", "'x' | !y", "puppi"])).await.is_ok(),
        "query syntax is never parsed"
    );
    let qv = embed("puppy named Max", EmbedKind::Query).await;
    let got = s
        .search_candidates(
            c.id,
            f.clone(),
            CandidateQuery { vector: Some(qv.clone()), terms: vec![], k: 1, vector_hits: None, corpus: None },
        )
        .await
        .unwrap();
    assert_eq!(got[0].event.id, ids[1]);
    assert!(got[0].cosine.unwrap() > 0.5);
    assert!(s.delete_event(c.id, &ids[1]).await.unwrap());
    let q = CandidateQuery { vector: Some(qv), terms: vec!["max".into()], k: 10, vector_hits: None, corpus: None };
    let got = s.search_candidates(c.id, f.clone(), q).await.unwrap();
    assert!(got.iter().all(|g| g.event.id != ids[1]), "a deleted event leaves vectors and terms");
    assert!(s.events_missing_vectors(c.id, 10).await.unwrap().is_empty());
}

/// `mnemo reindex`: recording another model drops the collection's vectors in the same
/// transaction (they are not comparable with the new model's) — and nothing else: full text still
/// finds every event, the events wait in `events_missing_vectors`, other collections keep their
/// vectors, and recording the model a collection already has keeps them.
pub async fn a_new_embedding_model_drops_the_old_vectors_and_keeps_full_text(h: &impl StoreHarness) {
    let (s, c) = setup(h).await;
    let other = s
        .ensure_collection(NewCollection { collection_name: "c2".into(), ..new_coll(CollectionSchema::default()) })
        .await
        .unwrap();
    for (coll, text) in [(c.id, "the user keeps bees"), (c.id, "用户住在上海"), (other.id, "the user keeps bees")]
    {
        let e = NewEvent {
            embedding: Some(embed(text, EmbedKind::Document).await),
            ..NewEvent::of_user(coll, EVENT_V1, "u1", summary(text), 1)
        };
        s.insert_event(e).await.unwrap();
    }
    s.set_collection_embedding(c.id, "test-hashing", 64).await.unwrap();
    assert!(s.events_missing_vectors(c.id, 10).await.unwrap().is_empty(), "the same model keeps the vectors");
    // One event stored without a vector (the embedder was down) among events with theirs.
    let bare = s.insert_event(NewEvent::of_user(c.id, EVENT_V1, "u1", summary("no vector yet"), 2)).await.unwrap();
    let missing = s.events_missing_vectors(c.id, 10).await.unwrap();
    assert_eq!(missing.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(), [bare.id.as_str()]);
    assert!(s.delete_event(c.id, &bare.id).await.unwrap());
    assert!(s.events_missing_vectors(c.id, 10).await.unwrap().is_empty());

    s.set_collection_embedding(c.id, "another-model", 32).await.unwrap();
    let c_now = s.get_collection("default", "c1").await.unwrap().unwrap();
    assert_eq!((c_now.embedding_model.as_deref(), c_now.embedding_dim), (Some("another-model"), Some(32)));
    assert_eq!(s.events_missing_vectors(c.id, 10).await.unwrap().len(), 2, "every event waits for the new model");
    assert!(s.events_missing_vectors(other.id, 10).await.unwrap().is_empty(), "other collections keep theirs");
    h.settle().await;
    let f = EventFilter { user_id: vec!["u1".into()], active_only: true, ..Default::default() };
    let got = s
        .search_candidates(
            c.id,
            f.clone(),
            CandidateQuery { vector: None, terms: search_tokens("bees"), k: 10, vector_hits: None, corpus: None },
        )
        .await
        .unwrap();
    assert_eq!(got.len(), 1, "full text still finds the event");
    let v: Vec<f32> = (0..32).map(|i| if i == 0 { 1.0 } else { 0.0 }).collect();
    for e in s.events_missing_vectors(c.id, 10).await.unwrap() {
        s.set_event_vector(c.id, &e.id, v.clone(), None).await.unwrap();
    }
    assert!(s.events_missing_vectors(c.id, 10).await.unwrap().is_empty());
    let got = s
        .search_candidates(
            c.id,
            f,
            CandidateQuery { vector: Some(v), terms: vec![], k: 10, vector_hits: None, corpus: None },
        )
        .await
        .unwrap();
    assert_eq!(got.len(), 2, "the new vectors are searched");
    assert!(got.iter().all(|g| (g.cosine.unwrap() - 1.0).abs() < 1e-5));
}

/// Turn vectors (`crate::turns`): stored beside an event's vector, each candidate gets the best
/// turn (which, and its cosine); a changed text drops them unless new ones come with it; a new model drops them
/// with the vectors, and re-indexing stores new ones beside the new vector.
pub async fn an_event_keeps_its_turns_vectors_until_its_text_or_model_changes(h: &impl StoreHarness) {
    let (s, c) = setup(h).await;
    let turns = ["Nate: how was the weekend", "Joanna: I painted a lake sunrise", "Nate: lovely colours"];
    let mut turn_vectors = Vec::new();
    for t in turns {
        turn_vectors.push(embed(t, EmbedKind::Document).await);
    }
    let chunk = turns.join(" ");
    let events = vec![
        NewEvent {
            embedding: Some(embed(&chunk, EmbedKind::Document).await),
            turn_vectors: Some(turn_vectors.clone()),
            ..NewEvent::of_user(c.id, EVENT_V1, "u1", summary(&chunk), 1)
        },
        NewEvent {
            embedding: Some(embed("a sunrise over the lake", EmbedKind::Document).await),
            ..NewEvent::of_user(c.id, EVENT_V1, "u1", summary("a sunrise over the lake"), 2)
        },
        // Turn vectors without a vector are not kept (they only refine it).
        NewEvent {
            turn_vectors: Some(turn_vectors.clone()),
            ..NewEvent::of_user(c.id, EVENT_V1, "u1", summary("a sunrise, no vector yet"), 3)
        },
    ];
    let ids: Vec<String> = s.insert_events(events).await.unwrap().into_iter().map(|e| e.id).collect();
    let f = EventFilter { user_id: vec!["u1".into()], active_only: true, ..Default::default() };
    let qv = embed("Joanna painted a lake sunrise", EmbedKind::Query).await;
    let best = turn_vectors.iter().map(|t| t.iter().zip(&qv).map(|(a, b)| a * b).sum::<f32>()).fold(f32::MIN, f32::max);
    let search = |v: Vec<f32>| {
        let s = s.clone();
        let f = f.clone();
        async move {
            let q = CandidateQuery {
                vector: Some(v),
                terms: search_tokens("sunrise"),
                k: 10,
                vector_hits: None,
                corpus: None,
            };
            let got = s.search_candidates(c.id, f, q).await.unwrap();
            got.into_iter().map(|g| (g.event.id, g.best_turn)).collect::<HashMap<String, Option<BestTurn>>>()
        }
    };
    let got = search(qv.clone()).await;
    let BestTurn { index, cosine: turn } = got[&ids[0]].expect("the chunk's turns are scored");
    assert!((turn - best).abs() < 0.02, "best turn {turn} vs {best}");
    assert!(turn > 0.5, "the turn that says it is near the question: {turn}");
    assert_eq!(index, 1, "Joanna's turn, the second");
    assert_eq!((got[&ids[1]], got[&ids[2]]), (None, None), "no turns, or no vector to go with them");

    // A new text with its vector but no turn vectors: the old ones go.
    let patch = |text: &str, v: Vec<f32>, turns: Option<Vec<Vec<f32>>>| EventPatch {
        memory_info: Some(summary(text)),
        embedding: Some(v),
        turn_vectors: turns,
        ..Default::default()
    };
    let v = embed("Joanna painted a lake sunrise again", EmbedKind::Document).await;
    s.update_event(c.id, &ids[0], patch("Joanna painted a lake sunrise again", v.clone(), None), 10).await.unwrap();
    assert_eq!(search(qv.clone()).await[&ids[0]], None, "a changed text drops the turns' vectors");
    s.update_event(c.id, &ids[0], patch("sunrise", v, Some(turn_vectors.clone())), 11).await.unwrap();
    assert!(search(qv.clone()).await[&ids[0]].is_some(), "new ones come with the new text");
    // A change that leaves the text keeps them.
    let status = EventPatch { time: Some(12), ..Default::default() };
    s.update_event(c.id, &ids[0], status, 12).await.unwrap();
    assert!(search(qv.clone()).await[&ids[0]].is_some());

    // Another model of the same dimension: the vectors go, and the turns' with them ...
    s.set_collection_embedding(c.id, "another-model", 64).await.unwrap();
    h.settle().await;
    let got = search(qv.clone()).await;
    assert!(got.values().all(Option::is_none), "no vector, no turns: {got:?}");
    // ... until re-indexing brings both.
    for e in s.events_missing_vectors(c.id, 10).await.unwrap() {
        let turns = (e.id == ids[0]).then(|| turn_vectors.clone());
        s.set_event_vector(c.id, &e.id, embed(&e.text(), EmbedKind::Document).await, turns).await.unwrap();
    }
    let got = search(qv.clone()).await;
    assert!(got[&ids[0]].is_some() && got[&ids[1]].is_none() && got[&ids[2]].is_none(), "{got:?}");
    s.set_event_vector(c.id, &ids[0], embed("sunrise", EmbedKind::Document).await, None).await.unwrap();
    assert_eq!(search(qv).await[&ids[0]], None, "a new vector without turns drops the old turns");
    assert!(s.delete_event(c.id, &ids[0]).await.unwrap());
}

const WORDS: [&str; 10] = ["coffee", "hike", "baby", "formula", "kyoto", "奶粉", "咖啡", "上海", "宝宝", "piano"];

fn word_text(i: usize, x: &mut u64) -> String {
    (0..(3 + i % 9))
        .map(|_| {
            *x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            WORDS[(*x >> 33) as usize % WORDS.len()]
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Both signals equal a computation from first principles over the same data — cosine of the
/// stored vectors, BM25 with the collection's statistics — after inserts, an update and a delete.
/// So every store returns the same candidates with the same scores, and core ranks them alike.
pub async fn both_signals_equal_the_reference_computation(h: &impl StoreHarness) {
    let (s, c) = setup(h).await;
    let mut x = 7u64;
    let mut docs: HashMap<String, (String, String)> = HashMap::new(); // id -> (user, text)
    let mut batch = Vec::new();
    for i in 0..60 {
        let text = word_text(i, &mut x);
        let user = format!("u{}", i % 2);
        let e = NewEvent {
            embedding: Some(embed(&text, EmbedKind::Document).await),
            ..NewEvent::of_user(c.id, EVENT_V1, user.clone(), summary(&text), i as i64)
        };
        // Half one by one, half in two batches: the statistics must not tell them apart.
        if i < 30 {
            docs.insert(s.insert_event(e).await.unwrap().id, (user, text));
            continue;
        }
        batch.push(((user, text), e));
        if batch.len() == 15 {
            let (meta, events): (Vec<_>, Vec<_>) = std::mem::take(&mut batch).into_iter().unzip();
            let stored = s.insert_events(events).await.unwrap();
            assert_eq!(stored.len(), meta.len());
            for (e, (user, text)) in stored.into_iter().zip(meta) {
                assert_eq!(e.memory_info, summary(&text), "returned in the order given");
                docs.insert(e.id, (user, text));
            }
        }
    }
    let mut ids: Vec<String> = docs.keys().cloned().collect();
    ids.sort();
    let new_text = "kyoto kyoto piano";
    s.update_event(c.id, &ids[3], EventPatch { memory_info: Some(summary(new_text)), ..Default::default() }, 100)
        .await
        .unwrap();
    docs.get_mut(&ids[3]).unwrap().1 = new_text.into();
    s.delete_event(c.id, &ids[4]).await.unwrap();
    docs.remove(&ids[4]);

    let terms: Vec<String> = ["kyoto", "咖啡", "piano"].iter().map(|t| t.to_string()).collect();
    let analysed: HashMap<&String, String> =
        docs.iter().map(|(id, (_, t))| (id, search_tokens(&event_search_text(&summary(t))).join(" "))).collect();
    let stats =
        CorpusStats { docs: docs.len() as u64, tokens: analysed.values().map(|t| fts_tokens(t).count() as u64).sum() };
    let df = |term: &str| analysed.values().filter(|t| fts_tokens(t).any(|x| x == term)).count() as u64;
    let reference = Bm25Query::new(&terms, stats, df);
    let qv = embed("kyoto piano", EmbedKind::Query).await;
    let f = EventFilter { user_id: vec!["u0".into()], active_only: true, ..Default::default() };
    let mine: Vec<&String> = docs.iter().filter(|(_, (u, _))| u == "u0").map(|(id, _)| id).collect();
    let q = CandidateQuery { vector: Some(qv.clone()), terms: terms.clone(), k: 100, vector_hits: None, corpus: None };
    let before = s.search_candidates(c.id, f.clone(), q.clone()).await.unwrap();
    h.settle().await;
    let after = s.search_candidates(c.id, f, q).await.unwrap();
    assert_eq!(after.len(), mine.len(), "k covers the scope: every one of u0's events is a candidate");
    for cand in before.iter().chain(&after) {
        let id = &cand.event.id;
        let want_bm25 = reference.score(&analysed[id]);
        let got_bm25 = cand.bm25.unwrap_or(0.0);
        assert!((got_bm25 - want_bm25).abs() < 1e-9, "{id}: bm25 {got_bm25} vs reference {want_bm25}");
        let want_cos = mnemo_core::embed::dot(&qv, &embed(&docs[id].1, EmbedKind::Document).await);
        let got_cos = cand.cosine.expect("every candidate has a vector");
        assert!((got_cos - want_cos).abs() < 1e-5, "{id}: cosine {got_cos} vs reference {want_cos}");
    }
    // A second hop (other terms, same vector, filter and k) given the first's vector part gives
    // exactly what scanning again gives.
    let f = EventFilter { user_id: vec!["u0".into()], active_only: true, ..Default::default() };
    let first =
        CandidateQuery { vector: Some(qv.clone()), terms: terms.clone(), k: 3, vector_hits: None, corpus: None };
    let hits = first.vector_hits_of(&s.search_candidates(c.id, f.clone(), first.clone()).await.unwrap());
    assert_eq!(hits.as_ref().map(Vec::len), Some(3));
    let second = CandidateQuery { terms: vec!["咖啡".into(), "coffee".into()], ..first.clone() };
    let key = |mut v: Vec<Candidate>| {
        v.sort_by(|a, b| a.event.id.cmp(&b.event.id));
        v.into_iter().map(|c| (c.event.id, c.cosine, c.bm25)).collect::<Vec<_>>()
    };
    let scanned = key(s.search_candidates(c.id, f.clone(), second.clone()).await.unwrap());
    let reused =
        key(s.search_candidates(c.id, f.clone(), CandidateQuery { vector_hits: hits, ..second }).await.unwrap());
    assert_eq!(reused, scanned, "a reused vector part changes no candidate and no score");
    // Both searches in one call (a store may keep what the first read) answer as the two calls.
    let mut asked = None;
    let then: mnemo_core::store::NextTerms<'_> = Box::new(|found| {
        asked = Some(found.len());
        Box::pin(std::future::ready(Some(mnemo_core::store::NextHop::terms(vec!["咖啡".into(), "coffee".into()]))))
    });
    let unset = CandidateQuery { vector: None, ..first.clone() };
    let known = mnemo_core::store::known_vector(Some(qv.clone()));
    let hops = s.search_candidates_then(c.id, f.clone(), unset.clone(), known, then).await.unwrap();
    assert_eq!(asked, Some(hops.first.len()), "the second search is decided from the first's candidates");
    assert_eq!(hops.vector.as_deref(), Some(&qv[..]), "the vector is handed back");
    assert_eq!(key(hops.first), key(s.search_candidates(c.id, f.clone(), first.clone()).await.unwrap()));
    assert_eq!(key(hops.second.expect("a second search")), scanned);
    // The same with the vector still being computed when the search starts (the store may read
    // the scope meanwhile): the same answers.
    let slow_vector: mnemo_core::store::PendingVector<'_> = Box::pin(async {
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        Some(qv.clone())
    });
    let then: mnemo_core::store::NextTerms<'_> = Box::new(|_| {
        Box::pin(std::future::ready(Some(mnemo_core::store::NextHop::terms(vec!["咖啡".into(), "coffee".into()]))))
    });
    let hops = s.search_candidates_then(c.id, f.clone(), unset.clone(), slow_vector, then).await.unwrap();
    assert_eq!(hops.vector.as_deref(), Some(&qv[..]), "the vector is handed back");
    assert_eq!(key(hops.first), key(s.search_candidates(c.id, f.clone(), first.clone()).await.unwrap()));
    assert_eq!(key(hops.second.expect("a second search")), scanned);
    // No vector after all (the embedder failed): full text only, as a search without one.
    let none = mnemo_core::store::known_vector(None);
    let no_hop: mnemo_core::store::NextTerms<'_> = Box::new(|_| Box::pin(std::future::ready(None)));
    let hops = s.search_candidates_then(c.id, f.clone(), unset.clone(), none, no_hop).await.unwrap();
    assert!(hops.vector.is_none() && hops.second.is_none(), "no terms asked, no second search");
    assert_eq!(key(hops.first), key(s.search_candidates(c.id, f.clone(), unset).await.unwrap()));
}

/// `insert_events`: every event of a batch is stored (with its vector, subjects and terms) and
/// returned in order — or, when one of them cannot be (its collection does not exist), none is.
pub async fn a_batch_is_stored_whole_or_not_at_all(h: &impl StoreHarness) {
    let (s, c) = setup(h).await;
    let texts = ["the user keeps bees", "用户住在上海", "a hike in the alps"];
    let mut events = Vec::new();
    for (i, t) in texts.iter().enumerate() {
        let user = if i == 1 { "u2" } else { "u1" };
        events.push(NewEvent {
            embedding: Some(embed(t, EmbedKind::Document).await),
            assistant_id: vec!["bot".into()],
            ..NewEvent::of_user(c.id, EVENT_V1, user, summary(t), i as i64)
        });
    }
    let stored = s.insert_events(events).await.unwrap();
    assert_eq!(stored.iter().map(|e| e.memory_info.clone()).collect::<Vec<_>>(), texts.map(summary));
    for e in &stored {
        assert_eq!(s.get_event(c.id, &e.id).await.unwrap().as_ref(), Some(e));
    }
    let mine = |user: &str| EventFilter { user_id: vec![user.into()], active_only: true, ..Default::default() };
    assert_eq!(s.list_events(c.id, mine("u1"), 10).await.unwrap().len(), 2);
    let by_bot = EventFilter { assistant_id: vec!["bot".into()], ..Default::default() };
    assert_eq!(s.list_events(c.id, by_bot, 10).await.unwrap().len(), 3);
    h.settle().await;
    let q = CandidateQuery {
        vector: Some(embed("上海", EmbedKind::Query).await),
        terms: search_tokens("上海"),
        k: 5,
        vector_hits: None,
        corpus: None,
    };
    let got = s.search_candidates(c.id, mine("u2"), q).await.unwrap();
    assert_eq!(got.len(), 1);
    assert!(got[0].cosine.is_some() && got[0].bm25.is_some(), "the batch's vector and terms are searched");
    assert!(s.events_missing_vectors(c.id, 10).await.unwrap().is_empty());
    assert!(s.insert_events(vec![]).await.unwrap().is_empty());

    let good = NewEvent::of_user(c.id, EVENT_V1, "u3", summary("a good event"), 10);
    let orphan = NewEvent::of_user(c.id + 1000, EVENT_V1, "u3", summary("no such collection"), 11);
    assert!(s.insert_events(vec![good, orphan]).await.is_err(), "an event of no collection is refused");
    assert!(s.list_events(c.id, mine("u3"), 10).await.unwrap().is_empty(), "and nothing of its batch is stored");
}

/// Scores 2.8·10⁻⁵ apart — below what a half-precision copy of the vectors can tell apart —
/// still rank exactly, with exact cosines: a store that orders by a compressed copy (PostgreSQL's
/// user-document index) must re-score every event the copy cannot place.
pub async fn scores_closer_than_half_precision_rank_exactly(h: &impl StoreHarness) {
    let (s, c) = setup(h).await;
    // Event i scores 2.8·10⁻⁵ more than event i − 1 against `base`, but its two components move
    // in opposite directions across f16's spacing (4.9·10⁻⁴ there) at different events, so the
    // f16 copies' scores step up and down: their order is not the true one, without ties that
    // would hide it (a store re-scoring too few events returns the wrong ones).
    let mut base = vec![0.0f32; 64];
    (base[0], base[1]) = (std::f32::consts::FRAC_1_SQRT_2, std::f32::consts::FRAC_1_SQRT_2);
    let scaled = |i: usize| {
        let mut v = vec![0.0f32; 64];
        (v[0], v[1], v[2]) = (0.6 + i as f32 * 1e-4, 0.55 - i as f32 * 0.6e-4, 0.3);
        v
    };
    let mut order: Vec<usize> = (0..40).collect();
    let mut x = 5u64;
    for i in (1..order.len()).rev() {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        order.swap(i, (x >> 33) as usize % (i + 1));
    }
    let mut id_of = HashMap::new();
    for &i in &order {
        let e = NewEvent {
            embedding: Some(scaled(i)),
            ..NewEvent::of_user(c.id, EVENT_V1, "u1", summary(&format!("near tie {i}")), i as i64)
        };
        id_of.insert(i, s.insert_event(e).await.unwrap().id);
    }
    for (i, text) in ["用户住在上海", "the user keeps bees", "a hike in the alps"].iter().enumerate() {
        let e = NewEvent {
            embedding: Some(embed(text, EmbedKind::Document).await),
            ..NewEvent::of_user(c.id, EVENT_V1, "u1", summary(text), 100 + i as i64)
        };
        s.insert_event(e).await.unwrap();
    }
    h.settle().await;
    let f = EventFilter { user_id: vec!["u1".into()], active_only: true, ..Default::default() };
    for k in [1, 5, 12] {
        let q = CandidateQuery { vector: Some(base.clone()), terms: vec![], k, vector_hits: None, corpus: None };
        let mut got: Vec<(String, f32)> = s
            .search_candidates(c.id, f.clone(), q)
            .await
            .unwrap()
            .into_iter()
            .map(|g| (g.event.id, g.cosine.unwrap()))
            .collect();
        got.sort_by(|a, b| b.1.total_cmp(&a.1));
        let want: Vec<&String> = (40 - k..40).rev().map(|i| &id_of[&i]).collect();
        assert_eq!(got.iter().map(|g| &g.0).collect::<Vec<_>>(), want, "k = {k}: the k largest scores, in order");
        for (rank, (_, cos)) in got.iter().enumerate() {
            let want_cos = mnemo_core::embed::dot(&base, &scaled(39 - rank));
            assert!((cos - want_cos).abs() < 2e-6, "k = {k}, rank {rank}: cosine {cos} vs {want_cos}");
        }
    }
}

/// More events than a small scope, a filter that keeps 2% of them: the search still returns the
/// filtered events nearest to the query (an HNSW scan with a post-filter can return none).
pub async fn a_filtered_search_over_a_large_scope_finds_the_filtered_events(h: &impl StoreHarness) {
    let (s, c) = setup(h).await;
    let mut x = 11u64;
    let mut rare = Vec::new();
    for i in 0..5_200usize {
        let text = format!("{} n{i}", word_text(i, &mut x));
        let ty = if i % 50 == 0 { "rare" } else { EVENT_V1 };
        let e = NewEvent {
            embedding: Some(embed(&text, EmbedKind::Document).await),
            ..NewEvent::of_user(c.id, ty, format!("u{}", i % 7), summary(&text), i as i64)
        };
        let id = s.insert_event(e).await.unwrap().id;
        if ty == "rare" {
            rare.push((id, text));
        }
    }
    h.settle().await;
    let probe = &rare[17].1;
    let f = EventFilter { memory_type: vec!["rare".into()], active_only: true, ..Default::default() };
    let q = CandidateQuery {
        vector: Some(embed(probe, EmbedKind::Query).await),
        terms: vec![],
        k: 10,
        vector_hits: None,
        corpus: None,
    };
    let got = s.search_candidates(c.id, f.clone(), q).await.unwrap();
    assert_eq!(got.len(), 10, "k filtered events");
    assert!(got.iter().all(|g| g.event.memory_type == "rare"));
    assert!(got.iter().any(|g| g.event.id == rare[17].0), "the nearest filtered event is found");
    let q =
        CandidateQuery { vector: None, terms: vec![format!("n{}", 17 * 50)], k: 10, vector_hits: None, corpus: None };
    let got = s.search_candidates(c.id, f, q).await.unwrap();
    assert_eq!(
        got.iter().map(|g| g.event.id.as_str()).collect::<Vec<_>>(),
        vec![rare[17].0.as_str()],
        "full text over the large scope"
    );
}

pub async fn export_and_forget_a_user(h: &impl StoreHarness) {
    let (s, c) = setup(h).await;
    let t = ExtractTrigger { token_count: 1, message_count: 100, wait_timeout: 60 };
    for (user, text) in [("u1", "alice likes quokkas"), ("u2", "bob likes otters")] {
        let mut req = append(&c, &format!("conv-{user}"), vec![msg(Role::User, text, 5, None)], t, 10);
        req.meta.user_id = Some(user.into());
        s.append_messages(req).await.unwrap();
        let job = s.claim_job(20, 1000).await.unwrap().unwrap();
        let out = ExtractionOutput {
            events: vec![ExtractedEvent::new(EVENT_V1, summary(text), 10)],
            profile_changes: vec![ProfileChange::Set { key: "pet".into(), value: json!(text) }],
            ..Default::default()
        };
        s.complete_job(&job.lease(), out, 30).await.unwrap();
    }
    let shared = NewEvent {
        user_id: vec!["u1".into(), "u2".into()],
        ..NewEvent::of_user(c.id, EVENT_V1, "u1", summary("a shared trip"), 40)
    };
    let shared = s.insert_event(shared).await.unwrap().id;
    let data = s.export_user(c.id, "u1").await.unwrap();
    assert_eq!((data.conversations.len(), data.messages.len(), data.sessions.len(), data.jobs.len()), (1, 1, 1, 1));
    assert_eq!((data.events.len(), data.profiles.len()), (2, 1));
    let n = s.forget_user(c.id, "u1").await.unwrap();
    assert_eq!((n.conversations, n.messages, n.sessions, n.jobs, n.events, n.profiles), (1, 1, 1, 1, 1, 1));
    let data = s.export_user(c.id, "u1").await.unwrap();
    assert!(data.messages.is_empty() && data.events.is_empty() && data.profiles.is_empty());
    let kept = s.get_event(c.id, &shared).await.unwrap().expect("a shared event stays for the other user");
    assert_eq!(kept.user_id, vec!["u2".to_string()]);
    assert_eq!(s.export_user(c.id, "u2").await.unwrap().events.len(), 2, "u2 is untouched");
}

/// `delete_conversation` (a re-used VikingDB session id): the conversation's messages, sessions,
/// jobs and events go in one step — searchable text and vectors too — and other conversations of
/// the collection keep theirs; the answer names the sessions that were deleted.
pub async fn a_deleted_conversation_leaves_nothing_and_spares_the_others(h: &impl StoreHarness) {
    let (s, c) = setup(h).await;
    let mut sessions = Vec::new();
    for conv in ["gone", "kept"] {
        let m = vec![msg(Role::User, &format!("{conv} hiking"), 1, None)];
        let closed = s.add_session(append(&c, conv, m, ExtractTrigger::default(), 10)).await.unwrap();
        let e = NewEvent {
            conversation_id: Some(conv.into()),
            session_id: Some(closed.session_id.clone()),
            embedding: Some(vec![1.0; 64]),
            ..NewEvent::of_user(c.id, EVENT_V1, "u1", summary(&format!("{conv} hiking")), 10)
        };
        s.insert_event(e).await.unwrap();
        sessions.push(closed.session_id);
    }
    assert_eq!(s.delete_conversation(c.id, "gone").await.unwrap(), vec![sessions[0].clone()]);
    assert!(s.conversation_info(c.id, "gone").await.unwrap().is_none());
    assert!(s.session_info(c.id, &sessions[0]).await.unwrap().is_none());
    let left = s.list_events(c.id, EventFilter::default(), 10).await.unwrap();
    assert_eq!(left.iter().map(|e| e.conversation_id.as_deref()).collect::<Vec<_>>(), vec![Some("kept")]);
    let jobs = s.list_jobs(c.id, JobFilter { limit: 10, ..Default::default() }).await.unwrap();
    assert_eq!(jobs.iter().map(|j| j.session_id.clone()).collect::<Vec<_>>(), vec![Some(sessions[1].clone())]);
    let q = CandidateQuery {
        vector: Some(vec![1.0; 64]),
        terms: mnemo_core::text::search_tokens("hiking"),
        k: 10,
        vector_hits: None,
        corpus: None,
    };
    let found = s.search_candidates(c.id, EventFilter::default(), q).await.unwrap();
    assert!(found.iter().all(|f| f.event.conversation_id.as_deref() == Some("kept")), "no trace of the deleted one");
    assert!(s.delete_conversation(c.id, "gone").await.unwrap().is_empty(), "a second time: nothing");
    assert_eq!(s.session_info(c.id, &sessions[1]).await.unwrap().unwrap().messages.len(), 1);
}

fn hook(id: &str, project: &str, events: &[&str], source: WebhookSource) -> NewWebhook {
    NewWebhook {
        id: id.into(),
        project_name: project.into(),
        url: format!("http://127.0.0.1:9/{id}"),
        secret: "whsec_c2VjcmV0c2VjcmV0".into(),
        events: events.iter().map(|s| s.to_string()).collect(),
        description: String::new(),
        source,
        created_at: 1,
    }
}

/// The project's deliveries, oldest first, as (kind, what it is about).
async fn announced(s: &Arc<dyn Store>, project: &str, state: Option<DeliveryState>) -> Vec<(String, String)> {
    let mut all =
        s.list_deliveries(project, DeliveryFilter { state, limit: 1000, ..Default::default() }).await.unwrap();
    all.reverse();
    let about = |d: &Delivery| {
        ["event_id", "profile_id", "job_id", "user_id"]
            .iter()
            .find_map(|k| d.data.get(*k).and_then(|v| v.as_str()).map(String::from))
            .unwrap_or_default()
    };
    all.iter().map(|d| (d.kind.clone(), about(d))).collect()
}

/// Webhooks: every change writes its announcement in its own transaction (one row per
/// subscribed endpoint of the collection's project, nothing for other projects, nothing for a
/// change that failed), deliveries are claimed under a lease, retried, dead-lettered and
/// redelivered, forgetting a user purges the rows that carry the user's content, and the
/// outbox survives a reopen.
pub async fn every_change_is_announced_in_its_own_transaction(h: &impl StoreHarness) {
    let (s, c) = setup(h).await;
    assert!(announced(&s, "default", None).await.is_empty());
    s.upsert_webhook(hook("all", "default", WEBHOOK_EVENTS, WebhookSource::Api)).await.unwrap();
    s.upsert_webhook(hook("deletes", "default", &["memory.deleted"], WebhookSource::Api)).await.unwrap();
    s.upsert_webhook(hook("elsewhere", "other", WEBHOOK_EVENTS, WebhookSource::Api)).await.unwrap();

    let e =
        s.insert_event(NewEvent::of_user(c.id, EVENT_V1, "u1", summary("alice adopted a quokka"), 10)).await.unwrap();
    s.record_hits(c.id, vec![e.id.clone()], 20).await.unwrap();
    let patch = EventPatch { memory_info: Some(summary("alice adopted two quokkas")), ..Default::default() };
    s.update_event(c.id, &e.id, patch, 30).await.unwrap();
    let gone = s.insert_event(NewEvent::of_user(c.id, EVENT_V1, "u2", summary("bob's otter"), 40)).await.unwrap();
    assert!(s.delete_event(c.id, &gone.id).await.unwrap());
    let p = NewProfile {
        collection_id: c.id,
        profile_type: PROFILE_V1.into(),
        user_id: "u1".into(),
        assistant_id: None,
        content: "pet: quokka".into(),
        attributes: info(json!({"pet": "quokka"})),
        now: 50,
    };
    let p = s.insert_profile(p).await.unwrap();
    let t = ExtractTrigger { token_count: 1, message_count: 100, wait_timeout: 60 };
    s.append_messages(append(&c, "conv", vec![msg(Role::User, "poison", 5, None)], t, 60)).await.unwrap();
    let job = s.claim_job(60, 1000).await.unwrap().unwrap();
    s.fail_job(&job.lease(), "permanent: unreadable", None, 70).await.unwrap();

    let mut got = announced(&s, "default", None).await;
    let mut want: Vec<(String, String)> = [
        ("memory.created", e.id.as_str()),
        ("memory.updated", &e.id),
        ("memory.created", &gone.id),
        ("memory.deleted", &gone.id),
        ("memory.deleted", &gone.id),
        ("profile.updated", &p.id),
        ("job.failed", &job.job.job_id),
    ]
    .iter()
    .map(|(k, id)| (k.to_string(), id.to_string()))
    .collect();
    if h.sharded() {
        got.sort();
        want.sort();
    }
    assert_eq!(got, want, "one row per change and subscribed endpoint; none for hits");
    assert!(announced(&s, "other", None).await.is_empty(), "another project's endpoint hears nothing");
    let all = s
        .list_deliveries("default", DeliveryFilter { webhook_id: Some("all".into()), limit: 100, ..Default::default() })
        .await
        .unwrap();
    let updated = all.iter().find(|d| d.kind == "memory.updated").unwrap();
    assert_eq!(updated.data["memory_info"]["summary"], json!("alice adopted two quokkas"));
    assert_eq!(
        (updated.data["project_name"].as_str(), updated.data["collection_name"].as_str()),
        (Some("default"), Some("c1"))
    );
    assert_eq!(updated.data["user_ids"], json!(["u1"]));
    // Its validity: from its time (none stated), still current.
    let created = all.iter().find(|d| d.kind == "memory.created").unwrap();
    assert_eq!(
        (&created.data["valid_from"], &created.data["valid_to"]),
        (&Value::Null, &Value::Null),
        "{:?}",
        created.data
    );
    let keys = created.data.as_object().unwrap();
    assert!(keys.contains_key("valid_from") && keys.contains_key("valid_to"), "{keys:?}");

    // Delivery: claimed under a lease, retried, delivered or dead-lettered, redelivered.
    let claimed = s.claim_deliveries(100, 5_000, 3).await.unwrap();
    assert_eq!(claimed.len(), 3);
    assert!(claimed.iter().all(|c| c.url.starts_with("http://127.0.0.1:9/") && c.secret.starts_with("whsec_")));
    let rest = s.claim_deliveries(100, 5_000, 100).await.unwrap();
    assert_eq!(rest.len(), 4, "claimed rows are not claimed twice while leased");
    assert!(s.claim_deliveries(4_000, 9_000, 100).await.unwrap().is_empty());
    let (a, b, dead) = (&claimed[0].delivery, &claimed[1].delivery, &claimed[2].delivery);
    s.finish_delivery(a.delivery_id, DeliveryOutcome::Delivered { status: 204 }, 110).await.unwrap();
    let retry = DeliveryOutcome::Failed { status: Some(503), error: "HTTP 503".into(), retry_at: Some(6_000) };
    s.finish_delivery(b.delivery_id, retry, 110).await.unwrap();
    let last = DeliveryOutcome::Failed { status: None, error: "connection refused".into(), retry_at: None };
    s.finish_delivery(dead.delivery_id, last, 120).await.unwrap();
    let rest_ids: Vec<i64> = rest.iter().map(|c| c.delivery.delivery_id).collect();
    let taken_over = s.claim_deliveries(5_500, 20_000, 100).await.unwrap();
    assert_eq!(
        taken_over.iter().map(|c| c.delivery.delivery_id).collect::<Vec<_>>(),
        rest_ids,
        "an expired lease is a crashed sender's: due again"
    );
    let due = s.claim_deliveries(6_000, 20_000, 100).await.unwrap();
    assert_eq!(
        due.iter().map(|c| c.delivery.delivery_id).collect::<Vec<_>>(),
        vec![b.delivery_id],
        "the retry, at its time"
    );
    assert_eq!(due[0].delivery.attempts, 1);
    let dead_rows = s
        .list_deliveries(
            "default",
            DeliveryFilter { state: Some(DeliveryState::Dead), limit: 10, ..Default::default() },
        )
        .await
        .unwrap();
    assert_eq!(dead_rows.len(), 1);
    assert_eq!(
        (dead_rows[0].attempts, dead_rows[0].last_error.as_deref(), dead_rows[0].finished_at),
        (1, Some("connection refused"), Some(120))
    );
    let hooks = s.list_webhooks(Some("default")).await.unwrap();
    let counts: Vec<(String, u64, u64, u64)> =
        hooks.iter().map(|w| (w.webhook_id.clone(), w.pending, w.dead, w.delivered)).collect();
    let dead_hook = dead_rows[0].webhook_id.clone();
    assert_eq!(counts.iter().map(|c| c.1 + c.2 + c.3).sum::<u64>(), 7);
    assert_eq!(
        s.redeliver("other", &dead_hook, None, 200).await.unwrap(),
        Vec::<i64>::new(),
        "not that project's endpoint"
    );
    assert_eq!(s.redeliver("default", &dead_hook, None, 200).await.unwrap(), vec![dead.delivery_id]);
    let back = s
        .list_deliveries(
            "default",
            DeliveryFilter { state: Some(DeliveryState::Pending), limit: 10, ..Default::default() },
        )
        .await
        .unwrap();
    let back = back.iter().find(|d| d.delivery_id == dead.delivery_id).unwrap();
    assert_eq!((back.attempts, back.next_attempt_at, back.finished_at), (0, 200, None));
    assert_eq!(s.prune_deliveries(111).await.unwrap(), 1, "the delivered row finished at 110");
    assert_eq!(s.prune_deliveries(111).await.unwrap(), 0);

    // Forgetting a user: the rows carrying u1's content go, whatever their state; the deletions
    // and the forgetting are announced.
    let max_before =
        s.list_deliveries("default", DeliveryFilter { limit: 1, ..Default::default() }).await.unwrap()[0].delivery_id;
    s.forget_user(c.id, "u1").await.unwrap();
    let newest = s.list_deliveries("default", DeliveryFilter { limit: 100, ..Default::default() }).await.unwrap();
    let forgotten = newest.iter().find(|d| d.kind == "user.forgotten").unwrap();
    assert!(
        forgotten.delivery_id > max_before || h.sharded(),
        "an id is never reused (it is the receiver's idempotency key)"
    );
    let got = announced(&s, "default", None).await;
    assert!(!got.iter().any(|(k, id)| (k == "memory.created" || k == "memory.updated") && id == &e.id), "{got:?}");
    let rows = s.list_deliveries("default", DeliveryFilter { limit: 100, ..Default::default() }).await.unwrap();
    let profile_rows: Vec<&Delivery> = rows.iter().filter(|d| d.kind == "profile.updated").collect();
    assert_eq!(profile_rows.len(), 1, "only the deletion notice of the profile is left");
    assert_eq!((profile_rows[0].data["deleted"].as_bool(), profile_rows[0].data.get("content")), (Some(true), None));
    assert!(got.contains(&("memory.deleted".to_string(), e.id.clone())));
    assert!(got.contains(&("user.forgotten".to_string(), "u1".to_string())));
    assert!(got.contains(&("memory.created".to_string(), gone.id.clone())), "u2's rows stay");

    // What a reopen keeps; config endpoints are replaced as a set; deleting one takes its rows.
    let before = announced(&s, "default", None).await;
    drop(s);
    let s = h.open().await;
    assert_eq!(announced(&s, "default", None).await, before);
    s.sync_config_webhooks(vec![hook("cfg-a", "default", &["user.forgotten"], WebhookSource::Config)]).await.unwrap();
    s.sync_config_webhooks(vec![hook("cfg-b", "default", &["user.forgotten"], WebhookSource::Config)]).await.unwrap();
    let ids: Vec<String> = s.list_webhooks(Some("default")).await.unwrap().into_iter().map(|w| w.webhook_id).collect();
    assert_eq!(ids, vec!["all", "cfg-b", "deletes"], "same creation time: by id");
    let newest = s.list_deliveries("default", DeliveryFilter { limit: 1, ..Default::default() }).await.unwrap();
    assert_eq!((newest[0].webhook_id.as_str(), newest[0].kind.as_str()), ("all", "user.forgotten"));
    assert!(s.delete_webhook("default", "all").await.unwrap());
    let e = s.insert_event(NewEvent::of_user(c.id, EVENT_V1, "u3", summary("x"), 90)).await.unwrap();
    s.delete_event(c.id, &e.id).await.unwrap();
    let after = s.list_deliveries("default", DeliveryFilter { limit: 1, ..Default::default() }).await.unwrap();
    // Ids grow within one database; a sharded store's ids (local id and shard) never repeat
    // but do not grow across shards.
    let grows = after[0].delivery_id > newest[0].delivery_id;
    assert!(grows || h.sharded(), "an id is never reused, even after its row is gone");
    assert!(!s.delete_webhook("default", "all").await.unwrap());
    assert!(!s.delete_webhook("default", "elsewhere").await.unwrap(), "another project's endpoint");
    let left = s.list_deliveries("default", DeliveryFilter { limit: 100, ..Default::default() }).await.unwrap();
    assert!(left.iter().all(|d| d.webhook_id == "deletes"), "{left:?}");

    // An extraction's corrections: a merge refreshes an event (updated), a supersede retires one.
    s.upsert_webhook(hook("fix", "default", &["memory.updated", "memory.superseded"], WebhookSource::Api))
        .await
        .unwrap();
    let first = extract_session(&s, &c, "I run and I fly to Rome", 1_000, |mid| ExtractionOutput {
        events: vec![
            ExtractedEvent { source_message_ids: vec![mid], ..ExtractedEvent::new(EVENT_V1, summary("runs"), 1_000) },
            ExtractedEvent {
                source_message_ids: vec![mid],
                ..ExtractedEvent::new(EVENT_V1, summary("flies to Rome"), 1_000)
            },
        ],
        ..Default::default()
    })
    .await;
    let second = extract_session(&s, &c, "I run daily; the trip is off", 2_000, |mid| ExtractionOutput {
        events: vec![
            ExtractedEvent {
                source_message_ids: vec![mid],
                merge_into: Some(first[0].clone()),
                ..ExtractedEvent::new(EVENT_V1, summary("runs daily"), 2_000)
            },
            ExtractedEvent {
                source_message_ids: vec![mid],
                supersedes: Some(first[1].clone()),
                ..ExtractedEvent::new(EVENT_V1, summary("cancelled the Rome trip"), 2_000)
            },
        ],
        ..Default::default()
    })
    .await;
    let fixes = s
        .list_deliveries("default", DeliveryFilter { webhook_id: Some("fix".into()), limit: 10, ..Default::default() })
        .await
        .unwrap();
    let mut fixes: Vec<(String, String, Option<String>, Option<i64>)> = fixes
        .iter()
        .map(|d| {
            (
                d.kind.clone(),
                d.data["event_id"].as_str().unwrap().to_string(),
                d.data["superseded_by"].as_str().map(String::from),
                d.data["valid_to"].as_i64(),
            )
        })
        .collect();
    fixes.sort();
    // The superseded one's validity ends when its successor's begins (that session's time).
    assert_eq!(
        fixes,
        vec![
            ("memory.superseded".to_string(), first[1].clone(), Some(second[1].clone()), Some(2_000)),
            ("memory.updated".to_string(), first[0].clone(), None, None),
        ]
    );
}
