//! The handshake of each accepted connection. The configuration in force is read once per
//! connection, so a reload's certificate serves the next handshakes while open connections keep
//! theirs. A handshake counts against the header timeout (it ends at the connection's first
//! request deadline) and, from the client's first bytes, holds one of a bounded number of
//! permits, so neither slow nor many clients hold more than that (docs/configuration.md#server).

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::pki_types::CertificateDer;
use rustls::ServerConfig;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::failures::FailureLog;
use super::files::TlsFileError;
use super::read_ahead::ReadAhead;
use super::server_config;
use crate::config::ListenerTls;

/// A listener's TLS (the proxy's, shared by every worker of the process, or the admin
/// listener's).
#[derive(Debug)]
pub(crate) struct TlsListener {
    /// The protocols offered by ALPN.
    alpn: &'static [&'static [u8]],
    /// The configuration new handshakes use.
    config: ArcSwap<ServerConfig>,
    /// Permits for handshakes under way (the proxy's: `[server] max_concurrent_requests`).
    handshakes: Semaphore,
    failures: FailureLog,
}

impl TlsListener {
    /// Reads the files `tls` names; at most `max_handshakes` handshakes run at once, offering
    /// `alpn`.
    pub(crate) fn new(
        tls: &ListenerTls,
        max_handshakes: usize,
        alpn: &'static [&'static [u8]],
    ) -> Result<TlsListener, TlsFileError> {
        Ok(TlsListener {
            alpn,
            config: ArcSwap::new(server_config::build(tls, alpn)?),
            handshakes: Semaphore::new(max_handshakes.max(1)),
            failures: FailureLog::default(),
        })
    }

    /// Reads the files `tls` names again: the configuration for the next handshakes, to put
    /// in force with [`TlsListener::swap`].
    pub(crate) fn reread(&self, tls: &ListenerTls) -> Result<Arc<ServerConfig>, TlsFileError> {
        server_config::build(tls, self.alpn)
    }

    /// Puts `config` (from [`TlsListener::reread`]) in force for the next handshakes.
    pub(crate) fn swap(&self, config: Arc<ServerConfig>) {
        self.config.store(config);
    }

    /// The handshake of `stream` from `peer`, finished by `deadline`: the TLS stream and the
    /// client's certificate if it presented one (rustls hands a client's chain over only once
    /// the verifier accepted it). `None` (the failure logged) when it failed or did not finish
    /// in time.
    pub(crate) async fn handshake(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        deadline: Instant,
    ) -> Option<(TlsStream<ReadAhead>, Option<CertificateDer<'static>>)> {
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
        let accept = TlsAcceptor::from(self.config.load_full()).accept(ReadAhead::new(stream));
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
                let connection = stream.get_ref().1;
                if let Some(name) = connection.server_name() {
                    tracing::debug!(%peer, server_name = name, "TLS handshake");
                }
                let certificate = connection
                    .peer_certificates()
                    .and_then(|chain| chain.first())
                    .map(|leaf| leaf.clone().into_owned());
                Some((stream, certificate))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClientAuth;
    use crate::test_pki::{Issued, TestCa};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{PrivateKeyDer, ServerName};
    use std::time::Duration;

    /// A listener's TLS asking for client certificates of `client_ca` as `auth`.
    fn listener(
        dir: &std::path::Path,
        server_ca: &TestCa,
        client_ca: &TestCa,
        auth: ClientAuth,
    ) -> TlsListener {
        let server = server_ca.issue(&["localhost"], dir, "server");
        let tls = ListenerTls {
            table: "[server]",
            cert_file: server.cert,
            key_file: server.key,
            client_ca: Some((client_ca.write(dir, "client-ca"), auth)),
        };
        TlsListener::new(&tls, 4, server_config::ALPN).unwrap()
    }

    /// Connects to a listener on loopback as a client trusting `server_ca` with `identity`;
    /// what the listener's handshake gave.
    async fn handshake(
        listener: TlsListener,
        dir: &std::path::Path,
        server_ca: &TestCa,
        identity: Option<&Issued>,
    ) -> Option<Option<CertificateDer<'static>>> {
        let socket = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = socket.local_addr().unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_file(server_ca.write(dir, "server-ca")).unwrap())
            .unwrap();
        let builder = rustls::ClientConfig::builder_with_provider(server_config::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let config = match identity {
            Some(issued) => builder
                .with_client_auth_cert(
                    vec![CertificateDer::from_pem_file(&issued.cert).unwrap()],
                    PrivateKeyDer::from_pem_file(&issued.key).unwrap(),
                )
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        let client = tokio::spawn(async move {
            let tcp = TcpStream::connect(address).await.unwrap();
            let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
            let name = ServerName::try_from("localhost").unwrap();
            if let Ok(mut stream) = connector.connect(name, tcp).await {
                // Read until the server ends the connection (a TLS 1.3 refusal comes here).
                let mut buffer = [0u8; 64];
                let _ = tokio::io::AsyncReadExt::read(&mut stream, &mut buffer).await;
            }
        });
        let (stream, peer) = socket.accept().await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let outcome = listener
            .handshake(stream, peer, deadline)
            .await
            .map(|(_, certificate)| certificate);
        client.abort();
        outcome
    }

    #[tokio::test]
    async fn the_verified_client_certificate_is_handed_over() {
        let dir = tempfile::tempdir().unwrap();
        let (server_ca, client_ca) = (TestCa::new("server CA"), TestCa::new("client CA"));
        let client = client_ca.issue(&["client.example"], dir.path(), "client");
        let expected = CertificateDer::from_pem_file(&client.cert).unwrap();

        let optional = listener(dir.path(), &server_ca, &client_ca, ClientAuth::Optional);
        let got = handshake(optional, dir.path(), &server_ca, Some(&client)).await;
        assert_eq!(got, Some(Some(expected)), "the client's end-entity certificate");

        let optional = listener(dir.path(), &server_ca, &client_ca, ClientAuth::Optional);
        let got = handshake(optional, dir.path(), &server_ca, None).await;
        assert_eq!(got, Some(None), "served without a certificate");

        let required = listener(dir.path(), &server_ca, &client_ca, ClientAuth::Required);
        assert_eq!(handshake(required, dir.path(), &server_ca, None).await, None);

        let stranger = TestCa::new("stranger").issue(&["client.example"], dir.path(), "stranger");
        let optional = listener(dir.path(), &server_ca, &client_ca, ClientAuth::Optional);
        assert_eq!(
            handshake(optional, dir.path(), &server_ca, Some(&stranger)).await,
            None
        );
    }
}
