//! The ledger's counters, resolved once for the process: counting an operation is one atomic
//! addition.

use prometheus_client::metrics::counter::Counter;

use super::labels::{LedgerOp, LedgerResult};
use super::{Metrics, StateMeter};

/// `replaygate_ledger_operations_total`, one counter per operation and result.
#[derive(Debug, Clone)]
pub(crate) struct LedgerMeter {
    lookup: [Counter; 3],
    record: [Counter; 4],
    carry: [Counter; 3],
    state: StateMeter,
}

impl LedgerMeter {
    /// The ledger's counters among `metrics`.
    pub(crate) fn new(metrics: &Metrics) -> LedgerMeter {
        let counter = |op: LedgerOp| move |result| metrics.ledger_counter(op, result);
        use LedgerResult::{Dropped, Error, Miss, Ok, TooLarge};
        LedgerMeter {
            lookup: [Ok, Miss, Error].map(counter(LedgerOp::Lookup)),
            record: [Ok, Error, Dropped, TooLarge].map(counter(LedgerOp::Record)),
            carry: [Ok, Miss, Error].map(counter(LedgerOp::Carry)),
            state: metrics.state().clone(),
        }
    }

    /// The state backend's metrics (writes refused for lack of room).
    pub(crate) fn state(&self) -> &StateMeter {
        &self.state
    }

    /// Counts operation `op` ending with `result`. A pair that cannot happen (a record that
    /// missed, a lookup that was dropped) is counted nowhere.
    pub(crate) fn count(&self, op: LedgerOp, result: LedgerResult) {
        if let Some(counter) = self.counter(op, result) {
            counter.inc();
        }
    }

    /// How many times `op` ended with `result` (0 for a pair that cannot happen).
    /// Read by the tests.
    #[cfg(test)]
    pub(crate) fn get(&self, op: LedgerOp, result: LedgerResult) -> u64 {
        self.counter(op, result).map_or(0, Counter::get)
    }

    fn counter(&self, op: LedgerOp, result: LedgerResult) -> Option<&Counter> {
        use LedgerResult::{Dropped, Error, Miss, Ok, TooLarge};
        match (op, result) {
            (LedgerOp::Lookup, Ok) => Some(&self.lookup[0]),
            (LedgerOp::Lookup, Miss) => Some(&self.lookup[1]),
            (LedgerOp::Lookup, Error) => Some(&self.lookup[2]),
            (LedgerOp::Record, Ok) => Some(&self.record[0]),
            (LedgerOp::Record, Error) => Some(&self.record[1]),
            (LedgerOp::Record, Dropped) => Some(&self.record[2]),
            (LedgerOp::Record, TooLarge) => Some(&self.record[3]),
            (LedgerOp::Carry, Ok) => Some(&self.carry[0]),
            (LedgerOp::Carry, Miss) => Some(&self.carry[1]),
            (LedgerOp::Carry, Error) => Some(&self.carry[2]),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::labels::LEDGER_OUTCOMES;

    #[test]
    fn each_possible_outcome_has_its_own_counter() {
        let metrics = Metrics::new();
        let meter = LedgerMeter::new(&metrics);
        for (n, (op, result)) in LEDGER_OUTCOMES.into_iter().enumerate() {
            for _ in 0..=n {
                meter.count(op, result);
            }
        }
        meter.count(LedgerOp::Record, LedgerResult::Miss);
        for (n, (op, result)) in LEDGER_OUTCOMES.into_iter().enumerate() {
            assert_eq!(meter.get(op, result), n as u64 + 1, "{op:?} {result:?}");
        }
        assert_eq!(meter.get(LedgerOp::Record, LedgerResult::Miss), 0);
        let text = metrics.encode();
        assert!(
            text.contains("replaygate_ledger_operations_total{op=\"carry\",result=\"error\"} 10\n"),
            "{text}"
        );
    }
}
