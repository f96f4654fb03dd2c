//! The writer thread: the one writer of the store (its batches, its sweeps, its syncs to disk).

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use fjall::{PersistMode, Snapshot};

use super::budget::DiskBudget;
use super::filters::Filters;
use super::tables::{Store, Tables};
use super::{write_failed, Command, Record, Tuning, MAX_BATCH};
use crate::state::key_filter::KeyFilter;
use crate::state::local_spend::LocalCounters;
use crate::state::loss_epoch::LossEpoch;
use crate::state::{now_unix, StoreError};

/// The writer thread: batches puts, runs sweeps, keeps the tree within its disk budget, ends
/// when every store clone is gone.
pub(super) fn write_loop(
    store: &Arc<Store>,
    filters: &Arc<Filters>,
    budget: &DiskBudget,
    requests: &Receiver<Command>,
    tuning: Tuning,
    losses: &LossEpoch,
    counters: &LocalCounters,
) {
    // The thread filling a grown key filter, if one is.
    let mut filler: Option<JoinHandle<()>> = None;
    let mut next_sweep = Instant::now() + tuning.sweep_every;
    let mut next_budget = Instant::now();
    // When the batches committed since the last durable commit must be made durable.
    let mut durable_by: Option<Instant> = None;
    loop {
        let deadline = durable_by
            .map_or(next_sweep, |by| by.min(next_sweep))
            .min(next_budget);
        let first = match requests.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(command) => Some(command),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                // What the counters last changed is written and synced before the tree closes.
                if write_counters(store, counters, budget) || durable_by.is_some() {
                    make_durable(store);
                }
                if let Some(filler) = filler {
                    let _ = filler.join();
                }
                return;
            }
        };
        let mut commands: Vec<Command> = first.into_iter().collect();
        // Sleeping, rather than waiting on the queue, lets requests gather without waking
        // this thread for each one.
        if !commands.is_empty() && !tuning.linger.is_zero() {
            std::thread::sleep(tuning.linger);
        }
        while commands.len() < MAX_BATCH {
            match requests.try_recv() {
                Ok(command) => commands.push(command),
                Err(_) => break,
            }
        }
        let mut puts = Vec::with_capacity(commands.len());
        let mut sweeps = Vec::new();
        for command in commands {
            match command {
                Command::Put { record, ack } => puts.push((record, ack)),
                Command::Sweep { now, ack } => sweeps.push((now, ack)),
                // Written below, with every counter changed since the last batch.
                Command::Spend => {}
            }
        }
        if !puts.is_empty() {
            let now = Instant::now();
            let due = durable_by.get_or_insert(now + tuning.durable_every);
            let durable = *due <= now;
            // Encoded here rather than by the callers: off the answers' path
            // (docs/ledger.md#when-a-record-is-written).
            let rows: Vec<Vec<u8>> = puts.iter().map(|(record, _)| record.response.to_json()).collect();
            let bytes: usize = rows.iter().map(Vec::len).sum();
            let batch = puts
                .iter()
                .zip(&rows)
                .map(|((record, _), row)| (record, row.as_slice()));
            let result = budget
                .room_for(bytes as u64)
                .and_then(|()| write_batch(store, batch, losses))
                .and_then(|()| match durable {
                    true => persist(store),
                    false => Ok(()),
                });
            budget.batch_ended(puts.len(), &result);
            if result.is_ok() {
                puts.iter()
                    .for_each(|(record, _)| filters.insert_written(&record.keys));
            }
            match &result {
                Ok(()) if durable => durable_by = None,
                Ok(()) => {}
                Err(e) => {
                    // Lookups found these records from the moment they were queued.
                    losses.bump();
                    tracing::warn!(error = %e, records = puts.len(), "ledger write failed")
                }
            }
            for (_, ack) in puts {
                ack.send(&result);
            }
        }
        if write_counters(store, counters, budget) {
            durable_by.get_or_insert(Instant::now() + tuning.durable_every);
        }
        if filters.take_due() {
            if let Some(started) = start_growing(store, filters) {
                filler = Some(started);
            }
        }
        for (now, ack) in sweeps {
            let _ = ack.send(sweep(store, &tuning, now));
        }
        // Write what is committed to disk once its wait is over (the queue's wait ends then too).
        if durable_by.is_some_and(|by| by <= Instant::now()) && make_durable(store) {
            durable_by = None;
        }
        if Instant::now() >= next_budget {
            match budget.enforce(store, &tuning) {
                Ok(0) => {}
                Ok(_) => losses.bump(),
                Err(e) => {
                    tracing::warn!(error = %e, "keeping the ledger within [state] max_disk_bytes failed")
                }
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

/// Writes the spend counters changed since the last call (docs/budgets.md#counters); whether
/// it wrote any.
fn write_counters(store: &Store, counters: &LocalCounters, budget: &DiskBudget) -> bool {
    match super::spend::write_changed(store, counters, budget) {
        Ok(written) => written > 0,
        Err(e) => {
            tracing::warn!(error = %e, "writing the budgets' spend counters failed");
            false
        }
    }
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

/// Commits every record of a batch, each with its encoding, at once; moves the loss epoch
/// when a response written again no longer holds an item it did.
fn write_batch<'a>(
    store: &Store,
    batch: impl Iterator<Item = (&'a Record, &'a [u8])>,
    losses: &LossEpoch,
) -> Result<(), StoreError> {
    let mut tables = Tables::new(&store.keyspaces);
    for (record, row) in batch {
        tables.put(&record.response, row, record.new)?;
    }
    if tables.dropped_items() {
        losses.bump();
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
