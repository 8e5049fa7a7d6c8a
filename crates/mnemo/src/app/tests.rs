//! Tests of `app`: configuration checks before anything loads.

use super::*;

#[test]
fn retrieval_weights_out_of_range_are_refused_not_clamped() {
    let with = |f: &dyn Fn(&mut Config)| {
        let mut cfg = Config::default();
        f(&mut cfg);
        retrieval_config(&cfg)
            .map(|r| (r.neighbour_weight, r.date_weight, r.feedback_terms, r.whole_share, r.reply_hits, r.turn_weight))
    };
    assert_eq!(with(&|_| {}).unwrap(), (0.3, 0.3, 16, 0.5, 3, 0.5));
    let e = with(&|c| c.retrieval.entity_weight = 1.01).unwrap_err().to_string();
    assert_eq!(e, "retrieval.entity_weight: must be in [0,1], got 1.01");
    let mut mcp = mnemo_mcp::McpScope::default();
    assert!(check_mcp(&mcp).is_ok(), "unset: the model's floor");
    mcp.min_score = Some(1.5);
    assert_eq!(check_mcp(&mcp).unwrap_err().to_string(), "mcp.min_score: must be in [0,1], got 1.5");
    let e = with(&|c| c.retrieval.whole_share = 2.0).unwrap_err().to_string();
    assert_eq!(e, "retrieval.whole_share: must be in [0,1], got 2");
    let e = with(&|c| c.retrieval.date_weight = 1.5).unwrap_err().to_string();
    assert_eq!(e, "retrieval.date_weight: must be in [0,1], got 1.5");
    let e = with(&|c| c.retrieval.neighbour_weight = -0.1).unwrap_err().to_string();
    assert_eq!(e, "retrieval.neighbour_weight: must be in [0,1], got -0.1");
    let e = with(&|c| c.retrieval.feedback_terms = 51).unwrap_err().to_string();
    assert_eq!(e, "retrieval.feedback_terms: must be in 0..=50, got 51");
    let e = with(&|c| c.retrieval.reply_hits = 51).unwrap_err().to_string();
    assert_eq!(e, "retrieval.reply_hits: must be in 0..=50, got 51");
    let e = with(&|c| c.retrieval.turn_weight = 1.2).unwrap_err().to_string();
    assert_eq!(e, "retrieval.turn_weight: must be in [0,1], got 1.2");
}

#[test]
fn embedding_settings_are_checked_before_anything_loads_and_named_where_written() {
    let err = |f: &dyn Fn(&mut EmbeddingConfig)| {
        let mut cfg = Config::default();
        f(&mut cfg.embedding);
        build_embedder(&cfg).err().expect("refused").to_string()
    };
    let served = |e: &mut EmbeddingConfig| {
        e.provider = "openai".into();
        e.base_url = Some("http://127.0.0.1:9/v1".into());
        e.model = Some("google/embeddinggemma-300m".into());
        e.same_as = Some("embeddinggemma-300m".into());
    };
    assert!(err(&|e| e.device = "gpu".into()).starts_with("embedding.device: must be cpu, cuda or cuda:N"));
    assert_eq!(
        err(&|e| {
            served(e);
            e.max_batch = 0;
        }),
        "embedding.max_batch: must be in 1..=2048, got 0"
    );
    assert!(
        err(&|e| {
            served(e);
            e.device = "cuda".into();
        })
        .starts_with("embedding.device and embedding.onnxruntime are settings of the local provider")
    );
    // The documents' section names its own keys.
    let documents = |f: &dyn Fn(&mut EmbeddingConfig)| {
        err(&|e| {
            let mut d = EmbeddingConfig::default();
            served(&mut d);
            f(&mut d);
            e.documents = Some(Box::new(d));
        })
    };
    assert_eq!(documents(&|d| d.max_batch = 5000), "embedding.documents.max_batch: must be in 1..=2048, got 5000");
    assert_eq!(documents(&|d| d.base_url = None), "embedding.documents.base_url is required with provider openai");
    assert_eq!(
        documents(&|d| d.documents = Some(Box::default())),
        "embedding.documents.documents: documents have one provider"
    );
    // Another model for documents than for queries: refused, whatever the server would say.
    let e = documents(&|d| {
        d.same_as = None;
        d.dimension = Some(768);
    });
    assert!(e.starts_with("embedding.documents: runs openai:google/embeddinggemma-300m (768 dimensions)"), "{e}");
}
