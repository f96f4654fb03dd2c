//! What budgets count in (docs/budgets.md): the UTC calendar [`Window`]s read from a
//! [`SpendClock`], what a model's tokens
//! cost ([`Prices`]), and what a request reserves before it is forwarded ([`Estimate`]).

mod clock;
mod estimate;
mod prices;
mod window;

pub use clock::SpendClock;
pub(crate) use estimate::Estimate;
pub(crate) use prices::{Price, Prices};
pub(crate) use window::{Bounds, Window};
