//! A blocked Bloom filter over the keys a store holds: "certainly absent" without reading the
//! store, each key's bits in one cache line.
//!
//! The embedded store keeps one in memory for its tree. Every key it writes is added before the
//! write is queued, and every key in the tree when it opens is added then, so a key the filter
//! has never seen is neither in the tree nor queued: its lookup needs no read, and a record of
//! a response whose key it has not seen needs no read for an older one. Keys are never removed
//! (an expired key only makes a lookup read the tree, as before). A filter's size is fixed: the
//! fuller it is, the more lookups read the tree, and none answers wrongly; the embedded store
//! replaces its filter with a bigger one as it grows (`embedded/filters.rs`).

use std::sync::atomic::{AtomicU64, Ordering};

use xxhash_rust::xxh3::xxh3_128_with_seed;

/// A key as the embedded store's tables and this filter hold it: the 128-bit XXH3 hash of an
/// id, seeded with the table's kind, so 16 bytes however long the id, and the same text in two
/// tables two keys. XXH3's output is fixed by its specification (a test pins it): a file
/// written by one build is read by the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct StoreKey(pub [u8; 16]);

impl StoreKey {
    /// The key of `text` in the table of kind `kind`.
    pub(super) fn of(kind: u8, text: &[u8]) -> StoreKey {
        StoreKey(xxh3_128_with_seed(text, u64::from(kind)).to_le_bytes())
    }
}

/// Bits set per key, all in one block.
const PROBES: u32 = 6;

/// A block: the 512 bits (one 64-byte cache line) a key's bits all fall in, so adding or
/// testing a key touches one line instead of one a bit.
const BLOCK_WORDS: usize = 8;
const BLOCK_BITS_LOG2: u32 = 9;

/// A fixed-size, blocked Bloom filter that threads add to and read without locks.
#[derive(Debug)]
pub(crate) struct KeyFilter {
    words: Box<[AtomicU64]>,
    /// The number of blocks, minus one (a power of two).
    block_mask: u64,
}

impl KeyFilter {
    /// A filter of `2^bits_log2` bits (at least one block, 512).
    pub(super) fn new(bits_log2: u32) -> KeyFilter {
        let blocks = 1u64 << (bits_log2.max(BLOCK_BITS_LOG2) - BLOCK_BITS_LOG2);
        KeyFilter {
            words: (0..blocks as usize * BLOCK_WORDS)
                .map(|_| AtomicU64::new(0))
                .collect(),
            block_mask: blocks - 1,
        }
    }

    /// The filter's size: `2^bits_log2` bits.
    pub(super) fn bits_log2(&self) -> u32 {
        BLOCK_BITS_LOG2 + (self.block_mask + 1).trailing_zeros()
    }

    /// Adds `key`.
    pub(super) fn insert(&self, key: &StoreKey) {
        let block = self.block(key);
        for (word, bit) in bits(key) {
            block[word].fetch_or(bit, Ordering::Relaxed);
        }
    }

    /// `false` when `key` was certainly never added.
    pub(super) fn may_contain(&self, key: &StoreKey) -> bool {
        let block = self.block(key);
        bits(key).all(|(word, bit)| block[word].load(Ordering::Relaxed) & bit != 0)
    }

    /// The block of `key`, chosen by the low half of the key (it is a hash already).
    fn block(&self, key: &StoreKey) -> &[AtomicU64] {
        let low = u64::from_le_bytes(key.0[..8].try_into().unwrap_or_default());
        let start = (low & self.block_mask) as usize * BLOCK_WORDS;
        &self.words[start..start + BLOCK_WORDS]
    }
}

/// The bits of `key` in its block, as (word, mask): nine bits of the key's high half each.
fn bits(key: &StoreKey) -> impl Iterator<Item = (usize, u64)> {
    let high = u64::from_le_bytes(key.0[8..].try_into().unwrap_or_default());
    (0..PROBES).map(move |i| {
        let bit = (high >> (i * BLOCK_BITS_LOG2)) & ((1 << BLOCK_BITS_LOG2) - 1);
        ((bit / 64) as usize, 1u64 << (bit % 64))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_was_added_may_be_there_and_the_rest_mostly_is_not() {
        let filter = KeyFilter::new(20);
        let key = |kind: u8, i: u32| StoreKey::of(kind, format!("fc_{i}").as_bytes());
        for i in 0..10_000u32 {
            filter.insert(&key(1, i));
        }
        for i in 0..10_000u32 {
            assert!(filter.may_contain(&key(1, i)));
        }
        let false_positives = (10_000..110_000u32)
            .filter(|&i| filter.may_contain(&key(1, i)))
            .count();
        // 10,000 keys in 2^20 bits, six bits each in one of 2,048 blocks: about three in a
        // million (blocks hold five keys on average, some many more).
        assert!(false_positives < 100, "{false_positives} false positives");
        // The same key in another table is another key.
        assert!(!filter.may_contain(&key(2, 1)));
    }

    #[test]
    fn a_full_filter_answers_maybe_never_wrongly_absent() {
        let filter = KeyFilter::new(6);
        let key = |i: u32| StoreKey::of(0, &i.to_be_bytes());
        for i in 0..1_000u32 {
            filter.insert(&key(i));
        }
        assert!((0..1_000u32).all(|i| filter.may_contain(&key(i))));
    }

    #[test]
    fn a_store_key_is_the_same_in_every_build() {
        // Keys are written to the tree: a change of hash would lose every record in it. The
        // value is XXH3-128 of the text with seed 1 from the reference C library (through
        // Python's xxhash), little-endian.
        let key = StoreKey::of(1, b"fc_68af2c1d4b7c8190a1b2c3d4e5f60718");
        let hex: String = key.0.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "7f218f618d8f473962eae967785a8028");
        assert_ne!(key, StoreKey::of(0, b"fc_68af2c1d4b7c8190a1b2c3d4e5f60718"));
    }
}
