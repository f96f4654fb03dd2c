//! Budgets in the proxy (docs/budgets.md#reservation-and-settlement): before a request whose
//! answer reports usage is forwarded, each budget it is held to (its team's, its key's own)
//! reserves an estimate ([`reserve`]); when the answer ends, [`Settled`] replaces each
//! reservation by what the answer used. Counting is the state backend's
//! ([`crate::state::StateStore::reserve`], [`crate::state::StateStore::settle`]).

mod reserve;
mod settle;

pub(crate) use reserve::{reserve, Reserved, Spending};
pub(crate) use settle::Settled;

use crate::config::BudgetUnit;
use crate::state::spend::{BudgetCounter, OwnedBudget};

/// One reservation a request holds on one budget's counter.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    /// The budget, with its owner.
    pub(crate) budget: OwnedBudget,
    /// The counter reserved on, its limit and window.
    pub(crate) counter: BudgetCounter,
    /// What the counter counts.
    pub(crate) unit: BudgetUnit,
    /// What was reserved, in that unit.
    pub(crate) reserved: u64,
}

/// An amount in `unit` as messages show it: tokens, or dollars.
pub(crate) fn shown(unit: BudgetUnit, amount: u64) -> String {
    match unit {
        BudgetUnit::Tokens => format!("{amount} tokens"),
        BudgetUnit::MicroUsd => format!("${}.{:06}", amount / 1_000_000, amount % 1_000_000),
    }
}

#[cfg(test)]
mod tests;
