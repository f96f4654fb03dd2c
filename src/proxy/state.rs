//! Everything a request needs: what lives for the process (the gate and its caches, the
//! limits on requests in flight and bodies held, the rate limiter, the audit log) and the
//! configuration snapshot a reload swaps.

use std::sync::{Arc, Weak};

use arc_swap::ArcSwap;
use tokio::sync::Semaphore;

use super::audit::AuditLog;
use super::body::BodyLimits;
use super::buffer_budget::BufferBudget;
pub(crate) use super::build_error::BuildError;
use super::judged_prefixes::JudgedPrefixes;
use super::ledger::{Ledger, LedgerSettings};
use super::provider::Credential;
use super::rate_limit::UncountedRates;
use super::snapshot::Snapshot;
use super::sockets::{OpenSockets, SocketLimits};
use crate::config::{Config, LedgerConfig, OnUnavailable, StateConfig};
use crate::gate::Gate;
use crate::metrics::{LedgerMeter, Metrics, RequestMeter};
use crate::spend::SpendClock;
use crate::state::{EmbeddedStore, MemoryStore, RedisLogin, RedisStore, StateStore, StoreError};
use crate::tls::TlsListener;

/// One worker's state. Everything but the snapshot is shared by the workers of a process and
/// outlives reloads; the snapshot is the worker's own (its providers' connections live on its
/// runtime) and is replaced whole by a reload.
#[derive(Debug)]
pub struct ProxyState {
    /// The gate and its compiled tool schemas.
    pub(crate) gate: Arc<Gate>,
    /// The inputs judged clean (`[gate] judged_prefix_bytes`), unless it is 0.
    pub(crate) judged: Option<Arc<JudgedPrefixes>>,
    /// The configuration in force: routes, providers, teams, policy.
    snapshot: Arc<ArcSwap<Snapshot>>,
    /// How request bodies are read.
    pub(crate) body_limits: BodyLimits,
    /// The limits of a WebSocket (`[server] websocket_*`, and `max_body_bytes` per message).
    pub(crate) websocket: SocketLimits,
    /// This worker's open WebSockets, closed (1001) when the server shuts down.
    pub(crate) sockets: OpenSockets,
    /// Permits for requests in flight.
    pub(crate) in_flight: Arc<Semaphore>,
    /// Permits for judgments on the blocking pool, shared by all workers (one per worker).
    pub(crate) judges: Arc<Semaphore>,
    /// The number of permits `in_flight` started with.
    pub(crate) max_in_flight: usize,
    /// `max_buffered_bytes`: the request bodies held at once, shared by every worker.
    pub(crate) buffered: Arc<BufferBudget>,
    /// `[state]`: where the ledger and the team rate limits live.
    pub store: StateStore,
    /// `[audit]`: one line per judged request.
    pub(crate) audit: Option<Arc<AuditLog>>,
    /// The provenance ledger (`[ledger]`), unless it is off.
    pub(crate) ledger: Option<Arc<Ledger>>,
    /// What a team's request gets while its rate cannot be counted (`[ledger] on_unavailable`).
    pub(crate) uncounted_rates: Arc<UncountedRates>,
    /// The process's metric families (served on the admin listener).
    pub metrics: Arc<Metrics>,
    /// The clock budgets read their windows from.
    pub(crate) clock: SpendClock,
    /// `[server] tls_cert_file`: the listener's TLS, shared by every worker; `None`: plain HTTP.
    pub(crate) tls: Option<Arc<TlsListener>>,
    /// `[admin] tls_cert_file`: the admin listener's TLS; `None`: plain HTTP.
    pub(crate) admin_tls: Option<Arc<TlsListener>>,
}

impl ProxyState {
    /// Builds the state, reading provider keys through `env`.
    pub fn new(config: &Config, env: &dyn Fn(&str) -> Option<String>) -> Result<ProxyState, BuildError> {
        let audit = match &config.audit {
            Some(audit) => Some(Arc::new(AuditLog::open(&audit.path).map_err(|source| {
                BuildError::Audit {
                    path: audit.path.display().to_string(),
                    source,
                }
            })?)),
            None => None,
        };
        let tls = match &config.server.tls {
            Some(tls) => Some(Arc::new(TlsListener::new(
                tls,
                config.server.max_concurrent_requests,
                crate::tls::server_config::ALPN,
            )?)),
            None => None,
        };
        let admin_tls = match &config.admin.tls {
            Some(tls) => Some(Arc::new(TlsListener::new(
                tls,
                crate::tls::ADMIN_HANDSHAKES,
                crate::tls::server_config::ADMIN_ALPN,
            )?)),
            None => None,
        };
        let metrics = Arc::new(Metrics::new());
        let store = open_store(&config.state, env, &metrics).map_err(BuildError::State)?;
        if !matches!(store, StateStore::Redis(_)) {
            metrics.state().no_policy();
        }
        Ok(ProxyState {
            gate: Arc::new(Gate::new(config.gate.schema_limits())),
            judged: JudgedPrefixes::new(config.gate.judged_prefix_bytes).map(Arc::new),
            snapshot: Arc::new(ArcSwap::from_pointee(Snapshot::build(
                config, env, None, &metrics,
            )?)),
            body_limits: BodyLimits {
                max_bytes: config.server.max_body_bytes,
                read_timeout: config.server.body_read_timeout,
            },
            websocket: SocketLimits::of(&config.server),
            sockets: Default::default(),
            in_flight: Arc::new(Semaphore::new(config.server.max_concurrent_requests)),
            judges: Arc::new(Semaphore::new(config.server.worker_threads())),
            max_in_flight: config.server.max_concurrent_requests,
            buffered: BufferBudget::new(config.server.max_buffered_bytes),
            ledger: config.ledger.enabled.then(|| {
                Arc::new(Ledger::new(
                    store.clone(),
                    ledger_settings(&config.ledger),
                    LedgerMeter::new(&metrics),
                ))
            }),
            uncounted_rates: Arc::new(UncountedRates::new(config.ledger.on_unavailable, &metrics)),
            store,
            audit,
            metrics,
            clock: SpendClock::system(),
            tls,
            admin_tls,
        })
    }

    /// The state with budgets' windows read from `clock` instead of the system's (a test
    /// steps it across a window's edge).
    pub fn with_clock(mut self, clock: SpendClock) -> ProxyState {
        self.clock = clock;
        self
    }

    /// A state for another worker thread: a snapshot of its own (so its upstream connections
    /// live on its runtime), and everything else shared.
    fn sibling(
        &self,
        config: &Config,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ProxyState, BuildError> {
        Ok(ProxyState {
            gate: self.gate.clone(),
            judged: self.judged.clone(),
            snapshot: Arc::new(ArcSwap::from_pointee(Snapshot::build(
                config,
                env,
                None,
                &self.metrics,
            )?)),
            body_limits: self.body_limits,
            websocket: self.websocket.clone(),
            sockets: Default::default(),
            in_flight: self.in_flight.clone(),
            judges: self.judges.clone(),
            max_in_flight: self.max_in_flight,
            buffered: self.buffered.clone(),
            store: self.store.clone(),
            audit: self.audit.clone(),
            ledger: self.ledger.clone(),
            uncounted_rates: self.uncounted_rates.clone(),
            metrics: self.metrics.clone(),
            clock: self.clock.clone(),
            tls: self.tls.clone(),
            admin_tls: self.admin_tls.clone(),
        })
    }

    /// One state per worker (at least one): the first built from `config`, the others its
    /// siblings.
    pub fn for_workers(
        config: &Config,
        env: &dyn Fn(&str) -> Option<String>,
        workers: usize,
    ) -> Result<Vec<ProxyState>, BuildError> {
        let first = Self::new(config, env)?;
        let mut states = Vec::with_capacity(workers.max(1));
        for _ in 1..workers {
            states.push(first.sibling(config, env)?);
        }
        states.insert(0, first);
        Ok(states)
    }

    /// The configuration in force now. A request loads it once and keeps it to its end.
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    /// The slot of the configuration in force, which reloads replace: for what reads it
    /// anew at each use off the request path (the admin listener's `GET /usage`).
    pub(crate) fn snapshot_slot(&self) -> Arc<ArcSwap<Snapshot>> {
        self.snapshot.clone()
    }

    /// Starts counting a request in the metrics, under the configuration in force.
    pub(crate) fn meter(&self) -> RequestMeter {
        self.snapshot.load().meters.start()
    }

    /// A handle that reloads this state (and, with [`Reloader::join`], its siblings').
    pub fn reloader(&self) -> Reloader {
        Reloader {
            slots: vec![self.snapshot.clone()],
            audit: self.audit.as_ref().map(Arc::downgrade),
            metrics: self.metrics.clone(),
            tls: [self.tls.clone(), self.admin_tls.clone()],
        }
    }

    /// Providers whose credential cannot be read, with what is missing: `(provider, reason)`.
    pub fn unconfigured(&self) -> Vec<(String, String)> {
        let snapshot = self.snapshot();
        let mut missing: Vec<(String, String)> = snapshot
            .providers()
            .filter_map(|p| match &p.credential {
                Credential::Missing { reason } => Some((p.name().to_owned(), reason.clone())),
                _ => None,
            })
            .collect();
        missing.sort_unstable();
        missing
    }
}

/// Swaps a new configuration into the snapshots of every worker of a process.
#[derive(Debug, Clone)]
pub struct Reloader {
    slots: Vec<Arc<ArcSwap<Snapshot>>>,
    /// Weak, so the audit log is flushed and closed when the workers are done with it, even
    /// while a reloader lives on.
    audit: Option<Weak<AuditLog>>,
    /// The metrics each new snapshot resolves its handles among.
    metrics: Arc<Metrics>,
    /// The TLS of the proxy's listener and of the admin listener, whose files a reload reads
    /// again.
    tls: [Option<Arc<TlsListener>>; 2],
}

impl Reloader {
    /// One reloader for several workers' states.
    pub fn join(states: &[ProxyState]) -> Reloader {
        Reloader {
            slots: states.iter().map(|state| state.snapshot.clone()).collect(),
            audit: states
                .first()
                .and_then(|state| state.audit.as_ref().map(Arc::downgrade)),
            metrics: states
                .first()
                .map_or_else(|| Arc::new(Metrics::new()), |state| state.metrics.clone()),
            tls: [
                states.first().and_then(|state| state.tls.clone()),
                states.first().and_then(|state| state.admin_tls.clone()),
            ],
        }
    }

    /// The metrics of the states it reloads.
    pub(crate) fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Builds `config` for every worker (keeping each one's unchanged providers) and, only if
    /// all of them build, swaps them in. Requests already started keep the snapshot they
    /// loaded. The audit log is reopened at the (possibly new) path; turning it on or off
    /// takes a restart. The listener's TLS files are read again: new handshakes use them, open
    /// connections keep theirs; turning TLS on or off takes a restart.
    pub fn reload(&self, config: &Config, env: &dyn Fn(&str) -> Option<String>) -> Result<(), BuildError> {
        let mut tls = Vec::new();
        for (listener, wanted, table) in [
            (&self.tls[0], &config.server.tls, "[server]"),
            (&self.tls[1], &config.admin.tls, "[admin]"),
        ] {
            match (listener, wanted) {
                (Some(listener), Some(wanted)) => tls.push((listener, listener.reread(wanted)?)),
                (None, None) => {}
                _ => tracing::warn!("{table}: turning TLS on or off takes a restart"),
            }
        }
        // One generation for every worker's snapshot: what was judged under the configuration
        // before is judged again.
        let generation = super::snapshot::next_generation();
        let built = self
            .slots
            .iter()
            .map(|slot| {
                Snapshot::build(config, env, Some(&slot.load()), &self.metrics).map(|mut snapshot| {
                    snapshot.generation = generation;
                    snapshot
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        for (slot, snapshot) in self.slots.iter().zip(built) {
            slot.store(Arc::new(snapshot));
        }
        for (listener, tls) in tls {
            listener.swap(tls);
        }
        self.reopen_audit(config);
        Ok(())
    }

    /// Reopens the audit log at the path `config` names (after logrotate moved the file).
    pub(crate) fn reopen_audit(&self, config: &Config) {
        match (&self.audit, &config.audit) {
            (Some(log), Some(audit)) => {
                if let Some(log) = log.upgrade() {
                    log.reopen(&audit.path);
                }
            }
            (None, None) => {}
            _ => tracing::warn!("turning the audit log on or off takes a restart"),
        }
    }
}

/// The state backend `[state]` names, a Redis password read through `env`, counting on
/// `metrics`. A Redis store connects on first use, so the proxy starts while Redis is down.
fn open_store(
    config: &StateConfig,
    env: &dyn Fn(&str) -> Option<String>,
    metrics: &Metrics,
) -> Result<StateStore, StoreError> {
    Ok(match config {
        StateConfig::Memory => StateStore::Memory(MemoryStore::default()),
        StateConfig::Redis {
            target,
            key_prefix,
            timeout,
            access,
        } => {
            let login = RedisLogin::read_for(target, access, env)?;
            StateStore::Redis(RedisStore::open(target, &login, key_prefix, *timeout)?)
        }
        StateConfig::Embedded {
            path,
            max_disk_bytes,
            max_memory_bytes,
        } => StateStore::Embedded(EmbeddedStore::open_with(
            path,
            *max_disk_bytes,
            *max_memory_bytes,
            metrics.state().clone(),
        )?),
    })
}

/// How the ledger behaves, from `[ledger]`.
fn ledger_settings(config: &LedgerConfig) -> LedgerSettings {
    LedgerSettings {
        store_items: config.store_items,
        carry_sessions: config.carry_sessions,
        retention: config.retention(),
        allow_unavailable: config.on_unavailable == OnUnavailable::Allow,
        max_chain: config.max_chain,
        write_timeout: LEDGER_WRITE_TIMEOUT,
    }
}

/// The longest a record's write may hold back the end of the answer it came from.
const LEDGER_WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);
