//! The data of one event too large to hold whole (over [`TapLimits::max_event_bytes`]), read
//! as it streams: in an OpenAI stream, a `response.output_item.done` carrying a large item, or
//! the `response.completed` that repeats the whole output.
//!
//! Of the event object it keeps the members the tap reads of any event: `type` and
//! `output_index` (each at most 1 KiB of JSON), `item` (at most [`TapLimits::max_item_bytes`],
//! and not held at all once a `type` other than `response.output_item.done` was read), and of
//! `response` only its `id`, `model` and `status`, read by a [`JsonStream::head`] reader: the
//! output a response-state event repeats is skipped as it passes, since a stream's items are
//! recorded from its `response.output_item.done` events. Other members are skipped. Memory
//! stays within one item and the small members, whatever the event's size.
//!
//! As with large JSON answers, the data is followed by the machine both share ([`ObjectScan`]),
//! which follows only JSON's structure and holds the whole of the data to JSON's grammar as it
//! passes; what is kept is read by the same readers as an event held whole, so an item's record
//! and digest are the same.

use super::json_stream::{json_string, Head, JsonStream, Unrecorded};
use super::object_scan::{MemberReader, ObjectScan, Take};
use super::tap::TapLimits;

/// The most bytes a kept small member (`type`, `output_index`) may take as JSON.
const MEMBER_CAP: usize = 1024;

/// The `type` of the only event whose `item` the tap reads.
const ITEM_DONE: &str = "response.output_item.done";

/// Which member of the event object is being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Member {
    Type,
    OutputIndex,
    Item,
    Response,
    Other,
}

/// A kept member's value.
#[derive(Debug)]
enum Held {
    /// Its JSON text.
    Text(Vec<u8>),
    /// It passed its cap, and was dropped.
    TooLong,
}

/// The members of a streamed event the tap reads.
#[derive(Debug)]
pub(crate) struct EventMembers {
    /// The `type` (`None`: absent or `null`). A `type` over 1 KiB names no event the tap
    /// reads, and reads as empty.
    pub(crate) kind: Option<String>,
    /// The head of `response` (`None`: absent), or why it could not be read.
    pub(crate) response: Option<Result<Head, Unrecorded>>,
    /// The JSON text of `item` (`None`: absent, `null`, or skipped for its event's `type`),
    /// or [`Unrecorded::ItemTooLarge`].
    pub(crate) item: Option<Result<String, Unrecorded>>,
    /// The JSON text of `output_index` (`None`: absent, or over 1 KiB).
    pub(crate) output_index: Option<String>,
}

/// The reader's state: see the module documentation.
#[derive(Debug)]
pub(crate) struct EventStream {
    /// Where the current byte stands in the data.
    scan: ObjectScan,
    /// What is kept of it.
    read: EventReader,
}

/// What an [`EventStream`] keeps of the members the machine hands it.
#[derive(Debug)]
struct EventReader {
    limits: TapLimits,
    /// The member whose value is being read.
    member: Member,
    /// The kept members named so far: a member named twice is not an event the whole read
    /// accepts.
    seen: [bool; 4],
    /// The value of `type`, `output_index` or `item` being read, and whether it passed its cap.
    held: Vec<u8>,
    over: bool,
    kind: Option<Option<String>>,
    output_index: Option<Held>,
    item: Option<Held>,
    response: Option<Box<JsonStream>>,
    /// No `item` is held, whatever the event's type (a reader of usage alone).
    skip_items: bool,
    failed: bool,
}

impl EventStream {
    /// A reader of one event's data.
    pub(crate) fn new(limits: TapLimits) -> EventStream {
        EventStream {
            scan: ObjectScan::new(true),
            read: EventReader {
                limits,
                member: Member::Other,
                seen: [false; 4],
                held: Vec::new(),
                over: false,
                kind: None,
                output_index: None,
                item: None,
                response: None,
                skip_items: false,
                failed: false,
            },
        }
    }

    /// A reader of one event's data for its type and its response's head alone: no `item`
    /// is held.
    pub(crate) fn usage_only(limits: TapLimits) -> EventStream {
        let mut stream = EventStream::new(limits);
        stream.read.skip_items = true;
        stream
    }

    /// Bytes held now.
    pub(crate) fn held_bytes(&self) -> usize {
        let text = |held: &Option<Held>| match held {
            Some(Held::Text(text)) => text.len(),
            _ => 0,
        };
        let read = &self.read;
        let kind = read.kind.as_ref().and_then(Option::as_ref).map_or(0, String::len);
        read.held.len()
            + self.scan.held_bytes()
            + kind
            + text(&read.output_index)
            + text(&read.item)
            + read.response.as_ref().map_or(0, |head| head.held_bytes())
    }

    /// Whether the data is already known not to be a JSON object.
    pub(crate) fn failed(&self) -> bool {
        self.read.failed
    }

    /// Reads the next bytes of the event's data: as far as they are JSON, then fails.
    pub(crate) fn feed(&mut self, chunk: &[u8]) {
        self.scan.feed(chunk, &mut self.read);
    }

    /// The members read, once the data has ended; an error when it was not one JSON object
    /// whose kept members read as the whole read reads them.
    pub(crate) fn finish(self) -> Result<EventMembers, Unrecorded> {
        let read = self.read;
        if read.failed || !self.scan.complete() {
            return Err(Unrecorded::Unreadable);
        }
        let item = match read.item {
            None => None,
            Some(Held::TooLong) => Some(Err(Unrecorded::ItemTooLarge)),
            Some(Held::Text(text)) if text == b"null" => None,
            Some(Held::Text(text)) => match String::from_utf8(text) {
                Ok(text) => Some(Ok(text)),
                Err(_) => return Err(Unrecorded::Unreadable),
            },
        };
        let output_index = match read.output_index {
            Some(Held::Text(text)) => String::from_utf8(text).ok(),
            _ => None,
        };
        Ok(EventMembers {
            kind: read.kind.flatten(),
            response: read.response.map(|head| head.finish_head()),
            item,
            output_index,
        })
    }
}

impl MemberReader for EventReader {
    fn failed(&self) -> bool {
        self.failed
    }

    fn fail(&mut self) {
        self.failed = true;
        self.held = Vec::new();
        self.item = None;
        self.response = None;
    }

    /// Passes bytes of the current member's value on: held, or read by the response's head
    /// reader.
    fn take(&mut self, bytes: &[u8]) {
        let cap = match self.member {
            Member::Type | Member::OutputIndex => MEMBER_CAP,
            Member::Item => self.limits.max_item_bytes,
            Member::Response => {
                if let Some(head) = &mut self.response {
                    head.feed(bytes);
                }
                return;
            }
            Member::Other => return,
        };
        if self.over {
            return;
        }
        if self.held.len() + bytes.len() > cap {
            self.over = true;
            self.held = Vec::new();
            return;
        }
        super::sse::push_capped(&mut self.held, bytes, cap);
    }

    /// The colon after a member name: its value follows.
    fn member_started(&mut self, name: &[u8]) -> Take {
        let (member, slot) = match name {
            b"type" => (Member::Type, 0),
            b"output_index" => (Member::OutputIndex, 1),
            b"item" => (Member::Item, 2),
            b"response" => (Member::Response, 3),
            _ => (Member::Other, usize::MAX),
        };
        if member == Member::Other {
            self.member = member;
            return Take::Skip;
        }
        if std::mem::replace(&mut self.seen[slot], true) {
            self.fail();
            return Take::Skip;
        }
        self.member = match member {
            // An item no read will take is not held.
            Member::Item if self.skip_items => Member::Other,
            Member::Item if matches!(&self.kind, Some(Some(kind)) if kind != ITEM_DONE) => Member::Other,
            Member::Response => {
                self.response = Some(Box::new(JsonStream::head(self.limits)));
                Member::Response
            }
            member => member,
        };
        match self.member {
            Member::Other => Take::Skip,
            _ => Take::Value,
        }
    }

    /// A member's value ended.
    fn member_ended(&mut self) {
        let held = match std::mem::take(&mut self.over) {
            true => Held::TooLong,
            false => Held::Text(std::mem::take(&mut self.held)),
        };
        match self.member {
            Member::Type => match held {
                // No event the tap reads has so long a type.
                Held::TooLong => self.kind = Some(Some(String::new())),
                Held::Text(text) => match json_string(Some(text)) {
                    Ok(kind) => self.kind = Some(kind),
                    Err(_) => self.fail(),
                },
            },
            Member::OutputIndex => self.output_index = Some(held),
            Member::Item => self.item = Some(held),
            Member::Response | Member::Other => {}
        }
        self.member = Member::Other;
    }
}
