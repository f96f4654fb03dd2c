//! What the gate concludes about one request: allowed, or every violation in input order.

use serde::Serialize;

/// A stable, machine-readable reason code (contract §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// A namespaced item whose slug the target provider does not accept.
    Namespaced,
    /// A `function_call` whose `status` is not `"completed"`.
    Status,
    /// A `function_call` whose `arguments` is not a JSON string.
    ArgumentsType,
    /// `arguments` is a string that is not valid JSON.
    ArgumentsParse,
    /// The parsed arguments fail the tool's JSON Schema.
    ArgumentsSchema,
    /// No schema is known for the function_call's `name`.
    UnknownTool,
    /// The tool's `parameters` is not a usable JSON Schema.
    ToolSchemaInvalid,
    /// An output whose `call_id` matches no earlier call, or a repeated call id.
    CallIdMismatch,
    /// An output whose `call_id` belongs to an earlier item that is not a `function_call`.
    NotFunctionCall,
    /// An item in Chat Completions shape (`tool_calls`, or `role: "tool"`).
    ChatCompletionsEnvelope,
}

impl Reason {
    /// The reason code as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Namespaced => "namespaced",
            Reason::Status => "status",
            Reason::ArgumentsType => "arguments_type",
            Reason::ArgumentsParse => "arguments_parse",
            Reason::ArgumentsSchema => "arguments_schema",
            Reason::UnknownTool => "unknown_tool",
            Reason::ToolSchemaInvalid => "tool_schema_invalid",
            Reason::CallIdMismatch => "call_id_mismatch",
            Reason::NotFunctionCall => "not_function_call",
            Reason::ChatCompletionsEnvelope => "chat_completions_envelope",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One input item the target provider must not receive, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Position of the item in `input`.
    pub index: usize,
    /// The item's type (`message` or `item_reference` for typeless items).
    #[serde(rename = "type")]
    pub item_type: String,
    /// The item's `id`, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The item's `call_id`, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// Why the item is refused.
    pub reason: Reason,
    /// The request parameter at fault, e.g. `input[3].arguments`.
    pub param: String,
    /// For schema failures: the JSON Pointer inside the parsed arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
    /// A sentence a person can act on.
    pub message: String,
}

/// The gate's judgement of one request body for one target.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Every violation, in input order; empty when the request is allowed.
    pub violations: Vec<Violation>,
}

impl Verdict {
    /// True when the request may be forwarded unchanged.
    pub fn is_allowed(&self) -> bool {
        self.violations.is_empty()
    }
}
