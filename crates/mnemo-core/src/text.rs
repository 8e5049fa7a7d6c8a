//! Text analysis for full-text search, shared by every store so they index and query alike:
//! Chinese is segmented with jieba (search mode: 北京大学 → 北京/大学/北京大学), latin words are
//! lowercased and stemmed (English Snowball), punctuation and common function words are dropped.

use jieba_rs::Jieba;
use rust_stemmers::{Algorithm, Stemmer};
use std::sync::LazyLock;

/// The language a context is written in (its headers and labels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Locale {
    Zh,
    En,
}

static JIEBA: LazyLock<Jieba> = LazyLock::new(Jieba::new);
static STEMMER: LazyLock<Stemmer> = LazyLock::new(|| Stemmer::create(Algorithm::English));

/// Loads the segmenter's dictionary and the stemmer now (idempotent; ~0.1 s the first time).
pub fn load() {
    let _ = search_tokens("预热 warm up");
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

/// The distinct terms of a text, as [`search_tokens`] gives them. A text of ASCII alone is split
/// into words, lowercased and stemmed without the segmenter (several times faster: excerpts
/// match every turn of a context's candidates this way).
pub fn term_set(text: &str) -> std::collections::HashSet<String> {
    if !text.is_ascii() {
        return search_tokens(text).into_iter().collect();
    }
    let mut out = std::collections::HashSet::new();
    let mut add = |w: &str| {
        let w = w.to_ascii_lowercase();
        if !w.is_empty() && !STOP.contains(&w.as_str()) {
            out.insert(STEMMER.stem(&w).into_owned());
        }
    };
    // The segmenter keeps a hyphenated word whole beside its parts of two letters or more.
    for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).flat_map(|w| w.split("--")) {
        let word = word.trim_matches('-');
        if word.contains('-') {
            add(word);
            word.split('-').filter(|p| p.len() > 1).for_each(&mut add);
        } else {
            add(word);
        }
    }
    out
}

// ------------------------------------------------------------------------------- BM25

/// The tokens an indexed terms string consists of, as SQLite FTS5's `unicode61` tokenizer reads
/// it: maximal runs of letters and digits, lowercased.
pub fn fts_tokens(terms: &str) -> impl Iterator<Item = String> + '_ {
    terms.split(|c: char| !token_char(c)).filter(|t| !t.is_empty()).map(str::to_lowercase)
}

/// CJK Unified Ideographs (every code point of the block is assigned, a letter, and caseless).
fn cjk_ideograph(c: char) -> bool {
    ('\u{4E00}'..='\u{9FFF}').contains(&c)
}

/// `char::is_alphanumeric`, answered without Unicode table lookups for ASCII and the common CJK
/// ideographs — a search tokenises every stored document of its scope with it.
fn token_char(c: char) -> bool {
    if c.is_ascii() { c.is_ascii_alphanumeric() } else { cjk_ideograph(c) || c.is_alphanumeric() }
}

/// Whether a token has a letter that lower-casing changes (`char::is_uppercase`, without a table
/// lookup for ASCII and CJK ideographs).
fn has_upper(t: &str) -> bool {
    t.chars().any(|c| if c.is_ascii() { c.is_ascii_uppercase() } else { !cjk_ideograph(c) && c.is_uppercase() })
}

/// Corpus figures BM25 needs: documents and tokens in the collection.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CorpusStats {
    pub docs: u64,
    pub tokens: u64,
}

/// A query prepared for BM25 over many documents: each query term a phrase with its idf,
/// computed as SQLite FTS5's `bm25()` does (k1 = 1.2, b = 0.75, idf = ln((N − n + 0.5)/(n + 0.5))
/// floored at 1e-6), scores returned positive. Stores use it where they score a small scope
/// themselves, so the figure matches the full-text index's own ranking. `df(token)` is the number
/// of documents holding the token (a phrase's count is bounded by its rarest token's).
pub struct Bm25Query {
    phrases: Vec<(Vec<String>, f64)>,
    avgdl: f64,
}

impl Bm25Query {
    /// The `k` best-scoring documents (id, analysed terms) with a score above 0, best first (ties
    /// by id), as id → score. Documents may be borrowed: only the `k` ids kept are copied.
    pub fn top_k<I: AsRef<str>, T: AsRef<str>>(
        &self,
        docs: impl IntoIterator<Item = (I, Option<T>)>,
        k: usize,
    ) -> std::collections::HashMap<String, f64> {
        let mut scored: Vec<(f64, I)> = docs
            .into_iter()
            .filter_map(|(id, terms)| {
                let s = self.score(terms?.as_ref());
                (s > 0.0).then_some((s, id))
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.as_ref().cmp(b.1.as_ref())));
        scored.truncate(k);
        scored.into_iter().map(|(s, id)| (id.as_ref().to_string(), s)).collect()
    }

    pub fn new(query: &[String], stats: CorpusStats, df: impl Fn(&str) -> u64) -> Self {
        let docs = stats.docs.max(1) as f64;
        let phrases = query
            .iter()
            .map(|t| fts_tokens(t).collect::<Vec<_>>())
            .filter(|p| !p.is_empty())
            .map(|p| {
                let n = p.iter().map(|t| df(t)).min().unwrap_or(0).max(1) as f64;
                let idf = (((docs - n + 0.5) / (n + 0.5)).ln()).max(1e-6);
                (p, idf)
            })
            .collect();
        Self { phrases, avgdl: stats.tokens.max(1) as f64 / docs }
    }

    /// The document's score (0 when no query term occurs in it).
    pub fn score(&self, doc_terms: &str) -> f64 {
        const K1: f64 = 1.2;
        const B: f64 = 0.75;
        // The usual query — every term one token, a few of them — in one pass over the document
        // and without copying it: a search scores every document of the user's scope.
        const FEW: usize = 64;
        if self.phrases.len() <= FEW && self.phrases.iter().all(|(p, _)| p.len() == 1) {
            let mut freq = [0u32; FEW];
            let mut len = 0usize;
            for t in doc_terms.split(|c: char| !token_char(c)).filter(|t| !t.is_empty()) {
                len += 1;
                // Folded once per token, not once per query term.
                let ascii = t.is_ascii();
                let folded: std::borrow::Cow<str> =
                    if !ascii && has_upper(t) { t.to_lowercase().into() } else { t.into() };
                for (f, (p, _)) in freq.iter_mut().zip(&self.phrases) {
                    let p = p[0].as_str();
                    *f += u32::from(if ascii { t.eq_ignore_ascii_case(p) } else { folded == p });
                }
            }
            let len_norm = 1.0 - B + B * len as f64 / self.avgdl;
            let mut score = 0.0;
            for (f, (_, idf)) in freq.iter().zip(&self.phrases) {
                if *f > 0 {
                    let f = *f as f64;
                    score += idf * (f * (K1 + 1.0)) / (f + K1 * len_norm);
                }
            }
            return score;
        }
        // Terms are stored lowercased; only a token with upper case is folded (allocating).
        let doc: Vec<std::borrow::Cow<str>> = doc_terms
            .split(|c: char| !token_char(c))
            .filter(|t| !t.is_empty())
            .map(|t| if has_upper(t) { t.to_lowercase().into() } else { t.into() })
            .collect();
        let mut score = 0.0;
        let len_norm = 1.0 - B + B * doc.len() as f64 / self.avgdl;
        for (phrase, idf) in &self.phrases {
            let freq = if phrase.len() == 1 {
                doc.iter().filter(|t| **t == phrase[0]).count()
            } else {
                doc.windows(phrase.len()).filter(|w| w.iter().zip(phrase).all(|(a, b)| a == b)).count()
            } as f64;
            if freq > 0.0 {
                score += idf * (freq * (K1 + 1.0)) / (freq + K1 * len_norm);
            }
        }
        score
    }
}

/// The text's words with jieba's part-of-speech tags (`nr` a person's name, `ns` a place, `nt`
/// an organisation, …).
pub fn tag(text: &str) -> Vec<(String, String)> {
    JIEBA.tag(text, true).into_iter().map(|t| (t.word.to_string(), t.tag.to_string())).collect()
}

/// Whether a turn ends by asking: its last sentence ends with a question mark (an attachment
/// note such as "[image: …]" after it is ignored).
pub fn asks(text: &str) -> bool {
    let body = text.trim_end();
    let body = match body.strip_suffix(']').and_then(|b| b.rfind('[').map(|i| &b[..i])) {
        Some(before) if !before.trim().is_empty() => before,
        _ => body,
    };
    body.chars()
        .rev()
        .find(|c| matches!(c, '.' | '!' | '?' | '。' | '！' | '？'))
        .is_some_and(|c| matches!(c, '?' | '？'))
}

/// Whether `c` is a Chinese (CJK unified or compatibility) ideograph.
pub fn is_han(c: char) -> bool {
    matches!(c as u32, 0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0xF900..=0xFAFF | 0x20000..=0x2A6DF)
}

/// Whether the text reads as Chinese (for `locale: auto`).
pub fn looks_chinese(text: &str) -> bool {
    let (mut cjk, mut latin) = (0usize, 0usize);
    for c in text.chars() {
        if is_han(c) {
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
    fn term_sets_of_ascii_texts_are_the_search_tokens() {
        for text in [
            "I went to a veterans' march last weekend, it was amazing!",
            "Wow, John! What inspired you to join the march? I've always respected our military.",
            "Playing Valorant and Counter-Strike: Global Offensive until 2am; 3 wins in a row.",
            "mixed 中文 and English",
            "A state-of-the-art e-bike -- really - fast--ish",
        ] {
            let tokens: std::collections::HashSet<String> = search_tokens(text).into_iter().collect();
            assert_eq!(term_set(text), tokens, "{text}");
        }
    }

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
    fn bm25_one_pass_scores_as_the_general_path() {
        let stats = CorpusStats { docs: 100, tokens: 3_000 };
        let q = Bm25Query::new(&["coffee".into(), "berlin".into(), "咖啡".into()], stats, |t| t.len() as u64);
        // The general path (phrases of several tokens) over the same single tokens, as reference.
        let mut general =
            Bm25Query::new(&["coffee".into(), "berlin".into(), "咖啡".into()], stats, |t| t.len() as u64);
        general.phrases.push((vec!["no".into(), "such".into()], 1.0));
        for doc in [
            "coffee in Berlin, COFFEE again",
            "咖啡 coffee Ärger ärger",
            "nothing here",
            "",
            "Berlin-berlin coffee咖啡",
        ] {
            assert_eq!(q.score(doc), general.score(doc), "{doc}");
        }
        assert!(q.score("coffee in Berlin, COFFEE again") > q.score("coffee once in a long text about nothing at all"));
    }

    #[test]
    fn the_fast_character_classes_agree_with_unicode() {
        for c in ('\0'..='\u{FFFF}').chain(['\u{1F600}', '\u{20000}', '\u{1D400}', '\u{10400}']) {
            assert_eq!(token_char(c), c.is_alphanumeric(), "{c:?}");
            assert_eq!(has_upper(c.encode_utf8(&mut [0; 4])), c.is_uppercase(), "{c:?}");
        }
    }

    #[test]
    fn language_detection() {
        assert!(looks_chinese("除了无乳糖，还有没有含DHA的推荐？"));
        assert!(!looks_chinese("What did Caroline research?"));
    }
}
