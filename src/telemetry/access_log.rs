//! One structured log line per request: who asked, where it went, what the gate said
//! (docs/operations.md). The record is filled in along the request path by the proxy and
//! read by the metrics when the request ends, so it lives below both.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderValue, Method, StatusCode};

use super::usage_tally::{Totals, UsageTally};
use super::RequestSpan;
use crate::error::ApiError;
use crate::gate::{Decision, Verdict};

/// The response header that carries the request id back to the client.
pub(crate) const REQUEST_ID_HEADER: &str = "x-replaygate-request-id";

/// `stream_error` of an answer whose client went away before its end, and `error` of a request
/// whose client went away before its answer's head.
pub(crate) const CLIENT_GONE: &str = "client_gone";

/// What became of a request, as its access line says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestDecision {
    /// The path is not gated.
    Ungated,
    /// The gate judged it: what its verdict came to.
    Judged(Decision),
    /// The proxy refused the request before or after gating (bad body, no route, upstream down).
    Error,
}

impl RequestDecision {
    /// The `decision` field's value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RequestDecision::Ungated => "ungated",
            RequestDecision::Judged(decision) => decision.as_str(),
            RequestDecision::Error => "error",
        }
    }

    /// The decision the metrics count (docs/operations.md#metrics): an ungated request counts
    /// as allowed; `None` for an error.
    pub(crate) fn counted(self) -> Option<Decision> {
        match self {
            RequestDecision::Ungated => Some(Decision::Allowed),
            RequestDecision::Judged(decision) => Some(decision),
            RequestDecision::Error => None,
        }
    }
}

/// What passed on a WebSocket, for its access line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SocketCounts {
    /// Data messages from the client.
    pub(crate) messages_in: u64,
    /// Data messages from the provider passed on to the client.
    pub(crate) messages_out: u64,
    /// Client messages judged and forwarded.
    pub(crate) forwarded: u64,
    /// Client messages refused with an error event.
    pub(crate) refused: u64,
    /// The refused messages by the error's `code`, in the order the codes first came.
    pub(crate) refused_codes: Vec<(String, u64)>,
    /// How the socket ended: `client_closed`, `provider_closed`, `idle_timeout`,
    /// `max_duration`, `message_too_large`, `overloaded`, `protocol_error`, `shutdown`,
    /// `client_gone`, `provider_gone`.
    pub(crate) ended: &'static str,
}

impl SocketCounts {
    /// Counts a message refused with `code`.
    pub(crate) fn refused(&mut self, code: &str) {
        self.refused += 1;
        match self.refused_codes.iter_mut().find(|(known, _)| known == code) {
            Some((_, count)) => *count += 1,
            None => self.refused_codes.push((code.to_owned(), 1)),
        }
    }

    /// The refused messages by code, as the access line has them: `code=N,code=N`; `None`
    /// when none was refused.
    pub(crate) fn refused_by_code(&self) -> Option<String> {
        if self.refused_codes.is_empty() {
            return None;
        }
        let by_code: Vec<String> = self
            .refused_codes
            .iter()
            .map(|(code, count)| format!("{code}={count}"))
            .collect();
        Some(by_code.join(","))
    }
}

/// Facts gathered along the request path, written out once when the answer is ready.
///
/// It holds no header values and no bodies, so no key or prompt can reach the log.
#[derive(Debug)]
pub(crate) struct AccessRecord {
    /// The client's `x-request-id` when it sent a sane one, else a fresh UUID.
    pub(crate) request_id: String,
    /// `None` for a head hyper could not parse.
    method: Option<Method>,
    path: String,
    team: Option<String>,
    /// The client key's id (its configured `id`, else a digest's first hex digits), never the
    /// key.
    key_id: Option<Arc<str>>,
    /// The name of the client certificate that named the team (`spiffe://...`, `dns:...`,
    /// `cn:...`), never the certificate.
    client_cert: Option<Arc<str>>,
    provider: Option<String>,
    model: Option<String>,
    decision: RequestDecision,
    reasons: Vec<&'static str>,
    monitored: usize,
    error_code: Option<String>,
    /// What passed on the socket, when the request opened a WebSocket.
    socket: Option<SocketCounts>,
    /// The usage of its answers, when they are counted (docs/usage.md).
    usage: Option<Arc<UsageTally>>,
    /// The request's span, which learns what the record learns.
    span: RequestSpan,
}

impl AccessRecord {
    /// Starts the record of one request.
    pub(crate) fn new(method: &Method, path: &str, headers: &HeaderMap) -> Self {
        let request_id = headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .filter(|id| !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_graphic()))
            .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned);
        Self {
            method: Some(method.clone()),
            path: path.to_owned(),
            span: RequestSpan::start(&request_id, method, path, headers),
            ..Self::unparsed(request_id)
        }
    }

    /// The record of a request whose head hyper could not parse: no method, path `-`.
    fn unparsed(request_id: String) -> Self {
        Self {
            request_id,
            method: None,
            path: "-".to_owned(),
            team: None,
            key_id: None,
            client_cert: None,
            provider: None,
            model: None,
            decision: RequestDecision::Ungated,
            reasons: Vec::new(),
            monitored: 0,
            error_code: None,
            socket: None,
            usage: None,
            span: RequestSpan::none(),
        }
    }

    /// The request's span: entered while the request is worked on, so every event logged
    /// meanwhile names the request.
    pub(crate) fn span(&self) -> &tracing::Span {
        self.span.span()
    }

    /// Notes the caller's team, its client key's id and its client certificate's matched
    /// name (anonymous callers are not noted).
    pub(crate) fn caller(&mut self, team: &str, key_id: Option<&Arc<str>>, client_cert: Option<&Arc<str>>) {
        self.team = Some(team.to_owned());
        self.span.team(team);
        if let Some(key_id) = key_id {
            self.key_id(key_id);
        }
        if let Some(name) = client_cert {
            self.client_cert(name);
        }
    }

    /// Notes the client certificate's matched name (also of one that was refused).
    pub(crate) fn client_cert(&mut self, name: &Arc<str>) {
        self.span.client_cert(name);
        self.client_cert = Some(name.clone());
    }

    /// Notes the client key's id (also of a key that was refused, so an expired one shows).
    pub(crate) fn key_id(&mut self, key_id: &Arc<str>) {
        self.span.key_id(key_id);
        self.key_id = Some(key_id.clone());
    }

    /// Notes where the request was routed.
    pub(crate) fn routed(&mut self, provider: &str, model: Option<&str>) {
        self.provider = Some(provider.to_owned());
        self.model = model.map(str::to_owned);
        self.span.provider(provider);
    }

    /// Notes the gate's verdict: the decision, and every reason listed (rejected or monitored).
    pub(crate) fn judged(&mut self, verdict: &Verdict) {
        self.decision = RequestDecision::Judged(verdict.decision());
        self.monitored = verdict.monitored;
        for violation in &verdict.violations {
            let reason = violation.reason.as_str();
            if !self.reasons.contains(&reason) {
                self.reasons.push(reason);
            }
        }
    }

    /// Notes that the proxy answered with an error of its own.
    pub(crate) fn refused(&mut self, error: &ApiError) {
        if !matches!(error, ApiError::Rejected { .. }) {
            self.decision = RequestDecision::Error;
        }
        self.error_code = Some(error.code().to_owned());
    }

    /// The tally the usage of the request's answers is added to, for its line and its span
    /// (made on first use).
    pub(crate) fn usage_tally(&mut self) -> Arc<UsageTally> {
        self.usage.get_or_insert_with(Default::default).clone()
    }

    /// Notes what passed on the WebSocket the request opened, as it closed.
    pub(crate) fn socket(&mut self, counts: SocketCounts) {
        self.socket = Some(counts);
    }

    /// The decision the line and the span show: a socket on which a message was refused is
    /// `rejected`, whatever its last message was. (The metrics count each refused message as
    /// a request of its own, so they keep the socket's last decision.)
    fn shown_decision(&self) -> RequestDecision {
        match &self.socket {
            Some(socket) if socket.refused > 0 => RequestDecision::Judged(Decision::Rejected),
            _ => self.decision,
        }
    }

    /// The request id as a header value.
    pub(crate) fn request_id_header(&self) -> HeaderValue {
        HeaderValue::try_from(self.request_id.as_str())
            .unwrap_or_else(|_| HeaderValue::from_static("invalid"))
    }

    /// Writes the log line for `outcome` (outside the request's span), and ends the span with
    /// it.
    pub(crate) fn write(&self, outcome: &Outcome) {
        let decision = self.shown_decision();
        let usage: Option<Totals> = self.usage.as_ref().and_then(|tally| tally.totals());
        let counts = usage.as_ref().and_then(Totals::counts);
        self.span.ended(
            decision.as_str(),
            outcome.status.as_u16(),
            outcome.stream_error.as_deref(),
            counts.as_ref(),
        );
        let millis = |d: Duration| format!("{:.3}", d.as_secs_f64() * 1000.0);
        let or_dash = |d: Option<Duration>| d.map_or_else(|| "-".to_owned(), millis);
        let socket = self.socket.as_ref();
        let refused_codes = socket.and_then(SocketCounts::refused_by_code);
        tracing::info!(
            target: "replaygate::access",
            request_id = %self.request_id,
            method = self.method.as_ref().map_or("-", Method::as_str),
            path = %self.path,
            team = self.team.as_deref().unwrap_or("-"),
            key_id = self.key_id.as_deref().unwrap_or("-"),
            client_cert = self.client_cert.as_deref(),
            provider = self.provider.as_deref().unwrap_or("-"),
            model = self.model.as_deref().unwrap_or("-"),
            decision = decision.as_str(),
            reasons = %self.reasons.join(","),
            monitored = self.monitored,
            error = outcome.error.or(self.error_code.as_deref()).unwrap_or("-"),
            status = outcome.status.as_u16(),
            upstream_status = %outcome.upstream.map_or_else(|| "-".to_owned(), |s| s.as_u16().to_string()),
            latency_ms = %or_dash(outcome.head),
            first_byte_ms = %or_dash(outcome.first_byte),
            duration_ms = %or_dash(outcome.duration),
            bytes_out = outcome.bytes_out,
            stream_error = outcome.stream_error.as_deref(),
            ws_messages_in = socket.map(|socket| socket.messages_in),
            ws_messages_out = socket.map(|socket| socket.messages_out),
            ws_forwarded = socket.map(|socket| socket.forwarded),
            ws_refused = socket.map(|socket| socket.refused),
            ws_refused_codes = refused_codes.as_deref(),
            ws_ended = socket.map(|socket| socket.ended),
            usage = usage.as_ref().map(Totals::word),
            input_tokens = counts.map(|counts| counts.input),
            output_tokens = counts.map(|counts| counts.output),
            cached_input_tokens = counts.map(|counts| counts.cached_input),
            reasoning_output_tokens = counts.map(|counts| counts.reasoning_output),
            "request"
        );
    }

    /// The request's method (`None` for a head hyper could not parse).
    pub(crate) fn method(&self) -> Option<&Method> {
        self.method.as_ref()
    }

    /// The request's model, once it was read.
    pub(crate) fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// The provider the request was routed to, once it was.
    pub(crate) fn provider(&self) -> Option<&str> {
        self.provider.as_deref()
    }

    /// The client key's team, once authenticated.
    pub(crate) fn team_name(&self) -> Option<&str> {
        self.team.as_deref()
    }

    /// The client key's id, once known.
    pub(crate) fn key_id_name(&self) -> Option<&str> {
        self.key_id.as_deref()
    }

    /// The client certificate's matched name, once known.
    pub(crate) fn client_cert_name(&self) -> Option<&str> {
        self.client_cert.as_deref()
    }

    /// What the gate (or the proxy) decided so far.
    pub(crate) fn decision(&self) -> RequestDecision {
        self.decision
    }
}

/// Writes the log line of a request hyper could not parse (so it has no method or path),
/// answered with `status` and the envelope's `code`.
pub(crate) fn write_unparsed(request_id: &str, status: StatusCode, code: &str, bytes_out: usize) {
    let mut record = AccessRecord::unparsed(request_id.to_owned());
    record.decision = RequestDecision::Error;
    record.error_code = Some(code.to_owned());
    record.write(&Outcome {
        status,
        upstream: None,
        head: None,
        first_byte: None,
        duration: None,
        bytes_out: bytes_out as u64,
        error: None,
        stream_error: None,
    });
}

/// How a request ended, as logged: the answer's head and how much of its body went out.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// The status sent, or 499 when the client went away before an answer.
    pub(crate) status: StatusCode,
    /// The provider's status, when the answer came from it.
    pub(crate) upstream: Option<StatusCode>,
    /// Time from the request to the answer's head, when there was one.
    pub(crate) head: Option<Duration>,
    /// Time to the first byte of the answer's body passed on (to the head when it had none).
    pub(crate) first_byte: Option<Duration>,
    /// Time from the request to the answer's last byte, or to when it was abandoned (`None`
    /// when the request's start is unknown: a head hyper could not parse).
    pub(crate) duration: Option<Duration>,
    /// Bytes of the answer's body passed on to the connection.
    pub(crate) bytes_out: u64,
    /// Overrides the recorded error code (`client_gone` when no answer was sent).
    pub(crate) error: Option<&'static str>,
    /// Why the answer's body stopped before its end, when it did.
    pub(crate) stream_error: Option<String>,
}

impl Outcome {
    /// Whether the client went away before the answer's end (before its head, or during its
    /// body).
    pub(crate) fn client_gone(&self) -> bool {
        self.error == Some(CLIENT_GONE) || self.stream_error.as_deref() == Some(CLIENT_GONE)
    }
}
