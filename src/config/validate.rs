//! Checks run after parsing: provider names, base URLs, namespaces, model
//! globs and references to providers. Each failure points at its value.

use std::collections::BTreeMap;

use globset::GlobBuilder;
use reqwest::Url;
use toml::Spanned;

use super::error::Invalid;
use super::file::{ConfigFile, ProviderEntry, RouteEntry};
use super::{Config, ProviderConfig, RouteConfig};

/// First path segments that already have a meaning in request paths
/// (`/v1/...`, `/responses`), so no provider may use them as its prefix.
const RESERVED_PROVIDER_NAMES: [&str; 2] = ["v1", "responses"];

impl ConfigFile {
    /// Checks the parsed file and turns it into a [`Config`].
    pub(super) fn validate(self) -> Result<Config, Invalid> {
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
        for (name, entry) in entries {
            check_provider_name(&name)?;
            let name = name.into_inner();
            let provider = entry.validate(&name)?;
            providers.insert(name, provider);
        }
        check_buffered_bytes(&self.server.max_body_bytes, &self.server.max_buffered_bytes)?;
        let server = self.server.settings();
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
        Ok(Config {
            default_provider,
            server,
            log: self.log,
            gate: self.gate,
            providers,
            routes,
        })
    }
}

impl ProviderEntry {
    fn validate(self, name: &str) -> Result<ProviderConfig, Invalid> {
        let base_url = normalize_base_url(self.base_url.get_ref())
            .map_err(|message| Invalid::new(self.base_url.span(), message))?;
        let namespaces = match self.namespaces {
            None => vec![name.to_owned()],
            Some(list) => list.into_iter().map(check_namespace).collect::<Result<_, _>>()?,
        };
        Ok(ProviderConfig {
            base_url,
            auth: self.auth,
            namespaces,
            connect_timeout: self.connect_timeout,
            read_timeout: self.read_timeout,
        })
    }
}

impl RouteEntry {
    fn validate(self, providers: &BTreeMap<String, ProviderConfig>) -> Result<RouteConfig, Invalid> {
        let model = GlobBuilder::new(self.model.get_ref())
            .literal_separator(false)
            .backslash_escape(true)
            .build()
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
