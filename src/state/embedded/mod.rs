//! The `embedded` backend: an LSM tree ([fjall]) in `<[state] path>/ledger/`, kept across
//! restarts.
//!
//! # Layout
//!
//! Four keyspaces ([`tables`]), every id in them keyed by its 16-byte hash ([`StoreKey`]): the
//! responses in the order they expire (a batch of records sorts after what is there; a sweep
//! reads from the start), an index from a response's id to where its row is, and two from an
//! item's id and from its digest to the response that holds it.
//!
//! Why an LSM tree: every record writes rows under random keys (ids are hashes). In a B-tree
//! each dirties a page of its own, and the trees outgrow any cache, so a record cost more the
//! bigger the file (redb: 32 µs of CPU a record at 100,000 records, 67 at a million); an LSM
//! tree writes them to a journal and sorts them in memory, then writes whole tables (15 and 28
//! µs; docs/benchmarks.md).
//!
//! # Writes
//!
//! One writer thread makes every write. Callers hand it their records through a bounded queue
//! ([`WRITE_QUEUE`]); it encodes them, so a caller (an answer's task) does not. A full queue fails at once with
//! [`StoreError::Unavailable`]`("write queue full")`, which the ledger counts as a failed
//! record. After a request arrives the thread sleeps [`LINGER`], so the requests behind it
//! gather without waking it one by one, then puts every waiting record (up to [`MAX_BATCH`])
//! into one atomic batch and tells each request's owner how it ended. `put_response` waits for
//! that. `queue_response`, which the ledger records answers with, does not: the record is
//! remembered ([`Recent`]) as it is queued, so lookups find it at once, and the writer counts
//! the commit on the ledger's counters. No answer waits on the disk, and the proxy's threads do
//! not take turns for each record, which on one core cost more than the writes
//! (docs/benchmarks.md, "the embedded store's queue").
//!
//! Durability: a batch is visible to every read when it commits, and its journal entry is
//! handed to the OS then (fjall writes its journal buffer out with each batch); it is written
//! to disk (an fdatasync of the journal) at most [`DURABLE_EVERY`] after the first batch not
//! yet written, with every sweep, and when the store closes. A record lost reads as unknown
//! provenance (never a violation without teams; `unknown_state` with them), so a process that
//! dies loses
//! only the records queued and not yet committed (up to [`LINGER`] of them), and a machine that
//! goes down also the last [`DURABLE_EVERY`] of commits, and nothing else: a batch is atomic,
//! and recovery replays the journal up to the last whole batch.
//!
//! # Reads
//!
//! Reads run on tokio's blocking pool ([`tokio::task::spawn_blocking`]), each from one
//! snapshot: a read the tree's cache cannot answer reads the disk, and on a two-core host a
//! stalled runtime worker is half the proxy.
//!
//! Two things in memory spare most lookups that trip: a Bloom filter of every key in the store
//! ([`Filters`], 2 MiB to 64 MiB, filled from the keyspaces' keys when the store opens and as
//! records are queued, and grown as the store grows) answers "not recorded" at once, and the records this process wrote or read
//! lately ([`Recent`], up to 16 MiB of them) answer the next turn's lookups. Only a key that is
//! in neither goes to the tree, and what that read finds is kept in [`Recent`] for the next.
//!
//! # Expiry
//!
//! Reads treat an expired entry as absent. Every row holds its expiry: the tree's compactions
//! drop the expired index rows ([`expiry`]), and the writer thread sweeps the expired
//! responses' rows (kept in the order they expire, they sit in tables that compactions move
//! down whole, unread): at most [`SWEEP_LIMIT`] a batch, every [`SWEEP_EVERY`], and again right
//! away while a sweep finds a full load. [`EmbeddedStore::sweep`] asks for one sweep now.
//!
//! # Sharing
//!
//! The tree locks its directory. A directory already open in this process is shared by every
//! store opened on it ([`EmbeddedStore::open`]); another process fails to open it, with
//! [`StoreError::Unavailable`] rather than waiting. Rate limits are counted in this process, as
//! with `memory`: the embedded store serves one process.
//!
//! [fjall]: https://fjall-rs.github.io

use super::loss_epoch::LossEpoch;
use std::collections::BTreeMap;
use std::fmt::Display;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use fjall::{Database, Keyspace};
use tokio::sync::oneshot;

use self::budget::DiskBudget;
use self::filters::Filters;
use self::recent::Recent;
use self::tables::Store;
use self::tables::{digest_key, item_key, record_keys, response_key, Keyspaces, ReadResponse};
use super::key_filter::{KeyFilter, StoreKey};
use super::local_spend::LocalCounters;
use super::{now_unix, LocalRateLimiter, StoreError};
use crate::ledger::{StoredItem, StoredResponse};

mod budget;
mod expiry;
mod filters;
mod recent;
mod spend;
mod tables;
mod tally;
mod writer;
use crate::metrics::{LedgerMeter, LedgerOp, LedgerResult, StateMeter};

pub(crate) use crate::config::{DEFAULT_MAX_DISK_BYTES, DEFAULT_MAX_MEMORY_BYTES};

/// How often the writer compares the tree's size with `[state] max_disk_bytes`.
const BUDGET_EVERY: Duration = Duration::from_secs(5);

/// The longest a committed batch waits to be made durable (written to disk with an fsync).
pub(super) const DURABLE_EVERY: Duration = Duration::from_millis(500);

/// The tree's directory inside the state directory.
const TREE_DIR: &str = "ledger";
/// How many write requests may wait for the writer thread (about 1 KB each): at the proxy's
/// saturation with a 20 ms linger a queue of 1,024 refused one record in eight, this one none.
const WRITE_QUEUE: usize = 4096;
/// The most write requests committed in one batch.
const MAX_BATCH: usize = 4096;
/// How long the writer sleeps, after a request arrives, so more gather to commit with it: a
/// batch's own costs (waking the thread, a journal write) are shared by more records, and no
/// lookup waits for it (queued records are remembered). Chosen with the redb store, where 20 ms
/// cut a record's cost by a fifth against 2 ms (docs/benchmarks.md). What gathers meanwhile,
/// and while a batch commits, is what [`WRITE_QUEUE`] is sized for.
const LINGER: Duration = Duration::from_millis(20);
/// The most expired responses' rows one sweep removes (one batch).
const SWEEP_LIMIT: usize = 4096;
/// How often the writer thread sweeps when the last sweep finished the job.
const SWEEP_EVERY: Duration = Duration::from_secs(60);
/// The most the journal holds before the tree writes out its in-memory tables (fjall's default
/// is 512 MiB): bounds the disk it takes and the replay after a crash.
const JOURNAL_BYTES: u64 = 64 * 1024 * 1024;
/// The key filter's smallest size: 2^24 bits (2 MiB), about one false "maybe" in a thousand
/// lookups with a million keys stored.
const KEY_FILTER_BITS_LOG2: u32 = 24;
/// The key filter's largest size: 2^29 bits (64 MiB), for about 33 million keys.
const KEY_FILTER_MAX_BITS_LOG2: u32 = 29;

/// How `[state] max_memory_bytes` is shared: half to the four keyspaces' in-memory tables (an
/// eighth each; fjall's default is 64 MiB each), a quarter to the tree's block cache (fjall's
/// default is 32 MiB) and a quarter to the recent records. At the default 16 MiB: 2 MiB
/// tables, a 4 MiB cache and 4 MiB of recent records, some 5,000 answers (a second of the load
/// benchmark's, far more of an agent fleet's). Lookups are answered from the recent records and
/// the key filter first; the cache serves the rest. The key filter is apart: its size follows
/// the keys stored (2 MiB up to [`KEY_FILTER_MAX_BITS_LOG2`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct MemoryShares {
    /// The largest one keyspace's in-memory table grows before it is written out.
    pub(super) memtable: u64,
    /// The tree's block cache.
    pub(super) cache: u64,
    /// The most encoded bytes of recent records kept in memory.
    pub(super) recent: u64,
}

impl MemoryShares {
    /// The shares of `max_memory_bytes`.
    pub(super) const fn of(max_memory_bytes: u64) -> MemoryShares {
        MemoryShares {
            memtable: max_memory_bytes / 8,
            cache: max_memory_bytes / 4,
            recent: max_memory_bytes / 4,
        }
    }
}

/// The `embedded` backend: `<dir>/ledger/`, written by one thread that batches and syncs,
/// read on the blocking pool, swept of expired entries every minute. One process at a time.
/// Clones share the same tree, writer thread and rate limits; the last one to go waits for the
/// writer to finish its batch and closes the tree.
#[derive(Debug, Clone)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Arc<Store>,
    /// `None` only while dropping, so the writer thread sees the queue close.
    queue: Option<SyncSender<Command>>,
    writer: Option<JoinHandle<()>>,
    limiter: LocalRateLimiter,
    /// The budgets' spend counters, written to the tree by the writer thread.
    counters: Arc<LocalCounters>,
    /// Every key in the tree and the queue (and some that have left them).
    filters: Arc<Filters>,
    /// `[state] max_disk_bytes`, the floor it raised, and whether the disk is full.
    budget: Arc<DiskBudget>,
    /// What this process committed lately.
    recent: Recent,
    /// Moved when records may be gone before their expiry: evicted for the disk budget, a
    /// batch that lookups saw and that did not commit, a response written again.
    losses: LossEpoch,
}

/// Knobs the tests turn down.
#[derive(Debug, Clone, Copy)]
struct Tuning {
    queue: usize,
    sweep_limit: usize,
    sweep_every: Duration,
    /// How long a committed batch may wait to be written to disk; zero writes every batch.
    durable_every: Duration,
    /// How long the writer gathers requests into one batch.
    linger: Duration,
    /// The key filter's smallest and largest sizes, as powers of two.
    filter_bits_log2: (u32, u32),
    /// `[state] max_disk_bytes`.
    max_disk_bytes: u64,
    /// How often the writer compares the tree's size with the budget.
    budget_every: Duration,
    /// How the room left on the filesystem is read (a test emulates a full disk with it).
    free_space: budget::FreeSpace,
    /// The room a batch must leave on the filesystem.
    disk_reserve: u64,
    /// What of `max_disk_bytes` is left to the journal: the tables get the rest.
    journal_allowance: u64,
    /// `[state] max_memory_bytes`, shared out.
    memory: MemoryShares,
}

const TUNING: Tuning = Tuning {
    queue: WRITE_QUEUE,
    sweep_limit: SWEEP_LIMIT,
    sweep_every: SWEEP_EVERY,
    durable_every: DURABLE_EVERY,
    linger: LINGER,
    filter_bits_log2: (KEY_FILTER_BITS_LOG2, KEY_FILTER_MAX_BITS_LOG2),
    max_disk_bytes: DEFAULT_MAX_DISK_BYTES,
    budget_every: BUDGET_EVERY,
    free_space: budget::statvfs_free,
    disk_reserve: budget::DISK_RESERVE,
    journal_allowance: JOURNAL_BYTES,
    memory: MemoryShares::of(DEFAULT_MAX_MEMORY_BYTES),
};

/// What the writer thread is asked to do.
enum Command {
    Put {
        record: Record,
        ack: Ack,
    },
    /// Spend counters changed: write them (docs/budgets.md#counters).
    Spend,
    /// Sent by the tests' [`EmbeddedStore::sweep`]; the writer also sweeps on its own.
    #[cfg_attr(not(test), allow(dead_code))]
    Sweep {
        now: u64,
        ack: oneshot::Sender<Result<usize, StoreError>>,
    },
}

/// Who hears how a put's commit ended.
enum Ack {
    /// The caller, waiting for it (the tests' `put_response`).
    #[cfg(test)]
    Caller(oneshot::Sender<Result<(), StoreError>>),
    /// Nobody waits: the ledger's counters count it (`record` `ok` or `error`).
    Meter(LedgerMeter),
}

impl Ack {
    fn send(self, result: &Result<(), StoreError>) {
        match self {
            #[cfg(test)]
            Ack::Caller(caller) => {
                let _ = caller.send(result.clone());
            }
            Ack::Meter(meter) => {
                let counted = if result.is_ok() {
                    LedgerResult::Ok
                } else {
                    LedgerResult::Error
                };
                meter.count(LedgerOp::Record, counted);
            }
        }
    }
}

/// A response to write (the writer encodes it, with its batch).
struct Record {
    response: Arc<StoredResponse>,
    /// Its keys ([`record_keys`]), which the writer adds to the key filters as it writes it
    /// (shared with the record's entry among the recent records).
    keys: Arc<[StoreKey]>,
    /// The key filter lacked the response's key when it was queued: neither the tree nor the
    /// queue held a record of it.
    new: bool,
}

impl EmbeddedStore {
    /// Opens (creating if needed) the store in `dir`, creating the directory too, and starts its
    /// writer thread. Blocking file I/O: call it at startup or off the async runtime. After a
    /// crash the open replays the journal first.
    ///
    /// A directory already open in this process is shared, not opened again (two proxies in
    /// one process, a test suite's many). Another process that has it open holds its lock: the
    /// open fails with [`StoreError::Unavailable`].
    ///
    /// Its disk budget is [`DEFAULT_MAX_DISK_BYTES`], its metrics counted nowhere: see
    /// [`EmbeddedStore::open_with`].
    #[cfg(test)]
    pub(crate) fn open(dir: &Path) -> Result<EmbeddedStore, StoreError> {
        EmbeddedStore::open_with(
            dir,
            DEFAULT_MAX_DISK_BYTES,
            DEFAULT_MAX_MEMORY_BYTES,
            StateMeter::default(),
        )
    }

    /// [`EmbeddedStore::open`] with `[state] max_disk_bytes` and `max_memory_bytes` and the
    /// metrics its evictions and refused writes are counted on. A directory already open in
    /// this process keeps the budgets and metrics it was opened with.
    pub(crate) fn open_with(
        dir: &Path,
        max_disk_bytes: u64,
        max_memory_bytes: u64,
        meter: StateMeter,
    ) -> Result<EmbeddedStore, StoreError> {
        static OPEN: Mutex<BTreeMap<PathBuf, Weak<Inner>>> = Mutex::new(BTreeMap::new());
        std::fs::create_dir_all(dir)
            .map_err(|e| StoreError::Unavailable(format!("cannot create {}: {e}", dir.display())))?;
        let key = std::fs::canonicalize(dir)
            .map_err(|e| StoreError::Unavailable(format!("cannot read {}: {e}", dir.display())))?;
        let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        open.retain(|_, inner| inner.strong_count() > 0);
        if let Some(inner) = open.get(&key).and_then(Weak::upgrade) {
            return Ok(EmbeddedStore { inner });
        }
        let tuning = Tuning {
            max_disk_bytes,
            memory: MemoryShares::of(max_memory_bytes),
            ..TUNING
        };
        let store = EmbeddedStore::open_tuned(dir, tuning, meter)?;
        open.insert(key, Arc::downgrade(&store.inner));
        Ok(store)
    }

    /// [`EmbeddedStore::open`], not shared, whose reading of the room left on its disk is
    /// `free_space` (a test emulates a full disk with it), committing each record at once.
    #[cfg(test)]
    pub(in crate::state) fn open_on_emulated_disk(
        dir: &Path,
        free_space: fn(&Path) -> std::io::Result<u64>,
    ) -> Result<EmbeddedStore, StoreError> {
        let tuning = Tuning {
            free_space,
            linger: Duration::ZERO,
            ..TUNING
        };
        EmbeddedStore::open_tuned(dir, tuning, StateMeter::default())
    }

    /// [`EmbeddedStore::open`], not shared, whose writer thread holds at most `queue` records
    /// waiting and sleeps `linger` after each one arrives before it commits: the tests' slow
    /// write (a commit ends no sooner than `linger` after its record was queued).
    #[cfg(test)]
    pub(crate) fn open_slow(dir: &Path, queue: usize, linger: Duration) -> Result<EmbeddedStore, StoreError> {
        let tuning = Tuning {
            queue,
            linger,
            ..TUNING
        };
        EmbeddedStore::open_tuned(dir, tuning, StateMeter::default())
    }

    /// [`EmbeddedStore::open`] of an existing directory, not shared, with `tuning`.
    fn open_tuned(dir: &Path, tuning: Tuning, meter: StateMeter) -> Result<EmbeddedStore, StoreError> {
        let path = dir.join(TREE_DIR);
        let floor = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let filter_floor = floor.clone();
        let db = Database::builder(&path)
            // One background worker: with more, the first one hands every compaction message
            // it receives back to the queue while another works, and so spins a core (as much
            // as 96% of the process's instructions under a session load, counted by callgrind:
            // docs/benchmarks.md). One worker flushes and compacts in turn.
            .worker_threads(1)
            .with_compaction_filter_factories(Arc::new(move |name: &str| {
                expiry::factory_for(name, &filter_floor)
            }))
            .cache_size(tuning.memory.cache)
            .max_journaling_size(JOURNAL_BYTES)
            .open()
            .map_err(|e| open_error(&path, e))?;
        let keyspaces = Keyspaces::open(&db, tuning.memory.memtable)?;
        // Counters are few and small: a quarter of one keyspace's share holds thousands of writes.
        let spend = spend::open(&db, tuning.memory.memtable / 4)?;
        let budget = Arc::new(DiskBudget::new(path.clone(), floor.clone(), &tuning, meter));
        let store = Arc::new(Store {
            db,
            keyspaces,
            spend,
            floor,
        });
        let counters = Arc::new(LocalCounters::written_out());
        spend::restore(&store.spend, &store.db.snapshot(), &counters, now_unix())?;
        let held: u64 = store
            .keyspaces
            .keyed()
            .iter()
            .map(|k| k.approximate_len() as u64)
            .sum();
        let (min_bits, max_bits) = tuning.filter_bits_log2;
        let filter = KeyFilter::new(Filters::bits_for(held, min_bits, max_bits));
        let loaded = tables::add_keys(&store.keyspaces, &store.db.snapshot(), &filter)?;
        let filters = Arc::new(Filters::new(filter, loaded, max_bits));
        let (queue, requests) = mpsc::sync_channel(tuning.queue);
        let (writer_store, writer_filters, writer_budget) = (store.clone(), filters.clone(), budget.clone());
        let writer_counters = counters.clone();
        let losses = LossEpoch::default();
        let writer_losses = losses.clone();
        let writer = std::thread::Builder::new()
            .name("ledger-writer".into())
            .spawn(move || {
                writer::write_loop(
                    &writer_store,
                    &writer_filters,
                    &writer_budget,
                    &requests,
                    tuning,
                    &writer_losses,
                    &writer_counters,
                )
            })
            .map_err(unavailable("cannot start the ledger writer"))?;
        Ok(EmbeddedStore {
            inner: Arc::new(Inner {
                store,
                queue: Some(queue),
                writer: Some(writer),
                limiter: LocalRateLimiter::default(),
                counters,
                filters,
                budget,
                recent: Recent::new(tuning.memory.recent, (tuning.queue + MAX_BATCH) as u64),
                losses,
            }),
        })
    }

    /// The loss epoch ([`StateStore::loss_epoch`](super::StateStore::loss_epoch)).
    pub(super) fn loss_epoch(&self) -> u64 {
        self.inner.losses.current()
    }

    /// Writes `response` and waits for the commit (the tests' write; the ledger queues).
    #[cfg(test)]
    pub(super) async fn put_response(&self, response: &StoredResponse) -> Result<(), StoreError> {
        let response = Arc::new(response.clone());
        let (ack, done) = oneshot::channel();
        let (encoded, keys) = self.enqueue_put(response.clone(), Ack::Caller(ack))?;
        done.await.map_err(|_| writer_stopped())??;
        self.inner.recent.remember(response, encoded, keys);
        Ok(())
    }

    /// Queues `response` for the writer thread and remembers it, without waiting for the
    /// commit: lookups find it from now on, and the writer counts the commit's outcome on
    /// `meter`. A full queue fails at once.
    pub(super) fn queue_response(
        &self,
        response: StoredResponse,
        meter: LedgerMeter,
    ) -> Result<(), StoreError> {
        let response = Arc::new(response);
        let (encoded, keys) = self.enqueue_put(response.clone(), Ack::Meter(meter))?;
        self.inner.recent.remember(response, encoded, keys);
        Ok(())
    }

    /// Hands `response` to the writer thread, which encodes it with its batch, off the
    /// caller's path; its keys are in the filter from now on. Returns the size its encoding is
    /// reckoned at ([`StoredResponse::json_len_hint`]), and its keys ([`record_keys`]).
    fn enqueue_put(
        &self,
        response: Arc<StoredResponse>,
        ack: Ack,
    ) -> Result<(usize, Arc<[StoreKey]>), StoreError> {
        let encoded = response.json_len_hint();
        let keys: Arc<[StoreKey]> = record_keys(&response).collect();
        // Asked before the keys go in. Two records of one response queued at once may both be
        // told "new"; the later then leaves the earlier's row behind, which a sweep drops.
        let new = !self.inner.filters.may_contain(&keys[0]);
        self.inner.filters.insert(&keys);
        self.send(Command::Put {
            record: Record {
                response,
                keys: Arc::clone(&keys),
                new,
            },
            ack,
        })?;
        Ok((encoded, keys))
    }

    fn send(&self, command: Command) -> Result<(), StoreError> {
        let queue = self.inner.queue.as_ref().ok_or_else(writer_stopped)?;
        queue.try_send(command).map_err(|e| match e {
            TrySendError::Full(_) => StoreError::Unavailable("write queue full".into()),
            TrySendError::Disconnected(_) => writer_stopped(),
        })
    }

    pub(super) async fn response(&self, id: &str) -> Result<Option<StoredResponse>, StoreError> {
        self.inner.budget.health.check()?;
        let key = response_key(id);
        if let Some(response) = self.inner.recent.holder(&key, self.inner.budget.now()) {
            if response.id == id {
                return Ok(Some(StoredResponse::clone(&response)));
            }
        }
        if !self.inner.filters.may_contain(&key) {
            return Ok(None);
        }
        let id = id.to_owned();
        self.read_keeping(move |store, now| {
            let mut reader = store.reader(now);
            let found = reader.response(&id)?;
            Ok((found, reader.into_read().collect()))
        })
        .await
    }

    pub(super) async fn items_by_id(&self, ids: &[String]) -> Result<Vec<Option<StoredItem>>, StoreError> {
        self.items(
            ids,
            |keyspaces| &keyspaces.item_ids,
            |id| item_key(id),
            |response, id| response.item_by_id(id),
        )
        .await
    }

    pub(super) async fn items_by_digest(
        &self,
        digests: &[[u8; 32]],
    ) -> Result<Vec<Option<StoredItem>>, StoreError> {
        self.items(
            digests,
            |keyspaces| &keyspaces.item_digests,
            digest_key,
            |response, digest| response.item_by_digest(digest),
        )
        .await
    }

    /// The items of `keys` (ids or digests), in order: from memory where it remembers them,
    /// else through `index` in the tree (`key` the key of each there, in memory and in the
    /// filter, `find` the item in its response), unless the filter says the tree has none.
    async fn items<K: Clone + Send + 'static>(
        &self,
        keys: &[K],
        index: fn(&Keyspaces) -> &Keyspace,
        key: fn(&K) -> StoreKey,
        find: fn(&StoredResponse, &K) -> Option<StoredItem>,
    ) -> Result<Vec<Option<StoredItem>>, StoreError> {
        self.inner.budget.health.check()?;
        let now = self.inner.budget.now();
        let mut unsure = Vec::new();
        let mut found: Vec<Option<StoredItem>> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let store_key = key(k);
                let item = self
                    .inner
                    .recent
                    .holder(&store_key, now)
                    .and_then(|response| find(&response, k));
                if item.is_none() && self.inner.filters.may_contain(&store_key) {
                    unsure.push(i);
                }
                item
            })
            .collect();
        if unsure.is_empty() {
            return Ok(found);
        }
        let keys: Vec<K> = unsure.iter().map(|&i| keys[i].clone()).collect();
        let items = self
            .read_keeping(move |store, now| {
                let mut reader = store.reader(now);
                let index = index(&store.keyspaces);
                let items = keys
                    .iter()
                    .map(|k| reader.item(index, &key(k), |response| find(response, k)))
                    .collect::<Result<Vec<_>, StoreError>>()?;
                Ok((items, reader.into_read().collect()))
            })
            .await?;
        unsure
            .into_iter()
            .zip(items)
            .for_each(|(i, item)| found[i] = item);
        Ok(found)
    }

    pub(super) fn hit_rate(&self, key: &str, per_minute: NonZeroU32) -> Result<(), Duration> {
        self.inner.limiter.check(key, per_minute)
    }

    pub(super) async fn ping(&self) -> Result<(), StoreError> {
        if self.inner.writer.as_ref().is_none_or(JoinHandle::is_finished) {
            return Err(writer_stopped());
        }
        self.inner.budget.recheck()?;
        self.read(|store, _| {
            // A point read that finds nothing: cheap, and through the same path as a lookup.
            store
                .keyspaces
                .response_ids
                .get([0u8; 16])
                .map_err(unavailable("response ids"))?;
            // Hands the journal's buffer to the OS: fails once a write to disk has failed (the
            // tree then refuses every write until it is reopened).
            store
                .db
                .persist(fjall::PersistMode::Buffer)
                .map_err(write_failed("the ledger's tree"))
        })
        .await
    }

    /// The disk the tree takes, and `[state] max_disk_bytes`.
    pub(super) async fn disk_usage(&self) -> Result<super::DiskUsage, StoreError> {
        let budget = self.inner.budget.clone();
        let max_bytes = budget.max_bytes;
        let used_bytes = self.read(move |store, _| budget.used(store)).await?;
        Ok(super::DiskUsage {
            used_bytes,
            max_bytes,
        })
    }

    /// Writes out every keyspace and compacts it whole, as the tree does in time (for a
    /// measurement of the settled size).
    #[cfg(test)]
    pub(crate) fn compact_for_measure(&self) {
        let keyspaces = &self.inner.store.keyspaces;
        for keyspace in [
            &keyspaces.responses,
            &keyspaces.response_ids,
            &keyspaces.item_ids,
            &keyspaces.item_digests,
        ] {
            keyspace.rotate_memtable_and_wait().unwrap();
            keyspace.major_compact().unwrap();
        }
    }

    /// Removes the rows of responses expired at `now` (at most 4096, one batch), through the
    /// writer thread; their other rows go in compactions. Returns how many it removed.
    #[cfg(test)]
    pub(crate) async fn sweep(&self, now: u64) -> Result<usize, StoreError> {
        let (ack, done) = oneshot::channel();
        self.send(Command::Sweep { now, ack })?;
        done.await.map_err(|_| writer_stopped())?
    }

    /// [`EmbeddedStore::read`] of a lookup that also hands back the responses it read: they
    /// go to the recent-records cache where it allows ([`Recent::fill`], marked before the read).
    async fn read_keeping<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Store, u64) -> Result<(T, ReadResponses), StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let mark = self.inner.recent.mark();
        let (found, responses) = self.read(read).await?;
        for (response, encoded) in responses {
            self.inner.recent.fill(Arc::new(response), encoded, mark);
        }
        Ok(found)
    }

    /// Runs `read` on the blocking pool with the store and the time now.
    async fn read<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Store, u64) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let store = self.inner.store.clone();
        tokio::task::spawn_blocking(move || read(&store, now_unix()))
            .await
            .map_err(unavailable("ledger read task"))?
    }
}

impl Drop for Inner {
    /// Closes the queue and waits for the writer to commit what it holds and write it to disk,
    /// so the tree is closed (and its lock released) when the last clone goes.
    fn drop(&mut self) {
        self.queue = None;
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// The live responses a lookup read from the tree, each with the length of its row.
type ReadResponses = Vec<ReadResponse>;

fn open_error(path: &Path, e: fjall::Error) -> StoreError {
    match e {
        fjall::Error::Locked => StoreError::Unavailable(format!(
            "{} is already open (by another replaygate process, or another store in this one)",
            path.display()
        )),
        e => StoreError::Unavailable(format!("cannot open {}: {e}", path.display())),
    }
}

fn unavailable<E: Display>(what: &'static str) -> impl Fn(E) -> StoreError {
    move |e| StoreError::Unavailable(format!("{what}: {e}"))
}

/// The error of a failed write to the tree: [`StoreError::Full`] when the disk is (ENOSPC);
/// unavailable otherwise, and after a failed write to disk, which leaves the tree refusing
/// every write until the process restarts.
fn write_failed(what: &'static str) -> impl Fn(fjall::Error) -> StoreError {
    move |e| match e {
        fjall::Error::Io(io) if io.kind() == std::io::ErrorKind::StorageFull => {
            StoreError::Full(format!("{what}: the disk is full: {io}"))
        }
        fjall::Error::Poisoned => StoreError::Unavailable(format!(
            "{what}: the ledger's tree refuses writes since a write to disk failed (a full disk?); \
             restart replaygate once the disk has room"
        )),
        e => StoreError::Unavailable(format!("{what}: {e}")),
    }
}

fn writer_stopped() -> StoreError {
    StoreError::Unavailable("the ledger writer has stopped".into())
}

/// The embedded store's own tests (its tree, cache, filter, writer, sweeps, migration); what
/// every backend does is in `super::super::conformance`.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{ItemRecord, Owner, ResponseRecord, StoredContent};
    use std::time::Instant;
    use tables::Tables;

    /// A response with one reasoning item (`rs_<id>`, digest `[digest; 32]`) and one function
    /// call without encrypted content (`fc_<id>`), expiring `expires_in` seconds from now.
    pub(super) fn response(id: &str, digest: u8, expires_in: i64) -> StoredResponse {
        let now = now_unix();
        let item = |prefix: &str, item_type: &str, encrypted: bool, digest: u8| ItemRecord {
            id: Some(format!("{prefix}_0123456789_{id}")),
            item_type: item_type.to_owned().into(),
            call_id: (!encrypted).then(|| format!("call_{id}")),
            digest: [digest; 32],
            has_encrypted_content: encrypted,
            preceded_by: None,
        };
        let record = ResponseRecord {
            id: id.into(),
            model: Some("m".into()),
            items: vec![
                item("rs", "reasoning", true, digest),
                item("fc", "function_call", false, 0),
            ],
        };
        let owner = Owner {
            provider: "openai".into(),
            model: Some("m".into()),
        };
        let mut stored = StoredResponse::new(record, owner, Some("team".into()), None, now, 60);
        stored.expires_unix = now.saturating_add_signed(expires_in);
        stored
    }

    /// `[state] max_memory_bytes` reaches the store: a quarter of it for the recent records,
    /// the rest shared as docs/operations.md says.
    #[test]
    fn the_memory_budget_is_shared_out_to_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            EmbeddedStore::open_with(dir.path(), DEFAULT_MAX_DISK_BYTES, 8 << 20, StateMeter::default())
                .unwrap();
        assert_eq!(store.inner.recent.budget(), 2 << 20);
        let shares = MemoryShares::of(DEFAULT_MAX_MEMORY_BYTES);
        assert_eq!(
            (shares.memtable, shares.cache, shares.recent),
            (2 << 20, 4 << 20, 4 << 20)
        );
    }

    fn tuned(dir: &Path, queue: usize, sweep_limit: usize, sweep_every: Duration) -> EmbeddedStore {
        let tuning = Tuning {
            queue,
            sweep_limit,
            sweep_every,
            ..TUNING
        };
        EmbeddedStore::open_tuned(dir, tuning, StateMeter::default()).unwrap()
    }

    /// One of the keyspaces.
    type Pick = fn(&Keyspaces) -> &Keyspace;
    const RESPONSES: Pick = |keyspaces| &keyspaces.responses;
    const RESPONSE_IDS: Pick = |keyspaces| &keyspaces.response_ids;
    const ITEM_IDS: Pick = |keyspaces| &keyspaces.item_ids;
    const ITEM_DIGESTS: Pick = |keyspaces| &keyspaces.item_digests;

    /// How many rows the keyspace `pick` holds.
    fn rows(store: &EmbeddedStore, pick: Pick) -> usize {
        pick(&store.inner.store.keyspaces).len().unwrap()
    }

    #[tokio::test]
    async fn what_a_lookup_reads_from_the_file_is_remembered() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        store.put_response(&response("resp_1", 1, 60)).await.unwrap();
        store.put_response(&response("resp_2", 1, 60)).await.unwrap();
        drop(store);
        // After a restart the cache is empty: the first lookups read the tree.
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let recent = &store.inner.recent;
        let cached = |id: &str| recent.holder(&response_key(id), now_unix()).is_some();
        assert!(!cached("resp_1") && !cached("resp_2"));
        assert!(store.response("resp_1").await.unwrap().is_some());
        assert!(cached("resp_1") && !cached("resp_2"));
        let found = store.items_by_id(&["fc_0123456789_resp_2".into()]).await.unwrap();
        assert_eq!(found[0].as_ref().unwrap().response_id, "resp_2");
        assert!(cached("resp_2"));
        let item = recent.holder(&item_key("fc_0123456789_resp_2"), now_unix());
        assert_eq!(item.unwrap().id, "resp_2");
    }

    /// Writes out every keyspace's memtable and compacts it whole, as the tree does in time.
    fn compact(store: &EmbeddedStore) {
        for pick in [RESPONSES, RESPONSE_IDS, ITEM_IDS, ITEM_DIGESTS] {
            let keyspace = pick(&store.inner.store.keyspaces);
            keyspace.rotate_memtable_and_wait().unwrap();
            keyspace.major_compact().unwrap();
        }
    }

    /// A store holding `resp_old` (expired 5 s ago, digest 1) and `resp_new` (digest 2).
    async fn old_and_new() -> (tempfile::TempDir, EmbeddedStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        store.put_response(&response("resp_old", 1, -5)).await.unwrap();
        store.put_response(&response("resp_new", 2, 60)).await.unwrap();
        (dir, store)
    }

    #[tokio::test]
    async fn a_sweep_removes_expired_responses_and_compactions_their_other_rows() {
        let (dir, store) = old_and_new().await;
        // Two responses, four items by id, two by digest.
        assert_eq!(rows(&store, RESPONSE_IDS), 2);
        assert_eq!(rows(&store, ITEM_IDS), 4);
        // The old response's row.
        assert_eq!(store.sweep(now_unix()).await.unwrap(), 1);
        assert_eq!(rows(&store, RESPONSES), 1);
        assert_eq!(store.sweep(now_unix()).await.unwrap(), 0);
        // Its id, its two items by id and its one by digest go when a compaction reads them.
        assert_eq!(rows(&store, RESPONSE_IDS), 2);
        compact(&store);
        assert_eq!(rows(&store, RESPONSES), 1);
        assert_eq!(rows(&store, RESPONSE_IDS), 1);
        assert_eq!(rows(&store, ITEM_IDS), 2);
        assert_eq!(rows(&store, ITEM_DIGESTS), 1);
        drop(store);
        let store = EmbeddedStore::open(dir.path()).unwrap();
        assert!(store.response("resp_new").await.unwrap().is_some());
        let found = store.items_by_digest(&[[1; 32], [2; 32]]).await.unwrap();
        assert!(found[0].is_none() && found[1].is_some());
    }

    #[tokio::test]
    async fn a_compaction_drops_expired_rows_of_every_keyspace_even_unswept() {
        let (_dir, store) = old_and_new().await;
        compact(&store);
        let counts = [RESPONSES, RESPONSE_IDS, ITEM_IDS, ITEM_DIGESTS].map(|pick| rows(&store, pick));
        assert_eq!(counts, [1, 1, 2, 1]);
    }

    #[tokio::test]
    async fn a_sweep_does_bounded_work() {
        let dir = tempfile::tempdir().unwrap();
        let store = tuned(dir.path(), 16, 3, SWEEP_EVERY);
        for n in 0..4 {
            let old = response(&format!("resp_old_{n}"), n, -5);
            store.put_response(&old).await.unwrap();
        }
        assert_eq!(store.sweep(now_unix()).await.unwrap(), 3);
        assert_eq!(rows(&store, RESPONSES), 1);
        assert_eq!(store.sweep(now_unix()).await.unwrap(), 1);
        assert_eq!(rows(&store, RESPONSES), 0);
    }

    #[tokio::test]
    async fn a_rewrite_moves_the_row_and_outlives_the_old_time() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let first = response("resp_1", 1, 10);
        store.put_response(&first).await.unwrap();
        store.put_response(&response("resp_1", 1, 100)).await.unwrap();
        assert_eq!((rows(&store, RESPONSES), rows(&store, RESPONSE_IDS)), (1, 1));
        // Past the first write's expiry, before the second's: nothing goes.
        assert_eq!(store.sweep(first.expires_unix + 1).await.unwrap(), 0);
        assert_eq!(rows(&store, RESPONSES), 1);
        assert!(store.response("resp_1").await.unwrap().is_some());
    }

    #[tokio::test]
    async fn a_rewrite_with_other_items_drops_the_old_items_index_rows() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open_tuned(dir.path(), TUNING, StateMeter::default()).unwrap();
        store.put_response(&response("resp_1", 1, 60)).await.unwrap();
        let mut other = response("resp_1", 2, 60);
        other.items.truncate(1);
        other.items[0].id = Some("rs_another_item_of_resp_1".into());
        store.put_response(&other).await.unwrap();
        assert_eq!((rows(&store, ITEM_IDS), rows(&store, ITEM_DIGESTS)), (1, 1));
        // Reopened, so the answers come from the tree.
        drop(store);
        let store = EmbeddedStore::open_tuned(dir.path(), TUNING, StateMeter::default()).unwrap();
        let ids = ["rs_0123456789_resp_1", "rs_another_item_of_resp_1"].map(String::from);
        let found = store.items_by_id(&ids).await.unwrap();
        assert!(found[0].is_none());
        assert_eq!(found[1].as_ref().unwrap().record.digest, [2; 32]);
        assert_eq!(store.items_by_digest(&[[1; 32]]).await.unwrap(), vec![None]);
    }

    #[tokio::test]
    async fn an_item_recorded_again_keeps_its_newer_row_when_the_older_response_goes() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open_tuned(dir.path(), TUNING, StateMeter::default()).unwrap();
        store.put_response(&response("resp_old", 1, -5)).await.unwrap();
        // The same items (ids and digest) in a later response.
        let mut newer = response("resp_old", 1, 60);
        newer.id = "resp_new".into();
        store.put_response(&newer).await.unwrap();
        // The old response and nothing else: its item rows point at the new one now.
        assert_eq!(store.sweep(now_unix()).await.unwrap(), 1);
        assert_eq!((rows(&store, ITEM_IDS), rows(&store, ITEM_DIGESTS)), (2, 1));
        drop(store);
        let store = EmbeddedStore::open_tuned(dir.path(), TUNING, StateMeter::default()).unwrap();
        let found = store
            .items_by_id(&["fc_0123456789_resp_old".into()])
            .await
            .unwrap();
        assert_eq!(found[0].as_ref().unwrap().response_id, "resp_new");
        let found = store.items_by_digest(&[[1; 32]]).await.unwrap();
        assert_eq!(found[0].as_ref().unwrap().response_id, "resp_new");
    }

    /// Commits `responses` in one batch through the store's tables, each told `new`.
    fn put_batch(store: &EmbeddedStore, responses: &[&StoredResponse], new: bool) {
        let tree = &store.inner.store;
        let mut tables = Tables::new(&tree.keyspaces);
        for response in responses {
            tables.put(response, &response.to_json(), new).unwrap();
        }
        tables.commit(&tree.db).unwrap();
    }

    #[tokio::test]
    async fn two_records_of_one_response_told_new_in_one_batch_leave_one_row() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open_tuned(dir.path(), TUNING, StateMeter::default()).unwrap();
        put_batch(
            &store,
            &[&response("resp_1", 1, 10), &response("resp_1", 1, 60)],
            true,
        );
        assert_eq!((rows(&store, RESPONSES), rows(&store, RESPONSE_IDS)), (1, 1));
    }

    #[tokio::test]
    async fn a_row_left_by_two_records_told_new_is_swept_without_the_later_ones_items() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open_tuned(dir.path(), TUNING, StateMeter::default()).unwrap();
        // Two records of one response both queued as new, written in two batches: the
        // earlier's row stays behind the later's.
        put_batch(&store, &[&response("resp_1", 1, -5)], true);
        let later = response("resp_1", 1, 60);
        put_batch(&store, &[&later], true);
        assert_eq!(rows(&store, RESPONSES), 2);
        // The left row goes; the later record's id and item rows stay.
        assert_eq!(store.sweep(now_unix()).await.unwrap(), 1);
        assert_eq!((rows(&store, RESPONSES), rows(&store, RESPONSE_IDS)), (1, 1));
        assert_eq!((rows(&store, ITEM_IDS), rows(&store, ITEM_DIGESTS)), (2, 1));
        drop(store);
        let store = EmbeddedStore::open_tuned(dir.path(), TUNING, StateMeter::default()).unwrap();
        assert_eq!(store.response("resp_1").await.unwrap(), Some(later));
        let found = store.items_by_id(&["fc_0123456789_resp_1".into()]).await.unwrap();
        assert_eq!(found[0].as_ref().unwrap().response_id, "resp_1");
    }

    #[tokio::test]
    async fn the_key_filter_grows_with_the_store_and_keeps_every_key() {
        let dir = tempfile::tempdir().unwrap();
        // 512 bits hold 32 keys well; a record has four.
        let tuning = Tuning {
            filter_bits_log2: (9, 13),
            ..TUNING
        };
        let store = EmbeddedStore::open_tuned(dir.path(), tuning, StateMeter::default()).unwrap();
        assert_eq!(store.inner.filters.bits_log2(), 9);
        let records: Vec<StoredResponse> = (0..60).map(|n| response(&format!("resp_{n}"), n, 60)).collect();
        for record in &records {
            store.put_response(record).await.unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while store.inner.filters.bits_log2() < 13 {
            assert!(Instant::now() < deadline, "the filter did not grow");
            // Each batch the writer commits may start the next growth.
            store.put_response(&records[0]).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let filters = &store.inner.filters;
        assert!(records
            .iter()
            .flat_map(record_keys)
            .all(|key| filters.may_contain(&key)));
        drop(store);
        // Reopened, it is sized for what the tree holds (240 keys: 2^12 bits).
        let store = EmbeddedStore::open_tuned(dir.path(), tuning, StateMeter::default()).unwrap();
        assert!(store.inner.filters.bits_log2() >= 12);
        assert!(store.response("resp_59").await.unwrap().is_some());
    }

    #[tokio::test]
    async fn the_writer_sweeps_on_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let store = tuned(dir.path(), 16, 2, Duration::from_millis(20));
        store.put_response(&response("resp_old", 1, -5)).await.unwrap();
        for _ in 0..200 {
            if rows(&store, RESPONSES) == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(rows(&store, RESPONSES), 0);
    }

    #[tokio::test]
    async fn data_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let stored = response("resp_1", 1, 60);
        {
            let store = EmbeddedStore::open(dir.path()).unwrap();
            store.put_response(&stored).await.unwrap();
            let clone = store.clone();
            drop(store);
            // The file stays open (locked to other openers) while a clone lives.
            assert!(EmbeddedStore::open_tuned(dir.path(), TUNING, StateMeter::default()).is_err());
            drop(clone);
        }
        let store = EmbeddedStore::open(dir.path()).unwrap();
        assert!(dir.path().join(TREE_DIR).is_dir());
        assert_eq!(store.response("resp_1").await.unwrap(), Some(stored));
        assert!(store.items_by_digest(&[[1; 32]]).await.unwrap()[0].is_some());
        assert_eq!(rows(&store, RESPONSE_IDS), 1);
    }

    /// Waits (at most 10 s) until `meter` has counted `records` committed records.
    async fn committed(meter: &LedgerMeter, records: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while meter.get(LedgerOp::Record, LedgerResult::Ok) < records {
            assert!(Instant::now() < deadline, "queued records were not all committed");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_queued_record_is_found_at_once_counted_when_committed_and_kept_on_close() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = crate::metrics::Metrics::new();
        let meter = LedgerMeter::new(&metrics);
        let stored = response("resp_q", 3, 60);
        {
            let store = EmbeddedStore::open(dir.path()).unwrap();
            store.queue_response(stored.clone(), meter.clone()).unwrap();
            // Found before its commit: the next turn's lookup does not wait for the file.
            assert_eq!(store.response("resp_q").await.unwrap(), Some(stored.clone()));
            committed(&meter, 1).await;
            assert_eq!(meter.get(LedgerOp::Record, LedgerResult::Error), 0);
            store
                .queue_response(response("resp_last", 4, 60), meter.clone())
                .unwrap();
        }
        // Closing waits for the writer, so a record queued last is in the file.
        let store = EmbeddedStore::open(dir.path()).unwrap();
        assert_eq!(store.response("resp_q").await.unwrap(), Some(stored));
        assert!(store.response("resp_last").await.unwrap().is_some());
        assert_eq!(meter.get(LedgerOp::Record, LedgerResult::Ok), 2);
    }

    #[tokio::test]
    async fn a_lookup_mixing_remembered_unknown_and_file_only_keys_keeps_their_order() {
        let dir = tempfile::tempdir().unwrap();
        EmbeddedStore::open_tuned(dir.path(), TUNING, StateMeter::default())
            .unwrap()
            .put_response(&response("resp_1", 1, 60))
            .await
            .unwrap();
        // Reopened: resp_1 is only in the file, resp_2 is also remembered.
        let store = EmbeddedStore::open_tuned(dir.path(), TUNING, StateMeter::default()).unwrap();
        store.put_response(&response("resp_2", 2, 60)).await.unwrap();
        let ids = [
            "fc_0123456789_resp_2",
            "fc_0123456789_never",
            "fc_0123456789_resp_1",
        ]
        .map(String::from);
        let found = store.items_by_id(&ids).await.unwrap();
        let owners: Vec<_> = found
            .iter()
            .map(|item| item.as_ref().map(|i| i.response_id.as_str()))
            .collect();
        assert_eq!(owners, [Some("resp_2"), None, Some("resp_1")]);
        let found = store.items_by_digest(&[[9; 32], [1; 32], [2; 32]]).await.unwrap();
        let owners: Vec<_> = found
            .iter()
            .map(|item| item.as_ref().map(|i| i.response_id.as_str()))
            .collect();
        assert_eq!(owners, [None, Some("resp_1"), Some("resp_2")]);
        assert!(store.response("resp_1").await.unwrap().is_some());
        assert!(store.response("resp_never").await.unwrap().is_none());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_puts_all_land() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let tasks: Vec<_> = (0..32)
            .map(|task| {
                let store = store.clone();
                tokio::spawn(async move {
                    for n in 0..25 {
                        let stored = response(&format!("resp_{task}_{n}"), 1, 60);
                        store.put_response(&stored).await.unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(rows(&store, RESPONSES), 32 * 25);
        let ids: Vec<String> = (0..32)
            .map(|task| format!("fc_0123456789_resp_{task}_24"))
            .collect();
        assert!(store.items_by_id(&ids).await.unwrap().iter().all(Option::is_some));
    }

    #[tokio::test]
    async fn a_full_queue_fails_fast() {
        let dir = tempfile::tempdir().unwrap();
        let tuning = Tuning {
            queue: 1,
            linger: Duration::from_millis(200),
            ..TUNING
        };
        let store = EmbeddedStore::open_tuned(dir.path(), tuning, StateMeter::default()).unwrap();
        let meter = LedgerMeter::new(&crate::metrics::Metrics::new());
        let mut accepted = 0u64;
        // The writer lingers after the first record: the queue of one fills meanwhile.
        let refused = loop {
            assert!(accepted <= 2, "the queue never filled");
            match store.queue_response(response(&format!("resp_{accepted}"), 1, 60), meter.clone()) {
                Ok(()) => accepted += 1,
                Err(e) => break e,
            }
        };
        assert!(matches!(&refused, StoreError::Unavailable(m) if m == "write queue full"));
        committed(&meter, accepted).await;
        assert!(store.response("resp_0").await.unwrap().is_some());
        store.put_response(&response("resp_after", 1, 60)).await.unwrap();
    }

    #[test]
    fn a_second_store_on_the_same_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _first = EmbeddedStore::open_tuned(dir.path(), TUNING, StateMeter::default()).unwrap();
        let Err(StoreError::Unavailable(message)) =
            EmbeddedStore::open_tuned(dir.path(), TUNING, StateMeter::default())
        else {
            panic!("a second open succeeded");
        };
        assert!(message.contains("already open"), "{message}");
    }

    #[tokio::test]
    async fn a_directory_open_in_this_process_is_shared() {
        let dir = tempfile::tempdir().unwrap();
        let first = EmbeddedStore::open(dir.path()).unwrap();
        let second = EmbeddedStore::open(&dir.path().join(".")).unwrap();
        assert!(Arc::ptr_eq(&first.inner, &second.inner));
        drop((first, second));
        // Once every clone is gone, the next open opens the file anew.
        let _reopened = EmbeddedStore::open(dir.path()).unwrap();
    }

    /// Writes `row` as the response under `key`, never expiring, past the store.
    fn plant_row(store: &EmbeddedStore, key: &[u8; 16], row: &[u8]) {
        let keyspaces = &store.inner.store.keyspaces;
        keyspaces
            .response_ids
            .insert(key, u64::MAX.to_be_bytes())
            .unwrap();
        keyspaces
            .responses
            .insert(tables::at(u64::MAX, key), row)
            .unwrap();
    }

    #[tokio::test]
    async fn a_corrupt_value_reads_as_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let bad = response_key("resp_bad").0;
        plant_row(&store, &bad, b"{not json");
        let keyspaces = &store.inner.store.keyspaces;
        keyspaces
            .item_digests
            .insert(digest_key(&[9; 32]).0, tables::owner(&bad, u64::MAX))
            .unwrap();
        // Written past the store: its key filter must be told, as a put would tell it.
        store.inner.filters.insert(&[response_key("resp_bad")]);
        store.inner.filters.insert(&[digest_key(&[9; 32])]);
        assert!(matches!(
            store.response("resp_bad").await,
            Err(StoreError::Corrupt(_))
        ));
        assert!(matches!(
            store.items_by_digest(&[[9; 32]]).await,
            Err(StoreError::Corrupt(_))
        ));
    }

    #[tokio::test]
    async fn a_row_of_another_id_under_the_same_key_reads_as_absent() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open_tuned(dir.path(), TUNING, StateMeter::default()).unwrap();
        // What two ids of one key would leave: the row of one under the key of the other.
        let other = response("resp_other", 1, 60);
        let keyspaces = &store.inner.store.keyspaces;
        let mut tables = Tables::new(keyspaces);
        tables.put(&other, &other.to_json(), true).unwrap();
        tables.commit(&store.inner.store.db).unwrap();
        let mine = response_key("resp_mine").0;
        plant_row(&store, &mine, &other.to_json());
        keyspaces
            .item_ids
            .insert(
                item_key("fc_0123456789_resp_mine").0,
                tables::owner(&mine, u64::MAX),
            )
            .unwrap();
        // Written past the store: its key filter must be told, as a put would tell it.
        store.inner.filters.insert(&[response_key("resp_mine")]);
        store.inner.filters.insert(&[response_key("resp_other")]);
        store.inner.filters.insert(&[item_key("fc_0123456789_resp_mine")]);
        assert_eq!(store.response("resp_mine").await.unwrap(), None);
        let found = store
            .items_by_id(&["fc_0123456789_resp_mine".into()])
            .await
            .unwrap();
        assert_eq!(found, vec![None]);
        assert_eq!(store.response("resp_other").await.unwrap(), Some(other));
    }

    /// What expiry costs: records written, then swept once expired (CPU of every thread of
    /// the process, from /proc, and wall time, a record each).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "a measurement; run with --release --ignored --nocapture"]
    async fn measure_writes_and_sweeps() {
        const RECORDS: usize = 200_000;
        let cpu = || {
            let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
            let fields: Vec<&str> = stat.rsplit(')').next().unwrap().split_whitespace().collect();
            // utime and stime, in clock ticks (100 a second)
            let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
            Duration::from_millis(ticks * 10)
        };
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open_tuned(dir.path(), TUNING, StateMeter::default()).unwrap();
        let records: Vec<StoredResponse> = (0..RECORDS)
            .map(|n| {
                let bits = StoreKey::of(9, &n.to_le_bytes()).0;
                let hex: String = bits.iter().map(|b| format!("{b:02x}")).collect();
                response(&format!("resp_{hex}"), n as u8, 2)
            })
            .collect();
        let (cpu0, wall0) = (cpu(), Instant::now());
        for batch in records.chunks(128) {
            put_batch(&store, &batch.iter().collect::<Vec<_>>(), true);
        }
        let written_cpu = cpu() - cpu0;
        let wall = wall0.elapsed();
        // Until every record has expired, then sweeps until none is left: the tree's flushes
        // and compactions meanwhile count with the sweeps.
        let cpu0 = cpu();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let mut swept = 0;
        loop {
            let removed = store.sweep(now_unix()).await.unwrap();
            if removed == 0 {
                break;
            }
            swept += removed;
        }
        let expiry_cpu = cpu() - cpu0;
        assert_eq!(rows(&store, RESPONSES), 0);
        let per = |d: Duration| d / RECORDS as u32;
        println!(
            "{RECORDS} records of two items: written (batches of 128) {:?} CPU, {:?} wall a \
             record; expired (3 s, then sweeps removing {swept}) {:?} CPU a record",
            per(written_cpu),
            per(wall),
            per(expiry_cpu)
        );
    }

    /// Puts from 32 tasks, and from one caller alone, under each durability setting; then
    /// lookups.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "a measurement; run with --ignored --nocapture, ideally optimised"]
    async fn measure_puts_and_lookups() {
        const PUTS: usize = 10_000;
        const TASKS: usize = 32;
        let settings = [
            ("written to disk every 500 ms (chosen)", DURABLE_EVERY),
            ("written to disk every batch", Duration::ZERO),
        ];
        let mut chosen = None;
        for (name, durable_every) in settings {
            let dir = tempfile::tempdir().unwrap();
            let tuning = Tuning {
                durable_every,
                ..TUNING
            };
            let store = EmbeddedStore::open_tuned(dir.path(), tuning, StateMeter::default()).unwrap();
            store.put_response(&response("resp_probe", 1, 60)).await.unwrap();
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let prober = {
                let (tree, stop) = (store.inner.store.clone(), stop.clone());
                std::thread::spawn(move || inline_read_latencies(&tree, &stop))
            };
            let start = Instant::now();
            let tasks: Vec<_> = (0..TASKS)
                .map(|task| {
                    let store = store.clone();
                    tokio::spawn(async move {
                        for n in (task..PUTS).step_by(TASKS) {
                            store
                                .put_response(&response(&format!("resp_{n}"), 1, 60))
                                .await
                                .unwrap();
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
            let concurrent = start.elapsed();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let reads = prober.join().unwrap();
            let start = Instant::now();
            for n in 0..200 {
                store
                    .put_response(&response(&format!("resp_one_{n}"), 1, 60))
                    .await
                    .unwrap();
            }
            let alone = start.elapsed() / 200;
            println!(
                "{name}: {PUTS} puts from {TASKS} tasks in {concurrent:?} ({:?} per put); \
                 one caller alone: {alone:?} per put; meanwhile inline reads {reads}",
                concurrent / PUTS as u32
            );
            chosen.get_or_insert((dir, store));
        }
        let (_dir, store) = chosen.unwrap();
        let start = Instant::now();
        for n in 0..PUTS {
            assert!(store.response(&format!("resp_{n}")).await.unwrap().is_some());
        }
        let via_pool = start.elapsed() / PUTS as u32;
        let start = Instant::now();
        for n in 0..PUTS {
            let ids = [
                format!("rs_0123456789_resp_{n}"),
                format!("fc_0123456789_resp_{n}"),
            ];
            assert!(store.items_by_id(&ids).await.unwrap()[0].is_some());
        }
        let items_via_pool = start.elapsed() / PUTS as u32;
        let start = Instant::now();
        let tree = &store.inner.store;
        for n in 0..PUTS {
            let found = tree.reader(now_unix()).response(&format!("resp_{n}")).unwrap();
            assert!(found.is_some());
        }
        let inline = start.elapsed() / PUTS as u32;
        println!(
            "lookups among {PUTS} responses: response() {via_pool:?}, items_by_id(2 ids) \
             {items_via_pool:?} (blocking pool, served from memory after the puts); the same \
             response read inline from the tree: {inline:?}"
        );
    }

    /// What handing a record over costs its caller (the answer's task, before the answer's last
    /// frame passes on): a record of a typical answer (two items), and one with `store_items` of
    /// a 256 KiB session's input (64 JSON texts of 4 KiB). Per record, p50 and p99.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "a measurement; run with --release --ignored --nocapture"]
    async fn measure_hand_over() {
        const RECORDS: usize = 2_000;
        let text = format!(
            r#"{{"type":"message","role":"user","content":"{}"}}"#,
            "\\\"x\\\" ".repeat(680)
        );
        let kinds: [(&str, Option<StoredContent>); 2] = [
            ("two items, no content", None),
            (
                "two items, store_items with 256 KiB of input",
                Some(StoredContent {
                    input: vec![text; 64],
                    output: vec![r#"{"type":"message","content":"ok"}"#.to_owned()],
                }),
            ),
        ];
        for (name, content) in kinds {
            let dir = tempfile::tempdir().unwrap();
            let store = EmbeddedStore::open_tuned(dir.path(), TUNING, StateMeter::default()).unwrap();
            let meter = LedgerMeter::new(&crate::metrics::Metrics::new());
            let mut took = Vec::with_capacity(RECORDS);
            let mut encoding = Vec::with_capacity(RECORDS);
            for n in 0..RECORDS {
                let mut stored = response(&format!("resp_{n}"), n as u8, 60);
                stored.content = content.clone();
                let start = Instant::now();
                std::hint::black_box(stored.to_json());
                encoding.push(start.elapsed());
                let start = Instant::now();
                store.queue_response(stored, meter.clone()).unwrap();
                took.push(start.elapsed());
                // Paced as answers arrive, so the queue never fills.
                if n % 64 == 63 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            committed(&meter, RECORDS as u64).await;
            took.sort();
            encoding.sort();
            let at = |took: &[Duration], q: f64| took[((took.len() - 1) as f64 * q) as usize];
            println!(
                "hand-over, {name}: p50 {:?} p99 {:?}; its encoding alone p50 {:?} ({RECORDS} records)",
                at(&took, 0.5),
                at(&took, 0.99),
                at(&encoding, 0.5)
            );
        }
    }

    /// Reads one response inline in a loop (1 ms apart) until `stop`: p50, p99 and max.
    fn inline_read_latencies(tree: &Store, stop: &std::sync::atomic::AtomicBool) -> String {
        let mut took = Vec::new();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let start = Instant::now();
            let found = tree.reader(now_unix()).response("resp_probe").unwrap();
            assert!(found.is_some());
            took.push(start.elapsed());
            std::thread::sleep(Duration::from_millis(1));
        }
        took.sort();
        let at = |q: f64| took[((took.len() - 1) as f64 * q) as usize];
        format!(
            "p50 {:?} p99 {:?} max {:?} (n={})",
            at(0.5),
            at(0.99),
            at(1.0),
            took.len()
        )
    }
}
