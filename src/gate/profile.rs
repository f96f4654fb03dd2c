//! Who a request is judged for: the target provider and, later, the team's policy.

/// A provider as the gate sees it: its name and the extension namespaces it accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderProfile {
    name: String,
    namespaces: Vec<String>,
}

impl ProviderProfile {
    /// A provider that accepts the given namespace slugs.
    pub fn new(name: impl Into<String>, namespaces: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            name: name.into(),
            namespaces: namespaces.into_iter().map(Into::into).collect(),
        }
    }

    /// A provider that accepts only its own namespace (the contract's default).
    pub fn own_namespace(name: impl Into<String>) -> Self {
        let name = name.into();
        Self {
            namespaces: vec![name.clone()],
            name,
        }
    }

    /// The provider's configured name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace slugs this provider accepts.
    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
    }

    /// Whether items under namespace `slug` may be sent to this provider.
    pub fn accepts(&self, slug: &str) -> bool {
        self.namespaces.iter().any(|n| n == slug)
    }
}

/// Everything the gate judges a request against.
///
/// Today that is the provider the request is routed to; a team's policy mode and a registry of
/// pinned tool schemas join here without changing the gate's signature.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The provider the request is routed to.
    pub provider: &'a ProviderProfile,
}

impl<'a> Target<'a> {
    /// Judge for `provider` alone.
    pub fn provider(provider: &'a ProviderProfile) -> Self {
        Self { provider }
    }
}
