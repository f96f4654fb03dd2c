//! Usage tallies (docs/usage.md#get-usage): what each owner's answers used in one window,
//! kept by the state backend beside the spend counters, so that `GET /usage` on any replica
//! reads what every replica counted. A tally is named by its owner (`team:NAME`, `key:ID`)
//! and its window, e.g. `team:payments:day:1773532800`, and holds one integer per field of
//! [`WindowUsage`]. [`StateStore::add_usage`] adds every field in one atomic operation; the
//! tally is kept until [`COUNTER_GRACE_SECS`] after its window's end, as a spend counter.
//!
//! [`COUNTER_GRACE_SECS`]: super::spend::COUNTER_GRACE_SECS

use super::spend::{clamp, expiry, SpendOwner};
use super::{now_unix, StateStore, StoreError};
use crate::spend::Window;

/// What an owner's answers used in one window: tokens by kind, cost, and how many answers
/// were counted (of which `missing` reported no usage).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WindowUsage {
    /// Input tokens, cached ones included.
    pub(crate) input: u64,
    /// Output tokens, reasoning included.
    pub(crate) output: u64,
    /// Input tokens read from the cache.
    pub(crate) cached_input: u64,
    /// Output tokens spent reasoning.
    pub(crate) reasoning_output: u64,
    /// What the priced answers cost, in micro-dollars.
    pub(crate) cost_micro_usd: u64,
    /// Answers counted, with or without usage.
    pub(crate) answers: u64,
    /// Answers that reported no usage.
    pub(crate) missing: u64,
}

impl WindowUsage {
    /// The fields' names, as the backends store them.
    pub(crate) const FIELDS: [&'static str; 7] = [
        "input",
        "output",
        "cached_input",
        "reasoning_output",
        "cost_micro_usd",
        "answers",
        "missing",
    ];

    /// Every field's value, in the order of [`WindowUsage::FIELDS`].
    pub(crate) fn values(&self) -> [u64; 7] {
        [
            self.input,
            self.output,
            self.cached_input,
            self.reasoning_output,
            self.cost_micro_usd,
            self.answers,
            self.missing,
        ]
    }

    /// The usage of the values in the order of [`WindowUsage::FIELDS`].
    pub(crate) fn from_values(values: [u64; 7]) -> WindowUsage {
        let [input, output, cached_input, reasoning_output, cost_micro_usd, answers, missing] = values;
        WindowUsage {
            input,
            output,
            cached_input,
            reasoning_output,
            cost_micro_usd,
            answers,
            missing,
        }
    }

    /// The fields to add: each with its amount (at most 2^53), those of 0 left out.
    pub(super) fn amounts(&self) -> Vec<(&'static str, u64)> {
        WindowUsage::FIELDS
            .into_iter()
            .zip(self.values())
            .filter(|(_, amount)| *amount > 0)
            .map(|(field, amount)| (field, clamp(amount)))
            .collect()
    }
}

/// The name of one owner's tally in one window: the owner, the window and its start, e.g.
/// `team:payments:day:1773532800`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct TallyKey(String);

impl TallyKey {
    /// `owner`'s tally of the `window` starting at `start_unix`.
    pub(crate) fn new(owner: &SpendOwner, window: Window, start_unix: u64) -> TallyKey {
        TallyKey(format!("{}:{window}:{start_unix}", owner.as_str()))
    }

    /// The name, as the backends key the tally.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The name of one field's counter in the stores of this process: `tally:NAME:FIELD`,
    /// apart from every spend counter's name.
    pub(super) fn field(&self, field: &str) -> String {
        format!("tally:{}:{field}", self.0)
    }
}

impl StateStore {
    /// Adds every field of `usage` to the tally `key` in one atomic operation on the backend;
    /// the tally is kept until the grace after `window_end_unix`. A window whose grace is over
    /// adds nothing.
    pub(crate) async fn add_usage(
        &self,
        key: &TallyKey,
        usage: &WindowUsage,
        window_end_unix: u64,
    ) -> Result<(), StoreError> {
        let (expires, now) = (expiry(window_end_unix), now_unix());
        let amounts = usage.amounts();
        if expires <= now || amounts.is_empty() {
            return Ok(());
        }
        match self {
            StateStore::Memory(store) => {
                store.counters().add(key, &amounts, expires, now);
                Ok(())
            }
            StateStore::Redis(store) => store.add_usage(key, &amounts, expires).await,
            StateStore::Embedded(store) => store.add_usage(key, &amounts, expires),
        }
    }

    /// What the tally `key` holds (every field 0 when it is gone).
    pub(crate) async fn window_usage(&self, key: &TallyKey) -> Result<WindowUsage, StoreError> {
        match self {
            StateStore::Memory(store) => Ok(store.counters().usage(key, now_unix())),
            StateStore::Redis(store) => store.window_usage(key).await,
            StateStore::Embedded(store) => store.window_usage(key),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClientKey;

    #[test]
    fn a_tally_is_named_by_owner_window_and_start() {
        let key = TallyKey::new(&SpendOwner::team("payments"), Window::Day, 1_773_532_800);
        assert_eq!(key.as_str(), "team:payments:day:1773532800");
        assert_eq!(key.field("input"), "tally:team:payments:day:1773532800:input");
        let ci = ClientKey {
            id: Some("ci".into()),
            ..ClientKey::of_digest([1; 32])
        };
        assert_eq!(
            TallyKey::new(&ci.spend_owner(), Window::Month, 0).as_str(),
            "key:ci:month:0"
        );
    }

    #[test]
    fn only_the_fields_that_add_something_are_sent() {
        let usage = WindowUsage {
            input: 5,
            answers: 1,
            cost_micro_usd: u64::MAX,
            ..WindowUsage::default()
        };
        assert_eq!(
            usage.amounts(),
            [
                ("input", 5),
                ("cost_micro_usd", crate::config::MAX_BUDGET_UNITS),
                ("answers", 1)
            ]
        );
        assert_eq!(WindowUsage::from_values(usage.values()), usage);
        assert!(WindowUsage::default().amounts().is_empty());
    }
}
