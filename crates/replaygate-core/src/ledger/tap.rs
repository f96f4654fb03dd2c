//! The tap: reads a provider's answer incrementally, as its chunks pass to the client, and
//! says at the end ([`Tap::end`]) what the ledger should record ([`Ended`]): the answer's output
//! items, each read whole; the response's id alone, when its items cannot be read or it has
//! none yet, so that its team still owns it; or nothing, when no response id was read.
//!
//! - JSON (`application/json`): the whole body, held up to [`TapLimits::max_json_bytes`], read
//!   at the end as `{"id", "model", "status", "output": [items]}`. A larger body is read as it
//!   streams instead (the `json_stream` module), holding one output item at a time, and records
//!   the same. By `status`: `completed`, or none (the `CompactResource` of
//!   `/responses/compact`), every item; `incomplete`, `failed` or `cancelled`, the items it has
//!   (each is whole in a JSON answer), or its id alone when it has none; `queued`,
//!   `in_progress` or any other, its id alone (a background response has no final output
//!   yet). A body that is not such an object, or is cut short, gives the id it named before
//!   it could no longer be read, if any; an output item over [`TapLimits::max_item_bytes`]
//!   likewise ([`Tap::too_large`] then says so).
//! - Events (`text/event-stream`): each event's `data` is read as JSON when the event ends:
//!   held whole up to [`TapLimits::max_event_bytes`], read as it streams past that (the
//!   `event_stream` module: one item held at most, [`TapLimits::max_item_bytes`]), with the same
//!   records and digests.
//!   `response.created`, `response.queued`, `response.in_progress` and the terminal events
//!   give `response.id` and `response.model` (the last model named wins; two different ids
//!   record nothing); `response.output_item.done` gives one item. The event's type is the
//!   data's `type`, or else its `event:` field; data of `[DONE]`, empty data and events of
//!   other types are ignored. The first terminal event ends the answer (events after it are
//!   ignored): `response.completed` of a `completed` response records every item; any other
//!   (`response.incomplete`, `response.failed`, `response.cancelled`, `error`, or a
//!   `response.completed` of a response with another `status`) records the items delivered
//!   whole so far, as does a stream that stops before its terminal event (it ended, broke or
//!   lost its client), or the id alone when none was. Data that is not a JSON object with a
//!   string `type` (when it has one), or an item over [`TapLimits::max_item_bytes`]
//!   ([`Tap::too_large`]), makes the tap give up on the items: the id read before, if any, is
//!   what it records.
//! - Either way: an item that is not an object with a string `type` (see
//!   [`super::item_record`]), more than [`TapLimits::max_items`] items, or an item type or
//!   `call_id` longer than [`MAX_ID_BYTES`](super::MAX_ID_BYTES) leave the id alone to record:
//!   a record of items, when made, holds every output item read. A `null` item is skipped. A
//!   response id longer than that records nothing.
//!
//! Memory stays bounded by the limits whatever is fed; after giving up the tap holds nothing
//! but the id and ignores further chunks, except that a stream's events are still framed and
//! read for the answer's usage alone (below).
//!
//! The tap also reads the answer's usage and model ([`Tap::end_read`]; `crate::ledger::usage` says
//! what is read): a JSON answer's top-level `usage`, a stream's first terminal event's
//! `response.usage`. A large JSON answer the tap gave up on has its usage missing.
//!
//! Besides the record, a tap can keep, when asked ([`Tap::keep_calls`], [`Tap::keep_items`];
//! both off by default), the [`OutputCall`] of each `function_call` output item (for the
//! response-side arguments check) and each output item's JSON text as the answer wrote it (for
//! [`StoredContent::output`](super::StoredContent::output)). What it keeps of one answer is
//! held within [`TapLimits::max_json_bytes`] (what a JSON answer may hold anyway); past that it
//! keeps nothing more and drops what it kept, and the record is still made.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::ended::{checked_id, Ended, Finish};
use super::event_stream::EventStream;
use super::json_stream::{Head, JsonStream, Unrecorded};
use super::record::{item_record_from_value, ItemRecord, ResponseRecord};
use super::sse::{push_capped, Framing, Sink};
use crate::gate::provenance::quick::{quick_item, ItemInPlace};
use crate::gate::OutputCall;
use crate::json::{Field, JsonKind, Reader, Text};
use crate::ledger::usage::events::EventKind;
use crate::ledger::usage::reader::UsageSink;
use crate::ledger::usage::{AnswerUsage, ReadUsage, TerminalUsage, UsageValue};

/// How the answer is encoded, from its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerKind {
    /// `application/json`: one response object.
    Json,
    /// `text/event-stream`: server-sent events.
    EventStream,
}

impl AnswerKind {
    /// The kind named by a `Content-Type` value (its media type, in any case; parameters
    /// such as `charset` are ignored). `None` for any other media type.
    pub fn from_content_type(value: &str) -> Option<AnswerKind> {
        let media_type = value.split(';').next().unwrap_or("").trim();
        if media_type.eq_ignore_ascii_case("application/json") {
            Some(AnswerKind::Json)
        } else if media_type.eq_ignore_ascii_case("text/event-stream") {
            Some(AnswerKind::EventStream)
        } else {
            None
        }
    }
}

/// How much a [`Tap`] may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TapLimits {
    /// The largest JSON answer recorded, in bytes (default 8 MiB).
    pub max_json_bytes: usize,
    /// The largest event data of a stream held whole, in bytes (default 1 MiB); larger event
    /// data is read as it streams.
    pub max_event_bytes: usize,
    /// The most output items one answer may have and be recorded (default 10,000).
    pub max_items: usize,
    /// The largest single output item read as it streams, in bytes (default 32 MiB): an item
    /// of a JSON answer over `max_json_bytes`, or of an event over `max_event_bytes`.
    pub max_item_bytes: usize,
}

impl Default for TapLimits {
    fn default() -> Self {
        Self {
            max_json_bytes: 8 << 20,
            max_event_bytes: 1 << 20,
            max_items: 10_000,
            max_item_bytes: 32 << 20,
        }
    }
}

/// Reads one answer as it streams. Feed it every chunk in order, then [`end`](Tap::end) it
/// (or [`finish_kept`](Tap::finish_kept) for its items alone).
#[derive(Debug)]
pub struct Tap {
    limits: TapLimits,
    keep: Keep,
    state: State,
    /// It gave up because a cap was passed (see [`Tap::too_large`]).
    too_large: bool,
}

/// A finished answer: its record and what the tap was asked to keep of its output items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tapped {
    /// What the ledger records.
    pub record: ResponseRecord,
    /// Whether the response completed, so `record` holds every output item it has. `false`
    /// for one that ended `incomplete`, `failed` or `cancelled` (or whose stream stopped
    /// before its end): `record` holds the items its answer delivered whole, and the provider
    /// may hold more.
    pub complete: bool,
    /// With [`Tap::keep_calls`]: each `function_call` output item's call, in record order
    /// (output order for JSON, the order items finished for a stream). `None` when not asked
    /// for, or when the kept content passed its cap.
    pub calls: Option<Vec<OutputCall>>,
    /// With [`Tap::keep_items`]: each output item's JSON text as the answer wrote it, in
    /// record order (the form of [`StoredContent::output`](super::StoredContent::output)).
    /// `None` when not asked for, or when the kept content passed its cap.
    pub items: Option<Vec<String>>,
    /// The answer said `store: false`: the provider keeps nothing of the response, so its
    /// items cannot be named by `id` alone later (docs/reasons.md#state_not_stored).
    pub not_stored: bool,
}

/// What a tap keeps besides the record.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Keep {
    calls: bool,
    items: bool,
}

/// What a tap kept so far.
#[derive(Debug, Default)]
pub(crate) struct Kept {
    calls: Vec<OutputCall>,
    items: Vec<String>,
    /// Bytes of text held in `calls` and `items`.
    pub(crate) bytes: usize,
    /// The cap was passed: nothing is kept any more.
    spilled: bool,
}

#[derive(Debug)]
enum State {
    /// The JSON body so far.
    Json(Vec<u8>),
    /// A JSON body over `max_json_bytes`, read as it streams.
    JsonStream(Box<JsonStream>),
    /// An event stream being read.
    Events(Box<Events>),
    /// No item will be recorded: what follows is ignored. The response's id and model, when
    /// they were read before, are ([`Ended::IdOnly`] at the end; else [`Ended::Nothing`]).
    GaveUp(Ended),
}

#[derive(Debug)]
struct Events {
    framing: Framing,
    facts: Facts,
    /// The event over `max_event_bytes` being read as it streams.
    large: Option<Box<EventStream>>,
    /// The tap gave up on the items: what it records (the id read before, or nothing). The
    /// events are read on for the usage alone.
    gave_up: Option<Ended>,
}

/// What the events so far said.
#[derive(Debug, Default)]
struct Facts {
    id: Option<String>,
    model: Option<String>,
    items: Vec<ItemRecord>,
    kept: Kept,
    /// The usage its events said.
    usage: TerminalUsage,
    /// A response-state event's `response` said `store: false`.
    not_stored: bool,
    /// Its terminal event was read: `Some(true)` a `response.completed` of a response
    /// `completed`, `Some(false)` any other (`response.incomplete`, `.failed`, `.cancelled`,
    /// `error`, or a `response.completed` of a response with another `status`).
    ended: Option<bool>,
}

/// No item of the answer can be recorded: its id alone, if it was read.
struct GiveUp(Ended);

impl Tap {
    /// A tap for an answer of `kind`.
    pub fn new(kind: AnswerKind, limits: TapLimits) -> Tap {
        let state = match kind {
            AnswerKind::Json => State::Json(Vec::new()),
            AnswerKind::EventStream => State::Events(Box::new(Events {
                // `[DONE]` is always held whole, to be told from JSON.
                framing: Framing::new(limits.max_event_bytes.max(b"[DONE]".len())),
                facts: Facts::default(),
                large: None,
                gave_up: None,
            })),
        };
        Tap {
            limits,
            keep: Keep::default(),
            state,
            too_large: false,
        }
    }

    /// Also keep the [`OutputCall`] of each `function_call` output item (default: off).
    pub fn keep_calls(mut self, keep: bool) -> Tap {
        self.keep.calls = keep;
        self
    }

    /// Also keep each output item's JSON text (default: off), for
    /// [`StoredContent::output`](super::StoredContent::output) under `store_items`.
    pub fn keep_items(mut self, keep: bool) -> Tap {
        self.keep.items = keep;
        self
    }

    /// Reads the next chunk of the answer. Never fails: an answer that cannot be recorded
    /// makes the tap give up, and it then ignores what follows.
    pub fn feed(&mut self, chunk: &[u8]) {
        let fed = match &mut self.state {
            State::GaveUp(_) => return,
            State::Json(body) => {
                if body.len() + chunk.len() > self.limits.max_json_bytes {
                    // Too large to hold whole: read on as it streams, from what came so far.
                    let mut stream = JsonStream::new(self.limits, self.keep);
                    stream.feed(body);
                    stream.feed(chunk);
                    self.state = State::JsonStream(Box::new(stream));
                } else {
                    push_capped(body, chunk, self.limits.max_json_bytes);
                }
                Ok(())
            }
            State::JsonStream(stream) => {
                stream.feed(chunk);
                match stream.failed() {
                    None => Ok(()),
                    Some(why) => {
                        self.too_large = why == Unrecorded::ItemTooLarge;
                        Err(GiveUp(stream.id_only()))
                    }
                }
            }
            State::Events(events) => {
                let Events {
                    framing,
                    facts,
                    large,
                    gave_up,
                } = &mut **events;
                if gave_up.is_some() {
                    let mut sink = UsageSink {
                        usage: &mut facts.usage,
                        large,
                    };
                    framing.feed(chunk, &mut sink);
                    return;
                }
                let mut sink = EventSink {
                    facts,
                    large,
                    limits: &self.limits,
                    keep: self.keep,
                    outcome: Ok(()),
                };
                framing.feed(chunk, &mut sink);
                let outcome = sink.outcome;
                self.too_large = outcome == Err(Unrecorded::ItemTooLarge);
                if outcome.is_err() {
                    // The items go; the events are read on for the usage.
                    *gave_up = Some(facts.id_only());
                    facts.items = Vec::new();
                    facts.kept = Kept::default();
                }
                Ok(())
            }
        };
        if let Err(GiveUp(known)) = fed {
            self.state = State::GaveUp(known);
        }
    }

    /// Whether the tap gave up because a cap was passed: an output item read as it streams (of
    /// a JSON answer or an event too large to hold whole) over [`TapLimits::max_item_bytes`].
    /// Such an answer's items are not recorded (its id alone, when it was read), and it should
    /// be reported.
    pub fn too_large(&self) -> bool {
        self.too_large
    }

    /// Whether the tap may still record the answer's items (it has not given up).
    pub fn is_recording(&self) -> bool {
        match &self.state {
            State::GaveUp(_) => false,
            State::Events(events) => events.gave_up.is_none(),
            State::Json(_) | State::JsonStream(_) => true,
        }
    }

    /// Whether an event stream has delivered its terminal event (`response.completed`,
    /// `response.incomplete`, `response.failed`, `response.cancelled` or `error`): what
    /// follows cannot change the record, so it can be written before the rest passes on.
    /// Always `false` for JSON answers, whose end only the byte count tells.
    pub fn has_ended(&self) -> bool {
        matches!(&self.state, State::Events(events) if events.gave_up.is_none() && events.facts.ended.is_some())
    }

    /// Bytes of the answer held now: the JSON body so far, or the pending event of a stream
    /// (what a large one keeps as it streams) and what was kept of the items so far.
    pub fn held_bytes(&self) -> usize {
        match &self.state {
            State::Json(body) => body.len(),
            State::JsonStream(stream) => stream.held_bytes(),
            State::Events(events) => {
                events.framing.held_bytes()
                    + events.large.as_ref().map_or(0, |large| large.held_bytes())
                    + events.facts.kept.bytes
            }
            State::GaveUp(_) => 0,
        }
    }

    /// [`Tap::end`] of a JSON answer given whole, `body`, to a tap fed nothing yet: read where
    /// it lies rather than copied into the tap first.
    pub fn end_whole(self, body: &[u8]) -> Ended {
        self.end_whole_read(body).0
    }

    /// [`Tap::end_whole`] with the answer's usage, as [`Tap::end_read`].
    pub fn end_whole_read(mut self, body: &[u8]) -> (Ended, ReadUsage) {
        match &self.state {
            State::Json(held) if held.is_empty() && body.len() <= self.limits.max_json_bytes => {
                json_record_read(body, &self.limits, self.keep)
            }
            _ => {
                self.feed(body);
                self.end_read()
            }
        }
    }

    /// What the answer fed leaves to record (see the module documentation): its items, its
    /// response's id alone, or nothing. Call it at the answer's end, or when it stopped before
    /// (it broke, or its client went away): a stream's items read whole so far are then
    /// recorded as those of a response that did not complete.
    pub fn end(self) -> Ended {
        self.end_read().0
    }

    /// [`Tap::end`], with what the answer said of its usage (`crate::ledger::usage`): a JSON
    /// answer's `usage`, when it was read to its end; a stream's first terminal event's,
    /// when one was read (also after the tap gave up on the items). Missing otherwise.
    pub fn end_read(self) -> (Ended, ReadUsage) {
        let keep = self.keep;
        match self.state {
            State::GaveUp(known) => (known, ReadUsage::missing()),
            State::Json(body) => json_record_read(&body, &self.limits, keep),
            State::JsonStream(stream) => {
                let usage = stream.read_usage();
                (stream.end(), usage)
            }
            State::Events(events) => {
                let Events { facts, gave_up, .. } = *events;
                let usage = facts.usage.read();
                match gave_up {
                    Some(known) => (known, usage),
                    None => (facts.end(keep), usage),
                }
            }
        }
    }

    /// The record of the answer's items with what the tap was asked to keep ([`Ended::Items`]
    /// of [`Tap::end`]), or `None` when they cannot be recorded.
    pub fn finish_kept(self) -> Option<Tapped> {
        self.end().items()
    }

    /// [`Tap::finish_kept`] of a JSON answer given whole ([`Tap::end_whole`]).
    pub fn finish_whole(self, body: &[u8]) -> Option<Tapped> {
        self.end_whole(body).items()
    }

    /// The record of the answer's items, or `None` when they cannot be recorded.
    pub fn finish(self) -> Option<ResponseRecord> {
        self.finish_kept().map(|tapped| tapped.record)
    }
}

impl Facts {
    /// What the events read leave to record: the items of a stream that delivered its
    /// response's id (those read whole, of a response that did not complete unless its
    /// `response.completed` said so); the id alone when no item was read whole of one that
    /// did not complete; nothing without an id.
    fn end(self, keep: Keep) -> Ended {
        let Facts {
            id,
            model,
            items,
            kept,
            ended,
            not_stored,
            ..
        } = self;
        let Some(id) = id else {
            return Ended::Nothing;
        };
        let complete = ended == Some(true);
        if !complete && items.is_empty() {
            return Ended::IdOnly {
                id,
                model,
                not_stored,
            };
        }
        Ended::Items(kept.into_tapped(ResponseRecord { id, model, items }, keep, complete))
            .not_stored(not_stored)
    }

    /// The response's id and model read so far, alone.
    fn id_only(&self) -> Ended {
        match &self.id {
            Some(id) => Ended::IdOnly {
                id: id.clone(),
                model: self.model.clone(),
                not_stored: self.not_stored,
            },
            None => Ended::Nothing,
        }
    }
}

impl Kept {
    /// Reads the output item at `index` with JSON text `item` (its members read in place
    /// when `in_place` holds them): its record, and what `keep` asks of it while the kept
    /// texts stay within `cap` bytes. `None` when the item cannot be recorded.
    pub(crate) fn read_with(
        &mut self,
        item: &str,
        in_place: Option<ItemInPlace<'_>>,
        index: usize,
        keep: Keep,
        cap: usize,
    ) -> Option<ItemRecord> {
        let quick = match in_place {
            Some(members) => members.quick(),
            None => quick_item(item),
        };
        if !(keep.calls || keep.items) || self.spilled {
            return match quick {
                Some(quick) => Some(quick.record),
                None => item_record_from_value(&serde_json::from_str(item).ok()?),
            };
        }
        let (record, call) = match quick {
            Some(quick) => (
                quick.record,
                quick.call.filter(|_| keep.calls).map(|call| call.at(index)),
            ),
            None => {
                let value: Value = serde_json::from_str(item).ok()?;
                let record = item_record_from_value(&value)?;
                let call =
                    (keep.calls && record.item_type == "function_call").then(|| output_call(index, &value));
                (record, call)
            }
        };
        let text = keep.items.then_some(item);
        let added = call.as_ref().map_or(0, call_bytes) + text.map_or(0, str::len);
        if self.bytes + added > cap {
            *self = Kept {
                spilled: true,
                ..Kept::default()
            };
            return Some(record);
        }
        self.bytes += added;
        self.calls.extend(call);
        self.items.extend(text.map(str::to_owned));
        Some(record)
    }

    fn into_tapped(self, record: ResponseRecord, keep: Keep, complete: bool) -> Tapped {
        let kept = !self.spilled;
        Tapped {
            record,
            complete,
            calls: (keep.calls && kept).then_some(self.calls),
            items: (keep.items && kept).then_some(self.items),
            not_stored: false,
        }
    }
}

/// The call a `function_call` item makes.
fn output_call(index: usize, item: &Value) -> OutputCall {
    let text = |name: &str| item.get(name).and_then(Value::as_str).map(str::to_owned);
    let arguments = match item.get("arguments") {
        None => Field::Absent,
        Some(Value::String(text)) => Field::Str(Text::Owned(text.as_str().into())),
        Some(value) => Field::Other(json_kind(value)),
    };
    OutputCall {
        index,
        call_id: text("call_id"),
        name: text("name"),
        arguments,
    }
}

fn json_kind(value: &Value) -> JsonKind {
    match value {
        Value::Null => JsonKind::Null,
        Value::Bool(_) => JsonKind::Boolean,
        Value::Number(_) => JsonKind::Number,
        Value::String(_) => JsonKind::String,
        Value::Array(_) => JsonKind::Array,
        Value::Object(_) => JsonKind::Object,
    }
}

/// The text bytes a kept call holds.
fn call_bytes(call: &OutputCall) -> usize {
    let arguments = call.arguments.as_str().map_or(0, str::len);
    call.call_id.as_deref().map_or(0, str::len) + call.name.as_deref().map_or(0, str::len) + arguments
}

/// The members of a response object the ledger reads, each output item read as an `O`: as raw
/// text ([`RawItem`]) or in place ([`ItemInPlace`]).
#[derive(Deserialize)]
#[serde(bound(deserialize = "'de: 'a, O: Deserialize<'de>"))]
struct ResponseHead<'a, O> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    status: Option<Cow<'a, str>>,
    /// Read leniently: only a `false` counts ([`says_not_stored`]).
    #[serde(borrow, default)]
    store: Option<&'a RawValue>,
    #[serde(default)]
    output: Option<Vec<O>>,
    #[serde(default)]
    usage: Option<UsageValue>,
}

/// An output item as raw text (`None`: `null`).
type RawItem<'a> = Option<&'a RawValue>;

/// The members of an event's data the ledger reads.
#[derive(Deserialize)]
struct EventData<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    response: Option<&'a RawValue>,
    #[serde(borrow, default)]
    item: Option<&'a RawValue>,
    /// Read leniently: an odd `output_index` only loses the item's place, not the record.
    #[serde(borrow, default)]
    output_index: Option<&'a RawValue>,
}

/// Reads `bytes` as one JSON value of type `T` with the gate's reader (`None`: not UTF-8, not
/// JSON, or not a `T`).
fn read_json<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Option<T> {
    Reader::read(simdutf8::basic::from_utf8(bytes).ok()?).ok()
}

/// What a JSON answer held whole leaves to record, read in one pass when it can be. A text
/// that is not a response object the whole-body read takes (not JSON, cut short, a member of
/// the wrong kind) is read as it would stream, for its id alone.
#[cfg(test)]
fn json_record(body: &[u8], limits: &TapLimits, keep: Keep) -> Ended {
    json_record_read(body, limits, keep).0
}

/// [`json_record`] with the answer's usage and model, read in the same pass (a text no whole
/// read takes has its usage missing).
fn json_record_read(body: &[u8], limits: &TapLimits, keep: Keep) -> (Ended, ReadUsage) {
    let in_place = match simdutf8::basic::from_utf8(body) {
        Ok(text) => json_record_in_place(text, limits, keep).ok(),
        Err(_) => None,
    };
    match in_place.or_else(|| json_record_two_pass(body, limits, keep)) {
        Some(read) => read,
        None => (id_read_as_it_streams(body, limits), ReadUsage::missing()),
    }
}

/// The usage and model of a response object's head.
fn read_usage(model: Option<&Cow<'_, str>>, usage: Option<UsageValue>) -> ReadUsage {
    ReadUsage {
        usage: usage.map_or(AnswerUsage::Missing, |usage| usage.0),
        model: model.cloned().and_then(checked_id),
    }
}

/// The id (and model) of a JSON answer no whole read takes, as far as reading it as it
/// streams reads them: [`Ended::IdOnly`] or [`Ended::Nothing`], never its items.
fn id_read_as_it_streams(body: &[u8], limits: &TapLimits) -> Ended {
    let mut stream = JsonStream::new(*limits, Keep::default());
    stream.feed(body);
    stream.end().id_only()
}

/// The answer could not be read in one pass (an output item that is not an object or has a
/// member twice, or a text that is not JSON): the two-pass read decides.
struct NotInPlace;

/// [`json_record`] in one pass over the answer: each output item's members are read where the
/// item stands, and its text (for the full read of an item the quick read is unsure of, and
/// for `store_items`) is the span the reader noted. Where it answers, it answers as
/// [`json_record_two_pass`] does.
fn json_record_in_place(
    text: &str,
    limits: &TapLimits,
    keep: Keep,
) -> Result<(Ended, ReadUsage), NotInPlace> {
    let mut reader = Reader::new(text);
    let ResponseHead::<'_, ItemInPlace<'_>> {
        id,
        model,
        status,
        store,
        output,
        usage,
    } = Deserialize::deserialize(&mut reader)
        .and_then(|head| reader.end().map(|()| head))
        .map_err(|_| NotInPlace)?;
    let read = read_usage(model.as_ref(), usage);
    let not_stored = says_not_stored(store);
    let spans = reader.take_spans();
    let Some(output) = output else {
        let none: Option<(usize, std::iter::Empty<_>)> = None;
        let ended = answer_record(id, model, status.as_deref(), none, limits, keep);
        return Ok((ended.not_stored(not_stored), read));
    };
    if spans.len() != output.len() {
        return Err(NotInPlace);
    }
    let count = output.len();
    let items = output
        .into_iter()
        .zip(spans)
        .enumerate()
        .map(|(index, (item, span))| (index, &text[span], Some(item)));
    let ended = answer_record(id, model, status.as_deref(), Some((count, items)), limits, keep);
    Ok((ended.not_stored(not_stored), read))
}

/// [`json_record`] the two-pass way: the answer's head read with each output item as raw
/// text, then each item read on its own. `None` when the head is not a response object.
fn json_record_two_pass(body: &[u8], limits: &TapLimits, keep: Keep) -> Option<(Ended, ReadUsage)> {
    let ResponseHead::<'_, RawItem<'_>> {
        id,
        model,
        status,
        store,
        output,
        usage,
    } = read_json(body)?;
    let read = read_usage(model.as_ref(), usage);
    let output = output.map(|output| {
        let count = output.len();
        let items = output
            .into_iter()
            .enumerate()
            .filter_map(|(index, item)| Some((index, item?.get(), None)));
        (count, items)
    });
    let ended = answer_record(id, model, status.as_deref(), output, limits, keep);
    Some((ended.not_stored(says_not_stored(store)), read))
}

/// Whether a response object's `store` member says the provider keeps nothing of it: `false`
/// alone does (absent, `true` or anything else: stored, as before it was read).
pub(crate) fn says_not_stored(store: Option<&RawValue>) -> bool {
    store.is_some_and(|store| store.get().trim() == "false")
}

/// What an answer with this `id`, `model` and `status` leaves to record, given its `output`:
/// the count of its items (`null` ones included), and each item with its index, its JSON text
/// and, when it was read in place, its members (`None`: no `output`).
///
/// Its items ([`Ended::Items`]) when its status is final ([`Finish`]) and every item could be
/// read (and, for a response that did not complete, there is one); else its id alone, or
/// nothing without an id to record.
fn answer_record<'a, I>(
    id: Option<Cow<'_, str>>,
    model: Option<Cow<'_, str>>,
    status: Option<&str>,
    output: Option<(usize, I)>,
    limits: &TapLimits,
    keep: Keep,
) -> Ended
where
    I: Iterator<Item = (usize, &'a str, Option<ItemInPlace<'a>>)>,
{
    let (id, model, complete) = match recordable(id, model, status) {
        Ok(head) => head,
        Err(known) => return without_items(known),
    };
    let Some((_, items)) = output.filter(|(count, _)| *count <= limits.max_items) else {
        return Ended::IdOnly {
            id,
            model,
            not_stored: false,
        };
    };
    let mut kept = Kept::default();
    let items = items
        .map(|(index, text, in_place)| kept.read_with(text, in_place, index, keep, limits.max_json_bytes))
        .collect::<Option<Vec<_>>>();
    match items {
        Some(items) if complete || !items.is_empty() => {
            Ended::Items(kept.into_tapped(ResponseRecord { id, model, items }, keep, complete))
        }
        _ => Ended::IdOnly {
            id,
            model,
            not_stored: false,
        },
    }
}

/// [`answer_record`] of an answer read as it streams, whose items are read already
/// (`None`: it had no `output`).
pub(crate) fn answer_record_streamed(
    id: Option<Cow<'_, str>>,
    model: Option<Cow<'_, str>>,
    status: Option<&str>,
    items: Option<Vec<ItemRecord>>,
    kept: Kept,
    keep: Keep,
) -> Ended {
    let (id, model, complete) = match recordable(id, model, status) {
        Ok(head) => head,
        Err(known) => return without_items(known),
    };
    match items {
        Some(items) if complete || !items.is_empty() => {
            Ended::Items(kept.into_tapped(ResponseRecord { id, model, items }, keep, complete))
        }
        _ => Ended::IdOnly {
            id,
            model,
            not_stored: false,
        },
    }
}

/// The id and model of an answer whose items may be recorded, and whether it completed; or
/// the id and model it leaves without its items (`None`: no id to record): a model that is not
/// one to record, or a status that is not final, leaves the id alone.
fn recordable(
    id: Option<Cow<'_, str>>,
    model: Option<Cow<'_, str>>,
    status: Option<&str>,
) -> Result<(String, Option<String>, bool), Option<Named>> {
    let id = id.and_then(checked_id).ok_or(None)?;
    let model = match model {
        Some(model) => match checked_id(model) {
            Some(model) => Some(model),
            None => return Err(Some((id, None))),
        },
        None => None,
    };
    match Finish::of(status) {
        Finish::Complete => Ok((id, model, true)),
        Finish::Partial => Ok((id, model, false)),
        Finish::IdOnly => Err(Some((id, model))),
    }
}

/// A response's id and the model its answer named.
type Named = (String, Option<String>);

/// What an answer leaves without its items: its id alone, when it has one to record.
fn without_items(known: Option<Named>) -> Ended {
    match known {
        Some((id, model)) => Ended::IdOnly {
            id,
            model,
            not_stored: false,
        },
        None => Ended::Nothing,
    }
}

/// Where the framing delivers a stream's events: each read into the facts, one too large to
/// hold whole as it streams.
struct EventSink<'a> {
    facts: &'a mut Facts,
    large: &'a mut Option<Box<EventStream>>,
    limits: &'a TapLimits,
    keep: Keep,
    outcome: Result<(), Unrecorded>,
}

impl Sink for EventSink<'_> {
    fn event(&mut self, name: &[u8], data: &[u8]) {
        match self.outcome {
            Ok(()) => self.outcome = self.facts.read_event(name, data, self.limits, self.keep),
            // Given up on the items: the rest is read for the usage.
            Err(_) => self.facts.usage.read_held(name, data),
        }
    }

    fn data(&mut self, bytes: &[u8]) {
        if self.outcome.is_err() {
            let mut usage = UsageSink {
                usage: &mut self.facts.usage,
                large: self.large,
            };
            return usage.data(bytes);
        }
        if self.facts.ended.is_some() {
            return;
        }
        let limits = *self.limits;
        let large = self
            .large
            .get_or_insert_with(|| Box::new(EventStream::new(limits)));
        large.feed(bytes);
        if large.failed() {
            // Not JSON: its end would record no item, so the tap stops now.
            self.outcome = Err(Unrecorded::Unreadable);
        }
    }

    fn end(&mut self, name: &[u8]) {
        // None after the terminal event: it was not read.
        let Some(large) = self.large.take() else {
            return;
        };
        match self.outcome {
            Ok(()) => self.outcome = self.facts.read_streamed(name, *large, self.limits, self.keep),
            Err(_) => self.facts.usage.read_streamed(name, *large),
        }
    }
}

/// The `response` of an event: its JSON text (an event held whole), or its head (an event
/// read as it streams).
enum EventResponse<'a> {
    Text(&'a RawValue),
    Head(Result<Head, Unrecorded>),
}

/// The members of an event the tap reads (`None`: absent or `null`).
struct Members<'a> {
    /// Its `type`; its `event` name stands in when absent.
    kind: Option<&'a str>,
    response: Option<EventResponse<'a>>,
    /// Its `item`'s JSON text, or why it was not kept.
    item: Option<Result<&'a str, Unrecorded>>,
    /// Its `output_index`'s JSON text.
    output_index: Option<&'a str>,
}

impl Facts {
    /// Reads an event held whole.
    fn read_event(
        &mut self,
        name: &[u8],
        data: &[u8],
        limits: &TapLimits,
        keep: Keep,
    ) -> Result<(), Unrecorded> {
        if self.ended.is_some() || data.is_empty() || data == b"[DONE]" {
            return Ok(());
        }
        let event: EventData<'_> = read_json(data).ok_or(Unrecorded::Unreadable)?;
        let members = Members {
            kind: event.kind.as_deref(),
            response: event.response.map(EventResponse::Text),
            item: event.item.map(|item| Ok(item.get())),
            output_index: event.output_index.map(RawValue::get),
        };
        self.read_members(name, members, limits, keep)
    }

    /// Reads an event read as it streams, now ended.
    fn read_streamed(
        &mut self,
        name: &[u8],
        event: EventStream,
        limits: &TapLimits,
        keep: Keep,
    ) -> Result<(), Unrecorded> {
        if self.ended.is_some() {
            return Ok(());
        }
        let event = event.finish()?;
        let members = Members {
            kind: event.kind.as_deref(),
            response: event.response.map(EventResponse::Head),
            item: event
                .item
                .as_ref()
                .map(|item| item.as_deref().map_err(|why| *why)),
            output_index: event.output_index.as_deref(),
        };
        self.read_members(name, members, limits, keep)
    }

    /// Reads an event's members, however the event was read; `name` is its `event` field.
    fn read_members(
        &mut self,
        name: &[u8],
        members: Members<'_>,
        limits: &TapLimits,
        keep: Keep,
    ) -> Result<(), Unrecorded> {
        let Members {
            kind,
            response,
            item,
            output_index,
        } = members;
        let kind = match kind {
            Some(kind) => kind,
            None => match std::str::from_utf8(name) {
                Ok(name) => name,
                Err(_) => return Ok(()),
            },
        };
        match kind {
            "response.created" | "response.queued" | "response.in_progress" => {
                self.read_response(EventKind::Progress, response).map(drop)
            }
            "response.completed" => {
                let completed = self.read_response(EventKind::Terminal, response)?;
                self.ended = Some(completed);
                Ok(())
            }
            "response.incomplete" | "response.failed" | "response.cancelled" => {
                if response.is_some() {
                    self.read_response(EventKind::Terminal, response)?;
                } else {
                    self.usage
                        .response(EventKind::Terminal, None, AnswerUsage::Missing);
                }
                self.ended = Some(false);
                Ok(())
            }
            "error" => {
                self.usage.response(EventKind::Error, None, AnswerUsage::Missing);
                self.ended = Some(false);
                Ok(())
            }
            "response.output_item.done" => {
                let Some(item) = item else {
                    return Ok(());
                };
                let item = item?;
                if self.items.len() >= limits.max_items {
                    return Err(Unrecorded::Unreadable);
                }
                let index = output_index
                    .and_then(|index| index.parse::<usize>().ok())
                    .unwrap_or(self.items.len());
                let record = self
                    .kept
                    .read_with(item, None, index, keep, limits.max_json_bytes);
                self.items.push(record.ok_or(Unrecorded::Unreadable)?);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Takes the id and model of a response-state event's `response` (of `kind`), and says
    /// whether its `status` is `completed` (or absent). An id other than the one read before,
    /// or one not to record, leaves the stream with no id: it names no one response. Its model
    /// and usage go to the stream's usage first.
    fn read_response(
        &mut self,
        kind: EventKind,
        response: Option<EventResponse<'_>>,
    ) -> Result<bool, Unrecorded> {
        let read = match response {
            Some(EventResponse::Text(response)) => Reader::read(response.get())
                .map(|head: ResponseHead<'_, RawItem<'_>>| {
                    let usage = head.usage.map_or(AnswerUsage::Missing, |usage| usage.0);
                    self.not_stored |= says_not_stored(head.store);
                    (head.id, head.model, head.status, usage)
                })
                .map_err(|_| Unrecorded::Unreadable),
            Some(EventResponse::Head(head)) => head.map(|head| {
                let usage = head.usage.usage();
                self.not_stored |= head.not_stored;
                (
                    head.id.map(Cow::Owned),
                    head.model.map(Cow::Owned),
                    head.status.map(Cow::Owned),
                    usage,
                )
            }),
            None => Err(Unrecorded::Unreadable),
        };
        let (id, model, status) = match read {
            Ok((id, model, status, usage)) => {
                self.usage.response(kind, model.as_deref(), usage);
                (id, model, status)
            }
            Err(why) => {
                self.usage.response(kind, None, AnswerUsage::Missing);
                return Err(why);
            }
        };
        if let Some(id) = id {
            match checked_id(id) {
                Some(id) if self.id.as_ref().is_none_or(|known| *known == id) => self.id = Some(id),
                _ => {
                    self.id = None;
                    return Err(Unrecorded::Unreadable);
                }
            }
        }
        if let Some(model) = model {
            self.model = Some(checked_id(model).ok_or(Unrecorded::Unreadable)?);
        }
        Ok(Finish::of(status.as_deref()) == Finish::Complete)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use proptest::sample::select;

    use super::*;

    const ITEMS: &[&str] = &[
        r#"{"type":"function_call","id":"fc_0123456789abcdef","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}","status":"completed"}"#,
        r#"{"type":"function_call","call_id":"c\u0031","name":null,"arguments":{"a":1}}"#,
        r#"{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"Do\"ne."},{"type":"refusal","refusal":"no"},3]}"#,
        r#"{"type":"message","content":"plain"}"#,
        r#"{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"s"}],"encrypted_content":"gAAAAB"}"#,
        r#"{"type":"compaction","encrypted_content":null}"#,
        r#"{"type":"web_search_call","id":"ws_1","status":"completed","action":{"query":"q"}}"#,
        r#"{"type":"message","content":"a","content":"b"}"#,
        r#"{"id":"no_type"}"#,
        r#"{"type":"reasoning","id":"rs_2","encrypted_content":[[[["deep"]]]]}"#,
        "null",
        "5",
        r#""text""#,
    ];

    /// An answer made of these parts, with each item as written in `ITEMS`.
    fn answer(id: &str, status: &str, model: &str, items: Option<&[&str]>) -> String {
        let mut members = vec![r#""object":"response""#.to_owned()];
        for (name, value) in [("id", id), ("status", status), ("model", model)] {
            if !value.is_empty() {
                members.push(format!(r#""{name}":{value}"#));
            }
        }
        if let Some(items) = items {
            members.push(format!(r#""output":[{}]"#, items.join(",")));
        }
        members.push(r#""usage":{"input_tokens":1,"output_tokens":2}"#.to_owned());
        format!("{{{}}}", members.join(","))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// Where the one-pass read answers, it answers as the two-pass read does; it answers
        /// every answer whose members are of the kinds it reads and whose items are all objects
        /// with no member written twice.
        #[test]
        fn the_one_pass_read_records_what_the_two_pass_read_records(
            id in select(&[r#""resp_1""#, r#""""#, "7", ""][..]),
            status in select(&[r#""completed""#, r#""incomplete""#, r#""failed""#, r#""queued""#, "7", ""][..]),
            model in select(&[r#""gpt-5""#, "null", ""][..]),
            items in proptest::option::of(prop::collection::vec(select(ITEMS), 0..6)),
            calls in any::<bool>(),
            kept_items in any::<bool>(),
            max_items in 1..8usize,
            max_json_bytes in select(&[64usize, 100_000][..]),
        ) {
            let text = answer(id, status, model, items.as_deref());
            let limits = TapLimits { max_items, max_json_bytes, ..TapLimits::default() };
            let keep = Keep { calls, items: kept_items };
            let two_pass = json_record_two_pass(text.as_bytes(), &limits, keep);
            let readable = id != "7" && status != "7" && items.iter().flatten().all(|item| item.starts_with('{') && !item.contains(r#""content":"a","content""#));
            match json_record_in_place(&text, &limits, keep) {
                Ok(one_pass) => prop_assert_eq!(Some(&one_pass), two_pass.as_ref(), "{}", text),
                Err(NotInPlace) => prop_assert!(!readable, "{}", text),
            }
            let whole = json_record(text.as_bytes(), &limits, keep);
            match two_pass {
                Some((two_pass, _)) => prop_assert_eq!(&whole, &two_pass),
                // Not a response object: its id alone, at most.
                None => prop_assert!(whole.clone().items().is_none(), "{}", text),
            }
            // Items are recorded for a final status only, and for one that did not complete
            // only when there are some; an id is recorded whenever it is one.
            if let Ended::Items(tapped) = &whole {
                prop_assert!(matches!(status, r#""completed""# | ""  | r#""incomplete""# | r#""failed""#));
                prop_assert_eq!(tapped.complete, matches!(status, r#""completed""# | ""));
                prop_assert!(tapped.complete || !tapped.record.items.is_empty());
            }
            prop_assert_eq!(whole.id().is_some(), id == r#""resp_1""#, "{}", text);
        }

        /// The answer read as it streams, cut anywhere, records what the whole-body read
        /// records: the same items with the same digests.
        #[test]
        fn the_streamed_read_records_what_the_whole_body_read_records(
            id in select(&[r#""resp_1""#, r#""""#, "7", ""][..]),
            status in select(&[r#""completed""#, r#""incomplete""#, r#""failed""#, r#""queued""#, "7", ""][..]),
            model in select(&[r#""gpt-5""#, "null", ""][..]),
            items in proptest::option::of(prop::collection::vec(select(ITEMS), 0..6)),
            calls in any::<bool>(),
            kept_items in any::<bool>(),
            max_items in 1..8usize,
            max_json_bytes in select(&[64usize, 100_000][..]),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..4),
        ) {
            let text = answer(id, status, model, items.as_deref());
            let limits = TapLimits { max_items, max_json_bytes, ..TapLimits::default() };
            let keep = Keep { calls, items: kept_items };
            let whole = json_record(text.as_bytes(), &limits, keep);
            let mut cuts: Vec<usize> = cuts.iter().map(|cut| cut.index(text.len() + 1)).collect();
            cuts.push(0);
            cuts.push(text.len());
            cuts.sort_unstable();
            let mut stream = JsonStream::new(limits, keep);
            for pair in cuts.windows(2) {
                stream.feed(&text.as_bytes()[pair[0]..pair[1]]);
            }
            prop_assert_eq!(stream.end(), whole, "{}", text);
        }
    }

    #[test]
    fn an_answer_over_the_whole_body_cap_is_recorded_as_it_streams() {
        let blob = "A".repeat(10 << 20);
        let reasoning =
            format!(r#"{{"type":"reasoning","id":"rs_big","summary":[],"encrypted_content":"{blob}"}}"#);
        let padding = format!(
            r#"{{"type":"message","id":"msg_1","content":"{}"}}"#,
            "b".repeat(2 << 20)
        );
        let text = answer(
            r#""resp_big""#,
            r#""completed""#,
            r#""gpt-5""#,
            Some(&[&reasoning, &padding]),
        );
        assert!(text.len() > 12 << 20);
        let mut tap = Tap::new(AnswerKind::Json, TapLimits::default());
        for chunk in text.as_bytes().chunks(16 << 10) {
            tap.feed(chunk);
            assert!(tap.held_bytes() <= (10 << 20) + 1024, "{}", tap.held_bytes());
        }
        let record = tap.finish().expect("recorded");
        let small = TapLimits {
            max_json_bytes: 64 << 20,
            ..TapLimits::default()
        };
        let whole = json_record(text.as_bytes(), &small, Keep::default())
            .items()
            .unwrap()
            .record;
        assert_eq!(record, whole);
        assert_eq!(record.items[0].id.as_deref(), Some("rs_big"));
        assert!(record.items[0].has_encrypted_content);

        // One item over its cap records no item, only the id read before it; the tap says why.
        let limits = TapLimits {
            max_item_bytes: 1 << 20,
            ..TapLimits::default()
        };
        let mut tap = Tap::new(AnswerKind::Json, limits);
        for chunk in text.as_bytes().chunks(16 << 10) {
            tap.feed(chunk);
        }
        assert!(tap.too_large() && !tap.is_recording());
        assert_eq!(
            tap.end(),
            Ended::IdOnly {
                id: "resp_big".into(),
                model: Some("gpt-5".into()),
                not_stored: false,
            }
        );
    }
}
