//! One accepted connection: its TLS handshake when the listener serves TLS, then hyper serves
//! it through the request lifecycle, hyper's own error answers go out in the envelope (see
//! [`super::client_io`]), and a connection that has not delivered a whole request head within
//! the header timeout (counted from the accept, the handshake included) is closed.
//!
//! hyper's own HTTP/1 header timeout starts only once the protocol is known, and nothing bounds
//! HTTP/2; a client that connects and stays silent, or sends part of the HTTP/2 preface, or
//! opens HTTP/2 without ever sending a request, would otherwise hold its socket forever.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::Watcher;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::client_io::{ClientIo, OpenBody, PendingError, Requests, WatchedBody};
use super::lifecycle::handle;
use super::peer_certificate::PeerCertificate;
use super::server::READ_BUFFER_BYTES;
use super::state::ProxyState;

/// The future that serves `stream` (from `peer`) until it ends, is shut down gracefully, or
/// misses its first request deadline. Spawn it.
pub(super) fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    state: Arc<ProxyState>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    graceful: Watcher,
    first_request_within: Duration,
) -> impl Future<Output = ()> + Send + 'static {
    let _ = stream.set_nodelay(true);
    let deadline = Instant::now() + first_request_within;
    async move {
        match state.tls.clone() {
            None => serve_io(stream, None, state, &builder, graceful, deadline).await,
            Some(tls) => {
                let Some((stream, certificate)) = tls.handshake(stream, peer, deadline).await else {
                    return;
                };
                let certificate = certificate.map(|leaf| PeerCertificate(Arc::new(leaf)));
                // Boxed: a connection still in its handshake holds only the handshake's state.
                Box::pin(serve_io(stream, certificate, state, &builder, graceful, deadline)).await;
            }
        }
    }
}

/// The future that serves `io` with hyper; each request carries `certificate` (if any) in its
/// extensions.
fn serve_io<S>(
    io: S,
    certificate: Option<PeerCertificate>,
    state: Arc<ProxyState>,
    builder: &auto::Builder<TokioExecutor>,
    graceful: Watcher,
    deadline: Instant,
) -> impl Future<Output = ()> + Send + 'static
where
    S: AsyncRead + AsyncWrite + PendingError + Unpin + Send + 'static,
{
    let first_request = Arc::new(Notify::new());
    let arrived = first_request.clone();
    let requests = Arc::new(Requests::default());
    let io = ClientIo::new(io, requests.clone(), READ_BUFFER_BYTES);
    let service = service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
        arrived.notify_one();
        // Counted as hyper hands the request over, before it reads or writes anything more.
        let open = requests.begin();
        if let Some(certificate) = &certificate {
            request.extensions_mut().insert(certificate.clone());
        }
        let request = match request.version() {
            http::Version::HTTP_11 => request.map(|body| open.watch(body)),
            _ => request.map(WatchedBody::unwatched),
        };
        let state = state.clone();
        async move {
            let response = handle(state, request).await;
            Ok::<_, std::convert::Infallible>(response.map(|body| OpenBody::new(body, open)))
        }
    });
    let connection = builder
        .serve_connection_with_upgrades(TokioIo::new(io), service)
        .into_owned();
    let connection = graceful.watch(connection);
    async move {
        tokio::select! {
            result = connection => {
                if let Err(error) = result {
                    tracing::debug!(%error, "connection ended with an error");
                }
            }
            () = deadline_unless_notified(&first_request, deadline) => {
                tracing::debug!("no request head in time; closing the connection");
            }
        }
    }
}

/// Completes at `deadline` unless `notify` fires first, in which case it never completes.
async fn deadline_unless_notified(notify: &Notify, deadline: Instant) {
    if tokio::time::timeout_at(deadline, notify.notified()).await.is_ok() {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn in_20ms() -> Instant {
        Instant::now() + Duration::from_millis(20)
    }

    #[tokio::test]
    async fn the_deadline_passes_without_a_notification() {
        let notify = Notify::new();
        let deadline = deadline_unless_notified(&notify, in_20ms());
        tokio::time::timeout(Duration::from_secs(5), deadline)
            .await
            .expect("the deadline should have passed");
    }

    #[tokio::test]
    async fn a_notification_disarms_the_deadline() {
        let notify = Notify::new();
        notify.notify_one();
        let deadline = deadline_unless_notified(&notify, in_20ms());
        let outcome = tokio::time::timeout(Duration::from_millis(200), deadline).await;
        assert!(outcome.is_err(), "the deadline fired after a request arrived");
    }
}
