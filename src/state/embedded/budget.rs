//! The store within its disk budget (`[state] max_disk_bytes`) and a full disk.
//!
//! **Budget.** Past the budget, the oldest records go first: the writer raises the store's
//! *floor*, a time below which every row counts as expired (reads, sweeps and the compaction
//! filter all compare a row's `expires_unix` with the later of now and the floor). Responses
//! are kept in the order they expire, which is the order they were recorded while
//! `retention_hours` holds, so the floor is the expiry of the response at the share of the
//! table to let go; the sweep then removes those rows and a compaction of every keyspace gives
//! their bytes back. Each response removed early is counted (`replaygate_state_evicted_total`).
//!
//! **Full disk.** Before each batch the writer asks the filesystem how much room is left
//! (statvfs); with less than the batch and a reserve, the batch is refused with
//! [`StoreError::Full`] rather than written. Writing it anyway would fail the tree's journal
//! with ENOSPC, which poisons the tree until the process restarts. While the last batch was
//! refused the store's lookups answer `Full` too (503 `ledger_unavailable`, or on under
//! `on_unavailable = "allow"`), and `/readyz` says why; the next batch that finds room, or a
//! ping that does, clears it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::expiry::read_u64;
use super::tables::Store;
use super::{unavailable, Tuning};
use crate::metrics::StateMeter;
use crate::state::write_health::WriteHealth;
use crate::state::{now_unix, StoreError};

/// What is kept after an eviction, as a share of the budget (in percent): room for the next
/// records before the next eviction, so one is needed every so often, not every batch.
const KEEP_PERCENT: u64 = 80;

/// The room a batch must leave on the filesystem (bytes): a table the tree flushes or a
/// compaction writes before it deletes the ones it replaces.
pub(super) const DISK_RESERVE: u64 = 1024 * 1024;

/// Reads how many bytes the filesystem holding `path` has free for this process.
pub(super) type FreeSpace = fn(&Path) -> std::io::Result<u64>;

/// The bytes free for an unprivileged writer on the filesystem holding `path`.
pub(super) fn statvfs_free(path: &Path) -> std::io::Result<u64> {
    let stat = rustix::fs::statvfs(path)?;
    Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// The store's disk budget and room on its filesystem, shared by the writer and the reads.
#[derive(Debug)]
pub(super) struct DiskBudget {
    /// `[state] max_disk_bytes`.
    pub(crate) max_bytes: u64,
    /// What the tables may take: the budget less the journal's allowance.
    tables_budget: u64,
    /// The tree's directory.
    pub(crate) dir: PathBuf,
    /// Rows expiring at or before this time count as expired (0: none yet).
    pub(crate) floor: Arc<AtomicU64>,
    /// Whether the last batch was refused for lack of room.
    pub(crate) health: WriteHealth,
    /// Counts what was evicted and refused.
    pub(crate) meter: StateMeter,
    free_space: FreeSpace,
    reserve: u64,
}

impl DiskBudget {
    /// The budget of the tree in `dir`, its floor shared with the compaction filter.
    pub(super) fn new(dir: PathBuf, floor: Arc<AtomicU64>, tuning: &Tuning, meter: StateMeter) -> DiskBudget {
        DiskBudget {
            max_bytes: tuning.max_disk_bytes,
            tables_budget: tuning
                .max_disk_bytes
                .saturating_sub(tuning.journal_allowance)
                .max(1),
            dir,
            floor,
            health: WriteHealth::default(),
            meter,
            free_space: tuning.free_space,
            reserve: tuning.disk_reserve,
        }
    }

    /// The time a read compares rows' `expires_unix` with: now, or the floor once records
    /// were evicted past it.
    pub(super) fn now(&self) -> u64 {
        now_unix().max(self.floor.load(Ordering::Acquire))
    }

    /// Whether the filesystem has room for `bytes` more and the reserve; `Full` if not. A
    /// filesystem that cannot say is taken to have room (the write then says).
    pub(super) fn room_for(&self, bytes: u64) -> Result<(), StoreError> {
        let free = match (self.free_space)(&self.dir) {
            Ok(free) => free,
            Err(error) => {
                tracing::debug!(%error, "the room left on the ledger's disk is unknown");
                return Ok(());
            }
        };
        let needed = bytes.saturating_mul(2).saturating_add(self.reserve);
        if free >= needed {
            return Ok(());
        }
        Err(StoreError::Full(format!(
            "the disk holding {} has {free} bytes free, and a batch of records needs {needed} with the reserve",
            self.dir.display()
        )))
    }

    /// `/readyz` while the last batch was refused: whether there is room again (then the
    /// store is writable again).
    pub(super) fn recheck(&self) -> Result<(), StoreError> {
        if !self.health.is_full() {
            return Ok(());
        }
        self.room_for(0)?;
        self.health.written();
        Ok(())
    }

    /// A batch of `records` ended with `result`: refusals for lack of room are counted and
    /// make the store full; a batch written makes it writable.
    pub(super) fn batch_ended(&self, records: usize, result: &Result<(), StoreError>) {
        match result {
            Ok(()) => self.health.written(),
            Err(StoreError::Full(why)) => {
                self.health.refused(why);
                self.meter.writes_refused(records as u64);
            }
            Err(_) => {}
        }
    }

    /// The bytes the tree's files take on disk (journal and tables): the blocks allocated to
    /// them, not their lengths, since the tree makes each journal file 64 MiB long up front
    /// and fills it as it goes (a sparse file).
    pub(super) fn used(&self, _store: &Store) -> Result<u64, StoreError> {
        allocated_bytes(&self.dir).map_err(unavailable("the ledger's disk space"))
    }

    /// Past the budget: raises the floor to the expiry of the oldest responses whose share of
    /// the table is the share of bytes to let go, sweeps them (counted as evicted unless they
    /// had expired anyway) and compacts every keyspace, so the bytes go back to the
    /// filesystem. Returns how many responses were evicted.
    pub(super) fn enforce(&self, store: &Store, tuning: &Tuning) -> Result<u64, StoreError> {
        let used = tables_bytes(store);
        if used <= self.tables_budget {
            return Ok(0);
        }
        let keep = self.tables_budget / 100 * KEEP_PERCENT;
        let rows = store.keyspaces.responses.approximate_len() as u64;
        let share = (used - keep) as f64 / used as f64;
        let to_evict = ((rows as f64 * share).ceil() as u64).clamp(1, rows.max(1));
        let Some(floor) = nth_expiry(store, to_evict)? else {
            return Ok(0);
        };
        let now = now_unix();
        // What had expired anyway is swept first, so only the rest is counted as evicted.
        while super::writer::sweep(store, tuning, now)? >= tuning.sweep_limit {}
        self.floor.fetch_max(floor, Ordering::AcqRel);
        let mut evicted = 0;
        loop {
            let removed = super::writer::sweep(store, tuning, floor)?;
            evicted += removed as u64;
            if removed < tuning.sweep_limit {
                break;
            }
        }
        self.meter.evicted(evicted);
        compact(store)?;
        tracing::warn!(
            evicted,
            tables_bytes = used,
            max_disk_bytes = self.max_bytes,
            tables_bytes_now = tables_bytes(store),
            "the ledger passed [state] max_disk_bytes: its oldest records were removed before their time \
             (their ids now read as unknown provenance)"
        );
        Ok(evicted)
    }
}

/// The bytes the keyspaces' tables take on disk (the journal aside).
fn tables_bytes(store: &Store) -> u64 {
    let keyspaces = &store.keyspaces;
    [
        &keyspaces.responses,
        &keyspaces.response_ids,
        &keyspaces.item_ids,
        &keyspaces.item_digests,
    ]
    .iter()
    .map(|keyspace| keyspace.disk_space())
    .sum()
}

/// The bytes allocated on disk to the files under `dir`, its subdirectories included.
fn allocated_bytes(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0u64;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let metadata = entry.metadata()?;
        total = total.saturating_add(if metadata.is_dir() {
            allocated_bytes(&entry.path())?
        } else {
            // `blocks` counts 512-byte units whatever the filesystem's block size.
            metadata.blocks().saturating_mul(512)
        });
    }
    Ok(total)
}

/// The `expires_unix` of the `n`th response in the order they expire (the last one when
/// there are fewer).
fn nth_expiry(store: &Store, n: u64) -> Result<Option<u64>, StoreError> {
    let mut last = None;
    for row in store.keyspaces.responses.iter().take(n as usize) {
        let key = row.key().map_err(unavailable("responses"))?;
        last = read_u64(&key, 0);
    }
    Ok(last)
}

/// Writes out every keyspace's in-memory table and compacts it whole: the compaction filter
/// drops the rows at or below the floor, and the sweep's removals take their rows along.
fn compact(store: &Store) -> Result<(), StoreError> {
    let keyspaces = &store.keyspaces;
    for keyspace in [
        &keyspaces.responses,
        &keyspaces.response_ids,
        &keyspaces.item_ids,
        &keyspaces.item_digests,
    ] {
        keyspace
            .rotate_memtable_and_wait()
            .map_err(unavailable("write out a keyspace"))?;
        keyspace
            .major_compact()
            .map_err(unavailable("compact a keyspace"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::Command;
    use std::sync::atomic::AtomicU64;
    use std::time::{Duration, Instant};

    use super::super::tests::response;
    use super::super::{write_failed, EmbeddedStore, TUNING};
    use super::*;

    /// The store in `dir` with `max_disk_bytes`, the room on its disk read by `free_space`,
    /// checking its budget every 20 ms, committing at once.
    fn store(dir: &Path, max_disk_bytes: u64, free_space: FreeSpace) -> (EmbeddedStore, StateMeter) {
        let tuning = Tuning {
            max_disk_bytes,
            free_space,
            budget_every: Duration::from_millis(20),
            journal_allowance: 0,
            linger: Duration::ZERO,
            ..TUNING
        };
        let meter = StateMeter::default();
        (
            EmbeddedStore::open_tuned(dir, tuning, meter.clone()).unwrap(),
            meter,
        )
    }

    /// Records `count` responses from `first` on, each expiring a second after the one before.
    async fn record(store: &EmbeddedStore, first: usize, count: usize) {
        let meter = crate::metrics::LedgerMeter::new(&crate::metrics::Metrics::new());
        for n in first..first + count {
            let stored = response(&format!("resp_{n:06}"), (n % 250) as u8, 3600 + n as i64);
            store.queue_response(stored, meter.clone()).unwrap();
            if n % 1000 == 999 {
                // Lets the writer keep up with the queue.
                store.put_response(&response("resp_sync", 0, 60)).await.unwrap();
            }
        }
        store.put_response(&response("resp_sync", 0, 60)).await.unwrap();
    }

    #[tokio::test]
    async fn past_the_budget_the_oldest_records_go_first_and_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let budget = 2 * 1024 * 1024;
        let (store, meter) = store(dir.path(), budget, statvfs_free);
        record(&store, 0, 12_000).await;
        // The tree writes its in-memory tables out at 2 MiB each (the default [state] max_memory_bytes); these records fit in them, so
        // they are written out here, as the tree would in time.
        for keyspace in store.inner.store.keyspaces.keyed() {
            keyspace.rotate_memtable_and_wait().unwrap();
        }
        store
            .inner
            .store
            .keyspaces
            .responses
            .rotate_memtable_and_wait()
            .unwrap();
        // The writer checks the budget every 20 ms: wait until it has acted and the tree is
        // back within it (30 s at most).
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            let within = tables_bytes(&store.inner.store) <= budget;
            if meter.evicted_count() > 0 && within {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let evicted = meter.evicted_count();
        assert!(evicted > 0, "nothing evicted");
        // The oldest is forgotten (and read as unknown), the newest kept.
        assert_eq!(store.response("resp_000000").await.unwrap(), None);
        let found = store
            .items_by_id(&["fc_0123456789_resp_000000".into()])
            .await
            .unwrap();
        assert_eq!(found, vec![None]);
        assert!(store.response("resp_011999").await.unwrap().is_some());
        // Evicted in order: every response older than the oldest kept one is gone.
        let mut kept = 0;
        let mut gone_after_kept = 0;
        for n in (0..12_000).step_by(97) {
            match store.response(&format!("resp_{n:06}")).await.unwrap() {
                Some(_) => kept += 1,
                None if kept > 0 => gone_after_kept += 1,
                None => {}
            }
        }
        assert!(kept > 0);
        assert_eq!(gone_after_kept, 0, "a newer record went before an older one");
        assert!(tables_bytes(&store.inner.store) <= budget);
        let usage = store.disk_usage().await.unwrap();
        assert_eq!(usage.max_bytes, budget);
        // Reopened, the store still holds the newest.
        drop(store);
        let (store, _) = self::store(dir.path(), budget, statvfs_free);
        assert!(store.response("resp_011999").await.unwrap().is_some());
    }

    /// The room an emulated disk has left.
    static EMULATED_FREE: AtomicU64 = AtomicU64::new(u64::MAX);

    fn emulated_free(_: &Path) -> std::io::Result<u64> {
        Ok(EMULATED_FREE.load(Ordering::Relaxed))
    }

    /// A 4 MiB tmpfs mounted on a directory of its own, unmounted when dropped.
    struct SmallDisk {
        dir: tempfile::TempDir,
    }

    impl SmallDisk {
        /// Mounts one, if this process may (root, and `mount` works here).
        fn mount() -> Option<SmallDisk> {
            let dir = tempfile::tempdir().ok()?;
            let mounted = Command::new("mount")
                .args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"])
                .arg(dir.path())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|status| status.success());
            mounted.then_some(SmallDisk { dir })
        }
    }

    impl Drop for SmallDisk {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(self.dir.path()).status();
        }
    }

    /// A full disk refuses records (counted) and makes the store unavailable, never a crash;
    /// with room again it works. On a real 4 MiB tmpfs when this process may mount one (root),
    /// filled with a file of its own until too little room is left for a batch; otherwise the
    /// disk is emulated: the store's reading of the room left (statvfs) is replaced by a
    /// number the test sets, the smallest change that makes the writer meet a full disk.
    #[tokio::test]
    async fn a_full_disk_refuses_records_and_makes_the_store_unavailable_until_there_is_room() {
        let small = SmallDisk::mount();
        let scratch = tempfile::tempdir().unwrap();
        let (dir, free_space): (&Path, FreeSpace) = match &small {
            Some(disk) => (disk.dir.path(), statvfs_free),
            None => (scratch.path(), emulated_free),
        };
        let (store, meter) = store(&dir.join("state"), 1 << 30, free_space);
        store
            .put_response(&response("resp_before", 1, 600))
            .await
            .unwrap();
        // Fill the disk, leaving less than a batch and the reserve.
        let filler = dir.join("filler");
        match &small {
            Some(_) => {
                let free = statvfs_free(dir).unwrap();
                let fill = free.saturating_sub(DISK_RESERVE / 2);
                std::fs::write(&filler, vec![0u8; fill as usize]).unwrap();
            }
            None => EMULATED_FREE.store(DISK_RESERVE / 2, Ordering::Relaxed),
        }
        let err = store
            .put_response(&response("resp_refused", 2, 600))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, StoreError::Full(why) if why.contains("bytes free")),
            "{err:?}"
        );
        assert_eq!(meter.refused_count(), 1);
        // Lookups and the ping say so, rather than read "no record".
        for err in [
            store.response("resp_before").await.unwrap_err(),
            store.items_by_digest(&[[1; 32]]).await.unwrap_err(),
            store.ping().await.unwrap_err(),
        ] {
            assert!(matches!(err, StoreError::Full(_)), "{err:?}");
        }
        // Room again: the store answers and writes.
        match &small {
            Some(_) => std::fs::remove_file(&filler).unwrap(),
            None => EMULATED_FREE.store(u64::MAX, Ordering::Relaxed),
        }
        store.ping().await.unwrap();
        assert!(store.response("resp_before").await.unwrap().is_some());
        store.put_response(&response("resp_after", 3, 600)).await.unwrap();
        assert!(store.response("resp_after").await.unwrap().is_some());
        drop(store);
        drop(small);
    }

    #[test]
    fn enospc_from_the_tree_is_a_full_store_and_a_poisoned_tree_is_unavailable() {
        let full = fjall::Error::Io(std::io::Error::from(std::io::ErrorKind::StorageFull));
        assert!(matches!(write_failed("commit")(full), StoreError::Full(_)));
        let poisoned = write_failed("commit")(fjall::Error::Poisoned);
        assert!(
            matches!(&poisoned, StoreError::Unavailable(why) if why.contains("restart replaygate")),
            "{poisoned:?}"
        );
    }
}
