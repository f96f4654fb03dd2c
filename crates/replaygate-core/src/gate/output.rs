//! The response side of the gate: the `function_call` items a provider produced, checked
//! against the tools the request declared (see [`crate::gate::Gate::check_output_calls`]).
//!
//! The ledger's tap (`ledger::Tap`) keeps these calls from an answer when asked to.

use serde::Serialize;

use super::verdict::Reason;
use crate::json::Field;

/// One `function_call` item of a provider's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputCall {
    /// The item's position in the answer's `output` (for a stream, the event's
    /// `output_index`, else the item's place among the finished items).
    pub index: usize,
    /// `call_id`, when it is a string.
    pub call_id: Option<String>,
    /// `name`, when it is a string.
    pub name: Option<String>,
    /// `arguments`: the decoded string (the JSON text the model wrote), or what else it was.
    pub arguments: Field<'static>,
}

/// A produced call that does not fit the request's tools. Reported, never acted on: the
/// answer has already been passed on when its calls are known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResponseViolation {
    /// The call's position in the answer's `output`.
    pub index: usize,
    /// The call's `call_id`, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// Why the call is flagged (`arguments_parse`, `arguments_schema`, `unknown_tool`, ...).
    pub reason: Reason,
    /// Where, e.g. `output[2].arguments`, or `tools[1].parameters` for an unusable schema.
    pub param: String,
    /// For schema failures: the JSON Pointer inside the parsed arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
    /// A sentence a person can act on.
    pub message: String,
}
