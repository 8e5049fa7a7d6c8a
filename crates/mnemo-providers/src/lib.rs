//! mnemo-providers: implementations of the `mnemo-core` provider traits, one module per
//! provider, chosen once from config at the composition root.
//!
//! - [`rules`]: the offline, deterministic extractor (the default; needs no model).
//! - [`faults`]: a decorator that makes any extractor fail its first attempts, for resilience
//!   tests and drills; never enabled unless configured.
//!
//! This crate knows model runtimes and remote APIs; it must not know HTTP routes or SQL.

pub mod embed;
pub mod faults;
pub mod rules;

pub use faults::FaultInjectingExtractor;
pub use rules::{RulesConfig, RulesExtractor};
