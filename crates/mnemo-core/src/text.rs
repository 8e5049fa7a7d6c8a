//! Text analysis for full-text search, shared by every store so they index and query alike:
//! Chinese is segmented with jieba (search mode: 北京大学 → 北京/大学/北京大学), latin words are
//! lowercased and stemmed (English Snowball), punctuation and common function words are dropped.

use jieba_rs::Jieba;
use rust_stemmers::{Algorithm, Stemmer};
use std::sync::LazyLock;

static JIEBA: LazyLock<Jieba> = LazyLock::new(Jieba::new);
static STEMMER: LazyLock<Stemmer> = LazyLock::new(|| Stemmer::create(Algorithm::English));

/// Loads the segmenter's dictionary in the background (it takes ~0.2 s).
pub fn warm() {
    std::thread::spawn(|| {
        let _ = search_tokens("预热 warm up");
    });
}

const STOP: &[&str] = &[
    "a", "an", "the", "and", "or", "but", "of", "to", "in", "on", "at", "for", "with", "by", "from", "is", "are",
    "was", "were", "be", "been", "it", "its", "this", "that", "as", "do", "did", "does", "i", "you", "he", "she", "we",
    "they", "me", "my", "your", "our", "their", "what", "which", "who", "whom", "how", "when", "where", "why", "s",
    "t", "have", "has", "had", "so", "if", "not", "no", "can", "will", "would", "about", "there", "here", "some",
    "any", "的", "了", "是", "在", "我", "你", "他", "她", "它", "们", "吗", "呢", "吧", "啊", "和", "与", "也", "都",
    "就", "还", "有", "没有", "什么", "怎么", "一个", "这个", "那个", "这", "那", "哪", "哪些", "请问", "一下",
];

/// The terms a text is indexed and searched by.
pub fn search_tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for tok in JIEBA.cut_for_search(text, true) {
        let tok = tok.word.trim();
        if tok.is_empty() || !tok.chars().any(char::is_alphanumeric) {
            continue;
        }
        let lower = tok.to_lowercase();
        if STOP.contains(&lower.as_str()) {
            continue;
        }
        if lower.chars().all(|c| c.is_ascii_alphanumeric() || c == '\'' || c == '-') {
            let word = lower.trim_matches(|c: char| !c.is_ascii_alphanumeric());
            if word.is_empty() {
                continue;
            }
            out.push(STEMMER.stem(word).into_owned());
        } else {
            out.push(lower);
        }
    }
    out
}

/// Whether the text reads as Chinese (for `locale: auto`).
pub fn looks_chinese(text: &str) -> bool {
    let (mut cjk, mut latin) = (0usize, 0usize);
    for c in text.chars() {
        if matches!(c as u32, 0x4E00..=0x9FFF | 0x3400..=0x4DBF) {
            cjk += 1;
        } else if c.is_ascii_alphabetic() {
            latin += 1;
        }
    }
    cjk > 0 && cjk * 4 >= latin
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_chinese_and_stems_english() {
        assert_eq!(search_tokens("我家宝宝喝奶粉总胀气"), vec!["我家", "宝宝", "喝", "奶粉", "总", "胀气"]);
        assert_eq!(search_tokens("The babies were drinking formulas!"), vec!["babi", "drink", "formula"]);
        let mixed = search_tokens("我喜欢 pour-over coffee，也喜欢北京大学");
        assert!(
            mixed.contains(&"coffe".to_string())
                && mixed.contains(&"北京大学".to_string())
                && mixed.contains(&"北京".to_string()),
            "{mixed:?}"
        );
        assert!(search_tokens("的了吗？！... ,,").is_empty());
    }

    #[test]
    fn language_detection() {
        assert!(looks_chinese("除了无乳糖，还有没有含DHA的推荐？"));
        assert!(!looks_chinese("What did Caroline research?"));
    }
}
