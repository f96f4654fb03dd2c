//! The ledger's tap on the answer path: a body that passes every frame of an allowed answer on
//! as it arrives, reads it with a [`Tap`], and records the answer before its last bytes go
//! out, so the client's next turn always finds it (docs/ledger.md#when-a-record-is-written).
//!
//! The record is ready when an event stream's terminal event (`response.completed`, or one of a
//! response that did not complete) has arrived, when a JSON answer has delivered the bytes its
//! `Content-Length` announced, or else at the end of the body. It is then handed to the store
//! ([`Ledger::hand_over`]). A store of this process (memory, embedded) takes it at once: every
//! lookup of this process finds it from then on, and the frame that made it ready passes on in
//! the same poll, waiting for no commit (the embedded store's writer thread commits it with
//! others in one batch, and counts it). For Redis, which other replicas read, that frame (or
//! the end of the body) is held while the write runs, at most the ledger's write timeout, so
//! the next turn finds the record on whichever replica it reaches; nothing before it is
//! delayed. What is written is what the tap's end says ([`Ended`]): the answer's items (those
//! read whole of a response that did not complete), else its response's id alone, for its
//! team. An answer that breaks, or that its client drops, before its record was written leaves
//! the same, read as far as it came: handed over at once, or for Redis written on a task of its
//! own, so nothing waits for it. Only an answer that named no response id records nothing.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;

use super::Ledger;
use crate::error::ApiError;
use crate::gate::{DeclaredTools, Gate, OutputCall, ResponseViolation, Target};
use crate::ledger::{
    AnswerKind, CallIds, Ended, Owner, StoredContent, StoredResponse, Tap, TapLimits, Tapped,
};
use crate::metrics::{LedgerOp, LedgerResult, Meters};
use crate::proxy::audit::{AuditLog, ResponseAuditLine};
use crate::proxy::body::{BoxError, ProxyBody};
use crate::proxy::snapshot::Snapshot;
use crate::proxy::teams::Team;
use crate::proxy::usage::PendingUsage;

/// What the request said that the record of its answer needs.
#[derive(Debug, Clone)]
pub(crate) struct Recording {
    /// The provider the request went to.
    pub(crate) provider: String,
    /// The request's `model`: the model a record is bound to (the answer's, when the request
    /// names none).
    pub(crate) model: Option<String>,
    /// The request's team.
    pub(crate) team: Option<String>,
    /// The provider keeps nothing it answers (`stores_responses = false`): the record is not
    /// stored whatever the answer's `store` says.
    pub(crate) keeps_nothing: bool,
    /// The request's `previous_response_id` (`None` for a carried request, whose input holds
    /// the whole chain).
    pub(crate) previous_response_id: Option<String>,
    /// The request's input items as JSON texts, with `store_items` only.
    pub(crate) input_items: Option<Vec<String>>,
    /// The `call_id`s of the calls the request put in its items.
    pub(crate) input_call_ids: CallIds,
    /// The request's `request_id`, for the log line of the calls the check flags.
    pub(crate) request_id: String,
    /// The request's tools, to check the function calls the provider produces against.
    pub(crate) calls_check: Option<CallsCheck>,
    /// The audit log, for the calls the check flags.
    pub(crate) audit: Option<Arc<AuditLog>>,
    /// The metric handles of the configuration the request was judged under.
    pub(crate) meters: Arc<Meters>,
}

/// What checking a provider's function calls needs: the request's `tools` and the policy it
/// was judged under.
#[derive(Clone)]
pub(crate) struct CallsCheck {
    /// The request's tools.
    pub(crate) tools: Arc<DeclaredTools>,
    /// The gate, with its schema cache.
    pub(crate) gate: Arc<Gate>,
    /// The configuration the request was judged under.
    pub(crate) snapshot: Arc<Snapshot>,
    /// The request's team.
    pub(crate) team: Option<Arc<Team>>,
}

impl std::fmt::Debug for CallsCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallsCheck").finish_non_exhaustive()
    }
}

impl CallsCheck {
    /// The most violations an answer's header names (`[gate] max_violations_listed`).
    pub(crate) fn max_listed(&self) -> usize {
        self.snapshot.policy_of(self.team.as_deref()).max_listed
    }

    /// The calls of `provider`'s answer that do not fit the request's tools. A check that
    /// cannot be made (its work budget spent, tools that no longer read) flags nothing.
    pub(crate) fn run(&self, provider: &str, calls: &[OutputCall]) -> Vec<ResponseViolation> {
        let Ok(provider) = self.snapshot.provider(provider) else {
            return Vec::new();
        };
        let policy = self.snapshot.policy_of(self.team.as_deref());
        let target = Target::new(&provider.profile, policy);
        self.gate
            .check_produced_calls(&self.tools.tools(), calls, &target)
            .unwrap_or_default()
    }
}

type Write = Pin<Box<dyn Future<Output = ()> + Send>>;

/// An answer body read by the ledger's tap as it streams.
pub(crate) struct RecordingBody {
    inner: ProxyBody,
    ledger: Arc<Ledger>,
    /// `None` once the record was written or given up.
    tap: Option<(Tap, Recording)>,
    kind: AnswerKind,
    /// A JSON answer's `Content-Length`.
    expected_len: Option<u64>,
    seen: u64,
    /// A write in progress, and what was held back until it ends (`None`: the end of body).
    writing: Option<(Write, Option<Frame<Bytes>>)>,
    /// The count of the answer's usage, delivered when the tap ends (docs/usage.md).
    usage: Option<PendingUsage>,
}

impl RecordingBody {
    /// Taps `inner`, an answer with `headers`, if it is one the ledger reads (JSON or events);
    /// otherwise returns it as it is (its usage, if counted, missing). The tap's end delivers
    /// the answer's `usage`.
    pub(crate) fn wrap(
        inner: ProxyBody,
        headers: &HeaderMap,
        ledger: Arc<Ledger>,
        recording: Recording,
        usage: Option<PendingUsage>,
    ) -> ProxyBody {
        let kind = headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .and_then(AnswerKind::from_content_type);
        let Some(kind) = kind else {
            return inner;
        };
        let expected_len = headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse().ok());
        let tap = ledger.tap(kind, &recording);
        RecordingBody {
            inner,
            ledger,
            tap: Some((tap, recording)),
            kind,
            expected_len,
            seen: 0,
            writing: None,
            usage,
        }
        .boxed_unsync()
    }

    /// Whether what has arrived is the whole answer as far as the record is concerned.
    fn is_ready(&self) -> bool {
        match (&self.tap, self.kind) {
            (Some((tap, _)), AnswerKind::EventStream) => tap.has_ended(),
            (Some(_), AnswerKind::Json) => self.expected_len == Some(self.seen),
            (None, _) => false,
        }
    }

    /// Finishes the tap and hands its record, if there is one, to the store: a store of this
    /// process takes it at once ([`Ledger::hand_over`]); the write of one for Redis is returned,
    /// for the answer's last bytes to wait on. The produced calls are checked first; what the
    /// check flags is logged (the answer's head has gone out).
    fn start_write(&mut self) -> Option<Write> {
        let (tap, recording) = self.tap.take()?;
        let too_large = tap.too_large();
        let (ended, read) = tap.end_read();
        if let Some(usage) = self.usage.take() {
            usage.deliver(read);
        }
        let stored = self
            .ledger
            .to_store(ended, too_large, recording, CheckCalls::Yes)?;
        let stored = self.ledger.hand_over(stored)?;
        let ledger = self.ledger.clone();
        Some(Box::pin(async move { ledger.write(stored).await }))
    }
}

/// Whether [`Ledger::to_store`] checks the produced calls of the items it is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckCalls {
    Yes,
    /// Checked already, or an answer that stopped before its end.
    No,
}

impl Recording {
    /// The produced function calls of `tapped` that do not fit the request's tools.
    pub(crate) fn check_calls(&self, tapped: &Tapped) -> Vec<ResponseViolation> {
        match (&self.calls_check, &tapped.calls) {
            (Some(check), Some(calls)) if !calls.is_empty() => check.run(&self.provider, calls),
            _ => Vec::new(),
        }
    }

    /// Logs (and audits) the calls a provider produced, in answer `response_id`, that do
    /// not fit the request's tools.
    pub(crate) fn report(&self, response_id: &str, violations: &[ResponseViolation]) {
        if violations.is_empty() {
            return;
        }
        self.meters.response_violations(violations, &self.provider);
        if let Some(audit) = &self.audit {
            audit.write(&ResponseAuditLine::new(
                &self.request_id,
                self.team.as_deref(),
                &self.provider,
                response_id,
                violations,
            ));
        }
        let reasons: Vec<String> = violations
            .iter()
            .map(|violation| format!("{}@{}", violation.reason, violation.param))
            .collect();
        tracing::warn!(
            request_id = %self.request_id,
            provider = %self.provider,
            team = self.team.as_deref().unwrap_or("-"),
            response_id,
            response_violations = %reasons.join(","),
            "the provider produced function calls that do not fit the request's tools"
        );
    }
}

impl Ledger {
    /// A tap for an answer of `kind` to `recording`'s request: it keeps the produced calls
    /// when they are to be checked, and the output items when `store_items` is on.
    pub(crate) fn tap(&self, kind: AnswerKind, recording: &Recording) -> Tap {
        Tap::new(kind, TapLimits::default())
            .keep_calls(recording.calls_check.is_some())
            .keep_items(recording.input_items.is_some())
    }

    /// What the store keeps of an answer to `recording`'s request that ended as `ended`
    /// ([`Tap::end`]; `too_large` when the tap passed a cap): the record of its items, or of its
    /// response's id alone, for its team and provider; `None` when it named no response id.
    /// With [`CheckCalls::Yes`] the produced calls of its items are checked and what the check
    /// flags reported. An answer over a cap is logged and counted as `too_large` (its record,
    /// if any, is counted when written); one that records nothing as `dropped`.
    pub(crate) fn to_store(
        &self,
        ended: Ended,
        too_large: bool,
        recording: Recording,
        check: CheckCalls,
    ) -> Option<StoredResponse> {
        if too_large {
            // Never silent: its items are unknown to the ledger, so their replay is not judged.
            tracing::warn!(
                provider = %recording.provider,
                response_id = ended.id().unwrap_or("-"),
                "an answer's items were not recorded, only its response id: one of its output \
                 items is over the ledger's 32 MiB cap"
            );
            self.count(LedgerOp::Record, LedgerResult::TooLarge);
        }
        // A provider that keeps nothing (`stores_responses = false`) stored none of it,
        // whatever its answer said.
        let keeps_nothing = recording.keeps_nothing;
        let mut stored = match ended {
            Ended::Items(tapped) => {
                if check == CheckCalls::Yes {
                    let violations = recording.check_calls(&tapped);
                    recording.report(&tapped.record.id, &violations);
                }
                self.stored(tapped, recording)
            }
            Ended::IdOnly {
                id,
                model,
                not_stored,
            } => {
                let mut stored = self.owner_only(id, model, recording);
                stored.not_stored = not_stored;
                stored
            }
            Ended::Nothing => {
                if !too_large {
                    self.count(LedgerOp::Record, LedgerResult::Dropped);
                }
                return None;
            }
        };
        stored.not_stored |= keeps_nothing;
        Some(stored)
    }

    /// Records what an answer that stopped before its end (it broke, or its client or socket
    /// went away) left, as [`Ledger::to_store`] does: handed to a store of this process at
    /// once, written to Redis on a task of its own; nothing waits for it. Without a runtime to
    /// run a Redis write on (the process is ending) it is dropped.
    pub(crate) fn record_in_background(
        self: &Arc<Self>,
        ended: Ended,
        too_large: bool,
        recording: Recording,
    ) {
        let Some(stored) = self.to_store(ended, too_large, recording, CheckCalls::No) else {
            return;
        };
        let Some(stored) = self.hand_over(stored) else {
            return;
        };
        let ledger = self.clone();
        self.spawn_write(Box::pin(async move { ledger.write(stored).await }));
    }

    /// Runs a write on a task of its own (it counts itself), or counts it as dropped without
    /// a runtime to run it on.
    fn spawn_write(&self, write: Write) {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(write)),
            Err(_) => self.count(LedgerOp::Record, LedgerResult::Dropped),
        }
    }

    /// The record of response `id` whose items are not recorded (a background response not
    /// yet completed, one that ended with none read whole, or one whose items could not be
    /// read): who owns it (so its team may continue it, and poll, cancel or delete it through
    /// the object routes), nothing of its output or its chain. Its model is the request's, else
    /// the answer's (`model`).
    pub(crate) fn owner_only(
        &self,
        id: String,
        model: Option<String>,
        recording: Recording,
    ) -> StoredResponse {
        let owner = Owner {
            provider: recording.provider,
            model: recording.model.or(model),
        };
        let retention = self.settings.retention.as_secs();
        StoredResponse::owner_only(id, owner, recording.team, crate::state::now_unix(), retention)
    }

    /// The stored form of an answer tapped for `recording`'s request: of a response that did
    /// not complete, marked [`StoredResponse::partial`].
    pub(crate) fn stored(&self, tapped: Tapped, recording: Recording) -> StoredResponse {
        let Tapped {
            record,
            items,
            complete,
            not_stored,
            ..
        } = tapped;
        // The model as the client named it, which it names again when it replays: a provider
        // may answer with a dated name (`gpt-5` as `gpt-5-2025-08-07`) for the same model.
        let owner = Owner {
            provider: recording.provider,
            model: recording.model.or_else(|| record.model.clone()),
        };
        let mut stored = StoredResponse::new(
            record,
            owner,
            recording.team,
            recording.previous_response_id,
            crate::state::now_unix(),
            self.settings.retention.as_secs(),
        );
        stored.input_call_ids = recording.input_call_ids;
        stored.partial = !complete;
        stored.not_stored = not_stored;
        if let (Some(input), Some(output)) = (recording.input_items, items) {
            stored.content = Some(StoredContent { input, output });
        }
        stored
    }
}

impl Body for RecordingBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if let Some((write, _)) = &mut this.writing {
                ready!(write.as_mut().poll(cx));
                let (_, held) = this.writing.take().expect("a write is in progress");
                return Poll::Ready(held.map(Ok));
            }
            match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    if let (Some(data), Some((tap, _))) = (frame.data_ref(), &mut this.tap) {
                        tap.feed(data);
                        this.seen += data.len() as u64;
                    }
                    if this.is_ready() {
                        if let Some(write) = this.start_write() {
                            this.writing = Some((write, Some(frame)));
                            continue;
                        }
                    }
                    return Poll::Ready(Some(Ok(frame)));
                }
                Some(Err(error)) => {
                    // A broken answer records what it delivered.
                    this.stop();
                    return Poll::Ready(Some(Err(error)));
                }
                None => {
                    if let Some(write) = this.start_write() {
                        this.writing = Some((write, None));
                        continue;
                    }
                    return Poll::Ready(None);
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.tap.is_none() && self.writing.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl RecordingBody {
    /// The answer stopped before its record was written: a write begun goes on, on a task of
    /// its own; else what the tap read so far is recorded the same way.
    fn stop(&mut self) {
        if let Some((write, _)) = self.writing.take() {
            self.ledger.spawn_write(write);
            return;
        }
        if let Some((tap, recording)) = self.tap.take() {
            let too_large = tap.too_large();
            let (ended, read) = tap.end_read();
            if let Some(usage) = self.usage.take() {
                usage.deliver(read);
            }
            self.ledger.record_in_background(ended, too_large, recording);
        }
    }
}

impl Drop for RecordingBody {
    /// An answer whose client left before its end (or before its record was written) records
    /// what it delivered, without holding anything up.
    fn drop(&mut self) {
        self.stop();
    }
}

/// The response header naming the function calls of a JSON answer that do not fit the
/// request's tools, e.g. `arguments_schema@output[1]`: the client is warned before it runs a
/// tool on them.
pub(crate) const RESPONSE_VIOLATIONS_HEADER: &str = "x-replaygate-response-violations";

/// The allowed answer `response` to `recording`'s request, as the ledger records it. A JSON
/// answer whose produced calls are to be checked, and whose `Content-Length` is within the
/// tap's JSON cap, is read whole first, so its head can carry
/// [`RESPONSE_VIOLATIONS_HEADER`]; any other answer streams through a [`RecordingBody`].
/// Either way the tap delivers the answer's `usage`.
pub(crate) async fn record(
    response: Response<ProxyBody>,
    ledger: Arc<Ledger>,
    recording: Recording,
    usage: Option<PendingUsage>,
) -> Result<Response<ProxyBody>, ApiError> {
    let (mut parts, body) = response.into_parts();
    let kind = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(AnswerKind::from_content_type);
    let length: Option<usize> = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse().ok());
    let whole = kind == Some(AnswerKind::Json)
        && recording.calls_check.is_some()
        && length.is_some_and(|length| length <= TapLimits::default().max_json_bytes);
    if !whole {
        let body = RecordingBody::wrap(body, &parts.headers, ledger, recording, usage);
        return Ok(Response::from_parts(parts, body));
    }
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            ledger.count(LedgerOp::Record, LedgerResult::Dropped);
            return Err(ApiError::UpstreamUnavailable {
                provider: recording.provider.clone(),
                detail: format!("the answer broke off: {error}"),
            });
        }
    };
    let (ended, read) = ledger.tap(AnswerKind::Json, &recording).end_whole_read(&bytes);
    if let Some(usage) = usage {
        usage.deliver(read);
    }
    if let Ended::Items(tapped) = &ended {
        let violations = recording.check_calls(tapped);
        recording.report(&tapped.record.id, &violations);
        // At most `max_violations_listed` named, then `+N`, as the monitored header.
        let limit = recording.calls_check.as_ref().map_or(0, CallsCheck::max_listed);
        let names = violations
            .iter()
            .take(limit)
            .map(|violation| format!("{}@output[{}]", violation.reason, violation.index));
        let more = violations.len().saturating_sub(limit);
        if let Some((name, value)) =
            crate::proxy::answer_headers::listed(RESPONSE_VIOLATIONS_HEADER, names, more)
        {
            parts.headers.insert(name, value);
        }
    }
    if let Some(stored) = ledger.to_store(ended, false, recording, CheckCalls::No) {
        ledger.write(stored).await;
    }
    Ok(Response::from_parts(parts, crate::proxy::body::full(bytes)))
}

/// The record of an answer on the stores of this process: taken before the answer's last frame
/// passes on, which waits for no commit (docs/ledger.md#when-a-record-is-written).
#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use http::HeaderValue;
    use http_body_util::StreamBody;

    use super::*;
    use crate::config::Config;
    use crate::metrics::{LedgerMeter, Meters, Metrics};
    use crate::proxy::ledger::LedgerSettings;
    use crate::state::{EmbeddedStore, MemoryStore, StateStore};

    /// How long the slow embedded writer waits before each commit.
    const SLOW: Duration = Duration::from_secs(3);

    fn ledger(store: StateStore) -> Arc<Ledger> {
        let settings = LedgerSettings {
            store_items: false,
            carry_sessions: false,
            retention: Duration::from_secs(3600),
            allow_unavailable: false,
            max_chain: 16,
            write_timeout: Duration::from_secs(2),
        };
        Arc::new(Ledger::new(store, settings, LedgerMeter::new(&Metrics::new())))
    }

    /// An embedded store whose writer holds `queue` records waiting and commits each batch
    /// [`SLOW`] after its first record arrived.
    fn slow_embedded(dir: &tempfile::TempDir, queue: usize) -> StateStore {
        StateStore::Embedded(EmbeddedStore::open_slow(dir.path(), queue, SLOW).unwrap())
    }

    fn recording() -> Recording {
        let config = Config::from_toml(
            "[providers.openai]\nbase_url = \"https://api.openai.com/v1\"\nauth = \"none\"\n",
        )
        .unwrap();
        Recording {
            provider: "openai".into(),
            model: Some("gpt-5".into()),
            team: None,
            keeps_nothing: false,
            previous_response_id: None,
            input_items: None,
            input_call_ids: CallIds::default(),
            request_id: "req_1".into(),
            calls_check: None,
            audit: None,
            meters: Arc::new(Meters::resolve(&Arc::new(Metrics::new()), &config)),
        }
    }

    fn item_id(n: u32) -> String {
        format!("rs_0123456789abcdef_{n}")
    }

    fn response(n: u32) -> String {
        format!(
            r#"{{"id":"resp_{n}","object":"response","model":"gpt-5","status":"completed","output":[{{"type":"reasoning","id":"{}","summary":[],"encrypted_content":"enc-{n}"}}]}}"#,
            item_id(n)
        )
    }

    /// Answer `n` as the provider sends it, in frames, with its head: a JSON answer in two
    /// halves, or an event stream of one event a frame.
    fn answer(n: u32, kind: AnswerKind) -> (HeaderMap, Vec<Bytes>) {
        let mut headers = HeaderMap::new();
        let frames: Vec<Bytes> = match kind {
            AnswerKind::Json => {
                let body = response(n);
                headers.insert(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                headers.insert(http::header::CONTENT_LENGTH, body.len().into());
                let (first, last) = body.split_at(body.len() / 2);
                vec![Bytes::from(first.to_owned()), Bytes::from(last.to_owned())]
            }
            AnswerKind::EventStream => {
                headers.insert(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static("text/event-stream"),
                );
                let created = format!(
                    r#"{{"type":"response.created","response":{{"id":"resp_{n}","model":"gpt-5","status":"in_progress","output":[]}}}}"#
                );
                let item =
                    serde_json::from_str::<serde_json::Value>(&response(n)).unwrap()["output"][0].clone();
                let done =
                    serde_json::json!({"type": "response.output_item.done", "output_index": 0, "item": item});
                let completed = format!(r#"{{"type":"response.completed","response":{}}}"#, response(n));
                [
                    ("response.created", created),
                    ("response.output_item.done", done.to_string()),
                    ("response.completed", completed),
                ]
                .into_iter()
                .map(|(event, data)| Bytes::from(format!("event: {event}\ndata: {data}\n\n")))
                .collect()
            }
        };
        (headers, frames)
    }

    fn body(frames: Vec<Bytes>) -> ProxyBody {
        let frames = frames
            .into_iter()
            .map(|data| Ok::<_, BoxError>(Frame::data(data)));
        StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync()
    }

    /// What the store answered when the answer's last frame had come out.
    struct AtLastFrame {
        /// From the start of the answer to its last frame.
        took: Duration,
        /// The owner of the response, and of its item, as a lookup found them.
        response_owner: Option<String>,
        item_owner: Option<String>,
        /// Records counted as committed (`record` `ok`) then.
        committed: u64,
    }

    /// Passes answer `n` of `kind` through the ledger's tap to its end, looking the record up
    /// the moment the last frame has come out.
    async fn pass(ledger: &Arc<Ledger>, n: u32, kind: AnswerKind) -> AtLastFrame {
        let (headers, frames) = answer(n, kind);
        let last = frames.len();
        let started = Instant::now();
        let mut tapped = RecordingBody::wrap(body(frames), &headers, ledger.clone(), recording(), None);
        let mut seen = None;
        let mut count = 0;
        while let Some(frame) = tapped.frame().await {
            assert!(frame.unwrap().is_data());
            count += 1;
            if count < last {
                continue;
            }
            let took = started.elapsed();
            let found = ledger.store.response(&format!("resp_{n}")).await.unwrap();
            let items = ledger.store.items_by_id(&[item_id(n)]).await.unwrap();
            seen = Some(AtLastFrame {
                took,
                response_owner: found.map(|response| response.owner.provider),
                item_owner: items[0].as_ref().map(|item| item.owner.provider.clone()),
                committed: ledger.meter.get(LedgerOp::Record, LedgerResult::Ok),
            });
        }
        seen.expect("the answer's last frame came out")
    }

    /// Waits until `ledger` has counted `records` records (`ok` and `error`).
    async fn counted(ledger: &Ledger, records: u64) {
        let deadline = Instant::now() + SLOW * 4;
        loop {
            let ok = ledger.meter.get(LedgerOp::Record, LedgerResult::Ok);
            let error = ledger.meter.get(LedgerOp::Record, LedgerResult::Error);
            if ok + error >= records {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{ok} + {error} of {records} records counted"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn a_slow_commit_holds_no_answers_last_frame_and_the_record_is_found_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = ledger(slow_embedded(&dir, 64));
        for (n, kind) in [(1, AnswerKind::Json), (2, AnswerKind::EventStream)] {
            let seen = pass(&ledger, n, kind).await;
            assert!(
                seen.took < SLOW / 3,
                "{kind:?}: the last frame took {:?}",
                seen.took
            );
            assert_eq!(seen.response_owner.as_deref(), Some("openai"), "{kind:?}");
            assert_eq!(seen.item_owner.as_deref(), Some("openai"), "{kind:?}");
            assert_eq!(seen.committed, 0, "{kind:?}: the commit had not ended");
        }
        // The writer commits both, and counts them, once its wait is over.
        counted(&ledger, 2).await;
        assert_eq!(ledger.meter.get(LedgerOp::Record, LedgerResult::Ok), 2);
    }

    #[tokio::test]
    async fn the_memory_store_has_the_record_when_the_last_frame_comes_out() {
        let ledger = ledger(StateStore::Memory(MemoryStore::default()));
        for (n, kind) in [(1, AnswerKind::Json), (2, AnswerKind::EventStream)] {
            let seen = pass(&ledger, n, kind).await;
            assert_eq!(seen.response_owner.as_deref(), Some("openai"), "{kind:?}");
            assert_eq!(seen.item_owner.as_deref(), Some("openai"), "{kind:?}");
            assert_eq!(
                seen.committed,
                u64::from(n),
                "{kind:?}: written as it was handed over"
            );
        }
    }

    #[tokio::test]
    async fn a_full_write_queue_is_counted_and_holds_no_answer() {
        let dir = tempfile::tempdir().unwrap();
        // One record waiting at most; the writer sleeps after taking the first.
        let ledger = ledger(slow_embedded(&dir, 1));
        let mut answers = 0;
        while ledger.meter.get(LedgerOp::Record, LedgerResult::Error) == 0 {
            assert!(answers < 3, "the queue never filled");
            answers += 1;
            let seen = pass(&ledger, answers, AnswerKind::EventStream).await;
            assert!(seen.took < SLOW / 3, "the last frame took {:?}", seen.took);
        }
        // The refused record is not kept, and never read as recorded.
        let refused = ledger.store.response(&format!("resp_{answers}")).await.unwrap();
        assert!(refused.is_none());
        assert_eq!(ledger.meter.get(LedgerOp::Record, LedgerResult::Error), 1);
        counted(&ledger, u64::from(answers)).await;
        assert_eq!(
            ledger.meter.get(LedgerOp::Record, LedgerResult::Ok),
            u64::from(answers) - 1
        );
    }

    #[tokio::test]
    async fn an_answer_dropped_midway_is_recorded_before_the_drop_returns() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = ledger(slow_embedded(&dir, 64));
        let (headers, frames) = answer(7, AnswerKind::EventStream);
        let mut tapped = RecordingBody::wrap(body(frames), &headers, ledger.clone(), recording(), None);
        // `response.created` and the item pass; the client goes away.
        tapped.frame().await.unwrap().unwrap();
        tapped.frame().await.unwrap().unwrap();
        drop(tapped);
        let found = ledger
            .store
            .response("resp_7")
            .await
            .unwrap()
            .expect("recorded at once");
        assert!(found.partial, "what it delivered, marked as not completed");
        let items = ledger.store.items_by_id(&[item_id(7)]).await.unwrap();
        assert_eq!(
            items[0].as_ref().map(|item| item.response_id.as_str()),
            Some("resp_7")
        );
    }
}
