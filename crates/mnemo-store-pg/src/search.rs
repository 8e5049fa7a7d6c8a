//! Candidate generation on PostgreSQL, giving the same candidates and the same signals as the
//! embedded store so `mnemo-core` ranks both alike:
//! - a scope of up to [`EXACT_SCOPE`] events (configurable) (the usual: one user's) is searched exactly
//!   in two round trips and no transaction: one statement returns the scope's events with their
//!   terms and their inner product with the query (pgvector, btree-prefiltered, no ANN) together
//!   with the collection's BM25 statistics for the query's tokens; the vector top k and BM25
//!   (`text::Bm25Query`) are ranked here, and a second statement loads the candidates' rows;
//! - a larger scope uses the HNSW index of the collection's dimension with
//!   `hnsw.iterative_scan` (a filtered HNSW scan otherwise returns too few rows, even none), and
//!   the GIN index over the terms to find the documents BM25 then scores.

use crate::rows::{EVENT_COLS, event_from_row};
use crate::sql::{SqlParam, Tx, backend, begin_read, event_filter_sql, query_all, query_one};
use deadpool_postgres::{GenericClient, Object};
use mnemo_core::StoreError;
use mnemo_core::model::*;
use mnemo_core::text::{Bm25Query, CorpusStats, fts_tokens};
use std::collections::HashMap;

/// Scopes up to this many events are searched exactly (the default of `PgOptions::exact_scope`).
pub const EXACT_SCOPE: usize = 5_000;
/// At most this many full-text matches of a large scope are scored.
const LARGE_SCOPE_TEXT_MATCHES: i64 = 20_000;

pub async fn candidates(
    conn: &mut Object,
    cid: CollectionId,
    f: &EventFilter,
    q: &CandidateQuery,
    exact_scope: usize,
) -> Result<Vec<Candidate>, StoreError> {
    let search = Search {
        cid,
        f,
        q,
        qv: q.vector.as_ref().map(|v| pgvector::Vector::from(v.clone())),
        dim: q.vector.as_ref().map(|v| v.len() as i32),
        tokens: {
            let mut t: Vec<String> = q.terms.iter().flat_map(|t| fts_tokens(t).collect::<Vec<_>>()).collect();
            t.sort();
            t.dedup();
            t
        },
    };
    let Some(scope) = small_scope(&*conn, &search, exact_scope).await? else {
        let tx = begin_read(conn).await?;
        return large_scope(&tx, &search).await;
    };
    let (qv, dim) = (search.qv.as_ref(), search.dim);
    if scope.docs.is_empty() {
        return Ok(vec![]);
    }
    let k = q.k;
    let mut cosine: HashMap<String, f32> = match &q.vector_hits {
        Some(hits) => hits.iter().cloned().collect(),
        None => {
            // pgvector's `<#>` is the negated inner product: nearest first, ties by id, as
            // `ORDER BY vec <#> q, event_id` orders them.
            let mut near: Vec<(&String, f64)> =
                scope.docs.iter().filter_map(|(id, _, ip)| Some((id, (*ip)?))).collect();
            near.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(b.0)));
            near.truncate(k);
            near.into_iter().map(|(id, ip)| (id.clone(), (-ip) as f32)).collect()
        }
    };
    let bm25 = if q.terms.is_empty() {
        HashMap::new()
    } else {
        let df = &scope.df;
        Bm25Query::new(&q.terms, scope.stats, |t| df.get(t).copied().unwrap_or(0))
            .top_k(scope.docs.iter().map(|(id, terms, _)| (id, terms.as_ref())), k)
    };
    // The scope's inner products are known already: a full-text hit's cosine needs no query.
    if q.vector_hits.is_none() && qv.is_some() {
        for (id, _, ip) in &scope.docs {
            if let Some(ip) = ip
                && bm25.contains_key(id)
            {
                cosine.entry(id.clone()).or_insert((-ip) as f32);
            }
        }
    }
    load_candidates(&*conn, cosine, bm25, qv, dim).await
}

/// One search's inputs: the query vector in pgvector's form and its dimension, the query's
/// distinct full-text tokens.
struct Search<'a> {
    cid: CollectionId,
    f: &'a EventFilter,
    q: &'a CandidateQuery,
    qv: Option<pgvector::Vector>,
    dim: Option<i32>,
    tokens: Vec<String>,
}

/// A small scope's events (id, terms, inner product with the query) and the BM25 statistics of
/// the query's tokens.
struct Scope {
    docs: Vec<(String, Option<String>, Option<f64>)>,
    stats: CorpusStats,
    df: HashMap<String, u64>,
}

/// One statement, one snapshot: the scope with its signals, or `None` when the scope holds more
/// than `exact_scope` events (then nothing else was computed).
async fn small_scope(c: &Object, s: &Search<'_>, exact_scope: usize) -> Result<Option<Scope>, StoreError> {
    let (cid, f, q, qv, dim, tokens) = (s.cid, s.f, s.q, s.qv.as_ref(), s.dim, &s.tokens[..]);
    let (where_sql, mut a) = event_filter_sql(cid, f);
    let cap = a.push((exact_scope + 1) as i64);
    let exact = a.push(exact_scope as i64);
    let terms = if q.terms.is_empty() { "NULL::text" } else { "s.terms" };
    let ip = match (qv, dim) {
        (Some(qv), Some(dim)) if q.vector_hits.is_none() => {
            let (v, d) = (a.push(qv.clone()), a.push(dim));
            format!("(SELECT v.vec <#> {v} FROM event_vectors v WHERE v.event_id = s.id AND v.dim = {d})")
        }
        _ => "NULL::float8".into(),
    };
    // The statistics rows (kind 1: documents and tokens; kind 2: a token's document frequency)
    // are the folded figures plus the deltas appended since, as everywhere.
    let stats = if q.terms.is_empty() {
        String::new()
    } else {
        let t = a.push(tokens.to_vec());
        format!(
            "UNION ALL SELECT 1, NULL, NULL, NULL, COALESCE(SUM(docs), 0)::bigint, COALESCE(SUM(tokens), 0)::bigint FROM (
                 SELECT docs, tokens FROM collection_stats WHERE collection_id = $1
                 UNION ALL SELECT docs, tokens FROM collection_stats_delta WHERE collection_id = $1) st
             UNION ALL SELECT 2, term, NULL, NULL, SUM(df)::bigint, NULL FROM (
                 SELECT term, df FROM term_stats WHERE collection_id = $1 AND term = ANY({t})
                 UNION ALL SELECT term, df FROM term_stats_delta WHERE collection_id = $1 AND term = ANY({t})) d
             GROUP BY term"
        )
    };
    let sql = format!(
        "WITH scope AS MATERIALIZED (SELECT id, terms FROM events WHERE {where_sql} LIMIT {cap}),
              small AS (SELECT count(*) <= {exact} AS yes FROM scope)
         SELECT 0, s.id, {terms}, {ip}, NULL::bigint, NULL::bigint FROM scope s WHERE (SELECT yes FROM small)
         UNION ALL SELECT 3, NULL, NULL, NULL, NULL, NULL WHERE NOT (SELECT yes FROM small)
         {stats}"
    );
    let rows = query_all(c, &sql, &a.refs()).await?;
    let mut out = Scope { docs: Vec::new(), stats: CorpusStats { docs: 0, tokens: 0 }, df: HashMap::new() };
    for r in rows {
        match r.get::<_, i32>(0) {
            0 => out.docs.push((r.get(1), r.get(2), r.get(3))),
            1 => {
                out.stats =
                    CorpusStats { docs: r.get::<_, i64>(4).max(0) as u64, tokens: r.get::<_, i64>(5).max(0) as u64 }
            }
            2 => {
                out.df.insert(r.get(1), r.get::<_, i64>(4).max(0) as u64);
            }
            _ => return Ok(None), // more than `exact_scope` events
        }
    }
    Ok(Some(out))
}

/// A scope too large to scan: HNSW for the vectors, the GIN index for the full text.
async fn large_scope(tx: &Tx<'_>, s: &Search<'_>) -> Result<Vec<Candidate>, StoreError> {
    let (cid, f, q, qv, dim, tokens) = (s.cid, s.f, s.q, s.qv.as_ref(), s.dim, &s.tokens[..]);
    let k = q.k as i64;
    // The vector and the full-text queries go out together: tokio-postgres pipelines queries
    // issued concurrently on one connection, so the search costs fewer round trips.
    let vector = async {
        let (Some(qv), Some(dim)) = (qv, dim) else { return Ok(HashMap::new()) };
        if let Some(hits) = &q.vector_hits {
            return Ok(hits.iter().cloned().collect());
        }
        tx.batch_execute("SET LOCAL hnsw.iterative_scan = relaxed_order; SET LOCAL hnsw.ef_search = 100")
            .await
            .map_err(backend)?;
        let (where_sql, mut a) = event_filter_sql(cid, f);
        let v = a.push(qv.clone());
        let lim = a.push(k);
        let c = a.push(cid);
        let expr = format!("(v.vec::vector({dim})) <#> {v}::vector({dim})");
        let rows = query_all(
            tx,
            &format!(
                "SELECT v.event_id, (-({expr}))::real FROM event_vectors v WHERE v.dim = {dim} AND v.collection_id = {c}
                 AND v.event_id IN (SELECT id FROM events WHERE {where_sql}) ORDER BY {expr} LIMIT {lim}"
            ),
            &a.refs(),
        )
        .await?;
        Ok::<_, StoreError>(rows.iter().map(|r| (r.get::<_, String>(0), r.get::<_, f32>(1))).collect::<HashMap<_, _>>())
    };
    let text = async {
        if q.terms.is_empty() {
            return Ok(HashMap::new());
        }
        // Folded statistics plus the changes appended since the last compaction.
        let stats = async {
            let r = query_one(
                tx,
                "SELECT COALESCE(SUM(docs), 0)::bigint, COALESCE(SUM(tokens), 0)::bigint FROM (
                     SELECT docs, tokens FROM collection_stats WHERE collection_id=$1
                     UNION ALL SELECT docs, tokens FROM collection_stats_delta WHERE collection_id=$1) s",
                &[&cid],
            )
            .await?;
            Ok::<_, StoreError>(CorpusStats {
                docs: r.get::<_, i64>(0).max(0) as u64,
                tokens: r.get::<_, i64>(1).max(0) as u64,
            })
        };
        let df = async {
            let rows = query_all(
                tx,
                "SELECT term, SUM(df)::bigint FROM (
                     SELECT term, df FROM term_stats WHERE collection_id=$1 AND term = ANY($2)
                     UNION ALL SELECT term, df FROM term_stats_delta WHERE collection_id=$1 AND term = ANY($2)) s GROUP BY term",
                &[&cid, &tokens],
            )
            .await?;
            Ok::<_, StoreError>(
                rows.iter()
                    .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1).max(0) as u64))
                    .collect::<HashMap<_, _>>(),
            )
        };
        let docs = async {
            // Any document holding one of the query's tokens (a superset of BM25's matches).
            let tsquery = tokens
                .iter()
                .map(|t| format!("'{}'", t.replace('\\', "\\\\").replace('\'', "''")))
                .collect::<Vec<_>>()
                .join(" | ");
            let (where_sql, mut a) = event_filter_sql(cid, f);
            let tq = a.push(tsquery);
            let lim = a.push(LARGE_SCOPE_TEXT_MATCHES);
            let sql = format!(
                "SELECT id, terms FROM events WHERE {where_sql} AND terms_tsv @@ ({tq}::text)::tsquery LIMIT {lim}"
            );
            Ok::<_, StoreError>(
                query_all(tx, &sql, &a.refs())
                    .await?
                    .iter()
                    .map(|r| (r.get(0), r.get(1)))
                    .collect::<Vec<(String, Option<String>)>>(),
            )
        };
        let (stats, df, docs) = tokio::try_join!(stats, df, docs)?;
        Ok(Bm25Query::new(&q.terms, stats, |t| df.get(t).copied().unwrap_or(0)).top_k(docs, q.k))
    };
    let (cosine, bm25) = tokio::try_join!(vector, text)?;
    load_candidates(tx, cosine, bm25, qv, dim).await
}

/// Events found by either signal, loaded once; the cosine of a BM25-only hit is filled in.
async fn load_candidates(
    tx: &impl GenericClient,
    mut cosine: HashMap<String, f32>,
    bm25: HashMap<String, f64>,
    qv: Option<&pgvector::Vector>,
    dim: Option<i32>,
) -> Result<Vec<Candidate>, StoreError> {
    let ids = mnemo_core::store::candidate_ids(&cosine, &bm25);
    if ids.is_empty() {
        return Ok(vec![]);
    }
    let missing: Vec<&String> = ids.iter().filter(|id| !cosine.contains_key(*id)).collect();
    let fill =
        async {
            match (qv, dim) {
                (Some(qv), Some(dim)) if !missing.is_empty() => query_all(
                    tx,
                    "SELECT event_id, (-(vec <#> $1))::real FROM event_vectors WHERE event_id = ANY($2) AND dim = $3",
                    &[qv, &missing, &dim],
                )
                .await,
                _ => Ok(vec![]),
            }
        };
    let sql = format!("SELECT {EVENT_COLS} FROM events WHERE id = ANY($1) ORDER BY id");
    let args: [SqlParam<'_>; 1] = [&ids];
    let load = query_all(tx, &sql, &args);
    let (filled, rows) = tokio::try_join!(fill, load)?;
    for r in filled {
        cosine.insert(r.get(0), r.get(1));
    }
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let event = event_from_row(&r)?;
        let (c, b) = (cosine.get(&event.id).copied(), bm25.get(&event.id).copied());
        out.push(Candidate { event, cosine: c, bm25: b });
    }
    Ok(out)
}
