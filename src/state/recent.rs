//! The records a store wrote lately, kept in memory to answer the next turn's lookups.
//!
//! An agent's next request names what the provider just produced: the response it continues
//! and the items it replays. The embedded store answers those from here, without a read on the
//! blocking pool. Entries are added when a record is handed to the writer (a queued record) or
//! once its write is committed (a put that waits), never from a read (a read racing a rewrite
//! could put back the older record). A response is held once, weighed by the size of its
//! encoded form; its items' keys lead to it, so an item goes when its response is evicted. An
//! expired entry reads as absent, as it does from the file.

use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::Weighter;

use crate::ledger::{StoredItem, StoredResponse};

/// How a record is looked up.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum RecentKey {
    Response(String),
    ItemById(String),
    ItemByDigest([u8; 32]),
}

#[derive(Debug, Clone)]
enum Record {
    Response(Arc<StoredResponse>),
    /// An item: the id of the response that holds it (read from that response's entry, so
    /// the item is held once, and goes when its response does).
    ItemOf(Arc<str>),
}

#[derive(Debug, Clone)]
struct Held {
    record: Record,
    /// The size of the record's encoded form, plus its key.
    weight: u64,
}

#[derive(Debug, Clone, Copy)]
struct ByWeight;

impl Weighter<RecentKey, Held> for ByWeight {
    fn weight(&self, _: &RecentKey, held: &Held) -> u64 {
        held.weight.max(1)
    }
}

/// Recently written records, up to a total weight.
#[derive(Debug)]
pub(crate) struct Recent {
    entries: Cache<RecentKey, Held, ByWeight>,
}

impl Recent {
    /// A cache holding records of at most `bytes` encoded bytes in all.
    pub fn new(bytes: u64) -> Recent {
        Recent {
            entries: Cache::with_weighter((bytes / 512).max(16) as usize, bytes, ByWeight),
        }
    }

    /// Remembers `response`, just committed, whose encoding is `encoded` bytes long, and the
    /// keys of its items.
    pub fn remember(&self, response: Arc<StoredResponse>, encoded: usize) {
        let weight = |key_len: usize, len: usize| (key_len + len + 64) as u64;
        let owner: Arc<str> = response.id.as_str().into();
        let item = |key: RecentKey, key_len: usize| {
            let held = Held {
                record: Record::ItemOf(owner.clone()),
                weight: weight(key_len, owner.len()),
            };
            self.entries.insert(key, held);
        };
        response
            .item_ids()
            .for_each(|id| item(RecentKey::ItemById(id.to_owned()), id.len()));
        response
            .item_digests()
            .for_each(|digest| item(RecentKey::ItemByDigest(*digest), 32));
        let held = Held {
            weight: weight(response.id.len(), encoded),
            record: Record::Response(response.clone()),
        };
        self.entries
            .insert(RecentKey::Response(response.id.clone()), held);
    }

    /// The response recorded under `id`, if remembered and live at `now`.
    pub fn response(&self, id: &str, now: u64) -> Option<StoredResponse> {
        self.live(id, now).map(|response| (*response).clone())
    }

    /// The item with `id`, if remembered and live at `now`.
    pub fn item_by_id(&self, id: &str, now: u64) -> Option<StoredItem> {
        let owner = self.owner(&RecentKey::ItemById(id.to_owned()))?;
        self.live(&owner, now)?.item_by_id(id)
    }

    /// The item with `digest`, if remembered and live at `now`.
    pub fn item_by_digest(&self, digest: &[u8; 32], now: u64) -> Option<StoredItem> {
        let owner = self.owner(&RecentKey::ItemByDigest(*digest))?;
        self.live(&owner, now)?.item_by_digest(digest)
    }

    fn live(&self, id: &str, now: u64) -> Option<Arc<StoredResponse>> {
        match self.entries.get(&RecentKey::Response(id.to_owned()))?.record {
            Record::Response(response) if !response.is_expired(now) => Some(response),
            _ => None,
        }
    }

    /// The id of the response an item key leads to.
    fn owner(&self, key: &RecentKey) -> Option<Arc<str>> {
        match self.entries.get(key)?.record {
            Record::ItemOf(owner) => Some(owner),
            Record::Response(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{ItemRecord, Owner, ResponseRecord};

    fn response(id: &str, item_id: &str) -> Arc<StoredResponse> {
        let item = ItemRecord {
            id: Some(item_id.to_owned()),
            item_type: "reasoning".into(),
            call_id: None,
            digest: [7; 32],
            has_encrypted_content: true,
        };
        let record = ResponseRecord {
            id: id.to_owned(),
            model: None,
            items: vec![item],
        };
        let owner = Owner {
            provider: "openai".into(),
            model: None,
        };
        Arc::new(StoredResponse::new(record, owner, None, None, 0, 60))
    }

    #[test]
    fn an_item_is_found_through_its_response_as_it_now_stands() {
        let recent = Recent::new(64 * 1024);
        recent.remember(response("resp_1", "rs_0123456789abcdef"), 300);
        let item = recent.item_by_id("rs_0123456789abcdef", 1).unwrap();
        assert_eq!(item.response_id, "resp_1");
        assert_eq!(recent.item_by_digest(&[7; 32], 1).unwrap().response_id, "resp_1");
        // Expired with its response.
        assert!(recent.item_by_id("rs_0123456789abcdef", 60).is_none());
        // The response written again without the item: the item's key leads nowhere.
        recent.remember(response("resp_1", "rs_another_item_0001"), 300);
        assert!(recent.item_by_id("rs_0123456789abcdef", 1).is_none());
        assert!(recent.item_by_id("rs_another_item_0001", 1).is_some());
    }

    #[test]
    fn an_item_is_not_held_without_its_response() {
        // A response heavier than the whole cache is not kept; its items' keys find nothing.
        let recent = Recent::new(1024);
        recent.remember(response("resp_big", "rs_0123456789abcdef"), 1 << 20);
        assert!(recent.response("resp_big", 1).is_none());
        assert!(recent.item_by_id("rs_0123456789abcdef", 1).is_none());
    }
}
