//! The judge phase: one pipeline over a request's body, each step run once and in order:
//! read it (parse, choose the provider, authorize the team for it and the model), look the ids
//! it names up in the ledger, carry its session when configured, decide (judge its items under
//! the team's policy and cut out what the policy strips).
//!
//! A worker is a single-threaded runtime, so a step that runs on it stalls every other
//! connection it serves. Where a body's steps run is chosen once, by its size: small bodies are
//! read and decided on the worker (most requests: replayed calls are remembered and cost
//! nothing), larger ones on the blocking pool, at most as many at once as there are judge
//! permits. A decision on the worker has a small work budget; one that passes it is made again
//! on the pool under the request's full budget. Both budgets are counted, not timed, so the
//! same body always takes the same path. The ledger is always asked from the worker, with the
//! body's reading held (not read again), so no pool thread ever waits for the store.

use std::sync::Arc;

use bytes::Bytes;

use super::earlier_turns::EarlierTurns;
use super::judged_prefixes::Kept;
use super::ledger::carry::{self, Carried};
use super::snapshot::Snapshot;
use super::state::ProxyState;
use super::teams::Team;
use crate::config::UnknownOwner;
use crate::error::ApiError;
use crate::gate::{
    self, Continued, InputProbe, ItemsAt, JudgeKey, LedgerQuery, Provenance, StateAccess, Target, Verdict,
};
use crate::ledger::CallIds;

/// Bodies up to this size are read and decided on the worker (parsing 64 KiB takes some 50 µs).
const INLINE_BODY_BYTES: usize = 64 * 1024;

/// The facts of a request judged with the ledger knowing nothing.
static NO_FACTS: std::sync::LazyLock<Provenance> = std::sync::LazyLock::new(Provenance::default);

/// The schema work a decision may do on the worker before it is made on the blocking pool:
/// well under a millisecond, and far more than a turn of an agent loop needs.
const INLINE_WORK: u64 = 20_000;

/// What the judge phase found out about a request.
#[derive(Debug)]
pub(super) struct Judged {
    /// The provider the request goes to.
    pub(crate) provider: String,
    /// The request's model, when it names one.
    pub(crate) model: Option<String>,
    /// The gate's verdict for that provider.
    pub(crate) verdict: Verdict,
    /// When items were stripped: the body to forward instead of the one received, and the
    /// positions of the items cut from it.
    pub(crate) stripped: Option<gate::strip::Stripped>,
    /// SHA-256 of the body received, hex, when the audit log is on.
    pub(crate) body_sha256: Option<String>,
    /// The request's `previous_response_id` (`None` once carried).
    pub(crate) previous_response_id: Option<String>,
    /// The foreign response whose chain replaced `previous_response_id`, when carried.
    pub(crate) carried: Option<String>,
    /// The body judged, when it is not the one received (a carried session).
    pub(crate) body: Option<Bytes>,
    /// The request's tools, when it declares some and the ledger is on: the calls its answer
    /// produces are checked against them.
    pub(crate) tools: Option<Arc<gate::DeclaredTools>>,
    /// The `call_id`s of the calls the request puts in its items (when the ledger is on).
    pub(crate) input_call_ids: CallIds,
}

/// Who is asking, under which configuration: what the judge phase judges a request for.
#[derive(Debug, Clone)]
pub(super) struct Asker {
    /// The configuration the request started with.
    pub(crate) snapshot: Arc<Snapshot>,
    /// The key's team; `None` for anonymous clients.
    pub(crate) team: Option<Arc<Team>>,
    /// Earlier turns remembered besides the ledger (on a WebSocket, the socket's own), which
    /// a `previous_response_id` may continue (judged as the ledger's chain is).
    pub(crate) earlier_turns: Option<Arc<dyn EarlierTurns>>,
}

impl Asker {
    /// With teams, the teams whose recorded state the asker may name.
    fn access(&self) -> Option<&StateAccess> {
        self.team.as_ref().map(|team| &team.access)
    }
}

/// A request body as received, with what the head already told of it.
pub(super) struct Received<'r> {
    /// The provider prefix the path named, if any.
    pub(crate) prefix: Option<&'r str>,
    /// The member the items are read from.
    pub(crate) at: ItemsAt,
    /// The body.
    pub(crate) body: &'r Bytes,
    /// The head's charset check, answered once the body has parsed (a 400 comes before a
    /// 415) and before any item is judged.
    pub(crate) charset: Result<(), ApiError>,
}

/// Judges a received request: see the module documentation. A `previous_response_id` recorded
/// for another provider is carried (replaced by its chain) when `carry_sessions` is on and the
/// chain's items were stored; the carried body is then read and decided in place of the one
/// received.
pub(super) async fn judge(
    state: &Arc<ProxyState>,
    asker: &Asker,
    received: Received<'_>,
) -> Result<Judged, ApiError> {
    let cx = Context::new(state, asker, &received);
    let judged = match cx.read(received.body.clone(), received.charset).await? {
        Reading::Decided(judged) => *judged,
        Reading::TooCostly(read) => cx.decide_on_pool(read, None).await?,
        Reading::Asks(read) => {
            let query = read.query.as_ref().expect("a read that asks has its query");
            let facts = ask(state, asker, query).await?;
            match cx.carry(&read, received.body, &facts, query).await? {
                Some(carried) => cx.judge_carried(carried).await?,
                None => cx.decide(read, Some(facts)).await?,
            }
        }
    };
    Ok(Judged {
        // The audit line names the bytes received, not a carried body.
        body_sha256: state
            .audit
            .is_some()
            .then(|| super::audit::body_sha256(received.body)),
        ..judged
    })
}

/// What the judge phase needs at every step, shared with the blocking pool's threads.
#[derive(Clone)]
struct Context {
    state: Arc<ProxyState>,
    asker: Asker,
    prefix: Option<Arc<str>>,
    at: ItemsAt,
    /// The team's work budget for one decision.
    budget: u64,
    /// Whether earlier turns are remembered (the ledger is on, or another source of them):
    /// the ids a request names are looked up, and its calls and tools kept for its answer.
    remembers: bool,
    /// What else decides a verdict besides the body (the configuration, the team, the path's
    /// provider prefix), hashed (keyed) into the lead of the inputs judged before; 0 when none
    /// are kept.
    context: u128,
}

/// The gate's reading of a body, borrowing it.
type ParsedRequest<'b> = gate::ParsedRequest<'b>;

self_cell::self_cell!(
    /// A body and the gate's reading of it, held together, so that the reading moves between
    /// the worker and the blocking pool without the body being read again.
    struct ReadBody {
        owner: Bytes,
        #[covariant]
        dependent: ParsedRequest,
    }
);

/// A request read and routed.
struct Read {
    body: ReadBody,
    /// The provider it goes to.
    provider: String,
    /// Where its input starts, when judged inputs are kept and it could be read after one (and
    /// its own kept for the next turn).
    probe: Option<InputProbe>,
    /// Whether its input is kept once judged clean: its lead was seen before.
    keep: bool,
    /// The input judged before that it was read after (its items not read again).
    known: Option<Known>,
    /// What the ledger is asked about it: with a known input, only what its new items name and
    /// the keys the ledger did not know then (docs/incremental-judging.md#the-ledger).
    query: Option<LedgerQuery>,
    /// The ledger's loss epoch before it was asked, kept with the input's facts.
    ledger_epoch: u64,
}

/// An input judged before that a body was read after, and where the body was read from.
struct Known {
    kept: Arc<Kept>,
    continued: Continued,
}

impl Read {
    fn request(&self) -> &gate::ParsedRequest<'_> {
        self.body.borrow_dependent()
    }
}

/// How far the first pass over a body came.
enum Reading {
    /// Nothing to look up: decided where it was read.
    Decided(Box<Judged>),
    /// Nothing to look up, but the decision passed the worker's work budget.
    TooCostly(Read),
    /// The ledger (or another source of earlier turns) must be asked about the ids of its
    /// query first.
    Asks(Read),
}

/// Where a body's steps run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Worker,
    Pool,
}

impl Place {
    fn of(body: &[u8]) -> Place {
        match body.len() <= INLINE_BODY_BYTES {
            true => Place::Worker,
            false => Place::Pool,
        }
    }
}

impl Context {
    fn new(state: &Arc<ProxyState>, asker: &Asker, received: &Received<'_>) -> Context {
        Context {
            state: state.clone(),
            asker: asker.clone(),
            prefix: received.prefix.map(Arc::from),
            at: received.at,
            budget: asker.snapshot.policy_of(asker.team.as_deref()).work_budget,
            remembers: state.ledger.is_some() || asker.earlier_turns.is_some(),
            context: state
                .judged
                .as_ref()
                .map_or(0, |judged| judged_context(judged.key(), asker, received)),
        }
    }

    /// Whether state the ledger does not know is refused for the asker: with teams and the
    /// ledger on, unless `[ledger] unknown_owner = "allow"`.
    fn denies_unknown_state(&self) -> bool {
        self.asker.team.is_some()
            && self.state.ledger.is_some()
            && self.asker.snapshot.unknown_owner == UnknownOwner::Deny
    }

    /// The first pass: reads the body, and decides it at once when it names nothing to look
    /// up.
    async fn read(&self, body: Bytes, charset: Result<(), ApiError>) -> Result<Reading, ApiError> {
        match Place::of(&body) {
            Place::Worker => self.first_pass(body, charset, self.budget.min(INLINE_WORK)),
            Place::Pool => {
                self.on_pool(move |cx| cx.first_pass(body, charset, cx.budget))
                    .await
            }
        }
    }

    fn first_pass(&self, body: Bytes, charset: Result<(), ApiError>, work: u64) -> Result<Reading, ApiError> {
        let mut read = self.read_now(body, charset, true)?;
        // Asked only when earlier turns are remembered: building the query pairs the items and
        // copies their ids, work a proxy with the ledger off has no use for.
        if self.remembers {
            let after_known = read.known.as_ref().map(|known| {
                let prefix = known.kept.input.prefix();
                // The kept facts hold while no record they relied on expired and the store
                // lost nothing since they were read (docs/incremental-judging.md#the-ledger).
                let hold = known.kept.ledger_epoch == read.ledger_epoch
                    && prefix.facts().holds_at(crate::state::now_unix());
                hold.then(|| prefix.query_after(read.request())).flatten()
            });
            let query = match after_known {
                Some(Some(query)) => query,
                // The query cannot be told from the new items, or the kept facts may no longer
                // be the ledger's: the body is read whole.
                Some(None) => {
                    read = self.read_whole(&read)?;
                    LedgerQuery::of(read.request())
                }
                None => LedgerQuery::of(read.request()),
            };
            if !query.is_empty() {
                read.query = Some(query);
                return Ok(Reading::Asks(read));
            }
        }
        match self.decide_now(&read, None, work) {
            Err(ApiError::Body(gate::BodyError::TooCostly(_))) if work < self.budget => {
                Ok(Reading::TooCostly(read))
            }
            decided => decided.map(|judged| Reading::Decided(Box::new(judged))),
        }
    }

    /// The session carried, when it may be and its chain was stored (see [`carry::carried`]).
    async fn carry(
        &self,
        read: &Read,
        body: &Bytes,
        facts: &Arc<Provenance>,
        query: &LedgerQuery,
    ) -> Result<Option<Carried>, ApiError> {
        // Sessions are carried from the ledger's store only.
        let Some(ledger) = self.state.ledger.as_ref() else {
            return Ok(None);
        };
        let from = query.previous_response_id.as_deref();
        carry::carried(ledger, &read.provider, body, facts, from, self.asker.access()).await
    }

    /// Reads and decides a carried body with its chain's facts (the charset was answered when
    /// the received body was read).
    async fn judge_carried(&self, carried: Carried) -> Result<Judged, ApiError> {
        let body = carried.body.clone();
        // A carried body is judged with its chain's facts, not the ledger's answer to its own
        // query: it is neither read after an input judged before nor kept.
        let read = match Place::of(&body) {
            Place::Worker => self.read_now(body, Ok(()), false)?,
            Place::Pool => self.on_pool(move |cx| cx.read_now(body, Ok(()), false)).await?,
        };
        let judged = self.decide(read, Some(carried.facts)).await?;
        Ok(Judged {
            previous_response_id: None,
            carried: Some(carried.from),
            body: Some(carried.body),
            ..judged
        })
    }

    /// Decides a read request with what the ledger said: on the worker under its work budget,
    /// else (or when that budget is passed) on the pool under the full budget.
    async fn decide(&self, read: Read, facts: Option<Arc<Provenance>>) -> Result<Judged, ApiError> {
        if Place::of(read.body.borrow_owner()) == Place::Worker {
            let work = self.budget.min(INLINE_WORK);
            match self.decide_now(&read, facts.as_deref(), work) {
                Err(ApiError::Body(gate::BodyError::TooCostly(_))) if work < self.budget => {}
                decided => return decided,
            }
        }
        self.decide_on_pool(read, facts).await
    }

    async fn decide_on_pool(&self, read: Read, facts: Option<Arc<Provenance>>) -> Result<Judged, ApiError> {
        self.on_pool(move |cx| cx.decide_now(&read, facts.as_deref(), cx.budget))
            .await
    }

    /// Runs `step` on the blocking pool, holding a judge permit.
    async fn on_pool<T: Send + 'static>(
        &self,
        step: impl FnOnce(&Context) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let permit = self
            .state
            .judges
            .clone()
            .acquire_owned()
            .await
            .expect("the judge permits are never closed");
        let cx = self.clone();
        tokio::task::spawn_blocking(move || {
            let done = step(&cx);
            drop(permit);
            done
        })
        .await
        .unwrap_or_else(|error| {
            // The gate does not panic on any input (it is fuzzed), but if it did, the request
            // fails alone, with an answer.
            tracing::error!(%error, "a judgment failed");
            Err(ApiError::JudgeFailed)
        })
    }

    /// Parses `body`, chooses its provider and checks that the asker's team may use it and
    /// the model; then answers the charset check. With `reuse`, a body that begins with an
    /// input judged clean before is read from its first new item on
    /// (docs/incremental-judging.md).
    fn read_now(&self, body: Bytes, charset: Result<(), ApiError>, reuse: bool) -> Result<Read, ApiError> {
        let at = self.at;
        let probe = match (&self.state.judged, at) {
            (Some(judged), ItemsAt::Input) if reuse => InputProbe::of(&body, self.context, judged.key()),
            _ => None,
        };
        let lookup = probe
            .as_ref()
            .zip(self.state.judged.as_ref())
            .map(|(probe, judged)| judged.look_up(probe, &body));
        let keep = lookup.as_ref().is_some_and(|lookup| lookup.keep);
        let found = lookup.and_then(|lookup| lookup.found);
        // A body that does not read after the known items (any error among the rest included),
        // or that has other tools or another model than they were judged with, is read whole,
        // so that it gets the whole reading's answer.
        let after_known = found.and_then(|(mut continued, kept)| {
            let items = continued.known();
            let read = ReadBody::try_new(body.clone(), |body| {
                gate::parse_after_known(body, at, true, items)
            })
            .ok()?;
            let request = read.borrow_dependent();
            let alike = request.known_items() == items.count && continued.decides_alike(request);
            alike.then_some((read, kept, continued))
        });
        let spans = self.remembers || probe.is_some();
        let (body, known) = match after_known {
            Some((read, kept, continued)) => (read, Some(Known { kept, continued })),
            None => (self.parse_whole(body, spans)?, None),
        };
        let request = body.borrow_dependent();
        let asker = &self.asker;
        let name = asker
            .snapshot
            .router
            .choose_by(self.prefix.as_deref(), request.model())?;
        if let Some(team) = &asker.team {
            team.authorize_provider(name)?;
            team.authorize_model(request.model())?;
        }
        charset?;
        Ok(Read {
            provider: name.to_owned(),
            body,
            keep: keep || known.is_some(),
            probe,
            known,
            query: None,
            ledger_epoch: self.ledger_epoch(),
        })
    }

    /// The gate's reading of the whole body, noting where its items lie with `spans`.
    fn parse_whole(&self, body: Bytes, spans: bool) -> Result<ReadBody, ApiError> {
        let at = self.at;
        // What the ledger judges (`item_tampered`) reads replayed items' texts where this one
        // reading of the body noted them, and a kept input is known by its items' text.
        Ok(match spans {
            true => ReadBody::try_new(body, |body| gate::parse_noting_spans(body, at))?,
            false => ReadBody::try_new(body, |body| gate::parse_with(body, at))?,
        })
    }

    /// `read`'s body read whole, where it was read after an input judged before: what it is
    /// judged as when its new items alone cannot tell the verdict. Its provider stays; its
    /// query, when it had one, is the whole body's.
    fn read_whole(&self, read: &Read) -> Result<Read, ApiError> {
        let body = self.parse_whole(read.body.borrow_owner().clone(), true)?;
        let query = read
            .query
            .as_ref()
            .map(|_| LedgerQuery::of(body.borrow_dependent()));
        Ok(Read {
            body,
            provider: read.provider.clone(),
            probe: read.probe.clone(),
            keep: read.keep,
            known: None,
            query,
            ledger_epoch: read.ledger_epoch,
        })
    }

    /// The ledger's loss epoch now (0 without the ledger).
    fn ledger_epoch(&self) -> u64 {
        self.state
            .ledger
            .as_ref()
            .map_or(0, |ledger| ledger.store.loss_epoch())
    }

    /// Judges a read request with what the ledger said, and cuts out what the policy strips:
    /// read after an input judged before, its new items, when they alone tell the verdict; else
    /// (a step of its own, never a second pass of this one) the whole body, with the whole
    /// body's facts told from the ledger's answer and the kept ones.
    fn decide_now(&self, read: &Read, facts: Option<&Provenance>, work: u64) -> Result<Judged, ApiError> {
        let Some(known) = &read.known else {
            return self.judge_whole(read, facts, work);
        };
        let prefix = known.kept.input.prefix();
        // With the ledger, the new items are judged with its answer about them and the kept
        // records of the blobs they share with the old items (docs/incremental-judging.md).
        let after = self
            .remembers
            .then(|| prefix.answer_after(read.request(), facts.cloned().unwrap_or_default()));
        let target = self.target(read, after.as_ref(), work)?;
        let query = read.query.as_ref();
        if let Some((verdict, kept)) = self
            .state
            .gate
            .judge_after(read.request(), &target, prefix, query)?
        {
            return self.conclude(read, facts, verdict, kept);
        }
        let whole_facts = after.map(|after| prefix.whole_answer(after));
        self.judge_whole(&self.read_whole(read)?, whole_facts.as_ref(), work)
    }

    /// Judges the whole of a read request.
    fn judge_whole(&self, read: &Read, facts: Option<&Provenance>, work: u64) -> Result<Judged, ApiError> {
        let state = &self.state;
        let request = read.request();
        let target = self.target(read, facts, work)?;
        let query = read.query.as_ref();
        let (verdict, kept) = match &state.judged {
            Some(judged) => state.gate.judge_keeping(request, &target, query, judged.key())?,
            None => (state.gate.judge(request, &target)?, None),
        };
        self.conclude(read, facts, verdict, kept)
    }

    /// What a read request is judged for: its provider, the asker's policy and access, `facts`
    /// and the work budget.
    fn target<'a>(
        &'a self,
        read: &Read,
        facts: Option<&'a Provenance>,
        work: u64,
    ) -> Result<Target<'a>, ApiError> {
        let asker = &self.asker;
        let snapshot = &asker.snapshot;
        let provider = snapshot.provider(&read.provider)?;
        let policy = snapshot.policy_of(asker.team.as_deref());
        let mut target = Target::new(&provider.profile, policy).with_work_budget(work);
        // With teams, state the ledger does not know is refused (docs/reasons.md#unknown_state),
        // also in a body that asked the ledger nothing (its ids too long to be recorded): it is
        // judged with the ledger knowing nothing.
        let deny_unknown = self.denies_unknown_state();
        if let Some(provenance) = facts.or(deny_unknown.then_some(&*NO_FACTS)) {
            target = target.with_provenance(provenance);
        }
        if let Some(access) = asker.access() {
            target = target.with_access(access).with_unknown_state_denied(deny_unknown);
        }
        // The gate reads no configuration: it is told whether sessions are carried, so that
        // `foreign_previous_response` says how to go on (a loaded configuration carries
        // sessions only with `store_items`).
        let carries = self
            .state
            .ledger
            .as_ref()
            .is_some_and(|ledger| ledger.settings.carry_sessions);
        Ok(target.with_carry_sessions(carries))
    }

    /// The judgment of a read request from its verdict: its input kept when judged clean (and
    /// read once more, not kept, when `facts` are not the ledger's answer to its query), what
    /// the policy strips cut out.
    fn conclude(
        &self,
        read: &Read,
        facts: Option<&Provenance>,
        verdict: Verdict,
        kept: Option<gate::JudgedPrefix>,
    ) -> Result<Judged, ApiError> {
        let state = &self.state;
        let request = read.request();
        let query = read.query.as_ref();
        let judged_before = read
            .known
            .as_ref()
            .map_or(0, |known| known.kept.input.prefix().items());
        state.metrics.count_items(request.items().len(), judged_before);
        let input_call_ids = match (self.remembers, &read.known) {
            (false, _) => CallIds::default(),
            (true, None) => input_call_ids(request),
            (true, Some(known)) => {
                let mut ids = known.kept.call_ids.clone();
                input_call_ids(request).iter().for_each(|id| ids.push(id));
                ids
            }
        };
        // Kept (from the second body of its lead on) only when the facts it was judged with
        // are the ledger's answer to its query.
        let judged_prefixes = state
            .judged
            .as_ref()
            .filter(|_| read.keep && (facts.is_none() || query.is_some()));
        if let Some(((judged, probe), prefix)) = judged_prefixes.zip(read.probe.as_ref()).zip(kept) {
            let body = read.body.borrow_owner();
            if let Some(input) = probe.keep(
                body,
                read.known.as_ref().map(|known| &known.continued),
                request,
                prefix,
            ) {
                let call_ids = input_call_ids.clone();
                let ledger_epoch = read.ledger_epoch;
                judged.keep(
                    probe,
                    Kept {
                        input,
                        call_ids,
                        ledger_epoch,
                    },
                );
            }
        }
        // A refused request is not forwarded, so nothing is cut from it.
        let stripped = match verdict.is_allowed() {
            true => gate::strip::strip(read.body.borrow_owner(), request, &verdict)?,
            false => None,
        };
        Ok(Judged {
            provider: read.provider.clone(),
            model: request.model().map(str::to_owned),
            previous_response_id: request.previous_response_id.as_str().map(str::to_owned),
            verdict,
            stripped,
            body_sha256: None,
            carried: None,
            body: None,
            tools: (self.remembers && !request.tools.is_empty())
                .then(|| Arc::new(gate::DeclaredTools::of(&request.tools))),
            input_call_ids,
        })
    }
}

/// The facts for `query`: the ledger's, when it is on, and the chain the asker's other source
/// of earlier turns (a WebSocket's own) has for a `previous_response_id` it produced (unless
/// the ledger knows a whole chain and that source only part of it).
async fn ask(state: &ProxyState, asker: &Asker, query: &LedgerQuery) -> Result<Arc<Provenance>, ApiError> {
    let mut known = match state.ledger.is_some() && !query.is_empty() {
        true => ask_ledger(state, asker, query).await?,
        false => Arc::new(Provenance::default()),
    };
    let remembered_chain = asker
        .earlier_turns
        .as_ref()
        .zip(query.previous_response_id.as_deref())
        .and_then(|(turns, id)| turns.chain(id));
    if let Some(mut chain) = remembered_chain {
        // Produced on the asker's own socket, so for the asker's team.
        chain.team = asker.team.as_ref().map(|team| team.name.clone());
        let ledger_whole = known.previous.as_ref().is_some_and(|previous| previous.complete);
        if chain.complete || !ledger_whole {
            Arc::make_mut(&mut known).previous = Some(chain);
        } else if known
            .previous
            .as_ref()
            .is_some_and(|previous| previous.not_stored)
        {
            // The socket that made it keeps it, stored or not (docs/reasons.md#state_not_stored).
            if let Some(previous) = Arc::make_mut(&mut known).previous.as_mut() {
                previous.not_stored = false;
            }
        }
    }
    Ok(known)
}

/// The ledger's facts for `query`; when the store fails, none (`on_unavailable = "allow"`) or
/// a 503. A team's request is never judged without the ledger while unknown state is denied:
/// everything it names would pass for unknown, so it gets the 503 whatever `on_unavailable`
/// says (docs/ledger.md#when-the-store-is-unavailable).
async fn ask_ledger(
    state: &ProxyState,
    asker: &Asker,
    query: &LedgerQuery,
) -> Result<Arc<Provenance>, ApiError> {
    let ledger = state.ledger.as_ref().expect("only a ledger is asked");
    state
        .metrics
        .count_ledger_keys(query.item_ids.len() + query.digests.len() + query.short_ids.len());
    match ledger.provenance(query).await {
        Ok(facts) => Ok(Arc::new(facts)),
        Err(error) => {
            let allowed = ledger.unavailable(&error);
            let denies_unknown = asker.team.is_some() && asker.snapshot.unknown_owner == UnknownOwner::Deny;
            match (allowed, denies_unknown) {
                (Ok(()), true) => Err(ApiError::LedgerUnavailable(error.to_string())),
                (allowed, _) => allowed.map(|()| Arc::new(Provenance::default())),
            }
        }
    }
}

/// What decides a verdict besides the body: the configuration's generation, the team and the
/// path's provider prefix (docs/incremental-judging.md#identity), hashed under `key`.
fn judged_context(key: &JudgeKey, asker: &Asker, received: &Received<'_>) -> u128 {
    key.context(&[
        Some(&asker.snapshot.generation.to_le_bytes()),
        asker.team.as_ref().map(|team| team.name.as_bytes()),
        received.prefix.map(str::as_bytes),
        Some(received.at.member().as_bytes()),
    ])
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
        judged_with(state, provider, body, None).await
    }

    async fn judged_with(
        state: &Arc<ProxyState>,
        provider: &str,
        body: &Bytes,
        earlier_turns: Option<Arc<dyn EarlierTurns>>,
    ) -> Judged {
        let asker = Asker {
            snapshot: state.snapshot(),
            team: None,
            earlier_turns,
        };
        let received = Received {
            prefix: Some(provider),
            at: ItemsAt::Input,
            body,
            charset: Ok(()),
        };
        judge(state, &asker, received).await.unwrap()
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
    async fn a_large_body_is_judged_on_the_pool_with_the_ledgers_facts() {
        let state = state_with_a_recorded_answer().await;
        let body = large_continuation();
        assert_eq!(Place::of(&body), Place::Pool);
        let permits = state.judges.available_permits();
        // Read on the pool, looked up from the worker, decided on the pool with the facts.
        let asked = judged(&state, "bedrock", &body).await;
        assert_eq!(reasons(&asked), ["foreign_previous_response"]);
        assert_eq!(
            reasons(&judged(&state, "openai", &body).await),
            Vec::<String>::new()
        );
        // Every judge permit is given back.
        assert_eq!(state.judges.available_permits(), permits);
    }

    /// A source of earlier turns that produced one response, and notes what it is asked.
    #[derive(Debug)]
    struct OneChain {
        id: &'static str,
        chain: crate::gate::ChainFacts,
        asked: std::sync::Mutex<Vec<String>>,
    }

    impl EarlierTurns for OneChain {
        fn chain(&self, id: &str) -> Option<crate::gate::ChainFacts> {
            self.asked.lock().unwrap().push(id.to_owned());
            (id == self.id).then(|| self.chain.clone())
        }
    }

    fn one_chain(id: &'static str, provider: &str, complete: bool) -> Arc<OneChain> {
        Arc::new(OneChain {
            id,
            chain: crate::gate::ChainFacts {
                owner: Owner {
                    provider: provider.into(),
                    model: Some("m".into()),
                },
                call_ids: Vec::new(),
                complete,
                team: None,
                not_stored: false,
            },
            asked: Default::default(),
        })
    }

    fn continuing(previous: &str) -> Bytes {
        Bytes::from(
            serde_json::json!({"model": "m", "previous_response_id": previous, "input": "next"}).to_string(),
        )
    }

    #[tokio::test]
    async fn another_source_of_earlier_turns_is_asked_for_the_chain_a_request_continues() {
        let state = state_with_a_recorded_answer().await;
        // The ledger never saw `resp_other_1`; the other source says openai produced it.
        let source = one_chain("resp_other_1", "openai", true);
        let body = continuing("resp_other_1");
        let earlier: Arc<dyn EarlierTurns> = source.clone();
        let to_bedrock = judged_with(&state, "bedrock", &body, Some(earlier.clone())).await;
        assert_eq!(reasons(&to_bedrock), ["foreign_previous_response"]);
        let to_openai = judged_with(&state, "openai", &body, Some(earlier)).await;
        assert_eq!(reasons(&to_openai), Vec::<String>::new());
        assert_eq!(*source.asked.lock().unwrap(), ["resp_other_1", "resp_other_1"]);
    }

    #[tokio::test]
    async fn the_ledgers_whole_chain_wins_over_a_part_of_one_and_a_whole_one_over_it() {
        let state = state_with_a_recorded_answer().await;
        let body = continuing("resp_openai_1");
        // The ledger holds the whole chain of `resp_openai_1` (openai's): a source that knows
        // only part of it (for bedrock) is not taken over it.
        let partial: Arc<dyn EarlierTurns> = one_chain("resp_openai_1", "bedrock", false);
        let judged = judged_with(&state, "bedrock", &body, Some(partial)).await;
        assert_eq!(reasons(&judged), ["foreign_previous_response"]);
        // A source that knows the whole chain is.
        let whole: Arc<dyn EarlierTurns> = one_chain("resp_openai_1", "bedrock", true);
        let judged = judged_with(&state, "bedrock", &body, Some(whole)).await;
        assert_eq!(reasons(&judged), Vec::<String>::new());
    }

    /// `items` recorded as the output of response `id` by `provider`.
    async fn record(state: &ProxyState, id: &str, provider: &str, items: &[serde_json::Value]) {
        let record = ResponseRecord {
            id: id.into(),
            model: Some("gpt-5".into()),
            items: items
                .iter()
                .filter_map(crate::gate::provenance::item_record_from_value)
                .collect(),
        };
        let owner = Owner {
            provider: provider.into(),
            model: Some("gpt-5".into()),
        };
        let stored = StoredResponse::new(record, owner, None, None, crate::state::now_unix(), 3600);
        state.store.put_response(&stored).await.unwrap();
    }

    #[tokio::test]
    async fn kept_facts_hold_only_while_the_store_loses_no_record() {
        let state = state_with_a_recorded_answer().await;
        let reasoning = serde_json::json!({"type": "reasoning", "id": "rs_0123456789abcdef",
            "summary": [], "encrypted_content": "gAAAA-the-blob"});
        record(&state, "resp_a", "openai", std::slice::from_ref(&reasoning)).await;
        let mut items = vec![
            serde_json::json!({"role": "developer", "content": "be brief"}),
            serde_json::json!({"role": "user", "content": "go"}),
            reasoning,
        ];
        fn turn(items: &mut Vec<serde_json::Value>, n: usize) -> Bytes {
            items.push(serde_json::json!({"role": "user", "content": format!("turn {n}")}));
            Bytes::from(serde_json::json!({"model": "gpt-5", "input": items}).to_string())
        }
        let before = |state: &ProxyState| state.metrics.items_judged_before();
        // Judged whole twice (the lead seen, then the input kept), then after the kept input,
        // with what the ledger said of the blob kept: openai's, so allowed.
        for n in 0..3 {
            let judged = judged(&state, "openai", &turn(&mut items, n)).await;
            assert_eq!(reasons(&judged), Vec::<String>::new(), "turn {n}");
        }
        assert!(before(&state) > 0, "the third turn was read after the second");
        // The record is lost (its response written again without it), and the blob recorded
        // since as another provider's: the kept facts no longer hold, and the body is judged
        // whole, as the ledger says now.
        record(&state, "resp_a", "openai", &[]).await;
        let digest = crate::gate::provenance::item_record_from_value(&items[2])
            .unwrap()
            .digest;
        assert!(state.store.items_by_digest(&[digest]).await.unwrap()[0].is_none());
        record(&state, "resp_b", "bedrock", &items[2..3]).await;
        let judged_before = before(&state);
        let judged = judged(&state, "openai", &turn(&mut items, 3)).await;
        assert_eq!(reasons(&judged), ["foreign_encrypted_content"]);
        assert_eq!(before(&state), judged_before, "judged whole");
    }
}
