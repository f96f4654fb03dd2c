//! Whether a backend's last write was refused for lack of room (Redis out of memory, the
//! embedded store's disk full). While it was, the backend's lookups answer
//! [`StoreError::Full`] rather than what they find: an answer recorded meanwhile was not
//! written, and its id would read as unknown, which the ledger must never take for "no record"
//! (docs/operations.md#records-are-never-forgotten-silently). The next write that lands, or a ping
//! that finds room again, clears it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::StoreError;

/// A backend's write health. Cheap to clone: clones share it.
#[derive(Debug, Clone, Default)]
pub(crate) struct WriteHealth {
    full: Arc<AtomicBool>,
    /// Why the last refused write was refused.
    why: Arc<Mutex<String>>,
}

impl WriteHealth {
    /// A write was refused for lack of room, as `why` says.
    pub(crate) fn refused(&self, why: &str) {
        *self.why.lock().unwrap_or_else(|e| e.into_inner()) = why.to_owned();
        self.full.store(true, Ordering::Release);
    }

    /// A write landed: there is room again.
    pub(crate) fn written(&self) {
        if self.full.load(Ordering::Acquire) {
            self.full.store(false, Ordering::Release);
        }
    }

    /// Whether the last write was refused for lack of room.
    pub(crate) fn is_full(&self) -> bool {
        self.full.load(Ordering::Acquire)
    }

    /// `Err(Full)` while the last write was refused for lack of room.
    pub(crate) fn check(&self) -> Result<(), StoreError> {
        if !self.is_full() {
            return Ok(());
        }
        let why = self.why.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Err(StoreError::Full(why))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_write_holds_until_one_lands() {
        let health = WriteHealth::default();
        assert!(health.check().is_ok());
        let shared = health.clone();
        shared.refused("OOM command not allowed");
        let err = health.check().unwrap_err();
        assert!(
            matches!(&err, StoreError::Full(why) if why.contains("OOM")),
            "{err:?}"
        );
        assert!(health.is_full());
        health.written();
        assert!(shared.check().is_ok());
    }
}
