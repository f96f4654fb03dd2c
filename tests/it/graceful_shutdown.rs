//! Graceful shutdown through `run()`'s shutdown future: the listener closes at once, in-flight
//! streams finish within the grace period, and whatever outlives it is cut so `run()` returns.

use crate::support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use support::proxy::{one_provider, Proxy};
use support::upstream::Upstream;
use tokio::sync::mpsc;

const BODY: &str = r#"{"model":"gpt-5","stream":true,"input":"hi"}"#;
const FIRST: &[u8] = b"event: response.created\ndata: {}\n\n";
const LAST: &[u8] = b"event: response.completed\ndata: {}\n\n";

async fn proxy_with_grace(upstream: &Upstream, grace_ms: u64) -> Proxy {
    let config = one_provider(&upstream.base_url(), "\"passthrough\"", "").replacen(
        "[providers.openai]",
        &format!("[server]\nshutdown_grace_ms = {grace_ms}\n\n[providers.openai]"),
        1,
    );
    Proxy::start(&config, &[]).await
}

/// A streaming request whose chunks (or final error) are handed over as they arrive.
fn stream_through(proxy: &Proxy, http2: bool) -> mpsc::UnboundedReceiver<Result<Bytes, String>> {
    let (tx, rx) = mpsc::unbounded_channel();
    let url = proxy.url("/v1/responses");
    tokio::spawn(async move {
        let mut client = reqwest::Client::builder();
        if http2 {
            client = client.http2_prior_knowledge();
        }
        let response = client.build().unwrap().post(url).body(BODY).send().await;
        let response = match response {
            Ok(response) => response,
            Err(error) => return drop(tx.send(Err(error.to_string()))),
        };
        assert_eq!(response.status(), 200);
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let _ = tx.send(chunk.map_err(|e| e.to_string()));
        }
    });
    rx
}

/// The next non-empty chunk, the stream's error, or `None` at its end.
async fn next_chunk(
    chunks: &mut mpsc::UnboundedReceiver<Result<Bytes, String>>,
) -> Option<Result<Bytes, String>> {
    loop {
        let next = tokio::time::timeout(Duration::from_secs(5), chunks.recv())
            .await
            .expect("the client's stream hung");
        // HTTP/2 may end a stream with an empty DATA frame.
        if !matches!(&next, Some(Ok(chunk)) if chunk.is_empty()) {
            return next;
        }
    }
}

/// Connecting is refused within a bounded time (the listener is closed).
async fn refuses_connections(addr: SocketAddr) -> bool {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

async fn an_in_flight_stream_completes_after_shutdown_begins(http2: bool) {
    let (upstream, mut feeds) = Upstream::sse_feed().await;
    let mut proxy = proxy_with_grace(&upstream, 5000).await;
    let mut chunks = stream_through(&proxy, http2);
    let feed = tokio::time::timeout(Duration::from_secs(5), feeds.recv())
        .await
        .unwrap()
        .unwrap();
    feed.send(Bytes::from_static(FIRST)).await.unwrap();
    assert_eq!(next_chunk(&mut chunks).await.unwrap().unwrap(), FIRST);

    proxy.begin_shutdown();
    assert!(
        refuses_connections(proxy.addr).await,
        "new connections were still accepted"
    );
    assert!(
        !proxy.stopped_within(Duration::from_millis(300)).await,
        "run() returned while a stream was in flight"
    );

    // The provider finishes after shutdown began: the client gets the rest, and a clean end.
    feed.send(Bytes::from_static(LAST)).await.unwrap();
    drop(feed);
    assert_eq!(next_chunk(&mut chunks).await.unwrap().unwrap(), LAST);
    let end = next_chunk(&mut chunks).await;
    assert!(end.is_none(), "the stream did not end cleanly: {end:?}");
    let started = Instant::now();
    assert!(
        proxy.stopped_within(Duration::from_secs(4)).await,
        "run() did not return"
    );
    assert!(started.elapsed() < Duration::from_secs(4));
}

#[tokio::test]
async fn an_in_flight_http1_stream_completes_after_shutdown_begins() {
    an_in_flight_stream_completes_after_shutdown_begins(false).await;
}

#[tokio::test]
async fn an_in_flight_http2_stream_completes_after_shutdown_begins() {
    an_in_flight_stream_completes_after_shutdown_begins(true).await;
}

#[tokio::test]
async fn a_stream_longer_than_the_grace_period_is_cut_at_the_deadline() {
    let (upstream, mut feeds) = Upstream::sse_feed().await;
    let mut proxy = proxy_with_grace(&upstream, 500).await;
    let mut chunks = stream_through(&proxy, false);
    let feed = tokio::time::timeout(Duration::from_secs(5), feeds.recv())
        .await
        .unwrap()
        .unwrap();
    feed.send(Bytes::from_static(FIRST)).await.unwrap();
    assert_eq!(next_chunk(&mut chunks).await.unwrap().unwrap(), FIRST);

    let shutdown_began = Instant::now();
    proxy.begin_shutdown();
    // The provider keeps streaming past the grace period.
    let provider = tokio::spawn(async move {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            if feed.send(Bytes::from_static(b"data: tick\n\n")).await.is_err() {
                return Some(started.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    });

    let ended_with = loop {
        match next_chunk(&mut chunks).await {
            Some(Ok(_)) => continue,
            other => break other,
        }
    };
    let cut_after = shutdown_began.elapsed();
    assert!(
        matches!(ended_with, Some(Err(_))),
        "a cut stream must end with an error, got {ended_with:?}"
    );
    assert!(
        cut_after >= Duration::from_millis(400) && cut_after < Duration::from_secs(4),
        "cut after {cut_after:?}, grace 500 ms"
    );
    assert!(
        proxy.stopped_within(Duration::from_secs(4)).await,
        "run() did not return"
    );
    let provider_cut = tokio::time::timeout(Duration::from_secs(10), provider)
        .await
        .unwrap()
        .unwrap();
    assert!(
        provider_cut.is_some(),
        "the upstream request outlived the shutdown"
    );
}

#[tokio::test]
async fn idle_connections_do_not_hold_up_shutdown() {
    let upstream = Upstream::json(200, support::upstream::RESPONSE_JSON).await;
    let mut proxy = proxy_with_grace(&upstream, 5000).await;
    // A client whose pooled keep-alive connection stays open after its request.
    let client = reqwest::Client::new();
    let response = client
        .post(proxy.url("/v1/responses"))
        .body(r#"{"model":"gpt-5","input":"hi"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.bytes().await.unwrap();
    proxy.begin_shutdown();
    assert!(
        proxy.stopped_within(Duration::from_secs(2)).await,
        "an idle connection held shutdown for the whole grace period"
    );
    drop(client);
}
