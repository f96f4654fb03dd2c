//! What a client message is, and the events replaygate itself sends on a socket.
//!
//! A message is passed on untouched only when it is plainly not a `response.create`: a JSON
//! object with one member spelt exactly `type` whose value is a string that is not
//! `response.create` in any case or spacing, and no other member a lenient reader takes for
//! `type`. Everything else (a `response.create`, text that is not JSON, an object without a
//! type) is judged like a POST body, so the gate, not a guess, answers what it cannot read.

use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::ApiError;
use crate::gate::misspelling_of;

/// The message type that is judged.
const RESPONSE_CREATE: &str = "response.create";

/// Whether `message` is an event other than `response.create`, to pass on unjudged.
pub(super) fn is_other_event(message: &[u8]) -> bool {
    struct TypeOnly;

    impl<'de> Visitor<'de> for TypeOnly {
        type Value = bool;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
            let mut types = 0;
            let mut other = false;
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if key == "type" {
                    types += 1;
                    other = match map.next_value::<Option<String>>() {
                        Ok(Some(kind)) => !kind.trim().eq_ignore_ascii_case(RESPONSE_CREATE),
                        _ => return Ok(false),
                    };
                } else if misspelling_of(&key, &["type"]).is_some() {
                    return Ok(false);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(types == 1 && other)
        }
    }

    let mut reader = serde_json::Deserializer::from_slice(message);
    matches!(reader.deserialize_map(TypeOnly), Ok(true)) && reader.end().is_ok()
}

/// The `type` of a server event, when it has a string one.
pub(super) fn event_type(message: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Typed {
        #[serde(rename = "type")]
        kind: Option<String>,
    }
    serde_json::from_str::<Typed>(message).ok()?.kind
}

/// The error event for a refused message: the error envelope's `error`, with its HTTP status:
/// `{"type":"error","status":422,"error":{"type":...,"code":...,"message":...,"param":...,
/// "violations":[...]}}`.
pub(super) fn error_event(error: &ApiError) -> String {
    #[derive(Deserialize)]
    struct Envelope<'a> {
        #[serde(borrow)]
        error: &'a RawValue,
    }
    let envelope = error.envelope();
    let inner = serde_json::from_str::<Envelope<'_>>(&envelope)
        .map(|envelope| envelope.error.get())
        .unwrap_or("null");
    format!(
        r#"{{"type":"error","status":{},"error":{inner}}}"#,
        error.status().as_u16()
    )
}

/// The error event sent as a socket reaches `[server] websocket_max_duration_ms`.
pub(super) fn limit_reached_event(minutes: u64) -> String {
    serde_json::json!({
        "type": "error",
        "status": 400,
        "error": {
            "type": "invalid_request_error",
            "code": "websocket_connection_limit_reached",
            "message": format!("the connection reached its limit of {minutes} minute(s); open a new one"),
            "param": null,
        }
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plainly_typed_other_events_pass_unjudged() {
        for other in [
            r#"{"type":"response.cancel"}"#,
            r#"{"type":"session.update","session":{"type":"x"}}"#,
        ] {
            assert!(is_other_event(other.as_bytes()), "{other}");
        }
        for judged in [
            r#"{"type":"response.create","model":"m"}"#,
            r#"{"type":" Response.Create "}"#,
            r#"{"type":"response.cancel","Type":"response.create"}"#,
            r#"{"type":"response.cancel","type":"response.create"}"#,
            r#"{"type":"response.cancel","type\u0000":"response.create"}"#,
            r#"{"type":7}"#,
            r#"{"model":"m"}"#,
            r#"{"type":"response.cancel"} trailing"#,
            "not json",
            "[]",
        ] {
            assert!(!is_other_event(judged.as_bytes()), "{judged}");
        }
    }

    #[test]
    fn error_events_carry_the_status_and_the_envelope() {
        let event = error_event(&ApiError::RouteConflict("elsewhere".into()));
        let value: serde_json::Value = serde_json::from_str(&event).unwrap();
        assert_eq!(value["type"], "error");
        assert_eq!(value["status"], 400);
        assert_eq!(value["error"]["code"], "route_conflict");
        assert_eq!(value["error"]["message"], "elsewhere");
        assert!(event.starts_with(r#"{"type":"error","status":400,"error":{"#));
    }

    #[test]
    fn server_event_types_are_read() {
        assert_eq!(
            event_type(r#"{"type":"response.completed","response":{}}"#).as_deref(),
            Some("response.completed")
        );
        assert_eq!(event_type("nope"), None);
    }
}
