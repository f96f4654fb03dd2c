//! Property tests of `repair` (docs/item-profiles.md): for generated histories whose items carry
//! members the `openai` profile refuses or does not know, written in any order, spacing and
//! escaping,
//! the forwarded body is valid JSON, equals the original without exactly those members, and
//! gates clean under the same profile.

use proptest::prelude::*;
use serde_json::Value;

use crate::gate::{parse, strip, Action, Gate, ItemProfile, Policy, ProviderProfile, Reason, Target};

/// One member as written: its key (maybe with an escape) and its JSON text.
#[derive(Debug, Clone)]
struct Written {
    key: String,
    value: String,
    cut: bool,
}

fn key(name: &str, escaped: bool) -> String {
    match (escaped, name.find('_')) {
        (true, Some(at)) => format!("\"{}\\u005f{}\"", &name[..at], &name[at + 1..]),
        _ => format!("\"{name}\""),
    }
}

fn member(name: &str, value: &str, cut: bool, escaped: bool) -> Written {
    Written {
        key: key(name, escaped),
        value: value.to_owned(),
        cut,
    }
}

/// Spacing around JSON tokens.
fn space() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just(""), Just(" "), Just("\n  "), Just("\t")]
}

fn object(members: Vec<Written>, spaces: &[&str]) -> String {
    let mut out = String::from("{");
    for (i, m) in members.iter().enumerate() {
        let s = spaces[i % spaces.len()];
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!("{s}{}{s}:{s}{}{s}", m.key, m.value));
    }
    out.push('}');
    out
}

/// A function call (with extra members) and its output, or an assistant message whose text
/// part may carry `parsed`.
fn items(n: usize) -> impl Strategy<Value = Vec<(Vec<Written>, Vec<Written>)>> {
    let call = (
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<u8>(),
    )
        .prop_map(|(parsed, unknown, namespace, escaped, order)| {
            let mut m = vec![
                member("type", "\"function_call\"", false, false),
                member("call_id", "\"CALL\"", false, false),
                member("name", "\"f\"", false, false),
                member("arguments", "\"{\\\"a\\\":\\\"}\\\\\\\"\\\"}\"", false, false),
                member("status", "\"completed\"", false, false),
            ];
            if parsed {
                m.push(member(
                    "parsed_arguments",
                    "{\"a\":\"}\\\"\",\"b\":[1,{}]}",
                    true,
                    escaped,
                ));
            }
            if unknown {
                m.push(member("x_extra", "[\"\\\\\",null]", true, escaped));
            }
            if namespace {
                m.push(member("namespace", "\"tools\"", false, false));
            }
            let len = m.len();
            m.rotate_left(order as usize % len);
            (m, vec![])
        });
    let message = (any::<bool>(), any::<bool>()).prop_map(|(parsed, escaped)| {
        let mut part = vec![
            member("type", "\"output_text\"", false, false),
            member("text", "\"a \\\"quoted\\\" ,}\"", false, false),
        ];
        if parsed {
            part.insert(1, member("parsed", "null", true, escaped));
        }
        (
            vec![
                member("role", "\"assistant\"", false, false),
                member("content", "PARTS", false, false),
            ],
            part,
        )
    });
    proptest::collection::vec(prop_oneof![call, message], 1..n)
}

/// The body, and the body as JSON with the members marked `cut` removed.
fn body(items: &[(Vec<Written>, Vec<Written>)], spaces: &[&str]) -> (String, Value) {
    let mut written = Vec::new();
    let mut expected = Vec::new();
    for (i, (members, part)) in items.iter().enumerate() {
        let call_id = format!("\"c{i}\"");
        let members: Vec<Written> = members
            .iter()
            .map(|m| match m.value.as_str() {
                "\"CALL\"" => Written {
                    value: call_id.clone(),
                    ..m.clone()
                },
                "PARTS" => Written {
                    value: format!("[{}]", object(part.clone(), spaces)),
                    ..m.clone()
                },
                _ => m.clone(),
            })
            .collect();
        let text = object(members.clone(), spaces);
        let mut value: Value = serde_json::from_str(&text).unwrap();
        let map = value.as_object_mut().unwrap();
        for m in members.iter().filter(|m| m.cut) {
            let name: String = serde_json::from_str(&m.key).unwrap();
            map.remove(&name);
        }
        if let Some(Value::Array(parts)) = map.get_mut("content") {
            for p in part.iter().filter(|m| m.cut) {
                let name: String = serde_json::from_str(&p.key).unwrap();
                parts[0].as_object_mut().unwrap().remove(&name);
            }
        }
        written.push(text.clone());
        expected.push(value);
        if map_is_call(&text) {
            let output =
                format!("{{\"type\":\"function_call_output\",\"call_id\":{call_id},\"output\":\"ok\"}}");
            expected.push(serde_json::from_str(&output).unwrap());
            written.push(output);
        }
    }
    let tools = r#"[{"type":"function","name":"f","parameters":{"type":"object"}}]"#;
    let s = spaces[0];
    let text = format!(
        "{{\"model\":\"m\",{s}\"tools\":{tools},\"input\":[{s}{}{s}]}}",
        written.join(&format!(",{s}"))
    );
    let expected = serde_json::json!({"model": "m", "tools": serde_json::from_str::<Value>(tools).unwrap(), "input": expected});
    (text, expected)
}

fn map_is_call(text: &str) -> bool {
    text.contains("\"function_call\"")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn repairs_leave_valid_json_without_exactly_those_members_that_gates_clean(
        items in items(8),
        spaces in proptest::collection::vec(space(), 1..4),
    ) {
        let (text, expected) = body(&items, &spaces);
        let mut policy = Policy::default();
        policy.set_action(Reason::ItemUnknownField, Action::Repair);
        let openai = ProviderProfile::own_namespace("openai")
            .with_item_profile(Some(ItemProfile::built_in("openai").unwrap()));
        let target = Target::new(&openai, &policy);
        let gate = Gate::default();
        let request = parse(text.as_bytes()).unwrap();
        let verdict = gate.judge(&request, &target).unwrap();
        prop_assert!(verdict.is_allowed(), "{:?}", verdict.violations);
        let forwarded = match strip::strip(text.as_bytes(), &request, &verdict).unwrap() {
            Some(cut) => cut.body,
            None => text.clone().into_bytes(),
        };
        let value: Value = serde_json::from_slice(&forwarded).expect("valid JSON");
        prop_assert_eq!(&value, &expected);
        let again = gate.check(&forwarded, &target).unwrap();
        prop_assert!(again.violations.is_empty(), "{:?}", again.violations);
        // The cut removed bytes only: what is left is a subsequence of the original.
        let mut original = text.bytes();
        prop_assert!(forwarded.iter().all(|b| original.any(|o| o == *b)));
    }
}
