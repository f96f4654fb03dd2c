//! The `memory` backend: maps in this process, swept of expired entries as they grow.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{now_unix, StoreError};
use crate::ledger::{StoredItem, StoredResponse};
use crate::proxy::rate_limit::{LocalRateLimiter, RateLimiter};

/// The `memory` backend. Clones share the same maps.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    maps: Arc<Mutex<Maps>>,
    limiter: Arc<LocalRateLimiter>,
}

#[derive(Debug, Default)]
struct Maps {
    responses: HashMap<String, StoredResponse>,
    by_id: HashMap<String, StoredItem>,
    by_digest: HashMap<[u8; 32], StoredItem>,
    /// Entries written since the last sweep.
    writes: usize,
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
        let mut maps = self.maps.lock().unwrap_or_else(|e| e.into_inner());
        for (id, item) in response.by_id() {
            maps.by_id.insert(id.to_owned(), item);
        }
        for (digest, item) in response.by_digest() {
            maps.by_digest.insert(digest, item);
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
        Ok(maps.responses.get(id).filter(|r| !r.is_expired(now)).cloned())
    }

    pub(super) fn items_by_id(&self, ids: &[String]) -> Result<Vec<Option<StoredItem>>, StoreError> {
        let maps = self.maps.lock().unwrap_or_else(|e| e.into_inner());
        let now = now_unix();
        Ok(ids.iter().map(|id| live(maps.by_id.get(id), now)).collect())
    }

    pub(super) fn items_by_digest(
        &self,
        digests: &[[u8; 32]],
    ) -> Result<Vec<Option<StoredItem>>, StoreError> {
        let maps = self.maps.lock().unwrap_or_else(|e| e.into_inner());
        let now = now_unix();
        Ok(digests.iter().map(|d| live(maps.by_digest.get(d), now)).collect())
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

fn live(item: Option<&StoredItem>, now: u64) -> Option<StoredItem> {
    item.filter(|item| now < item.expires_unix).cloned()
}

impl Maps {
    fn sweep(&mut self, now: u64) {
        self.responses.retain(|_, r| !r.is_expired(now));
        self.by_id.retain(|_, item| now < item.expires_unix);
        self.by_digest.retain(|_, item| now < item.expires_unix);
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
        let mut maps = Maps::default();
        let stored = response("resp_old", -5);
        maps.responses.insert(stored.id.clone(), stored.clone());
        for (id, item) in stored.by_id() {
            maps.by_id.insert(id.to_owned(), item);
        }
        maps.sweep(now_unix());
        assert!(maps.responses.is_empty() && maps.by_id.is_empty());
    }
}
