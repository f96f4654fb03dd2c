//! The life of one request, as named phases: route the path, read the body, choose the
//! provider and gate, forward, answer.

use std::sync::Arc;
use std::time::Instant;

use http::{Method, Request, Response};
use http_body_util::BodyExt;

use super::access_log::{AccessRecord, REQUEST_ID_HEADER};
use super::body::{full, read_body, HeldBody, HoldsPermit, ProxyBody};
use super::exchange::{Exchange, LoggedBody};
use super::provider::Provider;
use super::state::ProxyState;
use super::upstream::{forward, Outbound};
use crate::error::ApiError;
use crate::gate::{self, Target};

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
    state: &ProxyState,
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

    // Route the path: which provider prefix, whether it is gated, what to ask upstream.
    let route = state.router.classify(parts.uri.path())?;

    // Read the body, under the size cap, the read timeout and the budget of bodies held at
    // once. The body's share of the budget is held until the provider has answered (so it has
    // every byte) or the request is refused.
    let HeldBody {
        bytes: body,
        reservation,
    } = read_body(body, &parts.headers, state.body_limits, &state.buffered).await?;

    // Choose the provider (by prefix, else by model) and gate the items for it. Only a POST
    // carries a body to gate; anything else on a Responses path is forwarded as is.
    let provider = if route.gated && parts.method == Method::POST {
        let request = gate::parse(&body)?;
        let provider = choose(state, &route, request.model())?;
        record.routed(provider.name(), request.model());
        let verdict = state.gate.judge(&request, &Target::provider(&provider.profile));
        record.judged(&verdict);
        if !verdict.is_allowed() {
            return Err(ApiError::Rejected {
                provider: provider.name().to_owned(),
                violations: verdict.violations,
            });
        }
        provider
    } else {
        let provider = choose(state, &route, None)?;
        record.routed(provider.name(), None);
        provider
    };

    // Forward the original bytes and answer with the provider's response as it streams.
    let outbound = Outbound {
        method: parts.method,
        path: route.upstream_path,
        query: parts.uri.query(),
        headers: parts.headers,
        body,
    };
    let response = forward(provider, outbound).await?;
    drop(reservation);
    // The request stays in flight until its answer has streamed out.
    Ok(response.map(|body| HoldsPermit::new(body, permit).boxed_unsync()))
}

fn choose<'s>(
    state: &'s ProxyState,
    route: &crate::routing::PathRoute<'_>,
    model: Option<&str>,
) -> Result<&'s Provider, ApiError> {
    let name = state.router.choose(route, model)?;
    state
        .providers
        .get(name)
        .ok_or_else(|| ApiError::UnknownProvider(format!("provider `{name}` is not configured")))
}
