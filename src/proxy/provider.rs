//! A provider at run time: its gate profile, its pooled upstream client and its credential.

use std::fmt;

use http::HeaderValue;

use super::build_error::BuildError;
use crate::config::{Auth, EncryptedContentScope, ProviderConfig};
use crate::gate::{EncryptedScope, ProviderProfile};

/// How requests to a provider are authenticated, with the secret already read.
#[derive(Clone)]
pub enum Credential {
    /// Forward the client's own `Authorization`.
    Passthrough,
    /// Send no credential.
    None,
    /// Send the provider's own key as a bearer token (the header value is marked sensitive).
    Bearer(HeaderValue),
    /// The provider has its own key, but the variable holding it is unset.
    Missing {
        /// The environment variable named in `proxy.toml`.
        variable: String,
    },
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credential::Passthrough => f.write_str("Passthrough"),
            Credential::None => f.write_str("None"),
            Credential::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            Credential::Missing { variable } => write!(f, "Missing({variable})"),
        }
    }
}

impl Credential {
    /// Reads the secret `auth` names through `env` (the process environment in production).
    pub fn resolve(auth: &Auth, env: &dyn Fn(&str) -> Option<String>) -> Credential {
        match auth {
            Auth::Passthrough => Credential::Passthrough,
            Auth::None => Credential::None,
            Auth::BearerEnv(variable) => {
                let bearer = env(variable)
                    .filter(|key| !key.trim().is_empty())
                    .and_then(|key| HeaderValue::try_from(format!("Bearer {}", key.trim())).ok());
                match bearer {
                    Some(mut value) => {
                        value.set_sensitive(true);
                        Credential::Bearer(value)
                    }
                    None => Credential::Missing {
                        variable: variable.clone(),
                    },
                }
            }
        }
    }

    /// Whether the provider authenticates with a key of its own (so no client key may pass).
    pub fn is_own(&self) -> bool {
        matches!(self, Credential::Bearer(_) | Credential::Missing { .. })
    }
}

/// One configured provider, ready to forward to.
#[derive(Debug)]
pub struct Provider {
    /// What the gate judges requests for this provider against.
    pub profile: ProviderProfile,
    /// `base_url` without a trailing slash.
    pub base_url: String,
    /// `base_url`, parsed once, so a request's URL need not be parsed from text.
    base: reqwest::Url,
    /// The provider's credential.
    pub credential: Credential,
    /// A pooled client used only for this provider.
    pub client: reqwest::Client,
}

impl Provider {
    /// Builds the provider's client and reads its credential.
    pub fn new(
        name: &str,
        config: &ProviderConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Provider, BuildError> {
        let base_url = config.base_url.trim_end_matches('/').to_owned();
        let base = reqwest::Url::parse(&base_url).map_err(|e| BuildError::BaseUrl {
            provider: name.to_owned(),
            message: e.to_string(),
        })?;
        let client = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(config.connect_timeout)
            .read_timeout(config.read_timeout)
            .pool_idle_timeout(std::time::Duration::from_secs(90))
            .tcp_nodelay(true)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|source| BuildError::Client {
                provider: name.to_owned(),
                source,
            })?;
        Ok(Provider {
            profile: ProviderProfile::new(name, config.namespaces().iter().cloned()).with_encrypted_scope(
                match config.encrypted_content_scope {
                    EncryptedContentScope::Provider => EncryptedScope::Provider,
                    EncryptedContentScope::Model => EncryptedScope::Model,
                },
            ),
            base_url,
            base,
            credential: Credential::resolve(&config.auth, env),
            client,
        })
    }

    /// The provider's name.
    pub fn name(&self) -> &str {
        self.profile.name()
    }

    /// The upstream URL for `path` (the part after `/v1`) and an optional query: the same URL
    /// as [`crate::routing::upstream_url`] spells, built from the parsed base.
    pub fn url(&self, path: &str, query: Option<&str>) -> reqwest::Url {
        let mut url = self.base.clone();
        url.set_path(&crate::routing::upstream_url(self.base.path(), path, None));
        url.set_query(query.filter(|query| !query.is_empty()));
        url
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "SET").then(|| "sk-test".to_owned())
    }

    #[test]
    fn bearer_keys_are_read_and_marked_sensitive() {
        match Credential::resolve(&Auth::BearerEnv("SET".into()), &env) {
            Credential::Bearer(v) => {
                assert_eq!(v, "Bearer sk-test");
                assert!(v.is_sensitive());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unset_or_blank_keys_are_missing() {
        let blank = |_: &str| Some("  ".to_owned());
        for c in [
            Credential::resolve(&Auth::BearerEnv("UNSET".into()), &env),
            Credential::resolve(&Auth::BearerEnv("X".into()), &blank),
        ] {
            assert!(matches!(c, Credential::Missing { .. }), "{c:?}");
        }
    }

    #[test]
    fn urls_from_the_parsed_base_spell_what_the_text_join_does() {
        let config = crate::config::Config::from_toml(
            "[providers.a]\nbase_url = \"https://api.example.com/v1/\"\n[providers.b]\nbase_url = \"http://127.0.0.1:9000\"\n",
        )
        .unwrap();
        for name in ["a", "b"] {
            let provider = Provider::new(name, &config.providers[name], &env).unwrap();
            for (path, query) in [
                ("/responses", None),
                ("/responses/compact", Some("x=1&y=a:b")),
                ("/models", Some("")),
                ("", None),
            ] {
                let text = crate::routing::upstream_url(&provider.base_url, path, query);
                assert_eq!(
                    provider.url(path, query).as_str(),
                    reqwest::Url::parse(&text).unwrap().as_str()
                );
            }
        }
    }

    #[test]
    fn debug_output_never_shows_the_key() {
        let c = Credential::resolve(&Auth::BearerEnv("SET".into()), &env);
        assert!(!format!("{c:?}").contains("sk-test"));
    }
}
