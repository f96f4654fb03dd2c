//! The shape check's fast path: whether an item plainly has nothing for `item_value`,
//! `item_field` or `item_unknown_field` to say, told in one lean walk over its members.
//!
//! Nearly every item a provider is sent is clean, and proving that needs none of what makes a
//! finding (positions, paths, messages, characters counted, escapes decoded). This walk answers
//! `true` only when [`super::item_shape::check`] would find nothing, and `false` whenever it
//! might find something, which then goes to that check for its findings.

use crate::gate::item::Item;
use crate::gate::item_profile::{ItemProfile, MemberEntry, Members};
use crate::gate::shape::{KnownName, ListValue, Member, MemberValue, Part, Shape};

use super::item_shape::{type_needs_no_check, view};

/// Whether `item`, whose class has the profile's `table`, is plainly clean: every member
/// accepted and written once, every value passing its rule, every part list holding parts of
/// accepted types with accepted members, no required member missing.
pub(super) fn is_clean(item: &Item<'_>, table: &Members, shape: &Shape<'_>, profile: &ItemProfile) -> bool {
    let own_type = type_needs_no_check(item, table);
    let Some(seen) = members_clean(
        item,
        shape.members_of(item),
        table,
        own_type,
        Some((shape, profile)),
    ) else {
        return false;
    };
    table
        .required_bits()
        .is_some_and(|required| required & !seen == 0)
}

/// The members' positions in `table` as bits, when every member is accepted, written once and
/// has a value its rule plainly passes (and, with `parts`, each part list is clean).
#[inline]
fn members_clean(
    item: &Item<'_>,
    members: &[Member<'_>],
    table: &Members,
    own_type: bool,
    parts: Option<(&Shape<'_>, &ItemProfile)>,
) -> Option<u64> {
    let mut seen = 0u64;
    for member in members {
        let Some((at, MemberEntry::Accepted(rule))) = table.entry_of(member) else {
            return None;
        };
        let bit = 1u64.checked_shl(u32::try_from(at).ok()?)?;
        if seen & bit != 0 {
            return None;
        }
        seen |= bit;
        if own_type && member.known == KnownName::Type {
            continue;
        }
        if !rule.passes(&view(item, member)) {
            return None;
        }
        if let (Some((shape, profile)), Some(accepted), MemberValue::List(ListValue::Parts(range))) =
            (parts, rule.parts(), &member.value)
        {
            if !parts_clean(item, shape.parts(range), accepted, shape, profile) {
                return None;
            }
        }
    }
    Some(seen)
}

/// Whether every part is an object of an accepted part type whose members are clean (a part
/// has no required members, and its own part lists are not looked into).
fn parts_clean(
    item: &Item<'_>,
    parts: &[Part<'_>],
    accepted: &[String],
    shape: &Shape<'_>,
    profile: &ItemProfile,
) -> bool {
    parts.iter().all(|part| {
        let Some(kind) = part.kind.as_str().filter(|_| part.is_object) else {
            return false;
        };
        if !accepted.iter().any(|p| p == kind) {
            return false;
        }
        profile.part(kind).is_none_or(|table| {
            members_clean(
                item,
                shape.members_of_part(part),
                table,
                table.accepts_own_type(),
                None,
            )
            .is_some()
        })
    })
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::gate::request::{parse_with, ItemsAt};
    use crate::gate::rules::item_shape::{findings_of, ShapeFinding};
    use crate::gate::rules::tests_corpus::corpus;

    /// For each item of `body` the profile describes: whether the fast path passes it, and the
    /// full check's findings.
    fn both_ways(body: &str, at: ItemsAt) -> Vec<(bool, Vec<ShapeFinding>)> {
        let profile = ItemProfile::built_in("openai").unwrap();
        let request = parse_with(body.as_bytes(), at).unwrap();
        let mut seen = Vec::new();
        for item in request.items() {
            let Some(table) = profile.item_of(item.class) else {
                continue;
            };
            let mut findings = Vec::new();
            findings_of(item, table, &request.shape, &profile, &mut findings);
            seen.push((is_clean(item, table, &request.shape, &profile), findings));
        }
        seen
    }

    fn fixture(path: &str) -> String {
        let path = format!("{}/../../tests/fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn every_clean_item_of_the_real_client_corpus_takes_the_fast_path() {
        let (mut clean, mut with_findings) = (0, 0);
        for (origin, at, body) in corpus() {
            for (fast, findings) in both_ways(&body, at) {
                // The only findings in the corpus are the SDK-made members a profile repairs;
                // every other item must be told clean without the full check.
                assert_eq!(fast, findings.is_empty(), "{origin}: {findings:?}");
                clean += usize::from(fast);
                with_findings += usize::from(!fast);
            }
        }
        assert!(
            clean > 500 && with_findings > 0,
            "{clean} clean, {with_findings} not"
        );
    }

    #[test]
    fn no_item_with_findings_passes_the_fast_path() {
        let vectors: Value = serde_json::from_str(&fixture("refusal-vectors.json")).unwrap();
        let mut refused = 0;
        for case in vectors["cases"].as_array().unwrap() {
            let body = case["body"].to_string();
            if parse_with(body.as_bytes(), ItemsAt::Input).is_err() {
                continue;
            }
            for (fast, findings) in both_ways(&body, ItemsAt::Input) {
                assert!(!fast || findings.is_empty(), "{}: {findings:?}", case["name"]);
                refused += usize::from(!findings.is_empty());
            }
        }
        assert!(refused >= 5, "{refused}");
    }

    #[test]
    fn bounds_the_fast_path_cannot_tell_go_to_the_full_check() {
        let call = |call_id: &str, status: &str| {
            format!(
                r#"{{"input":[{{"type":"function_call","call_id":"{call_id}","name":"f","arguments":"{{}}","status":{status}}}]}}"#
            )
        };
        let e64 = "é".repeat(64);
        for (body, fast, clean) in [
            (call("call_1", r#""completed""#), true, true),
            // 64 characters in 128 bytes: within the limit, but only counting tells.
            (call(&e64, r#""completed""#), false, true),
            (call(&format!("{e64}é"), r#""completed""#), false, false),
            (call(&"a".repeat(65), r#""completed""#), false, false),
            // An escaped value decodes before it is compared.
            (call("call_1", r#""\u0063ompleted""#), true, true),
            (call("call_1", r#""done""#), false, false),
            (call("call_1", "1"), false, false),
        ] {
            let [(got_fast, findings)] = both_ways(&body, ItemsAt::Input).try_into().unwrap();
            assert_eq!(
                (got_fast, findings.is_empty()),
                (fast, clean),
                "{body}: {findings:?}"
            );
        }
    }
}
