//! A fake provider: an in-process hyper server on 127.0.0.1:0 that records what it receives
//! and answers as each test tells it to.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;

/// The body type fake upstreams answer with.
pub type UpBody = UnsyncBoxBody<Bytes, Infallible>;

/// A request as the upstream received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: Method,
    /// Path and query, exactly as received.
    pub target: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

type Handler = Arc<dyn Fn(Received) -> Pin<Box<dyn Future<Output = Response<UpBody>> + Send>> + Send + Sync>;

/// A running fake upstream.
pub struct Upstream {
    pub addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Upstream {
    /// Starts an upstream whose answers come from `handler`.
    pub async fn start<F, Fut>(handler: F) -> Upstream
    where
        F: Fn(Received) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Response<UpBody>> + Send + 'static,
    {
        let handler: Handler = Arc::new(move |r| Box::pin(handler(r)));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = received.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let handler = handler.clone();
                let log = log.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request: Request<Incoming>| {
                        let handler = handler.clone();
                        let log = log.clone();
                        async move {
                            let (parts, body) = request.into_parts();
                            let body = body.collect().await.map(|c| c.to_bytes()).unwrap_or_default();
                            let received = Received {
                                method: parts.method,
                                target: parts
                                    .uri
                                    .path_and_query()
                                    .map(|p| p.to_string())
                                    .unwrap_or_default(),
                                headers: parts.headers,
                                body,
                            };
                            log.lock().unwrap().push(received.clone());
                            Ok::<_, Infallible>(handler(received).await)
                        }
                    });
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Upstream { addr, received, task }
    }

    /// An upstream that answers every request with `status` and a JSON body.
    pub async fn json(status: u16, body: &'static str) -> Upstream {
        Upstream::start(move |_| async move { json_response(status, body) }).await
    }

    /// An upstream that answers every request with an SSE stream and hands that stream's
    /// sender to the test, one per request, through the returned receiver.
    pub async fn sse_feed() -> (Upstream, mpsc::Receiver<mpsc::Sender<Bytes>>) {
        let (senders_tx, senders_rx) = mpsc::channel::<mpsc::Sender<Bytes>>(16);
        let upstream = Upstream::start(move |_| {
            let senders_tx = senders_tx.clone();
            async move {
                let (events, response) = sse_response();
                let _ = senders_tx.send(events).await;
                response
            }
        })
        .await;
        (upstream, senders_rx)
    }

    /// The base URL to put in `proxy.toml`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Everything received so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

/// A complete JSON answer.
pub fn json_response(status: u16, body: impl Into<Bytes>) -> Response<UpBody> {
    let mut response = Response::new(Full::new(body.into()).boxed_unsync());
    *response.status_mut() = StatusCode::from_u16(status).unwrap();
    response
        .headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    response
}

/// A streamed `text/event-stream` answer fed chunk by chunk through the returned sender.
pub fn sse_response() -> (mpsc::Sender<Bytes>, Response<UpBody>) {
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    let stream = ReceiverStream::new(rx).map(|chunk| Ok::<_, Infallible>(Frame::data(chunk)));
    let mut response = Response::new(StreamBody::new(stream).boxed_unsync());
    response
        .headers_mut()
        .insert("content-type", "text/event-stream".parse().unwrap());
    (tx, response)
}

/// The canned answer of a fake Responses endpoint.
pub const RESPONSE_JSON: &str = r#"{"id":"resp_1","object":"response","status":"completed","output":[{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"hi","annotations":[]}]}]}"#;
