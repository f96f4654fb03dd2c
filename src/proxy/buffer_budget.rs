//! `max_buffered_bytes`: one byte budget for the request bodies held at once, shared by every
//! connection and worker thread. A body takes its bytes from the budget as they arrive and
//! gives them back when it is no longer held.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The shared budget: a cap and the bytes reserved against it.
#[derive(Debug)]
pub struct BufferBudget {
    cap: usize,
    reserved: AtomicUsize,
}

impl BufferBudget {
    /// A budget of `cap` bytes, none reserved.
    pub fn new(cap: usize) -> Arc<BufferBudget> {
        Arc::new(BufferBudget {
            cap,
            reserved: AtomicUsize::new(0),
        })
    }

    /// The cap, in bytes.
    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    /// The bytes reserved now.
    pub fn reserved(&self) -> usize {
        self.reserved.load(Ordering::Relaxed)
    }

    /// Whether `bytes` more would fit now (a hint: nothing is reserved).
    pub(crate) fn would_fit(&self, bytes: usize) -> bool {
        self.reserved().saturating_add(bytes) <= self.cap
    }

    /// Takes `bytes` from the budget if they fit; never lets the total pass the cap, even for a
    /// moment, so one body's failed attempt cannot turn another away.
    fn take(&self, bytes: usize) -> bool {
        self.reserved
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |reserved| {
                reserved.checked_add(bytes).filter(|&total| total <= self.cap)
            })
            .is_ok()
    }

    fn give_back(&self, bytes: usize) {
        self.reserved.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// Bytes one body holds in the budget; given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<BufferBudget>,
    bytes: usize,
}

impl Reservation {
    /// An empty reservation against `budget`.
    pub fn new(budget: &Arc<BufferBudget>) -> Reservation {
        Reservation {
            budget: budget.clone(),
            bytes: 0,
        }
    }

    /// The cap of the budget it holds bytes in.
    pub(crate) fn cap(&self) -> usize {
        self.budget.cap
    }

    /// The bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Grows the reservation to `total` bytes (nothing to do if it holds that much already);
    /// `false`, holding what it held before, when the budget has no room.
    pub fn grow_to(&mut self, total: usize) -> bool {
        let more = total.saturating_sub(self.bytes);
        if more == 0 {
            return true;
        }
        if !self.budget.take(more) {
            return false;
        }
        self.bytes = total;
        true
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.give_back(self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_never_pass_the_cap_and_are_given_back_on_drop() {
        let budget = BufferBudget::new(100);
        let mut first = Reservation::new(&budget);
        assert!(first.grow_to(60));
        assert!(first.grow_to(40), "shrinking is a no-op");
        assert_eq!(first.bytes(), 60);
        let mut second = Reservation::new(&budget);
        assert!(!second.grow_to(41));
        assert_eq!((second.bytes(), budget.reserved()), (0, 60));
        assert!(second.grow_to(40));
        assert!(!budget.would_fit(1));
        drop(first);
        assert_eq!(budget.reserved(), 40);
        assert!(budget.would_fit(60) && !budget.would_fit(61));
        drop(second);
        assert_eq!(budget.reserved(), 0);
    }

    #[test]
    fn threads_racing_for_the_budget_never_overshoot_it() {
        let budget = BufferBudget::new(1000);
        // Each thread returns what it holds, so nothing is given back before every thread ends.
        let held: Vec<Reservation> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let budget = budget.clone();
                    scope.spawn(move || {
                        let mut held = Vec::new();
                        for _ in 0..100 {
                            let mut reservation = Reservation::new(&budget);
                            if reservation.grow_to(7) {
                                assert!(budget.reserved() <= budget.cap());
                                held.push(reservation);
                            }
                        }
                        held
                    })
                })
                .collect();
            handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(held.len(), 142, "142 reservations of 7 fit in 1000");
        assert_eq!(budget.reserved(), 994);
        drop(held);
        assert_eq!(budget.reserved(), 0, "everything was given back");
    }
}
