//! A warning that may repeat thousands of times a second (every record a full queue refuses)
//! let through at most once an interval, with the count of those held back in between: the
//! counters count each one, the log says it is happening without costing a line each.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Admits one event an interval; counts the others.
#[derive(Debug)]
pub(crate) struct LogEvery {
    interval_ms: u64,
    start: Instant,
    /// When (milliseconds after `start`) the next event may be logged.
    next_at: AtomicU64,
    /// Events held back since the last one logged.
    held: AtomicU64,
}

impl LogEvery {
    /// Lets the first event through at once, then one each `interval`.
    pub(crate) fn new(interval: Duration) -> LogEvery {
        LogEvery {
            interval_ms: u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
            start: Instant::now(),
            next_at: AtomicU64::new(0),
            held: AtomicU64::new(0),
        }
    }

    /// Whether to log this event: `Some(held)`, with the number held back since the last one
    /// logged, or `None` (it is counted among the held).
    pub(crate) fn admit(&self) -> Option<u64> {
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let next = self.next_at.load(Relaxed);
        let due = now >= next
            && self
                .next_at
                .compare_exchange(next, now.saturating_add(self.interval_ms), Relaxed, Relaxed)
                .is_ok();
        if due {
            return Some(self.held.swap(0, Relaxed));
        }
        self.held.fetch_add(1, Relaxed);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_event_an_interval_goes_through_with_the_count_held_back() {
        let every = LogEvery::new(Duration::from_millis(100));
        assert_eq!(every.admit(), Some(0));
        assert_eq!(every.admit(), None);
        assert_eq!(every.admit(), None);
        std::thread::sleep(Duration::from_millis(120));
        assert_eq!(every.admit(), Some(2));
        assert_eq!(every.admit(), None);
    }

    #[test]
    fn from_many_threads_at_once_one_goes_through() {
        let every = LogEvery::new(Duration::from_secs(3600));
        let admitted: Vec<u64> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..4)
                .map(|_| scope.spawn(|| (0..1000).filter_map(|_| every.admit()).collect::<Vec<_>>()))
                .collect();
            threads.into_iter().flat_map(|t| t.join().unwrap()).collect()
        });
        assert_eq!(admitted.len(), 1, "{admitted:?}");
        // An event held back by another thread while the one let through was being logged is
        // counted in that line or after it, never lost.
        assert_eq!(admitted[0] + every.held.load(Relaxed), 3999);
    }
}
