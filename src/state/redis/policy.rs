//! What the `redis` backend learns of the server's memory: its `maxmemory-policy`
//! (docs/operations.md#records-are-never-forgotten-silently), and a write refused because the
//! server is at its `maxmemory` (an `OOM` reply), which makes the store full until a write lands
//! again.

use ::redis::RedisError;

use super::{unavailable, RedisStore};
use crate::state::eviction::{policy_in_info, MemoryPolicy};
use crate::state::StoreError;

/// The `OOM` error code Redis answers a write with at `maxmemory` under `noeviction`.
const OOM: &str = "OOM";

impl RedisStore {
    /// The server's `maxmemory-policy`: from `INFO memory` (which managed Redis services answer
    /// where they disable `CONFIG`), else from `CONFIG GET maxmemory-policy`; unknown when the
    /// server refuses both (an ACL user without them). `Err` only when Redis does not answer.
    pub(in crate::state) async fn memory_policy(&self) -> Result<MemoryPolicy, StoreError> {
        let info = self
            .ask::<String>(::redis::cmd("INFO").arg("memory").clone())
            .await?;
        let info_refused = match info {
            Ok(info) => match policy_in_info(&info) {
                Some(name) => return Ok(MemoryPolicy::Named(name.to_owned())),
                None => "INFO memory has no maxmemory_policy".to_owned(),
            },
            Err(refused) => format!("INFO refused: {refused}"),
        };
        let config = self
            .ask::<Vec<String>>(::redis::cmd("CONFIG").arg("GET").arg("maxmemory-policy").clone())
            .await?;
        Ok(match config {
            Ok(pair) if pair.len() == 2 && !pair[1].is_empty() => MemoryPolicy::Named(pair[1].clone()),
            Ok(_) => {
                MemoryPolicy::Unknown(format!("{info_refused}; CONFIG GET answered no maxmemory-policy"))
            }
            Err(refused) => MemoryPolicy::Unknown(format!("{info_refused}; CONFIG GET refused: {refused}")),
        })
    }

    /// Sends `command`: `Ok(Err(reply))` when the server answered it with an error reply (a
    /// command this user may not run, or that the server disables), `Err` when Redis did not
    /// answer.
    async fn ask<T: ::redis::FromRedisValue>(
        &self,
        command: ::redis::Cmd,
    ) -> Result<Result<T, RedisError>, StoreError> {
        let answer = self
            .run(|mut conn| {
                let command = &command;
                async move { Ok(command.query_async::<T>(&mut conn).await) }
            })
            .await?;
        match answer {
            Err(err) if err.code().is_none() => Err(unavailable(&err)),
            answer => Ok(answer),
        }
    }

    /// The store error for a failed command: [`StoreError::Full`] for an `OOM` reply (the
    /// store is full until a write lands again), else unavailable.
    pub(super) fn failed(&self, err: &RedisError) -> StoreError {
        if !is_out_of_memory(err) {
            return unavailable(err);
        }
        let why =
            format!("redis is at its maxmemory and refuses writes (maxmemory-policy noeviction): {err}");
        self.inner.health.refused(&why);
        StoreError::Full(why)
    }

    /// `/readyz` while the last write was refused for memory: whether a small write lands now
    /// (a key of its own, gone in a minute).
    pub(super) async fn probe_write(&self) -> Result<(), StoreError> {
        let key = &self.key("ready", "probe");
        self.run(|mut conn| async move {
            ::redis::cmd("SET")
                .arg(key)
                .arg(1)
                .arg("EX")
                .arg(60)
                .exec_async(&mut conn)
                .await
        })
        .await?;
        self.inner.health.written();
        Ok(())
    }
}

/// Whether `err` is an `OOM` reply, to the command or to one inside a transaction.
fn is_out_of_memory(err: &RedisError) -> bool {
    err.code() == Some(OOM)
        || err
            .clone()
            .into_server_errors()
            .is_some_and(|errors| errors.iter().any(|(_, error)| error.code() == OOM))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::test_server::RedisServer;
    use super::*;
    use crate::state::test_records::one_reasoning_item;
    use crate::state::{now_unix, report_memory_policy, StateStore};

    fn store(server: &RedisServer) -> RedisStore {
        RedisStore::connect(&server.url(), "rg-test", Duration::from_secs(2)).unwrap()
    }

    /// Sets the server's `maxmemory` (bytes; 0 is no limit) over a connection of its own.
    async fn set_maxmemory(server: &RedisServer, bytes: u64) {
        let mut conn = ::redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let () = ::redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(bytes)
            .query_async(&mut conn)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn the_policy_is_read_and_an_evicting_one_is_reported() {
        let server = RedisServer::start_with(&["--maxmemory-policy", "volatile-lru"], None);
        let redis = store(&server);
        assert_eq!(
            redis.memory_policy().await.unwrap(),
            MemoryPolicy::Named("volatile-lru".into())
        );
        let meter = crate::metrics::StateMeter::default();
        let policy = report_memory_policy(&StateStore::Redis(redis), &meter).await;
        assert_eq!(policy.unwrap().may_evict(), Some(true));
        assert_eq!(meter.eviction_risk(), 1);
        // Not Redis: nothing to read.
        let memory = StateStore::Memory(Default::default());
        assert_eq!(report_memory_policy(&memory, &meter).await, None);
    }

    #[tokio::test]
    async fn a_user_allowed_neither_info_nor_config_reads_an_unknown_policy() {
        let server = RedisServer::start_with(
            &[
                "--user",
                "rg",
                "on",
                ">pw-for-tests",
                "~rg-test:*",
                "+get",
                "+set",
                "+ping",
            ],
            None,
        );
        let login = crate::state::RedisLogin {
            username: Some("rg".into()),
            password: Some("pw-for-tests".into()),
            ..Default::default()
        };
        let redis =
            RedisStore::connect_with(&server.url(), &login, "rg-test", Duration::from_secs(2)).unwrap();
        let policy = redis.memory_policy().await.unwrap();
        let MemoryPolicy::Unknown(why) = &policy else {
            panic!("{policy:?}")
        };
        assert!(
            why.contains("INFO refused") && why.contains("CONFIG GET refused"),
            "{why}"
        );
        assert!(why.contains("NoPerm"), "{why}");
        let meter = crate::metrics::StateMeter::default();
        report_memory_policy(&StateStore::Redis(redis), &meter).await;
        assert_eq!(meter.eviction_risk(), -1);
    }

    #[tokio::test]
    async fn a_redis_that_does_not_answer_has_no_policy_to_read() {
        let port = super::super::test_server::free_port();
        let redis = RedisStore::connect(
            &format!("redis://127.0.0.1:{port}/"),
            "rg",
            Duration::from_millis(300),
        )
        .unwrap();
        let err = redis.memory_policy().await.unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    }

    #[tokio::test]
    async fn a_write_refused_for_memory_makes_the_store_full_until_one_lands() {
        let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"], None);
        let redis = store(&server);
        let kept = one_reasoning_item("resp_kept", "rs_kept", now_unix() + 600);
        redis.put_response(&kept).await.unwrap();

        set_maxmemory(&server, 1).await;
        let refused = one_reasoning_item("resp_refused", "rs_refused", now_unix() + 600);
        let err = redis.put_response(&refused).await.unwrap_err();
        assert!(
            matches!(&err, StoreError::Full(why) if why.contains("OOM")),
            "{err:?}"
        );
        let per_minute = std::num::NonZeroU32::new(5).unwrap();
        let err = redis.hit_rate("payments", per_minute).await.unwrap_err();
        assert!(matches!(err, StoreError::Full(_)), "{err:?}");
        // Lookups do not read "no record" while records are being refused, even of what is there.
        for err in [
            redis.response("resp_kept").await.unwrap_err(),
            redis.items_by_id(&["rs_kept".into()]).await.unwrap_err(),
            redis.ping().await.unwrap_err(),
        ] {
            assert!(matches!(err, StoreError::Full(_)), "{err:?}");
        }

        set_maxmemory(&server, 0).await;
        redis.ping().await.unwrap();
        assert_eq!(redis.response("resp_kept").await.unwrap(), Some(kept));
        assert_eq!(redis.response("resp_refused").await.unwrap(), None);
        redis.put_response(&refused).await.unwrap();
        assert!(redis.response("resp_refused").await.unwrap().is_some());
    }
}
