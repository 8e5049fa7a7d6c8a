//! Any OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, Azure OpenAI, Ollama, vLLM, TEI,
//! Ark…). The model id recorded with a collection is `openai:<model>`, so switching models is
//! caught at start-up — unless the server runs a local model ([`ServedModel`]: EmbeddingGemma
//! on a text-embeddings server): then the texts carry that model's prompts, the answers are read
//! as the local embedder reads its own, and the id is the local one, so a deployment moves
//! embedding to another machine and back without reindexing.

use crate::breaker::Breaker;
use crate::embed::served::ServedModel;
use async_trait::async_trait;
use mnemo_core::embed::{EmbedError, EmbedKind, Embedder, normalize};
use serde_json::{Value, json};
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct OpenAiEmbedderConfig {
    /// e.g. `http://127.0.0.1:11434/v1`
    pub base_url: String,
    pub model: String,
    pub dimension: usize,
    pub api_key: Option<String>,
    pub timeout: Duration,
    /// Azure OpenAI: `?api-version=…` on every request.
    pub api_version: Option<String>,
    /// The header carrying `api_key`: `Authorization: Bearer …` (None) or a named one (`api-key`).
    pub api_key_header: Option<String>,
    /// The local model the server runs, if it is one (its prompts, id and calibration).
    pub served: Option<ServedModel>,
    /// Texts per request at most (`embedding.max_batch`); a longer call is sent as several
    /// requests in order. Servers cap it: text-embeddings-inference answers 413 past its
    /// `--max-client-batch-size` (32 by default), OpenAI past 2,048.
    pub max_batch: usize,
    pub tls: crate::http::TlsOptions,
}

pub struct OpenAiEmbedder {
    config: OpenAiEmbedderConfig,
    id: String,
    client: reqwest::Client,
    breaker: Breaker,
}

impl OpenAiEmbedder {
    pub fn new(config: OpenAiEmbedderConfig) -> Result<Self, String> {
        let client = crate::http::client_builder(&config.tls)?
            .timeout(config.timeout)
            .build()
            .map_err(|e| format!("embedding HTTP client: {}", crate::http::error_chain(&e)))?;
        if let Some(m) = &config.served
            && m.dimension != config.dimension
        {
            return Err(format!(
                "embedding.dimension: {} serves {} dimensions, got {}",
                m.id, m.dimension, config.dimension
            ));
        }
        Ok(Self {
            id: match &config.served {
                Some(m) => m.id.to_string(),
                None => format!("openai:{}", config.model),
            },
            config,
            client,
            breaker: Breaker::new(3, Duration::from_secs(5)),
        })
    }
}

#[async_trait]
impl Embedder for OpenAiEmbedder {
    fn model_id(&self) -> &str {
        &self.id
    }

    fn dimension(&self) -> usize {
        self.config.dimension
    }

    fn query_offset(&self, _query: &str) -> f32 {
        self.config.served.as_ref().map_or(0.0, |m| m.query_offset)
    }

    fn fusion(&self) -> mnemo_core::ranking::Fusion {
        self.config.served.as_ref().map_or(mnemo_core::ranking::Fusion::LEXICAL_LED, |m| m.fusion)
    }

    fn relevance_floor(&self) -> f64 {
        self.config.served.as_ref().map_or(0.2, |m| m.relevance_floor)
    }

    fn duplicate_similarity(&self) -> f32 {
        self.config.served.as_ref().map_or(0.9, |m| m.duplicate_similarity)
    }

    async fn embed(&self, texts: &[String], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        if !self.breaker.allow() {
            return Err(EmbedError::Transient("embedding endpoint unavailable (circuit open)".into()));
        }
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.config.max_batch.max(1)) {
            let out = self.call(batch, kind).await;
            self.breaker.record(!matches!(out, Err(EmbedError::Transient(_))));
            vectors.extend(out?);
        }
        Ok(vectors)
    }
}

impl OpenAiEmbedder {
    async fn call(&self, texts: &[String], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut url = format!("{}/embeddings", self.config.base_url.trim_end_matches('/'));
        if let Some(v) = &self.config.api_version {
            url = format!("{url}?api-version={v}");
        }
        let prompted: Vec<String>;
        let input = match &self.config.served {
            Some(m) => {
                let prompt = if kind == EmbedKind::Query { m.query_prompt } else { m.document_prompt };
                prompted = texts.iter().map(|t| format!("{prompt}{t}")).collect();
                &prompted
            }
            None => texts,
        };
        let mut req = self.client.post(&url).json(&json!({"model": self.config.model, "input": input}));
        match (&self.config.api_key, &self.config.api_key_header) {
            (Some(k), Some(header)) => req = req.header(header.as_str(), k),
            (Some(k), None) => req = req.bearer_auth(k),
            (None, _) => {}
        }
        let resp = req.send().await.map_err(|e| {
            let message = crate::http::describe(&url, &e);
            if crate::http::is_transient(&e) { EmbedError::Transient(message) } else { EmbedError::Permanent(message) }
        })?;
        let status = resp.status();
        if status.as_u16() == 429 || status.is_server_error() {
            return Err(EmbedError::Transient(format!("{url}: HTTP {status}")));
        }
        let body: Value = resp.json().await.map_err(|e| EmbedError::Transient(format!("{url}: bad JSON: {e}")))?;
        if !status.is_success() {
            return Err(EmbedError::Permanent(format!("{url}: HTTP {status}: {body}")));
        }
        let data = body["data"].as_array().ok_or_else(|| EmbedError::Permanent(format!("{url}: no data array")))?;
        if data.len() != texts.len() {
            return Err(EmbedError::Permanent(format!("{url}: {} vectors for {} texts", data.len(), texts.len())));
        }
        let mut out = vec![Vec::new(); texts.len()];
        for (i, item) in data.iter().enumerate() {
            let idx = item["index"].as_u64().map(|x| x as usize).unwrap_or(i);
            let mut v: Vec<f32> = item["embedding"]
                .as_array()
                .ok_or_else(|| EmbedError::Permanent(format!("{url}: item {i} has no embedding")))?
                .iter()
                .map(|x| x.as_f64().unwrap_or(0.0) as f32)
                .collect();
            if v.len() != self.config.dimension {
                return Err(EmbedError::Permanent(format!(
                    "{url}: model {} returned {} dims, configured dimension is {}",
                    self.config.model,
                    v.len(),
                    self.config.dimension
                )));
            }
            normalize(&mut v);
            if kind == EmbedKind::Query
                && let Some(m) = &self.config.served
            {
                v.iter_mut().for_each(|x| *x *= m.query_scale);
            }
            *out.get_mut(idx).ok_or_else(|| EmbedError::Permanent(format!("{url}: bad index {idx}")))? = v;
        }
        Ok(out)
    }
}
