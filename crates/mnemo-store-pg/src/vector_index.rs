//! The HNSW indexes over event vectors: one partial index per dimension in use, over the signs
//! (`binary_quantize` + Hamming) from 256 dimensions and the full vectors below; built at start or
//! on a collection's creation unless a bulk load holds its lock, and an earlier release's
//! full-vector index replaced in the background (`CREATE INDEX CONCURRENTLY` under a try-lock).

use crate::schema::*;
use tokio_postgres::Client;

/// The vector index of one dimension. pgvector indexes need a fixed dimension and collections
/// may differ, so each is a partial expression index (`WHERE dim = …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VectorIndex {
    /// HNSW over the vectors' signs (`binary_quantize`, Hamming distance), searched for
    /// [`VectorIndex::rerank`] candidates that are then ranked by the exact inner product. An
    /// 896-d vector is 112 bytes in the graph instead of 3,584: the graph is ~10× smaller, built
    /// 2–3× faster and kept up to date 1.4–2× cheaper than the full one, finds the exact top 10
    /// at least as often (docs/history/benchmarks.md, session 17), and any dimension up to 64,000 gets one.
    Bits,
    /// HNSW over the full vectors (inner product: they are unit length). Below
    /// [`BITS_FROM_DIM`] signs say too little; pgvector takes at most 2,000 dimensions.
    Full,
    /// No index: searched exactly.
    None,
}

/// The smallest dimension indexed by its signs: real embedding models have 384 or more.
pub const BITS_FROM_DIM: i64 = 256;

impl VectorIndex {
    pub fn of(dim: i64) -> Self {
        match dim {
            BITS_FROM_DIM..=64_000 => VectorIndex::Bits,
            1..BITS_FROM_DIM => VectorIndex::Full,
            _ => VectorIndex::None,
        }
    }

    pub fn name(dim: i64) -> String {
        match Self::of(dim) {
            VectorIndex::Bits => format!("event_vectors_bits_{dim}"),
            _ => full_index_name(dim),
        }
    }

    /// The indexed expression over `event_vectors` (aliased `v`, or unaliased when `v` is "").
    pub fn key(self, v: &str, dim: i64) -> String {
        let col = if v.is_empty() { "vec".to_string() } else { format!("{v}.vec") };
        match self {
            VectorIndex::Bits => format!("(binary_quantize({col}::vector({dim}))::bit({dim}))"),
            _ => format!("({col}::vector({dim}))"),
        }
    }

    /// How many candidates a Hamming-ordered scan hands to the exact ranking for `k` results.
    pub fn rerank(k: i64) -> i64 {
        (k * 20).clamp(200, 1_000)
    }
}

/// Whether an index exists, and whether it is usable (a `CREATE INDEX CONCURRENTLY` that did not
/// finish leaves an invalid one behind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IndexState {
    Missing,
    Invalid,
    Valid,
}

async fn index_state(client: &Client, name: &str) -> Result<IndexState, tokio_postgres::Error> {
    let row = client
        .query_opt(
            "SELECT i.indisvalid FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
             WHERE c.relname = $1 AND c.relnamespace = current_schema()::regnamespace",
            &[&name],
        )
        .await?;
    Ok(match row.map(|r| r.get::<_, bool>(0)) {
        None => IndexState::Missing,
        Some(false) => IndexState::Invalid,
        Some(true) => IndexState::Valid,
    })
}

/// What [`ensure_vector_index`] left to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Indexed {
    /// The dimension has its index (or is built by a bulk load when it ends, or has none).
    Ready,
    /// An earlier release indexed the dimension with its full vectors: [`upgrade_vector_index`]
    /// replaces that index without holding writes back — minutes at a million vectors.
    Upgrade,
}

fn full_index_name(dim: i64) -> String {
    format!("event_vectors_hnsw_{dim}")
}

/// The full-vector index an earlier release built for a dimension now indexed by its signs.
fn superseded(dim: i64) -> Option<String> {
    (VectorIndex::of(dim) == VectorIndex::Bits).then(|| full_index_name(dim))
}

fn create_index_sql(dim: i64, concurrently: bool) -> String {
    let kind = VectorIndex::of(dim);
    let ops = match kind {
        VectorIndex::Bits => "bit_hamming_ops",
        _ => "vector_ip_ops",
    };
    let (name, key) = (VectorIndex::name(dim), kind.key("", dim));
    let how = if concurrently { "CONCURRENTLY " } else { "" };
    format!("CREATE INDEX {how}IF NOT EXISTS {name} ON event_vectors USING hnsw ({key} {ops}) WHERE dim = {dim}")
}

/// Builds the vector index of one dimension (see [`VectorIndex`]) unless it exists — or answers
/// [`Indexed::Upgrade`] when the dimension still has the full-vector index of an earlier release.
pub async fn ensure_vector_index(client: &Client, dim: i64) -> Result<Indexed, tokio_postgres::Error> {
    if VectorIndex::of(dim) == VectorIndex::None {
        return Ok(Indexed::Ready);
    }
    let name = VectorIndex::name(dim);
    match index_state(client, &name).await? {
        IndexState::Valid => {
            if let Some(old) = superseded(dim)
                && index_state(client, &old).await? != IndexState::Missing
            {
                client.batch_execute(&format!("DROP INDEX IF EXISTS {old}")).await?;
            }
            return Ok(Indexed::Ready);
        }
        IndexState::Invalid | IndexState::Missing => {}
    }
    if let Some(old) = superseded(dim)
        && index_state(client, &old).await? == IndexState::Valid
    {
        return Ok(Indexed::Upgrade);
    }
    if !bulk_load_absent(client, &name).await? {
        return Ok(Indexed::Ready);
    }
    client.execute("SELECT pg_advisory_lock($1)", &[&(MIGRATION_LOCK + 1)]).await?;
    let built = async {
        if index_state(client, &name).await? == IndexState::Invalid {
            client.batch_execute(&format!("DROP INDEX IF EXISTS {name}")).await?;
        }
        client.batch_execute(&create_index_sql(dim, false)).await
    }
    .await;
    client.execute("SELECT pg_advisory_unlock($1)", &[&(MIGRATION_LOCK + 1)]).await?;
    built.map(|_| Indexed::Ready)
}

/// Whether no bulk load holds its lock (one in progress builds the index when it ends).
async fn bulk_load_absent(client: &Client, name: &str) -> Result<bool, tokio_postgres::Error> {
    let free = client
        .query_one(&format!("SELECT pg_try_advisory_lock_shared({BULK_LOAD_LOCK})"), &[])
        .await?
        .get::<_, bool>(0);
    if free {
        client.execute(&format!("SELECT pg_advisory_unlock_shared({BULK_LOAD_LOCK})"), &[]).await?;
    } else {
        tracing::info!(index = %name, "a bulk load is in progress: its end builds the vector index");
    }
    Ok(free)
}

/// Replaces the full-vector index an earlier release built for `dim` with the index over the
/// signs: built with `CREATE INDEX CONCURRENTLY` (writes go on meanwhile; large-scope searches
/// scan exactly until it is ready), then the old one dropped. One replica does it — another
/// finds the lock taken and returns `false`; a build cut short (the process died) leaves an
/// invalid index that the next start drops and builds again.
pub async fn upgrade_vector_index(client: &Client, dim: i64) -> Result<bool, tokio_postgres::Error> {
    let (name, Some(old)) = (VectorIndex::name(dim), superseded(dim)) else { return Ok(false) };
    let mine = client.query_one("SELECT pg_try_advisory_lock($1)", &[&(MIGRATION_LOCK + 2)]).await?.get::<_, bool>(0);
    if !mine {
        return Ok(false);
    }
    let done = async {
        if !bulk_load_absent(client, &name).await? {
            return Ok(false);
        }
        match index_state(client, &name).await? {
            IndexState::Valid => return Ok(false),
            IndexState::Invalid => {
                client.batch_execute(&format!("DROP INDEX CONCURRENTLY IF EXISTS {name}")).await?;
            }
            IndexState::Missing => {}
        }
        client.batch_execute(&create_index_sql(dim, true)).await?;
        client.batch_execute(&format!("DROP INDEX CONCURRENTLY IF EXISTS {old}")).await?;
        Ok(true)
    }
    .await;
    client.execute("SELECT pg_advisory_unlock($1)", &[&(MIGRATION_LOCK + 2)]).await?;
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_models_are_indexed_by_their_signs() {
        assert_eq!(VectorIndex::of(896), VectorIndex::Bits);
        assert_eq!(VectorIndex::of(3072), VectorIndex::Bits, "beyond full HNSW's 2,000 dimensions");
        assert_eq!(VectorIndex::of(8), VectorIndex::Full);
        assert_eq!(VectorIndex::of(70_000), VectorIndex::None);
        assert_eq!(VectorIndex::rerank(10), 200);
        assert_eq!(VectorIndex::rerank(200), 1_000);
    }
}
