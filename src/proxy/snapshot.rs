//! The part of the proxy a configuration reload replaces: routes, providers, teams and the
//! gate policy, swapped whole so a request sees one configuration from start to end.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::build_error::BuildError;
use super::provider::Provider;
use super::teams::{Team, Teams};
use crate::config::{Config, ProviderConfig, UnknownOwner, UsageConfig};
use crate::error::ApiError;
use crate::gate::Policy;
use crate::metrics::{Meters, Metrics};
use crate::routing::Router;
use crate::spend::Prices;

/// One configuration, ready to serve.
#[derive(Debug)]
pub(crate) struct Snapshot {
    /// Path and model routing.
    pub(crate) router: Router,
    /// Providers by name.
    providers: HashMap<String, Arc<Provider>>,
    /// The configuration each provider was built from, so a reload keeps the unchanged ones
    /// (and their upstream connection pools).
    provider_configs: BTreeMap<String, ProviderConfig>,
    /// The policy of anonymous clients (no teams configured).
    pub(crate) policy: Policy,
    /// The teams and their keys.
    pub(crate) teams: Teams,
    /// The metric handles of these providers and teams.
    pub(crate) meters: Arc<Meters>,
    /// `[ledger] unknown_owner`: whether a team reaches an object the ledger holds no team for.
    pub(crate) unknown_owner: UnknownOwner,
    /// `[prices]`, compiled (docs/budgets.md#units).
    pub(crate) prices: Arc<Prices>,
    /// `[usage]`: what a budget reserves, and whether it refuses.
    pub(crate) usage: UsageConfig,
    /// Which configuration of the process this is (0 at start, one more per reload, the same
    /// in every worker): inputs judged under another are judged again.
    pub(crate) generation: u64,
}

/// The generation of the next reload's snapshots.
pub(crate) fn next_generation() -> u64 {
    static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Snapshot {
    /// Builds the snapshot of `config`, reading provider keys through `env`, reusing the
    /// providers of `previous` whose configuration is unchanged, and resolving its metric
    /// handles among `metrics`.
    pub(crate) fn build(
        config: &Config,
        env: &dyn Fn(&str) -> Option<String>,
        previous: Option<&Snapshot>,
        metrics: &Arc<Metrics>,
    ) -> Result<Snapshot, BuildError> {
        let mut providers = HashMap::with_capacity(config.providers.len());
        for (name, provider) in &config.providers {
            let kept = previous
                .filter(|previous| previous.provider_configs.get(name) == Some(provider))
                .and_then(|previous| previous.providers.get(name));
            let built = match kept {
                Some(kept) => kept.clone(),
                None => Arc::new(Provider::new(name, provider, env)?),
            };
            providers.insert(name.clone(), built);
        }
        let policy = config.gate.policy();
        Ok(Snapshot {
            router: Router::new(config)?,
            providers,
            provider_configs: config.providers.clone(),
            teams: Teams::new(&config.teams, &policy)?,
            policy,
            meters: Arc::new(Meters::resolve(metrics, config)),
            unknown_owner: config.ledger.unknown_owner,
            prices: Arc::new(Prices::new(
                config.prices.iter().map(|price| (&price.model, price.price())),
            )),
            usage: config.usage,
            generation: 0,
        })
    }

    /// The provider called `name` (a name the router chose, so always configured).
    pub(crate) fn provider(&self, name: &str) -> Result<&Arc<Provider>, ApiError> {
        self.providers
            .get(name)
            .ok_or_else(|| ApiError::UnknownProvider(format!("provider `{name}` is not configured")))
    }

    /// Every provider.
    pub(crate) fn providers(&self) -> impl Iterator<Item = &Arc<Provider>> {
        self.providers.values()
    }

    /// The policy a request of `team` (or an anonymous one) is judged with.
    pub(crate) fn policy_of<'s>(&'s self, team: Option<&'s Team>) -> &'s Policy {
        team.map_or(&self.policy, |team| &team.policy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(openai_timeout_ms: u64) -> Config {
        Config::from_toml(&format!(
            "[providers.openai]\nbase_url = \"https://api.openai.com/v1\"\nconnect_timeout_ms = {openai_timeout_ms}\n\
             [providers.bedrock]\nbase_url = \"https://bedrock.example/v1\"\n"
        ))
        .unwrap()
    }

    #[test]
    fn a_rebuild_keeps_the_providers_whose_configuration_is_unchanged() {
        let env = |_: &str| None;
        let metrics = Arc::new(Metrics::new());
        let first = Snapshot::build(&config(1000), &env, None, &metrics).unwrap();
        let second = Snapshot::build(&config(2000), &env, Some(&first), &metrics).unwrap();
        let same = |name: &str| Arc::ptr_eq(first.provider(name).unwrap(), second.provider(name).unwrap());
        assert!(same("bedrock"), "an unchanged provider keeps its client and pool");
        assert!(!same("openai"), "a changed provider is built anew");
        let fresh = Snapshot::build(&config(2000), &env, None, &metrics).unwrap();
        assert!(!Arc::ptr_eq(
            fresh.provider("bedrock").unwrap(),
            second.provider("bedrock").unwrap()
        ));
    }
}
