//! The records the store wrote or read lately, kept in memory to answer the next turn's lookups.
//!
//! An agent's next request names what the provider just produced: the response it continues
//! and the items it replays. The embedded store answers those from here, without a read on the
//! blocking pool. Entries are added when a record is handed to the writer (a queued record),
//! once its write is committed (a put that waits), and after a read of the tree found it,
//! unless the cache has meanwhile taken or dropped a record that may be newer (a read racing a
//! rewrite must not put back the older record).
//!
//! Responses are held in the order they were remembered, each once, weighed by the size of its
//! encoded form (a queued record, which the writer encodes later, by the size reckoned for it); the oldest go first once the weight is over the budget, and one looked up in
//! the older half moves to the newest end, so what keeps being read stays. One map leads from
//! each key of a held response (its own, its items' ids and digests, as the tree's keyspaces key
//! them) to the place of the newest response that holds it, so an item is read from its
//! response as that response now stands. An expired entry reads as absent, as it does from
//! the tree.

use std::collections::hash_map::Entry as Slot;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use foldhash::fast::RandomState;

use super::tables::{record_keys, response_key};
use crate::ledger::StoredResponse;
use crate::state::key_filter::StoreKey;

/// What a response weighs besides its encoding, and each of its keys.
const RESPONSE_OVERHEAD: u64 = 64;
const KEY_OVERHEAD: u64 = 48;

/// Recently written or read responses, up to a total weight.
#[derive(Debug)]
pub(crate) struct Recent {
    held: Mutex<Held>,
    /// The most records remembered but not yet in the tree at any time (the writer's queue
    /// and the batch it is writing).
    uncommitted: u64,
}

#[derive(Debug)]
struct Held {
    /// Oldest first; the response at index `i` has the sequence number `first + i`.
    responses: VecDeque<Entry>,
    first: u64,
    /// Each key of a held response, and the sequence number of the newest one holding it.
    keys: HashMap<StoreKey, u64, RandomState>,
    weight: u64,
    budget: u64,
    /// How many records [`Recent::remember`] has taken.
    remembered: u64,
    /// The highest `remembered` number of a record dropped (0: none).
    dropped_up_to: u64,
}

#[derive(Debug)]
struct Entry {
    response: Arc<StoredResponse>,
    /// The keys it was held under ([`record_keys`]), so dropping or moving it reads neither
    /// its (by then cold) record nor hashes its ids again.
    keys: Arc<[StoreKey]>,
    weight: u64,
    /// Its number among the records remembered (1 on), or 0 for a record read from the tree.
    remembered: u64,
}

impl Recent {
    /// A cache holding responses of at most `bytes` encoded bytes in all, for a writer that
    /// has at most `uncommitted` of the records remembered not yet in the tree.
    pub(super) fn new(bytes: u64, uncommitted: u64) -> Recent {
        Recent {
            held: Mutex::new(Held {
                responses: VecDeque::new(),
                first: 0,
                keys: HashMap::default(),
                weight: 0,
                budget: bytes,
                remembered: 0,
                dropped_up_to: 0,
            }),
            uncommitted,
        }
    }

    /// The most encoded bytes it holds.
    #[cfg(test)]
    pub(super) fn budget(&self) -> u64 {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).budget
    }

    /// Remembers `response`, whose encoding is `encoded` bytes long, under `keys` (its
    /// [`record_keys`]); the oldest responses go until the whole is within the budget again.
    pub(super) fn remember(&self, response: Arc<StoredResponse>, encoded: usize, keys: Arc<[StoreKey]>) {
        let weight = weigh(encoded, keys.len());
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if weight <= held.budget {
            held.hold(response, weight, keys, Source::Written);
        }
    }

    /// Where the cache stands before a read of the tree, for [`Recent::fill`] after it: how
    /// many records it has remembered.
    pub(super) fn mark(&self) -> u64 {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).remembered
    }

    /// Remembers `response`, read from the tree in a read that began at `mark`, so the next
    /// lookups of it need no read. Not when the cache holds a record of it already (the same
    /// or newer), nor when it has dropped a record that may have been newer than the tree's:
    /// one remembered after the mark, or one of the last `uncommitted` before it (which the
    /// read may have found not yet written). Of its keys, only those no held response has
    /// are taken.
    pub(super) fn fill(&self, response: Arc<StoredResponse>, encoded: usize, mark: u64) {
        let keys: Arc<[StoreKey]> = record_keys(&response).collect();
        let weight = weigh(encoded, keys.len());
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let dropped_one_maybe_newer = held.dropped_up_to > mark.saturating_sub(self.uncommitted);
        // The response's own key comes first.
        if weight > held.budget || dropped_one_maybe_newer || held.keys.contains_key(&keys[0]) {
            return;
        }
        held.hold(response, weight, keys, Source::Read);
    }

    /// The response holding `key` (a key of any kind, from [`super::tables`]) as it now
    /// stands, if remembered and live at `now`. The caller checks that it holds what it
    /// asked for. A response found in the older half of the cache moves to the newest end,
    /// so what the next turns keep reading stays while the cache turns over.
    pub(super) fn holder(&self, key: &StoreKey, now: u64) -> Option<Arc<StoredResponse>> {
        self.find(key, now, true)
    }

    /// [`Recent::holder`], moving what it finds to the newest end only if `keep_read`.
    fn find(&self, key: &StoreKey, now: u64, keep_read: bool) -> Option<Arc<StoredResponse>> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let sequence = *held.keys.get(key)?;
        let response = held.at(sequence)?.response.clone();
        // A response written again since leads to its newest record, which may not hold
        // the key any more.
        let newest = held.keys.get(&response_key(&response.id)) == Some(&sequence);
        if !newest || response.is_expired(now) {
            return None;
        }
        if keep_read && sequence - held.first < held.responses.len() as u64 / 2 {
            held.move_to_newest(sequence);
        }
        Some(response)
    }
}

/// What a response encoded in `encoded` bytes, with `keys` keys, counts for against the
/// budget.
fn weigh(encoded: usize, keys: usize) -> u64 {
    (encoded + keys * KEY_OVERHEAD as usize) as u64 + RESPONSE_OVERHEAD
}

/// Where a response the cache takes comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// Handed to the writer, or written: it is the newest record of each of its keys.
    Written,
    /// Read from the tree: it takes only keys no held response has, and is not counted among
    /// the records remembered (it is in the tree already).
    Read,
}

impl Held {
    /// Holds `response` at the newest end under `keys`, as `source` says.
    fn hold(&mut self, response: Arc<StoredResponse>, weight: u64, keys: Arc<[StoreKey]>, source: Source) {
        let sequence = self.next();
        for key in keys.iter() {
            match source {
                Source::Written => {
                    self.keys.insert(*key, sequence);
                }
                Source::Read => {
                    self.keys.entry(*key).or_insert(sequence);
                }
            }
        }
        let remembered = match source {
            Source::Written => {
                self.remembered += 1;
                self.remembered
            }
            Source::Read => 0,
        };
        self.push(Entry {
            response,
            keys,
            weight,
            remembered,
        });
    }

    /// The sequence number the next response held gets.
    fn next(&self) -> u64 {
        self.first + self.responses.len() as u64
    }

    /// Holds `entry` at the newest end, then drops the oldest until within the budget.
    fn push(&mut self, entry: Entry) {
        self.weight += entry.weight;
        self.responses.push_back(entry);
        while self.weight > self.budget {
            self.forget_oldest();
        }
    }

    fn at(&self, sequence: u64) -> Option<&Entry> {
        self.responses
            .get(usize::try_from(sequence.checked_sub(self.first)?).ok()?)
    }

    /// Holds the response at `sequence` again at the newest end; its old place weighs
    /// nothing and leads nowhere until it is dropped in turn.
    fn move_to_newest(&mut self, sequence: u64) {
        let Some(entry) = usize::try_from(sequence - self.first)
            .ok()
            .and_then(|i| self.responses.get_mut(i))
        else {
            return;
        };
        let moved = Entry {
            response: entry.response.clone(),
            keys: std::mem::take(&mut entry.keys),
            weight: std::mem::take(&mut entry.weight),
            remembered: std::mem::take(&mut entry.remembered),
        };
        let newest = self.next();
        for key in moved.keys.iter() {
            if let Some(at) = self.keys.get_mut(key).filter(|at| **at == sequence) {
                *at = newest;
            }
        }
        self.responses.push_back(moved);
    }

    /// Drops the oldest response and the keys that still lead to it.
    fn forget_oldest(&mut self) {
        let Some(entry) = self.responses.pop_front() else {
            return;
        };
        let sequence = self.first;
        self.first += 1;
        self.weight -= entry.weight;
        self.dropped_up_to = self.dropped_up_to.max(entry.remembered);
        for key in entry.keys.iter() {
            if let Slot::Occupied(slot) = self.keys.entry(*key) {
                if *slot.get() == sequence {
                    slot.remove();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tables::{digest_key, item_key};
    use super::*;
    use crate::state::test_records::one_reasoning_item;

    /// What each response of these tests weighs: 1,000 bytes encoded, and three keys (its id,
    /// its item's id and digest).
    const ONE: u64 = 1_000 + RESPONSE_OVERHEAD + 3 * KEY_OVERHEAD;

    fn response(id: &str, item_id: &str) -> Arc<StoredResponse> {
        Arc::new(one_reasoning_item(id, item_id, 60))
    }

    /// Remembers response `id` holding `item_id`, encoded in `encoded` bytes, as a write does.
    fn remember(recent: &Recent, id: &str, item_id: &str, encoded: usize) {
        let response = response(id, item_id);
        let keys: Arc<[StoreKey]> = record_keys(&response).collect();
        recent.remember(response, encoded, keys);
    }

    /// Remembers `resp_{i}` holding `rs_0123456789_item_{i}` for each `i` of `range`, each
    /// encoded in 1,000 bytes.
    fn remember_others(recent: &Recent, range: std::ops::Range<u32>) {
        for i in range {
            remember(
                recent,
                &format!("resp_{i}"),
                &format!("rs_0123456789_item_{i}"),
                1_000,
            );
        }
    }

    fn item(recent: &Recent, id: &str, now: u64) -> Option<String> {
        let holder = recent.holder(&item_key(id), now)?;
        Some(holder.item_by_id(id)?.response_id)
    }

    #[test]
    fn an_item_is_found_through_its_response_as_it_now_stands() {
        let recent = Recent::new(64 * 1024, 0);
        remember(&recent, "resp_1", "rs_0123456789abcdef", 300);
        assert_eq!(item(&recent, "rs_0123456789abcdef", 1).as_deref(), Some("resp_1"));
        let by_digest = recent.holder(&digest_key(&[7; 32]), 1).unwrap();
        assert_eq!(by_digest.item_by_digest(&[7; 32]).unwrap().response_id, "resp_1");
        // Expired with its response.
        assert!(item(&recent, "rs_0123456789abcdef", 60).is_none());
        // The response written again without the item: the item's key leads nowhere.
        remember(&recent, "resp_1", "rs_another_item_0001", 300);
        assert!(item(&recent, "rs_0123456789abcdef", 1).is_none());
        assert!(item(&recent, "rs_another_item_0001", 1).is_some());
        assert_eq!(
            recent.holder(&response_key("resp_1"), 1).unwrap().items[0]
                .id
                .as_deref(),
            Some("rs_another_item_0001")
        );
    }

    #[test]
    fn an_item_is_not_held_without_its_response() {
        // A response heavier than the whole cache is not kept; its items' keys find nothing.
        let recent = Recent::new(1024, 0);
        remember(&recent, "resp_big", "rs_0123456789abcdef", 1 << 20);
        assert!(recent.holder(&response_key("resp_big"), 1).is_none());
        assert!(item(&recent, "rs_0123456789abcdef", 1).is_none());
    }

    #[test]
    fn the_oldest_go_first_and_take_their_keys_with_them() {
        let recent = Recent::new(3 * ONE, 0);
        remember_others(&recent, 0..5);
        let held = recent.held.lock().unwrap();
        assert_eq!((held.responses.len(), held.weight, held.first), (3, 3 * ONE, 2));
        // Every key leads to a held response: the two forgotten ones' ids and items are gone,
        // and the digest all five share leads to the newest.
        assert_eq!(held.keys.len(), 3 + 3 + 1);
        drop(held);
        for i in 0..5 {
            let kept = i >= 2;
            assert_eq!(
                recent.holder(&response_key(&format!("resp_{i}")), 1).is_some(),
                kept
            );
            assert_eq!(
                item(&recent, &format!("rs_0123456789_item_{i}"), 1).is_some(),
                kept
            );
        }
        let by_digest = recent.holder(&digest_key(&[7; 32]), 1).unwrap();
        assert_eq!(by_digest.id, "resp_4");
    }

    #[test]
    fn what_is_read_stays_while_the_cache_turns_over() {
        let recent = Recent::new(4 * ONE, 0);
        remember(&recent, "resp_hot", "rs_0123456789_hot", 1_000);
        // Forty more responses, the hot one read after each: without the move it would go
        // with the fourth.
        for i in 0..40 {
            remember(
                &recent,
                &format!("resp_{i}"),
                &format!("rs_0123456789_item_{i}"),
                1_000,
            );
            assert_eq!(
                item(&recent, "rs_0123456789_hot", 1).as_deref(),
                Some("resp_hot"),
                "after {i}"
            );
        }
        let held = recent.held.lock().unwrap();
        // Within the budget, the moved places weighing nothing; the keys are each held
        // response's id and item id, and the digest they all share.
        assert!(held.weight <= 4 * ONE);
        let live = held.responses.iter().filter(|e| e.weight > 0).count();
        assert_eq!(live, 4);
        assert_eq!(held.keys.len(), 2 * live + 1);
        drop(held);
        // The responses not read went in order.
        assert!(recent.holder(&response_key("resp_0"), 1).is_none());
        assert!(recent.holder(&response_key("resp_39"), 1).is_some());
    }

    #[test]
    fn a_read_record_is_kept_unless_a_newer_one_may_have_come_since() {
        let recent = Recent::new(3 * ONE, 0);
        // Kept: nothing came since the read began.
        let mark = recent.mark();
        recent.fill(response("resp_read", "rs_0123456789_read"), 1_000, mark);
        assert_eq!(
            item(&recent, "rs_0123456789_read", 1).as_deref(),
            Some("resp_read")
        );
        // A newer record of it remembered while the read ran: the read one is not kept.
        let mark = recent.mark();
        remember(&recent, "resp_new", "rs_0123456789_newer", 1_000);
        recent.fill(response("resp_new", "rs_0123456789_older"), 1_000, mark);
        assert!(item(&recent, "rs_0123456789_older", 1).is_none());
        assert!(item(&recent, "rs_0123456789_newer", 1).is_some());
        // A record remembered since the read began has been dropped (it may have been a newer
        // record of what was read): not kept.
        let mark = recent.mark();
        remember_others(&recent, 0..3);
        remember(&recent, "resp_3", "rs_0123456789_item_3", 1_000);
        recent.fill(response("resp_gone", "rs_0123456789_gone"), 1_000, mark);
        assert!(recent.holder(&response_key("resp_gone"), 1).is_none());
        // A read record takes only the keys no held response has: the digest all share still
        // leads to the newest one remembered.
        let mark = recent.mark();
        recent.fill(response("resp_late", "rs_0123456789_late"), 1_000, mark);
        assert_eq!(
            item(&recent, "rs_0123456789_late", 1).as_deref(),
            Some("resp_late")
        );
        assert_eq!(recent.holder(&digest_key(&[7; 32]), 1).unwrap().id, "resp_3");
    }

    #[test]
    fn a_rewritten_response_keeps_the_keys_its_older_record_shares() {
        // resp_a's first record goes out of the cache after its rewrite: the keys the rewrite
        // holds too must stay.
        let recent = Recent::new(2 * ONE, 0);
        remember(&recent, "resp_a", "rs_0123456789_same", 1_000);
        remember(&recent, "resp_a", "rs_0123456789_same", 1_000);
        remember(&recent, "resp_b", "rs_0123456789_b", 1_000);
        assert_eq!(item(&recent, "rs_0123456789_same", 1).as_deref(), Some("resp_a"));
        assert!(recent.holder(&response_key("resp_a"), 1).is_some());
    }

    #[test]
    fn a_read_that_missed_a_record_not_yet_written_is_not_kept_once_that_record_has_gone() {
        // The writer may be two records behind. resp_a's second record is remembered but not
        // yet written when a read finds the first in the tree; six other records then push
        // the second out of a cache of six. The read's record is older than one remembered:
        // it is not kept, and resp_a reads from the tree again (now its second record).
        let recent = Recent::new(6 * ONE, 2);
        remember(&recent, "resp_a", "rs_0123456789_a_v1", 1_000);
        remember(&recent, "resp_a", "rs_0123456789_a_v2", 1_000);
        let mark = recent.mark();
        remember_others(&recent, 0..6);
        assert!(recent.holder(&response_key("resp_a"), 1).is_none());
        recent.fill(response("resp_a", "rs_0123456789_a_v1"), 1_000, mark);
        assert!(recent.holder(&response_key("resp_a"), 1).is_none());
        // Two records later (the writer's lag), a read is sure to find what was dropped: kept.
        remember_others(&recent, 6..8);
        let mark = recent.mark();
        recent.fill(response("resp_a", "rs_0123456789_a_v2"), 1_000, mark);
        assert_eq!(item(&recent, "rs_0123456789_a_v2", 1).as_deref(), Some("resp_a"));
    }

    /// A step of the model below.
    #[derive(Debug, Clone)]
    enum Step {
        /// A new record of response `0` (its next version) is queued and remembered.
        Remember(usize),
        /// The writer commits the oldest queued record.
        Commit,
        /// A lookup of response `0` reads the tree (as committed now).
        StartRead(usize),
        /// A read in flight (the `0`th, modulo those in flight) hands back what it read.
        FinishRead(usize),
        /// A lookup of response `0` in the cache (which moves what it finds).
        Look(usize),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            6 => (0..3usize).prop_map(Step::Remember),
            2 => Just(Step::Commit),
            1 => (0..3usize).prop_map(Step::StartRead),
            1 => (0..4usize).prop_map(Step::FinishRead),
            2 => (0..3usize).prop_map(Step::Look),
        ]
    }

    /// The version of the record held under `key`, if any (looked at without moving it).
    fn held_version(recent: &Recent, key: &StoreKey) -> Option<usize> {
        let response = recent.find(key, 1, false)?;
        let item = response.items[0].id.as_deref()?;
        Some(item.rsplit("_v").next()?.parse().unwrap())
    }

    fn item_of(i: usize, version: usize) -> String {
        format!("rs_0123456789_{i}_v{version}")
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]

        /// Records of three responses are rewritten, committed late and read from the tree
        /// in any order (a read may last while the cache, six records, turns over many
        /// times), with the writer at most two records behind: the cache never gives an
        /// older record of a response than the newest one remembered, nor an item only an
        /// older record held.
        #[test]
        fn the_cache_never_gives_an_older_record(steps in proptest::collection::vec(step(), 1..120)) {
            const LAG: usize = 2;
            const HOLDS: u64 = 6;
            let recent = Recent::new(HOLDS * ONE, LAG as u64);
            let mut latest = [0usize; 3];
            let mut committed = [0usize; 3];
            let mut queued: VecDeque<(usize, usize)> = VecDeque::new();
            // Reads in flight: the response, the mark, the version read.
            let mut reads: Vec<(usize, u64, usize)> = Vec::new();
            let finish = |recent: &Recent, (i, mark, version): (usize, u64, usize)| {
                if version > 0 {
                    recent.fill(Arc::new(one_reasoning_item(&format!("resp_{i}"), &item_of(i, version), 60)), 1_000, mark);
                }
            };
            for step in steps {
                match step {
                    Step::Remember(i) => {
                        if queued.len() >= LAG {
                            let (c, v) = queued.pop_front().unwrap();
                            committed[c] = committed[c].max(v);
                        }
                        latest[i] += 1;
                        queued.push_back((i, latest[i]));
                        remember(&recent, &format!("resp_{i}"), &item_of(i, latest[i]), 1_000);
                    }
                    Step::Commit => {
                        if let Some((c, v)) = queued.pop_front() {
                            committed[c] = committed[c].max(v);
                        }
                    }
                    Step::StartRead(i) => reads.push((i, recent.mark(), committed[i])),
                    Step::FinishRead(k) => {
                        if !reads.is_empty() {
                            let read = reads.remove(k % reads.len());
                            finish(&recent, read);
                        }
                    }
                    Step::Look(i) => {
                        recent.holder(&response_key(&format!("resp_{i}")), 1);
                    }
                }
                for (i, &newest) in latest.iter().enumerate() {
                    let held = held_version(&recent, &response_key(&format!("resp_{i}")));
                    proptest::prop_assert!(held.is_none() || held == Some(newest), "resp_{} held v{:?}, latest v{}", i, held, newest);
                    for older in 1..newest {
                        proptest::prop_assert!(recent.find(&item_key(&item_of(i, older)), 1, false).is_none());
                    }
                }
            }
        }
    }
}
