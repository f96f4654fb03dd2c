//! Expiry in the tree's own compactions: a compaction drops each row whose time has passed, so
//! the index rows of expired records cost no work of their own (a sweep that found them would
//! read and decode each response and look each of its rows up: 32 µs of CPU a record, twice
//! what writing it costs; docs/benchmarks.md). Reads treat an expired row as absent before a
//! compaction gets to it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use fjall::compaction::filter::{
    CompactionFilter, CompactionFilterResult, Context, Factory, ItemAccessor, Verdict,
};

use crate::state::now_unix;

/// Where a keyspace's rows hold their `expires_unix` (8 bytes, big-endian).
#[derive(Debug, Clone, Copy)]
pub(super) enum ExpiresAt {
    /// The key's first 8 bytes.
    KeyStart,
    /// The value's 8 bytes from this offset.
    Value(usize),
}

/// The filter factory for the keyspace `name`, if its rows expire (every one of the store's).
/// Rows at or below `floor` count as expired too: the disk budget evicted them
/// ([`super::budget`]).
///
/// The spend counters' rows expire at their own time only: the disk budget's floor is for
/// records, and a budget's count must not go before its window does.
pub(super) fn factory_for(name: &str, floor: &Arc<AtomicU64>) -> Option<Arc<dyn Factory>> {
    if name == super::spend::KEYSPACE {
        return Some(Arc::new(DropExpired {
            name: name.to_owned(),
            at: ExpiresAt::Value(0),
            floor: Arc::new(AtomicU64::new(0)),
        }));
    }
    let at = super::tables::expires_at(name)?;
    Some(Arc::new(DropExpired {
        name: name.to_owned(),
        at,
        floor: floor.clone(),
    }))
}

/// Makes a filter, for each compaction of one keyspace, that drops its expired rows.
struct DropExpired {
    name: String,
    at: ExpiresAt,
    floor: Arc<AtomicU64>,
}

impl Factory for DropExpired {
    fn name(&self) -> &str {
        &self.name
    }

    fn make_filter(&self, _: &Context) -> Box<dyn CompactionFilter> {
        Box::new(Expired {
            at: self.at,
            now: now_unix().max(self.floor.load(Ordering::Acquire)),
        })
    }
}

/// Drops the rows expired at `now` (as a tombstone, so no older row of the key comes back).
struct Expired {
    at: ExpiresAt,
    now: u64,
}

impl CompactionFilter for Expired {
    fn filter_item(&mut self, item: ItemAccessor<'_>, _: &Context) -> CompactionFilterResult {
        let expires = match self.at {
            ExpiresAt::KeyStart => read_u64(item.key(), 0),
            ExpiresAt::Value(offset) => read_u64(&item.value()?, offset),
        };
        // A row too short to say is kept: the reads judge it.
        Ok(match expires {
            Some(expires) if expires <= self.now => Verdict::Remove,
            _ => Verdict::Keep,
        })
    }
}

/// The big-endian `u64` at `offset` in `bytes`, if they hold one there.
pub(super) fn read_u64(bytes: &[u8], offset: usize) -> Option<u64> {
    let bytes = bytes.get(offset..offset.checked_add(8)?)?;
    Some(u64::from_be_bytes(bytes.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_is_read_where_the_keyspace_keeps_it() {
        let mut row = 7u64.to_be_bytes().to_vec();
        row.extend_from_slice(&[1; 16]);
        assert_eq!(read_u64(&row, 0), Some(7));
        assert_eq!(read_u64(&row, 16), Some(u64::from_be_bytes([1; 8])));
        assert_eq!(read_u64(&row, 17), None);
        assert_eq!(read_u64(&row, usize::MAX), None);
    }
}
