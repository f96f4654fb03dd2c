//! A quicker read of the output items whose record needs only a few of their members
//! (`function_call`, `message`, `reasoning`, `compaction`): those members are read borrowed
//! from the answer with the gate's reader, without building the item as a `Value`. An item it
//! is not sure of (another type, a repeated member, a member of an unexpected kind, an id over
//! the limit) is left to the full read, [`item_record_from_value`](super::item_record_from_value);
//! where it answers, it answers as that read would (a test compares the two).

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use super::canon::{put_bytes, put_str};
use super::record::{ItemRecord, DOMAIN};
use super::MAX_ID_BYTES;
use crate::gate::{Field, JsonKind, OutputCall, Text};
use crate::json::Reader;

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

/// The members a quick read looks at, each as its JSON text (`null` included).
#[derive(Deserialize)]
struct Members<'a> {
    #[serde(rename = "type", borrow, default, deserialize_with = "present")]
    item_type: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    call_id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    name: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    arguments: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    encrypted_content: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    content: Option<&'a RawValue>,
}

/// The members of a message's content part that its text is made of.
#[derive(Deserialize)]
struct PartText<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    text: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    refusal: Option<&'a RawValue>,
}

/// A present member, `null` or not (`Option<&RawValue>` alone reads `null` as absent).
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue>::deserialize(deserializer).map(Some)
}

/// A member the quick read understands.
enum Member<'a> {
    Absent,
    Null,
    Text(Cow<'a, str>),
}

impl<'a> Member<'a> {
    /// The member, or `None` when it is neither absent, `null` nor a string.
    fn of(raw: Option<&'a RawValue>) -> Option<Member<'a>> {
        let Some(raw) = raw else {
            return Some(Member::Absent);
        };
        match raw.get().trim() {
            "null" => Some(Member::Null),
            // Borrowed unless written with escapes.
            text if text.starts_with('"') => Reader::read_string(text).ok().map(Member::Text),
            _ => None,
        }
    }

    /// The text of a member that is a string (`None`: absent, or another kind of value).
    fn text_of(raw: Option<&'a RawValue>) -> Option<Cow<'a, str>> {
        match Member::of(raw)? {
            Member::Text(text) => Some(text),
            Member::Absent | Member::Null => None,
        }
    }

    /// The member as the digest encodes it.
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            Member::Absent => out.push(b'-'),
            Member::Null => out.push(b'n'),
            Member::Text(text) => put_str(out, text),
        }
    }

    /// An id member: `Some(None)` when absent or null, `None` when the full read must decide.
    fn id(&self) -> Option<Option<String>> {
        match self {
            Member::Absent | Member::Null => Some(None),
            Member::Text(id) if id.len() <= MAX_ID_BYTES => Some(Some(id.as_ref().to_owned())),
            Member::Text(_) => None,
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
        }
    }
}

/// The quick read of `item` (one output item's JSON text), or `None` when the full read must
/// decide.
pub(crate) fn quick_item(item: &str) -> Option<QuickItem> {
    if !item.trim_start().starts_with('{') {
        return None;
    }
    let members: Members<'_> = Reader::read(item).ok()?;
    let Member::Text(item_type) = Member::of(members.item_type)? else {
        return None;
    };
    let item_type = item_type.as_ref();
    if !matches!(
        item_type,
        "function_call" | "message" | "reasoning" | "compaction"
    ) {
        return None;
    }
    let id = Member::of(members.id)?.id()?;
    let call_id = Member::of(members.call_id)?;
    let encrypted_content = Member::of(members.encrypted_content)?;
    let mut out = Vec::with_capacity(128);
    put_bytes(&mut out, DOMAIN);
    put_bytes(&mut out, item_type.as_bytes());
    let mut call = None;
    if item_type == "function_call" {
        let name = Member::of(members.name)?;
        let arguments = Member::of(members.arguments)?;
        name.put(&mut out);
        arguments.put(&mut out);
        call_id.put(&mut out);
        call = Some(CallMembers {
            call_id: call_id.text(),
            name: name.text(),
            arguments: arguments.field(),
        });
    } else if item_type == "message" {
        match message_text(members.content)? {
            Some(text) => put_str(&mut out, &text),
            None => out.push(b'-'),
        }
    } else {
        encrypted_content.put(&mut out);
    }
    let record = ItemRecord {
        id,
        item_type: item_type.to_owned(),
        call_id: call_id.id()?,
        digest: Sha256::digest(&out).into(),
        has_encrypted_content: !matches!(encrypted_content, Member::Absent | Member::Null),
    };
    Some(QuickItem { record, call })
}

/// A message's text as the digest takes it, read as
/// [`item_digest`](super::record::item_digest) reads it: `content` itself when it is a string, else the
/// concatenation of each content part's string `text` (or, without one, its string
/// `refusal`); `Some(None)` when `content` is absent or of another kind; `None` when the full
/// read must decide (a part whose members repeat).
fn message_text(content: Option<&RawValue>) -> Option<Option<Cow<'_, str>>> {
    let Some(content) = content else {
        return Some(None);
    };
    let json = content.get();
    if !json.starts_with('[') {
        return Some(Member::text_of(Some(content)));
    }
    let parts: Vec<&RawValue> = Reader::read(json).ok()?;
    let mut text = String::new();
    for part in parts {
        if !part.get().starts_with('{') {
            continue;
        }
        let members: PartText<'_> = Reader::read(part.get()).ok()?;
        if let Some(part_text) = Member::text_of(members.text).or_else(|| Member::text_of(members.refusal)) {
            text.push_str(&part_text);
        }
    }
    Some(Some(Cow::Owned(text)))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::Value;

    use super::*;
    use crate::ledger::record::item_record_from_value;

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
