//! `[state]` keys that say how the `redis` backend reaches its server beyond the URL: TLS
//! (`tls_ca_file`, `tls_cert_file`, `tls_key_file`) and an ACL login (`username`,
//! `password_env`). The password itself is never read here: the proxy reads the variable
//! `password_env` names at start, so it is in no configuration value and no message.

use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use toml::Spanned;

use super::error::Invalid;
use super::redis_target::{check_variable, TargetLogin};

/// How the `redis` backend logs in and what its TLS connection trusts and shows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct RedisAccess {
    /// `username`: the Redis ACL user to log in as; `None` logs in as the default user (with
    /// a password) or not at all.
    pub(crate) username: Option<String>,
    /// `password_env`: the environment variable that holds the password, read at start.
    pub(crate) password_env: Option<String>,
    /// `tls_ca_file`, resolved: the CA certificates (PEM) the server's certificate must chain
    /// to, in place of the system's trust store.
    pub(crate) tls_ca_file: Option<PathBuf>,
    /// `tls_cert_file` and `tls_key_file`, resolved: the client certificate chain and its
    /// private key (PEM) shown to a server that asks for one (mutual TLS).
    pub(crate) tls_client: Option<ClientCertFiles>,
}

/// A client certificate for mutual TLS: `tls_cert_file` and `tls_key_file`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientCertFiles {
    /// The certificate chain, leaf first (PEM).
    pub(crate) cert_file: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub(crate) key_file: PathBuf,
}

/// The access keys of `[state]` as written, each with its span.
pub(super) struct AccessEntry<'a> {
    pub(super) username: Option<&'a Spanned<String>>,
    pub(super) password_env: Option<&'a Spanned<String>>,
    pub(super) tls_ca_file: Option<&'a Spanned<String>>,
    pub(super) tls_cert_file: Option<&'a Spanned<String>>,
    pub(super) tls_key_file: Option<&'a Spanned<String>>,
}

impl AccessEntry<'_> {
    /// Checks the keys against each other and what the (already checked) target says, and
    /// reads the TLS files, relative paths taken from `base_dir`.
    pub(super) fn validate(self, target: &TargetLogin, base_dir: &Path) -> Result<RedisAccess, Invalid> {
        let username = match self.username {
            Some(written) => {
                if target.url_user {
                    return Err(Invalid::new(
                        written.span(),
                        "[state] username is set and the url names a user too; keep username only",
                    ));
                }
                let name = written.get_ref();
                if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    return Err(Invalid::new(
                        written.span(),
                        format!("[state] username {name:?} must be non-empty, without spaces or control characters"),
                    ));
                }
                if self.password_env.is_none() {
                    return Err(Invalid::new(
                        written.span(),
                        "[state] username needs password_env: a Redis ACL user logs in with a password, \
                         read from the environment variable password_env names",
                    ));
                }
                Some(name.clone())
            }
            None => None,
        };
        let password_env = self
            .password_env
            .map(|written| check_variable(written, "password_env"))
            .transpose()?;
        for key in [self.tls_ca_file, self.tls_cert_file, self.tls_key_file]
            .into_iter()
            .flatten()
        {
            if !target.tls {
                return Err(Invalid::new(
                    key.span(),
                    "[state] tls_ca_file, tls_cert_file and tls_key_file need TLS: write the url with \
                     rediss:// (TLS) instead of redis://, or set tls = true with sentinels or cluster_nodes",
                ));
            }
        }
        let tls_ca_file = self
            .tls_ca_file
            .map(|written| read_pem(written, base_dir, "tls_ca_file", Pem::Certificates))
            .transpose()?;
        let tls_client = match (self.tls_cert_file, self.tls_key_file) {
            (Some(cert), Some(key)) => Some(ClientCertFiles {
                cert_file: read_pem(cert, base_dir, "tls_cert_file", Pem::Certificates)?,
                key_file: read_pem(key, base_dir, "tls_key_file", Pem::PrivateKey)?,
            }),
            (Some(one), None) | (None, Some(one)) => {
                return Err(Invalid::new(
                    one.span(),
                    "[state] tls_cert_file and tls_key_file go together (the client certificate and \
                     its key, for mutual TLS): set both or neither",
                ))
            }
            (None, None) => None,
        };
        Ok(RedisAccess {
            username,
            password_env,
            tls_ca_file,
            tls_client,
        })
    }
}

/// What a TLS file must hold.
#[derive(Clone, Copy)]
enum Pem {
    /// At least one `CERTIFICATE` block.
    Certificates,
    /// A private key.
    PrivateKey,
}

/// Resolves a TLS file's path and checks that it reads as `what`. Messages name the file,
/// never its contents.
fn read_pem(written: &Spanned<String>, base_dir: &Path, key: &str, what: Pem) -> Result<PathBuf, Invalid> {
    if written.get_ref().is_empty() {
        return Err(Invalid::new(
            written.span(),
            format!("[state] {key} must name a PEM file, not be empty"),
        ));
    }
    let joined = base_dir.join(written.get_ref());
    let path = std::path::absolute(&joined).unwrap_or(joined);
    let fail = |why: String| Invalid::new(written.span(), format!("[state] {key} {}: {why}", path.display()));
    let bytes = std::fs::read(&path).map_err(|e| fail(format!("cannot be read: {e}")))?;
    match what {
        Pem::Certificates => {
            let certificates = CertificateDer::pem_slice_iter(&bytes)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| fail(format!("is not PEM: {e}")))?;
            if certificates.is_empty() {
                return Err(fail(
                    "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_owned(),
                ));
            }
        }
        Pem::PrivateKey => {
            // The parser's own message is left out: it may quote a line of the key.
            PrivateKeyDer::from_pem_slice(&bytes)
                .map_err(|_| fail("holds no usable PEM private key (PKCS#8, PKCS#1 or SEC1)".to_owned()))?;
        }
    }
    Ok(path)
}
