//! Client faults, driven over raw TCP: a client that goes away mid-stream, one that stops
//! reading, one that stalls its body, and one that never finishes its request head.

use crate::support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use support::proxy::{one_provider, Proxy};
use support::raw::{connect, read_head, read_to_close, read_until, send, status_of};
use support::upstream::Upstream;
use tokio::net::TcpSocket;

const BODY: &str = r#"{"model":"gpt-5","stream":true,"input":"hi"}"#;

fn request(body: &str, connection: &str) -> String {
    format!(
        "POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: {connection}\r\n\r\n{body}",
        body.len()
    )
}

/// A proxy with `[server]` settings in front of `upstream_url`.
async fn proxy_with(upstream_url: &str, server: &str) -> Proxy {
    let config = one_provider(upstream_url, "\"passthrough\"", "").replacen(
        "[providers.openai]",
        &format!("[server]\n{server}\n\n[providers.openai]"),
        1,
    );
    Proxy::start(&config, &[]).await
}

#[tokio::test]
async fn a_client_that_disconnects_mid_stream_cancels_the_upstream_request() {
    let (upstream, mut feeds) = Upstream::sse_feed().await;
    // One request at a time: the follow-up below proves the first one let go of its permit.
    let proxy = proxy_with(&upstream.base_url(), "max_concurrent_requests = 1").await;

    let mut client = connect(proxy.addr).await;
    send(&mut client, request(BODY, "keep-alive").as_bytes()).await;
    let feed = tokio::time::timeout(Duration::from_secs(5), feeds.recv())
        .await
        .unwrap()
        .unwrap();
    feed.send(Bytes::from_static(b"data: first\n\n")).await.unwrap();
    let (head, rest) = read_head(&mut client, Duration::from_secs(5)).await;
    assert_eq!(status_of(&head), 200, "{head}");
    read_until(&mut client, rest, b"data: first", Duration::from_secs(5)).await;
    drop(client);

    // The provider keeps talking; its sender must fail once the proxy has dropped the upstream
    // request, i.e. nothing keeps the upstream connection (or a task) alive for a gone client.
    let started = Instant::now();
    let cancelled = loop {
        if feed.send(Bytes::from_static(b"data: more\n\n")).await.is_err() {
            break true;
        }
        if started.elapsed() > Duration::from_secs(5) {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(cancelled, "the upstream request outlived its client");

    let next = tokio::spawn({
        let url = proxy.url("/v1/responses");
        async move {
            reqwest::Client::new()
                .post(url)
                .body(BODY)
                .send()
                .await
                .unwrap()
                .status()
        }
    });
    let feed = tokio::time::timeout(Duration::from_secs(5), feeds.recv())
        .await
        .unwrap()
        .unwrap();
    drop(feed);
    let status = tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status, 200, "the gone client's permit was not released");
}

#[tokio::test]
async fn a_slow_reader_gets_backpressure_not_unbounded_buffering() {
    let (upstream, mut feeds) = Upstream::sse_feed().await;
    let proxy = proxy_with(&upstream.base_url(), "").await;

    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(16 * 1024).unwrap();
    let mut client = socket.connect(proxy.addr).await.unwrap();
    send(&mut client, request(BODY, "close").as_bytes()).await;
    let feed = tokio::time::timeout(Duration::from_secs(5), feeds.recv())
        .await
        .unwrap()
        .unwrap();
    let (head, _) = read_head(&mut client, Duration::from_secs(5)).await;
    assert_eq!(status_of(&head), 200, "{head}");

    // The client reads nothing more. The provider pushes until a send blocks for a second.
    const CHUNK: usize = 64 * 1024;
    const CEILING: usize = 256 << 20;
    let chunk = Bytes::from(vec![b'x'; CHUNK]);
    let mut pushed = 0usize;
    while pushed < CEILING {
        match tokio::time::timeout(Duration::from_secs(1), feed.send(chunk.clone())).await {
            Ok(sent) => {
                sent.unwrap();
                pushed += CHUNK;
            }
            Err(_) => break,
        }
    }
    assert!(
        pushed < CEILING,
        "the proxy buffered everything the provider sent"
    );
    // Socket buffers on both hops plus a few frames in flight: megabytes, not the whole stream.
    assert!(
        pushed <= 48 << 20,
        "the provider could push {pushed} bytes to a client that reads none"
    );

    // Once the client reads again, every byte arrives.
    drop(feed);
    let all = read_to_close(&mut client, Duration::from_secs(30))
        .await
        .expect("the stream did not end");
    let delivered = all.iter().filter(|&&b| b == b'x').count();
    assert_eq!(delivered, pushed);
}

#[tokio::test]
async fn a_stalled_body_gets_408_body_timeout() {
    let upstream = Upstream::json(200, support::upstream::RESPONSE_JSON).await;
    let proxy = proxy_with(&upstream.base_url(), "body_read_timeout_ms = 300").await;

    // Declares 100 bytes, sends 10, then stalls.
    let mut client = connect(proxy.addr).await;
    let head = "POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n";
    send(&mut client, head.as_bytes()).await;
    send(&mut client, b"{\"model\":").await;
    let started = Instant::now();
    let (head, rest) = read_head(&mut client, Duration::from_secs(5)).await;
    let elapsed = started.elapsed();
    assert_eq!(status_of(&head), 408, "{head}");
    assert!(
        elapsed >= Duration::from_millis(250),
        "answered after {elapsed:?}"
    );
    let rest = read_until(&mut client, rest, b"}}", Duration::from_secs(5)).await;
    let body: serde_json::Value = serde_json::from_slice(&rest).unwrap();
    assert_eq!(body["error"]["code"], "body_timeout");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("300 ms"),
        "{body}"
    );
    // The body was never finished, so the connection cannot be reused: it is closed.
    assert!(read_to_close(&mut client, Duration::from_secs(5)).await.is_some());
    assert!(upstream.received().is_empty());
}

#[tokio::test]
async fn a_body_trickled_past_the_timeout_gets_408_too() {
    let upstream = Upstream::json(200, support::upstream::RESPONSE_JSON).await;
    let proxy = proxy_with(&upstream.base_url(), "body_read_timeout_ms = 300").await;
    let mut client = connect(proxy.addr).await;
    let head = "POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n";
    send(&mut client, head.as_bytes()).await;
    // A byte every 50 ms never leaves the connection silent, but the body is a deadline, not
    // an idle timeout: it must all arrive within body_read_timeout_ms.
    let trickle = tokio::spawn(async move {
        for _ in 0..40 {
            if tokio::io::AsyncWriteExt::write_all(&mut client, b" ")
                .await
                .is_err()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        client
    });
    let mut client = tokio::time::timeout(Duration::from_secs(10), trickle)
        .await
        .unwrap()
        .unwrap();
    let answer = read_to_close(&mut client, Duration::from_secs(5))
        .await
        .expect("not closed");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(upstream.received().is_empty());
}

/// Whether the proxy closes `client` within a few seconds, and not before `at_least`.
async fn closed_by_the_proxy(mut client: tokio::net::TcpStream, at_least: Duration) -> Result<(), String> {
    let started = Instant::now();
    let answer = read_to_close(&mut client, Duration::from_secs(5))
        .await
        .ok_or("the connection was never closed")?;
    let elapsed = started.elapsed();
    if elapsed < at_least {
        return Err(format!("closed after only {elapsed:?}"));
    }
    let answer = String::from_utf8_lossy(&answer);
    if answer.contains("HTTP/1.1 200") {
        return Err(format!("it was served: {answer}"));
    }
    Ok(())
}

#[tokio::test]
async fn request_heads_that_never_finish_are_cut_by_the_header_timeout() {
    let upstream = Upstream::json(200, support::upstream::RESPONSE_JSON).await;
    let proxy = proxy_with(&upstream.base_url(), "header_read_timeout_ms = 300").await;
    let cases: [(&str, &[u8]); 4] = [
        ("nothing at all", b""),
        (
            "half a request head",
            b"POST /v1/responses HTTP/1.1\r\nhost: x\r\n",
        ),
        // Leaves the protocol undecided between HTTP/1.1 and HTTP/2.
        ("part of the HTTP/2 preface", b"PRI * HTTP/2.0\r\n"),
        (
            "the HTTP/2 preface and SETTINGS, never a request",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00",
        ),
    ];
    let mut waits = Vec::new();
    for (what, bytes) in cases {
        let mut client = connect(proxy.addr).await;
        send(&mut client, bytes).await;
        waits.push((
            what,
            tokio::spawn(closed_by_the_proxy(client, Duration::from_millis(250))),
        ));
    }
    let mut failures = Vec::new();
    for (what, wait) in waits {
        if let Err(why) = wait.await.unwrap() {
            failures.push(format!("{what}: {why}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(upstream.received().is_empty());
}

#[tokio::test]
async fn a_head_trickled_byte_by_byte_is_cut_too() {
    let upstream = Upstream::json(200, support::upstream::RESPONSE_JSON).await;
    let proxy = proxy_with(&upstream.base_url(), "header_read_timeout_ms = 300").await;
    let mut client = connect(proxy.addr).await;
    let head = request(BODY, "close");
    let started = Instant::now();
    let mut cut = false;
    for byte in head.as_bytes() {
        if tokio::io::AsyncWriteExt::write_all(&mut client, &[*byte])
            .await
            .is_err()
        {
            cut = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        if started.elapsed() > Duration::from_secs(5) {
            break;
        }
    }
    if !cut {
        closed_by_the_proxy(client, Duration::ZERO).await.unwrap();
    }
    assert!(started.elapsed() < Duration::from_secs(6));
    assert!(upstream.received().is_empty());
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_header_timeout() {
    let upstream = Upstream::json(200, support::upstream::RESPONSE_JSON).await;
    let proxy = proxy_with(&upstream.base_url(), "header_read_timeout_ms = 300").await;
    let mut client = connect(proxy.addr).await;
    send(
        &mut client,
        request(r#"{"model":"gpt-5","input":"hi"}"#, "keep-alive").as_bytes(),
    )
    .await;
    let (head, rest) = read_head(&mut client, Duration::from_secs(5)).await;
    assert_eq!(status_of(&head), 200);
    read_until(&mut client, rest, b"]}]}", Duration::from_secs(5)).await;
    closed_by_the_proxy(client, Duration::from_millis(250))
        .await
        .unwrap();
}
