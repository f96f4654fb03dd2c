//! The tap: reads a provider's answer incrementally, as its chunks pass to the client, and
//! says at the end what the ledger should record.
//!
//! What is recorded, and when nothing is:
//!
//! - JSON (`application/json`): the whole body, held up to [`TapLimits::max_json_bytes`], read
//!   at [`Tap::finish`] as `{"id", "model", "status", "output": [items]}`. Nothing when the body
//!   is larger, is not such an object, or has a `status` other than `completed` (a `queued`
//!   background response has no output yet). A body without `status` (the `CompactResource`
//!   of `/responses/compact`) is recorded.
//! - Events (`text/event-stream`): each event's `data` is read as JSON when the event ends.
//!   `response.created`, `response.queued`, `response.in_progress` and `response.completed`
//!   give `response.id` and `response.model` (the last model named wins; two different ids
//!   record nothing); `response.output_item.done` gives one item. The event's type is the
//!   data's `type`, or else its `event:` field; data of `[DONE]`, empty data and events of
//!   other types are ignored; data that is not a JSON object with a string `type` (when it has
//!   one) records nothing. The answer is recorded only once a `response.completed` arrives
//!   with an id seen; `response.failed`, `response.incomplete` or `error` first, or a stream
//!   that ends before, record nothing. Events after the first terminal one are ignored.
//! - Either way: an item that is not an object with a string `type` (see
//!   [`super::item_record`]), more than [`TapLimits::max_items`] items, or an id,
//!   model, item type or `call_id` longer than [`MAX_ID_BYTES`] record nothing: a record,
//!   when made, holds every output item. A `null` item is skipped.
//!
//! Memory stays bounded by the limits whatever is fed; after giving up the tap holds nothing
//! and ignores further chunks.
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

use super::quick_item::quick_item;
use super::record::{item_record, item_record_from_value, ItemRecord, ResponseRecord};
use super::sse::{push_capped, Framing};
use super::MAX_ID_BYTES;
use crate::gate::{Field, JsonKind, OutputCall, Text};
use crate::json::Reader;

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
    /// The largest single event of a stream, in bytes (default 1 MiB).
    pub max_event_bytes: usize,
    /// The most output items one answer may have and be recorded (default 10,000).
    pub max_items: usize,
}

impl Default for TapLimits {
    fn default() -> Self {
        Self {
            max_json_bytes: 8 << 20,
            max_event_bytes: 1 << 20,
            max_items: 10_000,
        }
    }
}

/// Reads one answer as it streams. Feed it every chunk in order, then [`finish`](Tap::finish)
/// (or [`finish_kept`](Tap::finish_kept) for what it was asked to keep).
#[derive(Debug)]
pub struct Tap {
    limits: TapLimits,
    keep: Keep,
    state: State,
}

/// A finished answer: its record and what the tap was asked to keep of its output items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tapped {
    /// What the ledger records.
    pub record: ResponseRecord,
    /// With [`Tap::keep_calls`]: each `function_call` output item's call, in record order
    /// (output order for JSON, the order items finished for a stream). `None` when not asked
    /// for, or when the kept content passed its cap.
    pub calls: Option<Vec<OutputCall>>,
    /// With [`Tap::keep_items`]: each output item's JSON text as the answer wrote it, in
    /// record order (the form of [`StoredContent::output`](super::StoredContent::output)).
    /// `None` when not asked for, or when the kept content passed its cap.
    pub items: Option<Vec<String>>,
}

/// What a tap keeps besides the record.
#[derive(Debug, Clone, Copy, Default)]
struct Keep {
    calls: bool,
    items: bool,
}

/// What a tap kept so far.
#[derive(Debug, Default)]
struct Kept {
    calls: Vec<OutputCall>,
    items: Vec<String>,
    /// Bytes of text held in `calls` and `items`.
    bytes: usize,
    /// The cap was passed: nothing is kept any more.
    spilled: bool,
}

#[derive(Debug)]
enum State {
    /// The JSON body so far.
    Json(Vec<u8>),
    /// An event stream being read.
    Events(Box<Events>),
    /// Nothing will be recorded.
    GaveUp,
}

#[derive(Debug)]
struct Events {
    framing: Framing,
    facts: Facts,
}

/// What the events so far said.
#[derive(Debug, Default)]
struct Facts {
    id: Option<String>,
    model: Option<String>,
    items: Vec<ItemRecord>,
    kept: Kept,
    completed: bool,
}

/// The answer cannot be recorded.
struct GiveUp;

impl Tap {
    /// A tap for an answer of `kind`.
    pub fn new(kind: AnswerKind, limits: TapLimits) -> Tap {
        let state = match kind {
            AnswerKind::Json => State::Json(Vec::new()),
            AnswerKind::EventStream => State::Events(Box::new(Events {
                framing: Framing::new(limits.max_event_bytes),
                facts: Facts::default(),
            })),
        };
        Tap {
            limits,
            keep: Keep::default(),
            state,
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
            State::GaveUp => return,
            State::Json(body) => {
                if body.len() + chunk.len() > self.limits.max_json_bytes {
                    Err(GiveUp)
                } else {
                    push_capped(body, chunk, self.limits.max_json_bytes);
                    Ok(())
                }
            }
            State::Events(events) => {
                let Events { framing, facts } = &mut **events;
                let (limits, keep) = (&self.limits, self.keep);
                let mut outcome = Ok(());
                let framed = framing.feed(chunk, &mut |name: &[u8], data: &[u8]| {
                    if outcome.is_ok() {
                        outcome = facts.read_event(name, data, limits, keep);
                    }
                });
                framed.map_err(|_| GiveUp).and(outcome)
            }
        };
        if fed.is_err() {
            self.state = State::GaveUp;
        }
    }

    /// Whether the tap may still record the answer (it has not given up).
    pub fn is_recording(&self) -> bool {
        !matches!(self.state, State::GaveUp)
    }

    /// Whether an event stream has delivered its `response.completed` event: what follows
    /// cannot change the record, so it can be written before the rest passes on. Always
    /// `false` for JSON answers, whose end only the byte count tells.
    pub fn is_complete(&self) -> bool {
        matches!(&self.state, State::Events(events) if events.facts.completed)
    }

    /// Bytes of the answer held now: the JSON body so far, or the pending event of a stream
    /// and what was kept of the items so far.
    pub fn held_bytes(&self) -> usize {
        match &self.state {
            State::Json(body) => body.len(),
            State::Events(events) => events.framing.held_bytes() + events.facts.kept.bytes,
            State::GaveUp => 0,
        }
    }

    /// The record of the answer fed, or `None` when it cannot be recorded (see the module
    /// documentation).
    pub fn finish(self) -> Option<ResponseRecord> {
        self.finish_kept().map(|tapped| tapped.record)
    }

    /// The record of the answer fed with what the tap was asked to keep, or `None` when the
    /// answer cannot be recorded.
    pub fn finish_kept(self) -> Option<Tapped> {
        let keep = self.keep;
        match self.state {
            State::GaveUp => None,
            State::Json(body) => json_record(&body, &self.limits, keep),
            State::Events(events) => {
                let Facts {
                    id,
                    model,
                    items,
                    kept,
                    completed,
                } = events.facts;
                if !completed {
                    return None;
                }
                let record = ResponseRecord {
                    id: id?,
                    model,
                    items,
                };
                Some(kept.into_tapped(record, keep))
            }
        }
    }
}

impl Kept {
    /// Reads the output item at `index`: its record, and what `keep` asks of it while the
    /// kept texts stay within `cap` bytes. `None` when the item cannot be recorded.
    fn read(&mut self, item: &RawValue, index: usize, keep: Keep, cap: usize) -> Option<ItemRecord> {
        if !(keep.calls || keep.items) || self.spilled {
            return item_record(item);
        }
        let (record, call) = match quick_item(item.get()) {
            Some(quick) => (
                quick.record,
                quick.call.filter(|_| keep.calls).map(|call| call.at(index)),
            ),
            None => {
                let value: Value = serde_json::from_str(item.get()).ok()?;
                let record = item_record_from_value(&value)?;
                let call =
                    (keep.calls && record.item_type == "function_call").then(|| output_call(index, &value));
                (record, call)
            }
        };
        let text = keep.items.then(|| item.get());
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

    fn into_tapped(self, record: ResponseRecord, keep: Keep) -> Tapped {
        let kept = !self.spilled;
        Tapped {
            record,
            calls: (keep.calls && kept).then_some(self.calls),
            items: (keep.items && kept).then_some(self.items),
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

/// The members of a response object the ledger reads.
#[derive(Deserialize)]
struct ResponseHead<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    status: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    output: Option<Vec<Option<&'a RawValue>>>,
}

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

fn json_record(body: &[u8], limits: &TapLimits, keep: Keep) -> Option<Tapped> {
    let head: ResponseHead<'_> = read_json(body)?;
    if head.status.as_deref().is_some_and(|status| status != "completed") {
        return None;
    }
    let id = checked_id(head.id?)?;
    let model = match head.model {
        Some(model) => Some(checked_id(model)?),
        None => None,
    };
    let output = head.output?;
    if output.len() > limits.max_items {
        return None;
    }
    let mut kept = Kept::default();
    let items = output
        .into_iter()
        .enumerate()
        .filter_map(|(index, item)| Some((index, item?)))
        .map(|(index, item)| kept.read(item, index, keep, limits.max_json_bytes))
        .collect::<Option<Vec<_>>>()?;
    Some(kept.into_tapped(ResponseRecord { id, model, items }, keep))
}

/// An id (or model) to keep: not empty and at most [`MAX_ID_BYTES`].
fn checked_id(id: Cow<'_, str>) -> Option<String> {
    (!id.is_empty() && id.len() <= MAX_ID_BYTES).then(|| id.into_owned())
}

impl Facts {
    fn read_event(&mut self, name: &[u8], data: &[u8], limits: &TapLimits, keep: Keep) -> Result<(), GiveUp> {
        if self.completed || data.is_empty() || data == b"[DONE]" {
            return Ok(());
        }
        let event: EventData<'_> = read_json(data).ok_or(GiveUp)?;
        let kind = match &event.kind {
            Some(kind) => kind.as_ref(),
            None => match std::str::from_utf8(name) {
                Ok(name) => name,
                Err(_) => return Ok(()),
            },
        };
        match kind {
            "response.created" | "response.queued" | "response.in_progress" => {
                self.read_response(event.response)
            }
            "response.completed" => {
                self.read_response(event.response)?;
                self.completed = true;
                Ok(())
            }
            "response.failed" | "response.incomplete" | "error" => Err(GiveUp),
            "response.output_item.done" => {
                let Some(item) = event.item else {
                    return Ok(());
                };
                if self.items.len() >= limits.max_items {
                    return Err(GiveUp);
                }
                let index = event
                    .output_index
                    .and_then(|index| index.get().parse::<usize>().ok())
                    .unwrap_or(self.items.len());
                let record = self.kept.read(item, index, keep, limits.max_json_bytes);
                self.items.push(record.ok_or(GiveUp)?);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Takes the id and model of a response-state event's `response`.
    fn read_response(&mut self, response: Option<&RawValue>) -> Result<(), GiveUp> {
        let response = response.ok_or(GiveUp)?;
        let head: ResponseHead<'_> = Reader::read(response.get()).map_err(|_| GiveUp)?;
        if let Some(id) = head.id {
            let id = checked_id(id).ok_or(GiveUp)?;
            match &self.id {
                Some(known) if *known != id => return Err(GiveUp),
                Some(_) => {}
                None => self.id = Some(id),
            }
        }
        if let Some(model) = head.model {
            self.model = Some(checked_id(model).ok_or(GiveUp)?);
        }
        Ok(())
    }
}
