//! The key filter the store asks before a read, grown as the store grows.
//!
//! A filter of fixed size stops helping once it holds many more keys than it has bits for (at
//! 2 MiB: one lookup in three reads the tree with a million records, most past two million).
//! So it grows: once more keys went in than it holds well (one per [`BITS_PER_KEY`] bits), a
//! filter four times bigger starts taking every key added, the writer fills it from a snapshot
//! of the tree on a thread of its own, and then it replaces the old one.
//!
//! No key the store holds may be missing from the filter that answers (a missing key reads as
//! "not recorded"). A key is in the grown filter if it was in the snapshot (written before
//! it), or added after the bigger filter appeared, or written by the writer after the
//! snapshot: the writer adds the keys of every record it writes to both filters. A record
//! queued while the filters change is remembered in memory until written ([`super::Recent`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::{ArcSwap, ArcSwapOption};

use crate::state::key_filter::{KeyFilter, StoreKey};

/// The bits a filter has for each key it holds well: about one false "maybe" in a thousand.
const BITS_PER_KEY: u64 = 16;
/// How much bigger (as a power of two) a grown filter is.
const GROWTH_LOG2: u32 = 2;

/// The filter that answers, and the bigger one being filled while the store outgrows it.
#[derive(Debug)]
pub(super) struct Filters {
    current: ArcSwap<KeyFilter>,
    next: ArcSwapOption<KeyFilter>,
    /// Keys added to `current` (repeats counted).
    added: AtomicU64,
    /// More keys went in than `current` holds well.
    due: AtomicBool,
    max_bits_log2: u32,
}

impl Filters {
    /// The size (a power of two) of a filter for `keys` keys, from `2^min_bits_log2` to
    /// `2^max_bits_log2` bits.
    pub(super) fn bits_for(keys: u64, min_bits_log2: u32, max_bits_log2: u32) -> u32 {
        let wanted = keys.saturating_mul(BITS_PER_KEY).max(1);
        (u64::BITS - (wanted - 1).leading_zeros()).clamp(min_bits_log2, max_bits_log2.max(min_bits_log2))
    }

    /// Answers from `filter`, which holds `keys` keys, and grows it up to `2^max_bits_log2` bits.
    pub(super) fn new(filter: KeyFilter, keys: u64, max_bits_log2: u32) -> Filters {
        let filters = Filters {
            current: ArcSwap::from_pointee(filter),
            next: ArcSwapOption::empty(),
            added: AtomicU64::new(0),
            due: AtomicBool::new(false),
            max_bits_log2,
        };
        filters.count(keys);
        filters
    }

    /// `false` when `key` is certainly in neither the store nor its queue.
    pub(super) fn may_contain(&self, key: &StoreKey) -> bool {
        self.current.load().may_contain(key)
    }

    /// Adds `keys` (to the growing filter too); marks the filter due to grow once it holds
    /// more than it holds well ([`Filters::take_due`]).
    pub(super) fn insert(&self, keys: &[StoreKey]) {
        self.insert_written(keys);
        self.count(keys.len() as u64);
    }

    /// Counts `keys` more keys in the filter that answers; marks it due to grow once it holds
    /// more than it holds well.
    fn count(&self, keys: u64) {
        let added = self.added.fetch_add(keys, Ordering::Relaxed) + keys;
        let bits_log2 = self.current.load().bits_log2();
        if self.next.load().is_none()
            && bits_log2 < self.max_bits_log2
            && added.saturating_mul(BITS_PER_KEY) > 1u64 << bits_log2
        {
            self.due.store(true, Ordering::Relaxed);
        }
    }

    /// Adds the keys of a record being written (counted when it was queued).
    pub(super) fn insert_written(&self, keys: &[StoreKey]) {
        let current = self.current.load();
        keys.iter().for_each(|key| current.insert(key));
        if let Some(next) = &*self.next.load() {
            keys.iter().for_each(|key| next.insert(key));
        }
    }

    /// Whether the filter is due to grow (once: the flag is cleared).
    pub(super) fn take_due(&self) -> bool {
        self.due.swap(false, Ordering::Relaxed)
    }

    /// Makes the bigger filter that takes every key from now on; `None` if one is growing
    /// already. The caller fills it with the store's keys, then calls [`Filters::finish_growing`].
    pub(super) fn start_growing(&self) -> Option<Arc<KeyFilter>> {
        let bits_log2 = (self.current.load().bits_log2() + GROWTH_LOG2).min(self.max_bits_log2);
        let grown = Arc::new(KeyFilter::new(bits_log2));
        let before = self
            .next
            .compare_and_swap(&None::<Arc<KeyFilter>>, Some(grown.clone()));
        before.is_none().then_some(grown)
    }

    /// Makes the grown filter the one that answers; `keys` is how many it was filled with.
    pub(super) fn finish_growing(&self, keys: u64) {
        if let Some(grown) = self.next.swap(None) {
            self.current.store(grown);
            self.added.store(keys, Ordering::Relaxed);
        }
    }

    /// Drops the grown filter unfinished (the one that answers stays).
    pub(super) fn abandon_growing(&self) {
        self.next.store(None);
    }

    /// The size of the filter that answers, as a power of two.
    pub(super) fn bits_log2(&self) -> u32 {
        self.current.load().bits_log2()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u32) -> StoreKey {
        StoreKey::of(1, &n.to_le_bytes())
    }

    #[test]
    fn a_filter_is_sized_for_its_keys_within_bounds() {
        assert_eq!(Filters::bits_for(0, 24, 29), 24);
        // 1,000,000 keys at 16 bits: 2^24 bits would do 1,048,576.
        assert_eq!(Filters::bits_for(1_000_000, 10, 29), 24);
        assert_eq!(Filters::bits_for(1_048_577, 10, 29), 25);
        assert_eq!(Filters::bits_for(u64::MAX, 24, 29), 29);
    }

    #[test]
    fn a_full_filter_grows_and_keeps_what_was_added_meanwhile() {
        let filters = Filters::new(KeyFilter::new(9), 0, 13);
        // 512 bits hold 32 keys well.
        (0..32).for_each(|n| filters.insert(&[key(n)]));
        assert!(!filters.take_due());
        filters.insert(&[key(32)]);
        assert!(filters.take_due() && !filters.take_due());
        let grown = filters.start_growing().expect("not growing yet");
        assert!(filters.start_growing().is_none(), "grows once at a time");
        filters.insert(&[key(100)]);
        assert!(!filters.take_due(), "not due while growing");
        // What the tree held: the first 33 keys.
        (0..33).for_each(|n| grown.insert(&key(n)));
        filters.finish_growing(33);
        assert_eq!(filters.bits_log2(), 11);
        assert!((0..33).chain([100]).all(|n| filters.may_contain(&key(n))));
        // A record written after the snapshot: the writer adds it to both filters.
        let grown = filters.start_growing().expect("grows again");
        (0..33).chain([100]).for_each(|n| grown.insert(&key(n)));
        filters.insert_written(&[key(200)]);
        filters.finish_growing(34);
        assert!(filters.may_contain(&key(200)));
        // The largest filter does not grow.
        let largest = Filters::new(KeyFilter::new(13), 0, 13);
        (0..1000).for_each(|n| largest.insert(&[key(n)]));
        assert!(!largest.take_due());
    }
}
