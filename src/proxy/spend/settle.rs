//! Settling when the answer ends: each reservation is replaced by what the answer used, in
//! the budget's unit; an answer without usage (or priced by no `[prices]` table, for a `usd`
//! budget) keeps its reservation.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use super::Held;
use crate::config::BudgetUnit;
use crate::metrics::Meters;
use crate::proxy::usage::{Answered, UsageSink};
use crate::spend::Prices;
use crate::state::StateStore;
use crate::telemetry::LogEvery;
use crate::usage::AnswerUsage;

/// The warnings of settlements the store refused, one a second.
static UNSETTLED: LazyLock<LogEvery> = LazyLock::new(|| LogEvery::new(Duration::from_secs(1)));

/// Settles a request's reservations with its answer's usage: the [`UsageSink`] of budgets.
pub(crate) struct Settled {
    /// Where the counters are.
    pub(crate) store: StateStore,
    /// `[prices]`, for `usd` budgets.
    pub(crate) prices: Arc<Prices>,
    /// The reservations.
    pub(crate) held: Vec<Held>,
    /// Where the budget gauges are set with what the counters hold.
    pub(crate) meters: Arc<Meters>,
}

impl Settled {
    /// What the answer used on `held`'s budget: its input plus output tokens, or what they cost
    /// at the price of the answer's model (else the request's). `None`: not known, so the
    /// reservation stands.
    fn used(&self, held: &Held, answered: &Answered<'_>) -> Option<u64> {
        let AnswerUsage::Reported(usage) = answered.usage else {
            return None;
        };
        match held.unit {
            BudgetUnit::Tokens => Some(usage.input.saturating_add(usage.output)),
            BudgetUnit::MicroUsd => answered.price(&self.prices).map(|price| price.cost(&usage)),
        }
    }
}

impl UsageSink for Settled {
    fn answered(&self, answered: &Answered<'_>) {
        for held in &self.held {
            let Some(used) = self.used(held, answered) else {
                continue;
            };
            if used == held.reserved {
                continue;
            }
            let (store, held, meters) = (self.store.clone(), held.clone(), self.meters.clone());
            let settle = async move {
                let counter = &held.counter;
                let settled = store
                    .settle(&counter.key, held.reserved, used, counter.bounds.end)
                    .await;
                match settled {
                    Ok(spent) => meters.budget(&held.budget.owner, &held.budget.budget, spent),
                    Err(error) => {
                        if let Some(held_back) = UNSETTLED.admit() {
                            tracing::warn!(
                                budget = counter.key.as_str(),
                                %error,
                                held_back,
                                "a reservation could not be settled; it stands"
                            );
                        }
                    }
                }
            };
            if let Err(error) = self.store.write_behind(settle) {
                tracing::warn!(%error, "a reservation could not be settled; it stands");
            }
        }
    }
}
