//! Spend counters kept in this process (docs/budgets.md#counters): what the `memory` backend
//! counts in, and the `embedded` backend too, which writes the counters it changed to its tree
//! through its writer thread ([`LocalCounters::take_changed`]). One mutex makes each reserve
//! and settle atomic; expired counters go when touched, and in a sweep at most once a minute.
//! The usage tallies (`super::tally`) count here too, one counter per field, all the fields of
//! an answer added under the one lock.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use super::spend::{CounterKey, Reservation};
use super::tally::{TallyKey, WindowUsage};

/// How often the expired counters are swept out, in seconds.
const SWEEP_EVERY_SECS: u64 = 60;

/// The spend counters of one process.
#[derive(Debug, Default)]
pub(crate) struct LocalCounters {
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    counters: HashMap<String, Counter>,
    /// `Some` when the counters are written out: the names changed since the writer last
    /// took them.
    changed: Option<Changed>,
    /// When the next sweep is due (Unix seconds).
    next_sweep: u64,
}

/// One counter: what it holds, and when it is forgotten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counter {
    /// Tokens or micro-dollars.
    pub(crate) spent: u64,
    /// Unix seconds from which the counter is gone.
    pub(crate) expires: u64,
}

#[derive(Debug, Default)]
struct Changed {
    names: HashSet<String>,
    /// Whether the writer was told since it last took the changes.
    told: bool,
}

impl LocalCounters {
    /// Counters whose changes are kept for a writer ([`LocalCounters::take_changed`]).
    pub(crate) fn written_out() -> LocalCounters {
        let table = Table {
            changed: Some(Changed::default()),
            ..Table::default()
        };
        LocalCounters {
            table: Mutex::new(table),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds `amount` to `key` if it then holds at most `limit` (see
    /// [`StateStore::reserve`](super::StateStore::reserve)); the counter expires at `expires`.
    pub(crate) fn reserve(
        &self,
        key: &CounterKey,
        amount: u64,
        limit: u64,
        expires: u64,
        now: u64,
    ) -> Reservation {
        let mut table = self.table();
        table.sweep(now);
        let spent = table.live(key.as_str(), now);
        let total = spent.saturating_add(amount);
        if total > limit {
            return Reservation {
                reserved: false,
                spent,
            };
        }
        table.set(key.as_str(), total, expires);
        Reservation {
            reserved: true,
            spent: total,
        }
    }

    /// Adds `delta` to `key`, never below zero (see
    /// [`StateStore::settle`](super::StateStore::settle)); what it holds now. A counter expired
    /// at `now` is left alone (0).
    pub(crate) fn settle(&self, key: &CounterKey, delta: i64, expires: u64, now: u64) -> u64 {
        if expires <= now {
            return 0;
        }
        let mut table = self.table();
        table.sweep(now);
        let spent = table.live(key.as_str(), now);
        let total = spent.saturating_add_signed(delta);
        if total != spent || table.counters.contains_key(key.as_str()) {
            table.set(key.as_str(), total, expires);
        }
        total
    }

    /// What `key` holds at `now` (0 once it is gone).
    pub(crate) fn spent(&self, key: &CounterKey, now: u64) -> u64 {
        self.table().live(key.as_str(), now)
    }

    /// Adds each `(field, amount)` to the tally `key`'s counter of that field, all under one
    /// lock (see [`StateStore::add_usage`](super::StateStore::add_usage)); each counter
    /// expires at `expires`. Nothing is added once `expires` has passed.
    pub(crate) fn add(&self, key: &TallyKey, amounts: &[(&str, u64)], expires: u64, now: u64) {
        if expires <= now {
            return;
        }
        // One name buffer for every field: `tally:KEY:` and each field in turn.
        let mut name = key.field("");
        let stem = name.len();
        let mut table = self.table();
        table.sweep(now);
        for (field, amount) in amounts {
            name.truncate(stem);
            name.push_str(field);
            let total = table.live(&name, now).saturating_add(*amount);
            table.set(&name, total, expires);
        }
    }

    /// What the tally `key` holds at `now` (0 for each field gone).
    pub(crate) fn usage(&self, key: &TallyKey, now: u64) -> WindowUsage {
        let table = self.table();
        WindowUsage::from_values(WindowUsage::FIELDS.map(|field| table.live(&key.field(field), now)))
    }

    /// Whether the writer must be told of changes: some are waiting and it was not told since
    /// it last took them. Answers `true` once for each take.
    pub(crate) fn tell_writer(&self) -> bool {
        let mut table = self.table();
        match table.changed.as_mut() {
            Some(changed) if !changed.names.is_empty() && !changed.told => {
                changed.told = true;
                true
            }
            _ => false,
        }
    }

    /// The counters changed since the last take, with what they hold now (those gone since
    /// left out: their rows expire on their own).
    pub(crate) fn take_changed(&self, now: u64) -> Vec<(String, Counter)> {
        let mut table = self.table();
        let Some(changed) = table.changed.as_mut() else {
            return Vec::new();
        };
        changed.told = false;
        let names = std::mem::take(&mut changed.names);
        names
            .into_iter()
            .filter_map(|name| {
                let counter = *table.counters.get(&name)?;
                (counter.expires > now).then_some((name, counter))
            })
            .collect()
    }

    /// Marks `names` changed again (their write failed: the next take retries them).
    pub(crate) fn changed_again(&self, names: impl IntoIterator<Item = String>) {
        if let Some(changed) = self.table().changed.as_mut() {
            changed.names.extend(names);
        }
    }

    /// Puts back a counter read from the disk at start, unless it has expired or is already
    /// counted.
    pub(crate) fn restore(&self, name: String, counter: Counter, now: u64) {
        if counter.expires > now {
            self.table().counters.entry(name).or_insert(counter);
        }
    }
}

impl Table {
    /// What `name` holds, 0 when absent or expired at `now`.
    fn live(&self, name: &str, now: u64) -> u64 {
        self.counters
            .get(name)
            .filter(|counter| counter.expires > now)
            .map_or(0, |counter| counter.spent)
    }

    /// Sets `name` to `spent`, kept until `expires`, and notes the change for the writer.
    fn set(&mut self, name: &str, spent: u64, expires: u64) {
        match self.counters.get_mut(name) {
            Some(counter) => *counter = Counter { spent, expires },
            None => {
                self.counters.insert(name.to_owned(), Counter { spent, expires });
            }
        }
        if let Some(changed) = self.changed.as_mut() {
            if !changed.names.contains(name) {
                changed.names.insert(name.to_owned());
            }
        }
    }

    /// Drops the counters expired at `now`, once a minute at most.
    fn sweep(&mut self, now: u64) {
        if now < self.next_sweep {
            return;
        }
        self.counters.retain(|_, counter| counter.expires > now);
        self.next_sweep = now + SWEEP_EVERY_SECS;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BudgetUnit;
    use crate::spend::Window;
    use crate::state::spend::SpendOwner;

    fn counter(team: &str) -> CounterKey {
        CounterKey::new(&SpendOwner::team(team), BudgetUnit::Tokens, Window::Day, 0)
    }

    #[test]
    fn a_counter_expires_at_its_time_on_a_clock_the_test_turns() {
        let counters = LocalCounters::default();
        let key = counter("t");
        let reserved = counters.reserve(&key, 70, 100, 1000, 10);
        assert_eq!(
            reserved,
            Reservation {
                reserved: true,
                spent: 70
            }
        );
        assert!(!counters.reserve(&key, 40, 100, 1000, 999).reserved);
        assert_eq!(counters.spent(&key, 999), 70);
        // At its expiry it is gone, and a reservation starts from zero.
        assert_eq!(counters.spent(&key, 1000), 0);
        let fresh = counters.reserve(&key, 40, 100, 2000, 1000);
        assert_eq!(
            fresh,
            Reservation {
                reserved: true,
                spent: 40
            }
        );
        // A settle of a window that is over changes nothing.
        assert_eq!(counters.settle(&counter("old"), 50, 1000, 1500), 0);
        assert_eq!(counters.spent(&counter("old"), 1500), 0);
    }

    #[test]
    fn a_sweep_drops_what_has_expired_once_a_minute() {
        let counters = LocalCounters::default();
        counters.reserve(&counter("a"), 1, 10, 100, 0);
        counters.reserve(&counter("b"), 1, 10, 10_000, 50);
        assert_eq!(counters.table().counters.len(), 2);
        counters.reserve(&counter("b"), 1, 10, 10_000, 101);
        assert_eq!(counters.table().counters.len(), 1);
    }

    #[test]
    fn the_writer_is_told_once_and_takes_each_change_once() {
        let counters = LocalCounters::written_out();
        let key = counter("t");
        assert!(!counters.tell_writer());
        counters.reserve(&key, 5, 100, 1000, 0);
        counters.settle(&key, 3, 1000, 0);
        counters.reserve(&counter("gone"), 1, 100, 10, 0);
        assert!(counters.tell_writer());
        assert!(!counters.tell_writer());
        let taken = counters.take_changed(20);
        assert_eq!(
            taken,
            [(
                key.as_str().to_owned(),
                Counter {
                    spent: 8,
                    expires: 1000
                }
            )]
        );
        assert!(counters.take_changed(20).is_empty());
        assert!(!counters.tell_writer());
        counters.changed_again([key.as_str().to_owned()]);
        assert!(counters.tell_writer());
        assert_eq!(counters.take_changed(20).len(), 1);
        // Without a writer nothing is kept for one.
        let plain = LocalCounters::default();
        plain.reserve(&key, 5, 100, 1000, 0);
        assert!(!plain.tell_writer());
        assert!(plain.take_changed(0).is_empty());
    }

    #[test]
    fn a_restored_counter_counts_unless_it_expired_or_is_counted_already() {
        let counters = LocalCounters::written_out();
        let key = counter("t");
        counters.restore(
            key.as_str().to_owned(),
            Counter {
                spent: 40,
                expires: 1000,
            },
            10,
        );
        counters.restore(
            counter("old").as_str().to_owned(),
            Counter { spent: 9, expires: 5 },
            10,
        );
        assert_eq!(counters.spent(&key, 10), 40);
        assert_eq!(counters.spent(&counter("old"), 0), 0);
        counters.restore(
            key.as_str().to_owned(),
            Counter {
                spent: 1,
                expires: 1000,
            },
            10,
        );
        assert_eq!(counters.spent(&key, 10), 40);
        // Restoring is no change to write back.
        assert!(counters.take_changed(10).is_empty());
    }
}
