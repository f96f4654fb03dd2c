//! The writer thread: the one writer of the store. It takes the records the request threads
//! pushed ([`super::pending`]) in order, commits them to the tree in batches, adds their keys to
//! the key filter and their compact form to the recent index, and only then frees their place
//! in the pending ring; it also runs the sweeps and the syncs to disk.

use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use fjall::{PersistMode, Snapshot};

use super::budget::DiskBudget;
use super::compact;
use super::filters::Filters;
use super::pending::Taken;
use super::tables::{record_keys, Store, Tables};
use super::{write_failed, Ack, Command, Shared, Tuning, MAX_BATCH};
use crate::ledger::StoredResponse;
use crate::state::key_filter::{KeyFilter, StoreKey};
use crate::state::{now_unix, StoreError};

/// How the request threads wake the writer when it waits with nothing to do (under load it
/// never waits on this: it sleeps its linger, then finds records).
#[derive(Debug, Default)]
pub(super) struct Wake {
    flag: Mutex<bool>,
    signal: Condvar,
    idle: AtomicBool,
}

impl Wake {
    /// Wakes the writer if it waits (after a push).
    pub(super) fn notify(&self) {
        fence(Ordering::SeqCst);
        if self.idle.load(Ordering::Relaxed) {
            self.force();
        }
    }

    /// Wakes the writer whatever it does (a command, the store closing).
    pub(super) fn force(&self) {
        let mut flag = self.flag.lock().unwrap_or_else(|e| e.into_inner());
        *flag = true;
        self.signal.notify_one();
    }

    /// Waits until woken, `ready`, or `until`.
    fn wait(&self, until: Instant, ready: impl Fn() -> bool) {
        let mut flag = self.flag.lock().unwrap_or_else(|e| e.into_inner());
        self.idle.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        while !*flag && !ready() {
            let now = Instant::now();
            if now >= until {
                break;
            }
            flag = self
                .signal
                .wait_timeout(flag, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *flag = false;
        self.idle.store(false, Ordering::Relaxed);
    }
}

/// A record taken from the pending ring: decoded, its compact form and its keys.
struct Taking {
    response: StoredResponse,
    bytes: Vec<u8>,
    keys: Vec<StoreKey>,
    /// The key filter lacked its response's key: neither the tree nor an earlier batch holds a
    /// record of it.
    new: bool,
}

/// The writer thread: batches the pushed records, runs sweeps, keeps the tree within its disk
/// budget, ends when the store closes (having written everything pushed).
pub(super) fn write_loop(
    store: &Arc<Store>,
    shared: &Shared,
    budget: &DiskBudget,
    requests: &Receiver<Command>,
    tuning: Tuning,
) {
    let filters = &shared.filters;
    // The thread filling a grown key filter, if one is.
    let mut filler: Option<JoinHandle<()>> = None;
    let mut next_sweep = Instant::now() + tuning.sweep_every;
    let mut next_budget = Instant::now();
    // When the batches committed since the last durable commit must be made durable.
    let mut durable_by: Option<Instant> = None;
    // The next record to take from the pending ring.
    let mut cursor = 0;
    loop {
        let deadline = durable_by
            .map_or(next_sweep, |by| by.min(next_sweep))
            .min(next_budget);
        let closing = shared.closing.load(Ordering::Acquire);
        if !closing {
            shared.wake.wait(deadline, || {
                shared.pending.tail() > cursor || shared.closing.load(Ordering::Acquire)
            });
        }
        // Sleeping, rather than waiting on the ring, lets records gather without waking this
        // thread for each one.
        if shared.pending.tail() > cursor && !tuning.linger.is_zero() && !closing {
            std::thread::sleep(tuning.linger);
        }
        let (taken, next) = shared.pending.take(cursor, MAX_BATCH, |bytes| {
            compact::decode(bytes).map(|response| (response, bytes.to_vec()))
        });
        let took_all = next == shared.pending.tail();
        let before = std::mem::replace(&mut cursor, next);
        if next > before {
            commit(store, shared, budget, &tuning, taken, next, &mut durable_by);
        }
        if filters.take_due() {
            if let Some(started) = start_growing(store, filters) {
                filler = Some(started);
            }
        }
        while let Ok(Command::Sweep { now, ack }) = requests.try_recv() {
            let _ = ack.send(sweep(store, &tuning, now));
        }
        // Write what is committed to disk once its wait is over.
        if durable_by.is_some_and(|by| by <= Instant::now()) && make_durable(store) {
            durable_by = None;
        }
        if closing && took_all {
            if durable_by.is_some() {
                make_durable(store);
            }
            if let Some(filler) = filler {
                let _ = filler.join();
            }
            return;
        }
        if Instant::now() >= next_budget {
            if let Err(e) = budget.enforce(store, &tuning) {
                tracing::warn!(error = %e, "keeping the ledger within [state] max_disk_bytes failed");
            }
            next_budget = Instant::now() + tuning.budget_every;
        }
        if Instant::now() >= next_sweep {
            next_sweep = match sweep(store, &tuning, now_unix()) {
                // A full load: more may have expired, so sweep again once the queue is served.
                Ok(removed) if removed >= tuning.sweep_limit => Instant::now(),
                Ok(removed) => {
                    tracing::debug!(removed, "ledger sweep");
                    Instant::now() + tuning.sweep_every
                }
                Err(e) => {
                    tracing::warn!(error = %e, "ledger sweep failed");
                    Instant::now() + tuning.sweep_every
                }
            };
        }
    }
}

type Took = (Taken<Ack>, Result<(StoredResponse, Vec<u8>), compact::Unreadable>);

/// Commits the records `taken` from the pending ring (up to `next`, void slots included) in
/// one batch; then adds them to the key filter and the recent index, tells each one's owner
/// how it ended, and frees their slots.
fn commit(
    store: &Store,
    shared: &Shared,
    budget: &DiskBudget,
    tuning: &Tuning,
    taken: Vec<Took>,
    next: u64,
    durable_by: &mut Option<Instant>,
) {
    let mut acks = Vec::with_capacity(taken.len());
    let mut batch = Vec::with_capacity(taken.len());
    for (Taken { seq, note }, read) in taken {
        match read {
            Ok((response, bytes)) => {
                let keys: Vec<StoreKey> = record_keys(&response).collect();
                let new = !shared.filters.may_contain(&keys[0]);
                batch.push((
                    seq,
                    Taking {
                        response,
                        bytes,
                        keys,
                        new,
                    },
                ));
                acks.push((note, true));
            }
            Err(e) => {
                tracing::warn!(error = %e, "a pending ledger record does not read");
                acks.push((note, false));
            }
        }
    }
    let result = match batch.is_empty() {
        true => Ok(()),
        false => {
            let now = Instant::now();
            let due = durable_by.get_or_insert(now + tuning.durable_every);
            let durable = *due <= now;
            let bytes: usize = batch.iter().map(|(_, t)| t.bytes.len() * 2).sum();
            let result = budget
                .room_for(bytes as u64)
                .and_then(|()| write_batch(store, batch.iter().map(|(_, t)| t)))
                .and_then(|()| match durable {
                    true => persist(store),
                    false => Ok(()),
                });
            budget.batch_ended(batch.len(), &result);
            match &result {
                Ok(()) if durable => *durable_by = None,
                Ok(()) => {}
                Err(e) => tracing::warn!(error = %e, records = batch.len(), "ledger write failed"),
            }
            result
        }
    };
    if result.is_ok() && !batch.is_empty() {
        batch.iter().for_each(|(_, t)| shared.filters.insert(&t.keys));
        shared
            .recent
            .add_batch(batch.iter().map(|(_, t)| (&t.bytes[..], &t.keys[..])));
    }
    for (ack, readable) in acks {
        let outcome = match readable {
            true => result.clone(),
            false => Err(StoreError::Corrupt("a pending record does not read".into())),
        };
        ack.send(&outcome);
    }
    shared.pending.release(next, |seq, _| {
        batch
            .binary_search_by_key(&seq, |(s, _)| *s)
            .map(|at| batch[at].1.keys.clone())
            .unwrap_or_default()
    });
}

/// Writes every batch committed so far to disk (an fdatasync of the journal); whether it did.
fn make_durable(store: &Store) -> bool {
    match persist(store) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %e, "ledger durable commit failed");
            false
        }
    }
}

fn persist(store: &Store) -> Result<(), StoreError> {
    store
        .db
        .persist(PersistMode::SyncData)
        .map_err(write_failed("write to disk"))
}

/// Commits every record of a batch at once.
fn write_batch<'a>(store: &Store, batch: impl Iterator<Item = &'a Taking>) -> Result<(), StoreError> {
    let mut tables = Tables::new(&store.keyspaces);
    for record in batch {
        tables.put(&record.response, &record.response.to_json(), record.new)?;
    }
    tables.commit(&store.db)
}

/// Removes up to `tuning.sweep_limit` responses' rows due at `now`, in one batch written to
/// disk (and so every batch before it). Returns how many it removed.
pub(super) fn sweep(store: &Store, tuning: &Tuning, now: u64) -> Result<usize, StoreError> {
    let mut tables = Tables::new(&store.keyspaces);
    let swept = tables.sweep(now, tuning.sweep_limit)?;
    tables.commit(&store.db)?;
    persist(store)?;
    Ok(swept)
}

/// Starts a bigger key filter and the thread that fills it, unless one is growing already.
fn start_growing(store: &Arc<Store>, filters: &Arc<Filters>) -> Option<JoinHandle<()>> {
    let grown = filters.start_growing()?;
    // The snapshot holds the keys of every record written so far; this thread adds those of
    // every record it writes from now on (queued ones too) to the grown filter as well.
    let (tree, all, snapshot) = (store.clone(), filters.clone(), store.db.snapshot());
    let filler = std::thread::Builder::new()
        .name("ledger-filter".into())
        .spawn(move || fill(&tree, &all, &grown, &snapshot));
    filler
        .inspect_err(|e| {
            tracing::warn!(error = %e, "cannot grow the ledger's key filter");
            filters.abandon_growing();
        })
        .ok()
}

/// Adds every key `snapshot` holds to `grown`, then makes it the filter that answers.
fn fill(store: &Store, filters: &Filters, grown: &KeyFilter, snapshot: &Snapshot) {
    match super::tables::add_keys(&store.keyspaces, snapshot, grown) {
        Ok(keys) => {
            filters.finish_growing(keys);
            tracing::info!(
                keys,
                bits = 1u64 << filters.bits_log2(),
                "the ledger's key filter grew"
            );
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot grow the ledger's key filter");
            filters.abandon_growing();
        }
    }
}
