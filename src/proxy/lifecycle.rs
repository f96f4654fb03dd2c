//! The life of one request: the phases of [`super::phases`] in order (authenticate, route,
//! limit the rate, read the body, judge, forward, answer) over the configuration snapshot the
//! request started with, then the log phase: the access line, written when the answer's body
//! ends.

use std::fmt::Write;
use std::sync::Arc;
use std::time::Instant;

use http::{HeaderValue, Request, Response};
use http_body_util::BodyExt;

use super::access_log::{AccessRecord, REQUEST_ID_HEADER};
use super::body::{full, ProxyBody};
use super::exchange::{Exchange, LoggedBody};
use super::phases::RequestContext;
use super::state::ProxyState;
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
    let (mut parts, body) = request.into_parts();
    let mut cx = RequestContext::begin(state, record)?;
    cx.authenticate(&mut parts.headers)?;
    // Every authenticated request counts against its team's rate, refused or not; a route
    // error (404, or 403 for the path's provider) is answered before a 429.
    let rate = cx.limit_rate();
    let route = cx.route(parts.uri.path())?;
    rate?;
    let held = cx.read_body(body, &parts.headers).await?;
    let judged = cx.judge(&route, &parts, held.bytes).await?;
    let response = cx
        .forward(&route, parts.method, parts.uri.query(), parts.headers, judged)
        .await?;
    // The provider has every byte: the body's share of max_buffered_bytes goes back.
    drop(held.reservation);
    Ok(cx.answer(response))
}

/// The response header naming the violations a request was forwarded with.
pub const MONITORED_HEADER: &str = "x-replaygate-monitored";

/// `unknown_tool@input[4],status@input[7]`: the listed `monitor` violations of a verdict, if any.
pub(super) fn monitored_header(verdict: &Verdict, member: &str) -> Option<HeaderValue> {
    let mut names = String::new();
    for violation in verdict.with_action(Action::Monitor) {
        if !names.is_empty() {
            names.push(',');
        }
        let at = violation.location(member);
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
pub(super) fn stripped_header(
    member: &str,
    removed: &[usize],
    limit: usize,
) -> Option<(&'static str, HeaderValue)> {
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
