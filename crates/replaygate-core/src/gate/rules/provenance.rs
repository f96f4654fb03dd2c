//! The provenance rules (docs/ledger.md), run only when the target carries what the ledger knows
//! ([`Provenance`]). What the ledger does not know is never a violation.
//!
//! - `foreign_previous_response`: the response `previous_response_id` names was recorded for
//!   another provider.
//! - `foreign_encrypted_content`: a reasoning or compaction item whose `encrypted_content` (by
//!   its digest) was recorded for another provider, or for another model when the target
//!   binds encrypted reasoning to the model.
//! - `foreign_item_reference`: an `item_reference`, or a reasoning or compaction item with no
//!   `encrypted_content`, whose `id` another provider stored (it alone can resolve it).
//! - `item_tampered`: an item whose `id` was recorded with another digest.
//!
//! An item's other members (`encrypted_content`, a message's text, ...) are read again only
//! for items the ledger has something to say about.
//!
//! Ids are not always unique: Bedrock Mantle numbers them per response (`rs_0`, `fc_0`,
//! `msg_0` in every turn). So a blob the ledger knows is judged by its digest's record alone
//! (its id may name another item), and an id that occurs twice in one request is not judged
//! at all (it names no single item).

use std::collections::{HashMap, HashSet};

use foldhash::fast::RandomState;

use super::{Finding, Param};
use crate::gate::item::{Item, ItemClass};
use crate::gate::profile::{EncryptedScope, ProviderProfile};
use crate::gate::provenance::StoredItem;
use crate::gate::provenance::{blob_digest, carries_blobs, whole_digest, ItemTexts, Provenance};
use crate::gate::request::{ItemsAt, ParsedRequest};
use crate::gate::verdict::Reason;

/// What the rules read of one item beyond the gate's first reading.
#[derive(Debug)]
struct ItemFacts {
    /// The digest of each non-null `encrypted_content` (reasoning and compaction only).
    blobs: Vec<[u8; 32]>,
    /// The item's ledger digest, when there is one to compare: an item of another kind, or a
    /// reasoning or compaction item with exactly one blob.
    digest: Option<[u8; 32]>,
}

/// The provenance rules for one request and target.
#[derive(Debug)]
pub(super) struct ProvenanceRules<'p> {
    provenance: &'p Provenance,
    provider: &'p ProviderProfile,
    /// The request's `model`, for providers that bind reasoning to the model.
    model: Option<&'p str>,
    /// The facts of the items that need them, by position.
    facts: HashMap<usize, ItemFacts, RandomState>,
    /// Recorded ids that occur more than once among the request's items: not judged.
    repeated: HashSet<&'p str, RandomState>,
}

impl<'p> ProvenanceRules<'p> {
    /// The rules for `request`, reading again only the items the ledger recorded something
    /// about: a reasoning or compaction item when the ledger knows some blob or its id, any
    /// other item (bar item_reference, which has nothing else) when its id is recorded.
    pub(super) fn new(
        request: &'p ParsedRequest<'_>,
        provenance: &'p Provenance,
        provider: &'p ProviderProfile,
    ) -> Self {
        let items = request.items();
        let repeated = repeated_ids(items, provenance);
        let wanted: Vec<usize> = items
            .iter()
            .enumerate()
            .filter(|(_, item)| {
                let recorded = recorded(provenance, item)
                    .is_some_and(|_| !item.id().is_some_and(|id| repeated.contains(id)));
                match item.class {
                    ItemClass::Reasoning | ItemClass::Compaction => {
                        recorded || !provenance.encrypted.is_empty()
                    }
                    ItemClass::ItemReference => false,
                    _ => recorded,
                }
            })
            .map(|(index, _)| index)
            .collect();
        let mut facts = HashMap::with_capacity_and_hasher(wanted.len(), RandomState::default());
        // Only an item judged by its whole digest (`item_tampered`) needs its text, found by a
        // second reading of the body; a blob's digest comes from the request's one parse.
        let texts = match wanted.iter().any(|&index| !carries_blobs(&items[index])) {
            true => ItemTexts::read(request, request.body_text().as_bytes()),
            false => None,
        };
        for index in wanted {
            let item = &items[index];
            let item_facts = if carries_blobs(item) {
                let digest = blob_digest(item);
                ItemFacts {
                    blobs: digest.into_iter().collect(),
                    digest,
                }
            } else {
                let Some(text) = texts.as_ref().and_then(|texts| texts.get(index)) else {
                    continue;
                };
                ItemFacts {
                    blobs: Vec::new(),
                    digest: whole_digest(item, text),
                }
            };
            facts.insert(index, item_facts);
        }
        Self {
            provenance,
            provider,
            model: request.model(),
            facts,
            repeated,
        }
    }

    /// The ledger's record of the item's `id`, unless the id repeats in the request.
    fn recorded(&self, item: &Item<'_>) -> Option<&'p StoredItem> {
        let id = item.id()?;
        if self.repeated.contains(id) {
            return None;
        }
        self.provenance.items.get(id)
    }

    /// `foreign_previous_response`: the previous response's id and the message, when another
    /// provider produced it. The message says how to go on: with `carry_sessions` off, that
    /// turning it on lets an unmodified client continue; with it on, why this chain was not
    /// carried.
    pub(super) fn foreign_previous(
        &self,
        request: &ParsedRequest<'_>,
        carry_sessions: bool,
    ) -> Option<(String, String)> {
        let id = request.previous_response_id.as_str()?;
        let owner = &self.provenance.previous.as_ref()?.owner;
        (owner.provider != self.provider.name()).then(|| {
            let how = match carry_sessions {
                false => {
                    "send the history as input items instead, or set [ledger] carry_sessions = true \
                     (with store_items = true) and replaygate carries such a session to the new \
                     provider itself"
                }
                true => {
                    "its session could not be carried: not every response of its chain is \
                     recorded with its items (one expired, was recorded before store_items was on, \
                     or the chain is deeper than max_chain); send the history as input items instead"
                }
            };
            let message = format!(
                "previous_response_id `{id}` is a response of provider `{}`; `{}` does not hold \
                 it ({how})",
                owner.provider,
                self.provider.name()
            );
            (id.to_owned(), message)
        })
    }

    /// The provenance finding about the item at `index`, if any: `foreign_encrypted_content`
    /// or `foreign_item_reference` first, then `item_tampered`.
    pub(super) fn check(&self, index: usize, item: &Item<'_>) -> Option<Finding> {
        let recorded = self.recorded(item);
        match item.class {
            ItemClass::ItemReference => self.foreign_reference(recorded?),
            ItemClass::Reasoning | ItemClass::Compaction => {
                let facts = self.facts.get(&index)?;
                if facts.blobs.is_empty() {
                    return self.foreign_reference(recorded?);
                }
                let mut known_blobs = facts
                    .blobs
                    .iter()
                    .filter_map(|digest| self.provenance.encrypted.get(digest))
                    .peekable();
                if known_blobs.peek().is_some() {
                    // The blob itself was recorded, so it is no tampering whatever its id says.
                    return known_blobs.find_map(|stored| self.foreign_blob(item, stored));
                }
                // A blob the ledger never saw is judged by nothing but its id's digest: the same
                // blob has the same digest, so one recorded under this id with another digest
                // is another item (or an altered one), reported, never refused.
                tampered(item, recorded?, facts.digest?)
            }
            _ => tampered(item, recorded?, self.facts.get(&index)?.digest?),
        }
    }

    /// `foreign_item_reference`, when another provider stored the item.
    fn foreign_reference(&self, stored: &StoredItem) -> Option<Finding> {
        let producer = &stored.owner.provider;
        (producer != self.provider.name()).then(|| {
            Finding::new(
                Reason::ForeignItemReference,
                Param::Member("id"),
                format!(
                    "`{}` names a `{}` that provider `{producer}` stored (response `{}`); only \
                     `{producer}` can resolve it, not `{}`",
                    stored.record.id.as_deref().unwrap_or_default(),
                    stored.record.item_type,
                    stored.response_id,
                    self.provider.name()
                ),
            )
        })
    }

    /// `foreign_encrypted_content`, when `stored` (the item's blob or id, as recorded) was
    /// produced by another provider, or by another model where the model is the scope.
    fn foreign_blob(&self, item: &Item<'_>, stored: &StoredItem) -> Option<Finding> {
        let owner = &stored.owner;
        let target = self.provider.name();
        let message = if owner.provider != target {
            format!(
                "this {}'s encrypted_content was produced by provider `{}` (response `{}`); `{target}` \
                 cannot read it",
                item.type_name(),
                owner.provider,
                stored.response_id
            )
        } else {
            let (EncryptedScope::Model, Some(produced), Some(requested)) = (
                self.provider.encrypted_scope(),
                owner.model.as_deref(),
                self.model,
            ) else {
                return None;
            };
            if produced == requested {
                return None;
            }
            format!(
                "this {}'s encrypted_content was produced by model `{produced}` (response `{}`); \
                 `{target}` binds it to that model, and this request is for `{requested}`",
                item.type_name(),
                stored.response_id
            )
        };
        Some(Finding::new(
            Reason::ForeignEncryptedContent,
            Param::Item,
            message,
        ))
    }
}

/// The ledger's record of the item's `id`, if any.
fn recorded<'p>(provenance: &'p Provenance, item: &Item<'_>) -> Option<&'p StoredItem> {
    provenance.items.get(item.id()?)
}

/// The recorded ids that occur more than once among `items` (nothing is hashed when the ledger
/// recorded none of the request's ids).
fn repeated_ids<'p>(items: &[Item<'_>], provenance: &'p Provenance) -> HashSet<&'p str, RandomState> {
    let mut seen = HashSet::with_hasher(RandomState::default());
    let mut repeated = HashSet::with_hasher(RandomState::default());
    for item in items {
        if let Some((id, _)) = item.id().and_then(|id| provenance.items.get_key_value(id)) {
            if !seen.insert(id.as_str()) {
                repeated.insert(id.as_str());
            }
        }
    }
    repeated
}

/// `item_tampered`, when the item's digest is not the one recorded for its `id`.
fn tampered(item: &Item<'_>, stored: &StoredItem, digest: [u8; 32]) -> Option<Finding> {
    if digest == stored.record.digest {
        return None;
    }
    let id = item.id().unwrap_or_default();
    let recorded_type = &stored.record.item_type;
    let message = if recorded_type != item.type_name() {
        format!(
            "`{id}` was recorded as a `{recorded_type}` (response `{}`), not a `{}`",
            stored.response_id,
            item.type_name()
        )
    } else {
        format!(
            "`{id}` differs from the `{recorded_type}` recorded with that id (response `{}`)",
            stored.response_id
        )
    };
    Some(Finding::new(Reason::ItemTampered, Param::Item, message))
}

/// The calls an output without a call in `input` may answer, when the ledger knows them: the
/// calls recorded in the whole `previous_response_id` chain, and the calls named by the
/// request's item references. `None` when the ledger cannot tell (no chain, a chain cut short,
/// a `conversation`, or an item reference it never recorded): then such an output passes.
pub(super) fn stored_calls<'p>(
    request: &ParsedRequest<'_>,
    provenance: &'p Provenance,
) -> Option<HashSet<&'p str, RandomState>> {
    let chain = provenance.previous.as_ref().filter(|chain| chain.complete)?;
    if request.at != ItemsAt::Input
        || request.previous_response_id.as_str().is_none()
        || !request.conversation.is_absent_or_null()
    {
        return None;
    }
    let mut calls: HashSet<&str, RandomState> = chain.call_ids.iter().map(String::as_str).collect();
    for item in request.items() {
        if item.class == ItemClass::ItemReference {
            let stored = recorded(provenance, item)?;
            calls.extend(stored.record.call_id.as_deref());
        }
    }
    Some(calls)
}
