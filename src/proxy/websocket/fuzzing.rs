//! The client's side of a socket as the `ws_client_message` fuzz target drives it: a small
//! entry point over the private frame reader and message reader, so that neither becomes part
//! of the crate's API. What it returns is what the relay acts on; nothing here is used by the
//! proxy itself.

use std::sync::Arc;

use bytes::Bytes;
use tokio::io::AsyncRead;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;

use super::frames::{ClientReader, ReadError};
use super::message::{error_event, unsupported};
use crate::proxy::buffer_budget::{BufferBudget, Reservation};

pub use super::message::{Head, Named, NamedValue, Refusal, READ};

/// One read of a client's side, as the relay sees it.
#[derive(Debug)]
pub enum ClientRead {
    /// A whole data message (a text one is valid UTF-8), with its share of the budget.
    Data {
        /// A text message (else binary).
        text: bool,
        /// Its bytes.
        bytes: Bytes,
        /// The bytes it holds in the budget until dropped.
        held: Reservation,
    },
    /// A ping or a pong, with its payload.
    Control(Bytes),
    /// The client's close: its code and reason, when it gave them.
    Close(Option<(u16, String)>),
    /// The reader refuses to read on (a message too large, over the budget, or a broken
    /// protocol): the close code the relay sends.
    Refused(u16),
    /// The connection ended.
    Gone,
}

/// A client's side of a socket, framed as the relay frames it.
pub struct ClientFrames<R> {
    reader: ClientReader<R>,
}

impl<R: AsyncRead + Unpin> ClientFrames<R> {
    /// A reader of `io` whose messages take their bytes from `budget`, each at most
    /// `max_message` bytes (`max_body_bytes`).
    pub fn new(io: R, budget: Arc<BufferBudget>, max_message: usize) -> Self {
        ClientFrames {
            reader: ClientReader::new(io, budget, max_message),
        }
    }

    /// The next message, or why there is none.
    pub async fn next(&mut self) -> ClientRead {
        let incoming = match self.reader.next().await {
            Ok(incoming) => incoming,
            Err(ReadError::Gone) => return ClientRead::Gone,
            Err(ReadError::TooLarge { .. }) => return ClientRead::Refused(CloseCode::Size.into()),
            Err(ReadError::Overloaded { .. }) => return ClientRead::Refused(CloseCode::Again.into()),
            Err(ReadError::Protocol { code, .. }) => return ClientRead::Refused(code.into()),
        };
        let data = |text, bytes| match incoming.held {
            Some(held) => ClientRead::Data { text, bytes, held },
            None => unreachable!("a data message holds its bytes in the budget"),
        };
        match incoming.message {
            Message::Text(text) => data(true, Bytes::from(text)),
            Message::Binary(bytes) => data(false, bytes),
            Message::Ping(payload) | Message::Pong(payload) => ClientRead::Control(payload),
            Message::Close(frame) => ClientRead::Close(
                frame.map(|frame| (u16::from(frame.code), frame.reason.as_str().to_owned())),
            ),
            Message::Frame(_) => unreachable!("the reader returns whole messages"),
        }
    }

    /// Reads and drops data from now on, as the relay does once it refused the socket.
    pub fn discard(&mut self) {
        self.reader.discard();
    }
}

/// Reads a client message's head (its other event type, `store`, `previous_response_id`, the
/// members naming stored state, and the refusal of a repeated or misspelt member) as the relay
/// does before judging it.
pub fn read_head(message: &[u8]) -> Head {
    super::message::read_head(message)
}

/// The error event refusing an event of type `kind` that the socket does not accept.
pub fn unsupported_event(kind: &str) -> String {
    error_event(&unsupported(kind))
}
