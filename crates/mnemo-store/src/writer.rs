//! The single writer with group commit. SQLite allows one writer at a time; instead of making
//! concurrent requests queue for the lock and each pay for its own commit, one thread owns the
//! write connection, takes every request waiting in its channel, runs each inside its own
//! SAVEPOINT (so one failing request rolls back alone) and commits them together. A request is
//! answered only after the COMMIT that contains it has returned: an acknowledged write is on disk.

use mnemo_core::StoreError;
use rusqlite::Connection;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use tokio::sync::oneshot;

/// Delivers a request's result once its transaction's fate is known.
type Deliver = Box<dyn FnOnce(Result<(), StoreError>) + Send>;
/// A write request: runs on the writer connection; `None` means it failed (and has answered).
type TxFn = Box<dyn FnOnce(&Connection) -> Option<Deliver> + Send>;
/// Work that must run outside any transaction (checkpoints), after the batch it arrived with.
type RawFn = Box<dyn FnOnce(&Connection) + Send>;

enum WriteFn {
    Tx(TxFn),
    Raw(RawFn),
}

/// The most requests one transaction takes, so a flood cannot delay its first request's answer forever.
const MAX_BATCH: usize = 256;

#[derive(Clone)]
pub struct Writer {
    tx: mpsc::Sender<WriteFn>,
}

impl Writer {
    pub fn spawn(conn: Connection) -> Self {
        let (tx, rx) = mpsc::channel::<WriteFn>();
        std::thread::Builder::new()
            .name("mnemo-sqlite-writer".into())
            .spawn(move || run(conn, rx))
            .expect("spawn the writer thread");
        Self { tx }
    }

    /// Runs `f` in a transaction (shared with other requests) and answers after it committed.
    pub async fn write<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel::<Result<T, StoreError>>();
        let job: TxFn = Box::new(move |conn| match f(conn) {
            Ok(value) => Some(Box::new(move |committed: Result<(), StoreError>| {
                let _ = tx.send(committed.map(|()| value));
            }) as Deliver),
            Err(e) => {
                let _ = tx.send(Err(e));
                None
            }
        });
        self.tx.send(WriteFn::Tx(job)).map_err(|_| StoreError::backend("the store writer has stopped"))?;
        rx.await.map_err(|_| StoreError::backend("the store writer dropped a request (see the log)"))?
    }

    /// Runs `f` on the writer connection outside any transaction (e.g. a WAL checkpoint).
    pub async fn outside_transaction<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel::<Result<T, StoreError>>();
        let job: RawFn = Box::new(move |conn| {
            let _ = tx.send(f(conn));
        });
        self.tx.send(WriteFn::Raw(job)).map_err(|_| StoreError::backend("the store writer has stopped"))?;
        rx.await.map_err(|_| StoreError::backend("the store writer dropped a request (see the log)"))?
    }
}

/// Runs a statement kept prepared: the per-request SAVEPOINT / RELEASE are not parsed again each time.
fn run_cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

fn run(conn: Connection, rx: mpsc::Receiver<WriteFn>) {
    while let Ok(first) = rx.recv() {
        let (mut batch, mut raw) = (Vec::new(), Vec::new());
        let mut take = |job: WriteFn| match job {
            WriteFn::Tx(f) => batch.push(f),
            WriteFn::Raw(f) => raw.push(f),
        };
        take(first);
        let mut n = 1;
        while n < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => take(job),
                Err(_) => break,
            }
            n += 1;
        }
        if batch.is_empty() {
            raw.into_iter().for_each(|f| f(&conn));
            continue;
        }
        if let Err(e) = run_cached(&conn, "BEGIN IMMEDIATE") {
            tracing::error!(error = %e, "BEGIN failed; dropping a batch of writes unacknowledged");
            continue; // dropping the jobs drops their senders: callers see an error, nothing is acked
        }
        let mut delivers = Vec::with_capacity(batch.len());
        for job in batch {
            if let Err(e) = run_cached(&conn, "SAVEPOINT req") {
                tracing::error!(error = %e, "SAVEPOINT failed");
                continue;
            }
            match catch_unwind(AssertUnwindSafe(|| job(&conn))) {
                Ok(Some(deliver)) => {
                    let _ = run_cached(&conn, "RELEASE req");
                    delivers.push(deliver);
                }
                Ok(None) => {
                    let _ = conn.execute_batch("ROLLBACK TO req; RELEASE req");
                }
                Err(_) => {
                    tracing::error!("a store write panicked; its changes were rolled back");
                    let _ = conn.execute_batch("ROLLBACK TO req; RELEASE req");
                }
            }
        }
        let committed = run_cached(&conn, "COMMIT").map_err(|e| {
            tracing::error!(error = %e, "COMMIT failed");
            let _ = conn.execute_batch("ROLLBACK");
            StoreError::backend(format!("commit failed: {e}"))
        });
        for deliver in delivers {
            let c = match &committed {
                Ok(()) => Ok(()),
                Err(e) => Err(StoreError::backend(e.to_string())),
            };
            deliver(c);
        }
        raw.into_iter().for_each(|f| f(&conn));
    }
}
