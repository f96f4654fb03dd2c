//! The life of one request, as named phases: route the path, read the body, check the method
//! and charset, parse, choose the provider, gate, forward, answer.

use std::fmt::Write;
use std::sync::Arc;
use std::time::Instant;

use http::{HeaderValue, Method, Request, Response};
use http_body_util::BodyExt;

use super::access_log::{AccessRecord, REQUEST_ID_HEADER};
use super::body::{full, read_body, HeldBody, Holding, ProxyBody};
use super::exchange::{Exchange, LoggedBody};
use super::judge::judge;
use super::request_checks::{check_charset, check_method};
use super::state::ProxyState;
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
    let (parts, body) = request.into_parts();

    // Route the path: which provider prefix, whether (and where) its items are gated, what to
    // ask upstream.
    let route = state.router.classify(parts.uri.path())?;

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

    // Parse, choose the provider (by prefix, else by model), refuse a charset other than
    // UTF-8, and judge the items for the provider.
    let mut monitored = None;
    let provider = if let Some(items) = gated {
        let charset = check_charset(&parts.headers);
        let judged = judge(state, route.prefix, items, &body, charset).await?;
        record.routed(&judged.provider, judged.model.as_deref());
        record.judged(&judged.verdict);
        if !judged.verdict.is_allowed() {
            return Err(ApiError::rejected(&judged.provider, judged.verdict));
        }
        monitored = monitored_header(&judged.verdict);
        state.provider(&judged.provider)?
    } else {
        let name = state.router.choose(&route, None)?;
        record.routed(name, None);
        state.provider(name)?
    };

    // Forward the original bytes and answer with the provider's response as it streams.
    let outbound = Outbound {
        method: parts.method,
        path: route.upstream_path,
        query: parts.uri.query(),
        headers: parts.headers,
        body,
    };
    let mut response = forward(provider, outbound).await?;
    drop(reservation);
    if let Some(monitored) = monitored {
        response.headers_mut().insert(MONITORED_HEADER, monitored);
    }
    // The request stays in flight until its answer has streamed out.
    Ok(response.map(|body| Holding::new(body, permit).boxed_unsync()))
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
