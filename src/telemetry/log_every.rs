//! A warning that may repeat thousands of times a second (every record a full queue refuses)
//! let through at most once an interval, with the count of those held back in between: the
//! counters count each one, the log says it is happening without costing a line each.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
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
    ///
    /// An event that may be due takes the held count before it claims the interval: an event
    /// that lost the claim to it, or found the interval claimed, is counted after that, so a
    /// line never counts an event that came after it (the first line of a burst says 0).
    pub(crate) fn admit(&self) -> Option<u64> {
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let next = self.next_at.load(SeqCst);
        if now >= next {
            let taken = self.held.swap(0, SeqCst);
            let claimed = self
                .next_at
                .compare_exchange(next, now.saturating_add(self.interval_ms), SeqCst, SeqCst)
                .is_ok();
            if claimed {
                return Some(taken);
            }
            // Another event claimed it: what was taken goes back, with this one.
            self.held.fetch_add(taken + 1, SeqCst);
            return None;
        }
        self.held.fetch_add(1, SeqCst);
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
        // The first line of a burst counts nothing before it; every other event is held, none
        // lost.
        assert_eq!(admitted, [0]);
        assert_eq!(every.held.load(SeqCst), 3999);
    }
}
