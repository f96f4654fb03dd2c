//! The proxy configuration, `proxy.toml`: parsed, checked and turned into
//! plain values. Unknown keys and unusable values are errors that name the
//! file, line and column. Secrets are not read here: the proxy reads the
//! environment variables an `Auth` names itself.
//!
//! Relative paths in the file (`[teams.NAME] pinned_tools`, `[audit] path`, `[state] path`, `[state] tls_*_file`,
//! `[server] tls_*_file`) are taken from the
//! directory of the file and kept absolute; the files they name are read and checked here, so a
//! configuration that loads is one the proxy can serve (the listener's TLS files are read where
//! its TLS is built, see `crate::tls`).

mod auth;
mod budgets;
mod client_certs;
mod de;
mod error;
mod file;
mod item_profile;
mod key_entry;
mod ledger;
mod listener_tls;
mod pinned;
mod redis_access;
mod redis_target;
mod sections;
mod size;
mod teams;
mod telemetry;
mod validate;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use globset::Glob;

pub(crate) use crate::spend::Budget;
pub(crate) use crate::spend::{BudgetLimit, BudgetUnit, MAX_BUDGET_UNITS};
pub(crate) use auth::Auth;
pub(crate) use budgets::UsageMode;
pub(crate) use budgets::{PriceConfig, UsageConfig};
pub(crate) use client_certs::{CertNameKind, ClientCertGlob};
pub(crate) use error::ConfigError;
pub(crate) use item_profile::read_file as read_item_profile;
pub(crate) use ledger::{
    EncryptedContentScope, LedgerConfig, OnUnavailable, StateConfig, UnknownOwner, DEFAULT_MAX_DISK_BYTES,
    DEFAULT_MAX_MEMORY_BYTES,
};
pub use listener_tls::{ClientAuth, ListenerTls};
pub(crate) use redis_access::RedisAccess;
pub(crate) use redis_target::{NodeAddr, RedisTarget};
pub(crate) use sections::{AdminConfig, GateConfig, ServerConfig};
pub use sections::{LogConfig, LogFormat};
pub use teams::ClientKey;
pub(crate) use teams::{AuditConfig, PinnedTool, PinnedTools, StateGrant, TeamConfig, TeamMode};
pub(crate) use telemetry::TelemetryConfig;

use file::ConfigFile;

/// The repository's `proxy.toml`, built into the binary.
const EMBEDDED_DEFAULT: &str = include_str!("../../proxy.toml");

/// A checked configuration: every provider reference resolves, every URL and
/// glob is usable, every file it names has been read and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `default_provider`: used when no path prefix and no model route applies.
    pub(crate) default_provider: Option<String>,
    /// `[server]`.
    pub server: ServerConfig,
    /// `[admin]`.
    pub admin: AdminConfig,
    /// `[log]`.
    pub log: LogConfig,
    /// `[gate]`.
    pub gate: GateConfig,
    /// `[providers.NAME]`, by name; there is at least one.
    pub providers: BTreeMap<String, ProviderConfig>,
    /// `[[routes]]`, in file order: the first whose glob matches the model wins.
    pub(crate) routes: Vec<RouteConfig>,
    /// `[teams.NAME]`, by name. Empty: every client is anonymous and the global policy applies.
    /// Not empty: every request needs a client key that one of them lists.
    pub teams: BTreeMap<String, TeamConfig>,
    /// `[audit]`: where judged requests are recorded; `None`: nowhere.
    pub(crate) audit: Option<AuditConfig>,
    /// `[state]`: where the ledger and the team rate limits live.
    pub(crate) state: StateConfig,
    /// `[ledger]`: the provenance ledger.
    pub(crate) ledger: LedgerConfig,
    /// `[telemetry]`: the OpenTelemetry export of request spans (off by default).
    pub telemetry: TelemetryConfig,
    /// `[prices."GLOB"]`, in file order: the first whose glob matches an answer's model prices
    /// it (docs/budgets.md#configuration).
    pub(crate) prices: Vec<PriceConfig>,
    /// `[usage]`: how budgets reserve, and whether they refuse.
    pub(crate) usage: UsageConfig,
}

/// One upstream provider, `[providers.NAME]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderConfig {
    /// `base_url`: an http(s) URL without query or fragment, with any path
    /// kept and one trailing `/` removed, e.g. `https://api.openai.com/v1`.
    pub(crate) base_url: String,
    /// `auth`: how the proxy authenticates upstream.
    pub(crate) auth: Auth,
    /// `namespaces`, resolved: see [`ProviderConfig::namespaces`].
    namespaces: Vec<String>,
    /// `connect_timeout_ms`: time allowed to open a connection upstream.
    pub(crate) connect_timeout: Duration,
    /// `read_timeout_ms`: longest silence allowed between two reads from the
    /// upstream; not a deadline for the whole response.
    pub(crate) read_timeout: Duration,
    /// `encrypted_content_scope`: whether this provider's `encrypted_content` may be replayed to
    /// any of its models or only to the model that produced it.
    pub(crate) encrypted_content_scope: EncryptedContentScope,
    /// `stores_responses`: `false` for a provider that keeps nothing it answers, whatever a
    /// request's `store` says; the ledger records its every answer as not stored
    /// (docs/reasons.md#state_not_stored).
    pub(crate) stores_responses: bool,
    /// `item_profile`: what the provider accepts in input items (docs/item-profiles.md); `None`: no
    /// item shape checks.
    pub item_profile: Option<std::sync::Arc<crate::gate::ItemProfile>>,
    /// `item_profile = { file = "..." }`: the file the profile was read from (absolute),
    /// watched with the configuration; `None` for a built-in profile or none.
    pub(crate) item_profile_file: Option<std::path::PathBuf>,
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
pub(crate) struct RouteConfig {
    /// `model`: a case-sensitive glob on the request's `model`; `*` matches any
    /// run of characters (`/` and `.` included), `?` exactly one, `\` escapes.
    pub(crate) model: Glob,
    /// `provider`: the name of a defined provider.
    pub(crate) provider: String,
}

impl Config {
    /// Parses and checks configuration text that was not read from a file; relative paths in
    /// it are taken from the current directory. Without a `[state]` table its state is kept in
    /// memory: text with no file of its own has no directory where the embedded store belongs
    /// (and two such configurations, two tests say, never share one by accident).
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let mut config = Config::from_toml_in(text, Path::new("."))?;
        let names_state = toml::from_str::<toml::Table>(text).is_ok_and(|table| table.contains_key("state"));
        if !names_state {
            config.state = StateConfig::Memory;
        }
        Ok(config)
    }

    /// Parses and checks configuration text; relative paths in it are taken from `base_dir`
    /// (itself taken from the current directory when relative).
    pub(crate) fn from_toml_in(text: &str, base_dir: &Path) -> Result<Config, ConfigError> {
        let file: ConfigFile =
            toml::from_str(text).map_err(|error| ConfigError::Parse { path: None, error })?;
        file.validate(&absolute_dir(base_dir))
            .map_err(|invalid| ConfigError::invalid(text, invalid))
    }

    /// Reads, parses and checks a configuration file; errors name the file. Relative paths in
    /// it are taken from the file's directory.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_owned(),
            error,
        })?;
        let base_dir = path.parent().unwrap_or(Path::new("."));
        Config::from_toml_in(&text, base_dir).map_err(|error| error.in_file(path))
    }

    /// The repository's `proxy.toml`, compiled into the binary.
    pub fn embedded_default() -> Result<Config, ConfigError> {
        Config::from_toml(EMBEDDED_DEFAULT)
    }

    /// A one-line description for people, e.g. `2 providers, 3 routes, 2 teams (3 keys), audit
    /// to /srv/replaygate/audit.jsonl, state embedded in /srv/replaygate/replaygate-state, ledger
    /// on`.
    pub(crate) fn summary(&self) -> String {
        let mut summary = format!(
            "{}, {}",
            count(self.providers.len(), "provider"),
            count(self.routes.len(), "route")
        );
        if self.teams.is_empty() {
            summary.push_str(", no teams");
        } else {
            let keys = self.teams.values().map(|team| team.keys.len()).sum();
            summary.push_str(&format!(
                ", {} ({})",
                count(self.teams.len(), "team"),
                count(keys, "key")
            ));
        }
        match &self.audit {
            Some(audit) => summary.push_str(&format!(", audit to {}", audit.path.display())),
            None => summary.push_str(", no audit log"),
        }
        summary.push_str(&format!(", {}, {}", self.state.summary(), self.ledger.summary()));
        if let Some(admin) = self.admin.listen {
            summary.push_str(&format!(", admin on {admin}"));
        }
        summary
    }
}

/// `n thing` or `n things`.
fn count(n: usize, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// `dir` made absolute against the current directory (an empty path is the current directory);
/// left as it is if the current directory cannot be read.
fn absolute_dir(dir: &Path) -> PathBuf {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    std::path::absolute(dir).unwrap_or_else(|_| dir.to_owned())
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod tests_teams;

#[cfg(test)]
mod tests_ledger;

#[cfg(test)]
mod tests_examples;

#[cfg(test)]
mod tests_item_profile;

#[cfg(test)]
mod tests_redis_target;

#[cfg(test)]
mod tests_budgets;
