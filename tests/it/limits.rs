//! `max_concurrent_requests`: streams count until they end, and a request over the limit is
//! answered 503 `overloaded` at once instead of waiting in a queue.
//!
//! (Body size and read timeouts are in `bad_input.rs`, `client_faults.rs` and
//! `proxy_answers.rs`; upstream timeouts in `upstream_faults.rs`.)

use crate::support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::Value;
use support::proxy::{one_provider, Proxy};
use support::upstream::Upstream;
use tokio::sync::mpsc;

const STREAM: &str = r#"{"model":"gpt-5","stream":true,"input":"hi"}"#;

/// Starts a streaming request and returns its status once the head has arrived; the body keeps
/// streaming in the background until the provider ends it.
async fn open_stream(proxy: &Proxy, feeds: &mut mpsc::Receiver<mpsc::Sender<Bytes>>) -> mpsc::Sender<Bytes> {
    let url = proxy.url("/v1/responses");
    let (head_tx, head_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let response = reqwest::Client::new()
            .post(url)
            .body(STREAM)
            .send()
            .await
            .unwrap();
        let _ = head_tx.send(response.status());
        let _ = response.bytes().await;
    });
    let feed = tokio::time::timeout(Duration::from_secs(5), feeds.recv())
        .await
        .unwrap()
        .unwrap();
    feed.send(Bytes::from_static(b"data: {}\n\n")).await.unwrap();
    let status = tokio::time::timeout(Duration::from_secs(5), head_rx)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status, 200);
    feed
}

#[tokio::test]
async fn requests_over_the_limit_get_503_overloaded_at_once() {
    let (upstream, mut feeds) = Upstream::sse_feed().await;
    let config = one_provider(&upstream.base_url(), "\"passthrough\"", "").replacen(
        "[providers.openai]",
        "[server]\nmax_concurrent_requests = 2\n\n[providers.openai]",
        1,
    );
    let proxy = Proxy::start(&config, &[]).await;
    let first = open_stream(&proxy, &mut feeds).await;
    let _second = open_stream(&proxy, &mut feeds).await;

    // Two streams hold both permits: more requests, gated or not, are turned away, fast.
    let client = reqwest::Client::new();
    for path in ["/v1/responses", "/v1/responses", "/v1/models"] {
        let started = Instant::now();
        let response = client.post(proxy.url(path)).body(STREAM).send().await.unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{path}: it waited in a queue"
        );
        assert_eq!(response.status(), 503, "{path}");
        assert_eq!(response.headers()["x-should-retry"], "true");
        assert_eq!(response.headers()["retry-after"], "1");
        assert!(response.headers().contains_key("x-replaygate-request-id"));
        let body: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
        assert_eq!(body["error"]["type"], "server_error");
        assert_eq!(body["error"]["code"], "overloaded");
        assert!(body["error"]["message"].as_str().unwrap().contains('2'), "{body}");
    }
    assert_eq!(
        upstream.received().len(),
        2,
        "a request over the limit reached the provider"
    );

    // When a stream ends its permit comes back.
    drop(first);
    let started = Instant::now();
    let third = loop {
        let response = client
            .post(proxy.url("/v1/responses"))
            .body(r#"{"model":"gpt-5","input":[{"type":"acme:x"}]}"#)
            .send()
            .await
            .unwrap();
        if response.status() != 503 || started.elapsed() > Duration::from_secs(5) {
            break response.status();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(third, 422, "the ended stream's permit was not released");
}

#[tokio::test]
async fn refused_requests_do_not_keep_their_permit() {
    let upstream = Upstream::json(200, support::upstream::RESPONSE_JSON).await;
    let config = one_provider(&upstream.base_url(), "\"passthrough\"", "").replacen(
        "[providers.openai]",
        "[server]\nmax_concurrent_requests = 1\n\n[providers.openai]",
        1,
    );
    let proxy = Proxy::start(&config, &[]).await;
    let client = reqwest::Client::new();
    for body in [
        r#"{"model":"gpt-5","input":[{"type":"acme:x"}]}"#,
        "not json",
        r#"{"model":"gpt-5","input":5}"#,
        r#"{"model":"gpt-5","input":"hi"}"#,
    ]
    .iter()
    .cycle()
    .take(20)
    {
        let status = client
            .post(proxy.url("/v1/responses"))
            .body(*body)
            .send()
            .await
            .unwrap()
            .status();
        assert_ne!(status, 503, "a finished request kept its permit");
    }
}
