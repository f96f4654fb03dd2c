//! The gate's JSON reader held to serde_json on arbitrary bytes: whatever the text, both accept
//! or both refuse it, read as a `Value` (with the same value), skipped, or taken as a raw
//! value (with the same text); and the gate's reading of a request body is the same request,
//! or the same error code at the same parameter, with either reader.

#![no_main]

use libfuzzer_sys::fuzz_target;
use replaygate::gate::request::{parse_with_serde_json, same_refusal};
use replaygate::gate::{parse, ItemsAt};
use replaygate::json::Reader;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use serde_json::Value;

/// Values equal, floats within the rounding serde_json's fast float parser may differ by.
fn same_value(ours: &Value, theirs: &Value) -> bool {
    match (ours, theirs) {
        (Value::Number(a), Value::Number(b)) if a.is_f64() && b.is_f64() => {
            let (x, y) = (a.as_f64().unwrap(), b.as_f64().unwrap());
            x.to_bits() == y.to_bits() || (x - y).abs() <= f64::EPSILON * x.abs().max(y.abs())
        }
        (Value::Array(a), Value::Array(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_value(x, y)),
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|((ka, va), (kb, vb))| ka == kb && same_value(va, vb))
        }
        _ => ours == theirs,
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        match (Reader::read::<Value>(text), serde_json::from_str::<Value>(text)) {
            (Ok(a), Ok(b)) => assert!(same_value(&a, &b), "{a:?} vs {b:?}"),
            (Err(_), Err(_)) => {}
            (a, b) => panic!("as a value: ours {a:?}, serde_json {b:?}"),
        }
        assert_eq!(
            Reader::read::<IgnoredAny>(text).is_ok(),
            serde_json::from_str::<IgnoredAny>(text).is_ok(),
            "skipped"
        );
        assert_eq!(
            Reader::read::<&RawValue>(text).map(RawValue::get).ok(),
            serde_json::from_str::<&RawValue>(text).map(RawValue::get).ok(),
            "as a raw value"
        );
    }
    match (parse(data), parse_with_serde_json(data, ItemsAt::Input)) {
        (Ok(a), Ok(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}")),
        (Err(a), Err(b)) => assert!(same_refusal(&a, &b), "{a} / {b}"),
        (a, b) => panic!("the request: ours {a:?}, serde_json {b:?}"),
    }
});
