//! `unknown_state` (docs/reasons.md#unknown_state): with teams, stored state a request names
//! that the ledger holds no team's record of (never recorded, recorded for no team before teams
//! were configured, expired or lost). Whose such state is cannot be told, so it is refused
//! rather than let through for every team, as the object routes answer 404 for it. Run only when the target carries what the ledger
//! knows ([`Provenance`]), the caller's access (teams) and the proxy's word that unknown state
//! is denied (`[ledger] unknown_owner = "deny"`).
//!
//! What counts as named state is what a provider resolves from its own store or key: a
//! `previous_response_id`, a `conversation`, an `item_reference`, a `reasoning` or `compaction`
//! item's non-null `encrypted_content`, and a `reasoning` item sent by `id` without one. The
//! messages say what is unknown and how to allow it, never whose it could be.

use super::{Finding, Param};
use crate::gate::item::{Item, ItemClass};
use crate::gate::provenance::{blob_digest, Provenance};
use crate::gate::request::ParsedRequest;
use crate::gate::verdict::Reason;

/// How an operator lets unknown state through, named in every message.
const HOW_TO_ALLOW: &str = "state made elsewhere, before teams, or expired from the ledger can be \
     allowed with [ledger] unknown_owner = \"allow\"";

/// The check for one request and ledger answer.
#[derive(Debug)]
pub(super) struct UnknownState<'p> {
    provenance: &'p Provenance,
}

impl<'p> UnknownState<'p> {
    /// The check of a request whose keys the ledger answered with `provenance`.
    pub(super) fn new(provenance: &'p Provenance) -> Self {
        Self { provenance }
    }

    /// The members of the body that name state the ledger does not know:
    /// `previous_response_id` and `conversation`, each with its message.
    pub(super) fn members(&self, request: &ParsedRequest<'_>) -> Vec<(&'static str, String)> {
        let mut found = Vec::new();
        if request.previous_response_id.as_str().is_some() && !self.previous_is_owned() {
            found.push((
                "previous_response_id",
                format!(
                    "previous_response_id names a response the ledger holds no team's record of, so no \
                     team can be told to own it; {HOW_TO_ALLOW}"
                ),
            ));
        }
        if request.conversation.as_str().is_some() && !self.conversation_is_owned() {
            found.push((
                "conversation",
                format!(
                    "conversation names a conversation the ledger holds no team's record of, so no team \
                     can be told to own it; {HOW_TO_ALLOW}"
                ),
            ));
        }
        found
    }

    /// The finding about `item`, when it names stored state the ledger does not know.
    pub(super) fn check(&self, item: &Item<'_>) -> Option<Finding> {
        match item.class {
            ItemClass::ItemReference => {
                let id = item.id()?;
                (!self.knows_id(id)).then(|| {
                    finding(
                        Param::Member("id"),
                        "the item_reference names an item the ledger holds no team's record of",
                    )
                })
            }
            ItemClass::Reasoning | ItemClass::Compaction => {
                let blob = item.encrypted_content.filter(|blob| blob.get() != "null");
                if blob.is_some() {
                    let known = blob_digest(item)
                        .and_then(|digest| self.provenance.encrypted.get(&digest))
                        .is_some_and(|stored| stored.team.is_some());
                    return (!known).then(|| {
                        finding(
                            Param::Member("encrypted_content"),
                            "the item's encrypted_content is not one the ledger recorded for a team",
                        )
                    });
                }
                if item.class != ItemClass::Reasoning {
                    return None;
                }
                let id = item.id()?;
                (!self.knows_id(id)).then(|| {
                    finding(
                        Param::Member("id"),
                        "the reasoning item is sent by an id the ledger holds no record of, without \
                         its encrypted_content",
                    )
                })
            }
            _ => None,
        }
    }

    /// Whether the ledger holds a team's record of an item with this `id`.
    fn knows_id(&self, id: &str) -> bool {
        let recorded = self.provenance.items.get(id);
        recorded.is_some_and(|stored| stored.team.is_some()) || self.provenance.short_ids.contains_key(id)
    }

    /// Whether the ledger (or the socket that made it) holds `previous_response_id` for a team.
    fn previous_is_owned(&self) -> bool {
        let previous = self.provenance.previous.as_ref();
        previous.is_some_and(|previous| previous.team.is_some())
    }

    /// Whether the ledger holds the request's conversation for a team.
    fn conversation_is_owned(&self) -> bool {
        let conversation = self.provenance.conversation.as_ref();
        conversation.is_some_and(|conversation| conversation.team.is_some())
    }
}

fn finding(param: Param, what: &str) -> Finding {
    Finding::new(
        Reason::UnknownState,
        param,
        format!("{what}, so no team can be told to own it; {HOW_TO_ALLOW}"),
    )
}
