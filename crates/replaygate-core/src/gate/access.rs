//! Which teams' stored state a request may name (docs/teams.md#teams-and-their-data).
//!
//! Behind one provider key the provider cannot tell teams apart, so the proxy keeps them apart:
//! every record of the ledger carries the team whose request caused it, and a request of team
//! T may name a record only when it is T's own, or its owner U granted T
//! (`[teams.U] share_state_with`). A record with no team (recorded for an anonymous client,
//! before teams were configured) belongs to no team and is not refused.

/// The teams whose recorded state one team may name: its own, and those that granted it theirs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateAccess {
    /// The team's own name first, then the teams that share their state with it.
    readable: Vec<String>,
}

impl StateAccess {
    /// The access of team `own`, granted the state of the teams in `granted_by`.
    pub fn new(own: &str, granted_by: impl IntoIterator<Item = String>) -> StateAccess {
        let mut readable = vec![own.to_owned()];
        for team in granted_by {
            if !readable.contains(&team) {
                readable.push(team);
            }
        }
        StateAccess { readable }
    }

    /// The team's own name.
    pub fn team(&self) -> &str {
        &self.readable[0]
    }

    /// Whether the team may name state recorded for `owner` (`None`: no team).
    pub fn may_use(&self, owner: Option<&str>) -> bool {
        owner.is_none_or(|owner| self.readable.iter().any(|team| team == owner))
    }
}

#[cfg(test)]
mod tests {
    use super::StateAccess;

    #[test]
    fn a_team_uses_its_own_state_and_what_was_granted_to_it() {
        let access = StateAccess::new("beta", ["alpha".to_owned(), "beta".to_owned()]);
        assert_eq!(access.team(), "beta");
        assert!(access.may_use(Some("beta")));
        assert!(access.may_use(Some("alpha")));
        assert!(access.may_use(None));
        assert!(!access.may_use(Some("gamma")));
        assert!(!access.may_use(Some("")));
        assert!(!access.may_use(Some("Beta")));
    }
}
