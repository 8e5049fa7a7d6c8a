//! Candidate generation on PostgreSQL, giving the same candidates and the same signals as the
//! embedded store so `mnemo-core` ranks both alike:
//! - a scope of up to [`EXACT_SCOPE`] events (configurable) (the usual: one user's) is searched exactly —
//!   pgvector's inner product over the scope's vectors (btree-prefiltered, no ANN), and BM25
//!   scored in Rust from the events' terms and the collection's statistics (`text::Bm25Query`);
//! - a larger scope uses the HNSW index of the collection's dimension with
//!   `hnsw.iterative_scan` (a filtered HNSW scan otherwise returns too few rows, even none), and
//!   the GIN index over the terms to find the documents BM25 then scores.

use crate::rows::{EVENT_COLS, event_from_row};
use crate::sql::{SqlParam, Tx, backend, event_filter_sql, query_all, query_one};
use mnemo_core::StoreError;
use mnemo_core::model::*;
use mnemo_core::text::{Bm25Query, CorpusStats, fts_tokens};
use std::collections::HashMap;

/// Scopes up to this many events are searched exactly (the default of `PgOptions::exact_scope`).
pub const EXACT_SCOPE: usize = 5_000;
/// At most this many full-text matches of a large scope are scored.
const LARGE_SCOPE_TEXT_MATCHES: i64 = 20_000;

pub async fn candidates(
    tx: &Tx<'_>,
    cid: CollectionId,
    f: &EventFilter,
    q: &CandidateQuery,
    exact_scope: usize,
) -> Result<Vec<Candidate>, StoreError> {
    let (where_sql, mut a) = event_filter_sql(cid, f);
    let cap = a.push((exact_scope + 1) as i64);
    let cols = if q.terms.is_empty() { "id, NULL::text" } else { "id, terms" };
    let scope: Vec<(String, Option<String>)> =
        query_all(tx, &format!("SELECT {cols} FROM events WHERE {where_sql} LIMIT {cap}"), &a.refs())
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
    if scope.is_empty() {
        return Ok(vec![]);
    }
    let small = scope.len() <= exact_scope;
    let dim = q.vector.as_ref().map(|v| v.len() as i32);
    let qv = q.vector.as_ref().map(|v| pgvector::Vector::from(v.clone()));
    let k = q.k as i64;

    // The vector and the full-text queries go out together: tokio-postgres pipelines queries
    // issued concurrently on one connection, so the search costs fewer round trips.
    let vector = async {
        let (Some(qv), Some(dim)) = (&qv, dim) else { return Ok(HashMap::new()) };
        if let Some(hits) = &q.vector_hits {
            return Ok(hits.iter().cloned().collect());
        }
        let rows = if small {
            let ids: Vec<&String> = scope.iter().map(|(id, _)| id).collect();
            query_all(
                tx,
                "SELECT event_id, (-(vec <#> $1))::real FROM event_vectors WHERE event_id = ANY($2) AND dim = $3 ORDER BY vec <#> $1, event_id LIMIT $4",
                &[qv, &ids, &dim, &k],
            )
            .await?
        } else {
            tx.batch_execute("SET LOCAL hnsw.iterative_scan = relaxed_order; SET LOCAL hnsw.ef_search = 100")
                .await
                .map_err(backend)?;
            let (where_sql, mut a) = event_filter_sql(cid, f);
            let v = a.push(qv.clone());
            let lim = a.push(k);
            let c = a.push(cid);
            let expr = format!("(v.vec::vector({dim})) <#> {v}::vector({dim})");
            query_all(
                tx,
                &format!(
                    "SELECT v.event_id, (-({expr}))::real FROM event_vectors v WHERE v.dim = {dim} AND v.collection_id = {c}
                     AND v.event_id IN (SELECT id FROM events WHERE {where_sql}) ORDER BY {expr} LIMIT {lim}"
                ),
                &a.refs(),
            )
            .await?
        };
        Ok::<_, StoreError>(rows.iter().map(|r| (r.get::<_, String>(0), r.get::<_, f32>(1))).collect::<HashMap<_, _>>())
    };
    let text = async {
        if q.terms.is_empty() {
            return Ok(HashMap::new());
        }
        let tokens: Vec<String> = {
            let mut t: Vec<String> = q.terms.iter().flat_map(|t| fts_tokens(t).collect::<Vec<_>>()).collect();
            t.sort();
            t.dedup();
            t
        };
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
            if small {
                return Ok(scope.clone());
            }
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
                query_all(tx, &sql, &a.refs()).await?.iter().map(|r| (r.get(0), r.get(1))).collect::<Vec<_>>(),
            )
        };
        let (stats, df, docs) = tokio::try_join!(stats, df, docs)?;
        Ok(Bm25Query::new(&q.terms, stats, |t| df.get(t).copied().unwrap_or(0)).top_k(docs, q.k))
    };
    let (cosine, bm25) = tokio::try_join!(vector, text)?;
    load_candidates(tx, cosine, bm25, qv.as_ref(), dim).await
}

/// Events found by either signal, loaded once; the cosine of a BM25-only hit is filled in.
async fn load_candidates(
    tx: &Tx<'_>,
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
