//! `state_not_stored` (docs/reasons.md#state_not_stored), an item profile's rule run with the
//! ledger: a `reasoning` item sent by `id` without `encrypted_content`, whose id the ledger
//! recorded for a response its provider did not store (`store: false` in the answer). The
//! provider resolves such an item from its store, which holds nothing of that response, and
//! answers 404. `repair` cuts the item: the provider cannot read it, and nothing else in the
//! body depends on it being there.
//!
//! It is a whole-item finding ([`super::replay_items`]), found before the items are judged;
//! the tenancy rules (`cross_team_state`, `unknown_state`) judge the item first.

use super::replay_items::{Cure, WholeFinding};
use crate::gate::item::{Item, ItemClass};
use crate::gate::provenance::Provenance;
use crate::gate::verdict::Reason;

/// The remedies the provider names, in every message.
const REMEDIES: &str = "to keep it, send requests with `store: true`, or ask for \
     `include: [\"reasoning.encrypted_content\"]` and send the item back with its encrypted_content";

/// Each reasoning item of `items` sent by `id` alone whose record says its response was not
/// stored, with its finding (`source`: the profile's source of the rule).
pub(super) fn find(
    items: &[Item<'_>],
    provenance: &Provenance,
    source: &str,
    found: &mut Vec<(usize, WholeFinding)>,
) {
    if !provenance.items.values().any(|stored| stored.not_stored) {
        return;
    }
    for (index, item) in items.iter().enumerate() {
        if item.class != ItemClass::Reasoning || has_blob(item) {
            continue;
        }
        let Some(id) = item.id() else {
            continue;
        };
        let Some(stored) = provenance.items.get(id).filter(|stored| stored.not_stored) else {
            continue;
        };
        let message = format!(
            "reasoning item `{id}` is sent by id without its encrypted_content, and response `{}` \
             that produced it was not stored by its provider (store: false), so the provider cannot \
             read it; repair cuts it; {REMEDIES} ({source})",
            stored.response_id
        );
        found.push((
            index,
            WholeFinding::new(Reason::StateNotStored, message, Cure::Cut),
        ));
    }
}

/// Whether the item carries `encrypted_content` (present and not `null`).
fn has_blob(item: &Item<'_>) -> bool {
    item.encrypted_content.is_some_and(|blob| blob.get() != "null")
}
