//! What a client message is, and the events replaygate itself sends on a socket.
//!
//! A message is plainly an event other than `response.create` only when it is a JSON object
//! with one member spelt exactly `type` whose value is a string that is not `response.create`
//! in any case or spacing, and no other member a lenient reader takes for `type`. Such an event
//! is forwarded unjudged when its type is one the socket accepts, and refused otherwise.
//! Everything else (a `response.create`, text that is not JSON, an object without a type) is
//! judged like a POST body, so the gate, not a guess, answers what it cannot read.

use std::borrow::Cow;

use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::ApiError;
use crate::gate::misspelling_of;

pub(super) use crate::proxy::sockets::RESPONSE_CREATE;

/// The longest event type an `unsupported_event` error repeats.
const MAX_TYPE_SHOWN: usize = 100;

/// What the relay reads of a client message before it is judged.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Head {
    /// The event's type, when the message is plainly an event other than `response.create`.
    pub other_type: Option<String>,
    /// `store`, when the message has one member `store` and it is a boolean.
    pub store: Option<bool>,
    /// `previous_response_id`, when the message has one member of that name and it is a
    /// string.
    pub previous_response_id: Option<String>,
}

/// Reads the head of a client message: its type, when it is plainly another event than
/// `response.create`, and its `store` and `previous_response_id`. Anything that does not read
/// as one JSON object (a binary message that is not UTF-8 included) has an empty head.
pub(super) fn read_head(message: &[u8]) -> Head {
    struct HeadOnly;

    impl<'de> Visitor<'de> for HeadOnly {
        type Value = Head;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Head, A::Error> {
            let (mut types, mut plain, mut kind) = (0, true, None);
            let (mut stores, mut store) = (0, None);
            let (mut previouses, mut previous) = (0, None);
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                match key.as_ref() {
                    "type" => {
                        types += 1;
                        kind = map.next_value::<Option<String>>()?;
                    }
                    "store" => {
                        stores += 1;
                        store = match map.next_value::<&'de RawValue>()?.get() {
                            "true" => Some(true),
                            "false" => Some(false),
                            _ => None,
                        };
                    }
                    "previous_response_id" => {
                        previouses += 1;
                        previous =
                            serde_json::from_str::<String>(map.next_value::<&'de RawValue>()?.get()).ok();
                    }
                    other => {
                        if misspelling_of(other, &["type"]).is_some() {
                            plain = false;
                        }
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            let other_type =
                kind.filter(|kind| plain && types == 1 && !kind.trim().eq_ignore_ascii_case(RESPONSE_CREATE));
            Ok(Head {
                other_type,
                store: store.filter(|_| stores == 1),
                previous_response_id: previous.filter(|_| previouses == 1),
            })
        }
    }

    // JSON is UTF-8 throughout; read from bytes, serde_json would not check the strings it
    // skips, and a binary message with other bytes in one would pass for an event.
    let Ok(message) = std::str::from_utf8(message) else {
        return Head::default();
    };
    let mut reader = serde_json::Deserializer::from_str(message);
    match reader.deserialize_map(HeadOnly) {
        Ok(head) if reader.end().is_ok() => head,
        _ => Head::default(),
    }
}

/// The refusal of an event of a type the socket does not accept.
pub(super) fn unsupported(kind: &str) -> ApiError {
    let shown: String = kind.chars().take(MAX_TYPE_SHOWN).collect();
    ApiError::UnsupportedEvent(shown)
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
    fn only_plainly_typed_other_events_read_as_other_events() {
        let other = |message: &str| read_head(message.as_bytes()).other_type;
        assert_eq!(
            other(r#"{"type":"response.cancel"}"#).as_deref(),
            Some("response.cancel")
        );
        assert_eq!(
            other(r#"{"type":"session.update","session":{"type":"x"}}"#).as_deref(),
            Some("session.update")
        );
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
            assert_eq!(other(judged), None, "{judged}");
        }
    }

    #[test]
    fn a_message_that_is_not_utf8_has_no_head() {
        // Found by the ws_client_message fuzz target: a binary message whose skipped member
        // held a byte that is not UTF-8 read as a plain `response.cancel`.
        let mut message = br#"{"type":"response.cancel","store":false,"response_id":"resp_"#.to_vec();
        message.extend_from_slice(b"\xd7\"}");
        assert!(serde_json::from_slice::<serde_json::Value>(&message).is_err());
        assert_eq!(read_head(&message), Head::default());
    }

    #[test]
    fn store_and_the_previous_response_are_read_when_plain() {
        let head = read_head(
            br#"{"type":"response.create","store":false,"previous_response_id":"resp_1","input":[]}"#,
        );
        assert_eq!(
            head,
            Head {
                other_type: None,
                store: Some(false),
                previous_response_id: Some("resp_1".into()),
            }
        );
        let twice = read_head(br#"{"store":false,"store":true,"previous_response_id":7}"#);
        assert_eq!((twice.store, twice.previous_response_id), (None, None));
        assert_eq!(read_head(br#"{"store":"false"}"#).store, None);
    }

    #[test]
    fn unsupported_events_are_400_and_name_a_bounded_type() {
        let error = unsupported(&"x".repeat(1000));
        assert_eq!(
            (error.status().as_u16(), error.code()),
            (400, "unsupported_event")
        );
        assert!(error.message().len() < 200);
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
