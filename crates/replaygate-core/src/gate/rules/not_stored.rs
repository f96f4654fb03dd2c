//! `state_not_stored` (docs/reasons.md#state_not_stored), an item profile's rule run with the
//! ledger: a `reasoning` item sent by `id` without `encrypted_content`, whose id the ledger
//! recorded for a response its provider did not store (`store: false` in the answer). The
//! provider resolves such an item from its store, which holds nothing of that response, and
//! answers 404. `repair` cuts the item: the provider cannot read it, and nothing else in the
//! body depends on it being there.
//!
//! An `item_reference` naming an item of such a response fails the same way. `repair` puts the
//! recorded item's bytes in its place when the ledger kept them (`store_items = true`,
//! [`Provenance::unstored_texts`]); without them it cannot, and the reference is refused.
//!
//! A `previous_response_id` naming a response not stored (its own provider's, judged here only
//! when it was not made on the asker's own WebSocket, whose chain says it is kept there) fails
//! too: the provider answers 404 before reading anything. Only the named response is weighed,
//! as the provider resolves only that id. Nothing can be cut or put back in its place, so
//! `repair` and `strip` refuse it; with `carry_sessions` the proxy carries such a session
//! before the gate, as it carries another provider's ([`previous`]).
//!
//! The item findings are whole-item findings ([`super::replay_items`]), found before the items are judged;
//! the tenancy rules (`cross_team_state`, `unknown_state`) judge the item first.

use super::replay_items::{Cure, WholeFinding};
use crate::gate::item::{Item, ItemClass};
use crate::gate::provenance::{Provenance, StoredItem};
use crate::gate::request::ParsedRequest;
use crate::gate::verdict::Reason;

/// The remedies the provider names, in every message.
const REMEDIES: &str = "to keep it, send requests with `store: true`, or ask for \
     `include: [\"reasoning.encrypted_content\"]` and send the item back with its encrypted_content";

/// The remedies when an `item_reference` cannot be repaired.
const REFERENCE_REMEDIES: &str = "send the item itself instead of a reference to it, send requests \
     with `store: true`, or set `store_items = true` in `[ledger]` so repair can put the recorded \
     item in its place";

/// Each reasoning item of `items` sent by `id` alone, and each `item_reference`, whose record
/// says its response was not stored, with its finding (`source`: the profile's source of the
/// rule). An item another provider recorded is left to `foreign_item_reference`.
pub(super) fn find(
    items: &[Item<'_>],
    provenance: &Provenance,
    provider: &str,
    source: &str,
    found: &mut Vec<(usize, WholeFinding)>,
) {
    if !provenance.items.values().any(|stored| stored.not_stored) {
        return;
    }
    for (index, item) in items.iter().enumerate() {
        let reference = item.class == ItemClass::ItemReference;
        if !reference && (item.class != ItemClass::Reasoning || has_blob(item)) {
            continue;
        }
        let Some(id) = item.id() else {
            continue;
        };
        let Some(stored) = provenance
            .items
            .get(id)
            .filter(|stored| stored.not_stored && stored.owner.provider == provider)
        else {
            continue;
        };
        if reference {
            found.push((index, reference_finding(id, stored, provenance, source)));
            continue;
        }
        found.push((index, reasoning_finding(id, stored, provenance, source)));
    }
}

/// Offline (`replaygate check`, no ledger), in a body that says `store: false`: each reasoning
/// item sent by `id` alone. A client that sends `store: false` made the turns it replays the
/// same way, and the provider answers 404 to an id it was told not to keep; what the ledger adds
/// (whose response it was, whether it was stored, its kept content) is not known here, so the
/// finding is the cut.
pub(super) fn find_in_body(items: &[Item<'_>], source: &str, found: &mut Vec<(usize, WholeFinding)>) {
    for (index, item) in items.iter().enumerate() {
        if item.class != ItemClass::Reasoning || has_blob(item) {
            continue;
        }
        let Some(id) = item.id() else {
            continue;
        };
        let message = format!(
            "reasoning item `{id}` is sent by id without its encrypted_content in a body that \
             says `store: false`, so the provider kept nothing it could read it from; repair \
             cuts it; {REMEDIES} ({source})"
        );
        found.push((
            index,
            WholeFinding::new(Reason::StateNotStored, message, Cure::Cut),
        ));
    }
}

/// The finding of reasoning item `id` (`stored`) sent by id alone, of a response not stored: the
/// recorded item put in its place when the ledger kept it with its `encrypted_content` (the
/// answer was asked for it), cut otherwise.
fn reasoning_finding(id: &str, stored: &StoredItem, provenance: &Provenance, source: &str) -> WholeFinding {
    let named = format!(
        "reasoning item `{id}` is sent by id without its encrypted_content, and response `{}` \
         that produced it was not stored by its provider (store: false), so the provider cannot \
         read it",
        stored.response_id
    );
    match provenance.unstored_texts.get(id).filter(|text| kept_blob(text)) {
        Some(text) => WholeFinding::new(
            Reason::StateNotStored,
            format!(
                "{named}; repair puts the recorded item, with its encrypted_content, in its place; \
                 {REMEDIES} ({source})"
            ),
            Cure::Replace {
                id: id.to_owned(),
                text: text.clone(),
            },
        ),
        None => WholeFinding::new(
            Reason::StateNotStored,
            format!("{named}; repair cuts it; {REMEDIES} ({source})"),
            Cure::Cut,
        ),
    }
}

/// Whether a kept item's text carries an `encrypted_content` string (the answer held it when
/// its request asked for `reasoning.encrypted_content`).
fn kept_blob(text: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Blob<'a> {
        #[serde(borrow)]
        encrypted_content: Option<&'a serde_json::value::RawValue>,
    }
    serde_json::from_str::<Blob<'_>>(text)
        .ok()
        .and_then(|blob| blob.encrypted_content)
        .is_some_and(|blob| blob.get().starts_with('"'))
}

/// The finding of an `item_reference` to item `id` (`stored`) of a response not stored: put the
/// recorded item in its place when the ledger kept it, refused otherwise.
fn reference_finding(id: &str, stored: &StoredItem, provenance: &Provenance, source: &str) -> WholeFinding {
    let named = format!(
        "item_reference `{id}` names a {} of response `{}`, which its provider did not store \
         (store: false), so the provider cannot resolve it",
        stored.record.item_type, stored.response_id
    );
    let (cure, then) = match provenance.unstored_texts.get(id) {
        Some(text) => (
            Cure::Replace {
                id: id.to_owned(),
                text: text.clone(),
            },
            format!("repair puts the item the ledger kept in its place; or {REFERENCE_REMEDIES}"),
        ),
        None => (
            Cure::None,
            format!("the ledger did not keep the item's content, so repair cannot put it back: {REFERENCE_REMEDIES}"),
        ),
    };
    WholeFinding::new(
        Reason::StateNotStored,
        format!("{named}; {then} ({source})"),
        cure,
    )
}

/// The `previous_response_id` of `request` and the message, when the ledger recorded the
/// response it names as not stored by `provider` (another provider's is
/// `foreign_previous_response`'s). The message is the provider's answer and how to go on:
/// with `carry_sessions` on, why the session was not carried.
pub(super) fn previous(
    request: &ParsedRequest<'_>,
    provenance: &Provenance,
    provider: &str,
    source: &str,
    carry_sessions: bool,
) -> Option<(String, String)> {
    let id = request.previous_response_id.as_str()?;
    let chain = provenance.previous.as_ref()?;
    if !chain.not_stored || chain.owner.provider != provider {
        return None;
    }
    let how = match carry_sessions {
        false => {
            "send requests with `store: true`, send the history as input items instead, or set \
             [ledger] carry_sessions = true (with store_items = true) and replaygate replays the \
             recorded items in its place"
        }
        true => {
            "its session could not be carried: not every response of its chain is recorded with \
             its items (one expired, was recorded before store_items was on, or the chain is \
             deeper than max_chain); send requests with `store: true`, or send the history as \
             input items instead"
        }
    };
    let message = format!(
        "Previous response with id '{id}' not found: its provider did not store it (store: \
         false), so it can be continued only on the WebSocket that made it, if it was made on \
         one ({how}) ({source})"
    );
    Some((id.to_owned(), message))
}

/// Whether the item carries `encrypted_content` (present and not `null`).
fn has_blob(item: &Item<'_>) -> bool {
    item.encrypted_content.is_some_and(|blob| blob.get() != "null")
}
