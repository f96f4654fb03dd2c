//! `[teams.NAME]` and `[audit]` (docs/teams.md#teams-and-policy): who may send what, with which
//! policy, and where judged requests are recorded. The values here are checked: every key digest,
//! provider, glob
//! and pinned tool schema is usable.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::SystemTime;

use globset::Glob;

use super::Budget;
use crate::gate::{Action, Reason};

/// One team, `[teams.NAME]`: the clients holding one of its keys, and what they may do.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamConfig {
    /// `keys`: the team's client keys, by their SHA-256 digests (see [`crate::keys`]); at
    /// least one unless the team has `client_certs`, no digest belongs to two teams and no id
    /// names two keys.
    pub keys: Vec<ClientKey>,
    /// `client_certs`: globs over the names of a verified client certificate that identify
    /// the team without a key (docs/teams.md#a-team-known-by-its-client-certificate); no name
    /// matches globs of two teams.
    pub(crate) client_certs: Vec<super::ClientCertGlob>,
    /// `providers`: the providers the team may use, each defined under `[providers]`;
    /// `None` (key absent): all.
    pub(crate) providers: Option<Vec<String>>,
    /// `models`: globs on the request's `model`, with the options of `[[routes]]` `model`;
    /// `None`: every model.
    pub(crate) models: Option<Vec<Glob>>,
    /// `tools`: globs on the names of the function tools the team may declare in `tools` or
    /// call in `input`; `None`: every tool.
    pub(crate) tools: Option<Vec<Glob>>,
    /// `pinned_tools`: the tool definitions whose `parameters` requests must not change.
    pub(crate) pinned_tools: Option<PinnedTools>,
    /// `requests_per_minute`: the team's request rate; `None`: no limit.
    pub(crate) requests_per_minute: Option<NonZeroU32>,
    /// `rules`: the team's action per reason, over `[gate.rules]` and the defaults.
    pub(crate) rules: HashMap<Reason, Action>,
    /// `mode`: `enforce` or `monitor`.
    pub(crate) mode: TeamMode,
    /// `share_state_with`: the teams this team lets name its recorded state (responses,
    /// items, conversations); default none.
    pub(crate) share_state_with: StateGrant,
    /// `budget`: what the team may spend in each window (docs/budgets.md); `None`: no limit.
    pub(crate) budget: Option<Budget>,
}

/// A team's `share_state_with`: the owner's grant of its recorded state to other teams.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum StateGrant {
    /// Only the team itself (the key absent, or an empty list).
    #[default]
    Nobody,
    /// The teams listed, each configured (the owner itself left out).
    Teams(Vec<String>),
    /// `["*"]`: every team.
    Everyone,
}

impl StateGrant {
    /// Whether the grant lets team `team` name the owner's state.
    pub(crate) fn grants(&self, team: &str) -> bool {
        match self {
            StateGrant::Nobody => false,
            StateGrant::Teams(teams) => teams.iter().any(|t| t == team),
            StateGrant::Everyone => true,
        }
    }
}

/// One entry of a team's `keys`: `"sha256:..."`, or `{ id = ..., digest = "sha256:...",
/// expires = ... }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientKey {
    /// `digest`: the SHA-256 of the client key.
    pub digest: [u8; 32],
    /// `id`: what the logs call the key (see `crate::keys::is_valid_key_id`); `None`: the
    /// first 8 hex digits of the digest.
    pub id: Option<String>,
    /// `expires`: from when on the key is refused (401 `expired_api_key`); `None`: never.
    pub expires: Option<SystemTime>,
    /// `budget`: the key's own budget, counted apart from (and besides) its team's; `None`:
    /// only the team's.
    pub(crate) budget: Option<Budget>,
}

impl ClientKey {
    /// A key with neither id nor expiry: the string form of a `keys` entry.
    pub fn of_digest(digest: [u8; 32]) -> ClientKey {
        ClientKey {
            digest,
            id: None,
            expires: None,
            budget: None,
        }
    }

    /// Whose budget the key's own `budget` is, as its counters name it.
    pub(crate) fn spend_owner(&self) -> crate::spend::SpendOwner {
        crate::spend::SpendOwner::key(self.id.as_deref(), &self.digest)
    }

    /// What the access line, the audit line and the request span call the key: its id, else
    /// the first 8 hex digits of its digest.
    pub(crate) fn log_id(&self) -> String {
        self.id
            .clone()
            .unwrap_or_else(|| crate::keys::short_id(&self.digest))
    }
}

/// A team's `mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum TeamMode {
    /// Actions apply as configured.
    #[default]
    Enforce,
    /// Every `reject` becomes `monitor`: the team's requests go on, their violations are
    /// reported.
    Monitor,
}

/// `[audit]`: the audit log, one JSON line per judged request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AuditConfig {
    /// `path`, resolved: absolute, a relative path taken from the directory of `proxy.toml`.
    pub(crate) path: PathBuf,
}

/// A team's `pinned_tools` file, read and checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PinnedTools {
    /// The file, resolved like [`AuditConfig::path`].
    pub(crate) path: PathBuf,
    /// Its tool definitions, in file order, each name once.
    pub(crate) tools: Vec<PinnedTool>,
}

impl PinnedTools {
    /// The pinned definition of the tool `name` (read by the tests).
    #[cfg(test)]
    pub(crate) fn get(&self, name: &str) -> Option<&PinnedTool> {
        self.tools.iter().find(|tool| tool.name == name)
    }
}

/// One pinned tool definition: an entry of the file's array, in the Responses tool shape
/// (`{"type": "function", "name": ..., "parameters": {...}}`; `type` may be left out). Other
/// members (`description`, `strict`, ...) are allowed and not kept.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PinnedTool {
    /// `name`.
    pub(crate) name: String,
    /// `parameters`, parsed: what a request's tool `parameters` is compared with, as JSON
    /// values (key order ignored). `None` when absent or `null`.
    pub(crate) parameters: Option<serde_json::Value>,
    /// `parameters` exactly as written in the file: the schema source to compile (it compiled
    /// with the gate's schema compiler and the `[gate]` limits when the file was read).
    /// `Some` exactly when `parameters` is.
    pub(crate) parameters_text: Option<String>,
}
