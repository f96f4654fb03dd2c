//! Why the proxy could not be built from a configuration (at start, or on a reload).

use super::teams::TeamError;

/// Why the proxy could not be built from its configuration.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A provider's upstream client could not be built (its TLS settings: the platform's
    /// trust store could not be read).
    #[error("provider `{provider}`: the upstream client could not be built: {source}")]
    Client {
        /// The provider.
        provider: String,
        /// What rustls said.
        source: rustls::Error,
    },
    /// A provider's `base_url` is not a URL (the configuration's checks make this unreachable).
    #[error("provider `{provider}`: base_url is not a URL: {message}")]
    BaseUrl {
        /// The provider.
        provider: String,
        /// What the URL parser said.
        message: String,
    },
    /// The route globs could not be compiled together.
    #[error("the [[routes]] globs could not be compiled: {0}")]
    Routes(#[from] globset::Error),
    /// A team's globs could not be compiled.
    #[error(transparent)]
    Team(#[from] TeamError),
    /// The audit log could not be opened.
    #[error("the audit log {path} could not be opened: {source}")]
    Audit {
        /// The configured path.
        path: String,
        /// What opening it said.
        source: std::io::Error,
    },
    /// The state backend could not be set up (a Redis URL that does not parse, an embedded
    /// store whose directory cannot be made).
    #[error("[state]: {0}")]
    State(crate::state::StoreError),
    /// A TLS file of the listener cannot be used (docs/operations.md#tls).
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsFileError),
}
