//! Token counting with a real BPE (OpenAI's `o200k_base`, ~1 token per Chinese character): the
//! same counter drives the extraction trigger and the context budget, so both agree.
//!
//! Building the encoder takes ~0.1 s; [`crate::warm_up`] starts it on a background thread at
//! start-up so the first request does not pay for it.

use std::sync::{Arc, OnceLock};
use tiktoken_rs::CoreBPE;

static ENCODER: OnceLock<Arc<CoreBPE>> = OnceLock::new();

#[derive(Clone, Copy, Debug, Default)]
pub struct TokenCounter;

impl TokenCounter {
    fn encoder() -> &'static CoreBPE {
        ENCODER.get_or_init(|| Arc::new(tiktoken_rs::o200k_base().expect("o200k_base ships inside tiktoken-rs")))
    }

    /// Loads the encoder now (idempotent; ~0.1 s the first time).
    pub fn load() {
        Self::encoder();
    }

    pub fn count(text: &str) -> usize {
        Self::encoder().encode_ordinary(text).len()
    }

    /// Cuts `text` to at most `max_tokens` tokens, on a char boundary, keeping the start.
    pub fn truncate(text: &str, max_tokens: usize) -> String {
        let enc = Self::encoder();
        let ids = enc.encode_ordinary(text);
        if ids.len() <= max_tokens {
            return text.to_string();
        }
        // Decoding a prefix may split a multi-byte character; drop tokens until it decodes.
        let mut n = max_tokens;
        while n > 0 {
            if let Ok(s) = enc.decode(&ids[..n]) {
                return s;
            }
            n -= 1;
        }
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_chinese_and_english() {
        // Figures from shared/research/embedding-models.md (o200k_base).
        assert_eq!(TokenCounter::count("我家宝宝喝奶粉总胀气"), 10);
        assert_eq!(TokenCounter::count("The baby gets gassy after drinking formula"), 8);
        assert_eq!(TokenCounter::count(""), 0);
    }

    #[test]
    fn truncate_keeps_prefix_within_budget() {
        let t = "我喜欢手冲咖啡，也喜欢意式浓缩。".repeat(10);
        let cut = TokenCounter::truncate(&t, 12);
        assert!(TokenCounter::count(&cut) <= 12);
        assert!(t.starts_with(&cut));
        assert!(!cut.is_empty());
    }
}
