//! The relay: one loop that carries a socket's messages both ways.
//!
//! Client messages are judged (see [`super::message`]) and forwarded, or answered with an
//! error event on the same socket; server messages pass on unchanged, read by the turn's tap on
//! the way. Pings, pongs and close frames cross both ways. Each side is read only while the
//! last message is being delivered, so a client that does not read holds the provider back (no
//! queue grows); a delivery that makes no progress for the idle timeout ends the socket.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::request::Parts;
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Error as WsError, Message, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;

use super::handshake::{open, UpstreamSocket};
use super::message::{error_event, event_type, is_other_event, limit_reached_event};
use super::turns::{Pending, SocketTurns};
use super::{SocketCounts, SocketLimits};
use crate::error::ApiError;
use crate::ledger::{AnswerKind, Tap, TapLimits};
use crate::metrics::{LedgerOp, LedgerResult};
use crate::proxy::phases::{Decided, RequestContext};
use crate::proxy::state::ProxyState;
use crate::routing::PathRoute;

/// The client's socket.
pub(super) type ClientSocket = WebSocketStream<TokioIo<Upgraded>>;

/// How long the other side gets to answer a close before the socket is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// One socket's relay and what it knows.
pub(super) struct Relay<'c, 'r> {
    pub state: &'c Arc<ProxyState>,
    pub cx: &'c mut RequestContext<'r>,
    pub client: ClientSocket,
    /// The provider's socket, once a message chose the provider (or the path did).
    pub upstream: Option<UpstreamSocket>,
    /// The provider every message of the socket goes to, once chosen.
    pub provider: Option<String>,
    /// The upgrade request: its path routes every message, its headers (less the client's
    /// key) open the provider's socket; `post` is the head a message is judged under (a POST
    /// of JSON to that path).
    pub upgrade: Parts,
    pub post: Parts,
    /// The path after `/v1` on the provider.
    pub upstream_path: String,
    pub turns: Arc<SocketTurns>,
    pub limits: SocketLimits,
    pub pending: VecDeque<Pending>,
    pub counts: SocketCounts,
}

/// What the loop does after a message.
enum Flow {
    Go,
    Stop,
}

impl Relay<'_, '_> {
    /// Relays until either side closes or goes away, the socket stays idle, or it reaches its
    /// longest life.
    pub async fn run(mut self) -> SocketCounts {
        let deadline = Instant::now() + self.limits.max_duration;
        let mut last_activity = Instant::now();
        loop {
            let flow = tokio::select! {
                message = self.client.next() => {
                    last_activity = Instant::now();
                    self.on_client(message).await
                }
                message = next_of(&mut self.upstream) => {
                    last_activity = Instant::now();
                    self.on_upstream(message).await
                }
                () = tokio::time::sleep_until(last_activity + self.limits.idle) => {
                    self.counts.ended = "idle_timeout";
                    let frame = close_frame(CloseCode::Away, "idle timeout");
                    self.close_both(frame).await;
                    Flow::Stop
                }
                () = tokio::time::sleep_until(deadline) => {
                    self.counts.ended = "max_duration";
                    let minutes = self.limits.max_duration.as_secs().div_ceil(60);
                    let _ = self.send_client(Message::text(limit_reached_event(minutes))).await;
                    let frame = close_frame(CloseCode::Normal, "connection time limit reached");
                    self.close_both(frame).await;
                    Flow::Stop
                }
            };
            if let Flow::Stop = flow {
                return self.counts;
            }
        }
    }

    async fn on_client(&mut self, message: Option<Result<Message, WsError>>) -> Flow {
        match message {
            Some(Ok(Message::Text(text))) => self.client_data(Bytes::from(text), true).await,
            Some(Ok(Message::Binary(bytes))) => self.client_data(bytes, false).await,
            Some(Ok(message @ (Message::Ping(_) | Message::Pong(_)))) => {
                self.send_upstream(message).await;
                Flow::Go
            }
            Some(Ok(Message::Close(frame))) => {
                self.counts.ended = "client_closed";
                if self.send_upstream(Message::Close(frame)).await {
                    drain_until_closed(self.upstream.as_mut()).await;
                }
                Flow::Stop
            }
            Some(Ok(Message::Frame(_))) => Flow::Go,
            Some(Err(WsError::Capacity(_))) => {
                self.counts.ended = "message_too_large";
                let limit = self.limits.max_message_bytes;
                let reason = format!("a message may be at most {limit} bytes (max_body_bytes)");
                let _ = self
                    .send_client(Message::Close(Some(close_frame(CloseCode::Size, &reason))))
                    .await;
                self.send_upstream(Message::Close(Some(close_frame(
                    CloseCode::Away,
                    "client went away",
                ))))
                .await;
                Flow::Stop
            }
            Some(Err(_)) | None => {
                self.counts.ended = "client_gone";
                self.send_upstream(Message::Close(Some(close_frame(
                    CloseCode::Away,
                    "client went away",
                ))))
                .await;
                Flow::Stop
            }
        }
    }

    async fn on_upstream(&mut self, message: Option<Result<Message, WsError>>) -> Flow {
        match message {
            Some(Ok(Message::Text(text))) => {
                self.read_event(&text).await;
                self.counts.messages_out += 1;
                self.deliver(Message::Text(text)).await
            }
            Some(Ok(message @ Message::Binary(_))) => {
                self.counts.messages_out += 1;
                self.deliver(message).await
            }
            Some(Ok(message @ (Message::Ping(_) | Message::Pong(_)))) => self.deliver(message).await,
            Some(Ok(Message::Close(frame))) => {
                self.counts.ended = "provider_closed";
                if self.send_client(Message::Close(frame)).await {
                    drain_until_closed(Some(&mut self.client)).await;
                }
                Flow::Stop
            }
            Some(Ok(Message::Frame(_))) => Flow::Go,
            Some(Err(_)) | None => {
                self.counts.ended = "provider_gone";
                let frame = close_frame(CloseCode::Error, "the provider's connection ended");
                let _ = self.send_client(Message::Close(Some(frame))).await;
                Flow::Stop
            }
        }
    }

    /// A client text (or binary) message: passed on, or judged and forwarded or refused.
    async fn client_data(&mut self, bytes: Bytes, text: bool) -> Flow {
        self.counts.messages_in += 1;
        if is_other_event(&bytes) {
            if self.upstream.is_none() {
                let error = ApiError::BadUpgrade(
                    "send a response.create first: it chooses the provider this socket goes to".to_owned(),
                );
                return self.refuse(&error).await;
            }
            let message = match text {
                true => Utf8Bytes::try_from(bytes).map(Message::Text),
                false => Ok(Message::Binary(bytes)),
            };
            return match message {
                Ok(message) => self.forward(message).await,
                Err(_) => Flow::Go,
            };
        }
        let decided = match self.judge(bytes).await {
            Ok(decided) => decided,
            Err(error) => return self.refuse(&error).await,
        };
        if self.upstream.is_none() {
            let config = self.limits.upstream_config();
            let query = self.upgrade.uri.query();
            let headers = self.upgrade.headers.clone();
            match open(&decided.provider, &self.upstream_path, query, headers, config).await {
                Ok(socket) => {
                    self.upstream = Some(socket);
                    self.provider = Some(decided.provider.name().to_owned());
                }
                Err(error) => return self.refuse(&error).await,
            }
        }
        let Decided {
            body,
            recording,
            turn,
            ..
        } = decided;
        let message = match text {
            true => match Utf8Bytes::try_from(body) {
                Ok(body) => Message::Text(body),
                Err(_) => return self.refuse(&ApiError::JudgeFailed).await,
            },
            false => Message::Binary(body),
        };
        if let Some(turn) = turn {
            let tap = match (&self.state.ledger, &recording) {
                (Some(ledger), Some(recording)) => ledger.tap(AnswerKind::EventStream, recording),
                _ => Tap::new(AnswerKind::EventStream, TapLimits::default()),
            };
            self.pending.push_back(Pending { tap, turn, recording });
        }
        self.counts.forwarded += 1;
        self.forward(message).await
    }

    /// Sends a client message on to the provider; a provider that cannot take it ends the
    /// socket.
    async fn forward(&mut self, message: Message) -> Flow {
        if self.send_upstream(message).await {
            return Flow::Go;
        }
        self.counts.ended = "provider_gone";
        let frame = close_frame(CloseCode::Error, "the provider's connection ended");
        let _ = self.send_client(Message::Close(Some(frame))).await;
        Flow::Stop
    }

    /// Judges one message as a POST of it to the upgrade's path: the team's rate, the route
    /// (the socket's provider, once chosen, as if the path named it), then the gate.
    async fn judge(&mut self, body: Bytes) -> Result<Decided, ApiError> {
        let rate = self.cx.limit_rate().await;
        let route = self.cx.route(self.upgrade.uri.path())?;
        rate?;
        let route = match (&self.provider, route.prefix) {
            (Some(provider), None) => PathRoute {
                prefix: Some(provider.as_str()),
                ..route
            },
            _ => route,
        };
        self.cx.judge(&route, &self.post, body).await
    }

    /// Answers a refused message with its error event; the socket stays open.
    async fn refuse(&mut self, error: &ApiError) -> Flow {
        self.counts.refused += 1;
        let (provider, rejected) = match error {
            ApiError::Rejected { provider, .. } => (Some(provider.as_str()), true),
            _ => (self.provider.as_deref(), false),
        };
        self.cx
            .meters()
            .refused_message(provider, self.cx.team_name(), rejected);
        tracing::info!(
            code = error.code(),
            status = error.status().as_u16(),
            "a WebSocket message was refused"
        );
        match self.send_client(Message::text(error_event(error))).await {
            true => Flow::Go,
            false => Flow::Stop,
        }
    }

    /// Reads a server event with the oldest turn still answering; at its end, remembers the
    /// response and records it in the ledger before the event passes on.
    async fn read_event(&mut self, text: &str) {
        let Some(pending) = self.pending.front_mut() else {
            return;
        };
        pending.feed(text);
        if !pending.tap.is_complete() {
            if matches!(
                event_type(text).as_deref(),
                Some("response.failed" | "response.incomplete" | "error")
            ) {
                self.pending.pop_front();
            }
            return;
        }
        let Some(Pending { tap, turn, recording }) = self.pending.pop_front() else {
            return;
        };
        let Some(tapped) = tap.finish_kept() else {
            if let (Some(ledger), Some(_)) = (&self.state.ledger, &recording) {
                ledger.count(LedgerOp::Record, LedgerResult::Dropped);
            }
            return;
        };
        self.turns.remember(&turn, &tapped.record);
        if let (Some(ledger), Some(recording)) = (&self.state.ledger, recording) {
            let violations = recording.check_calls(&tapped);
            recording.report(&tapped.record.id, &violations);
            ledger.write(ledger.stored(tapped, recording)).await;
        }
    }

    /// Sends a server message on to the client.
    async fn deliver(&mut self, message: Message) -> Flow {
        match self.send_client(message).await {
            true => Flow::Go,
            false => {
                self.counts.ended = "client_gone";
                let frame = close_frame(CloseCode::Away, "client went away");
                self.send_upstream(Message::Close(Some(frame))).await;
                Flow::Stop
            }
        }
    }

    /// Sends to the client; `false` when it failed or made no progress for the idle timeout.
    async fn send_client(&mut self, message: Message) -> bool {
        matches!(
            tokio::time::timeout(self.limits.idle, self.client.send(message)).await,
            Ok(Ok(()))
        )
    }

    /// Sends to the provider, when its socket is open; `false` when that failed.
    async fn send_upstream(&mut self, message: Message) -> bool {
        let Some(upstream) = &mut self.upstream else {
            return !matches!(message, Message::Close(_));
        };
        matches!(
            tokio::time::timeout(self.limits.idle, upstream.send(message)).await,
            Ok(Ok(()))
        )
    }

    /// Closes both sides with `frame`, each given a moment to answer.
    async fn close_both(&mut self, frame: CloseFrame) {
        let (client, upstream) = (&mut self.client, &mut self.upstream);
        let client = async {
            let _ = tokio::time::timeout(CLOSE_GRACE, client.send(Message::Close(Some(frame.clone())))).await;
        };
        let upstream = async {
            if let Some(upstream) = upstream {
                let _ = tokio::time::timeout(CLOSE_GRACE, upstream.send(Message::Close(Some(frame.clone()))))
                    .await;
            }
        };
        tokio::join!(client, upstream);
    }
}

/// The next message of the provider's socket; never, while there is none.
async fn next_of(upstream: &mut Option<UpstreamSocket>) -> Option<Result<Message, WsError>> {
    match upstream {
        Some(socket) => socket.next().await,
        None => std::future::pending().await,
    }
}

/// Reads (and drops) what a socket still sends until its close arrives, it ends, or the grace
/// passes.
async fn drain_until_closed<S>(socket: Option<&mut WebSocketStream<S>>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let Some(socket) = socket else { return };
    let _ = tokio::time::timeout(CLOSE_GRACE, async {
        while let Some(Ok(message)) = socket.next().await {
            if message.is_close() {
                break;
            }
        }
    })
    .await;
}

fn close_frame(code: CloseCode, reason: &str) -> CloseFrame {
    CloseFrame {
        code,
        reason: Utf8Bytes::from(reason),
    }
}
