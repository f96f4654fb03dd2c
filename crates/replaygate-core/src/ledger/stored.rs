//! What the ledger's store holds (docs/ledger.md): one [`StoredResponse`] per recorded answer,
//! and the [`StoredItem`] index entries derived from it (the gate's facts about one recorded
//! item, [`crate::gate::provenance`]). Plain data with a stable JSON form, so every backend
//! (memory, embedded file, Redis) stores the same bytes.

use serde::{Deserialize, Serialize};

use super::call_ids::CallIds;
use super::record::{ItemRecord, ResponseRecord};
use crate::gate::provenance::names_one_item;
pub use crate::gate::provenance::{Owner, StoredItem};

/// One recorded response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredResponse {
    /// The response `id`.
    pub id: String,
    /// Who produced it.
    pub owner: Owner,
    /// The team whose request it answered (`None`: anonymous).
    pub team: Option<String>,
    /// When it was recorded, in seconds since the Unix epoch.
    pub created_unix: u64,
    /// When the store may forget it (`created_unix` + retention).
    pub expires_unix: u64,
    /// The request's `previous_response_id`, when it continued a chain.
    pub previous_response_id: Option<String>,
    /// The output items, in output order (ids, types, call ids, digests; never content).
    pub items: Vec<ItemRecord>,
    /// The `call_id`s of the calls the request itself put in `input` (a client may place a
    /// call and answer it on the next turn; the provider keeps both in the chain's context).
    #[serde(default, skip_serializing_if = "CallIds::is_empty")]
    pub input_call_ids: CallIds,
    /// With `[ledger] store_items = true` only: the request's items and the answer's output
    /// items as JSON texts (a string `input` as one user message), to carry the session to
    /// another provider. `None` otherwise.
    pub content: Option<StoredContent>,
    /// Recorded only for who owns it: a conversation, a background response that was not yet
    /// completed when it answered, or a response whose items could not be read (over the
    /// tap's caps, unreadable, or none read whole of one that did not complete). It says
    /// nothing of its items or its chain.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub owner_only: bool,
    /// The response did not complete: it ended `incomplete`, `failed` or `cancelled`, or its
    /// answer stopped before its end. `items` are those its answer delivered whole, each with
    /// the digest a replay of it has; the provider may hold more, so the calls of its chain are
    /// not known whole (continuation pairing is not judged on it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
    /// The provider answered `store: false`: it keeps nothing of the response, so an item of
    /// it sent back by `id` alone names nothing it can read (docs/reasons.md#state_not_stored).
    /// Absent in records written before it was kept (read as stored).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub not_stored: bool,
}

/// The items of one turn, kept only with `store_items = true`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredContent {
    /// The request's `input` items, each one JSON value as text.
    pub input: Vec<String>,
    /// The answer's `output` items, each one JSON value as text.
    pub output: Vec<String>,
}

impl StoredResponse {
    /// A record of `response`, produced by `owner` for `team` at `now_unix`, kept for
    /// `retention_secs`.
    pub fn new(
        response: ResponseRecord,
        owner: Owner,
        team: Option<String>,
        previous_response_id: Option<String>,
        now_unix: u64,
        retention_secs: u64,
    ) -> StoredResponse {
        let mut items = response.items;
        super::record::link_reasoning(&mut items);
        StoredResponse {
            id: response.id,
            owner,
            team,
            created_unix: now_unix,
            expires_unix: now_unix.saturating_add(retention_secs),
            previous_response_id,
            items,
            input_call_ids: CallIds::default(),
            content: None,
            owner_only: false,
            partial: false,
            not_stored: false,
        }
    }

    /// A record of object `id` (a conversation, or a response whose items are not recorded)
    /// that says only who owns it: `owner`'s, for `team`, at `now_unix`, kept for
    /// `retention_secs`.
    pub fn owner_only(
        id: String,
        owner: Owner,
        team: Option<String>,
        now_unix: u64,
        retention_secs: u64,
    ) -> StoredResponse {
        let record = ResponseRecord {
            id,
            model: None,
            items: Vec::new(),
        };
        let mut stored = StoredResponse::new(record, owner, team, None, now_unix, retention_secs);
        stored.owner_only = true;
        stored
    }

    /// The index entries by item `id`: one per output item whose id can name one item
    /// ([`names_one_item`]: per-response numbers such as `rs_0` are
    /// not indexed).
    pub fn by_id(&self) -> impl Iterator<Item = (&str, StoredItem)> + '_ {
        self.items
            .iter()
            .filter_map(|item| Some((item.indexed_id()?, self.stored_item(item))))
    }

    /// The index entries by digest: one per output item that carries `encrypted_content`
    /// (reasoning, compaction), so a replayed blob is known by its digest alone, id or not.
    pub fn by_digest(&self) -> impl Iterator<Item = ([u8; 32], StoredItem)> + '_ {
        self.items
            .iter()
            .filter_map(|item| Some((*item.indexed_digest()?, self.stored_item(item))))
    }

    /// The ids [`StoredResponse::by_id`] indexes, in output order.
    pub fn item_ids(&self) -> impl Iterator<Item = &str> + '_ {
        self.items.iter().filter_map(ItemRecord::indexed_id)
    }

    /// The digests [`StoredResponse::by_digest`] indexes, in output order.
    pub fn item_digests(&self) -> impl Iterator<Item = &[u8; 32]> + '_ {
        self.items.iter().filter_map(ItemRecord::indexed_digest)
    }

    /// The index entry for `id` among [`StoredResponse::by_id`]'s (the last, as an index
    /// filled in output order keeps), if any.
    pub fn item_by_id(&self, id: &str) -> Option<StoredItem> {
        let item = self
            .items
            .iter()
            .rev()
            .find(|item| item.indexed_id() == Some(id))?;
        Some(self.stored_item(item))
    }

    /// The index entry for `digest` among [`StoredResponse::by_digest`]'s (the last, as an
    /// index filled in output order keeps), if any.
    pub fn item_by_digest(&self, digest: &[u8; 32]) -> Option<StoredItem> {
        let item = self
            .items
            .iter()
            .rev()
            .find(|item| item.indexed_digest() == Some(digest))?;
        Some(self.stored_item(item))
    }

    /// The index entry of `item`, one of this response's output items.
    pub fn stored_item(&self, item: &ItemRecord) -> StoredItem {
        StoredItem {
            response_id: self.id.clone(),
            owner: self.owner.clone(),
            record: item.clone(),
            expires_unix: self.expires_unix,
            team: self.team.clone(),
            not_stored: self.not_stored,
        }
    }

    /// Whether the calls of this response are known whole: not an owner-only record, nor one
    /// of a response that did not complete. A chain that reaches one that is not is not
    /// complete for continuation pairing.
    pub fn knows_its_calls(&self) -> bool {
        !self.owner_only && !self.partial
    }

    /// Whether the store may forget this response at `now_unix`.
    pub fn is_expired(&self, now_unix: u64) -> bool {
        now_unix >= self.expires_unix
    }
}

impl ItemRecord {
    /// The id the item is indexed by, if it has one that names one item.
    pub fn indexed_id(&self) -> Option<&str> {
        self.id.as_deref().filter(|id| names_one_item(id))
    }

    /// The digest the item is indexed by, if it carries `encrypted_content`.
    pub fn indexed_digest(&self) -> Option<&[u8; 32]> {
        self.has_encrypted_content.then_some(&self.digest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: Option<&str>, encrypted: bool, digest: u8, call_id: &str) -> ItemRecord {
        ItemRecord {
            id: id.map(str::to_owned),
            item_type: "reasoning".into(),
            call_id: Some(call_id.to_owned()),
            digest: [digest; 32],
            has_encrypted_content: encrypted,
            preceded_by: None,
        }
    }

    /// Every kind of item the indexes treat apart: a long id, a per-response number, none,
    /// one id and one digest twice.
    fn stored() -> StoredResponse {
        let long = "rs_0123456789abcdef";
        let record = ResponseRecord {
            id: "resp_1".into(),
            model: None,
            items: vec![
                item(Some(long), true, 1, "first"),
                item(Some("rs_0"), true, 2, "short"),
                item(None, true, 3, "none"),
                item(Some("fc_0123456789abcdef"), false, 4, "plain"),
                item(Some(long), true, 1, "second"),
            ],
        };
        let owner = Owner {
            provider: "openai".into(),
            model: None,
        };
        StoredResponse::new(record, owner, None, None, 0, 60)
    }

    #[test]
    fn a_single_item_lookup_finds_what_the_index_would_keep() {
        let stored = stored();
        // The index an id or a digest leads to, filled in output order: the last entry stays.
        let mut by_id = std::collections::HashMap::new();
        stored
            .by_id()
            .for_each(|(id, item)| drop(by_id.insert(id.to_owned(), item)));
        let mut by_digest = std::collections::HashMap::new();
        stored
            .by_digest()
            .for_each(|(digest, item)| drop(by_digest.insert(digest, item)));
        assert_eq!(by_id.len(), 2);
        assert_eq!(by_digest.len(), 3);
        for id in stored.items.iter().filter_map(|item| item.id.as_deref()) {
            assert_eq!(stored.item_by_id(id).as_ref(), by_id.get(id), "{id}");
        }
        for digest in (0..6).map(|n| [n; 32]) {
            assert_eq!(stored.item_by_digest(&digest).as_ref(), by_digest.get(&digest));
        }
        assert!(stored.item_by_id("rs_0").is_none());
        assert_eq!(stored.item_ids().count(), 3);
        assert_eq!(stored.item_digests().count(), 4);
        let found = stored.item_by_id("rs_0123456789abcdef").unwrap();
        assert_eq!(found.record.call_id.as_deref(), Some("second"));
    }

    #[test]
    fn each_item_records_the_reasoning_item_right_before_it() {
        let record =
            |json: &str| crate::ledger::item_record_from_value(&serde_json::from_str(json).unwrap()).unwrap();
        let response = ResponseRecord {
            id: "resp_1".into(),
            model: None,
            items: vec![
                record(r#"{"type":"reasoning","id":"rs_1","encrypted_content":"a"}"#),
                record(r#"{"type":"function_call","id":"fc_1","call_id":"c1","name":"f","arguments":"{}"}"#),
                record(r#"{"type":"reasoning","id":"rs_2","encrypted_content":"b"}"#),
                record(r#"{"type":"reasoning","id":"rs_3","encrypted_content":"c"}"#),
                record(r#"{"type":"message","id":"msg_1","content":"done"}"#),
                record(r#"{"type":"message","id":"msg_2","content":"more"}"#),
            ],
        };
        let owner = Owner {
            provider: "openai".into(),
            model: None,
        };
        let stored = StoredResponse::new(response, owner, None, None, 0, 60);
        let before: Vec<Option<&str>> = stored
            .items
            .iter()
            .map(|item| item.preceded_by.as_deref())
            .collect();
        assert_eq!(
            before,
            [None, Some("rs_1"), None, Some("rs_2"), Some("rs_3"), None]
        );
        // The stored form holds it, and reads back.
        let json = stored.to_json();
        let read: StoredResponse = serde_json::from_slice(&json).unwrap();
        assert_eq!(read, stored);
    }

    #[test]
    fn a_partial_record_says_its_calls_are_not_known_whole_and_one_written_before_reads_whole() {
        let mut stored = stored();
        assert!(stored.knows_its_calls());
        stored.partial = true;
        assert!(!stored.knows_its_calls());
        let read: StoredResponse = serde_json::from_slice(&stored.to_json()).unwrap();
        assert_eq!(read, stored);
        // A record written before `partial` was kept is one of a completed response.
        stored.partial = false;
        let json = String::from_utf8(stored.to_json()).unwrap();
        assert!(!json.contains("partial"), "{json}");
        let read: StoredResponse = serde_json::from_str(&json).unwrap();
        assert!(!read.partial && read.knows_its_calls());
        let owner_only = StoredResponse::owner_only("resp_2".into(), stored.owner.clone(), None, 0, 60);
        assert!(!owner_only.knows_its_calls());
    }

    #[test]
    fn a_record_not_stored_marks_its_items_and_one_written_before_reads_as_stored() {
        let mut stored = stored();
        stored.not_stored = true;
        let read: StoredResponse = serde_json::from_slice(&stored.to_json()).unwrap();
        assert_eq!(read, stored);
        assert!(stored.by_id().all(|(_, item)| item.not_stored));
        let item = stored.item_by_id("rs_0123456789abcdef").unwrap();
        assert_eq!(
            serde_json::from_slice::<StoredItem>(&item.to_json()).unwrap(),
            item
        );
        // Records written before it was kept say nothing of it, and read as stored.
        stored.not_stored = false;
        let json = String::from_utf8(stored.to_json()).unwrap();
        assert!(!json.contains("not_stored"), "{json}");
        assert!(stored.by_id().all(|(_, item)| !item.not_stored));
    }

    #[test]
    fn a_record_written_before_preceded_by_reads_as_preceded_by_nothing() {
        let old = r#"{"response_id":"resp_1","owner":{"provider":"openai","model":null},"record":{"id":"fc_0123456789abcdef","item_type":"function_call","call_id":"c1","digest":"0000000000000000000000000000000000000000000000000000000000000000","has_encrypted_content":false},"expires_unix":60}"#;
        let item: StoredItem = serde_json::from_str(old).unwrap();
        assert_eq!(item.record.preceded_by, None);
        // And one preceded by nothing is written as before.
        assert_eq!(String::from_utf8(item.to_json()).unwrap(), old);
    }
}
