//! The listeners' own TLS (docs/operations.md#tls): `[server] tls_cert_file` and
//! `tls_key_file` make the proxy's listener serve HTTPS, `tls_client_ca_file` asks clients for
//! a certificate; `[admin]` may have a pair of its own.
//!
//! - `files`: reading the PEM files, with errors that name the file (never a key's bytes).
//! - `server_config`: the rustls configuration: TLS 1.2 and 1.3, ALPN `h2` and `http/1.1`,
//!   the client certificate verifier.
//! - `acceptor`: the handshake of each accepted connection, under the configuration in force
//!   (a reload swaps it), bounded in time and in number.
//! - `failures`: failed handshakes, logged once per reason and peer.
//! - `read_ahead`: the socket under a connection, read ahead of rustls's 4 KiB reads.
//! - `report`: what `replaygate config check` prints of the files.

pub(crate) mod acceptor;
pub(crate) mod failures;
pub(crate) mod files;
pub(crate) mod read_ahead;
pub(crate) mod report;
pub(crate) mod server_config;

pub(crate) use acceptor::TlsListener;
pub use files::{TlsFileError, Why};
pub(crate) use read_ahead::ReadAhead;

/// The most handshakes the admin listener runs at once: as many as it holds connections
/// (`admin::MAX_CONNECTIONS`, which a test of the admin listener keeps equal).
pub(crate) const ADMIN_HANDSHAKES: usize = 64;
