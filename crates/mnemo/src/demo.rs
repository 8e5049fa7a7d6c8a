//! `mnemo demo`: the whole loop on an embedded store in a temporary directory — no server, no
//! network, no key. It streams seed 000's baby-formula conversation turn by turn (an earlier
//! conversation with a low trigger, so it is extracted; then the current one, which stays
//! short-term), runs extraction, and prints what `get_context` returns for the seed's question.
//! An English example follows.

use crate::config::Config;
use anyhow::{Context, Result};
use mnemo_core::model::{ConversationMeta, EventFilter, ProfileFilter, Role};
use mnemo_core::ranking::TimeDecay;
use mnemo_core::service::{ContextRequest, Include, IncomingMessage, Service, Target, WriteRequest};
use mnemo_core::{ExtractTrigger, SystemClock};
use std::sync::Arc;

const DAY_MS: i64 = 86_400_000;

struct Turn(Role, &'static str);

async fn stream(
    svc: &Service,
    conv: &str,
    user: &str,
    turns: &[Turn],
    trigger: ExtractTrigger,
    start: i64,
) -> Result<()> {
    for (i, Turn(role, content)) in turns.iter().enumerate() {
        let out = svc
            .streaming_write(WriteRequest {
                project: "default".into(),
                collection: "demo".into(),
                conversation_id: conv.into(),
                messages: vec![IncomingMessage {
                    role: *role,
                    content: content.to_string(),
                    name: None,
                    time: Some(start + i as i64 * 40_000),
                    idempotency_key: None,
                }],
                trigger,
                meta: ConversationMeta { user_id: Some(user.into()), ..Default::default() },
            })
            .await?;
        let tag = match &out.closed {
            Some(c) => format!("→ session closed ({}), extraction queued", c.reason.as_str()),
            None => format!("(pending: {} messages, {} tokens)", out.pending_messages, out.pending_tokens),
        };
        println!("  {:<9} {} {tag}", role.as_str(), content.chars().take(38).collect::<String>());
    }
    // The worker would pick the jobs up in the background; here we run them to completion.
    while svc.try_run_one().await? {}
    Ok(())
}

async fn show(svc: &Service, conv: &str, user: &str, query: &str) -> Result<()> {
    let out = svc
        .get_context(ContextRequest {
            target: Target { project: "default".into(), collection: "demo".into() },
            conversation_id: conv.into(),
            query: Some(query.into()),
            event_filter: EventFilter { user_id: vec![user.into()], ..Default::default() },
            event_limit: 5,
            decay: TimeDecay::new(0.6, Some(3.0), 30.0)?,
            similarity_threshold: Some(0.3),
            profile_filter: ProfileFilter::default(),
            profile_limit: 1,
            max_tokens: 1200,
            include: Include::default(),
            locale: None,
        })
        .await?;
    println!("\nget_context(query = {query:?}) → {} tokens:\n", out.assembled.token_count);
    println!("{}\n", out.assembled.context_str);
    Ok(())
}

pub async fn run(mut cfg: Config) -> Result<()> {
    let dir = tempfile::tempdir().context("creating a temporary data directory")?;
    cfg.store.path = dir.path().to_path_buf();
    let svc = crate::app::build_service(&cfg, Arc::new(SystemClock)).await?;
    crate::app::prepare(&svc).await?;
    let now = chrono::Utc::now().timestamp_millis();
    println!(
        "mnemo demo — embedded store in {}, embedding model {}, extractor {}\n",
        dir.path().display(),
        svc.embedder().model_id(),
        svc.extractor_name()
    );

    println!("Two days ago, an earlier conversation (trigger: every 4 messages):");
    let low = ExtractTrigger { token_count: 1000, message_count: 4, wait_timeout: 604_800 };
    stream(
        &svc,
        "conv_20260328_user123",
        "user_123",
        &[
            Turn(Role::User, "我是28岁宝妈，宝宝1岁，我们住在上海。"),
            Turn(Role::Assistant, "您好！记下了，之后的推荐会考虑宝宝的月龄。"),
            Turn(Role::User, "我喜欢性价比高的奶粉，进口的太贵了。"),
            Turn(Role::Assistant, "明白，会优先推荐国产高性价比的配方奶粉。"),
            Turn(Role::User, "宝宝喝普通奶粉总是胀气，医生说可能是乳糖不耐受，要注意乳糖含量。"),
            Turn(Role::Assistant, "乳糖不耐受的宝宝可以选择无乳糖或低乳糖配方，比如舒适系列。"),
            Turn(Role::User, "另外我周末想带宝宝去公园野餐，需要准备什么？"),
            Turn(Role::Assistant, "建议带好遮阳帽、驱蚊液、温水和便携辅食。"),
        ],
        low,
        now - 2 * DAY_MS,
    )
    .await?;

    println!("\nNow, the current conversation (default trigger: 1000 tokens or 20 messages, so it stays short-term):");
    stream(
        &svc,
        "conv_20260330_user123_xyz",
        "user_123",
        &[
            Turn(Role::User, "我家宝宝1岁，最近喝奶粉总胀气，有没有推荐的？"),
            Turn(
                Role::Assistant,
                "您好，宝宝胀气大概率和奶粉乳糖含量有关，建议优先选择无乳糖配方奶粉，我给您推荐2款高性价比的~",
            ),
        ],
        ExtractTrigger::default(),
        now - 60_000,
    )
    .await?;
    show(&svc, "conv_20260330_user123_xyz", "user_123", "除了无乳糖，还有没有含DHA的推荐？").await?;

    println!("An English example — last week:");
    stream(
        &svc,
        "alice-week1",
        "alice",
        &[
            Turn(Role::User, "My name is Alice and I live in Berlin. I'm vegetarian."),
            Turn(Role::Assistant, "Nice to meet you, Alice! Noted: vegetarian."),
            Turn(Role::User, "I love hiking. I'm planning a trip to the Alps in July with my sister."),
            Turn(Role::Assistant, "The Alps in July are great; book huts early."),
        ],
        low,
        now - 7 * DAY_MS,
    )
    .await?;
    println!("\nToday:");
    stream(
        &svc,
        "alice-today",
        "alice",
        &[Turn(Role::User, "Can you suggest somewhere to eat tonight?")],
        ExtractTrigger::default(),
        now - 30_000,
    )
    .await?;
    show(&svc, "alice-today", "alice", "Can you suggest somewhere to eat tonight?").await?;
    println!("Next: `cargo run --release -- serve`, then the curl walk-through in README.md.");
    Ok(())
}
