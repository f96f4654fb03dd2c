//! What the ledger records of one output item and who produced it (docs/ledger.md), and the
//! digest of an item: the facts the provenance rules read. They are plain data the gate
//! defines, so the gate needs nothing of the ledger; the ledger reads them from answers and
//! stores them (docs/architecture.md, "The core crate").

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::canon::{put_bytes, put_members, put_opt, put_str, put_str_parts, Digesting, Sink};

/// The shortest item `id` the ledger indexes and looks up. Providers that mint ids of their
/// own make them long and random (OpenAI's are over 50 bytes); Bedrock Mantle numbers items per
/// response (`rs_0`, `fc_1`, `msg_0` in every turn), so a short id names no single item across
/// sessions, and judging by it would refuse valid traffic.
pub const MIN_ITEM_ID_BYTES: usize = 16;

/// Whether an item `id` can name one item across sessions (see [`MIN_ITEM_ID_BYTES`]).
pub fn names_one_item(id: &str) -> bool {
    id.len() >= MIN_ITEM_ID_BYTES
}

/// The longest response id, model, item id, item type or `call_id` the ledger records, in
/// bytes. An answer whose response id is longer is not recorded; one with a longer item id,
/// model, item type or `call_id` is recorded by its response id alone.
pub const MAX_ID_BYTES: usize = 256;

/// Who produced a recorded response or item: the provider it was routed to and the model
/// that answered.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Owner {
    /// The configured provider name.
    pub provider: String,
    /// The model the provider answered with (else the request's), when known.
    pub model: Option<String>,
}

/// The index entry of one recorded output item: what it is and who produced it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StoredItem {
    /// The response whose output held it.
    pub response_id: String,
    /// Who produced it.
    pub owner: Owner,
    /// The item as recorded.
    pub record: ItemRecord,
    /// When the store may forget it (its response's `expires_unix`).
    pub expires_unix: u64,
    /// The team whose request its response answered (`None`: anonymous).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    /// Its response was answered `store: false`: the provider keeps nothing of it
    /// (docs/reasons.md#state_not_stored). Absent in records written before it was kept (read
    /// as stored).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub not_stored: bool,
}

/// What the ledger keeps of one output item. Never a text, an argument or an
/// `encrypted_content` value: only their digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ItemRecord {
    /// The item `id`, when it has one.
    pub id: Option<String>,
    /// The item `type` (the usual types without an allocation of their own).
    pub item_type: Cow<'static, str>,
    /// The item `call_id`, when it has one.
    pub call_id: Option<String>,
    /// The SHA-256 of the fields that matter; see [`item_digest`]. Hex in the stored form.
    #[serde(with = "hex_digest")]
    pub digest: [u8; 32],
    /// Whether the item carries `encrypted_content` (present and not `null`).
    pub has_encrypted_content: bool,
    /// The `id` of the reasoning item directly before this one in its response's output, when
    /// there is one: the provider wants it sent back before this item. Absent in records
    /// written before it was kept (read as `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preceded_by: Option<String>,
}

/// A digest as 64 lowercase hex digits.
mod hex_digest {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(digest: &[u8; 32], serializer: S) -> Result<S::Ok, S::Error> {
        // Written into a buffer on the stack: no allocation, no character at a time.
        let mut text = [0u8; 64];
        hex::encode_to_slice(digest, &mut text).map_err(serde::ser::Error::custom)?;
        serializer.serialize_str(std::str::from_utf8(&text).map_err(serde::ser::Error::custom)?)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<[u8; 32], D::Error> {
        let text = <&str>::deserialize(deserializer)?;
        let mut digest = [0u8; 32];
        hex::decode_to_slice(text, &mut digest).map_err(D::Error::custom)?;
        Ok(digest)
    }
}

/// What every digested encoding starts with (length-prefixed), so a digest of an item can
/// never equal the digest of anything else hashed the same way.
pub(crate) const DOMAIN: &[u8] = b"replaygate item digest v1";

/// Reads one output item. `None` when it is not an object with a string `type`, when `id` or
/// `call_id` is neither a string nor `null`, or when `type`, `id` or `call_id` is longer than
/// [`MAX_ID_BYTES`].
pub fn item_record(item: &RawValue) -> Option<ItemRecord> {
    if let Some(quick) = super::quick::quick_item(item.get()) {
        return Some(quick.record);
    }
    let value: Value = serde_json::from_str(item.get()).ok()?;
    item_record_from_value(&value)
}

/// [`item_record`] for an item already parsed.
pub fn item_record_from_value(item: &Value) -> Option<ItemRecord> {
    let members = item.as_object()?;
    let item_type = members.get("type")?.as_str()?;
    let id = optional_id(members, "id")?;
    let call_id = optional_id(members, "call_id")?;
    if item_type.len() > MAX_ID_BYTES {
        return None;
    }
    Some(ItemRecord {
        id,
        item_type: type_name(item_type),
        call_id,
        digest: item_digest(item_type, members),
        has_encrypted_content: members.get("encrypted_content").is_some_and(|v| !v.is_null()),
        preceded_by: None,
    })
}

/// Notes on each of `items` (one response's output items, in output order) the `id` of the
/// reasoning item directly before it, if any ([`ItemRecord::preceded_by`]).
pub fn link_reasoning(items: &mut [ItemRecord]) {
    for at in 1..items.len() {
        let (before, rest) = items.split_at_mut(at);
        let previous = &before[at - 1];
        rest[0].preceded_by = match previous.item_type == "reasoning" {
            true => previous.id.clone(),
            false => None,
        };
    }
}

/// The item types answers are made of, whose digest needs only a few members (see
/// [`item_digest`]).
pub(crate) const ANSWER_TYPES: [&str; 4] = ["function_call", "message", "reasoning", "compaction"];

/// An item `type` as a record holds it: one of [`ANSWER_TYPES`] is not copied.
pub(crate) fn type_name(item_type: &str) -> Cow<'static, str> {
    match ANSWER_TYPES.iter().find(|known| **known == item_type) {
        Some(known) => Cow::Borrowed(known),
        None => Cow::Owned(item_type.to_owned()),
    }
}

/// `Some(None)` when absent or `null`, `Some(Some(id))` for a string of at most
/// [`MAX_ID_BYTES`], `None` otherwise.
fn optional_id(members: &Map<String, Value>, name: &str) -> Option<Option<String>> {
    match members.get(name) {
        None | Some(Value::Null) => Some(None),
        Some(Value::String(id)) if id.len() <= MAX_ID_BYTES => Some(Some(id.clone())),
        Some(_) => None,
    }
}

/// The SHA-256 of an item's fields that matter, in the canonical encoding of the `canon`
/// module: the domain tag and the `type`, both length-prefixed, then by type
///
/// - `function_call`: `name`, `arguments`, `call_id` (each as a value, `-` when absent);
/// - `message`: its text, one string value: `content` itself when it is a string, otherwise
///   the concatenation, in order, of each content part's `text` (or, for a part without a
///   string `text`, its string `refusal`); `-` when `content` is absent or of another type;
/// - `reasoning`, `compaction`: `encrypted_content`;
/// - any other type: the whole item as one object without its `id` and `status` members.
///
/// So the same item re-serialised with other member order, whitespace or string escapes has
/// the same digest, and `id`/`status` (which a client may drop when it replays) never count.
pub fn item_digest(item_type: &str, members: &Map<String, Value>) -> [u8; 32] {
    let mut out = Digesting::new();
    put_bytes(&mut out, DOMAIN);
    put_bytes(&mut out, item_type.as_bytes());
    match item_type {
        "function_call" => {
            for name in ["name", "arguments", "call_id"] {
                put_opt(&mut out, members.get(name));
            }
        }
        "message" => match members.get("content") {
            Some(Value::String(text)) => put_str(&mut out, text),
            Some(Value::Array(parts)) => put_str_parts(&mut out, message_texts(parts)),
            _ => out.put(b"-"),
        },
        "reasoning" | "compaction" => put_opt(&mut out, members.get("encrypted_content")),
        _ => put_members(
            &mut out,
            members
                .iter()
                .filter(|(name, _)| !matches!(name.as_str(), "id" | "status")),
        ),
    }
    out.finish()
}

/// The texts of a message's content parts, in order: each part's string `text`, or else its
/// string `refusal`.
fn message_texts(parts: &[Value]) -> impl Iterator<Item = &str> + Clone {
    parts.iter().filter_map(|part| {
        let part_text = part.get("text").and_then(Value::as_str);
        part_text.or_else(|| part.get("refusal").and_then(Value::as_str))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_is_stored_as_64_lowercase_hex_digits_and_read_back() {
        let mut digest = [0u8; 32];
        for (i, byte) in digest.iter_mut().enumerate() {
            *byte = (i as u8).wrapping_mul(37) ^ 0xa5;
        }
        let item = ItemRecord {
            id: Some("fc_1".to_owned()),
            item_type: "function_call".into(),
            call_id: None,
            digest,
            has_encrypted_content: false,
            preceded_by: None,
        };
        let stored = serde_json::to_value(&item).unwrap();
        let text = stored["digest"].as_str().unwrap();
        assert_eq!(text.len(), 64);
        assert!(
            text.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
            "{text}"
        );
        assert_eq!(&text[..4], "a580", "{text}");
        let read: ItemRecord = serde_json::from_str(&stored.to_string()).unwrap();
        assert_eq!(read, item);
        let bad = stored.to_string().replace(text, "zz");
        assert!(serde_json::from_str::<ItemRecord>(&bad).is_err());
    }

    fn record(json: &str) -> Option<ItemRecord> {
        let raw: Box<RawValue> = serde_json::from_str(json).unwrap();
        item_record(&raw)
    }

    fn digest(json: &str) -> [u8; 32] {
        record(json).unwrap().digest
    }

    const CALL: &str = r#"{"type":"function_call","id":"fc_1","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}","status":"completed"}"#;

    #[test]
    fn answer_types_are_held_without_a_copy_and_others_as_written() {
        for known in ANSWER_TYPES {
            assert!(matches!(type_name(known), Cow::Borrowed(name) if name == known));
        }
        assert!(matches!(type_name("web_search_call"), Cow::Owned(name) if name == "web_search_call"));
        assert!(matches!(type_name("Message"), Cow::Owned(name) if name == "Message"));
    }

    #[test]
    fn a_function_call_is_recorded() {
        let record = record(CALL).unwrap();
        assert_eq!(record.id.as_deref(), Some("fc_1"));
        assert_eq!(record.item_type, "function_call");
        assert_eq!(record.call_id.as_deref(), Some("call_1"));
        assert!(!record.has_encrypted_content);
    }

    #[test]
    fn the_same_item_in_another_order_and_layout_has_the_same_digest() {
        let replayed = r#"{
            "arguments": "{\"city\":\"Paris\"}",
            "name": "get_weather",
            "call_id": "call_1",
            "type": "function_call"
        }"#;
        assert_eq!(digest(CALL), digest(replayed));
    }

    #[test]
    fn changed_arguments_name_or_call_id_change_the_digest() {
        let base = digest(CALL);
        assert_ne!(base, digest(&CALL.replace("Paris", "Lyon")));
        assert_ne!(base, digest(&CALL.replace("get_weather", "get_time")));
        assert_ne!(base, digest(&CALL.replace("\"call_1\"", "\"call_2\"")));
        // The same arguments object with other spacing is another string: another digest.
        assert_ne!(
            base,
            digest(&CALL.replace(r#"{\"city\":\"Paris\"}"#, r#"{\"city\": \"Paris\"}"#))
        );
    }

    #[test]
    fn a_message_digest_is_its_text() {
        let message = r#"{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Hello, ","annotations":[]},{"type":"output_text","text":"world"}]}"#;
        let as_string = r#"{"type":"message","role":"assistant","content":"Hello, world"}"#;
        assert_eq!(digest(message), digest(as_string));
        assert_ne!(digest(message), digest(&message.replace("world", "there")));
        let refusal = r#"{"type":"message","content":[{"type":"refusal","refusal":"No"}]}"#;
        assert_ne!(digest(refusal), digest(r#"{"type":"message","content":[]}"#));
    }

    #[test]
    fn reasoning_digest_is_its_encrypted_content() {
        let reasoning = r#"{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"}"#;
        let record = record(reasoning).unwrap();
        assert!(record.has_encrypted_content);
        let resummarised = r#"{"type":"reasoning","summary":[{"type":"summary_text","text":"x"}],"encrypted_content":"gAAA"}"#;
        assert_eq!(record.digest, digest(resummarised));
        assert_ne!(record.digest, digest(&reasoning.replace("gAAA", "gAAB")));
        assert!(
            !self::record(r#"{"type":"reasoning","encrypted_content":null}"#)
                .unwrap()
                .has_encrypted_content
        );
    }

    #[test]
    fn the_type_is_part_of_the_digest() {
        assert_ne!(
            digest(r#"{"type":"reasoning","encrypted_content":"x"}"#),
            digest(r#"{"type":"compaction","encrypted_content":"x"}"#)
        );
    }

    #[test]
    fn other_items_digest_all_but_id_and_status() {
        let search = r#"{"type":"web_search_call","id":"ws_1","status":"completed","action":{"type":"search","query":"q"}}"#;
        let replayed = r#"{"action":{"query":"q","type":"search"},"type":"web_search_call"}"#;
        assert_eq!(digest(search), digest(replayed));
        assert_ne!(digest(search), digest(&search.replace("\"q\"", "\"r\"")));
    }

    #[test]
    fn items_without_a_string_type_or_with_bad_ids_are_not_recorded() {
        assert!(record(r#"{"id":"x"}"#).is_none());
        assert!(record(r#"{"type":1}"#).is_none());
        assert!(record(r#"[]"#).is_none());
        assert!(record(r#"null"#).is_none());
        assert!(record(r#"{"type":"message","id":5}"#).is_none());
        let long = "x".repeat(MAX_ID_BYTES + 1);
        assert!(record(&format!(r#"{{"type":"message","id":"{long}"}}"#)).is_none());
        assert!(record(&format!(r#"{{"type":"function_call","call_id":"{long}"}}"#)).is_none());
        assert!(record(&format!(r#"{{"type":"{long}"}}"#)).is_none());
        let longest = "x".repeat(MAX_ID_BYTES);
        assert!(record(&format!(r#"{{"type":"message","id":"{longest}"}}"#)).is_some());
    }
}
