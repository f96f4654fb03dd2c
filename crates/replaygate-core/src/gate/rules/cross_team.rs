//! `cross_team_state` (docs/teams.md#teams-and-their-data): a request names stored state the
//! ledger recorded for a team that has not granted it to the caller's team. Run only when the
//! target carries both what the ledger knows ([`Provenance`]) and the caller's
//! [`StateAccess`]. What the ledger does not know, or recorded for no team, is never refused.
//!
//! The messages say what was named and that it may not be used, never whose it is nor
//! anything it holds: a refusal must not tell one team about another's data.

use super::{Finding, Param};
use crate::gate::access::StateAccess;
use crate::gate::item::Item;
use crate::gate::provenance::{blob_digest, carries_blobs, Provenance};
use crate::gate::request::ParsedRequest;
use crate::gate::verdict::Reason;

/// The check for one request, team and ledger answer.
#[derive(Debug)]
pub(super) struct CrossTeam<'p> {
    provenance: &'p Provenance,
    access: &'p StateAccess,
    /// Whether any item the ledger knows by id belongs to a team outside the access.
    foreign_ids: bool,
    /// Whether any blob the ledger knows by digest belongs to a team outside the access.
    foreign_blobs: bool,
}

impl<'p> CrossTeam<'p> {
    /// The check of a request whose ids the ledger answered with `provenance`, for a team
    /// with `access`.
    pub(super) fn new(provenance: &'p Provenance, access: &'p StateAccess) -> Self {
        let foreign = |team: &Option<String>| !access.may_use(team.as_deref());
        Self {
            provenance,
            access,
            foreign_ids: provenance.items.values().any(|item| foreign(&item.team)),
            foreign_blobs: provenance.encrypted.values().any(|item| foreign(&item.team)),
        }
    }

    /// Whether `previous_response_id` names another team's response.
    pub(super) fn previous_is_foreign(&self) -> bool {
        self.provenance
            .previous
            .as_ref()
            .is_some_and(|previous| !self.access.may_use(previous.team.as_deref()))
    }

    /// The members of the body that name another team's state: `previous_response_id` and
    /// `conversation`, each with its message.
    pub(super) fn members(&self, request: &ParsedRequest<'_>) -> Vec<(&'static str, String)> {
        let mut found = Vec::new();
        if self.previous_is_foreign() {
            found.push((
                "previous_response_id",
                "previous_response_id names a response this team may not continue: it was \
                 recorded for another team, which has not shared its state with this one"
                    .to_owned(),
            ));
        }
        let conversation_foreign = self
            .provenance
            .conversation
            .as_ref()
            .is_some_and(|conversation| !self.access.may_use(conversation.team.as_deref()));
        if conversation_foreign && request.conversation.as_str().is_some() {
            found.push((
                "conversation",
                "conversation names a conversation this team may not use: it was recorded for \
                 another team, which has not shared its state with this one"
                    .to_owned(),
            ));
        }
        found
    }

    /// The finding about `item`, when its `id` or its `encrypted_content` was recorded for a
    /// team outside the access.
    pub(super) fn check(&self, item: &Item<'_>) -> Option<Finding> {
        if self.foreign_ids {
            let recorded = item.id().and_then(|id| self.provenance.items.get(id));
            if recorded.is_some_and(|stored| !self.access.may_use(stored.team.as_deref())) {
                return Some(Finding::new(
                    Reason::CrossTeamState,
                    Param::Item,
                    "the item's id names an item this team may not use: it was recorded for \
                     another team, which has not shared its state with this one",
                ));
            }
        }
        if self.foreign_blobs && carries_blobs(item) {
            let recorded = blob_digest(item).and_then(|digest| self.provenance.encrypted.get(&digest));
            if recorded.is_some_and(|stored| !self.access.may_use(stored.team.as_deref())) {
                return Some(Finding::new(
                    Reason::CrossTeamState,
                    Param::Member("encrypted_content"),
                    "the item's encrypted_content was recorded for another team, which has not \
                     shared its state with this one",
                ));
            }
        }
        None
    }
}
