//! Redaction at the door (seed 002 §5.4): before anything is stored, text inside
//! `<private>…</private>` is removed and common secrets are masked, so they reach no table, no
//! index, no vector and no log. Applied by the `Service` to message content, event fields and
//! profiles. Patterns: API keys of well-known shapes, bearer tokens, JWTs, `password=…`-style
//! pairs (English and Chinese keys), PEM private keys, and card numbers that pass the Luhn check.

use regex::{Captures, Regex};
use std::borrow::Cow;
use std::sync::LazyLock;

#[derive(Clone, Copy, Debug)]
pub struct Redaction {
    pub private_tags: bool,
    pub secrets: bool,
}

impl Default for Redaction {
    fn default() -> Self {
        Self { private_tags: true, secrets: true }
    }
}

pub const PRIVATE_PLACEHOLDER: &str = "[private]";

// Word boundaries are ASCII ones, `(?-u:\b)`: Chinese has no spaces, and a Unicode `\b` sees
// no boundary between a Han character and a secret glued to it ("用这个sk-…"). They also keep the
// regexes on the lazy DFA (a Unicode `\b` sends non-ASCII text to the slower backtracker).
static PRIVATE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?is)<private>.*?(?:</private>|\z)").unwrap());
static PEM: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?s)-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\z)").unwrap()
});
static KEYS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?-u:\b)(?:sk-(?:ant-|proj-|live-|test-)?[A-Za-z0-9_-]{16,}",
        r"|AKIA[0-9A-Z]{16}",
        r"|gh[pousr]_[A-Za-z0-9]{30,}",
        r"|github_pat_[A-Za-z0-9_]{30,}",
        r"|xox[abprs]-[A-Za-z0-9-]{10,}",
        r"|AIza[0-9A-Za-z_-]{35}",
        r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"
    ))
    .unwrap()
});
static BEARER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)(?-u:\b)(bearer)\s+[A-Za-z0-9._~+/-]{12,}=*").unwrap());
static PAIRS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?i)(?-u:\b)(password|passwd|pwd|passphrase|secret|client[_-]?secret|api[_-]?key|access[_-]?key|access[_-]?token|auth[_-]?token|token)(\s*[:=：]\s*)("[^"]*"|'[^']*'|[^\s,;，；]+)|(密码|口令|密钥|令牌)(\s*(?:[:=：]|是|为)\s*)([^\s,;，；。]+)"#).unwrap()
});
static CARD: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?-u:\b)\d(?:[ -]?\d){12,18}(?-u:\b)").unwrap());

fn luhn(digits: &str) -> bool {
    let ds: Vec<u32> = digits.chars().filter_map(|c| c.to_digit(10)).collect();
    if !(13..=19).contains(&ds.len()) {
        return false;
    }
    let sum: u32 = ds
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| if i % 2 == 1 { if d * 2 > 9 { d * 2 - 9 } else { d * 2 } } else { d })
        .sum();
    sum.is_multiple_of(10)
}

impl Redaction {
    pub fn apply<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out: Cow<'a, str> = Cow::Borrowed(text);
        if self.private_tags && text.as_bytes().windows(9).any(|w| w.eq_ignore_ascii_case(b"<private>")) {
            out = Cow::Owned(PRIVATE.replace_all(&out, PRIVATE_PLACEHOLDER).into_owned());
        }
        if self.secrets {
            for (re, with) in [(&*PEM, "[REDACTED PRIVATE KEY]"), (&*KEYS, "[REDACTED SECRET]")] {
                if re.is_match(&out) {
                    out = Cow::Owned(re.replace_all(&out, with).into_owned());
                }
            }
            if BEARER.is_match(&out) {
                out = Cow::Owned(BEARER.replace_all(&out, "$1 [REDACTED]").into_owned());
            }
            if PAIRS.is_match(&out) {
                out = Cow::Owned(
                    PAIRS
                        .replace_all(&out, |c: &Captures| match (c.get(1), c.get(4)) {
                            (Some(k), _) => format!("{}{}[REDACTED]", k.as_str(), &c[2]),
                            (None, Some(k)) => format!("{}{}[REDACTED]", k.as_str(), &c[5]),
                            _ => c[0].to_string(),
                        })
                        .into_owned(),
                );
            }
            if CARD.is_match(&out) {
                out = Cow::Owned(
                    CARD.replace_all(
                        &out,
                        |c: &Captures| if luhn(&c[0]) { "[REDACTED CARD]".to_string() } else { c[0].to_string() },
                    )
                    .into_owned(),
                );
            }
        }
        out
    }

    /// Redacts every string inside a JSON value, in place.
    pub fn apply_json(&self, v: &mut serde_json::Value) {
        match v {
            serde_json::Value::String(s) => {
                if let Cow::Owned(r) = self.apply(s) {
                    *s = r;
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(|i| self.apply_json(i)),
            serde_json::Value::Object(m) => m.values_mut().for_each(|i| self.apply_json(i)),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expected: &str) {
        assert_eq!(Redaction::default().apply(input), expected, "input: {input}");
    }

    #[test]
    fn private_tags_are_removed() {
        check("hello <private>my diary</private> world", "hello [private] world");
        check("a <PRIVATE>x\ny</Private> b <private>unclosed", "a [private] b [private]");
        assert_eq!(
            Redaction { private_tags: false, secrets: true }.apply("<private>x</private>"),
            "<private>x</private>"
        );
    }

    #[test]
    fn secrets_are_masked() {
        check("key sk-proj-abcdefghijklmnop1234 ok", "key [REDACTED SECRET] ok");
        check("AKIAIOSFODNN7EXAMPLE", "[REDACTED SECRET]");
        check("ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789", "[REDACTED SECRET]");
        check("Authorization: Bearer abc.def-ghi_jkl012345", "Authorization: Bearer [REDACTED]");
        check("password=hunter2 and token: 'abc def'", "password=[REDACTED] and token: [REDACTED]");
        check("我的密码是abc123456，别告诉别人", "我的密码是[REDACTED]，别告诉别人");
        check("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----", "[REDACTED PRIVATE KEY]");
        check("card 4111 1111 1111 1111 exp", "card [REDACTED CARD] exp");
        check("order 1234 5678 9012 3456 is not a card", "order 1234 5678 9012 3456 is not a card");
        check("我家宝宝1岁，住在上海", "我家宝宝1岁，住在上海");
    }

    #[test]
    fn secrets_glued_to_chinese_text_are_masked() {
        // Chinese has no spaces: a secret follows a Han character directly, which is a word
        // character for a Unicode `\b` (so no boundary there) — the boundaries are ASCII ones.
        check("用这个sk-proj-abcdefghijklmnop1234调用接口", "用这个[REDACTED SECRET]调用接口");
        check("卡号4111111111111111，有效期", "卡号[REDACTED CARD]，有效期");
        check("我的password=hunter2吧", "我的password=[REDACTED]");
        check("请带上Bearer abc.def-ghi_jkl012345访问", "请带上Bearer [REDACTED]访问");
        // Still no match inside a longer ASCII word.
        check("mask-proj-abcdefghijklmnop1234", "mask-proj-abcdefghijklmnop1234");
        check("xpassword=1", "xpassword=1");
    }
}
