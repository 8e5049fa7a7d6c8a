//! Who gets the next free inference session: a query (a search is waiting on it) before any
//! document (an extraction's or an import's texts, which nobody waits on to the millisecond).
//!
//! A counting semaphore with two queues. A session that comes free goes to the oldest waiting
//! query, else to the oldest waiting document, else back to the pool. So a search waits for at
//! most the text in progress on each session, however many document texts are queued behind it —
//! which lets a batch of documents run on every session at once without delaying searches.
//! A permit is a [`Lane`]; dropping it hands the session on. A waiter that gives up (its future
//! dropped, e.g. a request cancelled) never loses a permit handed to it at the same moment.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Which queue a caller waits in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Priority {
    Query,
    Document,
}

#[derive(Default)]
struct State {
    free: usize,
    queries: VecDeque<oneshot::Sender<()>>,
    documents: VecDeque<oneshot::Sender<()>>,
}

/// The sessions' permits, queries first.
#[derive(Default)]
pub struct Lanes {
    state: Mutex<State>,
}

/// One session, held until dropped.
pub struct Lane {
    lanes: Arc<Lanes>,
}

impl Drop for Lane {
    fn drop(&mut self) {
        self.lanes.release(1);
    }
}

/// A waiter's end: a permit handed to it after it stopped waiting is passed on.
struct Waiting {
    lanes: Arc<Lanes>,
    rx: Option<oneshot::Receiver<()>>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take() {
            rx.close();
            if rx.try_recv().is_ok() {
                self.lanes.release(1);
            }
        }
    }
}

impl Lanes {
    pub fn new(permits: usize) -> Arc<Self> {
        Arc::new(Self { state: Mutex::new(State { free: permits, ..State::default() }) })
    }

    /// Adds `n` permits (a session joined the pool), handed to waiters first.
    pub fn add(&self, n: usize) {
        self.release(n);
    }

    /// Permits free right now (nobody holds or waits for them).
    #[cfg(test)]
    pub fn free(&self) -> usize {
        self.state.lock().expect("lanes").free
    }

    /// A session that is idle right now — free, and nobody waiting for one — if there is one:
    /// how a batch spreads onto sessions that would otherwise do nothing, without queueing
    /// ahead of anyone.
    pub fn idle(self: &Arc<Self>) -> Option<Lane> {
        let mut s = self.state.lock().expect("lanes");
        if s.free > 0 && s.queries.is_empty() && s.documents.is_empty() {
            s.free -= 1;
            return Some(Lane { lanes: self.clone() });
        }
        None
    }

    /// Waits for a session in `priority`'s queue.
    pub async fn acquire(self: &Arc<Self>, priority: Priority) -> Lane {
        let rx = {
            let mut s = self.state.lock().expect("lanes");
            let nobody_ahead = match priority {
                Priority::Query => s.queries.is_empty(),
                Priority::Document => s.queries.is_empty() && s.documents.is_empty(),
            };
            if s.free > 0 && nobody_ahead {
                s.free -= 1;
                return Lane { lanes: self.clone() };
            }
            let (tx, rx) = oneshot::channel();
            match priority {
                Priority::Query => s.queries.push_back(tx),
                Priority::Document => s.documents.push_back(tx),
            }
            rx
        };
        let mut waiting = Waiting { lanes: self.clone(), rx: Some(rx) };
        let rx = waiting.rx.as_mut().expect("receiver");
        // The sender is dropped only by `release`, after it sent: a closed channel cannot happen
        // without a permit, and a permit that reached us is ours.
        let _ = rx.await;
        waiting.rx = None;
        Lane { lanes: self.clone() }
    }

    fn release(&self, n: usize) {
        let mut s = self.state.lock().expect("lanes");
        for _ in 0..n {
            let mut given = false;
            while let Some(tx) = s.queries.pop_front().or_else(|| s.documents.pop_front()) {
                if tx.send(()).is_ok() {
                    given = true;
                    break;
                }
            }
            if !given {
                s.free += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;

    #[tokio::test]
    async fn a_free_session_goes_to_the_waiting_query_before_earlier_documents() {
        let lanes = Lanes::new(1);
        let held = lanes.acquire(Priority::Document).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let waiter = |p: Priority, name: &'static str| {
            let (lanes, order) = (lanes.clone(), order.clone());
            tokio::spawn(async move {
                let lane = lanes.acquire(p).await;
                order.lock().unwrap().push(name);
                tokio::task::yield_now().await;
                drop(lane);
            })
        };
        let d1 = waiter(Priority::Document, "doc 1");
        let d2 = waiter(Priority::Document, "doc 2");
        while lanes.state.lock().unwrap().documents.len() < 2 {
            tokio::task::yield_now().await;
        }
        let q = waiter(Priority::Query, "query");
        while lanes.state.lock().unwrap().queries.is_empty() {
            tokio::task::yield_now().await;
        }
        drop(held);
        for t in [q, d1, d2] {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), ["query", "doc 1", "doc 2"]);
        assert_eq!(lanes.free(), 1, "every permit came back");
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_loses_no_permit() {
        let lanes = Lanes::new(1);
        let held = lanes.acquire(Priority::Query).await;
        let gave_up = {
            let lanes = lanes.clone();
            tokio::spawn(async move { lanes.acquire(Priority::Query).await })
        };
        while lanes.state.lock().unwrap().queries.is_empty() {
            tokio::task::yield_now().await;
        }
        gave_up.abort();
        let _ = gave_up.await;
        drop(held);
        assert_eq!(lanes.free(), 1);
        // And one cancelled after the permit was sent to it, before it ran.
        let held = lanes.acquire(Priority::Document).await;
        let mut pending = Box::pin(lanes.acquire(Priority::Document));
        let polled = std::future::poll_fn(|cx| std::task::Poll::Ready(pending.as_mut().poll(cx))).await;
        assert!(polled.is_pending());
        drop(held); // sends the permit to `pending`, which never runs again
        drop(pending);
        assert_eq!(lanes.free(), 1);
        let _ = lanes.acquire(Priority::Query).await;
    }

    #[tokio::test]
    async fn added_permits_wake_waiters() {
        let lanes = Lanes::new(0);
        let w = {
            let lanes = lanes.clone();
            tokio::spawn(async move { drop(lanes.acquire(Priority::Document).await) })
        };
        while lanes.state.lock().unwrap().documents.is_empty() {
            tokio::task::yield_now().await;
        }
        lanes.add(1);
        w.await.unwrap();
        assert_eq!(lanes.free(), 1);
    }
}
