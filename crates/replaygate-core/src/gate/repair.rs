//! Cutting repaired members out of a request body (docs/item-profiles.md).
//!
//! A member with the action `repair` is removed with its value and one adjacent comma from the
//! original bytes; every other byte is forwarded unchanged. The members of one object are cut
//! the way [`crate::gate::strip`] cuts items from an array (the same [`cut_ranges`]), so the
//! result is valid JSON whichever members of an object go.
//!
//! Like stripping, this reads the body a second time, and only for a request that has
//! something to repair: the items with repairs, and in them only the objects that lose a
//! member, are read again to find the members' byte spans.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::request::BodyError;
use super::shape::Name;
use super::strip::cut_ranges;
use super::verdict::Repair;

/// The byte ranges of `text` (the whole body) that cut the members `repairs` name, each with
/// one adjacent comma, ascending and disjoint. `spans` are the items' spans
/// ([`crate::gate::strip::item_spans`]); repairs of items in `removed` (ascending; items cut
/// whole) are left out, as is a part's member when its whole part list is cut.
pub fn member_ranges(
    text: &str,
    spans: &[Range<usize>],
    repairs: &[Repair],
    removed: &[usize],
) -> Result<Vec<Range<usize>>, BodyError> {
    let mut ranges = Vec::new();
    let mut rest = repairs;
    while let Some(first) = rest.first() {
        let count = rest.iter().take_while(|r| r.index == first.index).count();
        let (same_item, after) = rest.split_at(count);
        rest = after;
        if removed.binary_search(&first.index).is_ok() {
            continue;
        }
        let span = spans
            .get(first.index)
            .ok_or_else(|| not_the_request(format_args!("no item {}", first.index)))?;
        item_ranges(text, span.clone(), same_item, &mut ranges)?;
    }
    ranges.sort_unstable_by_key(|r| r.start);
    Ok(ranges)
}

/// The ranges cutting `repairs` (all of one item) out of the item at `span`.
fn item_ranges(
    text: &str,
    span: Range<usize>,
    repairs: &[Repair],
    out: &mut Vec<Range<usize>>,
) -> Result<(), BodyError> {
    let members = object_members(text, span)?;
    let top: Vec<&str> = repairs
        .iter()
        .filter(|r| r.part.is_none())
        .map(|r| r.member.as_str())
        .collect();
    out.extend(cut_named(&members, |name| top.contains(&name)));
    let mut parts: Vec<(&str, usize)> = repairs
        .iter()
        .filter_map(|r| r.part.as_ref().map(|(list, k)| (list.as_str(), *k)))
        .filter(|(list, _)| !top.contains(list))
        .collect();
    parts.sort_unstable();
    parts.dedup();
    for (list, k) in parts {
        let Some(member) = members.iter().find(|m| m.name == list) else {
            return Err(not_the_request(format_args!("no member `{list}`")));
        };
        let elements = array_elements(text, member.value.clone())?;
        let part = elements
            .get(k)
            .ok_or_else(|| not_the_request(format_args!("no part {list}[{k}]")))?;
        let part_members = object_members(text, part.clone())?;
        let names: Vec<&str> = repairs
            .iter()
            .filter(|r| r.part.as_ref().is_some_and(|(l, p)| l == list && *p == k))
            .map(|r| r.member.as_str())
            .collect();
        out.extend(cut_named(&part_members, |name| names.contains(&name)));
    }
    Ok(())
}

/// The ranges cutting the members whose names `cut` picks out of one object's members.
fn cut_named<'m>(
    members: &'m [ObjectMember<'_>],
    cut: impl Fn(&str) -> bool,
) -> impl Iterator<Item = Range<usize>> + 'm {
    let spans: Vec<Range<usize>> = members.iter().map(|m| m.span.clone()).collect();
    let remove: Vec<usize> = members
        .iter()
        .enumerate()
        .filter(|(_, m)| cut(&m.name))
        .map(|(i, _)| i)
        .collect();
    let ranges: Vec<Range<usize>> = cut_ranges(&spans, &remove).collect();
    ranges.into_iter()
}

/// One member of an object: its name, its span (from the key's opening quote to the end of the
/// value) and its value's span, as offsets into the body.
#[derive(Debug)]
struct ObjectMember<'a> {
    name: Cow<'a, str>,
    span: Range<usize>,
    value: Range<usize>,
}

/// The members of the object at `span` of `text`.
fn object_members(text: &str, span: Range<usize>) -> Result<Vec<ObjectMember<'_>>, BodyError> {
    let object = text
        .get(span)
        .ok_or_else(|| not_the_request("an item span is not in the body"))?;
    let mut de = serde_json::Deserializer::from_str(object);
    let raw = de
        .deserialize_map(MembersVisitor)
        .and_then(|members| de.end().map(|()| members))
        .map_err(not_the_request)?;
    let base = text.as_ptr() as usize;
    raw.into_iter()
        .map(|(name, value)| {
            // The raw value borrows from `text`, so its address lies inside it.
            let start = value.get().as_ptr() as usize - base;
            let end = start + value.get().len();
            let key = key_start(text.as_bytes(), start)
                .ok_or_else(|| not_the_request(format_args!("no key before the value of `{name}`")))?;
            Ok(ObjectMember {
                name,
                span: key..end,
                value: start..end,
            })
        })
        .collect()
}

/// The spans of the elements of the array at `span` of `text`.
fn array_elements(text: &str, span: Range<usize>) -> Result<Vec<Range<usize>>, BodyError> {
    let array = text
        .get(span)
        .ok_or_else(|| not_the_request("a member span is not in the body"))?;
    let elements: Vec<&RawValue> = serde_json::from_str(array).map_err(not_the_request)?;
    let base = text.as_ptr() as usize;
    Ok(elements
        .into_iter()
        .map(|raw| {
            let start = raw.get().as_ptr() as usize - base;
            start..start + raw.get().len()
        })
        .collect())
}

/// Where the key of the member whose value starts at `value` begins: back over whitespace, the
/// colon, whitespace, and the key string to its opening quote. Inside a JSON string every `"`
/// is escaped, so the first `"` going back that is preceded by an even number of backslashes
/// opens the key.
fn key_start(text: &[u8], value: usize) -> Option<usize> {
    let mut at = skip_space_back(text, value);
    if at == 0 || text[at - 1] != b':' {
        return None;
    }
    at = skip_space_back(text, at - 1);
    if at == 0 || text[at - 1] != b'"' {
        return None;
    }
    let mut quote = at - 1;
    loop {
        let open = text[..quote].iter().rposition(|&b| b == b'"')?;
        let backslashes = text[..open].iter().rev().take_while(|&&b| b == b'\\').count();
        if backslashes % 2 == 0 {
            return Some(open);
        }
        quote = open;
    }
}

fn skip_space_back(text: &[u8], mut at: usize) -> usize {
    while at > 0 && matches!(text[at - 1], b' ' | b'\t' | b'\n' | b'\r') {
        at -= 1;
    }
    at
}

struct MembersVisitor;

impl<'de> Visitor<'de> for MembersVisitor {
    type Value = Vec<(Cow<'de, str>, &'de RawValue)>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Vec::new();
        while let Some(Name(name)) = map.next_key::<Name<'de>>()? {
            members.push((name, map.next_value()?));
        }
        Ok(members)
    }
}

/// A body that does not read as the gate read it.
fn not_the_request(message: impl fmt::Display) -> BodyError {
    BodyError::InvalidJson {
        message: format!("the body cannot be repaired: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repair(member: &str) -> Repair {
        Repair {
            index: 0,
            part: None,
            member: member.to_owned(),
        }
    }

    fn part_repair(list: &str, k: usize, member: &str) -> Repair {
        Repair {
            index: 0,
            part: Some((list.to_owned(), k)),
            member: member.to_owned(),
        }
    }

    /// `item` (the only item of an input array) with `repairs` cut out.
    fn cut_item(item: &str, repairs: &[Repair]) -> String {
        let body = format!(r#"{{"input":[{item}]}}"#);
        let start = body.find('[').unwrap() + 1;
        let span: Range<usize> = start..start + item.len();
        let ranges = member_ranges(&body, std::slice::from_ref(&span), repairs, &[]).unwrap();
        let mut out = String::new();
        let mut kept = 0;
        for r in ranges {
            out.push_str(&body[kept..r.start]);
            kept = r.end;
        }
        out.push_str(&body[kept..]);
        out[start..out.len() - 2].to_owned()
    }

    #[test]
    fn cuts_a_first_middle_last_or_only_member_with_one_comma() {
        let item = r#"{"a":1,"b":[2],"c":{"d":3}}"#;
        assert_eq!(cut_item(item, &[repair("a")]), r#"{"b":[2],"c":{"d":3}}"#);
        assert_eq!(cut_item(item, &[repair("b")]), r#"{"a":1,"c":{"d":3}}"#);
        assert_eq!(cut_item(item, &[repair("c")]), r#"{"a":1,"b":[2]}"#);
        assert_eq!(cut_item(item, &[repair("a"), repair("b")]), r#"{"c":{"d":3}}"#);
        assert_eq!(cut_item(item, &[repair("a"), repair("c")]), r#"{"b":[2]}"#);
        assert_eq!(cut_item(item, &[repair("a"), repair("b"), repair("c")]), "{}");
        assert_eq!(cut_item(r#"{"a":1}"#, &[repair("a")]), "{}");
    }

    #[test]
    fn keys_with_escapes_and_quotes_inside_are_found() {
        let item = r#"{"type":"function_call","parsed\u005farguments":{"x":"\"}"},"k\\":"v\\"}"#;
        assert_eq!(
            cut_item(item, &[repair("parsed_arguments")]),
            r#"{"type":"function_call","k\\":"v\\"}"#
        );
        assert_eq!(
            cut_item(item, &[repair("k\\")]),
            r#"{"type":"function_call","parsed\u005farguments":{"x":"\"}"}}"#
        );
    }

    #[test]
    fn whitespace_around_members_stays_valid() {
        let item = "{ \"a\" : 1 ,\n  \"b\"\t:\t2 }";
        assert_eq!(cut_item(item, &[repair("b")]), "{ \"a\" : 1 }");
        assert_eq!(cut_item(item, &[repair("a")]), "{ \"b\"\t:\t2 }");
    }

    #[test]
    fn cuts_members_of_content_parts() {
        let item = r#"{"role":"assistant","content":[{"type":"output_text","text":"hi","parsed":null},{"type":"output_text","parsed":{},"text":"x"}]}"#;
        assert_eq!(
            cut_item(
                item,
                &[
                    part_repair("content", 0, "parsed"),
                    part_repair("content", 1, "parsed")
                ]
            ),
            r#"{"role":"assistant","content":[{"type":"output_text","text":"hi"},{"type":"output_text","text":"x"}]}"#
        );
        // A part's member inside a list that is itself cut is cut with the list.
        assert_eq!(
            cut_item(item, &[repair("content"), part_repair("content", 0, "parsed")]),
            r#"{"role":"assistant"}"#
        );
    }
}
