//! The life of one request, as named phases over the configuration snapshot it started with:
//! authenticate the client key, route the path, count the team's rate, read the body, check
//! the method, judge (choose the provider, authorize team, provider and model, check the
//! charset, gate, strip), audit, forward, answer; the access line is the log phase, written
//! when the answer's body ends.

use std::fmt::Write;
use std::sync::Arc;
use std::time::Instant;

use http::{HeaderValue, Method, Request, Response};
use http_body_util::BodyExt;

use bytes::Bytes;

use super::access_log::{AccessRecord, REQUEST_ID_HEADER};
use super::audit::AuditLine;
use super::body::{full, read_body, HeldBody, Holding, ProxyBody};
use super::exchange::{Exchange, LoggedBody};
use super::judge::{judge, Asker, Judged};
use super::rate_limit::retry_after_secs;
use super::request_checks::{check_charset, check_method};
use super::state::ProxyState;
use super::teams::Team;
use super::upstream::{forward, Outbound};
use crate::error::ApiError;
use crate::gate::{Action, Verdict};

/// Handles one request from start to answer; never fails (every error becomes an envelope).
///
/// The request's access line is written exactly once: when the answer's body has ended or was
/// dropped, or, if this future is dropped before it answers, then (status 499).
pub async fn handle<B>(state: Arc<ProxyState>, request: Request<B>) -> Response<ProxyBody>
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: Into<super::body::BoxError>,
{
    let record = AccessRecord::new(request.method(), request.uri().path(), request.headers());
    let mut exchange = Exchange::new(record, Instant::now());
    let (mut response, upstream) = match proxy(&state, request, exchange.record()).await {
        Ok(response) => {
            let status = response.status();
            (response, Some(status))
        }
        Err(error) => {
            exchange.record().refused(&error);
            (error.into_response().map(full), None)
        }
    };
    response
        .headers_mut()
        .insert(REQUEST_ID_HEADER, exchange.record().request_id_header());
    exchange.answered(response.status(), upstream);
    response.map(|body| LoggedBody::new(body, exchange).boxed_unsync())
}

async fn proxy<B>(
    state: &Arc<ProxyState>,
    request: Request<B>,
    record: &mut AccessRecord,
) -> Result<Response<ProxyBody>, ApiError>
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: Into<super::body::BoxError>,
{
    let permit = state
        .in_flight
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::Overloaded {
            limit: state.max_in_flight,
        })?;
    let (mut parts, body) = request.into_parts();
    // The configuration this request lives under, to its end, whatever reloads meanwhile.
    let snapshot = state.snapshot();

    // Authenticate: the client key's team (401), the key headers removed for good.
    let team = snapshot.teams.authenticate(&mut parts.headers)?;
    record.team(team.as_deref());

    // Route the path: which provider prefix, whether (and where) its items are gated, what to
    // ask upstream. A provider the path names must be one the team may use (403).
    let route = snapshot.router.classify(parts.uri.path())?;
    if let (Some(team), Some(prefix)) = (&team, route.prefix) {
        team.authorize_provider(prefix)?;
    }

    // Count the request against its team's rate (429) before its body is read.
    limit_rate(state, team.as_deref())?;

    // Read the body, under the size cap, the read timeout and the budget of bodies held at
    // once. The body's share of the budget is held until the provider has answered (so it has
    // every byte) or the request is refused.
    let HeldBody {
        bytes: body,
        reservation,
    } = read_body(body, &parts.headers, state.body_limits, &state.buffered).await?;

    // Check the head of a gated request: only POST carries a body onward, and only as UTF-8, so
    // the provider reads the bytes the gate judged as the gate read them.
    let gated = route.items.filter(|_| parts.method == Method::POST);
    if route.is_gated() {
        check_method(&parts.method, parts.uri.path(), &parts.headers, body.len())?;
    }

    // Judge: parse, choose the provider (by prefix, else by model), authorize the team for it
    // and the model (403), refuse a charset other than UTF-8, judge the items under the
    // team's policy and cut out what it strips.
    let mut answer_headers = Vec::new();
    let (provider, body) = if let Some(items) = gated {
        let asker = Asker {
            snapshot: snapshot.clone(),
            team: team.clone(),
        };
        let charset = check_charset(&parts.headers);
        let judged = judge(state, &asker, route.prefix, items, &body, charset).await?;
        record.routed(&judged.provider, judged.model.as_deref());
        record.judged(&judged.verdict);
        audit(state, record, team.as_deref(), &judged, &body);
        if !judged.verdict.is_allowed() {
            return Err(ApiError::rejected(&judged.provider, judged.verdict));
        }
        let limit = snapshot.policy_of(team.as_deref()).max_listed;
        if let Some(monitored) = monitored_header(&judged.verdict) {
            answer_headers.push((MONITORED_HEADER, monitored));
        }
        let body = match judged.stripped {
            Some(stripped) => {
                answer_headers.extend(stripped_header(items.member(), &stripped.removed, limit));
                Bytes::from(stripped.body)
            }
            None => body,
        };
        (snapshot.provider(&judged.provider)?.clone(), body)
    } else {
        let name = snapshot.router.choose(&route, None)?;
        record.routed(name, None);
        if let Some(team) = &team {
            team.authorize_provider(name)?;
            if team.limits_models() {
                let model = model_of(&body).map_err(|()| ApiError::ModelNotAllowed {
                    team: team.name.clone(),
                    model: "(a `model` that cannot be read)".to_owned(),
                })?;
                team.authorize_model(model.as_deref())?;
            }
        }
        (snapshot.provider(name)?.clone(), body)
    };

    // Forward the original bytes (less any stripped items) and answer with the provider's
    // response as it streams.
    let outbound = Outbound {
        method: parts.method,
        path: route.upstream_path,
        query: parts.uri.query(),
        headers: parts.headers,
        body,
    };
    let mut response = forward(&provider, outbound).await?;
    drop(reservation);
    for (name, value) in answer_headers {
        response.headers_mut().insert(name, value);
    }
    // The request stays in flight until its answer has streamed out.
    Ok(response.map(|body| Holding::new(body, permit).boxed_unsync()))
}

/// The rate phase: counts the request against its team's `requests_per_minute` (every
/// authenticated request counts, refused or not).
fn limit_rate(state: &ProxyState, team: Option<&Team>) -> Result<(), ApiError> {
    let Some((team, per_minute)) = team.and_then(|team| Some((team, team.per_minute?))) else {
        return Ok(());
    };
    state
        .limiter
        .check(&team.name, per_minute)
        .map_err(|wait| ApiError::RateLimited {
            team: team.name.clone(),
            per_minute: per_minute.get(),
            retry_after: retry_after_secs(wait),
        })
}

/// Writes the audit line of a judged request, when the audit log is on.
fn audit(state: &ProxyState, record: &AccessRecord, team: Option<&Team>, judged: &Judged, body: &[u8]) {
    if let Some(log) = &state.audit {
        log.write(&AuditLine::new(
            &record.request_id,
            team.map(|team| team.name.as_str()),
            &judged.provider,
            judged.model.as_deref(),
            &judged.verdict,
            body,
        ));
    }
}

/// The `model` of an ungated request's JSON body, for a team whose models are limited. A body
/// that is not a JSON object names no model; an object whose `model` cannot be read (not a
/// string, or given twice) is refused, since the provider might read one.
fn model_of(body: &[u8]) -> Result<Option<String>, ()> {
    #[derive(serde::Deserialize)]
    struct Named {
        model: Option<String>,
    }
    let looks_like_object = body
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'{');
    if !looks_like_object {
        return Ok(None);
    }
    match serde_json::from_slice::<Named>(body) {
        Ok(named) => Ok(named.model),
        Err(error) if error.is_syntax() || error.is_eof() => Ok(None),
        Err(_) => Err(()),
    }
}

/// The response header naming the violations a request was forwarded with.
pub const MONITORED_HEADER: &str = "x-replaygate-monitored";

/// `unknown_tool@input[4],status@input[7]`: the listed `monitor` violations of a verdict, if any.
fn monitored_header(verdict: &Verdict) -> Option<HeaderValue> {
    let mut names = String::new();
    for violation in verdict.with_action(Action::Monitor) {
        if !names.is_empty() {
            names.push(',');
        }
        let at = violation.param.split('.').next().unwrap_or(&violation.param);
        write!(names, "{}@{at}", violation.reason).expect("writing to a String");
    }
    if names.is_empty() {
        return None;
    }
    HeaderValue::try_from(names).ok()
}

/// The response header naming the items cut from the forwarded body.
pub const STRIPPED_HEADER: &str = "x-replaygate-stripped";

/// `input[1],input[2]`: the items cut out, at most `limit` named (then `+N`).
fn stripped_header(member: &str, removed: &[usize], limit: usize) -> Option<(&'static str, HeaderValue)> {
    let mut names = String::new();
    for index in removed.iter().take(limit) {
        if !names.is_empty() {
            names.push(',');
        }
        write!(names, "{member}[{index}]").expect("writing to a String");
    }
    if removed.len() > limit {
        write!(names, ",+{}", removed.len() - limit).expect("writing to a String");
    }
    let value = HeaderValue::try_from(names).ok()?;
    Some((STRIPPED_HEADER, value))
}
