//! The ledger's tap on arbitrary answers, as a provider (or anything posing as one) may send
//! them. Whatever the bytes: no panic; the tap never holds more than its caps; feeding the
//! answer in chunks records what feeding it whole does (and, for JSON, what reading it where it
//! lies does); and a JSON answer the tap records is the answer serde_json reads: the same id,
//! and each output item's record the full read's record of that item.
//!
//! Input: one byte of flags (1: an event stream, else JSON; 2: keep calls; 4: keep items), one
//! byte giving the chunk size (0: one chunk), then the answer.

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::borrow::Cow;

use replaygate::ledger::{item_record_from_value, AnswerKind, Tap, TapLimits, Tapped};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

/// Small caps, so that inputs of a few KiB reach them.
fn limits() -> TapLimits {
    TapLimits {
        max_json_bytes: 16 * 1024,
        max_event_bytes: 4 * 1024,
        max_items: 64,
        max_item_bytes: 8 * 1024,
    }
}

fn tap(kind: AnswerKind, calls: bool, items: bool) -> Tap {
    Tap::new(kind, limits()).keep_calls(calls).keep_items(items)
}

/// What the tap makes of `answer` fed in chunks of `chunk` bytes, checking its caps as it goes.
fn fed(kind: AnswerKind, calls: bool, items: bool, answer: &[u8], chunk: usize) -> Option<Tapped> {
    let limits = limits();
    let cap = match kind {
        // The whole answer up to its cap; past it, the item being read as it streams (its
        // buffer grows by doubling) and the kept texts so far.
        AnswerKind::Json => limits.max_json_bytes + 2 * limits.max_item_bytes + limits.max_json_bytes,
        // A pending event's data held whole, or, past its cap, the event's item being read as
        // it streams and its small members (type, output_index, the response's id, model and
        // status: 1 KiB each, with the member name being read); the event's name (1 KiB); and
        // the kept texts of the items so far.
        AnswerKind::EventStream => {
            let small = 8 * 1024;
            limits.max_event_bytes.max(limits.max_item_bytes + small) + 1024 + 8 + limits.max_json_bytes
        }
    };
    let mut tap = tap(kind, calls, items);
    for piece in answer.chunks(chunk.max(1)) {
        tap.feed(piece);
        assert!(tap.held_bytes() <= cap, "held {} over {cap}", tap.held_bytes());
    }
    tap.finish_kept()
}

/// What serde_json reads of an answer: its id and its output items' texts.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow)]
    output: Vec<Option<&'a RawValue>>,
}

/// A recorded JSON answer against serde_json's reading of it: the same id, the same items, and
/// each item's record the full read's. An item serde_json cannot take as a `Value` may only be
/// one whose text holds, in a member the record does not read, a lone surrogate escape
/// (`\ud800`) or a number past `f64` (`1e999`): serde_json skips either, as the tap does, but
/// cannot decode it.
fn agrees_with_serde_json(answer: &[u8], tapped: &Tapped) {
    let head: Head<'_> = serde_json::from_slice(answer).expect("a recorded answer reads as a response");
    let record = &tapped.record;
    assert_eq!(head.id, record.id);
    let items: Vec<&RawValue> = head.output.into_iter().flatten().collect();
    assert_eq!(items.len(), record.items.len(), "items recorded");
    for (item, recorded) in items.iter().zip(&record.items) {
        match serde_json::from_str::<Value>(item.get()) {
            Ok(value) => assert_eq!(item_record_from_value(&value).as_ref(), Some(recorded), "{item}"),
            Err(e) => {
                let message = e.to_string();
                assert!(
                    message.contains("hex escape")
                        || message.contains("surrogate")
                        || message.contains("number out of range"),
                    "{message}: {item}"
                );
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let [flags, chunk, answer @ ..] = data else {
        return;
    };
    let kind = match flags & 1 {
        1 => AnswerKind::EventStream,
        _ => AnswerKind::Json,
    };
    let (calls, items) = (flags & 2 != 0, flags & 4 != 0);
    let whole = fed(kind, calls, items, answer, answer.len());
    let chunked = fed(kind, calls, items, answer, usize::from(*chunk));
    assert_eq!(whole, chunked, "chunks of {chunk}");
    if kind == AnswerKind::Json {
        assert_eq!(tap(kind, calls, items).finish_whole(answer), whole, "read where it lies");
        if let Some(tapped) = &whole {
            agrees_with_serde_json(answer, tapped);
        }
    }
});
