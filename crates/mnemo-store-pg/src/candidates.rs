//! A PostgreSQL search's candidates loaded: the events either signal found, each row read once
//! (or taken from what an earlier hop or the wait for the query vector read), the cosine of a
//! BM25-only hit filled in, the best turn cosine of those `turns::scored` picks.

use crate::rows::{EVENT_COLS, event_from_row};
use crate::sql::{SqlParam, query_all};
use deadpool_postgres::GenericClient;
use mnemo_core::StoreError;
use mnemo_core::model::*;
use mnemo_core::turns::BestTurn;
use std::collections::HashMap;

/// Rows of a small scope's BM25 hits, read while the query is still being embedded: each event,
/// and the turn vectors of those [`mnemo_core::turns::scored`] may pick by BM25 (`None`: asked,
/// and the event has none).
#[derive(Default)]
pub(crate) struct Early {
    events: HashMap<String, Event>,
    turns: HashMap<String, Option<Vec<u8>>>,
}

impl Early {
    /// The rows of `bm25`'s events and the turns of its best (two statements, pipelined).
    pub(crate) async fn read(c: &impl GenericClient, bm25: &HashMap<String, f64>) -> Result<Early, StoreError> {
        if bm25.is_empty() {
            return Ok(Early::default());
        }
        let ids: Vec<&String> = bm25.keys().collect();
        let none = HashMap::<String, f64>::new();
        let by_text: Vec<&str> = mnemo_core::turns::scored(&none, bm25).into_iter().collect();
        let sql = format!("SELECT {EVENT_COLS} FROM events WHERE id = ANY($1)");
        let (ids_arg, turns_arg): ([SqlParam<'_>; 1], [SqlParam<'_>; 1]) = ([&ids], [&by_text]);
        let rows = query_all(c, &sql, &ids_arg);
        let turns = query_all(c, "SELECT event_id, turns FROM event_turn_vectors WHERE event_id = ANY($1)", &turns_arg);
        let (rows, turns) = tokio::try_join!(rows, turns)?;
        let mut early =
            Early { events: HashMap::new(), turns: by_text.iter().map(|id| (id.to_string(), None)).collect() };
        for r in &rows {
            let e = event_from_row(r)?;
            early.events.insert(e.id.clone(), e);
        }
        for r in turns {
            early.turns.insert(r.get(0), Some(r.get(1)));
        }
        Ok(early)
    }
}

/// Events found by either signal, loaded once; the cosine of a BM25-only hit is filled in, and the
/// best turn cosine of those `turns::scored` picks computed from their turn vectors.
pub(crate) async fn load_candidates(
    tx: &impl GenericClient,
    mut cosine: HashMap<String, f32>,
    bm25: HashMap<String, f64>,
    qv: Option<&pgvector::Vector>,
    dim: Option<i32>,
    known: &[Candidate],
    mut early: Early,
) -> Result<Vec<Candidate>, StoreError> {
    let ids = mnemo_core::store::candidate_ids(&cosine, &bm25);
    if ids.is_empty() {
        return Ok(vec![]);
    }
    // The candidates whose turns are scored, by this hop's own signals.
    let scored: Vec<&String> = {
        let best = mnemo_core::turns::scored(&cosine, &bm25);
        ids.iter().filter(|id| best.contains(id.as_str())).collect()
    };
    // A candidate an earlier search of the same scope returned: its row and cosine are known.
    let known: HashMap<&str, &Candidate> = known.iter().map(|c| (c.event.id.as_str(), c)).collect();
    for id in &ids {
        if let Some(cos) = known.get(id.as_str()).and_then(|c| c.cosine) {
            cosine.entry(id.clone()).or_insert(cos);
        }
    }
    let missing: Vec<&String> = ids.iter().filter(|id| !cosine.contains_key(*id)).collect();
    let to_load: Vec<&String> =
        ids.iter().filter(|id| !known.contains_key(id.as_str()) && !early.events.contains_key(*id)).collect();
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
    let load = async {
        if to_load.is_empty() {
            return Ok(vec![]);
        }
        let sql = format!("SELECT {EVENT_COLS} FROM events WHERE id = ANY($1) ORDER BY id");
        let args: [SqlParam<'_>; 1] = [&to_load];
        query_all(tx, &sql, &args).await
    };
    let scored: Vec<&String> = scored.into_iter().filter(|id| !known.contains_key(id.as_str())).collect();
    let (early_turns, scored): (Vec<&String>, Vec<&String>) =
        scored.into_iter().partition(|id| early.turns.contains_key(*id));
    let turns = async {
        match qv {
            Some(_) if !scored.is_empty() => {
                query_all(tx, "SELECT event_id, turns FROM event_turn_vectors WHERE event_id = ANY($1)", &[&scored])
                    .await
            }
            _ => Ok(vec![]),
        }
    };
    let (filled, rows, turns) = tokio::try_join!(fill, load, turns)?;
    for r in filled {
        cosine.insert(r.get(0), r.get(1));
    }
    let mut best_turn: HashMap<String, BestTurn> =
        known.iter().filter_map(|(id, c)| Some((id.to_string(), c.best_turn?))).collect();
    if let Some(qv) = qv {
        let read = turns.into_iter().map(|r| (r.get::<_, String>(0), r.get::<_, Vec<u8>>(1)));
        let early_read = early_turns.into_iter().filter_map(|id| Some((id.clone(), early.turns.remove(id.as_str())??)));
        for (id, blob) in read.chain(early_read) {
            if let Some(best) = mnemo_core::turns::best(&blob, qv.as_slice()) {
                best_turn.insert(id, best);
            }
        }
    }
    let mut events: Vec<Event> = rows.iter().map(event_from_row).collect::<Result<_, _>>()?;
    events.extend(ids.iter().filter_map(|id| Some(known.get(id.as_str())?.event.clone())));
    events.extend(ids.iter().filter_map(|id| early.events.remove(id.as_str())));
    events.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(events
        .into_iter()
        .map(|event| {
            let (c, b) = (cosine.get(&event.id).copied(), bm25.get(&event.id).copied());
            let best_turn = best_turn.get(&event.id).copied();
            Candidate { event, cosine: c, bm25: b, best_turn }
        })
        .collect())
}
