//! The rustls configuration of the listener (docs/operations.md#tls): TLS 1.2 and 1.3 only,
//! ALPN `h2` then `http/1.1`, one certificate chain served whatever name the client asks for,
//! and, with `tls_client_ca_file`, client certificates verified against those CAs.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::version::{TLS12, TLS13};
use rustls::{Error, InconsistentKeys, ServerConfig};

use super::files::{self, TlsFileError, Why};
use crate::config::{ClientAuth, ListenerTls};

/// The protocols the proxy's listener offers by ALPN, the preferred first.
pub(crate) const ALPN: &[&[u8]] = &[b"h2", b"http/1.1"];

/// The protocol the admin listener offers by ALPN (it serves HTTP/1.1 only).
pub(crate) const ADMIN_ALPN: &[&[u8]] = &[b"http/1.1"];

/// The provider every TLS configuration of the listener uses: aws-lc-rs, as the rest of the
/// process.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Reads the files `tls` names and builds a listener's configuration from them, offering `alpn`.
pub(crate) fn build(tls: &ListenerTls, alpn: &[&[u8]]) -> Result<Arc<ServerConfig>, TlsFileError> {
    let provider = provider();
    let certified = certified_key(tls, &provider)?;
    if files::readable_by_others(&tls.key_file) {
        tracing::warn!("{}", files::key_warning(tls.table, &tls.key_file));
    }
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&TLS13, &TLS12])
        .expect("aws-lc-rs offers TLS 1.2 and 1.3");
    let builder = match &tls.client_ca {
        None => builder.with_no_client_auth(),
        Some((ca_file, auth)) => {
            let roots = files::roots(tls.table, "tls_client_ca_file", ca_file)?;
            let mut verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            if *auth == ClientAuth::Optional {
                verifier = verifier.allow_unauthenticated();
            }
            let verifier = verifier.build().map_err(|error| {
                TlsFileError::new(
                    tls.table,
                    "tls_client_ca_file",
                    ca_file,
                    Why::NoCa(error.to_string()),
                )
            })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(Arc::new(SingleCertAndKey::from(certified)));
    config.alpn_protocols = alpn.iter().map(|protocol| protocol.to_vec()).collect();
    Ok(Arc::new(config))
}

/// The certificate chain of `tls_cert_file` with the key of `tls_key_file`, which must be the
/// key of the chain's first certificate.
pub(crate) fn certified_key(
    tls: &ListenerTls,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsFileError> {
    let chain = files::certificates(tls.table, "tls_cert_file", &tls.cert_file)?;
    let key = files::private_key(tls.table, "tls_key_file", &tls.key_file)?;
    let key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|_| TlsFileError::new(tls.table, "tls_key_file", &tls.key_file, Why::KeyType))?;
    let certified = CertifiedKey::new(chain, key);
    match certified.keys_match() {
        Ok(()) | Err(Error::InconsistentKeys(InconsistentKeys::Unknown)) => Ok(certified),
        Err(Error::InconsistentKeys(InconsistentKeys::KeyMismatch)) => Err(TlsFileError::new(
            tls.table,
            "tls_key_file",
            &tls.key_file,
            Why::KeyMismatch,
        )),
        Err(error) => Err(TlsFileError::new(
            tls.table,
            "tls_cert_file",
            &tls.cert_file,
            Why::BadCertificate(error.to_string()),
        )),
    }
}
