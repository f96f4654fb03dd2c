//! Object routes and who may reach them (docs/teams.md#teams-and-their-data): the paths that name
//! one stored response or conversation by its id (`/responses/{id}`, `.../input_items`,
//! `.../cancel`, `/conversations/{id}`, `.../items[/{item}]`). With teams, such a request is
//! forwarded only when the ledger records the id for the caller's team or for a team that
//! shares its state with it; otherwise the answer is 404 `not_found`, the same for another
//! team's id as for one never seen, so the answer tells nothing of other teams' objects.
//! WebSocket events that name a response, conversation or item get the same check
//! (docs/websocket.md).

use std::sync::Arc;

use super::ledger::Ledger;
use super::teams::Team;
use crate::config::UnknownOwner;
use crate::error::ApiError;
use crate::ledger::MAX_ID_BYTES;
use crate::metrics::{LedgerOp, LedgerResult};

/// The `kind` of an [`ObjectRef`] naming an output item.
pub(crate) const ITEM: &str = "item";

/// A stored object an upstream path (or a WebSocket event) names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ObjectRef<'p> {
    /// What it is: `response` or `conversation` (named by a path), or `item` (named by a
    /// WebSocket event only; the ledger knows it by its response's record).
    pub(crate) kind: &'static str,
    /// Its id, as the path writes it.
    pub(crate) id: &'p str,
}

/// The object `upstream_path` names, if it is an object route: the segment after the first
/// `responses` or `conversations` segment (ASCII case ignored, as upstreams may), other than
/// the `compact` and `input_tokens` actions of `/responses`. Anything after the id (an action,
/// `items`, an item id) is the object's own route.
pub(crate) fn object_of(upstream_path: &str) -> Option<ObjectRef<'_>> {
    let mut segments = upstream_path.split('/');
    while let Some(segment) = segments.next() {
        let kind = if segment.eq_ignore_ascii_case("responses") {
            "response"
        } else if segment.eq_ignore_ascii_case("conversations") {
            "conversation"
        } else {
            continue;
        };
        let id = segments.next().filter(|id| !id.is_empty())?;
        let action = kind == "response"
            && (id.eq_ignore_ascii_case("compact") || id.eq_ignore_ascii_case("input_tokens"));
        return (!action).then_some(ObjectRef { kind, id });
    }
    None
}

/// Whether `team` may reach `object`: the ledger (`None`: off) records it for a team whose state
/// the team may use; an id it holds no team for follows `unknown_owner`. A store that cannot
/// answer gives 503 `ledger_unavailable`, or under `on_unavailable = "allow"` counts as
/// holding no team.
pub(crate) async fn authorize(
    ledger: Option<Arc<Ledger>>,
    team: &Team,
    object: ObjectRef<'_>,
    unknown_owner: UnknownOwner,
) -> Result<(), ApiError> {
    let owner = match ledger {
        Some(ledger) if object.id.len() <= MAX_ID_BYTES => owner_of(&ledger, object).await?,
        _ => None,
    };
    let allowed = match owner {
        Some(owner) => team.access.may_use(Some(&owner)),
        None => unknown_owner == UnknownOwner::Allow,
    };
    match allowed {
        true => Ok(()),
        false => Err(ApiError::NotFound(object.kind)),
    }
}

/// The team the ledger recorded `object` for; `None` when it holds none (never recorded,
/// expired, recorded for no team) or, under `on_unavailable = "allow"`, cannot answer.
async fn owner_of(ledger: &Ledger, object: ObjectRef<'_>) -> Result<Option<String>, ApiError> {
    // `Some(team)`: recorded, for `team`.
    let recorded = match object.kind {
        ITEM => ledger
            .store
            .items_by_id(&[object.id.to_owned()])
            .await
            .map(|items| items.into_iter().flatten().next().map(|item| item.team)),
        _ => ledger
            .store
            .response(object.id)
            .await
            .map(|recorded| recorded.map(|recorded| recorded.team)),
    };
    match recorded {
        Ok(recorded) => {
            let result = match &recorded {
                Some(_) => LedgerResult::Ok,
                None => LedgerResult::Miss,
            };
            ledger.count(LedgerOp::Lookup, result);
            Ok(recorded.flatten())
        }
        Err(error) => {
            ledger.count(LedgerOp::Lookup, LedgerResult::Error);
            ledger.unavailable(&error).map(|()| None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{object_of, ObjectRef};

    fn object<'a>(kind: &'static str, id: &'a str) -> Option<ObjectRef<'a>> {
        Some(ObjectRef { kind, id })
    }

    #[test]
    fn object_routes_name_their_response_or_conversation() {
        for (path, expected) in [
            ("/responses/resp_1", object("response", "resp_1")),
            ("/responses/resp_1/", object("response", "resp_1")),
            ("/responses/resp_1/input_items", object("response", "resp_1")),
            ("/responses/resp_1/cancel", object("response", "resp_1")),
            ("/Responses/resp_1", object("response", "resp_1")),
            ("/conversations/conv_1", object("conversation", "conv_1")),
            ("/conversations/conv_1/items", object("conversation", "conv_1")),
            (
                "/conversations/conv_1/items/msg_1",
                object("conversation", "conv_1"),
            ),
            ("/openai/responses/resp_1", object("response", "resp_1")),
        ] {
            assert_eq!(object_of(path), expected, "{path}");
        }
        for path in [
            "",
            "/responses",
            "/responses/",
            "/responses/compact",
            "/responses/input_tokens",
            "/conversations",
            "/conversations/",
            "/models",
            "/models/gpt-5",
            "/files/file_1",
        ] {
            assert_eq!(object_of(path), None, "{path}");
        }
    }
}
