//! What a request's answers said they cost, summed for its access line and its span
//! (docs/usage.md#where-usage-shows): one answer for an HTTP request, each answered turn for a
//! WebSocket. Filled as each answer ends, read when the access line is written (after the
//! answer's body ended or was dropped, so after its usage was delivered).

use std::sync::{Mutex, PoisonError};

use crate::usage::{AnswerUsage, Usage};

/// The usage of a request's answers so far.
#[derive(Debug, Default)]
pub(crate) struct UsageTally(Mutex<Totals>);

/// The sums of the reported usages, and how many answers reported one or none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    /// The four counts, summed over the answers that reported usage.
    pub(crate) usage: Usage,
    /// Answers that reported usage.
    pub(crate) reported: u64,
    /// Answers that ended without usage (or with bad usage).
    pub(crate) missing: u64,
}

impl Totals {
    /// The access line's `usage` field: `reported` when every answer reported usage,
    /// `missing` when none did, `partial` when some did (a WebSocket's turns).
    pub(crate) fn word(&self) -> &'static str {
        match (self.reported, self.missing) {
            (_, 0) => "reported",
            (0, _) => "missing",
            _ => "partial",
        }
    }

    /// The summed counts, when some answer reported usage.
    pub(crate) fn counts(&self) -> Option<Usage> {
        (self.reported > 0).then_some(self.usage)
    }
}

impl UsageTally {
    /// Adds one answer's usage.
    pub(crate) fn add(&self, usage: AnswerUsage) {
        let mut totals = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match usage {
            AnswerUsage::Reported(usage) => {
                totals.reported += 1;
                let sum = &mut totals.usage;
                sum.input = sum.input.saturating_add(usage.input);
                sum.output = sum.output.saturating_add(usage.output);
                sum.cached_input = sum.cached_input.saturating_add(usage.cached_input);
                sum.reasoning_output = sum.reasoning_output.saturating_add(usage.reasoning_output);
            }
            AnswerUsage::Missing => totals.missing += 1,
        }
    }

    /// The totals so far (`None` when no answer was counted).
    pub(crate) fn totals(&self) -> Option<Totals> {
        let totals = *self.0.lock().unwrap_or_else(PoisonError::into_inner);
        (totals.reported + totals.missing > 0).then_some(totals)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_add_up_and_say_whether_each_reported() {
        let tally = UsageTally::default();
        assert_eq!(tally.totals(), None);
        let one = Usage {
            input: 10,
            output: 5,
            cached_input: 4,
            reasoning_output: 2,
        };
        tally.add(AnswerUsage::Reported(one));
        assert_eq!(tally.totals().unwrap().word(), "reported");
        tally.add(AnswerUsage::Reported(one));
        tally.add(AnswerUsage::Missing);
        let totals = tally.totals().unwrap();
        assert_eq!(
            (totals.word(), totals.reported, totals.missing),
            ("partial", 2, 1)
        );
        assert_eq!(totals.counts().unwrap().cached_input, 8);
        let none = UsageTally::default();
        none.add(AnswerUsage::Missing);
        assert_eq!(
            (none.totals().unwrap().word(), none.totals().unwrap().counts()),
            ("missing", None)
        );
    }
}
