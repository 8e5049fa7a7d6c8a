//! Any OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, Ollama, vLLM, TEI, Ark…). The model
//! id recorded with a collection is `openai:<model>`, so switching models is caught at start-up.

use crate::breaker::Breaker;
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
}

pub struct OpenAiEmbedder {
    config: OpenAiEmbedderConfig,
    id: String,
    client: reqwest::Client,
    breaker: Breaker,
}

impl OpenAiEmbedder {
    pub fn new(config: OpenAiEmbedderConfig) -> Result<Self, String> {
        let client = reqwest::Client::builder().timeout(config.timeout).build().map_err(|e| e.to_string())?;
        Ok(Self {
            id: format!("openai:{}", config.model),
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

    async fn embed(&self, texts: &[String], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        if !self.breaker.allow() {
            return Err(EmbedError::Transient("embedding endpoint unavailable (circuit open)".into()));
        }
        let out = self.call(texts, kind).await;
        self.breaker.record(!matches!(out, Err(EmbedError::Transient(_))));
        out
    }
}

impl OpenAiEmbedder {
    async fn call(&self, texts: &[String], _kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        let url = format!("{}/embeddings", self.config.base_url.trim_end_matches('/'));
        let mut req = self.client.post(&url).json(&json!({"model": self.config.model, "input": texts}));
        if let Some(k) = &self.config.api_key {
            req = req.bearer_auth(k);
        }
        let resp = req.send().await.map_err(|e| EmbedError::Transient(format!("{url}: {e}")))?;
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
            *out.get_mut(idx).ok_or_else(|| EmbedError::Permanent(format!("{url}: bad index {idx}")))? = v;
        }
        Ok(out)
    }
}
