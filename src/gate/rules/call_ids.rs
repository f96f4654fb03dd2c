//! `call_id_mismatch` and `not_function_call`: pairing calls and outputs by `call_id`.

use std::collections::HashMap;

use foldhash::fast::RandomState;

use super::{Finding, Param};
use crate::gate::item::{Item, ItemClass};
use crate::gate::verdict::Reason;

/// The first earlier item that carried a call id.
#[derive(Debug, Clone, Copy)]
struct FirstCarrier<'r> {
    index: usize,
    type_name: &'r str,
    /// Whether any earlier `function_call` carried it.
    has_function_call: bool,
}

/// The call ids seen so far in `input`, from every item except outputs.
#[derive(Debug, Default)]
pub(super) struct CallLedger<'r> {
    seen: HashMap<&'r str, FirstCarrier<'r>, RandomState>,
    next_index: usize,
}

impl<'r> CallLedger<'r> {
    /// A ledger with room for the call ids of `items` input items, so it does not grow while
    /// a long history is judged (calls are rarely more than half of the items).
    pub(super) fn for_items(items: usize) -> Self {
        Self {
            seen: HashMap::with_capacity_and_hasher(items / 2, RandomState::default()),
            next_index: 0,
        }
    }

    /// Notes the call id `item` carries; call once per item, in input order.
    pub(super) fn record(&mut self, item: &'r Item<'_>) {
        let index = self.next_index;
        self.next_index += 1;
        if item.class == ItemClass::FunctionCallOutput {
            return;
        }
        let Some(call_id) = item.call_id() else { return };
        let is_call = item.class == ItemClass::FunctionCall;
        self.seen
            .entry(call_id)
            .and_modify(|first| first.has_function_call |= is_call)
            .or_insert(FirstCarrier {
                index,
                type_name: item.type_name(),
                has_function_call: is_call,
            });
    }

    /// A `function_call` must not reuse the call id of an earlier item.
    pub(super) fn check_call(&self, item: &Item<'_>) -> Option<Finding> {
        let call_id = item.call_id()?;
        let first = self.seen.get(call_id)?;
        Some(Finding::new(
            Reason::CallIdMismatch,
            Param::Member("call_id"),
            format!(
                "call_id `{call_id}` repeats the call_id of input[{}] (a `{}`)",
                first.index, first.type_name
            ),
        ))
    }

    /// A `function_call_output` must answer a `function_call` earlier in `input`.
    pub(super) fn check_output(&self, item: &Item<'_>) -> Option<Finding> {
        let Some(call_id) = item.call_id() else {
            return Some(Finding::new(
                Reason::CallIdMismatch,
                Param::Member("call_id"),
                missing_call_id(item),
            ));
        };
        match self.seen.get(call_id) {
            Some(first) if first.has_function_call => None,
            Some(first) => Some(Finding::new(
                Reason::NotFunctionCall,
                Param::Member("call_id"),
                format!(
                    "call_id `{call_id}` belongs to input[{}], a `{}`, not a function_call",
                    first.index, first.type_name
                ),
            )),
            None => Some(Finding::new(
                Reason::CallIdMismatch,
                Param::Member("call_id"),
                format!("call_id `{call_id}` matches no function_call earlier in input"),
            )),
        }
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

    fn items(json: &str) -> Vec<Item<'_>> {
        serde_json::from_str(json).unwrap()
    }

    /// Runs the ledger the way `judge` does and returns each item's finding.
    fn findings(json: &str) -> Vec<Option<Reason>> {
        let items = items(json);
        let mut ledger = CallLedger::default();
        let mut out = Vec::new();
        for item in &items {
            let f = match item.class {
                ItemClass::FunctionCall => ledger.check_call(item),
                ItemClass::FunctionCallOutput => ledger.check_output(item),
                _ => None,
            };
            ledger.record(item);
            out.push(f.map(|f| f.reason));
        }
        out
    }

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
        assert_eq!(r, [None, Some(Reason::CallIdMismatch)]);
    }

    #[test]
    fn an_output_before_its_call_is_a_mismatch() {
        let r = findings(
            r#"[{"type":"function_call_output","call_id":"c1"},{"type":"function_call","call_id":"c1"}]"#,
        );
        assert_eq!(r, [Some(Reason::CallIdMismatch), None]);
    }

    #[test]
    fn an_output_without_call_id_is_a_mismatch() {
        let r = findings(
            r#"[{"type":"function_call_output","output":"x"},{"type":"function_call_output","call_id":null}]"#,
        );
        assert_eq!(r, [Some(Reason::CallIdMismatch), Some(Reason::CallIdMismatch)]);
    }

    #[test]
    fn a_repeated_call_id_is_a_mismatch() {
        let r =
            findings(r#"[{"type":"function_call","call_id":"c1"},{"type":"function_call","call_id":"c1"}]"#);
        assert_eq!(r, [None, Some(Reason::CallIdMismatch)]);
    }

    #[test]
    fn a_call_id_repeated_from_another_call_kind_is_a_mismatch() {
        let r = findings(
            r#"[{"type":"openai:computer_call","call_id":"c1"},{"type":"function_call","call_id":"c1"}]"#,
        );
        assert_eq!(r, [None, Some(Reason::CallIdMismatch)]);
    }

    #[test]
    fn outputs_do_not_count_as_earlier_carriers() {
        // The output is itself unmatched; the call after it is not a repeat.
        let r = findings(
            r#"[{"type":"function_call_output","call_id":"c1"},{"type":"function_call","call_id":"c1"},{"type":"function_call_output","call_id":"c1"}]"#,
        );
        assert_eq!(r, [Some(Reason::CallIdMismatch), None, None]);
    }

    #[test]
    fn an_output_for_another_call_kind_is_not_a_function_call() {
        let r = findings(
            r#"[{"type":"custom_tool_call","call_id":"c1"},{"type":"function_call_output","call_id":"c1"}]"#,
        );
        assert_eq!(r, [None, Some(Reason::NotFunctionCall)]);
    }

    #[test]
    fn two_outputs_for_one_call_both_match() {
        let r = findings(
            r#"[{"type":"function_call","call_id":"c1"},{"type":"function_call_output","call_id":"c1"},{"type":"function_call_output","call_id":"c1"}]"#,
        );
        assert_eq!(r, [None, None, None]);
    }
}
