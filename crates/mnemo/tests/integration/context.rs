//! get_context over HTTP: the seed's sections and layout, include switches, locale, the token
//! budget from 50 to 4000 tokens, and the embedding-model mismatch refusal.

use crate::harness::*;
use serde_json::{Value, json};
use std::path::Path;

/// `mnemo reindex` on `data` with `cfg` (and the test store), to its end.
fn reindex(cfg: &Path, data: &Path) -> std::process::Output {
    reindex_with(cfg, data, &[])
}

fn reindex_with(cfg: &Path, data: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(BIN)
        .args(["reindex", "--config"])
        .arg(cfg)
        .args(args)
        .arg("--data")
        .arg(data)
        .envs(store_env(data))
        .env("MNEMO_LOG", "warn")
        .output()
        .unwrap()
}

async fn seed(s: &Server) {
    // An earlier conversation, extracted.
    s.write(
        "old",
        msgs(&[
            ("user", "我是28岁宝妈，宝宝1岁，我们住在上海。我喜欢性价比高的奶粉。"),
            ("assistant", "好的，之后推荐会优先考虑性价比。"),
            ("user", "宝宝喝普通奶粉总是胀气，医生说可能是乳糖不耐受。"),
            ("assistant", "可以试试无乳糖配方奶粉。"),
        ]),
        json!({"message_count": 4}),
        "user_123",
    )
    .await;
    eventually(10, "extraction", || async { s.jobs().await.iter().all(|j| j["state"] == "done").then_some(()) }).await;
    // The current conversation, still short-term.
    s.write(
        "now",
        msgs(&[
            ("user", "我家宝宝1岁，最近喝奶粉总胀气，有没有推荐的？"),
            ("assistant", "您好，宝宝胀气大概率和奶粉乳糖含量有关，建议优先选择无乳糖配方奶粉。"),
        ]),
        json!({}),
        "user_123",
    )
    .await;
}

async fn context(s: &Server, extra: Value) -> Value {
    let mut body = json!({"collection_name": "c", "conversation_id": "now", "query": "除了无乳糖，还有没有含DHA的推荐？",
        "event_search_config": {"filter": {"user_id": "user_123"}, "limit": 5, "time_decay_config": {"weight": 0.6, "no_decay_period": 3}},
        "profile_search_config": {"filter": {"user_id": "user_123"}, "limit": 1}});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    s.ok("get_context", body).await
}

#[tokio::test]
async fn the_seed_example_gives_the_seed_layout() {
    let s = Server::start("");
    seed(&s).await;
    let d = context(&s, json!({})).await;
    let c = d["context_str"].as_str().unwrap();
    assert!(c.starts_with("以下是需优先参考的用户记忆，按优先级排序：\n\n1. 用户画像\n"), "{c}");
    assert!(c.contains("- 居住城市: 上海") && c.contains("- 孩子年龄: 1岁"), "{c}");
    assert!(c.contains("\n\n2. 最近对话内容\n"), "{c}");
    assert!(c.contains(" user: 我家宝宝1岁，最近喝奶粉总胀气，有没有推荐的？"), "{c}");
    assert!(c.contains("\n\n3. 事件记忆\n- [创建时间]"), "{c}");
    assert!(c.contains("[内容]用户：") && c.contains("乳糖不耐受"), "{c}");
    assert_eq!(d["locale"], "zh");
    let parts = &d["context_parts"];
    assert_eq!(parts["profiles"].as_array().unwrap().len(), 1);
    assert_eq!(parts["short_term_memory"].as_array().unwrap().len(), 2);
    assert!(parts["intra_conversation_events"].as_array().unwrap().is_empty());
    let cross = parts["cross_conversation_events"].as_array().unwrap();
    assert!(!cross.is_empty() && cross[0]["score"].is_number() && cross[0]["conversation_id"] == "old");
    assert!(d["token_count"].as_u64().unwrap() <= 1200);

    // include switches and locale.
    let d = context(&s, json!({"include": {"profile": false, "cross_events": false}, "locale": "en"})).await;
    let c = d["context_str"].as_str().unwrap();
    assert!(
        c.starts_with("The following user memories") && c.contains("1. Recent conversation") && !c.contains("profile"),
        "{c}"
    );
    // An unknown conversation with no query: only the profile.
    let d = s
        .ok("get_context", json!({"collection_name": "c", "conversation_id": "brand-new", "profile_search_config": {"filter": {"user_id": "user_123"}}}))
        .await;
    let c = d["context_str"].as_str().unwrap();
    assert!(c.contains("1. 用户画像") && !c.contains("2."), "{c}");
    // Whose profile: the profile filter's user, else the event filter's, else the
    // conversation's — each read the same way (the first two beside the search).
    for body in [
        json!({"collection_name": "c", "conversation_id": "now", "query": "奶粉", "event_search_config": {"filter": {"user_id": "user_123"}}}),
        json!({"collection_name": "c", "conversation_id": "now", "query": "奶粉"}),
        json!({"collection_name": "c", "conversation_id": "brand-new", "query": "奶粉", "event_search_config": {"filter": {"user_id": "user_123"}}}),
    ] {
        let d = s.ok("get_context", body.clone()).await;
        let profiles = d["context_parts"]["profiles"].as_array().unwrap();
        assert_eq!(profiles.len(), 1, "{body}: {d}");
        assert!(d["context_str"].as_str().unwrap().contains("- 居住城市: 上海"), "{body}");
    }
    // An event filter naming an assistant alone names no user: no profile.
    let d = s
        .ok("get_context", json!({"collection_name": "c", "conversation_id": "now", "query": "奶粉", "event_search_config": {"filter": {"assistant_id": "nobody"}}}))
        .await;
    assert!(d["context_parts"]["profiles"].as_array().unwrap().is_empty(), "{d}");
    // Nothing known at all: the empty string.
    let d = s.ok("get_context", json!({"collection_name": "c", "conversation_id": "nobody"})).await;
    assert_eq!(d["context_str"], "");
    assert_eq!(d["token_count"], 0);
}

#[tokio::test]
async fn intra_conversation_events_come_before_other_conversations() {
    let s = Server::start("");
    let t = json!({"message_count": 2});
    s.write(
        "a",
        msgs(&[("user", "I'm planning a trip to Kyoto in April."), ("assistant", "Cherry blossom season!")]),
        t.clone(),
        "bob",
    )
    .await;
    s.write(
        "b",
        msgs(&[("user", "For the Kyoto trip I booked a ryokan near Gion."), ("assistant", "Great choice.")]),
        t.clone(),
        "bob",
    )
    .await;
    eventually(10, "extraction", || async { (s.events("bob").await.len() == 2).then_some(()) }).await;
    s.write("b", msgs(&[("user", "What should I pack?")]), json!({}), "bob").await;
    // Whose memories, from the conversation; then named by the request, when the other
    // conversations' search starts beside the conversation's lookup: the same context.
    let mut contexts = Vec::new();
    for named in [json!({}), json!({"event_search_config": {"filter": {"user_id": "bob"}}})] {
        let mut body = json!({"collection_name": "c", "conversation_id": "b", "query": "packing for Kyoto"});
        body.as_object_mut().unwrap().extend(named.as_object().unwrap().clone());
        let d = s.ok("get_context", body).await;
        let c = d["context_str"].as_str().unwrap().to_string();
        assert!(
            c.contains("\n\n1. Recent conversation\n") && c.contains("\n\n2. Events from this conversation\n"),
            "{c}"
        );
        let intra = c.find("Events from this conversation").expect(&c);
        let cross = c.find("3. Related events from other conversations").expect(&c);
        assert!(intra < cross && c.find("ryokan").unwrap() < cross && c.find("April").unwrap() > cross, "{c}");
        assert_eq!(d["context_parts"]["intra_conversation_events"][0]["conversation_id"], "b");
        assert_eq!(d["context_parts"]["cross_conversation_events"][0]["conversation_id"], "a");
        contexts.push(d["context_parts"].clone());
    }
    let scores = |parts: &Value, key: &str| {
        parts[key].as_array().unwrap().iter().map(|e| e["score"].as_f64().expect("a score")).collect::<Vec<_>>()
    };
    for key in ["intra_conversation_events", "cross_conversation_events"] {
        assert_eq!(scores(&contexts[0], key), scores(&contexts[1], key), "{key}: the same vector either way");
    }
    // Named, without a query: this conversation's events, newest first.
    let d = s
        .ok("get_context", json!({"collection_name": "c", "conversation_id": "b", "event_search_config": {"filter": {"user_id": "bob"}}}))
        .await;
    assert_eq!(d["context_parts"]["intra_conversation_events"][0]["conversation_id"], "b", "{d}");
}

#[tokio::test]
async fn the_token_budget_holds_from_50_to_4000() {
    let s = Server::start("");
    seed(&s).await;
    let mut long = Vec::new();
    for i in 0..40 {
        long.push(("user", format!("第{i}轮：宝宝今天辅食吃了南瓜泥和米粉，晚上睡得不太好，醒了三次。")));
    }
    let pairs: Vec<(&str, &str)> = long.iter().map(|(r, c)| (*r, c.as_str())).collect();
    s.write("now", msgs(&pairs), json!({"message_count": 1000, "token_count": 100000}), "user_123").await;
    let mut last_len = 0;
    for budget in [50, 80, 120, 200, 400, 800, 1200, 2000, 4000] {
        let d = context(&s, json!({"max_tokens": budget})).await;
        let n = d["token_count"].as_u64().unwrap();
        assert!(n <= budget, "budget {budget}: {n} tokens");
        let kept = d["context_parts"]["short_term_memory"].as_array().unwrap();
        let len = d["context_str"].as_str().unwrap().len();
        assert!(len >= last_len, "a bigger budget never gives less");
        last_len = len;
        if let Some(newest) = kept.last() {
            assert!(
                newest["content"].as_str().unwrap().starts_with("第39轮"),
                "budget {budget}: the newest turn survives"
            );
        }
        if budget >= 4000 {
            assert_eq!(kept.len(), 42, "everything fits in 4000");
        } else if budget <= 400 {
            assert!(d["context_parts"]["cross_conversation_events"].as_array().unwrap().is_empty(), "events go first");
        }
    }
}

/// A tiny OpenAI-compatible embeddings server: deterministic vectors, so a second model exists.
async fn fake_embeddings(dim: usize) -> String {
    use axum::{Json, Router, routing::post};
    let app = Router::new().route(
        "/v1/embeddings",
        post(move |Json(body): Json<Value>| async move {
            let inputs = body["input"].as_array().cloned().unwrap_or_default();
            let data: Vec<Value> = inputs
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let mut v = vec![0.0f32; dim];
                    for (j, b) in t.as_str().unwrap_or("").bytes().enumerate() {
                        v[(b as usize + j) % dim] += 1.0;
                    }
                    json!({"index": i, "embedding": v})
                })
                .collect();
            Json(json!({"data": data, "model": body["model"]}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/v1")
}

#[tokio::test]
async fn a_server_with_another_embedding_model_refuses_existing_data() {
    let mut s = Server::start("");
    s.ok(
        "event/add",
        json!({"collection_name": "c", "event_type": "event_v1", "user_id": "u", "memory_info": {"summary": "x"}}),
    )
    .await;
    s.kill9();
    let url = fake_embeddings(16).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("other.yaml");
    std::fs::write(
        &cfg,
        format!("embedding:\n  provider: openai\n  base_url: {url}\n  model: tiny-test\n  dimension: 16\n"),
    )
    .unwrap();
    let err = Server::spawn(&cfg, &s.data, "127.0.0.1:0", &[]).err().expect("must refuse");
    assert!(err.contains("embeddinggemma-300m-int8") && err.contains("openai:tiny-test"), "{err}");
    // The same OpenAI-compatible model on a fresh directory works end to end.
    let fresh = Server::spawn(&cfg, &dir.path().join("fresh"), "127.0.0.1:0", &[]).unwrap();
    fresh.ok("event/add", json!({"collection_name": "c", "event_type": "event_v1", "user_id": "u", "memory_info": {"summary": "hello"}})).await;
    let r =
        fresh.ok("event/search", json!({"collection_name": "c", "query": "hello", "filter": {"user_id": "u"}})).await;
    assert_eq!(r["count"], 1);
}

/// A data directory indexed with the previous default model (USE + e5 in one vector,
/// `local_model: use-m3+e5-small`, the same vectors and model id the previous release wrote) is
/// refused by the new default (EmbeddingGemma) with a pointer to `mnemo reindex`; `mnemo reindex`
/// moves it over, and the server then answers from it with the new model. The release before
/// (USE alone) is the fixture test below.
#[tokio::test]
async fn a_data_directory_of_the_previous_model_is_reindexed() {
    let dir = tempfile::tempdir().unwrap();
    let (old_cfg, new_cfg, data) = (dir.path().join("old.yaml"), dir.path().join("new.yaml"), dir.path().join("data"));
    std::fs::write(&old_cfg, "embedding:\n  local_model: use-m3+e5-small\n").unwrap();
    std::fs::write(&new_cfg, "").unwrap();
    let mut old = Server::spawn(&old_cfg, &data, "127.0.0.1:0", &[]).unwrap();
    for (u, s) in [
        ("u", "用户对花生过敏"),
        ("u", "The user's daughter is learning to play the piano"),
        ("u", "Caroline went camping with her family in the mountains"),
    ] {
        old.ok(
            "event/add",
            json!({"collection_name": "c", "event_type": "event_v1", "user_id": u, "memory_info": {"summary": s}}),
        )
        .await;
    }
    old.kill9();

    let err =
        Server::spawn(&new_cfg, &data, "127.0.0.1:0", &[]).err().expect("the new default refuses the old vectors");
    assert!(err.contains("use-m3+e5-small-int8") && err.contains("mnemo reindex"), "{err}");

    let run = || reindex(&new_cfg, &data);
    let out = run();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("3 events re-embedded with embeddinggemma-300m-int8"), "{stdout}");
    let again = run();
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("every collection is indexed with"),
        "a second run has nothing to do"
    );

    let mut new = Server::spawn(&new_cfg, &data, "127.0.0.1:0", &[]).expect("the re-indexed directory starts");
    // Semantic matches (no shared words) in both directions need the new vectors.
    let r = new.ok("event/search", json!({"collection_name": "c", "query": "What is the user allergic to?", "filter": {"user_id": "u"}, "limit": 1})).await;
    assert_eq!(r["result_list"][0]["memory_info"]["summary"], "用户对花生过敏", "{r}");
    let r = new
        .ok(
            "event/search",
            json!({"collection_name": "c", "query": "她们去哪里露营了？", "filter": {"user_id": "u"}, "limit": 1}),
        )
        .await;
    assert!(r["result_list"][0]["memory_info"]["summary"].as_str().unwrap().contains("camping"), "{r}");

    // `--all` embeds the collections of the configured model again too (vectors made another way:
    // embedding.fast_int8 on a CPU without VNNI), and the directory serves as before.
    new.kill9();
    let out = reindex_with(&new_cfg, &data, &["--all"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout} {stderr}");
    assert!(stderr.contains("1 collection of embeddinggemma-300m-int8 to re-embed"), "{stderr}");
    assert!(stdout.contains("3 events re-embedded with embeddinggemma-300m-int8"), "{stdout}");
    assert!(String::from_utf8_lossy(&run().stdout).contains("every collection is indexed with"));
    let again = Server::spawn(&new_cfg, &data, "127.0.0.1:0", &[]).expect("the re-embedded directory starts");
    let r = again.ok("event/search", json!({"collection_name": "c", "query": "What is the user allergic to?", "filter": {"user_id": "u"}, "limit": 1})).await;
    assert_eq!(r["result_list"][0]["memory_info"]["summary"], "用户对花生过敏", "{r}");
}

/// A data directory written by the previous release itself (commit d2bbf5a, USE alone; made as
/// `tests/fixtures/previous-release/README.md` says): refused by the new default with a pointer
/// to `mnemo reindex`, re-indexed, then served whole — events found by meaning, the extracted
/// profile and the conversation intact. The fixture is an embedded-store file, so this runs on
/// SQLite only (the PostgreSQL path of the same code is the `local_model: use-m3+e5-small` test above).
#[tokio::test]
async fn a_data_directory_of_the_previous_release_is_reindexed() {
    if postgres_url().is_some() {
        eprintln!("skipped on PostgreSQL: the fixture is an embedded-store file");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (cfg, data) = (dir.path().join("mnemo.yaml"), dir.path().join("data"));
    std::fs::write(&cfg, "").unwrap();
    std::fs::create_dir_all(&data).unwrap();
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/previous-release/mnemo.db");
    std::fs::copy(&fixture, data.join("mnemo.db")).unwrap();

    let err = Server::spawn(&cfg, &data, "127.0.0.1:0", &[]).err().expect("refused");
    assert!(err.contains("use-multilingual-v3-int8") && err.contains("mnemo reindex"), "{err}");
    let out = reindex(&cfg, &data);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("re-embedded with embeddinggemma-300m-int8"), "{stdout}");

    let log = dir.path().join("serve.log");
    let s =
        Server::spawn_with_log(&cfg, &data, "127.0.0.1:0", &[], Some(&log)).expect("the re-indexed directory starts");
    let r = s.ok("event/search", json!({"collection_name": "c", "query": "What is the user allergic to?", "filter": {"user_id": "u"}, "limit": 1})).await;
    assert_eq!(r["result_list"][0]["memory_info"]["summary"], "用户对花生过敏", "{r}");
    // Its events (written before schema v11) move next to their users' in the background; the
    // same search answers the same after.
    eventually(60, "the relocation of the old events", || async {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("events written before schema v11 are in place")
            .then_some(())
    })
    .await;
    let again = s.ok("event/search", json!({"collection_name": "c", "query": "What is the user allergic to?", "filter": {"user_id": "u"}, "limit": 1})).await;
    let first = |r: &Value| (r["result_list"][0]["event_id"].clone(), r["result_list"][0]["memory_info"].clone());
    assert_eq!(first(&again), first(&r), "the same answer after the relocation");
    let r = s
        .ok(
            "event/search",
            json!({"collection_name": "c", "query": "她们去哪里露营了？", "filter": {"user_id": "u"}, "limit": 1}),
        )
        .await;
    assert!(r["result_list"][0]["memory_info"]["summary"].as_str().unwrap().contains("camping"), "{r}");
    let r = s
        .ok("event/search", json!({"collection_name": "c", "query": "猫", "filter": {"user_id": "u"}, "limit": 3}))
        .await;
    assert!(
        r["result_list"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["memory_info"]["summary"].as_str().unwrap().contains("猫")),
        "the extracted event: {r}"
    );
    let p = s.ok("profile/search", json!({"collection_name": "c", "filter": {"user_id": "u"}})).await;
    assert!(p["result_list"][0].to_string().contains("杭州"), "the extracted profile: {p}");
    let info = s.ok("session/info", json!({"collection_name": "c", "conversation_id": "conv1"})).await;
    assert_eq!(info["sessions"].as_array().unwrap().len(), 1, "{info}");
}

/// Events an older release stored have no turn vectors: `mnemo reindex` embeds them, and so does
/// a server on its own, in the background; either way once (the store records it done).
#[tokio::test]
async fn events_stored_before_turn_vectors_get_them_from_reindex_or_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, data, log) = (dir.path().join("mnemo.yaml"), dir.path().join("data"), dir.path().join("serve.log"));
    std::fs::write(&cfg, "session:\n  poll_interval_ms: 50\n").unwrap();
    let mut s = Server::spawn(&cfg, &data, "127.0.0.1:0", &[]).expect("starts");
    let talk = [
        ("user", "How was your week? Mine was busy with errands."),
        ("assistant", "Busy too, work and the kids all week long."),
        ("user", "I painted the lake at sunrise last Saturday."),
        ("assistant", "That sounds lovely, I would like to see it."),
        ("user", "I also signed up for a pottery class in May."),
        ("assistant", "Pottery is relaxing, enjoy it."),
    ];
    s.write("conv", msgs(&talk), json!({"message_count": 6}), "u").await;
    eventually(60, "extraction", || async { s.jobs().await.iter().all(|j| j["state"] == "done").then_some(()) }).await;
    s.kill9();
    let turns = || store_sql(&data, "SELECT count(*) FROM event_turn_vectors");
    let n = turns().await.unwrap();
    assert!(n >= 1, "the rules extractor's chunks have turns");
    let as_before = "DELETE FROM event_turn_vectors; INSERT INTO event_turns_backfill VALUES (true)";

    store_sql(&data, as_before).await;
    let out = reindex(&cfg, &data);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&format!("{n} events stored by an earlier release got their turns' vectors")), "{stdout}");
    assert_eq!(turns().await, Some(n));
    assert!(!String::from_utf8_lossy(&reindex(&cfg, &data).stdout).contains("earlier release"), "done once");

    store_sql(&data, as_before).await;
    let s = Server::spawn_with_log(&cfg, &data, "127.0.0.1:0", &[], Some(&log)).expect("restarts");
    let logged = format!("events={n}");
    eventually(60, "the turns embedded in the background", || async {
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        log.lines()
            .any(|l| l.contains("embedded the turns of events stored before turn vectors") && l.contains(&logged))
            .then_some(())
    })
    .await;
    let r = s
        .ok("event/search", json!({"collection_name": "c", "query": "What did the user paint?", "filter": {"user_id": "u"}, "limit": 1}))
        .await;
    assert!(r["result_list"][0]["memory_info"].to_string().contains("painted the lake"), "{r}");
    drop(s);
    assert_eq!(turns().await, Some(n));
}

/// Once the events shown whole fill half the budget, a long one is shown as its turn that answers
/// the query; the part listed says what was shown, and a budget that holds everything cuts
/// nothing.
#[tokio::test]
async fn a_tight_budget_shows_long_memories_by_the_turn_that_answers() {
    let s = Server::start("");
    // Distinct days (near-duplicate memories would be merged at extraction).
    let days = [
        ("baked sourdough bread for the neighbours", "Eagle Ridge", "Was the crust as crunchy as you hoped?"),
        ("painted a watercolour of the harbour", "Blue Lake", "Which colours did you pick for the water?"),
        ("fixed the brakes on my old bicycle", "Pine Hollow", "Did the new brake pads fit without trouble?"),
        ("visited my grandmother in Leeds", "Granite Peak", "How is she doing these days?"),
        ("played three games of chess with Tom", "Fox Creek", "Who won the last game in the end?"),
        ("cleared out the garage and sold a lamp", "Cedar Falls", "How much did the lamp go for?"),
        ("wrote a short poem about autumn leaves", "Misty Canyon", "Will you read it to me some time?"),
        ("practised the violin for two hours", "Old Mill", "Which piece are you learning now?"),
    ];
    for (i, (morning, trail, question)) in days.iter().enumerate() {
        s.write(
            &format!("day-{i}"),
            msgs(&[
                ("user", &format!("Good morning! Yesterday I {morning}.")),
                ("assistant", question),
                ("user", &format!("Later in the afternoon I went hiking up the {trail} trail with my dog Biscuit.")),
                ("assistant", &format!("The {trail} trail sounds lovely; I hope the weather was kind to you both.")),
            ]),
            json!({"message_count": 4}),
            "nate",
        )
        .await;
    }
    eventually(20, "extraction", || async { s.jobs().await.iter().all(|j| j["state"] == "done").then_some(()) }).await;
    let ask = |max_tokens: u32| {
        s.ok(
            "get_context",
            json!({"collection_name": "c", "conversation_id": "new", "query": "Which trails did I go hiking up with my dog?",
                "event_search_config": {"filter": {"user_id": "nate"}, "limit": 20}, "max_tokens": max_tokens, "locale": "en"}),
        )
    };
    let d = ask(420).await;
    let c = d["context_str"].as_str().unwrap();
    let events = d["context_parts"]["cross_conversation_events"].as_array().unwrap().clone();
    let (cut, whole): (Vec<&Value>, Vec<&Value>) = events.iter().partition(|e| e["memory_info"]["excerpt"] == true);
    assert!(!whole.is_empty() && !cut.is_empty(), "{c}");
    for e in &cut {
        let summary = e["memory_info"]["summary"].as_str().unwrap();
        assert!(c.contains(summary), "what is listed is what is shown: {summary}\n{c}");
        assert!(summary.contains("went hiking up the") && !summary.contains("Good morning"), "{summary}");
        assert_eq!(e["source_message_ids"].as_array().unwrap().len(), 1, "cites only the shown turn: {e}");
    }
    assert!(d["token_count"].as_u64().unwrap() <= 420);
    // Every turn of the memory is still at hand.
    assert!(cut[0]["memory_info"]["original_messages"].as_str().unwrap().contains("I hope the weather"));
    // Room for everything: every event whole.
    let d = ask(4000).await;
    let events = d["context_parts"]["cross_conversation_events"].as_array().unwrap();
    assert!(events.len() >= days.len() && d["dropped_items"] == 0, "{d}");
    assert!(events.iter().all(|e| e["memory_info"].get("excerpt").is_none()), "{d}");
}
