//! Everything a request needs, built once from the configuration.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::Semaphore;

use super::body::BodyLimits;
use super::budget::BufferBudget;
use super::provider::{Credential, Provider};
use crate::config::Config;
use crate::error::ApiError;
use crate::gate::{Gate, Policy};
use crate::routing::Router;

/// The proxy's shared state: the gate, the router and the providers.
///
/// The gate (with its schema cache) is held apart from the configured parts, so a later
/// configuration reload can replace providers and routes without dropping compiled schemas.
#[derive(Debug)]
pub struct ProxyState {
    /// The gate and its compiled tool schemas.
    pub gate: Arc<Gate>,
    /// The actions and limits every request is judged with.
    pub policy: Policy,
    /// Path and model routing.
    pub router: Router,
    /// Providers by name.
    pub providers: HashMap<String, Provider>,
    /// How request bodies are read.
    pub body_limits: BodyLimits,
    /// Permits for requests in flight.
    pub in_flight: Arc<Semaphore>,
    /// Permits for judgments on the blocking pool, shared by all workers (one per worker).
    pub judges: Arc<Semaphore>,
    /// The number of permits `in_flight` started with.
    pub max_in_flight: usize,
    /// `max_buffered_bytes`: the request bodies held at once, shared by every worker.
    pub buffered: Arc<BufferBudget>,
}

/// Why the proxy could not be built from its configuration.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A provider's upstream client could not be built.
    #[error("provider `{provider}`: the upstream client could not be built: {source}")]
    Client {
        /// The provider.
        provider: String,
        /// What the client builder said.
        source: reqwest::Error,
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
}

impl ProxyState {
    /// Builds the state, reading provider keys through `env`.
    pub fn new(config: &Config, env: &dyn Fn(&str) -> Option<String>) -> Result<ProxyState, BuildError> {
        let gate = Arc::new(Gate::new(config.gate.schema_limits()));
        let in_flight = Arc::new(Semaphore::new(config.server.max_concurrent_requests));
        let judges = Arc::new(Semaphore::new(config.server.worker_threads()));
        let buffered = BufferBudget::new(config.server.max_buffered_bytes);
        Self::build(config, env, gate, in_flight, judges, buffered)
    }

    /// A state for another worker thread: providers of its own (so its upstream connections
    /// live on its runtime), the same gate (one schema cache, one memory of passed calls) and
    /// the same in-flight limit and body budget.
    fn sibling(
        &self,
        config: &Config,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ProxyState, BuildError> {
        let (gate, in_flight) = (self.gate.clone(), self.in_flight.clone());
        let (judges, buffered) = (self.judges.clone(), self.buffered.clone());
        Self::build(config, env, gate, in_flight, judges, buffered)
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

    fn build(
        config: &Config,
        env: &dyn Fn(&str) -> Option<String>,
        gate: Arc<Gate>,
        in_flight: Arc<Semaphore>,
        judges: Arc<Semaphore>,
        buffered: Arc<BufferBudget>,
    ) -> Result<ProxyState, BuildError> {
        let mut providers = HashMap::with_capacity(config.providers.len());
        for (name, provider) in &config.providers {
            let built = Provider::new(name, provider, env)?;
            providers.insert(name.clone(), built);
        }
        Ok(ProxyState {
            gate,
            policy: config.gate.policy(),
            router: Router::new(config)?,
            providers,
            body_limits: BodyLimits {
                max_bytes: config.server.max_body_bytes,
                read_timeout: config.server.body_read_timeout,
            },
            in_flight,
            judges,
            max_in_flight: config.server.max_concurrent_requests,
            buffered,
        })
    }

    /// The provider called `name` (a name the router chose, so always configured).
    pub fn provider(&self, name: &str) -> Result<&Provider, ApiError> {
        self.providers
            .get(name)
            .ok_or_else(|| ApiError::UnknownProvider(format!("provider `{name}` is not configured")))
    }

    /// Providers whose key variable is unset, with that variable: `(provider, variable)`.
    pub fn unconfigured(&self) -> impl Iterator<Item = (&str, &str)> {
        let mut missing: Vec<(&str, &str)> = self
            .providers
            .values()
            .filter_map(|p| match &p.credential {
                Credential::Missing { variable } => Some((p.name(), variable.as_str())),
                _ => None,
            })
            .collect();
        missing.sort_unstable();
        missing.into_iter()
    }
}
