//! Background work: the extraction workers, the idle scheduler, hits, maintenance and re-index loops,
//! each a loop around a testable single step, with one shutdown path.

use super::*;
use crate::error::CoreResult;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

impl Service {
    /// Closes every conversation whose idle deadline has passed. Returns how many.
    pub async fn close_idle_once(&self) -> CoreResult<usize> {
        let mut total = 0;
        loop {
            let closed = self.store.close_idle_conversations(self.now(), 100, self.config.max_job_attempts).await?;
            total += closed.len();
            if !closed.is_empty() {
                self.job_queued.notify_waiters();
            }
            if closed.len() < 100 {
                return Ok(total);
            }
        }
    }

    /// Spawns the extraction workers and the idle scheduler; they stop when `shutdown` turns true.
    pub fn spawn_background(self: &Arc<Self>, shutdown: watch::Receiver<bool>) -> Vec<tokio::task::JoinHandle<()>> {
        let mut handles = Vec::new();
        for worker in 0..self.config.workers.max(1) {
            let svc = self.clone();
            let mut stop = shutdown.clone();
            handles.push(tokio::spawn(async move {
                loop {
                    if *stop.borrow() {
                        break;
                    }
                    match svc.try_run_one().await {
                        Ok(true) => continue,
                        Ok(false) => {}
                        Err(e) => {
                            tracing::error!(worker, error = %e, "extraction worker step failed")
                        }
                    }
                    let wait = svc.sleep_until_due(svc.store.next_job_due().await.ok().flatten());
                    tokio::select! {
                        _ = stop.changed() => {}
                        _ = svc.job_queued.notified() => {}
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
            }));
        }
        // Scheduled maintenance (default daily; the first run one interval after start).
        handles.push(self.spawn_every(&shutdown, self.config.lifecycle.maintenance_interval, |svc| async move {
            if let Err(e) = svc.maintain(None, "schedule").await {
                tracing::error!(error = %e, "scheduled maintenance failed");
            }
        }));
        // Re-index: events stored without a vector (provider down) are embedded when it is back.
        let period = self.config.poll_interval.max(Duration::from_secs(1)) * 5;
        handles.push(self.spawn_every(&shutdown, period, |svc| async move {
            // Scanning for vector-less events costs a pass over the index: only when needed.
            if !svc.vectors_missing.swap(false, std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            match svc.reindex_missing().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(events = n, "embedded events stored without a vector"),
                Err(e) => {
                    svc.vectors_missing.store(true, std::sync::atomic::Ordering::SeqCst);
                    tracing::debug!(error = %e, "re-index postponed");
                }
            }
        }));
        // Turn vectors for the events an older release stored (`backfill_turns`): from start,
        // retried every `recover_interval` while the embedder fails, until done.
        let svc = self.clone();
        let mut stop = shutdown.clone();
        handles.push(tokio::spawn(async move {
            while !*stop.borrow() {
                tokio::select! {
                    _ = stop.changed() => break,
                    done = svc.backfill_turns(true) => match done {
                        Ok(n) => {
                            if n > 0 {
                                tracing::info!(events = n, "embedded the turns of events stored before turn vectors");
                            }
                            break;
                        }
                        Err(e) => tracing::warn!(error = %e, "turn vector backfill postponed"),
                    },
                }
                tokio::select! {
                    _ = stop.changed() => break,
                    _ = tokio::time::sleep(svc.config.recover_interval) => {}
                }
            }
        }));
        // Failed jobs with a transient error go back in the queue: now (start-up), then every
        // `recover_interval` (a successful extraction also triggers it, see `try_run_one`).
        let svc = self.clone();
        let mut stop = shutdown.clone();
        handles.push(tokio::spawn(async move {
            loop {
                if let Err(e) = svc.recover_failed_jobs().await {
                    tracing::warn!(error = %e, "re-queueing failed jobs");
                }
                tokio::select! {
                    _ = stop.changed() => break,
                    _ = tokio::time::sleep(svc.config.recover_interval) => {}
                }
            }
        }));
        // Store upkeep (PostgreSQL: BM25 statistics folded; SQLite: old rows moved into their
        // users' ranges), if the store asks for it: at start, then every period — or, while the
        // store says more is waiting, after a pause three times as long as the last call took.
        if let Some(period) = self.store.housekeeping_interval() {
            let svc = self.clone();
            let mut stop = shutdown.clone();
            handles.push(tokio::spawn(async move {
                while !*stop.borrow() {
                    let started = std::time::Instant::now();
                    let wait = match svc.store.housekeeping().await {
                        // A quarter of the store's time at most (see `StoreEngine::housekeeping`).
                        Ok(true) => started.elapsed() * 3,
                        Ok(false) => period,
                        Err(e) => {
                            tracing::warn!(error = %e, "store housekeeping failed");
                            period
                        }
                    };
                    tokio::select! {
                        _ = stop.changed() => {}
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
            }));
        }
        // Webhooks: the outbox delivered.
        handles.push(self.spawn_webhooks(&shutdown));
        // Hits: written in batches every 200 ms, and once more on shutdown.
        let svc = self.clone();
        let mut stop = shutdown.clone();
        handles.push(tokio::spawn(async move {
            loop {
                let stopping = *stop.borrow();
                if let Err(e) = svc.flush_hits().await {
                    tracing::warn!(error = %e, "recording hits failed");
                }
                if stopping {
                    break;
                }
                tokio::select! {
                    _ = stop.changed() => {}
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                }
            }
        }));
        let svc = self.clone();
        let mut stop = shutdown;
        handles.push(tokio::spawn(async move {
            loop {
                if *stop.borrow() {
                    break;
                }
                if let Err(e) = svc.close_idle_once().await {
                    tracing::error!(error = %e, "idle scheduler step failed");
                }
                let wait = svc.sleep_until_due(svc.store.next_idle_deadline().await.ok().flatten());
                tokio::select! {
                    _ = stop.changed() => {}
                    _ = tokio::time::sleep(wait) => {}
                }
            }
        }));
        handles
    }

    /// Runs `tick` every `period` (the first one period after start) until shutdown.
    pub(super) fn spawn_every<F, Fut>(
        self: &Arc<Self>,
        shutdown: &watch::Receiver<bool>,
        period: Duration,
        tick: F,
    ) -> tokio::task::JoinHandle<()>
    where
        F: Fn(Arc<Self>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let (svc, mut stop) = (self.clone(), shutdown.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.changed() => {}
                    _ = tokio::time::sleep(period) => {}
                }
                if *stop.borrow() {
                    break;
                }
                tick(svc.clone()).await;
            }
        })
    }

    pub(super) fn sleep_until_due(&self, due: Option<Millis>) -> Duration {
        let cap = self.config.poll_interval;
        match due {
            Some(t) => Duration::from_millis((t - self.now()).clamp(0, cap.as_millis() as i64) as u64),
            None => cap,
        }
    }
}
