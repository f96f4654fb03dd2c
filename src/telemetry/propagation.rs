//! W3C trace context (`traceparent`, `tracestate`) across the proxy, when request spans are
//! exported: the client's context is the parent of the request's span, and the request to the
//! provider carries the context of that span instead of the client's. When nothing is
//! exported, none of this runs and the client's headers pass unchanged.

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::Status;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::request_span::exporting;

const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// Makes the trace context of `headers`, when they carry a valid `traceparent`, the parent of
/// `span` (which has not been entered yet).
pub(super) fn continue_trace(span: &Span, headers: &HeaderMap) {
    if !headers.contains_key(TRACEPARENT) {
        return;
    }
    let parent = TraceContextPropagator::new().extract(&Incoming(headers));
    let _ = span.set_parent(parent);
}

/// Gives an exported span an error status with `message`.
pub(super) fn failed(span: &Span, message: String) {
    span.set_status(Status::error(message));
}

/// When request spans are exported, replaces the client's `traceparent` and `tracestate` in
/// `headers` (bound for the provider) with the context of the current request's span; else
/// leaves them as they are.
pub(crate) fn to_provider(headers: &mut HeaderMap) {
    if !exporting() {
        return;
    }
    headers.remove(TRACEPARENT);
    headers.remove(TRACESTATE);
    let context = Span::current().context();
    TraceContextPropagator::new().inject_context(&context, &mut Outgoing(headers));
}

/// A request's headers, read as a trace context carrier.
struct Incoming<'h>(&'h HeaderMap);

impl Extractor for Incoming<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        // A repeated header is ambiguous: no parent rather than a guess.
        let mut values = self.0.get_all(key).iter();
        match (values.next(), values.next()) {
            (Some(value), None) => value.to_str().ok(),
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

/// Outgoing headers, written as a trace context carrier.
struct Outgoing<'h>(&'h mut HeaderMap);

impl Injector for Outgoing<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(key), HeaderValue::try_from(value)) {
            self.0.insert(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TraceContextExt;

    #[test]
    fn a_traceparent_is_read_and_a_repeated_one_is_not() {
        let mut headers = HeaderMap::new();
        headers.insert(
            TRACEPARENT,
            HeaderValue::from_static("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        );
        let context = TraceContextPropagator::new().extract(&Incoming(&headers));
        let remote = context.span().span_context().clone();
        assert!(remote.is_valid() && remote.is_remote() && remote.is_sampled());
        assert_eq!(remote.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(remote.span_id().to_string(), "00f067aa0ba902b7");

        headers.append(
            TRACEPARENT,
            HeaderValue::from_static("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        );
        let context = TraceContextPropagator::new().extract(&Incoming(&headers));
        assert!(!context.span().span_context().is_valid());
    }

    #[test]
    fn nothing_changes_upstream_while_nothing_is_exported() {
        let mut headers = HeaderMap::new();
        headers.insert(
            TRACEPARENT,
            HeaderValue::from_static("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        );
        headers.insert(TRACESTATE, HeaderValue::from_static("vendor=1"));
        let before = headers.clone();
        assert!(!exporting());
        to_provider(&mut headers);
        assert_eq!(headers, before);
    }
}
