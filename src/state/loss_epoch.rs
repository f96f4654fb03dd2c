//! A count of the times a backend may have lost records before their expiry
//! (docs/incremental-judging.md#the-ledger): what the ledger answered about a key holds for as
//! long as this count stays the same and the record has not expired.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The loss epoch of one backend; clones share it.
#[derive(Debug, Clone, Default)]
pub(crate) struct LossEpoch(Arc<AtomicU64>);

impl LossEpoch {
    /// The epoch now.
    pub(crate) fn current(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Notes that records may have been lost (evicted, rewritten, a write that failed after
    /// lookups saw it, a connection to a server that may not hold what the last one did).
    pub(crate) fn bump(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_one_epoch_and_a_loss_moves_it() {
        let epoch = LossEpoch::default();
        let other = epoch.clone();
        let before = epoch.current();
        assert_eq!(other.current(), before);
        other.bump();
        assert_ne!(epoch.current(), before);
    }
}
