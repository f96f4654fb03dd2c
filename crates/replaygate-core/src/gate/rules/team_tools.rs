//! `tool_not_allowed` and `tool_schema_drift` for the request's declared tools
//! (docs/teams.md#teams-and-policy): a team may declare only the function (and custom) tools its
//! globs allow, and a tool it pins
//! only with the pinned `parameters`.

use serde_json::Value;

use super::{Finding, Param};
use crate::gate::request::Tool;
use crate::gate::tool_rules::ToolRules;
use crate::gate::verdict::Reason;

/// The finding about each declared function tool that breaks `rules`, with its position in
/// `tools`, in order.
pub(super) fn check<'t>(
    tools: &'t [Tool<'_>],
    rules: &'t ToolRules,
) -> impl Iterator<Item = (usize, Finding)> + 't {
    tools.iter().enumerate().filter_map(|(position, tool)| {
        let name = tool.name.as_str().filter(|_| tool.is_named_client_tool())?;
        check_one(name, tool, rules).map(|finding| (position, finding))
    })
}

fn check_one(name: &str, tool: &Tool<'_>, rules: &ToolRules) -> Option<Finding> {
    if !rules.allows(name) {
        return Some(not_allowed(name, Param::Tool, "declare"));
    }
    let pinned = rules.pinned(name).filter(|_| tool.is_function())?;
    let declared = tool.parameters.map(serde_json::from_str::<Value>);
    let same = match (declared, &pinned.value) {
        (None, None) => true,
        (Some(Ok(declared)), Some(pinned)) => declared == *pinned,
        _ => false,
    };
    (!same).then(|| {
        Finding::new(
            Reason::ToolSchemaDrift,
            Param::Tool,
            format!(
                "tool `{name}` is declared with parameters that differ from the schema pinned \
                 for it; send the pinned parameters"
            ),
        )
    })
}

/// `tool_not_allowed` for a `custom_tool_call` whose tool the team may not call.
pub(super) fn check_custom_call(
    item: &crate::gate::item::Item<'_>,
    rules: Option<&ToolRules>,
) -> Option<Finding> {
    let rules = rules?;
    let name = item
        .name
        .as_str()
        .filter(|_| item.type_name() == "custom_tool_call")?;
    (!rules.allows(name)).then(|| not_allowed(name, Param::Member("name"), "call"))
}

/// `tool_not_allowed` for a tool called `name` the request would `verb` (declare or call).
pub(super) fn not_allowed(name: &str, param: Param, verb: &str) -> Finding {
    Finding::new(
        Reason::ToolNotAllowed,
        param,
        format!("this key's team may not {verb} tool `{name}`"),
    )
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use globset::Glob;

    use crate::gate::{
        Action, Gate, PinnedSchema, Policy, ProviderProfile, Reason, Target, ToolRules, Verdict,
    };

    const REPORT: &str = r#"{"type":"object","required":["region"],"properties":{"region":{"type":"string","enum":["apac","emea"]}}}"#;

    fn team(allowed: &[&str], monitor_only: bool) -> Policy {
        let globs: Vec<Glob> = allowed.iter().map(|g| Glob::new(g).unwrap()).collect();
        let pinned = HashMap::from([(
            "get_report".to_owned(),
            PinnedSchema::from_text(Some(REPORT)).unwrap(),
        )]);
        let rules = ToolRules::new(Some(&globs), pinned).unwrap();
        Policy::default().for_team(&HashMap::new(), Some(Arc::new(rules)), monitor_only)
    }

    fn judge(body: &str, policy: &Policy) -> Verdict {
        let openai = ProviderProfile::own_namespace("openai");
        Gate::default()
            .check(body.as_bytes(), &Target::new(&openai, policy))
            .unwrap()
    }

    fn found(verdict: &Verdict) -> Vec<(Option<usize>, Reason, &str)> {
        verdict
            .violations
            .iter()
            .map(|v| (v.index, v.reason, v.param.as_str()))
            .collect()
    }

    fn call(name: &str, arguments: &str) -> String {
        format!(
            r#"{{"type":"function_call","call_id":"c_{name}","name":"{name}","arguments":{}}}"#,
            serde_json::to_string(arguments).unwrap()
        )
    }

    #[test]
    fn tools_the_team_may_not_use_are_refused_where_declared_and_where_called() {
        let body = format!(
            r#"{{"tools":[{{"type":"function","name":"refund_card"}},{{"type":"function","name":"delete_account"}},{{"type":"web_search"}}],
                "input":[{},{}]}}"#,
            call("refund_card", "{}"),
            call("delete_account", "{}")
        );
        let verdict = judge(&body, &team(&["get_report", "refund_*"], false));
        assert_eq!(
            found(&verdict),
            [
                (None, Reason::ToolNotAllowed, "tools[1]"),
                (Some(1), Reason::ToolNotAllowed, "input[1].name"),
            ]
        );
        assert_eq!(verdict.violations[0].item_type, "function");
        assert!(!verdict.is_allowed());
        // Without team rules the same body passes.
        assert!(judge(&body, &Policy::default()).violations.is_empty());
    }

    #[test]
    fn custom_tools_are_held_to_the_same_globs() {
        let body = r#"{"tools":[{"type":"custom","name":"get_time"},{"type":"custom","name":"shell"}],
            "input":[{"type":"custom_tool_call","call_id":"c1","name":"shell","input":"rm -rf /"}]}"#;
        let verdict = judge(body, &team(&["get_*"], false));
        assert_eq!(
            found(&verdict),
            [
                (None, Reason::ToolNotAllowed, "tools[1]"),
                (Some(0), Reason::ToolNotAllowed, "input[0].name"),
            ]
        );
    }

    #[test]
    fn a_pinned_tool_declared_with_other_parameters_has_drifted() {
        let declared = |parameters: &str| {
            format!(
                r#"{{"tools":[{{"type":"function","name":"get_report","parameters":{parameters}}}],"input":"hi"}}"#
            )
        };
        let policy = team(&["*"], false);
        // The same schema with its keys in another order and other spacing has not drifted.
        let reordered = r#"{ "properties": {"region": {"enum": ["apac", "emea"], "type": "string"}}, "required": ["region"], "type": "object" }"#;
        assert!(judge(&declared(reordered), &policy).violations.is_empty());
        let looser = r#"{"type":"object"}"#;
        assert_eq!(
            found(&judge(&declared(looser), &policy)),
            [(None, Reason::ToolSchemaDrift, "tools[0]")]
        );
        let without = r#"{"tools":[{"type":"function","name":"get_report"}],"input":"hi"}"#;
        assert_eq!(
            judge(without, &policy).violations[0].reason,
            Reason::ToolSchemaDrift
        );
    }

    #[test]
    fn calls_to_a_pinned_tool_are_validated_against_the_pinned_schema() {
        let policy = team(&["*"], false);
        // Not declared: no unknown_tool, and the pinned schema applies.
        let fits = format!(r#"{{"input":[{}]}}"#, call("get_report", r#"{"region":"apac"}"#));
        assert!(judge(&fits, &policy).violations.is_empty());
        let misfit = format!(r#"{{"input":[{}]}}"#, call("get_report", r#"{"region":"mars"}"#));
        assert_eq!(
            found(&judge(&misfit, &policy)),
            [(Some(0), Reason::ArgumentsSchema, "input[0].arguments")]
        );
        // Declared with a looser schema: the declaration drifts, and the call still meets the
        // pinned schema.
        let loose = format!(
            r#"{{"tools":[{{"type":"function","name":"get_report","parameters":{{"type":"object"}}}}],"input":[{}]}}"#,
            call("get_report", r#"{"region":"mars"}"#)
        );
        let reasons: Vec<Reason> = judge(&loose, &policy)
            .violations
            .iter()
            .map(|v| v.reason)
            .collect();
        assert_eq!(reasons, [Reason::ToolSchemaDrift, Reason::ArgumentsSchema]);
        // Without the pin the call is an unknown tool (monitored).
        let verdict = judge(&misfit, &Policy::default());
        assert_eq!(verdict.violations[0].reason, Reason::UnknownTool);
    }

    #[test]
    fn monitor_mode_forwards_what_enforce_mode_refuses() {
        let body = format!(
            r#"{{"tools":[{{"type":"function","name":"delete_account"}}],"input":[{}]}}"#,
            call("get_report", r#"{"region":"mars"}"#)
        );
        let enforce = judge(&body, &team(&["get_*"], false));
        assert_eq!((enforce.rejected, enforce.monitored), (2, 0));
        let shadow = judge(&body, &team(&["get_*"], true));
        assert_eq!((shadow.rejected, shadow.monitored), (0, 2));
        assert!(shadow.is_allowed());
        assert!(shadow.violations.iter().all(|v| v.action == Action::Monitor));
    }
}
