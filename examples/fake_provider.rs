//! A stand-in provider for load tests, on loopback: `POST .../responses` answers a canned
//! response, or, when the body asks for `"stream":true`, five SSE events 20 ms apart; any
//! other path answers a small JSON list. It is not part of replaygate, only something for
//! `scripts/soak` to put it in front of.
//!
//! ```sh
//! cargo run --release --example fake_provider -- 127.0.0.1:0   # prints "listening on ADDR"
//! ```

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

type Body = UnsyncBoxBody<Bytes, Infallible>;

const RESPONSE: &str = r#"{"id":"resp_soak","object":"response","status":"completed","output":[{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"ok","annotations":[]}]}]}"#;
const MODELS: &str = r#"{"object":"list","data":[{"id":"gpt-5","object":"model"}]}"#;
const EVENTS: usize = 5;
const EVENT_GAP: Duration = Duration::from_millis(20);

fn json(text: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed_unsync());
    response
        .headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    response
}

fn stream() -> Response<Body> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(EVENTS + 1);
    tokio::spawn(async move {
        for n in 0..EVENTS {
            let event = format!(
                "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"sequence_number\":{n},\"delta\":\"ok\"}}\n\n"
            );
            if tx.send(Bytes::from(event)).await.is_err() {
                return;
            }
            tokio::time::sleep(EVENT_GAP).await;
        }
        let _ = tx.send(Bytes::from_static(b"data: [DONE]\n\n")).await;
    });
    let frames = futures_util::stream::unfold(rx, |mut rx| async move {
        let chunk = rx.recv().await?;
        Some((Ok::<_, Infallible>(Frame::data(chunk)), rx))
    });
    let mut response = Response::new(StreamBody::new(frames).boxed_unsync());
    response
        .headers_mut()
        .insert("content-type", "text/event-stream".parse().unwrap());
    response
}

async fn answer(request: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let is_responses = request.uri().path().ends_with("/responses");
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    if !is_responses {
        return Ok(json(MODELS));
    }
    let wants_stream = body.windows(13).any(|w| w == b"\"stream\":true");
    Ok(if wants_stream { stream() } else { json(RESPONSE) })
}

#[tokio::main]
async fn main() {
    let listen: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into())
        .parse()
        .expect("usage: fake_provider [ADDR]");
    assert!(
        listen.ip().is_loopback(),
        "the fake provider listens on loopback only"
    );
    let listener = TcpListener::bind(listen).await.expect("cannot listen");
    println!("listening on {}", listener.local_addr().unwrap());
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service_fn(answer))
                .await;
        });
    }
}
