//! Whose budget a counter counts: a team's, or a key's own.

use super::Budget;

/// Whose budget a counter counts, as counter names spell it: `team:NAME` for a team's
/// `budget`, `key:ID` for a key's own (`digest:HEX`, its whole digest, for a key without an id).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SpendOwner(String);

impl SpendOwner {
    /// Team `name`'s budget.
    pub(crate) fn team(name: &str) -> SpendOwner {
        SpendOwner(format!("team:{name}"))
    }

    /// The own budget of the key with `id` (`None`: none) and SHA-256 `digest`.
    pub(crate) fn key(id: Option<&str>, digest: &[u8; 32]) -> SpendOwner {
        match id {
            Some(id) => SpendOwner(format!("key:{id}")),
            None => SpendOwner(format!("digest:{}", hex::encode(digest))),
        }
    }

    /// The owner as counter names spell it.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// A budget with its owner: what a request is held to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OwnedBudget {
    /// Whose it is.
    pub(crate) owner: SpendOwner,
    /// How much, in which window.
    pub(crate) budget: Budget,
}
