//! `replaygate serve` (three workers) and Ctrl-C (SIGINT) with a stream in flight: the listener closes, the
//! stream finishes within the grace period, and the process exits 0.
//!
//! (SIGTERM with nothing in flight is in `serve_binary.rs`; the grace deadline is tested
//! through `run()` in `graceful_shutdown.rs`.)

#![cfg(unix)]

use crate::support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use support::serve::Serve;
use support::upstream::Upstream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_lets_an_in_flight_stream_finish_then_exits_0() {
    let (upstream, mut feeds) = Upstream::sse_feed().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("proxy.toml");
    std::fs::write(
        &config,
        format!(
            "default_provider = \"openai\"\n[server]\nshutdown_grace_ms = 10000\nworkers = 3\n[providers.openai]\nbase_url = \"{}\"\nauth = \"none\"\n",
            upstream.base_url()
        ),
    )
    .unwrap();
    let mut serve = Serve::start(Serve::command(&config)).await;
    assert!(serve.listening.contains("workers=3"), "{}", serve.listening);
    let address = serve.address.clone();

    let url = format!("http://{address}/v1/responses");
    let response = tokio::spawn(async move {
        reqwest::Client::new()
            .post(url)
            .body(r#"{"model":"gpt-5","stream":true,"input":"hi"}"#)
            .send()
            .await
            .unwrap()
    });
    let feed = tokio::time::timeout(Duration::from_secs(10), feeds.recv())
        .await
        .unwrap()
        .unwrap();
    feed.send(Bytes::from_static(b"data: first\n\n")).await.unwrap();
    let response = tokio::time::timeout(Duration::from_secs(10), response)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    let first = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(&first[..], b"data: first\n\n");

    serve.signal("-INT");

    // The listener closes at once; the stream goes on.
    let started = Instant::now();
    loop {
        if tokio::net::TcpStream::connect(&address).await.is_err() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "still accepting after Ctrl-C"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        serve.child.try_wait().unwrap().is_none(),
        "serve exited with a stream in flight"
    );
    feed.send(Bytes::from_static(b"data: [DONE]\n\n")).await.unwrap();
    drop(feed);
    let mut rest = Vec::new();
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .unwrap()
    {
        rest.extend_from_slice(&chunk.expect("the stream was cut"));
    }
    assert_eq!(rest, b"data: [DONE]\n\n");

    let status = serve
        .exited_within(Duration::from_secs(10))
        .await
        .expect("serve did not exit after the stream ended");
    assert!(status.success(), "serve exited with {status}");
}
