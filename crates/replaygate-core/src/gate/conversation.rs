//! A request's `conversation` member, read as the gate reads any member ([`Field`]), with one
//! more form: an object naming the conversation by its `id`.
//!
//! The object's `id` is read as a provider reads it (docs/security.md#one-strict-reading): a
//! second `id`, or a member that reads as `id` to a case-insensitive reader (`ID`, `Id`), is
//! refused, since a provider built on Python's, JavaScript's or Go's JSON keeps the last one
//! and would act on another conversation than the one looked up.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::json::{misspelling_of, Field, FieldVisitor, JsonKind, Misspelling};

/// A request's `conversation`: a string id, or an object whose string `id` names it (read as
/// [`Field::Str`] of that id); any other value, or an object without a string `id`, by its kind.
pub(crate) struct ConversationRef<'a>(pub(crate) Field<'a>);

impl<'de: 'a, 'a> Deserialize<'de> for ConversationRef<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(ConversationVisitor)
            .map(ConversationRef)
    }
}

struct ConversationVisitor;

impl<'de> Visitor<'de> for ConversationVisitor {
    type Value = Field<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a conversation id or object")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        FieldVisitor.visit_borrowed_str(v)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        FieldVisitor.visit_str(v)
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        FieldVisitor.visit_string(v)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        FieldVisitor.visit_unit()
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        FieldVisitor.visit_none()
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        FieldVisitor.visit_bool(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        FieldVisitor.visit_i64(v)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        FieldVisitor.visit_u64(v)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        FieldVisitor.visit_f64(v)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        FieldVisitor.visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut id: Option<Field<'de>> = None;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match key.as_ref() {
                "id" if id.is_some() => {
                    return Err(de::Error::custom(
                        "duplicate member `id` in `conversation`: a provider may read either one",
                    ))
                }
                "id" => id = Some(map.next_value::<Field<'de>>()?),
                other => {
                    if let Some(gated) = misspelling_of(other, &["id"]) {
                        return Err(Misspelling::new(other, gated).into_error());
                    }
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(match id {
            Some(id @ Field::Str(_)) => id,
            _ => Field::Other(JsonKind::Object),
        })
    }
}
