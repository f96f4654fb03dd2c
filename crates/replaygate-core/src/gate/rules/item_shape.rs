//! `item_value`, `item_field` and `item_unknown_field` (docs/item-profiles.md): an item's members
//! against the provider's item profile, from the member names the one reading of the body recorded.
//!
//! The first `item_value` failure is the item's only shape finding; otherwise each member the
//! profile refuses (`item_field`) or does not know (`item_unknown_field`) is one finding, in the
//! order the members are written, a part list's parts' members where that list stands.

use std::collections::HashSet;

use crate::gate::item::Item;
use crate::gate::item_profile::{ItemProfile, MemberEntry, MemberRule, Members};
use crate::gate::shape::{item_value, KnownName, ListValue, Member, MemberValue, Shape, TextLen, ValueView};
use crate::gate::verdict::Reason;

#[cfg(doc)]
use super::clean_shape;

/// One shape finding about an item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShapeFinding {
    pub(crate) reason: Reason,
    /// The part list and the part's position, for a part's member.
    pub(crate) part: Option<(String, usize)>,
    /// The member (or, for a required member, the one missing).
    pub(crate) member: String,
    pub(crate) message: String,
}

impl ShapeFinding {
    /// The member's path inside the item: `parsed_arguments`, `content[0].parsed`.
    pub(crate) fn path(&self) -> String {
        match &self.part {
            Some((list, k)) => format!("{list}[{k}].{}", self.member),
            None => self.member.clone(),
        }
    }
}

/// The shape findings of `item` under `profile`, appended to `out`; none for an item type the
/// profile does not describe (namespaced items, types outside the portable core).
///
/// The rules ask only for items [`clean_shape::clean_item`] did not pass (and for calls left
/// unanswered); this is the check in full ([`findings_of`]).
pub(crate) fn check(item: &Item<'_>, shape: &Shape<'_>, profile: &ItemProfile, out: &mut Vec<ShapeFinding>) {
    if let Some(table) = profile.item_of(item.class) {
        findings_of(item, table, shape, profile, out);
    }
}

/// Whether the item's `type` passes its table's rule already: it is a string, so it is the
/// type that chose the table, and the profile accepts each type's own name.
pub(super) fn type_needs_no_check(item: &Item<'_>, table: &Members) -> bool {
    table.accepts_own_type() && item.kind.as_str().is_some()
}

/// [`check`] in full: the findings, with their paths and messages.
///
/// One walk over the members, each looked up once. A refused or unknown name is a finding where
/// it stands. An accepted one has its value (and its parts) checked. An `item_value` problem
/// takes back the item's name findings and stands alone: a member written twice first, then a
/// required member missing, then the first value that fails, in the order written.
pub(super) fn findings_of(
    item: &Item<'_>,
    table: &Members,
    shape: &Shape<'_>,
    profile: &ItemProfile,
    out: &mut Vec<ShapeFinding>,
) {
    let members = shape.members_of(item);
    let start = out.len();
    let own_type = type_needs_no_check(item, table);
    let mut seen = Seen::new(members);
    let mut value_problem_at = None;
    for (i, member) in members.iter().enumerate() {
        let entry = table.entry_of(member);
        // Members the item reader keeps cannot be written twice (the reading refuses such a
        // body); the others can.
        let can_repeat = !matches!(member.value, MemberValue::InItem);
        if seen.again(entry, members, i, can_repeat) {
            out.truncate(start);
            out.push(repeated(&member.name, None));
            return;
        }
        if value_problem_at.is_some() {
            continue;
        }
        let rule = match entry {
            Some((_, MemberEntry::Accepted(rule))) => rule,
            other => {
                out.push(name_finding(other.map(|(_, e)| e), &member.name, profile));
                continue;
            }
        };
        if own_type && member.known == KnownName::Type {
            continue;
        }
        value_problem_at = match rule.problem(&view(item, member)) {
            Some(problem) => Some(value_problem(
                member.name.as_ref(),
                None,
                format!("`{}` {problem} ({})", member.name, rule.source()),
            )),
            None => check_parts(item, member, rule, shape, profile, out),
        };
    }
    if let Some(problem) = missing(table, members, seen.bits, profile).or(value_problem_at) {
        out.truncate(start);
        out.push(problem);
    }
}

/// The member names met so far: names the profile knows as bits of their positions in its
/// table; others compared pairwise for the usual few members, or kept in a set for objects of
/// many (a 10,000-member item costs 10,000 lookups, not 50 million compares).
struct Seen<'m> {
    bits: u64,
    others: Option<HashSet<&'m str, foldhash::fast::RandomState>>,
}

impl<'m> Seen<'m> {
    fn new(members: &[Member<'_>]) -> Self {
        Seen {
            bits: 0,
            others: (members.len() > 16).then(HashSet::default),
        }
    }

    /// Marks `members[i]` (with its table entry) as met; whether it repeats an earlier member.
    #[inline]
    fn again(
        &mut self,
        entry: Option<(usize, &MemberEntry)>,
        members: &'m [Member<'_>],
        i: usize,
        can_repeat: bool,
    ) -> bool {
        match entry {
            Some((at, _)) if at < 64 => {
                let bit = 1 << at;
                let again = self.bits & bit != 0;
                self.bits |= bit;
                again
            }
            _ if !can_repeat => false,
            _ => self.again_by_name(members, i),
        }
    }

    /// [`Seen::again`] for a name without a bit: compared with the earlier members, or kept
    /// in the set.
    #[cold]
    fn again_by_name(&mut self, members: &'m [Member<'_>], i: usize) -> bool {
        let name = members[i].name.as_ref();
        match &mut self.others {
            Some(others) => !others.insert(name),
            None => members[..i].iter().any(|earlier| earlier.name == name),
        }
    }
}

/// The first required member missing, told from the bits of the members met when the
/// profile's table allows (names are compared only when one is missing).
fn missing(
    table: &Members,
    members: &[Member<'_>],
    seen: u64,
    profile: &ItemProfile,
) -> Option<ShapeFinding> {
    if table
        .required_bits()
        .is_some_and(|required| required & !seen == 0)
    {
        return None;
    }
    let (required, source) = table
        .required()
        .find(|(required, _)| !members.iter().any(|m| m.name == *required))?;
    Some(value_problem(
        required,
        None,
        format!(
            "`{required}` is missing; {} requires it ({source})",
            profile.name()
        ),
    ))
}

fn repeated(name: &str, part: Option<(String, usize)>) -> ShapeFinding {
    value_problem(
        name,
        part,
        format!("`{name}` is written more than once; readers disagree on which one counts"),
    )
}

/// `item_field` for a refused name, `item_unknown_field` for one the profile does not know.
fn name_finding(entry: Option<&MemberEntry>, name: &str, profile: &ItemProfile) -> ShapeFinding {
    let (reason, message) = match entry {
        Some(MemberEntry::Refused(source)) => (
            Reason::ItemField,
            format!("`{name}` is refused on input by {}: {source}", profile.name()),
        ),
        _ => (
            Reason::ItemUnknownField,
            format!(
                "`{name}` is a member the {} item profile neither accepts nor refuses",
                profile.name()
            ),
        ),
    };
    ShapeFinding {
        reason,
        part: None,
        member: name.to_owned(),
        message,
    }
}

/// The parts of an accepted part list member: the first `item_value` problem among them, or
/// nothing with each refused or unknown part member appended to `out` in the order written.
fn check_parts(
    item: &Item<'_>,
    member: &Member<'_>,
    rule: &MemberRule,
    shape: &Shape<'_>,
    profile: &ItemProfile,
    out: &mut Vec<ShapeFinding>,
) -> Option<ShapeFinding> {
    let (Some(accepted_parts), MemberValue::List(ListValue::Parts(parts))) = (rule.parts(), &member.value)
    else {
        return None;
    };
    for (k, part) in shape.parts(parts).iter().enumerate() {
        let at = || Some((member.name.to_string(), k));
        let kind = match part.kind.as_str() {
            Some(kind) if part.is_object => kind,
            _ => {
                return Some(value_problem(
                    "type",
                    at(),
                    format!(
                        "{}[{k}] is not a content part: a part is an object with a string `type`",
                        member.name
                    ),
                ))
            }
        };
        let Some(part_table) = rule.part_table_of(kind) else {
            return Some(value_problem(
                "type",
                at(),
                format!(
                    "{}[{k}] is a `{kind}` part; {} accepts only {} there",
                    member.name,
                    profile.name(),
                    accepted_parts.join(", ")
                ),
            ));
        };
        // An accepted part type the profile does not describe has nothing more to check.
        let Some(part_table) = part_table.map(|at| profile.part_at(at)) else {
            continue;
        };
        let part_members = shape.members_of_part(part);
        // The part's `type` is its kind (read from that member): known good when the profile
        // accepts each part type's own name.
        let own_type = part_table.accepts_own_type();
        let mut seen = Seen::new(part_members);
        let mut problem = None;
        for (i, part_member) in part_members.iter().enumerate() {
            let entry = part_table.entry_of(part_member);
            if seen.again(entry, part_members, i, true) {
                return Some(repeated(&part_member.name, at()));
            }
            if problem.is_some() {
                continue;
            }
            let part_rule = match entry {
                Some((_, MemberEntry::Accepted(part_rule))) => part_rule,
                other => {
                    let mut finding = name_finding(other.map(|(_, e)| e), &part_member.name, profile);
                    finding.part = at();
                    out.push(finding);
                    continue;
                }
            };
            if own_type && part_member.known == KnownName::Type {
                continue;
            }
            problem = part_rule.problem(&view(item, part_member)).map(|problem| {
                value_problem(
                    part_member.name.as_ref(),
                    at(),
                    format!("`{}` {problem} ({})", part_member.name, part_rule.source()),
                )
            });
        }
        if problem.is_some() {
            return problem;
        }
    }
    None
}

fn value_problem(member: impl Into<String>, part: Option<(String, usize)>, message: String) -> ShapeFinding {
    ShapeFinding {
        reason: Reason::ItemValue,
        part,
        member: member.into(),
        message,
    }
}

/// How a member's value reads for a profile.
pub(super) fn view<'v>(item: &'v Item<'_>, member: &'v Member<'_>) -> ValueView<'v> {
    match &member.value {
        MemberValue::InItem => item_value(item, member.known),
        MemberValue::Raw(raw) => ValueView::of_raw(raw),
        MemberValue::List(ListValue::Text(TextLen::Borrowed(text))) => ValueView::Str(text),
        MemberValue::List(ListValue::Text(TextLen::Decoded { bytes, chars })) => ValueView::Len {
            bytes: *bytes,
            chars: *chars,
        },
        MemberValue::List(ListValue::Encoded(encoded)) => ValueView::Encoded(encoded),
        MemberValue::List(ListValue::Parts(_)) => ValueView::Kind(crate::gate::JsonKind::Array),
        MemberValue::List(ListValue::Other(kind)) => ValueView::Kind(*kind),
    }
}
