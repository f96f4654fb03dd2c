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

/// Appends `bytes` preceded by their length.
pub(crate) fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// Appends a string value (`s` and its length-prefixed bytes).
pub(crate) fn put_str(out: &mut Vec<u8>, text: &str) {
    out.push(b's');
    put_bytes(out, text.as_bytes());
}

/// Appends a value that may be absent.
pub(crate) fn put_opt(out: &mut Vec<u8>, value: Option<&Value>) {
    match value {
        None => out.push(b'-'),
        Some(value) => put_value(out, value),
    }
}

/// Appends one JSON value.
pub(crate) fn put_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.push(b'n'),
        Value::Bool(true) => out.push(b't'),
        Value::Bool(false) => out.push(b'f'),
        Value::Number(number) => {
            out.push(b'd');
            put_bytes(out, number.to_string().as_bytes());
        }
        Value::String(text) => put_str(out, text),
        Value::Array(values) => {
            out.push(b'a');
            out.extend_from_slice(&(values.len() as u64).to_be_bytes());
            for value in values {
                put_value(out, value);
            }
        }
        Value::Object(members) => put_members(out, members.iter()),
    }
}

/// Appends an object made of `members` (any order; they are sorted here).
pub(crate) fn put_members<'v>(out: &mut Vec<u8>, members: impl Iterator<Item = (&'v String, &'v Value)>) {
    let mut members: Vec<_> = members.collect();
    members.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    out.push(b'o');
    out.extend_from_slice(&(members.len() as u64).to_be_bytes());
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
