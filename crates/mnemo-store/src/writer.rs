//! The single writer with group commit. SQLite allows one writer at a time; instead of making
//! concurrent requests queue for the lock and each pay for its own commit, one thread owns the
//! write connection, takes every request waiting in its channel, runs each inside its own
//! SAVEPOINT (so one failing request rolls back alone) and commits them together. A request is
//! answered only after the COMMIT that contains it has returned: an acknowledged write is on disk.
//! A large request (`write_alone`: a batch of events, deleting a user's or a filter's events, a
//! collection, an expiry run) gets a transaction of its own instead — inside a SAVEPOINT, every statement's end
//! costs SQLite in proportion to what the savepoint has changed, which made them quadratic.
//!
//! The WAL is copied back into the database file by a thread of its own ([`Checkpointer`]), not by
//! the writer: SQLite's automatic checkpoint runs inside the commit that crosses 1,000 pages, and
//! every request of that batch waited for the copy and its sync (the tail of the ack latency).

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
    /// A large request: its own transaction, no SAVEPOINT (see [`Writer::write_alone`]).
    Alone(TxFn),
    Raw(RawFn),
}

/// The most requests one transaction takes, so a flood cannot delay its first request's answer forever.
const MAX_BATCH: usize = 256;

#[derive(Clone)]
pub struct Writer {
    tx: mpsc::Sender<WriteFn>,
}

/// Pages the WAL may hold before the writer checkpoints it itself: only when the checkpointer
/// falls behind (64 MiB at 4 KiB pages; SQLite's default is 1,000).
const WRITER_CHECKPOINT_PAGES: u32 = 16_384;
/// After a checkpoint, the checkpointer waits this long before the next, so a stream of commits
/// is copied back in batches.
const CHECKPOINT_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// Copies the WAL into the database file on its own connection (`PRAGMA wal_checkpoint(PASSIVE)`:
/// it never blocks the writer or a reader) after commits, at most once per [`CHECKPOINT_PAUSE`].
/// It sleeps while nothing is written and stops with the writer.
struct Checkpointer {
    nudge: mpsc::SyncSender<()>,
}

impl Checkpointer {
    fn spawn(conn: Connection) -> std::io::Result<Self> {
        let (nudge, rx) = mpsc::sync_channel::<()>(1);
        std::thread::Builder::new().name("mnemo-sqlite-checkpoint".into()).spawn(move || {
            while rx.recv().is_ok() {
                if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                    tracing::warn!(error = %e, "WAL checkpoint failed; the writer checkpoints once the WAL is large");
                }
                std::thread::sleep(CHECKPOINT_PAUSE);
            }
        })?;
        Ok(Self { nudge })
    }

    /// Something was committed: checkpoint soon (a nudge already pending covers this one).
    fn committed(&self) {
        let _ = self.nudge.try_send(());
    }
}

impl Writer {
    /// The writer thread on `conn`; with `checkpoint_conn` (a second connection to the same
    /// file), WAL checkpoints move to a thread of their own.
    pub fn spawn(conn: Connection, checkpoint_conn: Option<Connection>) -> Self {
        let checkpointer = checkpoint_conn.and_then(|c| match Checkpointer::spawn(c) {
            Ok(cp) => conn.pragma_update(None, "wal_autocheckpoint", WRITER_CHECKPOINT_PAGES).ok().map(|()| cp),
            Err(e) => {
                tracing::warn!(error = %e, "no checkpoint thread; the writer checkpoints the WAL itself");
                None
            }
        });
        let (tx, rx) = mpsc::channel::<WriteFn>();
        std::thread::Builder::new()
            .name("mnemo-sqlite-writer".into())
            .spawn(move || run(conn, rx, checkpointer))
            .expect("spawn the writer thread");
        Self { tx }
    }

    /// Runs `f` in a transaction (shared with other requests) and answers after it committed.
    pub async fn write<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.request(WriteFn::Tx, f).await
    }

    /// Runs `f` in a transaction of its own, committed before it answers. For requests that
    /// write a lot (a batch of hundreds of events): inside a shared transaction each request has
    /// its SAVEPOINT, and SQLite's cost of ending every statement within a savepoint grows with
    /// the pages the savepoint has changed so far — a 500-event batch spent ~40% of its time
    /// there. Alone, a failure rolls the whole transaction back instead.
    pub async fn write_alone<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.request(WriteFn::Alone, f).await
    }

    async fn request<T, F>(&self, kind: fn(TxFn) -> WriteFn, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel::<Result<T, StoreError>>();
        self.tx.send(kind(job(f, tx))).map_err(|_| StoreError::backend("the store writer has stopped"))?;
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

/// A request as the writer thread runs it: the closure, then (unless it failed) how to answer
/// once the transaction's fate is known.
fn job<T, F>(f: F, tx: oneshot::Sender<Result<T, StoreError>>) -> TxFn
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
{
    Box::new(move |conn| match f(conn) {
        Ok(value) => Some(Box::new(move |committed: Result<(), StoreError>| {
            let _ = tx.send(committed.map(|()| value));
        }) as Deliver),
        Err(e) => {
            let _ = tx.send(Err(e));
            None
        }
    })
}

/// Runs a statement kept prepared: the per-request SAVEPOINT / RELEASE are not parsed again each time.
fn run_cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

fn run(conn: Connection, rx: mpsc::Receiver<WriteFn>, checkpointer: Option<Checkpointer>) {
    let committed = || checkpointer.iter().for_each(Checkpointer::committed);
    while let Ok(first) = rx.recv() {
        let (mut batch, mut alone, mut raw) = (Vec::new(), Vec::new(), Vec::new());
        let mut take = |job: WriteFn| match job {
            WriteFn::Tx(f) => batch.push(f),
            WriteFn::Alone(f) => alone.push(f),
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
        for job in alone {
            run_alone(&conn, job);
            committed();
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
        let outcome = run_cached(&conn, "COMMIT").map_err(|e| {
            tracing::error!(error = %e, "COMMIT failed");
            let _ = conn.execute_batch("ROLLBACK");
            StoreError::backend(format!("commit failed: {e}"))
        });
        committed();
        for deliver in delivers {
            let c = match &outcome {
                Ok(()) => Ok(()),
                Err(e) => Err(StoreError::backend(e.to_string())),
            };
            deliver(c);
        }
        raw.into_iter().for_each(|f| f(&conn));
    }
}

/// One request in its own transaction: committed (and answered) or rolled back whole.
fn run_alone(conn: &Connection, job: TxFn) {
    if let Err(e) = run_cached(conn, "BEGIN IMMEDIATE") {
        tracing::error!(error = %e, "BEGIN failed; dropping a write unacknowledged");
        return;
    }
    match catch_unwind(AssertUnwindSafe(|| job(conn))) {
        Ok(Some(deliver)) => {
            let committed = run_cached(conn, "COMMIT").map_err(|e| {
                tracing::error!(error = %e, "COMMIT failed");
                let _ = conn.execute_batch("ROLLBACK");
                StoreError::backend(format!("commit failed: {e}"))
            });
            deliver(committed);
        }
        Ok(None) => {
            let _ = conn.execute_batch("ROLLBACK");
        }
        Err(_) => {
            tracing::error!("a store write panicked; its changes were rolled back");
            let _ = conn.execute_batch("ROLLBACK");
        }
    }
}
