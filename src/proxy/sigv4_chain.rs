//! The AWS default credential chain for `aws_sigv4` providers (cargo feature `aws-chain`):
//! environment, shared config and credentials files (profiles, SSO), web identity, the ECS
//! container endpoint and EC2 instance metadata, as the AWS SDKs read them. Credentials are
//! cached and fetched again [`REFRESH_AHEAD`] before they expire.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwapOption;
use aws_config::default_provider::credentials::DefaultCredentialsChain;
use aws_config::Region;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_credential_types::Credentials;
use tokio::sync::{Mutex, OnceCell};

/// How long before expiry cached credentials are fetched again.
pub(super) const REFRESH_AHEAD: Duration = Duration::from_secs(5 * 60);

/// The longest one fetch from the chain may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// After a failed fetch, requests are answered with its reason for this long before the chain
/// is asked again, so a chain that cannot answer does not hold up every request.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);

/// A provider's credentials from the default chain, cached.
pub(super) struct ChainCredentials {
    region: String,
    /// The default chain, built on first use (building it is async).
    chain: OnceCell<SharedCredentialsProvider>,
    /// The last credentials fetched.
    cached: ArcSwapOption<Credentials>,
    /// Held while fetching, so concurrent requests fetch once; holds the last failure.
    fetching: Mutex<Option<(SystemTime, String)>>,
}

impl ChainCredentials {
    /// The chain for `region` (where it asks STS and SSO); nothing is fetched yet.
    pub(super) fn new(region: &str) -> ChainCredentials {
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
    pub(super) async fn credentials(&self) -> Result<Credentials, String> {
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
                let chain = DefaultCredentialsChain::builder()
                    .region(Region::new(self.region.clone()))
                    .build()
                    .await;
                SharedCredentialsProvider::new(chain)
            })
            .await;
        let fetched = match tokio::time::timeout(FETCH_TIMEOUT, chain.provide_credentials()).await {
            Ok(Ok(credentials)) => Ok(credentials),
            Ok(Err(error)) => Err(format!(
                "no AWS credentials from the default chain: {}",
                with_causes(&error)
            )),
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

/// An error and its causes, as one line.
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        line.push_str(": ");
        line.push_str(&next.to_string());
        cause = next.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex as StdMutex;

    use aws_credential_types::provider::{error::CredentialsError, future};

    use super::*;

    /// A chain that answers from a script: each fetch takes the next answer.
    #[derive(Debug, Default)]
    struct Scripted {
        answers: StdMutex<Vec<Result<Credentials, String>>>,
        fetches: AtomicUsize,
    }

    impl ProvideCredentials for Scripted {
        fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            self.fetches.fetch_add(1, Ordering::SeqCst);
            let answer = self.answers.lock().unwrap().remove(0);
            future::ProvideCredentials::ready(answer.map_err(CredentialsError::not_loaded))
        }
    }

    fn expiring_in(key: &str, from_now: Duration) -> Result<Credentials, String> {
        Ok(Credentials::new(
            key,
            "secret",
            None,
            Some(SystemTime::now() + from_now),
            "test",
        ))
    }

    fn chain(answers: Vec<Result<Credentials, String>>) -> (ChainCredentials, Arc<Scripted>) {
        let scripted = Arc::new(Scripted {
            answers: StdMutex::new(answers),
            fetches: AtomicUsize::new(0),
        });
        let credentials = ChainCredentials::new("us-east-1");
        credentials
            .chain
            .set(SharedCredentialsProvider::new(ScriptedHandle(scripted.clone())))
            .unwrap();
        (credentials, scripted)
    }

    /// Lets the test keep counting the fetches of the chain it hands over.
    #[derive(Debug)]
    struct ScriptedHandle(Arc<Scripted>);

    impl ProvideCredentials for ScriptedHandle {
        fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            self.0.provide_credentials()
        }
    }

    #[tokio::test]
    async fn credentials_are_cached_until_shortly_before_they_expire() {
        let (credentials, scripted) = chain(vec![
            expiring_in("AKID1", Duration::from_secs(3600)),
            expiring_in("AKID2", Duration::from_secs(60)),
            expiring_in("AKID3", Duration::from_secs(3600)),
        ]);
        assert_eq!(credentials.credentials().await.unwrap().access_key_id(), "AKID1");
        assert_eq!(credentials.credentials().await.unwrap().access_key_id(), "AKID1");
        assert_eq!(scripted.fetches.load(Ordering::SeqCst), 1);
        // Credentials expiring within REFRESH_AHEAD are used once, then fetched again.
        credentials.cached.store(None);
        assert_eq!(credentials.credentials().await.unwrap().access_key_id(), "AKID2");
        assert_eq!(credentials.credentials().await.unwrap().access_key_id(), "AKID3");
        assert_eq!(credentials.credentials().await.unwrap().access_key_id(), "AKID3");
        assert_eq!(scripted.fetches.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_failed_fetch_keeps_unexpired_credentials_and_is_not_repeated_at_once() {
        let (credentials, scripted) = chain(vec![
            expiring_in("AKID1", Duration::from_secs(120)),
            Err("no profile".into()),
        ]);
        assert_eq!(credentials.credentials().await.unwrap().access_key_id(), "AKID1");
        // Due for a refresh, which fails: the cached credentials still serve.
        assert_eq!(credentials.credentials().await.unwrap().access_key_id(), "AKID1");
        assert_eq!(credentials.credentials().await.unwrap().access_key_id(), "AKID1");
        assert_eq!(scripted.fetches.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn no_credentials_at_all_is_an_error_with_the_chains_reason() {
        let (credentials, scripted) = chain(vec![Err("no profile, no IMDS".into())]);
        let error = credentials.credentials().await.unwrap_err();
        assert!(
            error.contains("no AWS credentials from the default chain"),
            "{error}"
        );
        let again = credentials.credentials().await.unwrap_err();
        assert_eq!(again, error);
        assert_eq!(scripted.fetches.load(Ordering::SeqCst), 1, "asked again at once");
    }
}
