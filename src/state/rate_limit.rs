//! Requests per minute per team (docs/teams.md#teams-and-policy), counted in this process: what
//! the memory and embedded backends count with (the Redis backend counts in Redis, for every
//! replica at once).

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter as Gcra};

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
    /// Counts one request of `team`, whose limit is `per_minute`. `Err` holds how long until a
    /// request would be accepted.
    pub fn check(&self, team: &str, per_minute: NonZeroU32) -> Result<(), Duration> {
        self.limiter(team, per_minute)
            .check()
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }

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
}
