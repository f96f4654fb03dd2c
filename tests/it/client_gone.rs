//! A client that goes away cancels its provider request: before the answer's head (HTTP/1.1
//! close, HTTP/2 stream reset) and during a quiet stream, the provider's connection is closed
//! within a second, and `replaygate_client_gone_total` counts it. A client that only
//! half-closes still gets its answer.

use crate::support;

use std::time::{Duration, Instant};

use support::proxy::{one_provider, Proxy};
use support::raw::{
    chunk, connect, read_head, read_to_close, read_until, send, status_of, RawUpstream, SSE_HEAD,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

const BODY: &str = r#"{"model":"gpt-5","stream":true,"input":"hi"}"#;

fn request(body: &str) -> String {
    format!(
        "POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// What the fake provider saw of one connection.
enum Seen {
    /// The request arrived (and whatever the script answers was written).
    Request,
    /// The proxy closed or reset the connection.
    Closed(Instant),
}

/// A provider that takes each request, writes `answer` (nothing: it never answers), and then
/// waits up to 10 s for the proxy to close the connection, reporting both.
async fn silent_provider(answer: &'static [u8]) -> (RawUpstream, mpsc::UnboundedReceiver<Seen>) {
    let (seen, events) = mpsc::unbounded_channel();
    let upstream = RawUpstream::start(move |mut stream: TcpStream| {
        let seen = seen.clone();
        async move {
            stream.write_all(answer).await.unwrap();
            let _ = seen.send(Seen::Request);
            let mut buffer = [0u8; 1024];
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                match tokio::time::timeout_at(deadline.into(), stream.read(&mut buffer)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => {
                        let _ = seen.send(Seen::Closed(Instant::now()));
                        return;
                    }
                    Ok(Ok(_)) => {}
                    Err(_) => return,
                }
            }
        }
    })
    .await;
    (upstream, events)
}

/// Waits up to 5 s for the provider to have the request.
async fn request_arrived(events: &mut mpsc::UnboundedReceiver<Seen>) {
    match tokio::time::timeout(Duration::from_secs(5), events.recv()).await {
        Ok(Some(Seen::Request)) => {}
        _ => panic!("the request never reached the provider"),
    }
}

/// How long after `left` the provider saw its connection closed; fails after 5 s.
async fn closed_after(events: &mut mpsc::UnboundedReceiver<Seen>, left: Instant) -> Duration {
    match tokio::time::timeout(Duration::from_secs(5), events.recv()).await {
        Ok(Some(Seen::Closed(at))) => at.saturating_duration_since(left),
        Ok(Some(Seen::Request)) => panic!("a second request reached the provider"),
        _ => panic!("the provider's connection outlived the client by 5 s"),
    }
}

/// `replaygate_client_gone_total{provider="openai",team="-"}`, 0 when absent.
async fn gone_count(proxy: &mut Proxy) -> u64 {
    let admin = proxy.admin().await;
    let text = reqwest::get(format!("http://{admin}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix("replaygate_client_gone_total{provider=\"openai\",team=\"-\"} "))
        .map_or(0, |value| value.trim().parse().unwrap())
}

/// Reads the counter until it is `want` (it is written as the request's future drops), for up
/// to 2 s; returns what it was last.
async fn gone_count_reaches(proxy: &mut Proxy, want: u64) -> u64 {
    let started = Instant::now();
    loop {
        let count = gone_count(proxy).await;
        if count == want || started.elapsed() > Duration::from_secs(2) {
            return count;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_http1_client_that_closes_before_the_head_closes_the_providers_connection() {
    let (upstream, mut events) = silent_provider(b"").await;
    let mut proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
    let mut client = connect(proxy.addr).await;
    send(&mut client, request(BODY).as_bytes()).await;
    request_arrived(&mut events).await;
    let left = Instant::now();
    drop(client);
    let after = closed_after(&mut events, left).await;
    assert!(
        after < Duration::from_secs(1),
        "closed {after:?} after the client left"
    );
    assert_eq!(gone_count_reaches(&mut proxy, 1).await, 1);
}

#[tokio::test]
async fn an_http2_client_that_resets_its_stream_closes_the_providers_connection() {
    let (upstream, mut events) = silent_provider(b"").await;
    let mut proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let url = proxy.url("/v1/responses");
    let pending = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .post(url)
                .header("content-type", "application/json")
                .body(BODY)
                .send()
                .await
        }
    });
    request_arrived(&mut events).await;
    // Dropping the response future resets the stream; the connection stays open.
    let left = Instant::now();
    pending.abort();
    let _ = pending.await;
    let after = closed_after(&mut events, left).await;
    assert!(after < Duration::from_secs(1), "closed {after:?} after the reset");
    assert_eq!(gone_count_reaches(&mut proxy, 1).await, 1);
    // The client's connection is still good for another request.
    drop(client);
}

#[tokio::test]
async fn a_client_that_leaves_a_quiet_stream_closes_the_providers_connection() {
    const EVENT: &[u8] = b"event: response.created\ndata: {\"type\":\"response.created\"}\n\n";
    static ANSWER: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let answer = ANSWER.get_or_init(|| [SSE_HEAD, &chunk(EVENT)].concat());
    let (upstream, mut events) = silent_provider(answer).await;
    let mut proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
    let mut client = connect(proxy.addr).await;
    send(&mut client, request(BODY).as_bytes()).await;
    request_arrived(&mut events).await;
    let (head, rest) = read_head(&mut client, Duration::from_secs(5)).await;
    assert_eq!(status_of(&head), 200, "{head}");
    read_until(&mut client, rest, b"response.created\"}", Duration::from_secs(5)).await;
    // The provider says nothing more: only the client's leaving can end this.
    let left = Instant::now();
    drop(client);
    let after = closed_after(&mut events, left).await;
    assert!(
        after < Duration::from_secs(1),
        "closed {after:?} after the client left"
    );
    assert_eq!(gone_count_reaches(&mut proxy, 1).await, 1);
}

#[tokio::test]
async fn a_client_that_half_closes_is_probed_and_still_gets_its_answer() {
    const JSON: &str = r#"{"id":"resp_1","object":"response","output":[]}"#;
    let upstream = RawUpstream::start(|mut stream: TcpStream| async move {
        // Long enough for the probe's second of checks to pass.
        tokio::time::sleep(Duration::from_millis(1300)).await;
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{JSON}",
            JSON.len()
        );
        stream.write_all(answer.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await;
    })
    .await;
    let mut proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
    let mut client = connect(proxy.addr).await;
    send(
        &mut client,
        request(r#"{"model":"gpt-5","input":"hi"}"#).as_bytes(),
    )
    .await;
    client.shutdown().await.unwrap();
    let answer = read_to_close(&mut client, Duration::from_secs(10))
        .await
        .expect("the proxy closed after answering");
    let answer = String::from_utf8_lossy(&answer);
    let last = answer
        .strip_prefix("HTTP/1.1 100 Continue\r\n\r\n")
        .unwrap_or_else(|| panic!("no interim answer first: {answer}"));
    assert!(last.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(last.ends_with(JSON), "{answer}");
    assert_eq!(gone_count(&mut proxy).await, 0);
}
