//! Token counting with a real BPE (OpenAI's `o200k_base`, ~1 token per Chinese character): the
//! same counter drives the extraction trigger and the context budget, so both agree.
//!
//! `bpe-openai` gives tiktoken's counts (a test checks it string by string) and counts without
//! building the token list; its pre-tokeniser runs on `regex-automata` instead of tiktoken's
//! backtracking `fancy-regex`. Building the encoder takes a few tens of milliseconds;
//! [`crate::warm_up`] starts it on a background thread at start-up so the first request does not
//! pay for it.

use bpe_openai::Tokenizer;

#[derive(Clone, Copy, Debug, Default)]
pub struct TokenCounter;

impl TokenCounter {
    fn encoder() -> &'static Tokenizer {
        bpe_openai::o200k_base()
    }

    /// Loads the encoder now (idempotent).
    pub fn load() {
        Self::encoder();
    }

    pub fn count(text: &str) -> usize {
        Self::encoder().count(text)
    }

    /// Cuts `text` to at most `max_tokens` tokens, on a char boundary, keeping the start.
    pub fn truncate(text: &str, max_tokens: usize) -> String {
        let enc = Self::encoder();
        let ids = enc.encode(text);
        if ids.len() <= max_tokens {
            return text.to_string();
        }
        // Decoding a prefix may split a multi-byte character; drop tokens until it decodes.
        (0..=max_tokens).rev().find_map(|n| enc.decode(&ids[..n])).unwrap_or_default()
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

    /// Every string of the Chinese bench set, and strings built to stress the pre-tokeniser
    /// (contractions, digit runs, whitespace runs before a word and at the end, emoji, mixed
    /// scripts): the same count as tiktoken's `o200k_base`, and the same tokens for truncation.
    #[test]
    fn counts_like_tiktoken() {
        let reference = tiktoken_rs::o200k_base().unwrap();
        let corpus = include_str!("../../../bench/zh-life/conversations.jsonl");
        let mut texts: Vec<String> = corpus.lines().map(str::to_string).collect();
        for line in corpus.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            collect_strings(&v, &mut texts);
        }
        texts.extend(
            [
                "I'm sure they'll say it's 12345678 o'clock",
                "HELLO'S World's",
                "a  \n\n  b   ",
                "   ",
                "trailing spaces   ",
                "tabs\tand\r\nbreaks\n",
                "emoji 👩‍👩‍👧 and 🎉🎉",
                "ｆｕｌｌｗｉｄｔｈ ＡＢＣ",
                "Café naïve résumé",
                "混合 mixed 文本123abc。",
                "sk-proj-abcDEF_123/xyz?q=1",
                "!!!???...",
                "\u{0301}e",
            ]
            .map(str::to_string),
        );
        assert!(texts.len() > 1000, "{} strings", texts.len());
        for t in &texts {
            let want = reference.encode_ordinary(t);
            assert_eq!(TokenCounter::count(t), want.len(), "{t:?}");
            assert_eq!(TokenCounter::encoder().encode(t.as_str()), want, "{t:?}");
        }
    }

    fn collect_strings(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::String(s) => out.push(s.clone()),
            serde_json::Value::Array(a) => a.iter().for_each(|x| collect_strings(x, out)),
            serde_json::Value::Object(o) => o.values().for_each(|x| collect_strings(x, out)),
            _ => {}
        }
    }
}
