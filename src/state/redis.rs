//! The `redis` backend: the ledger and the team rate limits in Redis, shared by every replica
//! (docs/operations.md#redis-for-several-replicas): one server at a url, the master Redis Sentinel
//! names, or a Redis Cluster.
//!
//! Keys (`P` is `[state] key_prefix`, `replaygate` unless configured; `v1` is the layout's
//! version, so a later layout never reads these values as its own; on a cluster each key also
//! carries a hash tag, see [`super::redis_keys`]):
//!
//! | key | value |
//! | --- | --- |
//! | `P:v1:resp:{response id}` | the [`StoredResponse`], as JSON |
//! | `P:v1:item:{item id}` | the [`StoredItem`] of an output item with an id, as JSON |
//! | `P:v1:digest:{64 hex digits}` | the [`StoredItem`] of an output item carrying `encrypted_content` |
//! | `P:v1:rate:{team}` | the team's GCRA state: its theoretical arrival time, in microseconds of Redis server time |
//! | `P:v1:spend:{counter}` | a budget's spend counter ([`spend`]): tokens or micro-dollars, as an integer |
//!
//! Ledger keys expire with their response (`EX` = seconds left until `expires_unix`); a rate
//! key expires once its team is back to a full allowance; a spend counter at its window's end
//! and the grace (`EXPIREAT`).
//!
//! On one server a response and its index entries are written in one MULTI. On a cluster they
//! live in different slots, so each is its own SET, the items first and the response that names
//! them last; items are read with one MGET per slot.
//!
//! Every call is bounded by the store's timeout, connecting (and asking the sentinels, and
//! following a cluster's redirections) included, and any failure is
//! [`StoreError::Unavailable`]. The connection is made on first use and remade after a
//! failure, so a store built while Redis is down answers `Unavailable` until Redis is back,
//! then works, with no new store.

use std::sync::atomic::{AtomicBool, Ordering};

use super::loss_epoch::LossEpoch;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::num::NonZeroU32;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use ::redis::cluster_routing::Slot;
use ::redis::{RedisError, RedisResult, Script};
use futures_util::future::try_join_all;

use super::redis_conn::{Conn, Connector, Slots};
use super::redis_keys::Keys;
use super::write_health::WriteHealth;
use super::{now_unix, RedisLogin, StoreError};
use crate::config::RedisTarget;

mod policy;
pub(super) mod spend;
mod tally;
use crate::ledger::{StoredItem, StoredResponse};

/// The `redis` backend. Cheap to clone: clones share one connection.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    connector: Connector,
    /// Where the server is, for people (no password).
    server: String,
    keys: Keys,
    timeout: Duration,
    /// The connection in use, made on first use; dropped after a failure that calls for a new
    /// one (see [`Connector::gives_up`]).
    current: Mutex<Option<Current>>,
    /// Held while a connection that must wait (Sentinel, cluster) is made, so concurrent calls
    /// make one.
    connecting: tokio::sync::Mutex<()>,
    /// Whether the last write was refused for memory (an `OOM` reply).
    health: WriteHealth,
    /// Moved by every failed call and every new connection: a server that failed over, or
    /// restarted, may not hold what the last one did (docs/incremental-judging.md#the-ledger).
    losses: LossEpoch,
    /// Whether the server's `maxmemory-policy` was last read as `noeviction`: otherwise a record
    /// may be evicted at any time, unseen.
    keeps_records: AtomicBool,
}

struct Current {
    conn: Conn,
    /// Tells a failed connection from its replacement, so one failure replaces it once.
    generation: u64,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("server", &self.inner.server)
            .field("prefix", &self.inner.keys.prefix())
            .field("timeout", &self.inner.timeout)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A store for the Redis at `url` (`redis://host:port[/db]`), its keys under
    /// `key_prefix`, each call bounded by `timeout`, with no login and no TLS files (see
    /// [`RedisStore::connect_with`]).
    #[cfg(test)]
    pub(crate) fn connect(url: &str, key_prefix: &str, timeout: Duration) -> Result<RedisStore, StoreError> {
        RedisStore::connect_with(url, &RedisLogin::default(), key_prefix, timeout)
    }

    /// A store for the Redis at `url` (`redis://` or `rediss://` for TLS), logging in and
    /// checking TLS as `login` says. Only the URL and the TLS material are checked here: the
    /// connection is made on first use, so this succeeds while Redis is down.
    pub fn connect_with(
        url: &str,
        login: &RedisLogin,
        key_prefix: &str,
        timeout: Duration,
    ) -> Result<RedisStore, StoreError> {
        RedisStore::open(&RedisTarget::Url(url.to_owned()), login, key_prefix, timeout)
    }

    /// A store for the Redis `target` names (a url, sentinels, or cluster nodes), logging in
    /// and checking TLS as `login` says. Nothing is connected here, so this succeeds while
    /// Redis is down.
    pub(crate) fn open(
        target: &RedisTarget,
        login: &RedisLogin,
        key_prefix: &str,
        timeout: Duration,
    ) -> Result<RedisStore, StoreError> {
        let (connector, server) = login.connector(target, timeout)?;
        Ok(RedisStore {
            inner: Arc::new(Inner {
                keys: Keys::new(key_prefix, connector.slots()),
                connector,
                server,
                timeout,
                current: Mutex::new(None),
                connecting: tokio::sync::Mutex::new(()),
                health: WriteHealth::default(),
                losses: LossEpoch::default(),
                keeps_records: AtomicBool::new(false),
            }),
        })
    }

    /// The timeout of one call (read by the tests).
    #[cfg(test)]
    pub(crate) fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// The loss epoch ([`StateStore::loss_epoch`](super::StateStore::loss_epoch)): a new one at
    /// every call unless the server was last known not to evict (`noeviction`).
    pub(super) fn loss_epoch(&self) -> u64 {
        if !self.inner.keeps_records.load(Ordering::Acquire) {
            self.inner.losses.bump();
        }
        self.inner.losses.current()
    }

    /// Notes the server's memory policy as read: whether it may evict records.
    pub(super) fn note_memory_policy(&self, may_evict: Option<bool>) {
        self.inner
            .keeps_records
            .store(may_evict == Some(false), Ordering::Release);
    }

    pub(super) async fn put_response(&self, response: &StoredResponse) -> Result<(), StoreError> {
        // An answer recorded already expired is never read: nothing to write.
        let ttl = response.expires_unix.saturating_sub(now_unix());
        if ttl == 0 {
            return Ok(());
        }
        let set = |key: String, value: Vec<u8>| {
            let mut cmd = ::redis::cmd("SET");
            cmd.arg(key).arg(value).arg("EX").arg(ttl);
            cmd
        };
        let entries: Vec<::redis::Cmd> = response
            .by_id()
            .map(|(id, item)| set(self.key("item", id), item.to_json()))
            .chain(
                response
                    .by_digest()
                    .map(|(digest, item)| set(self.key("digest", &hex::encode(digest)), item.to_json())),
            )
            .collect();
        let record = set(self.key("resp", &response.id), response.to_json());
        let written = match self.inner.connector.slots() {
            Slots::One => {
                let mut pipe = ::redis::pipe();
                pipe.atomic();
                pipe.add_command(record).ignore();
                for entry in entries {
                    pipe.add_command(entry).ignore();
                }
                let pipe = &pipe;
                self.run(|mut conn| async move { pipe.exec_async(&mut conn).await })
                    .await
            }
            // Each key in its own slot: the items first, then the response that names them, so
            // a reader that finds the response finds its items.
            Slots::Many => {
                let (entries, record) = (&entries, &record);
                self.run(|conn| async move {
                    try_join_all(entries.iter().map(|entry| {
                        let mut conn = conn.clone();
                        async move { entry.exec_async(&mut conn).await }
                    }))
                    .await?;
                    let mut conn = conn;
                    record.exec_async(&mut conn).await
                })
                .await
            }
        };
        written.inspect(|()| self.inner.health.written())
    }

    pub(super) async fn response(&self, id: &str) -> Result<Option<StoredResponse>, StoreError> {
        self.inner.health.check()?;
        let key = self.key("resp", id);
        let value: Option<Vec<u8>> = self
            .run(|mut conn| {
                let key = &key;
                async move { ::redis::cmd("GET").arg(key).query_async(&mut conn).await }
            })
            .await?;
        let now = now_unix();
        Ok(value
            .map(|bytes| from_json::<StoredResponse>(&bytes))
            .transpose()?
            .filter(|response| !response.is_expired(now)))
    }

    pub(super) async fn items_by_id(&self, ids: &[String]) -> Result<Vec<Option<StoredItem>>, StoreError> {
        let keys = ids.iter().map(|id| self.key("item", id)).collect();
        self.items(keys).await
    }

    pub(super) async fn items_by_digest(
        &self,
        digests: &[[u8; 32]],
    ) -> Result<Vec<Option<StoredItem>>, StoreError> {
        let keys = digests
            .iter()
            .map(|digest| self.key("digest", &hex::encode(digest)))
            .collect();
        self.items(keys).await
    }

    /// The items under `keys`, in their order: one MGET, or on a cluster one MGET per slot.
    async fn items(&self, keys: Vec<String>) -> Result<Vec<Option<StoredItem>>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        self.inner.health.check()?;
        let values = match self.inner.connector.slots() {
            Slots::One => self.mget(vec![keys]).await?.pop().unwrap_or_default(),
            Slots::Many => {
                let count = keys.len();
                let mut groups: HashMap<Slot, (Vec<usize>, Vec<String>)> = HashMap::new();
                for (at, key) in keys.into_iter().enumerate() {
                    let group = groups.entry(Slot::for_key(&key)).or_default();
                    group.0.push(at);
                    group.1.push(key);
                }
                let (places, groups): (Vec<_>, Vec<_>) = groups.into_values().unzip();
                let mut values = vec![None; count];
                for (places, found) in places.into_iter().zip(self.mget(groups).await?) {
                    for (at, value) in places.into_iter().zip(found) {
                        values[at] = value;
                    }
                }
                values
            }
        };
        let now = now_unix();
        values
            .into_iter()
            .map(|value| {
                let item = value.map(|bytes| from_json::<StoredItem>(&bytes)).transpose()?;
                Ok(item.filter(|item| now < item.expires_unix))
            })
            .collect()
    }

    /// One MGET for each group of keys (each group in one slot on a cluster), run together:
    /// the values, group by group. A group answered with another count of values is corrupt.
    async fn mget(&self, groups: Vec<Vec<String>>) -> Result<Vec<Vec<Option<Vec<u8>>>>, StoreError> {
        let counts: Vec<usize> = groups.iter().map(Vec::len).collect();
        let groups = &groups;
        let values: Vec<Vec<Option<Vec<u8>>>> = self
            .run(|conn| async move {
                try_join_all(groups.iter().map(|keys| {
                    let mut conn = conn.clone();
                    async move { ::redis::cmd("MGET").arg(keys).query_async(&mut conn).await }
                }))
                .await
            })
            .await?;
        for (count, found) in counts.into_iter().zip(&values) {
            if found.len() != count {
                return Err(StoreError::Corrupt(format!(
                    "MGET of {count} keys answered {} values",
                    found.len()
                )));
            }
        }
        Ok(values)
    }

    /// Counts one request against `key`'s limit with the GCRA of [`GCRA_SCRIPT`], on Redis
    /// server time, so replicas whose clocks disagree still share one count. The script
    /// touches one key, so it runs in that key's slot on a cluster.
    pub(super) async fn hit_rate(
        &self,
        key: &str,
        per_minute: NonZeroU32,
    ) -> Result<Result<(), Duration>, StoreError> {
        let (interval, tolerance) = gcra_params(per_minute);
        let key = &self.key("rate", key);
        let wait: u64 = self
            .run(|mut conn| async move {
                GCRA.key(key)
                    .arg(interval)
                    .arg(tolerance)
                    .invoke_async(&mut conn)
                    .await
            })
            .await?;
        self.inner.health.written();
        Ok(match wait {
            0 => Ok(()),
            micros => Err(Duration::from_micros(micros)),
        })
    }

    pub(super) async fn ping(&self) -> Result<(), StoreError> {
        if self.inner.health.is_full() {
            return self.probe_write().await;
        }
        let answer: String = self
            .run(|mut conn| async move { ::redis::cmd("PING").query_async(&mut conn).await })
            .await?;
        match answer.as_str() {
            "PONG" => Ok(()),
            other => Err(StoreError::Unavailable(format!("PING answered {other:?}"))),
        }
    }

    fn key(&self, kind: &str, name: &str) -> String {
        self.inner.keys.key(kind, name)
    }

    /// Runs `call` on the connection, within the timeout, connecting first when there is no
    /// connection. A call that fails in a way that calls for a new connection (a timeout, or
    /// any failure under Sentinel) drops the one it used, unless another call has already
    /// replaced it. A connection made before this call that turns out to be gone (its server
    /// died or was demoted in a failover, see [`Connector::renews`]) is replaced and `call` run
    /// once more on the new one, within the same timeout: after a failover, each replica's
    /// first call is answered by the new master instead of failing on the old one.
    async fn run<T, F, Fut>(&self, call: F) -> Result<T, StoreError>
    where
        F: Fn(Conn) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let mut used = None;
        // Whether the failure, if any, was in making a connection (asking the sentinels,
        // reaching the master they name, learning a cluster's nodes) rather than in the call.
        let mut connecting = true;
        let attempt = async {
            let mut renewed = false;
            loop {
                connecting = true;
                let (conn, generation, fresh) = self.connection().await?;
                (used, connecting) = (Some(generation), false);
                match call(conn).await {
                    Err(err) if !fresh && !renewed && self.inner.connector.renews(&err) => {
                        self.drop_connection(Some(generation));
                        renewed = true;
                    }
                    answer => break answer,
                }
            }
        };
        let outcome = tokio::time::timeout(self.inner.timeout, attempt).await;
        if !matches!(outcome, Ok(Ok(_))) {
            self.inner.losses.bump();
        }
        match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => {
                if self.inner.connector.gives_up(&err) {
                    self.drop_connection(used);
                }
                // The client's own deadline is the store's timeout too: said the same way.
                if err.is_timeout() {
                    Err(self.no_answer())
                } else if connecting {
                    Err(self.no_connection(&err))
                } else {
                    Err(self.failed(&err))
                }
            }
            Err(_elapsed) => {
                self.drop_connection(used);
                Err(self.no_answer())
            }
        }
    }

    /// A connection that could not be made, naming the way it was sought (the sentinels and
    /// the master's name, the cluster's nodes): `/readyz` and the start line show it
    /// (docs/operations.md#redis-for-several-replicas).
    fn no_connection(&self, err: &RedisError) -> StoreError {
        StoreError::Unavailable(format!("redis: no connection via {}: {err}", self.inner.server))
    }

    /// A call that Redis did not answer within the timeout, naming it (`/readyz` and the
    /// start line show it: docs/operations.md#state-backends).
    fn no_answer(&self) -> StoreError {
        StoreError::Unavailable(format!("redis did not answer within {:?}", self.inner.timeout))
    }

    /// The connection in use, made now if there is none, and whether it was made by this
    /// call (by this call's wait for it). A direct connection is made without waiting for
    /// Redis (the first command connects); Sentinel's and a cluster's are made here, one at a
    /// time.
    async fn connection(&self) -> RedisResult<(Conn, u64, bool)> {
        if let Some((conn, generation)) = self.current_or_lazy()? {
            return Ok((conn, generation, false));
        }
        let _turn = self.inner.connecting.lock().await;
        if let Some((conn, generation)) = self.current_or_lazy()? {
            // Made by the call this one waited for: as new as one made here.
            return Ok((conn, generation, true));
        }
        let conn = self.inner.connector.connect(self.inner.timeout).await?;
        let (conn, generation) = self.keep(conn);
        Ok((conn, generation, true))
    }

    /// The connection in use, else a lazy one made now if this kind has one.
    fn current_or_lazy(&self) -> RedisResult<Option<(Conn, u64)>> {
        let mut current = self.inner.current.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(current) = current.as_ref() {
            return Ok(Some((current.conn.clone(), current.generation)));
        }
        let Some(lazy) = self.inner.connector.lazy(self.inner.timeout) else {
            return Ok(None);
        };
        let conn = lazy?;
        self.inner.losses.bump();
        let generation = next_generation();
        *current = Some(Current {
            conn: conn.clone(),
            generation,
        });
        Ok(Some((conn, generation)))
    }

    /// Keeps `conn` as the connection in use.
    fn keep(&self, conn: Conn) -> (Conn, u64) {
        self.inner.losses.bump();
        let mut current = self.inner.current.lock().unwrap_or_else(|e| e.into_inner());
        let generation = next_generation();
        *current = Some(Current {
            conn: conn.clone(),
            generation,
        });
        (conn, generation)
    }

    fn drop_connection(&self, generation: Option<u64>) {
        let Some(generation) = generation else {
            return;
        };
        let mut current = self.inner.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.as_ref().is_some_and(|c| c.generation == generation) {
            *current = None;
        }
    }
}

fn next_generation() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn unavailable(err: &RedisError) -> StoreError {
    StoreError::Unavailable(format!("redis: {err}"))
}

fn from_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|err| StoreError::Corrupt(err.to_string()))
}

/// The GCRA of the `redis` backend, the same as the local limiter's (governor's
/// `Quota::per_minute(n)`): one request per emission interval `T` = 60 s / n, and a burst of
/// n (the tolerance is `T` × (n − 1)). `KEYS[1]` holds the theoretical arrival time (TAT), in
/// microseconds of Redis server time; `ARGV[1]` is `T` and `ARGV[2]` the tolerance, in
/// microseconds. Returns 0 when the request is counted, else how many microseconds until one
/// would be (a refused request is not counted).
pub(super) const GCRA_SCRIPT: &str = r#"
if redis.replicate_commands then redis.replicate_commands() end
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local allowed_at = tat - tolerance
if now < allowed_at then
  return allowed_at - now
end
local next_tat = tat + interval
redis.call('SET', KEYS[1], string.format('%d', next_tat), 'PX', math.ceil((next_tat - now) / 1000))
return 0
"#;

static GCRA: LazyLock<Script> = LazyLock::new(|| Script::new(GCRA_SCRIPT));

/// The GCRA's emission interval and tolerance for `per_minute`, in microseconds.
fn gcra_params(per_minute: NonZeroU32) -> (u64, u64) {
    let interval = (60_000_000 / u64::from(per_minute.get())).max(1);
    (interval, interval * u64::from(per_minute.get() - 1))
}

/// A `redis-server` of a test's own, on a free loopback port, killed when dropped.
#[cfg(test)]
// Shared with the integration tests, whose crate sets its visibility.
#[allow(unreachable_pub)]
#[path = "../../tests/support/redis_server.rs"]
pub(crate) mod test_server;

/// The Redis store's own tests (its keys and TTLs, connecting, timeouts, the GCRA script);
/// what every backend does is in `super::conformance`.
#[cfg(test)]
mod tests {
    use std::time::Instant;

    use ::redis::Client;

    use super::test_server::{free_port, RedisServer};
    use super::*;
    use crate::ledger::{ItemRecord, Owner, ResponseRecord};

    fn store(server: &RedisServer) -> RedisStore {
        RedisStore::connect(&server.url(), "rg-test", Duration::from_secs(1)).unwrap()
    }

    /// A raw connection, to look at what the store wrote.
    async fn raw(server: &RedisServer) -> ::redis::aio::MultiplexedConnection {
        Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }

    fn per_minute(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    /// A response `id` with a function call (`fc_{id}`) and a reasoning item (`rs_{id}`,
    /// digest `[digest; 32]`), kept for `retention` seconds.
    fn response(id: &str, digest: u8, retention: u64) -> StoredResponse {
        let items = vec![
            ItemRecord {
                id: Some(format!("fc_0123456789_{id}")),
                item_type: "function_call".into(),
                call_id: Some(format!("call_{id}")),
                digest: [1; 32],
                has_encrypted_content: false,
                preceded_by: None,
            },
            ItemRecord {
                id: Some(format!("rs_0123456789_{id}")),
                item_type: "reasoning".into(),
                call_id: None,
                digest: [digest; 32],
                has_encrypted_content: true,
                preceded_by: None,
            },
        ];
        let record = ResponseRecord {
            id: id.into(),
            model: Some("gpt-5".into()),
            items,
        };
        let owner = Owner {
            provider: "openai".into(),
            model: Some("gpt-5".into()),
        };
        StoredResponse::new(
            record,
            owner,
            Some("payments".into()),
            Some("resp_0".into()),
            now_unix(),
            retention,
        )
    }

    #[tokio::test]
    async fn every_key_expires_with_the_response() {
        let server = RedisServer::start();
        let store = store(&server);
        store.put_response(&response("resp_1", 7, 120)).await.unwrap();
        let mut conn = raw(&server).await;
        let keys = [
            "rg-test:v1:resp:resp_1".to_owned(),
            "rg-test:v1:item:fc_0123456789_resp_1".to_owned(),
            "rg-test:v1:item:rs_0123456789_resp_1".to_owned(),
            format!("rg-test:v1:digest:{}", hex::encode([7; 32])),
        ];
        for key in keys {
            let ttl: i64 = ::redis::cmd("TTL")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            assert!(ttl > 0 && ttl <= 120, "{key}: TTL {ttl}");
        }
        // The call is indexed by id only.
        let digest_key = format!("rg-test:v1:digest:{}", hex::encode([1; 32]));
        let exists: bool = ::redis::cmd("EXISTS")
            .arg(digest_key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(!exists);
    }

    #[tokio::test]
    async fn expired_entries_are_not_returned() {
        let server = RedisServer::start();
        let store = store(&server);
        // Recorded already expired: nothing is written.
        let mut gone = response("resp_old", 9, 600);
        gone.expires_unix = now_unix() - 1;
        store.put_response(&gone).await.unwrap();
        let mut conn = raw(&server).await;
        let size: u64 = ::redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap();
        assert_eq!(size, 0);
        // A value past its expires_unix that Redis still holds (a replica's clock ahead) is
        // not returned either.
        let mut stale = response("resp_stale", 9, 600);
        stale.expires_unix = now_unix() - 1;
        let item = stale.by_id().next().unwrap().1;
        let _: () = ::redis::pipe()
            .cmd("SET")
            .arg("rg-test:v1:resp:resp_stale")
            .arg(serde_json::to_vec(&stale).unwrap())
            .cmd("SET")
            .arg("rg-test:v1:item:fc_0123456789_resp_stale")
            .arg(serde_json::to_vec(&item).unwrap())
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(store.response("resp_stale").await.unwrap(), None);
        let ids = ["fc_0123456789_resp_stale".to_owned()];
        assert!(store.items_by_id(&ids).await.unwrap()[0].is_none());
        // And Redis forgets by TTL.
        store.put_response(&response("resp_short", 9, 1)).await.unwrap();
        assert!(store.response("resp_short").await.unwrap().is_some());
        let mut forgotten = false;
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let exists: bool = ::redis::cmd("EXISTS")
                .arg("rg-test:v1:resp:resp_short")
                .query_async(&mut conn)
                .await
                .unwrap();
            if !exists {
                forgotten = true;
                break;
            }
        }
        assert!(forgotten, "the key outlived its TTL");
        assert_eq!(store.response("resp_short").await.unwrap(), None);
    }

    #[tokio::test]
    async fn an_unreadable_value_is_corrupt() {
        let server = RedisServer::start();
        let store = store(&server);
        let mut conn = raw(&server).await;
        let _: () = ::redis::cmd("SET")
            .arg("rg-test:v1:resp:resp_bad")
            .arg("{not json")
            .query_async(&mut conn)
            .await
            .unwrap();
        let err = store.response("resp_bad").await.unwrap_err();
        assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
    }

    #[tokio::test]
    async fn a_store_made_while_redis_is_down_works_once_it_is_up() {
        let port = free_port();
        let url = format!("redis://127.0.0.1:{port}/");
        let store = RedisStore::connect(&url, "rg-test", Duration::from_millis(500)).unwrap();
        let err = store.ping().await.unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
        let err = store.put_response(&response("resp_1", 7, 600)).await.unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
        assert!(store.hit_rate("payments", per_minute(3)).await.is_err());

        let server = RedisServer::start_on(port).unwrap();
        let mut answered = false;
        for _ in 0..50 {
            if store.ping().await.is_ok() {
                answered = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(answered, "the store did not reconnect to {}", server.url());
        store.put_response(&response("resp_1", 7, 600)).await.unwrap();
        assert!(store.response("resp_1").await.unwrap().is_some());
    }

    #[tokio::test]
    async fn a_redis_that_never_answers_is_unavailable_within_the_timeout() {
        // Accepts connections and never answers.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("redis://{}/", listener.local_addr().unwrap());
        let hold = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        let timeout = Duration::from_millis(250);
        let store = RedisStore::connect(&url, "rg-test", timeout).unwrap();
        for _ in 0..2 {
            let started = Instant::now();
            let ids = ["fc_0123456789_1".to_owned()];
            let stored = response("resp_1", 7, 600);
            let (ping, found, rate, put) = tokio::join!(
                store.ping(),
                store.items_by_id(&ids),
                store.hit_rate("payments", per_minute(3)),
                store.put_response(&stored),
            );
            let elapsed = started.elapsed();
            for err in [
                ping.unwrap_err(),
                found.unwrap_err(),
                rate.unwrap_err(),
                put.unwrap_err(),
            ] {
                assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
                assert!(
                    err.to_string().ends_with("redis did not answer within 250ms"),
                    "{err}"
                );
            }
            // The timeout, plus slack for a loaded machine.
            assert!(elapsed < timeout + Duration::from_secs(1), "{elapsed:?}");
        }
        hold.abort();
    }

    #[tokio::test]
    async fn a_redis_that_stops_answering_is_unavailable_then_answers_again() {
        let server = RedisServer::start();
        let timeout = Duration::from_millis(250);
        let store = RedisStore::connect(&server.url(), "rg-test", timeout).unwrap();
        store.ping().await.unwrap();
        // Every client's commands wait for 1.5 s.
        let mut conn = raw(&server).await;
        let _: () = ::redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(1500)
            .query_async(&mut conn)
            .await
            .unwrap();
        let started = Instant::now();
        let err = store.ping().await.unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
        assert_eq!(
            err.to_string(),
            "the state backend is unavailable: redis did not answer within 250ms"
        );
        assert!(
            started.elapsed() < timeout + Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        let mut answered = false;
        for _ in 0..50 {
            if store.ping().await.is_ok() {
                answered = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(answered, "the store did not answer again");
        store.put_response(&response("resp_1", 7, 600)).await.unwrap();
        assert!(store.response("resp_1").await.unwrap().is_some());
    }

    #[test]
    fn an_invalid_url_is_refused_without_repeating_it() {
        for url in ["http://:hunter2@127.0.0.1/", "redis://:hunter2@[::1/"] {
            let err = RedisStore::connect(url, "rg-test", Duration::from_millis(500)).unwrap_err();
            assert!(!err.to_string().contains("hunter2"), "{err}");
        }
    }

    #[test]
    fn the_gcra_parameters_match_governor_per_minute() {
        // Quota::per_minute(3): one every 20 s, a burst of 3.
        assert_eq!(gcra_params(per_minute(3)), (20_000_000, 40_000_000));
        assert_eq!(gcra_params(per_minute(1)), (60_000_000, 0));
        assert_eq!(gcra_params(per_minute(600)), (100_000, 59_900_000));
        // More than one a microsecond: the interval stays at 1 µs.
        let huge = gcra_params(per_minute(u32::MAX));
        assert_eq!(huge, (1, u64::from(u32::MAX - 1)));
    }

    #[tokio::test]
    async fn a_teams_rate_key_expires_once_its_allowance_is_full_again() {
        let server = RedisServer::start();
        let store = store(&server);
        for _ in 0..3 {
            assert_eq!(store.hit_rate("payments", per_minute(3)).await.unwrap(), Ok(()));
        }
        assert!(store.hit_rate("payments", per_minute(3)).await.unwrap().is_err());
        // The state expires once the team is back to a full allowance (60 s here).
        let mut conn = raw(&server).await;
        let pttl: i64 = ::redis::cmd("PTTL")
            .arg("rg-test:v1:rate:payments")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(pttl > 55_000 && pttl <= 60_000, "PTTL {pttl}");
    }
}
