//! The relay: one loop that carries a socket's messages both ways.
//!
//! Client messages are judged (see [`super::message`]) and forwarded, or answered with an
//! error event on the same socket; server messages pass on unchanged, read by the turn's tap on
//! the way. Pings, pongs and close frames cross both ways. Each side is read only while the
//! last message is being delivered, so a client that does not read holds the provider back (no
//! queue grows); a delivery that makes no progress for the idle timeout ends the socket.
//!
//! A client message holds its bytes in `max_buffered_bytes` (see [`super::frames`]) until it
//! is forwarded or refused; a large one goes to the provider in fragments, so no buffer of the
//! provider's socket grows to its size.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::request::Parts;
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::{ReadHalf, WriteHalf};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Error as WsError, Message, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;

use super::frames::{ClientReader, ClientWriter, Incoming, ReadError};
use super::handshake::{open, UpstreamSocket};
use super::message::{error_event, event_type, limit_reached_event, read_head, unsupported, Head, Named};
use super::turns::{Pending, SocketTurns};
use crate::error::ApiError;
use crate::ledger::{AnswerKind, Ended, Tap, TapLimits};
use crate::proxy::ledger::recording::CheckCalls;
use crate::proxy::phases::{Decided, RequestContext};
use crate::proxy::sockets::{SocketLimits, Stage};
use crate::proxy::state::ProxyState;
use crate::routing::PathRoute;
use crate::telemetry::access_log::SocketCounts;

/// The client's connection, as the relay reads and writes it.
type ClientIo = TokioIo<Upgraded>;

/// How long the other side gets to answer a close before the socket is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The largest fragment a client message goes to the provider in.
const FORWARD_FRAGMENT: usize = 64 << 10;

/// One socket's relay and what it knows.
pub(super) struct Relay<'c, 'r> {
    pub(crate) state: &'c Arc<ProxyState>,
    pub(crate) cx: &'c mut RequestContext<'r>,
    /// The client's frames in, and out.
    pub(crate) reader: ClientReader<ReadHalf<ClientIo>>,
    pub(crate) writer: ClientWriter<WriteHalf<ClientIo>>,
    /// The provider's socket, once a message chose the provider (or the path did).
    pub(crate) upstream: Option<UpstreamSocket>,
    /// The provider every message of the socket goes to, once chosen.
    pub(crate) provider: Option<String>,
    /// The upgrade request: its path routes every message, its headers (less the client's
    /// key) open the provider's socket; `post` is the head a message is judged under (a POST
    /// of JSON to that path).
    pub(crate) upgrade: Parts,
    pub(crate) post: Parts,
    /// The path after `/v1` on the provider.
    pub(crate) upstream_path: String,
    pub(crate) turns: Arc<SocketTurns>,
    pub(crate) limits: SocketLimits,
    /// The server's shutdown, as it stands.
    pub(crate) shutdown: watch::Receiver<Stage>,
    /// Shutdown began: the socket closes once no turn streams on it.
    pub(crate) draining: bool,
    pub(crate) pending: VecDeque<Pending>,
    pub(crate) counts: SocketCounts,
}

/// What the loop does after a message.
enum Flow {
    Go,
    Stop,
}

impl Relay<'_, '_> {
    /// Relays until either side closes or goes away, the socket stays idle, or it reaches its
    /// longest life.
    pub(super) async fn run(mut self) -> SocketCounts {
        let deadline = Instant::now() + self.limits.max_duration;
        let mut last_activity = Instant::now();
        loop {
            let flow = tokio::select! {
                incoming = self.reader.next() => {
                    last_activity = Instant::now();
                    self.on_client(incoming).await
                }
                message = next_of(&mut self.upstream) => {
                    last_activity = Instant::now();
                    match self.on_upstream(message).await {
                        Flow::Go if self.draining && self.pending.is_empty() => self.go_away().await,
                        flow => flow,
                    }
                }
                changed = self.shutdown.changed() => {
                    let stage = match changed {
                        Ok(()) => *self.shutdown.borrow_and_update(),
                        Err(_) => Stage::Closing,
                    };
                    self.draining = true;
                    match (stage, self.pending.is_empty()) {
                        (Stage::Serving, _) => Flow::Go,
                        (Stage::Draining, false) => Flow::Go,
                        _ => self.go_away().await,
                    }
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
                self.record_unfinished();
                return self.counts;
            }
        }
    }

    /// The server shuts down: both sides close with 1001.
    async fn go_away(&mut self) -> Flow {
        self.counts.ended = "shutdown";
        self.close_both(close_frame(CloseCode::Away, "server shutting down"))
            .await;
        Flow::Stop
    }

    async fn on_client(&mut self, incoming: Result<Incoming, ReadError>) -> Flow {
        let incoming = match incoming {
            Ok(incoming) => incoming,
            Err(error) => return self.client_failed(error).await,
        };
        match incoming.message {
            Message::Text(text) => {
                let flow = self.client_data(Bytes::from(text), true).await;
                drop(incoming.held);
                flow
            }
            Message::Binary(bytes) => {
                let flow = self.client_data(bytes, false).await;
                drop(incoming.held);
                flow
            }
            Message::Ping(data) => {
                if !self.send_client(Message::Pong(data.clone())).await {
                    return self.client_gone().await;
                }
                self.send_upstream(Message::Ping(data)).await;
                Flow::Go
            }
            message @ Message::Pong(_) => {
                self.send_upstream(message).await;
                Flow::Go
            }
            Message::Close(frame) => {
                self.counts.ended = "client_closed";
                let _ = self.send_client(Message::Close(frame.clone())).await;
                if self.send_upstream(Message::Close(frame)).await {
                    drain_until_closed(self.upstream.as_mut()).await;
                }
                Flow::Stop
            }
            Message::Frame(_) => Flow::Go,
        }
    }

    /// The client's side cannot be read on: a message too large, or over the budget, a broken
    /// protocol, or a client gone.
    async fn client_failed(&mut self, error: ReadError) -> Flow {
        let (ended, code) = match &error {
            ReadError::Gone => return self.client_gone().await,
            ReadError::TooLarge { .. } => ("message_too_large", CloseCode::Size),
            ReadError::Overloaded { limit } => {
                self.counts.messages_in += 1;
                let _ = self.refuse(&ApiError::BufferFull { limit: *limit }).await;
                ("overloaded", CloseCode::Again)
            }
            ReadError::Protocol { code, .. } => ("protocol_error", *code),
        };
        self.counts.ended = ended;
        let reason = error.to_string();
        let _ = self
            .send_client(Message::Close(Some(close_frame(code, &reason))))
            .await;
        self.send_upstream(Message::Close(Some(close_frame(
            CloseCode::Away,
            "client went away",
        ))))
        .await;
        // What the client still sends is read and dropped until its close, so it reads ours.
        self.drain_client().await;
        Flow::Stop
    }

    /// Reads (and drops) what the client still sends until its close arrives, it ends, or the
    /// grace passes.
    async fn drain_client(&mut self) {
        self.reader.discard();
        let reader = &mut self.reader;
        let _ = tokio::time::timeout(CLOSE_GRACE, async {
            while let Ok(incoming) = reader.next().await {
                if incoming.message.is_close() {
                    break;
                }
            }
        })
        .await;
    }

    /// The client went away: the provider's side closes too.
    async fn client_gone(&mut self) -> Flow {
        self.counts.ended = "client_gone";
        self.send_upstream(Message::Close(Some(close_frame(
            CloseCode::Away,
            "client went away",
        ))))
        .await;
        Flow::Stop
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
                    self.drain_client().await;
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

    /// A client text (or binary) message: judged and forwarded or refused, or an event of
    /// another type, forwarded unjudged when the socket accepts its type (and its team may
    /// reach the state it names) and refused otherwise. A message whose head repeats or
    /// misspells a member the relay reads is refused before anything else.
    async fn client_data(&mut self, bytes: Bytes, text: bool) -> Flow {
        self.counts.messages_in += 1;
        let head = read_head(&bytes);
        if let Some(refusal) = &head.refusal {
            return self.refuse_message(&head, refusal.error()).await;
        }
        if let Some(kind) = &head.other_type {
            return self.client_event(kind, &head, bytes, text).await;
        }
        let decided = match self.judge(bytes, &head).await {
            Ok(decided) => decided,
            Err(error) => return self.refuse_message(&head, error).await,
        };
        if self.upstream.is_none() {
            let query = self.upgrade.uri.query();
            let headers = self.upgrade.headers.clone();
            match open(&decided.provider, &self.upstream_path, query, headers).await {
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
            usage,
            ..
        } = decided;
        let message = match text {
            true => match Utf8Bytes::try_from(body) {
                Ok(body) => Message::Text(body),
                Err(_) => return self.refuse(&ApiError::JudgeFailed).await,
            },
            false => Message::Binary(body),
        };
        if turn.is_some() || usage.is_some() {
            let tap = match (&self.state.ledger, &recording) {
                (Some(ledger), Some(recording)) => ledger.tap(AnswerKind::EventStream, recording),
                _ => Tap::new(AnswerKind::EventStream, TapLimits::default()),
            };
            self.pending.push_back(Pending {
                tap,
                turn,
                stored: head.store != Some(false),
                recording,
                usage,
            });
        }
        self.counts.forwarded += 1;
        self.forward(message).await
    }

    /// An event of another type than `response.create`: refused unless the socket accepts its
    /// type; then each id it names must be a string (or `null`), and, with teams, name state
    /// the team may reach, as the state's HTTP route would check it (404 `not_found` for
    /// another team's or, under `unknown_owner = "deny"`, an unknown one). Forwarded unchanged.
    async fn client_event(&mut self, kind: &str, head: &Head, bytes: Bytes, text: bool) -> Flow {
        if !self.limits.client_events.iter().any(|accepted| accepted == kind) {
            return self.refuse(&unsupported(kind)).await;
        }
        if let Some(refusal) = head.names.iter().find_map(|named| named.unreadable(kind)) {
            return self.refuse(&refusal.error()).await;
        }
        if self.upstream.is_none() {
            let error = ApiError::BadUpgrade(
                "send a response.create first: it chooses the provider this socket goes to".to_owned(),
            );
            return self.refuse(&error).await;
        }
        for object in head.names.iter().filter_map(Named::object) {
            if let Err(error) = self.cx.authorize_named(object).await {
                return self.refuse(&error).await;
            }
        }
        let message = match text {
            true => Utf8Bytes::try_from(bytes).map(Message::Text),
            false => Ok(Message::Binary(bytes)),
        };
        match message {
            Ok(message) => self.forward(message).await,
            Err(_) => Flow::Go,
        }
    }

    /// Refuses a message that was to be judged; a refused continuation evicts the unstored
    /// response it named.
    async fn refuse_message(&mut self, head: &Head, error: ApiError) -> Flow {
        let refused_for_itself =
            error.status().is_client_error() && error.status() != http::StatusCode::TOO_MANY_REQUESTS;
        if let Some(previous) = head
            .previous_response_id
            .as_deref()
            .filter(|_| refused_for_itself)
        {
            if self.turns.evict_unstored(previous) {
                tracing::info!("a refused continuation evicted the unstored response it named");
            }
        }
        self.refuse(&error).await
    }

    /// Sends a client message on to the provider, a large one in fragments; a provider that
    /// cannot take it ends the socket.
    async fn forward(&mut self, message: Message) -> Flow {
        let sent = match message {
            Message::Text(text) if text.len() > FORWARD_FRAGMENT => {
                self.send_fragments(Bytes::from(text), Data::Text).await
            }
            Message::Binary(bytes) if bytes.len() > FORWARD_FRAGMENT => {
                self.send_fragments(bytes, Data::Binary).await
            }
            message => self.send_upstream(message).await,
        };
        if sent {
            return Flow::Go;
        }
        self.counts.ended = "provider_gone";
        let frame = close_frame(CloseCode::Error, "the provider's connection ended");
        let _ = self.send_client(Message::Close(Some(frame))).await;
        Flow::Stop
    }

    /// Sends one message to the provider as fragments of at most [`FORWARD_FRAGMENT`] bytes,
    /// so the provider socket's write buffer never grows to the message's size.
    async fn send_fragments(&mut self, bytes: Bytes, kind: Data) -> bool {
        let mut start = 0;
        while start < bytes.len() {
            let end = (start + FORWARD_FRAGMENT).min(bytes.len());
            let opcode = OpCode::Data(if start == 0 { kind } else { Data::Continue });
            let fragment = Frame::message(bytes.slice(start..end), opcode, end == bytes.len());
            if !self.send_upstream(Message::Frame(fragment)).await {
                return false;
            }
            start = end;
        }
        true
    }

    /// Judges one message as a POST of it to the upgrade's path: the team's rate, the route
    /// (the socket's provider, once chosen, as if the path named it), whether it continues a
    /// response this socket evicted, then the gate.
    async fn judge(&mut self, body: Bytes, head: &Head) -> Result<Decided, ApiError> {
        let rate = self.cx.limit_rate().await;
        let route = self.cx.route(self.upgrade.uri.path())?;
        rate?;
        if let Some(previous) = &head.previous_response_id {
            if self.turns.is_evicted(previous) {
                return Err(ApiError::PreviousResponseNotFound(previous.clone()));
            }
        }
        let route = match &self.provider {
            Some(provider) => PathRoute {
                prefix: Some(provider.as_str()),
                ..route
            },
            None => route,
        };
        let mut decided = self.cx.judge(&route, &self.post, body).await?;
        self.cx
            .limit_spend(&route, &self.post.method, &mut decided)
            .await?;
        Ok(decided)
    }

    /// Answers a refused message with its error event; the socket stays open.
    async fn refuse(&mut self, error: &ApiError) -> Flow {
        self.counts.refused(error.code());
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

    /// Reads a server event with the oldest turn still answering; at its end (its terminal
    /// event, read by the tap, or named by the event's type once the tap gave up), delivers
    /// the turn's usage (docs/usage.md), remembers a completed response and records what the
    /// answer left in the ledger (its items, or its response's id alone, for its team) before
    /// the event passes on.
    async fn read_event(&mut self, text: &str) {
        let Some(pending) = self.pending.front_mut() else {
            return;
        };
        pending.feed(text);
        let kind = event_type(text);
        let terminal = matches!(
            kind.as_deref(),
            Some(
                "response.completed"
                    | "response.failed"
                    | "response.incomplete"
                    | "response.cancelled"
                    | "error"
            )
        );
        if !pending.tap.has_ended() && !terminal {
            return;
        }
        let Some(Pending {
            tap,
            turn,
            stored,
            recording,
            usage,
        }) = self.pending.pop_front()
        else {
            return;
        };
        let too_large = tap.too_large();
        let (ended, read) = tap.end_read();
        if let Some(usage) = usage {
            usage.deliver(read);
        }
        if let (Ended::Items(tapped), Some(turn)) = (&ended, &turn) {
            // The socket's own chain knows the calls of completed turns alone.
            if tapped.complete {
                self.turns.remember(turn, &tapped.record, stored);
            }
        }
        let (Some(ledger), Some(recording)) = (&self.state.ledger, recording) else {
            return;
        };
        // An error event before any response: the provider refused the message, and there is
        // nothing to record.
        if ended == Ended::Nothing && kind.as_deref() == Some("error") {
            return;
        }
        if let Some(record) = ledger.to_store(ended, too_large, recording, CheckCalls::Yes) {
            ledger.write(record).await;
        }
    }

    /// The socket ends: the turns still answering have their usage missing (docs/usage.md),
    /// and what they delivered is recorded, each on a task of its own (their responses may
    /// live on at the provider).
    fn record_unfinished(&mut self) {
        let Some(ledger) = &self.state.ledger else {
            // Each turn's count, dropped, is missing.
            self.pending.clear();
            return;
        };
        for Pending { tap, recording, .. } in self.pending.drain(..) {
            if let Some(recording) = recording {
                let too_large = tap.too_large();
                ledger.record_in_background(tap.end(), too_large, recording);
            }
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
            tokio::time::timeout(self.limits.idle, self.writer.send(message)).await,
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
        let (client, upstream) = (&mut self.writer, &mut self.upstream);
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
