//! The shape of `proxy.toml` as written, with the spans of the values that
//! are checked after parsing.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use toml::Spanned;

use super::budgets::{BudgetEntry, PriceEntry, UsageConfig};
use super::de::{millis, positive_count, positive_hours, positive_millis};
use super::error::Invalid;
use super::key_entry::KeyEntry;
use super::listener_tls::{ClientAuth, TlsKeys};
use super::{
    Auth, EncryptedContentScope, GateConfig, LedgerConfig, LogConfig, OnUnavailable, ServerConfig, TeamMode,
    TelemetryConfig, UnknownOwner,
};
use crate::gate::{Action, Reason};

/// The whole file.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ConfigFile {
    pub(super) default_provider: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) server: ServerTable,
    #[serde(default)]
    pub(super) admin: AdminEntry,
    #[serde(default)]
    pub(super) log: LogConfig,
    #[serde(default)]
    pub(super) gate: GateConfig,
    pub(super) providers: Spanned<BTreeMap<Spanned<String>, ProviderEntry>>,
    #[serde(default)]
    pub(super) routes: Vec<RouteEntry>,
    #[serde(default)]
    pub(super) teams: BTreeMap<Spanned<String>, TeamEntry>,
    pub(super) audit: Option<AuditEntry>,
    #[serde(default)]
    pub(super) state: StateEntry,
    #[serde(default)]
    pub(super) ledger: LedgerEntry,
    #[serde(default)]
    pub(super) telemetry: TelemetryConfig,
    #[serde(default)]
    pub(super) prices: BTreeMap<Spanned<String>, PriceEntry>,
    #[serde(default)]
    pub(super) usage: UsageConfig,
}

/// The `[server]` table. It also accepts `default_provider`, because a
/// `default_provider` line written below `[server]` belongs to that table.
#[derive(serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct ServerTable {
    pub(super) default_provider: Option<Spanned<String>>,
    listen: SocketAddr,
    pub(super) max_body_bytes: Spanned<usize>,
    pub(super) max_buffered_bytes: Spanned<usize>,
    #[serde(rename = "header_read_timeout_ms", deserialize_with = "positive_millis")]
    header_read_timeout: Duration,
    #[serde(rename = "body_read_timeout_ms", deserialize_with = "positive_millis")]
    body_read_timeout: Duration,
    #[serde(deserialize_with = "positive_count")]
    max_concurrent_requests: usize,
    #[serde(rename = "shutdown_grace_ms", deserialize_with = "millis")]
    shutdown_grace: Duration,
    workers: usize,
    watch_config: bool,
    #[serde(rename = "websocket_idle_timeout_ms", deserialize_with = "positive_millis")]
    websocket_idle_timeout: Duration,
    #[serde(rename = "websocket_max_duration_ms", deserialize_with = "positive_millis")]
    websocket_max_duration: Duration,
    websocket_client_events: Vec<String>,
    tls_cert_file: Option<Spanned<String>>,
    tls_key_file: Option<Spanned<String>>,
    tls_client_ca_file: Option<Spanned<String>>,
    tls_client_auth: Option<Spanned<ClientAuth>>,
}

impl Default for ServerTable {
    fn default() -> Self {
        let defaults = ServerConfig::default();
        Self {
            default_provider: None,
            listen: defaults.listen,
            max_body_bytes: Spanned::new(0..0, defaults.max_body_bytes),
            max_buffered_bytes: Spanned::new(0..0, defaults.max_buffered_bytes),
            header_read_timeout: defaults.header_read_timeout,
            body_read_timeout: defaults.body_read_timeout,
            max_concurrent_requests: defaults.max_concurrent_requests,
            shutdown_grace: defaults.shutdown_grace,
            workers: defaults.workers,
            watch_config: defaults.watch_config,
            websocket_idle_timeout: defaults.websocket_idle_timeout,
            websocket_max_duration: defaults.websocket_max_duration,
            websocket_client_events: defaults.websocket_client_events,
            tls_cert_file: None,
            tls_key_file: None,
            tls_client_ca_file: None,
            tls_client_auth: None,
        }
    }
}

impl ServerTable {
    /// The server settings, without `default_provider`; relative TLS paths taken from
    /// `base_dir`.
    pub(super) fn settings(&self, base_dir: &Path) -> Result<ServerConfig, Invalid> {
        let tls = TlsKeys {
            table: "[server]",
            tls_cert_file: &self.tls_cert_file,
            tls_key_file: &self.tls_key_file,
            tls_client_ca_file: &self.tls_client_ca_file,
            tls_client_auth: &self.tls_client_auth,
        }
        .validate(base_dir)?;
        Ok(ServerConfig {
            listen: self.listen,
            max_body_bytes: *self.max_body_bytes.get_ref(),
            max_buffered_bytes: *self.max_buffered_bytes.get_ref(),
            header_read_timeout: self.header_read_timeout,
            body_read_timeout: self.body_read_timeout,
            max_concurrent_requests: self.max_concurrent_requests,
            shutdown_grace: self.shutdown_grace,
            workers: self.workers,
            watch_config: self.watch_config,
            websocket_idle_timeout: self.websocket_idle_timeout,
            websocket_max_duration: self.websocket_max_duration,
            websocket_client_events: self.websocket_client_events.clone(),
            tls,
        })
    }
}

/// The `[admin]` table.
#[derive(Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AdminEntry {
    pub(super) listen: Option<Spanned<SocketAddr>>,
    tls_cert_file: Option<Spanned<String>>,
    tls_key_file: Option<Spanned<String>>,
}

impl AdminEntry {
    /// `tls_cert_file` and `tls_key_file`: the admin listener's own pair; relative paths taken
    /// from `base_dir`.
    pub(super) fn tls(&self, base_dir: &Path) -> Result<Option<super::ListenerTls>, Invalid> {
        TlsKeys {
            table: "[admin]",
            tls_cert_file: &self.tls_cert_file,
            tls_key_file: &self.tls_key_file,
            tls_client_ca_file: &None,
            tls_client_auth: &None,
        }
        .validate(base_dir)
    }
}

/// One `[providers.NAME]` table.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ProviderEntry {
    pub(super) base_url: Spanned<String>,
    /// Absent means [`Auth::Passthrough`]; the span is kept for the check that teams and
    /// passthrough do not go together.
    pub(super) auth: Option<Spanned<Auth>>,
    pub(super) namespaces: Option<Vec<Spanned<String>>>,
    #[serde(
        rename = "connect_timeout_ms",
        default = "default_connect_timeout",
        deserialize_with = "positive_millis"
    )]
    pub(super) connect_timeout: Duration,
    #[serde(
        rename = "read_timeout_ms",
        default = "default_read_timeout",
        deserialize_with = "positive_millis"
    )]
    pub(super) read_timeout: Duration,
    #[serde(default)]
    pub(super) encrypted_content_scope: EncryptedContentScope,
    #[serde(default = "stores_responses_default")]
    pub(super) stores_responses: bool,
    /// `item_profile`: the name of a built-in item profile, or `{ file = "..." }`.
    pub(super) item_profile: Option<Spanned<super::item_profile::ItemProfileEntry>>,
}

/// One `[[routes]]` entry.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RouteEntry {
    pub(super) model: Spanned<String>,
    pub(super) provider: Spanned<String>,
}

/// One `[teams.NAME]` table.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TeamEntry {
    pub(super) keys: Option<Spanned<Vec<Spanned<KeyEntry>>>>,
    pub(super) client_certs: Option<Vec<Spanned<String>>>,
    pub(super) providers: Option<Vec<Spanned<String>>>,
    pub(super) models: Option<Vec<Spanned<String>>>,
    pub(super) tools: Option<Vec<Spanned<String>>>,
    pub(super) pinned_tools: Option<Spanned<String>>,
    pub(super) requests_per_minute: Option<Spanned<u32>>,
    #[serde(default)]
    pub(super) rules: HashMap<Reason, Action>,
    #[serde(default)]
    pub(super) mode: TeamMode,
    pub(super) share_state_with: Option<Vec<Spanned<String>>>,
    pub(super) budget: Option<Spanned<BudgetEntry>>,
}

/// The `[audit]` table.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AuditEntry {
    pub(super) path: Spanned<String>,
}

/// The `[state]` table. Which keys apply depends on `backend`; the others are errors, found
/// after parsing, so every key is kept with its span.
#[derive(Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StateEntry {
    pub(super) backend: Option<Spanned<StateBackend>>,
    pub(super) path: Option<Spanned<String>>,
    pub(super) max_disk_bytes: Option<Spanned<super::size::WrittenSize>>,
    pub(super) max_memory_bytes: Option<Spanned<super::size::WrittenSize>>,
    pub(super) url: Option<Spanned<String>>,
    pub(super) sentinels: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) master_name: Option<Spanned<String>>,
    pub(super) sentinel_password_env: Option<Spanned<String>>,
    pub(super) cluster_nodes: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) tls: Option<Spanned<bool>>,
    pub(super) key_prefix: Option<Spanned<String>>,
    pub(super) timeout: Option<Spanned<String>>,
    pub(super) username: Option<Spanned<String>>,
    pub(super) password_env: Option<Spanned<String>>,
    pub(super) tls_ca_file: Option<Spanned<String>>,
    pub(super) tls_cert_file: Option<Spanned<String>>,
    pub(super) tls_key_file: Option<Spanned<String>>,
    /// What a request held to a budget gets while the backend cannot count it.
    #[serde(default)]
    pub(super) on_unavailable: OnUnavailable,
}

/// `[state] backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum StateBackend {
    Embedded,
    Memory,
    Redis,
}

/// The `[ledger]` table.
#[derive(serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct LedgerEntry {
    pub(super) enabled: bool,
    pub(super) store_items: bool,
    pub(super) carry_sessions: Spanned<bool>,
    #[serde(deserialize_with = "positive_hours")]
    pub(super) retention_hours: u32,
    pub(super) on_unavailable: OnUnavailable,
    #[serde(deserialize_with = "positive_count")]
    pub(super) max_chain: usize,
    pub(super) unknown_owner: UnknownOwner,
}

impl Default for LedgerEntry {
    fn default() -> Self {
        let defaults = LedgerConfig::default();
        Self {
            enabled: defaults.enabled,
            store_items: defaults.store_items,
            carry_sessions: Spanned::new(0..0, defaults.carry_sessions),
            retention_hours: defaults.retention_hours,
            on_unavailable: defaults.on_unavailable,
            max_chain: defaults.max_chain,
            unknown_owner: defaults.unknown_owner,
        }
    }
}

fn default_connect_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_read_timeout() -> Duration {
    Duration::from_secs(600)
}

/// `stores_responses` unless set: the provider keeps what it answers unless told `store: false`.
fn stores_responses_default() -> bool {
    true
}
