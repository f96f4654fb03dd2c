//! The span of one request: it carries the request id (and, once known, the team, the client
//! key's id and the provider) to every event logged while the request is handled, and, when
//! spans are exported (`[telemetry] otlp_endpoint`), it is the request's exported span, which
//! also gets the gate's decision and the status when the request ends.

use std::sync::atomic::{AtomicBool, Ordering};

use http::{HeaderMap, Method};
use tracing::field::{display, Empty};
use tracing::Span;

use super::propagation;
use crate::usage::Usage;

/// The target of request spans; the exporter's filter takes these spans and no others.
pub(super) const TARGET: &str = "replaygate::request";

/// Whether request spans are exported: set once, when the exporting subscriber is installed.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether this process exports request spans (and so sends its own `traceparent` upstream).
pub(crate) fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// Notes that the exporting subscriber is installed.
pub(super) fn exporting_from_now_on() {
    EXPORTING.store(true, Ordering::Relaxed);
}

/// The span of one request, from its head to the last byte of its answer.
///
/// It is at level `ERROR` so that it is enabled whenever anything is logged at all: a warning
/// logged under `level = "warn"` still names its request. The access line is written outside
/// it, so its own fields and format do not change.
#[derive(Debug)]
pub(crate) struct RequestSpan(Span);

impl RequestSpan {
    /// Opens the span of a request. When spans are exported, a W3C `traceparent` in `headers`
    /// becomes its parent.
    pub(crate) fn start(request_id: &str, method: &Method, path: &str, headers: &HeaderMap) -> RequestSpan {
        if !exporting() {
            return RequestSpan(tracing::error_span!(
                target: TARGET,
                "request",
                request_id = %request_id,
                method = %method,
                path = %path,
                team = Empty,
                key_id = Empty,
                client_cert = Empty,
                provider = Empty,
            ));
        }
        let span = tracing::error_span!(
            target: TARGET,
            "request",
            request_id = %request_id,
            method = %method,
            path = %path,
            team = Empty,
            key_id = Empty,
            client_cert = Empty,
            provider = Empty,
            decision = Empty,
            status = Empty,
            stream_error = Empty,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            gen_ai.usage.cache_read.input_tokens = Empty,
            gen_ai.usage.reasoning.output_tokens = Empty,
            otel.name = method.as_str(),
            otel.kind = "server",
        );
        propagation::continue_trace(&span, headers);
        RequestSpan(span)
    }

    /// The span of a request that has none (a head hyper could not parse).
    pub(crate) fn none() -> RequestSpan {
        RequestSpan(Span::none())
    }

    /// The span, to enter while the request is worked on.
    pub(crate) fn span(&self) -> &Span {
        &self.0
    }

    /// Notes the client key's team.
    pub(crate) fn team(&self, team: &str) {
        self.0.record("team", display(team));
    }

    /// Notes the client key's id (never the key).
    pub(crate) fn key_id(&self, key_id: &str) {
        self.0.record("key_id", display(key_id));
    }

    /// Notes the name of the client certificate that named the team (never the certificate).
    pub(crate) fn client_cert(&self, name: &str) {
        self.0.record("client_cert", display(name));
    }

    /// Notes the provider the request was routed to.
    pub(crate) fn provider(&self, provider: &str) {
        self.0.record("provider", display(provider));
    }

    /// Notes how the request ended, for the exported span: the gate's decision (`allowed`,
    /// `rejected`, ... as in the access line), the status sent, why the answer's body
    /// stopped early if it did, and the tokens its answers reported (docs/usage.md). It gets
    /// an error status on a 5xx or a broken stream.
    pub(crate) fn ended(
        &self,
        decision: &str,
        status: u16,
        stream_error: Option<&str>,
        usage: Option<&Usage>,
    ) {
        if !exporting() {
            return;
        }
        self.0.record("decision", display(decision));
        self.0.record("status", status);
        if let Some(usage) = usage {
            self.0.record("gen_ai.usage.input_tokens", usage.input);
            self.0.record("gen_ai.usage.output_tokens", usage.output);
            self.0
                .record("gen_ai.usage.cache_read.input_tokens", usage.cached_input);
            self.0
                .record("gen_ai.usage.reasoning.output_tokens", usage.reasoning_output);
        }
        if let Some(stream_error) = stream_error {
            self.0.record("stream_error", display(stream_error));
        }
        match stream_error {
            Some(broken) => propagation::failed(&self.0, format!("the answer's stream broke: {broken}")),
            None if status >= 500 => propagation::failed(&self.0, format!("answered {status}")),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{LogConfig, LogFormat};
    use crate::telemetry::memory_lines::MemoryLines as Lines;

    /// Logs, through `subscriber`, a warning inside a request span that learned its team, key
    /// id, client certificate name and provider, then the access line outside it.
    fn log_a_request(subscriber: impl Into<tracing::Dispatch>) {
        tracing::dispatcher::with_default(&subscriber.into(), || {
            let span = RequestSpan::start("req-7", &Method::POST, "/v1/responses", &HeaderMap::new());
            span.team("payments");
            span.key_id("ci-2026-12");
            span.client_cert("cn:payments-ci");
            span.provider("openai");
            span.span().in_scope(|| {
                tracing::warn!("the team's rate could not be counted");
                tracing::info!("a line the level leaves out");
            });
            tracing::info!(target: "replaygate::access", request_id = "req-7", "request");
        });
    }

    /// The process's log subscriber at `warn` with the access log at `info`: as `install`
    /// builds it, or, `exporting`, the log layer the exporting subscriber has beside the export.
    fn logged_as<W>(format: LogFormat, writer: W, exporting: bool) -> tracing::Dispatch
    where
        W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
    {
        use tracing_subscriber::layer::SubscriberExt;
        let log = LogConfig {
            format,
            level: "warn,replaygate::access=info".into(),
        };
        if exporting {
            tracing::Dispatch::new(
                tracing_subscriber::registry().with(crate::telemetry::log_layer(&log, writer, false)),
            )
        } else {
            tracing::Dispatch::new(crate::telemetry::log_subscriber(&log, writer, false))
        }
    }

    #[test]
    fn a_text_line_logged_inside_a_request_names_it() {
        for exporting in [false, true] {
            let lines = Lines::default();
            let sink = lines.clone();
            log_a_request(logged_as(LogFormat::Text, move || sink.clone(), exporting));
            let text = lines.text();
            assert_eq!(text.lines().count(), 2, "{text}");
            let mut lines = text.lines();
            let warning = lines.next().unwrap();
            assert!(
                warning.contains(
                    "request{request_id=req-7 method=POST path=/v1/responses team=payments key_id=ci-2026-12 client_cert=cn:payments-ci provider=openai}: "
                ),
                "{warning}"
            );
            let access = lines.next().unwrap();
            assert!(!access.contains("request{"), "{access}");
        }
    }

    #[test]
    fn a_json_line_logged_inside_a_request_carries_its_span() {
        for exporting in [false, true] {
            a_json_line_carries_its_span(exporting);
        }
    }

    fn a_json_line_carries_its_span(exporting: bool) {
        let lines = Lines::default();
        let sink = lines.clone();
        log_a_request(logged_as(LogFormat::Json, move || sink.clone(), exporting));
        let text = lines.text();
        let parsed: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(parsed.len(), 2, "{text}");
        assert_eq!(
            parsed[0]["span"],
            serde_json::json!({
                "name": "request",
                "request_id": "req-7",
                "method": "POST",
                "path": "/v1/responses",
                "team": "payments",
                "key_id": "ci-2026-12",
                "client_cert": "cn:payments-ci",
                "provider": "openai",
            })
        );
        assert!(parsed[1].get("span").is_none(), "{text}");
        assert_eq!(parsed[1]["request_id"], "req-7");
    }

    #[test]
    fn a_request_span_is_on_whenever_anything_is_logged() {
        let lines = Lines::default();
        let sink = lines.clone();
        log_a_request(
            tracing_subscriber::fmt()
                .with_writer(move || sink.clone())
                .with_ansi(false)
                .with_env_filter("error")
                .finish(),
        );
        assert_eq!(lines.text(), "");
        // Under `error`, the span is still enabled (so errors name their request).
        tracing::subscriber::with_default(
            tracing_subscriber::fmt().with_env_filter("error").finish(),
            || {
                let span = RequestSpan::start("req-8", &Method::GET, "/v1/models", &HeaderMap::new());
                assert!(!span.span().is_disabled());
            },
        );
    }
}
