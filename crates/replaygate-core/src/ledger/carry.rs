//! Carrying a session to another provider (docs/ledger.md, `[ledger] carry_sessions`).
//!
//! A request whose `previous_response_id` names a response recorded for another provider
//! cannot be continued there: that provider never saw the chain. With `carry_sessions` (and
//! `store_items`, so the chain's items are recorded), the proxy rewrites the request instead:
//! `previous_response_id` goes, and `input` becomes the recorded chain's items followed by the
//! request's own. [`carried_body`] does the rewrite on the bytes; [`input_items`] gives a
//! request's `input` in the form the ledger records it.
//!
//! What a recorded item becomes when carried, and why:
//!
//! - Its `id` is removed: ids belong to the provider that minted them, and a replayed id names
//!   an item in that provider's store (OpenAI refuses ids of another shape, and answers 404
//!   for a reasoning id it did not store).
//! - `reasoning` and `compaction` items of another provider than the target are left out:
//!   their `encrypted_content` is sealed to the provider that made it.
//! - The target's own `reasoning` and `compaction` items stay when they carry
//!   `encrypted_content`, and are left out otherwise: without their id they name nothing.
//! - A `reasoning` item also loses `status`: OpenAI refuses it on input
//!   (`Unknown parameter: 'input[N].status'`). Every other `status` stays (a replayed
//!   `function_call` is judged by it, and a recorded answer's items are all completed).
//! - An `item_reference` (typed, or an object with only `id`) is left out: it is nothing but
//!   an id.
//!
//! Everything else is byte for byte: each kept item is its recorded text with those members
//! cut out, the request's own items keep their bytes, and every other member of the body
//! keeps its bytes and order.

use std::borrow::Cow;
use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::stored::StoredResponse;
use crate::gate::request::Input;
use crate::gate::strip;
use crate::gate::{parse, BodyError};

/// One recorded turn of the chain being carried: the provider that answered it and the items
/// the ledger recorded (each one JSON value as text, as [`StoredContent`] holds them).
///
/// [`StoredContent`]: super::StoredContent
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CarriedTurn<'a> {
    /// The provider the turn was routed to.
    pub provider: &'a str,
    /// The request's `input` items (a string `input` as one user message).
    pub input: &'a [String],
    /// The answer's `output` items.
    pub output: &'a [String],
}

impl<'a> CarriedTurn<'a> {
    /// The turn `stored` recorded; `None` when its items were not kept (`store_items` off).
    pub fn from_stored(stored: &'a StoredResponse) -> Option<CarriedTurn<'a>> {
        let content = stored.content.as_ref()?;
        Some(CarriedTurn {
            provider: &stored.owner.provider,
            input: &content.input,
            output: &content.output,
        })
    }
}

/// Why a body could not be carried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CarryError {
    /// The request body is not one the gate reads.
    #[error(transparent)]
    Body(#[from] BodyError),
    /// A recorded item is not a JSON object with at most one `type`.
    #[error("the recorded {part} item {position} of turn {turn} of the chain is not a JSON object with one `type`")]
    StoredItem {
        /// The turn's position in the chain, oldest first.
        turn: usize,
        /// `input` or `output`.
        part: &'static str,
        /// The item's position in that part.
        position: usize,
    },
}

/// The request's `input` as the ledger records it: each item's JSON text as sent, or for a
/// string `input`, one user message item holding that string (its JSON text as sent). No
/// `input`, or `null`, is no items. `None` when `body` is not a JSON object, holds `input`
/// twice, or its `input` is neither a string, an array nor `null`.
pub fn input_items(body: &[u8]) -> Option<Vec<String>> {
    let text = std::str::from_utf8(body).ok()?;
    let object = scan_object(text)?;
    let mut inputs = object.members.iter().filter(|member| member.name == "input");
    let Some(input) = inputs.next() else {
        return Some(Vec::new());
    };
    if inputs.next().is_some() {
        return None;
    }
    let value = &text[input.value.clone()];
    match value.as_bytes().first()? {
        b'"' => Some(vec![user_message(value)]),
        b'n' => Some(Vec::new()),
        b'[' => {
            let items: Vec<&RawValue> = serde_json::from_str(value).ok()?;
            Some(items.into_iter().map(|item| item.get().to_owned()).collect())
        }
        _ => None,
    }
}

/// `body` (a `/responses` request) rewritten for `target_provider` to carry `chain` (oldest
/// turn first): `previous_response_id` cut out with one separating comma, and `input` (in its
/// place, or appended as the last member) the carried items of each turn, its input then its
/// output, followed by the request's own items as sent (a string `input` as one user
/// message). See the module documentation for what a carried item becomes.
///
/// Fails when the gate would not read `body` ([`parse`]), or a recorded item is not an object.
pub fn carried_body(
    body: &[u8],
    chain: &[CarriedTurn<'_>],
    target_provider: &str,
) -> Result<Vec<u8>, CarryError> {
    let request = parse(body)?;
    let text = std::str::from_utf8(body).map_err(|_| not_an_object())?;
    let object = scan_object(text).ok_or_else(not_an_object)?;

    let mut carried = Vec::new();
    for (turn_index, turn) in chain.iter().enumerate() {
        for (part, items) in [("input", turn.input), ("output", turn.output)] {
            for (position, item) in items.iter().enumerate() {
                let item =
                    carried_item(item, turn.provider, target_provider).ok_or(CarryError::StoredItem {
                        turn: turn_index,
                        part,
                        position,
                    })?;
                carried.extend(item);
            }
        }
    }

    let position_of = |name: &str| object.members.iter().position(|member| member.name == name);
    let input = position_of("input");
    let mut new_input = String::from("[");
    new_input.push_str(&carried.join(","));
    match input.map(|k| &text[object.members[k].value.clone()]) {
        Some(own) if own.starts_with('[') => {
            let has_items = matches!(&request.input, Input::Items(items) if !items.is_empty());
            if !carried.is_empty() && has_items {
                new_input.push(',');
            }
            // The request's own array from just after its `[`: its items, the whitespace
            // around them and its `]`, as sent.
            new_input.push_str(&own[1..]);
        }
        Some(own) if own.starts_with('"') => {
            if !carried.is_empty() {
                new_input.push(',');
            }
            new_input.push_str(&user_message(own));
            new_input.push(']');
        }
        _ => new_input.push(']'),
    }

    // Edits on the original bytes, each a range replaced by new bytes; an insertion is an
    // empty range, and comes before a cut that starts where it stands.
    let spans: Vec<Range<usize>> = object.members.iter().map(|member| member.span.clone()).collect();
    let previous = position_of("previous_response_id");
    let mut edits: Vec<(Range<usize>, Cow<'_, str>)> = Vec::new();
    if let Some(previous) = previous {
        edits.extend(strip::cut_ranges(&spans, &[previous]).map(|range| (range, Cow::Borrowed(""))));
    }
    match input {
        Some(k) => edits.push((object.members[k].value.clone(), Cow::Owned(new_input))),
        None => {
            let last_kept = (0..spans.len()).rev().find(|&k| Some(k) != previous);
            let (at, member) = match last_kept {
                Some(k) => (spans[k].end, format!(r#","input":{new_input}"#)),
                None => (object.open + 1, format!(r#""input":{new_input}"#)),
            };
            edits.push((at..at, Cow::Owned(member)));
        }
    }
    edits.sort_by_key(|(range, _)| (range.start, range.end));

    let mut out = Vec::with_capacity(body.len() + edits.iter().map(|(_, new)| new.len()).sum::<usize>());
    let mut kept_from = 0;
    for (range, new) in &edits {
        out.extend_from_slice(&body[kept_from..range.start]);
        out.extend_from_slice(new.as_bytes());
        kept_from = range.end;
    }
    out.extend_from_slice(&body[kept_from..]);
    Ok(out)
}

/// A body [`parse`] read but the member scan could not (it never happens for valid JSON).
fn not_an_object() -> CarryError {
    CarryError::Body(BodyError::InvalidJson {
        message: "the request body must be a JSON object".into(),
    })
}

/// A user message item holding `string`, the JSON text of a string.
fn user_message(string: &str) -> String {
    format!(r#"{{"type":"message","role":"user","content":{string}}}"#)
}

/// The text of a recorded item as carried to `target` (see the module documentation): `Some`
/// of nothing when it is left out, `None` when it is not a JSON object with at most one `type`.
fn carried_item(text: &str, provider: &str, target: &str) -> Option<Option<String>> {
    let text = text.trim_matches(is_json_space);
    let object = scan_object(text)?;
    let mut types = object.members.iter().filter(|member| member.name == "type");
    let kind = match types.next() {
        Some(member) => Option::<String>::deserialize(&mut serde_json::Deserializer::from_str(
            &text[member.value.clone()],
        ))
        .ok()?,
        None => None,
    };
    if types.next().is_some() {
        return None;
    }
    let has = |name: &str| {
        object
            .members
            .iter()
            .any(|member| member.name == name && &text[member.value.clone()] != "null")
    };
    let is_reasoning = kind.as_deref() == Some("reasoning");
    match kind.as_deref() {
        Some("item_reference") => return Some(None),
        None if !object.members.is_empty() && object.members.iter().all(|member| member.name == "id") => {
            return Some(None)
        }
        Some("reasoning" | "compaction") if provider != target || !has("encrypted_content") => {
            return Some(None)
        }
        _ => {}
    }
    let remove: Vec<usize> = object
        .members
        .iter()
        .enumerate()
        .filter(|(_, member)| member.name == "id" || (is_reasoning && member.name == "status"))
        .map(|(k, _)| k)
        .collect();
    if remove.is_empty() {
        return Some(Some(text.to_owned()));
    }
    let spans: Vec<Range<usize>> = object.members.iter().map(|member| member.span.clone()).collect();
    // Cuts fall on ASCII bytes (quotes, commas, whitespace), so the rest is still UTF-8.
    String::from_utf8(strip::cut(text.as_bytes(), &spans, &remove))
        .ok()
        .map(Some)
}

/// A JSON object's text, read member by member without decoding the values.
struct ObjectText {
    /// Where its `{` is.
    open: usize,
    /// Its members in order (a repeated name appears each time it is written).
    members: Vec<Member>,
}

/// One member of an object, by byte positions in the text.
struct Member {
    /// The member name, escapes decoded.
    name: String,
    /// From the name's opening quote to the end of the value.
    span: Range<usize>,
    /// The value, without the whitespace around it.
    value: Range<usize>,
}

fn is_json_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

fn skip_space(text: &str, from: usize) -> usize {
    text[from..]
        .find(|c| !is_json_space(c))
        .map_or(text.len(), |offset| from + offset)
}

/// Reads `text` as one JSON object (whitespace around it allowed); `None` when it is not one.
fn scan_object(text: &str) -> Option<ObjectText> {
    let bytes = text.as_bytes();
    let open = skip_space(text, 0);
    if bytes.get(open) != Some(&b'{') {
        return None;
    }
    let mut members = Vec::new();
    let mut at = skip_space(text, open + 1);
    if bytes.get(at) != Some(&b'}') {
        loop {
            let start = at;
            let name_end = string_end(bytes, start)?;
            let name: String = serde_json::from_str(&text[start..name_end]).ok()?;
            at = skip_space(text, name_end);
            if bytes.get(at) != Some(&b':') {
                return None;
            }
            at = skip_space(text, at + 1);
            let value = at..at + value_len(&text[at..])?;
            members.push(Member {
                name,
                span: start..value.end,
                value: value.clone(),
            });
            at = skip_space(text, value.end);
            match bytes.get(at) {
                Some(b',') => at = skip_space(text, at + 1),
                Some(b'}') => break,
                _ => return None,
            }
        }
    }
    (skip_space(text, at + 1) == text.len()).then_some(ObjectText { open, members })
}

/// The end (past the closing quote) of the string starting at `start`.
fn string_end(bytes: &[u8], start: usize) -> Option<usize> {
    if bytes.get(start) != Some(&b'"') {
        return None;
    }
    let mut at = start + 1;
    loop {
        match bytes.get(at)? {
            b'\\' => at += 2,
            b'"' => return Some(at + 1),
            _ => at += 1,
        }
    }
}

/// The length of the one JSON value `rest` starts with (no whitespace before it).
fn value_len(rest: &str) -> Option<usize> {
    let mut de = serde_json::Deserializer::from_str(rest);
    let raw = <&RawValue>::deserialize(&mut de).ok()?;
    (raw.get().as_ptr() == rest.as_ptr()).then(|| raw.get().len())
}
