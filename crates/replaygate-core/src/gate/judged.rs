//! Judging only what is new (docs/incremental-judging.md): an agent sends its whole history
//! again on every turn, so most of each body is items the gate judged one turn earlier.
//!
//! After the gate judges an input clean, the caller keeps a [`JudgedPrefix`]: what judging
//! later items needs of those items (their ids, the schema work they took, and what the ledger
//! said of their keys: [`KeptFacts`], `judged_facts.rs`), as a [`KeptInput`] known by its
//! text (its length and a 128-bit keyed hash of it) and filed under its [`InputProbe::lead`]
//! (the caller's context and the first items' text). Every hash that decides whether a body's
//! text is passed over is keyed by the caller's [`JudgeKey`] (`judged_key.rs`); the one unkeyed
//! hash, of a kept input's last item, only passes over inputs quickly. A later body whose
//! `input` begins with the same text, byte for byte, in the same context, is read from the
//! first new item on ([`crate::gate::parse_after_known`]) and only its new items are judged
//! ([`Gate::judge_after`](crate::gate::Gate::judge_after)).
//!
//! The answer is never different from a full check. The incremental judgment gives a verdict
//! only when it is clean; anything else (a finding, an id the new items share with the old, a
//! call left open, an `item_reference`, a key of the old items the ledger now knows and did not)
//! makes it give up, and the caller judges the whole body as before. So only what a clean
//! verdict depends on is carried, and where it depends on the old items, they must be such that
//! it cannot: no call among them is unanswered and none is a reasoning item last.

use std::collections::HashSet;
use std::sync::Arc;

use foldhash::fast::RandomState;
use xxhash_rust::xxh3::xxh3_64;

use super::item::{Item, ItemClass};
use super::judged_facts::KeptFacts;
use super::judged_key::{digest, JudgeKey};
use super::provenance::{blob_digest, carries_blobs, LedgerQuery, Provenance};
use super::request::{ItemsAt, KnownItems, ParsedRequest};
use super::verdict::Verdict;
use crate::json::structure;
use crate::json::Field;

/// How many leading items (usually the instructions and the first user turn) name an input in
/// the lookup, beside the caller's context.
const LEAD_ITEMS: usize = 2;

/// Where a body's `input` starts, and the key its leading items give it
/// (docs/incremental-judging.md#identity): found without reading the rest of the body.
#[derive(Debug, Clone)]
pub struct InputProbe {
    /// Where the items array opens (its `[`).
    open: usize,
    /// A keyed hash of the caller's context and the text of the leading items.
    lead: u128,
    /// What every hash of the body is keyed with.
    key: JudgeKey,
}

impl InputProbe {
    /// Probes `body` (a `/responses` body: items in `input`) in a context the caller names by
    /// `context` (what else decides a verdict: the configuration, the team, the route), its
    /// text hashed under `key`. `None` when its `input` does not begin with two objects, or a
    /// member name before `input` has an escape: such a body is judged whole.
    pub fn of(body: &[u8], context: u128, key: &JudgeKey) -> Option<InputProbe> {
        let open = structure::member_value(body, b"input")?;
        let leading = structure::leading_objects(body, open, LEAD_ITEMS)?;
        let end = leading.last()?.end;
        let mut lead = key.hasher();
        lead.update(&context.to_le_bytes());
        lead.update(&body[open..end]);
        Some(InputProbe {
            open,
            lead: digest(&lead),
            key: key.clone(),
        })
    }

    /// The key of the body's leading items: the kept inputs it may continue are found by it.
    pub fn lead(&self) -> u128 {
        self.lead
    }

    /// Whether the body continues `kept`: its text from the `[` of `input` to the end of the
    /// kept input's last item is the kept input's, byte for byte (by a 128-bit keyed hash), and
    /// another item or the array's end follows. A body whose input is the kept one's (a retry,
    /// or the same request sent again) continues it with no new item.
    pub fn continues(&self, body: &[u8], kept: &KeptInput) -> Option<Continued> {
        self.continues_one_of(body, [kept])
            .map(|(_, continued)| continued)
    }

    /// Of `kept`, the longest input the body continues (as [`InputProbe::continues`] tells;
    /// of equally long ones, the first), by its position in `kept`. A candidate is one whose
    /// end lies in the body with a comma or the array's `]` after it, and whose last item the
    /// body seems to have there (its length, and a quick unkeyed hash of its first and last 64
    /// bytes: a filter only, which can pass over an input the body cannot continue, never take
    /// one). The keyed
    /// hash then decides, in one pass up to the longest candidate's end; should it refuse that
    /// end, every other candidate end is finished, longest first, in one more pass. So a body
    /// costs one keyed pass and digest, two passes at most, however many inputs are kept.
    pub fn continues_one_of<'k>(
        &self,
        body: &[u8],
        kept: impl IntoIterator<Item = &'k KeptInput>,
    ) -> Option<(usize, Continued)> {
        let mut candidates: Vec<(usize, usize, &KeptInput)> = kept
            .into_iter()
            .enumerate()
            .filter_map(|(index, kept)| {
                let end = self.open.checked_add(kept.len)?;
                let last = end.checked_sub(kept.last.len)?;
                let plausible = end <= body.len()
                    && last > self.open
                    && structure::continues_or_closes_after(body, end)
                    && LastItem::of(&body[last..end]) == kept.last;
                plausible.then_some((end, index, kept))
            })
            .collect();
        candidates.sort_unstable_by_key(|&(end, index, _)| (end, index));
        // The first candidate at `end` whose keyed digest is `keyed`'s.
        let found_at = |end: usize, keyed: &blake3::Hasher| {
            let hashed = digest(keyed);
            candidates
                .iter()
                .find(|(at, _, kept)| *at == end && kept.region == hashed)
                .map(|&(_, index, kept)| (index, kept))
        };
        let (longest, ..) = *candidates.last()?;
        let mut keyed = self.key.hasher();
        keyed.update(&body[self.open..longest]);
        let (index, kept, end, keyed) = match found_at(longest, &keyed) {
            Some((index, kept)) => (index, kept, longest, keyed),
            None => {
                // A candidate the filter let through and the keyed digest refuses (one that
                // goes on differently, or one made to pass the filter): the shorter ends, in
                // one more pass, the longest first.
                let mut ends: Vec<usize> = candidates.iter().map(|&(end, ..)| end).collect();
                ends.dedup();
                ends.pop();
                let mut keyed = self.key.hasher();
                let mut hashed_to = self.open;
                let mut states = Vec::with_capacity(ends.len());
                for end in ends {
                    keyed.update(&body[hashed_to..end]);
                    hashed_to = end;
                    states.push((end, keyed.clone()));
                }
                states.into_iter().rev().find_map(|(end, keyed)| {
                    let (index, kept) = found_at(end, &keyed)?;
                    Some((index, kept, end, keyed))
                })?
            }
        };
        let known = KnownItems {
            open: self.open,
            resume: end,
            count: kept.prefix.items,
        };
        let continued = Continued {
            known,
            region: Box::new(keyed),
            key: self.key.clone(),
            decisive: kept.decisive,
            alike: false,
        };
        Some((index, continued))
    }

    /// What is kept of the body's whole input, judged clean (`prefix`, the gate's), read whole
    /// or after `continued`: `request` is its reading, which noted where its items lie. `None`
    /// when it did not note them, it has no item after the known ones, or `prefix` was kept
    /// under another key than the probe's.
    pub fn keep(
        &self,
        body: &[u8],
        continued: Option<&Continued>,
        request: &ParsedRequest<'_>,
        prefix: JudgedPrefix,
    ) -> Option<KeptInput> {
        let last = request.item_spans()?.last()?.clone();
        if last.start <= self.open || last.end > body.len() || prefix.key != self.key {
            return None;
        }
        // A body found to decide alike has the kept input's: not hashed again.
        let decisive = match continued {
            Some(continued) if continued.alike => continued.decisive,
            _ => decisive(&self.key, request),
        };
        let region = match continued {
            Some(continued) => {
                let mut region = (*continued.region).clone();
                region.update(body.get(continued.known.resume..last.end)?);
                region
            }
            None => {
                let mut region = self.key.hasher();
                region.update(&body[self.open..last.end]);
                region
            }
        };
        Some(KeptInput {
            len: last.end - self.open,
            region: digest(&region),
            last: LastItem::of(&body[last]),
            decisive,
            prefix,
        })
    }
}

/// A kept input's last item, as a filter: its length, and a quick unkeyed hash of its first
/// and last 64 bytes (where an item's ids and the end of its text are). A body that does not
/// have the same where the input's last item ended cannot continue it; one that does is then
/// held to the input's keyed digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LastItem {
    len: usize,
    hash: u64,
}

impl LastItem {
    /// How many bytes of each end are hashed.
    const EDGE: usize = 64;

    fn of(item: &[u8]) -> LastItem {
        let hash = match item.len() <= 2 * Self::EDGE {
            true => xxh3_64(item),
            false => {
                let mut edges = [0; 2 * Self::EDGE];
                edges[..Self::EDGE].copy_from_slice(&item[..Self::EDGE]);
                edges[Self::EDGE..].copy_from_slice(&item[item.len() - Self::EDGE..]);
                xxh3_64(&edges)
            }
        };
        LastItem {
            len: item.len(),
            hash,
        }
    }
}

/// A body found to continue a kept input: where to read it from, and the keyed hash of its
/// text so far (to go on with when its own input is kept).
#[derive(Clone)]
pub struct Continued {
    known: KnownItems,
    /// Boxed: the hasher's state is some 2 KiB, and a request's future that holds it moves.
    region: Box<blake3::Hasher>,
    key: JudgeKey,
    /// The kept input's hash of what else decided its verdict, and whether the body was found
    /// to have the same ([`Continued::decides_alike`]).
    decisive: u128,
    alike: bool,
}

impl std::fmt::Debug for Continued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Continued")
            .field("known", &self.known)
            .finish_non_exhaustive()
    }
}

impl Continued {
    /// The items [`crate::gate::parse_after_known`] passes over.
    pub fn known(&self) -> KnownItems {
        self.known
    }

    /// Whether `request` (the body read after the kept input) has what the kept input was
    /// judged with besides its items, as [`KeptInput::decides_alike`] tells; noted, so that
    /// keeping the body's input ([`InputProbe::keep`]) does not hash them again.
    pub fn decides_alike(&mut self, request: &ParsedRequest<'_>) -> bool {
        self.alike = decisive(&self.key, request) == self.decisive;
        self.alike
    }
}

/// An input judged clean, as kept: its text's length from the `[` of `input` and keyed hash,
/// what else decided its verdict, and what the gate needs.
#[derive(Debug)]
pub struct KeptInput {
    len: usize,
    region: u128,
    /// Its last item, to pass over quickly the inputs a body cannot continue.
    last: LastItem,
    /// A keyed hash of what the gate read besides the items (`model`, `tools`,
    /// `previous_response_id`, `conversation`).
    decisive: u128,
    prefix: JudgedPrefix,
}

impl KeptInput {
    /// What the gate needs to judge a body after these items.
    pub fn prefix(&self) -> &JudgedPrefix {
        &self.prefix
    }

    /// Whether `request` (read after these items) has what they were judged with besides the
    /// items: the same model, tools, `previous_response_id` and `conversation`.
    pub fn decides_alike(&self, request: &ParsedRequest<'_>) -> bool {
        decisive(&self.prefix.key, request) == self.decisive
    }

    /// Whether `other` is the same input (a body sent twice).
    pub fn same_as(&self, other: &KeptInput) -> bool {
        (self.len, self.region, self.decisive) == (other.len, other.region, other.decisive)
    }

    /// Roughly the memory it holds, in bytes.
    pub fn footprint(&self) -> usize {
        std::mem::size_of::<Self>() + self.prefix.footprint()
    }
}

/// A keyed hash of what the gate reads of a request besides its items. The text is gathered
/// first and hashed in one piece: a piece of several KiB (the tools' parameters, mostly) is
/// hashed several chunks at a time, many small ones one block after another.
fn decisive(key: &JudgeKey, request: &ParsedRequest<'_>) -> u128 {
    fn field(text: &mut Vec<u8>, field: &Field<'_>) {
        match field {
            Field::Absent => text.push(0),
            Field::Str(value) => {
                text.push(1);
                text_bytes(text, Some(value.as_ref()));
            }
            Field::Other(kind) => text.extend_from_slice(&[2, *kind as u8]),
        }
    }
    fn text_bytes(text: &mut Vec<u8>, value: Option<&str>) {
        match value {
            Some(value) => {
                text.extend_from_slice(&(value.len() as u64).to_le_bytes());
                text.extend_from_slice(value.as_bytes());
            }
            None => text.extend_from_slice(&u64::MAX.to_le_bytes()),
        }
    }
    let parameters: usize = request
        .tools
        .iter()
        .map(|tool| tool.parameters.map_or(0, str::len))
        .sum();
    let mut text = Vec::with_capacity(parameters + 64 * (request.tools.len() + 4));
    field(&mut text, &request.model);
    field(&mut text, &request.previous_response_id);
    field(&mut text, &request.conversation);
    text.extend_from_slice(&(request.tools.len() as u64).to_le_bytes());
    for tool in &request.tools {
        field(&mut text, &tool.kind);
        field(&mut text, &tool.name);
        text_bytes(&mut text, tool.parameters);
    }
    key.digest(&text)
}

/// What the gate keeps of an input it judged clean, for a later body that begins with it.
#[derive(Debug, Clone)]
pub struct JudgedPrefix {
    /// What its hashes are keyed with.
    key: JudgeKey,
    /// How many items.
    items: usize,
    /// The 128-bit keyed hash of each string `id` among them.
    ids: HashSet<u128, RandomState>,
    /// The schema work their judgment took.
    work: u64,
    /// What the ledger said of the items' ids and blobs (docs/incremental-judging.md#the-ledger).
    facts: Arc<KeptFacts>,
}

impl JudgedPrefix {
    /// What its hashes are keyed with.
    pub(crate) fn key(&self) -> &JudgeKey {
        &self.key
    }

    /// How many items it covers.
    pub fn items(&self) -> usize {
        self.items
    }

    /// Roughly the memory it holds, in bytes (what a cache of them weighs).
    pub fn footprint(&self) -> usize {
        std::mem::size_of::<Self>() + self.ids.capacity() * 24 + self.facts.footprint()
    }

    /// The schema work the judgment of these items took.
    pub(crate) fn work(&self) -> u64 {
        self.work
    }

    /// Whether one of these items has the string `id`.
    pub(crate) fn has_id(&self, id: &str) -> bool {
        self.ids.contains(&self.key.digest(id.as_bytes()))
    }

    /// What the ledger said of these items' ids and blobs.
    pub fn facts(&self) -> &KeptFacts {
        &self.facts
    }

    /// The ledger query of a body read after these items ([`ParsedRequest::known_items`]):
    /// the keys its new items name, and the keys of these items the ledger did not know (a
    /// record may have been written since); what the ledger said of the others is kept
    /// ([`JudgedPrefix::facts`]). `None` when one of the new items has an id of these items:
    /// the caller then reads the whole body.
    pub fn query_after(&self, request: &ParsedRequest<'_>) -> Option<LedgerQuery> {
        if request
            .items()
            .iter()
            .any(|item| item.id().is_some_and(|id| self.has_id(id)))
        {
            return None;
        }
        let new = LedgerQuery::of(request);
        let unknown = self.facts.unknown();
        let (new_elsewhere, new_other) = new.item_ids.split_at(new.item_ids_elsewhere);
        let mut item_ids =
            Vec::with_capacity(unknown.ids_elsewhere.len() + unknown.ids_other.len() + new.item_ids.len());
        item_ids.extend_from_slice(&unknown.ids_elsewhere);
        item_ids.extend_from_slice(new_elsewhere);
        item_ids.extend_from_slice(&unknown.ids_other);
        item_ids.extend_from_slice(new_other);
        // A blob digest is of the item's type and blob alone, so an old item's may repeat: one
        // asked before is not asked again (a known one is taken from the kept facts).
        let mut digests = unknown.digests.clone();
        digests.extend(new.digests.iter().filter(|d| !self.facts.was_asked_digest(d)));
        // No new item has a kept item's id, so the short ones are new too.
        let mut short_ids = unknown.short_ids.clone();
        short_ids.extend_from_slice(&new.short_ids);
        Some(LedgerQuery {
            item_ids,
            item_ids_elsewhere: unknown.ids_elsewhere.len() + new_elsewhere.len(),
            digests,
            short_ids,
            ..new
        })
    }

    /// The ledger's `answer` to [`JudgedPrefix::query_after`], completed with the kept records
    /// of the blobs that new items of `request` share with these items: what the new items are
    /// judged with.
    pub fn answer_after(&self, request: &ParsedRequest<'_>, mut answer: Provenance) -> Provenance {
        for item in request.items().iter().filter(|item| carries_blobs(item)) {
            let Some(digest) = blob_digest(item) else {
                continue;
            };
            if answer.encrypted.contains_key(&digest) {
                continue;
            }
            if let Some(stored) = self.facts.record_of_digest(&digest) {
                answer.encrypted.insert(digest, stored.clone());
            }
        }
        answer
    }

    /// The ledger's answer to the whole body's query, told from `answer` (to
    /// [`JudgedPrefix::query_after`]) and the kept facts, while they hold: what the whole body
    /// is judged with when the new items alone cannot tell its verdict.
    pub fn whole_answer(&self, answer: Provenance) -> Provenance {
        self.facts.merged_into(answer)
    }

    /// Whether `answer` (to [`JudgedPrefix::query_after`]) agrees with the kept facts: every key
    /// the ledger did not know, it still does not.
    pub(crate) fn facts_agree(&self, answer: Option<&Provenance>) -> bool {
        answer.is_none_or(|answer| self.facts.unknown_still_unknown(answer))
    }
}

/// What judging a request (whole, or after a [`JudgedPrefix`]) left that a later one needs.
#[derive(Debug)]
pub(crate) struct Tail {
    /// Whether a call among the items has no output yet.
    pub(crate) open_calls: bool,
    /// The schema work spent, the prefix's included.
    pub(crate) work: u64,
}

/// The [`JudgedPrefix`] of `request`'s whole input, judged clean (`verdict`) after `known`
/// (`None`: judged whole), with `query` the ledger was asked and `provenance` what it said,
/// its hashes keyed with `key` (`known`'s, when there is one). `None` when a later body could
/// not be judged after it: the verdict is not clean, a call is left open, the last item is a
/// reasoning item, an item is an `item_reference`, or the request continues stored state.
pub(crate) fn keep(
    key: &JudgeKey,
    request: &ParsedRequest<'_>,
    known: Option<&JudgedPrefix>,
    verdict: &Verdict,
    tail: &Tail,
    query: Option<&LedgerQuery>,
    provenance: Option<&Provenance>,
) -> Option<JudgedPrefix> {
    let items = request.items();
    let clean = verdict.tally.is_empty()
        && verdict.stripped.is_empty()
        && verdict.repairs.is_empty()
        && verdict.repair_cuts.is_empty()
        && verdict.inserts.is_empty();
    let ends_with_reasoning = items
        .last()
        .is_some_and(|item| item.class == ItemClass::Reasoning);
    if !clean
        || tail.open_calls
        || ends_with_reasoning
        || request.at != ItemsAt::Input
        || request.continues_stored_state()
        || request.known_items() != known.map_or(0, |known| known.items)
        || known.is_some_and(|known| known.key != *key)
    {
        return None;
    }
    let mut ids = known.map(|known| known.ids.clone()).unwrap_or_default();
    ids.extend(
        items
            .iter()
            .filter_map(Item::id)
            .map(|id| key.digest(id.as_bytes())),
    );
    let facts = Arc::new(KeptFacts::after(
        known.map(|known| &known.facts),
        query,
        provenance,
    ));
    Some(JudgedPrefix {
        key: key.clone(),
        items: request.known_items() + items.len(),
        ids,
        work: tail.work,
        facts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::{parse_after_known, parse_noting_spans, Gate, ProviderProfile, Target};

    fn key() -> JudgeKey {
        JudgeKey::from_bytes([7; 32])
    }

    const TURN: &str = r#"{"model":"m","tools":[{"type":"function","name":"f"}],"input":[{"role":"user","content":"a"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}, {"type":"function_call_output","call_id":"c","output":"x"}]}"#;

    fn kept(body: &str, context: u128) -> KeptInput {
        kept_under(body, context, &key())
    }

    fn kept_under(body: &str, context: u128, key: &JudgeKey) -> KeptInput {
        let probe = InputProbe::of(body.as_bytes(), context, key).unwrap();
        let request = parse_noting_spans(body.as_bytes(), ItemsAt::Input).unwrap();
        let provider = ProviderProfile::own_namespace("openai");
        let (_, prefix) = Gate::default()
            .judge_keeping(&request, &Target::provider(&provider), None, key)
            .unwrap();
        probe
            .keep(body.as_bytes(), None, &request, prefix.unwrap())
            .unwrap()
    }

    #[test]
    fn a_body_that_re_sends_an_input_and_goes_on_continues_it() {
        let kept = kept(TURN, 7);
        let next = TURN.replace(r#""x"}]"#, r#""x"} , {"role":"user","content":"b"}]"#);
        let probe = InputProbe::of(next.as_bytes(), 7, &key()).unwrap();
        assert_eq!(
            probe.lead(),
            InputProbe::of(TURN.as_bytes(), 7, &key()).unwrap().lead()
        );
        let continued = probe.continues(next.as_bytes(), &kept).unwrap();
        assert_eq!(continued.known().count, 3);
        assert_eq!(&next.as_bytes()[continued.known().resume..][..3], b" , ");
        // The same body again continues it with no new item; another context has another lead;
        // a byte changed in an old item, or an item fewer, does not continue it.
        let again = InputProbe::of(TURN.as_bytes(), 7, &key())
            .unwrap()
            .continues(TURN.as_bytes(), &kept)
            .unwrap();
        assert_eq!(again.known().count, 3);
        assert_eq!(&TURN.as_bytes()[again.known().resume..], b"]}");
        assert_ne!(
            InputProbe::of(next.as_bytes(), 8, &key()).unwrap().lead(),
            probe.lead()
        );
        let changed = next.replace(r#""output":"x""#, r#""output":"y""#);
        assert!(InputProbe::of(changed.as_bytes(), 7, &key())
            .unwrap()
            .continues(changed.as_bytes(), &kept)
            .is_none());
        // A byte changed before the last item, which is the same where it was: the keyed digest
        // of the whole text tells.
        let earlier = next.replace(r#""content":"a""#, r#""content":"z""#);
        let probe = InputProbe::of(earlier.as_bytes(), 7, &key()).unwrap();
        assert!(probe.continues(earlier.as_bytes(), &kept).is_none());
        let last = probe.open + kept.len - kept.last.len;
        assert_eq!(
            LastItem::of(&earlier.as_bytes()[last..probe.open + kept.len]),
            kept.last
        );
        let fewer = r#"{"model":"m","tools":[{"type":"function","name":"f"}],"input":[{"role":"user","content":"a"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}, {"role":"user","content":"b"}]}"#;
        assert!(InputProbe::of(fewer.as_bytes(), 7, &key())
            .unwrap()
            .continues(fewer.as_bytes(), &kept)
            .is_none());
    }

    #[test]
    fn of_many_inputs_under_one_lead_the_longest_one_the_body_continues_is_taken() {
        // One session's turns, and another session's of the same length and lead that differ
        // in one old item's text: the longest of this session's is found, whatever the order.
        let turn = |session: &str, outputs: usize| {
            let items: Vec<String> = (0..outputs)
                .map(|n| {
                    format!(
                        r#"{{"type":"function_call","call_id":"c{n}","name":"f","arguments":"{{}}"}},{{"type":"function_call_output","call_id":"c{n}","output":"{session}"}}"#
                    )
                })
                .collect();
            format!(
                r#"{{"model":"m","tools":[{{"type":"function","name":"f"}}],"input":[{{"role":"user","content":"a"}},{{"role":"user","content":"b"}},{}]}}"#,
                items.join(",")
            )
        };
        let bare = |outputs: usize, session: &str| -> KeptInput {
            let body = turn(session, outputs);
            let request = parse_noting_spans(body.as_bytes(), ItemsAt::Input).unwrap();
            let (_, prefix) = Gate::default()
                .judge_keeping(
                    &request,
                    &Target::provider(&ProviderProfile::own_namespace("openai")),
                    None,
                    &key(),
                )
                .unwrap();
            InputProbe::of(body.as_bytes(), 1, &key())
                .unwrap()
                .keep(body.as_bytes(), None, &request, prefix.unwrap())
                .unwrap()
        };
        let next = turn("x", 5);
        let probe = InputProbe::of(next.as_bytes(), 1, &key()).unwrap();
        let kept = [
            bare(3, "y"),
            bare(2, "x"),
            bare(4, "y"),
            bare(3, "x"),
            bare(5, "x"),
            bare(1, "x"),
        ];
        assert_eq!(
            probe.lead(),
            InputProbe::of(turn("y", 2).as_bytes(), 1, &key()).unwrap().lead()
        );
        let (index, continued) = probe.continues_one_of(next.as_bytes(), &kept).unwrap();
        // bare(5, "x") is the body's own input: it continues it, with no new item.
        assert_eq!((index, continued.known().count), (4, 12));
        let (index, _) = probe
            .continues_one_of(next.as_bytes(), kept.iter().rev())
            .unwrap();
        assert_eq!(index, 1, "the same input, counted from the other end");
        let (index, continued) = probe.continues_one_of(next.as_bytes(), &kept[..4]).unwrap();
        assert_eq!((index, continued.known().count), (3, 8));
        assert!(probe.continues_one_of(next.as_bytes(), &kept[..1]).is_none());
        assert!(probe.continues_one_of(next.as_bytes(), []).is_none());
        // What it found is what `continues` finds of that input alone.
        let alone = probe.continues(next.as_bytes(), &kept[3]).unwrap();
        assert_eq!(alone.known().count, 8);
        assert_eq!(alone.known(), continued.known());
    }

    #[test]
    fn an_unkeyed_match_the_keyed_digest_refuses_is_not_taken() {
        // The body continues `kept` (three items), and has a fourth item as long as the last
        // of `forged`, an input of other text whose filter is made the body's there (as a
        // crafted XXH3 collision would be).
        let kept = kept(TURN, 7);
        let next = TURN.replace(
            r#""x"}]"#,
            r#""x"},{"role":"user","content":"b"},{"role":"user","content":"c"}]"#,
        );
        let other = TURN.replace(r#""x"}]"#, r#""x"},{"role":"user","content":"B"}]"#);
        let mut forged = kept_under(&other, 7, &key());
        let probe = InputProbe::of(next.as_bytes(), 7, &key()).unwrap();
        let end = probe.open + forged.len;
        assert_eq!(&next.as_bytes()[end..end + 1], b",");
        let item = end - forged.last.len;
        assert_ne!(LastItem::of(&next.as_bytes()[item..end]), forged.last);
        forged.last = LastItem::of(&next.as_bytes()[item..end]);
        assert!(probe.continues(next.as_bytes(), &forged).is_none());
        // The shorter input the body does continue is found in the second pass.
        let (index, continued) = probe.continues_one_of(next.as_bytes(), [&forged, &kept]).unwrap();
        assert_eq!((index, continued.known().count), (1, 3));
        let alone = probe.continues(next.as_bytes(), &kept).unwrap();
        assert_eq!(alone.known(), continued.known());
    }

    #[test]
    fn under_another_key_the_same_input_has_another_identity_and_is_not_found() {
        let turn = TURN.replace(r#""call_id":"c","#, r#""id":"fc_1","call_id":"c","#);
        let next = turn.replace(r#""x"}]"#, r#""x"},{"role":"user","content":"b"}]"#);
        let other_key = JudgeKey::from_bytes([8; 32]);
        let (one, other) = (kept(&turn, 7), kept_under(&turn, 7, &other_key));
        assert!(one.same_as(&kept(&turn, 7)));
        assert!(!one.same_as(&other), "the same text, another region digest");
        assert_ne!(one.decisive, other.decisive);
        assert_ne!(one.prefix.ids, other.prefix.ids);
        assert!(one.prefix.has_id("fc_1") && other.prefix.has_id("fc_1"));
        // A body probed under the other key has another lead, and does not continue the input
        // kept under the first, though its text does.
        let probe = InputProbe::of(next.as_bytes(), 7, &other_key).unwrap();
        assert_ne!(
            probe.lead(),
            InputProbe::of(next.as_bytes(), 7, &key()).unwrap().lead()
        );
        assert!(probe.continues(next.as_bytes(), &one).is_none());
        assert!(probe.continues(next.as_bytes(), &other).is_some());
        assert!(InputProbe::of(next.as_bytes(), 7, &key())
            .unwrap()
            .continues(next.as_bytes(), &one)
            .is_some());
        // What was judged under one key is not kept under a probe of another.
        let request = parse_noting_spans(turn.as_bytes(), ItemsAt::Input).unwrap();
        let provider = ProviderProfile::own_namespace("openai");
        let (_, prefix) = Gate::default()
            .judge_keeping(&request, &Target::provider(&provider), None, &other_key)
            .unwrap();
        let probe = InputProbe::of(turn.as_bytes(), 7, &key()).unwrap();
        assert!(probe
            .keep(turn.as_bytes(), None, &request, prefix.unwrap())
            .is_none());
        // Nothing written of them shows the key.
        for shown in [format!("{one:?}"), format!("{probe:?}")] {
            assert!(shown.contains("key: JudgeKey(..)"), "{shown}");
            assert!(!shown.contains("7, 7, 7"), "{shown}");
        }
    }

    #[test]
    fn what_else_the_gate_reads_must_be_the_same() {
        let kept = kept(TURN, 7);
        let same = parse_noting_spans(TURN.as_bytes(), ItemsAt::Input).unwrap();
        assert!(kept.decides_alike(&same));
        for other in [
            TURN.replace(r#""model":"m""#, r#""model":"n""#),
            TURN.replace(
                r#""name":"f"}]"#,
                r#""name":"f","parameters":{"type":"object"}}]"#,
            ),
            TURN.replace(r#""model":"m""#, r#""model":"m","previous_response_id":"resp_1""#),
        ] {
            let request = parse_noting_spans(other.as_bytes(), ItemsAt::Input).unwrap();
            assert!(!kept.decides_alike(&request), "{other}");
            // Its next turn continues the kept input's text, is found not to decide alike, and
            // what is kept of it is hashed for its own model and tools.
            let next = other.replace(r#""x"}]"#, r#""x"},{"role":"user","content":"b"}]"#);
            let probe = InputProbe::of(next.as_bytes(), 7, &key()).unwrap();
            let mut continued = probe.continues(next.as_bytes(), &kept).unwrap();
            let after = parse_after_known(next.as_bytes(), ItemsAt::Input, true, continued.known()).unwrap();
            assert!(!continued.decides_alike(&after), "{next}");
            let own = probe
                .keep(next.as_bytes(), Some(&continued), &after, kept.prefix().clone())
                .unwrap();
            assert!(!own.decides_alike(&same) && own.decides_alike(&after), "{next}");
        }
        let next = TURN.replace(r#""x"}]"#, r#""x"},{"role":"user","content":"b"}]"#);
        let probe = InputProbe::of(next.as_bytes(), 7, &key()).unwrap();
        let mut continued = probe.continues(next.as_bytes(), &kept).unwrap();
        let after = parse_after_known(next.as_bytes(), ItemsAt::Input, true, continued.known()).unwrap();
        assert!(continued.decides_alike(&after));
        let own = probe
            .keep(next.as_bytes(), Some(&continued), &after, kept.prefix().clone())
            .unwrap();
        assert!(own.decides_alike(&same));
    }

    #[test]
    fn bodies_that_do_not_begin_with_two_objects_are_not_probed() {
        for body in [
            r#"{"input":"hello"}"#,
            r#"{"input":[{},1]}"#,
            r#"{"input":[{}]}"#,
            r#"{"in\u0070ut":[{},{}]}"#,
            r#"{"a\"":1,"input":[{},{}]}"#,
        ] {
            assert!(InputProbe::of(body.as_bytes(), 0, &key()).is_none(), "{body}");
        }
        assert!(InputProbe::of(br#"{"input":[{},{},"x"]}"#, 0, &key()).is_some());
    }
}
