//! `item_value`, `item_field` and `item_unknown_field` (contract §5a): an item's members against
//! the provider's item profile, from the member names the one reading of the body recorded.
//!
//! The first `item_value` failure is the item's only shape finding; otherwise each member the
//! profile refuses (`item_field`) or does not know (`item_unknown_field`) is one finding, in the
//! order the members are written, a part list's parts' members where that list stands.

use std::collections::HashSet;

use crate::gate::item::{Item, ItemClass};
use crate::gate::item_profile::{ItemProfile, Members};
use crate::gate::shape::{item_value, ListValue, Member, MemberValue, Shape, TextLen, ValueView};
use crate::gate::verdict::Reason;

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
pub(crate) fn check(item: &Item<'_>, shape: &Shape<'_>, profile: &ItemProfile, out: &mut Vec<ShapeFinding>) {
    if item.class == ItemClass::Extension {
        return;
    }
    let Some(table) = profile.item(item.type_name()) else {
        return;
    };
    let members = shape.members_of(item);
    if let Some(finding) = first_value_problem(item, shape, profile, table, members) {
        out.push(finding);
        return;
    }
    for member in members {
        match judge_name(table, &member.name, profile) {
            Some(finding) => out.push(finding),
            None => check_parts(member, shape, profile, table, out),
        }
    }
}

/// `item_field` or `item_unknown_field` for a member name, or nothing for an accepted one.
fn judge_name(table: &Members, name: &str, profile: &ItemProfile) -> Option<ShapeFinding> {
    if table.accepted(name).is_some() {
        return None;
    }
    let (reason, message) = match table.refused(name) {
        Some(source) => (
            Reason::ItemField,
            format!("`{name}` is refused on input by {}: {source}", profile.name()),
        ),
        None => (
            Reason::ItemUnknownField,
            format!(
                "`{name}` is a member the {} item profile neither accepts nor refuses",
                profile.name()
            ),
        ),
    };
    Some(ShapeFinding {
        reason,
        part: None,
        member: name.to_owned(),
        message,
    })
}

/// The member findings of the parts of a part list member.
fn check_parts(
    member: &Member<'_>,
    shape: &Shape<'_>,
    profile: &ItemProfile,
    table: &Members,
    out: &mut Vec<ShapeFinding>,
) {
    let MemberValue::List(ListValue::Parts(parts)) = &member.value else {
        return;
    };
    if table
        .accepted(&member.name)
        .and_then(|rule| rule.parts())
        .is_none()
    {
        return;
    }
    for (k, part) in shape.parts(parts).iter().enumerate() {
        let Some(part_table) = part.kind.as_str().and_then(|kind| profile.part(kind)) else {
            continue;
        };
        for part_member in shape.members_of_part(part) {
            if let Some(mut finding) = judge_name(part_table, &part_member.name, profile) {
                finding.part = Some((member.name.to_string(), k));
                out.push(finding);
            }
        }
    }
}

fn value_problem(member: impl Into<String>, part: Option<(String, usize)>, message: String) -> ShapeFinding {
    ShapeFinding {
        reason: Reason::ItemValue,
        part,
        member: member.into(),
        message,
    }
}

/// The item's first `item_value` failure: a member written twice, a required member missing,
/// then, in the order written, a value the profile does not accept (a part list's parts
/// where it stands).
fn first_value_problem(
    item: &Item<'_>,
    shape: &Shape<'_>,
    profile: &ItemProfile,
    table: &Members,
    members: &[Member<'_>],
) -> Option<ShapeFinding> {
    if let Some(name) = repeated_name(members) {
        return Some(value_problem(
            name,
            None,
            format!("`{name}` is written more than once; readers disagree on which one counts"),
        ));
    }
    for (required, source) in table.required() {
        if !members.iter().any(|m| m.name == required) {
            return Some(value_problem(
                required,
                None,
                format!(
                    "`{required}` is missing; {} requires it ({source})",
                    profile.name()
                ),
            ));
        }
    }
    for member in members {
        let Some(rule) = table.accepted(&member.name) else {
            continue;
        };
        if let Some(problem) = rule.problem(&view(item, member)) {
            return Some(value_problem(
                member.name.as_ref(),
                None,
                format!("`{}` {problem} ({})", member.name, rule.source()),
            ));
        }
        let (Some(accepted_parts), MemberValue::List(ListValue::Parts(parts))) =
            (rule.parts(), &member.value)
        else {
            continue;
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
            if !accepted_parts.iter().any(|p| p == kind) {
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
            }
            let Some(part_table) = profile.part(kind) else {
                continue;
            };
            let part_members = shape.members_of_part(part);
            if let Some(name) = repeated_name(part_members) {
                return Some(value_problem(
                    name,
                    at(),
                    format!("`{name}` is written more than once; readers disagree on which one counts"),
                ));
            }
            for part_member in part_members {
                let Some(part_rule) = part_table.accepted(&part_member.name) else {
                    continue;
                };
                if let Some(problem) = part_rule.problem(&view(item, part_member)) {
                    return Some(value_problem(
                        part_member.name.as_ref(),
                        at(),
                        format!("`{}` {problem} ({})", part_member.name, part_rule.source()),
                    ));
                }
            }
        }
    }
    None
}

/// How a member's value reads for a profile.
fn view<'v>(item: &'v Item<'_>, member: &'v Member<'_>) -> ValueView<'v> {
    match &member.value {
        MemberValue::InItem => item_value(item, &member.name),
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

/// The first name written twice among `members`: pairwise for the usual few members, with a
/// set for objects of many (a 10,000-member item costs 10,000 lookups, not 50 million).
fn repeated_name<'m>(members: &'m [Member<'_>]) -> Option<&'m str> {
    if members.len() <= 16 {
        return members.iter().enumerate().find_map(|(i, m)| {
            members[..i]
                .iter()
                .any(|earlier| earlier.name == m.name)
                .then_some(m.name.as_ref())
        });
    }
    let mut seen = HashSet::with_capacity_and_hasher(members.len(), foldhash::fast::RandomState::default());
    members
        .iter()
        .find(|m| !seen.insert(m.name.as_ref()))
        .map(|m| m.name.as_ref())
}
