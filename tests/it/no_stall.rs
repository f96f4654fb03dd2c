//! A heavy judgment never stalls the other connections of a worker: while a body of tool calls
//! against an exponentially branching schema is judged, a trivial request is answered and a
//! running stream keeps flowing.
//!
//! The proxy here runs on the test's single-threaded runtime, as a worker does, so a judgment
//! made on that thread would hold up everything else until it ended.

use crate::support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::json;
use support::proxy::{one_provider, Proxy};
use support::upstream::{json_response, sse_response, Upstream, RESPONSE_JSON};
use tokio::sync::mpsc;

/// A tool whose schema branches in two at each of `levels` levels (within the unfold limit),
/// and `calls` calls whose arguments fail it, so each is walked through every branch.
fn heavy_body(levels: usize, calls: usize) -> String {
    let mut defs = serde_json::Map::new();
    for i in 0..levels {
        let next = format!("#/$defs/d{}", i + 1);
        defs.insert(
            format!("d{i}"),
            json!({"anyOf": [{"$ref": next}, {"$ref": next}]}),
        );
    }
    defs.insert(format!("d{levels}"), json!({"type": "integer"}));
    let parameters = json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "$defs": defs});
    let items: Vec<_> = (0..calls)
        .map(|i| json!({"type": "function_call", "call_id": format!("c{i}"), "name": "deep", "arguments": format!(r#"{{"x":"not a number {i}"}}"#)}))
        .collect();
    json!({"model": "gpt-5", "tools": [{"type": "function", "name": "deep", "parameters": parameters}], "input": items}).to_string()
}

#[tokio::test]
async fn a_trivial_request_and_a_stream_stay_fast_while_a_heavy_body_is_judged() {
    let (streams_tx, mut streams) = mpsc::channel::<mpsc::Sender<Bytes>>(1);
    let upstream = Upstream::start(move |request| {
        let streams_tx = streams_tx.clone();
        async move {
            if !String::from_utf8_lossy(&request.body).contains(r#""stream":true"#) {
                return json_response(200, RESPONSE_JSON);
            }
            let (events, response) = sse_response();
            streams_tx.send(events).await.unwrap();
            response
        }
    })
    .await;
    let config = one_provider(
        &upstream.base_url(),
        "\"none\"",
        "[gate]\nwork_budget = 4000000000\n",
    );
    let proxy = Proxy::start(&config, &[]).await;
    let client = reqwest::Client::new();

    // A stream, open and flowing.
    let response = client
        .post(proxy.url("/v1/responses"))
        .body(r#"{"model":"gpt-5","stream":true,"input":"hi"}"#)
        .send()
        .await
        .unwrap();
    let events = streams.recv().await.unwrap();
    let mut stream = response.bytes_stream();
    events.send(Bytes::from_static(b"data: 1\n\n")).await.unwrap();
    assert_eq!(stream.next().await.unwrap().unwrap(), "data: 1\n\n");

    // The heavy judgment starts.
    let heavy = tokio::spawn({
        let (client, url) = (client.clone(), proxy.url("/v1/responses"));
        async move {
            let started = Instant::now();
            let response = client.post(url).body(heavy_body(12, 24)).send().await.unwrap();
            (response.status().as_u16(), started.elapsed())
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;

    // Meanwhile a trivial request is answered at once ...
    let started = Instant::now();
    let trivial = client
        .post(proxy.url("/v1/responses"))
        .body(r#"{"model":"gpt-5","input":"hi"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(trivial.status(), 200);
    let trivial_took = started.elapsed();
    // ... and the stream's next event passes straight through.
    let started = Instant::now();
    events.send(Bytes::from_static(b"data: 2\n\n")).await.unwrap();
    assert_eq!(stream.next().await.unwrap().unwrap(), "data: 2\n\n");
    let event_took = started.elapsed();
    if heavy.is_finished() {
        panic!(
            "the heavy judgment ended too soon to show anything: {:?}",
            heavy.await.unwrap()
        );
    }

    assert!(
        trivial_took < Duration::from_millis(250),
        "a trivial request took {trivial_took:?}"
    );
    assert!(
        event_took < Duration::from_millis(250),
        "a stream event took {event_took:?}"
    );
    let (status, heavy_took) = heavy.await.unwrap();
    assert_eq!(status, 422);
    assert!(
        heavy_took > trivial_took * 4,
        "{heavy_took:?} vs {trivial_took:?}"
    );
    drop(events);
}
