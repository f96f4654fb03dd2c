//! The rules, one small unit each, run over the items in input order (docs/reasons.md).
//!
//! Messages are checked for the Chat Completions envelope; extension items for their namespace;
//! every call and output for its pairing, whatever its type (a message or reasoning item with a
//! `call_id` is a call too); each `function_call` for its status, arguments and schema (the
//! first failure is its one violation). Each finding gets the action the policy gives its
//! reason.
//!
//! The order of the verdict: the team's findings about declared tools, then
//! `foreign_previous_response` (when the target carries provenance), then the items in input
//! order. Each item has at most one violation, its first finding: the rules above first, then,
//! only when they found nothing and the target carries provenance (docs/ledger.md#what-it-refuses),
//! `foreign_encrypted_content` or `foreign_item_reference`, then `item_tampered`. The foreign
//! rules judge reasoning, compaction and item_reference items, which no earlier rule judges; so
//! `item_tampered` (monitored by default) never hides a refusal of the same item. With
//! provenance, an output whose call is not in `input` is paired with the calls the ledger
//! recorded for the `previous_response_id` chain (`call_id_mismatch` when none matches).
//!
//! With teams (the target carries the caller's [`StateAccess`](super::StateAccess)) and
//! provenance, `cross_team_state` comes before everything else of what it names: after the
//! tools, `previous_response_id` and `conversation` when they name another team's state (then no
//! `foreign_previous_response`, and no pairing with that chain), and on an item whose `id` or
//! `encrypted_content` another team's record holds, in place of any other finding.
//!
//! When the target provider has an item profile (docs/item-profiles.md), an item that the rules above
//! did not refuse or strip then gets its shape findings (`item_value`, else `item_field` and
//! `item_unknown_field` per member in the order written), and `call_without_output` last. The
//! profile's whole-item findings ([`replay_items`]: `duplicate_item_id`, `reasoning_orphaned`,
//! `reasoning_missing`) come after `item_value` and in place of everything else. The profile
//! only adds findings: pairing reads every item as written (an over-long `call_id` still
//! pairs, and is the profile's `item_value`), so the rules' verdict is the same with the
//! profile and without it.

mod call_ids;
mod chat_envelope;
mod clean_shape;
mod cross_team;
mod function_call;
mod item_shape;
mod namespace;
mod not_stored;
pub(crate) mod output_calls;
mod provenance;
mod replay_items;
mod team_tools;
#[cfg(test)]
pub(super) mod tests_corpus;
#[cfg(test)]
mod tests_cross_team;
#[cfg(test)]
mod tests_not_stored;
#[cfg(test)]
mod tests_precedence;
#[cfg(test)]
mod tests_provenance;
#[cfg(test)]
mod tests_unknown_state;
mod tools;
mod unanswered;
mod unknown_state;

use super::item::{Item, ItemClass};
use super::judged::{JudgedPrefix, Tail};
use super::profile::Target;
use super::request::{ItemsAt, ParsedRequest, WorkExceeded};
use super::schema::SchemaCache;
use super::verdict::{Action, Reason, Repair, Verdict, Violation};

use call_ids::CallIndex;
use cross_team::CrossTeam;
use function_call::CallContext;
use provenance::ProvenanceRules;
use tools::ToolIndex;
use unknown_state::UnknownState;

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
    /// A member of the item itself: `input[i].member` (`items[i].member` on conversation paths).
    Member(&'static str),
    /// The item as a whole: `input[i]`.
    Item,
    /// A tool's schema: `tools[k].parameters`.
    ToolParameters(usize),
    /// A declared tool, in a finding about the tool itself: `tools[k]`, `k` being the
    /// violation's position in `tools`.
    Tool,
}

impl Param {
    /// The parameter's path, for the item at `index` of the body member `items`.
    fn render(self, items: &str, index: usize) -> String {
        match self {
            Param::Member(member) => format!("{items}[{index}].{member}"),
            Param::Item => format!("{items}[{index}]"),
            Param::ToolParameters(tool) => format!("tools[{tool}].parameters"),
            Param::Tool => format!("tools[{index}]"),
        }
    }
}

/// The schema work one request has used, against its budget (deterministic: counted, not timed).
#[derive(Debug)]
pub(crate) struct WorkMeter {
    used: u64,
    budget: u64,
}

impl WorkMeter {
    pub(crate) fn new(budget: u64) -> Self {
        Self { used: 0, budget }
    }

    /// Adds `units`, failing once the total passes the budget.
    pub(crate) fn charge(&mut self, units: u64) -> Result<(), WorkExceeded> {
        self.used = self.used.saturating_add(units);
        if self.used > self.budget {
            return Err(WorkExceeded { budget: self.budget });
        }
        Ok(())
    }
}

/// Judges every item of `request` for `target`.
pub fn judge(
    request: &ParsedRequest<'_>,
    target: &Target<'_>,
    schemas: &SchemaCache,
) -> Result<Verdict, WorkExceeded> {
    Ok(judge_whole(request, target, schemas)?.0)
}

/// [`judge`], with what a later request judged after this one needs ([`Tail`]).
pub(crate) fn judge_whole(
    request: &ParsedRequest<'_>,
    target: &Target<'_>,
    schemas: &SchemaCache,
) -> Result<(Verdict, Tail), WorkExceeded> {
    // `call_without_output` must know, at a call, whether a later output answers it. The items
    // are judged in one pass that counts the calls before the last message and the answers
    // they get; in the rare request that leaves some unanswered, they are judged again, told
    // which.
    let (verdict, left_unanswered, tail) = judge_items(request, target, schemas, None, None)?;
    if !left_unanswered {
        return Ok((verdict, tail));
    }
    let unanswered = unanswered::unanswered_calls(request.items());
    let (verdict, _, tail) = judge_items(request, target, schemas, Some(&unanswered), None)?;
    Ok((verdict, tail))
}

/// Judges the items of `request` read after `known` (docs/incremental-judging.md): the
/// verdict, when it is clean and the same as judging the whole body would give; `None` when
/// that cannot be told from the new items (the caller judges the whole body).
pub(crate) fn judge_after(
    request: &ParsedRequest<'_>,
    target: &Target<'_>,
    schemas: &SchemaCache,
    known: &JudgedPrefix,
) -> Result<Option<(Verdict, Tail)>, WorkExceeded> {
    let shares_an_id = request
        .items()
        .iter()
        .any(|item| item.id().is_some_and(|id| known.has_id(id)));
    if request.known_items() != known.items()
        || request.at != ItemsAt::Input
        || request.continues_stored_state()
        || shares_an_id
        || !known.facts_agree(target.provenance)
    {
        return Ok(None);
    }
    let (verdict, left_unanswered, tail) = match judge_items(request, target, schemas, None, Some(known)) {
        Ok(judged) => judged,
        // The whole body's judgment decides whether its work passes the budget.
        Err(WorkExceeded { .. }) => return Ok(None),
    };
    if left_unanswered || !verdict.tally.is_empty() {
        return Ok(None);
    }
    Ok(Some((verdict, tail)))
}

/// [`judge`], told (`unanswered`, one flag per item) which calls `call_without_output` finds,
/// or else counting them: the verdict, and whether the profile's `call_without_output` rule
/// would find a call that `unanswered` did not name.
///
/// With `known`, the request's items are the ones after those items, which were judged clean
/// before: their schema work counts against the budget, and `reasoning_missing` finds a
/// reasoning item among them.
fn judge_items(
    request: &ParsedRequest<'_>,
    target: &Target<'_>,
    schemas: &SchemaCache,
    unanswered: Option<&[bool]>,
    known: Option<&JudgedPrefix>,
) -> Result<(Verdict, bool, Tail), WorkExceeded> {
    let items = request.items();
    let item_profile = target.provider.item_profile();
    let last_turn = match item_profile.and_then(|profile| profile.call_without_output()) {
        Some(_) if unanswered.is_none() => unanswered::last_turn(items),
        _ => 0,
    };
    let policy = target.policy;
    let provenance = target
        .provenance
        .map(|provenance| ProvenanceRules::new(request, provenance, target.provider));
    let cross_team = target
        .provenance
        .zip(target.access)
        .map(|(provenance, access)| CrossTeam::new(provenance, access));
    let unknown_state = target
        .provenance
        .filter(|_| target.access.is_some() && target.deny_unknown_state)
        .map(UnknownState::new);
    let previous_foreign_team = cross_team.as_ref().is_some_and(CrossTeam::previous_is_foreign);
    // Another team's chain is neither judged nor paired with: its calls are not this team's.
    let stored_calls = target
        .provenance
        .filter(|_| !previous_foreign_team)
        .and_then(|provenance| provenance::stored_calls(request, provenance));
    let mut pairing = CallIndex::for_items(items.len(), request.continues_stored_state())
        .with_stored_calls(stored_calls)
        .with_last_turn(last_turn);
    let mut calls_before_last_turn = 0;
    let mut tools = ToolIndex::new(&request.tools, policy.tools.as_deref());
    let mut work = WorkMeter::new(target.work_budget);
    if let Some(known) = known {
        work.charge(known.work())?;
    }
    let mut cx = CallContext {
        tools: &mut tools,
        schemas,
        require_status: policy.require_status,
        work: &mut work,
    };
    let mut verdict = Verdict::default();
    // The request's declared tools come first: they are what the team may not send at all.
    if let Some(rules) = policy.tools.as_deref() {
        for (position, finding) in team_tools::check(&request.tools, rules) {
            let action = policy.action(finding.reason);
            verdict.push_with(finding.reason, action, None, policy.max_listed, || {
                tool_violation(&request.tools[position], position, finding, action)
            });
        }
    }
    let member_findings = cross_team
        .iter()
        .flat_map(|rules| rules.members(request))
        .map(|(member, message)| (Reason::CrossTeamState, member, message))
        .chain(
            unknown_state
                .iter()
                .flat_map(|rules| rules.members(request))
                .map(|(member, message)| (Reason::UnknownState, member, message)),
        );
    for (reason, member, message) in member_findings {
        // No item to strip: `strip` acts as `reject` on these members.
        let action = match policy.action(reason) {
            Action::Strip => Action::Reject,
            action => action,
        };
        verdict.push_with(reason, action, None, policy.max_listed, || Violation {
            index: None,
            item_type: match member {
                "previous_response_id" => "response".to_owned(),
                _ => member.to_owned(),
            },
            id: None,
            call_id: None,
            reason,
            action,
            param: member.to_owned(),
            pointer: None,
            message,
        });
    }
    if let Some((id, message)) = provenance
        .as_ref()
        .filter(|_| !previous_foreign_team)
        .and_then(|rules| rules.foreign_previous(request, target.carry_sessions))
    {
        let action = policy.action(Reason::ForeignPreviousResponse);
        verdict.push_with(
            Reason::ForeignPreviousResponse,
            action,
            None,
            policy.max_listed,
            || Violation {
                index: None,
                item_type: "response".to_owned(),
                id: Some(id),
                call_id: None,
                reason: Reason::ForeignPreviousResponse,
                action,
                param: "previous_response_id".to_owned(),
                pointer: None,
                message,
            },
        );
    }
    let not_stored_previous = item_profile
        .and_then(|profile| profile.replay_rules().state_not_stored.as_deref())
        .zip(target.provenance)
        .filter(|_| !previous_foreign_team)
        .and_then(|(source, provenance)| {
            not_stored::previous(
                request,
                provenance,
                target.provider.name(),
                source,
                target.carry_sessions,
            )
        });
    if let Some((id, message)) = not_stored_previous {
        // Nothing to cut or put back: `repair` and `strip` refuse it.
        let action = match policy.action(Reason::StateNotStored) {
            Action::Strip | Action::Repair => Action::Reject,
            action => action,
        };
        verdict.push_with(Reason::StateNotStored, action, None, policy.max_listed, || {
            Violation {
                index: None,
                item_type: "response".to_owned(),
                id: Some(id),
                call_id: None,
                reason: Reason::StateNotStored,
                action,
                param: "previous_response_id".to_owned(),
                pointer: None,
                message,
            }
        });
    }
    let replay = item_profile.and_then(|profile| {
        replay_items::ReplayFindings::find(
            request,
            profile.replay_rules(),
            target.provider,
            target.provenance,
            known,
            target.offline,
        )
    });
    let mut shape_findings = Vec::new();
    for (index, item) in items.iter().enumerate() {
        // Pairing sees every item, so later outputs find their calls, and judges every item
        // whatever its type: a message or reasoning item with a `call_id` is a call too.
        let paired = pairing.pair(index, item);
        let finding = match item.class {
            ItemClass::Message => chat_envelope::check(item).or(paired),
            ItemClass::Extension => namespace::check(item, target.provider)
                .or(paired)
                .or_else(|| team_tools::check_custom_call(item, policy.tools.as_deref())),
            ItemClass::FunctionCall => {
                calls_before_last_turn += usize::from(index < last_turn);
                match paired {
                    Some(finding) => Some(finding),
                    None => function_call::check(item, &mut cx)?,
                }
            }
            ItemClass::FunctionCallOutput
            | ItemClass::Reasoning
            | ItemClass::Compaction
            | ItemClass::ItemReference => paired,
        };
        // Another team's item is refused for that alone, whatever else it holds; then state
        // that no team can be told to own.
        let finding = match cross_team.as_ref().and_then(|rules| rules.check(item)) {
            Some(crossed) => Some(crossed),
            None => match unknown_state.as_ref().and_then(|rules| rules.check(item)) {
                Some(unknown) => Some(unknown),
                None => finding.or_else(|| provenance.as_ref()?.check(index, item)),
            },
        };
        // An item the rules refuse or strip gets no shape check (docs/item-profiles.md#precedence);
        // one only monitored still does, so a member its provider refuses is not sent.
        let mut shape_checked = true;
        if let Some(finding) = finding {
            let action = policy.action(finding.reason);
            shape_checked = action == Action::Monitor;
            verdict.push_with(finding.reason, action, Some(index), policy.max_listed, || {
                violation(request.at, index, item, finding, action)
            });
        }
        // Nearly every item has nothing for the profile's rules to say (plainly clean, and not
        // a call left unanswered); only the others are checked in full.
        if let Some(profile) = item_profile.filter(|_| shape_checked) {
            let call_unanswered = unanswered.is_some_and(|calls| calls[index]);
            let whole = replay.as_ref().and_then(|replay| replay.at(index));
            if whole.is_some() || call_unanswered || !clean_shape::clean_item(item, &request.shape, profile) {
                shape_findings.clear();
                item_shape::check(item, &request.shape, profile, &mut shape_findings);
                let valued = shape_findings
                    .first()
                    .is_some_and(|f| f.reason == Reason::ItemValue);
                if let Some(whole) = whole.filter(|_| !valued) {
                    shape_findings.clear();
                    replay_items::push(&mut verdict, request.at, index, item, whole, policy);
                } else if !valued && call_unanswered {
                    let source = profile.call_without_output().unwrap_or_default();
                    shape_findings.push(item_shape::ShapeFinding {
                        reason: Reason::CallWithoutOutput,
                        part: None,
                        member: "call_id".to_owned(),
                        message: unanswered::message(item, source),
                    });
                }
                for finding in shape_findings.drain(..) {
                    push_shape(&mut verdict, request.at, index, item, finding, policy);
                }
            }
        }
    }
    let left_unanswered = calls_before_last_turn > pairing.answered_before_last_turn();
    let tail = Tail {
        open_calls: pairing.has_open_calls(),
        work: work.used,
    };
    Ok((verdict, left_unanswered, tail))
}

/// Counts (and lists, within the limit) one shape finding; a repaired member is recorded for
/// the cut.
fn push_shape(
    verdict: &mut Verdict,
    at: ItemsAt,
    index: usize,
    item: &Item<'_>,
    finding: item_shape::ShapeFinding,
    policy: &super::profile::Policy,
) {
    let action = policy.action(finding.reason);
    if action == Action::Repair {
        verdict.repairs.push(Repair {
            index,
            part: finding.part.clone(),
            member: finding.member.clone(),
        });
    }
    verdict.push_with(finding.reason, action, Some(index), policy.max_listed, || {
        let param = format!("{}[{index}].{}", at.member(), finding.path());
        item_violation(index, item, finding.reason, action, param, None, finding.message)
    });
}

fn tool_violation(
    tool: &super::request::Tool<'_>,
    position: usize,
    finding: Finding,
    action: Action,
) -> Violation {
    Violation {
        index: None,
        item_type: tool.kind.as_str().unwrap_or("function").to_owned(),
        id: None,
        call_id: None,
        reason: finding.reason,
        action,
        param: finding.param.render("tools", position),
        pointer: None,
        message: finding.message,
    }
}

fn violation(at: ItemsAt, index: usize, item: &Item<'_>, finding: Finding, action: Action) -> Violation {
    let param = finding.param.render(at.member(), index);
    item_violation(
        index,
        item,
        finding.reason,
        action,
        param,
        finding.pointer,
        finding.message,
    )
}

/// The violation of the item at `index`, named by `param`.
fn item_violation(
    index: usize,
    item: &Item<'_>,
    reason: Reason,
    action: Action,
    param: String,
    pointer: Option<String>,
    message: String,
) -> Violation {
    Violation {
        index: Some(index),
        item_type: item.type_name().to_owned(),
        id: item.id().map(str::to_owned),
        call_id: item.call_id().map(str::to_owned),
        reason,
        action,
        param,
        pointer,
        message,
    }
}
