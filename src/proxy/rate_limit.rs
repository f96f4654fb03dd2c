//! Requests per minute per team (docs/teams.md#teams-and-policy), behind a small trait so a shared
//! store can count for many replicas.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter as Gcra};
use prometheus_client::metrics::counter::Counter;

use crate::config::OnUnavailable;
use crate::error::ApiError;
use crate::metrics::{Metrics, StateMeter};
use crate::state::StoreError;
use crate::telemetry::LogEvery;

/// Counts requests per team against each team's limit.
pub trait RateLimiter: Send + Sync + std::fmt::Debug {
    /// Counts one request of `team`, whose limit is `per_minute`. `Err` holds how long until a
    /// request would be accepted.
    fn check(&self, team: &str, per_minute: NonZeroU32) -> Result<(), Duration>;
}

/// The limiter of one process: a GCRA per team (bursts up to the whole minute's allowance,
/// refilled evenly). A team keeps its state across reloads while its limit is unchanged.
#[derive(Debug, Default)]
pub struct LocalRateLimiter {
    teams: RwLock<HashMap<String, TeamLimiter>>,
    clock: DefaultClock,
}

#[derive(Debug, Clone)]
struct TeamLimiter {
    per_minute: NonZeroU32,
    limiter: Arc<DefaultDirectRateLimiter>,
}

impl LocalRateLimiter {
    fn limiter(&self, team: &str, per_minute: NonZeroU32) -> Arc<DefaultDirectRateLimiter> {
        let teams = self.teams.read().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = teams.get(team).filter(|t| t.per_minute == per_minute) {
            return known.limiter.clone();
        }
        drop(teams);
        let mut teams = self.teams.write().unwrap_or_else(|e| e.into_inner());
        let entry = teams
            .entry(team.to_owned())
            .or_insert_with(|| TeamLimiter::new(per_minute));
        if entry.per_minute != per_minute {
            *entry = TeamLimiter::new(per_minute);
        }
        entry.limiter.clone()
    }
}

impl TeamLimiter {
    fn new(per_minute: NonZeroU32) -> TeamLimiter {
        TeamLimiter {
            per_minute,
            limiter: Arc::new(Gcra::direct(Quota::per_minute(per_minute))),
        }
    }
}

impl RateLimiter for LocalRateLimiter {
    fn check(&self, team: &str, per_minute: NonZeroU32) -> Result<(), Duration> {
        self.limiter(team, per_minute)
            .check()
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }
}

/// `retry-after` for a wait: whole seconds, rounded up, at least 1.
pub fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

/// What a team's request gets while the state backend cannot count its rate: `[ledger]
/// on_unavailable`, as for the ledger's own lookups. One per process.
#[derive(Debug)]
pub struct UncountedRates {
    allow: bool,
    /// `replaygate_rate_limit_unavailable_total`.
    counter: Counter,
    /// Counts the counts Redis refused to write for lack of memory.
    state: StateMeter,
    /// The warnings, one a second.
    warnings: LogEvery,
}

impl UncountedRates {
    /// The policy `on_unavailable`, counting among `metrics`.
    pub fn new(on_unavailable: OnUnavailable, metrics: &Metrics) -> UncountedRates {
        UncountedRates {
            allow: on_unavailable == OnUnavailable::Allow,
            counter: metrics.rate_limit_unavailable(),
            state: metrics.state().clone(),
            warnings: LogEvery::new(Duration::from_secs(1)),
        }
    }

    /// A request of `team` whose rate could not be counted (`error`): counted and logged (one
    /// line a second, with how many were not logged since), then let through under `"allow"`,
    /// else refused 503 `ledger_unavailable` (a limit nobody can count is not enforced). A
    /// count the store refused to write for lack of room ([`StoreError::Full`]) is one of these,
    /// counted among the refused writes too.
    pub fn decide(&self, team: &str, error: &StoreError) -> Result<(), ApiError> {
        self.counter.inc();
        if matches!(error, StoreError::Full(_)) {
            self.state.writes_refused(1);
        }
        if let Some(held_back) = self.warnings.admit() {
            let outcome = if self.allow { "allowed" } else { "refused" };
            tracing::warn!(
                team = %team,
                %error,
                outcome,
                held_back,
                "the team's rate could not be counted"
            );
        }
        if self.allow {
            return Ok(());
        }
        Err(ApiError::LedgerUnavailable(format!(
            "counting team `{team}`'s requests per minute: {error}"
        )))
    }

    /// Whether requests go on while the store cannot answer (`on_unavailable = "allow"`).
    pub fn allows(&self) -> bool {
        self.allow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn per_minute(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    #[test]
    fn a_team_gets_its_minute_at_once_and_then_waits() {
        let limiter = LocalRateLimiter::default();
        for _ in 0..3 {
            assert!(limiter.check("payments", per_minute(3)).is_ok());
        }
        let wait = limiter.check("payments", per_minute(3)).unwrap_err();
        assert!(
            wait > Duration::from_secs(15) && wait <= Duration::from_secs(20),
            "{wait:?}"
        );
        // Another team has its own count.
        assert!(limiter.check("search", per_minute(3)).is_ok());
    }

    #[test]
    fn a_changed_limit_starts_afresh_and_an_unchanged_one_keeps_its_count() {
        let limiter = LocalRateLimiter::default();
        assert!(limiter.check("t", per_minute(1)).is_ok());
        assert!(limiter.check("t", per_minute(1)).is_err());
        assert!(limiter.check("t", per_minute(2)).is_ok());
    }

    #[test]
    fn retry_after_is_whole_seconds_rounded_up() {
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(20)), 20);
        assert_eq!(retry_after_secs(Duration::from_millis(19_001)), 20);
    }

    #[test]
    fn an_uncounted_rate_is_refused_unless_allowed_and_counted_either_way() {
        let metrics = Metrics::new();
        let refuse = UncountedRates::new(OnUnavailable::Refuse, &metrics);
        let refused = StoreError::Unavailable("connection refused".into());
        let error = refuse.decide("payments", &refused).unwrap_err();
        assert_eq!(error.code(), "ledger_unavailable");
        assert_eq!(error.status(), http::StatusCode::SERVICE_UNAVAILABLE);
        let allow = UncountedRates::new(OnUnavailable::Allow, &metrics);
        assert!(allow.decide("payments", &refused).is_ok());
        assert_eq!(metrics.state().refused_count(), 0);
        // A count Redis refused for memory is refused as well, and counted as a refused write.
        let full = StoreError::Full("OOM command not allowed".into());
        assert_eq!(
            refuse.decide("payments", &full).unwrap_err().code(),
            "ledger_unavailable"
        );
        assert!(allow.decide("payments", &full).is_ok());
        assert_eq!(metrics.state().refused_count(), 2);
        assert!(
            metrics
                .encode()
                .contains("replaygate_rate_limit_unavailable_total 4\n"),
            "{}",
            metrics.encode()
        );
    }
}
