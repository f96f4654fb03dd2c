//! A `usage` object read as [`Usage`] says: every JSON value reads, as a usage or as missing,
//! so a bad `usage` never stops the read of the answer around it.

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{AnswerUsage, Usage, MAX_TOKENS};

/// A `usage` member's value, read: [`AnswerUsage::Missing`] for anything but a valid usage
/// object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UsageValue(pub(crate) AnswerUsage);

/// The usage of a `usage` member's JSON text (missing when it is not JSON).
pub(crate) fn usage_of_text(text: &[u8]) -> AnswerUsage {
    let Ok(text) = simdutf8::basic::from_utf8(text) else {
        return AnswerUsage::Missing;
    };
    match crate::json::Reader::read::<UsageValue>(text) {
        Ok(UsageValue(usage)) => usage,
        Err(_) => AnswerUsage::Missing,
    }
}

impl<'de> Deserialize<'de> for UsageValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(KindOf::<Object>::default())
            .map(|read| {
                let usage = read.ok().flatten().and_then(Object::usage);
                UsageValue(usage.map_or(AnswerUsage::Missing, AnswerUsage::Reported))
            })
    }
}

/// The members of a usage object that are read.
#[derive(Debug, Default)]
struct Object {
    input: Count,
    output: Count,
    cached_input: Count,
    reasoning_output: Count,
    /// Which of `input_tokens`, `output_tokens` and the two details were read.
    seen: [bool; 4],
    /// Details that are not an object (nor `null`).
    bad: bool,
}

impl Object {
    fn usage(self) -> Option<Usage> {
        if self.bad {
            return None;
        }
        let usage = Usage {
            input: self.input.required()?,
            output: self.output.required()?,
            cached_input: self.cached_input.optional()?,
            reasoning_output: self.reasoning_output.optional()?,
        };
        (usage.cached_input <= usage.input && usage.reasoning_output <= usage.output).then_some(usage)
    }
}

/// One count as read.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Count {
    /// Absent or `null`.
    #[default]
    Absent,
    Valid(u64),
    /// Read twice, or not an integer from 0 to [`MAX_TOKENS`].
    Bad,
}

impl Count {
    fn required(self) -> Option<u64> {
        match self {
            Count::Valid(count) => Some(count),
            Count::Absent | Count::Bad => None,
        }
    }

    fn optional(self) -> Option<u64> {
        match self {
            Count::Valid(count) => Some(count),
            Count::Absent => Some(0),
            Count::Bad => None,
        }
    }

    /// `self` given a value read again for the same member.
    fn set(&mut self, read: Count, seen: &mut bool) {
        *self = if std::mem::replace(seen, true) {
            Count::Bad
        } else {
            read
        };
    }
}

/// What a [`KindOf`] reads an object's members into.
trait Members: Default + Sized {
    /// Reads the value of member `key`.
    fn member<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error>;
}

/// An object's members read: `Ok(Some)` an object, `Ok(None)` `null`, `Err(())` another kind.
type Read<T> = Result<Option<T>, ()>;

/// A detail object (`input_tokens_details`, `output_tokens_details`) read for its one count.
#[derive(Debug, Default)]
struct Detail<const CACHED: bool> {
    count: Count,
    seen: bool,
}

impl<const CACHED: bool> Members for Detail<CACHED> {
    fn member<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        let wanted = if CACHED {
            "cached_tokens"
        } else {
            "reasoning_tokens"
        };
        if key == wanted {
            let read = map.next_value::<CountValue>()?.0;
            self.count.set(read, &mut self.seen);
        } else {
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }
}

impl Members for Object {
    fn member<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "input_tokens" => {
                let read = map.next_value::<CountValue>()?.0;
                self.input.set(read, &mut self.seen[0]);
            }
            "output_tokens" => {
                let read = map.next_value::<CountValue>()?.0;
                self.output.set(read, &mut self.seen[1]);
            }
            "input_tokens_details" => {
                let detail = map.next_value::<DetailValue<true>>()?.0;
                self.detail(detail, true);
            }
            "output_tokens_details" => {
                let detail = map.next_value::<DetailValue<false>>()?.0;
                self.detail(detail, false);
            }
            _ => {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

impl Object {
    /// Takes a details object's count; details that are not an object (nor `null`) make the
    /// usage bad, as do details read twice.
    fn detail<const CACHED: bool>(&mut self, detail: Read<Detail<CACHED>>, cached: bool) {
        let (slot, seen) = match cached {
            true => (&mut self.cached_input, &mut self.seen[2]),
            false => (&mut self.reasoning_output, &mut self.seen[3]),
        };
        match detail {
            Err(()) => self.bad = true,
            Ok(None) => slot.set(Count::Absent, seen),
            Ok(Some(detail)) => slot.set(detail.count, seen),
        }
    }
}

/// A details member's value: an object, `null`, or another kind (bad).
struct DetailValue<const CACHED: bool>(Read<Detail<CACHED>>);

impl<'de, const CACHED: bool> Deserialize<'de> for DetailValue<CACHED> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(KindOf::<Detail<CACHED>>::default())
            .map(DetailValue)
    }
}

/// Reads an object into `T`, `null` as `Ok(None)`, any other kind as `Err(())`.
#[derive(Debug)]
struct KindOf<T>(std::marker::PhantomData<T>);

impl<T> Default for KindOf<T> {
    fn default() -> Self {
        KindOf(std::marker::PhantomData)
    }
}

impl<'de, T: Members> Visitor<'de> for KindOf<T> {
    type Value = Read<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = T::default();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            members.member(&key, &mut map)?;
        }
        Ok(Ok(Some(members)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Err(()))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(Ok(None))
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(Ok(None))
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Err(()))
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Err(()))
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Err(()))
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Err(()))
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Err(()))
    }
}

/// A count member's value: an integer from 0 to [`MAX_TOKENS`], `null`, or anything else
/// (bad).
struct CountValue(Count);

impl<'de> Deserialize<'de> for CountValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(CountVisitor).map(CountValue)
    }
}

struct CountVisitor;

impl<'de> Visitor<'de> for CountVisitor {
    type Value = Count;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_u64<E: serde::de::Error>(self, count: u64) -> Result<Count, E> {
        Ok(if count <= MAX_TOKENS {
            Count::Valid(count)
        } else {
            Count::Bad
        })
    }

    fn visit_i64<E: serde::de::Error>(self, count: i64) -> Result<Count, E> {
        match u64::try_from(count) {
            Ok(count) => self.visit_u64(count),
            Err(_) => Ok(Count::Bad),
        }
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Count, E> {
        Ok(Count::Bad)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Count, E> {
        Ok(Count::Absent)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Count, E> {
        Ok(Count::Absent)
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Count, E> {
        Ok(Count::Bad)
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Count, E> {
        Ok(Count::Bad)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Count, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Count::Bad)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Count, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Count::Bad)
    }
}
