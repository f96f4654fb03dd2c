//! Budgets' spend counters (docs/budgets.md#counters): one integer per owner (a team, or a key
//! with its own budget), unit (tokens or micro-dollars) and window, kept by the state backend
//! beside the rate counts. Two operations change a counter, each one atomic operation on the
//! backend, so that any number of replicas and requests never count past a limit together:
//! [`StateStore::reserve`] adds an amount only if it fits, and [`StateStore::settle`] replaces
//! a reservation by what was used.
//!
//! A counter is named by its owner, unit, window and the window's start, never by the budget's
//! amount: a budget changed by a reload counts on in the same counter. It is kept until
//! [`COUNTER_GRACE_SECS`] after its window's end, then forgotten (Redis by its TTL, the other
//! backends when touched or swept).

use super::{now_unix, StateStore, StoreError};
use crate::spend::{Bounds, Window};
use crate::spend::{Budget, BudgetUnit, MAX_BUDGET_UNITS};
pub(crate) use crate::spend::{OwnedBudget, SpendOwner};

/// How long a counter outlives its window: an answer that ends just after the edge still
/// settles in the window it reserved in, and a replica whose clock is behind still counts in
/// the window it sees (docs/budgets.md#windows).
pub(crate) const COUNTER_GRACE_SECS: u64 = 300;

/// What [`StateStore::reserve`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reservation {
    /// Whether the amount was added: it fit under the limit.
    pub(crate) reserved: bool,
    /// What the counter holds now, the amount included when it was added.
    pub(crate) spent: u64,
}

/// The name of one window's counter: `team:NAME` or `key:ID` (`digest:HEX` for a key without
/// an id), then the unit, the window and its start, e.g. `team:payments:tokens:day:1773532800`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct CounterKey(String);

impl CounterKey {
    /// The counter of `owner`'s budget in `unit`, for the `window` starting at `start_unix`.
    pub(crate) fn new(owner: &SpendOwner, unit: BudgetUnit, window: Window, start_unix: u64) -> CounterKey {
        CounterKey(format!(
            "{}:{}:{window}:{start_unix}",
            owner.as_str(),
            unit.as_str()
        ))
    }

    /// The name, as the backends key the counter.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// A budget's counter for the window holding a given time: its name, limit and window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BudgetCounter {
    /// The counter's name.
    pub(crate) key: CounterKey,
    /// The budget, in the counter's unit.
    pub(crate) limit: u64,
    /// The window counted in.
    pub(crate) bounds: Bounds,
}

impl BudgetCounter {
    /// `owner`'s counter of `budget` in the window holding `now_unix`.
    pub(crate) fn of(owner: &SpendOwner, budget: &Budget, now_unix: u64) -> BudgetCounter {
        let bounds = budget.window.bounds(now_unix);
        BudgetCounter {
            key: CounterKey::new(owner, budget.limit.unit(), budget.window, bounds.start),
            limit: budget.limit.units(),
            bounds,
        }
    }
}

/// When the counter of the window ending at `window_end_unix` is forgotten.
pub(super) fn expiry(window_end_unix: u64) -> u64 {
    window_end_unix.saturating_add(COUNTER_GRACE_SECS)
}

/// An amount as the backends take it: at most [`MAX_BUDGET_UNITS`] (2^53, which a Redis
/// script's numbers hold exactly).
pub(super) fn clamp(amount: u64) -> u64 {
    amount.min(MAX_BUDGET_UNITS)
}

impl StateStore {
    /// Adds `amount` to the counter `key` if what it holds plus `amount` is at most `limit`,
    /// in one atomic operation on the backend; the counter is kept until
    /// [`COUNTER_GRACE_SECS`] after `window_end_unix`. Amounts and limits are tokens or
    /// micro-dollars, at most 2^53 (larger ones count as 2^53).
    pub(crate) async fn reserve(
        &self,
        key: &CounterKey,
        amount: u64,
        limit: u64,
        window_end_unix: u64,
    ) -> Result<Reservation, StoreError> {
        let (amount, limit, expires) = (clamp(amount), clamp(limit), expiry(window_end_unix));
        match self {
            StateStore::Memory(store) => {
                Ok(store.counters().reserve(key, amount, limit, expires, now_unix()))
            }
            StateStore::Redis(store) => store.reserve(key, amount, limit, expires).await,
            StateStore::Embedded(store) => store.reserve(key, amount, limit, expires),
        }
    }

    /// Replaces a reservation of `reserved` on the counter `key` by the `actual` amount used:
    /// adds `actual - reserved` (less than nothing when less was used), never leaving the
    /// counter below zero, in one atomic operation on the backend. A counter lost with the
    /// backend's data counts from zero; one whose window is over (and its grace) is left gone.
    /// Returns what the counter holds now.
    pub(crate) async fn settle(
        &self,
        key: &CounterKey,
        reserved: u64,
        actual: u64,
        window_end_unix: u64,
    ) -> Result<u64, StoreError> {
        let delta = i64::try_from(clamp(actual)).unwrap_or(i64::MAX)
            - i64::try_from(clamp(reserved)).unwrap_or(i64::MAX);
        let expires = expiry(window_end_unix);
        let now = now_unix();
        if expires <= now {
            // The window is long over: its counter is gone, and stays so.
            return Ok(0);
        }
        match self {
            StateStore::Memory(store) => Ok(store.counters().settle(key, delta, expires, now)),
            StateStore::Redis(store) => store.settle(key, delta, expires).await,
            StateStore::Embedded(store) => store.settle(key, delta, expires),
        }
    }

    /// What the counter `key` holds (0 when it is gone), for `GET /usage`.
    pub(crate) async fn spent(&self, key: &CounterKey) -> Result<u64, StoreError> {
        match self {
            StateStore::Memory(store) => Ok(store.counters().spent(key, now_unix())),
            StateStore::Redis(store) => store.spent(key).await,
            StateStore::Embedded(store) => store.spent(key),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BudgetLimit;

    use crate::config::ClientKey;

    fn key(id: Option<&str>) -> ClientKey {
        ClientKey {
            id: id.map(str::to_owned),
            ..ClientKey::of_digest([0xab; 32])
        }
    }

    #[test]
    fn a_counter_is_named_by_owner_unit_window_and_start() {
        let name = |owner: SpendOwner, unit, window| CounterKey::new(&owner, unit, window, 1_773_532_800);
        let (ci, anonymous, payments) = (key(Some("ci-1")), key(None), key(Some("payments")));
        assert_eq!(
            name(SpendOwner::team("payments"), BudgetUnit::Tokens, Window::Day).as_str(),
            "team:payments:tokens:day:1773532800"
        );
        assert_eq!(
            name(ci.spend_owner(), BudgetUnit::MicroUsd, Window::Month).as_str(),
            "key:ci-1:usd:month:1773532800"
        );
        assert_eq!(
            name(anonymous.spend_owner(), BudgetUnit::Tokens, Window::Hour).as_str(),
            format!("digest:{}:tokens:hour:1773532800", "ab".repeat(32))
        );
        // A key with the id of a team's name is another counter.
        assert_ne!(
            name(payments.spend_owner(), BudgetUnit::Tokens, Window::Day),
            name(SpendOwner::team("payments"), BudgetUnit::Tokens, Window::Day)
        );
    }

    #[test]
    fn a_budget_changed_by_a_reload_counts_on_in_the_same_counter() {
        let now = 1_773_600_000;
        let budget = |limit| Budget {
            limit,
            window: Window::Day,
        };
        let before = BudgetCounter::of(&SpendOwner::team("t"), &budget(BudgetLimit::Tokens(1000)), now);
        let after = BudgetCounter::of(
            &SpendOwner::team("t"),
            &budget(BudgetLimit::Tokens(5000)),
            now + 60,
        );
        assert_eq!(before.key, after.key);
        assert_eq!((before.limit, after.limit), (1000, 5000));
        assert_eq!(before.bounds, Window::Day.bounds(now));
        // Another unit or window is another counter: tokens are never read as dollars.
        let usd = BudgetCounter::of(&SpendOwner::team("t"), &budget(BudgetLimit::MicroUsd(1000)), now);
        assert_ne!(usd.key, before.key);
        let weekly = Budget {
            limit: BudgetLimit::Tokens(1000),
            window: Window::Week,
        };
        assert_ne!(
            BudgetCounter::of(&SpendOwner::team("t"), &weekly, now).key,
            before.key
        );
        // The next window, another counter.
        let tomorrow = BudgetCounter::of(
            &SpendOwner::team("t"),
            &budget(BudgetLimit::Tokens(1000)),
            before.bounds.end,
        );
        assert_ne!(tomorrow.key, before.key);
    }

    #[test]
    fn amounts_are_held_to_what_a_script_counts_exactly() {
        assert_eq!(clamp(5), 5);
        assert_eq!(clamp(u64::MAX), MAX_BUDGET_UNITS);
        assert_eq!(expiry(u64::MAX), u64::MAX);
        assert_eq!(expiry(1000), 1000 + COUNTER_GRACE_SECS);
    }
}
