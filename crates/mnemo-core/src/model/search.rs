//! What a store is asked for a search and what it answers: the candidate query (vector, terms,
//! scope size, BM25 statistics), a second hop's terms, and the candidates with their raw signals.

use super::*;

/// What a search asks the store for: candidates by vector similarity and by full text.
#[derive(Clone, Debug)]
pub struct CandidateQuery {
    pub vector: Option<Vec<f32>>,
    /// Analysed query terms (`text::search_tokens`); empty: no full-text part.
    pub terms: Vec<String>,
    /// How many candidates each part returns at most.
    pub k: usize,
    /// The vector part's answer — (event id, cosine), best first — already known from a query
    /// with the same vector, filter and `k` (a search's second hop): the store uses it instead
    /// of scanning the scope again. The cosines of full-text hits outside it are still computed.
    pub vector_hits: Option<Vec<(String, f32)>>,
    /// BM25 statistics to score with instead of the store's own — a sharded store's sums over
    /// its shards, so each shard ranks and scores as one database holding everything would.
    /// `None`: the store's. They cover this query's terms only (a second hop asks again).
    pub corpus: Option<std::sync::Arc<Corpus>>,
}

/// A collection's BM25 statistics for a query: documents and tokens, and the document frequency
/// of each of the query's full-text tokens ([`crate::store::SearchStore::corpus`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Corpus {
    pub stats: crate::text::CorpusStats,
    pub df: std::collections::HashMap<String, u64>,
}

impl Corpus {
    /// Adds another part's statistics (a shard's) to these.
    pub fn add(&mut self, other: Corpus) {
        self.stats.docs += other.stats.docs;
        self.stats.tokens += other.stats.tokens;
        for (t, n) in other.df {
            *self.df.entry(t).or_default() += n;
        }
    }
}

/// What a search's second hop asks: its terms and, from a sharded store, the BM25 statistics to
/// score them with ([`CandidateQuery::corpus`]).
#[derive(Clone, Debug)]
pub struct NextHop {
    pub terms: Vec<String>,
    pub corpus: Option<std::sync::Arc<Corpus>>,
}

impl NextHop {
    /// A second hop with these terms, scored with the store's own statistics.
    pub fn terms(terms: Vec<String>) -> Self {
        Self { terms, corpus: None }
    }
}

impl CandidateQuery {
    /// The BM25 scorer of this query's terms: over [`CandidateQuery::corpus`] when given, else
    /// over the store's own statistics (`stats`, `df`).
    pub fn bm25(&self, stats: crate::text::CorpusStats, df: impl Fn(&str) -> u64) -> crate::text::Bm25Query {
        match &self.corpus {
            Some(c) => crate::text::Bm25Query::new(&self.terms, c.stats, |t| c.df.get(t).copied().unwrap_or(0)),
            None => crate::text::Bm25Query::new(&self.terms, stats, df),
        }
    }

    /// A search's second hop after this query found `found`: `next`'s terms (and statistics)
    /// with the vector part as found ([`Self::vector_hits_of`]), the rest unchanged.
    pub fn second_hop(&self, found: &[Candidate], next: NextHop) -> CandidateQuery {
        CandidateQuery {
            terms: next.terms,
            vector_hits: self.vector_hits_of(found),
            corpus: next.corpus,
            ..self.clone()
        }
    }

    /// The vector part of a candidate list this query returned: the `k` candidates of highest
    /// cosine. With an exact scan (every user-scoped search) it is the store's vector part, since
    /// a full-text hit outside it scores at most its lowest cosine — up to which of several
    /// exactly equal cosines at the k-th place is kept. Over a large scope on PostgreSQL (HNSW,
    /// approximate) it may hold a full-text hit of higher cosine than an HNSW hit: no worse.
    pub fn vector_hits_of(&self, candidates: &[Candidate]) -> Option<Vec<(String, f32)>> {
        self.vector.as_ref()?;
        let mut hits: Vec<(String, f32)> =
            candidates.iter().filter_map(|c| Some((c.event.id.clone(), c.cosine?))).collect();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        hits.truncate(self.k);
        Some(hits)
    }
}

/// A search candidate with its raw signals; core fuses them into a score.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub event: Event,
    /// Cosine similarity to the query vector, if the event has a vector.
    pub cosine: Option<f32>,
    /// BM25 relevance (higher is better), if the event matched a query term.
    pub bm25: Option<f64>,
    /// Its turn nearest the query ([`crate::turns::best`]), if it has turn vectors and was
    /// among the candidates scored by them.
    pub best_turn: Option<crate::turns::BestTurn>,
}
