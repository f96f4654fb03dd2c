//! What the ledger said of a kept input's ids and blobs (docs/incremental-judging.md#the-ledger),
//! kept with it so that a body read after it asks the ledger only about what its new items name.
//!
//! A record, once the ledger answered with it, says the same until it expires or the store
//! loses it: records are written once, by the answer that produced the item. So what was
//! recorded is kept, and holds until the earliest expiry among the records relied on
//! ([`KeptFacts::holds_at`]); the caller judges the whole body again when the store may have
//! lost a record since it was asked (its loss epoch changed). What the ledger did not know
//! may become known (a record written later), so every key found unknown is asked again on
//! every later turn: [`KeptFacts::unknown`].
//!
//! Each turn adds a layer over the kept input's facts before it, sharing them; a chain deeper
//! than [`MAX_LAYERS`] is folded into one, so lookups stay short and every fact is weighed by
//! some kept input.

use std::sync::Arc;

use super::provenance::{LedgerQuery, Provenance, StoredItem};

/// The most layers a chain of kept facts has before it is folded into one.
const MAX_LAYERS: usize = 16;

/// The keys the ledger knew nothing of when a kept input was judged: asked again on every
/// later turn.
#[derive(Debug, Clone, Default)]
pub(crate) struct UnknownKeys {
    /// Reasoning, compaction and item_reference ids, as [`LedgerQuery::item_ids`] orders them.
    pub(crate) ids_elsewhere: Vec<String>,
    /// The other item ids.
    pub(crate) ids_other: Vec<String>,
    /// Blob digests.
    pub(crate) digests: Vec<[u8; 32]>,
    /// Ids too short to name one item.
    pub(crate) short_ids: Vec<String>,
}

impl UnknownKeys {
    fn footprint(&self) -> usize {
        let ids = self
            .ids_elsewhere
            .iter()
            .chain(&self.ids_other)
            .chain(&self.short_ids)
            .map(|id| id.len() + 24)
            .sum::<usize>();
        ids + self.digests.len() * 32
    }
}

/// The ledger's records of a kept input's keys, and the keys it did not know.
#[derive(Debug, Default)]
pub struct KeptFacts {
    /// The facts of the input kept before this one.
    earlier: Option<Arc<KeptFacts>>,
    /// How many layers, this one included.
    layers: usize,
    /// The records this layer's keys found: by item id, by blob digest, and the short ids the
    /// ledger knew with their records' expiry (nothing else of a [`Provenance`] is kept).
    records: Provenance,
    /// Every key of the input (every layer's) that the ledger did not know.
    unknown: UnknownKeys,
    /// The earliest expiry among the records of every layer (`u64::MAX` when none).
    expires_unix: u64,
}

impl KeptFacts {
    /// The facts of an input whose ledger query was `query` and answer `answer`, read after
    /// the input `earlier` had (`None`: judged whole; `query` names every key of the input).
    /// `query` holds only the keys asked now: `earlier`'s unknown ones, and the new items'.
    pub(crate) fn after(
        earlier: Option<&Arc<KeptFacts>>,
        query: Option<&LedgerQuery>,
        answer: Option<&Provenance>,
    ) -> KeptFacts {
        let mut layer = KeptFacts {
            earlier: earlier.cloned(),
            layers: earlier.map_or(1, |earlier| earlier.layers + 1),
            expires_unix: earlier.map_or(u64::MAX, |earlier| earlier.expires_unix),
            ..KeptFacts::default()
        };
        let empty = Provenance::default();
        let answer = answer.unwrap_or(&empty);
        if let Some(query) = query {
            let (elsewhere, other) = query.item_ids.split_at(query.item_ids_elsewhere);
            for (ids, unknown) in [
                (elsewhere, &mut layer.unknown.ids_elsewhere),
                (other, &mut layer.unknown.ids_other),
            ] {
                for id in ids {
                    match answer.items.get(id) {
                        Some(stored) => {
                            layer.expires_unix = layer.expires_unix.min(stored.expires_unix);
                            layer.records.items.insert(id.clone(), stored.clone());
                        }
                        None => unknown.push(id.clone()),
                    }
                }
            }
            for digest in &query.digests {
                match answer.encrypted.get(digest) {
                    Some(stored) => {
                        layer.expires_unix = layer.expires_unix.min(stored.expires_unix);
                        layer.records.encrypted.insert(*digest, stored.clone());
                    }
                    None => layer.unknown.digests.push(*digest),
                }
            }
            for id in &query.short_ids {
                match answer.short_ids.get(id) {
                    Some(&expires) => {
                        layer.expires_unix = layer.expires_unix.min(expires);
                        layer.records.short_ids.insert(id.clone(), expires);
                    }
                    None => layer.unknown.short_ids.push(id.clone()),
                }
            }
        }
        if layer.layers > MAX_LAYERS {
            layer.fold();
        }
        layer
    }

    /// Folds every earlier layer into this one.
    fn fold(&mut self) {
        let mut earlier = self.earlier.take();
        while let Some(facts) = earlier {
            self.records.add_missing(&facts.records);
            earlier = facts.earlier.clone();
        }
        self.layers = 1;
    }

    /// The layers, this one first.
    fn layers(&self) -> impl Iterator<Item = &KeptFacts> {
        std::iter::successors(Some(self), |facts| facts.earlier.as_deref())
    }

    /// Whether the records relied on all hold at `now_unix`: none has expired.
    pub fn holds_at(&self, now_unix: u64) -> bool {
        now_unix < self.expires_unix
    }

    /// The earliest expiry among the records relied on (`u64::MAX` when none).
    pub fn expires_unix(&self) -> u64 {
        self.expires_unix
    }

    /// The keys the ledger did not know: asked again on every later turn.
    pub(crate) fn unknown(&self) -> &UnknownKeys {
        &self.unknown
    }

    /// Whether the ledger knew the blob `digest` (of an earlier layer or this one), or was
    /// asked about it.
    pub(crate) fn was_asked_digest(&self, digest: &[u8; 32]) -> bool {
        self.record_of_digest(digest).is_some() || self.unknown.digests.contains(digest)
    }

    /// The record of blob `digest`, when the ledger knew it.
    pub(crate) fn record_of_digest(&self, digest: &[u8; 32]) -> Option<&StoredItem> {
        self.layers()
            .find_map(|facts| facts.records.encrypted.get(digest))
    }

    /// Whether `answer` (the ledger's answer to a query after this input) still knows nothing
    /// of every key this input's ledger did not know.
    pub(crate) fn unknown_still_unknown(&self, answer: &Provenance) -> bool {
        let unknown = &self.unknown;
        !unknown
            .ids_elsewhere
            .iter()
            .chain(&unknown.ids_other)
            .any(|id| answer.items.contains_key(id))
            && !unknown
                .digests
                .iter()
                .any(|digest| answer.encrypted.contains_key(digest))
            && !unknown
                .short_ids
                .iter()
                .any(|id| answer.short_ids.contains_key(id))
    }

    /// `answer` with every record kept here added: what the ledger's answer to the whole
    /// body's query is, while these facts hold.
    pub(crate) fn merged_into(&self, mut answer: Provenance) -> Provenance {
        for facts in self.layers() {
            answer.add_missing(&facts.records);
        }
        answer
    }

    /// Roughly the memory this layer holds, in bytes (earlier layers are weighed with the
    /// inputs that made them).
    pub fn footprint(&self) -> usize {
        let stored = |stored: &StoredItem| {
            std::mem::size_of::<StoredItem>()
                + stored.response_id.len()
                + stored.owner.provider.len()
                + stored.owner.model.as_ref().map_or(0, String::len)
                + stored.record.id.as_ref().map_or(0, String::len)
                + stored.record.call_id.as_ref().map_or(0, String::len)
                + stored.record.preceded_by.as_ref().map_or(0, String::len)
                + stored.team.as_ref().map_or(0, String::len)
        };
        std::mem::size_of::<Self>()
            + (self.records.items.iter())
                .map(|(id, s)| id.len() + 16 + stored(s))
                .sum::<usize>()
            + (self.records.encrypted.values())
                .map(|s| 40 + stored(s))
                .sum::<usize>()
            + (self.records.short_ids.keys())
                .map(|id| id.len() + 40)
                .sum::<usize>()
            + self.unknown.footprint()
    }
}
