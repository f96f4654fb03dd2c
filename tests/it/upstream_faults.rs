//! Upstream faults: error answers pass through intact, a stream cut by the provider ends the
//! client's stream with an error, a slow but live stream is not timed out, and a provider that
//! cannot be connected to in time is a 502.
//!
//! (Refused connections and a provider that never answers are in `proxy_answers.rs`.)

use crate::support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use support::proxy::{one_provider, Proxy};
use support::raw::{chunk, RawUpstream, SSE_HEAD};
use support::upstream::{UpBody, Upstream};
use tokio::io::AsyncWriteExt;

const BODY: &str = r#"{"model":"gpt-5","stream":true,"input":"hi"}"#;
const EVENT: &[u8] = b"event: response.created\ndata: {\"type\":\"response.created\"}\n\n";

async fn post(proxy: &Proxy) -> reqwest::Response {
    reqwest::Client::new()
        .post(proxy.url("/v1/responses"))
        .header("content-type", "application/json")
        .body(BODY)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn provider_errors_pass_through_with_retry_after_and_the_exact_body() {
    for status in [429u16, 500, 502, 503, 529] {
        let upstream = Upstream::start(move |_| async move {
            let body = format!(
                "{{\"error\":{{\"message\":\"provider says {status}\",\"type\":\"server_error\",\"code\":null}}}}\n"
            );
            let mut response = http::Response::new(UpBody::new(http_body_util::Full::new(Bytes::from(body))));
            *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
            let headers = response.headers_mut();
            headers.insert("content-type", "application/json".parse().unwrap());
            headers.insert("retry-after", "3".parse().unwrap());
            headers.insert("x-should-retry", "true".parse().unwrap());
            response
        })
        .await;
        let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
        let response = post(&proxy).await;
        assert_eq!(response.status().as_u16(), status);
        let headers = response.headers().clone();
        assert_eq!(headers["retry-after"], "3", "{status}");
        assert_eq!(headers.get_all("x-should-retry").iter().count(), 1, "{status}");
        assert!(headers.contains_key("x-replaygate-request-id"));
        let text = response.text().await.unwrap();
        assert_eq!(
            text,
            format!("{{\"error\":{{\"message\":\"provider says {status}\",\"type\":\"server_error\",\"code\":null}}}}\n"),
            "the provider's own error body must reach the client unchanged"
        );
        assert_eq!(
            upstream.received().len(),
            1,
            "the proxy must not retry on its own"
        );
    }
}

/// Reads the first chunk of a stream, then expects the stream to end with an error promptly.
async fn first_chunk_then_error(proxy: &Proxy) {
    let response = post(proxy).await;
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    let first = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("the first event did not arrive")
        .unwrap()
        .unwrap();
    assert_eq!(&first[..], EVENT);
    let started = Instant::now();
    let end = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("the client's stream hung after the provider went away");
    assert!(
        matches!(end, Some(Err(_))),
        "a stream cut by the provider must end with an error, not like a complete answer: {end:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_reset_in_the_middle_of_a_stream_ends_the_clients_stream_with_an_error() {
    let upstream = RawUpstream::start(|mut stream| async move {
        stream.write_all(SSE_HEAD).await.unwrap();
        stream.write_all(&chunk(EVENT)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        // SO_LINGER 0: closing sends a reset instead of a FIN.
        stream.set_zero_linger().unwrap();
        drop(stream);
    })
    .await;
    let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
    first_chunk_then_error(&proxy).await;
}

#[tokio::test]
async fn a_close_before_the_last_chunk_ends_the_clients_stream_with_an_error() {
    let upstream = RawUpstream::start(|mut stream| async move {
        stream.write_all(SSE_HEAD).await.unwrap();
        stream.write_all(&chunk(EVENT)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        // A FIN without the terminating zero-length chunk: the answer is incomplete.
        stream.shutdown().await.unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await;
    })
    .await;
    let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
    first_chunk_then_error(&proxy).await;
}

#[tokio::test]
async fn a_slow_drip_is_not_a_timeout_while_bytes_keep_coming() {
    let (upstream, mut feeds) = Upstream::sse_feed().await;
    let config = one_provider(&upstream.base_url(), "\"passthrough\"", "read_timeout_ms = 300");
    let proxy = Proxy::start(&config, &[]).await;
    let client = tokio::spawn({
        let url = proxy.url("/v1/responses");
        async move {
            let response = reqwest::Client::new().post(url).body(BODY).send().await.unwrap();
            assert_eq!(response.status(), 200);
            response.bytes().await.map(|b| b.to_vec())
        }
    });
    let feed = tokio::time::timeout(Duration::from_secs(5), feeds.recv())
        .await
        .unwrap()
        .unwrap();
    // One byte every 100 ms for 1.5 s: five times the read timeout in all, never 300 ms silent.
    let drip: Vec<u8> = b"data: drip...\n\n".to_vec();
    let started = Instant::now();
    for byte in &drip {
        tokio::time::sleep(Duration::from_millis(100)).await;
        feed.send(Bytes::copy_from_slice(&[*byte])).await.unwrap();
    }
    drop(feed);
    assert!(started.elapsed() >= Duration::from_millis(1400));
    let received = tokio::time::timeout(Duration::from_secs(5), client)
        .await
        .unwrap()
        .unwrap()
        .expect("a live stream was cut");
    assert_eq!(received, drip);
}

#[tokio::test]
async fn a_stream_silent_past_the_read_timeout_ends_the_clients_stream_with_an_error() {
    let (upstream, mut feeds) = Upstream::sse_feed().await;
    let config = one_provider(&upstream.base_url(), "\"passthrough\"", "read_timeout_ms = 300");
    let proxy = Proxy::start(&config, &[]).await;
    let client = tokio::spawn({
        let url = proxy.url("/v1/responses");
        async move {
            let response = reqwest::Client::new().post(url).body(BODY).send().await.unwrap();
            assert_eq!(response.status(), 200);
            let mut stream = response.bytes_stream();
            let first = stream.next().await.unwrap().unwrap();
            let waited = Instant::now();
            let end = stream.next().await;
            (first, end.map(|chunk| chunk.map(|_| ())), waited.elapsed())
        }
    });
    let feed = tokio::time::timeout(Duration::from_secs(5), feeds.recv())
        .await
        .unwrap()
        .unwrap();
    feed.send(Bytes::from_static(EVENT)).await.unwrap();
    // The provider keeps the stream open and says nothing more.
    let (first, end, waited) = tokio::time::timeout(Duration::from_secs(5), client)
        .await
        .expect("the client's stream hung after the provider fell silent")
        .unwrap();
    assert_eq!(&first[..], EVENT);
    assert!(
        matches!(end, Some(Err(_))),
        "a stream cut by the read timeout must end with an error, not like a complete answer: {end:?}"
    );
    assert!(waited >= Duration::from_millis(250), "cut after {waited:?}");
    drop(feed);
}

#[tokio::test]
async fn a_connect_timeout_gets_502() {
    // A listener whose accept queue is full and never drained: the kernel drops further SYNs,
    // so a connection attempt hangs until the proxy's connect timeout.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    let mut full = false;
    for _ in 0..16 {
        match tokio::time::timeout(Duration::from_millis(300), tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => fillers.push(stream),
            Ok(Err(error)) => panic!("connect failed: {error}"),
            Err(_) => {
                full = true;
                break;
            }
        }
    }
    assert!(full, "the accept queue never filled");

    let config = one_provider(
        &format!("http://{addr}/v1"),
        "\"passthrough\"",
        "connect_timeout_ms = 300",
    );
    let proxy = Proxy::start(&config, &[]).await;
    let started = Instant::now();
    let response = post(&proxy).await;
    let elapsed = started.elapsed();
    assert_eq!(response.status(), 502);
    assert_eq!(response.headers()["x-should-retry"], "true");
    let body: serde_json::Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "upstream_unavailable");
    assert_eq!(body["error"]["type"], "server_error");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("connection failed"), "{message}");
    assert!(
        elapsed >= Duration::from_millis(250) && elapsed < Duration::from_secs(5),
        "answered after {elapsed:?}"
    );
    drop(listener);
}
