//! [`CallIds`]: the `call_id`s of a request's calls, kept in one buffer.

use std::fmt;

use serde::de::{SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A list of `call_id`s packed into one text: two allocations however many calls a history
/// holds (a long agent session replays hundreds). Stored, it is a JSON array of strings.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct CallIds {
    /// Every id, one after another.
    text: String,
    /// Where each id ends in `text`.
    ends: Vec<usize>,
}

impl CallIds {
    /// Appends `id`.
    pub fn push(&mut self, id: &str) {
        self.text.push_str(id);
        self.ends.push(self.text.len());
    }

    /// The ids, in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> + Clone + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(start, &end)| &self.text[start..end])
    }

    /// How many ids there are.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Roughly the memory it holds, in bytes.
    pub fn footprint(&self) -> usize {
        self.text.capacity() + self.ends.capacity() * std::mem::size_of::<usize>()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
}

impl<S: AsRef<str>> FromIterator<S> for CallIds {
    fn from_iter<I: IntoIterator<Item = S>>(ids: I) -> CallIds {
        let mut packed = CallIds::default();
        ids.into_iter().for_each(|id| packed.push(id.as_ref()));
        packed
    }
}

impl fmt::Debug for CallIds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for CallIds {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for CallIds {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<CallIds, D::Error> {
        deserializer.deserialize_seq(CallIdsVisitor)
    }
}

struct CallIdsVisitor;

impl<'de> Visitor<'de> for CallIdsVisitor {
    type Value = CallIds;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of call ids")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<CallIds, A::Error> {
        let mut ids = CallIds::default();
        while let Some(id) = seq.next_element::<std::borrow::Cow<'de, str>>()? {
            ids.push(&id);
        }
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_read_back_in_order_empty_ones_included() {
        let ids: CallIds = ["call_1", "", "call_\"3\""].into_iter().collect();
        assert_eq!(ids.len(), 3);
        assert_eq!(ids.iter().collect::<Vec<_>>(), ["call_1", "", "call_\"3\""]);
        assert_eq!(format!("{ids:?}"), r#"["call_1", "", "call_\"3\""]"#);
        assert!(CallIds::default().is_empty());
        assert_eq!(CallIds::default().iter().count(), 0);
    }

    #[test]
    fn stored_as_a_json_array_of_strings() {
        let ids: CallIds = ["a", "b\u{e9}"].into_iter().collect();
        let json = serde_json::to_string(&ids).unwrap();
        assert_eq!(json, r#"["a","bé"]"#);
        assert_eq!(
            serde_json::from_str::<CallIds>(r#"["a","b\u00e9"]"#).unwrap(),
            ids
        );
        assert!(serde_json::from_str::<CallIds>(r#"["a",1]"#).is_err());
        assert!(serde_json::from_str::<CallIds>(r#""a""#).is_err());
    }
}
