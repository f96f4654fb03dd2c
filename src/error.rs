//! The one error type of the request path, and its answer in the OpenAI error envelope.
//!
//! Every refusal the proxy makes — a gated item, an unreadable body, an unknown provider, a
//! missing key, an unreachable upstream — is an [`ApiError`], and [`ApiError::into_response`]
//! is the only place that turns one into HTTP. The SDKs read `error.type`, `error.code` and
//! `error.param` from this envelope and raise their typed exceptions from the status.

use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use serde::Serialize;

use crate::gate::{Action, BodyError, Verdict, Violation, WorkExceeded};
use crate::routing::RouteError;

/// Why the proxy answered a request itself instead of forwarding it.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The gate found items the target provider must not receive (422).
    #[error("{} input item(s) refused for provider `{provider}`", violations.len() + truncated)]
    Rejected {
        /// The provider the request was routed to.
        provider: String,
        /// The body member holding the items (`input`, or `items` on conversation paths).
        member: &'static str,
        /// The listed `reject` violations, in input order (never empty).
        violations: Vec<Violation>,
        /// How many more `reject` violations there were than are listed.
        truncated: usize,
    },
    /// The body is not JSON, or `input` has the wrong type (400).
    #[error(transparent)]
    Body(#[from] BodyError),
    /// The body is larger than `max_body_bytes` (413).
    #[error("the request body is larger than {limit} bytes")]
    BodyTooLarge {
        /// The configured limit.
        limit: u64,
    },
    /// The client stopped sending the body before it was complete (408).
    #[error("the request body did not arrive within {}", readable(*limit))]
    BodyTimeout {
        /// The configured body read timeout.
        limit: Duration,
    },
    /// The request line or a header is not HTTP/1.1 (400).
    #[error("the request line or a header could not be parsed as HTTP/1.1")]
    MalformedHead,
    /// The request head does not fit the read buffer (431).
    #[error("the request head is larger than {limit} bytes")]
    HeadTooLarge {
        /// The largest request head accepted.
        limit: usize,
    },
    /// The request target is too long to parse (414).
    #[error("the request target is too long")]
    UriTooLong,
    /// The body could not be read from the client (400).
    #[error("the request body could not be read: {0}")]
    BodyUnreadable(String),
    /// The path tries to leave its route (dot segments, encoded slashes, ...) (400).
    #[error("{0}")]
    InvalidPath(String),
    /// No provider matches the path prefix or the model (404).
    #[error("{0}")]
    UnknownProvider(String),
    /// With teams, an object route names an id the ledger does not hold for the caller's team
    /// (another team's, or unknown): the same answer either way (404).
    #[error("no {0} with that id was found")]
    NotFound(&'static str),
    /// The path's provider prefix and the routes of the body's model disagree (400).
    #[error("{0}")]
    RouteConflict(String),
    /// A method other than `POST` with a body on a gated path (405).
    #[error("{path} takes its items only by POST; {method} with a body is not accepted here")]
    MethodNotAllowed {
        /// The client's method, as it sent it.
        method: String,
        /// The request path.
        path: String,
    },
    /// A `Content-Type` that declares a charset other than UTF-8, that cannot be read, or that
    /// is sent more than once, on a gated path (415).
    #[error("{0}")]
    UnsupportedCharset(String),
    /// The provider's credential cannot be had: its key variable is unset, or its AWS
    /// credentials are missing or expired (503).
    #[error("provider `{provider}` is not configured: {reason}")]
    ProviderUnconfigured {
        /// The provider the request was routed to.
        provider: String,
        /// What is missing, naming the environment variable(s) to set.
        reason: String,
    },
    /// The proxy is at its concurrent request limit (503).
    #[error("replaygate is at its limit of {limit} concurrent requests; retry shortly")]
    Overloaded {
        /// The configured limit.
        limit: usize,
    },
    /// Accepting this body would pass `max_buffered_bytes`, the bodies held at once (503).
    #[error(
        "replaygate holds as many request bodies as max_buffered_bytes ({limit} bytes) allows; retry shortly"
    )]
    BufferFull {
        /// The configured limit.
        limit: usize,
    },
    /// The upstream could not be reached or failed before answering (502).
    #[error("provider `{provider}` could not be reached: {detail}")]
    UpstreamUnavailable {
        /// The provider the request was routed to.
        provider: String,
        /// What failed, without secrets.
        detail: String,
    },
    /// The state backend cannot answer and the request needs it (503): the ledger, for ids it
    /// must check, or the team rate limiter, to count the request; unless `[ledger]
    /// on_unavailable = "allow"`.
    #[error("replaygate's state store cannot answer now, and this request needs it ({0}); retry shortly")]
    LedgerUnavailable(String),
    /// The request would pass its team's or its key's budget (429; docs/budgets.md).
    #[error("{0}")]
    BudgetExceeded(Box<BudgetRefusal>),
    /// The state backend cannot count a budget the request is held to (503), unless `[state]
    /// on_unavailable = "allow"`.
    #[error("replaygate's state store cannot count {0} now, so the request is not forwarded; retry shortly")]
    BudgetUnavailable(String),
    /// Judging the request failed inside replaygate (500); never expected.
    #[error("replaygate failed to judge this request; please report it")]
    JudgeFailed,
    /// The upstream did not answer in time (504).
    #[error("provider `{provider}` did not answer in time")]
    UpstreamTimeout {
        /// The provider the request was routed to.
        provider: String,
    },
    /// Teams are configured and the request carries no client key, or one no team has (401).
    #[error("{0}")]
    InvalidApiKey(&'static str),
    /// The client key is known, and its `expires` has passed (401).
    #[error("the client key has expired; ask the people who run this replaygate for a new one")]
    ExpiredApiKey {
        /// The key's id (for the access line; the message leaves it out).
        key_id: std::sync::Arc<str>,
    },
    /// The verified client certificate has names that match the `client_certs` of two teams
    /// (401; docs/teams.md#a-team-known-by-its-client-certificate).
    #[error(
        "the client certificate matches the client_certs of more than one team; ask the people who \
         run this replaygate to make them disjoint"
    )]
    AmbiguousClientCertificate {
        /// The certificate's name that matched first (for the access line).
        name: std::sync::Arc<str>,
    },
    /// The client key and the verified client certificate belong to different teams (401).
    #[error("the client key and the client certificate belong to different teams; send one of them")]
    KeyCertificateMismatch {
        /// The key's id (for the access line; the message leaves it out).
        key_id: std::sync::Arc<str>,
        /// The certificate's matched name (for the access line).
        name: std::sync::Arc<str>,
    },
    /// The key's team may not use the provider the request is routed to (403).
    #[error("team `{team}` may not use provider `{provider}`")]
    ProviderNotAllowed {
        /// The client's team.
        team: String,
        /// The provider the request is routed to.
        provider: String,
    },
    /// The key's team may not use the request's model (403).
    #[error("team `{team}` may not use model `{model}`")]
    ModelNotAllowed {
        /// The client's team.
        team: String,
        /// The requested model.
        model: String,
    },
    /// The key's team is over its `requests_per_minute` (429).
    #[error("team `{team}` is over its limit of {per_minute} requests per minute; retry in {retry_after} s")]
    RateLimited {
        /// The client's team.
        team: String,
        /// The team's limit.
        per_minute: u32,
        /// Whole seconds until a request would be accepted (at least 1).
        retry_after: u64,
    },
    /// A WebSocket upgrade replaygate cannot serve: another path than `/responses`, or a
    /// handshake without a key or with another version than 13 (400).
    #[error("{0}")]
    BadUpgrade(String),
    /// The provider answered the WebSocket upgrade with a status other than 101 (that status).
    #[error("provider `{provider}` refused the WebSocket upgrade with status {}", status.as_u16())]
    UpgradeRefused {
        /// The provider the socket was routed to.
        provider: String,
        /// The provider's status.
        status: StatusCode,
    },
    /// A WebSocket client event of a type the socket does not accept: only `response.create`,
    /// and the types `[server] websocket_client_events` adds (400).
    #[error("this socket does not accept client events of type `{0}`")]
    UnsupportedEvent(String),
    /// A WebSocket message continues a response this socket no longer holds: one that was not
    /// stored and whose continuation was refused (400).
    #[error(
        "previous response `{0}` is not found on this socket (a refused continuation evicted it); continue another response or send the whole input"
    )]
    PreviousResponseNotFound(String),
}

/// The `retry-after` of a 503 `overloaded`, in seconds.
const OVERLOAD_RETRY_AFTER_SECS: &str = "1";

/// `1500 ms`, `60 s`: a configured limit as people write it.
fn readable(limit: Duration) -> String {
    if limit.subsec_millis() == 0 && limit.as_secs() > 0 {
        format!("{} s", limit.as_secs())
    } else {
        format!("{} ms", limit.as_millis())
    }
}

/// `{"error": {...}}`, in the order people read it.
#[derive(Serialize)]
struct Envelope<'e> {
    error: EnvelopeError<'e>,
}

#[derive(Serialize)]
struct EnvelopeError<'e> {
    #[serde(rename = "type")]
    kind: &'static str,
    code: &'e str,
    param: Option<&'e str>,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    violations: Option<&'e [Violation]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    violations_truncated: Option<usize>,
}

impl From<WorkExceeded> for ApiError {
    fn from(error: WorkExceeded) -> Self {
        ApiError::Body(BodyError::TooCostly(error))
    }
}

impl From<RouteError> for ApiError {
    fn from(error: RouteError) -> Self {
        match error {
            RouteError::InvalidPath(_) => ApiError::InvalidPath(error.to_string()),
            RouteError::UnknownProvider(_) | RouteError::NoProvider { .. } => {
                ApiError::UnknownProvider(error.to_string())
            }
            RouteError::RouteConflict { .. } => ApiError::RouteConflict(error.to_string()),
        }
    }
}

/// Why a request does not fit a budget: what the 429 `budget_exceeded` says.
#[derive(Debug, thiserror::Error)]
#[error(
    "{owner}'s budget of {budget} for this {window} cannot take this request: {spent} are spent \
     or reserved, and this request reserves {amount}; the {window} ends at {ends}, in {retry_after} s"
)]
pub struct BudgetRefusal {
    /// Whose budget: "team `NAME`" or "key `ID`", the caller's own.
    pub(crate) owner: String,
    /// The budget, e.g. "2000000 tokens" or "$50.000000".
    pub(crate) budget: String,
    /// `hour`, `day`, `week` or `month`.
    pub(crate) window: &'static str,
    /// What the window's counter holds, in the budget's unit.
    pub(crate) spent: String,
    /// What this request would reserve, in the budget's unit.
    pub(crate) amount: String,
    /// When the window ends (RFC 3339).
    pub(crate) ends: String,
    /// Whole seconds until the window ends (at least 1).
    pub(crate) retry_after: u64,
}

impl ApiError {
    /// The 422 for a verdict with `reject` violations: those listed, and how many were not.
    pub(crate) fn rejected(provider: &str, member: &'static str, verdict: Verdict) -> Self {
        let truncated = verdict.unlisted(Action::Reject);
        let violations = verdict
            .violations
            .into_iter()
            .filter(|v| v.action == Action::Reject)
            .collect();
        ApiError::Rejected {
            provider: provider.to_owned(),
            member,
            violations,
            truncated,
        }
    }

    /// The HTTP status of the answer.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            ApiError::Rejected { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Body(_)
            | ApiError::BodyUnreadable(_)
            | ApiError::InvalidPath(_)
            | ApiError::RouteConflict(_)
            | ApiError::MalformedHead
            | ApiError::BadUpgrade(_)
            | ApiError::UnsupportedEvent(_)
            | ApiError::PreviousResponseNotFound(_) => StatusCode::BAD_REQUEST,
            ApiError::UpgradeRefused { status, .. } => *status,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::UnsupportedCharset(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::HeadTooLarge { .. } => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ApiError::UriTooLong => StatusCode::URI_TOO_LONG,
            ApiError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            ApiError::UnknownProvider(_) | ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::InvalidApiKey(_)
            | ApiError::ExpiredApiKey { .. }
            | ApiError::AmbiguousClientCertificate { .. }
            | ApiError::KeyCertificateMismatch { .. } => StatusCode::UNAUTHORIZED,
            ApiError::ProviderNotAllowed { .. } | ApiError::ModelNotAllowed { .. } => StatusCode::FORBIDDEN,
            ApiError::RateLimited { .. } | ApiError::BudgetExceeded(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::ProviderUnconfigured { .. }
            | ApiError::Overloaded { .. }
            | ApiError::BufferFull { .. }
            | ApiError::LedgerUnavailable(_)
            | ApiError::BudgetUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::UpstreamUnavailable { .. } => StatusCode::BAD_GATEWAY,
            ApiError::UpstreamTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            ApiError::JudgeFailed => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The envelope's `type`: whose fault it is.
    pub(crate) fn kind(&self) -> &'static str {
        if matches!(
            self,
            ApiError::RateLimited { .. } | ApiError::BudgetExceeded { .. }
        ) {
            "rate_limit_error"
        } else if self.status().is_server_error() {
            "server_error"
        } else {
            "invalid_request_error"
        }
    }

    /// The envelope's `code`: stable and machine-readable.
    pub fn code(&self) -> &str {
        match self {
            ApiError::Rejected { violations, .. } => {
                violations.first().map_or("rejected", |v| v.reason.as_str())
            }
            ApiError::Body(e) => e.code(),
            ApiError::BodyTooLarge { .. } => "body_too_large",
            ApiError::BodyTimeout { .. } => "body_timeout",
            ApiError::BodyUnreadable(_) => "body_unreadable",
            ApiError::MalformedHead => "invalid_request",
            ApiError::HeadTooLarge { .. } => "request_headers_too_large",
            ApiError::UriTooLong => "uri_too_long",
            ApiError::InvalidPath(_) => "invalid_path",
            ApiError::UnknownProvider(_) => "unknown_provider",
            ApiError::NotFound(_) => "not_found",
            ApiError::RouteConflict(_) => "route_conflict",
            ApiError::MethodNotAllowed { .. } => "method_not_allowed",
            ApiError::UnsupportedCharset(_) => "unsupported_charset",
            ApiError::ProviderUnconfigured { .. } => "provider_unconfigured",
            ApiError::Overloaded { .. } | ApiError::BufferFull { .. } => "overloaded",
            ApiError::UpstreamUnavailable { .. } => "upstream_unavailable",
            ApiError::UpstreamTimeout { .. } => "upstream_timeout",
            ApiError::JudgeFailed => "internal_error",
            ApiError::LedgerUnavailable(_) => "ledger_unavailable",
            ApiError::InvalidApiKey(_) => "invalid_api_key",
            ApiError::ExpiredApiKey { .. } => "expired_api_key",
            ApiError::AmbiguousClientCertificate { .. } => "ambiguous_client_certificate",
            ApiError::KeyCertificateMismatch { .. } => "key_certificate_mismatch",
            ApiError::ProviderNotAllowed { .. } => "provider_not_allowed",
            ApiError::ModelNotAllowed { .. } => "model_not_allowed",
            ApiError::RateLimited { .. } => "rate_limit_exceeded",
            ApiError::BudgetExceeded(_) => "budget_exceeded",
            ApiError::BudgetUnavailable(_) => "budget_unavailable",
            ApiError::BadUpgrade(_) => "invalid_upgrade",
            ApiError::UpgradeRefused { .. } => "upstream_refused_upgrade",
            ApiError::UnsupportedEvent(_) => "unsupported_event",
            ApiError::PreviousResponseNotFound(_) => "previous_response_not_found",
        }
    }

    /// The envelope's `param`: the request parameter at fault, if any.
    pub(crate) fn param(&self) -> Option<&str> {
        match self {
            ApiError::Rejected { violations, .. } => violations.first().map(|v| v.param.as_str()),
            ApiError::Body(e) => e.param(),
            _ => None,
        }
    }

    /// The envelope's `message`.
    pub(crate) fn message(&self) -> String {
        match self {
            ApiError::Rejected {
                provider,
                member,
                violations,
                truncated,
            } => {
                let first = &violations[0];
                let more = match violations.len() + truncated {
                    1 => String::new(),
                    2 => " (and 1 more violation)".to_owned(),
                    n => format!(" (and {} more violations)", n - 1),
                };
                format!(
                    "{} cannot be sent to provider `{provider}`: {}{more}",
                    first.location(member),
                    first.message
                )
            }
            other => other.to_string(),
        }
    }

    /// Whether a client retry could succeed (steers the SDKs' automatic retries).
    fn retryable(&self) -> bool {
        matches!(
            self,
            ApiError::Overloaded { .. }
                | ApiError::BufferFull { .. }
                | ApiError::UpstreamUnavailable { .. }
                | ApiError::UpstreamTimeout { .. }
                | ApiError::RateLimited { .. }
                | ApiError::LedgerUnavailable(_)
                | ApiError::BudgetUnavailable(_)
        )
    }

    /// The envelope as JSON text.
    pub(crate) fn envelope(&self) -> String {
        let (violations, violations_truncated) = match self {
            ApiError::Rejected {
                violations,
                truncated,
                ..
            } => (
                Some(violations.as_slice()),
                (*truncated > 0).then_some(*truncated),
            ),
            _ => (None, None),
        };
        let envelope = Envelope {
            error: EnvelopeError {
                kind: self.kind(),
                code: self.code(),
                param: self.param(),
                message: self.message(),
                violations,
                violations_truncated,
            },
        };
        serde_json::to_string(&envelope).expect("the envelope serializes")
    }

    /// The answer to send to the client.
    pub(crate) fn into_response(self) -> Response<Bytes> {
        let mut response = Response::new(Bytes::from(self.envelope()));
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let retry = if self.retryable() { "true" } else { "false" };
        headers.insert("x-should-retry", HeaderValue::from_static(retry));
        if matches!(self, ApiError::MethodNotAllowed { .. }) {
            headers.insert(header::ALLOW, HeaderValue::from_static("POST"));
        }
        match &self {
            ApiError::RateLimited { retry_after, .. } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after));
            }
            ApiError::BudgetExceeded(refusal) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(refusal.retry_after));
            }
            _ => {}
        }
        if matches!(self, ApiError::Overloaded { .. } | ApiError::BufferFull { .. }) {
            // Load passes within seconds: held bodies are sent on or time out.
            headers.insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(OVERLOAD_RETRY_AFTER_SECS),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::Reason;

    fn violation(index: usize, reason: Reason, param: &str) -> Violation {
        Violation {
            index: Some(index),
            item_type: "function_call".into(),
            id: None,
            call_id: Some("c1".into()),
            reason,
            action: Action::Reject,
            param: param.into(),
            pointer: None,
            message: "bad".into(),
        }
    }

    fn envelope(e: &ApiError) -> serde_json::Value {
        serde_json::from_str(&e.envelope()).unwrap()
    }

    #[test]
    fn rejections_lead_with_the_first_violation() {
        let e = ApiError::Rejected {
            provider: "bedrock".into(),
            member: "input",
            violations: vec![
                violation(2, Reason::Status, "input[2].status"),
                violation(4, Reason::CallIdMismatch, "input[4].call_id"),
            ],
            truncated: 0,
        };
        assert_eq!(e.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let v = envelope(&e);
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["code"], "status");
        assert_eq!(v["error"]["param"], "input[2].status");
        assert_eq!(v["error"]["violations"].as_array().unwrap().len(), 2);
        assert_eq!(
            v["error"]["message"],
            "input[2] cannot be sent to provider `bedrock`: bad (and 1 more violation)"
        );
        assert!(v["error"].get("violations_truncated").is_none());
    }

    #[test]
    fn a_long_rejection_lists_the_first_violations_and_counts_the_rest() {
        let mut verdict = Verdict::default();
        for index in 0..5 {
            verdict.push_with(Reason::Status, Action::Reject, Some(index), 3, || {
                violation(index, Reason::Status, "input[0].status")
            });
        }
        let monitored = Violation {
            action: Action::Monitor,
            ..violation(9, Reason::UnknownTool, "input[9].name")
        };
        verdict.push_with(Reason::UnknownTool, Action::Monitor, Some(9), 3, || monitored);
        let e = ApiError::rejected("openai", "input", verdict);
        let v = envelope(&e);
        let listed = v["error"]["violations"].as_array().unwrap();
        assert_eq!(listed.len(), 3);
        assert!(listed.iter().all(|v| v["action"] == "reject"));
        assert_eq!(v["error"]["violations_truncated"], 2);
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .ends_with("(and 4 more violations)"));
    }

    #[test]
    fn server_side_failures_are_server_errors() {
        let e = ApiError::ProviderUnconfigured {
            provider: "bedrock".into(),
            reason: "environment variable AWS_BEARER_TOKEN_BEDROCK is not set".into(),
        };
        let v = envelope(&e);
        assert_eq!(
            (e.status().as_u16(), v["error"]["type"].as_str()),
            (503, Some("server_error"))
        );
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("AWS_BEARER_TOKEN_BEDROCK"));
        assert_eq!(v["error"]["param"], serde_json::Value::Null);
        assert_eq!(
            ApiError::UpstreamTimeout { provider: "p".into() }
                .status()
                .as_u16(),
            504
        );
    }

    #[test]
    fn body_errors_keep_their_code_and_param() {
        let e = ApiError::from(BodyError::InvalidInput {
            param: "input".into(),
            message: "wrong".into(),
        });
        let v = envelope(&e);
        assert_eq!(
            (v["error"]["code"].as_str(), v["error"]["param"].as_str()),
            (Some("invalid_input"), Some("input"))
        );
        assert_eq!(ApiError::BodyTooLarge { limit: 1 }.code(), "body_too_large");
    }

    #[test]
    fn timeouts_are_reported_in_the_unit_they_were_configured_in() {
        let message = |limit| ApiError::BodyTimeout { limit }.message();
        assert!(message(Duration::from_millis(300)).ends_with("within 300 ms"));
        assert!(message(Duration::from_millis(1500)).ends_with("within 1500 ms"));
        assert!(message(Duration::from_secs(60)).ends_with("within 60 s"));
    }

    #[test]
    fn responses_carry_json_and_retry_advice() {
        let r: Response<Bytes> = ApiError::UpstreamTimeout { provider: "p".into() }.into_response();
        assert_eq!(r.headers()["content-type"], "application/json");
        assert_eq!(r.headers()["x-should-retry"], "true");
        let r: Response<Bytes> = ApiError::BodyTooLarge { limit: 1 }.into_response();
        assert_eq!(r.headers()["x-should-retry"], "false");
        assert!(!r.headers().contains_key("retry-after"));
    }

    #[test]
    fn overload_answers_say_when_to_retry() {
        for error in [
            ApiError::BufferFull { limit: 16 },
            ApiError::Overloaded { limit: 2 },
        ] {
            let v = envelope(&error);
            assert_eq!(
                (v["error"]["type"].as_str(), v["error"]["code"].as_str()),
                (Some("server_error"), Some("overloaded"))
            );
            let r = error.into_response();
            assert_eq!(r.status(), 503);
            assert_eq!(r.headers()["retry-after"], "1");
            assert_eq!(r.headers()["x-should-retry"], "true");
        }
    }

    #[test]
    fn request_shape_refusals_have_their_status_code_and_allow_header() {
        let r = ApiError::MethodNotAllowed {
            method: "PUT".into(),
            path: "/v1/responses".into(),
        }
        .into_response();
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(r.headers()["allow"], "POST");
        let v: serde_json::Value = serde_json::from_slice(r.body()).unwrap();
        assert_eq!(v["error"]["code"], "method_not_allowed");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        let e = ApiError::UnsupportedCharset("charset utf-7".into());
        assert_eq!((e.status().as_u16(), e.code()), (415, "unsupported_charset"));
        assert!(!e.into_response().headers().contains_key("allow"));
    }

    #[test]
    fn a_route_conflict_is_a_client_error_naming_both_sides() {
        let e = ApiError::from(RouteError::RouteConflict {
            model: "openai.gpt-5.4".into(),
            provider: "openai".into(),
            routed: vec!["bedrock-openai".into(), "bedrock".into()],
        });
        assert_eq!((e.status().as_u16(), e.code()), (400, "route_conflict"));
        let message = e.message();
        for part in ["`openai.gpt-5.4`", "`openai`", "`bedrock-openai`, `bedrock`"] {
            assert!(message.contains(part), "{message}");
        }
    }
}
