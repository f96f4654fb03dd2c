//! A quicker read of the output items whose record needs only a few of their members
//! (`function_call`, `message`, `reasoning`, `compaction`): those members are read borrowed
//! from the answer with the gate's reader, without building the item as a `Value`. An item it
//! is not sure of (another type, a repeated member, a member of an unexpected kind, an id over
//! the limit) is left to the full read, [`item_record_from_value`](super::item_record_from_value);
//! where it answers, it answers as that read would (a test compares the two), with one
//! difference: a member it does not read is skipped, as serde_json skips, so a string there
//! with a lone surrogate escape (`"\ud800"`, which no `Value` can hold) does not stop the record.

use std::borrow::Cow;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::canon::{put_bytes, put_str, Digesting, Sink};
use super::record::{type_name, ItemRecord, ANSWER_TYPES, DOMAIN, MAX_ID_BYTES};
use crate::gate::OutputCall;
use crate::json::{Field, JsonKind, Reader, Spanned, Text};

/// An output item read the quick way: its record, and for a `function_call` its call.
#[derive(Debug)]
pub(crate) struct QuickItem {
    pub record: ItemRecord,
    pub call: Option<CallMembers>,
}

/// What a `function_call` item's [`OutputCall`] is made of.
#[derive(Debug)]
pub(crate) struct CallMembers {
    call_id: Option<String>,
    name: Option<String>,
    arguments: Field<'static>,
}

impl CallMembers {
    /// The call, as the item at `index` of the answer.
    pub fn at(self, index: usize) -> OutputCall {
        OutputCall {
            index,
            call_id: self.call_id,
            name: self.name,
            arguments: self.arguments,
        }
    }
}

/// The members a quick read looks at, each read as it stands (a repeated one fails the read).
#[derive(Deserialize)]
struct Members<'a> {
    #[serde(rename = "type", borrow, default)]
    item_type: Member<'a>,
    #[serde(borrow, default)]
    id: Member<'a>,
    #[serde(borrow, default)]
    call_id: Member<'a>,
    #[serde(borrow, default)]
    name: Member<'a>,
    #[serde(borrow, default)]
    arguments: Member<'a>,
    #[serde(borrow, default)]
    encrypted_content: Member<'a>,
    #[serde(borrow, default)]
    content: Content<'a>,
}

/// The members of a message's content part that its text is made of.
#[derive(Deserialize)]
struct PartText<'a> {
    #[serde(borrow, default)]
    text: Member<'a>,
    #[serde(borrow, default)]
    refusal: Member<'a>,
}

/// A member as the quick read takes it: absent, `null`, a string, or another kind of value
/// (which the quick read leaves to the full one).
#[derive(Default)]
enum Member<'a> {
    #[default]
    Absent,
    Null,
    Text(Cow<'a, str>),
    Other,
}

/// Read as the gate reads a member ([`Field`]'s deserializer), then told by kind.
impl<'de: 'a, 'a> Deserialize<'de> for Member<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match Field::deserialize(deserializer)? {
            Field::Absent => Member::Absent,
            Field::Other(JsonKind::Null) => Member::Null,
            Field::Str(Text::Borrowed(text)) => Member::Text(Cow::Borrowed(text)),
            Field::Str(Text::Owned(text)) => Member::Text(Cow::Owned(text.into())),
            Field::Other(_) => Member::Other,
        })
    }
}

impl<'a> Member<'a> {
    /// The member, or `None` when it is another kind of value than a string or `null`.
    fn known(self) -> Option<Member<'a>> {
        match self {
            Member::Other => None,
            known => Some(known),
        }
    }

    /// The text of a member that is a string (`None`: absent, or another kind of value).
    fn into_text(self) -> Option<Cow<'a, str>> {
        match self {
            Member::Text(text) => Some(text),
            _ => None,
        }
    }

    /// The member as the digest encodes it.
    fn put(&self, out: &mut impl Sink) {
        match self {
            Member::Absent => out.put(b"-"),
            Member::Null => out.put(b"n"),
            Member::Text(text) => put_str(out, text),
            Member::Other => unreachable!("a member of another kind goes to the full read"),
        }
    }

    /// An id member: `Some(None)` when absent or null, `None` when the full read must decide.
    fn id(&self) -> Option<Option<String>> {
        match self {
            Member::Absent | Member::Null => Some(None),
            Member::Text(id) if id.len() <= MAX_ID_BYTES => Some(Some(id.as_ref().to_owned())),
            Member::Text(_) | Member::Other => None,
        }
    }

    fn text(&self) -> Option<String> {
        match self {
            Member::Text(text) => Some(text.as_ref().to_owned()),
            _ => None,
        }
    }

    fn field(self) -> Field<'static> {
        match self {
            Member::Absent => Field::Absent,
            Member::Null => Field::Other(JsonKind::Null),
            Member::Text(text) => Field::Str(Text::Owned(text.into())),
            Member::Other => unreachable!("a member of another kind goes to the full read"),
        }
    }
}

/// A message's `content` as the digest takes its text.
#[derive(Default)]
enum Content<'a> {
    /// Absent, or of a kind that has no text (`null`, a number, an object).
    #[default]
    NoText,
    /// A string, or the concatenated texts of a list of parts.
    Text(Cow<'a, str>),
}

impl<'de: 'a, 'a> Deserialize<'de> for Content<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ContentVisitor)
    }
}

struct ContentVisitor;

impl<'de> Visitor<'de> for ContentVisitor {
    type Value = Content<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Content<'de>, E> {
        Ok(Content::Text(Cow::Borrowed(text)))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Content<'de>, E> {
        Ok(Content::Text(Cow::Owned(text.to_owned())))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Content<'de>, E> {
        Ok(Content::NoText)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Content<'de>, E> {
        Ok(Content::NoText)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Content<'de>, E> {
        Ok(Content::NoText)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Content<'de>, E> {
        Ok(Content::NoText)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Content<'de>, E> {
        Ok(Content::NoText)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Content<'de>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Content::NoText)
    }

    /// A list of parts: each part's string `text`, or else its string `refusal`, in order;
    /// elements that are not objects add nothing. A message of one text part (the usual
    /// answer) keeps that text borrowed; only a second one makes a joined copy.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Content<'de>, A::Error> {
        let mut text: Option<Cow<'de, str>> = None;
        while let Some(part) = seq.next_element::<Part<'de>>()? {
            if let Part::Object(part) = part {
                if let Some(part_text) = part.text.into_text().or_else(|| part.refusal.into_text()) {
                    match &mut text {
                        None => text = Some(part_text),
                        Some(joined) => joined.to_mut().push_str(&part_text),
                    }
                }
            }
        }
        Ok(Content::Text(text.unwrap_or(Cow::Borrowed(""))))
    }
}

/// An element of a message's content list.
enum Part<'a> {
    Object(PartText<'a>),
    NotAnObject,
}

impl<'de: 'a, 'a> Deserialize<'de> for Part<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(PartVisitor)
    }
}

struct PartVisitor;

impl<'de> Visitor<'de> for PartVisitor {
    type Value = Part<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Part<'de>, A::Error> {
        PartText::deserialize(de::value::MapAccessDeserializer::new(map)).map(Part::Object)
    }

    fn visit_borrowed_str<E: de::Error>(self, _: &'de str) -> Result<Part<'de>, E> {
        Ok(Part::NotAnObject)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Part<'de>, E> {
        Ok(Part::NotAnObject)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Part<'de>, E> {
        Ok(Part::NotAnObject)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Part<'de>, E> {
        Ok(Part::NotAnObject)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Part<'de>, E> {
        Ok(Part::NotAnObject)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Part<'de>, E> {
        Ok(Part::NotAnObject)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Part<'de>, E> {
        Ok(Part::NotAnObject)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Part<'de>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Part::NotAnObject)
    }
}

/// The quick read of `item` (one output item's JSON text), or `None` when the full read must
/// decide.
pub(crate) fn quick_item(item: &str) -> Option<QuickItem> {
    if !item.trim_start().starts_with('{') {
        return None;
    }
    let members: Members<'_> = Reader::read(item).ok()?;
    members.quick()
}

/// An output item read in place, as part of the whole answer: its members as [`quick_item`]
/// reads them, read through [`Spanned`] so the reader notes where the item lies. Reading an
/// item that is not an object, or has a member twice, fails (the answer is then read the
/// two-pass way, where [`quick_item`] turns that item over to the full read).
pub(crate) struct ItemInPlace<'a>(Members<'a>);

impl<'de: 'a, 'a> Deserialize<'de> for ItemInPlace<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Spanned(PhantomData::<Members<'a>>)
            .deserialize(deserializer)
            .map(ItemInPlace)
    }
}

impl ItemInPlace<'_> {
    /// [`quick_item`] of the item's text.
    pub fn quick(self) -> Option<QuickItem> {
        self.0.quick()
    }
}

impl Members<'_> {
    /// The quick read of an item with these members (see [`quick_item`]).
    fn quick(self) -> Option<QuickItem> {
        let Member::Text(item_type) = self.item_type else {
            return None;
        };
        let item_type = item_type.as_ref();
        if !ANSWER_TYPES.contains(&item_type) {
            return None;
        }
        let id = self.id.id()?;
        let call_id = self.call_id.known()?;
        let encrypted_content = self.encrypted_content.known()?;
        let mut out = Digesting::new();
        put_bytes(&mut out, DOMAIN);
        put_bytes(&mut out, item_type.as_bytes());
        let mut call = None;
        if item_type == "function_call" {
            let name = self.name.known()?;
            let arguments = self.arguments.known()?;
            name.put(&mut out);
            arguments.put(&mut out);
            call_id.put(&mut out);
            call = Some(CallMembers {
                call_id: call_id.text(),
                name: name.text(),
                arguments: arguments.field(),
            });
        } else if item_type == "message" {
            // A message's text as [`item_digest`](super::record::item_digest) reads it: `content`
            // itself when it is a string, else the concatenation of each content part's string
            // `text` (or, without one, its string `refusal`); absent when `content` is absent or
            // of another kind.
            match &self.content {
                Content::Text(text) => put_str(&mut out, text),
                Content::NoText => out.put(b"-"),
            }
        } else {
            encrypted_content.put(&mut out);
        }
        let record = ItemRecord {
            id,
            item_type: type_name(item_type),
            call_id: call_id.id()?,
            digest: out.finish(),
            has_encrypted_content: !matches!(encrypted_content, Member::Absent | Member::Null),
            preceded_by: None,
        };
        Some(QuickItem { record, call })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::Value;

    use super::super::record::item_record_from_value;
    use super::*;

    /// What the full read makes of `item`: its record and, for a `function_call`, its call.
    fn full_read(item: &str) -> Option<(ItemRecord, Option<OutputCall>)> {
        let value: Value = serde_json::from_str(item).ok()?;
        let record = item_record_from_value(&value)?;
        let call = (record.item_type == "function_call").then(|| {
            let text = |name: &str| value.get(name).and_then(Value::as_str).map(str::to_owned);
            OutputCall {
                index: 3,
                call_id: text("call_id"),
                name: text("name"),
                arguments: match value.get("arguments") {
                    None => Field::Absent,
                    Some(Value::String(text)) => Field::Str(Text::Owned(text.as_str().into())),
                    Some(Value::Null) => Field::Other(JsonKind::Null),
                    Some(_) => Field::Other(JsonKind::Object),
                },
            }
        });
        Some((record, call))
    }

    fn agrees(item: &str) -> Result<bool, TestCaseError> {
        let Some(quick) = quick_item(item) else {
            return Ok(false);
        };
        let quick = (quick.record, quick.call.map(|call| call.at(3)));
        prop_assert_eq!(Some(quick), full_read(item), "item {}", item);
        Ok(true)
    }

    #[test]
    fn a_lone_surrogate_in_a_member_not_read_does_not_stop_the_record() {
        let item = r#"{"type":"message","id":"msg_1","content":[{"type":"output_text","text":"Done.","note":"\ud800"}]}"#;
        assert!(serde_json::from_str::<Value>(item).is_err(), "no Value holds it");
        let quick = quick_item(item).unwrap().record;
        let clean = item.replace(r#","note":"\ud800""#, "");
        assert_eq!(Some(quick), full_read(&clean).map(|(record, _)| record));
        // In a member the record reads, it stops the quick read as it stops the full one.
        assert!(quick_item(&item.replace("Done.", r"\ud800")).is_none());
    }

    #[test]
    fn reads_the_usual_items_quickly_and_as_the_full_read_does() {
        let items = [
            r#"{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"path\":\"src/a.rs\"}","call_id":"call_1","name":"read_file"}"#,
            r#"{"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":"x"}],"encrypted_content":"gAAA"}"#,
            r#"{"type":"compaction","encrypted_content":null}"#,
            r#" { "type" : "function_call", "name" : "f\u00e9", "arguments" : null, "call_id" : "c" } "#,
            r#"{"type":"reasoning","id":null,"summary":[]}"#,
            r#"{"type":"message","content":"hi"}"#,
            r#"{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"I will read the pool."}]}"#,
            r#"{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a\u00e9"},{"type":"refusal","refusal":"no"},7,{"type":"x","text":3,"refusal":"r"}]}"#,
            r#"{"type":"message","content":null}"#,
            r#"{"type":"message","content":{"text":"not a list"}}"#,
        ];
        for item in items {
            assert!(agrees(item).unwrap(), "{item} was left to the full read");
        }
    }

    #[test]
    fn leaves_what_it_is_not_sure_of_to_the_full_read() {
        let long_id = format!(
            r#"{{"type":"reasoning","id":"{}"}}"#,
            "r".repeat(MAX_ID_BYTES + 1)
        );
        for item in [
            r#"{"type":"message","content":[{"text":"a","text":"b"}]}"#,
            r#"{"type":"function_call","type":"function_call","call_id":"c"}"#,
            r#"{"type":"function_call","arguments":{"a":1},"call_id":"c"}"#,
            r#"{"type":"function_call","name":7}"#,
            r#"{"type":"reasoning","encrypted_content":{"k":1}}"#,
            r#"["function_call"]"#,
            r#"{"type":7}"#,
            &long_id,
        ] {
            assert!(quick_item(item).is_none(), "{item}");
        }
    }

    /// A member value of one of the kinds items carry.
    fn value() -> impl Strategy<Value = Option<String>> {
        prop_oneof![
            Just(None),
            Just(Some("null".to_owned())),
            Just(Some("12".to_owned())),
            Just(Some(r#"{"a":[1,"b"]}"#.to_owned())),
            "[a-z\\\\\"é{} ]{0,12}".prop_map(|text| Some(serde_json::to_string(&text).unwrap())),
            Just(Some(r#""\u0041\n\"""#.to_owned())),
            Just(Some(format!("\"{}\"", "x".repeat(MAX_ID_BYTES + 1)))),
        ]
    }

    /// A message's `content` as answers write it: a list of parts with `text` or `refusal`
    /// members of any kind, now and then something that is not a part.
    fn content() -> impl Strategy<Value = Option<String>> {
        let member = (prop_oneof![Just("text"), Just("refusal"), Just("type")], value());
        let part = prop_oneof![
            proptest::collection::vec(member, 0..4).prop_map(|members| {
                let members: Vec<String> = members
                    .into_iter()
                    .filter_map(|(name, value)| Some(format!("\"{name}\":{}", value?)))
                    .collect();
                format!("{{{}}}", members.join(","))
            }),
            value().prop_map(|value| value.unwrap_or_else(|| "null".to_owned())),
        ];
        proptest::collection::vec(part, 0..4).prop_map(|parts| Some(format!("[{}]", parts.join(","))))
    }

    proptest! {
        #[test]
        fn answers_only_as_the_full_read_does(
            item_type in prop_oneof![
                Just(r#""function_call""#), Just(r#""reasoning""#), Just(r#""compaction""#),
                Just(r#""message""#), Just("null"), Just(r#""function\u005fcall""#),
            ],
            members in proptest::collection::vec(
                (prop_oneof![Just("id"), Just("call_id"), Just("name"), Just("arguments"),
                    Just("encrypted_content"), Just("status"), Just("summary"), Just("content")],
                    prop_oneof![value(), content()]),
                0..7,
            ),
            space in prop_oneof![Just(""), Just(" "), Just("\n ")],
        ) {
            let mut item = format!("{{{space}\"type\":{space}{item_type}");
            for (name, value) in &members {
                if let Some(value) = value {
                    item.push_str(&format!(",{space}\"{name}\"{space}:{value}"));
                }
            }
            item.push_str(space);
            item.push('}');
            agrees(&item)?;
        }
    }
}
