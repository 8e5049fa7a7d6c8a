//! The vector part of a small scope on PostgreSQL, exact: the k events nearest to the query and
//! the cosine of every full-text hit, from the scope's inner products — f16 ones (the
//! user-document index) decide only which events cannot matter, and the f32 scores of the rest
//! are read by primary key ([`halfvec_bound`]).

use crate::sql::query_all;
use deadpool_postgres::GenericClient;
use mnemo_core::StoreError;
use std::collections::{HashMap, HashSet};

/// An event of a small scope: the negated inner product of its vector with the query, exact —
/// or, when `approx_norm` is set, of the vectors' f16 copies (then the stored vector's norm, for
/// [`halfvec_bound`]).
pub(crate) struct Doc {
    pub id: String,
    pub ip: Option<f64>,
    pub approx_norm: Option<f64>,
}

/// The vector part of a small scope: the k events nearest to the query and the cosine of every
/// full-text hit, exact. Half-precision scores (the user-document index) only decide which
/// events cannot matter: an event whose f16 score plus its error bound stays below the k-th
/// lower bound is out; the exact f32 score of every other approximate event is read (one round
/// trip, by primary key), so the result is what scoring every event in f32 gives. An event whose
/// f32 vector is gone by then was deleted since the scope was read: it is named (to be no
/// candidate at all) and has no score.
pub(crate) async fn vector_part(
    c: &impl GenericClient,
    docs: &[Doc],
    bm25: &HashMap<String, f64>,
    qv: &pgvector::Vector,
    dim: i32,
    k: usize,
) -> Result<(HashMap<String, f32>, HashSet<String>), StoreError> {
    let q_norm = qv.as_slice().iter().map(|x| f64::from(*x) * f64::from(*x)).sum::<f64>().sqrt();
    // (event, score = -inner product as pgvector's `<#>` gives it, error bound of the score)
    let scored: Vec<(&String, f64, f64)> = docs
        .iter()
        .filter_map(|d| {
            let ip = d.ip?;
            Some((&d.id, ip, d.approx_norm.map_or(0.0, |n| halfvec_bound(q_norm, n, dim as usize))))
        })
        .collect();
    // The k-th smallest upper bound of `<#>`: an event whose lower bound exceeds it has k
    // events certainly before it.
    let kth_upper = {
        let mut upper: Vec<f64> = scored.iter().map(|(_, ip, b)| ip + b).collect();
        if upper.len() > k && k > 0 {
            let (_, kth, _) = upper.select_nth_unstable_by(k - 1, f64::total_cmp);
            *kth
        } else {
            f64::INFINITY
        }
    };
    let in_reach: Vec<&(&String, f64, f64)> = scored.iter().filter(|(_, ip, b)| ip - b <= kth_upper).collect();
    let refetch: Vec<&String> = in_reach
        .iter()
        .filter(|(_, _, b)| *b > 0.0)
        .map(|(id, _, _)| *id)
        .chain(scored.iter().filter(|(id, _, b)| *b > 0.0 && bm25.contains_key(*id)).map(|(id, _, _)| *id))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let rows = if refetch.is_empty() {
        vec![]
    } else {
        query_all(
            c,
            "SELECT event_id, vec <#> $1 FROM event_vectors WHERE event_id = ANY($2) AND dim = $3",
            &[qv, &refetch, &dim],
        )
        .await?
    };
    let mut exact: HashMap<&str, f64> =
        scored.iter().filter(|(_, _, b)| *b == 0.0).map(|(id, ip, _)| (id.as_str(), *ip)).collect();
    for r in &rows {
        exact.insert(r.get(0), r.get(1));
    }
    let gone: HashSet<String> =
        refetch.iter().filter(|id| !exact.contains_key(id.as_str())).map(|id| id.to_string()).collect();
    // pgvector's `<#>` is the negated inner product: nearest first, ties by id, as
    // `ORDER BY vec <#> q, event_id` orders them.
    let mut near: Vec<(&str, f64)> =
        in_reach.iter().filter_map(|(id, _, _)| Some((id.as_str(), *exact.get(id.as_str())?))).collect();
    near.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(b.0)));
    near.truncate(k);
    let mut cosine: HashMap<String, f32> = near.into_iter().map(|(id, ip)| (id.to_string(), (-ip) as f32)).collect();
    // The scope's scores are known already: a full-text hit's cosine needs no query.
    for id in bm25.keys() {
        if let Some(ip) = exact.get(id.as_str()) {
            cosine.entry(id.clone()).or_insert((-ip) as f32);
        }
    }
    Ok((cosine, gone))
}

/// How far pgvector's inner product of the f16 copies (`halfvec <#> halfvec`) can be from the
/// f32 one (`vector <#> vector`) for a query of norm `q_norm` and a stored vector of norm
/// `v_norm` (as the copy records it: computed in f32), `dim` components. Each conversion to f16
/// moves a component by at most 2^-10 of itself (2^-11 when rounding to nearest, as F16C does;
/// twice that for a truncating conversion), or by 2^-24 where f16 is subnormal; both products
/// are summed in f32, each sum off by at most `dim`·2^-24 of Σ|q_i v_i| ≤ ‖q‖‖v‖. So the f16 score is within
/// (2·2^-10 + 2·dim·2^-24)·‖q‖‖v‖ + dim·2^-24·(‖q‖ + ‖v‖) of the f32 one; 1% more covers the
/// second-order terms and the rounding of the norms.
pub fn halfvec_bound(q_norm: f64, v_norm: f64, dim: usize) -> f64 {
    let n = dim as f64;
    let eps = f64::powi(2.0, -24);
    1.01 * ((f64::powi(2.0, -9) + 2.0 * n * eps) * q_norm * v_norm + n * eps * (q_norm + v_norm))
}
