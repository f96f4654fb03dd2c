//! `[server] tls_cert_file`, `tls_key_file`, `tls_client_ca_file` and `tls_client_auth`: the
//! listener's own TLS (docs/operations.md#tls). The paths are resolved here; the files are read
//! and checked where the listener's TLS is built (`crate::tls`), at start, on reload and by
//! `replaygate config check`.

use std::path::{Path, PathBuf};

use toml::Spanned;

use super::error::Invalid;

/// The listener's TLS: its certificate chain and key, and whether clients are asked for a
/// certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerTls {
    /// The table it was written in, as messages name it: `[server]` or `[admin]`.
    pub table: &'static str,
    /// `tls_cert_file`, resolved: the certificate chain (PEM), the end-entity certificate first.
    pub cert_file: PathBuf,
    /// `tls_key_file`, resolved: the chain's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// `tls_client_ca_file`, resolved, with `tls_client_auth`: the CAs client certificates are
    /// verified against; `None`: clients are not asked for a certificate.
    pub client_ca: Option<(PathBuf, ClientAuth)>,
}

impl ListenerTls {
    /// The files it names: the certificate, the key, and the client CA file if any.
    pub fn files(&self) -> impl Iterator<Item = &Path> {
        [Some(self.cert_file.as_path()), Some(self.key_file.as_path())]
            .into_iter()
            .chain(std::iter::once(
                self.client_ca.as_ref().map(|(ca, _)| ca.as_path()),
            ))
            .flatten()
    }
}

/// `tls_client_auth`: whether a client without a certificate is served.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    /// A client may present a certificate (verified if it does) or none.
    #[default]
    Optional,
    /// A client without a verified certificate fails the handshake.
    Required,
}

/// The TLS keys of `[server]` or `[admin]` as written (the table's own fields; `[admin]` has
/// no client certificate keys).
pub(super) struct TlsKeys<'a> {
    /// The table, as messages name it: `[server]` or `[admin]`.
    pub(super) table: &'static str,
    pub(super) tls_cert_file: &'a Option<Spanned<String>>,
    pub(super) tls_key_file: &'a Option<Spanned<String>>,
    pub(super) tls_client_ca_file: &'a Option<Spanned<String>>,
    pub(super) tls_client_auth: &'a Option<Spanned<ClientAuth>>,
}

impl TlsKeys<'_> {
    /// The listener's TLS, `None` without `tls_cert_file`; relative paths taken from `base_dir`.
    pub(super) fn validate(&self, base_dir: &Path) -> Result<Option<ListenerTls>, Invalid> {
        let (cert, key) = match (self.tls_cert_file, self.tls_key_file) {
            (Some(cert), Some(key)) => (cert, key),
            (None, None) => {
                if let Some(ca) = self.tls_client_ca_file {
                    return Err(Invalid::new(
                        ca.span(),
                        format!(
                            "{} tls_client_ca_file needs tls_cert_file and tls_key_file: clients \
                             present certificates only over TLS",
                            self.table
                        ),
                    ));
                }
                if let Some(auth) = self.tls_client_auth {
                    return Err(Invalid::new(
                        auth.span(),
                        format!("{} tls_client_auth needs tls_client_ca_file", self.table),
                    ));
                }
                return Ok(None);
            }
            (Some(one), None) | (None, Some(one)) => {
                return Err(Invalid::new(
                    one.span(),
                    format!(
                        "{} tls_cert_file and tls_key_file go together: set both or neither",
                        self.table
                    ),
                ))
            }
        };
        let client_ca = match (self.tls_client_ca_file, self.tls_client_auth) {
            (Some(ca), auth) => Some((
                resolve(ca, base_dir, self.table, "tls_client_ca_file")?,
                auth.as_ref()
                    .map_or_else(ClientAuth::default, |auth| *auth.get_ref()),
            )),
            (None, Some(auth)) => {
                return Err(Invalid::new(
                    auth.span(),
                    format!("{} tls_client_auth needs tls_client_ca_file", self.table),
                ))
            }
            (None, None) => None,
        };
        Ok(Some(ListenerTls {
            table: self.table,
            cert_file: resolve(cert, base_dir, self.table, "tls_cert_file")?,
            key_file: resolve(key, base_dir, self.table, "tls_key_file")?,
            client_ca,
        }))
    }
}

/// `written`, absolute (a relative path taken from `base_dir`).
fn resolve(written: &Spanned<String>, base_dir: &Path, table: &str, key: &str) -> Result<PathBuf, Invalid> {
    if written.get_ref().is_empty() {
        return Err(Invalid::new(
            written.span(),
            format!("{table} {key} must name a PEM file, not be empty"),
        ));
    }
    let joined = base_dir.join(written.get_ref());
    Ok(std::path::absolute(&joined).unwrap_or(joined))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn load(server: &str) -> Result<Config, String> {
        let text =
            format!("[server]\n{server}\n[providers.openai]\nbase_url = \"https://api.openai.com/v1\"\n");
        Config::from_toml(&text).map_err(|error| error.to_string())
    }

    #[test]
    fn the_pair_makes_tls_and_relative_paths_are_resolved() {
        let config = load("tls_cert_file = \"tls/cert.pem\"\ntls_key_file = \"/etc/tls/key.pem\"").unwrap();
        let tls = config.server.tls.unwrap();
        assert!(tls.cert_file.is_absolute() && tls.cert_file.ends_with("tls/cert.pem"));
        assert_eq!(tls.key_file, Path::new("/etc/tls/key.pem"));
        assert_eq!(tls.client_ca, None);
        assert_eq!(load("").unwrap().server.tls, None, "plain HTTP by default");
    }

    #[test]
    fn client_auth_is_optional_unless_required() {
        let pair = "tls_cert_file = \"c.pem\"\ntls_key_file = \"k.pem\"\ntls_client_ca_file = \"ca.pem\"";
        let optional = load(pair).unwrap().server.tls.unwrap();
        assert_eq!(optional.client_ca.unwrap().1, ClientAuth::Optional);
        let required = load(&format!("{pair}\ntls_client_auth = \"required\"")).unwrap();
        assert_eq!(
            required.server.tls.unwrap().client_ca.unwrap().1,
            ClientAuth::Required
        );
    }

    #[test]
    fn half_a_pair_or_client_keys_without_tls_are_refused() {
        for (server, says) in [
            ("tls_cert_file = \"c.pem\"", "set both or neither"),
            ("tls_key_file = \"k.pem\"", "set both or neither"),
            ("tls_client_ca_file = \"ca.pem\"", "needs tls_cert_file"),
            ("tls_client_auth = \"required\"", "needs tls_client_ca_file"),
            (
                "tls_cert_file = \"c.pem\"\ntls_key_file = \"k.pem\"\ntls_client_auth = \"optional\"",
                "needs tls_client_ca_file",
            ),
            ("tls_cert_file = \"\"\ntls_key_file = \"k.pem\"", "not be empty"),
            (
                "tls_cert_file = \"c.pem\"\ntls_key_file = \"k.pem\"\ntls_client_ca_file = \"ca.pem\"\ntls_client_auth = \"maybe\"",
                "unknown variant",
            ),
        ] {
            let error = load(server).unwrap_err();
            assert!(error.contains(says), "{server}: {error}");
        }
    }

    #[test]
    fn the_admin_listener_has_its_own_pair() {
        let admin = |keys: &str| {
            let text = format!(
                "[admin]\nlisten = \"127.0.0.1:9090\"\n{keys}\n[providers.openai]\nbase_url = \"https://api.openai.com/v1\"\n"
            );
            Config::from_toml(&text).map_err(|error| error.to_string())
        };
        let config = admin("tls_cert_file = \"/a/cert.pem\"\ntls_key_file = \"/a/key.pem\"").unwrap();
        let tls = config.admin.tls.unwrap();
        assert_eq!(
            (tls.table, tls.cert_file.as_path()),
            ("[admin]", Path::new("/a/cert.pem"))
        );
        assert_eq!(config.server.tls, None);
        let error = admin("tls_key_file = \"/a/key.pem\"").unwrap_err();
        assert!(
            error.contains("[admin] tls_cert_file and tls_key_file go together"),
            "{error}"
        );
        let error = admin("tls_client_ca_file = \"/a/ca.pem\"").unwrap_err();
        assert!(error.contains("unknown field"), "{error}");
    }
}
