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
//! answer's usage (`crate::ledger::usage`): a `usage` too long, or written twice, reads as bad usage,
//! and never stops the read of the rest.
//!
//! The answer is followed by the machine the event reader shares ([`ObjectScan`]), which
//! follows only JSON's structure (strings, escapes, nesting) and holds the rest of the answer
//! to JSON's grammar as it passes; the text of each item and member it keeps is read by the
//! same readers as a whole body, so a malformed answer records no item, as when it is read
//! whole: at most the id it named before it could no longer be read. A head reader leaves the
//! grammar to the reader of the event it is part of.

use std::borrow::Cow;

use super::ended::{checked_id, Ended};
use super::object_scan::{MemberReader, ObjectScan, Take};
use super::record::ItemRecord;
use super::tap::{answer_record_streamed, Keep, Kept, TapLimits};
use crate::ledger::usage::{AnswerUsage, ReadUsage};

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
    Store,
    Usage,
    Output,
    Other,
}

/// The reader's state: see the module documentation.
#[derive(Debug)]
pub(crate) struct JsonStream {
    /// Where the current byte stands in the answer.
    scan: ObjectScan,
    /// What is kept of it.
    read: AnswerReader,
}

/// What a [`JsonStream`] keeps of the members the machine hands it.
#[derive(Debug)]
struct AnswerReader {
    limits: TapLimits,
    keep: Keep,
    /// Only the head is read: output items are skipped, not held.
    head_only: bool,
    /// The member whose value is being read.
    member: Member,
    /// The value of `id`, `model` or `status`, or the output item, being read.
    held: Vec<u8>,
    id: Option<Vec<u8>>,
    model: Option<Vec<u8>>,
    status: Option<Vec<u8>>,
    /// The top-level `store` said `false` (the last one written counts).
    not_stored: bool,
    usage: UsageText,
    /// The `usage` being read passed [`USAGE_CAP`]: the rest of it is not held.
    usage_over: bool,
    saw_output: bool,
    /// Output items read so far (`null` ones included), and their records.
    count: usize,
    items: Vec<ItemRecord>,
    kept: Kept,
    failed: Option<Unrecorded>,
}

impl JsonStream {
    /// A reader of one answer.
    pub(crate) fn new(limits: TapLimits, keep: Keep) -> JsonStream {
        JsonStream::reader(limits, keep, false)
    }

    /// A reader of a response object's head alone ([`JsonStream::finish_head`]): its output
    /// items are skipped as they pass, and need not be there.
    pub(crate) fn head(limits: TapLimits) -> JsonStream {
        JsonStream::reader(limits, Keep::default(), true)
    }

    fn reader(limits: TapLimits, keep: Keep, head_only: bool) -> JsonStream {
        JsonStream {
            // A head is part of an event, whose reader checks its grammar.
            scan: ObjectScan::new(!head_only),
            read: AnswerReader {
                limits,
                keep,
                head_only,
                member: Member::Other,
                held: Vec::new(),
                id: None,
                model: None,
                status: None,
                not_stored: false,
                usage: UsageText::Absent,
                usage_over: false,
                saw_output: false,
                count: 0,
                items: Vec::new(),
                kept: Kept::default(),
                failed: None,
            },
        }
    }

    /// Bytes held now.
    pub(crate) fn held_bytes(&self) -> usize {
        self.read.held.len() + self.scan.held_bytes() + self.read.kept.bytes
    }

    /// Why the answer's items are not recorded, once that is known.
    pub(crate) fn failed(&self) -> Option<Unrecorded> {
        self.read.failed
    }

    /// Reads the next bytes of the answer: as far as they are JSON, then fails.
    pub(crate) fn feed(&mut self, chunk: &[u8]) {
        self.scan.feed(chunk, &mut self.read);
    }

    /// What the answer leaves to record: its items when it was read to its end as a response
    /// object (see [`answer_record_streamed`]); else, when its `id` (and `model`) were read
    /// before it could no longer be, that id alone; else nothing.
    pub(crate) fn end(self) -> Ended {
        if self.read.failed.is_some() || !self.scan.complete() {
            return self.id_only();
        }
        let read = self.read;
        let (Ok(id), Ok(model), Ok(status)) = (
            json_string(read.id.clone()),
            json_string(read.model.clone()),
            json_string(read.status.clone()),
        ) else {
            return read.id_only();
        };
        let output = read.saw_output.then_some(read.items);
        answer_record_streamed(
            id.map(Cow::Owned),
            model.map(Cow::Owned),
            status.as_deref(),
            output,
            read.kept,
            read.keep,
        )
        .not_stored(read.not_stored)
    }

    /// The answer's `id` alone, and its `model` (`None` when it is not one to record), as
    /// far as they were read: [`Ended::IdOnly`], or [`Ended::Nothing`] without an id.
    pub(crate) fn id_only(&self) -> Ended {
        self.read.id_only()
    }

    /// The head of a response object read by a [`JsonStream::head`] reader, or why it
    /// cannot be read.
    pub(crate) fn finish_head(self) -> Result<Head, Unrecorded> {
        let read = self.read;
        if let Some(why) = read.failed {
            return Err(why);
        }
        if !self.scan.complete() {
            return Err(Unrecorded::Unreadable);
        }
        let id = json_string(read.id)?;
        let model = json_string(read.model)?;
        let status = json_string(read.status)?;
        Ok(Head {
            id,
            model,
            status,
            not_stored: read.not_stored,
            usage: read.usage,
        })
    }

    /// The answer's usage and model, as far as it was read: its `usage` when the answer was
    /// read to its end as JSON (missing otherwise), and its `model` when it was read.
    pub(crate) fn read_usage(&self) -> ReadUsage {
        let read = &self.read;
        let whole = read.failed.is_none() && self.scan.complete();
        let model = json_string(read.model.clone())
            .ok()
            .flatten()
            .and_then(|model| checked_id(model.into()));
        ReadUsage {
            usage: match whole {
                true => read.usage.usage(),
                false => AnswerUsage::Missing,
            },
            model,
        }
    }
}

impl AnswerReader {
    /// See [`JsonStream::id_only`].
    fn id_only(&self) -> Ended {
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
        Ended::IdOnly {
            id,
            model,
            not_stored: false,
        }
    }

    fn fail_with(&mut self, why: Unrecorded) {
        self.failed = Some(why);
        self.held = Vec::new();
        self.items = Vec::new();
        self.kept = Kept::default();
    }
}

impl MemberReader for AnswerReader {
    fn failed(&self) -> bool {
        self.failed.is_some()
    }

    fn fail(&mut self) {
        self.fail_with(Unrecorded::Unreadable);
    }

    /// The colon after a top-level member's name: a small member's value is taken whole,
    /// `output`'s items each (none by a head reader).
    fn member_started(&mut self, name: &[u8]) -> Take {
        self.member = match name {
            b"id" => Member::Id,
            b"model" => Member::Model,
            b"status" => Member::Status,
            b"store" => Member::Store,
            b"usage" => Member::Usage,
            b"output" => Member::Output,
            _ => Member::Other,
        };
        match self.member {
            Member::Id | Member::Model | Member::Status | Member::Store | Member::Usage => Take::Value,
            Member::Output => Take::Elements(!self.head_only),
            Member::Other => Take::Skip,
        }
    }

    /// Holds `bytes` of the kept value, or fails when they would pass its cap.
    fn take(&mut self, bytes: &[u8]) {
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
            self.fail_with(why);
            return;
        }
        super::sse::push_capped(&mut self.held, bytes, cap);
    }

    /// A second `output` array is not a response object the whole-body read accepts.
    fn elements_opened(&mut self) {
        if std::mem::replace(&mut self.saw_output, true) {
            self.fail();
        }
    }

    /// An output item ended (or the array, when nothing is held).
    fn element_ended(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let text = std::mem::take(&mut self.held);
        let index = self.count;
        self.count += 1;
        if self.count > self.limits.max_items {
            return self.fail_with(Unrecorded::Unreadable);
        }
        let Ok(text) = std::str::from_utf8(&text) else {
            return self.fail_with(Unrecorded::Unreadable);
        };
        if text == "null" {
            return;
        }
        match self
            .kept
            .read_with(text, None, index, self.keep, self.limits.max_json_bytes)
        {
            Some(record) => self.items.push(record),
            None => self.fail_with(Unrecorded::Unreadable),
        }
        // The item's buffer goes; the next one grows its own.
    }

    /// A top-level member's value ended.
    fn member_ended(&mut self) {
        let value = std::mem::take(&mut self.held);
        match self.member {
            // A member written twice is not a response object the whole-body read accepts, and
            // names no one response: neither value is kept.
            Member::Id if self.id.is_some() => {
                self.id = None;
                self.fail();
            }
            Member::Model if self.model.is_some() => {
                self.model = None;
                self.fail();
            }
            Member::Status if self.status.is_some() => self.fail(),
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
            Member::Store => self.not_stored = value.trim_ascii() == b"false",
            Member::Output | Member::Other => {}
        }
        self.member = Member::Other;
    }
}

/// The `id`, `model` and `status` of a response object (`None`: absent or `null`), and its
/// `usage`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) id: Option<String>,
    pub(crate) model: Option<String>,
    pub(crate) status: Option<String>,
    /// Its `store` said `false`.
    pub(crate) not_stored: bool,
    pub(crate) usage: UsageText,
}

/// A kept member's JSON text read as a string or `null` (`None` also when it was absent).
pub(crate) fn json_string(value: Option<Vec<u8>>) -> Result<Option<String>, Unrecorded> {
    match value {
        None => Ok(None),
        Some(bytes) => serde_json::from_slice::<Option<String>>(&bytes).map_err(|_| Unrecorded::Unreadable),
    }
}
