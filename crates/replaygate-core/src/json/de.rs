//! serde's side of the reader: the `Deserializer` over `&mut Reader`, its map and sequence
//! access, and the protocol by which serde_json's `RawValue` takes a value's text.

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};
use serde::forward_to_deserialize_any;

use super::{Category, Error, Reader, Result, Str};

/// The name under which serde_json's `RawValue` asks a deserializer for a value's text.
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// The newtype name [`Spanned`] asks for: the gate's reader notes where the value lies.
const SPANNED_TOKEN: &str = "$replaygate::json::Spanned";

/// A seed whose value's place in the text the gate's [`Reader`] notes
/// ([`Reader::take_spans`]) as it reads it; any other deserializer reads the value as the seed
/// alone would, and notes nothing.
pub struct Spanned<S>(pub S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Spanned<S> {
    type Value = S::Value;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<S::Value, D::Error> {
        deserializer.deserialize_newtype_struct(SPANNED_TOKEN, self)
    }
}

impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for Spanned<S> {
    type Value = S::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a value")
    }

    fn visit_newtype_struct<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<S::Value, D::Error> {
        self.0.deserialize(deserializer)
    }
}

/// The newtype name [`array_in_place`] asks for.
const ARRAY_IN_PLACE_TOKEN: &str = "$replaygate::json::ArrayInPlace";

/// Asks `deserializer` for a value that `visitor` reads in place when it is an array and takes
/// as written otherwise. The gate's [`Reader`] hands an array to `visit_seq` as it reads it and
/// any other value to `visit_newtype_struct`; any other deserializer hands every value to
/// `visit_newtype_struct`, where the visitor takes the value's text as a `RawValue`. An array is
/// so read once, not passed over as raw text first and read again.
pub fn array_in_place<'de, D, V>(deserializer: D, visitor: V) -> std::result::Result<V::Value, D::Error>
where
    D: serde::Deserializer<'de>,
    V: Visitor<'de>,
{
    deserializer.deserialize_newtype_struct(ARRAY_IN_PLACE_TOKEN, visitor)
}

/// The newtype name [`array_after_known`] asks for.
const ARRAY_AFTER_KNOWN_TOKEN: &str = "$replaygate::json::ArrayAfterKnown";

/// Asks `deserializer` for an array whose leading elements the gate's [`Reader`] may pass over
/// unread: when [`Reader::resume_array`] named the array's place, the visitor's `visit_seq`
/// gets only the elements after the resume point. Any other value, any other array and any
/// other deserializer hand the value to `visit_newtype_struct` whole.
pub fn array_after_known<'de, D, V>(deserializer: D, visitor: V) -> std::result::Result<V::Value, D::Error>
where
    D: serde::Deserializer<'de>,
    V: Visitor<'de>,
{
    deserializer.deserialize_newtype_struct(ARRAY_AFTER_KNOWN_TOKEN, visitor)
}

impl<'de> Reader<'de> {
    /// Reads the array at the reader's position (its `[` next) with `visitor`.
    fn visit_array<V: Visitor<'de>>(&mut self, visitor: V) -> Result<V::Value> {
        self.visit_elements(self.pos + 1, true, visitor)
    }

    /// [`Reader::visit_array`] from `resume` on: the elements before it are not read, and
    /// the next thing read is the `,` or `]` after them.
    fn visit_array_from<V: Visitor<'de>>(&mut self, resume: usize, visitor: V) -> Result<V::Value> {
        self.visit_elements(resume, false, visitor)
    }

    /// Reads an array's elements from `from` (just after its `[` when `first`, else just after
    /// an element) to its `]` with `visitor`.
    fn visit_elements<V: Visitor<'de>>(&mut self, from: usize, first: bool, visitor: V) -> Result<V::Value> {
        self.descend()?;
        self.pos = from;
        let value = visitor.visit_seq(Elements { reader: self, first });
        self.ascend();
        let value = value?;
        self.end_container(b']', "EOF while parsing a list")
            .map(|()| value)
    }

    /// Reads the object at the reader's position (its `{` next) with `visitor`.
    fn visit_object<V: Visitor<'de>>(&mut self, visitor: V) -> Result<V::Value> {
        self.descend()?;
        self.pos += 1;
        let value = visitor.visit_map(Members {
            reader: self,
            first: true,
        });
        self.ascend();
        let value = value?;
        self.end_container(b'}', "EOF while parsing an object")
            .map(|()| value)
    }

    /// A number as serde_json gives it: a `u64`, an `i64` (negative), else an `f64`.
    fn visit_number<V: Visitor<'de>>(&mut self, visitor: V) -> Result<V::Value> {
        let (text, integer) = self.number()?;
        if integer {
            if let Ok(n) = text.parse::<u64>() {
                return visitor.visit_u64(n);
            }
            if text != "-0" {
                if let Ok(n) = text.parse::<i64>() {
                    return visitor.visit_i64(n);
                }
            }
        }
        match text.parse::<f64>() {
            Ok(n) if n.is_finite() => visitor.visit_f64(n),
            _ => Err(self.syntax("number out of range")),
        }
    }

    fn end_container(&mut self, close: u8, eof: &str) -> Result<()> {
        match self.peek() {
            Some(b) if b == close => {
                self.pos += 1;
                Ok(())
            }
            Some(b',') => Err(self.syntax("trailing comma")),
            Some(_) => Err(self.syntax("trailing characters")),
            None => Err(self.eof(eof)),
        }
    }
}

impl<'de> de::Deserializer<'de> for &mut Reader<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        let value = match self.peek() {
            Some(b'"') => {
                self.pos += 1;
                match self.string()? {
                    Str::Borrowed(text) => visitor.visit_borrowed_str(text),
                    Str::Decoded(text) => visitor.visit_str(text),
                }
            }
            Some(b'{') => self.visit_object(visitor),
            Some(b'[') => self.visit_array(visitor),
            Some(b't') => self.literal("true").and_then(|()| visitor.visit_bool(true)),
            Some(b'f') => self.literal("false").and_then(|()| visitor.visit_bool(false)),
            Some(b'n') => self.literal("null").and_then(|()| visitor.visit_unit()),
            Some(b'-' | b'0'..=b'9') => self.visit_number(visitor),
            Some(_) => return Err(self.syntax("expected value")),
            None => return Err(self.eof("EOF while parsing a value")),
        };
        value.map_err(|e| self.placed(e))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        if self.peek() == Some(b'n') {
            self.literal("null")?;
            return visitor.visit_none().map_err(|e| self.placed(e));
        }
        visitor.visit_some(self)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.skip_value()?;
        visitor.visit_unit().map_err(|e| self.placed(e))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, name: &'static str, visitor: V) -> Result<V::Value> {
        if name == SPANNED_TOKEN {
            self.peek();
            let start = self.pos;
            let value = visitor.visit_newtype_struct(&mut *self)?;
            self.spans.push(start..self.pos);
            return Ok(value);
        }
        if name == ARRAY_AFTER_KNOWN_TOKEN {
            if let Some((open, resume)) = self.resume.filter(|_| self.peek() == Some(b'[')) {
                if open == self.pos {
                    self.resume = None;
                    return self.visit_array_from(resume, visitor).map_err(|e| self.placed(e));
                }
            }
            return visitor.visit_newtype_struct(self);
        }
        if name == ARRAY_IN_PLACE_TOKEN {
            if self.peek() == Some(b'[') {
                return self.visit_array(visitor).map_err(|e| self.placed(e));
            }
            return visitor.visit_newtype_struct(self);
        }
        if name != RAW_VALUE_TOKEN {
            return visitor.visit_newtype_struct(self);
        }
        self.peek();
        let start = self.pos;
        self.skip_value()?;
        let raw = &self.text[start..self.pos];
        visitor
            .visit_map(RawValueText { raw: Some(raw) })
            .map_err(|e| self.placed(e))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        // Unit variants, written as strings: the only enums the gate reads from a body.
        match self.peek() {
            Some(b'"') => {
                self.pos += 1;
                let value = match self.string()? {
                    Str::Borrowed(text) => visitor.visit_enum(BorrowedStrDeserializer::<Error>::new(text)),
                    Str::Decoded(text) => visitor.visit_enum(text.into_deserializer()),
                };
                value.map_err(|e| self.placed(e))
            }
            Some(_) => Err(self.error(Category::Data, "expected an enum variant written as a string")),
            None => Err(self.eof("EOF while parsing a value")),
        }
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit
        unit_struct seq tuple tuple_struct map struct identifier
    }
}

/// The members of an object being read by a visitor.
struct Members<'r, 'de> {
    reader: &'r mut Reader<'de>,
    first: bool,
}

impl<'de> de::MapAccess<'de> for Members<'_, 'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        let reader = &mut *self.reader;
        match reader.peek() {
            Some(b'}') => return Ok(None),
            Some(b',') if !self.first => {
                reader.pos += 1;
            }
            Some(_) if self.first => self.first = false,
            Some(_) => return Err(reader.syntax("expected `,` or `}`")),
            None => return Err(reader.eof("EOF while parsing an object")),
        }
        match reader.peek() {
            Some(b'"') => {
                reader.pos += 1;
                let key = match reader.string()? {
                    Str::Borrowed(name) => seed.deserialize(BorrowedStrDeserializer::<Error>::new(name)),
                    Str::Decoded(name) => seed.deserialize(name.into_deserializer()),
                };
                key.map(Some).map_err(|e| reader.placed(e))
            }
            Some(b'}') => Err(reader.syntax("trailing comma")),
            Some(_) => Err(reader.syntax("key must be a string")),
            None => Err(reader.eof("EOF while parsing a value")),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value> {
        self.reader.colon()?;
        seed.deserialize(&mut *self.reader)
    }
}

/// The elements of an array being read by a visitor.
struct Elements<'r, 'de> {
    reader: &'r mut Reader<'de>,
    first: bool,
}

impl<'de> de::SeqAccess<'de> for Elements<'_, 'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>> {
        let reader = &mut *self.reader;
        match reader.peek() {
            Some(b']') => return Ok(None),
            Some(b',') if !self.first => {
                reader.pos += 1;
                if reader.peek() == Some(b']') {
                    return Err(reader.syntax("trailing comma"));
                }
            }
            Some(_) if self.first => self.first = false,
            Some(_) => return Err(reader.syntax("expected `,` or `]`")),
            None => return Err(reader.eof("EOF while parsing a list")),
        }
        seed.deserialize(&mut *reader).map(Some)
    }
}

/// What serde_json's `RawValue` reads: a one-member map from its token to the value's text.
struct RawValueText<'de> {
    raw: Option<&'de str>,
}

impl<'de> de::MapAccess<'de> for RawValueText<'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        if self.raw.is_none() {
            return Ok(None);
        }
        seed.deserialize(BorrowedStrDeserializer::<Error>::new(RAW_VALUE_TOKEN))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value> {
        let raw = self
            .raw
            .take()
            .ok_or_else(|| <Error as de::Error>::custom("a raw value is read once"))?;
        seed.deserialize(BorrowedStrDeserializer::<Error>::new(raw))
    }
}
