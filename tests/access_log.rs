//! The access log: one JSON line per request with what an operator needs, and never a key;
//! written when the answer has ended, or when the client or the provider went away.

mod support;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use replaygate::config::{LogConfig, LogFormat};
use serde_json::Value;
use support::log_capture::Captured;
use support::proxy::{one_provider, Proxy};
use support::raw::{
    chunk, connect, read_head, read_to_close, read_until, send, status_of, RawUpstream, SSE_HEAD,
};
use support::upstream::{json_response, Upstream, RESPONSE_JSON};
use tokio::io::AsyncWriteExt;

/// The process's log subscriber (one per test binary), writing JSON lines to memory.
fn captured() -> &'static Captured {
    static CAPTURED: OnceLock<Captured> = OnceLock::new();
    CAPTURED.get_or_init(|| {
        let captured = Captured::default();
        let sink = captured.clone();
        let log = LogConfig {
            format: LogFormat::Json,
            level: "info".into(),
        };
        replaygate::telemetry::install(&log, move || sink.clone(), false);
        captured
    })
}

/// The access lines of `request_id`: waits up to 10 s for the first, then a moment more so a
/// second one would show.
async fn access_lines(request_id: &str) -> Vec<Value> {
    let read = || -> Vec<Value> {
        captured()
            .text()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|line| line["target"] == "replaygate::access" && line["request_id"] == request_id)
            .collect()
    };
    let started = Instant::now();
    while read().is_empty() && started.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    read()
}

fn millis(line: &Value, field: &str) -> f64 {
    line[field]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{field} is not a number of ms: {line}"))
}

fn request(request_id: &str, body: &str) -> String {
    format!(
        "POST /v1/responses HTTP/1.1\r\nhost: x\r\nx-request-id: {request_id}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

const STREAM: &str = r#"{"model":"gpt-5","stream":true,"input":"hi"}"#;

/// Pushes events until the proxy drops the upstream stream (bounded); whether it did.
async fn pushed_until_cancelled(feed: &tokio::sync::mpsc::Sender<Bytes>) -> bool {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(10) {
        if feed.send(Bytes::from_static(b"data: {}\n\n")).await.is_err() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

const PROVIDER_KEY: &str = "sk-provider-secret-4242";
const CLIENT_KEY: &str = "sk-client-secret-1717";

#[tokio::test]
async fn each_request_logs_one_json_line_and_no_key() {
    let captured = captured();
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let config = format!(
        "default_provider = \"openai\"\n[providers.openai]\nbase_url = \"{}\"\nauth = {{ bearer_env = \"KEY\" }}\n",
        upstream.base_url()
    );
    let proxy = Proxy::start(&config, &[("KEY", PROVIDER_KEY)]).await;
    let client = reqwest::Client::new();
    let send = |body: &'static str| {
        client
            .post(proxy.url("/v1/responses"))
            .header("authorization", format!("Bearer {CLIENT_KEY}"))
            .header("x-request-id", "req-from-client")
            .body(body)
            .send()
    };
    assert_eq!(
        send(r#"{"model":"gpt-5","input":"hi"}"#).await.unwrap().status(),
        200
    );
    let refused = send(
        r#"{"model":"gpt-5","input":[{"type":"function_call_output","call_id":"c9","output":"x"},{"type":"acme:x"}]}"#,
    );
    assert_eq!(refused.await.unwrap().status(), 422);
    // A call to a tool the request no longer declares is monitored: forwarded, and counted.
    let monitored = send(
        r#"{"model":"gpt-5","input":[{"type":"function_call","call_id":"c1","name":"gone","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"x"}]}"#,
    );
    assert_eq!(monitored.await.unwrap().status(), 200);
    proxy.shutdown().await;

    let lines = access_lines("req-from-client").await;
    // Read once every line is written, so a key in any of them would show.
    let text = captured.text();
    assert!(!text.contains(PROVIDER_KEY), "the provider key reached the log");
    assert!(!text.contains(CLIENT_KEY), "the client key reached the log");
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(lines[0]["request_id"], "req-from-client");
    assert_eq!(lines[0]["provider"], "openai");
    assert_eq!(lines[0]["model"], "gpt-5");
    assert_eq!(lines[0]["decision"], "allowed");
    assert_eq!(lines[0]["status"], 200);
    assert_eq!(lines[0]["upstream_status"], "200");
    assert!(millis(&lines[0], "latency_ms") >= 0.0);
    assert_eq!(lines[0]["bytes_out"], RESPONSE_JSON.len());
    assert!(millis(&lines[0], "first_byte_ms") >= millis(&lines[0], "latency_ms"));
    assert!(millis(&lines[0], "duration_ms") >= millis(&lines[0], "first_byte_ms"));
    assert!(lines[0].get("stream_error").is_none(), "{}", lines[0]);
    assert_eq!(lines[1]["decision"], "rejected");
    assert_eq!(lines[1]["reasons"], "call_id_mismatch,namespaced");
    assert_eq!(lines[1]["status"], 422);
    assert_eq!(lines[2]["decision"], "monitored", "{}", lines[2]);
    assert_eq!(lines[2]["reasons"], "unknown_tool");
    assert_eq!(lines[2]["monitored"], 1, "{}", lines[2]);
    assert_eq!(lines[2]["status"], 200);
}

#[tokio::test]
async fn a_client_that_leaves_mid_stream_leaves_one_line() {
    captured();
    let (upstream, mut feeds) = Upstream::sse_feed().await;
    let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
    let mut client = connect(proxy.addr).await;
    send(&mut client, request("gone-before-answer", STREAM).as_bytes()).await;
    // The provider has the request and is slow to answer; the client goes away.
    let feed = tokio::time::timeout(Duration::from_secs(5), feeds.recv())
        .await
        .expect("the request reached the provider")
        .unwrap();
    drop(client);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        pushed_until_cancelled(&feed).await,
        "the answer to a gone client was never dropped"
    );
    let lines = access_lines("gone-before-answer").await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    assert_eq!(
        (line["status"].as_u64(), line["decision"].as_str()),
        (Some(200), Some("allowed"))
    );
    assert_eq!(line["stream_error"], "client_gone", "{line}");
    // The client's FIN ends the request at once, not when the provider next speaks.
    assert!(millis(line, "duration_ms") < 1000.0, "{line}");
}

#[tokio::test]
async fn a_client_gone_before_the_provider_answers_still_leaves_one_line() {
    captured();
    let upstream = Upstream::start(|_| async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        json_response(200, RESPONSE_JSON)
    })
    .await;
    let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
    let mut client = connect(proxy.addr).await;
    let body = r#"{"model":"gpt-5","input":"hi"}"#;
    send(&mut client, request("gone-before-head", body).as_bytes()).await;
    // Leave once the provider has the request, before it answers.
    let started = Instant::now();
    while upstream.received().is_empty() && started.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        upstream.received().len(),
        1,
        "the request never reached the provider"
    );
    drop(client);
    // The client's FIN is probed (an interim 100 Continue) and its reset ends the request: the
    // provider's answer is never waited for, and the line says the client went away.
    let lines = access_lines("gone-before-head").await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    assert_eq!(
        (line["status"].as_u64(), line["error"].as_str()),
        (Some(499), Some("client_gone")),
        "{line}"
    );
    assert_eq!(line["upstream_status"], "-", "{line}");
    assert!(millis(line, "duration_ms") < 500.0, "{line}");
}

#[tokio::test]
async fn a_client_that_half_closes_after_its_request_gets_the_whole_answer() {
    captured();
    let upstream = Upstream::start(|_| async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        json_response(200, RESPONSE_JSON)
    })
    .await;
    let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
    let body = r#"{"model":"gpt-5","input":"hi"}"#;
    let mut client = connect(proxy.addr).await;
    send(&mut client, request("half-closed", body).as_bytes()).await;
    client.shutdown().await.unwrap();
    let answer = read_to_close(&mut client, Duration::from_secs(10))
        .await
        .expect("the proxy closed after answering");
    let answer = String::from_utf8_lossy(&answer);
    // Its FIN came while the provider worked: the interim answer probed it, and it stayed.
    let answer = answer
        .strip_prefix("HTTP/1.1 100 Continue\r\n\r\n")
        .unwrap_or_else(|| panic!("no interim answer first: {answer}"));
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(answer.ends_with(RESPONSE_JSON), "{answer}");
    let received = upstream.received();
    assert_eq!(received.len(), 1, "the provider did not get the request");
    assert_eq!(&received[0].body[..], body.as_bytes());

    let lines = access_lines("half-closed").await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["status"], 200);
    assert_eq!(lines[0]["bytes_out"], RESPONSE_JSON.len());
    assert!(lines[0].get("stream_error").is_none(), "{}", lines[0]);
}

#[tokio::test]
async fn a_stream_cut_by_the_client_leaves_one_line_with_what_went_out() {
    captured();
    let (upstream, mut feeds) = Upstream::sse_feed().await;
    let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
    let mut client = connect(proxy.addr).await;
    send(&mut client, request("cut-stream", STREAM).as_bytes()).await;
    let feed = tokio::time::timeout(Duration::from_secs(5), feeds.recv())
        .await
        .unwrap()
        .unwrap();
    let first = b"data: {\"type\":\"response.created\"}\n\n";
    feed.send(Bytes::from_static(first)).await.unwrap();
    let (head, rest) = read_head(&mut client, Duration::from_secs(5)).await;
    assert_eq!(status_of(&head), 200, "{head}");
    read_until(&mut client, rest, b"response.created", Duration::from_secs(5)).await;
    drop(client);
    assert!(
        pushed_until_cancelled(&feed).await,
        "the stream outlived its client"
    );

    let lines = access_lines("cut-stream").await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    assert_eq!(line["status"], 200);
    assert_eq!(line["stream_error"], "client_gone", "{line}");
    assert!(
        line["bytes_out"].as_u64().unwrap() >= first.len() as u64,
        "{line}"
    );
    assert!(
        millis(line, "duration_ms") >= millis(line, "first_byte_ms"),
        "{line}"
    );
}

#[tokio::test]
async fn a_stream_the_provider_cuts_leaves_one_line_with_its_error_bytes_and_times() {
    captured();
    const EVENT: &[u8] = b"event: response.created\ndata: {\"type\":\"response.created\"}\n\n";
    let upstream = RawUpstream::start(|mut stream| async move {
        stream.write_all(SSE_HEAD).await.unwrap();
        stream.write_all(&chunk(EVENT)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        // A FIN without the terminating zero-length chunk: the provider cut the answer.
        stream.shutdown().await.unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await;
    })
    .await;
    let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
    let mut client = connect(proxy.addr).await;
    send(&mut client, request("cut-by-provider", STREAM).as_bytes()).await;
    let answer = read_to_close(&mut client, Duration::from_secs(5))
        .await
        .expect("the proxy ended the client's connection after the cut");
    assert_eq!(status_of(&String::from_utf8_lossy(&answer)), 200);
    let lines = access_lines("cut-by-provider").await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    let stream_error = line["stream_error"]
        .as_str()
        .unwrap_or_else(|| panic!("no stream_error: {line}"));
    assert_ne!(stream_error, "client_gone", "{line}");
    assert_eq!(line["bytes_out"].as_u64(), Some(EVENT.len() as u64), "{line}");
    assert!(millis(line, "first_byte_ms") < 200.0, "{line}");
    assert!(millis(line, "duration_ms") >= 200.0, "{line}");
}

#[tokio::test]
async fn a_head_hyper_cannot_parse_leaves_a_line_of_the_same_shape() {
    captured();
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
    let mut client = connect(proxy.addr).await;
    send(&mut client, b"GARBAGE\r\n\r\n").await;
    let (head, _) = read_head(&mut client, Duration::from_secs(5)).await;
    assert_eq!(status_of(&head), 400, "{head}");
    let request_id = head
        .lines()
        .find_map(|line| line.strip_prefix("x-replaygate-request-id: "))
        .expect("the answer names its request id");
    let lines = access_lines(request_id).await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    assert_eq!(
        (line["method"].as_str(), line["path"].as_str()),
        (Some("-"), Some("-"))
    );
    assert_eq!(
        (line["decision"].as_str(), line["error"].as_str()),
        (Some("error"), Some("invalid_request"))
    );
    assert_eq!(line["status"], 400);
    // The same fields as every other line, with no made-up times.
    for field in [
        "monitored",
        "upstream_status",
        "latency_ms",
        "first_byte_ms",
        "duration_ms",
        "bytes_out",
    ] {
        assert!(line.get(field).is_some(), "{field} missing: {line}");
    }
    assert_eq!(line["duration_ms"], "-");
}

/// The access line names the client key by its id (else by its digest's first 8 hex digits),
/// an expired key's too, and never holds the key.
#[tokio::test]
async fn the_access_line_names_the_client_key_by_its_id() {
    const EXPIRED: &str = "rg-expired-secret-5151";
    const FRESH: &str = "rg-fresh-secret-6161";
    const PLAIN: &str = "rg-plain-secret-7171";
    let captured = captured();
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let entry = |key: &str| replaygate::keys::format_digest(&replaygate::keys::digest(key));
    let config = format!(
        "default_provider = \"openai\"\n[providers.openai]\nbase_url = \"{}\"\nauth = {{ bearer_env = \"KEY\" }}\n\
         [teams.ci]\nkeys = [\n  {{ id = \"ci-2019\", digest = \"{}\", expires = \"2020-01-01T00:00:00Z\" }},\n  \
         {{ id = \"ci-2099\", digest = \"{}\", expires = \"2099-01-01T00:00:00Z\" }},\n  \"{}\",\n]\n",
        upstream.base_url(),
        entry(EXPIRED),
        entry(FRESH),
        entry(PLAIN)
    );
    let proxy = Proxy::start(&config, &[("KEY", PROVIDER_KEY)]).await;
    let client = reqwest::Client::new();
    for (key, request_id, status) in [
        (EXPIRED, "key-id-expired", 401),
        (FRESH, "key-id-fresh", 200),
        (PLAIN, "key-id-plain", 200),
    ] {
        let answer = client
            .post(proxy.url("/v1/responses"))
            .header("authorization", format!("Bearer {key}"))
            .header("x-request-id", request_id)
            .body(r#"{"model":"gpt-5","input":"hi"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), status, "{request_id}");
    }
    proxy.shutdown().await;

    let expired = access_lines("key-id-expired").await;
    assert_eq!(expired.len(), 1, "{expired:?}");
    assert_eq!(expired[0]["key_id"], "ci-2019");
    assert_eq!(expired[0]["error"], "expired_api_key");
    let fresh = access_lines("key-id-fresh").await;
    assert_eq!(
        (&fresh[0]["team"], &fresh[0]["key_id"]),
        (&"ci".into(), &"ci-2099".into())
    );
    let plain = access_lines("key-id-plain").await;
    assert_eq!(plain[0]["key_id"], entry(PLAIN)[7..15]);
    let text = captured.text();
    for key in [EXPIRED, FRESH, PLAIN] {
        assert!(!text.contains(key), "the log holds a client key");
    }
}

/// A team known by its client certificate (docs/teams.md#a-team-known-by-its-client-certificate):
/// the access line names the caller by the certificate's matched name, `client_cert`, beside
/// its team, also for a certificate refused beside another team's key; never the certificate's
/// other names. The requests are handed to the proxy in-process, the certificate where the TLS
/// listener puts it.
#[tokio::test]
async fn the_access_line_names_a_client_certificate_by_its_matched_name() {
    use http_body_util::BodyExt;

    const KEY: &str = "rg-search-secret-8181";
    let captured = captured();
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let config = format!(
        "default_provider = \"openai\"\n[providers.openai]\nbase_url = \"{}\"\nauth = \"none\"\n\
         [teams.payments]\nclient_certs = [\"spiffe://example.org/ns/payments/*\", \"cn:payments-ci\"]\n\
         [teams.search]\nkeys = [{{ id = \"search-1\", digest = \"{}\" }}]\n",
        upstream.base_url(),
        replaygate::keys::format_digest(&replaygate::keys::digest(KEY)),
    );
    let config = replaygate::config::Config::from_toml(&config).unwrap();
    let state = std::sync::Arc::new(replaygate::proxy::ProxyState::new(&config, &|_| None).unwrap());
    let mut params = rcgen::CertificateParams::new(vec!["api.payments.internal".to_owned()]).unwrap();
    params.subject_alt_names.push(rcgen::SanType::URI(
        "spiffe://example.org/ns/payments/sa/api".try_into().unwrap(),
    ));
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "payments-ci");
    let der = params
        .self_signed(&rcgen::KeyPair::generate().unwrap())
        .unwrap()
        .der()
        .to_vec();
    for (key, request_id, status) in [(None, "cert-only", 200), (Some(KEY), "cert-and-key", 401)] {
        let mut request = http::Request::post("/v1/responses").header("x-request-id", request_id);
        if let Some(key) = key {
            request = request.header("authorization", format!("Bearer {key}"));
        }
        let body = http_body_util::Full::new(Bytes::from_static(br#"{"model":"gpt-5","input":"hi"}"#));
        let mut request = request.body(body).unwrap();
        replaygate::proxy::present_client_certificate(&mut request, der.clone());
        let answer = replaygate::proxy::lifecycle::handle(state.clone(), request).await;
        assert_eq!(answer.status(), status, "{request_id}");
        answer.into_body().collect().await.unwrap();
    }

    let line = &access_lines("cert-only").await[0];
    assert_eq!(
        (&line["team"], &line["key_id"], &line["client_cert"]),
        (
            &"payments".into(),
            &"-".into(),
            &"spiffe://example.org/ns/payments/sa/api".into()
        ),
        "{line}"
    );
    let line = &access_lines("cert-and-key").await[0];
    assert_eq!(
        (
            &line["team"],
            &line["key_id"],
            &line["client_cert"],
            &line["error"]
        ),
        (
            &"-".into(),
            &"search-1".into(),
            &"spiffe://example.org/ns/payments/sa/api".into(),
            &"key_certificate_mismatch".into()
        ),
        "{line}"
    );
    let text = captured.text();
    assert!(
        !text.contains("api.payments.internal") && !text.contains(KEY),
        "{text}"
    );
}

/// The access line carries the answer's usage (docs/usage.md#where-usage-shows): the four
/// counts of an answer that reported them; `usage` `missing` and no count for one that did
/// not. The request's model names an answer that names none.
#[tokio::test]
async fn the_access_line_carries_the_answers_usage() {
    let captured = captured();
    const WITH_USAGE: &str = r#"{"id":"resp_u","object":"response","model":"gpt-5-2025","status":"completed","output":[],"usage":{"input_tokens":40,"input_tokens_details":{"cached_tokens":30},"output_tokens":9,"output_tokens_details":{"reasoning_tokens":6}}}"#;
    for (answer, request_id) in [
        (WITH_USAGE, "req-usage-reported"),
        (RESPONSE_JSON, "req-usage-missing"),
    ] {
        let upstream = Upstream::json(200, answer).await;
        let config = format!(
            "default_provider = \"openai\"\n[state]\nbackend = \"memory\"\n[providers.openai]\nbase_url = \"{}\"\nauth = \"none\"\n",
            upstream.base_url()
        );
        let proxy = Proxy::start(&config, &[]).await;
        let answered = reqwest::Client::new()
            .post(proxy.url("/v1/responses"))
            .header("x-request-id", request_id)
            .body(r#"{"model":"gpt-5","input":"hi"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(answered.status(), 200);
        answered.bytes().await.unwrap();
        proxy.shutdown().await;
    }
    let reported = access_lines("req-usage-reported").await;
    assert_eq!(reported.len(), 1, "{}", captured.text());
    let line = &reported[0];
    assert_eq!(line["usage"], "reported", "{line}");
    for (field, count) in [
        ("input_tokens", 40),
        ("output_tokens", 9),
        ("cached_input_tokens", 30),
        ("reasoning_output_tokens", 6),
    ] {
        assert_eq!(line[field], count, "{field}: {line}");
    }
    let missing = access_lines("req-usage-missing").await;
    assert_eq!(missing.len(), 1);
    assert_eq!(missing[0]["usage"], "missing", "{}", missing[0]);
    for field in [
        "input_tokens",
        "output_tokens",
        "cached_input_tokens",
        "reasoning_output_tokens",
    ] {
        assert!(missing[0].get(field).is_none(), "{field}: {}", missing[0]);
    }
}
