//! A provider at run time: its gate profile, its pooled upstream client and its credential.

use std::fmt;
use std::sync::Arc;

use http::uri::{Authority, InvalidUri, PathAndQuery, Scheme};
use http::{HeaderName, HeaderValue, Uri};

use super::build_error::BuildError;
use super::sigv4::{Scope, Signer};
use super::upstream_client::UpstreamClient;
use crate::config::{Auth, EncryptedContentScope, ProviderConfig};
use crate::gate::{EncryptedScope, ProviderProfile};

/// How requests to a provider are authenticated, with the secret already read.
#[derive(Clone)]
pub(crate) enum Credential {
    /// Forward the client's own `Authorization`.
    Passthrough,
    /// Send no credential.
    None,
    /// Send the provider's own key as a bearer token (the header value is marked sensitive).
    Bearer(HeaderValue),
    /// Send the provider's own key in a header of its own (the value is marked sensitive).
    Header {
        /// The header's name.
        name: HeaderName,
        /// The key.
        value: HeaderValue,
    },
    /// Sign every request with AWS SigV4.
    SigV4(Arc<Signer>),
    /// The provider has its own credential, but it cannot be read.
    Missing {
        /// What is missing, as a sentence naming the environment variable(s) to set.
        reason: String,
    },
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credential::Passthrough => f.write_str("Passthrough"),
            Credential::None => f.write_str("None"),
            Credential::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            Credential::Header { name, .. } => write!(f, "Header({name}: <redacted>)"),
            Credential::SigV4(signer) => write!(f, "SigV4({signer:?})"),
            Credential::Missing { reason } => write!(f, "Missing({reason})"),
        }
    }
}

impl Credential {
    /// Reads the secret `auth` names through `env` (the process environment in production).
    pub(crate) fn resolve(auth: &Auth, env: &dyn Fn(&str) -> Option<String>) -> Credential {
        match auth {
            Auth::Passthrough => Credential::Passthrough,
            Auth::None => Credential::None,
            Auth::BearerEnv(variable) => match key_value(env, variable, "Bearer ") {
                Some(value) => Credential::Bearer(value),
                None => unset(variable),
            },
            Auth::HeaderEnv { name, variable } => {
                let name = HeaderName::try_from(name.as_str());
                match (name, key_value(env, variable, "")) {
                    (Ok(name), Some(value)) => Credential::Header { name, value },
                    _ => unset(variable),
                }
            }
            Auth::AwsSigV4 { region, service } => {
                let scope = Scope {
                    region: region.clone(),
                    service: service.clone(),
                };
                match Signer::from_env(scope, env) {
                    Ok(signer) => Credential::SigV4(Arc::new(signer)),
                    Err(reason) => Credential::Missing { reason },
                }
            }
        }
    }

    /// Whether the provider authenticates with a credential of its own (so no client
    /// credential may pass).
    pub(crate) fn is_own(&self) -> bool {
        !matches!(self, Credential::Passthrough | Credential::None)
    }
}

/// The key in `variable`, trimmed, after `prefix`, as a sensitive header value; `None` when
/// it is unset, blank or not a valid header value.
fn key_value(env: &dyn Fn(&str) -> Option<String>, variable: &str, prefix: &str) -> Option<HeaderValue> {
    let key = env(variable).filter(|key| !key.trim().is_empty())?;
    let mut value = HeaderValue::try_from(format!("{prefix}{}", key.trim())).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// The credential of a provider whose key variable is unset.
fn unset(variable: &str) -> Credential {
    Credential::Missing {
        reason: format!("environment variable {variable} is not set"),
    }
}

/// One configured provider, ready to forward to.
#[derive(Debug)]
pub(crate) struct Provider {
    /// What the gate judges requests for this provider against.
    pub(crate) profile: ProviderProfile,
    /// `base_url`, parsed once, so a request's URL need not be parsed from text.
    base: reqwest::Url,
    /// The scheme, host and port of `base`, as a request's URI takes them.
    scheme: Scheme,
    authority: Authority,
    /// The provider's credential.
    pub(crate) credential: Credential,
    /// A pooled client used only for this provider.
    pub(crate) client: UpstreamClient,
    /// `connect_timeout`: also bounds the WebSocket mode's connection and handshake.
    pub(crate) connect_timeout: std::time::Duration,
    /// `stores_responses`: whether the provider keeps what it answers (unless told `store:
    /// false`).
    pub(crate) stores_responses: bool,
}

impl Provider {
    /// Builds the provider's client and reads its credential.
    pub(crate) fn new(
        name: &str,
        config: &ProviderConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Provider, BuildError> {
        let base_url = config.base_url.trim_end_matches('/');
        let base = reqwest::Url::parse(base_url).map_err(|e| BuildError::BaseUrl {
            provider: name.to_owned(),
            message: e.to_string(),
        })?;
        let (scheme, authority) = uri_parts(&base).map_err(|message| BuildError::BaseUrl {
            provider: name.to_owned(),
            message,
        })?;
        let client = UpstreamClient::new(config.connect_timeout, config.read_timeout).map_err(|source| {
            BuildError::Client {
                provider: name.to_owned(),
                source,
            }
        })?;
        Ok(Provider {
            profile: ProviderProfile::new(name, config.namespaces().iter().cloned())
                .with_encrypted_scope(match config.encrypted_content_scope {
                    EncryptedContentScope::Provider => EncryptedScope::Provider,
                    EncryptedContentScope::Model => EncryptedScope::Model,
                })
                .with_item_profile(config.item_profile.clone()),
            base,
            scheme,
            authority,
            credential: Credential::resolve(&config.auth, env),
            client,
            connect_timeout: config.connect_timeout,
            stores_responses: config.stores_responses,
        })
    }

    /// The provider's name.
    pub(crate) fn name(&self) -> &str {
        self.profile.name()
    }

    /// The upstream URL for `path` (the part after `/v1`) and an optional query: the same URL
    /// as [`crate::routing::upstream_url`] spells, built from the parsed base.
    pub(crate) fn url(&self, path: &str, query: Option<&str>) -> reqwest::Url {
        let mut url = self.base.clone();
        url.set_path(&crate::routing::upstream_url(self.base.path(), path, None));
        url.set_query(query.filter(|query| !query.is_empty()));
        url
    }

    /// The upstream URI for `path` (the part after `/v1`) and an optional query, without
    /// parsing the base again: the base's scheme and authority as parsed, and the joined path
    /// and query checked as a URI's path (the client's query is sent as it came).
    pub(crate) fn uri(&self, path: &str, query: Option<&str>) -> Result<Uri, InvalidUri> {
        let path_and_query = crate::routing::upstream_url(self.base.path(), path, query);
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(self.scheme.clone());
        parts.authority = Some(self.authority.clone());
        parts.path_and_query = Some(PathAndQuery::try_from(path_and_query)?);
        Ok(Uri::from_parts(parts).expect("a scheme, an authority and a path make a URI"))
    }
}

/// The scheme and authority (host, and port when not the scheme's default) of `base`, as a URI
/// holds them; `Err` when the base's path is not one a URI can carry.
fn uri_parts(base: &reqwest::Url) -> Result<(Scheme, Authority), String> {
    let scheme = Scheme::try_from(base.scheme()).map_err(|e| e.to_string())?;
    let host = base.host_str().ok_or("it has no host")?;
    let authority = match base.port() {
        Some(port) => Authority::try_from(format!("{host}:{port}")),
        None => Authority::try_from(host),
    }
    .map_err(|e| e.to_string())?;
    PathAndQuery::try_from(base.path()).map_err(|e| format!("its path: {e}"))?;
    Ok((scheme, authority))
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
            "[providers.a]\nbase_url = \"https://api.example.com/v1/\"\n[providers.b]\nbase_url = \"http://127.0.0.1:9000\"\n\
             [providers.c]\nbase_url = \"https://API.example.com:443/openai/v1\"\n\
             [providers.d]\nbase_url = \"http://[::1]:8080/v1\"\n",
        )
        .unwrap();
        for name in ["a", "b", "c", "d"] {
            let provider = Provider::new(name, &config.providers[name], &env).unwrap();
            let base_url = config.providers[name].base_url.trim_end_matches('/');
            for (path, query) in [
                ("/responses", None),
                ("/responses/compact", Some("x=1&y=a:b")),
                ("/models", Some("")),
                ("", None),
            ] {
                let text = crate::routing::upstream_url(base_url, path, query);
                let parsed = reqwest::Url::parse(&text).unwrap();
                assert_eq!(provider.url(path, query).as_str(), parsed.as_str());
                assert_eq!(provider.uri(path, query).unwrap().to_string(), parsed.as_str());
            }
        }
    }

    #[test]
    fn debug_output_never_shows_the_key() {
        let c = Credential::resolve(&Auth::BearerEnv("SET".into()), &env);
        assert!(!format!("{c:?}").contains("sk-test"));
        let c = Credential::resolve(&header_env("SET"), &env);
        assert!(!format!("{c:?}").contains("sk-test"));
    }

    fn header_env(variable: &str) -> Auth {
        Auth::HeaderEnv {
            name: "api-key".into(),
            variable: variable.into(),
        }
    }

    #[test]
    fn header_keys_are_read_into_their_header() {
        match Credential::resolve(&header_env("SET"), &env) {
            Credential::Header { name, value } => {
                assert_eq!((name.as_str(), value.to_str().unwrap()), ("api-key", "sk-test"));
                assert!(value.is_sensitive());
            }
            other => panic!("{other:?}"),
        }
        match Credential::resolve(&header_env("UNSET"), &env) {
            Credential::Missing { reason } => {
                assert_eq!(reason, "environment variable UNSET is not set")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn sigv4_reads_the_aws_variables() {
        let auth = Auth::AwsSigV4 {
            region: "us-east-1".into(),
            service: "bedrock".into(),
        };
        let keys = |name: &str| match name {
            "AWS_ACCESS_KEY_ID" => Some("AKID".to_owned()),
            "AWS_SECRET_ACCESS_KEY" => Some("secret".to_owned()),
            _ => None,
        };
        assert!(matches!(Credential::resolve(&auth, &keys), Credential::SigV4(_)));
        let secret_only = |name: &str| (name == "AWS_SECRET_ACCESS_KEY").then(|| "secret".to_owned());
        match Credential::resolve(&auth, &secret_only) {
            Credential::Missing { reason } => {
                assert_eq!(reason, "environment variable AWS_ACCESS_KEY_ID is not set")
            }
            other => panic!("{other:?}"),
        }
    }
}
