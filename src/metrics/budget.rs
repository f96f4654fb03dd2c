//! The budget families (docs/budgets.md#metrics): `replaygate_budget_spent{owner,unit,window}`,
//! what a budget's counter held when last read, and `replaygate_budget_limit{owner,unit,window}`,
//! the budget. The owner is `team:NAME` or `key:ID` (`digest:HEX` for a key without an id),
//! from the configuration: a request adds no label value.

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::config::Budget;
use crate::spend::SpendOwner;

/// `replaygate_budget_spent{owner,unit,window}` and `replaygate_budget_limit{...}`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct BudgetLabels {
    pub(crate) owner: String,
    pub(crate) unit: &'static str,
    pub(crate) window: &'static str,
}

impl BudgetLabels {
    fn of(owner: &SpendOwner, budget: &Budget) -> BudgetLabels {
        BudgetLabels {
            owner: owner.as_str().to_owned(),
            unit: budget.limit.unit().as_str(),
            window: budget.window.as_str(),
        }
    }
}

/// The budget gauges.
#[derive(Debug, Default)]
pub(crate) struct BudgetFamilies {
    spent: Family<BudgetLabels, Gauge>,
    limit: Family<BudgetLabels, Gauge>,
}

impl BudgetFamilies {
    /// Registers the families in `registry`.
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "replaygate_budget_spent",
            "What a budget's counter held when last read (tokens, or micro-dollars for unit usd), reservations in flight included, by owner, unit and window",
            Described(self.spent.clone()),
        );
        registry.register(
            "replaygate_budget_limit",
            "A budget's limit (tokens, or micro-dollars for unit usd), by owner, unit and window",
            Described(self.limit.clone()),
        );
    }

    /// Sets `owner`'s `budget` and what its counter holds, `spent`.
    pub(super) fn set(&self, owner: &SpendOwner, budget: &Budget, spent: u64) {
        let labels = BudgetLabels::of(owner, budget);
        self.spent.get_or_create(&labels).set(gauge_value(spent));
        self.limit
            .get_or_create(&labels)
            .set(gauge_value(budget.limit.units()));
    }

    /// Sets `owner`'s `budget` alone (a configuration's, before any counter is read).
    pub(super) fn set_limit(&self, owner: &SpendOwner, budget: &Budget) {
        let labels = BudgetLabels::of(owner, budget);
        self.limit
            .get_or_create(&labels)
            .set(gauge_value(budget.limit.units()));
    }

    /// The gauges' values for `owner`'s `budget`: (spent, limit) (the tests').
    #[cfg(test)]
    pub(crate) fn read(&self, owner: &SpendOwner, budget: &Budget) -> (Option<i64>, Option<i64>) {
        let labels = BudgetLabels::of(owner, budget);
        let get = |family: &Family<BudgetLabels, Gauge>| family.get(&labels).map(|gauge| gauge.get());
        (get(&self.spent), get(&self.limit))
    }
}

/// A gauge family described (`# HELP`, `# TYPE`) even while it has no series: the families
/// are there to scrape, and to check dashboards against, before any budget is configured.
#[derive(Debug)]
struct Described(Family<BudgetLabels, Gauge>);

impl EncodeMetric for Described {
    fn encode(&self, encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }
}

/// An amount as a gauge holds it (amounts are at most 2^53).
fn gauge_value(amount: u64) -> i64 {
    i64::try_from(amount).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BudgetLimit;
    use crate::metrics::Metrics;
    use crate::spend::Window;

    #[test]
    fn a_budget_sets_its_limit_and_what_it_spent() {
        let metrics = Metrics::new();
        let budget = Budget {
            limit: BudgetLimit::Tokens(2_000_000),
            window: Window::Day,
        };
        let owner = SpendOwner::team("payments");
        assert_eq!(metrics.budget.read(&owner, &budget), (None, None));
        metrics.budget.set_limit(&owner, &budget);
        assert_eq!(metrics.budget.read(&owner, &budget), (None, Some(2_000_000)));
        metrics.budget.set(&owner, &budget, 1500);
        metrics.budget.set(&owner, &budget, 1600);
        assert_eq!(
            metrics.budget.read(&owner, &budget),
            (Some(1600), Some(2_000_000))
        );
        let text = metrics.encode();
        assert!(
            text.contains(
                r#"replaygate_budget_spent{owner="team:payments",unit="tokens",window="day"} 1600"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"replaygate_budget_limit{owner="team:payments",unit="tokens",window="day"} 2000000"#
            ),
            "{text}"
        );
    }

    #[test]
    fn the_families_are_described_before_any_budget_is_read() {
        let text = Metrics::new().encode();
        assert!(text.contains("# TYPE replaygate_budget_spent gauge"), "{text}");
        assert!(text.contains("# TYPE replaygate_budget_limit gauge"), "{text}");
    }
}
