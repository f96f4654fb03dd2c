//! Requests per minute per team (docs/teams.md#teams-and-policy), as the proxy answers them: the
//! `retry-after` of a refusal, and what a request gets while the state backend cannot count
//! (the counting itself is the state backend's: [`crate::state::StateStore::hit_rate`]).

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;

use crate::config::OnUnavailable;
use crate::error::ApiError;
use crate::metrics::{Metrics, StateMeter};
use crate::state::StoreError;
use crate::telemetry::LogEvery;

/// `retry-after` for a wait: whole seconds, rounded up, at least 1.
pub(crate) fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

/// What a team's request gets while the state backend cannot count its rate: `[ledger]
/// on_unavailable`, as for the ledger's own lookups. One per process.
#[derive(Debug)]
pub(crate) struct UncountedRates {
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
    pub(crate) fn new(on_unavailable: OnUnavailable, metrics: &Metrics) -> UncountedRates {
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
    pub(crate) fn decide(&self, team: &str, error: &StoreError) -> Result<(), ApiError> {
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
    pub(crate) fn allows(&self) -> bool {
        self.allow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
