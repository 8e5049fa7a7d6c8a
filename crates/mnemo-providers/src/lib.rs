//! mnemo-providers: implementations of the `mnemo-core` provider traits, one module per
//! provider, chosen once from config at the composition root.
//!
//! - [`rules`]: the offline, deterministic extractor (the default; needs no model).
//! - [`llm`]: any OpenAI-compatible chat-completions endpoint, JSON validated against the schema.
//! - [`faults`]: a decorator that makes any extractor fail its first attempts, for resilience
//!   tests and drills; never enabled unless configured.
//! - [`http`]: the outbound HTTP client every provider and the CLI use (TLS roots, proxies,
//!   error chains, `Retry-After`).
//! - [`webhook`]: webhook deliveries over HTTP (signed by core, posted here).
//!
//! This crate knows model runtimes and remote APIs; it must not know HTTP routes or SQL.

pub mod breaker;
pub mod embed;
pub mod faults;
pub mod http;
pub mod llm;
mod llm_request;
pub mod rules;
pub mod webhook;

pub use faults::FaultInjectingExtractor;
pub use llm::{JsonMode, LlmConfig, LlmExtractor};
pub use rules::{RulesConfig, RulesExtractor};
