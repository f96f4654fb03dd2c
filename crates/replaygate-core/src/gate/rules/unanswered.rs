//! `call_without_output` (docs/item-profiles.md): a `function_call` that no output in `input`
//! answers, followed later in `input` by a message. A new turn began without the call's output,
//! which
//! a provider with that rule in its item profile refuses.

use crate::gate::item::{Item, ItemClass};
use crate::gate::pairing::for_each_answer;

/// Where the last turn begins: the position of the last message in `items` (0 when there is
/// none, so no call is before it). A call before it must have its output in `input`.
pub(super) fn last_turn(items: &[Item<'_>]) -> usize {
    items
        .iter()
        .rposition(|item| item.class == ItemClass::Message)
        .unwrap_or(0)
}

/// For each item of `items`, whether it is a `function_call` left unanswered before a later
/// message.
pub(super) fn unanswered_calls(items: &[Item<'_>]) -> Vec<bool> {
    let last_turn = last_turn(items);
    let mut unanswered: Vec<bool> = items
        .iter()
        .enumerate()
        .map(|(index, item)| index < last_turn && item.class == ItemClass::FunctionCall)
        .collect();
    for_each_answer(items, |_, call| unanswered[call] = false);
    unanswered
}

/// The message of a `call_without_output` finding.
pub(super) fn message(item: &Item<'_>, source: &str) -> String {
    match item.call_id() {
        Some(call_id) => format!(
            "function_call `{call_id}` has no output in input, and a later message starts a new turn ({source})"
        ),
        None => format!("this function_call has no output in input, and a later message starts a new turn ({source})"),
    }
}

#[cfg(test)]
mod tests {
    use crate::gate::verdict::Reason;
    use crate::gate::{Gate, ItemProfile, ProviderProfile, Target};

    fn reasons(input: &str) -> Vec<(Reason, Option<usize>)> {
        let body = format!(
            r#"{{"tools":[{{"type":"function","name":"f","parameters":{{"type":"object"}}}}],"input":[{input}]}}"#
        );
        let openai = ProviderProfile::own_namespace("openai")
            .with_item_profile(Some(ItemProfile::built_in("openai").unwrap()));
        let verdict = Gate::default()
            .check(body.as_bytes(), &Target::provider(&openai))
            .unwrap();
        verdict.violations.iter().map(|v| (v.reason, v.index)).collect()
    }

    #[test]
    fn a_clean_call_left_unanswered_before_a_new_turn_is_found() {
        // The call itself has a clean shape: the fast path passes it, and the rule must still
        // see that no output answers it.
        let call = r#"{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}"#;
        let output = r#"{"type":"function_call_output","call_id":"c","output":"ok"}"#;
        let user = r#"{"role":"user","content":"next"}"#;
        assert_eq!(
            reasons(&format!("{call},{user}")),
            [(Reason::CallWithoutOutput, Some(0))]
        );
        assert_eq!(reasons(&format!("{call},{output},{user}")), []);
        // The last turn's call may still wait for its output.
        assert_eq!(reasons(&format!("{user},{call}")), []);
    }

    #[test]
    fn a_request_judged_again_for_an_unanswered_call_lists_each_violation_once_in_order() {
        // The first pass finds the call unanswered only once all items are paired; the items
        // are then judged again, and only that second verdict stands: the earlier items'
        // violations once each, the call's shape finding before its `call_without_output`.
        let stray = r#"{"type":"function_call_output","call_id":"nobody","output":"x"}"#;
        let call =
            r#"{"type":"function_call","call_id":"c","name":"f","arguments":"{}","parsed_arguments":{}}"#;
        let user = r#"{"role":"user","content":"next"}"#;
        assert_eq!(
            reasons(&format!("{stray},{call},{user}")),
            [
                (Reason::CallIdMismatch, Some(0)),
                (Reason::ItemField, Some(1)),
                (Reason::CallWithoutOutput, Some(1))
            ]
        );
    }
}
