//! `chat_completions_envelope`: a message in Chat Completions shape.

use super::{Finding, Param};
use crate::gate::item::Item;
use crate::gate::verdict::Reason;

/// A message carrying `tool_calls`, or with `role: "tool"`, belongs to Chat Completions.
pub(super) fn check(item: &Item<'_>) -> Option<Finding> {
    if item.has_tool_calls {
        return Some(Finding::new(
            Reason::ChatCompletionsEnvelope,
            Param::Member("tool_calls"),
            "a message with `tool_calls` is a Chat Completions envelope; send each call as a `function_call` item",
        ));
    }
    if item.role.as_str() == Some("tool") {
        return Some(Finding::new(
            Reason::ChatCompletionsEnvelope,
            Param::Member("role"),
            "`role: \"tool\"` is a Chat Completions envelope; send the result as a `function_call_output` item",
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_json(json: &str) -> Option<Finding> {
        check(&serde_json::from_str(json).unwrap())
    }

    #[test]
    fn tool_calls_are_refused_typed_or_not() {
        let typeless = check_json(r#"{"role":"assistant","content":null,"tool_calls":[]}"#).unwrap();
        assert_eq!(
            (typeless.reason, typeless.param),
            (Reason::ChatCompletionsEnvelope, Param::Member("tool_calls"))
        );
        assert!(
            check_json(r#"{"type":"message","role":"assistant","content":"","tool_calls":[{}]}"#).is_some()
        );
    }

    #[test]
    fn tool_role_is_refused() {
        let f = check_json(r#"{"role":"tool","tool_call_id":"c1","content":"42"}"#).unwrap();
        assert_eq!(f.param, Param::Member("role"));
    }

    #[test]
    fn ordinary_messages_pass() {
        assert!(check_json(r#"{"role":"user","content":"hi"}"#).is_none());
        assert!(check_json(
            r#"{"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]}"#
        )
        .is_none());
        assert!(check_json(r#"{"type":"message","role":"developer","content":"be brief"}"#).is_none());
    }
}
