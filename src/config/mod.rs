//! The proxy configuration, `proxy.toml`: parsed, checked and turned into
//! plain values. Unknown keys and unusable values are errors that name the
//! file, line and column. Secrets are not read here: the proxy reads the
//! environment variables named by [`Auth::BearerEnv`] itself.

mod auth;
mod de;
mod error;
mod file;
mod sections;
mod validate;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use globset::Glob;

pub use auth::Auth;
pub use error::ConfigError;
pub use sections::{GateConfig, LogConfig, LogFormat, ServerConfig};

use file::ConfigFile;

/// The repository's `proxy.toml`, built into the binary.
const EMBEDDED_DEFAULT: &str = include_str!("../../proxy.toml");

/// A checked configuration: every provider reference resolves, every URL and
/// glob is usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `default_provider`: used when no path prefix and no model route applies.
    pub default_provider: Option<String>,
    /// `[server]`.
    pub server: ServerConfig,
    /// `[log]`.
    pub log: LogConfig,
    /// `[gate]`.
    pub gate: GateConfig,
    /// `[providers.NAME]`, by name; there is at least one.
    pub providers: BTreeMap<String, ProviderConfig>,
    /// `[[routes]]`, in file order: the first whose glob matches the model wins.
    pub routes: Vec<RouteConfig>,
}

/// One upstream provider, `[providers.NAME]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderConfig {
    /// `base_url`: an http(s) URL without query or fragment, with any path
    /// kept and one trailing `/` removed, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// `auth`: how the proxy authenticates upstream.
    pub auth: Auth,
    /// `namespaces`, resolved: see [`ProviderConfig::namespaces`].
    namespaces: Vec<String>,
    /// `connect_timeout_ms`: time allowed to open a connection upstream.
    pub connect_timeout: Duration,
    /// `read_timeout_ms`: longest silence allowed between two reads from the
    /// upstream; not a deadline for the whole response.
    pub read_timeout: Duration,
}

impl ProviderConfig {
    /// The item namespaces (extension slugs) this provider accepts: the
    /// configured `namespaces`, or the provider's own name when the key is
    /// absent.
    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
    }
}

/// One `[[routes]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteConfig {
    /// `model`: a case-sensitive glob on the request's `model`; `*` matches any
    /// run of characters (`/` and `.` included), `?` exactly one, `\` escapes.
    pub model: Glob,
    /// `provider`: the name of a defined provider.
    pub provider: String,
}

impl Config {
    /// Parses and checks configuration text.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let file: ConfigFile =
            toml::from_str(text).map_err(|error| ConfigError::Parse { path: None, error })?;
        file.validate()
            .map_err(|invalid| ConfigError::invalid(text, invalid))
    }

    /// Reads, parses and checks a configuration file; errors name the file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_owned(),
            error,
        })?;
        Config::from_toml(&text).map_err(|error| error.in_file(path))
    }

    /// The repository's `proxy.toml`, compiled into the binary.
    pub fn embedded_default() -> Result<Config, ConfigError> {
        Config::from_toml(EMBEDDED_DEFAULT)
    }
}

#[cfg(test)]
mod tests;
