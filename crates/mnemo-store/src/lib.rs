//! mnemo-store: the embedded store. One SQLite file in WAL mode holds collections,
//! conversations, messages, sessions, the durable job queue, events and profiles.
//!
//! Writes go through one writer thread with group commit ([`writer`]); reads use a small pool of
//! connections on `spawn_blocking`, at most `readers` at once (the rest wait their turn without a
//! thread). Every `Store` method is one transaction, so a method that
//! returned `Ok` is on disk (WAL, `synchronous=NORMAL` survives a killed process; `full` also
//! survives power loss). This crate knows SQL and nothing of HTTP or models.

mod candidates;
mod collections;
mod conversations;
mod copies;
mod events;
mod filter;
mod jobs;
mod maintenance;
mod privacy;
mod profiles;
mod rows;
mod schema;
mod scope_cache;
mod search;
mod stats;
mod upgrade;
mod webhooks;
mod writer;

use crate::upgrade::backfill_terms;
use crate::writer::Writer;
use async_trait::async_trait;
use mnemo_core::StoreError;
use mnemo_core::store::StoreResult;
use mnemo_core::store::prelude::*;
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub use schema::SCHEMA_VERSION;

/// How hard a commit waits for the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// WAL + `synchronous=NORMAL`: a committed write survives the process being killed.
    #[default]
    Process,
    /// WAL + `synchronous=FULL`: also survives power loss (an fsync per group commit).
    PowerLoss,
}

#[derive(Clone, Debug)]
pub struct SqliteOptions {
    pub durability: Durability,
    /// Page cache per connection, MiB (the default 2 MiB made inserts ~5× slower here).
    pub cache_mib: u32,
    /// `PRAGMA mmap_size`, MiB (0: reads copy pages through each connection's cache).
    pub mmap_mib: u32,
    /// Reads running at once, each on its own connection (kept open). Reads beyond it wait for
    /// one to finish: without the bound, 200 concurrent requests ran 200 blocking threads, each
    /// opening a connection (schema parsed, statements prepared, a page cache filled) that was
    /// closed again after one read — 3× the memory and a slower server (docs/benchmarks.md,
    /// "Overload").
    pub readers: usize,
    /// Scopes kept between searches, MiB (0: none): a scoped search's events, their terms
    /// tokenised and their vector copies, reused while nothing in the scope changed
    /// (`scope_cache`). ~2.5 MB for a user of 1,000 events.
    pub scope_cache_mib: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self { durability: Durability::Process, cache_mib: 64, mmap_mib: 0, readers: 4, scope_cache_mib: 64 }
    }
}

pub struct SqliteStore {
    path: PathBuf,
    writer: Writer,
    readers: Arc<Mutex<Vec<Connection>>>,
    /// One permit per reader: held while a read has its connection.
    read_permits: Arc<tokio::sync::Semaphore>,
    scope_cache: Arc<scope_cache::ScopeCache<search::Scope>>,
    options: SqliteOptions,
    relocation: upgrade::Relocation,
    f16_fill: upgrade::F16Fill,
}

pub const DB_FILE: &str = "mnemo.db";

impl SqliteStore {
    /// Opens (creating if needed) the store in `dir`, migrating it to the current schema.
    pub fn open(dir: &Path, options: SqliteOptions) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| StoreError::backend(format!("cannot create data directory {}: {e}", dir.display())))?;
        let path = dir.join(DB_FILE);
        let mut conn = open_conn(&path, &options, false).map_err(backend)?;
        schema::migrate_with(&mut conn, |tx, version| match version {
            7 => backfill_terms(tx)
                .map(|n| tracing::info!(events = n, "indexed the terms of events written before schema v7")),
            11 => {
                let empty: bool =
                    tx.query_row("SELECT NOT EXISTS (SELECT 1 FROM event_vectors_legacy)", [], |r| r.get(0))?;
                if empty { tx.execute_batch("DROP TABLE event_vectors_legacy") } else { Ok(()) }
            }
            // A new data directory has no vectors to copy. (One upgraded from v10 keeps its
            // vectors in the legacy table — dropped above only when empty — until the relocation
            // moves them.)
            12 => {
                let empty: bool = tx.query_row(
                    "SELECT NOT EXISTS (SELECT 1 FROM event_vectors)
                        AND NOT EXISTS (SELECT 1 FROM sqlite_schema WHERE type='table' AND name='event_vectors_legacy')",
                    [],
                    |r| r.get(0),
                )?;
                if empty { tx.execute_batch("DROP TABLE event_vectors_f16_fill") } else { Ok(()) }
            }
            _ => Ok(()),
        })
        .map_err(backend)?
        .map_err(StoreError::backend)?;
        // Jobs left `running` by a previous process of this single-process store resume now.
        conn.execute("UPDATE jobs SET state='queued', lease_until=NULL WHERE state='running'", []).map_err(backend)?;
        let relocation = upgrade::Relocation::new(&conn)?;
        let f16_fill = upgrade::F16Fill::new(&conn)?;
        // WAL checkpoints run on a connection of their own (writer.rs).
        let checkpoints = open_conn(&path, &options, false)
            .inspect_err(
                |e| tracing::warn!(error = %e, "no checkpoint connection; the writer checkpoints the WAL itself"),
            )
            .ok();
        Ok(Self {
            path,
            writer: Writer::spawn(conn, checkpoints),
            readers: Arc::new(Mutex::new(Vec::new())),
            read_permits: Arc::new(tokio::sync::Semaphore::new(options.readers.max(1))),
            scope_cache: Arc::new(scope_cache::ScopeCache::new(options.scope_cache_mib)),
            options,
            relocation,
            f16_fill,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn read<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    {
        let pool = self.readers.clone();
        let path = self.path.clone();
        let options = self.options.clone();
        let permit = self.read_permits.clone().acquire_owned().await.expect("the read semaphore is never closed");
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let conn = pool.lock().expect("reader pool").pop();
            let conn = match conn {
                Some(c) => c,
                None => open_conn(&path, &options, true).map_err(backend)?,
            };
            // One snapshot for the whole read: a read made of several queries must not see a
            // commit land between them (e.g. a job `done` without its events).
            conn.execute_batch("BEGIN").map_err(backend)?;
            let out = f(&conn);
            let _ = conn.execute_batch("COMMIT");
            let mut pool = pool.lock().expect("reader pool");
            if pool.len() < options.readers {
                pool.push(conn);
            }
            out
        })
        .await
        .map_err(|e| StoreError::backend(format!("read task failed: {e}")))?
    }
}

fn open_conn(path: &Path, o: &SqliteOptions, read_only: bool) -> rusqlite::Result<Connection> {
    let flags = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX
    };
    let conn = Connection::open_with_flags(path, flags)?;
    // rusqlite keeps 16 prepared statements by default; the writer alone uses more than that on
    // a write with extraction, and an evicted one is parsed again on its next use.
    conn.set_prepared_statement_cache_capacity(128);
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    if !read_only {
        conn.pragma_update(None, "journal_mode", "WAL")?;
    }
    let sync = match o.durability {
        Durability::Process => "NORMAL",
        Durability::PowerLoss => "FULL",
    };
    conn.execute_batch(&format!(
        "PRAGMA synchronous={sync}; PRAGMA foreign_keys=ON; PRAGMA cache_size=-{}; PRAGMA temp_store=MEMORY; PRAGMA secure_delete=ON; PRAGMA mmap_size={};",
        o.cache_mib as i64 * 1024,
        o.mmap_mib as i64 * 1024 * 1024
    ))?;
    Ok(conn)
}

/// A SQLite (or other) error as a backend failure, kept as its cause.
pub(crate) fn backend(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::backend_caused("sqlite", e)
}

#[async_trait]
impl StoreEngine for SqliteStore {
    fn engine(&self) -> &'static str {
        "sqlite"
    }

    fn housekeeping_interval(&self) -> Option<std::time::Duration> {
        // Only the upkeep an upgrade left: the relocation after schema v10 (`upgrade::Relocation`),
        // then the f16 copies of the vectors written before schema v12 (`upgrade::F16Fill`).
        (self.relocation.pending() || self.f16_fill.pending()).then_some(std::time::Duration::from_secs(60))
    }

    async fn housekeeping(&self) -> StoreResult<bool> {
        if self.relocate_step().await? {
            return Ok(true);
        }
        self.fill_f16_step().await
    }
}

#[cfg(test)]
mod tests;
