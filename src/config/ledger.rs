//! `[state]`, `[ledger]` and a provider's `encrypted_content_scope` (docs/ledger.md,
//! docs/operations.md#state-backends): where the provenance ledger and the team rate limits live,
//! and what the ledger records and enforces.

use std::path::PathBuf;
use std::time::Duration;

use super::{RedisAccess, RedisTarget};

/// `[state]`: the backend holding the ledger and the team rate limits.
#[derive(Debug, Clone, PartialEq, Eq)]
// One value per loaded configuration: the size of its largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum StateConfig {
    /// `backend = "memory"`: in this process only; forgotten on restart (tests).
    Memory,
    /// `backend = "embedded"` (the default): files in a directory of this host.
    Embedded {
        /// `path`, resolved: absolute, a relative path taken from the directory of
        /// `proxy.toml`; default `replaygate-state`.
        path: PathBuf,
        /// `max_disk_bytes`: the most disk the store takes before its oldest records go;
        /// default 1 GiB.
        max_disk_bytes: u64,
        /// `max_memory_bytes`: the memory the store keeps for its in-memory tables, block
        /// cache and recent records; default 16 MiB.
        max_memory_bytes: u64,
    },
    /// `backend = "redis"`: a Redis server, shared by every replica.
    Redis {
        /// `url`, `sentinels` (with `master_name`) or `cluster_nodes`: where the server is.
        target: RedisTarget,
        /// `key_prefix`: the start of every key replaygate writes; default `replaygate`.
        key_prefix: String,
        /// `timeout`: the longest one Redis command may take; default 500 ms.
        timeout: Duration,
        /// `username`, `password_env` and the `tls_*_file` keys: the login and TLS files.
        access: RedisAccess,
    },
}

impl Default for StateConfig {
    /// `embedded` in `replaygate-state`, relative to the current directory (a loaded
    /// configuration resolves it against the directory of `proxy.toml` instead).
    fn default() -> Self {
        StateConfig::Embedded {
            path: PathBuf::from(DEFAULT_STATE_PATH),
            max_disk_bytes: DEFAULT_MAX_DISK_BYTES,
            max_memory_bytes: DEFAULT_MAX_MEMORY_BYTES,
        }
    }
}

/// `[state] path` when left out.
pub(super) const DEFAULT_STATE_PATH: &str = "replaygate-state";
/// `[state] max_disk_bytes` when left out: 1 GiB, a small volume's worth (about 2 million
/// records of a typical answer; docs/operations.md#records-are-never-forgotten-silently).
pub(crate) const DEFAULT_MAX_DISK_BYTES: u64 = 1024 * 1024 * 1024;
/// `[state] max_memory_bytes` when left out: 16 MiB, which keeps the default configuration's
/// peak memory under load within 64 MiB (docs/benchmarks.md).
pub(crate) const DEFAULT_MAX_MEMORY_BYTES: u64 = 16 * 1024 * 1024;
/// `[state] key_prefix` when left out.
pub(super) const DEFAULT_KEY_PREFIX: &str = "replaygate";
/// `[state] timeout` when left out.
pub(super) const DEFAULT_REDIS_TIMEOUT: Duration = Duration::from_millis(500);

impl StateConfig {
    /// The backend's name, as `[state] backend` spells it (read by the tests).
    #[cfg(test)]
    pub(crate) fn backend(&self) -> &'static str {
        match self {
            StateConfig::Memory => "memory",
            StateConfig::Embedded { .. } => "embedded",
            StateConfig::Redis { .. } => "redis",
        }
    }

    /// For people: `state in memory`, `state embedded in DIR`, `state in redis at HOST:PORT`
    /// (or `via sentinels ...`, `cluster at ...`; then `over TLS`, and `as USER` with a username;
    /// never a password).
    pub(super) fn summary(&self) -> String {
        match self {
            StateConfig::Memory => "state in memory".to_owned(),
            StateConfig::Embedded { path, .. } => format!("state embedded in {}", path.display()),
            StateConfig::Redis { target, access, .. } => {
                let mut summary = format!("state in redis {}", target.summary());
                if target.tls() {
                    summary.push_str(" over TLS");
                }
                let url_user = match target {
                    RedisTarget::Url(url) => reqwest::Url::parse(url)
                        .ok()
                        .map(|url| url.username().to_owned())
                        .filter(|user| !user.is_empty()),
                    _ => None,
                };
                if let Some(user) = access.username.clone().or(url_user) {
                    summary.push_str(&format!(" as {user}"));
                }
                summary
            }
        }
    }
}

/// `[ledger]`: what the provenance ledger records and how requests use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LedgerConfig {
    /// `enabled`: record every allowed `/responses` answer and check requests against the
    /// records; default true.
    pub(crate) enabled: bool,
    /// `store_items`: also keep the items' contents (texts, arguments, outputs,
    /// `encrypted_content`), which carrying a session needs; default false (ids, types, call ids
    /// and digests only).
    pub(crate) store_items: bool,
    /// `carry_sessions`: answer a `previous_response_id` recorded for another provider by
    /// replaying the chain's recorded items instead of `foreign_previous_response`; needs
    /// `store_items`. Default false.
    pub(crate) carry_sessions: bool,
    /// `retention_hours`: how long a recorded response is kept, at least 1; default 720 (30 days).
    pub(crate) retention_hours: u32,
    /// `on_unavailable`: what a request that needs the store gets while it does not answer.
    pub(crate) on_unavailable: OnUnavailable,
    /// `max_chain`: the most responses one `previous_response_id` chain walk reads, at least 1;
    /// default 64.
    pub(crate) max_chain: usize,
    /// `unknown_owner`: whether an object route (`/responses/{id}`, `/conversations/{id}`, ...)
    /// naming an id the ledger holds no team for is forwarded, with teams configured.
    pub(crate) unknown_owner: UnknownOwner,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            store_items: false,
            carry_sessions: false,
            retention_hours: 720,
            on_unavailable: OnUnavailable::Refuse,
            max_chain: 64,
            unknown_owner: UnknownOwner::Deny,
        }
    }
}

impl LedgerConfig {
    /// `retention_hours` as a duration.
    pub(crate) fn retention(&self) -> Duration {
        Duration::from_secs(u64::from(self.retention_hours) * 3600)
    }

    /// For people: `ledger off`, `ledger on`, `ledger on, storing items` or `ledger on, carrying
    /// sessions`.
    pub(super) fn summary(&self) -> &'static str {
        match (self.enabled, self.store_items, self.carry_sessions) {
            (false, _, _) => "ledger off",
            (true, _, true) => "ledger on, carrying sessions",
            (true, true, false) => "ledger on, storing items",
            (true, false, false) => "ledger on",
        }
    }
}

/// `[ledger] on_unavailable` and `[state] on_unavailable`: refuse or go on when the state backend
/// cannot answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum OnUnavailable {
    /// Answer 503 `ledger_unavailable` (the default).
    #[default]
    Refuse,
    /// Judge the request without the ledger, as if nothing were recorded, and forward it.
    Allow,
}

/// `[ledger] unknown_owner`: what a team's request on an object route gets when the ledger
/// holds no team for the object's id (never recorded, expired, created before replaygate or by
/// an anonymous client).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum UnknownOwner {
    /// 404 `not_found`, as for another team's id (the default).
    #[default]
    Deny,
    /// Forward it (a rollout onto traffic that began before replaygate recorded owners).
    Allow,
}

/// `[providers.NAME] encrypted_content_scope`: what `encrypted_content` from this provider is
/// bound to, so which replays of it are `foreign_encrypted_content`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum EncryptedContentScope {
    /// Any model of the provider may read it (the default).
    #[default]
    Provider,
    /// Only the model that produced it (Bedrock binds reasoning to the account and the model).
    Model,
}
