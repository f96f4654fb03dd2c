//! The `function_call` items a provider produced, checked with the rules a replayed call
//! meets: the tool is one the team may call and the request declared, and the arguments parse
//! and fit its schema. A produced call has no `status` to check.

use super::function_call::{self, CallContext};
use super::tools::ToolIndex;
use super::WorkMeter;
use crate::gate::item::{Item, ItemClass, MemberLayout};
use crate::gate::output::{OutputCall, ResponseViolation};
use crate::gate::profile::Target;
use crate::gate::request::{Tool, WorkExceeded};
use crate::gate::schema::SchemaCache;
use crate::gate::shape::KnownName;
use crate::json::{Field, RawField, Text};

/// Checks every call against `tools` (the request's declared tools) and the target's tool
/// rules, in order, within the target's work budget.
pub(crate) fn check(
    tools: &[Tool<'_>],
    calls: &[OutputCall],
    target: &Target<'_>,
    schemas: &SchemaCache,
) -> Result<Vec<ResponseViolation>, WorkExceeded> {
    let mut index = ToolIndex::new(tools, target.policy.tools.as_deref());
    let mut work = WorkMeter::new(target.work_budget);
    let mut cx = CallContext {
        tools: &mut index,
        schemas,
        require_status: false,
        work: &mut work,
    };
    let mut violations = Vec::new();
    for call in calls {
        // The rules read a call's arguments as written in JSON, so the decoded text is
        // written again; a replay written the same way later is then a remembered pass.
        let encoded = match &call.arguments {
            Field::Str(text) => serde_json::to_string(text.as_ref()).ok(),
            _ => None,
        };
        let item = call_item(call, encoded.as_deref());
        if let Some(finding) = function_call::check(&item, &mut cx)? {
            violations.push(ResponseViolation {
                index: call.index,
                call_id: call.call_id.clone(),
                reason: finding.reason,
                param: finding.param.render("output", call.index),
                pointer: finding.pointer,
                message: finding.message,
            });
        }
    }
    Ok(violations)
}

/// The call as the item rules read it.
fn call_item<'c>(call: &'c OutputCall, encoded: Option<&'c str>) -> Item<'c> {
    let text = |value: &'c Option<String>| match value {
        Some(text) => Field::Str(Text::Borrowed(text)),
        None => Field::Absent,
    };
    let arguments = match (&call.arguments, encoded) {
        (_, Some(encoded)) => RawField::Str(encoded),
        (Field::Other(kind), None) => RawField::Other(*kind),
        (_, None) => RawField::Absent,
    };
    let bit_if = |written: bool, name: KnownName| if written { name.bit() } else { 0 };
    let present = KnownName::Type.bit()
        | bit_if(call.call_id.is_some(), KnownName::CallId)
        | bit_if(call.name.is_some(), KnownName::Name)
        | bit_if(arguments != RawField::Absent, KnownName::Arguments);
    Item {
        class: ItemClass::FunctionCall,
        kind: Field::Str(Text::Borrowed("function_call")),
        id: Field::Absent,
        call_id: text(&call.call_id),
        name: text(&call.name),
        status: Field::Absent,
        role: Field::Absent,
        arguments,
        has_tool_calls: false,
        encrypted_content: None,
        members: 0..0,
        layout: MemberLayout::Mixed,
        present,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use crate::gate::verdict::Reason;
    use crate::gate::{Gate, JsonKind, Policy, ProviderProfile, Target, ToolRules};

    use super::*;

    const TOOLS: &str = r#"[
        {"type":"function","name":"report","parameters":{"type":"object","additionalProperties":false,"required":["region"],
            "properties":{"region":{"type":"string","enum":["apac","emea","amer"]},"days":{"type":"integer","minimum":1}}}},
        {"type":"function","name":"free"},
        {"type":"function","name":"broken","parameters":{"type":"nope"}},
        {"type":"web_search"}
    ]"#;

    const REPORT_SCHEMA: &str = r#"{"type":"object","additionalProperties":false,"required":["region"],
            "properties":{"region":{"type":"string","enum":["apac","emea","amer"]},"days":{"type":"integer","minimum":1}}}"#;

    fn call(index: usize, name: &str, arguments: &str) -> OutputCall {
        OutputCall {
            index,
            call_id: Some(format!("call_{index}")),
            name: Some(name.to_owned()),
            arguments: Field::Str(Text::Owned(arguments.into())),
        }
    }

    fn check_with(gate: &Gate, tools: &str, calls: &[OutputCall]) -> Vec<ResponseViolation> {
        let openai = ProviderProfile::own_namespace("openai");
        gate.check_output_calls(tools, calls, &Target::provider(&openai))
            .unwrap()
    }

    fn reasons(calls: &[OutputCall]) -> Vec<(usize, Reason)> {
        check_with(&Gate::default(), TOOLS, calls)
            .into_iter()
            .map(|v| (v.index, v.reason))
            .collect()
    }

    #[test]
    fn calls_that_fit_their_tools_have_no_violations() {
        let calls = [
            call(0, "report", r#"{"region":"apac","days":2}"#),
            call(2, "free", r#"{"anything":[1,2]}"#),
        ];
        assert_eq!(reasons(&calls), []);
        assert_eq!(reasons(&[]), []);
    }

    #[test]
    fn arguments_outside_the_schema_name_the_call_and_the_pointer() {
        let violations = check_with(
            &Gate::default(),
            TOOLS,
            &[
                call(0, "report", r#"{"region":"apac"}"#),
                call(3, "report", r#"{"region":"mars"}"#),
            ],
        );
        assert_eq!(violations.len(), 1);
        let v = &violations[0];
        assert_eq!((v.index, v.call_id.as_deref()), (3, Some("call_3")));
        assert_eq!(v.reason, Reason::ArgumentsSchema);
        assert_eq!(v.param, "output[3].arguments");
        assert_eq!(v.pointer.as_deref(), Some("/region"));
        assert!(v.message.contains("mars"), "{}", v.message);
        let json = serde_json::to_value(v).unwrap();
        assert_eq!(json["reason"], "arguments_schema");
        assert_eq!(json["call_id"], "call_3");
    }

    #[test]
    fn each_failing_call_gets_its_first_failure() {
        let calls = [
            call(0, "report", r#"{"region":"#),
            call(1, "invented", "{}"),
            call(2, "invented", "{"),
            call(3, "broken", "{}"),
            call(4, "report", r#"{"days":0}"#),
            OutputCall {
                arguments: Field::Other(JsonKind::Object),
                ..call(5, "report", "")
            },
            OutputCall {
                arguments: Field::Absent,
                ..call(6, "free", "")
            },
        ];
        assert_eq!(
            reasons(&calls),
            [
                (0, Reason::ArgumentsParse),
                (1, Reason::UnknownTool),
                (2, Reason::ArgumentsParse),
                (3, Reason::ToolSchemaInvalid),
                (4, Reason::ArgumentsSchema),
                (5, Reason::ArgumentsType),
                (6, Reason::ArgumentsType),
            ]
        );
        let violations = check_with(&Gate::default(), TOOLS, &calls);
        assert_eq!(violations[1].param, "output[1].name");
        assert_eq!(violations[3].param, "tools[2].parameters");
        assert!(
            violations[5].message.contains("an object"),
            "{}",
            violations[5].message
        );
    }

    #[test]
    fn a_nameless_call_or_a_request_without_tools_has_unknown_tools() {
        let nameless = OutputCall {
            name: None,
            call_id: None,
            ..call(0, "", "{}")
        };
        let violations = check_with(&Gate::default(), TOOLS, &[nameless]);
        assert_eq!(violations[0].reason, Reason::UnknownTool);
        assert_eq!(violations[0].call_id, None);
        for tools in ["null", "[]", " [ ] "] {
            let violations = check_with(&Gate::default(), tools, &[call(0, "report", "{}")]);
            assert_eq!(violations[0].reason, Reason::UnknownTool, "{tools}");
        }
    }

    #[test]
    fn tools_that_are_not_a_tools_array_are_an_error() {
        let gate = Gate::default();
        let openai = ProviderProfile::own_namespace("openai");
        let target = Target::provider(&openai);
        for tools in ["{}", "[1]", "[", ""] {
            let err = gate
                .check_output_calls(tools, &[call(0, "report", "{}")], &target)
                .unwrap_err();
            assert!(
                matches!(err.code(), "invalid_input" | "invalid_json"),
                "{tools}: {err}"
            );
        }
        // Without calls there is nothing to read the tools for.
        assert_eq!(gate.check_output_calls("{}", &[], &target), Ok(Vec::new()));
    }

    #[test]
    fn the_team_rules_apply_to_produced_calls() {
        let allowed = [globset::Glob::new("rep*").unwrap()];
        let rules = ToolRules::new(Some(&allowed), HashMap::new()).unwrap();
        let mut policy = Policy::default();
        policy.tools = Some(Arc::new(rules));
        let openai = ProviderProfile::own_namespace("openai");
        let violations = Gate::default()
            .check_output_calls(
                TOOLS,
                &[call(0, "report", r#"{"region":"emea"}"#), call(1, "free", "{}")],
                &Target::new(&openai, &policy),
            )
            .unwrap();
        let found: Vec<_> = violations.iter().map(|v| (v.index, v.reason)).collect();
        assert_eq!(found, [(1, Reason::ToolNotAllowed)]);
    }

    #[test]
    fn checking_is_bounded_by_the_work_budget() {
        let openai = ProviderProfile::own_namespace("openai");
        let target = Target::provider(&openai).with_work_budget(10);
        let err = Gate::default()
            .check_output_calls(TOOLS, &[call(0, "report", r#"{"region":"apac"}"#)], &target)
            .unwrap_err();
        assert_eq!(err.code(), "gate_budget_exceeded");
    }

    #[test]
    fn a_schema_compiles_once_and_a_produced_pass_is_remembered_for_its_replay() {
        let gate = Gate::default();
        let calls = [call(0, "report", r#"{"region":"apac","note":"caf\u00e9 \"x\""}"#)];
        // `note` is not allowed: the call fails, and nothing is remembered.
        assert_eq!(
            check_with(&gate, TOOLS, &calls)[0].reason,
            Reason::ArgumentsSchema
        );
        let good = [call(0, "report", r#"{"region":"apac","days":3}"#)];
        assert_eq!(check_with(&gate, TOOLS, &good), []);
        let compiled = gate.schemas().len();
        assert_eq!(check_with(&gate, TOOLS, &good), []);
        assert_eq!(gate.schemas().len(), compiled);
        // The replay, written as providers and SDKs write it, is a remembered pass.
        let schema = gate.schemas().get(REPORT_SCHEMA);
        assert!(gate
            .schemas()
            .has_passed(Some(&schema), r#""{\"region\":\"apac\",\"days\":3}""#));
        assert!(!gate
            .schemas()
            .has_passed(Some(&schema), r#""{\"region\":\"apac\"}""#));
    }
}
