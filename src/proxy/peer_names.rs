//! The names of a verified client certificate that `client_certs` globs are matched against
//! (docs/teams.md#a-team-known-by-its-client-certificate): its URI and DNS subject alternative
//! names and its subject's common names, read from the DER the listener handed the request.

use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::peer_certificate::PeerCertificate;
use crate::config::CertNameKind;

/// A name longer than this (in bytes) is left out: no configured glob is meant for it, and
/// the matched name is written into every log line of the request.
const MAX_NAME_BYTES: usize = 1024;

/// A certificate's names, in the order they are tried: URI names, DNS names, then common
/// names, each kind in certificate order.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct PeerNames {
    names: Vec<(CertNameKind, String)>,
}

impl PeerNames {
    /// The names of `certificate`. A name holding a control character or longer than
    /// [`MAX_NAME_BYTES`] is left out; DNS names are put in lower case. A certificate that does
    /// not parse (the listener verified it, so it should) has no names: it identifies no team.
    pub(crate) fn of(certificate: &PeerCertificate) -> PeerNames {
        match X509Certificate::from_der(certificate.0.as_ref()) {
            Ok((_, parsed)) => PeerNames::read(&parsed),
            Err(error) => {
                tracing::debug!(%error, "the client certificate does not parse; it identifies no team");
                PeerNames::default()
            }
        }
    }

    fn read(certificate: &X509Certificate<'_>) -> PeerNames {
        let mut names = Vec::new();
        // More than one subject alternative name extension is malformed: then no SAN counts.
        if let Ok(Some(san)) = certificate.subject_alternative_name() {
            for wanted in [CertNameKind::Uri, CertNameKind::Dns] {
                for name in &san.value.general_names {
                    match (wanted, name) {
                        (CertNameKind::Uri, GeneralName::URI(uri)) => names.push((wanted, (*uri).to_owned())),
                        (CertNameKind::Dns, GeneralName::DNSName(dns)) => {
                            names.push((wanted, dns.to_ascii_lowercase()));
                        }
                        _ => {}
                    }
                }
            }
        }
        for cn in certificate.subject().iter_common_name() {
            if let Ok(cn) = cn.as_str() {
                names.push((CertNameKind::Cn, cn.to_owned()));
            }
        }
        names.retain(|(_, name)| {
            !name.is_empty() && name.len() <= MAX_NAME_BYTES && !name.chars().any(char::is_control)
        });
        PeerNames { names }
    }

    /// Every name with its kind, in the order they are tried.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (CertNameKind, &str)> {
        self.names.iter().map(|(kind, name)| (*kind, name.as_str()))
    }
}

/// Hands `request` the verified client certificate `der`, as the TLS listener does for every
/// request of a connection whose client presented one: for callers of
/// [`super::lifecycle::handle`] that verified the certificate themselves (the integration
/// tests, which send requests in-process).
#[doc(hidden)]
pub fn present_client_certificate<B>(request: &mut http::Request<B>, der: Vec<u8>) {
    let certificate = rustls::pki_types::CertificateDer::from(der);
    request
        .extensions_mut()
        .insert(PeerCertificate(std::sync::Arc::new(certificate)));
}

/// How a certificate's name is written in the access line, the audit line and the span: as a
/// `client_certs` entry would name it (`spiffe://...`, `dns:...`, `cn:...`).
pub(crate) fn shown(kind: CertNameKind, name: &str) -> String {
    format!("{}{name}", kind.prefix())
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use rustls::pki_types::CertificateDer;

    use super::*;

    /// A self-signed certificate with these URI and DNS names and common name.
    pub(crate) fn certificate(uris: &[&str], dns: &[&str], cn: Option<&str>) -> PeerCertificate {
        let der = crate::test_pki::self_signed_der(uris, dns, cn);
        PeerCertificate(Arc::new(CertificateDer::from(der)))
    }

    fn names(peer: &PeerCertificate) -> Vec<String> {
        PeerNames::of(peer)
            .iter()
            .map(|(kind, name)| shown(kind, name))
            .collect()
    }

    #[test]
    fn a_certificate_names_its_uris_then_dns_names_then_common_name() {
        let peer = certificate(
            &["spiffe://example.org/ns/payments/sa/api"],
            &["Payments-Bot.internal", "api.payments.internal"],
            Some("payments-ci"),
        );
        assert_eq!(
            names(&peer),
            [
                "spiffe://example.org/ns/payments/sa/api",
                "dns:payments-bot.internal",
                "dns:api.payments.internal",
                "cn:payments-ci"
            ]
        );
        assert_eq!(names(&certificate(&[], &[], None)), Vec::<String>::new());
    }

    #[test]
    fn a_name_with_a_control_character_or_garbage_names_nothing() {
        assert_eq!(
            names(&certificate(&[], &[], Some("ci\nteam=admin"))),
            Vec::<String>::new()
        );
        let garbage = PeerCertificate(Arc::new(CertificateDer::from(vec![0x30, 0x03, 1, 2, 3])));
        assert_eq!(PeerNames::of(&garbage), PeerNames::default());
    }
}
