//! The sink of `GET /usage` (docs/usage.md#get-usage): each answer's usage added to its team's
//! tally in the state backend, and to its key's when the key has a budget of its own, in the
//! window of that budget (a team without a budget, or no team: the day).

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use super::{Answered, UsageSink};
use crate::proxy::teams::Team;
use crate::spend::SpendClock;
use crate::spend::{Prices, Window};
use crate::state::spend::{OwnedBudget, SpendOwner};
use crate::state::tally::{TallyKey, WindowUsage};
use crate::state::{StateStore, StoreError};
use crate::telemetry::LogEvery;
use crate::usage::AnswerUsage;

/// The owner of the tally of anonymous answers (no teams configured).
pub(crate) const ANONYMOUS: &str = "-";

/// The window of a tally whose owner has no budget.
pub(crate) const UNBUDGETED_WINDOW: Window = Window::Day;

/// Adds each answer's usage to the tallies of its team and, when it has its own budget, its key.
pub(crate) struct Tallied {
    /// The clock windows are read from.
    clock: SpendClock,
    /// Where the tallies are kept.
    pub(crate) store: StateStore,
    /// `[prices]` of the configuration the request was judged under.
    pub(crate) prices: Arc<Prices>,
    /// The request's team (`None`: anonymous).
    pub(crate) team: Option<Arc<Team>>,
    /// The key's own budget, when it has one.
    pub(crate) key_budget: Option<Arc<OwnedBudget>>,
}

/// The owner of a team's tally, and the window it counts in.
pub(crate) fn team_tally(team: Option<&Team>) -> (SpendOwner, Window) {
    match team {
        Some(team) => (
            SpendOwner::team(&team.name),
            team.budget
                .as_ref()
                .map_or(UNBUDGETED_WINDOW, |owned| owned.budget.window),
        ),
        None => (SpendOwner::team(ANONYMOUS), UNBUDGETED_WINDOW),
    }
}

/// What one answer adds to a tally, its cost priced by `prices` when they price its model.
pub(crate) fn usage_of(answered: &Answered<'_>, prices: &Prices) -> WindowUsage {
    match answered.usage {
        AnswerUsage::Reported(usage) => WindowUsage {
            input: usage.input,
            output: usage.output,
            cached_input: usage.cached_input,
            reasoning_output: usage.reasoning_output,
            cost_micro_usd: answered.price(prices).map_or(0, |price| price.cost(&usage)),
            answers: 1,
            missing: 0,
        },
        AnswerUsage::Missing => WindowUsage {
            answers: 1,
            missing: 1,
            ..WindowUsage::default()
        },
    }
}

impl UsageSink for Tallied {
    fn answered(&self, answered: &Answered<'_>) {
        let usage = usage_of(answered, &self.prices);
        let now = self.clock.now_unix();
        let (owner, window) = team_tally(self.team.as_deref());
        self.add(&owner, window, usage, now);
        if let Some(key) = &self.key_budget {
            self.add(&key.owner, key.budget.window, usage, now);
        }
    }
}

impl Tallied {
    /// The sink of a request of `team` (with its key's own budget, if any), judged under
    /// `prices`, tallying in `store`.
    pub(crate) fn new(
        store: &StateStore,
        prices: &Arc<Prices>,
        team: &Option<Arc<Team>>,
        key_budget: &Option<Arc<OwnedBudget>>,
        clock: &SpendClock,
    ) -> Tallied {
        Tallied {
            clock: clock.clone(),
            store: store.clone(),
            prices: prices.clone(),
            team: team.clone(),
            key_budget: key_budget.clone(),
        }
    }

    /// Adds `usage` to `owner`'s tally of the `window` holding `now`, behind the answer
    /// ([`StateStore::write_behind`]).
    fn add(&self, owner: &SpendOwner, window: Window, usage: WindowUsage, now: u64) {
        let bounds = window.bounds(now);
        let key = TallyKey::new(owner, window, bounds.start);
        let store = self.store.clone();
        let write = async move { report(store.add_usage(&key, &usage, bounds.end).await) };
        if let Err(error) = self.store.write_behind(write) {
            report(Err(error));
        }
    }
}

/// Logs a tally the store could not add, at most once a second.
fn report(added: Result<(), StoreError>) {
    static WARNINGS: LazyLock<LogEvery> = LazyLock::new(|| LogEvery::new(Duration::from_secs(1)));
    let Err(error) = added else {
        return;
    };
    if let Some(held_back) = WARNINGS.admit() {
        tracing::warn!(%error, held_back, "an answer's usage could not be added to its tally (GET /usage)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::usage::Answerer;
    use crate::state::MemoryStore;
    use crate::usage::Usage;

    fn answerer() -> Answerer {
        Answerer {
            request_id: "req_1".into(),
            team: None,
            key_id: None,
            client_cert: None,
            provider: "openai".into(),
            model: None,
        }
    }

    fn prices() -> Prices {
        let glob = globset::Glob::new("gpt-5*").unwrap();
        let price = crate::spend::Price {
            input: 1.25,
            cached_input: 0.125,
            output: 10.0,
        };
        Prices::new([(&glob, price)])
    }

    #[tokio::test]
    async fn an_anonymous_answer_is_tallied_under_the_day_with_its_cost() {
        let store = StateStore::Memory(MemoryStore::default());
        let sink = Tallied {
            clock: SpendClock::system(),
            store: store.clone(),
            prices: Arc::new(prices()),
            team: None,
            key_budget: None,
        };
        let answerer = answerer();
        let reported = AnswerUsage::Reported(Usage {
            input: 1200,
            output: 300,
            cached_input: 1000,
            reasoning_output: 250,
        });
        for (model, usage) in [
            (Some("gpt-5"), reported),
            (Some("unpriced"), reported),
            (None, AnswerUsage::Missing),
        ] {
            sink.answered(&Answered {
                answerer: &answerer,
                model,
                usage,
            });
        }
        let day = Window::Day.bounds(crate::state::now_unix());
        let key = TallyKey::new(&SpendOwner::team("-"), Window::Day, day.start);
        // 200 uncached at 1.25, 1000 cached at 0.125, 300 out at 10: 250 + 125 + 3000.
        assert_eq!(
            store.window_usage(&key).await.unwrap(),
            WindowUsage {
                input: 2400,
                output: 600,
                cached_input: 2000,
                reasoning_output: 500,
                cost_micro_usd: 3375,
                answers: 3,
                missing: 1,
            }
        );
    }
}
