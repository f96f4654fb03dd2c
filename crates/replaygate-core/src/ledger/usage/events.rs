//! The usage of an event stream (an SSE answer, or a WebSocket turn's events): read from its
//! first terminal event, with the last model a response event named. The ledger's tap feeds
//! it the events it reads; after the tap gives up on an answer's items, and when the ledger is
//! off, the events are read here for nothing else ([`TerminalUsage::read_held`],
//! [`TerminalUsage::read_streamed`]).

use std::borrow::Cow;

use serde::Deserialize;

use super::{usage_of_text, AnswerUsage, ReadUsage, UsageValue};
use crate::ledger::event_stream::EventStream;
use crate::ledger::json_stream::UsageText;
use crate::ledger::MAX_ID_BYTES;

/// What a stream's events said of its usage so far.
#[derive(Debug, Default)]
pub(crate) struct TerminalUsage {
    model: Option<String>,
    /// The usage of its first terminal event, once read.
    usage: Option<AnswerUsage>,
}

/// What kind of event a `type` names, for its usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventKind {
    /// `response.created`, `response.queued`, `response.in_progress`: a model, no usage yet.
    Progress,
    /// `response.completed`, `.incomplete`, `.failed`, `.cancelled`: the usage.
    Terminal,
    /// `error`: terminal, without usage.
    Error,
    /// Any other.
    Other,
}

impl EventKind {
    /// The kind of an event whose type is `kind`.
    pub(crate) fn of(kind: &str) -> EventKind {
        match kind {
            "response.created" | "response.queued" | "response.in_progress" => EventKind::Progress,
            "response.completed" | "response.incomplete" | "response.failed" | "response.cancelled" => {
                EventKind::Terminal
            }
            "error" => EventKind::Error,
            _ => EventKind::Other,
        }
    }
}

impl TerminalUsage {
    /// Whether the terminal event was read: nothing after it counts.
    pub(crate) fn ended(&self) -> bool {
        self.usage.is_some()
    }

    /// Notes a response event of `kind` naming `model` and carrying `usage` (`None`: the
    /// event had no `response`).
    pub(crate) fn response(&mut self, kind: EventKind, model: Option<&str>, usage: AnswerUsage) {
        if self.ended() {
            return;
        }
        if let Some(model) = model.filter(|model| !model.is_empty() && model.len() <= MAX_ID_BYTES) {
            self.model = Some(model.to_owned());
        }
        match kind {
            EventKind::Terminal => self.usage = Some(usage),
            EventKind::Error => self.usage = Some(AnswerUsage::Missing),
            EventKind::Progress | EventKind::Other => {}
        }
    }

    /// What was read: the terminal event's usage, missing without one.
    pub(crate) fn read(&self) -> ReadUsage {
        ReadUsage {
            usage: self.usage.unwrap_or(AnswerUsage::Missing),
            model: self.model.clone(),
        }
    }

    /// Reads an event held whole for its usage alone; data that is not a JSON event object
    /// is passed over.
    pub(crate) fn read_held(&mut self, name: &[u8], data: &[u8]) {
        if self.ended() || data.is_empty() || data == b"[DONE]" {
            return;
        }
        let Some(event) = simdutf8::basic::from_utf8(data)
            .ok()
            .and_then(|text| crate::json::Reader::read::<UsageEvent<'_>>(text).ok())
        else {
            return;
        };
        let Some(kind) = event_kind(event.kind.as_deref(), name) else {
            return;
        };
        let usage = event.response.as_ref().and_then(|response| response.usage);
        let model = event
            .response
            .as_ref()
            .and_then(|response| response.model.as_deref());
        self.response(kind, model, usage.map_or(AnswerUsage::Missing, |usage| usage.0));
    }

    /// Reads an event read as it streams (by [`EventStream::usage_only`]), now ended, for its
    /// usage alone.
    pub(crate) fn read_streamed(&mut self, name: &[u8], event: EventStream) {
        if self.ended() {
            return;
        }
        let Ok(event) = event.finish() else {
            return;
        };
        let Some(kind) = event_kind(event.kind.as_deref(), name) else {
            return;
        };
        match event.response {
            Some(Ok(head)) => self.response(kind, head.model.as_deref(), head.usage.usage()),
            Some(Err(_)) | None => self.response(kind, None, AnswerUsage::Missing),
        }
    }
}

impl UsageText {
    /// The usage this text reads as.
    pub(crate) fn usage(&self) -> AnswerUsage {
        match self {
            UsageText::Text(text) => usage_of_text(text),
            UsageText::Absent | UsageText::Bad => AnswerUsage::Missing,
        }
    }
}

/// The kind of an event: its data's `type`, else its `event` name (`None`: neither reads).
fn event_kind(kind: Option<&str>, name: &[u8]) -> Option<EventKind> {
    match kind {
        Some(kind) => Some(EventKind::of(kind)),
        None => std::str::from_utf8(name).ok().map(EventKind::of),
    }
}

/// The members of an event's data the usage is read from.
#[derive(Deserialize)]
struct UsageEvent<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    response: Option<UsageResponse<'a>>,
}

/// The members of an event's `response` the usage is read from.
#[derive(Deserialize)]
struct UsageResponse<'a> {
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Option<UsageValue>,
}
