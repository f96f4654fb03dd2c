//! The state backend's own metrics: what it may forget before a record's time (Redis's
//! `maxmemory-policy`, the embedded store's disk budget) and the writes it refused for lack of
//! room. docs/operations.md#records-are-never-forgotten-silently says what each means.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The policies Redis knows; any other name is reported as `other`, so a server cannot add
/// label values.
const KNOWN_POLICIES: [&str; 8] = [
    "noeviction",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
];

/// `replaygate_state_maxmemory_policy{policy}`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabels {
    policy: &'static str,
}

/// The state backend's metric handles. Cheap to clone: clones count on the same series.
#[derive(Debug, Clone, Default)]
pub struct StateMeter {
    writes_refused: Counter,
    evicted: Counter,
    eviction_risk: Gauge,
    policy: Family<PolicyLabels, Gauge>,
    /// The eviction warning was logged (once a process).
    warned: Arc<AtomicBool>,
}

impl StateMeter {
    /// Registers the families in `registry`.
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "replaygate_state_writes_refused",
            "Records and rate counts the state backend refused to write for lack of room (Redis out of memory, the embedded store's disk full)",
            self.writes_refused.clone(),
        );
        registry.register(
            "replaygate_state_evicted",
            "Recorded responses the embedded store removed before their time to stay within [state] max_disk_bytes, oldest first",
            self.evicted.clone(),
        );
        registry.register(
            "replaygate_state_eviction_risk",
            "1 when Redis's maxmemory-policy may evict replaygate's keys (allkeys-*, volatile-*), 0 when it may not, -1 when it could not be read",
            self.eviction_risk.clone(),
        );
        registry.register(
            "replaygate_state_maxmemory_policy",
            "Always 1 for the maxmemory-policy Redis last reported (unknown: it could not be read; none: the backend is not Redis)",
            self.policy.clone(),
        );
    }

    /// Counts `n` writes refused for lack of room.
    pub(crate) fn writes_refused(&self, n: u64) {
        self.writes_refused.inc_by(n);
    }

    /// How many writes were refused for lack of room.
    #[cfg(test)]
    pub(crate) fn refused_count(&self) -> u64 {
        self.writes_refused.get()
    }

    /// Counts `n` responses removed to stay within the disk budget.
    pub(crate) fn evicted(&self, n: u64) {
        self.evicted.inc_by(n);
    }

    /// How many responses were removed to stay within the disk budget.
    #[cfg(test)]
    pub(crate) fn evicted_count(&self) -> u64 {
        self.evicted.get()
    }

    /// Sets the policy Redis reported (`None`: it could not be read) and whether it may evict.
    /// Returns true the first time a policy that may evict is set in this process, so the
    /// caller warns once.
    pub(crate) fn policy(&self, policy: Option<&str>, may_evict: Option<bool>) -> bool {
        let label = match policy {
            None => "unknown",
            Some(name) => KNOWN_POLICIES
                .iter()
                .find(|known| **known == name)
                .copied()
                .unwrap_or("other"),
        };
        self.policy.clear();
        self.policy.get_or_create(&PolicyLabels { policy: label }).set(1);
        self.eviction_risk.set(match may_evict {
            Some(true) => 1,
            Some(false) => 0,
            None => -1,
        });
        may_evict == Some(true) && !self.warned.swap(true, Ordering::Relaxed)
    }

    /// The backend is not Redis: no policy (`policy="none"`), nothing evicted by one.
    pub(crate) fn no_policy(&self) {
        self.policy.clear();
        self.policy.get_or_create(&PolicyLabels { policy: "none" }).set(1);
        self.eviction_risk.set(0);
    }

    /// The value of `replaygate_state_eviction_risk`.
    #[cfg(test)]
    pub(crate) fn eviction_risk(&self) -> i64 {
        self.eviction_risk.get()
    }
}

#[cfg(test)]
mod tests {
    use crate::metrics::Metrics;

    #[test]
    fn the_policy_is_one_series_and_an_evicting_one_warns_once() {
        let metrics = Metrics::new();
        let meter = metrics.state();
        assert!(!meter.policy(Some("noeviction"), Some(false)));
        assert!(meter.policy(Some("allkeys-lru"), Some(true)));
        assert!(!meter.policy(Some("volatile-ttl"), Some(true)), "warned once");
        let text = metrics.encode();
        assert!(
            text.contains("replaygate_state_maxmemory_policy{policy=\"volatile-ttl\"} 1\n"),
            "{text}"
        );
        assert!(!text.contains("policy=\"noeviction\""), "{text}");
        assert!(text.contains("replaygate_state_eviction_risk 1\n"), "{text}");
        meter.policy(Some("a-policy-of-tomorrow"), Some(false));
        meter.policy(None, None);
        let text = metrics.encode();
        assert!(
            text.contains("replaygate_state_maxmemory_policy{policy=\"unknown\"} 1\n"),
            "{text}"
        );
        assert!(!text.contains("tomorrow"), "{text}");
        assert!(text.contains("replaygate_state_eviction_risk -1\n"), "{text}");
        meter.no_policy();
        let text = metrics.encode();
        assert!(
            text.contains("replaygate_state_maxmemory_policy{policy=\"none\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("replaygate_state_eviction_risk 0\n"), "{text}");
        meter.writes_refused(2);
        meter.evicted(3);
        let text = metrics.encode();
        assert!(
            text.contains("replaygate_state_writes_refused_total 2\n"),
            "{text}"
        );
        assert!(text.contains("replaygate_state_evicted_total 3\n"), "{text}");
    }
}
