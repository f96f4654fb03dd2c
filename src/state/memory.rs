//! The `memory` backend: maps in this process, each write sweeping out what has expired.

use super::loss_epoch::LossEpoch;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use foldhash::fast::RandomState;

use super::local_spend::LocalCounters;
use super::{now_unix, LocalRateLimiter, StoreError};
use crate::ledger::{StoredItem, StoredResponse};

/// The `memory` backend. Clones share the same maps.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    maps: Arc<Mutex<Maps>>,
    limiter: Arc<LocalRateLimiter>,
    /// The budgets' spend counters.
    counters: Arc<LocalCounters>,
    /// Moved when a response is written again (the items it no longer holds go).
    losses: LossEpoch,
}

/// The records, each held once: the item indexes point into the response that holds the item.
#[derive(Debug, Default)]
struct Maps {
    responses: HashMap<String, Arc<StoredResponse>, RandomState>,
    by_id: HashMap<Box<str>, ItemAt, RandomState>,
    by_digest: HashMap<[u8; 32], ItemAt, RandomState>,
    /// Each held response id once, soonest to expire first, with the expiry it had when
    /// queued (a rewrite may have moved it later).
    expiring: BinaryHeap<Reverse<(u64, String)>>,
}

/// An output item of a recorded response: the response, and the item's place in its `items`.
#[derive(Debug)]
struct ItemAt {
    response: Arc<StoredResponse>,
    index: usize,
}

impl ItemAt {
    /// The item's index entry, unless it has expired at `now`.
    fn live(&self, now: u64) -> Option<StoredItem> {
        let response = &self.response;
        (!response.is_expired(now)).then(|| response.stored_item(&response.items[self.index]))
    }
}

impl MemoryStore {
    /// The loss epoch ([`StateStore::loss_epoch`](super::StateStore::loss_epoch)).
    pub(super) fn loss_epoch(&self) -> u64 {
        self.losses.current()
    }

    /// The tests' [`MemoryStore::record_response`] of a borrowed response.
    #[cfg(test)]
    pub(super) fn put_response(&self, response: &StoredResponse) -> Result<(), StoreError> {
        self.record_response(response.clone())
    }

    /// Records `response` and its index entries, keeping `response` itself.
    pub(super) fn record_response(&self, response: StoredResponse) -> Result<(), StoreError> {
        let response = Arc::new(response);
        let mut maps = self.maps.lock().unwrap_or_else(|e| e.into_inner());
        maps.sweep(now_unix());
        for (index, item) in response.items.iter().enumerate() {
            let at = || ItemAt {
                response: response.clone(),
                index,
            };
            if let Some(id) = item.indexed_id() {
                maps.by_id.insert(id.into(), at());
            }
            if let Some(digest) = item.indexed_digest() {
                maps.by_digest.insert(*digest, at());
            }
        }
        let expires = response.expires_unix;
        match maps.responses.insert(response.id.clone(), response.clone()) {
            // Written again: the items it no longer holds go with the older record.
            Some(older) => {
                if maps.forget_items(&older) {
                    self.losses.bump();
                }
            }
            None => maps.expiring.push(Reverse((expires, response.id.clone()))),
        }
        Ok(())
    }

    pub(super) fn response(&self, id: &str) -> Result<Option<StoredResponse>, StoreError> {
        let maps = self.maps.lock().unwrap_or_else(|e| e.into_inner());
        let now = now_unix();
        Ok(maps
            .responses
            .get(id)
            .filter(|r| !r.is_expired(now))
            .map(|r| StoredResponse::clone(r)))
    }

    pub(super) fn items_by_id(&self, ids: &[String]) -> Result<Vec<Option<StoredItem>>, StoreError> {
        let maps = self.maps.lock().unwrap_or_else(|e| e.into_inner());
        let now = now_unix();
        Ok(ids
            .iter()
            .map(|id| maps.by_id.get(id.as_str()).and_then(|at| at.live(now)))
            .collect())
    }

    pub(super) fn items_by_digest(
        &self,
        digests: &[[u8; 32]],
    ) -> Result<Vec<Option<StoredItem>>, StoreError> {
        let maps = self.maps.lock().unwrap_or_else(|e| e.into_inner());
        let now = now_unix();
        Ok(digests
            .iter()
            .map(|d| maps.by_digest.get(d).and_then(|at| at.live(now)))
            .collect())
    }

    pub(super) fn hit_rate(&self, key: &str, per_minute: NonZeroU32) -> Result<(), Duration> {
        self.limiter.check(key, per_minute)
    }

    /// The budgets' spend counters.
    pub(super) fn counters(&self) -> &LocalCounters {
        &self.counters
    }
}

impl Maps {
    /// Removes the responses expired at `now`, and their items.
    fn sweep(&mut self, now: u64) {
        while let Some(Reverse((expires, _))) = self.expiring.peek() {
            if *expires > now {
                break;
            }
            let Some(Reverse((_, id))) = self.expiring.pop() else {
                break;
            };
            let Some(response) = self.responses.get(&id) else {
                continue;
            };
            if response.is_expired(now) {
                if let Some(response) = self.responses.remove(&id) {
                    self.forget_items(&response);
                }
            } else {
                // Rewritten since with a later expiry.
                let later = response.expires_unix;
                self.expiring.push(Reverse((later, id)));
            }
        }
    }

    /// Removes the index entries that lead to `response` (not those a later record of an
    /// item has taken); whether it removed any.
    fn forget_items(&mut self, response: &Arc<StoredResponse>) -> bool {
        let held_here = |at: Option<&ItemAt>| at.is_some_and(|at| Arc::ptr_eq(&at.response, response));
        let mut removed = false;
        for id in response.item_ids() {
            if held_here(self.by_id.get(id)) {
                self.by_id.remove(id);
                removed = true;
            }
        }
        for digest in response.item_digests() {
            if held_here(self.by_digest.get(digest)) {
                self.by_digest.remove(digest);
                removed = true;
            }
        }
        removed
    }
}

/// The memory store's own tests; what every backend does is in `super::conformance`.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::test_records::one_reasoning_item;

    fn response(id: &str, expires_in: i64) -> StoredResponse {
        holding(id, &format!("rs_0123456789_{id}"), expires_in)
    }

    fn holding(id: &str, item_id: &str, expires_in: i64) -> StoredResponse {
        one_reasoning_item(id, item_id, now_unix().saturating_add_signed(expires_in))
    }

    #[test]
    fn a_later_expired_record_of_a_digest_hides_the_earlier_one() {
        let store = MemoryStore::default();
        store.put_response(&response("resp_1", 60)).unwrap();
        store.put_response(&response("resp_2", -1)).unwrap();
        // Both responses share the digest: the later write wins, and it has expired. (Redis
        // never writes a record already expired, so there the earlier one is found.)
        assert!(store.items_by_digest(&[[7; 32]]).unwrap()[0].is_none());
    }

    fn sizes(store: &MemoryStore) -> (usize, usize, usize, usize) {
        let maps = store.maps.lock().unwrap();
        let (responses, ids, digests) = (maps.responses.len(), maps.by_id.len(), maps.by_digest.len());
        (responses, ids, digests, maps.expiring.len())
    }

    #[test]
    fn each_write_sweeps_out_what_has_expired() {
        let store = MemoryStore::default();
        store.put_response(&response("resp_old", -5)).unwrap();
        assert_eq!(sizes(&store), (1, 1, 1, 1));
        store.put_response(&response("resp_new", 60)).unwrap();
        // resp_old, its item and its place in the queue are gone; the digest both share
        // leads to resp_new.
        assert_eq!(sizes(&store), (1, 1, 1, 1));
        let maps = store.maps.lock().unwrap();
        assert!(maps.responses.contains_key("resp_new") && maps.by_id.contains_key("rs_0123456789_resp_new"));
        assert_eq!(maps.by_digest[&[7; 32]].response.id, "resp_new");
    }

    #[test]
    fn a_rewritten_response_drops_what_it_no_longer_holds_and_lives_to_its_new_expiry() {
        let store = MemoryStore::default();
        store
            .put_response(&holding("resp_1", "rs_0123456789_first", 60))
            .unwrap();
        store
            .put_response(&holding("resp_1", "rs_0123456789_second", 120))
            .unwrap();
        // One response, queued once; the first record's item is gone, the digest both hold
        // leads to the second.
        assert_eq!(sizes(&store), (1, 1, 1, 1));
        assert!(store.items_by_id(&["rs_0123456789_first".into()]).unwrap()[0].is_none());
        let mut maps = store.maps.lock().unwrap();
        let second_expires = maps.responses["resp_1"].expires_unix;
        // Past the first record's expiry, before the second's.
        maps.sweep(second_expires - 30);
        assert!(maps.responses.contains_key("resp_1") && maps.by_id.contains_key("rs_0123456789_second"));
        assert_eq!(
            maps.expiring.peek().map(|Reverse((at, _))| *at),
            Some(second_expires)
        );
        maps.sweep(second_expires);
        let left = (
            maps.responses.len(),
            maps.by_id.len(),
            maps.by_digest.len(),
            maps.expiring.len(),
        );
        assert_eq!(left, (0, 0, 0, 0));
    }
}
