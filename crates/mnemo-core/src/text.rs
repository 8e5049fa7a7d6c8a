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

mod case;
pub use case::lowercase;

static JIEBA: LazyLock<Jieba> = LazyLock::new(Jieba::new);
static STEMMER: LazyLock<Stemmer> = LazyLock::new(|| Stemmer::create(Algorithm::English));

/// Snowball's English stem of a lowercased word, remembered by each thread: a stem costs ~0.5 µs
/// and a remembered one ~0.1 (a search stems its candidates' texts, the same few thousand
/// words, again and again). Up to [`STEMS_KEPT`] words a thread, then it starts afresh.
fn stem(word: &str) -> String {
    thread_local! {
        static STEMS: std::cell::RefCell<std::collections::HashMap<String, String>> = Default::default();
    }
    STEMS.with_borrow_mut(|stems| {
        if let Some(s) = stems.get(word) {
            return s.clone();
        }
        let s = STEMMER.stem(word).into_owned();
        if stems.len() >= STEMS_KEPT {
            stems.clear();
        }
        stems.insert(word.to_owned(), s.clone());
        s
    })
}

/// ~1 MB a thread.
const STEMS_KEPT: usize = 8_192;

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
            out.push(stem(word));
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
            out.insert(stem(&w));
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
    t.chars().any(upper)
}

fn upper(c: char) -> bool {
    if c.is_ascii() { c.is_ascii_uppercase() } else { !cjk_ideograph(c) && c.is_uppercase() }
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

    /// [`Self::top_k`] over a scope tokenised once ([`ScopeTerms`]): the same scores and order,
    /// reading only the documents that hold a query token (the scope's postings) instead of
    /// every token of the scope.
    pub fn top_k_in(&self, scope: &ScopeTerms, k: usize) -> std::collections::HashMap<String, f64> {
        let postings = scope.postings();
        // Each document's score so far, and the documents that have one. Phrases are added in
        // their order, as `sum` adds them: the same score to the bit.
        let mut score = vec![0f64; scope.docs.len()];
        let mut touched: Vec<u32> = Vec::new();
        let len = |d: u32| scope.docs[d as usize].1.as_ref().map_or(0, |r| (r.end - r.start) as usize);
        for (phrase, idf) in &self.phrases {
            // The phrase in the scope's token ids (`None`: a token no document of the scope has).
            let Some(ids) =
                phrase.iter().map(|t| scope.vocab.get(&token_key(t.as_bytes())).copied()).collect::<Option<Vec<u32>>>()
            else {
                continue;
            };
            let mut add = |d: u32, f: u32| {
                if f > 0 {
                    let s = &mut score[d as usize];
                    if *s == 0.0 {
                        touched.push(d);
                    }
                    *s += self.term(*idf, f, len(d));
                }
            };
            match ids.as_slice() {
                [t] => postings.each(*t, add),
                // A phrase of several tokens is counted in the documents that hold its first,
                // at the windows that start with it (a slice compare at every window was a
                // `memcmp` call each, ~6% of a repeated search).
                [first, rest @ ..] => postings.each(*first, |d, _| {
                    let doc = scope.doc_tokens(d as usize);
                    add(d, doc.windows(ids.len()).filter(|w| w[0] == *first && w[1..] == *rest).count() as u32);
                }),
                [] => {}
            }
        }
        let mut scored: Vec<(f64, &str)> =
            touched.into_iter().map(|d| (score[d as usize], scope.id(d as usize))).collect();
        let order = |a: &(f64, &str), b: &(f64, &str)| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1));
        if scored.len() > k && k > 0 {
            scored.select_nth_unstable_by(k - 1, order);
        }
        // The k best (ties by id) as a map: their order is not kept.
        scored.truncate(k);
        scored.into_iter().map(|(s, id)| (id.to_string(), s)).collect()
    }

    /// BM25 of a document of `len` tokens in which the query's phrases occur `freq` times each
    /// (in the order of `phrases`).
    fn sum(&self, len: usize, freq: impl Iterator<Item = u32>) -> f64 {
        let mut score = 0.0;
        for (f, (_, idf)) in freq.zip(&self.phrases) {
            if f > 0 {
                score += self.term(*idf, f, len);
            }
        }
        score
    }

    /// What a phrase of `idf` found `f` times adds to the score of a document of `len` tokens.
    fn term(&self, idf: f64, f: u32, len: usize) -> f64 {
        let len_norm = 1.0 - B + B * len as f64 / self.avgdl;
        let f = f as f64;
        idf * (f * (K1 + 1.0)) / (f + K1 * len_norm)
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
            return self.sum(len, freq.into_iter());
        }
        // Terms are stored lowercased; only a token with upper case is folded (allocating).
        let doc: Vec<std::borrow::Cow<str>> = doc_terms
            .split(|c: char| !token_char(c))
            .filter(|t| !t.is_empty())
            .map(|t| if has_upper(t) { t.to_lowercase().into() } else { t.into() })
            .collect();
        self.sum(
            doc.len(),
            self.phrases.iter().map(|(phrase, _)| {
                if phrase.len() == 1 {
                    doc.iter().filter(|t| **t == phrase[0]).count() as u32
                } else {
                    doc.windows(phrase.len()).filter(|w| w.iter().zip(phrase).all(|(a, b)| a == b)).count() as u32
                }
            }),
        )
    }
}

/// BM25's term-frequency saturation and length normalisation, as FTS5's `bm25()` has them.
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// A search scope's documents with their analysed terms split into tokens once, the way
/// [`fts_tokens`] splits them, each token a number of the scope's own vocabulary. A search
/// scores its scope twice (the query, then the query with its feedback terms) and each time
/// every token of every document: counted by number, a token costs a table look-up however many
/// terms the query has, and no string is split or folded again.
///
/// A token is known by a 64-bit hash of its text ([`token_key`]), not by the text: interning
/// then neither compares nor copies strings (it did, and was a third of a search's own time
/// at 100k events). Two different tokens of one scope would have to share all 64 bits to be
/// counted as one (for a scope of 10⁴ distinct tokens, a chance of about 10⁻¹¹).
#[derive(Default)]
pub struct ScopeTerms {
    vocab: rustc_hash::FxHashMap<u64, u32>,
    /// Each token's key by its number (`vocab` backwards).
    keys: Vec<u64>,
    /// Every document's tokens, one after another.
    tokens: Vec<u32>,
    /// Each document's id and its tokens' range in `tokens` (`None`: no terms stored).
    docs: Vec<(String, Option<std::ops::Range<u32>>)>,
    /// Each token's documents, made when the scope is first scored (a kept scope is scored by
    /// every search of its user).
    postings: std::sync::OnceLock<Postings>,
}

/// A scope's inverted index: each token's documents, a document once for each time the token
/// occurs in it — 2 bytes an occurrence in a scope of at most 65,536 documents (the stores keep
/// scopes of at most 5,000), half what its tokens take.
struct Postings {
    /// Token `t`'s entries are `entries[starts[t]..starts[t + 1]]`.
    starts: Vec<u32>,
    entries: Entries,
}

/// Document numbers, ascending within a token's entries.
enum Entries {
    Narrow(Vec<u16>),
    Wide(Vec<u32>),
}

impl Postings {
    /// `f(document, occurrences)` for each document holding `token`, in document order.
    fn each(&self, token: u32, mut f: impl FnMut(u32, u32)) {
        let at = self.starts[token as usize] as usize..self.starts[token as usize + 1] as usize;
        match &self.entries {
            Entries::Narrow(e) => e[at].chunk_by(|a, b| a == b).for_each(|run| f(run[0].into(), run.len() as u32)),
            Entries::Wide(e) => e[at].chunk_by(|a, b| a == b).for_each(|run| f(run[0], run.len() as u32)),
        }
    }

    fn heap_bytes(&self) -> usize {
        self.starts.capacity() * 4
            + match &self.entries {
                Entries::Narrow(e) => e.capacity() * 2,
                Entries::Wide(e) => e.capacity() * 4,
            }
    }
}

/// The key [`ScopeTerms`] knows a token by.
fn token_key(token: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    foldhash::quality::FixedState::with_seed(0x6d6e_656d_6f21).hash_one(token)
}

impl ScopeTerms {
    /// Adds a document: its id and its stored terms.
    pub fn push(&mut self, id: String, terms: Option<&str>) {
        self.push_bytes(id, terms.map(str::as_bytes));
    }

    /// [`Self::push`] with the terms as the store holds them (UTF-8, not checked first: a piece
    /// that is not plain ASCII is checked on its own, and one that is not UTF-8 read lossily).
    pub fn push_bytes(&mut self, id: String, terms: Option<&[u8]>) {
        self.postings.take();
        let range = terms.map(|terms| {
            let start = self.tokens.len() as u32;
            for piece in terms.split(|b| *b == b' ') {
                // Stored terms are space-separated and mostly lower-case letters and digits.
                if piece.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()) {
                    if !piece.is_empty() {
                        self.intern(piece);
                    }
                    continue;
                }
                let piece = String::from_utf8_lossy(piece);
                // A whole word of Chinese (or of lower-case letters of another script) is one token.
                if piece.chars().all(|c| token_char(c) && !upper(c)) {
                    self.intern(piece.as_bytes());
                    continue;
                }
                for t in piece.split(|c: char| !token_char(c)).filter(|t| !t.is_empty()) {
                    if has_upper(t) { self.intern(t.to_lowercase().as_bytes()) } else { self.intern(t.as_bytes()) }
                }
            }
            start..self.tokens.len() as u32
        });
        self.docs.push((id, range));
    }

    fn intern(&mut self, token: &[u8]) {
        self.intern_key(token_key(token));
    }

    fn intern_key(&mut self, key: u64) {
        let next = self.vocab.len() as u32;
        let n = *self.vocab.entry(key).or_insert(next);
        if n == next {
            self.keys.push(key);
        }
        self.tokens.push(n);
    }

    /// Adds `from`'s document number `doc` as it is there (its tokens not read from text again:
    /// a kept scope's unchanged documents carried into its next reading).
    pub fn push_copied(&mut self, from: &ScopeTerms, doc: usize) {
        self.postings.take();
        let (id, range) = &from.docs[doc];
        let range = range.clone().map(|r| {
            let start = self.tokens.len() as u32;
            for &t in &from.tokens[r.start as usize..r.end as usize] {
                self.intern_key(from.keys[t as usize]);
            }
            start..self.tokens.len() as u32
        });
        self.docs.push((id.clone(), range));
    }

    /// Document `doc`'s id.
    pub fn id(&self, doc: usize) -> &str {
        &self.docs[doc].0
    }

    /// Document `doc`'s tokens.
    fn doc_tokens(&self, doc: usize) -> &[u32] {
        self.docs[doc].1.as_ref().map_or(&[], |r| &self.tokens[r.start as usize..r.end as usize])
    }

    /// The postings, made on first use: two passes over the tokens (count, then place in
    /// document order).
    fn postings(&self) -> &Postings {
        self.postings.get_or_init(|| {
            let n = self.vocab.len();
            let mut starts = vec![0u32; n + 1];
            for d in 0..self.docs.len() {
                for &t in self.doc_tokens(d) {
                    starts[t as usize + 1] += 1;
                }
            }
            for t in 0..n {
                starts[t + 1] += starts[t];
            }
            // Each document's number placed after its token's earlier documents.
            fn place<T: Copy + Default>(scope: &ScopeTerms, starts: &[u32], doc: impl Fn(usize) -> T) -> Vec<T> {
                let mut entries = vec![T::default(); starts[starts.len() - 1] as usize];
                let mut next: Vec<u32> = starts[..starts.len() - 1].to_vec();
                for d in 0..scope.docs.len() {
                    for &t in scope.doc_tokens(d) {
                        entries[next[t as usize] as usize] = doc(d);
                        next[t as usize] += 1;
                    }
                }
                entries
            }
            let entries = match u16::try_from(self.docs.len().saturating_sub(1)) {
                Ok(_) => Entries::Narrow(place(self, &starts, |d| d as u16)),
                Err(_) => Entries::Wide(place(self, &starts, |d| d as u32)),
            };
            Postings { starts, entries }
        })
    }

    /// About how much memory it holds (a scope cache's measure).
    pub fn heap_bytes(&self) -> usize {
        self.vocab.capacity() * 16
            + self.keys.capacity() * 8
            + self.tokens.capacity() * 4
            // The postings, made now if they are not yet: a scope is weighed to be kept, and a
            // kept scope is scored by its user's next search.
            + self.postings().heap_bytes()
            + self.docs.iter().map(|(id, _)| id.len() + 40).sum::<usize>()
    }

    /// Documents in the scope.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
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
            "Melanie(user):I took the kids swimming, 2 hours!\nCaroline(assistant):That's great: well done.",
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
    fn a_scope_tokenised_once_ranks_as_its_strings() {
        let docs = [
            "coffee in berlin coffee again",
            "咖啡 coffee Ärger ärger user-61 user 61",
            "nothing here",
            "",
            "Berlin-berlin coffee咖啡 ÄRGER",
            "user 61 user-61 kyoto kyoto kyoto",
            "coffe babi 宝宝 奶粉 宝宝",
        ];
        let mut scope = ScopeTerms::default();
        for (i, d) in docs.iter().enumerate() {
            scope.push(format!("e{i}"), Some(d));
        }
        scope.push("none".into(), None);
        let stats = CorpusStats { docs: 50, tokens: 600 };
        for query in [
            vec!["coffee", "berlin", "咖啡"],
            vec!["user-61", "kyoto"],
            vec!["ärger", "coffee", "coffee", "absent"],
            vec!["宝宝", "babi", "61 user", "no-such"],
            vec!["absent"],
        ] {
            let query: Vec<String> = query.into_iter().map(String::from).collect();
            let q = Bm25Query::new(&query, stats, |t| t.len() as u64);
            let strings = docs.iter().enumerate().map(|(i, d)| (format!("e{i}"), Some(*d)));
            for k in [1, 3, 10] {
                assert_eq!(q.top_k_in(&scope, k), q.top_k(strings.clone(), k), "{query:?}, k = {k}");
            }
        }
        assert_eq!(scope.len(), docs.len() + 1);
        // Copied document by document in another order (a kept scope read again), with one
        // document left out and one new: the same scores as the strings.
        let mut copied = ScopeTerms::default();
        copied.push("new".into(), Some("kyoto coffee 宝宝"));
        for i in (1..scope.len()).rev() {
            copied.push_copied(&scope, i);
        }
        assert_eq!((copied.id(0), copied.id(1), copied.len()), ("new", "none", docs.len() + 1));
        let strings = docs.iter().enumerate().skip(1).map(|(i, d)| (format!("e{i}"), Some(*d)));
        let strings = strings.chain([("new".to_string(), Some("kyoto coffee 宝宝"))]);
        for query in [vec!["coffee", "berlin", "咖啡"], vec!["user-61", "kyoto", "宝宝"]] {
            let query: Vec<String> = query.into_iter().map(String::from).collect();
            let q = Bm25Query::new(&query, stats, |t| t.len() as u64);
            assert_eq!(q.top_k_in(&copied, 10), q.top_k(strings.clone(), 10), "{query:?}");
        }
        // A document added after the scope was scored is scored too (its postings made again).
        copied.push("late".into(), Some("kyoto 61 user"));
        let q = Bm25Query::new(&["kyoto".into(), "61 user".into()], stats, |t| t.len() as u64);
        let strings = strings.chain([("late".to_string(), Some("kyoto 61 user"))]);
        assert_eq!(q.top_k_in(&copied, 10), q.top_k(strings, 10));
        assert!(q.top_k_in(&copied, 10).contains_key("late"));
        // Bytes that are not UTF-8 (no store writes them) cost their piece, not the document.
        let mut odd = ScopeTerms::default();
        odd.push_bytes("bad".into(), Some(b"caf\xff\xfe coffee kyoto"));
        let q = Bm25Query::new(&["coffee".into()], stats, |_| 1);
        assert_eq!(q.top_k_in(&odd, 1), q.top_k([("bad", Some("caf coffee kyoto"))], 1));
    }

    #[test]
    fn a_scope_of_more_documents_than_two_bytes_number_ranks_as_its_strings() {
        let docs: Vec<(String, Option<String>)> = (0..70_000)
            .map(|i| {
                (
                    format!("e{i:05}"),
                    Some(if i % 9_999 == 0 { format!("kyoto {i} kyoto") } else { format!("w{}", i % 7) }),
                )
            })
            .collect();
        let mut scope = ScopeTerms::default();
        for (id, d) in &docs {
            scope.push(id.clone(), d.as_deref());
        }
        let q = Bm25Query::new(
            &["kyoto".into(), "w3".into(), "69993 kyoto".into()],
            CorpusStats { docs: 70_000, tokens: 80_000 },
            |_| 9,
        );
        let top = q.top_k_in(&scope, 12);
        assert_eq!(top, q.top_k(docs.iter().map(|(id, d)| (id.as_str(), d.as_deref())), 12));
        assert!(top.contains_key("e69993"), "a document numbered past 65,535 is found: {top:?}");
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
