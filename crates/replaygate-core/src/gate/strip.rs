//! Cutting stripped items out of a request body (docs/teams.md#teams-and-policy).
//!
//! A reason with the action `strip` removes its item; a removed call takes the outputs paired
//! with it along. The forwarded body is the original bytes with those items, and one separating
//! comma each, cut out: every other byte is unchanged.
//!
//! Nothing here runs for a request that strips nothing: the spans of the items are found by a
//! second reading of the body, only when something is to be cut.
//!
//! ```
//! use replaygate_core::gate::{strip, Action, Gate, Policy, ProviderProfile, Reason, Target};
//!
//! let mut policy = Policy::default();
//! policy.set_action(Reason::Namespaced, Action::Strip);
//! let bedrock = ProviderProfile::own_namespace("bedrock");
//! let body = br#"{"input":[{"role":"user","content":"hi"}, {"type":"openai:web_search_call"}]}"#;
//! let request = replaygate_core::gate::parse(body).unwrap();
//! let verdict = Gate::default().judge(&request, &Target::new(&bedrock, &policy)).unwrap();
//! let stripped = strip::strip(body, &request, &verdict).unwrap().unwrap();
//! assert_eq!(stripped.removed, [1]);
//! assert_eq!(stripped.body, br#"{"input":[{"role":"user","content":"hi"}]}"#);
//! ```

use std::fmt;
use std::ops::Range;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::pairing::for_each_answer;
use super::repair::member_ranges;
use super::request::{BodyError, ItemsAt, ParsedRequest};
use super::verdict::{Insert, Repair, Verdict};

/// A body with its stripped items and repaired members cut out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stripped {
    /// The body to forward.
    pub body: Vec<u8>,
    /// The positions, in the original items, of the items `strip` cut out (with the outputs
    /// and calls paired with them): ascending, once each.
    pub removed: Vec<usize>,
    /// The members cut out of the items that stay (`repair`, docs/item-profiles.md#actions), in
    /// input order.
    pub repaired: Vec<Repair>,
    /// The positions of the items `repair` cut out whole (with the outputs and calls paired
    /// with them) that `strip` did not: ascending, once each.
    pub repair_cut: Vec<usize>,
    /// The items `repair` inserted, each before the item at its position (which stays).
    pub inserted: Vec<Insert>,
}

/// Cuts out of `body` the items `verdict` strips and the outputs paired with them, the items
/// it repairs by cutting them whole (and theirs), and the members it repairs in the items that
/// stay (see [`crate::gate::repair`]); inserts what it repairs by inserting; `None` when the
/// verdict strips and repairs nothing (the body is forwarded as it is).
///
/// `request` must be `body` as read by [`crate::gate::parse_with`], and `verdict` its judgment.
/// Whether a request with rejected violations is forwarded at all is the caller's decision.
pub fn strip(
    body: &[u8],
    request: &ParsedRequest<'_>,
    verdict: &Verdict,
) -> Result<Option<Stripped>, BodyError> {
    if verdict.stripped.is_empty()
        && verdict.repairs.is_empty()
        && verdict.repair_cuts.is_empty()
        && verdict.inserts.is_empty()
    {
        return Ok(None);
    }
    let spans = item_spans(body, request.at)?;
    if spans.len() != request.items().len() {
        return Err(not_the_request(format_args!(
            "{} items where the request has {}",
            spans.len(),
            request.items().len()
        )));
    }
    let removed = items_to_cut(request, &verdict.stripped);
    let repair_cut: Vec<usize> = match verdict.repair_cuts.is_empty() {
        true => Vec::new(),
        false => items_to_cut(request, &verdict.repair_cuts)
            .into_iter()
            .filter(|index| removed.binary_search(index).is_err())
            .collect(),
    };
    let mut all_cut = removed.clone();
    if !repair_cut.is_empty() {
        all_cut.extend_from_slice(&repair_cut);
        all_cut.sort_unstable();
    }
    let text = simdutf8::basic::from_utf8(body).map_err(|_| not_the_request("the body is not UTF-8"))?;
    let mut ranges: Vec<Range<usize>> = cut_ranges(&spans, &all_cut).collect();
    ranges.extend(member_ranges(text, &spans, &verdict.repairs, &all_cut)?);
    ranges.sort_unstable_by_key(|r| r.start);
    let repaired = verdict
        .repairs
        .iter()
        .filter(|r| all_cut.binary_search(&r.index).is_err())
        .cloned()
        .collect();
    let inserted: Vec<Insert> = verdict
        .inserts
        .iter()
        .filter(|insert| all_cut.binary_search(&insert.index).is_err())
        .cloned()
        .collect();
    // An item replaced goes: its own bytes, its commas stay around the text put in its place.
    ranges.extend(
        inserted
            .iter()
            .filter(|insert| insert.replaces)
            .map(|insert| spans[insert.index].clone()),
    );
    ranges.sort_unstable_by_key(|r| r.start);
    let at: Vec<(usize, &str, bool)> = inserted
        .iter()
        .map(|insert| (spans[insert.index].start, insert.text.as_str(), !insert.replaces))
        .collect();
    Ok(Some(Stripped {
        body: splice(body, &ranges, &at),
        removed,
        repaired,
        repair_cut,
        inserted,
    }))
}

/// `body` without the byte `ranges` (ascending, disjoint).
pub fn cut_out(body: &[u8], ranges: &[Range<usize>]) -> Vec<u8> {
    splice(body, ranges, &[])
}

/// `body` without the byte `ranges` (ascending, disjoint), and with each item text of `inserts`
/// (ascending by offset, none inside a range) put at its offset: an item's start, so the text
/// comes before that item as an item of its own (followed by a comma when its flag says so),
/// or, where a range starts there cutting the item out whole, in that item's place.
fn splice(body: &[u8], ranges: &[Range<usize>], inserts: &[(usize, &str, bool)]) -> Vec<u8> {
    let removed: usize = ranges.iter().map(|r| r.len()).sum();
    let added: usize = inserts.iter().map(|(_, text, _)| text.len() + 1).sum();
    let mut out = Vec::with_capacity(body.len() - removed + added);
    let mut kept_from = 0;
    let mut inserts = inserts.iter().peekable();
    let mut put = |out: &mut Vec<u8>, kept_from: &mut usize, upto: usize| {
        while let Some((at, text, comma)) = inserts.next_if(|(at, _, _)| *at <= upto) {
            out.extend_from_slice(&body[*kept_from..*at]);
            out.extend_from_slice(text.as_bytes());
            if *comma {
                out.push(b',');
            }
            *kept_from = *at;
        }
    };
    for range in ranges {
        put(&mut out, &mut kept_from, range.start);
        out.extend_from_slice(&body[kept_from..range.start]);
        kept_from = range.end;
    }
    put(&mut out, &mut kept_from, body.len());
    out.extend_from_slice(&body[kept_from..]);
    out
}

/// The positions of the items to cut: `stripped` (ascending, unique) and the partner of every
/// paired call or output among them (pairing: docs/reasons.md#call_id_mismatch), ascending, once
/// each.
///
/// A removed call takes its output along (docs/reasons.md, `strip`), and a removed output takes its
/// call along: a call left without its answer would be sent unanswered, which providers refuse,
/// and a reused `call_id` after it would pair differently. Pairs are one to one and pairing is
/// a stack per `call_id`, so cutting whole pairs leaves every other pairing as it was.
pub fn items_to_cut(request: &ParsedRequest<'_>, stripped: &[usize]) -> Vec<usize> {
    let mut all = stripped.to_vec();
    for_each_answer(request.items(), |output, call| {
        if stripped.binary_search(&call).is_ok() {
            all.push(output);
        } else if stripped.binary_search(&output).is_ok() {
            all.push(call);
        }
    });
    if all.len() > stripped.len() {
        all.sort_unstable();
        all.dedup();
    }
    all
}

/// The byte span of every item of the member `at` names (`input` or `items`), in order: exactly
/// the item's JSON value, without the whitespace around it. No items (an absent, null or string
/// member) is an empty list.
///
/// `body` must already have been read with [`crate::gate::parse_with`] for the same `at`, so it
/// is one JSON object whose gated member is written once and exactly so; an error here means
/// it was not.
pub fn item_spans(body: &[u8], at: ItemsAt) -> Result<Vec<Range<usize>>, BodyError> {
    let text = simdutf8::basic::from_utf8(body).map_err(|_| not_the_request("the body is not UTF-8"))?;
    // The gate's own reader: it passes over the members and items it does not keep many bytes
    // at a time, where serde_json goes byte by byte.
    let mut reader = crate::json::Reader::new(text);
    let raws = SpansSeed { member: at.member() }
        .deserialize(&mut reader)
        .and_then(|raws| reader.end().map(|()| raws))
        .map_err(not_the_request)?;
    let base = text.as_ptr() as usize;
    Ok(raws
        .into_iter()
        .map(|raw| {
            // The raw value borrows from `text`, so its address lies inside it.
            let start = raw.get().as_ptr() as usize - base;
            start..start + raw.get().len()
        })
        .collect())
}

/// `body` with the items at positions `remove` (ascending, unique, each below `spans.len()`)
/// cut out, each with one separating comma; every other byte is kept. `spans` are the items'
/// spans from [`item_spans`].
pub fn cut(body: &[u8], spans: &[Range<usize>], remove: &[usize]) -> Vec<u8> {
    let ranges: Vec<Range<usize>> = cut_ranges(spans, remove).collect();
    cut_out(body, &ranges)
}

/// The byte ranges [`cut`] deletes, ascending and disjoint: one per run of consecutive removed
/// items `i..=j`. After a kept item, the run goes from the end of item `i - 1` to the end of item
/// `j` (taking the comma before each removed item); at the start of the array, from the start of
/// item `i` to the start of the kept item `j + 1` (taking the comma after each); when every item
/// goes, from the start of the first to the end of the last, leaving `[`, the whitespace around
/// the items, and `]`.
pub fn cut_ranges<'s>(
    spans: &'s [Range<usize>],
    remove: &'s [usize],
) -> impl Iterator<Item = Range<usize>> + 's {
    let mut rest = remove;
    std::iter::from_fn(move || {
        let (&first, _) = rest.split_first()?;
        let run = rest
            .iter()
            .enumerate()
            .take_while(|&(k, &index)| index == first + k)
            .count();
        let last = first + run - 1;
        rest = &rest[run..];
        Some(if first > 0 {
            spans[first - 1].end..spans[last].end
        } else if let Some(next) = spans.get(last + 1) {
            spans[first].start..next.start
        } else {
            spans[first].start..spans[last].end
        })
    })
}

/// A body that does not read as [`crate::gate::parse_with`] read it.
fn not_the_request(message: impl fmt::Display) -> BodyError {
    BodyError::InvalidJson {
        message: format!("the body cannot be stripped: {message}"),
    }
}

/// Reads the request object, keeping only the raw items of one top-level member.
struct SpansSeed {
    member: &'static str,
}

impl<'de> DeserializeSeed<'de> for SpansSeed {
    type Value = Vec<&'de RawValue>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for SpansSeed {
    type Value = Vec<&'de RawValue>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a request object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut items = None;
        while let Some(is_member) = map.next_key_seed(IsNamed(self.member))? {
            if !is_member {
                map.next_value::<IgnoredAny>()?;
            } else if items.is_some() {
                return Err(de::Error::custom(format_args!(
                    "duplicate member `{}`",
                    self.member
                )));
            } else {
                items = Some(map.next_value_seed(RawItems)?);
            }
        }
        Ok(items.unwrap_or_default())
    }
}

/// Whether an object key (escapes decoded) is exactly the given name.
pub(crate) struct IsNamed(pub(crate) &'static str);

impl<'de> DeserializeSeed<'de> for IsNamed {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_identifier(self)
    }
}

impl Visitor<'_> for IsNamed {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E>(self, name: &str) -> Result<bool, E> {
        Ok(name == self.0)
    }
}

/// The items member: an array's elements as written, or nothing for null or a string.
struct RawItems;

impl<'de> DeserializeSeed<'de> for RawItems {
    type Value = Vec<&'de RawValue>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for RawItems {
    type Value = Vec<&'de RawValue>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string or an array of items")
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(16));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::{parse_with, Action, Gate, Policy, ProviderProfile, Reason, Target};

    /// `body` with the items at `remove` cut out of the member `at` names.
    fn cut_at(body: &str, at: ItemsAt, remove: &[usize]) -> String {
        parse_with(body.as_bytes(), at).expect("a request body");
        let spans = item_spans(body.as_bytes(), at).unwrap();
        String::from_utf8(cut(body.as_bytes(), &spans, remove)).unwrap()
    }

    fn cut_input(body: &str, remove: &[usize]) -> String {
        cut_at(body, ItemsAt::Input, remove)
    }

    /// The items' texts, as their spans cover them.
    fn item_texts(body: &str, at: ItemsAt) -> Vec<&str> {
        let spans = item_spans(body.as_bytes(), at).unwrap();
        spans.into_iter().map(|span| &body[span]).collect()
    }

    const A: &str = r#"{"id":"a"}"#;
    const B: &str = r#"{"id":"b"}"#;
    const C: &str = r#"{"id":"c"}"#;
    const D: &str = r#"{"id":"d"}"#;

    fn input_of(items: &[&str]) -> String {
        format!(r#"{{"model":"m","input":[{}]}}"#, items.join(","))
    }

    #[test]
    fn spans_cover_exactly_each_item_without_the_whitespace_around_it() {
        // A borrowed RawValue starts at the value (leading whitespace is skipped) and ends where
        // the value ends (trailing whitespace is not read as part of it).
        let body = "{\"input\" : [ \n\t{\"id\":\"a\"} \r\n,\n  {\"id\" : \"b\" }\t] }";
        assert_eq!(item_texts(body, ItemsAt::Input), [A, r#"{"id" : "b" }"#]);
    }

    #[test]
    fn no_items_have_no_spans() {
        for body in [
            r#"{"input":[]}"#,
            r#"{"input":"hello"}"#,
            r#"{"input":null}"#,
            r#"{"model":"m"}"#,
        ] {
            assert!(
                item_spans(body.as_bytes(), ItemsAt::Input).unwrap().is_empty(),
                "{body}"
            );
        }
    }

    #[test]
    fn removes_the_first_a_middle_or_the_last_item_with_one_comma() {
        let body = input_of(&[A, B, C]);
        assert_eq!(cut_input(&body, &[0]), input_of(&[B, C]));
        assert_eq!(cut_input(&body, &[1]), input_of(&[A, C]));
        assert_eq!(cut_input(&body, &[2]), input_of(&[A, B]));
    }

    #[test]
    fn removes_runs_and_scattered_items() {
        let body = input_of(&[A, B, C, D]);
        assert_eq!(cut_input(&body, &[0, 1]), input_of(&[C, D]));
        assert_eq!(cut_input(&body, &[1, 2]), input_of(&[A, D]));
        assert_eq!(cut_input(&body, &[2, 3]), input_of(&[A, B]));
        assert_eq!(cut_input(&body, &[0, 2]), input_of(&[B, D]));
        assert_eq!(cut_input(&body, &[1, 3]), input_of(&[A, C]));
        assert_eq!(cut_input(&body, &[0, 3]), input_of(&[B, C]));
        assert_eq!(cut_input(&body, &[0, 1, 3]), input_of(&[C]));
        assert_eq!(cut_input(&body, &[]), body);
    }

    #[test]
    fn removing_every_item_leaves_an_empty_array() {
        assert_eq!(cut_input(&input_of(&[A, B, C]), &[0, 1, 2]), input_of(&[]));
        assert_eq!(cut_input(&input_of(&[A]), &[0]), input_of(&[]));
        // The whitespace around the items stays.
        assert_eq!(
            cut_input("{\"input\":[\n  {\"id\":\"a\"},\n  {\"id\":\"b\"}\n]}", &[0, 1]),
            "{\"input\":[\n  \n]}"
        );
    }

    #[test]
    fn keeps_the_layout_between_the_items_that_stay() {
        // After a kept item, the cut runs from its end to the end of the last removed item, so
        // the separator that followed the removed run stays.
        let body = "{\n  \"input\": [\n    {\"id\":\"a\"},\n    {\"id\":\"b\"} ,\n\t{\"id\":\"c\"}\n  ]\n}\n";
        assert_eq!(
            cut_input(body, &[1]),
            "{\n  \"input\": [\n    {\"id\":\"a\"} ,\n\t{\"id\":\"c\"}\n  ]\n}\n"
        );
        assert_eq!(
            cut_input(body, &[0]),
            "{\n  \"input\": [\n    {\"id\":\"b\"} ,\n\t{\"id\":\"c\"}\n  ]\n}\n"
        );
        assert_eq!(
            cut_input(body, &[2]),
            "{\n  \"input\": [\n    {\"id\":\"a\"},\n    {\"id\":\"b\"}\n  ]\n}\n"
        );
    }

    #[test]
    fn commas_and_brackets_inside_items_are_not_separators() {
        let tricky =
            r#"{"role":"user","content":[{"type":"input_text","text":"a, [b], \"c\",]"}],"x":[[1,2],[]]}"#;
        let body = input_of(&[A, tricky, B]);
        assert_eq!(item_texts(&body, ItemsAt::Input), [A, tricky, B]);
        assert_eq!(cut_input(&body, &[1]), input_of(&[A, B]));
        assert_eq!(cut_input(&body, &[0, 2]), input_of(&[tricky]));
    }

    #[test]
    fn conversation_paths_cut_from_items() {
        let body = format!(r#"{{"input":[{C}],"items":[{A},{B}]}}"#);
        for at in [ItemsAt::Items, ItemsAt::AddedItems] {
            assert_eq!(item_texts(&body, at), [A, B]);
            assert_eq!(
                cut_at(&body, at, &[0]),
                format!(r#"{{"input":[{C}],"items":[{B}]}}"#)
            );
        }
        assert_eq!(item_texts(&body, ItemsAt::Input), [C]);
    }

    #[test]
    fn only_the_top_level_member_counts_wherever_it_is() {
        let body = format!(
            r#"{{"metadata":{{"input":[{D},{D}],"items":[1]}},"text":{{"format":{{"type":"text"}}}},
               "tools":[{{"type":"function","name":"f","parameters":{{"items":[{{"input":[]}}]}}}}],
               "input":[{A},{B}],"instructions":"input: [x, y]"}}"#
        );
        assert_eq!(item_texts(&body, ItemsAt::Input), [A, B]);
        let expected = body.replace(&format!("[{A},{B}]"), &format!("[{B}]"));
        assert_eq!(cut_input(&body, &[0]), expected);
    }

    #[test]
    fn a_member_name_written_with_escapes_is_the_member() {
        let body = format!(r#"{{"in\u0070ut":[{A},{B}]}}"#);
        assert_eq!(item_texts(&body, ItemsAt::Input), [A, B]);
    }

    #[test]
    fn bodies_the_gate_would_not_read_are_errors() {
        for body in [
            &b"[1]"[..],
            b"{\"input\":[1]",
            b"{\"input\":[1],\"input\":[2]}",
            b"{\"a\":\"\xff\"}",
        ] {
            let err = item_spans(body, ItemsAt::Input).unwrap_err();
            assert_eq!(err.code(), "invalid_json", "{err}");
        }
    }

    /// Strips every `status` violation of `body` (an `input` request) for OpenAI.
    fn strip_statuses(body: &str) -> Option<(Vec<usize>, String)> {
        let mut policy = Policy::default();
        policy.set_action(Reason::Status, Action::Strip);
        let openai = ProviderProfile::own_namespace("openai");
        let request = parse_with(body.as_bytes(), ItemsAt::Input).unwrap();
        let verdict = Gate::default()
            .judge(&request, &Target::new(&openai, &policy))
            .unwrap();
        assert!(verdict.is_allowed(), "{verdict:?}");
        let stripped = strip(body.as_bytes(), &request, &verdict).unwrap()?;
        Some((stripped.removed, String::from_utf8(stripped.body).unwrap()))
    }

    fn call(call_id: &str, status: &str) -> String {
        format!(
            r#"{{"type":"function_call","call_id":"{call_id}","name":"f","arguments":"{{}}","status":"{status}"}}"#
        )
    }

    fn output(call_id: &str) -> String {
        format!(r#"{{"type":"function_call_output","call_id":"{call_id}","output":"ok"}}"#)
    }

    #[test]
    fn a_removed_call_takes_its_output_along() {
        let user = r#"{"role":"user","content":"hi"}"#;
        let (bad, good) = (call("c1", "in_progress"), call("c2", "completed"));
        let items = [user, &bad, &good, &output("c2"), &output("c1")];
        let (removed, body) = strip_statuses(&input_of(&items)).unwrap();
        assert_eq!(removed, [1, 4]);
        assert_eq!(body, input_of(&[user, &good, &output("c2")]));
    }

    #[test]
    fn a_repeated_call_id_takes_only_its_own_output() {
        // Bedrock Mantle numbers calls per response: every turn has a call_0.
        let (good, bad, out) = (
            call("call_0", "completed"),
            call("call_0", "incomplete"),
            output("call_0"),
        );
        let items: [&str; 6] = [&good, &out, &bad, &out, &good, &out];
        let (removed, body) = strip_statuses(&input_of(&items)).unwrap();
        assert_eq!(removed, [2, 3]);
        assert_eq!(body, input_of(&[&good, &out, &good, &out]));
    }

    #[test]
    fn nothing_stripped_is_nothing_to_cut() {
        let items = [call("c1", "completed"), output("c1")];
        assert_eq!(strip_statuses(&input_of(&[&items[0], &items[1]])), None);
    }

    #[test]
    fn items_to_cut_merges_outputs_into_the_stripped_positions() {
        let items = [
            call("a", "completed"),
            call("b", "completed"),
            output("b"),
            call("c", "completed"),
            output("a"),
            output("c"),
        ];
        let refs: Vec<&str> = items.iter().map(String::as_str).collect();
        let body = input_of(&refs);
        let request = parse_with(body.as_bytes(), ItemsAt::Input).unwrap();
        assert_eq!(items_to_cut(&request, &[]), Vec::<usize>::new());
        assert_eq!(items_to_cut(&request, &[0]), [0, 4]);
        assert_eq!(items_to_cut(&request, &[0, 1]), [0, 1, 2, 4]);
        assert_eq!(items_to_cut(&request, &[1, 3]), [1, 2, 3, 5]);
        // A stripped call and its output stay one entry each.
        assert_eq!(items_to_cut(&request, &[0, 4]), [0, 4]);
        // A stripped output takes its call along.
        assert_eq!(items_to_cut(&request, &[2]), [1, 2]);
        assert_eq!(items_to_cut(&request, &[4, 5]), [0, 3, 4, 5]);
    }
}
