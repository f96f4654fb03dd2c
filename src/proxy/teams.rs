//! Teams at run time (docs/teams.md#teams-and-policy): client keys looked up by their SHA-256
//! digest, client certificates by their names
//! (docs/teams.md#a-team-known-by-its-client-certificate), and what each team may use.

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::SystemTime;

use globset::{GlobSet, GlobSetBuilder};
use http::{header, HeaderMap};
use subtle::ConstantTimeEq;

use super::peer_certificate::PeerCertificate;
use super::peer_names::{self, PeerNames};
use crate::config::{CertNameKind, TeamConfig, TeamMode};
use crate::error::ApiError;
use crate::gate::{glob_set, PinnedSchema, Policy, StateAccess, ToolRules};
use crate::state::spend::{OwnedBudget, SpendOwner};

/// The headers a client key may come in; none of them is ever forwarded once teams are on.
const KEY_HEADERS: [header::HeaderName; 3] = [
    header::AUTHORIZATION,
    header::HeaderName::from_static("x-api-key"),
    header::HeaderName::from_static("api-key"),
];

/// One team: its name, what it may use, its rate and its gate policy.
#[derive(Debug)]
pub struct Team {
    /// The team's name (`[teams.NAME]`).
    pub name: String,
    providers: Option<Vec<String>>,
    models: Option<GlobSet>,
    /// `requests_per_minute`, when the team has one.
    pub per_minute: Option<NonZeroU32>,
    /// The policy its requests are judged with: its rules over the global ones, its tools,
    /// its mode.
    pub policy: Policy,
    /// The teams whose recorded state it may name: its own, and those that share theirs with
    /// it (`share_state_with`).
    pub(crate) access: StateAccess,
    /// `budget`, with the team as its owner (docs/budgets.md).
    pub(crate) budget: Option<OwnedBudget>,
    /// Whether the team's own `mode` is `monitor` (so its budget refuses nothing either).
    pub(crate) monitors: bool,
}

impl Team {
    /// Whether the team may send requests to provider `name`.
    pub(crate) fn may_use_provider(&self, name: &str) -> bool {
        self.providers
            .as_ref()
            .is_none_or(|allowed| allowed.iter().any(|p| p == name))
    }

    /// Whether the team may ask for `model`.
    pub(crate) fn may_use_model(&self, model: &str) -> bool {
        self.models.as_ref().is_none_or(|set| set.is_match(model))
    }

    /// Whether the team's models are limited (so a request's model must be known).
    pub(crate) fn limits_models(&self) -> bool {
        self.models.is_some()
    }

    /// 403 unless the team may use provider `provider`.
    pub fn authorize_provider(&self, provider: &str) -> Result<(), ApiError> {
        if self.may_use_provider(provider) {
            return Ok(());
        }
        Err(ApiError::ProviderNotAllowed {
            team: self.name.clone(),
            provider: provider.to_owned(),
        })
    }

    /// 403 unless the team may use `model`. When the team's models are limited, a request
    /// that names no model (or not as a string) is refused too: the provider would pick one
    /// (a stored prompt's, say) that the limit cannot see.
    pub fn authorize_model(&self, model: Option<&str>) -> Result<(), ApiError> {
        match model {
            Some(model) if self.may_use_model(model) => Ok(()),
            None if !self.limits_models() => Ok(()),
            Some(model) => Err(self.model_not_allowed(model.chars().take(200).collect())),
            None => Err(self.model_not_allowed("(no model named as a string)".to_owned())),
        }
    }

    /// The 403 for `model` (as it is to be shown).
    pub(crate) fn model_not_allowed(&self, model: String) -> ApiError {
        ApiError::ModelNotAllowed {
            team: self.name.clone(),
            model,
        }
    }
}

/// A key's digest, the team it belongs to, what the logs call it and when it expires.
#[derive(Debug)]
struct KeyEntry {
    digest: [u8; 32],
    team: usize,
    id: Arc<str>,
    expires: Option<SystemTime>,
    /// The key's own `budget`.
    budget: Option<Arc<OwnedBudget>>,
}

/// Who sent a request: the team of its client key or client certificate, the key's id and the
/// certificate's matched name.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The key's (or the certificate's) team.
    pub team: Arc<Team>,
    /// The key's id, else the first 8 hex digits of its digest: what the access line, the
    /// audit line and the request span call the key (never the key). `None` when the request
    /// carried no key (its certificate named the team).
    pub key_id: Option<Arc<str>>,
    /// The certificate's name that matched the team's `client_certs` (`spiffe://...`,
    /// `dns:...`, `cn:...`): what the logs call the certificate (never the whole
    /// certificate). `None` when no certificate named a team.
    pub client_cert: Option<Arc<str>>,
    /// The key's own budget, when it has one (docs/budgets.md).
    pub(crate) key_budget: Option<Arc<OwnedBudget>>,
}

/// Every team, and their keys by digest.
///
/// Keys are found by the first eight bytes of their digest, then confirmed by a constant-time
/// comparison of the whole digest: lookup time says nothing about how close a guess came.
#[derive(Debug, Default)]
pub struct Teams {
    teams: Vec<Arc<Team>>,
    by_prefix: HashMap<u64, Vec<KeyEntry>>,
    certs: CertMatcher,
}

/// Every team's `client_certs`, a glob set per kind of certificate name, with the team of
/// each glob.
#[derive(Debug, Default)]
struct CertMatcher {
    /// Per kind: the set of every team's globs of that kind, and the team (its index) of each
    /// glob, in the set's order.
    kinds: Vec<(CertNameKind, GlobSet, Vec<usize>)>,
}

/// What a client certificate says of its team.
#[derive(Debug)]
enum CertTeam {
    /// No name of it matches a team's `client_certs` (or there is no certificate).
    None,
    /// Its names match one team's: the team (its index) and the first name that matched.
    One(usize, Arc<str>),
    /// Its names match two teams' or more: the first name that matched.
    Several(Arc<str>),
}

impl CertMatcher {
    fn new(globs: &[(usize, &crate::config::ClientCertGlob)]) -> Result<CertMatcher, globset::Error> {
        let mut kinds = Vec::new();
        for kind in [CertNameKind::Uri, CertNameKind::Dns, CertNameKind::Cn] {
            let mut set = GlobSetBuilder::new();
            let mut owners = Vec::new();
            for (team, glob) in globs.iter().filter(|(_, glob)| glob.kind == kind) {
                set.add(glob.glob.clone());
                owners.push(*team);
            }
            if !owners.is_empty() {
                kinds.push((kind, set.build()?, owners));
            }
        }
        Ok(CertMatcher { kinds })
    }

    fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// The team `names` identify.
    fn team_of(&self, names: &PeerNames) -> CertTeam {
        let mut found: Option<(usize, Arc<str>)> = None;
        for (kind, name) in names.iter() {
            let Some((_, set, owners)) = self.kinds.iter().find(|(k, _, _)| *k == kind) else {
                continue;
            };
            for index in set.matches(name) {
                let team = owners[index];
                match &found {
                    None => found = Some((team, peer_names::shown(kind, name).into())),
                    Some((first, shown)) if *first != team => return CertTeam::Several(shown.clone()),
                    Some(_) => {}
                }
            }
        }
        match found {
            Some((team, shown)) => CertTeam::One(team, shown),
            None => CertTeam::None,
        }
    }
}

/// Why the teams could not be built (the configuration's checks make this unreachable).
#[derive(Debug, thiserror::Error)]
#[error("team `{team}`: {message}")]
pub struct TeamError {
    team: String,
    message: String,
}

impl Teams {
    /// Builds the teams of `config`, each policy on top of `global`.
    pub fn new(config: &BTreeMap<String, TeamConfig>, global: &Policy) -> Result<Teams, TeamError> {
        let mut teams = Teams::default();
        let mut cert_globs = Vec::new();
        for (name, team) in config {
            let error = |message: String| TeamError {
                team: name.clone(),
                message,
            };
            let index = teams.teams.len();
            let granted_by = config
                .iter()
                .filter(|(owner, config)| *owner != name && config.share_state_with.grants(name))
                .map(|(owner, _)| owner.clone());
            let access = StateAccess::new(name, granted_by);
            teams
                .teams
                .push(Arc::new(build_team(name, team, global, access).map_err(error)?));
            cert_globs.extend(team.client_certs.iter().map(|glob| (index, glob)));
            for key in &team.keys {
                teams
                    .by_prefix
                    .entry(prefix(&key.digest))
                    .or_default()
                    .push(KeyEntry {
                        digest: key.digest,
                        team: index,
                        id: key.log_id().into(),
                        expires: key.expires,
                        budget: key.budget.map(|budget| {
                            Arc::new(OwnedBudget {
                                owner: key.spend_owner(),
                                budget,
                            })
                        }),
                    });
            }
        }
        teams.certs = CertMatcher::new(&cert_globs).map_err(|e| TeamError {
            team: "(every team)".to_owned(),
            message: format!("client_certs: {e}"),
        })?;
        Ok(teams)
    }

    /// The team called `name`.
    pub(crate) fn by_name(&self, name: &str) -> Option<&Arc<Team>> {
        self.teams.iter().find(|team| team.name == name)
    }

    /// Every team, in name order (`GET /usage`).
    pub(crate) fn all(&self) -> &[Arc<Team>] {
        &self.teams
    }

    /// Every key with a budget of its own, as `(team, key id, budget)`, in the order of team
    /// then key id (`GET /usage`).
    pub(crate) fn key_budgets(&self) -> Vec<(&str, &str, &Arc<OwnedBudget>)> {
        let mut keys: Vec<_> = self
            .by_prefix
            .values()
            .flatten()
            .filter_map(|entry| {
                let budget = entry.budget.as_ref()?;
                Some((self.teams[entry.team].name.as_str(), &*entry.id, budget))
            })
            .collect();
        keys.sort_unstable_by_key(|&(team, id, _)| (team, id));
        keys
    }

    /// Whether any team is configured (so every request needs a key).
    pub(crate) fn is_empty(&self) -> bool {
        self.teams.is_empty()
    }

    /// The team of the client key `key`, whether or not the key has expired (the tests'
    /// lookup; requests go through [`Teams::caller`]).
    #[cfg(test)]
    pub(crate) fn find(&self, key: &str) -> Option<&Arc<Team>> {
        self.entry(key).map(|entry| &self.teams[entry.team])
    }

    /// The entry of the client key `key`: every candidate with the digest's first eight bytes
    /// is compared in constant time, the last match kept.
    fn entry(&self, key: &str) -> Option<&KeyEntry> {
        let digest = crate::keys::digest(key);
        let candidates = self.by_prefix.get(&prefix(&digest))?;
        let mut found = None;
        for entry in candidates {
            if bool::from(entry.digest.ct_eq(&digest)) {
                found = Some(entry);
            }
        }
        found
    }

    /// The caller of the client key `key`: 401 `invalid_api_key` for a key no team has, 401
    /// `expired_api_key` for one whose `expires` is not after `now()` (asked only of a key
    /// that has an expiry).
    pub(crate) fn caller(&self, key: &str, now: impl FnOnce() -> SystemTime) -> Result<Caller, ApiError> {
        let entry = self.entry(key).ok_or(ApiError::InvalidApiKey(
            "the client key is not known to this replaygate",
        ))?;
        if entry.expires.is_some_and(|expires| now() >= expires) {
            return Err(ApiError::ExpiredApiKey {
                key_id: entry.id.clone(),
            });
        }
        Ok(Caller {
            team: self.teams[entry.team].clone(),
            key_id: Some(entry.id.clone()),
            client_cert: None,
            key_budget: entry.budget.clone(),
        })
    }

    /// The team the verified client certificate `peer` names through `client_certs` (none
    /// without a certificate, or when no team has `client_certs`: then it is not even read).
    fn cert_team(&self, peer: Option<&PeerCertificate>) -> CertTeam {
        match peer {
            Some(peer) if !self.certs.is_empty() => self.certs.team_of(&PeerNames::of(peer)),
            _ => CertTeam::None,
        }
    }

    /// The authenticate phase of a request without a client certificate: see
    /// `Teams::authenticate_with_certificate` (the crate's), with `None`.
    pub fn authenticate(&self, headers: &mut HeaderMap) -> Result<Option<Caller>, ApiError> {
        self.authenticate_with_certificate(headers, None)
    }

    /// The authenticate phase: the caller (team, key id, certificate name) of the request's
    /// client key and of the verified client certificate `peer` the listener handed it, with
    /// every header a key may come in removed (a client key is never forwarded). `None` when
    /// no team is configured (clients are anonymous and their headers are left alone). An
    /// expired key is refused here, at each request: keys expire without a reload.
    ///
    /// A certificate whose names match one team's `client_certs` names that team without a
    /// key; one whose names match two teams', or a key and a certificate of different teams,
    /// get 401 (docs/teams.md#a-team-known-by-its-client-certificate). A certificate that
    /// matches no team changes nothing: the key decides.
    pub(crate) fn authenticate_with_certificate(
        &self,
        headers: &mut HeaderMap,
        peer: Option<&PeerCertificate>,
    ) -> Result<Option<Caller>, ApiError> {
        if self.is_empty() {
            return Ok(None);
        }
        let key = client_key(headers);
        for name in &KEY_HEADERS {
            headers.remove(name);
        }
        let key = key?;
        let (cert_team, name) = match self.cert_team(peer) {
            CertTeam::None => return self.key_caller(key).map(Some),
            CertTeam::Several(name) => return Err(ApiError::AmbiguousClientCertificate { name }),
            CertTeam::One(team, name) => (&self.teams[team], name),
        };
        let Some(key) = key else {
            return Ok(Some(Caller {
                team: cert_team.clone(),
                key_id: None,
                client_cert: Some(name),
                key_budget: None,
            }));
        };
        let caller = self.caller(&key, SystemTime::now)?;
        if !Arc::ptr_eq(&caller.team, cert_team) {
            return Err(ApiError::KeyCertificateMismatch {
                key_id: caller.key_id.expect("a key's caller has its id"),
                name,
            });
        }
        Ok(Some(Caller {
            client_cert: Some(name),
            ..caller
        }))
    }

    /// The caller of the client key `key`, when no certificate names a team: 401 without one.
    fn key_caller(&self, key: Option<String>) -> Result<Caller, ApiError> {
        let key = key.ok_or(ApiError::InvalidApiKey(
            "this replaygate needs a client key: send it as `Authorization: Bearer KEY`, \
             `x-api-key` or `api-key`",
        ))?;
        self.caller(&key, SystemTime::now)
    }
}

fn prefix(digest: &[u8; 32]) -> u64 {
    u64::from_le_bytes(digest[..8].try_into().expect("eight bytes"))
}

/// The client key of a request: `Authorization: Bearer KEY`, `x-api-key` or `api-key`. Several
/// that disagree (or one header sent twice with different keys), or an `Authorization` of
/// another scheme, are refused: which one counts would be a guess. Empty headers are skipped.
fn client_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let mut key: Option<&str> = None;
    for name in &KEY_HEADERS {
        for value in headers.get_all(name) {
            let text = value
                .to_str()
                .map_err(|_| ApiError::InvalidApiKey("the client key is not visible ASCII"))?;
            // An empty header (some SDKs send `x-api-key: ""` beside a bearer) holds no key.
            if text.trim().is_empty() {
                continue;
            }
            let text = if *name == header::AUTHORIZATION {
                bearer(text).ok_or(ApiError::InvalidApiKey(
                    "the Authorization header must be `Bearer KEY`",
                ))?
            } else {
                text.trim()
            };
            match key {
                Some(seen) if seen != text => {
                    return Err(ApiError::InvalidApiKey(
                        "the request carries more than one client key; send one",
                    ))
                }
                _ => key = Some(text),
            }
        }
    }
    Ok(key.filter(|key| !key.is_empty()).map(str::to_owned))
}

/// The token of `Bearer TOKEN` (the scheme in any case).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

fn build_team(name: &str, team: &TeamConfig, global: &Policy, access: StateAccess) -> Result<Team, String> {
    let models = team
        .models
        .as_deref()
        .map(glob_set)
        .transpose()
        .map_err(|e| format!("models: {e}"))?;
    let pinned: HashMap<String, PinnedSchema> = team
        .pinned_tools
        .iter()
        .flat_map(|pinned| &pinned.tools)
        .map(|tool| {
            let schema = PinnedSchema {
                text: tool.parameters_text.clone(),
                value: tool.parameters.clone(),
            };
            (tool.name.clone(), schema)
        })
        .collect();
    let tools = ToolRules::new(team.tools.as_deref(), pinned).map_err(|e| format!("tools: {e}"))?;
    let policy = global.for_team(&team.rules, Some(Arc::new(tools)), team.mode == TeamMode::Monitor);
    Ok(Team {
        name: name.to_owned(),
        providers: team.providers.clone(),
        models,
        per_minute: team.requests_per_minute,
        policy,
        access,
        budget: team.budget.map(|budget| OwnedBudget {
            owner: SpendOwner::team(name),
            budget,
        }),
        monitors: team.mode == TeamMode::Monitor,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn teams() -> Teams {
        let config = crate::config::Config::from_toml(&format!(
            r#"
            [providers.openai]
            base_url = "https://api.openai.com/v1"
            auth = "none"
            [providers.bedrock]
            base_url = "https://bedrock.example/v1"
            auth = "none"
            [teams.payments]
            keys = ["{}"]
            providers = ["openai"]
            models = ["gpt-5*"]
            [teams.search]
            keys = ["{}", "{}"]
            "#,
            digest_of("rg-pay"),
            digest_of("rg-search-1"),
            digest_of("rg-search-2")
        ))
        .unwrap();
        Teams::new(&config.teams, &Policy::default()).unwrap()
    }

    /// The `keys` entry of `key`.
    fn digest_of(key: &str) -> String {
        crate::keys::format_digest(&crate::keys::digest(key))
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_static(value));
        }
        headers
    }

    fn team_of(pairs: &[(&'static str, &'static str)]) -> Result<String, String> {
        let mut head = headers(pairs);
        let found = teams().authenticate(&mut head);
        for name in ["authorization", "x-api-key", "api-key"] {
            assert!(!head.contains_key(name), "{name} stays behind");
        }
        match found {
            Ok(caller) => Ok(caller.unwrap().team.name.clone()),
            Err(error) => Err(error.code().to_owned()),
        }
    }

    #[test]
    fn a_key_in_any_of_its_headers_finds_its_team() {
        assert_eq!(
            team_of(&[("authorization", "Bearer rg-pay")]),
            Ok("payments".into())
        );
        assert_eq!(
            team_of(&[("authorization", "bearer  rg-pay ")]),
            Ok("payments".into())
        );
        assert_eq!(team_of(&[("x-api-key", "rg-search-1")]), Ok("search".into()));
        assert_eq!(team_of(&[("api-key", "rg-search-2")]), Ok("search".into()));
        assert_eq!(
            team_of(&[("authorization", "Bearer rg-pay"), ("x-api-key", "rg-pay")]),
            Ok("payments".into())
        );
        assert_eq!(
            team_of(&[
                ("authorization", "Bearer rg-pay"),
                ("x-api-key", ""),
                ("api-key", " ")
            ]),
            Ok("payments".into())
        );
    }

    #[test]
    fn a_missing_unknown_or_ambiguous_key_is_refused() {
        for pairs in [
            &[][..],
            &[("authorization", "Bearer rg-nope")],
            &[("authorization", "Basic cmc6cGF5")],
            &[("authorization", "Bearer ")],
            &[("authorization", "Bearer rg-pay"), ("x-api-key", "rg-search-1")],
            &[("x-api-key", "rg-pay"), ("x-api-key", "rg-search-1")],
        ] {
            assert_eq!(team_of(pairs), Err("invalid_api_key".into()), "{pairs:?}");
        }
    }

    #[test]
    fn without_teams_nobody_is_asked_for_a_key() {
        let mut head = headers(&[("authorization", "Bearer sk-provider")]);
        assert!(Teams::default().authenticate(&mut head).unwrap().is_none());
        assert!(head.contains_key("authorization"));
    }

    #[test]
    fn a_team_may_use_only_its_providers_and_models() {
        let teams = teams();
        let payments = teams.find("rg-pay").unwrap();
        assert!(payments.authorize_provider("openai").is_ok());
        assert_eq!(
            payments.authorize_provider("bedrock").unwrap_err().code(),
            "provider_not_allowed"
        );
        assert!(payments.authorize_model(Some("gpt-5-mini")).is_ok());
        assert_eq!(
            payments.authorize_model(None).unwrap_err().code(),
            "model_not_allowed"
        );
        assert_eq!(
            payments.authorize_model(Some("gpt-4o")).unwrap_err().code(),
            "model_not_allowed"
        );
        let search = teams.find("rg-search-2").unwrap();
        assert!(search.authorize_provider("bedrock").is_ok() && search.may_use_model("anything"));
        assert!(
            search.authorize_model(None).is_ok(),
            "a team without model limits needs no model"
        );
    }

    /// Teams known by certificate: `payments` by names alone, `search` by a key or a name.
    fn cert_teams() -> Teams {
        let config = crate::config::Config::from_toml(&format!(
            r#"
            [providers.openai]
            base_url = "https://api.openai.com/v1"
            auth = "none"
            [teams.payments]
            client_certs = ["spiffe://example.org/ns/payments/*", "dns:payments-bot.internal"]
            [teams.search]
            keys = ["{}"]
            client_certs = ["cn:search-*"]
            [teams.plain]
            keys = ["{}"]
            "#,
            digest_of("rg-search"),
            digest_of("rg-plain"),
        ))
        .unwrap();
        Teams::new(&config.teams, &Policy::default()).unwrap()
    }

    /// The team, key id and certificate name `authenticate` finds for `key` (a bearer) and
    /// `peer`, or the code of its 401.
    fn cert_caller(
        teams: &Teams,
        key: Option<&'static str>,
        peer: &PeerCertificate,
    ) -> Result<(String, Option<String>, Option<String>), String> {
        let mut head = HeaderMap::new();
        if let Some(key) = key {
            head.insert(
                "authorization",
                HeaderValue::try_from(format!("Bearer {key}")).unwrap(),
            );
        }
        let found = teams.authenticate_with_certificate(&mut head, Some(peer));
        assert!(!head.contains_key("authorization"), "the key stays behind");
        match found {
            Ok(caller) => {
                let caller = caller.unwrap();
                let text = |name: Option<Arc<str>>| name.map(|name| name.to_string());
                Ok((
                    caller.team.name.clone(),
                    text(caller.key_id),
                    text(caller.client_cert),
                ))
            }
            Err(error) => {
                assert_eq!(error.status(), http::StatusCode::UNAUTHORIZED);
                Err(error.code().to_owned())
            }
        }
    }

    use crate::proxy::peer_names::tests::certificate;

    #[test]
    fn a_certificate_names_its_team_without_a_key() {
        let teams = cert_teams();
        let api = certificate(&["spiffe://example.org/ns/payments/sa/api"], &[], Some("api"));
        assert_eq!(
            cert_caller(&teams, None, &api),
            Ok((
                "payments".into(),
                None,
                Some("spiffe://example.org/ns/payments/sa/api".into())
            ))
        );
        let bot = certificate(&["https://example.org/other"], &["PAYMENTS-BOT.internal"], None);
        assert_eq!(
            cert_caller(&teams, None, &bot),
            Ok(("payments".into(), None, Some("dns:payments-bot.internal".into())))
        );
        // Several names of one team: the first that matched is the one logged.
        let both = certificate(
            &["spiffe://example.org/ns/payments/a"],
            &["payments-bot.internal"],
            None,
        );
        assert_eq!(
            cert_caller(&teams, None, &both).unwrap().2.as_deref(),
            Some("spiffe://example.org/ns/payments/a")
        );
    }

    #[test]
    fn a_key_and_a_certificate_must_name_one_team() {
        let teams = cert_teams();
        let search = certificate(&[], &[], Some("search-ci"));
        assert_eq!(
            cert_caller(&teams, Some("rg-search"), &search),
            Ok((
                "search".into(),
                Some(digest_of("rg-search")[7..15].to_owned()),
                Some("cn:search-ci".into())
            ))
        );
        assert_eq!(
            cert_caller(&teams, Some("rg-plain"), &search),
            Err("key_certificate_mismatch".into())
        );
        // A key no team has is refused, whatever the certificate says.
        assert_eq!(
            cert_caller(&teams, Some("rg-nope"), &search),
            Err("invalid_api_key".into())
        );
    }

    #[test]
    fn a_certificate_of_two_teams_is_refused_and_one_of_none_leaves_it_to_the_key() {
        let teams = cert_teams();
        let two = certificate(&["spiffe://example.org/ns/payments/x"], &[], Some("search-ci"));
        assert_eq!(
            cert_caller(&teams, None, &two),
            Err("ambiguous_client_certificate".into())
        );
        assert_eq!(
            cert_caller(&teams, Some("rg-search"), &two),
            Err("ambiguous_client_certificate".into())
        );
        let stranger = certificate(&["spiffe://example.org/ns/other/x"], &["x.internal"], Some("x"));
        assert_eq!(
            cert_caller(&teams, Some("rg-plain"), &stranger),
            Ok((
                "plain".into(),
                Some(digest_of("rg-plain")[7..15].to_owned()),
                None
            ))
        );
        assert_eq!(
            cert_caller(&teams, None, &stranger),
            Err("invalid_api_key".into())
        );
        // Without teams, a certificate names nobody.
        let mut head = HeaderMap::new();
        let anonymous = Teams::default().authenticate_with_certificate(&mut head, Some(&two));
        assert!(anonymous.unwrap().is_none());
    }

    #[test]
    fn a_key_expires_at_its_time_and_names_itself_by_id_or_digest() {
        let config = crate::config::Config::from_toml(&format!(
            r#"
            [providers.openai]
            base_url = "https://api.openai.com/v1"
            auth = "none"
            [teams.ci]
            keys = [
                {{ id = "ci-2026-12", digest = "{}", expires = "2027-03-01T00:00:00Z" }},
                "{}",
            ]
            "#,
            digest_of("rg-ci"),
            digest_of("rg-plain"),
        ))
        .unwrap();
        let teams = Teams::new(&config.teams, &Policy::default()).unwrap();
        let expires = crate::keys::parse_expiry("2027-03-01T00:00:00Z").unwrap();
        let second = std::time::Duration::from_secs(1);
        let before = teams.caller("rg-ci", || expires - second).unwrap();
        assert_eq!(
            (before.team.name.as_str(), before.key_id.as_deref().unwrap()),
            ("ci", "ci-2026-12")
        );
        for now in [expires, expires + second] {
            let error = teams.caller("rg-ci", || now).unwrap_err();
            assert_eq!(error.code(), "expired_api_key");
            assert_eq!(error.status(), http::StatusCode::UNAUTHORIZED);
            assert!(!error.to_string().contains("rg-ci"), "{error}");
        }
        // A key without an expiry never asks the time, and goes by its digest's start.
        let plain = teams
            .caller("rg-plain", || panic!("the time is not needed"))
            .unwrap();
        assert_eq!(plain.key_id.as_deref().unwrap(), &digest_of("rg-plain")[7..15]);
        assert_eq!(
            teams.caller("rg-other", || expires).unwrap_err().code(),
            "invalid_api_key"
        );
        // `find` knows the team of a key whatever its expiry.
        assert_eq!(teams.find("rg-ci").unwrap().name, "ci");
    }
}
