//! A circuit breaker for remote providers: after `threshold` consecutive failures the endpoint is
//! not called for `open_for`; then one call is let through to probe it. A dead endpoint is not
//! hammered, and callers fail fast (jobs back off, searches fall back to full text).

use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct Breaker {
    threshold: u32,
    open_for: Duration,
    /// (consecutive failures, open until)
    state: Mutex<(u32, Option<Instant>)>,
}

impl Breaker {
    pub fn new(threshold: u32, open_for: Duration) -> Self {
        Self { threshold: threshold.max(1), open_for, state: Mutex::new((0, None)) }
    }

    /// Whether a call may go out now.
    pub fn allow(&self) -> bool {
        let mut s = self.state.lock().expect("breaker");
        if let Some(until) = s.1 {
            if Instant::now() < until {
                return false;
            }
            s.1 = None; // half-open: let this call probe
        }
        true
    }

    /// Records a call's outcome; only failures of the endpoint itself should count.
    pub fn record(&self, ok: bool) {
        let mut s = self.state.lock().expect("breaker");
        if ok {
            *s = (0, None);
        } else {
            s.0 += 1;
            if s.0 >= self.threshold {
                s.1 = Some(Instant::now() + self.open_for);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_threshold_and_probes_after_the_pause() {
        let b = Breaker::new(2, Duration::from_millis(30));
        b.record(false);
        assert!(b.allow(), "one failure is not enough");
        b.record(false);
        assert!(!b.allow(), "open after two");
        std::thread::sleep(Duration::from_millis(40));
        assert!(b.allow(), "half-open probe");
        b.record(true);
        assert!(b.allow());
    }
}
