//! One precedence (docs/item-profiles.md#precedence): pairing and the other rules of
//! docs/reasons.md judge every item first, whatever its type; only an item they do not refuse or
//! strip gets the item profile's
//! shape findings, and those never change what pairing found.

use crate::gate::{Action, Gate, ItemProfile, Policy, ProviderProfile, Reason, Target, Verdict};

use super::tests_corpus::corpus;

fn tools() -> &'static str {
    r#"[{"type":"function","name":"f","parameters":{"type":"object"}}]"#
}

/// The verdict on `input` for `openai`, with its item profile or without one.
fn judge(input: &str, profiled: bool) -> Verdict {
    let body = format!(r#"{{"tools":{},"input":[{input}]}}"#, tools());
    let profile = profiled.then(|| ItemProfile::built_in("openai").unwrap());
    let openai = ProviderProfile::own_namespace("openai").with_item_profile(profile);
    let policy = Policy::default();
    Gate::default()
        .check(body.as_bytes(), &Target::new(&openai, &policy))
        .unwrap()
}

fn reasons(verdict: &Verdict) -> Vec<(usize, Reason, Action)> {
    verdict
        .violations
        .iter()
        .map(|v| (v.index.unwrap(), v.reason, v.action))
        .collect()
}

const CALL: &str = r#"{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"}"#;
const OUTPUT: &str = r#"{"type":"function_call_output","call_id":"c1","output":"ok"}"#;
const USER: &str = r#"{"role":"user","content":"next"}"#;

#[test]
fn a_message_or_reasoning_item_repeating_an_unanswered_call_id_is_refused_for_its_pairing() {
    // The item is a call by its `call_id` (docs/reasons.md#call_id_mismatch): it repeats `c1`,
    // still unanswered. It used to get only the profile's `item_unknown_field` for that `call_id`
    // (or nothing
    // without a profile); pairing comes first on every item.
    for other in [
        r#"{"role":"assistant","content":"calling","call_id":"c1"}"#,
        r#"{"type":"reasoning","summary":[],"call_id":"c1"}"#,
    ] {
        for profiled in [false, true] {
            let verdict = judge(&format!("{CALL},{other},{OUTPUT}"), profiled);
            let of_item: Vec<_> = verdict.violations.iter().filter(|v| v.index == Some(1)).collect();
            assert_eq!(of_item.len(), 1, "{other}: {:#?}", verdict.violations);
            assert_eq!(
                (of_item[0].reason, of_item[0].action),
                (Reason::CallIdMismatch, Action::Reject),
                "{other}"
            );
            assert!(of_item[0].message.contains("repeats input[0]"));
        }
    }
}

#[test]
fn an_item_refused_for_its_pairing_gets_no_shape_finding() {
    // A repeated call that also carries `parsed_arguments` (repaired by the profile) and an
    // unknown member: its one violation is the pairing, and nothing is repaired.
    let repeat =
        r#"{"type":"function_call","call_id":"c1","name":"f","arguments":"{}","parsed_arguments":{},"x":1}"#;
    let stray = r#"{"type":"function_call_output","call_id":"c9","output":7}"#;
    let input = format!("{CALL},{repeat},{OUTPUT},{OUTPUT},{stray}");
    let verdict = judge(&input, true);
    assert_eq!(
        reasons(&verdict),
        [
            (1, Reason::CallIdMismatch, Action::Reject),
            (4, Reason::CallIdMismatch, Action::Reject)
        ]
    );
    assert!(verdict.repairs.is_empty());
    assert_eq!(reasons(&judge(&input, false)), reasons(&verdict));
}

#[test]
fn an_over_long_call_id_still_pairs_and_is_item_value() {
    let long = "c".repeat(65);
    let call = CALL.replace("\"c1\"", &format!("\"{long}\""));
    let output = OUTPUT.replace("\"c1\"", &format!("\"{long}\""));
    let input = format!("{USER},{call},{output},{USER}");
    // Pairing finds nothing: the output answers the call.
    assert!(judge(&input, false).violations.is_empty());
    // The profile finds each over-long `call_id`, and the call is not unanswered.
    let verdict = judge(&input, true);
    assert_eq!(
        reasons(&verdict),
        [
            (1, Reason::ItemValue, Action::Reject),
            (2, Reason::ItemValue, Action::Reject)
        ]
    );
    assert_eq!(verdict.violations[0].param, "input[1].call_id");
    // A second output for it is a mismatch, which pairing finds first.
    let verdict = judge(&format!("{call},{output},{output}"), true);
    assert_eq!(
        reasons(&verdict),
        [
            (0, Reason::ItemValue, Action::Reject),
            (1, Reason::ItemValue, Action::Reject),
            (2, Reason::CallIdMismatch, Action::Reject)
        ]
    );
}

#[test]
fn a_monitored_section_5_finding_still_gets_the_shape_check() {
    // `unknown_tool` is only monitored: the request goes on, so the member OpenAI refuses is
    // still repaired out of it.
    let call = r#"{"type":"function_call","call_id":"c1","name":"g","arguments":"{}","parsed_arguments":{}}"#;
    let verdict = judge(&format!("{call},{OUTPUT}"), true);
    assert_eq!(
        reasons(&verdict),
        [
            (0, Reason::UnknownTool, Action::Monitor),
            (0, Reason::ItemField, Action::Repair)
        ]
    );
    assert_eq!(verdict.repairs.len(), 1);
}

#[test]
fn the_real_client_corpus_is_not_refused_with_or_without_the_profile() {
    let openai = ProviderProfile::own_namespace("openai")
        .with_item_profile(Some(ItemProfile::built_in("openai").unwrap()));
    let bare = ProviderProfile::own_namespace("openai");
    let policy = Policy::default();
    let gate = Gate::default();
    for (origin, at, body) in corpus() {
        let request = crate::gate::parse_with(body.as_bytes(), at).unwrap();
        for provider in [&openai, &bare] {
            let verdict = gate.judge(&request, &Target::new(provider, &policy)).unwrap();
            assert!(verdict.is_allowed(), "{origin}: {:#?}", verdict.violations);
        }
    }
}
