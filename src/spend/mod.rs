//! What budgets count in (docs/budgets.md), below the configuration and the state backends:
//! budgets and their owners, the UTC calendar [`Window`]s read from a
//! [`SpendClock`], what a model's tokens
//! cost ([`Prices`]), and what a request reserves before it is forwarded ([`Estimate`]).

mod budget;
mod clock;
mod estimate;
mod owner;
mod prices;
mod window;

pub(crate) use budget::{Budget, BudgetLimit, BudgetUnit, MAX_BUDGET_UNITS};
pub(crate) use clock::system_now_unix;
pub use clock::SpendClock;
pub(crate) use estimate::Estimate;
pub(crate) use owner::{OwnedBudget, SpendOwner};
pub(crate) use prices::{Price, Prices};
pub(crate) use window::{rfc3339, Bounds, Window};
