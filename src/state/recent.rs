//! The records a store wrote lately, kept in memory to answer the next turn's lookups.
//!
//! An agent's next request names what the provider just produced: the response it continues
//! and the items it replays. The embedded store answers those from here, without a read on the
//! blocking pool. Entries are added only once their write is committed, and never from a read
//! (a read racing a rewrite could put back the older record); they are weighed by the size of
//! their encoded form and evicted when the cache is full. An expired entry reads as absent, as
//! it does from the file.

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
    Item(Arc<StoredItem>),
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

/// The encoded sizes of a response and of its index entries, in [`StoredResponse::by_id`]
/// and [`StoredResponse::by_digest`] order.
#[derive(Debug, Default)]
pub(crate) struct Weights {
    pub response: usize,
    pub by_id: Vec<usize>,
    pub by_digest: Vec<usize>,
}

impl Recent {
    /// A cache holding records of at most `bytes` encoded bytes in all.
    pub fn new(bytes: u64) -> Recent {
        Recent {
            entries: Cache::with_weighter((bytes / 512).max(16) as usize, bytes, ByWeight),
        }
    }

    /// Remembers `response` and its index entries, just committed, with their encoded sizes.
    pub fn remember(&self, response: StoredResponse, weights: &Weights) {
        let weight = |key_len: usize, len: usize| (key_len + len + 64) as u64;
        for ((id, item), len) in response.by_id().zip(&weights.by_id) {
            self.entries.insert(
                RecentKey::ItemById(id.to_owned()),
                Held {
                    record: Record::Item(Arc::new(item)),
                    weight: weight(id.len(), *len),
                },
            );
        }
        for ((digest, item), len) in response.by_digest().zip(&weights.by_digest) {
            self.entries.insert(
                RecentKey::ItemByDigest(digest),
                Held {
                    record: Record::Item(Arc::new(item)),
                    weight: weight(32, *len),
                },
            );
        }
        let weight = weight(response.id.len(), weights.response);
        self.entries.insert(
            RecentKey::Response(response.id.clone()),
            Held {
                record: Record::Response(Arc::new(response)),
                weight,
            },
        );
    }

    /// The response recorded under `id`, if remembered and live at `now`.
    pub fn response(&self, id: &str, now: u64) -> Option<StoredResponse> {
        match self.entries.get(&RecentKey::Response(id.to_owned()))?.record {
            Record::Response(response) if now < response.expires_unix => Some((*response).clone()),
            _ => None,
        }
    }

    /// The item with `id`, if remembered and live at `now`.
    pub fn item_by_id(&self, id: &str, now: u64) -> Option<StoredItem> {
        self.item(&RecentKey::ItemById(id.to_owned()), now)
    }

    /// The item with `digest`, if remembered and live at `now`.
    pub fn item_by_digest(&self, digest: &[u8; 32], now: u64) -> Option<StoredItem> {
        self.item(&RecentKey::ItemByDigest(*digest), now)
    }

    fn item(&self, key: &RecentKey, now: u64) -> Option<StoredItem> {
        match self.entries.get(key)?.record {
            Record::Item(item) if now < item.expires_unix => Some((*item).clone()),
            _ => None,
        }
    }
}
