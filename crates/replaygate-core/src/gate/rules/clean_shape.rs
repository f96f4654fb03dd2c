//! The shape check's fast path: whether an item plainly has nothing for `item_value`,
//! `item_field` or `item_unknown_field` to say, told in one lean walk over its members.
//!
//! Nearly every item a provider is sent is clean, and proving that needs none of what makes a
//! finding (positions, paths, messages, characters counted, escapes decoded). This walk answers
//! `true` only when [`super::item_shape::check`] would find nothing, and `false` whenever it
//! might find something, which then goes to that check for its findings.

use crate::gate::item::{Item, MemberLayout};
use crate::gate::item_profile::{ItemProfile, KnownRule, MemberEntry, MemberRule, Members};
use crate::gate::shape::{KnownName, ListValue, Member, MemberValue, Part, Shape, ValueView};
use crate::json::{Field, JsonKind, RawField};

use super::item_shape::{type_needs_no_check, view};

/// Whether `item` is plainly clean under `profile` (an item of a type the profile does not
/// describe is: there is nothing to check).
#[inline]
pub(super) fn clean_item(item: &Item<'_>, shape: &Shape<'_>, profile: &ItemProfile) -> bool {
    let Some(table) = profile.item_of(item.class) else {
        return true;
    };
    let clean = is_clean(item, table, shape, profile);
    // Under test, every item the fast path passes is checked in full as well.
    #[cfg(debug_assertions)]
    if clean {
        let mut findings = Vec::new();
        super::item_shape::findings_of(item, table, shape, profile, &mut findings);
        assert!(
            findings.is_empty(),
            "the fast path passed an item with findings: {findings:?}"
        );
    }
    clean
}

/// Whether `item`, whose class has the profile's `table`, is plainly clean: every member
/// accepted and written once, every value passing its rule, every part list holding parts of
/// accepted types with accepted members, no required member missing.
///
/// An item whose members the reader all keeps ([`MemberLayout::Kept`]) is tested field by
/// field ([`kept_members_clean`]); another is walked member by member ([`members_clean`]).
#[inline]
pub(super) fn is_clean(item: &Item<'_>, table: &Members, shape: &Shape<'_>, profile: &ItemProfile) -> bool {
    if let (MemberLayout::Kept { lists }, Some(required)) = (item.layout, table.required_known()) {
        return kept_members_clean(item, lists, required, table, shape, profile);
    }
    let Some(seen) = members_clean(item, table, shape, profile) else {
        return false;
    };
    table
        .required_bits()
        .is_some_and(|required| required & !seen == 0)
}

/// The item's members' positions in `table` as bits, when every member is accepted, written
/// once and has a value its rule plainly passes, and each part list is clean.
///
/// A name the readers tell apart is checked by its compiled rule ([`KnownRule`]), inline;
/// another name is looked up in the table and checked by its rule.
#[inline(always)]
fn members_clean(item: &Item<'_>, table: &Members, shape: &Shape<'_>, profile: &ItemProfile) -> Option<u64> {
    let own_type = type_needs_no_check(item, table);
    let mut seen = 0u64;
    for member in shape.members_of(item) {
        let known = table.known_rule(member.known);
        if known.bit == 0 {
            seen = looked_up_member_clean(item, member, table, seen, shape, profile)?;
            continue;
        }
        if seen & known.bit != 0 {
            return None;
        }
        seen |= known.bit;
        if own_type && member.known == KnownName::Type {
            continue;
        }
        let passes = match &member.value {
            MemberValue::InItem => kept_member_passes(item, member, known, table),
            MemberValue::Raw(raw) => known.json_passes(raw.get(), table),
            MemberValue::List(list) => list_passes(item, member, list, known, table, shape, profile),
        };
        if !passes {
            return None;
        }
    }
    Some(seen)
}

/// [`is_clean`] for an item whose members are all kept in it but its part lists (at `lists`
/// among its members), when `table`'s `required` members are all names the readers tell
/// apart: which members are present is told from [`Item::present`] (the reader has refused
/// any written twice), each present field is tested where it is, and only the part lists are
/// read from the item's members. `false` also when a present member has no compiled rule;
/// the full check then decides.
#[inline(always)]
fn kept_members_clean(
    item: &Item<'_>,
    lists: [u8; 2],
    required: u16,
    table: &Members,
    shape: &Shape<'_>,
    profile: &ItemProfile,
) -> bool {
    let present = item.present;
    if present & !table.compiled_known() != 0 || required & !present != 0 {
        return false;
    }
    let has = |name: KnownName| present & name.bit() != 0;
    (!has(KnownName::Type)
        || type_needs_no_check(item, table)
        || table.known_rule(KnownName::Type).field_passes(&item.kind, table))
        && present_field_passes(present, &item.id, KnownName::Id, table)
        && present_field_passes(present, &item.call_id, KnownName::CallId, table)
        && present_field_passes(present, &item.name, KnownName::Name, table)
        && present_field_passes(present, &item.status, KnownName::Status, table)
        && present_field_passes(present, &item.role, KnownName::Role, table)
        && (!has(KnownName::Arguments)
            || raw_field_passes(&item.arguments, table.known_rule(KnownName::Arguments), table))
        && (!has(KnownName::EncryptedContent)
            || item.encrypted_content.is_some_and(|blob| {
                table
                    .known_rule(KnownName::EncryptedContent)
                    .json_passes(blob.get(), table)
            }))
        && (!has(KnownName::Content) || kept_list_clean(item, lists[0], table, shape, profile))
        && (!has(KnownName::Output) || kept_list_clean(item, lists[1], table, shape, profile))
}

/// [`kept_members_clean`] for one field: whether it is absent (by `present`) or plainly
/// passes its compiled rule.
#[inline(always)]
fn present_field_passes(present: u16, field: &Field<'_>, name: KnownName, table: &Members) -> bool {
    present & name.bit() == 0 || table.known_rule(name).field_passes(field, table)
}

/// [`kept_members_clean`] for the part list at position `at` among the item's members.
#[inline(always)]
fn kept_list_clean(
    item: &Item<'_>,
    at: u8,
    table: &Members,
    shape: &Shape<'_>,
    profile: &ItemProfile,
) -> bool {
    let Some(member) = shape.members_of(item).get(usize::from(at)) else {
        return false;
    };
    let MemberValue::List(list) = &member.value else {
        return false;
    };
    list_passes(
        item,
        member,
        list,
        table.known_rule(member.known),
        table,
        shape,
        profile,
    )
}

/// [`members_clean`] for a part list member (`content`, `output`, `summary`) whose name has a
/// compiled rule.
#[inline(always)]
fn list_passes(
    item: &Item<'_>,
    member: &Member<'_>,
    list: &ListValue<'_>,
    known: &KnownRule,
    table: &Members,
    shape: &Shape<'_>,
    profile: &ItemProfile,
) -> bool {
    match list {
        ListValue::Encoded(written) => known.written_passes(written, table),
        ListValue::Other(kind) => known.kind_passes(*kind),
        ListValue::Parts(range) => table.rule_at(known.at()).is_some_and(|rule| {
            known.kind_passes(JsonKind::Array)
                && (rule.parts().is_none() || parts_clean(shape.parts(range), rule, shape, profile))
        }),
        ListValue::Text(_) => table
            .rule_at(known.at())
            .is_some_and(|rule| rule.passes(&view(item, member))),
    }
}

/// [`members_clean`] for a member the item reader keeps: its value read from the item.
#[inline(always)]
fn kept_member_passes(item: &Item<'_>, member: &Member<'_>, known: &KnownRule, table: &Members) -> bool {
    // The member's field is chosen first and read at one place after (reading each field in
    // its own arm has the compiler read them all before the walk begins).
    let field = match member.known {
        KnownName::Type => &item.kind,
        KnownName::Id => &item.id,
        KnownName::CallId => &item.call_id,
        KnownName::Name => &item.name,
        KnownName::Status => &item.status,
        KnownName::Role => &item.role,
        KnownName::Arguments => return raw_field_passes(&item.arguments, known, table),
        _ => {
            return table
                .rule_at(known.at())
                .is_some_and(|rule| rule.passes(&view(item, member)))
        }
    };
    known.field_passes(field, table)
}

/// [`kept_member_passes`] for `arguments`, kept as written. Out of line: inlined, the compiler
/// prepares its test before the walk of every item, arguments or not.
#[inline(never)]
fn raw_field_passes(field: &RawField<'_>, known: &KnownRule, table: &Members) -> bool {
    match *field {
        RawField::Str(written) => known.written_passes(written, table),
        RawField::Other(kind) => known.kind_passes(kind),
        RawField::Absent => true,
    }
}

/// [`members_clean`] for a member without a compiled rule: found in the table by its name;
/// `seen` with its bit added when it is accepted, new, and passes.
#[cold]
fn looked_up_member_clean(
    item: &Item<'_>,
    member: &Member<'_>,
    table: &Members,
    seen: u64,
    shape: &Shape<'_>,
    profile: &ItemProfile,
) -> Option<u64> {
    let Some((at, MemberEntry::Accepted(rule))) = table.entry_of(member) else {
        return None;
    };
    let bit = 1u64.checked_shl(u32::try_from(at).ok()?)?;
    if seen & bit != 0 || !rule.passes(&view(item, member)) {
        return None;
    }
    if let (Some(_), MemberValue::List(ListValue::Parts(range))) = (rule.parts(), &member.value) {
        if !parts_clean(shape.parts(range), rule, shape, profile) {
            return None;
        }
    }
    Some(seen | bit)
}

/// Whether every part is an object of a type `rule` accepts whose members are clean (a part
/// has no required members, and its own part lists are not looked into): told from the
/// part's sets of names where they suffice, else member by member.
#[inline(never)]
fn parts_clean(parts: &[Part<'_>], rule: &MemberRule, shape: &Shape<'_>, profile: &ItemProfile) -> bool {
    parts.iter().all(|part| {
        let Some(kind) = part.kind.as_str().filter(|_| part.is_object) else {
            return false;
        };
        match rule.part_table_of(kind) {
            None => false,
            Some(None) => true,
            Some(Some(at)) => {
                let table = profile.part_at(at);
                table.passes_part_names(part) || part_members_clean(shape.members_of_part(part), table)
            }
        }
    })
}

/// [`members_clean`] for a part's members, which the reading keeps as written.
fn part_members_clean(members: &[Member<'_>], table: &Members) -> bool {
    let own_type = table.accepts_own_type();
    let mut seen = 0u64;
    for member in members {
        let MemberValue::Raw(raw) = &member.value else {
            return false;
        };
        let known = table.known_rule(member.known);
        let (bit, passes) = if known.bit == 0 {
            let Some((at, MemberEntry::Accepted(rule))) = table.entry_of(member) else {
                return false;
            };
            let Some(bit) = u32::try_from(at).ok().and_then(|at| 1u64.checked_shl(at)) else {
                return false;
            };
            (bit, rule.passes(&ValueView::of_raw(raw)))
        } else {
            let skip = own_type && member.known == KnownName::Type;
            (known.bit, skip || known.json_passes(raw.get(), table))
        };
        if !passes || seen & bit != 0 {
            return false;
        }
        seen |= bit;
    }
    true
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::gate::request::{parse_with, ItemsAt};
    use crate::gate::rules::item_shape::{findings_of, ShapeFinding};
    use crate::gate::rules::tests_corpus::corpus;
    use crate::gate::verdict::Reason;

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
    fn a_part_is_told_clean_from_its_names_only_when_they_suffice() {
        let profile = ItemProfile::built_in("openai").unwrap();
        let table = profile.part("output_text").unwrap();
        for (parts, by_names, clean) in [
            (
                r#"{"type":"output_text","text":"hi","annotations":[]}"#,
                true,
                true,
            ),
            (
                r#"{"annotations":[],"logprobs":[],"text":"hi","type":"output_text"}"#,
                true,
                true,
            ),
            // Written twice, of a kind its rule refuses, a name without a compiled rule.
            (
                r#"{"type":"output_text","text":"hi","text":"again"}"#,
                false,
                false,
            ),
            (r#"{"type":"output_text","text":5}"#, false, false),
            (
                r#"{"type":"output_text","text":"hi","annotations":{}}"#,
                false,
                false,
            ),
            (r#"{"type":"output_text","text":"hi","extra":1}"#, false, false),
        ] {
            let body = format!(r#"{{"input":[{{"role":"assistant","content":[{parts}]}}]}}"#);
            let request = parse_with(body.as_bytes(), ItemsAt::Input).unwrap();
            let [part] = request.shape.parts.as_slice() else {
                panic!("{parts}: one part");
            };
            assert_eq!(table.passes_part_names(part), by_names, "{parts}");
            let [(_, findings)] = both_ways(&body, ItemsAt::Input).try_into().unwrap();
            assert_eq!(findings.is_empty(), clean, "{parts}: {findings:?}");
        }
        // A name its table accepts but the readers do not tell apart: the members decide.
        let body = r#"{"input":[{"role":"user","content":[{"type":"input_text","text":"a","prompt_cache_breakpoint":null}]}]}"#;
        let request = parse_with(body.as_bytes(), ItemsAt::Input).unwrap();
        let table = profile.part("input_text").unwrap();
        assert!(!table.passes_part_names(&request.shape.parts[0]));
        assert_eq!(both_ways(body, ItemsAt::Input), [(true, Vec::new())]);
    }

    #[test]
    fn bounds_the_fast_path_cannot_tell_go_to_the_full_check() {
        let call = |call_id: &str, status: &str| {
            format!(
                r#"{{"input":[{{"type":"function_call","call_id":"{call_id}","name":"f","arguments":"{{}}","status":{status}}}]}}"#
            )
        };
        let message = |phase: &str| {
            format!(r#"{{"input":[{{"type":"message","role":"assistant","phase":{phase},"content":"hi"}}]}}"#)
        };
        let output = |call_id: &str, text: &str| {
            format!(
                r#"{{"input":[{{"type":"function_call_output","call_id":"{call_id}","output":"{text}"}}]}}"#
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
            // A string kept as written: a value from a set compared as written, a length told
            // from its written bytes.
            (message(r#""commentary""#), true, true),
            (message(r#""comm\u0065ntary""#), false, true),
            (message(r#""Commentary""#), false, false),
            (message("null"), true, true),
            (message("7"), false, false),
            (output("call_1", "o"), true, true),
            (output("", "o"), false, false),
            (output("call_1", &"o".repeat(10)), true, true),
        ] {
            let [(got_fast, findings)] = both_ways(&body, ItemsAt::Input).try_into().unwrap();
            assert_eq!(
                (got_fast, findings.is_empty()),
                (fast, clean),
                "{body}: {findings:?}"
            );
        }
    }

    #[test]
    fn null_reads_as_absent_unless_the_member_is_required() {
        // Codex CLI replays its reasoning items so, and OpenAI takes them.
        let codex = r#"{"input":[{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"Thinking"}],"content":null,"encrypted_content":"gAAAA"}]}"#;
        assert_eq!(both_ways(codex, ItemsAt::Input), [(true, Vec::new())]);
        let call = r#"{"input":[{"type":"function_call","call_id":"call_1","name":null,"arguments":"{}"}]}"#;
        let [(fast, findings)] = both_ways(call, ItemsAt::Input).try_into().unwrap();
        assert!(!fast);
        let [finding] = findings.as_slice() else {
            panic!("{findings:?}");
        };
        assert_eq!(
            (finding.reason, finding.path()),
            (Reason::ItemValue, "name".to_owned())
        );
        assert!(
            finding
                .message
                .starts_with("`name` is null; it is required and must be a string"),
            "{}",
            finding.message
        );
    }

    /// A valid item of each portable type, and a valid part of each part type with the item
    /// and member that hold it.
    fn base_item(kind: &str) -> Value {
        serde_json::from_str(match kind {
            "message" => r#"{"type":"message","role":"user","content":"hi"}"#,
            "function_call" => r#"{"type":"function_call","call_id":"call_1","name":"f","arguments":"{}"}"#,
            "function_call_output" => r#"{"type":"function_call_output","call_id":"call_1","output":"ok"}"#,
            "reasoning" => r#"{"type":"reasoning","id":"rs_1","summary":[]}"#,
            "compaction" => r#"{"type":"compaction","encrypted_content":"gAAAA"}"#,
            "item_reference" => r#"{"type":"item_reference","id":"msg_1"}"#,
            other => panic!("no base item for {other}"),
        })
        .unwrap()
    }

    fn base_part(kind: &str) -> Value {
        serde_json::from_str(match kind {
            "input_text" | "summary_text" | "reasoning_text" => r#"{"text":"a"}"#,
            "output_text" => r#"{"text":"a","annotations":[],"logprobs":[]}"#,
            "refusal" => r#"{"refusal":"no"}"#,
            "input_image" => r#"{"image_url":"https://example.com/a.png","detail":"auto"}"#,
            "input_file" => r#"{"file_id":"file_1"}"#,
            other => panic!("no base part for {other}"),
        })
        .map(|mut part: Value| {
            part["type"] = kind.into();
            part
        })
        .unwrap()
    }

    /// What the shape check must say of `item` with `member` set to `null`, by the profile.
    fn expected_of_null(table: &Members, member: &str) -> Option<Reason> {
        match table.entry(member)? {
            MemberEntry::Refused(_) => Some(Reason::ItemField),
            MemberEntry::Accepted(_) if table.required().any(|(r, _)| r == member) => Some(Reason::ItemValue),
            MemberEntry::Accepted(_) => None,
        }
    }

    fn judge(item: &Value) -> Vec<(bool, Vec<ShapeFinding>)> {
        let body = serde_json::json!({ "input": [item] }).to_string();
        // The reading may refuse a body (a `type` that is not a string); it must not panic.
        if parse_with(body.as_bytes(), ItemsAt::Input).is_err() {
            return Vec::new();
        }
        both_ways(&body, ItemsAt::Input)
    }

    #[test]
    fn null_for_every_member_of_every_portable_item_gets_the_profiles_verdict() {
        let profile = ItemProfile::built_in("openai").unwrap();
        let mut judged = 0;
        for kind in crate::gate::item_profile::PORTABLE_ITEM_TYPES {
            let table = profile.item(kind).unwrap();
            let base = base_item(kind);
            assert_eq!(
                judge(&base),
                [(true, Vec::new())],
                "{kind}: the base item is clean"
            );
            let names: Vec<String> = table.names().map(str::to_owned).collect();
            for member in &names {
                let mut item = base.clone();
                item[member.as_str()] = Value::Null;
                let seen = judge(&item);
                if member == "type" {
                    continue; // The item is another item then (or none): no panic is the test.
                }
                let [(fast, findings)] = seen.as_slice() else {
                    panic!("{kind}.{member}: {seen:?}");
                };
                let reasons: Vec<Reason> = findings.iter().map(|f| f.reason).collect();
                match expected_of_null(table, member) {
                    None => assert!(*fast && findings.is_empty(), "{kind}.{member}: {findings:?}"),
                    Some(reason) => {
                        assert_eq!(reasons, [reason], "{kind}.{member}");
                        assert_eq!(findings[0].path(), *member, "{kind}.{member}");
                    }
                }
                judged += 1;
            }
            // Every member null at once: the first required one (in the profile's order) is
            // the item's one finding; with none required, the refused ones are.
            let mut all_null = base.clone();
            for member in names.iter().filter(|m| *m != "type") {
                all_null[member.as_str()] = Value::Null;
            }
            let [(fast, findings)] = judge(&all_null).try_into().unwrap();
            let required: Vec<&str> = table.required().map(|(m, _)| m).collect();
            match required.first() {
                Some(_) => {
                    assert!(!fast, "{kind}");
                    let [finding] = findings.as_slice() else {
                        panic!("{kind}: {findings:?}");
                    };
                    assert_eq!(finding.reason, Reason::ItemValue, "{kind}");
                    assert!(required.contains(&finding.member.as_str()), "{kind}: {finding:?}");
                }
                None => assert!(
                    findings.iter().all(|f| f.reason == Reason::ItemField),
                    "{kind}: {findings:?}"
                ),
            }
            // Each part type a list member takes, with each of its members null.
            for (list, rule) in names.iter().filter_map(|m| Some((m, table.accepted(m)?))) {
                for part_kind in rule.parts().into_iter().flatten() {
                    let part_table = profile.part(part_kind).unwrap();
                    let base_part = base_part(part_kind);
                    let mut item = base.clone();
                    item[list.as_str()] = serde_json::json!([base_part]);
                    if kind == "message" && part_kind == "output_text" || part_kind == "refusal" {
                        item["role"] = "assistant".into();
                    }
                    assert_eq!(judge(&item), [(true, Vec::new())], "{kind}.{list}: {part_kind}");
                    for member in part_table.names().filter(|m| *m != "type") {
                        let mut part = base_part.clone();
                        part[member] = Value::Null;
                        item[list.as_str()] = serde_json::json!([part]);
                        let [(fast, findings)] = judge(&item).try_into().unwrap();
                        let reasons: Vec<Reason> = findings.iter().map(|f| f.reason).collect();
                        let at = format!("{kind}.{list}[0] ({part_kind}).{member}");
                        match expected_of_null(part_table, member) {
                            None => assert!(fast && findings.is_empty(), "{at}: {findings:?}"),
                            Some(reason) => {
                                assert_eq!(reasons, [reason], "{at}");
                                assert_eq!(findings[0].path(), format!("{list}[0].{member}"), "{at}");
                            }
                        }
                        judged += 1;
                    }
                }
            }
        }
        assert!(judged >= 58, "{judged}");
    }
}
