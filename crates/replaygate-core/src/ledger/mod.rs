//! The provenance ledger's tap (docs/ledger.md): what a provider produced, read from its answer
//! as the bytes pass to the client.
//!
//! Pure and synchronous: no I/O, no async. The proxy feeds each chunk of an allowed answer to a
//! [`Tap`] and, at the end, gets what to store ([`Ended`]): the [`ResponseRecord`] of its items
//! (all of them, or those read whole of a response that did not complete), or the response's id
//! alone when its items cannot be vouched for (over a limit, malformed, cut before any was
//! read), or nothing when no response id was read.
//!
//! ```
//! use replaygate_core::ledger::{AnswerKind, Tap, TapLimits};
//!
//! let mut tap = Tap::new(AnswerKind::Json, TapLimits::default());
//! tap.feed(br#"{"id":"resp_1","model":"m","status":"completed","output":["#);
//! tap.feed(br#"{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"}]}"#);
//! let record = tap.finish().unwrap();
//! assert_eq!(record.id, "resp_1");
//! assert_eq!(record.items[0].call_id.as_deref(), Some("c1"));
//! ```
//!
//! Layout: [`record`] is what is kept of an answer (each item's record and digest are the
//! gate's facts, `gate::provenance`, which this module reads answers into), `sse` the
//! event-stream framing, [`tap`] the incremental reader (`ended` what it leaves to record,
//! `json_stream` and `event_stream` its readers of answers and events too large to hold whole,
//! `object_scan` the byte-level machine and `json_syntax` the grammar check they share), [`stored`] what the store holds (`stored_json`
//! its stored form, written directly), and [`carry`] the rewrite that carries a session to
//! another provider.

mod call_ids;
pub mod carry;
mod ended;
pub(crate) mod event_stream;
pub(crate) mod json_stream;
mod json_syntax;
mod object_scan;
pub mod record;
pub(crate) mod sse;
pub mod stored;
mod stored_json;
pub mod tap;
#[cfg(test)]
mod tests_carry;
#[cfg(test)]
mod tests_tap;
#[cfg(test)]
mod tests_tap_store;
pub mod usage;

pub use call_ids::CallIds;
pub use carry::{carried_body, input_items, CarriedTurn, CarryError};
pub use ended::Ended;
pub use record::{
    item_digest, item_record, item_record_from_value, link_reasoning, ItemRecord, ResponseRecord,
};
pub use stored::{Owner, StoredContent, StoredItem, StoredResponse};
pub use tap::{AnswerKind, Tap, TapLimits, Tapped};

pub use crate::gate::provenance::{names_one_item, MAX_ID_BYTES, MIN_ITEM_ID_BYTES};
