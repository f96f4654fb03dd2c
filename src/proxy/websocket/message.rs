//! What a client message is, and the events replaygate itself sends on a socket.
//!
//! A message is plainly an event other than `response.create` only when it is a JSON object
//! with one member spelt exactly `type` whose value is a string that is not `response.create`
//! in any case or spacing. Such an event is forwarded unjudged when its type is one the socket
//! accepts (after the ownership check of the state it names), and refused otherwise.
//! Everything else (a `response.create`, text that is not JSON, an object without a type) is
//! judged like a POST body, so the gate, not a guess, answers what it cannot read.
//!
//! The members the relay reads ([`READ`]: the type, `store`, and the ids of stored state) are
//! read once each, by their unescaped names: a JSON object that repeats one, or has a member a
//! lenient reader takes for one (another case, control or zero-width characters), is refused as
//! it is read, before anything is looked up, so replaygate and the provider can never read two
//! different values.
//!
//! Its `pub` items are the API of the `fuzzing` module, which re-exports them; that module is
//! built only for the tests and with the `fuzzing` feature, and without it they are reachable
//! from nowhere.
#![cfg_attr(not(any(test, feature = "fuzzing")), allow(unreachable_pub))]

use std::borrow::Cow;

use serde::de::{Deserializer as _, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::ApiError;
use crate::gate::{misspelling_of, BodyError};
use crate::json::Misspelling;
use crate::proxy::objects::{ObjectRef, ITEM};

pub(super) use crate::proxy::sockets::RESPONSE_CREATE;

/// The longest event type an `unsupported_event` error repeats.
const MAX_TYPE_SHOWN: usize = 100;

/// The top-level members of a client message the relay reads, each of which must appear once,
/// spelt exactly so.
pub const READ: &[&str] = &[
    "type",
    "store",
    "previous_response_id",
    "response_id",
    "conversation_id",
    "conversation",
    "item_id",
    "previous_item_id",
];

/// The members of a forwarded event that name stored state, and what they name (the `kind` of
/// an [`ObjectRef`]).
const NAMING: &[(&str, &str)] = &[
    ("previous_response_id", "response"),
    ("response_id", "response"),
    ("conversation_id", "conversation"),
    ("conversation", "conversation"),
    ("item_id", ITEM),
    ("previous_item_id", ITEM),
];

/// What the relay reads of a client message before it is judged.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Head {
    /// The event's type, when the message is plainly an event other than `response.create`.
    pub other_type: Option<String>,
    /// `store`, when it is a boolean.
    pub store: Option<bool>,
    /// `previous_response_id`, when it is a string.
    pub previous_response_id: Option<String>,
    /// The members that name stored state (`response_id`, ...), in the order written.
    pub names: Vec<Named>,
    /// Why the message is refused as it stands: a member of [`READ`] repeated, or spelt so
    /// that a lenient reader takes it for one (the first such member).
    pub refusal: Option<Refusal>,
}

/// A member of a client message that names stored state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    /// The member's name (`response_id`, `item_id`, ...).
    pub member: &'static str,
    /// Its value.
    pub value: NamedValue,
}

/// The value of a member naming stored state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NamedValue {
    /// A string: the id.
    Id(String),
    /// `null`: names nothing, as if absent.
    Null,
    /// Anything else (a number, an object, a string that is not valid Unicode, ...): what it is.
    Other(&'static str),
}

/// A member refused as the head is read: `invalid_input` naming it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The member, as replaygate reads it (its `param`).
    pub param: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl Refusal {
    /// The 400 `invalid_input` the client gets.
    pub(super) fn error(&self) -> ApiError {
        ApiError::Body(BodyError::InvalidInput {
            param: self.param.to_owned(),
            message: self.message.clone(),
        })
    }
}

impl Named {
    /// The stored object it names, when it names one (an id, not `null`).
    pub(super) fn object(&self) -> Option<ObjectRef<'_>> {
        let NamedValue::Id(id) = &self.value else {
            return None;
        };
        let kind = NAMING.iter().find(|(member, _)| *member == self.member)?.1;
        Some(ObjectRef { kind, id })
    }

    /// The refusal of a value that names state in no way replaygate can check: neither a
    /// string nor `null`.
    pub(super) fn unreadable(&self, event: &str) -> Option<Refusal> {
        let NamedValue::Other(what) = self.value else {
            return None;
        };
        Some(Refusal {
            param: self.member,
            message: format!(
                "`{}` of a `{}` event must be a string id, not {what}",
                self.member,
                event.chars().take(MAX_TYPE_SHOWN).collect::<String>()
            ),
        })
    }
}

/// Reads the head of a client message: its type, when it is plainly another event than
/// `response.create`, its `store` and `previous_response_id`, the members naming stored state,
/// and whether a member of [`READ`] is repeated or misspelt. Anything that does not read as one
/// JSON object (a binary message that is not UTF-8 included) has an empty head.
pub(super) fn read_head(message: &[u8]) -> Head {
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

/// The visitor [`read_head`] reads a message's object with.
struct HeadOnly;

impl<'de> Visitor<'de> for HeadOnly {
    type Value = Head;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Head, A::Error> {
        let mut head = Head::default();
        let mut seen = [false; READ.len()];
        let mut kind: Option<Option<String>> = None;
        // Names arrive unescaped (`"\u0069d"` is `id`); a repeated one is refused, not read.
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let value = map.next_value::<&'de RawValue>()?.get();
            let Some(at) = READ.iter().position(|read| *read == key.as_ref()) else {
                if let Some(gated) = misspelling_of(&key, READ) {
                    let message = Misspelling::new(&key, gated)
                        .into_error::<serde::de::value::Error>()
                        .to_string();
                    head.refusal.get_or_insert(Refusal {
                        param: gated,
                        message,
                    });
                }
                continue;
            };
            let member = READ[at];
            if std::mem::replace(&mut seen[at], true) {
                let message = format!("duplicate member `{member}`");
                head.refusal.get_or_insert(Refusal {
                    param: member,
                    message,
                });
                continue;
            }
            match member {
                "type" => kind = Some(serde_json::from_str::<String>(value).ok()),
                "store" => {
                    head.store = match value {
                        "true" => Some(true),
                        "false" => Some(false),
                        _ => None,
                    }
                }
                _ => {
                    let value = named_value(value);
                    if let ("previous_response_id", NamedValue::Id(id)) = (member, &value) {
                        head.previous_response_id = Some(id.clone());
                    }
                    head.names.push(Named { member, value });
                }
            }
        }
        if head
            .refusal
            .as_ref()
            .is_some_and(|refusal| refusal.param == "previous_response_id")
        {
            // Which response it continues is unclear: none is evicted for its refusal.
            head.previous_response_id = None;
        }
        head.other_type = kind
            .flatten()
            .filter(|kind| head.refusal.is_none() && !kind.trim().eq_ignore_ascii_case(RESPONSE_CREATE));
        Ok(head)
    }
}

/// A member's value (JSON text) as a [`NamedValue`].
fn named_value(value: &str) -> NamedValue {
    match value.as_bytes().first() {
        Some(b'"') => match serde_json::from_str::<String>(value) {
            Ok(id) => NamedValue::Id(id),
            Err(_) => NamedValue::Other("a string that is not valid Unicode"),
        },
        Some(b'n') => NamedValue::Null,
        Some(b'{') => NamedValue::Other("an object"),
        Some(b'[') => NamedValue::Other("an array"),
        Some(b't' | b'f') => NamedValue::Other("a boolean"),
        _ => NamedValue::Other("a number"),
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
        assert_eq!(
            other(r#"{"\u0074ype":"response.cancel"}"#).as_deref(),
            Some("response.cancel")
        );
        for judged in [
            r#"{"type":"response.create","model":"m"}"#,
            r#"{"type":" Response.Create "}"#,
            r#"{"type":"response.cancel","Type":"response.create"}"#,
            r#"{"type":"response.cancel","type":"response.create"}"#,
            r#"{"type":"response.cancel","type\u0000":"response.create"}"#,
            r#"{"type":7}"#,
            r#"{"type":null}"#,
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
            (head.other_type, head.store, head.previous_response_id.as_deref()),
            (None, Some(false), Some("resp_1"))
        );
        assert_eq!(head.refusal, None);
        let odd = read_head(br#"{"store":"false","previous_response_id":7}"#);
        assert_eq!(
            (odd.store, odd.previous_response_id, odd.refusal),
            (None, None, None)
        );
        assert_eq!(
            read_head(br#"{"previous_\u0072esponse_id":"resp_\u0031"}"#).previous_response_id,
            Some("resp_1".into())
        );
    }

    /// The refusal of `message`: its param.
    fn refused(message: &str) -> Option<&'static str> {
        let head = read_head(message.as_bytes());
        if head.refusal.is_some() {
            assert_eq!(head.other_type, None, "{message}");
        }
        head.refusal.map(|refusal| refusal.param)
    }

    #[test]
    fn repeated_or_misspelt_members_the_relay_reads_are_refused() {
        for (message, param) in [
            (r#"{"type":"response.cancel","type":"response.create"}"#, "type"),
            (r#"{"type":"response.cancel","Type":"response.create"}"#, "type"),
            (r#"{"type":"response.cancel","type\u0000":"x"}"#, "type"),
            (r#"{"type":"response.cancel","\u200btype":"x"}"#, "type"),
            (r#"{"type":"a","type":"a","type":"a"}"#, "type"),
            (
                r#"{"type":"response.create","store":false,"store":true}"#,
                "store",
            ),
            (r#"{"type":"response.create","STORE":true}"#, "store"),
            (
                r#"{"type":"response.create","previous_response_id":"a","previous_response_id":"b"}"#,
                "previous_response_id",
            ),
            (
                r#"{"type":"response.create","Previous_Response_Id":"b"}"#,
                "previous_response_id",
            ),
            (
                r#"{"type":"response.cancel","response_id":"resp_own","response_id":"resp_other"}"#,
                "response_id",
            ),
            (
                r#"{"type":"response.cancel","response_id":"resp_own","\u0072esponse_id":"resp_other"}"#,
                "response_id",
            ),
            (
                r#"{"type":"response.cancel","response_id":"resp_own","Response_ID":"resp_other"}"#,
                "response_id",
            ),
            (
                r#"{"type":"response.cancel","response_id":null,"response_id":null,"response_id":"x"}"#,
                "response_id",
            ),
            (r#"{"type":"x","item_id":"a","ITEM_ID":"b"}"#, "item_id"),
            (
                r#"{"type":"x","conversation_id":"a","conversation_id":"b"}"#,
                "conversation_id",
            ),
        ] {
            assert_eq!(refused(message), Some(param), "{message}");
        }
        // The first fault is the one named.
        assert_eq!(refused(r#"{"Store":true,"type":"a","type":"b"}"#), Some("store"));
        // A repeated or re-cased previous_response_id names no response to evict.
        let head = read_head(br#"{"previous_response_id":"a","previous_response_id":"b"}"#);
        assert_eq!(head.previous_response_id, None);
        // Names the relay does not read keep any spelling and may repeat.
        for message in [
            r#"{"type":"response.create","model":"m","Model":"n","input":[{"Type":"x","type":"y"}]}"#,
            r#"{"type":"response.cancel","event_id":"e","event_id":"f","Event_Id":"g"}"#,
            r#"{"type":"response.cancel","response_ids":"x","responseid":"y"}"#,
        ] {
            assert_eq!(refused(message), None, "{message}");
        }
    }

    #[test]
    fn members_naming_state_are_read_with_what_they_hold() {
        let head = read_head(
            br#"{"type":"response.cancel","response_id":"resp_\u0031","item_id":null,"conversation":{"id":"c"},"previous_item_id":7}"#,
        );
        assert_eq!(head.other_type.as_deref(), Some("response.cancel"));
        let names: Vec<(&str, &NamedValue)> = head.names.iter().map(|n| (n.member, &n.value)).collect();
        assert_eq!(
            names,
            [
                ("response_id", &NamedValue::Id("resp_1".into())),
                ("item_id", &NamedValue::Null),
                ("conversation", &NamedValue::Other("an object")),
                ("previous_item_id", &NamedValue::Other("a number")),
            ]
        );
        let objects: Vec<_> = head.names.iter().filter_map(Named::object).collect();
        assert_eq!(
            objects,
            [ObjectRef {
                kind: "response",
                id: "resp_1"
            }]
        );
        let unreadable = head.names[2].unreadable("response.cancel").unwrap();
        assert_eq!(unreadable.param, "conversation");
        assert!(unreadable.message.contains("must be a string id, not an object"));
        let error = unreadable.error();
        assert_eq!(
            (error.status().as_u16(), error.code(), error.param()),
            (400, "invalid_input", Some("conversation"))
        );
        assert_eq!(head.names[0].unreadable("response.cancel"), None);
        assert_eq!(head.names[1].unreadable("response.cancel"), None);
        let kinds: Vec<_> = [
            r#"{"item_id":"i"}"#,
            r#"{"previous_item_id":"i"}"#,
            r#"{"conversation_id":"c"}"#,
            r#"{"conversation":"c"}"#,
            r#"{"previous_response_id":"r"}"#,
        ]
        .iter()
        .map(|message| read_head(message.as_bytes()).names[0].object().unwrap().kind)
        .collect();
        assert_eq!(kinds, [ITEM, ITEM, "conversation", "conversation", "response"]);
        let long = format!(
            r#"{{"type":"response.cancel","response_id":"{}"}}"#,
            "r".repeat(10 << 10)
        );
        assert_eq!(
            read_head(long.as_bytes()).names[0].value,
            NamedValue::Id("r".repeat(10 << 10))
        );
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
