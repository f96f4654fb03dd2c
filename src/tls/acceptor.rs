//! The handshake of each accepted connection. The configuration in force is read once per
//! connection, so a reload's certificate serves the next handshakes while open connections keep
//! theirs. A handshake counts against the header timeout (it ends at the connection's first
//! request deadline) and holds one of a bounded number of permits, so neither slow nor many
//! clients hold more than that (docs/configuration.md#server).

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::failures::FailureLog;
use super::files::TlsFileError;
use super::server_config;
use crate::config::ListenerTls;

/// The listener's TLS, shared by every worker of the process.
#[derive(Debug)]
pub(crate) struct TlsListener {
    /// The configuration new handshakes use.
    config: ArcSwap<ServerConfig>,
    /// Permits for handshakes under way: `[server] max_concurrent_requests`.
    handshakes: Semaphore,
    failures: FailureLog,
}

impl TlsListener {
    /// Reads the files `tls` names; at most `max_handshakes` handshakes run at once.
    pub(crate) fn new(tls: &ListenerTls, max_handshakes: usize) -> Result<TlsListener, TlsFileError> {
        Ok(TlsListener {
            config: ArcSwap::new(server_config::build(tls)?),
            handshakes: Semaphore::new(max_handshakes.max(1)),
            failures: FailureLog::default(),
        })
    }

    /// Puts `config` (see [`server_config::build`]) in force for the next handshakes.
    pub(crate) fn swap(&self, config: Arc<ServerConfig>) {
        self.config.store(config);
    }

    /// The handshake of `stream` from `peer`, finished by `deadline`; `None` (the failure
    /// logged) when it failed or did not finish in time.
    pub(crate) async fn handshake(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        deadline: Instant,
    ) -> Option<TlsStream<TcpStream>> {
        // A client that has sent nothing yet holds no permit.
        if !matches!(
            tokio::time::timeout_at(deadline, stream.readable()).await,
            Ok(Ok(()))
        ) {
            tracing::debug!(%peer, "nothing sent before the header timeout; closing");
            return None;
        }
        let Ok(Ok(_permit)) = tokio::time::timeout_at(deadline, self.handshakes.acquire()).await else {
            tracing::debug!(%peer, "no handshake permit free before the header timeout; closing");
            return None;
        };
        let accept = TlsAcceptor::from(self.config.load_full()).accept(stream);
        match tokio::time::timeout_at(deadline, accept).await {
            Err(_) => {
                tracing::debug!(%peer, "TLS handshake not finished within the header timeout; closing");
                None
            }
            Ok(Err(error)) => {
                self.failures.failed(peer.ip(), &error);
                None
            }
            Ok(Ok(stream)) => {
                if let Some(name) = stream.get_ref().1.server_name() {
                    tracing::debug!(%peer, server_name = name, "TLS handshake");
                }
                Some(stream)
            }
        }
    }
}
