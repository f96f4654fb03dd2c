//! The file's layout (version 2): each record is one row, and its items are found through it.
//! Ids are keyed by their 16-byte [`StoreKey`] (a hash), not their text: a response id is 50 to
//! 100 bytes, and the smaller the keys, the smaller the trees a record's writes go into.
//!
//! - `responses_v2`: `(expires_unix, key of the response id)` → JSON of the StoredResponse.
//!   Kept in the order they expire, so a batch of records appends to the tree's right edge
//!   rather than dirtying a page of its own for each (bench/store: 45.6 µs a record against
//!   52.0 keyed by id), and a sweep reads the expired ones from the start. The JSON's `id`
//!   tells a read whether the row is the id's (two ids of one key would need 2^64 of them; the
//!   later write would take the key, and the earlier be unknown).
//! - `response_ids_v2`: key of a response id → its `expires_unix`, where its row is.
//! - `item_ids_v2`: key of an item id → key of the response whose output holds the item;
//!   `item_digests_v2`: key of the digest of an item with `encrypted_content` → key of its
//!   response. An
//!   item is read from its response's row ([`StoredResponse::item_by_id`], `item_by_digest`,
//!   which match the id or digest itself), so it is stored once, as in the memory store.
//!
//! A record is a response row, an id row, and a row for each indexed item, where version 1
//! wrote each item's full copy under its full id with an expiry row of its own
//! ([`super::migrate`] moves a version 1 file over when it opens).

use redb::{ReadOnlyTable, ReadableTable, Table, TableDefinition, WriteTransaction};

use super::unavailable;
use crate::ledger::{StoredItem, StoredResponse};
use crate::state::key_filter::StoreKey;
use crate::state::StoreError;

/// A [`StoreKey`] as the tables hold it.
pub(super) type Key16 = &'static [u8; 16];
/// An index from an item's key (of its id, or of its digest) to its response's key.
pub(super) type ItemIndex = TableDefinition<'static, Key16, Key16>;
/// Where a response's row is: `(expires_unix, key of its id)`.
type At = (u64, Key16);
/// The response ids table and the responses table, open for reading.
pub(super) type ReadTables = (ReadOnlyTable<Key16, u64>, ReadOnlyTable<At, &'static [u8]>);

pub(super) const RESPONSES: TableDefinition<'_, At, &[u8]> = TableDefinition::new("responses_v2");
pub(super) const RESPONSE_IDS: TableDefinition<'_, Key16, u64> = TableDefinition::new("response_ids_v2");
pub(super) const ITEM_IDS: TableDefinition<'_, Key16, Key16> = TableDefinition::new("item_ids_v2");
pub(super) const ITEM_DIGESTS: TableDefinition<'_, Key16, Key16> = TableDefinition::new("item_digests_v2");

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

/// The key of an item's `digest`.
pub(super) fn digest_key(digest: &[u8; 32]) -> StoreKey {
    StoreKey::of(KIND_ITEM_BY_DIGEST, digest)
}

/// Every key a record of `response` is found by: its own, then its items' ids and digests.
pub(super) fn record_keys(response: &StoredResponse) -> impl Iterator<Item = StoreKey> + '_ {
    std::iter::once(response_key(&response.id))
        .chain(response.item_ids().map(item_key))
        .chain(response.item_digests().map(digest_key))
}

/// The tables, open in one write transaction.
pub(super) struct Tables<'txn> {
    responses: Table<'txn, At, &'static [u8]>,
    response_ids: Table<'txn, Key16, u64>,
    item_ids: Table<'txn, Key16, Key16>,
    item_digests: Table<'txn, Key16, Key16>,
}

impl<'txn> Tables<'txn> {
    /// Opens (creating them if need be) every table in `txn`.
    pub fn open(txn: &'txn WriteTransaction) -> Result<Tables<'txn>, StoreError> {
        Ok(Tables {
            responses: txn
                .open_table(RESPONSES)
                .map_err(unavailable("responses table"))?,
            response_ids: txn
                .open_table(RESPONSE_IDS)
                .map_err(unavailable("response ids table"))?,
            item_ids: txn.open_table(ITEM_IDS).map_err(unavailable("item ids table"))?,
            item_digests: txn
                .open_table(ITEM_DIGESTS)
                .map_err(unavailable("item digests table"))?,
        })
    }

    /// Writes `response` (`json` its encoding) and its index rows. A response written again
    /// replaces the old: its row moves to the new expiry, and the old one's index rows go
    /// unless the new one has them.
    pub fn put(&mut self, response: &StoredResponse, json: &[u8]) -> Result<(), StoreError> {
        let StoreKey(key) = response_key(&response.id);
        let expires = response.expires_unix;
        let before = self
            .response_ids
            .insert(&key, expires)
            .map_err(unavailable("response ids table"))?
            .map(|guard| guard.value());
        if let Some(before) = before {
            let old = self
                .responses
                .remove((before, &key))
                .map_err(unavailable("responses table"))?
                .and_then(|guard| serde_json::from_slice::<StoredResponse>(guard.value()).ok());
            if let Some(old) = old {
                self.unindex(&old)?;
            }
        }
        self.responses
            .insert((expires, &key), json)
            .map_err(unavailable("responses table"))?;
        for item_id in response.item_ids() {
            self.item_ids
                .insert(&item_key(item_id).0, &key)
                .map_err(unavailable("item ids table"))?;
        }
        for digest in response.item_digests() {
            self.item_digests
                .insert(&digest_key(digest).0, &key)
                .map_err(unavailable("item digests table"))?;
        }
        Ok(())
    }

    /// Removes up to `limit` responses expired at `now`, with their id and index rows.
    /// Returns the responses visited and the entries (responses and item index rows) removed.
    pub fn sweep(&mut self, now: u64, limit: usize) -> Result<(usize, usize), StoreError> {
        let due = self
            .responses
            .range(..(now.saturating_add(1), &[0; 16]))
            .map_err(unavailable("responses table"))?
            .take(limit)
            .map(|row| {
                let (at, _) = row.map_err(unavailable("responses table"))?;
                let (expires, key) = at.value();
                Ok((expires, *key))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let mut removed = 0;
        for (expires, key) in &due {
            let response = self
                .responses
                .remove((*expires, key))
                .map_err(unavailable("responses table"))?
                .and_then(|guard| serde_json::from_slice::<StoredResponse>(guard.value()).ok());
            removed += 1;
            let points_here = self
                .response_ids
                .get(key)
                .map_err(unavailable("response ids table"))?
                .is_some_and(|guard| guard.value() == *expires);
            if points_here {
                self.response_ids
                    .remove(key)
                    .map_err(unavailable("response ids table"))?;
            }
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
        let StoreKey(owner) = response_key(&response.id);
        let mut removed = 0;
        for StoreKey(item) in response.item_ids().map(item_key) {
            removed += usize::from(remove_if_owned(&mut self.item_ids, &item, &owner)?);
        }
        for StoreKey(item) in response.item_digests().map(digest_key) {
            removed += usize::from(remove_if_owned(&mut self.item_digests, &item, &owner)?);
        }
        Ok(removed)
    }
}

/// Removes `item`'s row from `index` if it points at `owner`; whether it did.
fn remove_if_owned(
    index: &mut Table<'_, Key16, Key16>,
    item: &[u8; 16],
    owner: &[u8; 16],
) -> Result<bool, StoreError> {
    let owned = index
        .get(item)
        .map_err(unavailable("item index"))?
        .is_some_and(|guard| guard.value() == owner);
    if owned {
        index.remove(item).map_err(unavailable("item index"))?;
    }
    Ok(owned)
}

/// A response read from the file, and the length of its row.
pub(super) type ReadResponse = (StoredResponse, usize);

/// Reads responses by key, each once however many lookups lead to it, and their items.
pub(super) struct ResponseReader<'t, I, R> {
    ids: &'t I,
    rows: &'t R,
    now: u64,
    /// Each key read, and the live response under it with the length of its row.
    read: Vec<([u8; 16], Option<ReadResponse>)>,
}

impl<'t, I, R> ResponseReader<'t, I, R>
where
    I: ReadableTable<Key16, u64>,
    R: ReadableTable<At, &'static [u8]>,
{
    /// A reader of the responses live at `now`, through `ids` (the response ids table) and
    /// `rows` (the responses table).
    pub fn new(ids: &'t I, rows: &'t R, now: u64) -> ResponseReader<'t, I, R> {
        ResponseReader {
            ids,
            rows,
            now,
            read: Vec::new(),
        }
    }

    /// Response `id`, unless it is missing, expired, or the row of another id with its key.
    pub fn response(&mut self, id: &str) -> Result<Option<StoredResponse>, StoreError> {
        let found = self.by_key(&response_key(id).0)?;
        Ok(found.filter(|response| response.id == id).cloned())
    }

    /// The live responses read, each with the length of its row.
    pub fn into_read(self) -> impl Iterator<Item = ReadResponse> {
        self.read.into_iter().filter_map(|(_, found)| found)
    }

    /// The item `find` picks in the live response whose key is `owner`, if any (`find`
    /// matches the item's own id or digest).
    pub fn item(
        &mut self,
        owner: Option<&[u8; 16]>,
        find: impl Fn(&StoredResponse) -> Option<StoredItem>,
    ) -> Result<Option<StoredItem>, StoreError> {
        match owner {
            Some(owner) => Ok(self.by_key(owner)?.and_then(find)),
            None => Ok(None),
        }
    }

    /// The live response under `key`, read once.
    fn by_key(&mut self, key: &[u8; 16]) -> Result<Option<&StoredResponse>, StoreError> {
        let at = match self.read.iter().position(|(read, _)| read == key) {
            Some(at) => at,
            None => {
                let response = self.read_key(key)?;
                self.read.push((*key, response));
                self.read.len() - 1
            }
        };
        Ok(self.read[at].1.as_ref().map(|(response, _)| response))
    }

    fn read_key(&self, key: &[u8; 16]) -> Result<Option<ReadResponse>, StoreError> {
        let expires = self
            .ids
            .get(key)
            .map_err(unavailable("response ids table"))?
            .map(|guard| guard.value());
        let Some(expires) = expires.filter(|&expires| self.now < expires) else {
            return Ok(None);
        };
        let Some(row) = self
            .rows
            .get((expires, key))
            .map_err(unavailable("responses table"))?
        else {
            return Ok(None);
        };
        let row = row.value();
        serde_json::from_slice(row)
            .map(|response| Some((response, row.len())))
            .map_err(|e| StoreError::Corrupt(format!("a stored response: {e}")))
    }
}
