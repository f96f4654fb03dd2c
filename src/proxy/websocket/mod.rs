//! WebSocket mode (docs/websocket.md): an upgrade on `GET /v1/responses` (also `/responses` and
//! `/{provider}/v1/responses`) is proxied to the provider's WebSocket endpoint, and every
//! `response.create` message on it is gated like a POST body.
//!
//! - `handshake`: recognising the upgrade, answering it, opening the provider's socket.
//! - `frames`: the client's side, framed by replaygate so each message is held in
//!   `max_buffered_bytes` from its frame's head until it is judged and forwarded.
//! - `relay`: the loop that carries messages both ways, judging the client's.
//! - `message`: which client messages are judged, and the error events.
//! - `turns`: the socket's memory of its earlier turns, which later messages continue.
//! - [`fuzzing`]: the client's side (frames and message heads) as its fuzz target drives it.
//!
//! The upgrade is authenticated, rate limited and routed as a request is, and holds one
//! in-flight permit for the socket's life. With a provider prefix the provider's socket is
//! opened before the client's upgrade is answered (a refusal is answered with the provider's
//! status in the error envelope); without one, the first `response.create` chooses the
//! provider by its model and opens it (a refusal is then an error event). The access line is
//! written once, when the socket closes. When the server shuts down, its sockets close with
//! 1001 (see [`OpenSockets`]).

mod frames;
pub mod fuzzing;
mod handshake;
mod message;
mod relay;
mod turns;

use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::sync::{oneshot, watch};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tracing::Instrument;

pub(crate) use handshake::is_upgrade;
pub(crate) use turns::{SocketTurns, Turn};

use super::body::{full, ProxyBody};
use super::exchange::Exchange;
use super::phases::RequestContext;
use super::state::ProxyState;
use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::telemetry::access_log::{AccessRecord, SocketCounts, REQUEST_ID_HEADER};

/// The upstream path WebSocket mode serves.
const RESPONSES: &str = "/responses";

/// The limits of a socket.
#[derive(Debug, Clone)]
pub struct SocketLimits {
    /// The largest client message (and frame): `max_body_bytes`; larger closes with 1009.
    pub max_message_bytes: usize,
    /// A socket on which nothing passed for this long is closed (1001).
    pub idle: Duration,
    /// The longest life of a socket.
    pub max_duration: Duration,
    /// The client event types forwarded unjudged (`websocket_client_events`, less
    /// `response.create`, which is always judged).
    pub client_events: Arc<[String]>,
}

impl SocketLimits {
    /// The limits `[server]` sets.
    pub fn of(server: &ServerConfig) -> SocketLimits {
        SocketLimits {
            max_message_bytes: server.max_body_bytes,
            idle: server.websocket_idle_timeout,
            max_duration: server.websocket_max_duration,
            client_events: server
                .websocket_client_events
                .iter()
                .filter(|kind| kind.as_str() != message::RESPONSE_CREATE)
                .cloned()
                .collect(),
        }
    }

    /// The provider side: tungstenite's own limits on what the provider sends.
    fn upstream_config(&self) -> WebSocketConfig {
        WebSocketConfig::default()
    }
}

/// Where the server's shutdown stands, as open sockets see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Serving.
    Serving,
    /// Shutting down: a socket closes (1001) as soon as no turn is streaming on it.
    Draining,
    /// The grace period is over: every socket closes (1001) now.
    Closing,
}

/// The open WebSockets of one worker, which the server tells when it shuts down and waits for.
#[derive(Debug)]
pub struct OpenSockets {
    stage: watch::Sender<Stage>,
}

impl Default for OpenSockets {
    fn default() -> Self {
        OpenSockets {
            stage: watch::Sender::new(Stage::Serving),
        }
    }
}

impl OpenSockets {
    /// How many sockets are open.
    pub fn count(&self) -> usize {
        self.stage.receiver_count()
    }

    /// Shutdown began: each socket closes with 1001 once no turn streams on it.
    pub fn drain(&self) {
        self.stage.send_replace(Stage::Draining);
    }

    /// The grace period is over: every socket closes with 1001 now.
    pub fn close_all(&self) {
        self.stage.send_replace(Stage::Closing);
    }

    /// Waits until every socket has closed.
    pub async fn closed(&self) {
        self.stage.closed().await;
    }

    /// A new socket's view of the shutdown; it counts as open while this lives.
    fn watch(&self) -> watch::Receiver<Stage> {
        let mut stage = self.stage.subscribe();
        if *stage.borrow() != Stage::Serving {
            stage.mark_changed();
        }
        stage
    }
}

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
    cx.authenticate(&mut upgrade.headers)?;
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
            let socket = handshake::open(
                &provider,
                RESPONSES,
                upgrade.uri.query(),
                headers,
                limits.upstream_config(),
            )
            .await?;
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
    cx.on_socket(turns.clone());
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
