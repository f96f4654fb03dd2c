//! The canonical byte encoding that item digests are taken over.
//!
//! Every value is written so that no two different values share an encoding and no encoding is
//! the prefix of another (so a sequence of values reads back one way only):
//!
//! | value | bytes |
//! | --- | --- |
//! | absent | `-` |
//! | `null` | `n` |
//! | `true` / `false` | `t` / `f` |
//! | number | `d`, then its text (as serde_json prints it), length-prefixed |
//! | string | `s`, then its UTF-8 bytes (escapes decoded), length-prefixed |
//! | array | `a`, the element count (8 bytes, big-endian), then each element |
//! | object | `o`, the member count, then each member sorted by name bytes: the name length-prefixed, then its value |
//!
//! A length prefix is the byte count as 8 bytes, big-endian. Whitespace, member order and string
//! escapes of the JSON text therefore never change the encoding.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Where an encoding goes: a buffer, or straight into the hasher that digests it (no buffer
/// to allocate and grow per item).
pub(crate) trait Sink {
    /// Appends `bytes`.
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// The SHA-256 of an encoding, fed through a buffer on the stack: the encoding's many small
/// pieces (length prefixes, tags) reach the hasher in a few large updates, and nothing is
/// allocated.
pub(crate) struct Digesting {
    hasher: Sha256,
    staged: [u8; STAGED_BYTES],
    len: usize,
}

/// What [`Digesting`] holds before it hashes (an item's encoding is usually smaller).
const STAGED_BYTES: usize = 256;

impl Digesting {
    pub(crate) fn new() -> Digesting {
        Digesting {
            hasher: Sha256::new(),
            staged: [0; STAGED_BYTES],
            len: 0,
        }
    }

    /// The digest of everything put.
    pub(crate) fn finish(mut self) -> [u8; 32] {
        self.flush();
        self.hasher.finalize().into()
    }

    fn flush(&mut self) {
        self.hasher.update(&self.staged[..self.len]);
        self.len = 0;
    }
}

impl Sink for Digesting {
    fn put(&mut self, bytes: &[u8]) {
        if self.len + bytes.len() > STAGED_BYTES {
            self.flush();
            if bytes.len() > STAGED_BYTES {
                self.hasher.update(bytes);
                return;
            }
        }
        self.staged[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }
}

/// Appends `bytes` preceded by their length.
pub(crate) fn put_bytes(out: &mut impl Sink, bytes: &[u8]) {
    out.put(&(bytes.len() as u64).to_be_bytes());
    out.put(bytes);
}

/// Appends a string value (`s` and its length-prefixed bytes).
pub(crate) fn put_str(out: &mut impl Sink, text: &str) {
    put_str_parts(out, std::iter::once(text));
}

/// Appends a string value made of `parts`, concatenated, without joining them first (`s`, the
/// parts' total length, then each part's bytes).
pub(crate) fn put_str_parts<'t>(out: &mut impl Sink, parts: impl Iterator<Item = &'t str> + Clone) {
    let len: usize = parts.clone().map(str::len).sum();
    out.put(b"s");
    out.put(&(len as u64).to_be_bytes());
    parts.for_each(|part| out.put(part.as_bytes()));
}

/// Appends a value that may be absent.
pub(crate) fn put_opt(out: &mut impl Sink, value: Option<&Value>) {
    match value {
        None => out.put(b"-"),
        Some(value) => put_value(out, value),
    }
}

/// Appends one JSON value.
pub(crate) fn put_value(out: &mut impl Sink, value: &Value) {
    match value {
        Value::Null => out.put(b"n"),
        Value::Bool(true) => out.put(b"t"),
        Value::Bool(false) => out.put(b"f"),
        Value::Number(number) => {
            out.put(b"d");
            put_bytes(out, number.to_string().as_bytes());
        }
        Value::String(text) => put_str(out, text),
        Value::Array(values) => {
            out.put(b"a");
            out.put(&(values.len() as u64).to_be_bytes());
            for value in values {
                put_value(out, value);
            }
        }
        Value::Object(members) => put_members(out, members.iter()),
    }
}

/// Appends an object made of `members` (any order; they are sorted here).
pub(crate) fn put_members<'v>(out: &mut impl Sink, members: impl Iterator<Item = (&'v String, &'v Value)>) {
    let mut members: Vec<_> = members.collect();
    members.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    out.put(b"o");
    out.put(&(members.len() as u64).to_be_bytes());
    for (name, value) in members {
        put_bytes(out, name.as_bytes());
        put_value(out, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(json: &str) -> Vec<u8> {
        let mut out = Vec::new();
        put_value(&mut out, &serde_json::from_str(json).unwrap());
        out
    }

    #[test]
    fn digesting_through_the_stage_is_the_digest_of_the_whole_encoding() {
        for sizes in [
            &[][..],
            &[3, 8, 1],
            &[255, 1, 1],
            &[256],
            &[257, 2],
            &[100, 300, 7, 256, 255],
        ] {
            let pieces: Vec<Vec<u8>> = sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| (0..n).map(|j| (i * 31 + j) as u8).collect())
                .collect();
            let mut digesting = Digesting::new();
            pieces.iter().for_each(|piece| digesting.put(piece));
            let whole: Vec<u8> = pieces.concat();
            assert_eq!(
                digesting.finish(),
                <[u8; 32]>::from(Sha256::digest(&whole)),
                "{sizes:?}"
            );
        }
    }

    #[test]
    fn member_order_whitespace_and_escapes_do_not_matter() {
        assert_eq!(
            encode(r#"{"a":1,"b":[true,null]}"#),
            encode(r#"{ "b" : [ true , null ] , "a" : 1 }"#)
        );
        assert_eq!(encode(r#""A\n""#), encode(r#""\u0041\n""#));
    }

    #[test]
    fn different_values_encode_differently() {
        let values = [
            r#"null"#,
            r#"true"#,
            r#"false"#,
            r#"1"#,
            r#""1""#,
            r#"[]"#,
            r#"{}"#,
            r#"["ab","c"]"#,
            r#"["a","bc"]"#,
            r#"{"a":"b"}"#,
            r#"{"ab":""}"#,
            r#"[[]]"#,
            r#"[{}]"#,
        ];
        for (i, a) in values.iter().enumerate() {
            for b in &values[i + 1..] {
                assert_ne!(encode(a), encode(b), "{a} and {b}");
            }
        }
    }
}
