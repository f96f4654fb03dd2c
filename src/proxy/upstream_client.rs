//! The pooled client a provider's requests are forwarded with: hyper-util's client over rustls
//! (the platform's trust store, HTTP/2 by ALPN, else HTTP/1.1), with no proxy, no redirects and
//! no decompression, since it has none of them.
//!
//! `connect_timeout` bounds making a connection (TCP and TLS); `read_timeout` bounds the wait
//! for the answer's head (from sending, a connection made on the way included) and every wait
//! for the next frame of its body, never the whole answer.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, Uri};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rustls::crypto::CryptoProvider;
use rustls::ClientConfig;
use rustls_platform_verifier::BuilderVerifierExt;
use tokio::time::{Instant, Sleep};

use super::body::{BoxError, ProxyBody};

/// How long an idle pooled connection is kept.
const POOL_IDLE: Duration = Duration::from_secs(90);
/// TCP keepalive on upstream connections: idle time before the first probe, and between probes.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// Unanswered keepalive probes before the connection is given up.
const KEEPALIVE_PROBES: u32 = 3;
/// How long sent data may stay unacknowledged before the kernel gives the connection up.
#[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(30);
/// Retries of a request an HTTP/2 provider refused unprocessed (see [`refused_unprocessed`]).
const MAX_RETRIES: usize = 2;

type Connector = ConnectTimeout<HttpsConnector<HttpConnector>>;

/// One provider's pooled upstream client.
pub(crate) struct UpstreamClient {
    client: Client<Connector, Full<Bytes>>,
    read_timeout: Duration,
}

impl fmt::Debug for UpstreamClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamClient")
            .field("read_timeout", &self.read_timeout)
            .finish_non_exhaustive()
    }
}

/// Why no answer came.
#[derive(Debug)]
pub(crate) enum SendError {
    /// The answer's head did not come within `read_timeout`.
    TimedOut,
    /// No connection could be made (refused, unresolvable, TLS refused, or `connect_timeout`).
    Connect(hyper_util::client::legacy::Error),
    /// The request failed on a connection (closed, reset, or an answer hyper cannot read).
    Failed(hyper_util::client::legacy::Error),
}

impl UpstreamClient {
    /// A client with its own pool. Fails only when the platform's trust store cannot be read.
    pub(crate) fn new(
        connect_timeout: Duration,
        read_timeout: Duration,
    ) -> Result<UpstreamClient, rustls::Error> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(connect_timeout));
        http.set_nodelay(true);
        http.set_keepalive(Some(KEEPALIVE));
        http.set_keepalive_interval(Some(KEEPALIVE));
        http.set_keepalive_retries(Some(KEEPALIVE_PROBES));
        #[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
        http.set_tcp_user_timeout(Some(TCP_USER_TIMEOUT));
        let https = HttpsConnectorBuilder::new()
            .with_tls_config(tls_config()?)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(http);
        let connector = ConnectTimeout {
            inner: https,
            timeout: connect_timeout,
        };
        let client = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(POOL_IDLE)
            .build(connector);
        Ok(UpstreamClient { client, read_timeout })
    }

    /// Sends one request and waits for the answer's head; its body then streams under the read
    /// timeout. The headers are moved into the request; only for an `https` URI (where HTTP/2
    /// may be spoken) is a copy kept, for the retry of a request the provider refused unread.
    pub(crate) async fn send(
        &self,
        method: Method,
        uri: Uri,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<Response<ProxyBody>, SendError> {
        let outbound = Outbound {
            method,
            uri,
            headers,
            body,
        };
        let answer = tokio::time::timeout(self.read_timeout, self.send_retrying(outbound))
            .await
            .map_err(|_| SendError::TimedOut)??;
        Ok(answer.map(|body| ReadTimeout::new(body, self.read_timeout).boxed_unsync()))
    }

    async fn send_retrying(&self, outbound: Outbound) -> Result<Response<Incoming>, SendError> {
        let https = outbound.uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        let mut copy = https.then(|| outbound.clone());
        let mut request = outbound.into_request();
        let mut retries = 0;
        loop {
            let error = match self.client.request(request).await {
                Ok(answer) => return Ok(answer),
                Err(error) if error.is_connect() => return Err(SendError::Connect(error)),
                Err(error) => error,
            };
            let again = copy
                .take()
                .filter(|_| retries < MAX_RETRIES && refused_unprocessed(&error));
            let Some(again) = again else {
                return Err(SendError::Failed(error));
            };
            retries += 1;
            if retries < MAX_RETRIES {
                copy = Some(again.clone());
            }
            request = again.into_request();
        }
    }
}

/// A request's parts, kept to be sent again.
#[derive(Clone)]
struct Outbound {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
}

impl Outbound {
    fn into_request(self) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(self.body));
        *request.method_mut() = self.method;
        *request.uri_mut() = self.uri;
        *request.headers_mut() = self.headers;
        request
    }
}

/// Whether an HTTP/2 provider said it did not process the request, so that it may be sent again
/// on another stream or connection: a graceful GOAWAY (`NO_ERROR`) or a `REFUSED_STREAM` reset.
fn refused_unprocessed(error: &hyper_util::client::legacy::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(error);
    while let Some(current) = cause {
        if let Some(h2) = current.downcast_ref::<h2::Error>() {
            return h2.is_remote()
                && ((h2.is_go_away() && h2.reason() == Some(h2::Reason::NO_ERROR))
                    || (h2.is_reset() && h2.reason() == Some(h2::Reason::REFUSED_STREAM)));
        }
        cause = current.source();
    }
    false
}

/// The TLS settings: TLS 1.2 and 1.3 with the installed crypto provider (aws-lc-rs unless the
/// process chose another), certificates checked against the platform's trust store. The
/// connector sets ALPN (`h2`, `http/1.1`).
fn tls_config() -> Result<ClientConfig, rustls::Error> {
    let provider = CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
    Ok(ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(rustls::ALL_VERSIONS)?
        .with_platform_verifier()?
        .with_no_client_auth())
}

/// A connector whose whole connection setup (resolving, TCP, TLS) is bounded by a timeout.
#[derive(Clone)]
struct ConnectTimeout<C> {
    inner: C,
    timeout: Duration,
}

impl<C> tower_service::Service<Uri> for ConnectTimeout<C>
where
    C: tower_service::Service<Uri>,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    type Response = C::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<C::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        let timeout = self.timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, connecting).await {
                Ok(connected) => connected.map_err(Into::into),
                Err(_) => Err(Box::new(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connection timed out",
                )) as BoxError),
            }
        })
    }
}

/// An answer's body whose every wait for a frame is bounded: a provider silent for longer
/// ends it with an error (the client sees its stream cut, not a complete answer).
///
/// The clock runs only while the body waits for the provider, from the first poll that finds
/// no frame, so a client slow to take the frames does not count against the provider.
pub(crate) struct ReadTimeout {
    inner: Incoming,
    timeout: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
    waiting: bool,
}

impl ReadTimeout {
    fn new(inner: Incoming, timeout: Duration) -> ReadTimeout {
        ReadTimeout {
            inner,
            timeout,
            sleep: None,
            waiting: false,
        }
    }
}

/// The error a body ends with when its provider fell silent.
#[derive(Debug, thiserror::Error)]
#[error("no data from the provider for {} ms (read_timeout)", .0.as_millis())]
pub(crate) struct ReadTimedOut(Duration);

impl Body for ReadTimeout {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            this.waiting = false;
            return Poll::Ready(frame.map(|frame| frame.map_err(BoxError::from)));
        }
        let timeout = this.timeout;
        let restart = !std::mem::replace(&mut this.waiting, true);
        let sleep = match &mut this.sleep {
            Some(sleep) => {
                if restart {
                    sleep.as_mut().reset(Instant::now() + timeout);
                }
                sleep
            }
            None => this.sleep.insert(Box::pin(tokio::time::sleep(timeout))),
        };
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(ReadTimedOut(timeout))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
