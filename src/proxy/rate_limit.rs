//! Requests per minute per team (contract §7), behind a small trait so a shared store can
//! count for many replicas.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter as Gcra};

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
}
