//! Request heads hyper itself refuses (a malformed request line, a bad version, a head over
//! the read buffer) are answered in the OpenAI envelope, never with an empty body; also on a
//! keep-alive connection after a request that was served.

use crate::support;

use std::time::Duration;

use serde_json::Value;
use support::proxy::{one_provider, Proxy};
use support::raw::{connect, read_head, read_to_close, read_until, send, status_of};
use support::upstream::{Upstream, RESPONSE_JSON};

/// Splits a whole answer into its head and its body parsed as JSON.
fn envelope_of(answer: &[u8]) -> (String, Value) {
    let text = String::from_utf8_lossy(answer);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no head: {text:?}"));
    let body = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {text:?}"));
    (head.to_owned(), body)
}

/// Sends `request` on a new connection and reads the answer until the proxy closes.
async fn answer_to(proxy: &Proxy, request: Vec<u8>) -> Vec<u8> {
    let mut client = connect(proxy.addr).await;
    // Written from a task: the proxy may answer (and close) before reading all of it.
    let (mut reader, mut writer) = client.split();
    let write = async {
        let _ = tokio::io::AsyncWriteExt::write_all(&mut writer, &request).await;
    };
    let read = async {
        let mut answer = Vec::new();
        let mut chunk = [0u8; 16384];
        loop {
            match tokio::io::AsyncReadExt::read(&mut reader, &mut chunk).await {
                Ok(0) | Err(_) => break answer,
                Ok(n) => answer.extend_from_slice(&chunk[..n]),
            }
        }
    };
    let ((), answer) = tokio::time::timeout(Duration::from_secs(10), async { tokio::join!(write, read) })
        .await
        .expect("the proxy answered and closed");
    answer
}

fn assert_envelope(answer: &[u8], status: u16, code: &str) {
    let (head, body) = envelope_of(answer);
    assert_eq!(status_of(&head), status, "{head}");
    let head = head.to_ascii_lowercase();
    assert!(head.contains("\r\ncontent-type: application/json\r\n"), "{head}");
    assert!(head.contains("\r\nx-replaygate-request-id: "), "{head}");
    assert_eq!(body["error"]["code"], code, "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
}

#[tokio::test]
async fn heads_hyper_refuses_are_answered_in_the_envelope() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;

    let garbage = answer_to(&proxy, b"GARBAGE\r\n\r\n".to_vec()).await;
    assert_envelope(&garbage, 400, "invalid_request");

    let bad_version = answer_to(&proxy, b"GET /v1/models HTTP/9.9\r\nhost: x\r\n\r\n".to_vec()).await;
    assert_envelope(&bad_version, 400, "invalid_request");

    let bad_header = answer_to(&proxy, b"GET /v1/models HTTP/1.1\r\nho st: x\r\n\r\n".to_vec()).await;
    assert_envelope(&bad_header, 400, "invalid_request");

    let mut huge = b"GET /v1/models HTTP/1.1\r\nhost: x\r\nx-padding: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 70 * 1024));
    huge.extend_from_slice(b"\r\n\r\n");
    let too_large = answer_to(&proxy, huge).await;
    assert_envelope(&too_large, 431, "request_headers_too_large");

    assert!(
        upstream.received().is_empty(),
        "a refused head reached the provider"
    );
}

#[tokio::test]
async fn a_bad_head_after_a_served_request_on_the_same_connection_gets_the_envelope() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
    let served = b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n";

    // One request, its answer read, then a bad one on the same connection.
    let mut client = connect(proxy.addr).await;
    send(&mut client, served).await;
    let (head, rest) = read_head(&mut client, Duration::from_secs(5)).await;
    assert_eq!(status_of(&head), 200, "{head}");
    let first = read_until(
        &mut client,
        rest,
        RESPONSE_JSON.as_bytes(),
        Duration::from_secs(5),
    )
    .await;
    assert!(
        first.ends_with(RESPONSE_JSON.as_bytes()),
        "nothing follows the first answer yet"
    );
    send(&mut client, b"GET /v1/models HTTP/1.1\r\nbad header line\r\n\r\n").await;
    let answer = read_to_close(&mut client, Duration::from_secs(5))
        .await
        .expect("the proxy closed after the bad head");
    assert_envelope(&answer, 400, "invalid_request");

    // Both in one write (pipelined): the first is served, the second answered in the envelope.
    let mut both = served.to_vec();
    both.extend_from_slice(b"NOT HTTP AT ALL\r\n\r\n");
    let mut client = connect(proxy.addr).await;
    send(&mut client, &both).await;
    let answer = read_to_close(&mut client, Duration::from_secs(5))
        .await
        .expect("the proxy closed after the bad head");
    let end_of_first = support::raw::find(&answer, RESPONSE_JSON.as_bytes()).expect("the first answer")
        + RESPONSE_JSON.len();
    assert!(answer.starts_with(b"HTTP/1.1 200 OK\r\n"));
    assert_envelope(&answer[end_of_first..], 400, "invalid_request");
    assert_eq!(upstream.received().len(), 2);
}

#[tokio::test]
async fn a_provider_answer_shaped_like_hypers_canned_one_passes_unchanged() {
    // An upstream 400 with an empty body, on a keep-alive connection: it is the provider's
    // answer, so it reaches the client as the provider sent it.
    let upstream = Upstream::start(|_| async {
        let mut response = http::Response::new(support::upstream::UpBody::default());
        *response.status_mut() = http::StatusCode::BAD_REQUEST;
        response
    })
    .await;
    let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
    let mut client = connect(proxy.addr).await;
    send(&mut client, b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n").await;
    let (head, _) = read_head(&mut client, Duration::from_secs(5)).await;
    assert_eq!(status_of(&head), 400, "{head}");
    assert!(head.contains("content-length: 0"), "{head}");
    assert!(!head.contains("application/json"), "{head}");
}
