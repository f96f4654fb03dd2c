//! Request routing: which provider a request goes to, whether it is gated,
//! and the upstream URL.
//!
//! A request path is read as `[/{provider}][/v1]{upstream_path}`:
//!
//! - A first segment naming a configured provider is a provider prefix; that
//!   provider gets the request whatever its model. A path shaped
//!   `/{x}/v1[/...]` where `x` is neither `v1` nor a provider is an unknown
//!   provider.
//! - One `/v1` after the optional prefix is dropped; the rest is the upstream
//!   path, appended to the provider's `base_url`. A path without `/v1`
//!   (`/responses`, `/models`) is forwarded as it is.
//! - A path whose upstream path ends in `/responses`, `/responses/compact` or
//!   `/responses/input_tokens` is gated, its items read from `input`; one
//!   ending in `/conversations` or `/conversations/{id}/items` is gated, its
//!   items read from `items` (one trailing `/` tolerated, ASCII case ignored).
//!   Matching the tail, and ignoring case, means no spelling of such a path
//!   that an upstream might still serve reaches it ungated.
//! - Without a prefix, a gated request goes to the first `[[routes]]` entry
//!   whose glob matches its model, else to `default_provider`; an ungated one
//!   goes to `default_provider`.
//! - With a prefix, a gated request whose model matches routes that all name
//!   other providers is refused ([`RouteError::RouteConflict`]): it fails
//!   closed rather than leave for a provider its model was not meant for.
//! - Except when the prefix is the *own path* of one of those providers: the
//!   segment its `base_url` has before `/v1` (`openai` for
//!   `https://bedrock-mantle.us-east-1.api.aws/openai/v1`). A client given
//!   only a host (Bedrock Mantle's SDKs) builds that path itself, so the
//!   request goes to the model's provider, at that path; the provider the
//!   prefix names by coincidence gets nothing. Such a prefix decides nothing
//!   until the model is known ([`Router::chosen_by_path`]).
//! - A `/{x}/v1/...` prefix that names no provider but is the own path of
//!   one or more (a configuration without a provider called `openai`) goes
//!   to the first of the model's routed providers at that path; for a model
//!   no route matches, to `default_provider` if it is at that path; without
//!   a model, to the one provider at that path. Else it is an unknown
//!   provider.
//!
//! Paths that could be read differently upstream are rejected before any of
//! this: see [`RouteError::InvalidPath`].

use std::collections::{BTreeMap, BTreeSet};

use globset::GlobSet;

use crate::config::Config;
use crate::gate::ItemsAt;

/// The path segment that marks the API version, dropped before forwarding.
const API_VERSION: &str = "v1";

/// Routing decisions for one configuration.
#[derive(Debug, Clone)]
pub(crate) struct Router {
    /// Names of the configured providers.
    providers: BTreeSet<String>,
    /// The `[[routes]]` globs, in file order.
    model_globs: GlobSet,
    /// The provider of each glob in `model_globs`, same order.
    model_providers: Vec<String>,
    /// `default_provider`.
    default_provider: Option<String>,
    /// Each provider's own path, where its `base_url` has one: see [`own_path`].
    own_paths: BTreeMap<String, String>,
}

/// What a request path says about routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PathRoute<'p> {
    /// The path's first segment when it names a provider (`/{provider}/...`),
    /// or when it is the own path of one and `/v1` follows it; else `None`.
    pub(crate) prefix: Option<&'p str>,
    /// Which body member holds the items to gate; `None` for an ungated path.
    pub(crate) items: Option<ItemsAt>,
    /// The path to append to the provider's `base_url`: what follows the
    /// prefix and `/v1`. It starts with `/`, or is empty when the path ends
    /// at `/v1` or at the prefix.
    pub(crate) upstream_path: &'p str,
}

impl PathRoute<'_> {
    /// Whether the request's items are gated.
    pub(crate) fn is_gated(&self) -> bool {
        self.items.is_some()
    }
}

/// Why a request cannot be routed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RouteError {
    /// The path does not start with `/`, or it contains a `.` or `..`
    /// segment, an empty segment (`//`), a backslash, a malformed `%` escape,
    /// or a `%` escape of `/`, `\` or an unreserved character (letters,
    /// digits, `-`, `.`, `_`, `~`), which upstreams may decode into a
    /// different path. Such a path is never forwarded; answer 400.
    #[error("invalid request path: {0}")]
    InvalidPath(&'static str),
    /// The path has the shape `/{name}/v1/...` but no provider is called
    /// `name`; answer 404 `unknown_provider`.
    #[error("unknown provider `{0}` in the request path")]
    UnknownProvider(String),
    /// No path prefix, no route for the model and no `default_provider`;
    /// answer 404 `unknown_provider`.
    #[error("{}", no_provider_message(.model.as_deref()))]
    NoProvider {
        /// The model that no route matched, when the request had one.
        model: Option<String>,
    },
    /// The path names a provider, but the model matches routes and none of
    /// them names that provider (nor has the prefix as its own path); answer
    /// 400 `route_conflict`. The message says how to reach the model's
    /// providers: without a prefix, or with one naming them.
    #[error(
        "model `{model}` is routed to {routed} by [[routes]], not to `{provider}` named by the \
         path; send it without a prefix, or with {prefixes}",
        routed = listed(routed),
        prefixes = prefixes(routed)
    )]
    RouteConflict {
        /// The request's model.
        model: String,
        /// The provider the path prefix names.
        provider: String,
        /// The providers of the routes the model matches, in route order, each once.
        routed: Vec<String>,
    },
}

/// `` `a` `` or `` `a`, `b` ``: provider names as a message lists them.
fn listed(names: &[String]) -> String {
    let names: Vec<String> = names.iter().map(|name| format!("`{name}`")).collect();
    names.join(", ")
}

/// `` `/a` `` or `` `/a` or `/b` ``: the path prefixes that reach the providers `names`.
fn prefixes(names: &[String]) -> String {
    let names: Vec<String> = names.iter().map(|name| format!("`/{name}`")).collect();
    names.join(" or ")
}

fn no_provider_message(model: Option<&str>) -> String {
    match model {
        Some(model) => {
            format!("no route matches model `{model}` and no default_provider is configured")
        }
        None => "no provider prefix in the path and no default_provider is configured".into(),
    }
}

impl Router {
    /// Builds the router of a configuration. Fails only if the route globs
    /// together are too large to compile.
    pub(crate) fn new(config: &Config) -> Result<Router, globset::Error> {
        Ok(Router {
            providers: config.providers.keys().cloned().collect(),
            model_globs: crate::gate::glob_set(config.routes.iter().map(|route| &route.model))?,
            model_providers: config.routes.iter().map(|r| r.provider.clone()).collect(),
            default_provider: config.default_provider.clone(),
            own_paths: config
                .providers
                .iter()
                .filter_map(|(name, provider)| Some((name.clone(), own_path(&provider.base_url)?)))
                .collect(),
        })
    }

    /// The provider a classified path's prefix chooses on its own, before any body is read:
    /// the provider it names, unless the path is gated and the prefix is also another
    /// provider's own path (then the model chooses; see the [module](self) doc). `None`
    /// without a prefix or with one that names no provider. Checks made on the path's
    /// provider before the body is read are made on this one only.
    pub(crate) fn chosen_by_path<'p>(&self, route: &PathRoute<'p>) -> Option<&'p str> {
        let prefix = route.prefix.filter(|prefix| self.providers.contains(*prefix))?;
        let own_path_of_another = self
            .own_paths
            .iter()
            .any(|(name, own)| own == prefix && name != prefix);
        (!(route.is_gated() && own_path_of_another)).then_some(prefix)
    }

    /// Classifies a request path (without its query string): provider
    /// prefix, gating, and upstream path.
    pub(crate) fn classify<'p>(&self, path: &'p str) -> Result<PathRoute<'p>, RouteError> {
        check_path(path)?;
        let (first, after_first) = split_first_segment(path);
        let (prefix, rest) = if first == API_VERSION {
            (None, path)
        } else if self.providers.contains(first) {
            (Some(first), after_first)
        } else if strip_api_version(after_first).is_some() {
            if !self.own_paths.values().any(|own| own == first) {
                return Err(RouteError::UnknownProvider(first.to_owned()));
            }
            (Some(first), after_first)
        } else {
            (None, path)
        };
        let upstream_path = strip_api_version(rest).unwrap_or(rest);
        Ok(PathRoute {
            prefix,
            items: gated_items(upstream_path),
            upstream_path,
        })
    }

    /// Chooses the provider for a classified request (`model` is the request
    /// body's, consulted only for gated requests): its path prefix, unless
    /// the model matches routes and none of them names that provider (then the
    /// first of them whose own path the prefix is, else a conflict); without a
    /// prefix, the first route whose glob matches `model`, else
    /// `default_provider`.
    pub(crate) fn choose(&self, route: &PathRoute<'_>, model: Option<&str>) -> Result<&str, RouteError> {
        self.choose_by(route.prefix, model.filter(|_| route.is_gated()))
    }

    /// [`Self::choose`] from a classified path's provider `prefix` alone, with `model` already
    /// known to count (the request is gated): for callers that cannot keep the borrowed
    /// [`PathRoute`], such as a judgment moved to another thread.
    pub(crate) fn choose_by(&self, prefix: Option<&str>, model: Option<&str>) -> Result<&str, RouteError> {
        if let Some(prefix) = prefix {
            let Some(provider) = self.providers.get(prefix).map(String::as_str) else {
                return self.by_own_path(prefix, model);
            };
            return match model {
                Some(model) => self.by_prefix(provider, model),
                None => Ok(provider),
            };
        }
        if let Some(model) = model {
            if let Some(&index) = self.model_globs.matches(model).first() {
                return Ok(&self.model_providers[index]);
            }
        }
        self.default_provider
            .as_deref()
            .ok_or_else(|| RouteError::NoProvider {
                model: model.map(str::to_owned),
            })
    }
}

impl Router {
    /// The provider of a `model` whose path prefix names `provider`: that provider when one of
    /// the model's routes names it or the model matches no route; else the first of the
    /// model's providers whose own path the prefix is; else a conflict.
    fn by_prefix<'a>(&'a self, provider: &'a str, model: &str) -> Result<&'a str, RouteError> {
        let mut routed: Vec<String> = Vec::new();
        let mut at_own_path = None;
        for index in self.model_globs.matches(model) {
            let name = self.model_providers[index].as_str();
            if name == provider {
                return Ok(provider);
            }
            if at_own_path.is_none() && self.own_paths.get(name).is_some_and(|own| own == provider) {
                at_own_path = Some(name);
            }
            if !routed.iter().any(|known| known == name) {
                routed.push(name.to_owned());
            }
        }
        if let Some(name) = at_own_path {
            return Ok(name);
        }
        if routed.is_empty() {
            return Ok(provider);
        }
        Err(RouteError::RouteConflict {
            model: model.to_owned(),
            provider: provider.to_owned(),
            routed,
        })
    }
}

impl Router {
    /// The provider of a request whose prefix names no provider: the first of the `model`'s
    /// routed providers whose own path it is; for a model no route matches (or none),
    /// `default_provider` when the prefix is its own path, else (without a model) the one
    /// provider whose own path it is; else an unknown provider.
    fn by_own_path(&self, prefix: &str, model: Option<&str>) -> Result<&str, RouteError> {
        let unknown = || RouteError::UnknownProvider(prefix.to_owned());
        let at_prefix = |name: &str| self.own_paths.get(name).is_some_and(|own| own == prefix);
        if let Some(model) = model {
            let routed = self.model_globs.matches(model);
            if !routed.is_empty() {
                return routed
                    .into_iter()
                    .map(|index| self.model_providers[index].as_str())
                    .find(|name| at_prefix(name))
                    .ok_or_else(unknown);
            }
        }
        // A model no route matches goes where it would without a prefix.
        if let Some(default) = self.default_provider.as_deref().filter(|name| at_prefix(name)) {
            return Ok(default);
        }
        if model.is_some() {
            return Err(unknown());
        }
        let mut at = self
            .own_paths
            .iter()
            .filter(|(_, own)| *own == prefix)
            .map(|(name, _)| name.as_str());
        match (at.next(), at.next()) {
            (Some(only), None) => Ok(only),
            _ => Err(unknown()),
        }
    }
}

/// A provider's own path: the last segment of its `base_url`'s path before a final `/v1`
/// (`openai` for `https://bedrock-mantle.us-east-1.api.aws/openai/v1`); `None` when the path
/// does not end in `/v1` or has nothing before it.
fn own_path(base_url: &str) -> Option<String> {
    let url = reqwest::Url::parse(base_url).ok()?;
    let mut segments: Vec<&str> = url.path_segments()?.collect();
    if segments.last() == Some(&"") {
        segments.pop();
    }
    let [.., own, version] = segments.as_slice() else {
        return None;
    };
    (*version == API_VERSION && !own.is_empty()).then(|| (*own).to_owned())
}

/// Joins a provider's `base_url`, an upstream path from [`PathRoute`] and the
/// request's query string, with exactly one `/` at the joint. An empty query
/// is dropped.
pub(crate) fn upstream_url(base_url: &str, upstream_path: &str, query: Option<&str>) -> String {
    let base = if upstream_path.starts_with('/') {
        base_url.strip_suffix('/').unwrap_or(base_url)
    } else {
        base_url
    };
    let query = query.filter(|query| !query.is_empty());
    let mut url =
        String::with_capacity(base.len() + upstream_path.len() + query.map_or(0, |query| query.len() + 1));
    url.push_str(base);
    url.push_str(upstream_path);
    if let Some(query) = query {
        url.push('?');
        url.push_str(query);
    }
    url
}

/// Characters a request path may hold besides letters and digits: the unreserved and
/// sub-delimiter characters of RFC 3986, less `;`, plus `:`, `@` and `/`.
///
/// `%` is refused outright: an escape can decode upstream into a different path than the one
/// routed here (`/v1/respons%65s`). `;` is refused because some servers drop `;...` path
/// parameters before routing (`/v1/responses;x`). OpenAI-compatible API paths need neither.
const PATH_PUNCTUATION: &[u8] = b"-._~!$&'()*+,=:@/";

/// Refuses paths that could mean something else upstream than what was routed and gated here.
fn check_path(path: &str) -> Result<(), RouteError> {
    let Some(segments) = path.strip_prefix('/') else {
        return Err(RouteError::InvalidPath("it does not start with `/`"));
    };
    if !path
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || PATH_PUNCTUATION.contains(&b))
    {
        return Err(RouteError::InvalidPath(
            "it may hold only letters, digits and -._~!$&'()*+,=:@/ (no `%` escapes, no `;`)",
        ));
    }
    let mut segments = segments.split('/').peekable();
    while let Some(segment) = segments.next() {
        match segment {
            "." | ".." => return Err(RouteError::InvalidPath("it contains a `.` or `..` segment")),
            "" if segments.peek().is_some() => {
                return Err(RouteError::InvalidPath("it contains an empty segment (`//`)"))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Splits `/first/rest` into `("first", "/rest")`, and `/first` into
/// `("first", "")`.
fn split_first_segment(path: &str) -> (&str, &str) {
    let path = path.strip_prefix('/').unwrap_or(path);
    match path.find('/') {
        Some(end) => (&path[..end], &path[end..]),
        None => (path, ""),
    }
}

/// Drops a leading `/v1` segment: `/v1/x` gives `/x`, `/v1` gives ``.
fn strip_api_version(path: &str) -> Option<&str> {
    let rest = path.strip_prefix('/')?.strip_prefix(API_VERSION)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// Which member holds the items of an upstream path that is gated: `input` for one ending in
/// `/responses`, `/responses/compact` or `/responses/input_tokens`; `items` for one ending in
/// `/conversations` or `/conversations/{id}/items`.
fn gated_items(path: &str) -> Option<ItemsAt> {
    let path = path.strip_suffix('/').unwrap_or(path);
    let responses = strip_suffix_ignore_case(path, "/compact")
        .or_else(|| strip_suffix_ignore_case(path, "/input_tokens"))
        .unwrap_or(path);
    if strip_suffix_ignore_case(responses, "/responses").is_some() {
        return Some(ItemsAt::Input);
    }
    if strip_suffix_ignore_case(path, "/conversations").is_some() {
        return Some(ItemsAt::Items);
    }
    let conversation = strip_suffix_ignore_case(path, "/items")?;
    let (parent, id) = conversation.rsplit_once('/')?;
    let conversations = !id.is_empty() && strip_suffix_ignore_case(parent, "/conversations").is_some();
    conversations.then_some(ItemsAt::AddedItems)
}

fn strip_suffix_ignore_case<'a>(text: &'a str, suffix: &str) -> Option<&'a str> {
    let start = text.len().checked_sub(suffix.len())?;
    let tail = text.get(start..)?;
    tail.eq_ignore_ascii_case(suffix).then(|| &text[..start])
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
default_provider = "openai"

[providers.openai]
base_url = "https://api.openai.com/v1"

[providers.bedrock]
base_url = "https://bedrock-mantle.us-east-1.api.aws/v1"

[providers.bedrock-openai]
base_url = "https://bedrock-mantle.us-east-1.api.aws/openai/v1"

[providers.models]
base_url = "http://127.0.0.1:9000"

[[routes]]
model = "openai.gpt-5*"
provider = "bedrock-openai"

[[routes]]
model = "openai.*"
provider = "bedrock"

[[routes]]
model = "gpt-?o"
provider = "bedrock"

[[routes]]
model = "gpt-*"
provider = "openai"

[[routes]]
model = "vendor/*"
provider = "bedrock"
"#;

    fn router() -> Router {
        Router::new(&Config::from_toml(CONFIG).unwrap()).unwrap()
    }

    fn router_without_default() -> Router {
        let text = CONFIG.replace("default_provider = \"openai\"", "");
        Router::new(&Config::from_toml(&text).unwrap()).unwrap()
    }

    /// A route whose items, when `gated`, are in `input`.
    fn route(prefix: Option<&'static str>, gated: bool, upstream: &'static str) -> PathRoute<'static> {
        PathRoute {
            prefix,
            items: gated.then_some(ItemsAt::Input),
            upstream_path: upstream,
        }
    }

    /// Where `path` says the items are, if it is gated.
    fn items_of(path: &str) -> Option<ItemsAt> {
        router().classify(path).unwrap().items
    }

    /// Classifies `path` and chooses a provider for it.
    fn provider_for(router: &Router, path: &str, model: Option<&str>) -> Result<String, RouteError> {
        let route = router.classify(path)?;
        router.choose(&route, model).map(str::to_owned)
    }

    #[test]
    fn responses_paths_are_gated() {
        let router = router();
        assert_eq!(
            router.classify("/v1/responses"),
            Ok(route(None, true, "/responses"))
        );
        assert_eq!(router.classify("/responses"), Ok(route(None, true, "/responses")));
        assert_eq!(
            router.classify("/bedrock/v1/responses"),
            Ok(route(Some("bedrock"), true, "/responses"))
        );
    }

    #[test]
    fn compact_paths_are_gated() {
        let router = router();
        assert_eq!(
            router.classify("/v1/responses/compact"),
            Ok(route(None, true, "/responses/compact"))
        );
        assert_eq!(
            router.classify("/responses/compact"),
            Ok(route(None, true, "/responses/compact"))
        );
        assert_eq!(
            router.classify("/bedrock/v1/responses/compact"),
            Ok(route(Some("bedrock"), true, "/responses/compact"))
        );
    }

    #[test]
    fn gating_tolerates_a_trailing_slash_and_ignores_case() {
        let router = router();
        assert_eq!(
            router.classify("/v1/responses/"),
            Ok(route(None, true, "/responses/"))
        );
        assert_eq!(
            router.classify("/v1/responses/compact/"),
            Ok(route(None, true, "/responses/compact/"))
        );
        assert_eq!(
            router.classify("/v1/Responses"),
            Ok(route(None, true, "/Responses"))
        );
        assert_eq!(
            router.classify("/v1/RESPONSES/Compact"),
            Ok(route(None, true, "/RESPONSES/Compact"))
        );
    }

    #[test]
    fn any_path_ending_in_responses_is_gated() {
        let router = router();
        // Forwarded as is, so an upstream whose base_url lacks /v1 would
        // still serve it as a Responses request.
        assert_eq!(
            router.classify("/v1/v1/responses"),
            Ok(route(None, true, "/v1/responses"))
        );
        assert_eq!(
            router.classify("/bedrock/responses"),
            Ok(route(Some("bedrock"), true, "/responses"))
        );
    }

    #[test]
    fn other_paths_are_ungated() {
        let router = router();
        assert_eq!(router.classify("/v1/models"), Ok(route(None, false, "/models")));
        assert_eq!(
            router.classify("/v1/responses/resp_123"),
            Ok(route(None, false, "/responses/resp_123"))
        );
        assert_eq!(
            router.classify("/v1/responses/resp_123/input_items"),
            Ok(route(None, false, "/responses/resp_123/input_items"))
        );
        assert_eq!(
            router.classify("/v1/chat/completions"),
            Ok(route(None, false, "/chat/completions"))
        );
        assert_eq!(
            router.classify("/v1/responsesx"),
            Ok(route(None, false, "/responsesx"))
        );
        assert_eq!(
            router.classify("/v1/my-responses"),
            Ok(route(None, false, "/my-responses"))
        );
        assert_eq!(router.classify("/v1/compact"), Ok(route(None, false, "/compact")));
        assert_eq!(
            router.classify("/v1/responses/compact/x"),
            Ok(route(None, false, "/responses/compact/x"))
        );
        assert_eq!(
            router.classify("/bedrock/v1/models"),
            Ok(route(Some("bedrock"), false, "/models"))
        );
    }

    #[test]
    fn paths_without_v1_are_forwarded_as_is() {
        let router = router();
        assert_eq!(router.classify("/health"), Ok(route(None, false, "/health")));
        assert_eq!(router.classify("/foo/bar"), Ok(route(None, false, "/foo/bar")));
        assert_eq!(router.classify("/"), Ok(route(None, false, "/")));
        assert_eq!(
            router.classify("/v1x/models"),
            Ok(route(None, false, "/v1x/models"))
        );
        assert_eq!(router.classify("/foo/v1x"), Ok(route(None, false, "/foo/v1x")));
    }

    #[test]
    fn the_version_segment_alone_leaves_an_empty_upstream_path() {
        let router = router();
        assert_eq!(router.classify("/v1"), Ok(route(None, false, "")));
        assert_eq!(router.classify("/v1/"), Ok(route(None, false, "/")));
        assert_eq!(
            router.classify("/bedrock/v1"),
            Ok(route(Some("bedrock"), false, ""))
        );
        assert_eq!(router.classify("/bedrock"), Ok(route(Some("bedrock"), false, "")));
    }

    #[test]
    fn a_provider_named_like_an_endpoint_is_a_prefix() {
        let router = router();
        assert_eq!(router.classify("/models"), Ok(route(Some("models"), false, "")));
        assert_eq!(
            router.classify("/models/v1/models"),
            Ok(route(Some("models"), false, "/models"))
        );
    }

    #[test]
    fn unknown_provider_prefix_is_an_error() {
        let router = router();
        let unknown = |name: &str| Err(RouteError::UnknownProvider(name.to_owned()));
        assert_eq!(router.classify("/azure/v1/responses"), unknown("azure"));
        assert_eq!(router.classify("/azure/v1/models"), unknown("azure"));
        assert_eq!(router.classify("/azure/v1"), unknown("azure"));
        assert_eq!(router.classify("/azure/v1/"), unknown("azure"));
        // Provider names are case-sensitive.
        assert_eq!(router.classify("/Bedrock/v1/responses"), unknown("Bedrock"));
        assert_eq!(
            RouteError::UnknownProvider("azure".into()).to_string(),
            "unknown provider `azure` in the request path"
        );
    }

    #[test]
    fn invalid_paths_are_rejected() {
        let router = router();
        for path in [
            "",
            "v1/responses",
            "//v1/responses",
            "/v1//responses",
            "/v1/responses//",
            "/./v1/responses",
            "/v1/./responses",
            "/v1/../responses",
            "/bedrock/../openai/v1/responses",
            "/v1/responses/..",
            "/v1/responses/.",
            "/v1\\responses",
            "/v1/responses\\",
            "/v1%2fresponses",
            "/v1%2Fresponses",
            "/v1/%5cresponses",
            "/v1/%5Cresponses",
            "/v1/%2e%2e/responses",
            "/v1/%2E/responses",
            "/v1/respons%65s",
            "/v1/%72esponses",
            "/v1/responses%7E",
            "/v1/responses%",
            "/v1/responses%2",
            "/v1/responses%zz",
            "/v1/responses%%41",
            "/v1/responses%+4",
        ] {
            let result = router.classify(path);
            assert!(
                matches!(result, Err(RouteError::InvalidPath(_))),
                "{path:?} gave {result:?}"
            );
        }
    }

    #[test]
    fn escapes_and_path_parameters_are_refused() {
        let router = router();
        for path in [
            "/v1/files/a%20b%3A%40",
            "/v1/x%C3%A9",
            "/v1/responses;x",
            "/v1/responses%3b",
            "/v1/responses%00",
            "/v1/responses%20",
        ] {
            assert!(
                matches!(router.classify(path), Err(RouteError::InvalidPath(_))),
                "{path}"
            );
        }
        assert_eq!(
            router.classify("/v1/files/file-AB_c.9~:@!$&'()*+,="),
            Ok(route(None, false, "/files/file-AB_c.9~:@!$&'()*+,="))
        );
    }

    #[test]
    fn side_doors_that_take_items_are_gated() {
        for path in [
            "/v1/responses/input_tokens",
            "/responses/input_tokens/",
            "/bedrock/v1/responses/INPUT_TOKENS",
        ] {
            assert_eq!(items_of(path), Some(ItemsAt::Input), "{path}");
        }
        for path in [
            "/v1/conversations",
            "/conversations/",
            "/bedrock/v1/Conversations",
        ] {
            assert_eq!(items_of(path), Some(ItemsAt::Items), "{path}");
        }
        for path in [
            "/v1/conversations/conv_123/items",
            "/v1/conversations/conv_123/Items/",
            "/bedrock/v1/conversations/conv_1/items",
        ] {
            assert_eq!(items_of(path), Some(ItemsAt::AddedItems), "{path}");
        }
        assert_eq!(
            router().classify("/bedrock/v1/conversations/c/items"),
            Ok(PathRoute {
                prefix: Some("bedrock"),
                items: Some(ItemsAt::AddedItems),
                upstream_path: "/conversations/c/items",
            })
        );
    }

    #[test]
    fn conversation_paths_without_items_are_ungated() {
        for path in [
            "/v1/conversations/conv_123",
            "/v1/conversations/conv_123/items/msg_1",
            "/v1/conversations/items",
            "/v1/items",
            "/v1/my-conversations",
            "/v1/responses/input_tokens/x",
            "/v1/input_tokens",
        ] {
            assert_eq!(items_of(path), None, "{path}");
        }
    }

    #[test]
    fn a_path_prefix_wins_over_model_routes_that_name_it_too() {
        let router = router();
        // `gpt-?o` names bedrock (and `gpt-*` openai): the prefix is one of the model's routes.
        assert_eq!(
            provider_for(&router, "/bedrock/v1/responses", Some("gpt-4o")),
            Ok("bedrock".into())
        );
        assert_eq!(
            provider_for(&router, "/openai/v1/responses", Some("gpt-4o")),
            Ok("openai".into())
        );
        // `openai.gpt-5*` names bedrock-openai, `openai.*` bedrock: either prefix may take it.
        assert_eq!(
            provider_for(&router, "/bedrock/v1/responses", Some("openai.gpt-5.4")),
            Ok("bedrock".into())
        );
        assert_eq!(
            provider_for(&router, "/bedrock/v1/models", None),
            Ok("bedrock".into())
        );
    }

    #[test]
    fn a_prefix_takes_a_model_that_no_route_matches() {
        let router = router();
        assert_eq!(
            provider_for(&router, "/bedrock/v1/responses", Some("llama-3")),
            Ok("bedrock".into())
        );
        assert_eq!(
            provider_for(&router, "/models/v1/responses", None),
            Ok("models".into())
        );
    }

    #[test]
    fn a_prefix_that_none_of_the_models_routes_names_is_a_conflict() {
        let router = router();
        assert_eq!(
            provider_for(&router, "/models/v1/responses", Some("openai.gpt-5.4")),
            Err(RouteError::RouteConflict {
                model: "openai.gpt-5.4".into(),
                provider: "models".into(),
                routed: vec!["bedrock-openai".into(), "bedrock".into()],
            })
        );
        assert!(matches!(
            provider_for(&router, "/bedrock/v1/responses/compact", Some("gpt-4.1")),
            Err(RouteError::RouteConflict { .. })
        ));
        assert!(matches!(
            provider_for(&router, "/models/v1/conversations", Some("vendor/x")),
            Err(RouteError::RouteConflict { .. })
        ));
        // Ungated paths do not read the model.
        assert_eq!(
            provider_for(&router, "/openai/v1/models", Some("openai.gpt-5.4")),
            Ok("openai".into())
        );
        let message = provider_for(&router, "/models/v1/responses", Some("openai.gpt-5.4"))
            .unwrap_err()
            .to_string();
        for part in [
            "`openai.gpt-5.4`",
            "`models`",
            "`bedrock-openai`, `bedrock`",
            "send it without a prefix, or with `/bedrock-openai` or `/bedrock`",
        ] {
            assert!(message.contains(part), "{message}");
        }
    }

    #[test]
    fn own_paths_are_the_segment_before_v1() {
        assert_eq!(
            own_path("https://bedrock-mantle.us-east-1.api.aws/openai/v1").as_deref(),
            Some("openai")
        );
        assert_eq!(own_path("https://openrouter.ai/api/v1/").as_deref(), Some("api"));
        assert_eq!(own_path("http://127.0.0.1:1/a/b/v1").as_deref(), Some("b"));
        for base_url in [
            "https://api.openai.com/v1",
            "https://api.openai.com/v1/",
            "http://127.0.0.1:9000",
            "https://example.com/openai/v2",
            "https://example.com/openai",
            "https://example.com/openai/v1/x",
            "not a url",
        ] {
            assert_eq!(own_path(base_url), None, "{base_url}");
        }
    }

    #[test]
    fn a_prefix_that_is_the_routed_providers_own_path_goes_there() {
        let router = router();
        // Bedrock Mantle's own `/openai/v1/...`, built by its SDKs from the host alone.
        for path in [
            "/openai/v1/responses",
            "/openai/v1/responses/compact",
            "/openai/v1/responses/input_tokens",
            "/openai/v1/conversations",
            "/openai/responses",
        ] {
            assert_eq!(
                provider_for(&router, path, Some("openai.gpt-5.4")),
                Ok("bedrock-openai".into()),
                "{path}"
            );
        }
        // Through choose_by too, as a judgment on another thread calls it.
        assert_eq!(
            router.choose_by(Some("openai"), Some("openai.gpt-5.4")),
            Ok("bedrock-openai")
        );
        // At the provider's own path, the prefix read once.
        let config = Config::from_toml(CONFIG).unwrap();
        let route = router.classify("/openai/v1/responses").unwrap();
        let provider = router.choose(&route, Some("openai.gpt-5.4")).unwrap();
        assert_eq!(
            upstream_url(&config.providers[provider].base_url, route.upstream_path, None),
            "https://bedrock-mantle.us-east-1.api.aws/openai/v1/responses"
        );
    }

    #[test]
    fn a_prefix_spelled_like_an_own_path_still_names_its_provider() {
        let router = router();
        // One of the model's routes names `openai`: the prefix is read as the provider.
        assert_eq!(
            provider_for(&router, "/openai/v1/responses", Some("gpt-4.1")),
            Ok("openai".into())
        );
        assert_eq!(
            provider_for(&router, "/openai/v1/responses", Some("gpt-4o")),
            Ok("openai".into())
        );
        // A model no route matches goes to the provider the prefix names.
        assert_eq!(
            provider_for(&router, "/openai/v1/responses", Some("llama-3")),
            Ok("openai".into())
        );
        // An ungated path has no model to tell the two readings apart.
        assert_eq!(
            provider_for(&router, "/openai/v1/models", Some("openai.gpt-5.4")),
            Ok("openai".into())
        );
        assert_eq!(router.choose_by(Some("openai"), None), Ok("openai"));
    }

    #[test]
    fn an_own_path_that_is_not_the_routed_providers_is_a_conflict() {
        let router = router();
        // `openai.*` routes to `bedrock`, whose base_url has no segment before `/v1`.
        let conflict = provider_for(&router, "/openai/v1/responses", Some("openai.gpt-oss-120b"));
        assert_eq!(
            conflict,
            Err(RouteError::RouteConflict {
                model: "openai.gpt-oss-120b".into(),
                provider: "openai".into(),
                routed: vec!["bedrock".into()],
            })
        );
        let message = conflict.unwrap_err().to_string();
        assert!(
            message.ends_with("send it without a prefix, or with `/bedrock`"),
            "{message}"
        );
        assert!(!message.contains("add a route"), "{message}");
        // The own path of `bedrock-openai` is not `bedrock`'s.
        assert!(matches!(
            provider_for(&router, "/bedrock/v1/responses", Some("openai.gpt-5.4")),
            Ok(name) if name == "bedrock"
        ));
        assert!(matches!(
            provider_for(&router, "/bedrock/v1/responses", Some("gpt-4.1")),
            Err(RouteError::RouteConflict { .. })
        ));
    }

    #[test]
    fn only_a_prefix_that_is_another_providers_own_path_leaves_the_choice_to_the_model() {
        let router = router();
        let chosen = |path: &str| {
            let route = router.classify(path).unwrap();
            router.chosen_by_path(&route).map(str::to_owned)
        };
        assert_eq!(chosen("/openai/v1/responses"), None);
        assert_eq!(chosen("/openai/v1/conversations"), None);
        // Ungated: no model will choose, the prefix does.
        assert_eq!(chosen("/openai/v1/models").as_deref(), Some("openai"));
        for prefix in ["bedrock", "bedrock-openai", "models"] {
            assert_eq!(
                chosen(&format!("/{prefix}/v1/responses")).as_deref(),
                Some(prefix)
            );
        }
        assert_eq!(chosen("/v1/responses"), None);
        // A provider whose own path is its own name is chosen by it.
        let text = format!("{CONFIG}\n[providers.api]\nbase_url = \"https://openrouter.ai/api/v1\"\n");
        let router = Router::new(&Config::from_toml(&text).unwrap()).unwrap();
        let route = router.classify("/api/v1/responses").unwrap();
        assert_eq!(router.chosen_by_path(&route), Some("api"));
    }

    /// Bedrock Mantle's two paths and no provider called `openai`.
    const MANTLE_ONLY: &str = r#"
default_provider = "bedrock"

[providers.bedrock]
base_url = "https://bedrock-mantle.us-east-1.api.aws/v1"

[providers.bedrock-openai]
base_url = "https://bedrock-mantle.us-east-1.api.aws/openai/v1"

[[routes]]
model = "openai.gpt-5*"
provider = "bedrock-openai"

[[routes]]
model = "openai.*"
provider = "bedrock"
"#;

    #[test]
    fn an_own_path_that_names_no_provider_is_a_prefix_before_v1_only() {
        let router = Router::new(&Config::from_toml(MANTLE_ONLY).unwrap()).unwrap();
        assert_eq!(
            router.classify("/openai/v1/responses"),
            Ok(route(Some("openai"), true, "/responses"))
        );
        assert_eq!(
            router.classify("/openai/v1/models"),
            Ok(route(Some("openai"), false, "/models"))
        );
        // Without `/v1` after it, the path is forwarded as it is, as before.
        assert_eq!(
            router.classify("/openai/responses"),
            Ok(route(None, true, "/openai/responses"))
        );
        assert_eq!(
            router.classify("/azure/v1/responses"),
            Err(RouteError::UnknownProvider("azure".into()))
        );
        assert_eq!(
            router.chosen_by_path(&router.classify("/openai/v1/models").unwrap()),
            None
        );
    }

    #[test]
    fn an_own_path_that_names_no_provider_goes_to_the_provider_at_it() {
        let router = Router::new(&Config::from_toml(MANTLE_ONLY).unwrap()).unwrap();
        let unknown = || Err(RouteError::UnknownProvider("openai".into()));
        assert_eq!(
            provider_for(&router, "/openai/v1/responses", Some("openai.gpt-5.4")),
            Ok("bedrock-openai".into())
        );
        // Served at the other path: not reached through this one.
        assert_eq!(
            provider_for(&router, "/openai/v1/responses", Some("openai.gpt-oss-120b")),
            unknown()
        );
        // A model no route matches goes to the default only if the prefix is its own path.
        assert_eq!(
            provider_for(&router, "/openai/v1/responses", Some("llama-3")),
            unknown()
        );
        // Without a model: the one provider at that path.
        assert_eq!(
            provider_for(&router, "/openai/v1/models", None),
            Ok("bedrock-openai".into())
        );
        let text = MANTLE_ONLY.replace(
            "default_provider = \"bedrock\"",
            "default_provider = \"bedrock-openai\"",
        );
        let router = Router::new(&Config::from_toml(&text).unwrap()).unwrap();
        assert_eq!(
            provider_for(&router, "/openai/v1/responses", Some("llama-3")),
            Ok("bedrock-openai".into())
        );
        // Two providers at one path and no model to choose: none of them.
        let text = format!(
            "{MANTLE_ONLY}\n[providers.azure]\nbase_url = \"https://example.openai.azure.com/openai/v1\"\n"
        );
        let router = Router::new(&Config::from_toml(&text).unwrap()).unwrap();
        assert_eq!(provider_for(&router, "/openai/v1/models", None), unknown());
        assert_eq!(
            provider_for(&router, "/openai/v1/responses", Some("openai.gpt-5.4")),
            Ok("bedrock-openai".into())
        );
    }

    #[test]
    fn of_several_providers_at_one_own_path_the_models_first_route_wins() {
        let text = CONFIG.replace(
            "[[routes]]\nmodel = \"openai.gpt-5*\"",
            "[providers.azure]\nbase_url = \"https://example.openai.azure.com/openai/v1\"\n\n\
             [[routes]]\nmodel = \"openai.gpt-5.9*\"\nprovider = \"azure\"\n\n\
             [[routes]]\nmodel = \"openai.gpt-5*\"",
        );
        let router = Router::new(&Config::from_toml(&text).unwrap()).unwrap();
        assert_eq!(
            provider_for(&router, "/openai/v1/responses", Some("openai.gpt-5.9")),
            Ok("azure".into())
        );
        assert_eq!(
            provider_for(&router, "/openai/v1/responses", Some("openai.gpt-5.4")),
            Ok("bedrock-openai".into())
        );
        assert_eq!(
            provider_for(&router, "/v1/responses", Some("openai.gpt-5.9")),
            Ok("azure".into())
        );
    }

    #[test]
    fn model_globs_first_match_wins() {
        let router = router();
        let gated = |model| provider_for(&router, "/v1/responses", Some(model));
        // Matches both `openai.gpt-5*` and `openai.*`: the first wins.
        assert_eq!(gated("openai.gpt-5.4"), Ok("bedrock-openai".into()));
        assert_eq!(gated("openai.gpt-oss-120b"), Ok("bedrock".into()));
        // `gpt-?o` (one character) comes before `gpt-*`.
        assert_eq!(gated("gpt-4o"), Ok("bedrock".into()));
        assert_eq!(gated("gpt-4.1"), Ok("openai".into()));
        assert_eq!(gated("gpt-40o"), Ok("openai".into()));
        // `*` crosses `/`.
        assert_eq!(gated("vendor/family/model"), Ok("bedrock".into()));
        // Globs are anchored and case-sensitive.
        assert_eq!(gated("my-gpt-4o"), Ok("openai".into()));
        assert_eq!(gated("OPENAI.gpt-5.4"), Ok("openai".into()));
        assert_eq!(
            provider_for(&router, "/responses/compact", Some("openai.gpt-5.4")),
            Ok("bedrock-openai".into())
        );
    }

    #[test]
    fn unmatched_or_missing_models_fall_back_to_the_default() {
        let router = router();
        assert_eq!(
            provider_for(&router, "/v1/responses", Some("llama-3")),
            Ok("openai".into())
        );
        assert_eq!(provider_for(&router, "/v1/responses", None), Ok("openai".into()));
    }

    #[test]
    fn ungated_requests_ignore_the_model() {
        let router = router();
        assert_eq!(
            provider_for(&router, "/v1/models", Some("openai.gpt-5.4")),
            Ok("openai".into())
        );
        assert_eq!(provider_for(&router, "/v1/models", None), Ok("openai".into()));
    }

    #[test]
    fn no_default_means_no_provider() {
        let router = router_without_default();
        assert_eq!(
            provider_for(&router, "/v1/responses", Some("llama-3")),
            Err(RouteError::NoProvider {
                model: Some("llama-3".into())
            })
        );
        assert_eq!(
            provider_for(&router, "/v1/models", Some("llama-3")),
            Err(RouteError::NoProvider { model: None })
        );
        assert_eq!(
            provider_for(&router, "/v1/responses", Some("gpt-4.1")),
            Ok("openai".into())
        );
        assert_eq!(
            provider_for(&router, "/bedrock/v1/models", None),
            Ok("bedrock".into())
        );
        assert!(RouteError::NoProvider {
            model: Some("llama-3".into())
        }
        .to_string()
        .contains("`llama-3`"));
    }

    #[test]
    fn a_prefix_from_another_configuration_is_unknown() {
        let route = route(Some("elsewhere"), true, "/responses");
        assert_eq!(
            router().choose(&route, None),
            Err(RouteError::UnknownProvider("elsewhere".into()))
        );
    }

    #[test]
    fn upstream_urls_join_with_one_slash() {
        let base = "https://api.openai.com/v1";
        assert_eq!(
            upstream_url(base, "/responses", None),
            "https://api.openai.com/v1/responses"
        );
        assert_eq!(
            upstream_url("https://api.openai.com/v1/", "/responses", None),
            "https://api.openai.com/v1/responses"
        );
        assert_eq!(
            upstream_url("http://127.0.0.1:9000", "/models", None),
            "http://127.0.0.1:9000/models"
        );
        assert_eq!(upstream_url(base, "", None), base);
        assert_eq!(upstream_url(base, "/", None), "https://api.openai.com/v1/");
    }

    #[test]
    fn upstream_urls_keep_the_query() {
        let base = "https://bedrock-mantle.us-east-1.api.aws/openai/v1";
        assert_eq!(
            upstream_url(base, "/responses/resp_1", Some("include=a&stream=true")),
            "https://bedrock-mantle.us-east-1.api.aws/openai/v1/responses/resp_1?include=a&stream=true"
        );
        assert_eq!(
            upstream_url(base, "/models", Some("")),
            "https://bedrock-mantle.us-east-1.api.aws/openai/v1/models"
        );
        assert_eq!(upstream_url("http://h", "", Some("a=1")), "http://h?a=1");
    }

    #[test]
    fn classified_paths_join_to_the_provider_url() {
        let router = router();
        let config = Config::from_toml(CONFIG).unwrap();
        let url = |path: &str, model: Option<&str>| {
            let route = router.classify(path).unwrap();
            let provider = router.choose(&route, model).unwrap();
            upstream_url(&config.providers[provider].base_url, route.upstream_path, None)
        };
        assert_eq!(
            url("/v1/responses", Some("openai.gpt-5.4")),
            "https://bedrock-mantle.us-east-1.api.aws/openai/v1/responses"
        );
        assert_eq!(
            url("/bedrock/v1/responses/compact", None),
            "https://bedrock-mantle.us-east-1.api.aws/v1/responses/compact"
        );
        assert_eq!(url("/models", None), "http://127.0.0.1:9000");
        assert_eq!(url("/v1/models", None), "https://api.openai.com/v1/models");
    }
}
