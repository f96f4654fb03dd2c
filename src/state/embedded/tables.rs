//! The store's layout: four keyspaces of an LSM tree, each record one row and its items found
//! through it. Ids are keyed by their 16-byte [`StoreKey`] (a hash), not their text: a response
//! id is 50 to 100 bytes, and the smaller the keys, the less each write and compaction moves.
//!
//! - `responses`: `expires_unix` (8 bytes, big-endian) then the key of the response id → JSON
//!   of the StoredResponse. Kept in the order they expire, so what a batch writes sorts after
//!   what is there (compactions move whole tables rather than merging them), and a sweep reads
//!   the expired ones from the start. The JSON's `id` tells a read whether the row is the id's
//!   (two ids of one key would need 2^64 of them; the later write would take the key, and the
//!   earlier be unknown).
//! - `response_ids`: key of a response id → its `expires_unix` (big-endian), where its row is.
//! - `item_ids`: key of an item id → key of the response whose output holds the item, then
//!   that response's `expires_unix`; `item_digests`: key of the digest of an item with
//!   `encrypted_content` → the same. An item is read from its response's row
//!   ([`StoredResponse::item_by_id`], `item_by_digest`, which match the id or digest itself),
//!   so it is stored once, as in the memory store.
//!
//! Every row holds its expiry ([`expires_at`]): the writer sweeps the expired responses' rows,
//! and the tree's compactions drop the other expired rows ([`super::expiry`]).
//!
//! Writes go through [`Tables`], which gathers one batch's changes (reading its own writes, as
//! a transaction would) and commits them as one atomic write batch.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, OwnedWriteBatch, Readable, Slice, Snapshot};

use super::expiry::ExpiresAt;
use super::{unavailable, write_failed};
use crate::ledger::{StoredItem, StoredResponse};
use crate::state::key_filter::{KeyFilter, StoreKey};
use crate::state::StoreError;

/// Where a response's row is: its `expires_unix` (big-endian, so rows sort by it), then its key.
pub(super) type At = [u8; 24];

/// The kinds of key, each the seed of its [`StoreKey`]s (the filter holds all three).
pub(super) const KIND_RESPONSE: u8 = 0;
pub(super) const KIND_ITEM_BY_ID: u8 = 1;
pub(super) const KIND_ITEM_BY_DIGEST: u8 = 2;

/// The keyspaces, each by name, and where its rows hold their `expires_unix`.
const KEYSPACES: [(&str, ExpiresAt); 4] = [
    ("responses", ExpiresAt::KeyStart),
    ("response_ids", ExpiresAt::Value(0)),
    ("item_ids", ExpiresAt::Value(16)),
    ("item_digests", ExpiresAt::Value(16)),
];

/// Where the rows of keyspace `name` hold their `expires_unix`; `None` for another name.
pub(super) fn expires_at(name: &str) -> Option<ExpiresAt> {
    KEYSPACES
        .iter()
        .find(|(keyspace, _)| *keyspace == name)
        .map(|&(_, at)| at)
}

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

/// The row key of a response expiring at `expires` under `key`.
pub(super) fn at(expires: u64, key: &[u8; 16]) -> At {
    let mut at = [0; 24];
    at[..8].copy_from_slice(&expires.to_be_bytes());
    at[8..].copy_from_slice(key);
    at
}

/// An item row's value: the key of its response, then the response's `expires_unix`.
pub(super) fn owner(key: &[u8; 16], expires: u64) -> [u8; 24] {
    let mut owner = [0; 24];
    owner[..16].copy_from_slice(key);
    owner[16..].copy_from_slice(&expires.to_be_bytes());
    owner
}

/// The four keyspaces.
#[derive(Clone)]
pub(super) struct Keyspaces {
    pub(crate) responses: Keyspace,
    pub(crate) response_ids: Keyspace,
    pub(crate) item_ids: Keyspace,
    pub(crate) item_digests: Keyspace,
}

impl Keyspaces {
    /// Opens (creating them if need be) the four keyspaces of `db`, each writing out its
    /// in-memory table when it grows past `memtable_bytes`.
    pub(super) fn open(db: &Database, memtable_bytes: u64) -> Result<Keyspaces, StoreError> {
        let open = |name: &str| {
            db.keyspace(name, || {
                KeyspaceCreateOptions::default().max_memtable_size(memtable_bytes)
            })
            .map_err(unavailable("open a keyspace"))
        };
        let [responses, response_ids, item_ids, item_digests] = KEYSPACES.map(|(name, _)| name);
        Ok(Keyspaces {
            responses: open(responses)?,
            response_ids: open(response_ids)?,
            item_ids: open(item_ids)?,
            item_digests: open(item_digests)?,
        })
    }

    /// The keyspaces keyed by [`StoreKey`]s (every one but `responses`).
    pub(super) fn keyed(&self) -> [&Keyspace; 3] {
        [&self.response_ids, &self.item_ids, &self.item_digests]
    }
}

/// Adds every key `snapshot` holds in the keyspaces keyed by [`StoreKey`]s (all but the
/// responses') to `filter`; how many it added.
pub(super) fn add_keys(
    keyspaces: &Keyspaces,
    snapshot: &Snapshot,
    filter: &KeyFilter,
) -> Result<u64, StoreError> {
    let mut added = 0;
    for keyspace in keyspaces.keyed() {
        for row in snapshot.iter(keyspace) {
            let key = row.key().map_err(unavailable("a keyspace's keys"))?;
            if let Ok(key) = <[u8; 16]>::try_from(key.as_ref()) {
                filter.insert(&StoreKey(key));
                added += 1;
            }
        }
    }
    Ok(added)
}

/// The store's database and keyspaces, shared by the writer and the reads.
pub(super) struct Store {
    pub(crate) db: Database,
    pub(crate) keyspaces: Keyspaces,
    /// The budgets' spend counters ([`super::spend`]).
    pub(crate) spend: Keyspace,
    /// Rows expiring at or before this time count as expired: the disk budget evicted them
    /// ([`super::budget`]).
    pub(crate) floor: Arc<AtomicU64>,
}

impl Store {
    /// A reader of the responses live at `now` (and above the floor), as the tree holds them now.
    pub(super) fn reader(&self, now: u64) -> ResponseReader<'_> {
        let now = now.max(self.floor.load(Ordering::Acquire));
        ResponseReader::new(&self.keyspaces, self.db.snapshot(), now)
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

/// One keyspace's changes in a batch, read before what the keyspace holds: `None` removes.
struct Pending<'k, const N: usize> {
    keyspace: &'k Keyspace,
    writes: HashMap<[u8; N], Option<Slice>>,
}

impl<'k, const N: usize> Pending<'k, N> {
    fn new(keyspace: &'k Keyspace) -> Pending<'k, N> {
        Pending {
            keyspace,
            writes: HashMap::new(),
        }
    }

    /// The value under `key`, this batch's if it wrote one.
    fn get(&self, key: &[u8; N]) -> Result<Option<Slice>, StoreError> {
        match self.writes.get(key) {
            Some(written) => Ok(written.clone()),
            None => self.keyspace.get(key).map_err(unavailable("read a row")),
        }
    }

    /// The value this batch wrote under `key`, if any (for a key the keyspace is known not to
    /// hold).
    fn written(&self, key: &[u8; N]) -> Option<Slice> {
        self.writes.get(key).cloned().flatten()
    }

    fn insert(&mut self, key: [u8; N], value: impl Into<Slice>) {
        self.writes.insert(key, Some(value.into()));
    }

    fn remove(&mut self, key: [u8; N]) {
        self.writes.insert(key, None);
    }

    /// Adds the changes to `batch`, each key once (one batch's writes share one sequence number).
    fn stage(self, batch: &mut OwnedWriteBatch) {
        for (key, value) in self.writes {
            match value {
                Some(value) => batch.insert(self.keyspace, key, value),
                None => batch.remove(self.keyspace, key),
            }
        }
    }
}

/// A batch of writes over the keyspaces: reads see what it wrote; [`Tables::commit`] writes it
/// all atomically.
pub(super) struct Tables<'k> {
    responses: Pending<'k, 24>,
    response_ids: Pending<'k, 16>,
    item_ids: Pending<'k, 16>,
    item_digests: Pending<'k, 16>,
    /// Whether a response written again in this batch no longer holds some item its older
    /// record did (docs/incremental-judging.md#the-ledger).
    dropped_items: bool,
}

impl<'k> Tables<'k> {
    /// An empty batch over `keyspaces`.
    pub(super) fn new(keyspaces: &'k Keyspaces) -> Tables<'k> {
        Tables {
            responses: Pending::new(&keyspaces.responses),
            response_ids: Pending::new(&keyspaces.response_ids),
            item_ids: Pending::new(&keyspaces.item_ids),
            item_digests: Pending::new(&keyspaces.item_digests),
            dropped_items: false,
        }
    }

    /// Commits every change at once (visible to reads when it returns; on disk at the next
    /// persist).
    pub(super) fn commit(self, db: &Database) -> Result<(), StoreError> {
        let mut batch = db.batch();
        self.responses.stage(&mut batch);
        self.response_ids.stage(&mut batch);
        self.item_ids.stage(&mut batch);
        self.item_digests.stage(&mut batch);
        batch.commit().map_err(write_failed("commit"))
    }

    /// Writes `response` (`json` its encoding) and its index rows. A response written again
    /// replaces the old: its row moves to the new expiry, and the old one's index rows go
    /// unless the new one has them. `new` says the store has no record of it (the key filter
    /// lacked its key when it was queued), which spares the read that looks for one.
    pub(super) fn put(
        &mut self,
        response: &StoredResponse,
        json: &[u8],
        new: bool,
    ) -> Result<(), StoreError> {
        let StoreKey(key) = response_key(&response.id);
        let expires = response.expires_unix;
        let before = match new {
            true => self.response_ids.written(&key),
            false => self.response_ids.get(&key)?,
        };
        if let Some(before) = before.as_deref().map(read_expires) {
            let old_at = at(before?, &key);
            let old = self.responses.get(&old_at)?;
            self.responses.remove(old_at);
            if let Some(old) = old.and_then(|row| serde_json::from_slice::<StoredResponse>(&row).ok()) {
                self.dropped_items |= old.item_ids().any(|id| !response.item_ids().any(|new| new == id))
                    || old
                        .item_digests()
                        .any(|digest| !response.item_digests().any(|new| new == digest));
                self.unindex(&old)?;
            }
        }
        self.response_ids.insert(key, &expires.to_be_bytes()[..]);
        self.responses.insert(at(expires, &key), json);
        let owner = owner(&key, expires);
        for item_id in response.item_ids() {
            self.item_ids.insert(item_key(item_id).0, &owner[..]);
        }
        for digest in response.item_digests() {
            self.item_digests.insert(digest_key(digest).0, &owner[..]);
        }
        Ok(())
    }

    /// Removes up to `limit` responses' rows expired at `now` (their id and item rows go in
    /// compactions). Returns how many it removed.
    pub(super) fn sweep(&mut self, now: u64, limit: usize) -> Result<usize, StoreError> {
        let end = at(now.saturating_add(1), &[0; 16]);
        let due = self
            .responses
            .keyspace
            .range(..end)
            .take(limit)
            .map(|row| {
                let key = row.key().map_err(unavailable("responses"))?;
                At::try_from(key.as_ref()).map_err(|_| corrupt("a response's key"))
            })
            .collect::<Result<Vec<At>, StoreError>>()?;
        for row_at in &due {
            self.responses.remove(*row_at);
        }
        Ok(due.len())
    }

    /// Whether a response written again in this batch no longer holds some item its older
    /// record did: a record lookups may have found is gone.
    pub(super) fn dropped_items(&self) -> bool {
        self.dropped_items
    }

    /// Removes the index rows of `response`'s items that point at it (an item recorded since
    /// by another response keeps that one's row). Returns how many it removed.
    fn unindex(&mut self, response: &StoredResponse) -> Result<usize, StoreError> {
        let StoreKey(owner) = response_key(&response.id);
        let mut removed = 0;
        for StoreKey(item) in response.item_ids().map(item_key) {
            removed += usize::from(remove_if_owned(&mut self.item_ids, item, &owner)?);
        }
        for StoreKey(item) in response.item_digests().map(digest_key) {
            removed += usize::from(remove_if_owned(&mut self.item_digests, item, &owner)?);
        }
        Ok(removed)
    }
}

/// Removes `item`'s row from `index` if it points at `owner`; whether it did.
fn remove_if_owned(
    index: &mut Pending<'_, 16>,
    item: [u8; 16],
    owner: &[u8; 16],
) -> Result<bool, StoreError> {
    let owned = index
        .get(&item)?
        .is_some_and(|value| value.get(..16) == Some(&owner[..]));
    if owned {
        index.remove(item);
    }
    Ok(owned)
}

/// An `expires_unix` as `response_ids` holds it.
fn read_expires(value: &[u8]) -> Result<u64, StoreError> {
    let bytes: [u8; 8] = value.try_into().map_err(|_| corrupt("a response's time"))?;
    Ok(u64::from_be_bytes(bytes))
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(format!("{what} has the wrong length"))
}

/// A response read from the store, and the length of its row.
pub(super) type ReadResponse = (StoredResponse, usize);

/// Reads responses by key from one snapshot, each once however many lookups lead to it, and
/// their items.
pub(super) struct ResponseReader<'t> {
    keyspaces: &'t Keyspaces,
    snapshot: Snapshot,
    now: u64,
    /// Each key read, and the live response under it with the length of its row.
    read: Vec<([u8; 16], Option<ReadResponse>)>,
}

impl<'t> ResponseReader<'t> {
    /// A reader of the responses live at `now` in `keyspaces`, as they are in `snapshot`.
    pub(super) fn new(keyspaces: &'t Keyspaces, snapshot: Snapshot, now: u64) -> ResponseReader<'t> {
        ResponseReader {
            keyspaces,
            snapshot,
            now,
            read: Vec::new(),
        }
    }

    /// Response `id`, unless it is missing, expired, or the row of another id with its key.
    pub(super) fn response(&mut self, id: &str) -> Result<Option<StoredResponse>, StoreError> {
        let found = self.by_key(&response_key(id).0)?;
        Ok(found.filter(|response| response.id == id).cloned())
    }

    /// The item `find` picks in the live response that `index` (`item_ids` or `item_digests`)
    /// gives `key` to, if any (`find` matches the item's own id or digest).
    pub(super) fn item(
        &mut self,
        index: &Keyspace,
        key: &StoreKey,
        find: impl Fn(&StoredResponse) -> Option<StoredItem>,
    ) -> Result<Option<StoredItem>, StoreError> {
        let owner = self
            .snapshot
            .get(index, key.0)
            .map_err(unavailable("item index"))?;
        let Some(owner) = owner else {
            return Ok(None);
        };
        let owner: [u8; 16] = owner
            .get(..16)
            .and_then(|owner| owner.try_into().ok())
            .ok_or_else(|| corrupt("an item's owner"))?;
        Ok(self.by_key(&owner)?.and_then(find))
    }

    /// The live responses read, each with the length of its row.
    pub(super) fn into_read(self) -> impl Iterator<Item = ReadResponse> {
        self.read.into_iter().filter_map(|(_, found)| found)
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
            .snapshot
            .get(&self.keyspaces.response_ids, key)
            .map_err(unavailable("response ids"))?;
        let Some(expires) = expires else {
            return Ok(None);
        };
        let expires = read_expires(&expires)?;
        if self.now >= expires {
            return Ok(None);
        }
        let Some(row) = self
            .snapshot
            .get(&self.keyspaces.responses, at(expires, key))
            .map_err(unavailable("responses"))?
        else {
            return Ok(None);
        };
        serde_json::from_slice(&row)
            .map(|response| Some((response, row.len())))
            .map_err(|e| StoreError::Corrupt(format!("a stored response: {e}")))
    }
}
