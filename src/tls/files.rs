//! Reading the listener's PEM files. Errors name the configuration key and the file; a key
//! file's contents never appear in them (the PEM parser's own messages may quote a line, so
//! they are left out).

use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;

/// A TLS file of `[server]` that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{table} {key} {}: {why}", path.display())]
pub struct TlsFileError {
    /// The table of the key: `[server]` or `[admin]`.
    pub table: &'static str,
    /// The configuration key that names the file.
    pub key: &'static str,
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub why: Why,
}

/// What is wrong with a TLS file.
#[derive(Debug, thiserror::Error)]
pub enum Why {
    /// It could not be read.
    #[error("cannot be read: {0}")]
    Unreadable(std::io::Error),
    /// It holds no PEM certificate.
    #[error("holds no PEM certificate (-----BEGIN CERTIFICATE-----)")]
    NoCertificate,
    /// Its PEM is broken.
    #[error("is not PEM: {0}")]
    NotPem(String),
    /// It holds no private key the TLS library reads.
    #[error("holds no usable PEM private key (PKCS#8, PKCS#1 or SEC1)")]
    NoKey,
    /// The key is of a type the TLS library cannot sign with.
    #[error(
        "holds a private key of a type that cannot be used (RSA, ECDSA P-256/P-384/P-521 or Ed25519 can)"
    )]
    KeyType,
    /// The key is not the one of the certificate's public key.
    #[error("does not match the certificate of tls_cert_file (their public keys differ)")]
    KeyMismatch,
    /// The first certificate cannot be parsed.
    #[error("holds a certificate that cannot be parsed: {0}")]
    BadCertificate(String),
    /// The certificate has expired.
    #[error("holds a certificate that expired at {not_after}")]
    Expired {
        /// When it expired (RFC 3339, UTC).
        not_after: String,
    },
    /// The certificate is not valid yet.
    #[error("holds a certificate not valid before {not_before}")]
    NotYetValid {
        /// When it becomes valid (RFC 3339, UTC).
        not_before: String,
    },
    /// The certificates cannot be used as trust anchors.
    #[error("holds no certificate usable as a CA: {0}")]
    NoCa(String),
}

impl TlsFileError {
    pub(crate) fn new(table: &'static str, key: &'static str, path: &Path, why: Why) -> TlsFileError {
        TlsFileError {
            table,
            key,
            path: path.to_owned(),
            why,
        }
    }
}

fn read(table: &'static str, key: &'static str, path: &Path) -> Result<Vec<u8>, TlsFileError> {
    std::fs::read(path).map_err(|error| TlsFileError::new(table, key, path, Why::Unreadable(error)))
}

/// The certificates of `path` in their order (PEM `CERTIFICATE` blocks), at least one.
pub(crate) fn certificates(
    table: &'static str,
    key: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsFileError> {
    let bytes = read(table, key, path)?;
    let certificates = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| TlsFileError::new(table, key, path, Why::NotPem(error.to_string())))?;
    if certificates.is_empty() {
        return Err(TlsFileError::new(table, key, path, Why::NoCertificate));
    }
    Ok(certificates)
}

/// The private key of `path` (the first PEM key block).
pub(crate) fn private_key(
    table: &'static str,
    key: &'static str,
    path: &Path,
) -> Result<PrivateKeyDer<'static>, TlsFileError> {
    let bytes = read(table, key, path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|_| TlsFileError::new(table, key, path, Why::NoKey))
}

/// The CA certificates of `path` as trust anchors; at least one must be usable.
pub(crate) fn roots(
    table: &'static str,
    key: &'static str,
    path: &Path,
) -> Result<RootCertStore, TlsFileError> {
    let mut roots = RootCertStore::empty();
    for certificate in certificates(table, key, path)? {
        roots
            .add(certificate)
            .map_err(|error| TlsFileError::new(table, key, path, Why::NoCa(error.to_string())))?;
    }
    Ok(roots)
}

/// Whether others than the file's owner and group may read `path` (a key file should not be).
#[cfg(unix)]
pub(crate) fn readable_by_others(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|metadata| metadata.permissions().mode() & 0o004 != 0)
}

/// Whether others than the file's owner and group may read `path` (never known here).
#[cfg(not(unix))]
pub(crate) fn readable_by_others(_path: &Path) -> bool {
    false
}

/// The warning about a key file any user may read.
pub(crate) fn key_warning(table: &str, key_file: &Path) -> String {
    format!(
        "warning: {table} tls_key_file {} is readable by every user; make it readable by the proxy's user only (chmod 600)",
        key_file.display()
    )
}
