//! Who a request is judged for: the target provider, and the policy that gives each reason its
//! action.

use std::collections::HashMap;
use std::sync::Arc;

use super::access::StateAccess;
use super::item_profile::ItemProfile;
use super::provenance::Provenance;
use super::tool_rules::ToolRules;
use super::verdict::{Action, Reason};

/// A provider as the gate sees it: its name, the extension namespaces it accepts, and what
/// its encrypted reasoning is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderProfile {
    name: String,
    namespaces: Vec<String>,
    encrypted_scope: EncryptedScope,
    item_profile: Option<Arc<ItemProfile>>,
}

/// What a provider binds the `encrypted_content` of its reasoning and compaction items to
/// (`encrypted_content_scope`, docs/reasons.md#foreign_encrypted_content): only content it produced
/// itself can be read back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EncryptedScope {
    /// The provider reads back what any of its models produced (the default).
    #[default]
    Provider,
    /// The provider reads back only what the same model produced (Bedrock binds reasoning to
    /// the account and the model).
    Model,
}

impl EncryptedScope {
    /// The scope as configured: `provider` or `model`.
    pub fn as_str(self) -> &'static str {
        match self {
            EncryptedScope::Provider => "provider",
            EncryptedScope::Model => "model",
        }
    }
}

impl ProviderProfile {
    /// A provider that accepts the given namespace slugs.
    pub fn new(name: impl Into<String>, namespaces: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            name: name.into(),
            namespaces: namespaces.into_iter().map(Into::into).collect(),
            encrypted_scope: EncryptedScope::default(),
            item_profile: None,
        }
    }

    /// A provider that accepts only its own namespace (docs/configuration.md#providersname:
    /// `namespaces`).
    pub fn own_namespace(name: impl Into<String>) -> Self {
        let name = name.into();
        Self {
            namespaces: vec![name.clone()],
            name,
            encrypted_scope: EncryptedScope::default(),
            item_profile: None,
        }
    }

    /// The same provider with its encrypted reasoning bound to `scope`.
    pub fn with_encrypted_scope(self, scope: EncryptedScope) -> Self {
        Self {
            encrypted_scope: scope,
            ..self
        }
    }

    /// The same provider with an item profile (docs/item-profiles.md): its items' members are checked
    /// against what the profile says the provider accepts.
    pub fn with_item_profile(self, item_profile: Option<Arc<ItemProfile>>) -> Self {
        Self { item_profile, ..self }
    }

    /// The provider's item profile, if it has one.
    pub fn item_profile(&self) -> Option<&ItemProfile> {
        self.item_profile.as_deref()
    }

    /// What this provider binds encrypted reasoning to.
    pub fn encrypted_scope(&self) -> EncryptedScope {
        self.encrypted_scope
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

/// How violations are acted on, what a team may do with tools, and how much work judging one
/// request may take. The proxy builds one per team (and one for anonymous clients) when it
/// loads its configuration, so a request only picks its policy.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Actions that differ from each reason's default (`[gate.rules]`).
    actions: HashMap<Reason, Action>,
    /// `[gate] require_status`: a `function_call` without `status` counts as not completed.
    pub require_status: bool,
    /// The most violations of each action listed in a verdict (the rest are only counted).
    pub max_listed: usize,
    /// The most schema work one request may cause (see [`crate::gate::schema`]); a request that
    /// needs more is refused whole instead of holding a thread.
    pub work_budget: u64,
    /// A team's tool rules (docs/teams.md#teams-and-policy); `None` allows every tool and pins
    /// nothing.
    pub tools: Option<Arc<ToolRules>>,
    /// `mode = "monitor"`: every `reject` and `strip` acts as `monitor` (a shadow rollout).
    pub monitor_only: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            actions: HashMap::new(),
            require_status: false,
            max_listed: 100,
            work_budget: DEFAULT_WORK_BUDGET,
            tools: None,
            monitor_only: false,
        }
    }
}

/// The default per-request work budget: 0.18 s of validation for the costliest body the gate
/// benchmark builds, and over 200 times what a recorded real-client history needs.
pub const DEFAULT_WORK_BUDGET: u64 = 4_000_000;

impl Policy {
    /// Sets the action of `reason`.
    pub fn set_action(&mut self, reason: Reason, action: Action) {
        if action == reason.default_action() {
            self.actions.remove(&reason);
        } else {
            self.actions.insert(reason, action);
        }
    }

    /// The action `reason` has under this policy. `strip` on a reason that no item removal can
    /// cure (the request's tools, `previous_response_id`; see [`Reason::is_strippable`]) acts
    /// as `reject`; then, in monitor mode, `reject` and `strip` act as `monitor`: a shadow
    /// rollout changes nothing on the wire.
    ///
    /// `cross_team_state` keeps teams apart rather than judging what a provider can read, so it
    /// is never only monitored: `monitor` (and monitor mode) and `repair` act as `reject` on it,
    /// and `strip` stays `strip`.
    pub fn action(&self, reason: Reason) -> Action {
        let action = self
            .actions
            .get(&reason)
            .copied()
            .unwrap_or_else(|| reason.default_action());
        if reason == Reason::CrossTeamState {
            return match action {
                Action::Strip => Action::Strip,
                _ => Action::Reject,
            };
        }
        match action {
            Action::Reject | Action::Strip | Action::Repair if self.monitor_only => Action::Monitor,
            Action::Strip if !reason.is_strippable() => Action::Reject,
            Action::Repair if !reason.is_repairable() => Action::Reject,
            action => action,
        }
    }

    /// A team's policy on top of this one: its `rules` over these actions, its tool rules, and
    /// its mode (docs/teams.md#teams-and-policy: the team's rules over `[gate.rules]` over the
    /// defaults, monitor mode last).
    pub fn for_team(
        &self,
        rules: &HashMap<Reason, Action>,
        tools: Option<Arc<ToolRules>>,
        monitor_only: bool,
    ) -> Policy {
        let mut policy = self.clone();
        for (&reason, &action) in rules {
            policy.set_action(reason, action);
        }
        policy.tools = tools.filter(|tools| !tools.is_empty());
        policy.monitor_only = monitor_only;
        policy
    }
}

/// Everything the gate judges a request against.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The provider the request is routed to.
    pub provider: &'a ProviderProfile,
    /// The actions and limits to judge with.
    pub policy: &'a Policy,
    /// The schema work this judgment may take (the policy's budget unless set lower).
    pub work_budget: u64,
    /// What the provenance ledger knows of the request's items and previous response; `None`
    /// (the ledger was not asked) runs no provenance rule.
    pub provenance: Option<&'a Provenance>,
    /// With teams: the teams whose recorded state the request may name; `None` (no teams)
    /// runs no `cross_team_state` check.
    pub access: Option<&'a StateAccess>,
    /// Whether the proxy carries sessions (`[ledger] carry_sessions`, which needs
    /// `store_items`): a `previous_response_id` of another provider that still reaches the
    /// gate is then one whose chain could not be carried, and `foreign_previous_response`
    /// says so; otherwise its message names the setting. Told by the proxy, never read here.
    pub carry_sessions: bool,
    /// With teams and provenance: whether state the ledger holds no record of is judged
    /// (`unknown_state`); the proxy's `[ledger] unknown_owner = "deny"`. Told by the proxy.
    pub deny_unknown_state: bool,
    /// Whether the body is judged offline, with no ledger (`replaygate check`): the rules
    /// that need one judge only what the body itself says (`state_not_stored` on a body that
    /// says `store: false`; docs/reasons.md#state_not_stored). The proxy never sets it.
    pub offline: bool,
}

/// The policy of a [`Target`] built without one.
static DEFAULT_POLICY: std::sync::LazyLock<Policy> = std::sync::LazyLock::new(Policy::default);

impl<'a> Target<'a> {
    /// Judge for `provider` under the default policy.
    pub fn provider(provider: &'a ProviderProfile) -> Self {
        Self::new(provider, &DEFAULT_POLICY)
    }

    /// Judge for `provider` under `policy`.
    pub fn new(provider: &'a ProviderProfile, policy: &'a Policy) -> Self {
        Self {
            provider,
            policy,
            work_budget: policy.work_budget,
            provenance: None,
            access: None,
            carry_sessions: false,
            deny_unknown_state: false,
            offline: false,
        }
    }

    /// The same target with another work budget (the proxy tries cheap judgments on the
    /// event loop under a small one first).
    pub fn with_work_budget(self, work_budget: u64) -> Self {
        Self { work_budget, ..self }
    }

    /// The same target judged with what the ledger knows (docs/ledger.md): the provenance rules
    /// run, and an output whose call `input` lacks is paired with the calls the ledger
    /// recorded for the `previous_response_id` chain.
    pub fn with_provenance(self, provenance: &'a Provenance) -> Self {
        Self {
            provenance: Some(provenance),
            ..self
        }
    }

    /// The same target for a team with `access`: with provenance, a request naming state
    /// recorded for a team outside it gets `cross_team_state`.
    pub fn with_access(self, access: &'a StateAccess) -> Self {
        Self {
            access: Some(access),
            ..self
        }
    }

    /// The same target, told whether state the ledger does not know is refused for a team
    /// ([`Target::deny_unknown_state`]).
    pub fn with_unknown_state_denied(self, deny_unknown_state: bool) -> Self {
        Self {
            deny_unknown_state,
            ..self
        }
    }

    /// The same target judged offline ([`Target::offline`]).
    pub fn offline(self) -> Self {
        Self {
            offline: true,
            ..self
        }
    }

    /// The same target, told whether the proxy carries sessions to another provider
    /// ([`Target::carry_sessions`]).
    pub fn with_carry_sessions(self, carry_sessions: bool) -> Self {
        Self {
            carry_sessions,
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_tool_and_item_tampered_are_monitored_and_the_rest_rejected_by_default() {
        let policy = Policy::default();
        for reason in Reason::ALL {
            let expected = match reason {
                Reason::UnknownTool | Reason::ItemTampered | Reason::ItemUnknownField => Action::Monitor,
                Reason::ItemField
                | Reason::DuplicateItemId
                | Reason::ReasoningOrphaned
                | Reason::StateNotStored => Action::Repair,
                _ => Action::Reject,
            };
            assert_eq!(policy.action(reason), expected, "{reason}");
        }
    }

    #[test]
    fn every_reason_reads_back_from_its_code() {
        for reason in Reason::ALL {
            assert_eq!(Reason::from_code(reason.as_str()), Some(reason));
            let quoted = format!("\"{reason}\"");
            assert_eq!(serde_json::from_str::<Reason>(&quoted).unwrap(), reason);
            assert_eq!(serde_json::to_string(&reason).unwrap(), quoted);
        }
        for code in [
            "foreign_previous_response",
            "foreign_encrypted_content",
            "foreign_item_reference",
            "item_tampered",
        ] {
            assert!(Reason::from_code(code).is_some(), "{code}");
        }
        let err = serde_json::from_str::<Reason>("\"foreign\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("item_tampered"), "{err}");
    }

    #[test]
    fn strip_acts_as_reject_where_no_item_can_be_removed() {
        let mut policy = Policy::default();
        for reason in Reason::ALL {
            policy.set_action(reason, Action::Strip);
        }
        for reason in [
            Reason::ForeignPreviousResponse,
            Reason::ToolNotAllowed,
            Reason::ToolSchemaDrift,
            Reason::ToolSchemaInvalid,
        ] {
            assert!(!reason.is_strippable());
            assert_eq!(policy.action(reason), Action::Reject, "{reason}");
        }
        for reason in [
            Reason::ForeignEncryptedContent,
            Reason::ForeignItemReference,
            Reason::ItemTampered,
        ] {
            assert_eq!(policy.action(reason), Action::Strip, "{reason}");
        }
    }

    #[test]
    fn configured_actions_override_the_defaults() {
        let mut policy = Policy::default();
        policy.set_action(Reason::UnknownTool, Action::Reject);
        policy.set_action(Reason::Status, Action::Monitor);
        assert_eq!(policy.action(Reason::UnknownTool), Action::Reject);
        assert_eq!(policy.action(Reason::Status), Action::Monitor);
        assert_eq!(policy.action(Reason::Namespaced), Action::Reject);
    }

    #[test]
    fn team_rules_override_the_global_ones_and_monitor_mode_comes_last() {
        let mut global = Policy::default();
        global.set_action(Reason::Status, Action::Monitor);
        global.set_action(Reason::Namespaced, Action::Monitor);
        let rules = HashMap::from([
            (Reason::Namespaced, Action::Strip),
            (Reason::UnknownTool, Action::Reject),
            (Reason::ToolNotAllowed, Action::Strip),
        ]);
        let team = global.for_team(&rules, None, false);
        assert_eq!(team.action(Reason::Namespaced), Action::Strip);
        assert_eq!(team.action(Reason::UnknownTool), Action::Reject);
        assert_eq!(team.action(Reason::Status), Action::Monitor);
        assert_eq!(
            team.action(Reason::ToolNotAllowed),
            Action::Reject,
            "strip acts as reject on tools"
        );
        let shadow = global.for_team(&rules, None, true);
        assert_eq!(shadow.action(Reason::UnknownTool), Action::Monitor);
        assert_eq!(shadow.action(Reason::ToolNotAllowed), Action::Monitor);
        assert_eq!(shadow.action(Reason::ArgumentsSchema), Action::Monitor);
        assert_eq!(
            shadow.action(Reason::Namespaced),
            Action::Monitor,
            "a shadow strips nothing"
        );
    }
}
