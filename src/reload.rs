//! Reloading the configuration while serving (docs/operations.md#reload): on SIGHUP, and on a
//! change of the file or of a file it names when `[server] watch_config = true`. A configuration
//! that does
//! not load changes nothing; the error is logged with its line and column.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::config::Config;
use crate::proxy::state::Reloader;

/// How long file events are gathered before one reload (editors write a file in steps).
const SETTLE: Duration = Duration::from_millis(200);

/// Reloads from one configuration file.
pub struct ConfigReload {
    /// `None` when serving the built-in default: there is nothing to re-read.
    path: Option<PathBuf>,
    reloader: Reloader,
    /// The configuration in force, for the audit path to reopen when a reload fails.
    current: Config,
    /// What the watched files held when they were last read, so file events that change
    /// nothing (or change a sibling of the file) trigger no reload.
    read_as: u64,
}

impl ConfigReload {
    /// Reloads `reloader`'s workers from `path`, whose configuration `current` is in force.
    pub fn new(path: Option<PathBuf>, reloader: Reloader, current: Config) -> ConfigReload {
        let mut reload = ConfigReload {
            path,
            reloader,
            current,
            read_as: 0,
        };
        reload.read_as = reload.fingerprint();
        reload
    }

    /// A hash of what the watched files hold now, read through any symlinks (a Kubernetes
    /// config map swaps a `..data` symlink, so the events name that, not the file).
    fn fingerprint(&self) -> u64 {
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        for file in self.watched_files() {
            hasher.update(file.as_os_str().as_encoded_bytes());
            match std::fs::read(&file) {
                Ok(bytes) => hasher.update(&bytes),
                Err(_) => hasher.update(b"\0unreadable"),
            }
        }
        hasher.digest()
    }

    /// Re-reads the file and swaps it in if it loads and builds; logs and counts
    /// (`replaygate_config_reloads_total`) what happened. The audit log is reopened either way
    /// (after logrotate moved it).
    pub fn reload(&mut self, why: &str) -> bool {
        self.read_as = self.fingerprint();
        let Some(path) = &self.path else {
            tracing::info!(
                trigger = why,
                "serving the built-in configuration; there is no file to reload"
            );
            return false;
        };
        let env = |name: &str| std::env::var(name).ok();
        let loaded = Config::load(path).map_err(|e| e.to_string()).and_then(|config| {
            self.reloader
                .reload(&config, &env)
                .map_err(|e| e.to_string())
                .map(|()| config)
        });
        self.reloader.metrics().config_reloaded(loaded.is_ok());
        match loaded {
            Ok(config) => {
                tracing::info!(
                    trigger = why,
                    config = %path.display(),
                    providers = config.providers.len(),
                    teams = config.teams.len(),
                    "configuration reloaded"
                );
                // `--listen` overrides the file's address; that is no change. The listener's TLS
                // files are read again (see `Reloader::reload`).
                let server = crate::config::ServerConfig {
                    listen: self.current.server.listen,
                    tls: self.current.server.tls.clone(),
                    ..config.server.clone()
                };
                if server != self.current.server {
                    tracing::warn!("[server] changes take a restart; the rest is in force");
                }
                if config.gate.schema_limits() != self.current.gate.schema_limits()
                    || config.gate.judged_prefix_bytes != self.current.gate.judged_prefix_bytes
                {
                    tracing::warn!(
                        "[gate] schema_cache_bytes, max_schema_bytes, passed_calls_bytes and judged_prefix_bytes changes take a restart; the rest is in force"
                    );
                }
                if config.state != self.current.state || config.ledger != self.current.ledger {
                    tracing::warn!("[state] and [ledger] changes take a restart; the rest is in force");
                }
                if config.telemetry != self.current.telemetry {
                    tracing::warn!("[telemetry] changes take a restart; the rest is in force");
                }
                // The admin listener's TLS files are read again, like the proxy's.
                let admin = crate::config::AdminConfig {
                    tls: self.current.admin.tls.clone(),
                    ..config.admin.clone()
                };
                if admin != self.current.admin {
                    tracing::warn!("[admin] changes take a restart; the rest is in force");
                }
                let listen = self.current.server.listen;
                // Turning TLS on or off takes a restart: the files watched stay those in force.
                let tls =
                    |in_force: &Option<crate::config::ListenerTls>, new: &Option<_>| match (in_force, new) {
                        (Some(_), Some(new)) => Some(Clone::clone(new)),
                        (in_force, _) => in_force.clone(),
                    };
                let (server_tls, admin_tls) = (
                    tls(&self.current.server.tls, &config.server.tls),
                    tls(&self.current.admin.tls, &config.admin.tls),
                );
                let in_force = (
                    self.current.state.clone(),
                    self.current.ledger.clone(),
                    self.current.admin.clone(),
                    self.current.telemetry.clone(),
                );
                self.current = config;
                self.current.server.listen = listen;
                self.current.server.tls = server_tls;
                // The state backend, the ledger, the admin listener and the span export stay as
                // the process started them.
                (
                    self.current.state,
                    self.current.ledger,
                    self.current.admin,
                    self.current.telemetry,
                ) = in_force;
                self.current.admin.tls = admin_tls;
                true
            }
            Err(error) => {
                self.reloader.reopen_audit(&self.current);
                tracing::error!(trigger = why, %error, "configuration not reloaded; the one in force is unchanged");
                false
            }
        }
    }

    /// The files whose change triggers a reload: the configuration and the files it names (the
    /// listener's TLS files among them).
    fn watched_files(&self) -> BTreeSet<PathBuf> {
        let mut files: BTreeSet<PathBuf> = self.path.iter().map(|path| absolute(path)).collect();
        for tls in [&self.current.server.tls, &self.current.admin.tls]
            .into_iter()
            .flatten()
        {
            files.extend(tls.files().map(absolute));
        }
        for team in self.current.teams.values() {
            if let Some(pinned) = &team.pinned_tools {
                files.insert(absolute(&pinned.path));
            }
        }
        for provider in self.current.providers.values() {
            if let Some(profile) = &provider.item_profile_file {
                files.insert(absolute(profile));
            }
        }
        files
    }

    /// Serves reloads until the process ends: on SIGHUP (from `hangups`, see [`hangups`]),
    /// and on file changes when `watch`.
    pub async fn run(mut self, watch: bool, mut hangup: Hangups) {
        let (changed, mut changes) = mpsc::channel::<()>(1);
        let mut _watcher = None;
        if watch && self.path.is_some() {
            match watch_files(&self.watched_files(), changed.clone()) {
                Ok(watcher) => _watcher = Some(watcher),
                Err(error) => tracing::error!(%error, "cannot watch the configuration; reload with SIGHUP"),
            }
        }
        loop {
            let why = tokio::select! {
                Some(()) = changes.recv() => {
                    // Let a write in several steps finish, then take every event it made.
                    tokio::time::sleep(SETTLE).await;
                    while changes.try_recv().is_ok() {}
                    if self.fingerprint() == self.read_as {
                        continue;
                    }
                    "file change"
                }
                true = next_hangup(&mut hangup) => "SIGHUP",
                else => return,
            };
            if self.reload(why) && watch {
                // The files it names may have changed.
                match watch_files(&self.watched_files(), changed.clone()) {
                    Ok(watcher) => _watcher = Some(watcher),
                    Err(error) => tracing::error!(%error, "cannot watch the configuration"),
                }
            }
        }
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

/// Watches the directories of `files` and signals `changed` on any change in them: a file
/// replaced by a rename (as editors do) or through a swapped symlink (as Kubernetes config maps
/// are) shows up under another name, so whether a watched file changed is decided by reading
/// it ([`ConfigReload::fingerprint`]).
fn watch_files(
    files: &BTreeSet<PathBuf>,
    changed: mpsc::Sender<()>,
) -> notify::Result<notify::RecommendedWatcher> {
    let wanted = files.clone();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        // Writes to other files of the directory (an audit log beside proxy.toml) are no
        // reason to read the configuration again; renames, creations and removals may be.
        let written = matches!(
            event.kind,
            notify::EventKind::Modify(notify::event::ModifyKind::Data(_))
        );
        let ours = event.paths.iter().any(|path| wanted.contains(path));
        if !event.kind.is_access() && (ours || !written) {
            let _ = changed.try_send(());
        }
    })?;
    let directories: BTreeSet<&Path> = files.iter().filter_map(|file| file.parent()).collect();
    for directory in directories {
        watcher.watch(directory, RecursiveMode::NonRecursive)?;
    }
    Ok(watcher)
}

/// SIGHUPs as they arrive (nothing where there are none).
#[cfg(unix)]
pub(crate) type Hangups = Option<tokio::signal::unix::Signal>;
/// SIGHUPs as they arrive (nothing where there are none).
#[cfg(not(unix))]
pub(crate) type Hangups = Option<()>;

/// Starts catching SIGHUP (inside a runtime); from then on it no longer ends the process.
pub fn hangups() -> Hangups {
    #[cfg(unix)]
    {
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok()
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Completes with `true` on the next SIGHUP; never, where there are none.
async fn next_hangup(hangups: &mut Hangups) -> bool {
    #[cfg(unix)]
    if let Some(signal) = hangups {
        return signal.recv().await.is_some();
    }
    let _ = hangups;
    std::future::pending().await
}
