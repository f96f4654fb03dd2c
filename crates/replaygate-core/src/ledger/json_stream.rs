//! A JSON answer read as it streams, for answers over the tap's whole-body cap: the top-level
//! `id`, `model` and `status` are kept (each at most 1 KiB of JSON), and each item of the
//! top-level `output` array is held only until it ends, then read as the whole-body read reads
//! it (so its record, digest included, is the same). Memory stays within one item
//! ([`TapLimits::max_item_bytes`]) plus the small members, whatever the answer's size.
//!
//! [`JsonStream::head`] reads only the top-level `id`, `model` and `status`, skipping the
//! output as it passes: what the tap needs of the response an event carries.
//!
//! Either reader also keeps the top-level `usage` (at most [`USAGE_CAP`] bytes of JSON), for the
//! answer's usage (`crate::usage`): a `usage` too long, or written twice, reads as bad usage,
//! and never stops the read of the rest.
//!
//! The scanner follows only JSON's structure (strings, escapes, nesting); the text of each
//! item and member it keeps is read by the same readers as a whole body, and the rest of the
//! answer is held to JSON's grammar as it passes ([`JsonSyntax`]), so a malformed answer records
//! no item, as when it is read whole: at most the id it named before it could no longer be
//! read. A head reader leaves that check to the reader of the event it is part of.

use std::borrow::Cow;

use super::ended::{checked_id, Ended};
use super::json_syntax::JsonSyntax;
use super::record::ItemRecord;
use super::tap::{answer_record_streamed, Keep, Kept, TapLimits};
use crate::usage::{AnswerUsage, ReadUsage};

/// The most bytes a kept top-level member (`id`, `model`, `status`) may take as JSON.
const MEMBER_CAP: usize = 1024;

/// The most bytes of a top-level `usage` kept as JSON.
pub(crate) const USAGE_CAP: usize = 4096;

/// The top-level `usage` of a response object, as read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum UsageText {
    /// None was read.
    #[default]
    Absent,
    /// Its JSON text.
    Text(Vec<u8>),
    /// Over [`USAGE_CAP`], or written twice.
    Bad,
}

/// Why a streamed answer's items are not recorded (its id alone may be).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unrecorded {
    /// Not a response object, an item the ledger cannot read, or too many items.
    Unreadable,
    /// One output item is larger than [`TapLimits::max_item_bytes`].
    ItemTooLarge,
}

/// Which top-level member's value is being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Member {
    Id,
    Model,
    Status,
    Usage,
    Output,
    Other,
}

/// The reader's state: see the module documentation.
#[derive(Debug)]
pub(crate) struct JsonStream {
    limits: TapLimits,
    keep: Keep,
    /// Only the head is read: output items are skipped, not held.
    head_only: bool,
    /// The grammar check of the whole answer (`None` for a head reader).
    syntax: Option<JsonSyntax>,
    /// Containers open around the current byte (the response object is depth 1).
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// At depth 1: the next string is a member name.
    expect_key: bool,
    /// The member name being read (at most [`MEMBER_CAP`] bytes), and whose value follows.
    key: Vec<u8>,
    member: Member,
    /// The value of `id`, `model` or `status`, or the output item, being read.
    held: Vec<u8>,
    id: Option<Vec<u8>>,
    model: Option<Vec<u8>>,
    status: Option<Vec<u8>>,
    usage: UsageText,
    /// The `usage` being read passed [`USAGE_CAP`]: the rest of it is not held.
    usage_over: bool,
    saw_output: bool,
    /// Output items read so far (`null` ones included), and their records.
    count: usize,
    items: Vec<ItemRecord>,
    kept: Kept,
    failed: Option<Unrecorded>,
    ended: bool,
}

impl JsonStream {
    /// A reader of one answer.
    pub(crate) fn new(limits: TapLimits, keep: Keep) -> JsonStream {
        JsonStream {
            limits,
            keep,
            head_only: false,
            syntax: Some(JsonSyntax::default()),
            depth: 0,
            in_string: false,
            escaped: false,
            expect_key: false,
            key: Vec::new(),
            member: Member::Other,
            held: Vec::new(),
            id: None,
            model: None,
            status: None,
            usage: UsageText::Absent,
            usage_over: false,
            saw_output: false,
            count: 0,
            items: Vec::new(),
            kept: Kept::default(),
            failed: None,
            ended: false,
        }
    }

    /// A reader of a response object's head alone ([`JsonStream::finish_head`]): its output
    /// items are skipped as they pass, and need not be there.
    pub(crate) fn head(limits: TapLimits) -> JsonStream {
        JsonStream {
            head_only: true,
            syntax: None,
            ..JsonStream::new(limits, Keep::default())
        }
    }

    /// Bytes held now.
    pub(crate) fn held_bytes(&self) -> usize {
        self.held.len() + self.key.len() + self.kept.bytes
    }

    /// Why the answer's items are not recorded, once that is known.
    pub(crate) fn failed(&self) -> Option<Unrecorded> {
        self.failed
    }

    /// Reads the next bytes of the answer: as far as they are JSON, then fails.
    pub(crate) fn feed(&mut self, chunk: &[u8]) {
        let json = match &mut self.syntax {
            Some(syntax) => syntax.feed(chunk),
            None => chunk.len(),
        };
        self.scan(&chunk[..json]);
        if json < chunk.len() && self.failed.is_none() {
            self.fail(Unrecorded::Unreadable);
        }
    }

    /// Follows the structure of the next bytes, keeping what is read.
    fn scan(&mut self, chunk: &[u8]) {
        let mut rest = chunk;
        while let Some(&byte) = rest.first() {
            if self.failed.is_some() {
                return;
            }
            // The inside of a value's string, up to its next quote or escape, in one step.
            if self.in_string && !self.escaped && !(self.depth == 1 && self.expect_key) {
                let run = rest
                    .iter()
                    .position(|&b| b == b'"' || b == b'\\')
                    .unwrap_or(rest.len());
                if run > 0 {
                    if self.keeping() {
                        self.hold_all(&rest[..run]);
                    }
                    rest = &rest[run..];
                    continue;
                }
            }
            self.byte(byte);
            rest = &rest[1..];
        }
    }

    fn fail(&mut self, why: Unrecorded) {
        self.failed = Some(why);
        self.held = Vec::new();
        self.key = Vec::new();
        self.items = Vec::new();
        self.kept = Kept::default();
    }

    /// Whether the current byte belongs to a value that is kept: a small member's value (at
    /// depth 1 or deeper) or an output item (at depth 2 or deeper).
    fn keeping(&self) -> bool {
        match self.member {
            Member::Id | Member::Model | Member::Status | Member::Usage => {
                self.depth >= 1 && !self.expect_key
            }
            Member::Output => !self.head_only && self.depth >= 2,
            Member::Other => false,
        }
    }

    fn hold(&mut self, byte: u8) {
        self.hold_all(&[byte]);
    }

    /// Holds `bytes` of the kept value, or fails when they would pass its cap.
    fn hold_all(&mut self, bytes: &[u8]) {
        let cap = match self.member {
            Member::Output => self.limits.max_item_bytes,
            Member::Usage if self.usage_over => return,
            Member::Usage if self.held.len() + bytes.len() > USAGE_CAP => {
                self.usage_over = true;
                self.held = Vec::new();
                return;
            }
            Member::Usage => USAGE_CAP,
            _ => MEMBER_CAP,
        };
        if self.held.len() + bytes.len() > cap {
            let why = match self.member {
                Member::Output => Unrecorded::ItemTooLarge,
                _ => Unrecorded::Unreadable,
            };
            self.fail(why);
            return;
        }
        super::sse::push_capped(&mut self.held, bytes, cap);
    }

    fn byte(&mut self, byte: u8) {
        if self.ended {
            if !byte.is_ascii_whitespace() {
                self.fail(Unrecorded::Unreadable);
            }
            return;
        }
        if self.in_string {
            if self.depth == 1 && self.expect_key {
                if self.escaped {
                    self.escaped = false;
                } else if byte == b'\\' {
                    self.escaped = true;
                } else if byte == b'"' {
                    self.in_string = false;
                    return;
                }
                if self.key.len() < MEMBER_CAP {
                    self.key.push(byte);
                }
                return;
            }
            if self.keeping() {
                self.hold(byte);
            }
            if self.escaped {
                self.escaped = false;
            } else if byte == b'\\' {
                self.escaped = true;
            } else if byte == b'"' {
                self.in_string = false;
            }
            return;
        }
        match byte {
            b' ' | b'\t' | b'\n' | b'\r' => {
                if self.keeping() && self.depth >= 3 {
                    self.hold(byte);
                }
            }
            b'{' | b'[' => {
                if self.depth == 0 && byte == b'[' {
                    return self.fail(Unrecorded::Unreadable);
                }
                if self.depth == 1 && self.expect_key {
                    return self.fail(Unrecorded::Unreadable);
                }
                if self.depth == 1 && self.member == Member::Output {
                    if byte != b'[' || self.saw_output {
                        return self.fail(Unrecorded::Unreadable);
                    }
                    self.saw_output = true;
                    self.depth += 1;
                    return;
                }
                self.depth += 1;
                if self.depth == 1 {
                    self.expect_key = true;
                    return;
                }
                if self.keeping() {
                    self.hold(byte);
                }
            }
            b'}' | b']' => {
                if self.depth == 0 {
                    return self.fail(Unrecorded::Unreadable);
                }
                if self.depth == 2 && self.member == Member::Output {
                    self.item_ended();
                    self.depth -= 1;
                    return;
                }
                if self.depth == 1 {
                    self.member_ended();
                    self.depth = 0;
                    self.ended = true;
                    return;
                }
                if self.keeping() {
                    self.hold(byte);
                }
                self.depth -= 1;
            }
            b',' => match self.depth {
                1 => {
                    self.member_ended();
                    self.expect_key = true;
                }
                2 if self.member == Member::Output => self.item_ended(),
                _ => {
                    if self.keeping() {
                        self.hold(byte);
                    }
                }
            },
            b':' if self.depth == 1 && self.expect_key => {
                self.expect_key = false;
                self.member = match self.key.as_slice() {
                    b"id" => Member::Id,
                    b"model" => Member::Model,
                    b"status" => Member::Status,
                    b"usage" => Member::Usage,
                    b"output" => Member::Output,
                    _ => Member::Other,
                };
                self.key.clear();
            }
            b'"' => {
                if self.depth == 0 {
                    return self.fail(Unrecorded::Unreadable);
                }
                self.in_string = true;
                if !(self.depth == 1 && self.expect_key) && self.keeping() {
                    self.hold(byte);
                }
            }
            _ => {
                if self.depth == 0 {
                    return self.fail(Unrecorded::Unreadable);
                }
                if self.keeping() {
                    self.hold(byte);
                }
            }
        }
    }

    /// A top-level member's value ended.
    fn member_ended(&mut self) {
        let value = std::mem::take(&mut self.held);
        match self.member {
            // A member written twice is not a response object the whole-body read accepts, and
            // names no one response: neither value is kept.
            Member::Id if self.id.is_some() => {
                self.id = None;
                self.fail(Unrecorded::Unreadable);
            }
            Member::Model if self.model.is_some() => {
                self.model = None;
                self.fail(Unrecorded::Unreadable);
            }
            Member::Status if self.status.is_some() => self.fail(Unrecorded::Unreadable),
            Member::Usage => {
                let over = std::mem::take(&mut self.usage_over);
                self.usage = match (&self.usage, over) {
                    (UsageText::Absent, false) => UsageText::Text(value),
                    _ => UsageText::Bad,
                };
            }
            Member::Id => self.id = Some(value),
            Member::Model => self.model = Some(value),
            Member::Status => self.status = Some(value),
            Member::Output | Member::Other => {}
        }
        self.member = Member::Other;
    }

    /// An output item ended (or the array, when nothing is held).
    fn item_ended(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let text = std::mem::take(&mut self.held);
        let index = self.count;
        self.count += 1;
        if self.count > self.limits.max_items {
            return self.fail(Unrecorded::Unreadable);
        }
        let Ok(text) = std::str::from_utf8(&text) else {
            return self.fail(Unrecorded::Unreadable);
        };
        if text == "null" {
            return;
        }
        match self
            .kept
            .read_with(text, None, index, self.keep, self.limits.max_json_bytes)
        {
            Some(record) => self.items.push(record),
            None => self.fail(Unrecorded::Unreadable),
        }
        // The item's buffer goes; the next one grows its own.
    }

    /// What the answer leaves to record: its items when it was read to its end as a response
    /// object (see [`answer_record_streamed`]); else, when its `id` (and `model`) were read
    /// before it could no longer be, that id alone; else nothing.
    pub(crate) fn end(self) -> Ended {
        let json = self.syntax.as_ref().is_none_or(JsonSyntax::complete);
        if self.failed.is_some() || !self.ended || !json {
            return self.id_only();
        }
        let (Ok(id), Ok(model), Ok(status)) = (
            json_string(self.id.clone()),
            json_string(self.model.clone()),
            json_string(self.status.clone()),
        ) else {
            return self.id_only();
        };
        let output = self.saw_output.then_some(self.items);
        answer_record_streamed(
            id.map(Cow::Owned),
            model.map(Cow::Owned),
            status.as_deref(),
            output,
            self.kept,
            self.keep,
        )
    }

    /// The answer's `id` alone, and its `model` (`None` when it is not one to record), as
    /// far as they were read: [`Ended::IdOnly`], or [`Ended::Nothing`] without an id.
    pub(crate) fn id_only(&self) -> Ended {
        let Some(id) = json_string(self.id.clone())
            .ok()
            .flatten()
            .and_then(|id| checked_id(id.into()))
        else {
            return Ended::Nothing;
        };
        let model = json_string(self.model.clone())
            .ok()
            .flatten()
            .and_then(|model| checked_id(model.into()));
        Ended::IdOnly { id, model }
    }

    /// The head of a response object read by a [`JsonStream::head`] reader, or why it
    /// cannot be read.
    pub(crate) fn finish_head(self) -> Result<Head, Unrecorded> {
        if let Some(why) = self.failed {
            return Err(why);
        }
        if !self.ended {
            return Err(Unrecorded::Unreadable);
        }
        let id = json_string(self.id)?;
        let model = json_string(self.model)?;
        let status = json_string(self.status)?;
        Ok(Head {
            id,
            model,
            status,
            usage: self.usage,
        })
    }

    /// The answer's usage and model, as far as it was read: its `usage` when the answer was
    /// read to its end as JSON (missing otherwise), and its `model` when it was read.
    pub(crate) fn read_usage(&self) -> ReadUsage {
        let json = self.syntax.as_ref().is_none_or(JsonSyntax::complete);
        let whole = self.failed.is_none() && self.ended && json;
        let model = json_string(self.model.clone())
            .ok()
            .flatten()
            .and_then(|model| checked_id(model.into()));
        ReadUsage {
            usage: match whole {
                true => self.usage.usage(),
                false => AnswerUsage::Missing,
            },
            model,
        }
    }
}

/// The `id`, `model` and `status` of a response object (`None`: absent or `null`), and its
/// `usage`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) id: Option<String>,
    pub(crate) model: Option<String>,
    pub(crate) status: Option<String>,
    pub(crate) usage: UsageText,
}

/// A kept member's JSON text read as a string or `null` (`None` also when it was absent).
pub(crate) fn json_string(value: Option<Vec<u8>>) -> Result<Option<String>, Unrecorded> {
    match value {
        None => Ok(None),
        Some(bytes) => serde_json::from_slice::<Option<String>>(&bytes).map_err(|_| Unrecorded::Unreadable),
    }
}
