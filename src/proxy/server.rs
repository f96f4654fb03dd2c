//! The listener: accepts connections (HTTP/1.1 and HTTP/2, in clear or over TLS when the state
//! has the listener's TLS) and serves each request through the request lifecycle until
//! shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use super::connection;
use super::state::ProxyState;

/// The largest read buffer of an HTTP/1 connection, and so the largest request head.
///
/// hyper's default (about 400 KiB) lets every connection that once carried a large body keep a
/// buffer that size; bodies are copied out of it frame by frame, so a small one reads as fast.
pub(super) const READ_BUFFER_BYTES: usize = 64 << 10;

/// How long sockets still open when the grace period ends get to send their close (1001).
const SOCKETS_CLOSING: Duration = Duration::from_secs(1);

/// Connection settings of the listener.
#[derive(Debug, Clone, Copy)]
pub struct ServerSettings {
    /// Longest time a client may take to send its request headers (for a new connection: from
    /// accepting it to its first complete request head, whatever the protocol).
    pub header_read_timeout: Duration,
    /// Longest time in-flight requests and streams get to finish after shutdown begins.
    pub shutdown_grace: Duration,
}

/// Serves `listener` until `shutdown` completes, then lets open requests finish for up to the
/// grace period and closes whatever is still open. WebSockets close with 1001 as soon as no
/// turn streams on them, and at the latest as the grace period ends. Binding is the caller's job, so tests can
/// pass a listener on port 0.
///
/// When `run` returns, the listener is closed and every connection it accepted has ended.
pub async fn run(
    listener: TcpListener,
    state: Arc<ProxyState>,
    settings: ServerSettings,
    shutdown: impl Future<Output = ()>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_read_timeout)
        // No `half_close`: hyper reads the connection while a request is open and ends it at
        // the client's FIN, which drops the request and its provider request. A client that
        // only shut down its sending side is told from one gone away by the connection's IO
        // (see `client_io`), which keeps that FIN from hyper.
        .max_buf_size(READ_BUFFER_BYTES);
    builder.http2().timer(TokioTimer::new()).adaptive_window(true);
    let builder = Arc::new(builder);
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    let mut accept_errors = 0u32;
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => {
                    accept_errors = 0;
                    accepted
                }
                Err(error) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    accept_errors = (accept_errors + 1).min(10);
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(5 << accept_errors.min(7))).await;
                    continue;
                }
            },
            // Reap finished connections so the set holds only open ones.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            () = &mut shutdown => break,
        };
        connections.spawn(connection::serve(
            stream,
            peer,
            state.clone(),
            builder.clone(),
            graceful.watcher(),
            settings.header_read_timeout,
        ));
    }
    drop(listener);
    let sockets = &state.sockets;
    tracing::info!(
        open_connections = graceful.count(),
        open_sockets = sockets.count(),
        "shutting down"
    );
    // WebSockets close (1001) as soon as no turn streams on them; connections finish their
    // requests.
    sockets.drain();
    let drained = async {
        tokio::join!(graceful.shutdown(), sockets.closed());
    };
    if tokio::time::timeout(settings.shutdown_grace, drained)
        .await
        .is_err()
    {
        tracing::warn!(
            open_connections = connections.len(),
            open_sockets = sockets.count(),
            "grace period over; closing the remaining connections and sockets"
        );
        connections.abort_all();
        sockets.close_all();
        let _ = tokio::time::timeout(SOCKETS_CLOSING, sockets.closed()).await;
    }
    while connections.join_next().await.is_some() {}
}
