//! The writer thread: the one owner of the file's write transactions.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Instant;

use redb::{Database, Durability, WriteTransaction};

use super::tables::Tables;
use super::{unavailable, Command, Record, Tuning, MAX_BATCH};
use crate::state::{now_unix, StoreError};

/// The writer thread: batches puts, runs sweeps, ends when every store clone is gone.
pub(super) fn write_loop(db: &Database, requests: &Receiver<Command>, tuning: Tuning) {
    let mut next_sweep = Instant::now() + tuning.sweep_every;
    // When the batches committed since the last durable commit must be made durable.
    let mut durable_by: Option<Instant> = None;
    loop {
        let deadline = durable_by.map_or(next_sweep, |by| by.min(next_sweep));
        let first = match requests.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(command) => Some(command),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                if durable_by.is_some() {
                    make_durable(db, &tuning);
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
            }
        }
        if !puts.is_empty() {
            let now = Instant::now();
            let due = durable_by.get_or_insert(now + tuning.durable_every);
            let durable = *due <= now;
            let result = write_batch(db, &tuning, durable, puts.iter().map(|(record, _)| record));
            match &result {
                Ok(()) if durable => durable_by = None,
                Ok(()) => {}
                Err(e) => tracing::warn!(error = %e, records = puts.len(), "ledger write failed"),
            }
            for (_, ack) in puts {
                ack.send(&result);
            }
        }
        for (now, ack) in sweeps {
            let _ = ack.send(sweep(db, &tuning, now).map(|(_, removed)| removed));
        }
        // Write what is committed to disk once its wait is over (the queue's wait ends then too).
        if durable_by.is_some_and(|by| by <= Instant::now()) && make_durable(db, &tuning) {
            durable_by = None;
        }
        if Instant::now() >= next_sweep {
            next_sweep = match sweep(db, &tuning, now_unix()) {
                // A full load: more may have expired, so sweep again once the queue is served.
                Ok((rows, _)) if rows >= tuning.sweep_limit => Instant::now(),
                Ok((_, removed)) => {
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

/// Writes every batch committed so far to disk (an empty durable commit); whether it did.
fn make_durable(db: &Database, tuning: &Tuning) -> bool {
    match begin_write(db, tuning, true).and_then(|txn| txn.commit().map_err(unavailable("commit"))) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %e, "ledger durable commit failed");
            false
        }
    }
}

/// A write transaction with this store's commit settings.
fn begin_write(db: &Database, tuning: &Tuning, durable: bool) -> Result<WriteTransaction, StoreError> {
    let mut txn = db.begin_write().map_err(unavailable("write transaction"))?;
    let durability = match durable {
        true => Durability::Immediate,
        false => Durability::None,
    };
    txn.set_durability(durability)
        .map_err(unavailable("write transaction"))?;
    txn.set_quick_repair(tuning.quick_repair);
    Ok(txn)
}

/// Commits every record of a batch in one transaction.
fn write_batch<'a>(
    db: &Database,
    tuning: &Tuning,
    durable: bool,
    batch: impl Iterator<Item = &'a Record>,
) -> Result<(), StoreError> {
    let txn = begin_write(db, tuning, durable)?;
    {
        let mut tables = Tables::open(&txn)?;
        for record in batch {
            tables.put(&record.response, &record.json)?;
        }
    }
    txn.commit().map_err(unavailable("commit"))
}

/// Removes up to `tuning.sweep_limit` expiry rows due at `now` and what they point to, in one
/// durable transaction. Returns the rows visited and the entries removed.
pub(super) fn sweep(db: &Database, tuning: &Tuning, now: u64) -> Result<(usize, usize), StoreError> {
    // Sweeps are rare: each is durable (and so makes every batch before it durable).
    let txn = begin_write(db, tuning, true)?;
    let swept = Tables::open(&txn)?.sweep(now, tuning.sweep_limit)?;
    txn.commit().map_err(unavailable("commit"))?;
    Ok(swept)
}
