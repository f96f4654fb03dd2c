//! What an answer leaves the ledger to record once the tap has read it
//! (docs/ledger.md#what-the-ledger-records): its output items, read whole; or, when they cannot
//! be (or there are none yet), the response's id alone, so that its team still owns it; or
//! nothing, when no response id was read.

use std::borrow::Cow;

use super::tap::Tapped;
use super::MAX_ID_BYTES;

/// What a finished answer leaves to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// Its output items, each read whole: every item of a completed answer; of one that did
    /// not complete (it ended incomplete, failed or cancelled, or its stream stopped before its
    /// end), those it delivered whole ([`Tapped::complete`] says which).
    Items(Tapped),
    /// The response's `id` alone, with the `model` the answer named (`None`: none, or one not
    /// to record). Its output could not be read (an item over the tap's caps or one it cannot
    /// read, too many items, a stream or body that stopped before its items could be read), or
    /// it has none to read yet (a background response `queued` or `in_progress`, or one that
    /// ended with no item read whole). The ledger records who owns it, nothing of its content.
    IdOnly {
        /// The response `id`.
        id: String,
        /// The `model` the answer named.
        model: Option<String>,
        /// The answer said `store: false` (as [`Tapped::not_stored`]).
        not_stored: bool,
    },
    /// Nothing: no response id was read (or two different ones, or one longer than
    /// [`MAX_ID_BYTES`]).
    Nothing,
}

impl Ended {
    /// The record of its items, if it has one.
    pub fn items(self) -> Option<Tapped> {
        match self {
            Ended::Items(tapped) => Some(tapped),
            _ => None,
        }
    }

    /// The response id it names, if any.
    pub fn id(&self) -> Option<&str> {
        match self {
            Ended::Items(tapped) => Some(&tapped.record.id),
            Ended::IdOnly { id, .. } => Some(id),
            Ended::Nothing => None,
        }
    }

    /// The same answer, its record (or id) marked not stored when `not_stored`.
    pub(crate) fn not_stored(mut self, not_stored: bool) -> Ended {
        match &mut self {
            Ended::Items(tapped) => tapped.not_stored |= not_stored,
            Ended::IdOnly { not_stored: flag, .. } => *flag |= not_stored,
            Ended::Nothing => {}
        }
        self
    }

    /// The same answer with its items known no more: [`Ended::IdOnly`] of an
    /// [`Ended::Items`].
    pub(crate) fn id_only(self) -> Ended {
        match self {
            Ended::Items(tapped) => Ended::IdOnly {
                id: tapped.record.id,
                model: tapped.record.model,
                not_stored: tapped.not_stored,
            },
            other => other,
        }
    }
}

/// How a response's `status` has its answer recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finish {
    /// `completed` (or no `status`: the `CompactResource` of `/responses/compact`): every item.
    Complete,
    /// `incomplete`, `failed` or `cancelled`: the items it delivered whole, which the provider
    /// keeps and a continuation builds on.
    Partial,
    /// `queued`, `in_progress` or any other: its output is not final, so its id alone.
    IdOnly,
}

impl Finish {
    /// How an answer whose response has `status` is recorded.
    pub(crate) fn of(status: Option<&str>) -> Finish {
        match status {
            None | Some("completed") => Finish::Complete,
            Some("incomplete" | "failed" | "cancelled") => Finish::Partial,
            Some(_) => Finish::IdOnly,
        }
    }
}

/// An id (or model) to keep: not empty and at most [`MAX_ID_BYTES`].
pub(crate) fn checked_id(id: Cow<'_, str>) -> Option<String> {
    (!id.is_empty() && id.len() <= MAX_ID_BYTES).then(|| id.into_owned())
}
