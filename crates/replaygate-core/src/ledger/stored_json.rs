//! The stored form of a record, written directly: the same bytes as `serde_json::to_vec` of
//! [`StoredResponse`] and [`StoredItem`] (a test holds the two to each other), without
//! serde_json's byte-at-a-time escape scan of every text. A record is mostly ids, call ids and
//! hex digests, none of which needs an escape; a text that does is escaped by serde_json.

use super::record::ItemRecord;
use super::stored::{Owner, StoredContent, StoredItem, StoredResponse};

impl StoredResponse {
    /// About the length of [`StoredResponse::to_json`], without encoding it: its texts and the
    /// room its fixed parts take (a text that needs escapes makes the encoding longer).
    pub fn json_len_hint(&self) -> usize {
        let texts = self.id.len()
            + owner_len(&self.owner)
            + opt_len(&self.team)
            + opt_len(&self.previous_response_id)
            + self.items.iter().map(item_record_len).sum::<usize>()
            + self.input_call_ids.iter().map(|id| id.len() + 3).sum::<usize>()
            + self.content.as_ref().map_or(0, content_len);
        texts + 256
    }

    /// The response's stored form (its JSON).
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.json_len_hint());
        out.extend_from_slice(b"{\"id\":");
        put_str(&mut out, &self.id);
        out.extend_from_slice(b",\"owner\":");
        put_owner(&mut out, &self.owner);
        out.extend_from_slice(b",\"team\":");
        put_opt(&mut out, self.team.as_deref());
        out.extend_from_slice(b",\"created_unix\":");
        put_u64(&mut out, self.created_unix);
        out.extend_from_slice(b",\"expires_unix\":");
        put_u64(&mut out, self.expires_unix);
        out.extend_from_slice(b",\"previous_response_id\":");
        put_opt(&mut out, self.previous_response_id.as_deref());
        out.extend_from_slice(b",\"items\":[");
        for (index, item) in self.items.iter().enumerate() {
            if index > 0 {
                out.push(b',');
            }
            put_item_record(&mut out, item);
        }
        out.push(b']');
        if !self.input_call_ids.is_empty() {
            out.extend_from_slice(b",\"input_call_ids\":");
            put_strs(&mut out, self.input_call_ids.iter());
        }
        out.extend_from_slice(b",\"content\":");
        match &self.content {
            None => out.extend_from_slice(b"null"),
            Some(StoredContent { input, output }) => {
                out.extend_from_slice(b"{\"input\":");
                put_strs(&mut out, input.iter().map(String::as_str));
                out.extend_from_slice(b",\"output\":");
                put_strs(&mut out, output.iter().map(String::as_str));
                out.push(b'}');
            }
        }
        if self.owner_only {
            out.extend_from_slice(b",\"owner_only\":true");
        }
        if self.partial {
            out.extend_from_slice(b",\"partial\":true");
        }
        if self.not_stored {
            out.extend_from_slice(b",\"not_stored\":true");
        }
        out.push(b'}');
        out
    }
}

impl StoredItem {
    /// The index entry's stored form (its JSON).
    pub fn to_json(&self) -> Vec<u8> {
        let texts = self.response_id.len()
            + owner_len(&self.owner)
            + item_record_len(&self.record)
            + opt_len(&self.team);
        let mut out = Vec::with_capacity(texts + 192);
        out.extend_from_slice(b"{\"response_id\":");
        put_str(&mut out, &self.response_id);
        out.extend_from_slice(b",\"owner\":");
        put_owner(&mut out, &self.owner);
        out.extend_from_slice(b",\"record\":");
        put_item_record(&mut out, &self.record);
        out.extend_from_slice(b",\"expires_unix\":");
        put_u64(&mut out, self.expires_unix);
        if let Some(team) = &self.team {
            out.extend_from_slice(b",\"team\":");
            put_str(&mut out, team);
        }
        if self.not_stored {
            out.extend_from_slice(b",\"not_stored\":true");
        }
        out.push(b'}');
        out
    }
}

fn opt_len(text: &Option<String>) -> usize {
    text.as_ref().map_or(0, String::len)
}

fn owner_len(owner: &Owner) -> usize {
    owner.provider.len() + opt_len(&owner.model) + 32
}

fn item_record_len(item: &ItemRecord) -> usize {
    opt_len(&item.id) + item.item_type.len() + opt_len(&item.call_id) + opt_len(&item.preceded_by) + 176
}

fn content_len(content: &StoredContent) -> usize {
    content
        .input
        .iter()
        .chain(&content.output)
        .map(|text| text.len() + 3)
        .sum::<usize>()
        + 24
}

fn put_owner(out: &mut Vec<u8>, owner: &Owner) {
    out.extend_from_slice(b"{\"provider\":");
    put_str(out, &owner.provider);
    out.extend_from_slice(b",\"model\":");
    put_opt(out, owner.model.as_deref());
    out.push(b'}');
}

fn put_item_record(out: &mut Vec<u8>, item: &ItemRecord) {
    out.extend_from_slice(b"{\"id\":");
    put_opt(out, item.id.as_deref());
    out.extend_from_slice(b",\"item_type\":");
    put_str(out, &item.item_type);
    out.extend_from_slice(b",\"call_id\":");
    put_opt(out, item.call_id.as_deref());
    out.extend_from_slice(b",\"digest\":\"");
    let mut hex = [0u8; 64];
    hex::encode_to_slice(item.digest, &mut hex).expect("64 hex digits hold 32 bytes");
    out.extend_from_slice(&hex);
    out.extend_from_slice(b"\",\"has_encrypted_content\":");
    out.extend_from_slice(if item.has_encrypted_content {
        b"true"
    } else {
        b"false"
    });
    if let Some(reasoning) = &item.preceded_by {
        out.extend_from_slice(b",\"preceded_by\":");
        put_str(out, reasoning);
    }
    out.push(b'}');
}

fn put_strs<'t>(out: &mut Vec<u8>, texts: impl Iterator<Item = &'t str>) {
    out.push(b'[');
    for (index, text) in texts.enumerate() {
        if index > 0 {
            out.push(b',');
        }
        put_str(out, text);
    }
    out.push(b']');
}

fn put_opt(out: &mut Vec<u8>, text: Option<&str>) {
    match text {
        Some(text) => put_str(out, text),
        None => out.extend_from_slice(b"null"),
    }
}

fn put_u64(out: &mut Vec<u8>, number: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(number).as_bytes());
}

/// A JSON string: copied between quotes when no byte of it needs an escape, else escaped as
/// serde_json escapes it.
fn put_str(out: &mut Vec<u8>, text: &str) {
    if needs_escape(text.as_bytes()) {
        serde_json::to_writer(&mut *out, text).expect("a string always serializes");
    } else {
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    }
}

/// Whether serde_json would escape a byte of `bytes`: a control character, `"` or `\`.
/// Folded without an early exit, so the compiler tests many bytes per instruction.
fn needs_escape(bytes: &[u8]) -> bool {
    bytes.iter().fold(false, |found, &byte| {
        found | (byte < 0x20) | (byte == b'"') | (byte == b'\\')
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-zA-Z0-9_]{0,40}",
            "\\PC{0,20}",
            ".{0,12}",
            "[\"\\\\\u{0}-\u{1f}\u{7f}é/]{0,8}",
        ]
    }

    fn item_record() -> impl Strategy<Value = ItemRecord> {
        (
            proptest::option::of(text()),
            text(),
            proptest::option::of(text()),
            any::<[u8; 32]>(),
            any::<bool>(),
            proptest::option::of(text()),
        )
            .prop_map(
                |(id, item_type, call_id, digest, has_encrypted_content, preceded_by)| ItemRecord {
                    id,
                    item_type: item_type.into(),
                    call_id,
                    digest,
                    has_encrypted_content,
                    preceded_by,
                },
            )
    }

    fn owner() -> impl Strategy<Value = Owner> {
        (text(), proptest::option::of(text())).prop_map(|(provider, model)| Owner { provider, model })
    }

    fn stored_response() -> impl Strategy<Value = StoredResponse> {
        let content = proptest::option::of(
            (
                proptest::collection::vec(text(), 0..3),
                proptest::collection::vec(text(), 0..3),
            )
                .prop_map(|(input, output)| StoredContent { input, output }),
        );
        (
            (
                text(),
                owner(),
                proptest::option::of(text()),
                any::<u64>(),
                any::<u64>(),
            ),
            proptest::option::of(text()),
            proptest::collection::vec(item_record(), 0..4),
            proptest::collection::vec(text(), 0..4),
            content,
            (any::<bool>(), any::<bool>(), any::<bool>()),
        )
            .prop_map(
                |(
                    (id, owner, team, created_unix, expires_unix),
                    previous_response_id,
                    items,
                    input_call_ids,
                    content,
                    (owner_only, partial, not_stored),
                )| {
                    StoredResponse {
                        id,
                        owner,
                        team,
                        created_unix,
                        expires_unix,
                        previous_response_id,
                        items,
                        input_call_ids: input_call_ids.into_iter().collect(),
                        content,
                        owner_only,
                        partial,
                        not_stored,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn a_stored_response_is_written_as_serde_json_writes_it(response in stored_response()) {
            prop_assert_eq!(
                String::from_utf8(response.to_json()).unwrap(),
                serde_json::to_string(&response).unwrap()
            );
        }

        #[test]
        fn a_stored_item_is_written_as_serde_json_writes_it(
            response_id in text(),
            owner in owner(),
            record in item_record(),
            expires_unix in any::<u64>(),
            team in proptest::option::of(text()),
            not_stored in any::<bool>(),
        ) {
            let item = StoredItem { response_id, owner, record, expires_unix, team, not_stored };
            prop_assert_eq!(
                String::from_utf8(item.to_json()).unwrap(),
                serde_json::to_string(&item).unwrap()
            );
        }
    }

    #[test]
    fn texts_that_need_an_escape_are_escaped() {
        for text in ["a\"b", "back\\slash", "line\nbreak", "\u{1}", "tab\t"] {
            assert!(needs_escape(text.as_bytes()), "{text:?}");
            let mut out = Vec::new();
            put_str(&mut out, text);
            assert_eq!(out, serde_json::to_vec(text).unwrap());
        }
        for text in ["", "call_Qm9vYmFy", "é/ü\u{7f}", "resp_68af2c1b"] {
            assert!(!needs_escape(text.as_bytes()), "{text:?}");
        }
    }
}
