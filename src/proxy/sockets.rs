//! What every request's state holds of WebSocket mode (docs/websocket.md): the limits `[server]`
//! sets on a socket, and the sockets a worker holds open, which the server tells when it shuts
//! down. The sockets themselves are [`super::websocket`]'s; the proxy's state and server only
//! hold these.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::config::ServerConfig;

/// The client message type that is judged (never forwarded unjudged).
pub(crate) const RESPONSE_CREATE: &str = "response.create";

/// The limits of a socket.
#[derive(Debug, Clone)]
pub(crate) struct SocketLimits {
    /// The largest client message (and frame): `max_body_bytes`; larger closes with 1009.
    pub(crate) max_message_bytes: usize,
    /// A socket on which nothing passed for this long is closed (1001).
    pub(crate) idle: Duration,
    /// The longest life of a socket.
    pub(crate) max_duration: Duration,
    /// The client event types forwarded unjudged (`websocket_client_events`, less
    /// `response.create`, which is always judged).
    pub(crate) client_events: Arc<[String]>,
}

impl SocketLimits {
    /// The limits `[server]` sets.
    pub(crate) fn of(server: &ServerConfig) -> SocketLimits {
        SocketLimits {
            max_message_bytes: server.max_body_bytes,
            idle: server.websocket_idle_timeout,
            max_duration: server.websocket_max_duration,
            client_events: server
                .websocket_client_events
                .iter()
                .filter(|kind| kind.as_str() != RESPONSE_CREATE)
                .cloned()
                .collect(),
        }
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
pub(crate) struct OpenSockets {
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
    pub(crate) fn count(&self) -> usize {
        self.stage.receiver_count()
    }

    /// Shutdown began: each socket closes with 1001 once no turn streams on it.
    pub(crate) fn drain(&self) {
        self.stage.send_replace(Stage::Draining);
    }

    /// The grace period is over: every socket closes with 1001 now.
    pub(crate) fn close_all(&self) {
        self.stage.send_replace(Stage::Closing);
    }

    /// Waits until every socket has closed.
    pub(crate) async fn closed(&self) {
        self.stage.closed().await;
    }

    /// A new socket's view of the shutdown; it counts as open while this lives.
    pub(crate) fn watch(&self) -> watch::Receiver<Stage> {
        let mut stage = self.stage.subscribe();
        if *stage.borrow() != Stage::Serving {
            stage.mark_changed();
        }
        stage
    }
}
