//! What Redis may forget before a record's time: its `maxmemory-policy`. Every key replaygate
//! writes has a TTL, so `volatile-*` policies may evict them as surely as `allkeys-*` ones; only
//! `noeviction` keeps them (and refuses writes at `maxmemory` instead, which replaygate treats
//! as an unavailable store). An evicted record reads as unknown provenance: without teams the
//! gate lets through what it would have refused; with teams its owner is refused too
//! (`unknown_state`).

use super::StateStore;
use crate::metrics::StateMeter;

/// Redis's `maxmemory-policy`, as replaygate could read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemoryPolicy {
    /// The server named it (`INFO memory`, else `CONFIG GET`).
    Named(String),
    /// Neither answered (an ACL user without `INFO`, a managed Redis without `CONFIG`); why.
    Unknown(String),
}

impl MemoryPolicy {
    /// Whether the policy may evict replaygate's keys; `None` when it is unknown.
    pub(crate) fn may_evict(&self) -> Option<bool> {
        match self {
            MemoryPolicy::Named(name) => Some(policy_may_evict(name)),
            MemoryPolicy::Unknown(_) => None,
        }
    }

    /// The policy's name, if known.
    pub(crate) fn name(&self) -> Option<&str> {
        match self {
            MemoryPolicy::Named(name) => Some(name),
            MemoryPolicy::Unknown(_) => None,
        }
    }
}

/// Whether a `maxmemory-policy` may evict a key with a TTL.
fn policy_may_evict(name: &str) -> bool {
    name.starts_with("allkeys-") || name.starts_with("volatile-")
}

/// The `maxmemory_policy` field of an `INFO memory` reply.
pub(super) fn policy_in_info(info: &str) -> Option<&str> {
    info.lines()
        .find_map(|line| line.strip_prefix("maxmemory_policy:"))
        .map(str::trim)
        .filter(|name| !name.is_empty())
}

/// Reads the store's memory policy (Redis only; `None` for the others, or when Redis does not
/// answer at all), reports it on `meter`, and logs a policy that may evict at warn, once a
/// process.
pub async fn report_memory_policy(store: &StateStore, meter: &StateMeter) -> Option<MemoryPolicy> {
    let StateStore::Redis(redis) = store else {
        return None;
    };
    let policy = match redis.memory_policy().await {
        Ok(policy) => policy,
        Err(error) => {
            tracing::debug!(%error, "the redis maxmemory-policy could not be read");
            return None;
        }
    };
    let may_evict = policy.may_evict();
    redis.note_memory_policy(may_evict);
    if meter.policy(policy.name(), may_evict) {
        tracing::warn!(
            policy = policy.name().unwrap_or_default(),
            "redis may evict replaygate's records before their time (maxmemory-policy evicts keys with a TTL, \
             as every ledger key has): a forgotten record reads as unknown provenance (let through without \
             teams, refused as unknown_state with them); set maxmemory-policy noeviction (docs/operations.md, Records are never forgotten silently)"
        );
    }
    if let MemoryPolicy::Unknown(why) = &policy {
        tracing::debug!(%why, "the redis maxmemory-policy is unknown");
    }
    Some(policy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_but_noeviction_may_evict_a_key_with_a_ttl() {
        for name in [
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "volatile-lru",
            "volatile-ttl",
        ] {
            assert_eq!(MemoryPolicy::Named(name.into()).may_evict(), Some(true), "{name}");
        }
        assert_eq!(MemoryPolicy::Named("noeviction".into()).may_evict(), Some(false));
        assert_eq!(MemoryPolicy::Unknown("NOPERM".into()).may_evict(), None);
    }

    #[test]
    fn the_policy_is_read_from_info_memory() {
        let info = "# Memory\r\nused_memory:1032192\r\nmaxmemory:0\r\nmaxmemory_policy:allkeys-lru\r\nmem_fragmentation_ratio:1.2\r\n";
        assert_eq!(policy_in_info(info), Some("allkeys-lru"));
        assert_eq!(policy_in_info("# Memory\r\nused_memory:1\r\n"), None);
        assert_eq!(policy_in_info("maxmemory_policy:\r\n"), None);
    }
}
