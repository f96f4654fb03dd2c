//! `call_id_mismatch` and `not_function_call`: what is wrong with the pairing of calls and
//! outputs by `call_id` (docs/reasons.md#call_id_mismatch; the pairing itself is
//! [`crate::gate::pairing`]).
//!
//! A call repeating a still unanswered `call_id` is a mismatch, and so is an output that answers
//! no call (unless stored state may hold it) or has no `call_id`; an output of a
//! `function_call_output` type answering another kind of call is `not_function_call`.

use std::collections::HashSet;

use foldhash::fast::RandomState;

use super::{Finding, Param};
use crate::gate::item::{Item, ItemClass};
use crate::gate::pairing::{Call, Pairer, Step};
use crate::gate::verdict::Reason;

/// The pairing of `input` (see [`crate::gate::pairing`]), with what tells whether an output
/// whose call is not in `input` may answer a call of stored state.
#[derive(Debug, Default)]
pub(super) struct CallIndex<'r> {
    pairer: Pairer<'r>,
    /// Whether the request continues stored state, where calls may live outside `input`.
    continues_stored_state: bool,
    /// The `call_id`s of the calls stored state holds, when the provenance ledger knows them
    /// (docs/ledger.md#continuation-pairing); `None` when nothing tells, so an output whose call is
    /// not in `input` passes when the request continues stored state.
    stored_calls: Option<HashSet<&'r str, RandomState>>,
}

impl<'r> CallIndex<'r> {
    /// An index with room for the calls of `items` input items.
    pub(super) fn for_items(items: usize, continues_stored_state: bool) -> Self {
        Self {
            pairer: Pairer::for_items(items),
            continues_stored_state,
            stored_calls: None,
        }
    }

    /// The same index, told which calls stored state holds (`None`: unknown): an output that
    /// pairs with no call in `input` then passes only when its `call_id` is one of them.
    pub(super) fn with_stored_calls(self, stored_calls: Option<HashSet<&'r str, RandomState>>) -> Self {
        Self { stored_calls, ..self }
    }

    /// The same index, counting the `function_call`s before position `last_turn` that an
    /// output answers ([`CallIndex::answered_before_last_turn`]), for `call_without_output`.
    pub(super) fn with_last_turn(self, last_turn: usize) -> Self {
        Self {
            pairer: self.pairer.with_last_turn(last_turn),
            ..self
        }
    }

    /// Whether some call paired so far has no output yet.
    pub(super) fn has_open_calls(&self) -> bool {
        self.pairer.has_open_calls()
    }

    /// How many `function_call`s before the last turn an output has answered so far.
    pub(super) fn answered_before_last_turn(&self) -> usize {
        self.pairer.answered_before_last_turn()
    }

    /// Pairs `item` (the item at `index`, taken in input order) and says what is wrong with its
    /// pairing, if anything. Every item goes through here, so later outputs see it.
    pub(super) fn pair(&mut self, index: usize, item: &'r Item<'_>) -> Option<Finding> {
        let step = self.pairer.step(index, item);
        self.judge(item, &step)
    }

    /// What is wrong with the pairing `step` of `item`, if anything.
    fn judge(&self, item: &Item<'_>, step: &Step<'r>) -> Option<Finding> {
        match *step {
            Step::Neither | Step::Call { repeats: None, .. } => None,
            Step::Call {
                call_id,
                repeats: Some(earlier),
            } => Some(Finding::new(
                Reason::CallIdMismatch,
                Param::Member("call_id"),
                format!(
                    "call_id `{call_id}` repeats input[{}] (a `{}`), which no output has answered yet",
                    earlier.index, earlier.type_name
                ),
            )),
            // Outputs of other tool kinds may pair by other members; only a
            // function_call_output must name its call.
            Step::NoCallId => (item.class == ItemClass::FunctionCallOutput).then(|| {
                Finding::new(
                    Reason::CallIdMismatch,
                    Param::Member("call_id"),
                    missing_call_id(item),
                )
            }),
            Step::Unpaired { call_id, answered } => self.unpaired(call_id, answered),
            Step::Answered { call_id, call } => {
                (item.class == ItemClass::FunctionCallOutput && !call.is_function_call).then(|| {
                    Finding::new(
                        Reason::NotFunctionCall,
                        Param::Member("call_id"),
                        format!(
                            "call_id `{call_id}` pairs with input[{}], a `{}`, not a function_call",
                            call.index, call.type_name
                        ),
                    )
                })
            }
        }
    }

    /// An output that pairs with no call in `input`: fine when the call may live in stored
    /// state, `input` says nothing about its `call_id`, and the ledger does not know that
    /// stored state lacks it.
    fn unpaired(&self, call_id: &str, answered: Option<Call<'_>>) -> Option<Finding> {
        let message = match (answered, &self.stored_calls) {
            (Some(call), _) => format!(
                "call_id `{call_id}` pairs with no unanswered call: input[{}] was already answered",
                call.index
            ),
            (None, None) if self.continues_stored_state => return None,
            (None, Some(stored)) if self.continues_stored_state => {
                if stored.contains(call_id) {
                    return None;
                }
                format!(
                    "call_id `{call_id}` matches no call earlier in input, nor any call the \
                     ledger recorded in the previous_response_id chain"
                )
            }
            (None, _) => format!("call_id `{call_id}` matches no call earlier in input"),
        };
        Some(Finding::new(
            Reason::CallIdMismatch,
            Param::Member("call_id"),
            message,
        ))
    }
}

fn missing_call_id(item: &Item<'_>) -> String {
    if item.call_id.is_absent_or_null() {
        "function_call_output has no call_id".to_owned()
    } else {
        format!(
            "function_call_output call_id is {}, not a string",
            item.call_id.describe()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::pairing::for_each_answer;

    /// Pairs every item of `json` in order and returns each item's finding.
    fn findings_with(json: &str, continues_stored_state: bool) -> Vec<Option<Reason>> {
        let items: Vec<Item<'_>> = serde_json::from_str(json).unwrap();
        let mut index = CallIndex::for_items(items.len(), continues_stored_state);
        items
            .iter()
            .enumerate()
            .map(|(i, item)| index.pair(i, item).map(|f| f.reason))
            .collect()
    }

    fn findings(json: &str) -> Vec<Option<Reason>> {
        findings_with(json, false)
    }

    const MISMATCH: Option<Reason> = Some(Reason::CallIdMismatch);

    #[test]
    fn an_output_after_its_call_passes() {
        let r = findings(
            r#"[{"type":"function_call","call_id":"c1"},{"type":"function_call_output","call_id":"c1"}]"#,
        );
        assert_eq!(r, [None, None]);
    }

    #[test]
    fn an_output_with_no_call_is_a_mismatch() {
        let r = findings(
            r#"[{"type":"function_call","call_id":"c1"},{"type":"function_call_output","call_id":"c2"}]"#,
        );
        assert_eq!(r, [None, MISMATCH]);
    }

    #[test]
    fn an_output_before_its_call_is_a_mismatch() {
        let r = findings(
            r#"[{"type":"function_call_output","call_id":"c1"},{"type":"function_call","call_id":"c1"}]"#,
        );
        assert_eq!(r, [MISMATCH, None]);
    }

    #[test]
    fn an_output_without_call_id_is_a_mismatch() {
        let r = findings(
            r#"[{"type":"function_call_output","output":"x"},{"type":"function_call_output","call_id":null}]"#,
        );
        assert_eq!(r, [MISMATCH, MISMATCH]);
    }

    #[test]
    fn a_call_repeating_an_unanswered_call_id_is_a_mismatch() {
        let r =
            findings(r#"[{"type":"function_call","call_id":"c1"},{"type":"function_call","call_id":"c1"}]"#);
        assert_eq!(r, [None, MISMATCH]);
    }

    #[test]
    fn a_call_id_repeated_from_another_unanswered_call_kind_is_a_mismatch() {
        let r = findings(
            r#"[{"type":"openai:computer_call","call_id":"c1"},{"type":"function_call","call_id":"c1"}]"#,
        );
        assert_eq!(r, [None, MISMATCH]);
    }

    #[test]
    fn a_call_id_may_repeat_once_answered() {
        // Bedrock Mantle: every response numbers its calls from call_0.
        let r = findings(
            r#"[{"type":"function_call","call_id":"call_0"},{"type":"function_call_output","call_id":"call_0"},
                {"type":"function_call","call_id":"call_0"},{"type":"function_call","call_id":"call_1"},
                {"type":"function_call_output","call_id":"call_0"},{"type":"function_call_output","call_id":"call_1"},
                {"type":"function_call","call_id":"call_0"},{"type":"function_call_output","call_id":"call_0"}]"#,
        );
        assert_eq!(r, [None; 8]);
    }

    #[test]
    fn replaying_the_pairing_names_each_output_and_its_call() {
        let items: Vec<Item<'_>> = serde_json::from_str(
            r#"[{"type":"function_call","call_id":"call_0"},{"type":"function_call_output","call_id":"call_0"},
                {"type":"function_call","call_id":"call_0"},{"type":"custom_tool_call","call_id":"c1"},
                {"type":"function_call_output","call_id":"nobody"},{"type":"custom_tool_call_output","call_id":"c1"},
                {"type":"function_call_output","call_id":"call_0"},{"type":"function_call_output","call_id":"call_0"}]"#,
        )
        .unwrap();
        let mut pairs = Vec::new();
        for_each_answer(&items, |output, call| pairs.push((output, call)));
        assert_eq!(pairs, [(1, 0), (5, 3), (6, 2)]);
        // The function_calls at 0 and 2 are answered (the custom_tool_call at 3 is no
        // function_call); those before the last turn are counted.
        for (last_turn, counted) in [(7, 2), (3, 2), (2, 1), (0, 0)] {
            let mut index = CallIndex::for_items(items.len(), false).with_last_turn(last_turn);
            for (at, item) in items.iter().enumerate() {
                index.pair(at, item);
            }
            assert_eq!(
                index.answered_before_last_turn(),
                counted,
                "last turn at {last_turn}"
            );
        }
    }

    #[test]
    fn a_second_output_for_an_answered_call_is_a_mismatch() {
        let r = findings(
            r#"[{"type":"function_call","call_id":"c1"},{"type":"function_call_output","call_id":"c1"},{"type":"function_call_output","call_id":"c1"}]"#,
        );
        assert_eq!(r, [None, None, MISMATCH]);
    }

    #[test]
    fn outputs_pair_with_the_most_recent_unanswered_call() {
        // The repeat is refused, but pairing still follows the rule: the output answers input[1],
        // the later output input[0].
        let r = findings(
            r#"[{"type":"custom_tool_call","call_id":"c1"},{"type":"function_call","call_id":"c1"},
                {"type":"function_call_output","call_id":"c1"},{"type":"function_call_output","call_id":"c1"}]"#,
        );
        assert_eq!(r, [None, MISMATCH, None, Some(Reason::NotFunctionCall)]);
    }

    #[test]
    fn outputs_do_not_count_as_calls() {
        let r = findings(
            r#"[{"type":"function_call_output","call_id":"c1"},{"type":"function_call","call_id":"c1"},{"type":"function_call_output","call_id":"c1"}]"#,
        );
        assert_eq!(r, [MISMATCH, None, None]);
    }

    #[test]
    fn an_output_for_another_call_kind_is_not_a_function_call() {
        let r = findings(
            r#"[{"type":"custom_tool_call","call_id":"c1"},{"type":"function_call_output","call_id":"c1"}]"#,
        );
        assert_eq!(r, [None, Some(Reason::NotFunctionCall)]);
    }

    #[test]
    fn other_outputs_pair_with_their_calls() {
        let r = findings(
            r#"[{"type":"custom_tool_call","call_id":"c1"},{"type":"custom_tool_call_output","call_id":"c1"},
                {"type":"computer_call_output","call_id":"c9"},{"type":"local_shell_call_output","id":"ls_1"}]"#,
        );
        assert_eq!(r, [None, None, MISMATCH, None]);
    }

    #[test]
    fn stored_state_may_hold_the_call_of_an_output() {
        let only_outputs = r#"[{"type":"function_call_output","call_id":"call_1"},{"type":"function_call_output","call_id":"call_2"}]"#;
        assert_eq!(findings_with(only_outputs, true), [None, None]);
        assert_eq!(findings_with(only_outputs, false), [MISMATCH, MISMATCH]);
    }

    /// Pairs every item of `json` (a request continuing stored state) with the ledger knowing
    /// `stored` calls.
    fn findings_with_stored(json: &str, stored: &[&str]) -> Vec<Option<Reason>> {
        let items: Vec<Item<'_>> = serde_json::from_str(json).unwrap();
        let mut index =
            CallIndex::for_items(items.len(), true).with_stored_calls(Some(stored.iter().copied().collect()));
        items
            .iter()
            .enumerate()
            .map(|(i, item)| index.pair(i, item).map(|f| f.reason))
            .collect()
    }

    #[test]
    fn a_known_chain_pairs_outputs_with_its_recorded_calls() {
        let outputs = r#"[{"type":"function_call_output","call_id":"call_1"},{"type":"function_call_output","call_id":"call_2"},
            {"type":"function_call","call_id":"call_3"},{"type":"function_call_output","call_id":"call_3"}]"#;
        assert_eq!(findings_with_stored(outputs, &["call_1", "call_2"]), [None; 4]);
        assert_eq!(
            findings_with_stored(outputs, &["call_1"]),
            [None, MISMATCH, None, None]
        );
        assert_eq!(
            findings_with_stored(outputs, &[]),
            [MISMATCH, MISMATCH, None, None]
        );
        // What input contradicts stays a mismatch, recorded or not.
        let answered_twice = r#"[{"type":"function_call","call_id":"c1"},{"type":"function_call_output","call_id":"c1"},{"type":"function_call_output","call_id":"c1"}]"#;
        assert_eq!(
            findings_with_stored(answered_twice, &["c1"]),
            [None, None, MISMATCH]
        );
    }

    #[test]
    fn stored_state_does_not_excuse_what_input_contradicts() {
        let answered_twice = r#"[{"type":"function_call","call_id":"c1"},{"type":"function_call_output","call_id":"c1"},{"type":"function_call_output","call_id":"c1"}]"#;
        assert_eq!(findings_with(answered_twice, true), [None, None, MISMATCH]);
        let repeated = r#"[{"type":"function_call","call_id":"c1"},{"type":"function_call","call_id":"c1"}]"#;
        assert_eq!(findings_with(repeated, true), [None, MISMATCH]);
    }
}
