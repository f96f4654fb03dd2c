//! Reserving before forwarding: each budget a request is held to reserves the request's
//! estimate on its window's counter, in one atomic operation on the state backend; a budget it
//! would pass refuses the request (429 `budget_exceeded`), unless budgets only monitor.

use std::sync::LazyLock;
use std::time::Duration;

use super::{shown, Held};
use crate::config::{BudgetLimit, BudgetUnit, OnUnavailable, UsageConfig, UsageMode, MAX_BUDGET_UNITS};
use crate::error::{ApiError, BudgetRefusal};
use crate::metrics::Meters;
use crate::spend::{rfc3339, Estimate, Prices};
use crate::state::spend::{BudgetCounter, OwnedBudget};
use crate::state::StateStore;
use crate::telemetry::LogEvery;

/// What reserving needs: where the counters are, the time, the prices and `[usage]`.
pub(crate) struct Spending<'a> {
    /// The state backend the counters live in.
    pub(crate) store: &'a StateStore,
    /// Unix seconds now.
    pub(crate) now_unix: u64,
    /// `[prices]`.
    pub(crate) prices: &'a Prices,
    /// `[usage]` (and `[state] on_unavailable`).
    pub(crate) usage: UsageConfig,
    /// Whether the team's own `mode` is `monitor`.
    pub(crate) team_monitors: bool,
    /// Where the budget gauges are set with what the counters hold.
    pub(crate) meters: &'a Meters,
}

/// What a request reserved.
#[derive(Debug, Default)]
pub(crate) struct Reserved {
    /// Its reservations, to be settled when its answer ends.
    pub(crate) held: Vec<Held>,
    /// Under `monitor`: the budgets it passed (`team:NAME` or `key:ID`), for the answer's
    /// `x-replaygate-budget-passed` header.
    pub(crate) passed: Vec<String>,
}

/// The warnings of budgets the store could not count, one a second.
static UNCOUNTED: LazyLock<LogEvery> = LazyLock::new(|| LogEvery::new(Duration::from_secs(1)));

/// Reserves `estimate` (for `model`) on each of `budgets`, in order. A budget it would pass
/// refuses it: 429 `budget_exceeded` naming that budget, with what was reserved on the others
/// given back; under `monitor` it is reserved anyway and named in [`Reserved::passed`]. A
/// counter the store cannot answer for refuses it 503 `budget_unavailable` (again giving back
/// what was reserved), or, under `[state] on_unavailable = "allow"`, is left uncounted.
pub(crate) async fn reserve(
    spending: &Spending<'_>,
    budgets: &[&OwnedBudget],
    estimate: Estimate,
    model: Option<&str>,
) -> Result<Reserved, ApiError> {
    let mut reserved = Reserved::default();
    let monitor = spending.usage.mode == UsageMode::Monitor || spending.team_monitors;
    for owned in budgets {
        let counter = BudgetCounter::of(&owned.owner, &owned.budget, spending.now_unix);
        let unit = owned.budget.limit.unit();
        let amount = amount_of(estimate, owned.budget.limit, spending.prices, model);
        let store = spending.store;
        let answer = match store
            .reserve(&counter.key, amount, counter.limit, counter.bounds.end)
            .await
        {
            Ok(answer) if !answer.reserved && monitor => store
                .reserve(&counter.key, amount, MAX_BUDGET_UNITS, counter.bounds.end)
                .await
                .inspect(|_| reserved.passed.push(owned.owner.as_str().to_owned())),
            other => other,
        };
        if let Ok(answer) = &answer {
            spending.meters.budget(&owned.owner, &owned.budget, answer.spent);
        }
        match answer {
            Ok(answer) if answer.reserved => reserved.held.push(Held {
                budget: (*owned).clone(),
                counter,
                unit,
                reserved: amount,
            }),
            Ok(answer) => {
                give_back(store, &reserved.held).await;
                return Err(ApiError::BudgetExceeded(Box::new(BudgetRefusal {
                    owner: owned.owner.shown(),
                    budget: shown(unit, counter.limit),
                    window: owned.budget.window.as_str(),
                    spent: shown(unit, answer.spent),
                    amount: shown(unit, amount),
                    ends: rfc3339(counter.bounds.end),
                    retry_after: counter.bounds.seconds_left(spending.now_unix),
                })));
            }
            Err(error) => {
                let allow = spending.usage.on_unavailable == OnUnavailable::Allow;
                if let Some(held_back) = UNCOUNTED.admit() {
                    let outcome = if allow { "allowed" } else { "refused" };
                    tracing::warn!(
                        budget = owned.owner.as_str(),
                        %error,
                        outcome,
                        held_back,
                        "a budget could not be counted"
                    );
                }
                if !allow {
                    give_back(store, &reserved.held).await;
                    return Err(ApiError::BudgetUnavailable(format!(
                        "{}'s budget ({error})",
                        owned.owner.shown()
                    )));
                }
            }
        }
    }
    Ok(reserved)
}

/// What `estimate` reserves on a budget of `limit`: its tokens, or its cost at `model`'s price
/// (at the dearest price when the model has none, or is not named).
fn amount_of(estimate: Estimate, limit: BudgetLimit, prices: &Prices, model: Option<&str>) -> u64 {
    match limit.unit() {
        BudgetUnit::Tokens => estimate.tokens(),
        BudgetUnit::MicroUsd => match model.and_then(|model| prices.of(model)) {
            Some(price) => estimate.cost(price),
            None => prices
                .dearest()
                .map_or(MAX_BUDGET_UNITS, |price| estimate.cost(&price)),
        },
    }
}

/// Gives back reservations made for a request that is not forwarded.
async fn give_back(store: &StateStore, held: &[Held]) {
    for held in held {
        let counter = &held.counter;
        if let Err(error) = store
            .settle(&counter.key, held.reserved, 0, counter.bounds.end)
            .await
        {
            tracing::warn!(budget = counter.key.as_str(), %error, "a reservation could not be given back");
        }
    }
}
