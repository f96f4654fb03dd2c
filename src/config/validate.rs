//! Checks run after parsing: provider names, base URLs, namespaces, model
//! globs, references to providers, teams and the files they name, `[state]` and `[ledger]`.
//! Each failure points at its value.

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroU32;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use globset::{Glob, GlobBuilder};
use reqwest::Url;
use toml::Spanned;

use super::budgets::UsageConfig;
use super::budgets::{self, PriceConfig};
use super::client_certs;
use super::error::Invalid;
use super::file::{
    AdminEntry, AuditEntry, ConfigFile, LedgerEntry, ProviderEntry, RouteEntry, StateBackend, StateEntry,
    TeamEntry,
};
use super::item_profile::{self, ItemProfileEntry};
use super::key_entry::validate_key;
use super::ledger::{
    DEFAULT_KEY_PREFIX, DEFAULT_MAX_DISK_BYTES, DEFAULT_MAX_MEMORY_BYTES, DEFAULT_REDIS_TIMEOUT,
    DEFAULT_STATE_PATH,
};
use super::redis_access::AccessEntry;
use super::redis_target::{RedisTarget, TargetEntry};
use super::size::WrittenSize;
use super::{
    pinned, AdminConfig, AuditConfig, Auth, Config, GateConfig, LedgerConfig, ProviderConfig, RouteConfig,
    ServerConfig, StateConfig, StateGrant, TeamConfig,
};
use crate::gate::SchemaCache;
use crate::keys;
use crate::spend::BudgetLimit;

/// First path segments that already have a meaning in request paths
/// (`/v1/...`, `/responses`), so no provider may use them as its prefix.
const RESERVED_PROVIDER_NAMES: [&str; 2] = ["v1", "responses"];

impl ConfigFile {
    /// Checks the parsed file and turns it into a [`Config`]. Relative paths are resolved
    /// against `base_dir` (absolute), and the files they name are read and checked.
    pub(super) fn validate(self, base_dir: &Path) -> Result<Config, Invalid> {
        if self.providers.get_ref().is_empty() {
            return Err(Invalid::new(
                self.providers.span(),
                "no provider is defined; add a [providers.NAME] table",
            ));
        }
        // Check in file order so that the first error reported is the first in the file.
        let mut entries: Vec<_> = self.providers.into_inner().into_iter().collect();
        entries.sort_by_key(|(name, _)| name.span().start);
        let mut providers = BTreeMap::new();
        // Where each passthrough provider says so: its `auth`, or its name when `auth` is left out.
        let mut passthrough = Vec::new();
        for (name, entry) in entries {
            check_provider_name(&name)?;
            match &entry.auth {
                None => passthrough.push((name.get_ref().clone(), name.span(), false)),
                Some(auth) if *auth.get_ref() == Auth::Passthrough => {
                    passthrough.push((name.get_ref().clone(), auth.span(), true));
                }
                Some(_) => {}
            }
            let name = name.into_inner();
            let provider = entry.validate(&name, base_dir)?;
            providers.insert(name, provider);
        }
        check_buffered_bytes(&self.server.max_body_bytes, &self.server.max_buffered_bytes)?;
        let server = self.server.settings(base_dir)?;
        let admin = self.admin.validate(&server, base_dir)?;
        let default_provider = match (self.default_provider, self.server.default_provider) {
            (Some(_), Some(again)) => {
                return Err(Invalid::new(
                    again.span(),
                    "default_provider is set both at the top level and in [server]; keep one",
                ))
            }
            (Some(name), None) | (None, Some(name)) => {
                Some(defined_provider(name, &providers, "default_provider")?)
            }
            (None, None) => None,
        };
        let routes = self
            .routes
            .into_iter()
            .map(|route| route.validate(&providers))
            .collect::<Result<_, _>>()?;
        // Before the teams: a `usd` budget needs its team's models priced.
        let prices = budgets::validate_prices(self.prices)?;
        let teams = validate_teams(self.teams, &providers, &self.gate, &prices, base_dir)?;
        if !teams.is_empty() {
            if let Some((name, span, written)) = passthrough.into_iter().next() {
                return Err(passthrough_with_teams(&name, span, written));
            }
        }
        let audit = self.audit.map(|audit| audit.validate(base_dir)).transpose()?;
        let usage = UsageConfig {
            on_unavailable: self.state.on_unavailable,
            ..self.usage
        };
        let state = self.state.validate(base_dir)?;
        let ledger = self.ledger.validate()?;
        Ok(Config {
            default_provider,
            server,
            admin,
            log: self.log,
            gate: self.gate,
            providers,
            routes,
            teams,
            audit,
            state,
            ledger,
            telemetry: self.telemetry,
            prices,
            usage,
        })
    }
}

/// Checks every team, in file order, and that no key digest is listed twice, no key id
/// names two keys and no certificate name matches `client_certs` globs of two teams.
fn validate_teams(
    entries: BTreeMap<Spanned<String>, TeamEntry>,
    providers: &BTreeMap<String, ProviderConfig>,
    gate: &GateConfig,
    prices: &[PriceConfig],
    base_dir: &Path,
) -> Result<BTreeMap<String, TeamConfig>, Invalid> {
    let mut entries: Vec<_> = entries.into_iter().collect();
    entries.sort_by_key(|(name, _)| name.span().start);
    // Compiles the pinned schemas with the limits the gate uses; made only when a team pins tools.
    let mut schemas = None;
    let mut owners: HashMap<[u8; 32], String> = HashMap::new();
    let mut key_ids: HashMap<String, String> = HashMap::new();
    let mut teams = BTreeMap::new();
    let mut grants = Vec::with_capacity(entries.len());
    let mut claimed = client_certs::Claimed::default();
    for (name, mut entry) in entries {
        if !keys::is_valid_team_name(name.get_ref()) {
            return Err(Invalid::new(
                name.span(),
                format!(
                    "team name {:?} may contain only ASCII letters, digits, `_` and `-`, at most 64, \
                     and may not start with `-` (it appears in logs, metrics and the audit log)",
                    name.get_ref()
                ),
            ));
        }
        let name_span = name.span();
        let name = name.into_inner();
        let certs = client_certs::parse_all(entry.client_certs.take().unwrap_or_default())?;
        claimed.claim(&name, &certs)?;
        let schemas = schemas.get_or_insert_with(|| SchemaCache::new(gate.schema_limits()));
        grants.push((name.clone(), entry.share_state_with.take()));
        let context = TeamContext {
            providers,
            schemas,
            prices,
            base_dir,
            name_span,
            has_client_certs: !certs.is_empty(),
        };
        let mut team = entry.validate(&name, &mut owners, &mut key_ids, &context)?;
        team.client_certs = certs.into_iter().map(|(glob, _)| glob).collect();
        teams.insert(name, team);
    }
    for (owner, written) in grants {
        let share = validate_grants(&owner, written.unwrap_or_default(), &teams)?;
        teams.get_mut(&owner).expect("validated above").share_state_with = share;
    }
    Ok(teams)
}

/// A team's `share_state_with`: each entry a configured team (not the owner itself) or `"*"`
/// (every team). Grants are one-way, so two teams naming each other is allowed.
fn validate_grants(
    owner: &str,
    written: Vec<Spanned<String>>,
    teams: &BTreeMap<String, TeamConfig>,
) -> Result<StateGrant, Invalid> {
    let mut named = Vec::with_capacity(written.len());
    for entry in written {
        let name = entry.get_ref();
        if name == "*" {
            return Ok(StateGrant::Everyone);
        }
        if !teams.contains_key(name) {
            return Err(Invalid::new(
                entry.span(),
                format!(
                    "share_state_with names {name:?}, which is not a configured team; name teams                      defined under [teams], or \"*\" for every team"
                ),
            ));
        }
        if name != owner && !named.contains(name) {
            named.push(name.clone());
        }
    }
    Ok(match named.is_empty() {
        true => StateGrant::Nobody,
        false => StateGrant::Teams(named),
    })
}

/// What a team's checks read besides the team itself.
struct TeamContext<'c> {
    providers: &'c BTreeMap<String, ProviderConfig>,
    schemas: &'c SchemaCache,
    prices: &'c [PriceConfig],
    base_dir: &'c Path,
    /// Where the team's name is written (its table, for what the table lacks).
    name_span: Range<usize>,
    /// Whether the team has `client_certs` (so it may go without keys).
    has_client_certs: bool,
}

impl TeamEntry {
    fn validate(
        self,
        team: &str,
        owners: &mut HashMap<[u8; 32], String>,
        key_ids: &mut HashMap<String, String>,
        context: &TeamContext<'_>,
    ) -> Result<TeamConfig, Invalid> {
        let TeamContext {
            providers,
            schemas,
            prices,
            base_dir,
            ..
        } = *context;
        let written_keys = match self.keys {
            Some(keys) if keys.get_ref().is_empty() && !context.has_client_certs => Err(keys.span()),
            Some(keys) => Ok(keys.into_inner()),
            None if context.has_client_certs => Ok(Vec::new()),
            None => Err(context.name_span.clone()),
        }
        .map_err(|span| {
            Invalid::new(
                span,
                format!(
                    "team {team:?} has no keys; add the digest of at least one client key \
                     (`replaygate keys new --team {team}` makes one), or `client_certs`"
                ),
            )
        })?;
        let (keys, key_budgets): (Vec<_>, Vec<_>) = written_keys
            .into_iter()
            .map(|entry| validate_key(entry, team, owners, key_ids))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .unzip();
        let providers = self
            .providers
            .map(|names| {
                names
                    .into_iter()
                    .map(|name| defined_provider(name, providers, "provider"))
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        let models = self
            .models
            .map(|globs| compile_globs(globs, "model"))
            .transpose()?;
        let tools = self.tools.map(|globs| compile_globs(globs, "tool")).transpose()?;
        let pinned_tools = match self.pinned_tools {
            None => None,
            Some(written) => {
                let path = resolve_path(base_dir, &written, "pinned_tools", "a file")?;
                let pinned =
                    pinned::read(&path, schemas).map_err(|message| Invalid::new(written.span(), message))?;
                Some(pinned)
            }
        };
        let requests_per_minute = match self.requests_per_minute {
            None => None,
            Some(rate) => Some(NonZeroU32::new(*rate.get_ref()).ok_or_else(|| {
                Invalid::new(
                    rate.span(),
                    "requests_per_minute must be at least 1; leave it out for no limit",
                )
            })?),
        };
        let budget_span = self.budget.as_ref().map(Spanned::span);
        let budget = self
            .budget
            .map(|written| {
                let span = written.span();
                written.into_inner().validate(span)
            })
            .transpose()?;
        // Every `usd` budget, the team's then its keys', in file order.
        let usd_budgets = std::iter::once((budget.as_ref(), budget_span, "the team's budget"))
            .chain(
                keys.iter()
                    .zip(key_budgets)
                    .map(|(key, span)| (key.budget.as_ref(), span, "a key's budget")),
            )
            .filter_map(|(budget, span, what)| {
                matches!(budget?.limit, BudgetLimit::MicroUsd(_)).then_some((span?, what))
            });
        for (span, what) in usd_budgets {
            budgets::check_priced(team, what, span, models.as_deref(), prices)?;
        }
        Ok(TeamConfig {
            keys,
            providers,
            models,
            tools,
            pinned_tools,
            requests_per_minute,
            rules: self.rules,
            mode: self.mode,
            share_state_with: StateGrant::default(),
            budget,
            client_certs: Vec::new(),
        })
    }
}

impl AdminEntry {
    fn validate(self, server: &ServerConfig, base_dir: &Path) -> Result<AdminConfig, Invalid> {
        let tls = self.tls(base_dir)?;
        let Some(listen) = self.listen else {
            return Ok(AdminConfig { listen: None, tls });
        };
        let admin = AdminConfig {
            listen: Some(*listen.get_ref()),
            tls,
        };
        if admin.collides_with(server.listen) {
            return Err(Invalid::new(
                listen.span(),
                format!(
                    "[admin] listen {} takes the proxy's port ([server] listen {}); give the admin listener a port of its own",
                    listen.get_ref(),
                    server.listen
                ),
            ));
        }
        Ok(admin)
    }
}

impl AuditEntry {
    fn validate(self, base_dir: &Path) -> Result<AuditConfig, Invalid> {
        Ok(AuditConfig {
            path: resolve_path(base_dir, &self.path, "[audit] path", "a file")?,
        })
    }
}

/// The error for a passthrough provider in a configuration with teams.
fn passthrough_with_teams(provider: &str, span: Range<usize>, written: bool) -> Invalid {
    let how = if written {
        "auth = \"passthrough\""
    } else {
        "auth = \"passthrough\" (the default when `auth` is left out)"
    };
    Invalid::new(
        span,
        format!(
            "provider {provider:?} uses {how}, which forwards the client's Authorization header \
             upstream; with teams configured that header holds the client's team key, which is never \
             forwarded. Give the provider its own credential (auth = {{ bearer_env = \"VARIABLE\" }}) \
             or auth = \"none\""
        ),
    )
}

/// Compiles the globs of a team's `models` or `tools`.
fn compile_globs(globs: Vec<Spanned<String>>, what: &str) -> Result<Vec<Glob>, Invalid> {
    globs
        .into_iter()
        .map(|glob| {
            name_glob(glob.get_ref())
                .map_err(|e| Invalid::new(glob.span(), format!("invalid {what} glob: {e}")))
        })
        .collect()
}

/// A glob on a model or tool name: `*` matches any run of characters (`/` and `.` included),
/// `?` exactly one, `\` escapes; case-sensitive.
pub(super) fn name_glob(text: &str) -> Result<Glob, globset::Error> {
    GlobBuilder::new(text)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
}

/// A path written in the file, taken from `base_dir` when relative, made absolute. `what` is
/// what it must name (`a file`), for the message when it is empty.
fn resolve_path(
    base_dir: &Path,
    written: &Spanned<String>,
    key: &str,
    what: &str,
) -> Result<PathBuf, Invalid> {
    if written.get_ref().is_empty() {
        return Err(Invalid::new(
            written.span(),
            format!("{key} must name {what}, not be empty"),
        ));
    }
    Ok(absolute_in(base_dir, written.get_ref()))
}

/// `path` taken from `base_dir` when relative, made absolute.
fn absolute_in(base_dir: &Path, path: &str) -> PathBuf {
    let joined = base_dir.join(path);
    std::path::absolute(&joined).unwrap_or(joined)
}

impl StateBackend {
    fn name(self) -> &'static str {
        match self {
            StateBackend::Embedded => "embedded",
            StateBackend::Memory => "memory",
            StateBackend::Redis => "redis",
        }
    }
}

impl StateEntry {
    /// Checks `[state]`: the keys of the chosen backend only, a usable Redis URL, prefix,
    /// timeout, login and TLS files. The default path is taken from `base_dir` like a written one.
    fn validate(self, base_dir: &Path) -> Result<StateConfig, Invalid> {
        let backend = self
            .backend
            .as_ref()
            .map_or(StateBackend::Embedded, |b| *b.get_ref());
        let keys = [
            (&self.path, "path", StateBackend::Embedded),
            (&self.url, "url", StateBackend::Redis),
            (&self.master_name, "master_name", StateBackend::Redis),
            (
                &self.sentinel_password_env,
                "sentinel_password_env",
                StateBackend::Redis,
            ),
            (&self.key_prefix, "key_prefix", StateBackend::Redis),
            (&self.timeout, "timeout", StateBackend::Redis),
            (&self.username, "username", StateBackend::Redis),
            (&self.password_env, "password_env", StateBackend::Redis),
            (&self.tls_ca_file, "tls_ca_file", StateBackend::Redis),
            (&self.tls_cert_file, "tls_cert_file", StateBackend::Redis),
            (&self.tls_key_file, "tls_key_file", StateBackend::Redis),
        ];
        let lists = [
            (&self.sentinels, "sentinels", StateBackend::Redis),
            (&self.cluster_nodes, "cluster_nodes", StateBackend::Redis),
        ];
        let budgets = [
            (self.max_disk_bytes.as_ref(), "max_disk_bytes"),
            (self.max_memory_bytes.as_ref(), "max_memory_bytes"),
        ]
        .into_iter()
        .filter_map(|(written, key)| Some((written?.span(), key, StateBackend::Embedded)));
        let spans = keys
            .into_iter()
            .filter_map(|(written, key, owner)| Some((written.as_ref()?.span(), key, owner)))
            .chain(
                lists
                    .into_iter()
                    .filter_map(|(written, key, owner)| Some((written.as_ref()?.span(), key, owner))),
            )
            .chain(
                self.tls
                    .as_ref()
                    .map(|written| (written.span(), "tls", StateBackend::Redis)),
            )
            .chain(budgets);
        let misplaced = spans
            .filter(|(_, _, owner)| *owner != backend)
            .min_by_key(|(span, _, _)| span.start);
        if let Some((span, key, owner)) = misplaced {
            let default = if self.backend.is_none() {
                " (the default)"
            } else {
                ""
            };
            return Err(Invalid::new(
                span,
                format!(
                    "[state] {key} applies to backend = \"{}\" only, and this [state] has backend = \"{}\"{default}",
                    owner.name(),
                    backend.name()
                ),
            ));
        }
        match backend {
            StateBackend::Memory => Ok(StateConfig::Memory),
            StateBackend::Embedded => {
                let path = match &self.path {
                    Some(written) => resolve_path(base_dir, written, "[state] path", "a directory")?,
                    None => absolute_in(base_dir, DEFAULT_STATE_PATH),
                };
                let max_disk_bytes = match &self.max_disk_bytes {
                    Some(written) => check_max_disk_bytes(written)?,
                    None => DEFAULT_MAX_DISK_BYTES,
                };
                let max_memory_bytes = match &self.max_memory_bytes {
                    Some(written) => check_max_memory_bytes(written)?,
                    None => DEFAULT_MAX_MEMORY_BYTES,
                };
                Ok(StateConfig::Embedded {
                    path,
                    max_disk_bytes,
                    max_memory_bytes,
                })
            }
            StateBackend::Redis => {
                let (target, login) = TargetEntry {
                    backend_span: self.backend.as_ref().map_or(0..0, Spanned::span),
                    url: self.url.as_ref(),
                    sentinels: self.sentinels.as_ref(),
                    master_name: self.master_name.as_ref(),
                    sentinel_password_env: self.sentinel_password_env.as_ref(),
                    cluster_nodes: self.cluster_nodes.as_ref(),
                    tls: self.tls.as_ref(),
                }
                .validate()?;
                let access = AccessEntry {
                    username: self.username.as_ref(),
                    password_env: self.password_env.as_ref(),
                    tls_ca_file: self.tls_ca_file.as_ref(),
                    tls_cert_file: self.tls_cert_file.as_ref(),
                    tls_key_file: self.tls_key_file.as_ref(),
                }
                .validate(&login, base_dir)?;
                let key_prefix = match self.key_prefix {
                    Some(prefix) => check_key_prefix(prefix, matches!(target, RedisTarget::Cluster { .. }))?,
                    None => DEFAULT_KEY_PREFIX.to_owned(),
                };
                let timeout = match self.timeout {
                    Some(written) => parse_timeout(&written)?,
                    None => DEFAULT_REDIS_TIMEOUT,
                };
                Ok(StateConfig::Redis {
                    target,
                    key_prefix,
                    timeout,
                    access,
                })
            }
        }
    }
}

/// A Redis URL: `redis://` or `rediss://`, a host, and a path that is empty or a database
/// number. Messages never repeat the URL, which may hold a password.
pub(super) fn check_redis_url(text: &str) -> Result<(), String> {
    let url = Url::parse(text)
        .map_err(|e| format!("[state] url is not a URL ({e}); write it like \"redis://127.0.0.1:6379\""))?;
    if !matches!(url.scheme(), "redis" | "rediss") {
        return Err(format!(
            "[state] url must start with redis:// (or rediss:// for TLS), not {}://",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("[state] url names no host; write it like \"redis://127.0.0.1:6379\"".to_owned());
    }
    let database = url.path().trim_start_matches('/');
    if !database.is_empty() && database.parse::<u32>().is_err() {
        return Err(
            "[state] url may have a database number as its path (redis://HOST:6379/0), nothing else"
                .to_owned(),
        );
    }
    Ok(())
}

/// The least `[state] max_memory_bytes`: below it the in-memory tables are written out so
/// often that the store's threads do little else.
const MIN_MAX_MEMORY_BYTES: u64 = 8 * 1024 * 1024;

/// `[state] max_memory_bytes`: a size (bytes, or a text with a unit), at least
/// [`MIN_MAX_MEMORY_BYTES`].
fn check_max_memory_bytes(written: &Spanned<WrittenSize>) -> Result<u64, Invalid> {
    match written.get_ref().bytes() {
        Ok(bytes) if bytes < MIN_MAX_MEMORY_BYTES => Err(Invalid::new(
            written.span(),
            format!(
                "[state] max_memory_bytes is {bytes} bytes; it must be at least 8MiB, the least the store's in-memory tables, cache and recent records work with"
            ),
        )),
        Ok(bytes) => Ok(bytes),
        Err(why) => Err(Invalid::new(
            written.span(),
            format!("[state] max_memory_bytes is not a size such as \"32MiB\" or 33554432: {why}"),
        )),
    }
}

/// The least `[state] max_disk_bytes`: the tree's journal alone may take 64 MiB.
const MIN_MAX_DISK_BYTES: u64 = 128 * 1024 * 1024;

/// `[state] max_disk_bytes`: a size (bytes, or a text with a unit), more than zero and at
/// least [`MIN_MAX_DISK_BYTES`].
fn check_max_disk_bytes(written: &Spanned<WrittenSize>) -> Result<u64, Invalid> {
    match written.get_ref().bytes() {
        Ok(0) => Err(Invalid::new(
            written.span(),
            "[state] max_disk_bytes must be more than 0, or the ledger could keep no record",
        )),
        Ok(bytes) if bytes < MIN_MAX_DISK_BYTES => Err(Invalid::new(
            written.span(),
            format!(
                "[state] max_disk_bytes is {bytes} bytes; it must be at least 128MiB, since the store's journal alone may take 64MiB"
            ),
        )),
        Ok(bytes) => Ok(bytes),
        Err(why) => Err(Invalid::new(
            written.span(),
            format!("[state] max_disk_bytes is not a size such as \"1GiB\" or 1073741824: {why}"),
        )),
    }
}

/// `[state] key_prefix`: not empty, no spaces or control characters; with `cluster_nodes`, no
/// `{` or `}` either, which would put every key in one hash slot
/// (docs/operations.md#redis-for-several-replicas).
fn check_key_prefix(prefix: Spanned<String>, cluster: bool) -> Result<String, Invalid> {
    let text = prefix.get_ref();
    if text.is_empty() || text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Invalid::new(
            prefix.span(),
            format!("[state] key_prefix {text:?} must be non-empty, without spaces or control characters"),
        ));
    }
    if cluster && text.contains(['{', '}']) {
        return Err(Invalid::new(
            prefix.span(),
            format!(
                "[state] key_prefix {text:?} may not hold {{ or }} with cluster_nodes: a hash tag in the \
                 prefix would put every key in one slot, on one node; replaygate tags each key itself"
            ),
        ));
    }
    Ok(prefix.into_inner())
}

/// `[state] timeout`: a duration such as `"500ms"` or `"2s"`, more than zero.
fn parse_timeout(written: &Spanned<String>) -> Result<Duration, Invalid> {
    let text = written.get_ref();
    match humantime::parse_duration(text) {
        Ok(timeout) if !timeout.is_zero() => Ok(timeout),
        Ok(_) => Err(Invalid::new(
            written.span(),
            "[state] timeout must be more than 0, or every Redis command would fail",
        )),
        Err(e) => Err(Invalid::new(
            written.span(),
            format!("[state] timeout {text:?} is not a duration such as \"500ms\" or \"2s\": {e}"),
        )),
    }
}

impl LedgerEntry {
    /// Checks `[ledger]`: carrying sessions needs the ledger and the items it replays.
    fn validate(self) -> Result<LedgerConfig, Invalid> {
        let carry_sessions = *self.carry_sessions.get_ref();
        if carry_sessions && !self.enabled {
            return Err(Invalid::new(
                self.carry_sessions.span(),
                "carry_sessions = true needs the ledger, which enabled = false turns off",
            ));
        }
        if carry_sessions && !self.store_items {
            return Err(Invalid::new(
                self.carry_sessions.span(),
                "carry_sessions = true needs store_items = true: a session is carried by replaying the \
                 recorded items of its chain, and the ledger keeps items only with store_items",
            ));
        }
        Ok(LedgerConfig {
            enabled: self.enabled,
            store_items: self.store_items,
            carry_sessions,
            retention_hours: self.retention_hours,
            on_unavailable: self.on_unavailable,
            max_chain: self.max_chain,
            unknown_owner: self.unknown_owner,
        })
    }
}

impl ProviderEntry {
    fn validate(self, name: &str, base_dir: &Path) -> Result<ProviderConfig, Invalid> {
        let base_url = normalize_base_url(self.base_url.get_ref())
            .map_err(|message| Invalid::new(self.base_url.span(), message))?;
        let namespaces = match self.namespaces {
            None => vec![name.to_owned()],
            Some(list) => list.into_iter().map(check_namespace).collect::<Result<_, _>>()?,
        };
        if let Some(auth) = &self.auth {
            let host = Url::parse(&base_url)
                .ok()
                .and_then(|url| url.host_str().map(str::to_owned));
            auth.get_ref()
                .check_host(host.as_deref().unwrap_or_default())
                .map_err(|message| Invalid::new(auth.span(), format!("provider {name:?}: {message}")))?;
        }
        let (item_profile, item_profile_file) = match self.item_profile {
            None => (None, None),
            Some(written) => {
                let span = written.span();
                match written.into_inner() {
                    ItemProfileEntry::Named(profile) => {
                        let profile = crate::gate::ItemProfile::built_in(&profile)
                            .map_err(|e| Invalid::new(span, format!("provider {name:?}: {e}")))?;
                        (Some(profile), None)
                    }
                    ItemProfileEntry::File(table) => {
                        let path = resolve_path(base_dir, &table.file, "item_profile file", "a file")?;
                        let profile = item_profile::read_file(&path).map_err(|message| {
                            Invalid::new(table.file.span(), format!("provider {name:?}: {message}"))
                        })?;
                        (Some(profile), Some(path))
                    }
                }
            }
        };
        Ok(ProviderConfig {
            base_url,
            auth: self.auth.map(Spanned::into_inner).unwrap_or_default(),
            namespaces,
            connect_timeout: self.connect_timeout,
            read_timeout: self.read_timeout,
            encrypted_content_scope: self.encrypted_content_scope,
            stores_responses: self.stores_responses,
            item_profile,
            item_profile_file,
        })
    }
}

impl RouteEntry {
    fn validate(self, providers: &BTreeMap<String, ProviderConfig>) -> Result<RouteConfig, Invalid> {
        let model = name_glob(self.model.get_ref())
            .map_err(|e| Invalid::new(self.model.span(), format!("invalid model glob: {e}")))?;
        let provider = defined_provider(self.provider, providers, "provider")?;
        Ok(RouteConfig { model, provider })
    }
}

/// Every body `max_body_bytes` allows must fit in `max_buffered_bytes`, or such a body could
/// never be accepted. The error points at whichever of the two was written in the file.
fn check_buffered_bytes(body: &Spanned<usize>, buffered: &Spanned<usize>) -> Result<(), Invalid> {
    let (body_max, buffered_max) = (*body.get_ref(), *buffered.get_ref());
    if buffered_max >= body_max && buffered_max > 0 {
        return Ok(());
    }
    // A default value has an empty span: point at the key that was written.
    let span = if buffered.span().is_empty() {
        body.span()
    } else {
        buffered.span()
    };
    Err(Invalid::new(
        span,
        format!(
            "max_buffered_bytes ({buffered_max}) must be at least max_body_bytes ({body_max}), \
             or a body of the largest allowed size could never be accepted"
        ),
    ))
}

/// A provider name becomes a URL path segment: `/{name}/v1/...`.
fn check_provider_name(name: &Spanned<String>) -> Result<(), Invalid> {
    let text = name.get_ref();
    let usable_chars = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    let problem = if !usable_chars {
        "may contain only ASCII letters, digits, `_`, `.` and `-`, because it is used as a URL path prefix"
    } else if text == "." || text == ".." {
        "is not usable as a URL path segment"
    } else if RESERVED_PROVIDER_NAMES.contains(&text.as_str()) {
        "is reserved: request paths starting with it already have a meaning"
    } else {
        return Ok(());
    };
    Err(Invalid::new(
        name.span(),
        format!("provider name {text:?} {problem}"),
    ))
}

/// Accepts an absolute http(s) URL without query, fragment or credentials;
/// returns it normalized, with one trailing `/` removed.
fn normalize_base_url(text: &str) -> Result<String, String> {
    let url = Url::parse(text).map_err(|e| format!("base_url {text:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "base_url {text:?} must use http or https, not {:?}",
            url.scheme()
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!("base_url {text:?} must not have a query or a fragment"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "base_url {text:?} must not carry credentials; use `auth` instead"
        ));
    }
    let normalized = url.as_str();
    Ok(normalized.strip_suffix('/').unwrap_or(normalized).to_owned())
}

/// A namespace is the part of an item type before its `:`.
fn check_namespace(namespace: Spanned<String>) -> Result<String, Invalid> {
    let text = namespace.get_ref();
    if text.is_empty() || text.contains(':') {
        return Err(Invalid::new(
            namespace.span(),
            format!("namespace {text:?} must be non-empty and contain no `:` (it is the part of an item type before the `:`)"),
        ));
    }
    Ok(namespace.into_inner())
}

/// Resolves a reference to a provider defined under `[providers]`.
fn defined_provider(
    name: Spanned<String>,
    providers: &BTreeMap<String, ProviderConfig>,
    key: &str,
) -> Result<String, Invalid> {
    if providers.contains_key(name.get_ref()) {
        return Ok(name.into_inner());
    }
    let defined: Vec<&str> = providers.keys().map(String::as_str).collect();
    Err(Invalid::new(
        name.span(),
        format!(
            "{key} {:?} is not a defined provider (defined: {})",
            name.get_ref(),
            defined.join(", ")
        ),
    ))
}
