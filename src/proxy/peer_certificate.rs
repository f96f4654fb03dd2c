//! The client certificate a TLS connection presented and the listener verified, handed to each
//! request on that connection (in its extensions) so the team phase can know a team by it.

use rustls::pki_types::CertificateDer;
use std::sync::Arc;

/// The verified end-entity certificate of the connection a request came on (DER). Absent from a
/// request's extensions when the listener is plain HTTP or the client sent no certificate.
#[derive(Debug, Clone)]
pub(crate) struct PeerCertificate(pub(crate) Arc<CertificateDer<'static>>);
