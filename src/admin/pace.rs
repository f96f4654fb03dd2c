//! The admin listener's pace: at most so many requests a second, after a burst, whatever the
//! number of clients. A request over the pace waits for its turn (it is not refused), so a
//! flood of scrapes costs the process a bounded amount of work and a scraper that keeps to a
//! sane interval never waits.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// A generic cell rate: each request takes the next free slot, `interval` apart; up to `burst`
/// slots may be taken ahead of time.
#[derive(Debug)]
pub(super) struct Pace {
    interval: Duration,
    /// How far ahead of now the slots may be taken without waiting.
    ahead: Duration,
    /// The next free slot.
    next: Mutex<Instant>,
}

impl Pace {
    /// At most `per_second` requests a second (at least 1), after a burst of `burst`.
    pub(super) fn new(per_second: u32, burst: u32) -> Pace {
        let interval = Duration::from_secs(1) / per_second.max(1);
        Pace {
            interval,
            ahead: interval * burst,
            next: Mutex::new(Instant::now()),
        }
    }

    /// Takes a slot for a request arriving `now`: when it may be served.
    fn reserve(&self, now: Instant) -> Instant {
        let mut next = self
            .next
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let slot = (*next).max(now);
        *next = slot + self.interval;
        slot.checked_sub(self.ahead).unwrap_or(now).max(now)
    }

    /// Waits for this request's turn.
    pub(super) async fn turn(&self) {
        let at = self.reserve(Instant::now());
        tokio::time::sleep_until(at).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_goes_at_once_and_the_rest_keeps_the_pace() {
        let pace = Pace::new(100, 5);
        let start = Instant::now();
        let slots: Vec<Duration> = (0..25).map(|_| pace.reserve(start) - start).collect();
        assert!(slots[..6].iter().all(|slot| slot.is_zero()), "{slots:?}");
        for (n, slot) in slots.iter().enumerate().skip(6) {
            assert_eq!(*slot, Duration::from_millis(10) * (n as u32 - 5), "request {n}");
        }
        // Once the client pauses, the burst is there again.
        let later = start + Duration::from_secs(5);
        assert!((0..6).all(|_| pace.reserve(later) == later));
        assert_eq!(pace.reserve(later), later + Duration::from_millis(10));
    }
}
