//! A tolerant reading of one JSON member: its string value, or just what kind of value it was.
//!
//! Items from unknown providers may put any JSON in any member, so the gate never fails to read
//! an item because a member has an unexpected type; the rules decide what a non-string means.
//! The ledger reads the members of an answer's items the same way.

use std::borrow::Cow;
use std::fmt;
use std::ops::Deref;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The JSON kind of a value that was read without being kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonKind {
    /// `null`.
    Null,
    /// `true` or `false`.
    Boolean,
    /// A number.
    Number,
    /// A string.
    String,
    /// An array.
    Array,
    /// An object.
    Object,
}

impl JsonKind {
    /// The kind with its article, for messages ("an object").
    pub fn with_article(self) -> &'static str {
        match self {
            JsonKind::Null => "null",
            JsonKind::Boolean => "a boolean",
            JsonKind::Number => "a number",
            JsonKind::String => "a string",
            JsonKind::Array => "an array",
            JsonKind::Object => "an object",
        }
    }
}

/// One member of an item: absent, a string (borrowed from the body when it has no escapes),
/// or another JSON value of which only the kind is kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Field<'a> {
    /// The member is not present.
    #[default]
    Absent,
    /// The member is a string.
    Str(Text<'a>),
    /// The member is present with a non-string value (null included).
    Other(JsonKind),
}

/// A string member's text: borrowed from the body when written without escapes, decoded
/// otherwise.
///
/// Not a `Cow`: a `Cow` inside [`Field`] lends it its capacity word to tell the variants
/// apart, and every test of an absent member decodes that word (nine instructions). This
/// enum's tag (0 or 1) lends its spare values instead, which the compiler decodes in six.
#[derive(Clone)]
pub enum Text<'a> {
    /// The text as written in the body.
    Borrowed(&'a str),
    /// The text decoded from a string with escapes.
    Owned(Box<str>),
}

impl Deref for Text<'_> {
    type Target = str;

    #[inline]
    fn deref(&self) -> &str {
        match self {
            Text::Borrowed(text) => text,
            Text::Owned(text) => text,
        }
    }
}

impl AsRef<str> for Text<'_> {
    fn as_ref(&self) -> &str {
        self
    }
}

impl PartialEq for Text<'_> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Text<'_> {}

impl fmt::Debug for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl From<String> for Text<'_> {
    fn from(text: String) -> Self {
        Text::Owned(text.into_boxed_str())
    }
}

impl<'a> From<Cow<'a, str>> for Text<'a> {
    fn from(text: Cow<'a, str>) -> Self {
        match text {
            Cow::Borrowed(text) => Text::Borrowed(text),
            Cow::Owned(text) => text.into(),
        }
    }
}

impl<'a> Field<'a> {
    /// The string value, if the member is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Field::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Whether the member is absent or null.
    pub fn is_absent_or_null(&self) -> bool {
        matches!(self, Field::Absent | Field::Other(JsonKind::Null))
    }

    /// How the member reads in a message: "missing", "a string", "an object", ...
    pub fn describe(&self) -> &'static str {
        match self {
            Field::Absent => "missing",
            Field::Str(_) => JsonKind::String.with_article(),
            Field::Other(kind) => kind.with_article(),
        }
    }
}

/// A member kept as written: a string's JSON text (quotes and escapes included), borrowed from
/// the body, or just the kind of any other value.
///
/// Reading a string this way only scans it; decoding (and copying) waits until a rule needs the
/// text, and a text already judged can be recognised by its written form alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RawField<'a> {
    /// The member is not present.
    #[default]
    Absent,
    /// The member is a string; this is its JSON text, e.g. `"{\"a\":1}"`.
    Str(&'a str),
    /// The member is present with a non-string value (null included).
    Other(JsonKind),
}

impl<'a> RawField<'a> {
    /// The string's JSON text, if the member is a string.
    pub fn encoded(&self) -> Option<&'a str> {
        match self {
            RawField::Str(raw) => Some(raw),
            _ => None,
        }
    }

    /// How the member reads in a message: "missing", "a string", "an object", ...
    pub fn describe(&self) -> &'static str {
        match self {
            RawField::Absent => "missing",
            RawField::Str(_) => JsonKind::String.with_article(),
            RawField::Other(kind) => kind.with_article(),
        }
    }

    /// Decodes a string's JSON text (borrowed when it has no escapes).
    pub fn decode(encoded: &'a str) -> Result<Cow<'a, str>, super::Error> {
        // The usual short string (a part's `type`, a role) has no escape and no control
        // character: its text is what stands between the quotes, with no reader needed.
        if let Some(inner) = encoded
            .strip_prefix('"')
            .and_then(|rest| rest.strip_suffix('"'))
            .filter(|inner| inner.bytes().all(|b| b != b'\\' && b != b'"' && b >= 0x20))
        {
            return Ok(Cow::Borrowed(inner));
        }
        super::Reader::read_string(encoded)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for RawField<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = <&'de serde_json::value::RawValue>::deserialize(deserializer)?.get();
        Ok(RawField::of_json(raw))
    }
}

impl<'a> RawField<'a> {
    /// What a value's JSON text (as a `RawValue` holds it, without surrounding whitespace) is.
    pub fn of_json(raw: &'a str) -> Self {
        match raw.as_bytes().first() {
            Some(b'"') => RawField::Str(raw),
            Some(b'{') => RawField::Other(JsonKind::Object),
            Some(b'[') => RawField::Other(JsonKind::Array),
            Some(b't' | b'f') => RawField::Other(JsonKind::Boolean),
            Some(b'n') => RawField::Other(JsonKind::Null),
            Some(_) => RawField::Other(JsonKind::Number),
            None => RawField::Absent,
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Field<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(FieldVisitor)
    }
}

/// The visitor of [`Field`], for readers that take a member as a field in some cases only.
pub(crate) struct FieldVisitor;

impl<'de> Visitor<'de> for FieldVisitor {
    type Value = Field<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Field::Str(Text::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Field::Str(Text::Owned(v.into())))
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Field::Str(v.into()))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Field::Other(JsonKind::Null))
    }

    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(Field::Other(JsonKind::Null))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Field::Other(JsonKind::Boolean))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Field::Other(JsonKind::Number))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Field::Other(JsonKind::Number))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Field::Other(JsonKind::Number))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Field::Other(JsonKind::Array))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Field::Other(JsonKind::Object))
    }
}

/// Reads a member and fails on a repeated key, so the gate and the upstream can never
/// disagree about which of two values counts.
pub fn read_once<'de, A, T>(map: &mut A, slot: &mut Option<T>, key: &str) -> Result<(), A::Error>
where
    A: MapAccess<'de>,
    T: Deserialize<'de>,
{
    if slot.is_some() {
        return Err(de::Error::custom(format_args!("duplicate member `{key}`")));
    }
    *slot = Some(map.next_value()?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> Field<'_> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn strings_without_escapes_are_borrowed() {
        assert!(matches!(read(r#""abc""#), Field::Str(Text::Borrowed("abc"))));
    }

    #[test]
    fn strings_with_escapes_are_owned() {
        assert_eq!(read(r#""a\"b""#).as_str(), Some("a\"b"));
        assert!(matches!(read(r#""a\"b""#), Field::Str(Text::Owned(_))));
    }

    #[test]
    fn a_text_equals_another_by_its_characters_however_it_is_held() {
        assert_eq!(Text::Borrowed("ab"), Text::from(String::from("ab")));
        assert_ne!(Text::Borrowed("ab"), Text::Borrowed("ac"));
        assert_eq!(format!("{:?}", Text::from(String::from("a\"b"))), r#""a\"b""#);
    }

    #[test]
    fn a_field_is_three_words() {
        // An item holds six of them; the tag is the text's own (see `Text`).
        assert_eq!(std::mem::size_of::<Field<'_>>(), 3 * std::mem::size_of::<usize>());
    }

    #[test]
    fn other_values_keep_only_their_kind_in_both_readings() {
        let cases = [
            ("null", JsonKind::Null),
            ("true", JsonKind::Boolean),
            ("false", JsonKind::Boolean),
            ("-1.5", JsonKind::Number),
            (r#"[1,[2]]"#, JsonKind::Array),
            (r#"{"a":{"b":1}}"#, JsonKind::Object),
            (r#" {"a":{"b":1}}"#, JsonKind::Object),
        ];
        for (json, kind) in cases {
            assert_eq!(read(json), Field::Other(kind), "{json}");
            assert_eq!(raw(json), RawField::Other(kind), "{json}");
        }
        assert_eq!(raw("{}").describe(), "an object");
    }

    fn raw(json: &str) -> RawField<'_> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn raw_strings_keep_their_json_text_and_decode_on_demand() {
        let escaped = raw(r#""{\"a\":1}""#);
        assert_eq!(escaped, RawField::Str(r#""{\"a\":1}""#));
        assert_eq!(
            RawField::decode(escaped.encoded().unwrap()).unwrap(),
            r#"{"a":1}"#
        );
        assert!(matches!(RawField::decode(r#""abc""#), Ok(Cow::Borrowed("abc"))));
    }

    #[test]
    fn decoding_agrees_with_serde_json_with_and_without_escapes() {
        for encoded in [
            r#""""#,
            r#""input_text""#,
            "\"caf\u{e9} \u{1f680}\"",
            r#""a\nb""#,
            r#""\u00e9""#,
            r#""tab\tin""#,
            "\"raw\ttab\"",
            "\"",
            r#""a"b""#,
            r#""unterminated"#,
            "nope",
            " \"padded\\n\" ",
            "\"a\\n\" x",
            r#""\ud83d\ude80 and \"quotes\"""#,
            r#""\ud83d""#,
            r#""bad \q escape""#,
            "1",
        ] {
            let ours = RawField::decode(encoded).map(Cow::into_owned).ok();
            let theirs = serde_json::from_str::<String>(encoded).ok();
            assert_eq!(ours, theirs, "{encoded:?}");
        }
    }

    #[test]
    fn an_escaped_string_is_decoded_into_one_allocation_of_its_text_length() {
        // A tool call's arguments: a long JSON text written as a JSON string.
        let arguments =
            serde_json::json!({"path": "src/main.rs", "lines": [1, 2, 3], "note": "x".repeat(4000)});
        let encoded = serde_json::to_string(&arguments.to_string()).unwrap();
        let Ok(Cow::Owned(decoded)) = RawField::decode(&encoded) else {
            panic!("an escaped string decodes to an owned one");
        };
        assert_eq!(decoded, arguments.to_string());
        // Allocated once, for the text's length, never grown by doubling.
        assert_eq!(decoded.capacity(), encoded.len());
    }

    #[test]
    fn describe_reads_naturally() {
        assert_eq!(Field::Absent.describe(), "missing");
        assert_eq!(read("{}").describe(), "an object");
    }
}
