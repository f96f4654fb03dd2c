//! Judging only what is new (docs/incremental-judging.md): an agent sends its whole history
//! again on every turn, so most of each body is items the gate judged one turn earlier.
//!
//! After the gate judges an input clean, the caller keeps a [`JudgedPrefix`]: what judging
//! later items needs of those items (their ids, the schema work they took, the ledger keys
//! they named and a hash of what the ledger said of them), under the key of those exact items
//! in that exact context ([`InputScan::key`]). A later body whose `input` begins with the same
//! items, byte for byte, in the same context, is read from the first new item on
//! ([`crate::gate::parse_after_known`]) and only its new items are judged
//! ([`Gate::judge_after`](crate::gate::Gate::judge_after)). Identity is by content: a 128-bit
//! hash of each item's exact bytes, chained from a hash of the context.
//!
//! The answer is never different from a full check. The incremental judgment gives a verdict
//! only when it is clean; anything else (a finding, an id the new items share with the old, a
//! call left open, an `item_reference`, facts about the old items that changed in the ledger)
//! makes it give up, and the caller judges the whole body as before. So only what a clean
//! verdict depends on is carried, and where it depends on the old items, they must be such that
//! it cannot: no call among them is unanswered and none is a reasoning item last.

use std::collections::HashSet;
use std::hash::Hash;
use std::ops::Range;

use foldhash::fast::RandomState;
use xxhash_rust::xxh3::{xxh3_128, Xxh3};

use super::item::{Item, ItemClass};
use super::provenance::{LedgerQuery, Provenance};
use super::request::{ItemsAt, KnownItems, ParsedRequest, MAX_ITEMS};
use super::verdict::Verdict;
use crate::json::structure;

/// The fewest items an input must have for its prefix to be looked up.
const MIN_ITEMS: usize = 2;

/// How many prefixes, longest first, a body's lookup tries: a turn adds an answer's items and
/// the client's outputs, rarely more than this.
pub const MAX_NEW_ITEMS: usize = 24;

/// A body's `input` as the structural scan found it (docs/incremental-judging.md#identity):
/// where each item lies, and the key of every prefix of them in the body's context.
#[derive(Debug, Clone)]
pub struct InputScan {
    /// Where the items array opens (its `[`).
    open: usize,
    /// Where each item lies in the body.
    items: Vec<Range<usize>>,
    /// `keys[i]`: the key of the first `i + 1` items.
    keys: Vec<u128>,
}

impl InputScan {
    /// Scans `body` (a `/responses` body: items in `input`), in a context the caller names by
    /// `context` (what else decides a verdict: the configuration, the team, the route). `None`
    /// when the body is not one whose prefix can be reused: its `input` is not an array of
    /// objects, it continues stored state (`previous_response_id` or `conversation` not null),
    /// a top-level member name has an escape or comes twice, or it has too few items.
    pub fn of(body: &[u8], context: u128) -> Option<InputScan> {
        let mut decisive = Xxh3::new();
        decisive.update(&context.to_le_bytes());
        let mut input = None;
        let mut seen = [false; 5];
        structure::members(body, |name, start| {
            let slot = match name {
                b"input" => 0,
                b"model" => 1,
                b"tools" => 2,
                b"previous_response_id" => 3,
                b"conversation" => 4,
                _ => return structure::value_end(body, start),
            };
            if std::mem::replace(&mut seen[slot], true) {
                return None;
            }
            if slot == 0 {
                let items = structure::object_elements(body, start)?;
                let end = items.end;
                input = Some((start, items.elements));
                return Some(end);
            }
            let end = structure::value_end(body, start)?;
            let value = &body[start..end];
            if slot >= 3 && value != b"null" {
                return None;
            }
            decisive.update(name);
            decisive.update(&(value.len() as u64).to_le_bytes());
            decisive.update(value);
            Some(end)
        })?;
        let (open, items) = input?;
        if items.len() < MIN_ITEMS || items.len() > MAX_ITEMS {
            return None;
        }
        let mut key = decisive.digest128();
        let keys = items
            .iter()
            .map(|span| {
                let item = xxh3_128(&body[span.clone()]);
                let mut link = [0u8; 32];
                link[..16].copy_from_slice(&key.to_le_bytes());
                link[16..].copy_from_slice(&item.to_le_bytes());
                key = xxh3_128(&link);
                key
            })
            .collect();
        Some(InputScan { open, items, keys })
    }

    /// How many items the body has.
    pub fn items(&self) -> usize {
        self.items.len()
    }

    /// The key of the body's whole input, under which its [`JudgedPrefix`] is kept.
    pub fn key(&self) -> u128 {
        *self.keys.last().expect("a scan has items")
    }

    /// The keys of the prefixes a lookup tries, longest first: every prefix that leaves one
    /// to [`MAX_NEW_ITEMS`] items new, with how many items it covers.
    pub fn prefix_keys(&self) -> impl Iterator<Item = (usize, u128)> + '_ {
        let n = self.items.len();
        (n.saturating_sub(MAX_NEW_ITEMS).max(1)..n)
            .rev()
            .map(|count| (count, self.keys[count - 1]))
    }

    /// What [`crate::gate::parse_after_known`] passes over for a prefix of `count` items.
    pub fn known(&self, count: usize) -> KnownItems {
        KnownItems {
            open: self.open,
            resume: self.items[count - 1].end,
            count,
        }
    }
}

/// What the gate keeps of an input it judged clean, for a later body that begins with it.
#[derive(Debug, Clone, Default)]
pub struct JudgedPrefix {
    /// How many items.
    items: usize,
    /// The 128-bit hash of each string `id` among them.
    ids: HashSet<u128, RandomState>,
    /// The schema work their judgment took.
    work: u64,
    /// The ids the ledger was asked about, as [`LedgerQuery::item_ids`] lists them, and how
    /// many of them (the first) are reasoning, compaction and item_reference ids.
    query_ids: Vec<String>,
    query_ids_elsewhere: usize,
    /// The digests the ledger was asked about.
    query_digests: Vec<[u8; 32]>,
    /// A hash of what the ledger said about those keys.
    facts: u128,
}

impl JudgedPrefix {
    /// How many items it covers.
    pub fn items(&self) -> usize {
        self.items
    }

    /// Roughly the memory it holds, in bytes (what a cache of them weighs).
    pub fn footprint(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.ids.capacity() * 24
            + self.query_ids.iter().map(|id| id.len() + 24).sum::<usize>()
            + self.query_digests.len() * 32
    }

    /// The schema work the judgment of these items took.
    pub(crate) fn work(&self) -> u64 {
        self.work
    }

    /// Whether one of these items has the string `id`.
    pub(crate) fn has_id(&self, id: &str) -> bool {
        self.ids.contains(&xxh3_128(id.as_bytes()))
    }

    /// The ledger query of a body read after these items ([`ParsedRequest::known_items`]):
    /// what [`LedgerQuery::of`] gives for the whole body. `None` when it cannot be told from
    /// the new items alone (one of them has an id of these items, or the keys pass the cap);
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
        let (old_elsewhere, old_other) = self.query_ids.split_at(self.query_ids_elsewhere);
        let (new_elsewhere, new_other) = new.item_ids.split_at(new.item_ids_elsewhere);
        let keys = self.query_ids.len() + new.item_ids.len();
        let digests = self.query_digests.len() + new.digests.len();
        if keys >= super::MAX_QUERY_KEYS || digests >= super::MAX_QUERY_KEYS {
            return None;
        }
        let mut item_ids = Vec::with_capacity(keys);
        item_ids.extend_from_slice(old_elsewhere);
        item_ids.extend_from_slice(new_elsewhere);
        item_ids.extend_from_slice(old_other);
        item_ids.extend_from_slice(new_other);
        // A blob digest is of the item's type and blob alone, so an old item's may repeat.
        let mut query_digests = self.query_digests.clone();
        let old: HashSet<&[u8; 32], RandomState> = self.query_digests.iter().collect();
        query_digests.extend(new.digests.iter().filter(|d| !old.contains(d)));
        Some(LedgerQuery {
            item_ids,
            item_ids_elsewhere: old_elsewhere.len() + new_elsewhere.len(),
            digests: query_digests,
            ..new
        })
    }

    /// Whether the ledger says now about these items' keys what it said when they were judged.
    pub(crate) fn same_facts(&self, provenance: Option<&Provenance>) -> bool {
        self.facts == facts_hash(&self.query_ids, &self.query_digests, provenance)
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
/// (`None`: judged whole), with `query` the ledger was asked and `provenance` what it said.
/// `None` when a later body could not be judged after it: the verdict is not clean, a call is
/// left open, the last item is a reasoning item, an item is an `item_reference`, or the request
/// continues stored state.
pub(crate) fn keep(
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
    {
        return None;
    }
    let mut ids = known.map(|known| known.ids.clone()).unwrap_or_default();
    ids.extend(
        items
            .iter()
            .filter_map(Item::id)
            .map(|id| xxh3_128(id.as_bytes())),
    );
    let (query_ids, query_ids_elsewhere, query_digests) = match query {
        Some(query) => (
            query.item_ids.clone(),
            query.item_ids_elsewhere,
            query.digests.clone(),
        ),
        None => Default::default(),
    };
    let facts = facts_hash(&query_ids, &query_digests, provenance);
    Some(JudgedPrefix {
        items: request.known_items() + items.len(),
        ids,
        work: tail.work,
        query_ids,
        query_ids_elsewhere,
        query_digests,
        facts,
    })
}

/// A hash of what `provenance` says about `ids` and `digests` (the ledger's records of them,
/// or that it has none).
fn facts_hash(ids: &[String], digests: &[[u8; 32]], provenance: Option<&Provenance>) -> u128 {
    let mut hasher = Xxh3::new();
    if let Some(provenance) = provenance {
        for id in ids {
            id.hash(&mut hasher);
            provenance.items.get(id).hash(&mut hasher);
        }
        for digest in digests {
            digest.hash(&mut hasher);
            provenance.encrypted.get(digest).hash(&mut hasher);
        }
    }
    hasher.digest128()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_that_re_sends_an_input_finds_it_among_its_prefixes() {
        let turn = br#"{"model":"m","input":[{"role":"user","content":"a"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}]}"#;
        let next = br#"{"model":"m","input":[{"role":"user","content":"a"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"} , {"type":"function_call_output","call_id":"c","output":"x"}]}"#;
        let first = InputScan::of(turn, 7).unwrap();
        let second = InputScan::of(next, 7).unwrap();
        assert_eq!(second.prefix_keys().next(), Some((2, first.key())));
        // Another context, another model, or an item changed by a byte: another key.
        assert_ne!(
            InputScan::of(next, 8).unwrap().prefix_keys().next().unwrap().1,
            first.key()
        );
        let other_model = String::from_utf8(next.to_vec())
            .unwrap()
            .replace(r#""m""#, r#""n""#);
        assert_ne!(
            InputScan::of(other_model.as_bytes(), 7).unwrap().keys[1],
            first.key()
        );
        let changed = String::from_utf8(next.to_vec())
            .unwrap()
            .replace(r#""a""#, r#""b""#);
        assert_ne!(InputScan::of(changed.as_bytes(), 7).unwrap().keys[1], first.key());
        // Where the reader resumes: just after the second item.
        let known = second.known(2);
        assert_eq!(&next[known.resume..known.resume + 3], b" , ");
    }

    #[test]
    fn bodies_that_continue_stored_state_or_are_not_items_are_not_scanned() {
        for body in [
            r#"{"previous_response_id":"resp_1","input":[{},{}]}"#,
            r#"{"conversation":"conv_1","input":[{},{}]}"#,
            r#"{"input":"hello"}"#,
            r#"{"input":[{},1]}"#,
            r#"{"input":[{}]}"#,
            r#"{"input":[{},{}],"input":[{},{}]}"#,
            r#"{"in\u0070ut":[{},{}]}"#,
        ] {
            assert!(InputScan::of(body.as_bytes(), 0).is_none(), "{body}");
        }
        let null_previous = r#"{"previous_response_id":null,"input":[{},{}]}"#;
        assert!(InputScan::of(null_previous.as_bytes(), 0).is_some());
    }
}
