//! Budgets' spend counters in Redis (docs/budgets.md#counters): `P:v1:spend:{counter}` holds
//! the counter as an integer, expiring at its window's end plus the grace (`EXPIREAT`). A
//! reserve and a settle are each one Lua script on one key (EVALSHA, the script loaded when the
//! server lacks it), so they are atomic on one server, behind Sentinel, and on a cluster, where
//! the key's hash tag puts the script in its slot.

use std::sync::LazyLock;

use ::redis::Script;

use super::RedisStore;
use crate::state::spend::{CounterKey, Reservation};
use crate::state::StoreError;

/// Adds `ARGV[1]` to `KEYS[1]` if it then holds at most `ARGV[2]`, and makes it expire at Unix
/// time `ARGV[3]`. Returns `{1, spent}` when added, `{0, spent}` when not.
const RESERVE_SCRIPT: &str = r#"
local spent = tonumber(redis.call('GET', KEYS[1]) or '0')
if spent + tonumber(ARGV[1]) > tonumber(ARGV[2]) then
  return {0, spent}
end
local total = redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('EXPIREAT', KEYS[1], ARGV[3])
return {1, total}
"#;

/// Adds `ARGV[1]` (an integer, maybe negative) to `KEYS[1]`, never below 0, and makes it
/// expire at Unix time `ARGV[2]`; a counter that is absent and would stay at 0 is not made.
/// Returns what it holds.
const SETTLE_SCRIPT: &str = r#"
local delta = tonumber(ARGV[1])
if delta <= 0 and redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local total = redis.call('INCRBY', KEYS[1], ARGV[1])
if total < 0 then
  redis.call('SET', KEYS[1], '0')
  total = 0
end
redis.call('EXPIREAT', KEYS[1], ARGV[2])
return total
"#;

static RESERVE: LazyLock<Script> = LazyLock::new(|| Script::new(RESERVE_SCRIPT));
static SETTLE: LazyLock<Script> = LazyLock::new(|| Script::new(SETTLE_SCRIPT));

impl RedisStore {
    /// [`StateStore::reserve`](crate::state::StateStore::reserve) in one script; the counter
    /// expires at `expires`.
    pub(in crate::state) async fn reserve(
        &self,
        key: &CounterKey,
        amount: u64,
        limit: u64,
        expires: u64,
    ) -> Result<Reservation, StoreError> {
        let key = &self.key("spend", key.as_str());
        let (added, spent): (u8, i64) = self
            .run(|mut conn| async move {
                RESERVE
                    .key(key)
                    .arg(amount)
                    .arg(limit)
                    .arg(expires)
                    .invoke_async(&mut conn)
                    .await
            })
            .await?;
        self.inner.health.written();
        Ok(Reservation {
            reserved: added == 1,
            spent: counted(spent)?,
        })
    }

    /// [`StateStore::settle`](crate::state::StateStore::settle) in one script: adds `delta`;
    /// the counter expires at `expires`.
    pub(in crate::state) async fn settle(
        &self,
        key: &CounterKey,
        delta: i64,
        expires: u64,
    ) -> Result<u64, StoreError> {
        let key = &self.key("spend", key.as_str());
        let spent: i64 = self
            .run(|mut conn| async move {
                SETTLE
                    .key(key)
                    .arg(delta)
                    .arg(expires)
                    .invoke_async(&mut conn)
                    .await
            })
            .await?;
        self.inner.health.written();
        counted(spent)
    }

    /// What the counter holds, 0 when it is absent.
    pub(in crate::state) async fn spent(&self, key: &CounterKey) -> Result<u64, StoreError> {
        let key = &self.key("spend", key.as_str());
        let spent: Option<i64> = self
            .run(|mut conn| async move { ::redis::cmd("GET").arg(key).query_async(&mut conn).await })
            .await?;
        spent.map_or(Ok(0), counted)
    }
}

/// A counter's value as Redis answered it: never negative.
fn counted(spent: i64) -> Result<u64, StoreError> {
    u64::try_from(spent).map_err(|_| StoreError::Corrupt(format!("a spend counter holds {spent}")))
}

/// Two hundred reserves at once of 20 units each against a limit of 1,000 on team `team`'s
/// counter, spread over `replicas` (stores of one Redis, as replicas have): how many were
/// reserved, and what the counter holds then. Every answer is checked to be within the limit.
#[cfg(test)]
pub(in crate::state) async fn two_hundred_reserves(replicas: &[RedisStore], team: &str) -> (usize, u64) {
    use crate::config::BudgetUnit;
    use crate::spend::Window;
    use crate::state::spend::SpendOwner;

    let key = std::sync::Arc::new(CounterKey::new(
        &SpendOwner::team(team),
        BudgetUnit::Tokens,
        Window::Day,
        0,
    ));
    let expires = crate::state::now_unix() + 3600;
    let tasks: Vec<_> = (0..200)
        .map(|n| {
            let (replica, key) = (replicas[n % replicas.len()].clone(), key.clone());
            tokio::spawn(async move { replica.reserve(&key, 20, 1000, expires).await.unwrap() })
        })
        .collect();
    let mut reserved = 0;
    for task in tasks {
        let reservation = task.await.unwrap();
        assert!(reservation.spent <= 1000, "{reservation:?}");
        reserved += usize::from(reservation.reserved);
    }
    (reserved, replicas[0].spent(&key).await.unwrap())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::test_server::RedisServer;
    use super::*;
    use crate::config::BudgetUnit;
    use crate::spend::Window;
    use crate::state::now_unix;
    use crate::state::spend::SpendOwner;

    fn store(server: &RedisServer) -> RedisStore {
        RedisStore::connect(&server.url(), "rg-test", Duration::from_secs(2)).unwrap()
    }

    fn counter(team: &str) -> CounterKey {
        CounterKey::new(&SpendOwner::team(team), BudgetUnit::Tokens, Window::Day, 0)
    }

    /// Three replicas' stores on one server, 200 reserves at once against a limit that fits
    /// 50: exactly 50 fit, and the counter holds the limit.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn three_replicas_sharing_one_redis_reserve_exactly_what_fits() {
        let server = RedisServer::start();
        let replicas: Vec<RedisStore> = (0..3).map(|_| store(&server)).collect();
        assert_eq!(two_hundred_reserves(&replicas, "payments").await, (50, 1000));
    }

    #[tokio::test]
    async fn a_counter_expires_at_the_time_it_was_given() {
        let server = RedisServer::start();
        let store = store(&server);
        let key = counter("t");
        let expires = now_unix() + 1000;
        store.reserve(&key, 5, 10, expires).await.unwrap();
        store.settle(&key, 2, expires).await.unwrap();
        let mut conn = ::redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let name = format!("rg-test:v1:spend:{}", key.as_str());
        let (value, at): (String, u64) = ::redis::pipe()
            .cmd("GET")
            .arg(&name)
            .cmd("EXPIRETIME")
            .arg(&name)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!((value.as_str(), at), ("7", expires));
        // A settle down to nothing of an absent counter makes none.
        assert_eq!(store.settle(&counter("none"), -5, expires).await.unwrap(), 0);
        let exists: bool = ::redis::cmd("EXISTS")
            .arg(format!("rg-test:v1:spend:{}", counter("none").as_str()))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(!exists);
    }

    #[tokio::test]
    async fn the_scripts_are_loaded_again_when_the_server_forgot_them() {
        let server = RedisServer::start();
        let store = store(&server);
        let key = counter("t");
        let expires = now_unix() + 1000;
        store.reserve(&key, 5, 10, expires).await.unwrap();
        let mut conn = ::redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let () = ::redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(store.reserve(&key, 5, 10, expires).await.unwrap().reserved);
        assert_eq!(store.settle(&key, -3, expires).await.unwrap(), 7);
    }

    #[tokio::test]
    async fn a_counter_that_is_not_a_number_is_an_error_never_a_count() {
        let server = RedisServer::start();
        let store = store(&server);
        let key = counter("t");
        let mut conn = ::redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let () = ::redis::cmd("SET")
            .arg(format!("rg-test:v1:spend:{}", key.as_str()))
            .arg("many")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(store.reserve(&key, 1, 10, now_unix() + 60).await.is_err());
        assert!(store.spent(&key).await.is_err());
    }
}
