//! The clock budgets read their windows from (docs/budgets.md#windows): the system's, or one a
//! test steps across a window's edge.

use std::fmt;
use std::sync::Arc;

/// Unix seconds now by the system's clock (0 before 1970).
pub(crate) fn system_now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// Unix seconds now, as budgets see it.
#[derive(Clone)]
pub struct SpendClock(Arc<dyn Fn() -> u64 + Send + Sync>);

impl SpendClock {
    /// The system's clock.
    pub fn system() -> SpendClock {
        SpendClock(Arc::new(system_now_unix))
    }

    /// A clock that reads `now` (Unix seconds) each time it is asked.
    pub fn from_fn(now: impl Fn() -> u64 + Send + Sync + 'static) -> SpendClock {
        SpendClock(Arc::new(now))
    }

    /// Unix seconds now.
    pub(crate) fn now_unix(&self) -> u64 {
        (self.0)()
    }
}

impl Default for SpendClock {
    fn default() -> Self {
        SpendClock::system()
    }
}

impl fmt::Debug for SpendClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SpendClock")
    }
}
