//! What the gate concludes about one request: every violation in input order, each with the
//! action the policy gives its reason.

use serde::{Deserialize, Serialize};

/// A stable, machine-readable reason code (docs/reasons.md has one section per code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// A namespaced item whose slug the target provider does not accept.
    Namespaced,
    /// A `function_call` whose `status` is present and not `"completed"` (or, with
    /// `require_status`, missing).
    Status,
    /// A `function_call` whose `arguments` is not a JSON string.
    ArgumentsType,
    /// `arguments` is a string that is not valid JSON.
    ArgumentsParse,
    /// The parsed arguments fail the tool's JSON Schema.
    ArgumentsSchema,
    /// No function tool is declared for the call's `name`.
    UnknownTool,
    /// The tool's `parameters` is not a usable JSON Schema.
    ToolSchemaInvalid,
    /// An output that pairs with no call, or a call repeating a still unanswered call id.
    CallIdMismatch,
    /// A `function_call_output` that pairs with a call that is not a `function_call`.
    NotFunctionCall,
    /// An item in Chat Completions shape (`tool_calls`, or `role: "tool"`).
    ChatCompletionsEnvelope,
    /// A function tool declared or called whose name the team's `tools` globs do not allow.
    ToolNotAllowed,
    /// A declared tool whose `parameters` differ from the team's pinned schema for it.
    ToolSchemaDrift,
    /// `previous_response_id` names a response the ledger recorded for another provider
    /// (docs/ledger.md).
    ForeignPreviousResponse,
    /// A `reasoning` or `compaction` item whose `encrypted_content` (or `id`) the ledger
    /// recorded from another provider, or from another model where the target binds reasoning
    /// to the model.
    ForeignEncryptedContent,
    /// An `item_reference`, or a `reasoning` item with an `id` and no `encrypted_content`,
    /// naming an item the ledger recorded as stored by another provider.
    ForeignItemReference,
    /// An item whose `id` the ledger recorded but whose digest differs from the recorded one.
    ItemTampered,
    /// An item that breaks a value constraint of the provider's item profile
    /// (docs/item-profiles.md): a required member missing, a value of the wrong kind, too long, or
    /// not one it accepts.
    ItemValue,
    /// A member the item profile lists as refused on input (e.g. `parsed_arguments`).
    ItemField,
    /// A member the item profile neither accepts nor refuses.
    ItemUnknownField,
    /// A `function_call` that no output in `input` answers, followed later by a message.
    CallWithoutOutput,
    /// The request names stored state the ledger recorded for another team, which has not
    /// granted it to the caller's team: `previous_response_id`, `conversation`, or an item
    /// whose `id` or `encrypted_content` the ledger knows.
    CrossTeamState,
    /// An item whose `id` an earlier item of `input` already has.
    DuplicateItemId,
    /// A `reasoning` item last in `input`, or directly followed by a `user`, `system` or
    /// `developer` message, or by another `reasoning` item: nothing follows it that it led to.
    ReasoningOrphaned,
    /// An item sent back by an `id` the ledger recorded as directly preceded by a reasoning
    /// item of the same response, without that reasoning item before it in `input`.
    ReasoningMissing,
    /// With teams: the request names stored state the ledger holds no record of (so no team
    /// can be told to own it): `previous_response_id`, `conversation`, an `item_reference`,
    /// an `encrypted_content` blob, or a reasoning item sent by `id` alone.
    UnknownState,
    /// A reasoning item sent by `id` without `encrypted_content`, whose id the ledger recorded
    /// for a response its provider did not store (`store: false`): the provider cannot read it.
    StateNotStored,
}

impl Reason {
    /// Every reason, in the order of docs/reasons.md.
    pub const ALL: [Reason; 26] = [
        Reason::Namespaced,
        Reason::Status,
        Reason::ArgumentsType,
        Reason::ArgumentsParse,
        Reason::ArgumentsSchema,
        Reason::UnknownTool,
        Reason::ToolSchemaInvalid,
        Reason::CallIdMismatch,
        Reason::NotFunctionCall,
        Reason::ChatCompletionsEnvelope,
        Reason::ToolNotAllowed,
        Reason::ToolSchemaDrift,
        Reason::ForeignPreviousResponse,
        Reason::ForeignEncryptedContent,
        Reason::ForeignItemReference,
        Reason::ItemTampered,
        Reason::ItemValue,
        Reason::ItemField,
        Reason::ItemUnknownField,
        Reason::CallWithoutOutput,
        Reason::CrossTeamState,
        Reason::DuplicateItemId,
        Reason::ReasoningOrphaned,
        Reason::ReasoningMissing,
        Reason::UnknownState,
        Reason::StateNotStored,
    ];

    /// The reason called `code` on the wire.
    pub fn from_code(code: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|reason| reason.as_str() == code)
    }

    /// The action a reason has when no configuration says otherwise (docs/reasons.md): agents change
    /// tool sets between turns, so an unknown tool is reported, not refused; a client may
    /// re-serialise what it replays, so a changed digest is reported, not refused. What a
    /// provider would refuse and whose removal loses nothing it would read is repaired: a
    /// refused member, an orphaned reasoning item, a byte-identical repeat of an item.
    pub fn default_action(self) -> Action {
        match self {
            Reason::UnknownTool | Reason::ItemTampered | Reason::ItemUnknownField => Action::Monitor,
            Reason::ItemField
            | Reason::DuplicateItemId
            | Reason::ReasoningOrphaned
            | Reason::StateNotStored => Action::Repair,
            _ => Action::Reject,
        }
    }

    /// Whether `repair` can cure the reason: by cutting one member out of its item (a member
    /// the profile refuses or does not know, docs/item-profiles.md), by cutting the item whole (an
    /// orphaned reasoning item, a repeated item), or by inserting the reasoning item the ledger
    /// kept before it (`reasoning_missing`). `repair` on any other reason acts as `reject`, and
    /// so it does on a finding it cannot cure: a repeat that differs from the first, a missing
    /// reasoning item whose bytes the ledger did not keep.
    pub fn is_repairable(self) -> bool {
        matches!(
            self,
            Reason::ItemField
                | Reason::ItemUnknownField
                | Reason::DuplicateItemId
                | Reason::ReasoningOrphaned
                | Reason::ReasoningMissing
                | Reason::StateNotStored
        )
    }

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
            Reason::ToolNotAllowed => "tool_not_allowed",
            Reason::ToolSchemaDrift => "tool_schema_drift",
            Reason::ForeignPreviousResponse => "foreign_previous_response",
            Reason::ForeignEncryptedContent => "foreign_encrypted_content",
            Reason::ForeignItemReference => "foreign_item_reference",
            Reason::ItemTampered => "item_tampered",
            Reason::ItemValue => "item_value",
            Reason::ItemField => "item_field",
            Reason::ItemUnknownField => "item_unknown_field",
            Reason::CallWithoutOutput => "call_without_output",
            Reason::CrossTeamState => "cross_team_state",
            Reason::DuplicateItemId => "duplicate_item_id",
            Reason::ReasoningOrphaned => "reasoning_orphaned",
            Reason::ReasoningMissing => "reasoning_missing",
            Reason::UnknownState => "unknown_state",
            Reason::StateNotStored => "state_not_stored",
        }
    }

    /// Whether the reason is about a tool of the request rather than an item of `input`, so
    /// `strip` cannot remove it and acts as `reject` (docs/reasons.md, `strip`).
    pub fn is_about_tools(self) -> bool {
        matches!(
            self,
            Reason::ToolNotAllowed | Reason::ToolSchemaDrift | Reason::ToolSchemaInvalid
        )
    }

    /// Whether `strip` can cure the reason by removing its item. It cannot for a reason about
    /// the request's tools, nor for `foreign_previous_response` (about `previous_response_id`,
    /// not an item); `strip` on those acts as `reject`.
    pub fn is_strippable(self) -> bool {
        !self.is_about_tools() && self != Reason::ForeignPreviousResponse
    }
}

impl<'de> Deserialize<'de> for Reason {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let code = std::borrow::Cow::<str>::deserialize(deserializer)?;
        Reason::from_code(&code).ok_or_else(|| {
            let known: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
            serde::de::Error::custom(format_args!(
                "unknown reason `{code}`; the reasons are {}",
                known.join(", ")
            ))
        })
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happens to a request with a violation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// The request is refused with 422.
    Reject,
    /// The request goes on; the violation is logged, counted and named in a response header.
    Monitor,
    /// The violating item (and the outputs paired with a removed call) is cut out of the
    /// forwarded bytes; the request goes on (docs/reasons.md, `strip`).
    Strip,
    /// The offending member (its value and one adjacent comma) is cut out of the forwarded
    /// bytes; the request goes on (docs/item-profiles.md).
    Repair,
}

impl Action {
    /// The action as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Reject => "reject",
            Action::Monitor => "monitor",
            Action::Strip => "strip",
            Action::Repair => "repair",
        }
    }
}

/// What happened to a judged request, as the access log, the audit log and the metrics name it
/// (docs/operations.md): a verdict comes to exactly one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Forwarded with no violation.
    Allowed,
    /// At least one violation's action is `reject`: answered 422.
    Rejected,
    /// Forwarded with `monitor` violations only.
    Monitored,
    /// Forwarded with items cut out (`strip`).
    Stripped,
    /// Forwarded with members cut out of items (`repair`).
    Repaired,
}

impl Decision {
    /// Every decision, in declaration order.
    pub const ALL: [Decision; 5] = [
        Decision::Allowed,
        Decision::Rejected,
        Decision::Monitored,
        Decision::Stripped,
        Decision::Repaired,
    ];

    /// The decision as logs and metric labels spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allowed => "allowed",
            Decision::Rejected => "rejected",
            Decision::Monitored => "monitored",
            Decision::Stripped => "stripped",
            Decision::Repaired => "repaired",
        }
    }
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One input item the target provider should not receive, why, and what the policy does about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Position of the item in `input`; `None` for a violation about `tools[i]`.
    pub index: Option<usize>,
    /// The item's type (`message` or `item_reference` for typeless items).
    #[serde(rename = "type")]
    pub item_type: String,
    /// The item's `id`, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The item's `call_id`, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// Why the item is flagged.
    pub reason: Reason,
    /// What the policy does about it.
    pub action: Action,
    /// The request parameter at fault, e.g. `input[3].arguments`.
    pub param: String,
    /// For schema failures: the JSON Pointer inside the parsed arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
    /// A sentence a person can act on.
    pub message: String,
}

impl Violation {
    /// Where the violation is, for people: the item (`input[3]`, or `items[3]` when the items
    /// are in `member` `items`), or for a violation about a declared tool, `tools[1]`.
    pub fn location(&self, member: &str) -> String {
        match self.index {
            Some(index) => format!("{member}[{index}]"),
            None => self.param.split('.').next().unwrap_or(&self.param).to_owned(),
        }
    }
}

/// The gate's judgement of one request body for one target.
///
/// Violations are listed in input order, at most the policy's `max_listed` of each action; the
/// counts cover all of them, so an answer's size stays bounded whatever the body holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// The listed violations, in input order.
    pub violations: Vec<Violation>,
    /// How many violations had the action `reject`, listed or not.
    pub rejected: usize,
    /// How many violations had the action `monitor`, listed or not.
    pub monitored: usize,
    /// The positions of every item with a `strip` violation (listed or not), ascending, once
    /// each. The items cut from the forwarded body are these and the outputs paired with them
    /// (see [`crate::gate::strip`]).
    pub stripped: Vec<usize>,
    /// How many violations each reason had with each action, listed or not, in the order the
    /// pairs first came up (what metrics count).
    pub tally: Vec<(Reason, Action, usize)>,
    /// Every member with a `repair` violation (listed or not), in input order: what is cut
    /// from the forwarded body (see [`crate::gate::repair`]).
    pub repairs: Vec<Repair>,
    /// The positions of the items `repair` cuts whole (`duplicate_item_id`,
    /// `reasoning_orphaned`), listed or not, ascending, once each. A cut call takes the outputs
    /// paired with it along, as `strip` does.
    pub repair_cuts: Vec<usize>,
    /// What `repair` inserts (`reasoning_missing`) or puts in an item's place
    /// (`state_not_stored`), listed or not, in input order.
    pub inserts: Vec<Insert>,
}

/// An item `repair` puts into the forwarded body: the exact JSON text the ledger kept of an
/// item, inserted before `input[index]` (a reasoning item, `reasoning_missing`) or in its place
/// (an `item_reference` to an item of a response not stored, `state_not_stored`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Insert {
    /// The position of the item it goes before, or replaces.
    pub index: usize,
    /// The inserted item's `id`.
    pub id: String,
    /// The inserted item's JSON text, as the provider produced it.
    pub text: String,
    /// The text takes the place of the item at `index`, which goes; otherwise it goes before it.
    pub replaces: bool,
}

/// A member to cut out of an item: `input[index].member`, or a member of one of the item's
/// content parts, `input[index].content[part].member`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    /// The item's position.
    pub index: usize,
    /// The part list and the part's position in it, when the member is a part's.
    pub part: Option<(String, usize)>,
    /// The member's name (escapes decoded).
    pub member: String,
}

impl Repair {
    /// The member's path inside its item: `parsed_arguments`, `content[0].parsed`.
    pub fn path(&self) -> String {
        match &self.part {
            Some((list, part)) => format!("{list}[{part}].{}", self.member),
            None => self.member.clone(),
        }
    }
}

impl Verdict {
    /// True when no violation is a `reject`: the request may be forwarded (unchanged unless
    /// something is stripped or repaired).
    pub fn is_allowed(&self) -> bool {
        self.rejected == 0
    }

    /// What the verdict comes to: rejected when any violation rejects, else stripped, repaired
    /// or monitored by the first of those it has, else allowed.
    pub fn decision(&self) -> Decision {
        if !self.is_allowed() {
            Decision::Rejected
        } else if !self.stripped.is_empty() {
            Decision::Stripped
        } else if self.repaired() > 0 {
            Decision::Repaired
        } else if self.monitored > 0 {
            Decision::Monitored
        } else {
            Decision::Allowed
        }
    }

    /// The listed violations with `action`.
    pub fn with_action(&self, action: Action) -> impl Iterator<Item = &Violation> {
        self.violations.iter().filter(move |v| v.action == action)
    }

    /// How many violations with `action` are counted but not listed.
    pub fn unlisted(&self, action: Action) -> usize {
        self.count(action) - self.with_action(action).count()
    }

    /// How many violations have `action`, listed or not.
    pub fn count(&self, action: Action) -> usize {
        match action {
            Action::Reject => self.rejected,
            Action::Monitor => self.monitored,
            Action::Strip => self.stripped.len(),
            Action::Repair => self.repaired(),
        }
    }

    /// How many repairs the verdict makes: members cut, items cut whole, items inserted.
    fn repaired(&self) -> usize {
        self.repairs.len() + self.repair_cuts.len() + self.inserts.len()
    }

    /// Counts a violation of `reason` with `action` (in [`Verdict::tally`] too), listing it (built by `violation` only then) while fewer
    /// than `max_listed` of its action are listed: a body of 100,000 refused items builds 100.
    ///
    /// A `strip` violation also records `index`, its item's position (items are judged in
    /// order, and an item's several shape violations record it once, so the list stays
    /// ascending and unique).
    pub fn push_with(
        &mut self,
        reason: Reason,
        action: Action,
        index: Option<usize>,
        max_listed: usize,
        violation: impl FnOnce() -> Violation,
    ) {
        match self
            .tally
            .iter_mut()
            .find(|(r, a, _)| (*r, *a) == (reason, action))
        {
            Some((_, _, count)) => *count += 1,
            None => self.tally.push((reason, action, 1)),
        }
        let count = match (action, index) {
            (Action::Reject, _) => {
                self.rejected += 1;
                self.rejected
            }
            (Action::Monitor, _) => {
                self.monitored += 1;
                self.monitored
            }
            (Action::Strip, Some(index)) => {
                // An item with several shape findings is stripped once.
                if self.stripped.last() != Some(&index) {
                    self.stripped.push(index);
                }
                self.stripped.len()
            }
            (Action::Strip, None) => {
                unreachable!("strip is resolved to reject for reasons about no item")
            }
            // The caller recorded the repair (`repairs`, `repair_cuts`, `inserts`) first.
            (Action::Repair, _) => self.repaired(),
        };
        if count <= max_listed {
            self.violations.push(violation());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn violation(reason: Reason, action: Action) -> Violation {
        Violation {
            index: Some(0),
            item_type: "function_call".into(),
            id: None,
            call_id: None,
            reason,
            action,
            param: "input[0]".into(),
            pointer: None,
            message: String::new(),
        }
    }

    #[test]
    fn a_verdict_comes_to_one_decision_rejects_first() {
        let mut verdict = Verdict::default();
        assert_eq!(verdict.decision(), Decision::Allowed);
        verdict.push_with(Reason::UnknownTool, Action::Monitor, Some(0), 8, || {
            violation(Reason::UnknownTool, Action::Monitor)
        });
        assert_eq!(verdict.decision(), Decision::Monitored);
        verdict.repair_cuts.push(1);
        assert_eq!(verdict.decision(), Decision::Repaired);
        verdict.push_with(Reason::Namespaced, Action::Strip, Some(2), 8, || {
            violation(Reason::Namespaced, Action::Strip)
        });
        assert_eq!(verdict.decision(), Decision::Stripped);
        verdict.push_with(Reason::Status, Action::Reject, Some(3), 8, || {
            violation(Reason::Status, Action::Reject)
        });
        assert_eq!(verdict.decision(), Decision::Rejected);
        let words: Vec<String> = Decision::ALL
            .iter()
            .map(|d| serde_json::to_string(d).unwrap())
            .collect();
        let spelled: Vec<String> = Decision::ALL.iter().map(|d| format!("\"{d}\"")).collect();
        assert_eq!(words, spelled, "serialized as spelled");
        assert_eq!(
            Decision::ALL.map(Decision::as_str),
            ["allowed", "rejected", "monitored", "stripped", "repaired"]
        );
    }

    #[test]
    fn the_tally_counts_every_violation_listed_or_not() {
        let mut verdict = Verdict::default();
        for index in 0..5 {
            verdict.push_with(Reason::Status, Action::Reject, Some(index), 2, || {
                violation(Reason::Status, Action::Reject)
            });
        }
        verdict.push_with(Reason::UnknownTool, Action::Monitor, Some(5), 2, || {
            violation(Reason::UnknownTool, Action::Monitor)
        });
        verdict.push_with(Reason::Namespaced, Action::Reject, Some(6), 2, || {
            violation(Reason::Namespaced, Action::Reject)
        });
        assert_eq!(verdict.violations.len(), 3, "two rejects and one monitor listed");
        assert_eq!(
            verdict.tally,
            vec![
                (Reason::Status, Action::Reject, 5),
                (Reason::UnknownTool, Action::Monitor, 1),
                (Reason::Namespaced, Action::Reject, 1),
            ]
        );
    }
}
