//! Failed handshakes, logged once per reason and peer address (docs/operations.md#tls): a
//! client that retries with an expired certificate writes one line, not one per attempt. The
//! pairs already logged are kept in a bounded cache; when it is full the oldest are forgotten
//! (and logged again if they come back).

use std::io;
use std::net::IpAddr;

use rustls::{CertificateError, Error};

/// How many (reason, peer) pairs are remembered.
const REMEMBERED: usize = 4096;

/// Why a handshake failed, as the log names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Reason {
    /// The client's certificate has expired.
    Expired,
    /// The client's certificate is not valid yet.
    NotYetValid,
    /// The client's certificate does not chain to a CA of `tls_client_ca_file`.
    Untrusted,
    /// The client's certificate is unusable otherwise (revoked, bad signature, wrong usage).
    BadCertificate,
    /// `tls_client_auth = "required"` and the client sent no certificate.
    NoCertificate,
    /// The client offers no protocol version or cipher suite in common (TLS 1.0, say).
    Incompatible,
    /// What the client sent is not TLS (plain HTTP, say).
    NotTls,
    /// The client ended the handshake with an alert (it did not trust our certificate, say).
    ClientAlert,
    /// Anything else the TLS library refused.
    Protocol,
}

impl Reason {
    /// The reason of a failed handshake, `None` for I/O errors (the client went away).
    pub(crate) fn of(error: &io::Error) -> Option<Reason> {
        let error = error.get_ref()?.downcast_ref::<Error>()?;
        Some(match error {
            Error::InvalidCertificate(certificate) => match certificate {
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => Reason::Expired,
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                    Reason::NotYetValid
                }
                CertificateError::UnknownIssuer => Reason::Untrusted,
                _ => Reason::BadCertificate,
            },
            Error::NoCertificatesPresented => Reason::NoCertificate,
            Error::PeerIncompatible(_) => Reason::Incompatible,
            Error::InvalidMessage(_) => Reason::NotTls,
            Error::AlertReceived(_) => Reason::ClientAlert,
            _ => Reason::Protocol,
        })
    }

    /// The words the log line says it with.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reason::Expired => "client certificate expired",
            Reason::NotYetValid => "client certificate not yet valid",
            Reason::Untrusted => "client certificate not issued by a CA of tls_client_ca_file",
            Reason::BadCertificate => "client certificate refused",
            Reason::NoCertificate => "no client certificate (tls_client_auth = \"required\")",
            Reason::Incompatible => "no TLS version or cipher suite in common (TLS 1.2 and 1.3 only)",
            Reason::NotTls => "not TLS (plain HTTP to the TLS port?)",
            Reason::ClientAlert => "the client ended the handshake with an alert",
            Reason::Protocol => "TLS protocol error",
        }
    }

    /// Whether the client's certificate is to blame.
    fn is_certificate(self) -> bool {
        matches!(
            self,
            Reason::Expired
                | Reason::NotYetValid
                | Reason::Untrusted
                | Reason::BadCertificate
                | Reason::NoCertificate
        )
    }
}

/// The (reason, peer) pairs already logged.
pub(crate) struct FailureLog {
    logged: quick_cache::sync::Cache<(Reason, IpAddr), ()>,
}

impl std::fmt::Debug for FailureLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailureLog")
            .field("remembered", &self.logged.len())
            .finish()
    }
}

impl Default for FailureLog {
    fn default() -> Self {
        FailureLog {
            logged: quick_cache::sync::Cache::new(REMEMBERED),
        }
    }
}

impl FailureLog {
    /// Logs the failed handshake of `peer` unless its reason was logged for that address
    /// before: certificate failures at warn, the others at info. I/O errors (the client went
    /// away) are logged at debug, every time.
    pub(crate) fn failed(&self, peer: IpAddr, error: &io::Error) {
        let Some(reason) = Reason::of(error) else {
            tracing::debug!(%peer, %error, "TLS handshake ended");
            return;
        };
        if !self.first(reason, peer) {
            return;
        }
        if reason.is_certificate() {
            tracing::warn!(%peer, reason = reason.as_str(), %error, "TLS handshake failed (logged once per reason and peer)");
        } else {
            tracing::info!(%peer, reason = reason.as_str(), %error, "TLS handshake failed (logged once per reason and peer)");
        }
    }

    /// Whether `(reason, peer)` is new, remembering it.
    fn first(&self, reason: Reason, peer: IpAddr) -> bool {
        if self.logged.peek(&(reason, peer)).is_some() {
            return false;
        }
        self.logged.insert((reason, peer), ());
        true
    }

    /// How many pairs are remembered.
    #[cfg(test)]
    fn remembered(&self) -> usize {
        self.logged.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls_error(error: Error) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, error)
    }

    #[test]
    fn reasons_are_told_apart() {
        let expired = tls_error(Error::InvalidCertificate(CertificateError::Expired));
        assert_eq!(Reason::of(&expired), Some(Reason::Expired));
        let untrusted = tls_error(Error::InvalidCertificate(CertificateError::UnknownIssuer));
        assert_eq!(Reason::of(&untrusted), Some(Reason::Untrusted));
        assert_eq!(
            Reason::of(&tls_error(Error::NoCertificatesPresented)),
            Some(Reason::NoCertificate)
        );
        assert_eq!(Reason::of(&io::Error::from(io::ErrorKind::UnexpectedEof)), None);
    }

    #[test]
    fn a_pair_is_logged_once_and_memory_stays_bounded() {
        let log = FailureLog::default();
        let peer: IpAddr = "192.0.2.1".parse().unwrap();
        assert!(log.first(Reason::Expired, peer));
        assert!(!log.first(Reason::Expired, peer));
        assert!(log.first(Reason::Untrusted, peer), "another reason is logged");
        for n in 0..20_000u32 {
            log.first(Reason::NotTls, IpAddr::from(n.to_be_bytes()));
        }
        assert!(
            log.remembered() <= REMEMBERED + REMEMBERED / 4,
            "{}",
            log.remembered()
        );
    }
}
