//! The BM25 statistics: per-transaction changes ([`TermStats`], appended as deltas in the
//! transaction of the change) and their folding into the totals (`compact_stats`, housekeeping),
//! and the search copies of events written before schema v5 (`fill_subject_docs`).

use crate::sql::{Tx, backend, begin, execute, query_one};
use deadpool_postgres::Pool;
use mnemo_core::model::*;
use mnemo_core::store::StoreResult;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Default)]
pub(crate) struct TermStats {
    df: BTreeMap<(CollectionId, String), i64>,
    docs: BTreeMap<CollectionId, (i64, i64)>,
}

impl TermStats {
    pub(crate) fn change(&mut self, cid: CollectionId, old: Option<&str>, new: Option<&str>) {
        use mnemo_core::text::fts_tokens;
        let count = |t: Option<&str>| -> (i64, BTreeSet<String>) {
            match t {
                Some(t) => {
                    let toks: Vec<String> = fts_tokens(t).collect();
                    (toks.len() as i64, toks.into_iter().collect())
                }
                None => (0, BTreeSet::new()),
            }
        };
        let (old_len, old_set) = count(old);
        let (new_len, new_set) = count(new);
        for t in old_set.difference(&new_set) {
            *self.df.entry((cid, t.clone())).or_default() -= 1;
        }
        for t in new_set.difference(&old_set) {
            *self.df.entry((cid, t.clone())).or_default() += 1;
        }
        let d = self.docs.entry(cid).or_default();
        d.0 += i64::from(new.is_some()) - i64::from(old.is_some());
        d.1 += new_len - old_len;
    }

    pub(crate) async fn flush(self, tx: &Tx<'_>) -> StoreResult<()> {
        let (mut cids, mut terms, mut deltas) = (vec![], vec![], vec![]);
        for ((cid, term), d) in self.df.into_iter().filter(|(_, d)| *d != 0) {
            cids.push(cid);
            terms.push(term);
            deltas.push(d);
        }
        let (mut doc_cids, mut docs, mut tokens) = (vec![], vec![], vec![]);
        for (cid, (d, t)) in self.docs.into_iter().filter(|(_, d)| *d != (0, 0)) {
            doc_cids.push(cid);
            docs.push(d);
            tokens.push(t);
        }
        // Both go out together (pipelined): one round trip.
        let terms_delta = async {
            if cids.is_empty() {
                return Ok(0);
            }
            execute(
                tx,
                "INSERT INTO term_stats_delta(collection_id, term, df) SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[])",
                &[&cids, &terms, &deltas],
            )
            .await
        };
        let docs_delta = async {
            if doc_cids.is_empty() {
                return Ok(0);
            }
            execute(
                tx,
                "INSERT INTO collection_stats_delta(collection_id, docs, tokens) SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[])",
                &[&doc_cids, &docs, &tokens],
            )
            .await
        };
        tokio::try_join!(terms_delta, docs_delta)?;
        Ok(())
    }
}

/// Key of the advisory lock one compactor at a time holds (across replicas).
pub(crate) const COMPACT_LOCK: i64 = 0x6d6e_656d_6f02;

/// Folds the appended statistics changes into `term_stats` / `collection_stats` (and the users'
/// activity, `stats::fold_activity`), in one transaction; a no-op when another replica is
/// compacting.
pub(crate) async fn compact_stats(pool: &Pool) -> StoreResult<u64> {
    let mut conn = pool.get().await.map_err(crate::sql::pool_error)?;
    let tx = begin(&mut conn).await?;
    let locked: bool = query_one(&tx, "SELECT pg_try_advisory_xact_lock($1)", &[&COMPACT_LOCK]).await?.get(0);
    if !locked {
        return Ok(0);
    }
    let folded = query_one(
        &tx,
        "WITH d AS (DELETE FROM term_stats_delta RETURNING collection_id, term, df),
              f AS (INSERT INTO term_stats(collection_id, term, df)
                    SELECT collection_id, term, SUM(df)::bigint FROM d GROUP BY collection_id, term ORDER BY collection_id, term
                    ON CONFLICT(collection_id, term) DO UPDATE SET df = term_stats.df + excluded.df RETURNING 1)
         SELECT (SELECT count(*) FROM f), (SELECT count(*) FROM d)",
        &[],
    )
    .await?;
    let (n, deleted) = (folded.get::<_, i64>(0) as u64, folded.get::<_, i64>(1));
    execute(
        &tx,
        "WITH d AS (DELETE FROM collection_stats_delta RETURNING collection_id, docs, tokens)
         INSERT INTO collection_stats(collection_id, docs, tokens)
         SELECT collection_id, SUM(docs)::bigint, SUM(tokens)::bigint FROM d GROUP BY collection_id ORDER BY collection_id
         ON CONFLICT(collection_id) DO UPDATE SET docs = collection_stats.docs + excluded.docs,
             tokens = collection_stats.tokens + excluded.tokens",
        &[],
    )
    .await?;
    crate::stats::fold_activity(&tx).await?;
    tx.commit().await.map_err(backend)?;
    if deleted >= BIG_FOLD {
        // After a bulk load the delta table is mostly dead rows (514 MB after 1M events), which
        // every reader's index look-up into it still visits until autovacuum comes: reclaim now.
        conn.batch_execute("VACUUM term_stats_delta").await.map_err(backend)?;
    }
    Ok(n)
}

/// A fold of at least this many appended rows vacuums the delta table at once.
const BIG_FOLD: i64 = 100_000;

/// Gives up to `batch` subject rows written before schema v5 their search copies (the
/// `subject_doc` trigger fills a row on any update); returns how many it filled. Rows another
/// replica is filling are skipped, not waited for.
pub(crate) async fn fill_subject_docs(pool: &Pool, batch: i64) -> StoreResult<u64> {
    let conn = pool.get().await.map_err(crate::sql::pool_error)?;
    let n = execute(
        &conn,
        "UPDATE event_subjects SET d_state = 0 WHERE ctid IN (
             SELECT ctid FROM event_subjects WHERE kind = 'u' AND d_state = 0 LIMIT $1 FOR UPDATE SKIP LOCKED)",
        &[&batch],
    )
    .await?;
    if n > 0 && n < batch as u64 {
        // The last batch: every row was rewritten, so no page is all-visible and index-only
        // scans would read the heap for each entry until autovacuum came by. Vacuum now.
        conn.batch_execute("VACUUM (ANALYZE) event_subjects").await.map_err(backend)?;
    }
    Ok(n)
}
