//! The member names of every item and content part, as the one reading of a body met them:
//! what item profiles (docs/item-profiles.md) check, without reading the body again.
//!
//! Members the item reader keeps (`type`, `id`, `call_id`, ...) are only named here; their
//! values are in the [`Item`]. Every other member keeps its JSON text, which costs nothing
//! more than skipping it. `content`, `summary` and `output` keep their content parts.

use std::borrow::Cow;
use std::ops::Range;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::item::Item;
use crate::json::{Field, JsonKind, RawField};

/// Every item's and content part's members, in body order.
#[derive(Debug, Default)]
pub struct Shape<'a> {
    /// The members of the items; an item's are `item_members[item.members]`.
    pub item_members: Vec<Member<'a>>,
    /// The content parts of the items' part lists.
    pub parts: Vec<Part<'a>>,
    /// The members of the parts; a part's are `part_members[part.members]`.
    pub part_members: Vec<Member<'a>>,
}

impl<'a> Shape<'a> {
    /// The members of `item`, in the order written.
    pub fn members_of(&self, item: &Item<'_>) -> &[Member<'a>] {
        &self.item_members[range(&item.members)]
    }

    /// The parts of a part list.
    pub fn parts(&self, parts: &Range<u32>) -> &[Part<'a>] {
        &self.parts[range(parts)]
    }

    /// The members of `part`, in the order written.
    pub fn members_of_part(&self, part: &Part<'_>) -> &[Member<'a>] {
        &self.part_members[range(&part.members)]
    }
}

fn range(r: &Range<u32>) -> Range<usize> {
    r.start as usize..r.end as usize
}

/// One member: its name (escapes decoded) and what was kept of its value.
#[derive(Debug, Clone)]
pub struct Member<'a> {
    /// The name, borrowed from the body unless it was written with escapes.
    pub name: Cow<'a, str>,
    /// The name's number, when the reader told it apart as it read (profiles then look it up
    /// by number instead of by its text).
    pub known: KnownName,
    /// What was kept of the value.
    pub value: MemberValue<'a>,
}

/// Member names the readers tell apart as they read them (the item reader matches its own
/// members' names anyway), numbered so a profile finds their entries without comparing text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KnownName {
    /// Any other name.
    #[default]
    Other,
    /// `type`.
    Type,
    /// `id`.
    Id,
    /// `call_id`.
    CallId,
    /// `name`.
    Name,
    /// `status`.
    Status,
    /// `role`.
    Role,
    /// `arguments`.
    Arguments,
    /// `content`.
    Content,
    /// `output`.
    Output,
    /// `tool_calls`.
    ToolCalls,
    /// `encrypted_content`.
    EncryptedContent,
    /// `summary`.
    Summary,
    /// `text`.
    Text,
    /// `annotations`.
    Annotations,
    /// `logprobs`.
    Logprobs,
}

// A set of names is a `u16`.
const _: () = assert!(KnownName::NAMED.len() < 16);

impl KnownName {
    /// Every name but [`KnownName::Other`], in number order.
    pub const NAMED: [KnownName; 15] = [
        KnownName::Type,
        KnownName::Id,
        KnownName::CallId,
        KnownName::Name,
        KnownName::Status,
        KnownName::Role,
        KnownName::Arguments,
        KnownName::Content,
        KnownName::Output,
        KnownName::ToolCalls,
        KnownName::EncryptedContent,
        KnownName::Summary,
        KnownName::Text,
        KnownName::Annotations,
        KnownName::Logprobs,
    ];

    /// The name's bit in a set of names ([`crate::gate::item::Item::present`]): bit `n` for the
    /// name numbered `n`.
    pub const fn bit(self) -> u16 {
        1 << self as u16
    }

    /// The name's text (empty for [`KnownName::Other`]).
    pub fn as_str(self) -> &'static str {
        match self {
            KnownName::Other => "",
            KnownName::Type => "type",
            KnownName::Id => "id",
            KnownName::CallId => "call_id",
            KnownName::Name => "name",
            KnownName::Status => "status",
            KnownName::Role => "role",
            KnownName::Arguments => "arguments",
            KnownName::Content => "content",
            KnownName::Output => "output",
            KnownName::ToolCalls => "tool_calls",
            KnownName::EncryptedContent => "encrypted_content",
            KnownName::Summary => "summary",
            KnownName::Text => "text",
            KnownName::Annotations => "annotations",
            KnownName::Logprobs => "logprobs",
        }
    }

    /// A content part's member name, told apart for the members of text parts.
    fn of_part_member(name: &str) -> KnownName {
        match name {
            "type" => KnownName::Type,
            "text" => KnownName::Text,
            "annotations" => KnownName::Annotations,
            "logprobs" => KnownName::Logprobs,
            _ => KnownName::Other,
        }
    }
}

/// What the reading kept of a member's value.
#[derive(Debug, Clone)]
pub enum MemberValue<'a> {
    /// A member the item reader keeps: its value is in the [`Item`].
    InItem,
    /// The value as written.
    Raw(&'a RawValue),
    /// A part list (`content`, `summary`, `output`): its parts, or its text or kind.
    List(ListValue<'a>),
}

/// A member that may hold content parts.
#[derive(Debug, Clone)]
pub enum ListValue<'a> {
    /// An array: its parts (`Shape::parts[range]`).
    Parts(Range<u32>),
    /// A string.
    Text(TextLen<'a>),
    /// A string as written (quotes and escapes included), never decoded while reading.
    Encoded(&'a str),
    /// Another kind of value.
    Other(JsonKind),
}

/// A string's length, kept without copying it.
#[derive(Debug, Clone, Copy)]
pub enum TextLen<'a> {
    /// The string as it stands in the body (it had no escapes).
    Borrowed(&'a str),
    /// A string written with escapes: its length in bytes once decoded, which bounds its
    /// number of characters (counted exactly only for strings over [`COUNTED_ABOVE`] bytes,
    /// so the reading of ordinary text costs no extra pass).
    Decoded {
        /// Bytes once decoded.
        bytes: usize,
        /// Characters, when counted.
        chars: Option<usize>,
    },
}

/// Escaped strings longer than this (in bytes) have their characters counted as they are read.
pub const COUNTED_ABOVE: usize = 64 << 10;

/// One content part: its `type` and where its members are.
#[derive(Debug, Clone)]
pub struct Part<'a> {
    /// `type`, when the part is an object; the kind of a part that is not.
    pub kind: Field<'a>,
    /// Whether the part is an object at all.
    pub is_object: bool,
    /// Its members (`Shape::part_members[range]`).
    pub members: Range<u32>,
    /// The names of its members, as a set of [`KnownName::bit`]s; a name written twice also
    /// counts as another name ([`KnownName::Other`]), so that a check reading only the set
    /// looks at the members themselves.
    pub names: u16,
    /// The names whose values are strings, and those whose values are arrays.
    pub strings: u16,
    /// See `strings`.
    pub arrays: u16,
}

/// A value as a profile checks it: its JSON kind and, for a string, its text.
#[derive(Debug, Clone, Copy)]
pub enum ValueView<'v> {
    /// A string, decoded.
    Str(&'v str),
    /// A string as JSON text (quotes and escapes included), decoded only when needed.
    Encoded(&'v str),
    /// A string of which only the length is known: its bytes once decoded, and its characters
    /// when counted.
    Len {
        /// Bytes once decoded (at least the number of characters).
        bytes: usize,
        /// Characters, when counted.
        chars: Option<usize>,
    },
    /// Any other value.
    Kind(JsonKind),
    /// The member is absent (only seen for members the item reader keeps).
    Absent,
}

impl<'v> ValueView<'v> {
    /// The view of a value as written.
    pub fn of_raw(raw: &'v RawValue) -> Self {
        match RawField::of_json(raw.get()) {
            RawField::Str(encoded) => ValueView::Encoded(encoded),
            RawField::Other(kind) => ValueView::Kind(kind),
            RawField::Absent => ValueView::Absent,
        }
    }

    /// The view of a member the item reader keeps.
    pub fn of_field(field: &'v Field<'_>) -> Self {
        match field {
            Field::Absent => ValueView::Absent,
            Field::Str(text) => ValueView::Str(text),
            Field::Other(kind) => ValueView::Kind(*kind),
        }
    }

    /// The JSON kind (`None` when absent).
    pub fn kind(&self) -> Option<JsonKind> {
        match self {
            ValueView::Str(_) | ValueView::Encoded(_) | ValueView::Len { .. } => Some(JsonKind::String),
            ValueView::Kind(kind) => Some(*kind),
            ValueView::Absent => None,
        }
    }

    /// The decoded text of a string (`None` for another kind, or a string known by length).
    pub fn text(&self) -> Option<Cow<'v, str>> {
        match *self {
            ValueView::Str(text) => Some(Cow::Borrowed(text)),
            ValueView::Encoded(encoded) => RawField::decode(encoded).ok(),
            _ => None,
        }
    }

    /// The most characters a string can have, told without decoding it: a character takes at
    /// least one byte, and an escape is written in more bytes than it decodes to. `None` for
    /// another kind.
    pub fn most_chars(&self) -> Option<usize> {
        match *self {
            ValueView::Str(text) => Some(text.len()),
            ValueView::Encoded(encoded) => Some(encoded.len() - 2),
            ValueView::Len { chars: Some(n), .. } => Some(n),
            ValueView::Len { bytes, chars: None } => Some(bytes),
            ValueView::Kind(_) | ValueView::Absent => None,
        }
    }

    /// The fewest characters a string can have, told without decoding it: a character takes
    /// at most four bytes once decoded, and an escape at most six bytes written for one.
    /// `None` for another kind.
    pub fn fewest_chars(&self) -> Option<usize> {
        match *self {
            ValueView::Str(text) => Some(text.len().div_ceil(4)),
            ValueView::Encoded(encoded) => {
                let inner = &encoded[1..encoded.len() - 1];
                let fewest_bytes = match inner.contains('\\') {
                    true => inner.len() / 6,
                    false => inner.len(),
                };
                Some(fewest_bytes.div_ceil(4))
            }
            ValueView::Len { chars: Some(n), .. } => Some(n),
            ValueView::Len { bytes, chars: None } => Some(bytes.div_ceil(4)),
            ValueView::Kind(_) | ValueView::Absent => None,
        }
    }

    /// A string's text when it is at hand without decoding (borrowed, or written without
    /// escapes).
    pub fn plain_text(&self) -> Option<&'v str> {
        match *self {
            ValueView::Str(text) => Some(text),
            ValueView::Encoded(encoded) => {
                Some(&encoded[1..encoded.len() - 1]).filter(|inner| !inner.contains('\\'))
            }
            _ => None,
        }
    }

    /// The number of characters of a string, counted (decoding it if need be); `None` for
    /// another kind, or a string known only by its length whose characters were not counted.
    fn exact_chars(&self) -> Option<usize> {
        match *self {
            ValueView::Str(text) => Some(text.chars().count()),
            ValueView::Encoded(encoded) => RawField::decode(encoded).ok().map(|text| text.chars().count()),
            ValueView::Len { chars, .. } => chars,
            ValueView::Kind(_) | ValueView::Absent => None,
        }
    }

    /// The number of characters of a string, computed only when it could pass `above`: a
    /// string whose written form is no longer than `above` is reported as that long at most.
    /// `None` for another kind, or when it cannot be told (a string whose characters were not
    /// counted and whose bytes pass `above`: no constraint is failed on a guess).
    pub fn chars_if_over(&self, above: usize) -> Option<usize> {
        match self.most_chars()? {
            most if most <= above => Some(most),
            _ => self.exact_chars(),
        }
    }

    /// Whether a string has at least `min` characters, counted only when its bounds do not
    /// tell (`None` for another kind, or when it cannot be told).
    pub fn chars_at_least(&self, min: usize) -> Option<bool> {
        if self.fewest_chars()? >= min {
            return Some(true);
        }
        if self.most_chars()? < min {
            return Some(false);
        }
        self.exact_chars().map(|n| n >= min)
    }
}

/// The value of an item member the item reader keeps.
pub fn item_value<'v>(item: &'v Item<'_>, name: KnownName) -> ValueView<'v> {
    match name {
        KnownName::Type => ValueView::of_field(&item.kind),
        KnownName::Id => ValueView::of_field(&item.id),
        KnownName::CallId => ValueView::of_field(&item.call_id),
        KnownName::Name => ValueView::of_field(&item.name),
        KnownName::Status => ValueView::of_field(&item.status),
        KnownName::Role => ValueView::of_field(&item.role),
        KnownName::Arguments => match item.arguments {
            RawField::Str(encoded) => ValueView::Encoded(encoded),
            RawField::Other(kind) => ValueView::Kind(kind),
            RawField::Absent => ValueView::Absent,
        },
        KnownName::EncryptedContent => match &item.encrypted_content {
            Some(raw) => ValueView::of_raw(raw.0),
            None => ValueView::Absent,
        },
        _ => ValueView::Kind(JsonKind::Array),
    }
}

/// Reads a part list member from its JSON text as written: a string is kept as written (its
/// length is read only if a profile asks), and only an array is visited for its parts. Taking a
/// string as a raw value skips it as fast as any skipped member, and keeps long escaped
/// strings (tool outputs full of JSON text) from being decoded. [`ListInPlace`] reads an array
/// where it stands instead, with the gate's reader.
pub(crate) fn read_list_raw<'a>(
    raw: &'a RawValue,
    shape: &mut Shape<'a>,
) -> Result<ListValue<'a>, crate::json::Error> {
    match RawField::of_json(raw.get()) {
        RawField::Str(encoded) => Ok(ListValue::Encoded(encoded)),
        RawField::Other(JsonKind::Array) => {
            let mut reader = crate::json::Reader::new(raw.get());
            de::DeserializeSeed::deserialize(ListSeed { shape }, &mut reader)
        }
        RawField::Other(kind) => Ok(ListValue::Other(kind)),
        RawField::Absent => Ok(ListValue::Other(JsonKind::Null)),
    }
}

/// Reads a part list member where it stands in the body: an array is read in place (once), any
/// other value taken as written and read as [`read_list_raw`] reads it.
pub(crate) struct ListInPlace<'s, 'a> {
    pub(crate) shape: &'s mut Shape<'a>,
}

impl<'de: 'a, 'a> de::DeserializeSeed<'de> for ListInPlace<'_, 'a> {
    type Value = ListValue<'a>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        crate::json::array_in_place(deserializer, self)
    }
}

impl<'de: 'a, 'a> Visitor<'de> for ListInPlace<'_, 'a> {
    type Value = ListValue<'a>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        ListSeed { shape: self.shape }.visit_seq(seq)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        let raw: &'de RawValue = de::Deserialize::deserialize(deserializer)?;
        read_list_raw(raw, self.shape).map_err(de::Error::custom)
    }
}

/// Reads a part list member (`content`, `summary`, `output`) into `shape`.
pub(crate) struct ListSeed<'s, 'a> {
    pub(crate) shape: &'s mut Shape<'a>,
}

impl<'de: 'a, 'a> de::DeserializeSeed<'de> for ListSeed<'_, 'a> {
    type Value = ListValue<'a>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de: 'a, 'a> Visitor<'de> for ListSeed<'_, 'a> {
    type Value = ListValue<'a>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(ListValue::Text(TextLen::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        let chars = (v.len() > COUNTED_ABOVE).then(|| v.chars().count());
        Ok(ListValue::Text(TextLen::Decoded {
            bytes: v.len(),
            chars,
        }))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(ListValue::Other(JsonKind::Null))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(ListValue::Other(JsonKind::Boolean))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(ListValue::Other(JsonKind::Number))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(ListValue::Other(JsonKind::Number))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(ListValue::Other(JsonKind::Number))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<de::IgnoredAny, de::IgnoredAny>()?.is_some() {}
        Ok(ListValue::Other(JsonKind::Object))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let start = self.shape.parts.len() as u32;
        while let Some(part) = seq.next_element_seed(PartSeed {
            members: &mut self.shape.part_members,
        })? {
            self.shape.parts.push(part);
        }
        Ok(ListValue::Parts(start..self.shape.parts.len() as u32))
    }
}

/// Reads one content part: its members' names and JSON text.
struct PartSeed<'s, 'a> {
    members: &'s mut Vec<Member<'a>>,
}

impl<'de: 'a, 'a> de::DeserializeSeed<'de> for PartSeed<'_, 'a> {
    type Value = Part<'a>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'a> PartSeed<'_, 'a> {
    fn not_an_object(self, kind: JsonKind) -> Part<'a> {
        let at = self.members.len() as u32;
        Part {
            kind: Field::Other(kind),
            is_object: false,
            members: at..at,
            names: 0,
            strings: 0,
            arrays: 0,
        }
    }
}

impl<'de: 'a, 'a> Visitor<'de> for PartSeed<'_, 'a> {
    type Value = Part<'a>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a content part")
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(self.not_an_object(JsonKind::String))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(self.not_an_object(JsonKind::Null))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(self.not_an_object(JsonKind::Boolean))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(self.not_an_object(JsonKind::Number))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(self.not_an_object(JsonKind::Number))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(self.not_an_object(JsonKind::Number))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
        Ok(self.not_an_object(JsonKind::Array))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let start = self.members.len() as u32;
        let mut kind = Field::Absent;
        let (mut names, mut strings, mut arrays) = (0u16, 0u16, 0u16);
        while let Some(name) = map.next_key::<Name<'de>>()? {
            let raw: &'de RawValue = map.next_value()?;
            let known = KnownName::of_part_member(&name.0);
            let bit = known.bit();
            names |= if names & bit == 0 {
                bit
            } else {
                KnownName::Other.bit()
            };
            match RawField::of_json(raw.get()) {
                RawField::Str(_) => strings |= bit,
                RawField::Other(JsonKind::Array) => arrays |= bit,
                _ => {}
            }
            if name.0 == "type" && kind == Field::Absent {
                kind = match RawField::of_json(raw.get()) {
                    RawField::Str(encoded) => RawField::decode(encoded)
                        .map(|text| Field::Str(text.into()))
                        .unwrap_or(Field::Other(JsonKind::String)),
                    RawField::Other(other) => Field::Other(other),
                    RawField::Absent => Field::Absent,
                };
            }
            self.members.push(Member {
                known,
                name: name.0,
                value: MemberValue::Raw(raw),
            });
        }
        Ok(Part {
            kind,
            is_object: true,
            members: start..self.members.len() as u32,
            names,
            strings,
            arrays,
        })
    }
}

/// A member name, borrowed unless written with escapes.
pub(crate) struct Name<'a>(pub(crate) Cow<'a, str>);

impl<'de: 'a, 'a> de::Deserialize<'de> for Name<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NameVisitor;
        impl<'de> Visitor<'de> for NameVisitor {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Name(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Name(Cow::Owned(v.to_owned())))
            }
        }
        deserializer.deserialize_identifier(NameVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_names_are_numbered_in_order_and_spelled_once() {
        for (i, known) in KnownName::NAMED.iter().enumerate() {
            assert_eq!(*known as usize, i + 1, "{known:?}");
            assert!(!known.as_str().is_empty());
            let twice = KnownName::NAMED
                .iter()
                .filter(|k| k.as_str() == known.as_str())
                .count();
            assert_eq!(twice, 1, "{known:?}");
        }
        assert_eq!(KnownName::of_part_member("text"), KnownName::Text);
        assert_eq!(KnownName::of_part_member("parsed"), KnownName::Other);
    }

    #[test]
    fn lengths_are_characters_counted_only_when_they_decide() {
        let accented = ValueView::Str("\u{e9}\u{e9}\u{e9}");
        assert_eq!(accented.chars_if_over(3), Some(3), "6 bytes, 3 characters");
        assert_eq!(accented.chars_if_over(10), Some(6), "short enough by its bytes");
        assert_eq!(ValueView::Encoded(r#""a\u00e9\n""#).chars_if_over(2), Some(3));
        assert_eq!(ValueView::Encoded(r#""ab""#).chars_if_over(2), Some(2));
        let uncounted = ValueView::Len {
            bytes: 100,
            chars: None,
        };
        assert_eq!(uncounted.chars_if_over(200), Some(100));
        assert_eq!(uncounted.chars_if_over(50), None, "cannot tell: no guess");
        assert_eq!(uncounted.chars_at_least(200), Some(false));
        assert_eq!(uncounted.chars_at_least(25), Some(true));
        assert_eq!(uncounted.chars_at_least(30), None);
        assert_eq!(accented.chars_at_least(3), Some(true));
        assert_eq!(accented.chars_at_least(4), Some(false));
        assert_eq!(ValueView::Kind(JsonKind::Null).chars_at_least(1), None);
    }

    #[test]
    fn long_escaped_text_has_its_characters_counted_as_it_is_read() {
        let text = format!("\"{}\\n\"", "\u{e9}".repeat(COUNTED_ABOVE));
        let mut shape = Shape::default();
        let mut de = serde_json::Deserializer::from_str(&text);
        let value = de::DeserializeSeed::deserialize(ListSeed { shape: &mut shape }, &mut de).unwrap();
        match value {
            ListValue::Text(TextLen::Decoded { bytes, chars }) => {
                assert_eq!((bytes, chars), (2 * COUNTED_ABOVE + 1, Some(COUNTED_ABOVE + 1)));
            }
            other => panic!("{other:?}"),
        }
    }
}
