//! The life of one request: the phases of `super::phases` in order (authenticate, route,
//! limit the rate, read the body, judge, limit the spend, forward, answer) over the configuration snapshot the
//! request started with, then the log phase: the access line, written when the answer's body
//! ends.

use std::sync::Arc;
use std::time::Instant;

use http::{Request, Response};
use http_body_util::BodyExt;
use tracing::Instrument;

use super::body::{full, ProxyBody};
use super::exchange::{Exchange, LoggedBody};
use super::phases::RequestContext;
use super::state::ProxyState;
use crate::error::ApiError;
use crate::telemetry::access_log::{AccessRecord, REQUEST_ID_HEADER};

/// Handles one request from start to answer; never fails (every error becomes an envelope).
///
/// Every phase runs inside the request's span (as does the answer's body, see
/// `LoggedBody`), so what is logged meanwhile names the request. The request's access line is
/// written exactly once, outside that span: when the answer's body has ended or was dropped,
/// or, if this future is dropped before it answers, then (status 499).
pub async fn handle<B>(state: Arc<ProxyState>, request: Request<B>) -> Response<ProxyBody>
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: Into<super::body::BoxError>,
{
    let record = AccessRecord::new(request.method(), request.uri().path(), request.headers());
    let mut exchange = Exchange::new(record, Instant::now()).metered(state.meter());
    if super::websocket::is_upgrade(&request) {
        return super::websocket::accept(state, request, exchange).await;
    }
    let span = exchange.record().span().clone();
    let (mut response, upstream) = match proxy(&state, request, exchange.record()).instrument(span).await {
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
    let (mut parts, body) = request.into_parts();
    let mut cx = RequestContext::begin(state, record)?;
    cx.authenticate(&mut parts.headers, parts.extensions.get())?;
    // Every authenticated request counts against its team's rate, refused or not; a route
    // error (404, or 403 for the path's provider) is answered before a 429.
    let rate = cx.limit_rate().await;
    let route = cx.route(parts.uri.path())?;
    rate?;
    cx.authorize_object(&route).await?;
    let held = cx.read_body(body, &parts.headers).await?;
    let mut judged = cx.judge(&route, &parts, held.bytes).await?;
    cx.limit_spend(&route, &parts.method, &mut judged).await?;
    let response = cx
        .forward(&route, parts.method, parts.uri.query(), parts.headers, judged)
        .await?;
    // The provider has every byte: the body's share of max_buffered_bytes goes back.
    drop(held.reservation);
    Ok(cx.answer(response))
}
