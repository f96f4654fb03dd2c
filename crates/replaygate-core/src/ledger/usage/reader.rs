//! The reader of an answer's usage when the ledger is off: the ledger's own readers, asked for
//! nothing but `model` and `usage`. A JSON answer is read as it streams by a head reader
//! ([`JsonStream::head`]), which passes its output by; an event stream is framed as the tap
//! frames it, each event read for its type and its response's `model` and `usage`
//! ([`TerminalUsage`]), an event too large to hold read as it streams with its item passed by.
//! It holds at most one event of [`TapLimits::max_event_bytes`], whatever the answer's size.

use super::{ReadUsage, TerminalUsage};
use crate::ledger::event_stream::EventStream;
use crate::ledger::json_stream::JsonStream;
use crate::ledger::sse::{Framing, Sink};
use crate::ledger::{AnswerKind, TapLimits};

/// Reads one answer's usage as it streams: feed it every chunk in order, then
/// [`end`](UsageReader::end) it, at the answer's end or when it stopped before.
#[derive(Debug)]
pub struct UsageReader {
    state: State,
}

#[derive(Debug)]
enum State {
    Json(Box<JsonStream>),
    Events(Box<EventUsage>),
}

/// An event stream's usage, read past everything else.
#[derive(Debug)]
struct EventUsage {
    framing: Framing,
    usage: TerminalUsage,
    large: Option<Box<EventStream>>,
}

impl UsageReader {
    /// A reader of an answer of `kind`.
    pub fn new(kind: AnswerKind) -> UsageReader {
        let limits = TapLimits::default();
        let state = match kind {
            AnswerKind::Json => State::Json(Box::new(JsonStream::head(limits))),
            AnswerKind::EventStream => State::Events(Box::new(EventUsage {
                framing: Framing::new(limits.max_event_bytes.max(b"[DONE]".len())),
                usage: TerminalUsage::default(),
                large: None,
            })),
        };
        UsageReader { state }
    }

    /// Reads the next chunk of the answer.
    pub fn feed(&mut self, chunk: &[u8]) {
        match &mut self.state {
            State::Json(stream) => stream.feed(chunk),
            State::Events(events) => {
                if events.usage.ended() {
                    return;
                }
                let EventUsage {
                    framing,
                    usage,
                    large,
                } = &mut **events;
                framing.feed(chunk, &mut UsageSink { usage, large });
            }
        }
    }

    /// Whether an event stream's terminal event was read: what follows cannot change its
    /// usage. Always `false` for a JSON answer.
    pub fn has_ended(&self) -> bool {
        matches!(&self.state, State::Events(events) if events.usage.ended())
    }

    /// What the answer said: its usage (missing unless a JSON answer was read to its end, or
    /// a stream's terminal event was read), and the model it named.
    pub fn end(self) -> ReadUsage {
        match self.state {
            State::Json(stream) => stream.read_usage(),
            State::Events(events) => events.usage.read(),
        }
    }
}

/// Where the framing delivers a stream's events, read for their usage alone.
pub(crate) struct UsageSink<'a> {
    pub(crate) usage: &'a mut TerminalUsage,
    pub(crate) large: &'a mut Option<Box<EventStream>>,
}

impl Sink for UsageSink<'_> {
    fn event(&mut self, name: &[u8], data: &[u8]) {
        self.usage.read_held(name, data);
    }

    fn data(&mut self, bytes: &[u8]) {
        if self.usage.ended() {
            return;
        }
        self.large
            .get_or_insert_with(|| Box::new(EventStream::usage_only(TapLimits::default())))
            .feed(bytes);
    }

    fn end(&mut self, name: &[u8]) {
        if let Some(large) = self.large.take() {
            self.usage.read_streamed(name, *large);
        }
    }
}
