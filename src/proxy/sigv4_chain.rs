//! The AWS default credential chain for `aws_sigv4` providers (cargo feature `aws-chain`):
//! environment, shared config and credentials files (profiles, SSO), web identity, the ECS
//! container endpoint and EC2 instance metadata, as the AWS SDKs read them. Credentials are
//! cached and fetched again [`REFRESH_AHEAD`] before they expire.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwapOption;
use aws_config::default_provider::credentials::DefaultCredentialsChain;
use aws_config::Region;
use aws_credential_types::provider::ProvideCredentials;
use aws_credential_types::Credentials;
use tokio::sync::{Mutex, OnceCell};

/// How long before expiry cached credentials are fetched again.
pub const REFRESH_AHEAD: Duration = Duration::from_secs(5 * 60);

/// The longest one fetch from the chain may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// After a failed fetch, requests are answered with its reason for this long before the chain
/// is asked again, so a chain that cannot answer does not hold up every request.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);

/// A provider's credentials from the default chain, cached.
pub struct ChainCredentials {
    region: String,
    /// Built on first use (building it is async).
    chain: OnceCell<DefaultCredentialsChain>,
    /// The last credentials fetched.
    cached: ArcSwapOption<Credentials>,
    /// Held while fetching, so concurrent requests fetch once; holds the last failure.
    fetching: Mutex<Option<(SystemTime, String)>>,
}

impl ChainCredentials {
    /// The chain for `region` (where it asks STS and SSO); nothing is fetched yet.
    pub fn new(region: &str) -> ChainCredentials {
        ChainCredentials {
            region: region.to_owned(),
            chain: OnceCell::new(),
            cached: ArcSwapOption::empty(),
            fetching: Mutex::new(None),
        }
    }

    /// Credentials usable now: the cached ones until [`REFRESH_AHEAD`] before they expire,
    /// then fresh ones. When a fetch fails, cached ones not yet expired are still used. `Err`:
    /// why there are none, as a sentence.
    pub async fn credentials(&self) -> Result<Credentials, String> {
        if let Some(fresh) = self.fresh(SystemTime::now()) {
            return Ok(fresh);
        }
        let mut last_failure = self.fetching.lock().await;
        let now = SystemTime::now();
        if let Some(fresh) = self.fresh(now) {
            return Ok(fresh);
        }
        if let Some((at, reason)) = last_failure.as_ref() {
            if now
                .duration_since(*at)
                .is_ok_and(|since| since < RETRY_AFTER_FAILURE)
            {
                return self.cached_or(now, reason.clone());
            }
        }
        let chain = self
            .chain
            .get_or_init(|| async {
                DefaultCredentialsChain::builder()
                    .region(Region::new(self.region.clone()))
                    .build()
                    .await
            })
            .await;
        let fetched = match tokio::time::timeout(FETCH_TIMEOUT, chain.provide_credentials()).await {
            Ok(Ok(credentials)) => Ok(credentials),
            Ok(Err(error)) => Err(format!("no AWS credentials from the default chain: {error}")),
            Err(_) => Err(format!(
                "the AWS default credential chain did not answer within {}s",
                FETCH_TIMEOUT.as_secs()
            )),
        };
        match fetched {
            Ok(credentials) => {
                *last_failure = None;
                self.cached.store(Some(Arc::new(credentials.clone())));
                Ok(credentials)
            }
            Err(reason) => {
                tracing::warn!(%reason, "fetching AWS credentials failed");
                *last_failure = Some((now, reason.clone()));
                self.cached_or(now, reason)
            }
        }
    }

    /// The cached credentials while they have not expired, else `Err(reason)`.
    fn cached_or(&self, now: SystemTime, reason: String) -> Result<Credentials, String> {
        match self.cached.load_full() {
            Some(cached) if cached.expiry().is_none_or(|expiry| expiry > now) => Ok((*cached).clone()),
            _ => Err(reason),
        }
    }

    /// The cached credentials, when they do not expire within [`REFRESH_AHEAD`] of `now`.
    fn fresh(&self, now: SystemTime) -> Option<Credentials> {
        let cached = self.cached.load_full()?;
        let fresh = match cached.expiry() {
            None => true,
            Some(expiry) => expiry > now + REFRESH_AHEAD,
        };
        fresh.then(|| (*cached).clone())
    }
}
