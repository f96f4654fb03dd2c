//! The `memory` backend: maps in this process, swept of expired entries as they grow.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use foldhash::fast::RandomState;

use super::{now_unix, StoreError};
use crate::ledger::{StoredItem, StoredResponse};
use crate::proxy::rate_limit::{LocalRateLimiter, RateLimiter};

/// The `memory` backend. Clones share the same maps.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    maps: Arc<Mutex<Maps>>,
    limiter: Arc<LocalRateLimiter>,
}

/// The records, each held once: the item indexes point into the response that holds the item.
#[derive(Debug, Default)]
struct Maps {
    responses: HashMap<String, Arc<StoredResponse>, RandomState>,
    by_id: HashMap<Box<str>, ItemAt, RandomState>,
    by_digest: HashMap<[u8; 32], ItemAt, RandomState>,
    /// Entries written since the last sweep.
    writes: usize,
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

/// A sweep of expired entries runs after this many writes and once the maps hold more
/// entries than this.
const SWEEP_EVERY: usize = 4096;

impl MemoryStore {
    pub(super) fn put_response(&self, response: &StoredResponse) -> Result<(), StoreError> {
        self.record_response(response.clone())
    }

    /// [`MemoryStore::put_response`], keeping `response` itself.
    pub(super) fn record_response(&self, response: StoredResponse) -> Result<(), StoreError> {
        let response = Arc::new(response);
        let mut maps = self.maps.lock().unwrap_or_else(|e| e.into_inner());
        for (index, item) in response.items.iter().enumerate() {
            let at = || ItemAt {
                response: response.clone(),
                index,
            };
            if let Some(id) = item.id.as_deref().filter(|id| crate::ledger::names_one_item(id)) {
                maps.by_id.insert(id.into(), at());
            }
            if item.has_encrypted_content {
                maps.by_digest.insert(item.digest, at());
            }
        }
        maps.responses.insert(response.id.clone(), response);
        maps.writes += 1;
        if maps.writes >= SWEEP_EVERY {
            maps.sweep(now_unix());
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

    /// How many responses are held (expired ones included until swept).
    pub fn len(&self) -> usize {
        self.maps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .responses
            .len()
    }

    /// Whether no response is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Maps {
    fn sweep(&mut self, now: u64) {
        self.responses.retain(|_, r| !r.is_expired(now));
        self.by_id.retain(|_, at| !at.response.is_expired(now));
        self.by_digest.retain(|_, at| !at.response.is_expired(now));
        self.writes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{ItemRecord, Owner, ResponseRecord};

    fn response(id: &str, expires_in: i64) -> StoredResponse {
        let now = now_unix();
        let item = ItemRecord {
            id: Some(format!("rs_0123456789_{id}")),
            item_type: "reasoning".into(),
            call_id: None,
            digest: [7; 32],
            has_encrypted_content: true,
        };
        let record = ResponseRecord {
            id: id.into(),
            model: Some("m".into()),
            items: vec![item],
        };
        let owner = Owner {
            provider: "openai".into(),
            model: Some("m".into()),
        };
        let mut stored = StoredResponse::new(record, owner, None, None, now, 60);
        stored.expires_unix = now.saturating_add_signed(expires_in);
        stored
    }

    #[test]
    fn a_response_and_its_items_are_found_until_they_expire() {
        let store = MemoryStore::default();
        store.put_response(&response("resp_1", 60)).unwrap();
        store.put_response(&response("resp_2", -1)).unwrap();
        assert!(store.response("resp_1").unwrap().is_some());
        assert!(store.response("resp_2").unwrap().is_none());
        let ids = [
            "rs_0123456789_resp_1".to_owned(),
            "rs_0123456789_resp_2".to_owned(),
            "nope".to_owned(),
        ];
        let found = store.items_by_id(&ids).unwrap();
        assert_eq!(found[0].as_ref().unwrap().response_id, "resp_1");
        assert!(found[1].is_none() && found[2].is_none());
        // Both responses share the digest: the later write wins, and it has expired.
        assert!(store.items_by_digest(&[[7; 32]]).unwrap()[0].is_none());
    }

    #[test]
    fn a_sweep_forgets_expired_entries() {
        let store = MemoryStore::default();
        store.put_response(&response("resp_old", -5)).unwrap();
        store.put_response(&response("resp_new", 60)).unwrap();
        let mut maps = store.maps.lock().unwrap();
        assert_eq!(
            (maps.responses.len(), maps.by_id.len(), maps.by_digest.len()),
            (2, 2, 1)
        );
        maps.sweep(now_unix());
        assert_eq!(
            (maps.responses.len(), maps.by_id.len(), maps.by_digest.len()),
            (1, 1, 1)
        );
        assert!(maps.responses.contains_key("resp_new") && maps.by_id.contains_key("rs_0123456789_resp_new"));
    }
}
