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
use tokio::sync::OwnedSemaphorePermit;

use super::ledger::carry;
use super::snapshot::Snapshot;
use super::state::ProxyState;
use super::teams::Team;
use super::websocket::SocketTurns;
use crate::error::ApiError;
use crate::gate::{self, ItemsAt, LedgerQuery, Provenance, StateAccess, Target, Verdict};
use crate::ledger::CallIds;

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
    /// The request's `previous_response_id` (`None` once carried).
    pub previous_response_id: Option<String>,
    /// The foreign response whose chain replaced `previous_response_id`, when carried.
    pub carried: Option<String>,
    /// The body judged, when it is not the one received (a carried session).
    pub body: Option<Bytes>,
    /// The request's tools, when it declares some and the ledger is on: the calls its answer
    /// produces are checked against them.
    pub tools: Option<Arc<gate::DeclaredTools>>,
    /// The `call_id`s of the calls the request puts in its items (when the ledger is on).
    pub input_call_ids: CallIds,
}

/// Who is asking, under which configuration: what the judge phase judges a request for.
#[derive(Debug, Clone)]
pub(super) struct Asker {
    /// The configuration the request started with.
    pub snapshot: Arc<Snapshot>,
    /// The key's team; `None` for anonymous clients.
    pub team: Option<Arc<Team>>,
    /// On a WebSocket: the responses produced earlier on the same socket, which a
    /// `previous_response_id` may continue (judged as the ledger's chain is).
    pub socket: Option<Arc<SocketTurns>>,
}

impl Asker {
    /// With teams, the teams whose recorded state the asker may name.
    fn access(&self) -> Option<&StateAccess> {
        self.team.as_ref().map(|team| &team.access)
    }
}

/// What one pass of the judge phase came to.
enum Step {
    /// The request is judged.
    Judged(Box<Judged>),
    /// The ledger must be asked about these ids first (no thread may wait for it); the request
    /// goes to this provider.
    Ask(LedgerQuery, String),
    /// The ledger was asked about the query's ids and the request may be carried: the request
    /// goes to this provider, and the ledger knows these facts.
    Carry(LedgerQuery, String, Arc<Provenance>),
}

/// Parses `body` (a request whose path named provider `prefix`, if any, and whose items are
/// `at`), chooses its provider, checks that the asker's team may use it and the model, looks
/// the ids it names up in the ledger (when the ledger is on and it names any), and judges it
/// under the team's policy; cuts out the items the policy strips. A `previous_response_id`
/// recorded for another provider is carried (replaced by its chain) when `carry_sessions` is
/// on and the chain's items were stored.
/// `charset` is the outcome of the head's charset check, answered once the body has parsed
/// (the contract answers 400 before 415) and before any item is judged.
///
/// A body is parsed once: on the worker the parsed request waits for the ledger's answer; on
/// the blocking pool the thread that parsed it waits for the answer. A request that may be
/// carried is parsed again there when its session turns out not to be carried, and so is one
/// that found `JUDGE_WAITS` threads waiting already.
pub(super) async fn judge(
    state: &Arc<ProxyState>,
    asker: &Asker,
    prefix: Option<&str>,
    at: ItemsAt,
    body: &Bytes,
    charset: Result<(), ApiError>,
) -> Result<Judged, ApiError> {
    let facts = Facts::Ask(state.ledger.is_some() || asker.socket.is_some());
    judge_with(state, asker, prefix, at, body, charset, facts).await
}

/// [`judge`], starting from what is known of the ledger: a carried body is judged with the
/// facts of its chain and asks nothing.
#[allow(clippy::too_many_arguments)]
async fn judge_with(
    state: &Arc<ProxyState>,
    asker: &Asker,
    prefix: Option<&str>,
    at: ItemsAt,
    body: &Bytes,
    mut charset: Result<(), ApiError>,
    mut facts: Facts,
) -> Result<Judged, ApiError> {
    let budget = asker.snapshot.policy_of(asker.team.as_deref()).work_budget;
    if body.len() <= INLINE_BODY_BYTES {
        let read = read_request(state, asker, prefix, at, body, &mut charset)?;
        if let Facts::Ask(true) = facts {
            let query = LedgerQuery::of(&read.request);
            facts = match query.is_empty() {
                true => Facts::Asked(None),
                false => {
                    let known = ask(state, asker, &query).await?;
                    if let Some(judged) =
                        carry_session(state, asker, prefix, at, body, &read.provider, &known, &query).await?
                    {
                        return Ok(judged);
                    }
                    Facts::Asked(Some(known))
                }
            };
        }
        match decide(state, asker, &read, body, budget.min(INLINE_WORK), &facts) {
            Err(ApiError::Body(gate::BodyError::TooCostly(_))) if budget > INLINE_WORK => {}
            done => return done,
        }
    }
    let (query, provider, known) =
        match pooled(state, asker, prefix, at, body, budget, &mut charset, facts).await? {
            Step::Judged(judged) => return Ok(*judged),
            Step::Carry(query, provider, known) => (query, provider, known),
            Step::Ask(query, provider) => {
                let known = ask(state, asker, &query).await?;
                (query, provider, known)
            }
        };
    if let Some(judged) = carry_session(state, asker, prefix, at, body, &provider, &known, &query).await? {
        return Ok(judged);
    }
    Ok(judged_of(
        pooled(
            state,
            asker,
            prefix,
            at,
            body,
            budget,
            &mut charset,
            Facts::Asked(Some(known)),
        )
        .await?,
    ))
}

/// The facts for `query`: the ledger's, when it is on, and on a WebSocket the socket's own
/// chain for a `previous_response_id` produced on it (unless the ledger knows a whole chain and
/// the socket only part of it).
async fn ask(state: &ProxyState, asker: &Asker, query: &LedgerQuery) -> Result<Arc<Provenance>, ApiError> {
    let mut known = match state.ledger.is_some() && !query.is_empty() {
        true => ask_ledger(state, query).await?,
        false => Arc::new(Provenance::default()),
    };
    let socket_chain = asker
        .socket
        .as_ref()
        .zip(query.previous_response_id.as_deref())
        .and_then(|(socket, id)| socket.chain(id));
    if let Some(chain) = socket_chain {
        let ledger_whole = known.previous.as_ref().is_some_and(|previous| previous.complete);
        if chain.complete || !ledger_whole {
            Arc::make_mut(&mut known).previous = Some(chain);
        }
    }
    Ok(known)
}

/// The ledger's facts for `query`; when the store fails, none (`on_unavailable = "allow"`) or
/// a 503.
async fn ask_ledger(state: &ProxyState, query: &LedgerQuery) -> Result<Arc<Provenance>, ApiError> {
    let ledger = state.ledger.as_ref().expect("only a ledger is asked");
    match ledger.provenance(query).await {
        Ok(facts) => Ok(Arc::new(facts)),
        Err(error) => ledger
            .unavailable(&error)
            .map(|()| Arc::new(Provenance::default())),
    }
}

/// The judgment of the request rewritten to carry its session, when it is carried.
#[allow(clippy::too_many_arguments)]
async fn carry_session(
    state: &Arc<ProxyState>,
    asker: &Asker,
    prefix: Option<&str>,
    at: ItemsAt,
    body: &Bytes,
    provider: &str,
    facts: &Arc<Provenance>,
    query: &LedgerQuery,
) -> Result<Option<Judged>, ApiError> {
    // Sessions are carried from the ledger's store only.
    let Some(ledger) = state.ledger.as_ref() else {
        return Ok(None);
    };
    let Some(carried) = carry::carried(
        ledger,
        provider,
        body,
        facts,
        query.previous_response_id.as_deref(),
        asker.access(),
    )
    .await?
    else {
        return Ok(None);
    };
    // The charset was answered when the received body parsed; the chain's facts are known, so
    // this judgment asks nothing and carries nothing.
    let facts = Facts::Asked(Some(carried.facts));
    let mut judged = Box::pin(judge_with(state, asker, prefix, at, &carried.body, Ok(()), facts)).await?;
    judged.previous_response_id = None;
    judged.carried = Some(carried.from);
    // The audit line names the bytes received, not the rewritten ones.
    if judged.body_sha256.is_some() {
        judged.body_sha256 = Some(super::audit::body_sha256(body));
    }
    judged.body = Some(carried.body);
    Ok(Some(judged))
}

fn judged_of(step: Step) -> Judged {
    match step {
        Step::Judged(judged) => *judged,
        Step::Ask(..) | Step::Carry(..) => {
            unreachable!("a judgment with the ledger's facts does not ask again")
        }
    }
}

/// What the judgment knows of the ledger.
#[derive(Clone)]
enum Facts {
    /// Nothing yet: ask it (`true`, the ledger is on) when the request names ids, or judge
    /// without it (`false`, the ledger is off).
    Ask(bool),
    /// The ledger is on and was asked: what it answered, or `None` when the request names
    /// nothing to ask about.
    Asked(Option<Arc<Provenance>>),
}

impl Facts {
    fn ledger_on(&self) -> bool {
        !matches!(self, Facts::Ask(false))
    }

    fn provenance(&self) -> Option<&Provenance> {
        match self {
            Facts::Asked(Some(known)) => Some(known),
            _ => None,
        }
    }
}

/// A request read and routed: what its judgment starts from.
struct Read<'b> {
    request: gate::ParsedRequest<'b>,
    /// The provider it goes to.
    provider: String,
}

/// One pass of the judge phase on the blocking pool, at most as many at once as there are
/// judge permits, under the request's full work budget.
#[allow(clippy::too_many_arguments)]
async fn pooled(
    state: &Arc<ProxyState>,
    asker: &Asker,
    prefix: Option<&str>,
    at: ItemsAt,
    body: &Bytes,
    budget: u64,
    charset: &mut Result<(), ApiError>,
    facts: Facts,
) -> Result<Step, ApiError> {
    let permit = state
        .judges
        .clone()
        .acquire_owned()
        .await
        .expect("the judge permits are never closed");
    let (state, prefix, body) = (state.clone(), prefix.map(str::to_owned), body.clone());
    let asker = asker.clone();
    let mut owned_charset = std::mem::replace(charset, Ok(()));
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        judge_now(
            &state,
            &asker,
            prefix.as_deref(),
            at,
            &body,
            budget,
            &mut owned_charset,
            facts,
            &runtime,
            permit,
        )
    })
    .await
    .unwrap_or_else(|error| {
        // The gate does not panic on any input (it is fuzzed), but if it did, the request fails
        // alone, with an answer.
        tracing::error!(%error, "a judgment failed");
        Err(ApiError::JudgeFailed)
    })
}

/// The judge phase's work on a blocking-pool thread, holding a judge's `permit`: reads the
/// request, asks the ledger about the ids it names (waiting for `runtime`, the worker's, to
/// answer, without the permit), and judges it, or stops with the ledger's facts when the
/// request may be carried to its provider.
#[allow(clippy::too_many_arguments)]
fn judge_now(
    state: &ProxyState,
    asker: &Asker,
    prefix: Option<&str>,
    at: ItemsAt,
    body: &[u8],
    work_budget: u64,
    charset: &mut Result<(), ApiError>,
    mut facts: Facts,
    runtime: &tokio::runtime::Handle,
    permit: OwnedSemaphorePermit,
) -> Result<Step, ApiError> {
    let mut permit = Some(permit);
    let read = read_request(state, asker, prefix, at, body, charset)?;
    if let Facts::Ask(true) = facts {
        let query = LedgerQuery::of(&read.request);
        if !query.is_empty() {
            let Ok(waiting) = state.judge_waits.clone().try_acquire_owned() else {
                return Ok(Step::Ask(query, read.provider));
            };
            // A slow store holds up this request alone, not a judge's place.
            drop(permit.take());
            let known = runtime.block_on(ask(state, asker, &query));
            drop(waiting);
            let known = known?;
            permit = Some(
                runtime
                    .block_on(state.judges.clone().acquire_owned())
                    .expect("the judge permits are never closed"),
            );
            let carry = state
                .ledger
                .as_ref()
                .is_some_and(|ledger| carry::may_carry(ledger, &read.provider, &known, asker.access()));
            if carry && query.previous_response_id.is_some() {
                return Ok(Step::Carry(query, read.provider, known));
            }
            facts = Facts::Asked(Some(known));
        }
    }
    let judged = decide(state, asker, &read, body, work_budget, &facts);
    drop(permit);
    judged.map(|judged| Step::Judged(Box::new(judged)))
}

/// Parses `body`, chooses its provider and checks that the asker's team may use it and the
/// model. A charset error is taken out of `charset` and answered once the body has parsed.
fn read_request<'b>(
    state: &ProxyState,
    asker: &Asker,
    prefix: Option<&str>,
    at: ItemsAt,
    body: &'b [u8],
    charset: &mut Result<(), ApiError>,
) -> Result<Read<'b>, ApiError> {
    // What the ledger judges (`item_tampered`) reads replayed items' texts where this one
    // reading of the body noted them.
    let request = match state.ledger.is_some() || asker.socket.is_some() {
        true => gate::parse_noting_spans(body, at)?,
        false => gate::parse_with(body, at)?,
    };
    let name = asker.snapshot.router.choose_by(prefix, request.model())?;
    if let Some(team) = &asker.team {
        team.authorize_provider(name)?;
        team.authorize_model(request.model())?;
    }
    std::mem::replace(charset, Ok(()))?;
    Ok(Read {
        provider: name.to_owned(),
        request,
    })
}

/// Judges a read request with what the ledger said, and cuts out what the policy strips.
fn decide(
    state: &ProxyState,
    asker: &Asker,
    read: &Read<'_>,
    body: &[u8],
    work_budget: u64,
    facts: &Facts,
) -> Result<Judged, ApiError> {
    let Read {
        request,
        provider: name,
    } = read;
    let snapshot = &asker.snapshot;
    let provider = snapshot.provider(name)?;
    let policy = snapshot.policy_of(asker.team.as_deref());
    let mut target = Target::new(&provider.profile, policy).with_work_budget(work_budget);
    if let Some(provenance) = facts.provenance() {
        target = target.with_provenance(provenance);
    }
    if let Some(access) = asker.access() {
        target = target.with_access(access);
    }
    // The gate reads no configuration: it is told whether sessions are carried, so that
    // `foreign_previous_response` says how to go on (a loaded configuration carries sessions
    // only with `store_items`).
    let carries = state
        .ledger
        .as_ref()
        .is_some_and(|ledger| ledger.settings.carry_sessions);
    let verdict = state.gate.judge(request, &target.with_carry_sessions(carries))?;
    // A refused request is not forwarded, so nothing is cut from it.
    let stripped = match verdict.is_allowed() {
        true => gate::strip::strip(body, request, &verdict)?,
        false => None,
    };
    let ledger_on = facts.ledger_on();
    Ok(Judged {
        provider: name.clone(),
        model: request.model().map(str::to_owned),
        previous_response_id: request.previous_response_id.as_str().map(str::to_owned),
        verdict,
        stripped,
        body_sha256: state.audit.is_some().then(|| super::audit::body_sha256(body)),
        carried: None,
        body: None,
        tools: (ledger_on && !request.tools.is_empty())
            .then(|| Arc::new(gate::DeclaredTools::of(&request.tools))),
        input_call_ids: match ledger_on {
            true => input_call_ids(request),
            false => CallIds::default(),
        },
    })
}

/// The `call_id`s of the calls among a request's items.
fn input_call_ids(request: &gate::ParsedRequest<'_>) -> CallIds {
    request
        .items()
        .iter()
        .filter_map(|item| match item.pairing() {
            gate::item::Pairing::Call(call_id) => Some(call_id),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::state::JUDGE_WAITS;
    use super::*;
    use crate::config::Config;
    use crate::ledger::{ItemRecord, Owner, ResponseRecord, StoredResponse};

    /// A state with the ledger on the memory backend, which recorded `resp_openai_1` as an
    /// answer of `openai`.
    async fn state_with_a_recorded_answer() -> Arc<ProxyState> {
        let config = Config::from_toml(
            "default_provider = \"openai\"\n[state]\nbackend = \"memory\"\n[ledger]\nenabled = true\n\
             [providers.openai]\nbase_url = \"http://127.0.0.1:9\"\nauth = \"none\"\n\
             [providers.bedrock]\nbase_url = \"http://127.0.0.1:9\"\nauth = \"none\"\n",
        )
        .unwrap();
        let state = Arc::new(ProxyState::for_workers(&config, &|_| None, 1).unwrap().remove(0));
        let record = ResponseRecord {
            id: "resp_openai_1".into(),
            model: Some("gpt-5".into()),
            items: vec![ItemRecord {
                id: Some("msg_0123456789abcdef".into()),
                item_type: "message".into(),
                call_id: None,
                digest: [1; 32],
                has_encrypted_content: false,
                preceded_by: None,
            }],
        };
        let owner = Owner {
            provider: "openai".into(),
            model: Some("gpt-5".into()),
        };
        let stored = StoredResponse::new(record, owner, None, None, crate::state::now_unix(), 3600);
        state.store.put_response(&stored).await.unwrap();
        state
    }

    /// A body over 64 KiB, so judged on the blocking pool, continuing `resp_openai_1`.
    fn large_continuation() -> Bytes {
        let body = serde_json::json!({
            "model": "m",
            "previous_response_id": "resp_openai_1",
            "instructions": "Be brief. ".repeat(8_000),
            "input": "next",
        });
        Bytes::from(body.to_string())
    }

    async fn judged(state: &Arc<ProxyState>, provider: &str, body: &Bytes) -> Judged {
        let asker = Asker {
            snapshot: state.snapshot(),
            team: None,
            socket: None,
        };
        judge(state, &asker, Some(provider), ItemsAt::Input, body, Ok(()))
            .await
            .unwrap()
    }

    fn reasons(judged: &Judged) -> Vec<String> {
        judged
            .verdict
            .violations
            .iter()
            .map(|v| v.reason.to_string())
            .collect()
    }

    #[tokio::test]
    async fn a_judged_request_keeps_the_call_ids_of_its_own_calls_for_the_ledger() {
        let state = state_with_a_recorded_answer().await;
        let body = Bytes::from(
            serde_json::json!({
                "model": "m",
                "input": [
                    {"type": "message", "role": "user", "content": "hi"},
                    {"type": "function_call", "call_id": "call_a", "name": "f", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": "call_a", "output": "1"},
                    {"type": "function_call", "call_id": "call_\u{e9}", "name": "f", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": "call_\u{e9}", "output": "2"},
                ],
            })
            .to_string(),
        );
        let judged = judged(&state, "openai", &body).await;
        assert!(judged.verdict.is_allowed(), "{:?}", judged.verdict);
        // The calls' ids, in order; never an output's.
        assert_eq!(
            judged.input_call_ids.iter().collect::<Vec<_>>(),
            ["call_a", "call_\u{e9}"]
        );
    }

    #[tokio::test]
    async fn a_large_body_is_judged_with_the_ledgers_facts_whether_or_not_a_thread_may_wait() {
        let state = state_with_a_recorded_answer().await;
        let body = large_continuation();
        // A thread may wait: the one that read the body asks the ledger.
        let waited = judged(&state, "bedrock", &body).await;
        assert_eq!(reasons(&waited), ["foreign_previous_response"]);
        assert_eq!(
            reasons(&judged(&state, "openai", &body).await),
            Vec::<String>::new()
        );
        // Every waiting place taken: the worker asks, and the body is read again to be judged.
        let taken = state
            .judge_waits
            .clone()
            .try_acquire_many_owned(JUDGE_WAITS as u32)
            .unwrap();
        let asked = judged(&state, "bedrock", &body).await;
        assert_eq!(reasons(&asked), ["foreign_previous_response"]);
        drop(taken);
        assert_eq!(state.judge_waits.available_permits(), JUDGE_WAITS);
    }
}
