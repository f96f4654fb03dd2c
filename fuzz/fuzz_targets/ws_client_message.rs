//! A WebSocket client's side on arbitrary bytes: the frame reader (masked or not, fragments,
//! control frames between them, lengths up to 2^64 - 1, delivered a few bytes at a time) and
//! the message reader on every message it yields. Beyond "never panics, never hangs":
//!
//! - the budget never holds more than its cap, and the reader never holds more than one
//!   message's worth (`max_message`);
//! - a message comes with a reservation of exactly its length, and nothing else stays held by
//!   the reader; a text message is UTF-8; a control payload is at most 125 bytes;
//! - a message over the budget is refused only when the budget's room is under `max_message`;
//! - once refused (and told to discard, as the relay does), the reader holds nothing, yields
//!   no data, and everything is given back when it is dropped;
//! - a message's head names another event type only for a plain JSON object whose one `type`
//!   is that string (not `response.create`), with no member read as a misspelt `type`; its
//!   `store`, `previous_response_id` and the members naming state are the object's own; and the
//!   refusal of that type is a well-formed error event. Text that is not JSON (nor UTF-8) has
//!   an empty head;
//! - a head is refused exactly when a member the relay reads is repeated or another member
//!   reads as one to a lenient reader (names compared unescaped), naming the first such
//!   member; a refused head names no other event type.
//!
//! Input: `max_message` (2 bytes, little-endian), the budget's cap (2 bytes), the share of the
//! cap other sockets hold (1 byte, in 255ths), the most a read returns (1 byte, 0: all that is
//! left), then the bytes the client sends.

#![no_main]

use std::io;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};

use libfuzzer_sys::fuzz_target;
use replaygate::gate::misspelling_of;
use replaygate::proxy::buffer_budget::{BufferBudget, Reservation};
use replaygate::proxy::websocket::fuzzing::{
    read_head, unsupported_event, ClientFrames, ClientRead, Head, NamedValue, READ,
};
use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use tokio::io::{AsyncRead, ReadBuf};

/// The client's connection: `wire`, at most `chunk` bytes a read (0: all that is left).
struct Trickle {
    wire: Vec<u8>,
    at: usize,
    chunk: usize,
}

impl AsyncRead for Trickle {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let left = self.wire.len() - self.at;
        let take = match self.chunk {
            0 => left,
            chunk => left.min(chunk),
        }
        .min(buf.remaining());
        let at = self.at;
        buf.put_slice(&self.wire[at..at + take]);
        self.at += take;
        Poll::Ready(Ok(()))
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| tokio::runtime::Builder::new_current_thread().build().unwrap())
}

/// The message reader on one message, held to serde_json's reading of it.
fn check_head(message: &[u8]) {
    let head = read_head(message);
    if let Some(kind) = &head.other_type {
        assert!(
            !kind.trim().eq_ignore_ascii_case("response.create"),
            "a response.create read as another event"
        );
    }
    let Ok(value) = serde_json::from_slice::<Value>(message) else {
        // What a lenient reading accepts and a strict one refuses (a `\ud800` escape without
        // its pair in a member's value) may have a head: the message is judged or forwarded
        // as it stands. Anything else that is not JSON has none.
        if serde_json::from_slice::<IgnoredAny>(message).is_err() {
            assert_eq!(head, Head::default(), "a head for what is not JSON");
        }
        return;
    };
    let Some(object) = value.as_object() else {
        assert_eq!(head, Head::default(), "a head for what is not a JSON object");
        return;
    };
    // serde_json's object keeps one of two members of a name: the names come in order from a
    // reading of their own.
    let names = names_of(message);
    let first_fault = names.iter().enumerate().find_map(|(at, name)| {
        match READ.iter().find(|read| **read == name.as_str()) {
            Some(read) => names[..at].contains(name).then_some(*read),
            None => misspelling_of(name, READ),
        }
    });
    assert_eq!(
        head.refusal.as_ref().map(|refusal| refusal.param),
        first_fault,
        "the refusal of {names:?}"
    );
    if head.refusal.is_some() {
        assert_eq!(head.other_type, None, "a refused head names an event");
        return;
    }
    for named in &head.names {
        let value = object.get(named.member).expect("a named member is the object's");
        match &named.value {
            NamedValue::Id(id) => assert_eq!(value.as_str(), Some(id.as_str())),
            NamedValue::Null => assert!(value.is_null()),
            NamedValue::Other(_) => assert!(!value.is_string() && !value.is_null()),
        }
    }
    if let Some(kind) = &head.other_type {
        assert_eq!(object.get("type").and_then(Value::as_str), Some(kind.as_str()));
        for key in object.keys() {
            assert!(
                key == "type" || misspelling_of(key, &["type"]).is_none(),
                "another event despite the member {key:?}"
            );
        }
        let event: Value = serde_json::from_str(&unsupported_event(kind)).expect("the refusal is JSON");
        assert_eq!(event["type"], "error");
        assert_eq!(event["status"], 400);
        assert_eq!(event["error"]["code"], "unsupported_event");
        let shown: String = kind.chars().take(100).collect();
        let said = event["error"]["message"].as_str().expect("a message");
        assert!(said.contains(&shown), "the refusal does not name the type");
    }
    if let Some(store) = head.store {
        assert_eq!(object.get("store"), Some(&Value::Bool(store)));
    }
    if let Some(previous) = &head.previous_response_id {
        assert_eq!(
            object.get("previous_response_id").and_then(Value::as_str),
            Some(previous.as_str())
        );
    }
}

/// The member names of a JSON object, unescaped, in order, repeats included.
fn names_of(message: &[u8]) -> Vec<String> {
    struct Names;
    impl<'de> Visitor<'de> for Names {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<String>, A::Error> {
            let mut names = Vec::new();
            while let Some((name, IgnoredAny)) = map.next_entry::<String, IgnoredAny>()? {
                names.push(name);
            }
            Ok(names)
        }
    }
    serde_json::Deserializer::from_slice(message)
        .deserialize_map(Names)
        .expect("a JSON object reads")
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 6 {
        return;
    }
    let max_message = usize::from(u16::from_le_bytes([data[0], data[1]]));
    let cap = usize::from(u16::from_le_bytes([data[2], data[3]]));
    let budget = BufferBudget::new(cap);
    let mut elsewhere = Reservation::new(&budget);
    assert!(elsewhere.grow_to(cap * usize::from(data[4]) / 255));
    let others = elsewhere.bytes();
    let wire = data[6..].to_vec();
    let rounds = wire.len() + 2;
    let io = Trickle {
        wire,
        at: 0,
        chunk: usize::from(data[5]),
    };
    let mut frames = ClientFrames::new(io, budget.clone(), max_message);
    // Some messages are kept a while (as the relay holds one while it is judged), so the
    // budget's room changes as the socket goes on.
    let mut kept: Vec<Reservation> = Vec::new();
    let mut refused = false;
    runtime().block_on(async {
        // Every read that yields something takes at least a frame head (2 bytes) off the wire.
        for _ in 0..rounds {
            let read = frames.next().await;
            let kept_bytes: usize = kept.iter().map(Reservation::bytes).sum();
            let reserved = budget.reserved();
            assert!(reserved <= cap, "the budget holds {reserved} of {cap}");
            let in_reader = reserved - others - kept_bytes;
            assert!(
                in_reader <= max_message,
                "{in_reader} bytes held for one message of at most {max_message}"
            );
            if refused {
                assert_eq!(in_reader, 0, "a refused socket still holds bytes");
            }
            match read {
                ClientRead::Data { text, bytes, held } => {
                    assert!(!refused, "data yielded after the refusal");
                    assert_eq!(held.bytes(), bytes.len(), "held is not the message's length");
                    assert_eq!(in_reader, bytes.len(), "the reader holds more than the message");
                    assert!(
                        !text || std::str::from_utf8(&bytes).is_ok(),
                        "text that is not UTF-8"
                    );
                    check_head(&bytes);
                    if bytes.len() % 2 == 0 {
                        kept.push(held);
                    }
                }
                ClientRead::Control(payload) => {
                    assert!(!refused, "a ping or pong yielded after the refusal");
                    assert!(payload.len() <= 125, "a control payload of {}", payload.len());
                }
                ClientRead::Close(close) => {
                    if let Some((_, reason)) = close {
                        assert!(reason.len() <= 123, "a close reason of {}", reason.len());
                    }
                    break;
                }
                ClientRead::Refused(code) => {
                    assert!([1002, 1007, 1009, 1013].contains(&code), "close code {code}");
                    if code == 1013 {
                        let room = cap - others - kept_bytes;
                        assert!(room < max_message, "overloaded with room for {room} bytes");
                    }
                    if refused {
                        // Discarding, the client broke the protocol again: the relay stops.
                        break;
                    }
                    refused = true;
                    frames.discard();
                    assert_eq!(
                        budget.reserved(),
                        others + kept_bytes,
                        "the refused message was not given back"
                    );
                }
                ClientRead::Gone => break,
            }
        }
    });
    drop(frames);
    let kept_bytes: usize = kept.iter().map(Reservation::bytes).sum();
    assert_eq!(
        budget.reserved(),
        others + kept_bytes,
        "a dropped reader kept bytes"
    );
    drop(kept);
    drop(elsewhere);
    assert_eq!(budget.reserved(), 0);
});
