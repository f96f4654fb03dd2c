//! A budget as it is counted (docs/budgets.md#units): how much of which unit a window allows.

use super::Window;

/// The largest budget, in tokens or micro-dollars: 2^53, the largest integer a Redis script's
/// numbers (doubles) hold exactly. A `usd` budget may be up to about 9 billion dollars.
pub(crate) const MAX_BUDGET_UNITS: u64 = 1 << 53;

/// A team's or a key's budget: how much it may spend in each window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Budget {
    /// `tokens` or `usd`.
    pub(crate) limit: BudgetLimit,
    /// `window`.
    pub(crate) window: Window,
}

/// What a budget counts, and how much of it a window allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BudgetLimit {
    /// `tokens`: input plus output tokens.
    Tokens(u64),
    /// `usd`, in micro-dollars (millionths of a dollar), the unit its counters count in.
    MicroUsd(u64),
}

/// The unit a budget's counter counts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum BudgetUnit {
    /// Tokens.
    Tokens,
    /// Millionths of a US dollar.
    MicroUsd,
}

impl BudgetUnit {
    /// The unit's name in counter keys and reports: `tokens` or `usd`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            BudgetUnit::Tokens => "tokens",
            BudgetUnit::MicroUsd => "usd",
        }
    }
}

impl BudgetLimit {
    /// The unit the limit is in.
    pub(crate) fn unit(self) -> BudgetUnit {
        match self {
            BudgetLimit::Tokens(_) => BudgetUnit::Tokens,
            BudgetLimit::MicroUsd(_) => BudgetUnit::MicroUsd,
        }
    }

    /// The limit in its unit (tokens, or micro-dollars).
    pub(crate) fn units(self) -> u64 {
        match self {
            BudgetLimit::Tokens(units) | BudgetLimit::MicroUsd(units) => units,
        }
    }
}
