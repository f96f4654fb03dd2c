//! The pending ring: records handed over by the request threads and not yet in the tree, each
//! findable by its keys from the moment its push returns (docs/operations.md#state-backends).
//!
//! A push claims the next slot of a fixed ring, marks the record's keys in a fixed table of
//! atomics (a tag of the key and the slot's sequence number, in the first free place of a short
//! probe from the key's hash) and puts the record's compact form in its slot: no map grows, no
//! cache is kept, nothing is allocated but the record's own buffer. The writer thread takes the
//! records in order, writes them to the tree, the key filter and the recent index, and only then
//! clears their marks and frees their slots, so from its push on a record is always in the ring,
//! or in the tree (and the filter) already. A full ring, or a key with no free place in its
//! probe, fails the push at once (a counted failed record).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::state::key_filter::StoreKey;

/// How many places of the mark table a key may take, from its hash on.
const PROBES: usize = 16;
/// The mark table's places per slot of the ring.
const MARKS_PER_SLOT: usize = 16;
/// The bits of a mark holding the slot's sequence number; the others hold the key's tag.
const SEQ_BITS: u32 = 40;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;

/// Why a push failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PushError {
    /// Every slot holds a record the writer has not finished.
    Full,
    /// A key found no free place in its probe of the mark table.
    NoRoom,
}

/// The ring and its key marks; `T` is what the writer is told along with each record.
#[derive(Debug)]
pub(super) struct Pending<T> {
    slots: Box<[Mutex<Slot<T>>]>,
    /// The next sequence number a push claims.
    tail: AtomicU64,
    /// The oldest sequence number whose slot the writer has not freed.
    head: AtomicU64,
    marks: Box<[AtomicU64]>,
}

#[derive(Debug)]
struct Slot<T> {
    /// The sequence number of what the slot holds.
    seq: u64,
    state: State<T>,
}

#[derive(Debug)]
enum State<T> {
    /// Free, or claimed and not yet filled.
    Empty,
    /// Claimed by a push that failed: the writer passes over it.
    Void,
    /// A record: its compact form, and what goes to the writer (taken once).
    Held { bytes: Vec<u8>, note: Option<T> },
}

/// A record the writer took (its compact form stays in its slot until [`Pending::release`]).
#[derive(Debug)]
pub(super) struct Taken<T> {
    pub(super) seq: u64,
    pub(super) note: T,
}

impl<T> Pending<T> {
    /// A ring of `capacity` slots (rounded up to a power of two), all allocated now.
    pub(super) fn new(capacity: usize) -> Pending<T> {
        let capacity = capacity.max(2).next_power_of_two();
        Pending {
            slots: (0..capacity)
                .map(|_| {
                    Mutex::new(Slot {
                        seq: u64::MAX,
                        state: State::Empty,
                    })
                })
                .collect(),
            tail: AtomicU64::new(0),
            head: AtomicU64::new(0),
            marks: (0..capacity * MARKS_PER_SLOT)
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }

    fn slot(&self, seq: u64) -> std::sync::MutexGuard<'_, Slot<T>> {
        let index = (seq as usize) & (self.slots.len() - 1);
        self.slots[index].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands `bytes` (a compact record) over under `keys`: lookups find it from the return on.
    pub(super) fn push(&self, bytes: Vec<u8>, keys: &[StoreKey], note: T) -> Result<(), PushError> {
        let capacity = self.slots.len() as u64;
        let mut seq = self.tail.load(Ordering::Acquire);
        loop {
            if seq.wrapping_sub(self.head.load(Ordering::Acquire)) >= capacity {
                return Err(PushError::Full);
            }
            match self
                .tail
                .compare_exchange_weak(seq, seq + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now) => seq = now,
            }
        }
        let mut replaced = [0u64; 64];
        for (done, key) in keys.iter().enumerate() {
            match self.mark(key, seq) {
                Some(before) => {
                    if let Some(slot) = replaced.get_mut(done) {
                        *slot = before;
                    }
                }
                None => {
                    for (undone, key) in keys[..done].iter().enumerate() {
                        self.unmark(key, seq, replaced.get(undone).copied().unwrap_or(0));
                    }
                    *self.slot(seq) = Slot {
                        seq,
                        state: State::Void,
                    };
                    return Err(PushError::NoRoom);
                }
            }
        }
        *self.slot(seq) = Slot {
            seq,
            state: State::Held {
                bytes,
                note: Some(note),
            },
        };
        Ok(())
    }

    /// Marks `key` pending in the slot of `seq`: over an older mark of the same key (the
    /// newest record of a key is the one a lookup wants), else in a free place or one whose
    /// slot has been freed. Returns what the place held, or `None` if the probe has no room.
    fn mark(&self, key: &StoreKey, seq: u64) -> Option<u64> {
        let value = mark_of(key, seq);
        let tag = value & !SEQ_MASK;
        let head = self.head.load(Ordering::Acquire);
        let places = || probe(key, self.marks.len());
        let same = places().find_map(|at| {
            let held = self.marks[at].load(Ordering::Acquire);
            (held != 0 && held & !SEQ_MASK == tag).then_some((at, held))
        });
        if let Some((at, held)) = same {
            if self.marks[at]
                .compare_exchange(held, value, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return Some(held);
            }
        }
        places().find_map(|at| {
            let held = self.marks[at].load(Ordering::Acquire);
            let free = held == 0 || self.is_stale(held, head);
            let taken = free
                && self.marks[at]
                    .compare_exchange(held, value, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok();
            taken.then_some(0)
        })
    }

    /// Whether `mark` names a slot the writer has freed (`head` is the oldest it has not).
    fn is_stale(&self, mark: u64, head: u64) -> bool {
        let ahead = (mark & SEQ_MASK).wrapping_sub(head & SEQ_MASK) & SEQ_MASK;
        ahead >= self.slots.len() as u64
    }

    /// Takes `key`'s mark of `seq` away, giving its place back what it held before (`before`,
    /// 0 for nothing), unless another record has marked it since.
    fn unmark(&self, key: &StoreKey, seq: u64, before: u64) {
        let value = mark_of(key, seq);
        for at in probe(key, self.marks.len()) {
            if self.marks[at]
                .compare_exchange(value, before, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }

    /// Whether no record is pending (a lookup's first question).
    pub(super) fn is_empty(&self) -> bool {
        self.head.load(Ordering::Acquire) == self.tail.load(Ordering::Acquire)
    }

    /// `read` of the newest pending record marked under `key` that `read` accepts, with its
    /// sequence number.
    pub(super) fn find<R>(&self, key: &StoreKey, read: impl Fn(&[u8]) -> Option<R>) -> Option<(u64, R)> {
        if self.is_empty() {
            return None;
        }
        let tag = mark_of(key, 0);
        let mut seqs: [u64; PROBES] = [0; PROBES];
        let mut found = 0;
        for at in probe(key, self.marks.len()) {
            let mark = self.marks[at].load(Ordering::Acquire);
            if mark != 0 && mark & !SEQ_MASK == tag {
                seqs[found] = mark & SEQ_MASK;
                found += 1;
            }
        }
        let seqs = &mut seqs[..found];
        seqs.sort_unstable_by(|a, b| b.cmp(a));
        seqs.iter().find_map(|&seq| {
            let slot = self.slot(seq);
            match &slot.state {
                State::Held { bytes, .. } if slot.seq & SEQ_MASK == seq => {
                    read(bytes).map(|found| (slot.seq, found))
                }
                _ => None,
            }
        })
    }

    /// The records pushed from `from` on, in order, up to the first slot not yet filled and
    /// at most `max`: each one's note and `read` of its compact form; and where the next take
    /// starts (void slots are passed over).
    pub(super) fn take<R>(
        &self,
        from: u64,
        max: usize,
        mut read: impl FnMut(&[u8]) -> R,
    ) -> (Vec<(Taken<T>, R)>, u64) {
        let tail = self.tail.load(Ordering::Acquire);
        let mut taken = Vec::new();
        let mut seq = from;
        while seq < tail && taken.len() < max {
            let mut slot = self.slot(seq);
            if slot.seq != seq {
                break;
            }
            match &mut slot.state {
                State::Empty => break,
                State::Void => {}
                State::Held { bytes, note } => {
                    let read = read(bytes);
                    if let Some(note) = note.take() {
                        taken.push((Taken { seq, note }, read));
                    }
                }
            }
            seq += 1;
        }
        (taken, seq)
    }

    /// Frees every slot before `until` (their records are in the tree, the filter and the
    /// recent index, or failed): `keys` gives each record's keys (from its sequence number
    /// and compact form), whose marks go.
    pub(super) fn release(&self, until: u64, mut keys: impl FnMut(u64, &[u8]) -> Vec<StoreKey>) {
        let head = self.head.load(Ordering::Acquire);
        for seq in head..until {
            let mut slot = self.slot(seq);
            if slot.seq == seq {
                if let State::Held { bytes, .. } = &slot.state {
                    keys(seq, bytes).iter().for_each(|key| self.unmark(key, seq, 0));
                }
                slot.state = State::Empty;
            }
        }
        self.head.store(until, Ordering::Release);
    }

    /// The next sequence number a push will claim.
    pub(super) fn tail(&self) -> u64 {
        self.tail.load(Ordering::Acquire)
    }

    /// How many slots the ring has.
    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.slots.len()
    }
}

/// The mark of `key` in the slot of `seq`: the key's tag (never zero) over the sequence number.
fn mark_of(key: &StoreKey, seq: u64) -> u64 {
    let high = u64::from_le_bytes(key.0[8..].try_into().unwrap_or_default());
    let tag = (high >> SEQ_BITS).max(1);
    (tag << SEQ_BITS) | (seq & SEQ_MASK)
}

/// The places of the mark table `key` may take, `len` a power of two.
fn probe(key: &StoreKey, len: usize) -> impl Iterator<Item = usize> {
    let low = u64::from_le_bytes(key.0[..8].try_into().unwrap_or_default()) as usize;
    (0..PROBES).map(move |i| (low + i) & (len - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u32) -> StoreKey {
        StoreKey::of(1, &n.to_le_bytes())
    }

    fn text(bytes: &[u8]) -> Option<String> {
        Some(String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[test]
    fn a_record_is_found_from_its_push_until_its_release_and_the_newest_first() {
        let ring: Pending<u32> = Pending::new(4);
        assert!(ring.find(&key(1), text).is_none());
        ring.push(b"v1".to_vec(), &[key(1), key(2)], 10).unwrap();
        ring.push(b"v2".to_vec(), &[key(1)], 20).unwrap();
        assert_eq!(ring.find(&key(1), text).unwrap().1, "v2");
        assert_eq!(ring.find(&key(2), text).unwrap().1, "v1");
        // The newer record's mark took the older one's place.
        assert!(ring.find(&key(1), |b| (b == b"v1").then_some(())).is_none());
        let (taken, next) = ring.take(0, 10, |b| b.len());
        assert_eq!(next, 2);
        assert_eq!(taken.iter().map(|(t, _)| t.note).collect::<Vec<_>>(), [10, 20]);
        // Taken, still found until released.
        assert_eq!(ring.find(&key(2), text).unwrap().1, "v1");
        ring.release(1, |_, _| vec![key(1), key(2)]);
        assert!(ring.find(&key(2), text).is_none());
        assert_eq!(ring.find(&key(1), text).unwrap().1, "v2");
        ring.release(2, |_, _| vec![key(1)]);
        assert!(ring.is_empty());
        assert!(ring.marks.iter().all(|m| m.load(Ordering::Relaxed) == 0));
    }

    #[test]
    fn a_full_ring_refuses_at_once_and_takes_again_once_released() {
        let ring: Pending<()> = Pending::new(4);
        assert_eq!(ring.capacity(), 4);
        for n in 0..4 {
            ring.push(vec![n as u8], &[key(n)], ()).unwrap();
        }
        assert_eq!(ring.push(vec![9], &[key(9)], ()), Err(PushError::Full));
        assert_eq!(ring.take(0, 2, |_| ()).0.len(), 2);
        ring.release(2, |_, b| vec![key(u32::from(b[0]))]);
        ring.push(vec![4], &[key(4)], ()).unwrap();
        assert!(ring.find(&key(4), |b| Some(b[0])).is_some());
        assert!(ring.find(&key(0), |b| Some(b[0])).is_none());
    }

    #[test]
    fn a_key_with_no_room_voids_its_slot_and_leaves_no_mark() {
        let ring: Pending<()> = Pending::new(4);
        // Keys of one probe (the same low half), each another key (another high half).
        let crowded = |n: u64| {
            let mut bytes = [0u8; 16];
            bytes[8..].copy_from_slice(&(n << 48).to_le_bytes());
            StoreKey(bytes)
        };
        let keys: Vec<StoreKey> = (1..=PROBES as u64 + 1).map(crowded).collect();
        assert_eq!(ring.push(vec![1], &keys, ()), Err(PushError::NoRoom));
        assert!(ring.marks.iter().all(|m| m.load(Ordering::Relaxed) == 0));
        // The void slot is passed over; a record of fewer keys fits.
        let (taken, next) = ring.take(0, 10, |_| ());
        assert!(taken.is_empty());
        assert_eq!(next, 1);
        ring.push(vec![2], &keys[..PROBES], ()).unwrap();
        assert!(ring.find(&keys[3], |b| Some(b[0])).is_some());
    }

    #[test]
    fn records_of_one_key_take_one_place_and_freed_places_are_taken_again() {
        let ring: Pending<()> = Pending::new(4);
        for round in 0..100u64 {
            // Four records sharing a key, then freed without their marks cleared.
            for n in 0..4 {
                ring.push(
                    vec![n],
                    &[key(7), key((round * 4 + u64::from(n)) as u32 + 100)],
                    (),
                )
                .unwrap();
            }
            assert_eq!(ring.find(&key(7), |b| Some(b[0])).unwrap().1, 3);
            let (_, next) = ring.take(round * 4, 4, |_| ());
            ring.release(next, |_, _| Vec::new());
        }
    }
}
