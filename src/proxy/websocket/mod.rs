//! WebSocket mode (docs/websocket.md): an upgrade on `GET /v1/responses` (also `/responses` and
//! `/{provider}/v1/responses`) is proxied to the provider's WebSocket endpoint, and every
//! `response.create` message on it is gated like a POST body.
//!
//! - `handshake`: recognising the upgrade, answering it, opening the provider's socket.
//! - `frames`: the client's side, framed by replaygate so each message is held in
//!   `max_buffered_bytes` from its frame's head until it is judged and forwarded.
//! - `relay`: the loop that carries messages both ways, judging the client's.
//! - `message`: which client messages are judged, and the error events.
//! - `turns`: the socket's memory of its earlier turns, which later messages continue: a
//!   source of earlier turns the judge asks as it asks the ledger
//!   (`EarlierTurns`).
//! - `fuzzing`: the client's side (frames and message heads) as its fuzz target drives it
//!   (built for the tests and with the `fuzzing` feature only).
//!
//! The upgrade is authenticated, rate limited and routed as a request is, and holds one
//! in-flight permit for the socket's life. With a provider prefix the provider's socket is
//! opened before the client's upgrade is answered (a refusal is answered with the provider's
//! status in the error envelope); without one, the first `response.create` chooses the
//! provider by its model and opens it (a refusal is then an error event). The access line is
//! written once, when the socket closes. When the server shuts down, its sockets close with
//! 1001 (see `OpenSockets`).

mod frames;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
mod handshake;
mod message;
mod relay;
mod turns;

use std::sync::Arc;

use http::request::Parts;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::sync::oneshot;
use tracing::Instrument;

pub(crate) use handshake::is_upgrade;
use turns::SocketTurns;

use super::body::{full, ProxyBody};
use super::exchange::Exchange;
use super::phases::RequestContext;
use super::state::ProxyState;
use crate::error::ApiError;
use crate::telemetry::access_log::{AccessRecord, SocketCounts, REQUEST_ID_HEADER};

/// The upstream path WebSocket mode serves.
const RESPONSES: &str = "/responses";

/// Answers a WebSocket upgrade (see [`is_upgrade`]): 101 and the relay, or the error envelope.
/// The socket runs on a task of its own, which writes the access line as it closes.
pub(crate) async fn accept<B>(
    state: Arc<ProxyState>,
    mut request: Request<B>,
    mut exchange: Exchange,
) -> Response<ProxyBody> {
    let on_upgrade = hyper::upgrade::on(&mut request);
    let (parts, _body) = request.into_parts();
    let request_id = exchange.record().request_id_header();
    let span = exchange.record().span().clone();
    let (answer, answered) = oneshot::channel();
    tokio::spawn(session(state, parts, on_upgrade, exchange, answer).instrument(span));
    let mut response = answered
        .await
        .unwrap_or_else(|_| ApiError::JudgeFailed.into_response().map(full));
    response.headers_mut().insert(REQUEST_ID_HEADER, request_id);
    response
}

/// The life of one socket, from the upgrade to its close.
async fn session(
    state: Arc<ProxyState>,
    parts: Parts,
    on_upgrade: OnUpgrade,
    mut exchange: Exchange,
    answer: oneshot::Sender<Response<ProxyBody>>,
) {
    exchange.answered(StatusCode::SWITCHING_PROTOCOLS, None);
    let mut answer = Some(answer);
    let served = serve(&state, parts, on_upgrade, exchange.record(), &mut answer).await;
    match served {
        Ok(counts) => exchange.record().socket(counts),
        Err(error) => {
            exchange.record().refused(&error);
            if let Some(answer) = answer.take() {
                exchange.answered(error.status(), None);
                let _ = answer.send(error.into_response().map(full));
            }
        }
    }
}

/// Checks and answers the upgrade (through `answer`), then relays until the socket closes.
async fn serve(
    state: &Arc<ProxyState>,
    mut upgrade: Parts,
    on_upgrade: OnUpgrade,
    record: &mut AccessRecord,
    answer: &mut Option<oneshot::Sender<Response<ProxyBody>>>,
) -> Result<SocketCounts, ApiError> {
    let mut cx = RequestContext::begin(state, record)?;
    cx.authenticate(&mut upgrade.headers, upgrade.extensions.get())?;
    let rate = cx.limit_rate().await;
    let path = upgrade.uri.path().to_owned();
    let route = cx.route(&path)?;
    rate?;
    if route.upstream_path != RESPONSES || !route.is_gated() {
        return Err(ApiError::BadUpgrade(format!(
            "WebSocket mode is served on /v1/responses only, not on {path}"
        )));
    }
    let key = handshake::client_key(&upgrade.headers)?;
    let limits = state.websocket.clone();
    // A prefix that is also a provider's own path leaves the choice to the first message's
    // model, as no prefix does.
    let (upstream, provider) = match cx.chosen_by_path(&route) {
        Some(prefix) => {
            let provider = cx.provider(prefix)?;
            let headers = upgrade.headers.clone();
            let socket = handshake::open(&provider, RESPONSES, upgrade.uri.query(), headers).await?;
            (Some(socket), Some(provider.name().to_owned()))
        }
        None => (None, None),
    };
    if let Some(answer) = answer.take() {
        let _ = answer.send(handshake::switching_protocols(&key));
    }
    let upgraded = on_upgrade
        .await
        .map_err(|error| ApiError::BodyUnreadable(format!("the upgrade failed: {error}")))?;
    let (read, write) = tokio::io::split(TokioIo::new(upgraded));
    let turns = Arc::new(SocketTurns::default());
    cx.continuing(turns.clone());
    let post = post_head(&upgrade);
    let relay = relay::Relay {
        state,
        cx: &mut cx,
        reader: frames::ClientReader::new(read, state.buffered.clone(), limits.max_message_bytes),
        writer: frames::ClientWriter::new(write),
        upstream,
        provider,
        upgrade,
        post,
        upstream_path: RESPONSES.to_owned(),
        turns,
        limits,
        shutdown: state.sockets.watch(),
        draining: false,
        pending: Default::default(),
        counts: SocketCounts::default(),
    };
    Ok(relay.run().await)
}

/// The head a message is judged under: a POST of JSON to the upgrade's path.
fn post_head(upgrade: &Parts) -> Parts {
    let (mut post, ()) = Request::new(()).into_parts();
    post.method = Method::POST;
    post.uri = upgrade.uri.clone();
    post.headers
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    post
}
