//! The reader held to serde_json: the same texts accepted and refused, the same values read,
//! on hand-picked edge cases and on generated texts (valid JSON, and valid JSON broken).

use proptest::prelude::*;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use serde_json::Value;

use super::{Category, Reader};

/// Values equal, floats within the rounding serde_json's fast float parser may differ by.
fn same_value(ours: &Value, theirs: &Value) -> bool {
    match (ours, theirs) {
        (Value::Number(a), Value::Number(b)) => match (a.as_f64(), b.as_f64()) {
            _ if a.is_f64() != b.is_f64() || a.is_i64() != b.is_i64() => false,
            (Some(x), Some(y)) if a.is_f64() => {
                x.to_bits() == y.to_bits() || ((x - y).abs() <= f64::EPSILON * x.abs().max(y.abs()))
            }
            _ => a == b,
        },
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_value(x, y))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|((ka, va), (kb, vb))| ka == kb && same_value(va, vb))
        }
        _ => ours == theirs,
    }
}

/// Asserts that the reader and serde_json agree on `text` read as a `Value`, skipped as
/// `IgnoredAny`, and taken as a `&RawValue`.
fn agrees(text: &str) {
    let ours = Reader::read::<Value>(text);
    let theirs = serde_json::from_str::<Value>(text);
    match (&ours, &theirs) {
        (Ok(a), Ok(b)) => assert!(same_value(a, b), "{text:?}: {a:?} vs {b:?}"),
        (Err(_), Err(_)) => {}
        _ => panic!("{text:?} as a value: ours {ours:?}, serde_json {theirs:?}"),
    }
    let ours = Reader::read::<IgnoredAny>(text).is_ok();
    let theirs = serde_json::from_str::<IgnoredAny>(text).is_ok();
    assert_eq!(ours, theirs, "{text:?} skipped");
    let ours = Reader::read::<&RawValue>(text).map(RawValue::get);
    let theirs = serde_json::from_str::<&RawValue>(text).map(RawValue::get);
    assert_eq!(
        ours.as_ref().ok(),
        theirs.as_ref().ok(),
        "{text:?} as a raw value"
    );
    let ours = Reader::read::<Box<RawValue>>(text).map(|raw| raw.get().to_owned());
    assert_eq!(ours.ok().as_deref(), theirs.ok(), "{text:?} as a boxed raw value");
}

#[test]
fn edge_cases_agree_with_serde_json() {
    let cases = [
        "",
        " ",
        "null",
        "true",
        "false",
        "nul",
        "truex",
        "tru",
        "0",
        "-0",
        "-0.0",
        "01",
        "-",
        "1.",
        "1e",
        "1e400",
        "-1e400",
        "1e-400",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775808",
        "-9223372036854775809",
        "1.5e3",
        "0.1",
        "123456789012345678901234567890",
        r#""""#,
        r#""a"#,
        r#""\"#,
        r#""\q""#,
        r#""\u12""#,
        r#""\u12G4""#,
        r#""\u00e9\n\t\/\b\f\r\\\"""#,
        r#""\ud83d\ude00""#,
        r#""\ud83d""#,
        r#""\ude00""#,
        r#""\ud83d\u0041""#,
        r#""\ud83dx""#,
        "\"a\u{1}b\"",
        "\"tab\there\"",
        "\"é€😀\"",
        "[]",
        "[ ]",
        "[1,]",
        "[,1]",
        "[1 2]",
        "[1,2",
        "{}",
        "{ }",
        r#"{"a":1,}"#,
        r#"{"a" 1}"#,
        r#"{"a":}"#,
        r#"{1:2}"#,
        r#"{"a":1"#,
        r#"{"a":1 "b":2}"#,
        r#"{"a":1} x"#,
        r#"{"a":1}   "#,
        "[[[]]]",
        "[{\"a\":[{\"b\":null}]}]",
        "\u{feff}{}",
        "{}\n",
        r#"{"a":{"b":[1,{"c":"\u0000"}]},"d":"x"}"#,
        "[\"\\uD834\\uDD1E\"]",
        "1 2",
        "[1]]",
        "{}}",
    ];
    for text in cases {
        agrees(text);
    }
}

#[test]
fn nesting_is_bounded_as_serde_json_bounds_it() {
    for depth in [126, 127, 128, 129, 1_000] {
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        agrees(&text);
    }
    // A million `[`: an error for visitors and for skipping, with no deep stack.
    let text = "[".repeat(1_000_000);
    let error = Reader::read::<Value>(&text).unwrap_err();
    assert_eq!(error.category(), Category::Syntax);
    assert!(error.to_string().contains("recursion limit exceeded"), "{error}");
    assert_eq!(
        Reader::read::<IgnoredAny>(&text).unwrap_err().category(),
        Category::Eof
    );
    let closed = format!("{}{}", "[".repeat(1_000_000), "]".repeat(1_000_000));
    assert!(Reader::read::<IgnoredAny>(&closed).is_ok());
    assert!(Reader::read::<&RawValue>(&closed).is_ok());
}

#[test]
fn strings_without_escapes_are_borrowed_and_errors_have_positions() {
    let text = r#"{"plain":["plain","esc\naped"]}"#;
    let map: std::collections::BTreeMap<&str, (&str, String)> = Reader::read(text).unwrap();
    let (plain, escaped) = &map["plain"];
    let within = text.as_ptr() as usize..text.as_ptr() as usize + text.len();
    assert!(*plain == "plain" && within.contains(&(plain.as_ptr() as usize)));
    assert_eq!(escaped, "esc\naped");
    // A borrowed string where the text has an escape cannot be had.
    assert_eq!(
        Reader::read::<&str>(r#""a\nb""#).unwrap_err().category(),
        Category::Data
    );
    let error = Reader::read::<Value>("{\n  \"a\": tru }").unwrap_err();
    assert_eq!((error.line(), error.category()), (2, Category::Syntax));
    let error = Reader::read::<Vec<u32>>("[1, \"x\"]").unwrap_err();
    assert_eq!(error.category(), Category::Data);
    assert!(error.line() == 1 && error.column() > 0, "{error}");
}

/// Arbitrary JSON values, strings drawn to include escapes, controls and non-ASCII text.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e300f64..1e300).prop_map(Value::from),
        "(\\PC|[\"\\\\\u{0}-\u{1f}]){0,40}".prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec(("(\\PC|[\"\\\\]){0,8}", inner), 0..8)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

/// A text broken in one place: a byte removed, replaced or inserted, or the text cut.
fn broken(text: String, at: usize, how: u8, byte: u8) -> String {
    let mut bytes = text.into_bytes();
    if bytes.is_empty() {
        return String::new();
    }
    let at = at % bytes.len();
    let bytes_to_put = b"\"\\{}[],:0-.eE tfnu\n\x01a";
    let byte = bytes_to_put[usize::from(byte) % bytes_to_put.len()];
    match how % 4 {
        0 => {
            bytes.remove(at);
        }
        1 => bytes[at] = byte,
        2 => bytes.insert(at, byte),
        _ => bytes.truncate(at),
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn generated_json_reads_as_serde_json_reads_it(value in json_value(), pretty in any::<bool>()) {
        let text = if pretty { serde_json::to_string_pretty(&value) } else { serde_json::to_string(&value) };
        let text = text.unwrap();
        agrees(&text);
        prop_assert!(same_value(&Reader::read::<Value>(&text).unwrap(), &value));
    }

    #[test]
    fn broken_json_is_refused_exactly_when_serde_json_refuses_it(
        value in json_value(), at in any::<usize>(), how in any::<u8>(), byte in any::<u8>()
    ) {
        agrees(&broken(serde_json::to_string(&value).unwrap(), at, how, byte));
    }
}

/// What [`super::array_in_place`] gives its visitor: `Ok(elements)` for an array read in
/// place, `Err(text)` for a value handed over as written.
struct InPlace;

impl<'de> serde::de::DeserializeSeed<'de> for InPlace {
    type Value = Result<Vec<Value>, String>;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        super::array_in_place(deserializer, self)
    }
}

impl<'de> serde::de::Visitor<'de> for InPlace {
    type Value = Result<Vec<Value>, String>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a value")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut elements = Vec::new();
        while let Some(element) = seq.next_element()? {
            elements.push(element);
        }
        Ok(Ok(elements))
    }

    fn visit_newtype_struct<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        let raw: &RawValue = serde::Deserialize::deserialize(deserializer)?;
        Ok(Err(raw.get().to_owned()))
    }
}

/// Seeds a map's values with [`InPlace`].
struct InPlaceMap;

impl<'de> serde::de::DeserializeSeed<'de> for InPlaceMap {
    type Value = std::collections::BTreeMap<String, Result<Vec<Value>, String>>;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for InPlaceMap {
    type Value = std::collections::BTreeMap<String, Result<Vec<Value>, String>>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut read = std::collections::BTreeMap::new();
        while let Some(key) = map.next_key::<String>()? {
            read.insert(key, map.next_value_seed(InPlace)?);
        }
        Ok(read)
    }
}

/// Member `a` of `text` as [`InPlace`] reads it with the gate's reader.
fn ours(text: &str) -> Result<Result<Vec<Value>, String>, String> {
    use serde::de::DeserializeSeed;
    let mut reader = Reader::new(text);
    let mut map = InPlaceMap
        .deserialize(&mut reader)
        .and_then(|map| reader.end().map(|()| map))
        .map_err(|e| e.to_string())?;
    Ok(map.remove("a").unwrap())
}

/// Member `a` of `text` as [`InPlace`] reads it with serde_json.
fn theirs(text: &str) -> Result<Result<Vec<Value>, String>, String> {
    use serde::de::DeserializeSeed;
    let mut de = serde_json::Deserializer::from_str(text);
    let mut map = InPlaceMap
        .deserialize(&mut de)
        .and_then(|map| de.end().map(|()| map))
        .map_err(|e| e.to_string())?;
    Ok(map.remove("a").unwrap())
}

#[test]
fn an_array_is_read_in_place_and_any_other_value_taken_as_written() {
    // The gate's reader reads an array in place; serde_json hands it over as written.
    let text = r#"{"a": [1, "two", {"three": [3]}]}"#;
    assert_eq!(
        ours(text).unwrap(),
        Ok(vec![1.into(), "two".into(), serde_json::json!({"three": [3]})])
    );
    assert_eq!(
        theirs(text).unwrap(),
        Err(r#"[1, "two", {"three": [3]}]"#.to_owned())
    );
    // Any other value, from either, as written (escapes kept).
    for value in [r#""a\"b""#, "12.5", "null", r#"{"b": [1]}"#, "true"] {
        let text = format!(r#"{{"a": {value}}}"#);
        assert_eq!(ours(&text).unwrap(), Err(value.to_owned()), "{value}");
        assert_eq!(theirs(&text).unwrap(), Err(value.to_owned()), "{value}");
    }
    // A broken array is refused, with the error's place in the whole text.
    let error = ours("{\"a\": [1,\n 2,]}").unwrap_err();
    assert!(
        error.contains("trailing comma") && error.contains("line 2"),
        "{error}"
    );
    assert!(theirs("{\"a\": [1,\n 2,]}").is_err());
    // Nesting in place counts towards the depth limit as any other read does.
    let deep = format!(r#"{{"a": {}{}}}"#, "[".repeat(127), "]".repeat(127));
    assert!(ours(&deep).is_err());
    let shallow = format!(r#"{{"a": {}{}}}"#, "[".repeat(120), "]".repeat(120));
    assert!(ours(&shallow).is_ok());
}
