//! Embedders, one module per provider: the local default model and any OpenAI-compatible
//! `/v1/embeddings` endpoint. (A hashing embedder for unit tests lives in `mnemo-core`.)

mod lanes;
pub mod local;
pub mod openai;
pub mod served;
pub mod split;

pub use local::{LocalEmbedder, LocalModel, find_model_dir};
pub use openai::{OpenAiEmbedder, OpenAiEmbedderConfig};
pub use served::ServedModel;
pub use split::SplitEmbedder;
