//! The judge phase: read the body as a request, choose its provider and judge its items, without
//! holding up the other connections of the worker.
//!
//! A worker is a single-threaded runtime, so a judgment that runs on it stalls every other
//! connection it serves. Small bodies whose fresh calls need little schema work are judged on
//! the worker (most requests: replayed calls are remembered and cost nothing). A larger body,
//! or one whose judgment passes a small inline work budget, is judged on the blocking pool,
//! at most as many at once as there are judge permits, under the request's full budget. Both
//! budgets are counted, not timed, so the same body always takes the same path.

use std::sync::Arc;

use bytes::Bytes;

use super::snapshot::Snapshot;
use super::state::ProxyState;
use super::teams::Team;
use crate::error::ApiError;
use crate::gate::{self, ItemsAt, Target, Verdict};

/// Bodies up to this size are judged on the worker first (parsing 64 KiB takes some 50 µs).
const INLINE_BODY_BYTES: usize = 64 * 1024;

/// The schema work a judgment may do on the worker before it moves to the blocking pool: well
/// under a millisecond, and far more than a turn of an agent loop needs.
const INLINE_WORK: u64 = 20_000;

/// What the judge phase found out about a request.
#[derive(Debug)]
pub(super) struct Judged {
    /// The provider the request goes to.
    pub provider: String,
    /// The request's model, when it names one.
    pub model: Option<String>,
    /// The gate's verdict for that provider.
    pub verdict: Verdict,
    /// When items were stripped: the body to forward instead of the one received, and the
    /// positions of the items cut from it.
    pub stripped: Option<gate::strip::Stripped>,
    /// SHA-256 of the body received, hex, when the audit log is on.
    pub body_sha256: Option<String>,
}

/// Who is asking, under which configuration: what the judge phase judges a request for.
#[derive(Debug, Clone)]
pub(super) struct Asker {
    /// The configuration the request started with.
    pub snapshot: Arc<Snapshot>,
    /// The key's team; `None` for anonymous clients.
    pub team: Option<Arc<Team>>,
}

/// Parses `body` (a request whose path named provider `prefix`, if any, and whose items are
/// `at`), chooses its provider, checks that the asker's team may use it and the model, and
/// judges it under the team's policy; cuts out the items the policy strips.
/// `charset` is the outcome of the head's charset check, answered once the body has parsed
/// (the contract answers 400 before 415) and before any item is judged.
pub(super) async fn judge(
    state: &Arc<ProxyState>,
    asker: &Asker,
    prefix: Option<&str>,
    at: ItemsAt,
    body: &Bytes,
    mut charset: Result<(), ApiError>,
) -> Result<Judged, ApiError> {
    let budget = asker.snapshot.policy_of(asker.team.as_deref()).work_budget;
    if body.len() <= INLINE_BODY_BYTES {
        match judge_now(
            state,
            asker,
            prefix,
            at,
            body,
            budget.min(INLINE_WORK),
            &mut charset,
        ) {
            Err(ApiError::Body(gate::BodyError::TooCostly(_))) if budget > INLINE_WORK => {}
            done => return done,
        }
    }
    let permit = state
        .judges
        .clone()
        .acquire_owned()
        .await
        .expect("the judge permits are never closed");
    let (state, prefix, body) = (state.clone(), prefix.map(str::to_owned), body.clone());
    let asker = asker.clone();
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        judge_now(&state, &asker, prefix.as_deref(), at, &body, budget, &mut charset)
    })
    .await
    .unwrap_or_else(|error| {
        // The gate does not panic on any input (it is fuzzed), but if it did, the request fails
        // alone, with an answer.
        tracing::error!(%error, "a judgment failed");
        Err(ApiError::JudgeFailed)
    })
}

/// The judge phase's work, on whatever thread calls it. A charset error is taken out of
/// `charset` when it is answered.
fn judge_now(
    state: &ProxyState,
    asker: &Asker,
    prefix: Option<&str>,
    at: ItemsAt,
    body: &[u8],
    work_budget: u64,
    charset: &mut Result<(), ApiError>,
) -> Result<Judged, ApiError> {
    let snapshot = &asker.snapshot;
    let request = gate::parse_with(body, at)?;
    let name = snapshot.router.choose_by(prefix, request.model())?;
    if let Some(team) = &asker.team {
        team.authorize_provider(name)?;
        team.authorize_model(request.model())?;
    }
    std::mem::replace(charset, Ok(()))?;
    let provider = snapshot.provider(name)?;
    let policy = snapshot.policy_of(asker.team.as_deref());
    let target = Target::new(&provider.profile, policy).with_work_budget(work_budget);
    let verdict = state.gate.judge(&request, &target)?;
    // A refused request is not forwarded, so nothing is cut from it.
    let stripped = match verdict.is_allowed() {
        true => gate::strip::strip(body, &request, &verdict)?,
        false => None,
    };
    Ok(Judged {
        provider: name.to_owned(),
        model: request.model().map(str::to_owned),
        verdict,
        stripped,
        body_sha256: state.audit.is_some().then(|| super::audit::body_sha256(body)),
    })
}
