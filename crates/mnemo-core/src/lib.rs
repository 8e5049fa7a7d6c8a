//! mnemo-core: the domain of mnemo — what a message, a session, an event and a profile are, when a
//! conversation closes into a session (the trigger), how extraction output changes a profile, and
//! the `Service` façade that every front end (HTTP, MCP, CLI) calls.
//!
//! It must not know HTTP, SQL or any model runtime: stores, extractors and embedders are traits
//! here ([`Store`], [`Extractor`]) implemented in other crates and chosen once at the composition
//! root. Rules that must hold for every store (trigger evaluation, profile merging) are pure
//! functions here that a store calls inside its own transaction, so all stores behave alike.

pub mod access;
pub mod clock;
pub mod context;
pub mod dates;
pub mod embed;
pub mod entities;
pub mod error;
pub mod excerpt;
pub mod extract;
pub mod kept;
pub mod model;
pub mod profile;
pub mod ranking;
pub mod redact;
pub mod service;
pub mod store;
pub mod text;
pub mod tokens;
pub mod trigger;
pub mod turns;

pub use clock::{Clock, SystemClock};
pub use embed::{EmbedKind, Embedder};
pub use error::{CoreError, StoreError};
pub use extract::{ExtractError, ExtractionInput, ExtractionOutput, Extractor, Extractors};
pub use model::*;
pub use service::{Service, ServiceConfig};
pub use store::Store;
pub use tokens::TokenCounter;

/// Loads the token counter's BPE table and the Chinese segmenter's dictionary (~0.1 s each) on
/// one background thread, once per process: a server calls it before loading its embedding
/// model, so both are ready before the first request, and `Service::new` calls it for everyone
/// else.
pub fn warm_up() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        std::thread::spawn(|| {
            text::load();
            TokenCounter::load();
        });
    });
}
pub use trigger::{ExtractTrigger, TriggerReason};
