//! The file's layout (version 2): each record is one row, and its items are found through it.
//! Ids are keyed by their 16-byte [`StoreKey`] (a hash), not their text: a response id is 50 to
//! 100 bytes, and the smaller the keys, the smaller the trees a record's writes go into.
//!
//! - `responses_v2`: key of the response id → `(expires_unix, JSON of the StoredResponse)`. The
//!   copy of `expires_unix` beside the JSON lets reads and the sweep judge expiry without
//!   parsing; the JSON's `id` tells a read whether the row is the id's (two ids of one key
//!   would need 2^64 of them; the later write would take the row, and the earlier be unknown).
//! - `item_ids_v2`: key of an item id → key of the response whose output holds the item;
//!   `item_digests_v2`: digest of an item with `encrypted_content` → key of its response. An
//!   item is read from its response's row ([`StoredResponse::item_by_id`], `item_by_digest`,
//!   which match the id or digest itself), so it is stored once, as in the memory store.
//! - `expiry_v2`: `(expires_unix, key of the response id)`, one row a response, so a sweep
//!   visits only what has expired; it removes the response and the index rows that still
//!   point at it.
//!
//! A record is six small writes or so (one response row, one expiry row, a row for each indexed
//! item) where version 1 wrote each item's full copy under its full id with an expiry row of
//! its own ([`super::migrate`] moves a version 1 file over when it opens).

use redb::{ReadableTable, Table, TableDefinition, WriteTransaction};

use super::unavailable;
use crate::ledger::{StoredItem, StoredResponse};
use crate::state::key_filter::StoreKey;
use crate::state::StoreError;

/// A stored response: its `expires_unix` and its JSON.
pub(super) type Entry = (u64, &'static [u8]);

/// A [`StoreKey`] as the tables hold it.
type Key16 = &'static [u8; 16];

pub(super) const RESPONSES: TableDefinition<'_, Key16, Entry> = TableDefinition::new("responses_v2");
pub(super) const ITEM_IDS: TableDefinition<'_, Key16, Key16> = TableDefinition::new("item_ids_v2");
pub(super) const ITEM_DIGESTS: TableDefinition<'_, &[u8; 32], Key16> =
    TableDefinition::new("item_digests_v2");
/// `(expires_unix, key of the response id)`: which response expires when.
pub(super) const EXPIRY: TableDefinition<'_, (u64, Key16), ()> = TableDefinition::new("expiry_v2");

/// The kinds of key, each the seed of its [`StoreKey`]s (the filter holds all three).
pub(super) const KIND_RESPONSE: u8 = 0;
pub(super) const KIND_ITEM_BY_ID: u8 = 1;
pub(super) const KIND_ITEM_BY_DIGEST: u8 = 2;

/// The key of response `id`.
pub(super) fn response_key(id: &str) -> StoreKey {
    StoreKey::of(KIND_RESPONSE, id.as_bytes())
}

/// The key of item `id`.
pub(super) fn item_key(id: &str) -> StoreKey {
    StoreKey::of(KIND_ITEM_BY_ID, id.as_bytes())
}

/// The filter's key of an item's `digest` (the table keys it by the digest itself).
pub(super) fn digest_key(digest: &[u8; 32]) -> StoreKey {
    StoreKey::of(KIND_ITEM_BY_DIGEST, digest)
}

/// The tables, open in one write transaction.
pub(super) struct Tables<'txn> {
    responses: Table<'txn, Key16, Entry>,
    item_ids: Table<'txn, Key16, Key16>,
    item_digests: Table<'txn, &'static [u8; 32], Key16>,
    expiry: Table<'txn, (u64, Key16), ()>,
}

impl<'txn> Tables<'txn> {
    /// Opens (creating them if need be) every table in `txn`.
    pub fn open(txn: &'txn WriteTransaction) -> Result<Tables<'txn>, StoreError> {
        Ok(Tables {
            responses: txn
                .open_table(RESPONSES)
                .map_err(unavailable("responses table"))?,
            item_ids: txn.open_table(ITEM_IDS).map_err(unavailable("item ids table"))?,
            item_digests: txn
                .open_table(ITEM_DIGESTS)
                .map_err(unavailable("item digests table"))?,
            expiry: txn.open_table(EXPIRY).map_err(unavailable("expiry table"))?,
        })
    }

    /// Writes `response` (`json` its encoding) and its index rows. A response written again
    /// replaces the old: the old one's index rows go unless the new one has them, and its
    /// expiry row moves.
    pub fn put(&mut self, response: &StoredResponse, json: &[u8]) -> Result<(), StoreError> {
        let StoreKey(id) = response_key(&response.id);
        let id = &id;
        let expires = response.expires_unix;
        let old = self
            .responses
            .insert(id, (expires, json))
            .map_err(unavailable("insert"))?
            .map(|guard| {
                let (old_expires, old_json) = guard.value();
                (
                    old_expires,
                    serde_json::from_slice::<StoredResponse>(old_json).ok(),
                )
            });
        if let Some((old_expires, old)) = old {
            if let Some(old) = old {
                self.unindex(&old)?;
            }
            if old_expires != expires {
                self.expiry
                    .remove((old_expires, id))
                    .map_err(unavailable("expiry index"))?;
            }
        }
        self.expiry
            .insert((expires, id), ())
            .map_err(unavailable("expiry index"))?;
        for item_id in response.item_ids() {
            self.item_ids
                .insert(&item_key(item_id).0, id)
                .map_err(unavailable("item ids table"))?;
        }
        for digest in response.item_digests() {
            self.item_digests
                .insert(digest, id)
                .map_err(unavailable("item digests table"))?;
        }
        Ok(())
    }

    /// Removes up to `limit` expiry rows due at `now` and the responses they name (with
    /// their index rows) that have expired by then: a response written again since keeps.
    /// Returns the rows visited and the entries (responses and index rows) removed.
    pub fn sweep(&mut self, now: u64, limit: usize) -> Result<(usize, usize), StoreError> {
        let due = self
            .expiry
            .range(..(now.saturating_add(1), &[0; 16]))
            .map_err(unavailable("expiry index"))?
            .take(limit)
            .map(|row| {
                let (key, _) = row.map_err(unavailable("expiry index"))?;
                let (expires, id) = key.value();
                Ok((expires, *id))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let mut removed = 0;
        for (expires, id) in &due {
            self.expiry
                .remove((*expires, id))
                .map_err(unavailable("expiry index"))?;
            let expired = self.responses.get(id).map_err(unavailable("read"))?.map(|guard| {
                let (expires, json) = guard.value();
                (now >= expires).then(|| serde_json::from_slice::<StoredResponse>(json).ok())
            });
            // Absent, or written again with a later expiry: nothing to remove.
            let Some(Some(response)) = expired else {
                continue;
            };
            self.responses.remove(id).map_err(unavailable("remove"))?;
            removed += 1;
            // An unreadable response's index rows stay; they lead nowhere.
            if let Some(response) = response {
                removed += self.unindex(&response)?;
            }
        }
        Ok((due.len(), removed))
    }

    /// Removes the index rows of `response`'s items that point at it (an item recorded since
    /// by another response keeps that one's row). Returns how many it removed.
    fn unindex(&mut self, response: &StoredResponse) -> Result<usize, StoreError> {
        let StoreKey(id) = response_key(&response.id);
        let mut removed = 0;
        for item_id in response.item_ids() {
            let StoreKey(item) = item_key(item_id);
            if points_at(&self.item_ids, &item, &id)? {
                self.item_ids
                    .remove(&item)
                    .map_err(unavailable("item ids table"))?;
                removed += 1;
            }
        }
        for digest in response.item_digests() {
            if points_at(&self.item_digests, digest, &id)? {
                self.item_digests
                    .remove(digest)
                    .map_err(unavailable("item digests table"))?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}

/// Whether `index` maps `key` to the response key `id`.
fn points_at<'k, K: redb::Key + 'static>(
    index: &impl ReadableTable<K, Key16>,
    key: impl std::borrow::Borrow<K::SelfType<'k>>,
    id: &[u8; 16],
) -> Result<bool, StoreError> {
    let owner = index.get(key).map_err(unavailable("read"))?;
    Ok(owner.is_some_and(|guard| guard.value() == id))
}

/// The response in `entry`, unless it is missing or expired at `now`.
pub(super) fn live(entry: Option<(u64, &[u8])>, now: u64) -> Result<Option<StoredResponse>, StoreError> {
    match entry {
        Some((expires, json)) if now < expires => serde_json::from_slice(json)
            .map(Some)
            .map_err(|e| StoreError::Corrupt(format!("a stored response: {e}"))),
        _ => Ok(None),
    }
}

/// Response `id` from `responses`, unless it is missing, expired at `now`, or the row of
/// another id with the same key.
pub(super) fn response(
    responses: &impl ReadableTable<Key16, Entry>,
    id: &str,
    now: u64,
) -> Result<Option<StoredResponse>, StoreError> {
    let entry = responses
        .get(&response_key(id).0)
        .map_err(unavailable("responses table"))?;
    let response = live(entry.as_ref().map(|guard| guard.value()), now)?;
    Ok(response.filter(|response| response.id == id))
}

/// Reads items through an index: each key's response, read once however many of the keys
/// lead to it, and the item in it.
pub(super) struct ItemReader<'t, R> {
    responses: &'t R,
    now: u64,
    read: Vec<([u8; 16], Option<StoredResponse>)>,
}

impl<'t, R: ReadableTable<Key16, Entry>> ItemReader<'t, R> {
    pub fn new(responses: &'t R, now: u64) -> ItemReader<'t, R> {
        ItemReader {
            responses,
            now,
            read: Vec::new(),
        }
    }

    /// The item `find` picks in the live response whose key is `owner`, if any (`find`
    /// matches the item's own id or digest).
    pub fn item(
        &mut self,
        owner: Option<&[u8; 16]>,
        find: impl Fn(&StoredResponse) -> Option<StoredItem>,
    ) -> Result<Option<StoredItem>, StoreError> {
        let Some(owner) = owner else {
            return Ok(None);
        };
        let at = match self.read.iter().position(|(id, _)| id == owner) {
            Some(at) => at,
            None => {
                let entry = self
                    .responses
                    .get(owner)
                    .map_err(unavailable("responses table"))?;
                let response = live(entry.as_ref().map(|guard| guard.value()), self.now)?;
                self.read.push((*owner, response));
                self.read.len() - 1
            }
        };
        Ok(self.read[at].1.as_ref().and_then(find))
    }
}
