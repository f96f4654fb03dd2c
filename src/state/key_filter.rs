//! A Bloom filter over the keys a store holds: "certainly absent" without reading the store.
//!
//! The embedded store keeps one in memory for its file. Every key it writes is added before the
//! write is queued, and every key in the file when it opens is added then, so a key the filter
//! has never seen is not in the file and its lookup needs no read. Keys are never removed (an
//! expired key only makes a lookup read the file, as before). The size is fixed: past a few
//! million keys more lookups read the file, and none answers wrongly.

use std::sync::atomic::{AtomicU64, Ordering};

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Bits probed per key.
const PROBES: u64 = 6;

/// A fixed-size Bloom filter that threads add to and read without locks.
#[derive(Debug)]
pub(crate) struct KeyFilter {
    words: Box<[AtomicU64]>,
    /// The number of bits, minus one (a power of two).
    mask: u64,
}

impl KeyFilter {
    /// A filter of `2^bits_log2` bits (at least 64).
    pub fn new(bits_log2: u32) -> KeyFilter {
        let bits = 1u64 << bits_log2.max(6);
        KeyFilter {
            words: (0..bits / 64).map(|_| AtomicU64::new(0)).collect(),
            mask: bits - 1,
        }
    }

    /// Adds key `key` of table `table`.
    pub fn insert(&self, table: u8, key: &[u8]) {
        for bit in self.bits(table, key) {
            self.words[(bit / 64) as usize].fetch_or(1 << (bit % 64), Ordering::Relaxed);
        }
    }

    /// `false` when key `key` of table `table` was certainly never added.
    pub fn may_contain(&self, table: u8, key: &[u8]) -> bool {
        self.bits(table, key)
            .all(|bit| self.words[(bit / 64) as usize].load(Ordering::Relaxed) & (1 << (bit % 64)) != 0)
    }

    /// The bits of one key (double hashing over one 64-bit hash).
    fn bits(&self, table: u8, key: &[u8]) -> impl Iterator<Item = u64> + '_ {
        let hash = xxh3_64_with_seed(key, u64::from(table));
        let step = hash.rotate_left(32) | 1;
        (0..PROBES).map(move |i| hash.wrapping_add(i.wrapping_mul(step)) & self.mask)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_was_added_may_be_there_and_the_rest_mostly_is_not() {
        let filter = KeyFilter::new(20);
        for i in 0..10_000u32 {
            filter.insert(1, format!("fc_{i}").as_bytes());
        }
        for i in 0..10_000u32 {
            assert!(filter.may_contain(1, format!("fc_{i}").as_bytes()));
        }
        let false_positives = (10_000..110_000u32)
            .filter(|i| filter.may_contain(1, format!("fc_{i}").as_bytes()))
            .count();
        // 10,000 keys in 2^20 bits with 6 probes: about one in a million.
        assert!(false_positives < 100, "{false_positives} false positives");
        // The same key in another table is another key.
        assert!(!filter.may_contain(2, b"fc_1"));
    }

    #[test]
    fn a_full_filter_answers_maybe_never_wrongly_absent() {
        let filter = KeyFilter::new(6);
        for i in 0..1_000u32 {
            filter.insert(0, &i.to_be_bytes());
        }
        assert!((0..1_000u32).all(|i| filter.may_contain(0, &i.to_be_bytes())));
    }
}
