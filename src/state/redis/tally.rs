//! Usage tallies in Redis (docs/usage.md#get-usage): `P:v1:tally:{tally}` is a hash of one
//! integer per field of [`WindowUsage`], expiring at its window's end plus the grace
//! (`EXPIREAT`). An answer's fields are added by one Lua script on the one key (EVALSHA), so
//! they are added together or not at all, on one server, behind Sentinel and on a cluster.

use std::sync::LazyLock;

use ::redis::Script;

use super::RedisStore;
use crate::state::tally::{TallyKey, WindowUsage};
use crate::state::StoreError;

/// Adds each pair of `ARGV` (a field, an amount) to the hash `KEYS[1]`, then makes it expire
/// at the Unix time of `ARGV`'s last element.
const ADD_SCRIPT: &str = r#"
for i = 1, #ARGV - 1, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('EXPIREAT', KEYS[1], ARGV[#ARGV])
return 1
"#;

static ADD: LazyLock<Script> = LazyLock::new(|| Script::new(ADD_SCRIPT));

impl RedisStore {
    /// [`StateStore::add_usage`](crate::state::StateStore::add_usage) in one script; the
    /// tally expires at `expires`.
    pub(in crate::state) async fn add_usage(
        &self,
        key: &TallyKey,
        amounts: &[(&str, u64)],
        expires: u64,
    ) -> Result<(), StoreError> {
        let key = &self.key("tally", key.as_str());
        let _: i64 = self
            .run(|mut conn| async move {
                let mut invocation = ADD.key(key);
                for (field, amount) in amounts {
                    invocation.arg(*field).arg(*amount);
                }
                invocation.arg(expires).invoke_async(&mut conn).await
            })
            .await?;
        self.inner.health.written();
        Ok(())
    }

    /// What the tally holds, 0 for each field it lacks.
    pub(in crate::state) async fn window_usage(&self, key: &TallyKey) -> Result<WindowUsage, StoreError> {
        let key = &self.key("tally", key.as_str());
        let values: Vec<Option<i64>> = self
            .run(|mut conn| async move {
                ::redis::cmd("HMGET")
                    .arg(key)
                    .arg(&WindowUsage::FIELDS[..])
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        let mut read = [0; 7];
        if values.len() != read.len() {
            return Err(StoreError::Corrupt(format!(
                "a usage tally answered {} fields",
                values.len()
            )));
        }
        for (slot, value) in read.iter_mut().zip(values) {
            let value = value.unwrap_or(0);
            *slot = u64::try_from(value)
                .map_err(|_| StoreError::Corrupt(format!("a usage tally holds {value}")))?;
        }
        Ok(WindowUsage::from_values(read))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::test_server::RedisServer;
    use super::*;
    use crate::spend::Window;
    use crate::state::now_unix;
    use crate::state::spend::SpendOwner;

    /// The tally is one hash with the fields as written, expiring at the time given.
    #[tokio::test]
    async fn a_tally_is_one_hash_expiring_at_the_time_given() {
        let server = RedisServer::start();
        let store = RedisStore::connect(&server.url(), "rg-test", Duration::from_secs(2)).unwrap();
        let key = TallyKey::new(&SpendOwner::team("t"), Window::Day, 0);
        let expires = now_unix() + 1000;
        store
            .add_usage(&key, &[("input", 5), ("answers", 1)], expires)
            .await
            .unwrap();
        let mut conn = ::redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let name = format!("rg-test:v1:tally:{}", key.as_str());
        let (fields, at): (Vec<(String, u64)>, u64) = ::redis::pipe()
            .cmd("HGETALL")
            .arg(&name)
            .cmd("EXPIRETIME")
            .arg(&name)
            .query_async(&mut conn)
            .await
            .unwrap();
        let mut fields = fields;
        fields.sort();
        assert_eq!(fields, [("answers".to_owned(), 1), ("input".to_owned(), 5)]);
        assert_eq!(at, expires);
        // A field that is not a count is an error, never a 0.
        let () = ::redis::cmd("HSET")
            .arg(&name)
            .arg("output")
            .arg("-3")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(store.window_usage(&key).await.is_err());
    }
}
