//! The phases of one request, as methods of the context it carries from phase to phase:
//! [`begin`](RequestContext::begin) (an in-flight permit and the configuration snapshot),
//! [`authenticate`](RequestContext::authenticate), [`route`](RequestContext::route),
//! [`limit_rate`](RequestContext::limit_rate),
//! [`authorize_object`](RequestContext::authorize_object), [`read_body`](RequestContext::read_body),
//! [`judge`](RequestContext::judge) (with authorization and the audit line),
//! [`forward`](RequestContext::forward) and [`answer`](RequestContext::answer). The log phase is
//! the access line [`super::exchange`] writes when the answer's body ends.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Method, Response};
use http_body_util::BodyExt;
use tokio::sync::OwnedSemaphorePermit;

use super::answer_headers::{budget_passed, carried, inserted, monitored, repaired, stripped};
use super::audit::{AuditLine, AuditedRequest};
use super::body::{read_body, HeldBody, Holding, ProxyBody};
use super::earlier_turns::{EarlierTurns, Turn};
use super::judge::{judge, Asker, Judged, Received};
use super::ledger::conversations::{record_conversation, CreatedConversation};
use super::ledger::recording::{record, CallsCheck, Recording};
use super::objects;
use super::peer_certificate::PeerCertificate;
use super::provider::Provider;
use super::rate_limit::retry_after_secs;
use super::request_checks::{check_charset, check_method};
use super::snapshot::Snapshot;
use super::spend::{self, Held, Reserved, Settled, Spending};
use super::state::ProxyState;
use super::teams::Team;
use super::upstream::{forward, Outbound};
use super::usage::{Answerer, Counted, PendingUsage, RequestUsage, Sinks, Tallied, UsageBody, UsageSink};
use crate::error::ApiError;
use crate::ledger::carry::input_items;
use crate::routing::PathRoute;
use crate::spend::Estimate;
use crate::state::spend::OwnedBudget;
use crate::telemetry::access_log::AccessRecord;

/// What one request carries from phase to phase.
pub(super) struct RequestContext<'r> {
    state: &'r Arc<ProxyState>,
    record: &'r mut AccessRecord,
    /// The configuration this request lives under, to its end, whatever reloads meanwhile.
    snapshot: Arc<Snapshot>,
    /// The client key's team, once authenticated (`None`: anonymous).
    team: Option<Arc<Team>>,
    /// The client key's own budget, when it has one.
    key_budget: Option<Arc<OwnedBudget>>,
    /// Held until the answer has streamed out.
    permit: OwnedSemaphorePermit,
    /// Earlier turns remembered besides the ledger, which this context's requests may
    /// continue (on a WebSocket: the socket's own).
    earlier_turns: Option<Arc<dyn EarlierTurns>>,
}

/// What the judge phase decided to send, and where.
pub(super) struct Decided {
    pub(super) provider: Arc<Provider>,
    /// The body to forward: the one received, or it less the stripped items.
    pub(super) body: Bytes,
    /// Headers the answer carries about the decision (monitored and stripped items).
    pub(super) answer_headers: Vec<(&'static str, HeaderValue)>,
    /// What the ledger records of the answer, when it taps it.
    pub(super) recording: Option<Recording>,
    /// What the source of earlier turns remembers of this one (only gated requests judged
    /// with such a source fill it).
    pub(super) turn: Option<Turn>,
    /// With the ledger on, for `POST /conversations`: who creates the conversation.
    pub(super) created_conversation: Option<CreatedConversation>,
    /// For a `POST` of `/responses` or `/responses/compact`: the count of its answer's usage
    /// (docs/usage.md).
    pub(super) usage: Option<PendingUsage>,
}

impl<'r> RequestContext<'r> {
    /// Takes an in-flight permit (503 `overloaded` without one) and the configuration in
    /// force.
    pub(super) fn begin(state: &'r Arc<ProxyState>, record: &'r mut AccessRecord) -> Result<Self, ApiError> {
        let permit = state
            .in_flight
            .clone()
            .try_acquire_owned()
            .map_err(|_| ApiError::Overloaded {
                limit: state.max_in_flight,
            })?;
        Ok(RequestContext {
            snapshot: state.snapshot(),
            state,
            record,
            team: None,
            key_budget: None,
            permit,
            earlier_turns: None,
        })
    }

    /// The configured provider `name`, as this request's configuration has it.
    pub(super) fn provider(&self, name: &str) -> Result<Arc<Provider>, ApiError> {
        Ok(self.snapshot.provider(name)?.clone())
    }

    /// The metric handles of this request's configuration.
    pub(super) fn meters(&self) -> &Arc<crate::metrics::Meters> {
        &self.snapshot.meters
    }

    /// The client key's team, once authenticated.
    pub(super) fn team_name(&self) -> Option<&str> {
        self.team.as_deref().map(|team| team.name.as_str())
    }

    /// Judges this context's requests as continuing `turns` (as well as what the ledger
    /// remembers): a WebSocket's messages continue the socket's earlier turns.
    pub(super) fn continuing(&mut self, turns: Arc<dyn EarlierTurns>) {
        self.earlier_turns = Some(turns);
    }

    /// Finds the team of the client key or of the verified client certificate `peer` (401
    /// when teams are on and neither names one, when the key is unknown or expired, or when
    /// they name different teams); the key headers are removed for good.
    pub(super) fn authenticate(
        &mut self,
        headers: &mut HeaderMap,
        peer: Option<&PeerCertificate>,
    ) -> Result<(), ApiError> {
        let teams = &self.snapshot.teams;
        let caller = teams
            .authenticate_with_certificate(headers, peer)
            .inspect_err(|error| {
                // A refused key or certificate is named in the access line, so its holders can
                // be found.
                match error {
                    ApiError::ExpiredApiKey { key_id } => self.record.key_id(key_id),
                    ApiError::AmbiguousClientCertificate { name } => self.record.client_cert(name),
                    ApiError::KeyCertificateMismatch { key_id, name } => {
                        self.record.key_id(key_id);
                        self.record.client_cert(name);
                    }
                    _ => {}
                }
            })?;
        if let Some(caller) = caller {
            self.record.caller(
                &caller.team.name,
                caller.key_id.as_ref(),
                caller.client_cert.as_ref(),
            );
            self.team = Some(caller.team);
            self.key_budget = caller.key_budget;
        }
        Ok(())
    }

    /// Routes the path: which provider prefix, whether (and where) its items are gated, what
    /// to ask upstream. A provider the path chooses on its own must be one the team may use
    /// (403); when the model chooses (the prefix is also a provider's own path), the provider
    /// is authorized once chosen.
    pub(super) fn route<'p>(&self, path: &'p str) -> Result<PathRoute<'p>, ApiError> {
        let route = self.snapshot.router.classify(path)?;
        if let (Some(team), Some(provider)) = (&self.team, self.chosen_by_path(&route)) {
            team.authorize_provider(provider)?;
        }
        Ok(route)
    }

    /// The provider a classified path chooses before its body is read, if it does: see
    /// [`Router::chosen_by_path`](crate::routing::Router::chosen_by_path).
    pub(super) fn chosen_by_path<'p>(&self, route: &PathRoute<'p>) -> Option<&'p str> {
        self.snapshot.router.chosen_by_path(route)
    }

    /// Counts the request against its team's `requests_per_minute` (429 over it; 503
    /// `ledger_unavailable` when the state backend cannot count, unless `[ledger]
    /// on_unavailable = "allow"`), before its body is read. Every authenticated request counts, refused or not, so this runs before
    /// any later phase can refuse it.
    pub(super) async fn limit_rate(&self) -> Result<(), ApiError> {
        let Some(team) = &self.team else {
            return Ok(());
        };
        let Some(per_minute) = team.per_minute else {
            return Ok(());
        };
        match self.state.store.hit_rate(&team.name, per_minute).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(wait)) => Err(ApiError::RateLimited {
                team: team.name.clone(),
                per_minute: per_minute.get(),
                retry_after: retry_after_secs(wait),
            }),
            // As the ledger's lookups: refused (503) unless `on_unavailable = "allow"`.
            Err(error) => self.state.uncounted_rates.decide(&team.name, &error),
        }
    }

    /// With teams: a path naming one stored response or conversation is forwarded only for
    /// an id the ledger records for the caller's team or a team sharing with it (404
    /// `not_found` otherwise, as for an unknown id); see [`super::objects`].
    pub(super) async fn authorize_object(&self, route: &PathRoute<'_>) -> Result<(), ApiError> {
        match objects::object_of(route.upstream_path) {
            Some(object) => self.authorize_named(object).await,
            None => Ok(()),
        }
    }

    /// With teams: `object` (named by a path, or by a WebSocket event) may be reached only when
    /// the ledger records it for the caller's team or a team sharing with it (404 `not_found`
    /// otherwise); see [`super::objects`].
    pub(super) async fn authorize_named(&self, object: objects::ObjectRef<'_>) -> Result<(), ApiError> {
        let Some(team) = self.team.clone() else {
            return Ok(());
        };
        let ledger = self.state.ledger.clone();
        objects::authorize(ledger, &team, object, self.snapshot.unknown_owner).await
    }

    /// Reads the body, under the size cap, the read timeout and the budget of bodies held at
    /// once. The body's share of that budget is held until the provider has answered (so it
    /// has every byte) or the request is refused.
    pub(super) async fn read_body<B>(&self, body: B, headers: &HeaderMap) -> Result<HeldBody, ApiError>
    where
        B: http_body::Body<Data = Bytes>,
        B::Error: Into<super::body::BoxError>,
    {
        read_body(body, headers, self.state.body_limits, &self.state.buffered).await
    }

    /// Decides what goes where. On a gated path: only POST carries a body onward (405), the
    /// body is parsed, the provider chosen (by prefix, else by model), the team authorized for
    /// it and the model (403), the charset checked (415), the items judged under the team's
    /// policy (422) and the stripped ones cut out; the audit line is written. On other paths:
    /// the provider of the prefix or the default, authorized for the team with the model of a
    /// JSON body.
    pub(super) async fn judge(
        &mut self,
        route: &PathRoute<'_>,
        parts: &Parts,
        body: Bytes,
    ) -> Result<Decided, ApiError> {
        if route.is_gated() {
            check_method(&parts.method, parts.uri.path(), &parts.headers, body.len())?;
        }
        match route.items.filter(|_| parts.method == Method::POST) {
            Some(items) => self.judge_items(route, items, parts, body).await,
            None => self.choose_ungated(route, body),
        }
    }

    /// Counts a decided request's answer, and holds it to its budgets (docs/budgets.md): a
    /// `POST` of `/responses` or `/responses/compact`, whose answer reports usage
    /// (docs/usage.md#what-is-counted), reserves its estimate on its team's budget and its
    /// key's own before it is forwarded (429 `budget_exceeded` over one; 503
    /// `budget_unavailable` when the state backend cannot count, unless `[state]
    /// on_unavailable = "allow"`); the reservations are settled when the answer ends. Under
    /// `monitor`, a passed budget is named in `x-replaygate-budget-passed` instead. Requests
    /// of other paths are neither counted nor held.
    pub(super) async fn limit_spend(
        &mut self,
        route: &PathRoute<'_>,
        method: &Method,
        decided: &mut Decided,
    ) -> Result<(), ApiError> {
        if method != Method::POST || !matches!(route.upstream_path, "/responses" | "/responses/compact") {
            return Ok(());
        }
        let budgets: Vec<&OwnedBudget> = self
            .team
            .as_deref()
            .and_then(|team| team.budget.as_ref())
            .into_iter()
            .chain(self.key_budget.as_deref())
            .collect();
        let reserved = if budgets.is_empty() {
            Reserved::default()
        } else {
            let spending = Spending {
                store: &self.state.store,
                now_unix: self.state.clock.now_unix(),
                prices: &self.snapshot.prices,
                usage: self.snapshot.usage,
                team_monitors: self.team.as_deref().is_some_and(|team| team.monitors),
                meters: &self.snapshot.meters,
            };
            let estimate = Estimate::of(&decided.body, self.snapshot.usage.default_output_reservation);
            spend::reserve(&spending, &budgets, estimate, self.record.model()).await?
        };
        if let Some(passed) = budget_passed(&reserved.passed) {
            decided.answer_headers.push(passed);
        }
        decided.usage = Some(self.usage_of(decided.provider.name(), reserved.held));
        Ok(())
    }

    /// The count of the usage of the answer to a request forwarded to `provider`, settling
    /// `held` when it ends.
    fn usage_of(&mut self, provider: &str, held: Vec<Held>) -> PendingUsage {
        let answerer = Answerer {
            request_id: self.record.request_id.clone(),
            team: self.team_name().map(str::to_owned),
            key_id: self.record.key_id_name().map(str::to_owned),
            client_cert: self.record.client_cert_name().map(str::to_owned),
            provider: provider.to_owned(),
            model: self.record.model().map(str::to_owned),
        };
        let counted = Counted {
            meters: self.snapshot.meters.clone(),
            tally: self.record.usage_tally(),
            audit: self.state.audit.clone(),
            prices: self.snapshot.prices.clone(),
        };
        let mut sinks: Vec<Box<dyn UsageSink>> = vec![
            Box::new(counted),
            Box::new(Tallied::new(
                &self.state.store,
                &self.snapshot.prices,
                &self.team,
                &self.key_budget,
                &self.state.clock,
            )),
        ];
        if !held.is_empty() {
            sinks.push(Box::new(Settled {
                store: self.state.store.clone(),
                prices: self.snapshot.prices.clone(),
                held,
                meters: self.snapshot.meters.clone(),
            }));
        }
        RequestUsage::new(answerer, Arc::new(Sinks(sinks))).answer()
    }

    async fn judge_items(
        &mut self,
        route: &PathRoute<'_>,
        items: crate::gate::ItemsAt,
        parts: &Parts,
        body: Bytes,
    ) -> Result<Decided, ApiError> {
        let asker = Asker {
            snapshot: self.snapshot.clone(),
            team: self.team.clone(),
            earlier_turns: self.earlier_turns.clone(),
        };
        let charset = check_charset(&parts.headers);
        let started = Instant::now();
        let received = Received {
            prefix: route.prefix,
            at: items,
            body: &body,
            charset,
        };
        let judged = judge(self.state, &asker, received).await;
        let meters = &self.snapshot.meters;
        let provider = judged.as_ref().ok().map(|judged| judged.provider.as_str());
        meters.provider(provider).gate_time(started.elapsed());
        let mut judged = judged?;
        meters.violations(
            &judged.verdict,
            &judged.provider,
            self.team.as_deref().map(|team| team.name.as_str()),
        );
        self.record.routed(&judged.provider, judged.model.as_deref());
        self.record.judged(&judged.verdict);
        self.audit(&mut judged);
        if !judged.verdict.is_allowed() {
            return Err(ApiError::rejected(
                &judged.provider,
                items.member(),
                judged.verdict,
            ));
        }
        let mut answer_headers: Vec<_> = monitored(&judged.verdict, items.member()).into_iter().collect();
        let limit = self.snapshot.policy_of(self.team.as_deref()).max_listed;
        if let Some(from) = &judged.carried {
            answer_headers.extend(carried(from));
        }
        let body = match judged.stripped.take() {
            Some(cut) => {
                answer_headers.extend(stripped(items.member(), &cut.removed, limit));
                answer_headers.extend(repaired(&judged.verdict, items.member(), &cut, limit));
                answer_headers.extend(inserted(items.member(), &cut, limit));
                Bytes::from(cut.body)
            }
            None => judged.body.take().unwrap_or(body),
        };
        let turn = self.earlier_turns.as_ref().map(|_| Turn {
            provider: judged.provider.clone(),
            model: judged.model.clone(),
            previous_response_id: judged.previous_response_id.clone(),
            input_call_ids: judged.input_call_ids.clone(),
        });
        let recording = self.recording(route, &mut judged, &body);
        let created_conversation = (self.state.ledger.is_some() && items == crate::gate::ItemsAt::Items)
            .then(|| CreatedConversation {
                provider: judged.provider.clone(),
                team: self.team_name().map(str::to_owned),
            });
        Ok(Decided {
            provider: self.snapshot.provider(&judged.provider)?.clone(),
            body,
            answer_headers,
            recording,
            turn,
            created_conversation,
            usage: None,
        })
    }

    fn choose_ungated(&mut self, route: &PathRoute<'_>, body: Bytes) -> Result<Decided, ApiError> {
        let name = self.snapshot.router.choose(route, None)?;
        self.record.routed(name, None);
        if let Some(team) = &self.team {
            team.authorize_provider(name)?;
            // A body the model limit cannot read fails closed: the provider might read a model
            // in it (a form field, a JSON dialect, another spelling of `model`).
            if team.limits_models() && !body.is_empty() {
                match model_of(&body) {
                    Ok(Some(model)) => team.authorize_model(Some(&model))?,
                    Ok(None) => {}
                    Err(()) => {
                        return Err(team.model_not_allowed(
                            "(none that can be read: send a JSON object with one `model` string)".to_owned(),
                        ))
                    }
                }
            }
        }
        Ok(Decided {
            provider: self.snapshot.provider(name)?.clone(),
            body,
            answer_headers: Vec::new(),
            recording: None,
            turn: None,
            created_conversation: None,
            usage: None,
        })
    }

    /// What the ledger will record of the answer to a judged request: only `/responses` and
    /// `/responses/compact` answers are recorded (docs/ledger.md). Takes what it records from
    /// `judged` (its model, `previous_response_id` and input call ids) rather than copying it.
    fn recording(&self, route: &PathRoute<'_>, judged: &mut Judged, body: &[u8]) -> Option<Recording> {
        let ledger = self.state.ledger.as_ref()?;
        if !matches!(route.upstream_path, "/responses" | "/responses/compact") {
            return None;
        }
        let calls_check = judged.tools.clone().map(|tools| CallsCheck {
            tools,
            gate: self.state.gate.clone(),
            snapshot: self.snapshot.clone(),
            team: self.team.clone(),
        });
        Some(Recording {
            provider: judged.provider.clone(),
            model: judged.model.take(),
            team: self.team.as_ref().map(|team| team.name.clone()),
            keeps_nothing: self
                .snapshot
                .provider(&judged.provider)
                .is_ok_and(|provider| !provider.stores_responses),
            previous_response_id: judged.previous_response_id.take(),
            input_items: ledger.settings.store_items.then(|| input_items(body)).flatten(),
            input_call_ids: std::mem::take(&mut judged.input_call_ids),
            request_id: self.record.request_id.to_string(),
            calls_check,
            audit: self.state.audit.clone(),
            meters: self.snapshot.meters.clone(),
        })
    }

    /// Writes the audit line of a judged request, when the audit log is on.
    fn audit(&self, judged: &mut Judged) {
        if let (Some(log), Some(body_sha256)) = (&self.state.audit, judged.body_sha256.take()) {
            let request = AuditedRequest {
                request_id: &self.record.request_id,
                team: self.team.as_deref().map(|team| team.name.as_str()),
                key_id: self.record.key_id_name(),
                client_cert: self.record.client_cert_name(),
                provider: &judged.provider,
                model: judged.model.as_deref(),
            };
            log.write(&AuditLine::new(request, &judged.verdict, body_sha256));
        }
    }

    /// Forwards the decided bytes (with the client's method, query and headers) and returns the provider's answer as it streams, with the
    /// decision's headers.
    pub(super) async fn forward(
        &self,
        route: &PathRoute<'_>,
        method: Method,
        query: Option<&str>,
        headers: HeaderMap,
        decided: Decided,
    ) -> Result<Response<ProxyBody>, ApiError> {
        let outbound = Outbound {
            method,
            path: route.upstream_path,
            query,
            headers,
            body: decided.body,
        };
        let meter = self.snapshot.meters.provider(Some(decided.provider.name()));
        let sent = Instant::now();
        let forwarded = forward(&decided.provider, outbound).await;
        if forwarded.is_ok() {
            meter.upstream_time(sent.elapsed());
        }
        // A forward that failed drops the usage's count: missing.
        let mut response = forwarded.inspect_err(|error| self.upstream_error(&decided.provider, error))?;
        // An answer with an error status carries no usage: missing.
        let usage = decided.usage.filter(|_| response.status().is_success());
        match (&self.state.ledger, decided.recording) {
            (Some(ledger), Some(recording)) if response.status().is_success() => {
                response = record(response, ledger.clone(), recording, usage)
                    .await
                    .inspect_err(|error| self.upstream_error(&decided.provider, error))?;
            }
            _ => {
                if let Some(usage) = usage {
                    let (parts, body) = response.into_parts();
                    let body = UsageBody::wrap(body, &parts.headers, usage);
                    response = Response::from_parts(parts, body);
                }
            }
        }
        if let (Some(ledger), Some(created)) = (&self.state.ledger, decided.created_conversation) {
            if response.status().is_success() {
                response = record_conversation(response, ledger.clone(), created)
                    .await
                    .inspect_err(|error| self.upstream_error(&decided.provider, error))?;
            }
        }
        for (name, value) in decided.answer_headers {
            response.headers_mut().insert(name, value);
        }
        Ok(response)
    }

    /// Counts `error` against `provider` when the provider failed.
    fn upstream_error(&self, provider: &Provider, error: &ApiError) {
        self.snapshot.meters.upstream_error(provider.name(), error);
    }

    /// The answer, holding the request's in-flight permit until its body has streamed out.
    pub(super) fn answer(self, response: Response<ProxyBody>) -> Response<ProxyBody> {
        let permit = self.permit;
        response.map(|body| Holding::new(body, permit).boxed_unsync())
    }
}

/// The `model` of an ungated request's body, read strictly for a team whose models are
/// limited: the body must be one JSON object (RFC 8259: no byte order mark, `NaN` or trailing
/// comma) with at most one member `model`, a string, and no member that a lenient reader takes
/// for `model` ([`crate::gate::misspelling_of`], as the gate refuses such names on its paths). `Ok(None)`: an object without `model`.
fn model_of(body: &[u8]) -> Result<Option<String>, ()> {
    use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};

    struct ModelOnly;

    impl<'de> Visitor<'de> for ModelOnly {
        type Value = Option<String>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut model = None;
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if key == "model" {
                    if model.is_some() {
                        return Err(serde::de::Error::custom("`model` is given twice"));
                    }
                    model = Some(map.next_value::<String>()?);
                } else if crate::gate::misspelling_of(&key, &["model"]).is_some() {
                    return Err(serde::de::Error::custom("a member reads as `model`"));
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(model)
        }
    }

    let mut reader = serde_json::Deserializer::from_slice(body);
    let model = (&mut reader).deserialize_map(ModelOnly).map_err(|_| ())?;
    reader.end().map_err(|_| ())?;
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::model_of;

    #[test]
    fn the_model_of_a_json_body_is_read_and_anything_else_refused() {
        assert_eq!(
            model_of(br#"{"model":"gpt-5","messages":[]}"#),
            Ok(Some("gpt-5".into()))
        );
        assert_eq!(model_of(br#" {"messages":[],"meta":{"Model":"x"}} "#), Ok(None));
        for body in [
            &b""[..],
            b"--boundary\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\ngpt-4o",
            br#"{"model":"a","model":"b"}"#,
            br#"{"model":7}"#,
            br#"{"model":null}"#,
            br#"{"model":"gpt-5","MODEL":"llama"}"#,
            br#"{"Model":"llama"}"#,
            b"{\"mod\\u0000el\":\"llama\"}",
            "{\"mo\u{200b}del\":\"llama\"}".as_bytes(),
            br#"{"model":"gpt-4o","temperature":NaN}"#,
            "\u{feff}{\"model\":\"gpt-4o\"}".as_bytes(),
            br#"{"model":"gpt-4o",}"#,
            br#"{"model":"gpt-5"} {"model":"gpt-4o"}"#,
            br#"[{"model":"gpt-4o"}]"#,
        ] {
            assert_eq!(model_of(body), Err(()), "{}", String::from_utf8_lossy(body));
        }
    }
}
