//! Carrying a session to another provider (docs/ledger.md, `carry_sessions`): a request whose
//! `previous_response_id` was recorded for another provider (or as not stored by its own,
//! docs/reasons.md#state_not_stored) is rewritten with that response's
//! recorded chain in place of the id, and judged and forwarded as the rewritten body.

use std::sync::Arc;

use bytes::Bytes;

use super::Ledger;
use crate::error::ApiError;
use crate::gate::{Provenance, StateAccess};
use crate::ledger::carry::{carried_body, CarriedTurn};
use crate::ledger::StoredResponse;
use crate::metrics::{LedgerOp, LedgerResult};

/// A request rewritten to carry its session.
pub(crate) struct Carried {
    /// The foreign response whose chain was carried.
    pub(crate) from: String,
    /// The rewritten body.
    pub(crate) body: Bytes,
    /// The facts to judge the rewritten body with (no `previous_response_id` any more).
    pub(crate) facts: Arc<Provenance>,
}

/// The request `body`, bound for `provider`, rewritten to carry its session, when
/// `carry_sessions` is on, its `previous_response_id` was recorded for another provider (or as
/// not stored), and every response of the chain was recorded with its items. `None` otherwise:
/// the gate then judges the id (`foreign_previous_response`, `state_not_stored`). An attempt is counted as a `carry`: `ok`,
/// `miss` (the chain cannot be carried) or `error` (the store could not answer).
pub(crate) async fn carried(
    ledger: &Ledger,
    provider: &str,
    body: &Bytes,
    facts: &Arc<Provenance>,
    previous_response_id: Option<&str>,
    access: Option<&StateAccess>,
) -> Result<Option<Carried>, ApiError> {
    let Some(from) = previous_response_id.filter(|_| may_carry(ledger, provider, facts, access)) else {
        return Ok(None);
    };
    let chain = match ledger.chain(from, access).await {
        Ok(chain) => chain,
        Err(error) => {
            ledger.count(LedgerOp::Carry, LedgerResult::Error);
            ledger.unavailable(&error)?;
            return Ok(None);
        }
    };
    let carried = chain.and_then(|chain| rewrite(&chain, provider, body, facts));
    let result = match carried {
        Some(_) => LedgerResult::Ok,
        None => LedgerResult::Miss,
    };
    ledger.count(LedgerOp::Carry, result);
    Ok(carried.map(|(body, facts)| Carried {
        from: from.to_owned(),
        body,
        facts,
    }))
}

/// Whether a request bound for `provider`, with these facts, is one [`carried`] tries to
/// carry: `carry_sessions` is on and its `previous_response_id` was recorded for another
/// provider, or as not stored by its provider (`store: false`; one the asker's own WebSocket
/// made is not: that socket keeps it), for a team whose state the caller may use (with teams,
/// `access`). Another team's chain is never read: the gate refuses the request
/// (`cross_team_state`) instead.
pub(crate) fn may_carry(
    ledger: &Ledger,
    provider: &str,
    facts: &Provenance,
    access: Option<&StateAccess>,
) -> bool {
    ledger.settings.carry_sessions
        && facts.previous.as_ref().is_some_and(|previous| {
            (previous.owner.provider != provider || previous.not_stored)
                && access.is_none_or(|access| access.may_use(previous.team.as_deref()))
        })
}

/// `body` rewritten to carry `chain` (oldest first) to `provider`, and the facts to judge it
/// with (no `previous_response_id` any more); `None` when a turn of the chain kept no items or
/// the body cannot be rewritten.
fn rewrite(
    chain: &[StoredResponse],
    provider: &str,
    body: &Bytes,
    facts: &Provenance,
) -> Option<(Bytes, Arc<Provenance>)> {
    let turns: Option<Vec<CarriedTurn<'_>>> = chain.iter().map(CarriedTurn::from_stored).collect();
    let rewritten = carried_body(body, &turns?, provider).ok()?;
    let mut carried_facts = facts.clone();
    carried_facts.previous = None;
    // The chain's items are the ledger's own records: the blobs a carried body keeps (its
    // target's own reasoning and compaction items, their ids cut) are known by digest.
    for response in chain {
        for record in response
            .items
            .iter()
            .filter(|record| record.has_encrypted_content)
        {
            carried_facts
                .encrypted
                .entry(record.digest)
                .or_insert_with(|| response.stored_item(record));
        }
    }
    Some((Bytes::from(rewritten), Arc::new(carried_facts)))
}
