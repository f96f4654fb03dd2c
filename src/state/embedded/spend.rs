//! The embedded store's spend counters (docs/budgets.md#counters): counted in memory
//! ([`LocalCounters`]: one mutex makes each reserve and settle atomic, and no call waits on the
//! disk), and written to the keyspace `spend` by the writer thread. A change tells the writer
//! (once until it takes the changes); after its linger it writes every counter changed since,
//! each once with its latest value, in one batch, made durable within [`DURABLE_EVERY`] like
//! the records. So a counter updated a thousand times a second costs one row a batch, and a
//! restart finds every amount changed more than [`LINGER`] plus one batch before the process
//! ended (more than [`DURABLE_EVERY`] after that, when the machine went down).
//!
//! A row: the counter's name → its `expires_unix` then what it holds (8 bytes each,
//! big-endian). The tree's compactions drop expired rows ([`super::expiry`]); the disk budget's
//! eviction never touches them.
//!
//! [`DURABLE_EVERY`]: super::DURABLE_EVERY
//! [`LINGER`]: super::LINGER

use fjall::{Database, Keyspace, KeyspaceCreateOptions, Readable, Snapshot};
use std::sync::mpsc::TrySendError;
use std::thread::JoinHandle;

use super::budget::DiskBudget;
use super::tables::Store;
use super::{unavailable, write_failed, writer_stopped, Command, EmbeddedStore};
use crate::state::local_spend::{Counter, LocalCounters};
use crate::state::spend::{CounterKey, Reservation};
use crate::state::{now_unix, StoreError};

/// The keyspace's name.
pub(super) const KEYSPACE: &str = "spend";

/// Opens (creating it if need be) the keyspace of the counters.
pub(super) fn open(db: &Database, memtable_bytes: u64) -> Result<Keyspace, StoreError> {
    db.keyspace(KEYSPACE, || {
        KeyspaceCreateOptions::default().max_memtable_size(memtable_bytes)
    })
    .map_err(unavailable("open the spend keyspace"))
}

/// Counts again the counters `snapshot` holds that have not expired at `now`; how many.
pub(super) fn restore(
    keyspace: &Keyspace,
    snapshot: &Snapshot,
    counters: &LocalCounters,
    now: u64,
) -> Result<usize, StoreError> {
    let mut restored = 0;
    for row in snapshot.iter(keyspace) {
        let (name, value) = row.into_inner().map_err(unavailable("the spend counters"))?;
        let (Ok(name), Some(counter)) = (std::str::from_utf8(&name), read_row(&value)) else {
            tracing::warn!("an unreadable spend counter row was skipped");
            continue;
        };
        if counter.expires > now {
            counters.restore(name.to_owned(), counter, now);
            restored += 1;
        }
    }
    Ok(restored)
}

/// Writes every counter changed since the last call in one batch, unless the disk has no room
/// (then the store is full, as for a batch of records); the counters of a failed write are
/// written at the next call. How many it wrote.
pub(super) fn write_changed(
    store: &Store,
    counters: &LocalCounters,
    budget: &DiskBudget,
) -> Result<usize, StoreError> {
    let changed = counters.take_changed(now_unix());
    if changed.is_empty() {
        return Ok(0);
    }
    let bytes: usize = changed.iter().map(|(name, _)| name.len() + 16).sum();
    let written = budget.room_for(bytes as u64).and_then(|()| {
        let mut batch = store.db.batch();
        for (name, counter) in &changed {
            batch.insert(&store.spend, name.as_bytes(), &row(counter)[..]);
        }
        batch.commit().map_err(write_failed("write the spend counters"))
    });
    match written {
        Ok(()) => {
            budget.health.written();
            Ok(changed.len())
        }
        Err(e) => {
            if let StoreError::Full(why) = &e {
                budget.health.refused(why);
            }
            counters.changed_again(changed.into_iter().map(|(name, _)| name));
            Err(e)
        }
    }
}

/// A counter's row value.
fn row(counter: &Counter) -> [u8; 16] {
    let mut row = [0; 16];
    row[..8].copy_from_slice(&counter.expires.to_be_bytes());
    row[8..].copy_from_slice(&counter.spent.to_be_bytes());
    row
}

fn read_row(value: &[u8]) -> Option<Counter> {
    let value: &[u8; 16] = value.try_into().ok()?;
    let (expires, spent) = value.split_at(8);
    Some(Counter {
        expires: u64::from_be_bytes(expires.try_into().ok()?),
        spent: u64::from_be_bytes(spent.try_into().ok()?),
    })
}

impl EmbeddedStore {
    /// [`StateStore::reserve`](crate::state::StateStore::reserve): counted at once, written
    /// by the writer thread.
    pub(in crate::state) fn reserve(
        &self,
        key: &CounterKey,
        amount: u64,
        limit: u64,
        expires: u64,
    ) -> Result<Reservation, StoreError> {
        self.counting()?;
        let reservation = self
            .inner
            .counters
            .reserve(key, amount, limit, expires, now_unix());
        self.tell_writer();
        Ok(reservation)
    }

    /// [`StateStore::settle`](crate::state::StateStore::settle): `delta` counted at once,
    /// written by the writer thread.
    pub(in crate::state) fn settle(
        &self,
        key: &CounterKey,
        delta: i64,
        expires: u64,
    ) -> Result<u64, StoreError> {
        self.counting()?;
        let spent = self.inner.counters.settle(key, delta, expires, now_unix());
        self.tell_writer();
        Ok(spent)
    }

    /// What the counter holds.
    pub(in crate::state) fn spent(&self, key: &CounterKey) -> Result<u64, StoreError> {
        self.counting()?;
        Ok(self.inner.counters.spent(key, now_unix()))
    }

    /// `Ok` while counts can be kept: the writer runs and the last write found room.
    pub(super) fn counting(&self) -> Result<(), StoreError> {
        self.inner.budget.health.check()?;
        if self.inner.writer.as_ref().is_none_or(JoinHandle::is_finished) {
            return Err(writer_stopped());
        }
        Ok(())
    }

    /// Tells the writer thread that counters changed, unless it was told since it last took
    /// them. A full queue means the writer is busy: it takes the changes at its next turn.
    pub(super) fn tell_writer(&self) {
        if !self.inner.counters.tell_writer() {
            return;
        }
        if let Some(queue) = &self.inner.queue {
            if let Err(TrySendError::Disconnected(_)) = queue.try_send(Command::Spend) {
                tracing::warn!("the ledger writer has stopped: spend counters are no longer written");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::BudgetUnit;
    use crate::spend::Window;
    use crate::state::spend::SpendOwner;

    fn counter(team: &str) -> CounterKey {
        CounterKey::new(&SpendOwner::team(team), BudgetUnit::MicroUsd, Window::Month, 0)
    }

    #[test]
    fn a_row_holds_the_expiry_then_the_count() {
        let counter = Counter {
            spent: 7,
            expires: 1_800_000_000,
        };
        let written = row(&counter);
        assert_eq!(&written[..8], &1_800_000_000u64.to_be_bytes());
        assert_eq!(read_row(&written), Some(counter));
        assert_eq!(read_row(&written[..15]), None);
    }

    /// Counts survive a restart: every store of the directory closed (the writer writes what
    /// changed and syncs), then the directory opened again.
    #[tokio::test]
    async fn counts_survive_a_restart_and_expired_ones_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let expires = now_unix() + 3600;
        {
            let store = EmbeddedStore::open(dir.path()).unwrap();
            assert!(store.reserve(&counter("a"), 700, 1000, expires).unwrap().reserved);
            assert_eq!(store.settle(&counter("a"), -200, expires).unwrap(), 500);
            store.reserve(&counter("b"), 5, 1000, expires).unwrap();
            // Written, then a counter that expires in a second (as a grace ends).
            store.reserve(&counter("short"), 9, 1000, now_unix() + 1).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let store = EmbeddedStore::open(dir.path()).unwrap();
        assert_eq!(store.spent(&counter("a")).unwrap(), 500);
        assert_eq!(store.spent(&counter("b")).unwrap(), 5);
        assert_eq!(store.spent(&counter("short")).unwrap(), 0);
        assert!(!store.reserve(&counter("a"), 501, 1000, expires).unwrap().reserved);
        assert!(store.reserve(&counter("a"), 500, 1000, expires).unwrap().reserved);
    }

    /// While the store runs, the writer writes a changed counter within its linger and a batch:
    /// what a process that dies loses is no older than that.
    #[tokio::test]
    async fn the_writer_writes_a_change_within_its_linger() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open_slow(dir.path(), 64, Duration::from_millis(20)).unwrap();
        let expires = now_unix() + 3600;
        store.reserve(&counter("a"), 42, 1000, expires).unwrap();
        let row = |store: &EmbeddedStore| {
            store
                .inner
                .store
                .spend
                .get(counter("a").as_str().as_bytes())
                .unwrap()
                .and_then(|value| read_row(&value))
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while row(&store).is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "the counter was never written"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(row(&store), Some(Counter { spent: 42, expires }));
        // A thousand changes, one row with the last.
        for _ in 0..1000 {
            store.settle(&counter("a"), 1, expires).unwrap();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while row(&store).map(|counter| counter.spent) != Some(1042) {
            assert!(
                std::time::Instant::now() < deadline,
                "the last count was never written"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
