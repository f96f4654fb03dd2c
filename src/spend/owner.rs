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

    /// The owner as messages name it to its own caller: "team `NAME`", "key `ID`", or "this
    /// key" for a key without an id (whose digest is never shown).
    pub(crate) fn shown(&self) -> String {
        match self.0.split_once(':') {
            Some(("team", name)) => format!("team `{name}`"),
            Some(("key", id)) => format!("key `{id}`"),
            _ => "this key".to_owned(),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_is_shown_by_name_and_a_keys_digest_never() {
        assert_eq!(SpendOwner::team("payments").shown(), "team `payments`");
        assert_eq!(SpendOwner::key(Some("ci-1"), &[7; 32]).shown(), "key `ci-1`");
        let anonymous = SpendOwner::key(None, &[0xab; 32]);
        assert_eq!(anonymous.as_str(), format!("digest:{}", "ab".repeat(32)));
        assert_eq!(anonymous.shown(), "this key");
    }
}
