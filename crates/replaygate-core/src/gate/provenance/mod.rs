//! What the provenance ledger (docs/ledger.md) is asked about one request, and what it answers.
//!
//! The gate stays pure: the proxy takes the [`LedgerQuery`] of a request, looks its keys up in
//! its store, and hands what the store knows to the gate as a [`Provenance`] (see
//! [`Target::with_provenance`](super::Target::with_provenance)). Whatever the store does not
//! know is simply left out: unknown provenance is never a violation of the provenance rules
//! (with teams it is `unknown_state`, docs/reasons.md#unknown_state).
//!
//! ```
//! use replaygate_core::gate::provenance::{item_record_from_value, Owner, StoredItem};
//! use replaygate_core::gate::{parse, Gate, LedgerQuery, Provenance, ProviderProfile, Target};
//!
//! let body = br#"{"model":"m","input":[{"type":"reasoning","summary":[],"encrypted_content":"gAAA"}]}"#;
//! let request = parse(body).unwrap();
//! let query = LedgerQuery::of(&request);
//! assert_eq!(query.digests.len(), 1);
//!
//! // The store answers: that blob came from openai.
//! let output = serde_json::json!({"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAA"});
//! let record = item_record_from_value(&output).unwrap();
//! assert_eq!(record.digest, query.digests[0]);
//! let owner = Owner { provider: "openai".into(), model: Some("m".into()) };
//! let stored = StoredItem { response_id: "resp_1".into(), owner, record, expires_unix: 0, team: None, not_stored: false };
//! let mut provenance = Provenance::default();
//! provenance.encrypted.insert(query.digests[0], stored);
//!
//! let bedrock = ProviderProfile::own_namespace("bedrock");
//! let target = Target::provider(&bedrock).with_provenance(&provenance);
//! let verdict = Gate::default().judge(&request, &target).unwrap();
//! assert_eq!(verdict.violations[0].reason.as_str(), "foreign_encrypted_content");
//! ```

use std::collections::{HashMap, HashSet};

use foldhash::fast::RandomState;
use serde_json::{Map, Value};

use super::item::{Item, ItemClass};
use super::pairing::unpaired_call_ids;
use super::request::ParsedRequest;
use super::strip::item_spans;

mod canon;
pub(crate) mod quick;
mod record;

pub use record::{
    item_digest, item_record, item_record_from_value, link_reasoning, names_one_item, ItemRecord, Owner,
    StoredItem, MAX_ID_BYTES, MIN_ITEM_ID_BYTES,
};

/// The most keys (item ids, or digests) one call to the ledger's store asks about. A request
/// that names more is looked up in as many calls as it takes: every id and digest of a body is
/// asked about, and the body's size (at most [`MAX_ITEMS`](super::request::MAX_ITEMS) items)
/// bounds how many there are.
pub const MAX_QUERY_KEYS: usize = 4096;

/// The keys the ledger's store is asked about for one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerQuery {
    /// `previous_response_id`, when it is a string the ledger could have recorded.
    pub previous_response_id: Option<String>,
    /// The string `id` of the items, once each, reasoning, compaction and item_reference ids
    /// first, then the others in input order; ids longer than [`MAX_ID_BYTES`] (never recorded)
    /// or too short to name one item ([`names_one_item`]) are left out.
    pub item_ids: Vec<String>,
    /// How many of [`item_ids`](Self::item_ids), the first, are reasoning, compaction and
    /// item_reference ids.
    pub item_ids_elsewhere: usize,
    /// For every `reasoning` or `compaction` item with a non-null `encrypted_content`, the
    /// ledger digest of the item ([`item_digest`]): what the ledger recorded for the same blob.
    /// Once each.
    pub digests: Vec<[u8; 32]>,
    /// The ids of reasoning, compaction and item_reference items too short to name one item
    /// ([`names_one_item`]; a provider that numbers items per response), once each: asked about
    /// only to tell whether the ledger knows them at all (`unknown_state`), never judged by
    /// whose they are.
    pub short_ids: Vec<String>,
    /// With a `previous_response_id`: the `call_id` of every output that answers no call in
    /// `input`, once each. The chain must hold their calls, so a walk of it may stop once it
    /// has found them all.
    pub unpaired_call_ids: Vec<String>,
    /// The id of the request's `conversation`, when the ledger could have recorded it.
    pub conversation: Option<String>,
}

impl LedgerQuery {
    /// The query for `request`: what its one parse kept (ids, call ids, `encrypted_content`
    /// blobs) is enough, so asking costs one walk over its items.
    pub fn of(request: &ParsedRequest<'_>) -> LedgerQuery {
        let previous_response_id = request
            .previous_response_id
            .as_str()
            .filter(|id| recordable(id))
            .map(str::to_owned);
        let items = request.items();
        let mut seen = HashSet::with_capacity_and_hasher(items.len(), RandomState::default());
        let mut item_ids = Vec::new();
        let mut item_ids_elsewhere = 0;
        let mut short_ids = Vec::new();
        for resolved_elsewhere in [true, false] {
            if !resolved_elsewhere {
                item_ids_elsewhere = item_ids.len();
            }
            for item in items {
                if is_resolved_elsewhere(item) != resolved_elsewhere {
                    continue;
                }
                let Some(id) = item.id().filter(|id| recordable(id)) else {
                    continue;
                };
                match names_one_item(id) {
                    true if seen.insert(id) => item_ids.push(id.to_owned()),
                    false if resolved_elsewhere && seen.insert(id) => short_ids.push(id.to_owned()),
                    _ => {}
                }
            }
        }
        let mut digests = Vec::new();
        let mut seen = HashSet::with_hasher(RandomState::default());
        for digest in items
            .iter()
            .filter(|item| carries_blobs(item))
            .filter_map(blob_digest)
        {
            if seen.insert(digest) {
                digests.push(digest);
            }
        }
        let unpaired_call_ids = match previous_response_id {
            Some(_) => unpaired_call_ids(items),
            None => Vec::new(),
        };
        let conversation = request
            .conversation
            .as_str()
            .filter(|id| recordable(id))
            .map(str::to_owned);
        LedgerQuery {
            previous_response_id,
            item_ids,
            item_ids_elsewhere,
            digests,
            short_ids,
            unpaired_call_ids,
            conversation,
        }
    }

    /// Whether there is nothing to ask: the request needs no store lookup.
    pub fn is_empty(&self) -> bool {
        self.previous_response_id.is_none()
            && self.item_ids.is_empty()
            && self.digests.is_empty()
            && self.short_ids.is_empty()
            && self.conversation.is_none()
    }
}

/// What the ledger knows of one request: the facts the proxy found for a [`LedgerQuery`].
/// Anything missing is unknown: never a violation of the provenance rules, and with teams
/// (unless allowed) the reason `unknown_state` (docs/reasons.md#unknown_state).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Provenance {
    /// The response `previous_response_id` names, when the ledger recorded it.
    pub previous: Option<ChainFacts>,
    /// The recorded items, by item `id` (the ids of the query that the store knows).
    pub items: HashMap<String, StoredItem, RandomState>,
    /// The recorded reasoning and compaction items, by the digest of their `encrypted_content`
    /// (the digests of the query that the store knows).
    pub encrypted: HashMap<[u8; 32], StoredItem, RandomState>,
    /// The conversation the request's `conversation` names, when the ledger recorded it.
    pub conversation: Option<ConversationFacts>,
    /// The JSON texts the ledger kept (`store_items`) of reasoning items, by `id`: those that
    /// recorded items of the request came right after ([`ItemRecord::preceded_by`]) and that
    /// the request does not send, so `repair` can put them back (`reasoning_missing`).
    ///
    /// [`ItemRecord::preceded_by`]: record::ItemRecord::preceded_by
    pub reasoning_texts: HashMap<String, String, RandomState>,
    /// The JSON texts the ledger kept (`store_items`) of recorded items of responses their
    /// provider did not store, by `id`: those the request names by reasoning, compaction or
    /// item_reference id, so `repair` can put an `item_reference`'s item in its place
    /// (`state_not_stored`).
    pub unstored_texts: HashMap<String, String, RandomState>,
    /// The ids of [`LedgerQuery::short_ids`] the ledger holds a team's record of (whichever
    /// team's), with the time that record expires (unix seconds).
    pub short_ids: HashMap<String, u64, RandomState>,
}

impl Provenance {
    /// Adds what `other` knows by key (items by id, blobs by digest, short ids) where this
    /// knows nothing of the key: what each says of a key it knows stays.
    pub fn add_missing(&mut self, other: &Provenance) {
        for (id, stored) in &other.items {
            self.items.entry(id.clone()).or_insert_with(|| stored.clone());
        }
        for (digest, stored) in &other.encrypted {
            self.encrypted.entry(*digest).or_insert_with(|| stored.clone());
        }
        for (id, expires) in &other.short_ids {
            self.short_ids.entry(id.clone()).or_insert(*expires);
        }
    }

    /// The ids of the reasoning items that recorded items of the request came right after and
    /// that `query` (the request's) does not name, each after the response that recorded it
    /// (sorted, so a response's come together): the ones whose kept texts
    /// [`Provenance::reasoning_texts`] may hold.
    pub fn missing_reasoning<'p>(&'p self, query: &LedgerQuery) -> Vec<(&'p str, &'p str)> {
        let mut missing: Vec<(&str, &str)> = self
            .items
            .values()
            .filter_map(|item| Some((item.response_id.as_str(), item.record.preceded_by.as_deref()?)))
            .collect();
        if missing.is_empty() {
            return missing;
        }
        let named: HashSet<&str, RandomState> = query.item_ids.iter().map(String::as_str).collect();
        missing.retain(|(_, reasoning)| !named.contains(reasoning));
        missing.sort_unstable();
        missing.dedup();
        missing
    }

    /// The recorded items of responses not stored that `query` (the request's) names by
    /// reasoning, compaction or item_reference id, each as (response id, item id), sorted (a
    /// response's come together): the ones whose kept texts [`Provenance::unstored_texts`] may
    /// hold.
    pub fn unstored_named<'p>(&'p self, query: &LedgerQuery) -> Vec<(&'p str, &'p str)> {
        let elsewhere = &query.item_ids[..query.item_ids_elsewhere.min(query.item_ids.len())];
        let mut named: Vec<(&str, &str)> = elsewhere
            .iter()
            .filter_map(|id| self.items.get_key_value(id.as_str()))
            .filter(|(_, stored)| stored.not_stored)
            .map(|(id, stored)| (stored.response_id.as_str(), id.as_str()))
            .collect();
        named.sort_unstable();
        named
    }
}

/// What the ledger knows of a conversation created through the proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationFacts {
    /// The team whose request created it (`None`: anonymous).
    pub team: Option<String>,
}

/// What the ledger knows of a `previous_response_id` chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainFacts {
    /// Who produced the response `previous_response_id` names.
    pub owner: Owner,
    /// The `call_id` of every call the ledger recorded in the chain's outputs (and inputs, if
    /// the store keeps them), newest response first; repeats allowed.
    pub call_ids: Vec<String>,
    /// Whether the walk reached the chain's first response, every response of it recorded: only
    /// then does an output that answers no call in `call_ids` count as `call_id_mismatch`.
    /// A chain cut short (expired, never seen, or past the proxy's walking limit) still tells
    /// whose the previous response is.
    pub complete: bool,
    /// The team whose request the response answered (`None`: anonymous, or not known).
    pub team: Option<String>,
    /// Whether its provider did not store the response `previous_response_id` names (`store:
    /// false` in the answer): the provider cannot resolve the id, except on the WebSocket that
    /// made it, whose own chain ([`ChainFacts`] from that socket) says `false`
    /// (docs/reasons.md#state_not_stored).
    pub not_stored: bool,
}

/// Whether an id can be a ledger key: the ledger records no longer one.
fn recordable(id: &str) -> bool {
    id.len() <= MAX_ID_BYTES
}

/// Items whose content the provider resolves from its own store or key: the ones the
/// `foreign_*` rules judge by their id.
fn is_resolved_elsewhere(item: &Item<'_>) -> bool {
    matches!(
        item.class,
        ItemClass::Reasoning | ItemClass::Compaction | ItemClass::ItemReference
    )
}

/// Items that may carry an `encrypted_content` blob.
pub(crate) fn carries_blobs(item: &Item<'_>) -> bool {
    matches!(item.class, ItemClass::Reasoning | ItemClass::Compaction)
}

/// The JSON text of each item of a request, found by a second reading of its body.
pub(crate) struct ItemTexts<'b> {
    body: &'b [u8],
    spans: Vec<std::ops::Range<usize>>,
}

impl<'b> ItemTexts<'b> {
    /// The item texts of `body` as `request` read it; `None` when the body does not read back as
    /// the same items (a request not read from `body`).
    pub(crate) fn read(request: &ParsedRequest<'_>, body: &'b [u8]) -> Option<Self> {
        if let Some(spans) = request.item_spans() {
            // Noted by the one reading of this body.
            if std::ptr::eq(request.body_text().as_bytes(), body) {
                return Some(Self {
                    body,
                    spans: spans.to_vec(),
                });
            }
        }
        let spans = item_spans(body, request.at).ok()?;
        (spans.len() == request.items().len()).then_some(Self { body, spans })
    }

    /// The text of the item at `index`.
    pub(crate) fn get(&self, index: usize) -> Option<&'b str> {
        let span = self.spans.get(index)?.clone();
        // The body was read as UTF-8 and a span is one JSON value, so this only re-checks it.
        std::str::from_utf8(&self.body[span]).ok()
    }
}

/// The ledger digest of a reasoning or compaction item's non-null `encrypted_content`, read as
/// the request's one pass over its body kept it.
pub(crate) fn blob_digest(item: &Item<'_>) -> Option<[u8; 32]> {
    let item_type = item.kind.as_str()?;
    let blob: Value = serde_json::from_str(item.encrypted_content?.get()).ok()?;
    if blob.is_null() {
        return None;
    }
    // The digest of a reasoning or compaction item covers its type and this member alone, so
    // the item reduced to it digests as the whole item does.
    let mut members = Map::new();
    members.insert("encrypted_content".to_owned(), blob);
    Some(item_digest(item_type, &members))
}

/// The ledger digest of a whole item ([`item_digest`] over its members), `None` when its text
/// is not an object. The usual items (a `function_call`, `message`, `reasoning` or
/// `compaction` with its `type` written) are read borrowed, as the tap reads them, not built
/// as a `Value`; the two reads give the same digest.
pub(crate) fn whole_digest(item: &Item<'_>, text: &str) -> Option<[u8; 32]> {
    if let Some(quick) = quick::quick_item(text) {
        if quick.record.item_type == item.type_name() {
            return Some(quick.record.digest);
        }
    }
    let value: Value = serde_json::from_str(text).ok()?;
    Some(item_digest(item.type_name(), value.as_object()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::{parse, parse_with, ItemsAt};

    fn query(body: &str) -> LedgerQuery {
        let request = parse(body.as_bytes()).unwrap();
        LedgerQuery::of(&request)
    }

    /// The digest the tap records for `item` (an output item's JSON).
    fn recorded_digest(item: &str) -> [u8; 32] {
        item_record_from_value(&serde_json::from_str(item).unwrap())
            .unwrap()
            .digest
    }

    #[test]
    fn the_item_spans_the_one_reading_notes_are_those_a_second_reading_finds() {
        let bodies = [
            (
                r#"{"model":"m","input":[{"type":"message","role":"user","content":"a"} , {"type":"function_call","id":"fc_1","call_id":"c","name":"f","arguments":"{\"x\":[1,{\"y\":\"]\"}]}"}]}"#,
                ItemsAt::Input,
            ),
            (
                r#"{ "input" : [ {"type":"message","role":"user","content":[{"type":"input_text","text":"}]"}]} ,
                {"type":"function_call_output","call_id":"c","output":"ok"} ] , "tools":[{"type":"function","name":"f"}]}"#,
                ItemsAt::Input,
            ),
            (
                r#"{"in\u0070ut":[{"type":"reasoning","summary":[],"encrypted_content":"\u0041"}]}"#,
                ItemsAt::Input,
            ),
            (r#"{"input":"just text"}"#, ItemsAt::Input),
            (r#"{"model":"m"}"#, ItemsAt::Input),
            (
                r#"{"items":[{"type":"message","role":"user","content":[{"type":"input_text","text":"é"}]}]}"#,
                ItemsAt::AddedItems,
            ),
        ];
        for (body, at) in bodies {
            let request = crate::gate::parse_noting_spans(body.as_bytes(), at).unwrap();
            assert!(parse_with(body.as_bytes(), at).unwrap().item_spans().is_none());
            let noted = request.item_spans().expect("the gate's reader notes the spans");
            assert_eq!(noted, item_spans(body.as_bytes(), at).unwrap(), "{body}");
            let texts = ItemTexts::read(&request, request.body_text().as_bytes()).unwrap();
            for (index, span) in noted.iter().enumerate() {
                assert_eq!(texts.get(index), Some(&body[span.clone()]));
            }
        }
    }

    #[test]
    fn a_continuation_names_the_outputs_its_chain_must_answer() {
        let body = r#"{"previous_response_id":"resp_1","input":[
            {"type":"function_call_output","call_id":"c_prev","output":"x"},
            {"type":"function_call","call_id":"c_here","name":"f","arguments":"{}"},
            {"type":"function_call_output","call_id":"c_here","output":"y"},
            {"type":"function_call_output","call_id":"c_prev","output":"again"}]}"#;
        assert_eq!(query(body).unpaired_call_ids, ["c_prev"]);
        let fresh = body.replace(r#""previous_response_id":"resp_1","#, "");
        assert!(
            query(&fresh).unpaired_call_ids.is_empty(),
            "only a continuation asks"
        );
    }

    #[test]
    fn a_plain_request_asks_nothing() {
        let q = query(r#"{"model":"m","input":[{"role":"user","content":"hi"}]}"#);
        assert!(q.is_empty(), "{q:?}");
        assert!(query(r#"{"input":"hi"}"#).is_empty());
        assert!(query(r#"{"previous_response_id":null}"#).is_empty());
    }

    #[test]
    fn asks_for_the_previous_response() {
        let q = query(r#"{"previous_response_id":"resp_1","input":[]}"#);
        assert_eq!(q.previous_response_id.as_deref(), Some("resp_1"));
        assert!(!q.is_empty());
        let long = "r".repeat(MAX_ID_BYTES + 1);
        assert!(query(&format!(r#"{{"previous_response_id":"{long}"}}"#)).is_empty());
    }

    #[test]
    fn asks_for_item_ids_once_each_references_first() {
        let long = "x".repeat(MAX_ID_BYTES + 1);
        let q = query(&format!(
            r#"{{"input":[{{"type":"message","id":"msg_1_0123456789ab","role":"assistant","content":"a"}},
                {{"type":"function_call","id":"fc_1_0123456789ab","call_id":"c","name":"f","arguments":"{{}}"}},
                {{"type":"reasoning","id":"rs_1_0123456789ab","summary":[]}},
                {{"id":"msg_1_0123456789ab"}},
                {{"type":"function_call_output","id":5,"call_id":"c","output":"x"}},
                {{"type":"message","id":"{long}","role":"user","content":"b"}}]}}"#
        ));
        assert_eq!(
            q.item_ids,
            ["rs_1_0123456789ab", "msg_1_0123456789ab", "fc_1_0123456789ab"]
        );
        assert!(q.digests.is_empty());
    }

    #[test]
    fn every_id_is_asked_about_however_many_there_are() {
        let items: Vec<String> = (0..MAX_QUERY_KEYS + 10)
            .map(|i| format!(r#"{{"type":"message","id":"msg_{i:016}","role":"user","content":"a"}}"#))
            .chain([r#"{"type":"item_reference","id":"late_ref_0123456789"}"#.to_owned()])
            .chain(
                (0..MAX_QUERY_KEYS + 10)
                    .map(|i| format!(r#"{{"type":"reasoning","summary":[],"encrypted_content":"blob{i}"}}"#)),
            )
            .collect();
        let q = query(&format!(r#"{{"input":[{}]}}"#, items.join(",")));
        assert_eq!(q.item_ids.len(), MAX_QUERY_KEYS + 11);
        assert_eq!(q.item_ids[0], "late_ref_0123456789", "references come first");
        assert_eq!(q.digests.len(), MAX_QUERY_KEYS + 10);
    }

    #[test]
    fn ids_numbered_per_response_are_not_asked_for() {
        let q = query(
            r#"{"input":[{"type":"item_reference","id":"msg_0"},{"type":"reasoning","id":"rs_0","summary":[]}]}"#,
        );
        assert!(q.item_ids.is_empty(), "{q:?}");
        assert_eq!(
            q.short_ids,
            ["msg_0", "rs_0"],
            "asked only whether they are known"
        );
    }

    #[test]
    fn digests_equal_what_the_tap_recorded_for_the_same_blob() {
        let output = r#"{"type":"reasoning","id":"rs_1_0123456789ab","summary":[{"type":"summary_text","text":"s"}],"encrypted_content":"gAAA\u0042"}"#;
        let replayed = r#"{"encrypted_content": "gAAAB", "type": "reasoning", "summary": []}"#;
        let compaction = r#"{"type":"compaction","encrypted_content":"cccc"}"#;
        let q = query(&format!(
            r#"{{"input":[{replayed},{{"role":"user","content":"x"}},{compaction},{replayed}]}}"#
        ));
        assert_eq!(q.digests, [recorded_digest(output), recorded_digest(compaction)]);
    }

    #[test]
    fn null_or_absent_blobs_have_no_digest_and_a_repeated_member_is_refused() {
        let q = query(
            r#"{"input":[{"type":"reasoning","summary":[],"encrypted_content":null},{"type":"reasoning","id":"rs_2_0123456789ab","summary":[]}]}"#,
        );
        assert!(q.digests.is_empty());
        // A provider may read either copy, so the gate refuses the body rather than judge one.
        let error =
            parse(br#"{"input":[{"type":"reasoning","encrypted_content":"a","encrypted_content":"b"}]}"#)
                .unwrap_err();
        assert!(
            error.to_string().contains("duplicate member `encrypted_content`"),
            "{error}"
        );
    }

    #[test]
    fn conversation_items_are_read_from_items() {
        let body = r#"{"items":[{"type":"reasoning","encrypted_content":"a"}],"input":[{"type":"reasoning","encrypted_content":"b"}]}"#;
        let request = parse_with(body.as_bytes(), ItemsAt::Items).unwrap();
        let q = LedgerQuery::of(&request);
        assert_eq!(
            q.digests,
            [recorded_digest(r#"{"type":"reasoning","encrypted_content":"a"}"#)]
        );
    }

    #[test]
    fn the_whole_digest_of_a_replayed_item_is_the_recorded_one() {
        let output = r#"{"type":"function_call","id":"fc_1_0123456789ab","call_id":"c1","name":"f","arguments":"{\"a\":1}","status":"completed"}"#;
        let replayed = r#"{"arguments":"{\"a\":1}","call_id":"c1","name":"f","type":"function_call","id":"fc_1_0123456789ab","parsed_arguments":{"a":1}}"#;
        let item: Item<'_> = serde_json::from_str(replayed).unwrap();
        assert_eq!(whole_digest(&item, replayed), Some(recorded_digest(output)));
        let message = r#"{"role":"assistant","id":"msg_1_0123456789ab","content":[{"type":"output_text","text":"hi"}]}"#;
        let item: Item<'_> = serde_json::from_str(message).unwrap();
        assert_eq!(
            whole_digest(&item, message),
            Some(recorded_digest(r#"{"type":"message","content":"hi"}"#))
        );
    }

    #[test]
    fn the_quick_whole_digest_is_the_digest_of_the_item_as_a_value() {
        let long_id = format!(
            r#"{{"type":"message","id":"{}","content":"hi"}}"#,
            "m".repeat(300)
        );
        let texts = [
            r#"{"type":"function_call","call_id":"c\u0031","name":"f","arguments":"{\"a\":[1, 2]}"}"#,
            r#"{"type":"function_call","name":"f","arguments":{"a":1},"call_id":"c1"}"#,
            r#"{"type":"function_call","name":null,"call_id":"c1"}"#,
            r#"{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a"},{"type":"refusal","refusal":"b"},7]}"#,
            r#"{"type":"message","content":{"text":"x"}}"#,
            r#"{"type":"reasoning","id":"rs_0123456789abcdef","summary":[],"encrypted_content":"blob=="}"#,
            r#"{"type":"compaction","encrypted_content":null}"#,
            r#"{"type":"web_search_call","id":"ws_0123456789abcdef","status":"completed","action":{"q":"x"}}"#,
            r#"{"role":"user","content":"no type written"}"#,
            long_id.as_str(),
        ];
        for text in texts {
            let item: Item<'_> = serde_json::from_str(text).unwrap();
            let value: Value = serde_json::from_str(text).unwrap();
            let expected = item_digest(item.type_name(), value.as_object().unwrap());
            assert_eq!(whole_digest(&item, text), Some(expected), "{text}");
        }
        // A text whose `type` is not the item's as the gate read it goes the full way.
        let item: Item<'_> = serde_json::from_str(r#"{"type":"message","content":"hi"}"#).unwrap();
        let other = r#"{"type":"reasoning","encrypted_content":"e"}"#;
        let value: Value = serde_json::from_str(other).unwrap();
        assert_eq!(
            whole_digest(&item, other),
            Some(item_digest("message", value.as_object().unwrap()))
        );
    }
}
