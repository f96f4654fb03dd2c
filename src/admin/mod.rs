//! The admin listener (docs/operations.md#ports-and-probes, `[admin] listen`): `GET /metrics`
//! (Prometheus), `GET /healthz`, `GET /readyz` and `GET /usage` (each team's and budgeted key's
//! usage and budget in the current window, docs/usage.md#get-usage), on an address of its own,
//! never the proxy's.
//!
//! It is built to cost the proxy little whatever its clients do: it runs on a thread and
//! runtime of its own ([`AdminThread`]), holds at most
//! `MAX_CONNECTIONS` connections, and serves at most `REQUESTS_PER_SECOND` requests a second
//! (after a burst); a request over that pace waits its turn. Encoding the metrics reads atomics
//! and takes no lock the request path takes for long.

mod pace;
mod ready;
mod routes;
mod thread;
mod usage;
mod usage_report;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::spend::SpendClock;
use arc_swap::ArcSwap;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::metrics::Metrics;
use crate::proxy::snapshot::Snapshot;
use crate::proxy::ProxyState;
use crate::state::StateStore;
use crate::tls::TlsListener;
use pace::Pace;
pub use thread::AdminThread;

/// The most connections the admin listener holds open; more wait to be accepted.
pub(crate) const MAX_CONNECTIONS: usize = 64;

/// The most requests the admin listener serves a second, after a burst of
/// [`REQUEST_BURST`]; more wait their turn.
pub(crate) const REQUESTS_PER_SECOND: u32 = 1000;

/// How many requests may come at once without waiting.
pub(crate) const REQUEST_BURST: u32 = 100;

/// Time a client has to send a request head.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What the admin listener reports on.
#[derive(Debug, Clone)]
pub struct AdminState {
    metrics: Arc<Metrics>,
    store: StateStore,
    /// The configuration in force (its teams, prices and metric handles), for `GET /usage`.
    snapshot: Arc<ArcSwap<Snapshot>>,
    /// The clock budgets' windows are read from.
    clock: SpendClock,
    draining: Arc<AtomicBool>,
    pace: Arc<Pace>,
    /// `[ledger] on_unavailable = "allow"`: a state backend that does not answer leaves the
    /// replica ready.
    allow_unavailable: bool,
    /// `[admin] tls_cert_file`: the admin listener serves HTTPS (docs/operations.md#tls).
    tls: Option<Arc<TlsListener>>,
}

impl AdminState {
    /// Reports on `state`'s metrics, state backend and configuration.
    pub fn of(state: &ProxyState) -> AdminState {
        AdminState {
            clock: state.clock.clone(),
            metrics: state.metrics.clone(),
            store: state.store.clone(),
            snapshot: state.snapshot_slot(),
            draining: Arc::new(AtomicBool::new(false)),
            pace: Arc::new(Pace::new(REQUESTS_PER_SECOND, REQUEST_BURST)),
            allow_unavailable: state.uncounted_rates.allows(),
            tls: state.admin_tls.clone(),
        }
    }

    /// From now on `/readyz` answers 503: the proxy is shutting down.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }
}

/// Serves the admin routes on `listener` until `shutdown` completes, then closes every
/// connection. Binding is the caller's job (tests pass a listener on port 0).
pub(crate) async fn serve(listener: TcpListener, admin: AdminState, shutdown: impl Future<Output = ()>) {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(16 * 1024);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = accept(&listener, &slots) => accepted,
        };
        let Some((stream, peer, slot)) = accepted else {
            // Out of file descriptors and the like: back off instead of spinning.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let admin = admin.clone();
        let builder = builder.clone();
        let tls = admin.tls.clone();
        connections.spawn(async move {
            let _slot = slot;
            let service = service_fn(move |request| {
                let admin = admin.clone();
                async move {
                    admin.pace.turn().await;
                    Ok::<_, std::convert::Infallible>(routes::answer(&admin, &request).await)
                }
            });
            match tls {
                None => {
                    let _ = builder.serve_connection(TokioIo::new(stream), service).await;
                }
                Some(tls) => {
                    let deadline = tokio::time::Instant::now() + HEADER_READ_TIMEOUT;
                    if let Some((stream, _)) = tls.handshake(stream, peer, deadline).await {
                        let _ = builder.serve_connection(TokioIo::new(stream), service).await;
                    }
                }
            }
        });
    }
    drop(listener);
    connections.abort_all();
    while connections.join_next().await.is_some() {}
}

/// Waits for a free connection slot, then for a connection; `None` when accepting failed.
async fn accept(
    listener: &TcpListener,
    slots: &Arc<Semaphore>,
) -> Option<(
    tokio::net::TcpStream,
    SocketAddr,
    tokio::sync::OwnedSemaphorePermit,
)> {
    let slot = slots
        .clone()
        .acquire_owned()
        .await
        .expect("the connection slots are never closed");
    match listener.accept().await {
        Ok((stream, peer)) => Some((stream, peer, slot)),
        Err(error) => {
            tracing::warn!(%error, "admin listener: accept failed");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn as_many_handshakes_as_connections() {
        assert_eq!(super::MAX_CONNECTIONS, crate::tls::ADMIN_HANDSHAKES);
    }
}
