//! One accepted connection: hyper serves it through the request lifecycle, hyper's own error
//! answers go out in the envelope (see [`super::client_io`]), and a connection that has not
//! delivered a whole request head within the header timeout is closed.
//!
//! hyper's own HTTP/1 header timeout starts only once the protocol is known, and nothing bounds
//! HTTP/2; a client that connects and stays silent, or sends part of the HTTP/2 preface, or
//! opens HTTP/2 without ever sending a request, would otherwise hold its socket forever.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpStream;
use tokio::sync::Notify;

use super::client_io::{ClientIo, OpenBody, Requests, WatchedBody};
use super::lifecycle::handle;
use super::server::READ_BUFFER_BYTES;
use super::state::ProxyState;

/// The future that serves `stream` until it ends, is shut down gracefully, or misses its first
/// request deadline. Spawn it.
pub(super) fn serve(
    stream: TcpStream,
    state: Arc<ProxyState>,
    builder: &auto::Builder<TokioExecutor>,
    graceful: &GracefulShutdown,
    first_request_within: Duration,
) -> impl Future<Output = ()> + Send + 'static {
    let _ = stream.set_nodelay(true);
    let first_request = Arc::new(Notify::new());
    let arrived = first_request.clone();
    let requests = Arc::new(Requests::default());
    let io = ClientIo::new(stream, requests.clone(), READ_BUFFER_BYTES);
    let service = service_fn(move |request| {
        arrived.notify_one();
        // Counted as hyper hands the request over, before it reads or writes anything more.
        let open = requests.begin();
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
            () = deadline_unless_notified(&first_request, first_request_within) => {
                tracing::debug!("no request head in time; closing the connection");
            }
        }
    }
}

/// Completes after `limit` unless `notify` fires first, in which case it never completes.
async fn deadline_unless_notified(notify: &Notify, limit: Duration) {
    if tokio::time::timeout(limit, notify.notified()).await.is_ok() {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_deadline_passes_without_a_notification() {
        let notify = Notify::new();
        let deadline = deadline_unless_notified(&notify, Duration::from_millis(20));
        tokio::time::timeout(Duration::from_secs(5), deadline)
            .await
            .expect("the deadline should have passed");
    }

    #[tokio::test]
    async fn a_notification_disarms_the_deadline() {
        let notify = Notify::new();
        notify.notify_one();
        let deadline = deadline_unless_notified(&notify, Duration::from_millis(20));
        let outcome = tokio::time::timeout(Duration::from_millis(200), deadline).await;
        assert!(outcome.is_err(), "the deadline fired after a request arrived");
    }
}
