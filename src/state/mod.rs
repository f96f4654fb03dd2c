//! Where the ledger, the team rate limits, the budgets' spend counters (`spend`,
//! docs/budgets.md#counters) and the usage tallies (`tally`, docs/usage.md#get-usage) live
//! (docs/operations.md#state-backends): in this process (`memory`), in files under
//! `[state] path` (`embedded`, the default, surviving restarts) or in Redis (`redis`, shared by
//! every replica).
//!
//! Every backend stores the same [`StoredResponse`] values and the index entries derived from
//! them ([`StoredResponse::by_id`], [`StoredResponse::by_digest`]), forgets them once
//! `expires_unix` has passed (Redis by TTL, the others when read and by a sweep), and answers
//! the same questions. A backend that cannot answer says so with [`StoreError`]; the proxy then
//! refuses the requests that need it (503 `ledger_unavailable`) or lets them through, as
//! `[ledger] on_unavailable` says.

/// The suite every backend passes, run against each.
#[cfg(test)]
mod conformance;
mod embedded;
mod eviction;
/// What one record takes in Redis and on disk (a measurement, ignored by default).
#[cfg(test)]
mod footprint;
mod key_filter;
mod local_spend;
mod loss_epoch;
mod memory;
mod rate_limit;
mod redis;
mod redis_client;
mod redis_conn;
mod redis_keys;
/// Budgets' spend counters.
pub(crate) mod spend;
/// The usage tallies of `GET /usage`.
pub(crate) mod tally;
#[cfg(test)]
mod test_records;
/// The single test server, by the name the Sentinel and cluster test servers know it under.
#[cfg(test)]
use self::redis::test_server as redis_server;
#[cfg(test)]
mod redis_cluster_tests;
/// The Sentinel and cluster test servers.
#[cfg(test)]
// Shared with the integration tests, whose crate sets its visibility.
#[allow(unreachable_pub)]
#[allow(dead_code)]
#[path = "../../tests/support/redis_ha.rs"]
mod redis_ha;
#[cfg(test)]
mod redis_sentinel_tests;
mod write_health;

use std::num::NonZeroU32;
use std::time::Duration;

pub use self::redis::RedisStore;
pub use self::redis_client::RedisLogin;
pub(crate) use embedded::EmbeddedStore;
pub use eviction::report_memory_policy;
pub(crate) use eviction::MemoryPolicy;
pub(crate) use memory::MemoryStore;
pub use rate_limit::LocalRateLimiter;

use crate::ledger::{StoredItem, StoredResponse};
use crate::metrics::LedgerMeter;

/// How far [`StateStore::record_response`] took a record before it answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recorded {
    /// Written: the caller counts it.
    Written,
    /// Queued for a writer that counts the outcome itself.
    Queued,
}

/// What [`StateStore::hand_over`] did with a record.
#[derive(Debug)]
pub(crate) enum HandOver {
    /// A store of this process took it (or refused it): lookups in this process find it from now on.
    Taken(Result<Recorded, StoreError>),
    /// A store other replicas read (Redis): the record, still to be written.
    Remote(Box<StoredResponse>),
}

/// The state backend could not answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The backend is unreachable, timed out or failed (Redis down, a file error).
    #[error("the state backend is unavailable: {0}")]
    Unavailable(String),
    /// The backend refuses writes for lack of room: Redis at its `maxmemory` under
    /// `noeviction` (an `OOM` reply), or the embedded store's disk. As unavailable as
    /// [`StoreError::Unavailable`] for every request that needs the store, and counted apart
    /// (`replaygate_state_writes_refused_total`).
    #[error("the state backend is full and refuses writes: {0}")]
    Full(String),
    /// The backend answered with a value that does not read as what was stored.
    #[error("the state backend holds an unreadable value: {0}")]
    Corrupt(String),
    /// The backend cannot be set up as configured (a password variable that is not set, a
    /// TLS file that cannot be read): a start error, never a request's.
    #[error("the state backend cannot be set up: {0}")]
    Setup(String),
}

/// A state backend. Cheap to clone: clones share the same store.
#[derive(Debug, Clone)]
pub enum StateStore {
    /// In this process only (tests, single replicas that may forget on restart).
    Memory(MemoryStore),
    /// In one Redis, shared by every replica.
    Redis(RedisStore),
    /// In a file under `[state] path`, kept across restarts; one process at a time.
    Embedded(EmbeddedStore),
}

impl StateStore {
    /// Records a response and its index entries (by item id, and by digest for items that
    /// carry `encrypted_content`). A response recorded again under the same id replaces the
    /// earlier one. The tests' write-and-wait: the ledger records with
    /// [`StateStore::record_response`].
    #[cfg(test)]
    pub(crate) async fn put_response(&self, response: &StoredResponse) -> Result<(), StoreError> {
        match self {
            StateStore::Memory(store) => store.put_response(response),
            StateStore::Redis(store) => store.put_response(response).await,
            StateStore::Embedded(store) => store.put_response(response).await,
        }
    }

    /// Records a response and its index entries as the ledger records an answer: `Ok` once every later
    /// lookup of every replica will find the response. A store of this process takes it at once
    /// ([`StateStore::hand_over`]); Redis answers once the write is done ([`Recorded::Written`]),
    /// and the caller counts it.
    pub(crate) async fn record_response(
        &self,
        response: StoredResponse,
        meter: &LedgerMeter,
    ) -> Result<Recorded, StoreError> {
        match self {
            StateStore::Redis(store) => store.put_response(&response).await.map(|()| Recorded::Written),
            _ => match self.hand_over(response, meter) {
                HandOver::Taken(taken) => taken,
                HandOver::Remote(_) => unreachable!("only Redis gives a record back"),
            },
        }
    }

    /// Hands `response` to a store of this process without waiting for anything: once this
    /// returns `Taken(Ok)`, every later lookup in this process finds it (docs/ledger.md). The
    /// memory store writes it into its maps ([`Recorded::Written`]: the caller counts it); the
    /// embedded store remembers it and queues it for its writer thread ([`Recorded::Queued`]:
    /// the writer counts the commit on `meter`), or refuses it at once when the queue is full.
    /// Redis, shared by replicas, gives it back ([`HandOver::Remote`]) for
    /// [`StateStore::record_response`] to write. The response is taken, so the stores of this
    /// process keep it without a copy.
    pub(crate) fn hand_over(&self, response: StoredResponse, meter: &LedgerMeter) -> HandOver {
        match self {
            StateStore::Embedded(store) => HandOver::Taken(
                store
                    .queue_response(response, meter.clone())
                    .map(|()| Recorded::Queued),
            ),
            StateStore::Memory(store) => {
                HandOver::Taken(store.record_response(response).map(|()| Recorded::Written))
            }
            StateStore::Redis(_) => HandOver::Remote(Box::new(response)),
        }
    }

    /// The response recorded under `id`, unless it has expired.
    pub async fn response(&self, id: &str) -> Result<Option<StoredResponse>, StoreError> {
        match self {
            StateStore::Memory(store) => store.response(id),
            StateStore::Redis(store) => store.response(id).await,
            StateStore::Embedded(store) => store.response(id).await,
        }
    }

    /// The recorded items with these ids, in the order asked (`None` for each unknown or
    /// expired one).
    pub(crate) async fn items_by_id(&self, ids: &[String]) -> Result<Vec<Option<StoredItem>>, StoreError> {
        match self {
            StateStore::Memory(store) => store.items_by_id(ids),
            StateStore::Redis(store) => store.items_by_id(ids).await,
            StateStore::Embedded(store) => store.items_by_id(ids).await,
        }
    }

    /// The recorded items carrying `encrypted_content` with these digests, in the order asked.
    pub(crate) async fn items_by_digest(
        &self,
        digests: &[[u8; 32]],
    ) -> Result<Vec<Option<StoredItem>>, StoreError> {
        match self {
            StateStore::Memory(store) => store.items_by_digest(digests),
            StateStore::Redis(store) => store.items_by_digest(digests).await,
            StateStore::Embedded(store) => store.items_by_digest(digests).await,
        }
    }

    /// Counts one request against `key`'s limit of `per_minute` (a GCRA: bursts up to the
    /// whole minute's allowance, refilled evenly). `Ok(Err(wait))`: over the limit, and how
    /// long until a request would be accepted.
    pub(crate) async fn hit_rate(
        &self,
        key: &str,
        per_minute: NonZeroU32,
    ) -> Result<Result<(), Duration>, StoreError> {
        match self {
            StateStore::Memory(store) => Ok(store.hit_rate(key, per_minute)),
            StateStore::Redis(store) => store.hit_rate(key, per_minute).await,
            StateStore::Embedded(store) => Ok(store.hit_rate(key, per_minute)),
        }
    }

    /// Whether the backend answers (`/readyz`).
    pub async fn ping(&self) -> Result<(), StoreError> {
        match self {
            StateStore::Memory(_) => Ok(()),
            StateStore::Redis(store) => store.ping().await,
            StateStore::Embedded(store) => store.ping().await,
        }
    }

    /// The embedded store's disk use and budget (`[state] max_disk_bytes`), in bytes; `None`
    /// for the other backends.
    pub(crate) async fn disk_usage(&self) -> Option<Result<DiskUsage, StoreError>> {
        match self {
            StateStore::Embedded(store) => Some(store.disk_usage().await),
            _ => None,
        }
    }

    /// The backend's loss epoch (docs/incremental-judging.md#the-ledger): it changes whenever
    /// records may have been lost before their expiry, so facts read from the store under one
    /// epoch still hold while it stays the same (and their records have not expired).
    pub(crate) fn loss_epoch(&self) -> u64 {
        match self {
            StateStore::Memory(memory) => memory.loss_epoch(),
            StateStore::Redis(redis) => redis.loss_epoch(),
            StateStore::Embedded(embedded) => embedded.loss_epoch(),
        }
    }

    /// Runs `write`, a write the answer does not wait for (a budget's settlement, a usage
    /// tally): at once on a store of this process, whose calls never wait; on a task of the
    /// runtime for Redis. An error when it could not be run so (an in-process write that did
    /// not finish at once, or no runtime to run a Redis write on): the write is dropped.
    pub(crate) fn write_behind(
        &self,
        write: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), StoreError> {
        use futures_util::FutureExt;
        if !self.is_remote() {
            return write.now_or_never().ok_or_else(|| {
                StoreError::Unavailable("an in-process write did not finish at once".to_owned())
            });
        }
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| StoreError::Unavailable("no runtime to run the write on".to_owned()))?;
        runtime.spawn(write);
        Ok(())
    }

    /// Whether each call is a round trip to another process (Redis): calls made together
    /// share one there, while the in-process stores answer them as fast one after another.
    pub(crate) fn is_remote(&self) -> bool {
        matches!(self, StateStore::Redis(_))
    }

    /// The backend's name, as `[state] backend` spells it.
    pub fn backend(&self) -> &'static str {
        match self {
            StateStore::Memory(_) => "memory",
            StateStore::Redis(_) => "redis",
            StateStore::Embedded(_) => "embedded",
        }
    }
}

/// The disk the embedded store takes, against its budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub(crate) struct DiskUsage {
    /// Bytes the store's files take (its journal and tables).
    pub(crate) used_bytes: u64,
    /// `[state] max_disk_bytes`.
    pub(crate) max_bytes: u64,
}

/// Seconds since the Unix epoch, now.
pub(crate) fn now_unix() -> u64 {
    crate::spend::system_now_unix()
}
