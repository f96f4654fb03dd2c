//! The recent index: the records the store wrote or read lately, in a fixed ring of bytes
//! (their compact form), found by key through a fixed table, to answer the next turn's lookups
//! without a read of the tree (docs/operations.md#state-backends).
//!
//! Both are allocated when the store opens, at the size `[state] max_memory_bytes` gives them,
//! and never grow: a record goes in at the ring's end and overwrites the oldest ones, a key
//! takes a place in a short probe of the table (the oldest record's place when the probe is
//! full). Only the writer thread adds what it committed, in the order the records were pushed;
//! a lookup that read the tree adds what it read ([`Recent::fill`]) unless a newer record of
//! it may exist. A key leads to the newest record holding it, and an item is read from its
//! response only while that record is still the response's newest here. An expired entry
//! reads as absent, as it does from the tree.

use std::sync::RwLock;

use super::compact;
use crate::state::key_filter::StoreKey;

/// How many places of the key table a key may take, from its hash on.
const PROBES: usize = 8;
/// The bytes of the ring per place in the key table (records of a typical answer have a key
/// per 100 to 200 bytes of their compact form).
const BYTES_PER_KEY: usize = 64;
/// A record's length before it in the ring.
const HEADER: usize = 4;
/// The header that says the rest of the ring up to its end is unused.
const PAD: u32 = u32::MAX;

/// The recent records, within a fixed number of bytes.
#[derive(Debug)]
pub(crate) struct Recent {
    index: RwLock<Index>,
}

#[derive(Debug)]
struct Index {
    ring: Box<[u8]>,
    /// Where the next record goes, counted from the first byte ever written (the ring's
    /// position is this modulo its length).
    end: u64,
    /// Where the oldest record not yet overwritten starts.
    start: u64,
    /// Each place: a key, and where its record starts plus one (0: empty).
    keys: Box<[(StoreKey, u64)]>,
    /// Batches the writer added ([`Recent::mark`]).
    batches: u64,
}

impl Recent {
    /// An index of `bytes` bytes of records (and a key table in proportion), allocated now.
    /// Zero keeps nothing.
    pub(super) fn new(bytes: usize) -> Recent {
        let places = (bytes / BYTES_PER_KEY).max(PROBES).next_power_of_two();
        Recent {
            index: RwLock::new(Index {
                // Zeroed by the allocator: pages are taken as the ring first reaches them.
                ring: vec![0; bytes].into_boxed_slice(),
                end: 0,
                start: 0,
                keys: vec![(StoreKey([0; 16]), 0); places].into_boxed_slice(),
                batches: 0,
            }),
        }
    }

    /// The bytes the ring and the key table take.
    #[cfg(test)]
    pub(super) fn footprint(&self) -> usize {
        let index = self.read();
        index.ring.len() + std::mem::size_of_val(&*index.keys)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Index> {
        self.index.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Index> {
        self.index.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds the records the writer committed, in the order they were pushed, each its
    /// compact form and its keys (its response's first).
    pub(super) fn add_batch<'r>(&self, records: impl Iterator<Item = (&'r [u8], &'r [StoreKey])>) {
        let mut index = self.write();
        for (bytes, keys) in records {
            index.add(bytes, keys);
        }
        index.batches += 1;
    }

    /// Where the index stands before a read of the tree, for [`Recent::fill`] after it.
    pub(super) fn mark(&self) -> u64 {
        self.read().batches
    }

    /// Adds a record read from the tree by a read that began at `mark`, unless the writer
    /// added a batch since (it may hold a newer record of it), or the index holds a record of
    /// its response already, or `pending` says a newer one is on its way.
    pub(super) fn fill(
        &self,
        bytes: &[u8],
        keys: &[StoreKey],
        mark: u64,
        pending: impl Fn(&StoreKey) -> bool,
    ) {
        let mut index = self.write();
        if index.batches != mark || index.place_of(&keys[0]).is_some() || pending(&keys[0]) {
            return;
        }
        index.add(bytes, keys);
    }

    /// `read` of the record holding `key`, if it is the newest record here of its response
    /// and live at `now`. `read` gets the record's compact form.
    pub(super) fn find<R>(
        &self,
        key: &StoreKey,
        now: u64,
        read: impl FnOnce(&[u8]) -> Option<R>,
    ) -> Option<R> {
        let index = self.read();
        let at = index.place_of(key)?;
        let bytes = index.record(at);
        let (id, expires) = compact::id_and_expiry(bytes).ok()?;
        if now >= expires {
            return None;
        }
        // The newest record of its response: an item key may lead to an older one.
        if index.place_of(&super::tables::response_key(id)) != Some(at) {
            return None;
        }
        read(bytes)
    }
}

impl Index {
    /// Where the live record under `key` starts.
    fn place_of(&self, key: &StoreKey) -> Option<u64> {
        probe(key, self.keys.len())
            .map(|place| self.keys[place])
            .find(|(held, at)| held == key && *at > self.start)
            .map(|(_, at)| at - 1)
    }

    /// The record starting at `at` (live).
    fn record(&self, at: u64) -> &[u8] {
        let p = (at % self.ring.len() as u64) as usize;
        let len = u32::from_le_bytes(self.ring[p..p + HEADER].try_into().unwrap_or_default()) as usize;
        &self.ring[p + HEADER..p + HEADER + len]
    }

    fn add(&mut self, bytes: &[u8], keys: &[StoreKey]) {
        let size = self.ring.len();
        let need = HEADER + bytes.len();
        // A record over a quarter of the ring is not kept (it is read from the tree).
        if need > size / 4 || keys.is_empty() {
            return;
        }
        let mut p = (self.end % size as u64) as usize;
        if p + need > size {
            if p + HEADER <= size {
                self.ring[p..p + HEADER].copy_from_slice(&PAD.to_le_bytes());
            }
            self.end += (size - p) as u64;
            p = 0;
        }
        let at = self.end;
        self.end += need as u64;
        self.evict_until(self.end.saturating_sub(size as u64));
        self.ring[p..p + HEADER].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
        self.ring[p + HEADER..p + need].copy_from_slice(bytes);
        for key in keys {
            self.put_key(*key, at + 1);
        }
    }

    /// Moves `start` past every record that begins before `until`.
    fn evict_until(&mut self, until: u64) {
        let size = self.ring.len();
        while self.start < until {
            let p = (self.start % size as u64) as usize;
            let len = match p + HEADER <= size {
                true => u32::from_le_bytes(self.ring[p..p + HEADER].try_into().unwrap_or_default()),
                false => PAD,
            };
            self.start += match len {
                PAD => (size - p) as u64,
                len => (HEADER + len as usize) as u64,
            };
        }
    }

    /// Puts `key` at `at` in its probe: its own place, else a free or stale one, else the
    /// place of the oldest record.
    fn put_key(&mut self, key: StoreKey, at: u64) {
        let mut places = [0; PROBES];
        probe(&key, self.keys.len())
            .zip(places.iter_mut())
            .for_each(|(place, slot)| *slot = place);
        let start = self.start;
        let keys = &self.keys;
        let place = places
            .iter()
            .copied()
            .find(|&p| keys[p].0 == key && keys[p].1 != 0)
            .or_else(|| places.iter().copied().find(|&p| keys[p].1 <= start))
            .or_else(|| places.iter().copied().min_by_key(|&p| keys[p].1))
            .unwrap_or(places[0]);
        self.keys[place] = (key, at);
    }
}

/// The places of the key table `key` may take, `len` a power of two.
fn probe(key: &StoreKey, len: usize) -> impl Iterator<Item = usize> {
    let low = u64::from_le_bytes(key.0[..8].try_into().unwrap_or_default()) as usize;
    (0..PROBES).map(move |i| (low + i) & (len - 1))
}

#[cfg(test)]
mod tests {
    use super::super::compact;
    use super::super::tables::{item_key, record_keys, response_key};
    use super::super::tests::response;
    use super::*;

    fn add(recent: &Recent, id: &str) {
        let stored = response(id, 1, 60);
        let keys: Vec<StoreKey> = record_keys(&stored).collect();
        recent.add_batch(std::iter::once((&compact::encode(&stored)[..], &keys[..])));
    }

    fn found(recent: &Recent, key: &StoreKey) -> Option<String> {
        recent.find(key, crate::state::now_unix(), |bytes| {
            Some(compact::decode(bytes).unwrap().id)
        })
    }

    #[test]
    fn the_ring_keeps_the_newest_records_within_its_bytes_and_never_grows() {
        let one = compact::encode(&response("resp_00000", 1, 60)).len() + HEADER;
        let recent = Recent::new(10 * one);
        let footprint = recent.footprint();
        for n in 0..1000 {
            add(&recent, &format!("resp_{n:05}"));
        }
        assert_eq!(recent.footprint(), footprint);
        // The last nine fit for sure (a wrap may waste less than one), the oldest are gone.
        for n in 991..1000 {
            let id = format!("resp_{n:05}");
            assert_eq!(found(&recent, &response_key(&id)).as_deref(), Some(id.as_str()));
            let item = format!("fc_0123456789_{id}");
            assert_eq!(found(&recent, &item_key(&item)).as_deref(), Some(id.as_str()));
        }
        let held = (0..1000)
            .filter(|n| found(&recent, &response_key(&format!("resp_{n:05}"))).is_some())
            .count();
        assert!((9..=10).contains(&held), "{held} held");
    }

    #[test]
    fn an_item_of_an_older_record_of_its_response_is_not_found() {
        let recent = Recent::new(1 << 16);
        add(&recent, "resp_a");
        let mut newer = response("resp_a", 2, 60);
        newer.items.truncate(1);
        let keys: Vec<StoreKey> = record_keys(&newer).collect();
        recent.add_batch(std::iter::once((&compact::encode(&newer)[..], &keys[..])));
        assert!(found(&recent, &item_key("rs_0123456789_resp_a")).is_some());
        assert!(found(&recent, &item_key("fc_0123456789_resp_a")).is_none());
    }

    #[test]
    fn an_expired_record_reads_as_absent() {
        let recent = Recent::new(1 << 16);
        let stored = response("resp_old", 1, -1);
        let keys: Vec<StoreKey> = record_keys(&stored).collect();
        recent.add_batch(std::iter::once((&compact::encode(&stored)[..], &keys[..])));
        assert!(found(&recent, &response_key("resp_old")).is_none());
    }

    #[test]
    fn a_read_record_is_kept_only_when_nothing_newer_may_exist() {
        let recent = Recent::new(1 << 16);
        let read = response("resp_r", 1, 60);
        let keys: Vec<StoreKey> = record_keys(&read).collect();
        let bytes = compact::encode(&read);
        // A batch added since the read began: not kept.
        let mark = recent.mark();
        add(&recent, "resp_other");
        recent.fill(&bytes, &keys, mark, |_| false);
        assert!(found(&recent, &keys[0]).is_none());
        // A newer record pending: not kept.
        let mark = recent.mark();
        recent.fill(&bytes, &keys, mark, |_| true);
        assert!(found(&recent, &keys[0]).is_none());
        // Otherwise kept; and not again over a record the index holds.
        recent.fill(&bytes, &keys, mark, |_| false);
        assert!(found(&recent, &keys[0]).is_some());
        let mut newer = read.clone();
        newer.items.truncate(1);
        let newer_keys: Vec<StoreKey> = record_keys(&newer).collect();
        recent.add_batch(std::iter::once((&compact::encode(&newer)[..], &newer_keys[..])));
        let mark = recent.mark();
        recent.fill(&bytes, &keys, mark, |_| false);
        assert!(found(&recent, &item_key("fc_0123456789_resp_r")).is_none());
    }

    #[test]
    fn a_full_probe_gives_the_oldest_records_place() {
        // A table of PROBES places: every key shares the one probe.
        let recent = Recent::new(PROBES * BYTES_PER_KEY);
        let mut index = recent.write();
        for n in 0..(PROBES as u64 + 3) {
            index.put_key(StoreKey::of(0, &n.to_le_bytes()), n + 1);
        }
        let newest = StoreKey::of(0, &(PROBES as u64 + 2).to_le_bytes());
        assert!(index.keys.iter().any(|(k, _)| *k == newest));
        let oldest = StoreKey::of(0, &0u64.to_le_bytes());
        assert!(!index.keys.iter().any(|(k, _)| *k == oldest));
    }
}
