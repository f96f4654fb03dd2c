//! Model prices at run time (docs/budgets.md#units): the `[prices."GLOB"]` tables compiled
//! once per configuration, the first whose glob matches a model pricing it.

use globset::{Glob, GlobMatcher};

use super::MAX_BUDGET_UNITS;
use crate::usage::Usage;

/// Micro-dollars per token (which is dollars per million tokens) of one model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Price {
    /// Each input token not read from the cache.
    pub(crate) input: f64,
    /// Each cached input token.
    pub(crate) cached_input: f64,
    /// Each output token, reasoning included.
    pub(crate) output: f64,
}

impl Price {
    /// What `usage` cost, in micro-dollars rounded up, at most 2^53.
    pub(crate) fn cost(&self, usage: &Usage) -> u64 {
        let uncached = usage.input.saturating_sub(usage.cached_input);
        micros(
            uncached as f64 * self.input
                + usage.cached_input as f64 * self.cached_input
                + usage.output as f64 * self.output,
        )
    }

    /// What `input` uncached input tokens and `output` output tokens cost at most, in
    /// micro-dollars rounded up.
    pub(crate) fn at_most(&self, input: u64, output: u64) -> u64 {
        let input_price = self.input.max(self.cached_input);
        micros(input as f64 * input_price + output as f64 * self.output)
    }
}

/// Micro-dollars, rounded up to a whole one, held to 2^53.
fn micros(amount: f64) -> u64 {
    let whole = amount.ceil();
    if whole >= MAX_BUDGET_UNITS as f64 {
        return MAX_BUDGET_UNITS;
    }
    // Finite (prices and counts are), at least 0, under 2^53: exact.
    whole.max(0.0) as u64
}

/// Every `[prices]` table, in file order.
#[derive(Debug, Default)]
pub(crate) struct Prices {
    table: Vec<(GlobMatcher, Price)>,
}

impl Prices {
    /// The prices of `tables` (a model glob and its price each), in file order.
    pub(crate) fn new<'a>(tables: impl IntoIterator<Item = (&'a Glob, Price)>) -> Prices {
        let table = tables
            .into_iter()
            .map(|(model, price)| (model.compile_matcher(), price))
            .collect();
        Prices { table }
    }

    /// Whether any price is configured.
    pub(crate) fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// The dearest of every price, each kind at its highest: what a `usd` budget reserves at
    /// for a request whose model has no price (`None`: no prices).
    pub(crate) fn dearest(&self) -> Option<Price> {
        self.table.iter().map(|(_, price)| *price).reduce(|a, b| Price {
            input: a.input.max(b.input),
            cached_input: a.cached_input.max(b.cached_input),
            output: a.output.max(b.output),
        })
    }

    /// The price of `model`: the first table whose glob matches it.
    pub(crate) fn of(&self, model: &str) -> Option<&Price> {
        self.table
            .iter()
            .find(|(glob, _)| glob.is_match(model))
            .map(|(_, price)| price)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cost_is_each_kind_at_its_price_rounded_up_to_a_micro_dollar() {
        let price = Price {
            input: 1.25,
            cached_input: 0.125,
            output: 10.0,
        };
        let usage = Usage {
            input: 1200,
            output: 300,
            cached_input: 1000,
            reasoning_output: 250,
        };
        // 200 * 1.25 + 1000 * 0.125 + 300 * 10 = 250 + 125 + 3000.
        assert_eq!(price.cost(&usage), 3375);
        let one = Usage {
            input: 1,
            output: 0,
            cached_input: 0,
            reasoning_output: 0,
        };
        assert_eq!(price.cost(&one), 2);
        let free = Price {
            input: 0.0,
            cached_input: 0.0,
            output: 0.0,
        };
        assert_eq!(free.cost(&usage), 0);
        // The most a request may cost prices its input uncached.
        assert_eq!(price.at_most(1200, 300), 4500);
        let huge = Usage {
            input: 1 << 53,
            output: 1 << 53,
            cached_input: 0,
            reasoning_output: 0,
        };
        assert_eq!(price.cost(&huge), MAX_BUDGET_UNITS);
    }
}
