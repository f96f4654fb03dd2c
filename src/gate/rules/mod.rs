//! The rules, one small unit each, run over the items in input order (contract §5).
//!
//! Messages and item references are checked for the Chat Completions envelope; extension items
//! for their namespace; each `function_call` for its call id, status, arguments and schema (the
//! first failure is its one violation); each `function_call_output` for a matching call.

mod call_ids;
mod chat_envelope;
mod function_call;
mod namespace;
mod tools;

use super::item::{Item, ItemClass};
use super::profile::Target;
use super::request::ParsedRequest;
use super::schema::SchemaCache;
use super::verdict::{Reason, Verdict, Violation};

use call_ids::CallLedger;
use tools::ToolIndex;

/// A rule's finding about one item, before it is tied to the item's position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    reason: Reason,
    param: Param,
    pointer: Option<String>,
    message: String,
}

impl Finding {
    fn new(reason: Reason, param: Param, message: impl Into<String>) -> Self {
        Self {
            reason,
            param,
            pointer: None,
            message: message.into(),
        }
    }
}

/// The request parameter a finding points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Param {
    /// A member of the item itself: `input[i].member`.
    Member(&'static str),
    /// A tool's schema: `tools[k].parameters`.
    ToolParameters(usize),
}

impl Param {
    fn render(self, index: usize) -> String {
        match self {
            Param::Member(member) => format!("input[{index}].{member}"),
            Param::ToolParameters(tool) => format!("tools[{tool}].parameters"),
        }
    }
}

/// Judges every item of `request` for `target`.
pub fn judge(request: &ParsedRequest<'_>, target: &Target<'_>, schemas: &SchemaCache) -> Verdict {
    let mut ledger = CallLedger::for_items(request.items().len());
    let mut tools = ToolIndex::new(&request.tools);
    let mut violations = Vec::new();
    for (index, item) in request.items().iter().enumerate() {
        let finding = match item.class {
            ItemClass::Message => chat_envelope::check(item),
            ItemClass::Extension => namespace::check(item, target.provider),
            ItemClass::FunctionCall => ledger
                .check_call(item)
                .or_else(|| function_call::check(item, &mut tools, schemas)),
            ItemClass::FunctionCallOutput => ledger.check_output(item),
            ItemClass::Reasoning | ItemClass::Compaction | ItemClass::ItemReference => None,
        };
        ledger.record(item);
        if let Some(finding) = finding {
            violations.push(violation(index, item, finding));
        }
    }
    Verdict { violations }
}

fn violation(index: usize, item: &Item<'_>, finding: Finding) -> Violation {
    Violation {
        index,
        item_type: item.type_name().to_owned(),
        id: item.id().map(str::to_owned),
        call_id: item.call_id().map(str::to_owned),
        reason: finding.reason,
        param: finding.param.render(index),
        pointer: finding.pointer,
        message: finding.message,
    }
}
