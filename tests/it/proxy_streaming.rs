//! Streams: SSE events reach the client one by one, as the provider sends them.

use crate::support;

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use support::proxy::{one_provider, Proxy};
use support::upstream::{sse_response, Upstream};
use tokio::sync::{mpsc, oneshot};

#[tokio::test]
async fn the_first_event_arrives_before_the_provider_finishes() {
    let (sender_tx, mut sender_rx) = mpsc::channel::<mpsc::Sender<Bytes>>(1);
    let upstream = Upstream::start(move |_| {
        let sender_tx = sender_tx.clone();
        async move {
            let (events, response) = sse_response();
            sender_tx.send(events).await.unwrap();
            response
        }
    })
    .await;
    let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;

    let (done_tx, done_rx) = oneshot::channel::<Vec<Bytes>>();
    let url = proxy.url("/v1/responses");
    let client = tokio::spawn(async move {
        let response = reqwest::Client::new()
            .post(url)
            .body(r#"{"model":"gpt-5","stream":true,"input":"hi"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let mut stream = response.bytes_stream();
        let mut chunks = Vec::new();
        while let Some(chunk) = stream.next().await {
            chunks.push(chunk.unwrap());
            if chunks.len() == 1 {
                // Hand the first chunk over while the stream is still open.
                let _ = done_tx.send(chunks.clone());
                break;
            }
        }
        let mut rest = Vec::new();
        while let Some(chunk) = stream.next().await {
            rest.push(chunk.unwrap());
        }
        rest
    });

    let events = tokio::time::timeout(Duration::from_secs(5), sender_rx.recv())
        .await
        .unwrap()
        .unwrap();
    let first = Bytes::from_static(
        b"event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0}\n\n",
    );
    events.send(first.clone()).await.unwrap();
    // The provider has not finished: the client must already hold the first event.
    let received = tokio::time::timeout(Duration::from_secs(5), done_rx)
        .await
        .expect("first event was buffered")
        .unwrap();
    assert_eq!(received.concat(), first);

    let last = Bytes::from_static(b"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":1}\n\ndata: [DONE]\n\n");
    events.send(last.clone()).await.unwrap();
    drop(events);
    let rest = tokio::time::timeout(Duration::from_secs(5), client)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rest.concat(), last);
}
