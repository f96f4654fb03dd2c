//! Tracing (docs/operations.md#tracing): every event logged while a request is handled names the
//! request, and with `[telemetry] otlp_endpoint` each request is one span exported over OTLP/HTTP,
//! continuing
//! the client's W3C trace and passing its own `traceparent` to the provider.
//!
//! The tracing subscriber is one per process, so the exporting proxy runs as `replaygate serve`
//! in a child process of its own; the collector and the fake provider run in this one.

#![cfg(unix)]

mod collector;

use std::path::{Path, PathBuf};
use std::time::Duration;

use collector::{Collector, Exported};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use serde_json::Value;

use super::teams::{key_entry, PAY_KEY};
use crate::support::closed_port::closed_port;
use crate::support::proxy::{one_provider, Proxy};
use crate::support::serve::Serve;
use crate::support::upstream::{json_response, Received, Upstream, RESPONSE_JSON};

const ALLOWED_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const ALLOWED_PARENT: &str = "00f067aa0ba902b7";
const REJECTED_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const REJECTED_PARENT: &str = "b7ad6b7169203331";

const ALLOWED: &str = r#"{"model":"gpt-5","input":"hi"}"#;
/// An item of a namespace `openai` does not accept: 422 `namespaced`.
const REJECTED: &str = r#"{"model":"gpt-5","input":[{"type":"acme:lookup","id":"x_1"}]}"#;
/// A body the fake provider answers with 500.
const FAILING: &str = r#"{"model":"gpt-5","input":"fail please"}"#;

fn traceparent(trace: &str, parent: &str) -> String {
    format!("00-{trace}-{parent}-01")
}

/// The usage the provider's answers report (docs/usage.md).
const USAGE: &str = r#""usage":{"input_tokens":40,"input_tokens_details":{"cached_tokens":30},"output_tokens":9,"output_tokens_details":{"reasoning_tokens":6}}"#;

/// A provider that answers 500 to [`FAILING`] and 200 to anything else, with [`USAGE`].
async fn provider() -> Upstream {
    Upstream::start(|received: Received| async move {
        if received.body.as_ref() == FAILING.as_bytes() {
            json_response(500, r#"{"error":{"message":"boom"}}"#)
        } else {
            let answer = RESPONSE_JSON.strip_suffix('}').expect("a JSON object");
            json_response(200, format!("{answer},{USAGE}}}"))
        }
    })
    .await
}

/// Writes `text` as `proxy.toml` in `dir`.
fn write_config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("proxy.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A one-provider configuration for serve, state in memory and ledger off, plus `extra`.
fn serve_config(upstream: &Upstream, extra: &str) -> String {
    one_provider(
        &upstream.base_url(),
        "\"none\"",
        &format!("[server]\nworkers = 2\n[state]\nbackend = \"memory\"\n[ledger]\nenabled = false\n{extra}"),
    )
}

/// POSTs `body` to `/v1/responses` of `address` with a request id and, when given, a
/// `traceparent`; the status.
async fn post(address: &str, body: &'static str, request_id: &str, traceparent: Option<&str>) -> u16 {
    let mut request = reqwest::Client::new()
        .post(format!("http://{address}/v1/responses"))
        .header("content-type", "application/json")
        .header("x-request-id", request_id)
        .body(body);
    if let Some(traceparent) = traceparent {
        request = request.header("traceparent", traceparent);
    }
    let response = tokio::time::timeout(Duration::from_secs(10), request.send())
        .await
        .expect("the proxy answered in time")
        .unwrap();
    let status = response.status().as_u16();
    response.bytes().await.unwrap();
    status
}

/// The one span exported for `request_id`.
fn span_of<'s>(spans: &'s [Exported], request_id: &str) -> &'s Exported {
    let mine: Vec<&Exported> = spans
        .iter()
        .filter(|span| span.attribute("request_id").as_deref() == Some(request_id))
        .collect();
    assert_eq!(mine.len(), 1, "spans of {request_id}: {spans:#?}");
    mine[0]
}

/// SIGTERM, then a bounded wait for a clean exit (the export is flushed on the way out).
async fn stop(mut serve: Serve) {
    serve.signal("-TERM");
    let status = serve
        .exited_within(Duration::from_secs(20))
        .await
        .expect("serve stopped after SIGTERM");
    assert!(status.success(), "serve exited with {status}");
}

#[tokio::test]
async fn each_request_is_one_exported_span_that_continues_the_clients_trace() {
    let collector = Collector::start().await;
    let upstream = provider().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &serve_config(
            &upstream,
            &format!(
                "[telemetry]\notlp_endpoint = \"{}\"\nservice_name = \"gate-test\"\n",
                collector.endpoint()
            ),
        ),
    );
    let serve = Serve::start(Serve::command(&config)).await;

    let allowed = traceparent(ALLOWED_TRACE, ALLOWED_PARENT);
    assert_eq!(
        post(&serve.address, ALLOWED, "otel-allowed", Some(&allowed)).await,
        200
    );
    let rejected = traceparent(REJECTED_TRACE, REJECTED_PARENT);
    assert_eq!(
        post(&serve.address, REJECTED, "otel-rejected", Some(&rejected)).await,
        422
    );
    assert_eq!(post(&serve.address, FAILING, "otel-failing", None).await, 500);
    // The spans are exported on their way out at the latest.
    stop(serve).await;

    let spans = collector.until_spans(3).await;
    assert!(collector.refused().is_empty(), "{:?}", collector.refused());
    assert_eq!(spans.len(), 3, "one span per request: {spans:#?}");
    for span in &spans {
        assert_eq!(span.service.as_deref(), Some("gate-test"));
        assert_eq!(span.span.kind, SpanKind::Server as i32);
        assert_eq!(span.span.name, "POST");
        assert_eq!(span.attribute("method").as_deref(), Some("POST"));
        assert_eq!(span.attribute("path").as_deref(), Some("/v1/responses"));
        assert_eq!(span.attribute("provider").as_deref(), Some("openai"));
        assert!(span.span.end_time_unix_nano >= span.span.start_time_unix_nano);
    }

    let allowed = span_of(&spans, "otel-allowed");
    assert_eq!(allowed.attribute("decision").as_deref(), Some("allowed"));
    assert_eq!(allowed.attribute("status").as_deref(), Some("200"));
    for (attribute, count) in [
        ("gen_ai.usage.input_tokens", "40"),
        ("gen_ai.usage.output_tokens", "9"),
        ("gen_ai.usage.cache_read.input_tokens", "30"),
        ("gen_ai.usage.reasoning.output_tokens", "6"),
    ] {
        assert_eq!(
            allowed.attribute(attribute).as_deref(),
            Some(count),
            "{attribute}"
        );
    }
    // A rejected request asked the provider for nothing: no usage.
    assert_eq!(
        span_of(&spans, "otel-rejected").attribute("gen_ai.usage.input_tokens"),
        None
    );
    assert_eq!(allowed.trace_id(), ALLOWED_TRACE);
    assert_eq!(allowed.parent_span_id(), ALLOWED_PARENT);
    assert_ne!(
        allowed.span.status.as_ref().map_or(0, |s| s.code),
        StatusCode::Error as i32
    );

    let rejected = span_of(&spans, "otel-rejected");
    assert_eq!(rejected.attribute("decision").as_deref(), Some("rejected"));
    assert_eq!(rejected.attribute("status").as_deref(), Some("422"));
    assert_eq!(rejected.trace_id(), REJECTED_TRACE);
    assert_eq!(rejected.parent_span_id(), REJECTED_PARENT);

    // Without a traceparent the span starts a trace; a 5xx is an error.
    let failing = span_of(&spans, "otel-failing");
    assert_eq!(failing.attribute("status").as_deref(), Some("500"));
    assert!(failing.parent_span_id().is_empty(), "{failing:#?}");
    assert_eq!(failing.span.trace_id.len(), 16);
    assert_eq!(
        failing.span.status.as_ref().map(|s| s.code),
        Some(StatusCode::Error as i32)
    );

    // The provider got the proxy's span as the parent, in the client's trace; the rejected
    // request never reached it.
    let received = upstream.received();
    assert_eq!(received.len(), 2, "{received:#?}");
    let forwarded = &received[0];
    assert_eq!(forwarded.body.as_ref(), ALLOWED.as_bytes());
    let sent: Vec<&str> = forwarded
        .headers
        .get_all("traceparent")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(
        sent,
        [format!("00-{ALLOWED_TRACE}-{}-01", allowed.span_id())],
        "the provider's traceparent names the exported span"
    );
    let failing_sent = received[1].headers["traceparent"].to_str().unwrap();
    assert_eq!(
        failing_sent,
        format!("00-{}-{}-01", failing.trace_id(), failing.span_id())
    );
}

#[tokio::test]
async fn without_an_endpoint_the_clients_trace_headers_pass_unchanged() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"none\"", ""), &[]).await;
    let traceparent = traceparent(ALLOWED_TRACE, ALLOWED_PARENT);
    let response = reqwest::Client::new()
        .post(proxy.url("/v1/responses"))
        .header("content-type", "application/json")
        .header("traceparent", &traceparent)
        .header("tracestate", "vendor=opaque")
        .body(ALLOWED)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let received = upstream.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].headers["traceparent"], traceparent.as_str());
    assert_eq!(received[0].headers["tracestate"], "vendor=opaque");
}

#[tokio::test]
async fn a_collector_that_is_down_costs_dropped_spans_and_one_log_line() {
    // A port nothing listens on.
    let closed = format!("127.0.0.1:{}", closed_port());
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &serve_config(
            &upstream,
            &format!("[telemetry]\notlp_endpoint = \"http://{closed}\"\n"),
        ),
    );
    let mut command = Serve::command(&config);
    // Export every 50 ms, so the requests below make several failed exports.
    command.env("OTEL_BSP_SCHEDULE_DELAY", "50");
    let mut serve = Serve::start(command).await;
    for round in 0..5 {
        let started = std::time::Instant::now();
        assert_eq!(
            post(&serve.address, ALLOWED, &format!("down-{round}"), None).await,
            200
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "the request waited for the collector"
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    serve.signal("-TERM");
    // Every line, up to the exit.
    let (mut failures, mut access_lines) = (0, 0);
    while let Some(line) = serve.next_line(Duration::from_secs(20)).await {
        failures += usize::from(line.contains("request spans cannot be exported"));
        access_lines += usize::from(line.contains("request_id=down-"));
    }
    assert_eq!(access_lines, 5);
    assert_eq!(failures, 1, "the failing export is logged once");
    let status = serve
        .exited_within(Duration::from_secs(20))
        .await
        .expect("serve stopped after SIGTERM");
    assert!(status.success(), "serve exited with {status}");
}

/// A config of one provider at `upstream` that logs JSON and keeps its state in a Redis on a
/// port nothing listens on, with `more` after it.
fn json_logs_and_no_redis(upstream: &Upstream, more: &str) -> String {
    let closed = format!("127.0.0.1:{}", closed_port());
    one_provider(
        &upstream.base_url(),
        "\"none\"",
        &format!(
            "[log]\nformat = \"json\"\n[state]\nbackend = \"redis\"\nurl = \"redis://{closed}\"\n{more}"
        ),
    )
}

#[tokio::test]
async fn a_warning_logged_inside_a_request_names_it() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let dir = tempfile::tempdir().unwrap();
    // Redis on a port nothing listens on: the team's rate cannot be counted (a warning, and the
    // request goes on under on_unavailable = "allow"), nor the answer recorded in the ledger
    // (another, while the body streams).
    let teams = format!(
        "[ledger]\non_unavailable = \"allow\"\n[teams.payments]\nkeys = [{{ id = \"ci-1\", digest = \"{}\" }}]\nrequests_per_minute = 600\n",
        key_entry(PAY_KEY)
    );
    let config = write_config(dir.path(), &json_logs_and_no_redis(&upstream, &teams));
    let mut serve = Serve::start(Serve::command(&config)).await;
    let response = reqwest::Client::new()
        .post(format!("http://{}/v1/responses", serve.address))
        .header("authorization", format!("Bearer {PAY_KEY}"))
        .header("x-request-id", "warned-request")
        .body(ALLOWED)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.bytes().await.unwrap();

    let line = serve.until_logged("the team's rate could not be counted").await;
    let warning: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(warning["level"], "WARN", "{line}");
    assert_eq!(warning["span"]["name"], "request", "{line}");
    assert_eq!(warning["span"]["request_id"], "warned-request", "{line}");
    assert_eq!(warning["span"]["team"], "payments", "{line}");
    assert_eq!(warning["span"]["key_id"], "ci-1", "{line}");
    assert_eq!(warning["outcome"], "allowed", "{line}");
    assert!(!line.contains(PAY_KEY), "{line}");

    let line = serve.until_logged("a ledger record was not written").await;
    let warning: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(warning["span"]["request_id"], "warned-request", "{line}");
    assert_eq!(warning["span"]["provider"], "openai", "{line}");

    // The access line keeps its own shape: its fields at the top, no span.
    let line = serve.until_logged("\"target\":\"replaygate::access\"").await;
    let access: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(access["request_id"], "warned-request", "{line}");
    assert_eq!(access["key_id"], "ci-1", "{line}");
    assert!(
        access.get("span").is_none() && access.get("spans").is_none(),
        "{line}"
    );
}

#[tokio::test]
async fn records_that_cannot_be_written_are_logged_one_line_a_second_with_the_count_of_the_rest() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let dir = tempfile::tempdir().unwrap();
    // Redis on a port nothing listens on: no answer's record can be written.
    let config = write_config(dir.path(), &json_logs_and_no_redis(&upstream, ""));
    let mut serve = Serve::start(Serve::command(&config)).await;
    const REQUESTS: usize = 8;
    let started = std::time::Instant::now();
    let ids: Vec<String> = (0..REQUESTS).map(|n| format!("unrecorded-{n}")).collect();
    let answers = ids.iter().map(|id| post(&serve.address, ALLOWED, id, None));
    for status in futures_util::future::join_all(answers).await {
        assert_eq!(status, 200, "the answer goes on unchanged");
    }
    let took = started.elapsed();
    serve.signal("-TERM");
    let mut warnings = Vec::new();
    while let Some(line) = serve.next_line(Duration::from_secs(20)).await {
        if line.contains("a ledger record was not written") {
            warnings.push(serde_json::from_str::<Value>(&line).unwrap());
        }
    }
    assert!(!warnings.is_empty(), "the first is logged");
    assert_eq!(warnings[0]["not_logged_since_last"], 0, "{:?}", warnings[0]);
    // At most one line a second (the requests took `took`), each saying how many it stands for.
    assert!(
        warnings.len() as u64 <= took.as_secs() + 1,
        "{} lines in {took:?}",
        warnings.len()
    );
    let logged: u64 = warnings
        .iter()
        .map(|line| 1 + line["not_logged_since_last"].as_u64().unwrap())
        .sum();
    assert!(logged <= REQUESTS as u64);
    serve
        .exited_within(Duration::from_secs(20))
        .await
        .expect("serve stopped after SIGTERM");
}
