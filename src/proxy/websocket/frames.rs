//! The client's side of a socket, framed by replaygate itself (RFC 6455), so that what a socket
//! holds is always in `max_buffered_bytes`.
//!
//! A data frame's length is read from its head and taken from the budget before its payload is
//! read; the payload is read straight into its message (unmasked in place), which holds those
//! bytes in the budget until the relay has judged and forwarded it. A fragmented message counts
//! as its frames arrive. A frame that would pass `max_body_bytes` is refused before its payload
//! is read (1009), one that would pass the budget too (1013). Once a socket is refused, the
//! rest of what its client sends is read and dropped, so the client can still read the close.
//!
//! Apart from a few bytes of frame head and a small read buffer, nothing here holds memory that
//! the budget does not count: no buffer grows with the largest message a socket ever carried.

use std::io;
use std::sync::Arc;

use bytes::{BufMut, Bytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

use crate::proxy::buffer_budget::{BufferBudget, Reservation};

/// The read buffer under the frame reader: frame heads and small payloads come through it;
/// larger payloads are read past it, into their message.
const READ_BUFFER_BYTES: usize = 8 << 10;

/// The longest frame head: 2 bytes, 8 of extended length, 4 of mask.
const MAX_HEAD: usize = 14;

/// The most a control frame may carry.
const MAX_CONTROL: u64 = 125;

/// Why the client's side cannot be read on.
#[derive(Debug, thiserror::Error)]
pub(super) enum ReadError {
    /// A message would pass `max_body_bytes` (close 1009).
    #[error("a message may be at most {limit} bytes (max_body_bytes)")]
    TooLarge {
        /// `max_body_bytes`.
        limit: usize,
    },
    /// A message would pass `max_buffered_bytes` (an `overloaded` error event, close 1013).
    #[error("the budget of bytes held at once ({limit}) has no room for this message")]
    Overloaded {
        /// `max_buffered_bytes`.
        limit: usize,
    },
    /// The client broke the protocol (close 1002, or 1007 for text that is not UTF-8).
    #[error("{reason}")]
    Protocol {
        /// The close code.
        code: CloseCode,
        /// What was wrong.
        reason: &'static str,
    },
    /// The connection ended or failed.
    #[error("the connection ended")]
    Gone,
}

impl From<io::Error> for ReadError {
    fn from(_: io::Error) -> Self {
        ReadError::Gone
    }
}

fn protocol(reason: &'static str) -> ReadError {
    ReadError::Protocol {
        code: CloseCode::Protocol,
        reason,
    }
}

/// A message the client sent; a data message comes with the bytes it holds in the budget.
#[derive(Debug)]
pub(super) struct Incoming {
    /// The message.
    pub(crate) message: Message,
    /// Its share of `max_buffered_bytes` (none for control frames); drop it once the message is
    /// no longer held.
    pub(crate) held: Option<Reservation>,
}

/// The frame whose payload is being read.
#[derive(Debug)]
struct Frame {
    opcode: u8,
    fin: bool,
    mask: [u8; 4],
    len: u64,
    read: u64,
    /// A control frame's payload.
    control: Vec<u8>,
}

/// A data message being assembled from its frames.
#[derive(Debug)]
struct Partial {
    text: bool,
    bytes: Vec<u8>,
    reservation: Reservation,
}

/// Reads the client's frames.
pub(super) struct ClientReader<R> {
    io: BufReader<R>,
    budget: Arc<BufferBudget>,
    max_message: usize,
    head: [u8; MAX_HEAD],
    head_len: usize,
    frame: Option<Frame>,
    message: Option<Partial>,
    /// Refused: data is read and dropped, until the client's close.
    discarding: bool,
}

impl<R: AsyncRead + Unpin> ClientReader<R> {
    /// A reader of `io` whose messages take their bytes from `budget`, each at most
    /// `max_message` bytes.
    pub(super) fn new(io: R, budget: Arc<BufferBudget>, max_message: usize) -> Self {
        ClientReader {
            io: BufReader::with_capacity(READ_BUFFER_BYTES, io),
            budget,
            max_message,
            head: [0; MAX_HEAD],
            head_len: 0,
            frame: None,
            message: None,
            discarding: false,
        }
    }

    /// The next message. Cancel safe: what was read is kept for the next call.
    pub(super) async fn next(&mut self) -> Result<Incoming, ReadError> {
        loop {
            if self.frame.is_none() {
                let needed = head_len(&self.head[..self.head_len]);
                if self.head_len < needed {
                    let read = self.io.read(&mut self.head[self.head_len..needed]).await?;
                    if read == 0 {
                        return Err(ReadError::Gone);
                    }
                    self.head_len += read;
                    continue;
                }
                self.begin_frame()?;
            }
            let frame = self.frame.as_mut().expect("a frame was begun");
            if frame.read < frame.len {
                let left = usize::try_from(frame.len - frame.read).unwrap_or(usize::MAX);
                let read = match (frame.opcode >= 8, &mut self.message) {
                    (true, _) => {
                        let start = frame.control.len();
                        let read = self.io.read_buf(&mut (&mut frame.control).limit(left)).await?;
                        unmask(&mut frame.control[start..], frame.mask, frame.read);
                        read
                    }
                    (false, Some(partial)) if !self.discarding => {
                        let start = partial.bytes.len();
                        let read = self.io.read_buf(&mut (&mut partial.bytes).limit(left)).await?;
                        unmask(&mut partial.bytes[start..], frame.mask, frame.read);
                        read
                    }
                    _ => {
                        let mut scratch = [0u8; 4096];
                        let take = left.min(scratch.len());
                        self.io.read(&mut scratch[..take]).await?
                    }
                };
                if read == 0 {
                    return Err(ReadError::Gone);
                }
                frame.read += read as u64;
                continue;
            }
            let frame = self.frame.take().expect("a frame was begun");
            if let Some(incoming) = self.end_frame(frame)? {
                return Ok(incoming);
            }
        }
    }

    /// From now on, data is read and dropped (and nothing more held): the socket was refused
    /// and only its client's close is still read.
    pub(super) fn discard(&mut self) {
        self.discarding = true;
        self.message = None;
    }

    /// Starts the frame whose head is complete: checks it and, for data, takes its length from
    /// the budget and makes room for its payload.
    fn begin_frame(&mut self) -> Result<(), ReadError> {
        let head = &self.head[..self.head_len];
        self.head_len = 0;
        let (fin, opcode) = (head[0] & 0x80 != 0, head[0] & 0x0F);
        let masked = head[1] & 0x80 != 0;
        let (len, rest) = match head[1] & 0x7F {
            126 => (u64::from(u16::from_be_bytes([head[2], head[3]])), &head[4..]),
            127 => (
                u64::from_be_bytes(head[2..10].try_into().expect("8 bytes")),
                &head[10..],
            ),
            short => (u64::from(short), &head[2..]),
        };
        let mask = match masked {
            true => rest[..4].try_into().expect("4 bytes"),
            false => [0; 4],
        };
        let mut frame = Frame {
            opcode,
            fin,
            mask,
            len,
            read: 0,
            control: Vec::new(),
        };
        if self.discarding {
            if opcode >= 8 {
                if len > MAX_CONTROL {
                    return Err(protocol("a control frame must be at most 125 bytes"));
                }
                frame.control.reserve_exact(len as usize);
            }
            self.frame = Some(frame);
            return Ok(());
        }
        if head[0] & 0x70 != 0 {
            return Err(protocol("reserved bits are set, and no extension was agreed"));
        }
        if !masked {
            return Err(protocol("a client's frames must be masked"));
        }
        if len >> 63 != 0 {
            return Err(protocol("a frame length must fit in 63 bits"));
        }
        match opcode {
            8..=10 => {
                if !fin || len > MAX_CONTROL {
                    return Err(protocol("a control frame must be whole and at most 125 bytes"));
                }
                frame.control.reserve_exact(len as usize);
            }
            0..=2 => {
                let held = self.hold(opcode, len);
                // A refused frame's payload is still to be read past (see `discard`).
                self.frame = Some(frame);
                return held;
            }
            _ => return Err(protocol("unknown opcode")),
        }
        self.frame = Some(frame);
        Ok(())
    }

    /// Takes a data frame of `len` bytes into its message: its bytes from the budget, and room
    /// for them in the message.
    fn hold(&mut self, opcode: u8, len: u64) -> Result<(), ReadError> {
        match (opcode, &self.message) {
            (0, None) => return Err(protocol("a continuation frame without a message to continue")),
            (1 | 2, Some(_)) => return Err(protocol("a new message began before the last one ended")),
            (1 | 2, None) => {
                self.message = Some(Partial {
                    text: opcode == 1,
                    bytes: Vec::new(),
                    reservation: Reservation::new(&self.budget),
                });
            }
            _ => {}
        }
        let partial = self.message.as_mut().expect("a message is open");
        let total = (partial.bytes.len() as u64).saturating_add(len);
        let limit = self.max_message;
        if total > limit as u64 {
            return Err(ReadError::TooLarge { limit });
        }
        let total = total as usize;
        if !partial.reservation.grow_to(total) {
            return Err(ReadError::Overloaded {
                limit: self.budget.cap(),
            });
        }
        partial.bytes.reserve_exact(len as usize);
        Ok(())
    }

    /// Ends a frame whose payload is read: the message it completes, if any.
    fn end_frame(&mut self, frame: Frame) -> Result<Option<Incoming>, ReadError> {
        let message = match frame.opcode {
            8 => Message::Close(close_of(&frame.control)?),
            _ if self.discarding => return Ok(None),
            9 => Message::Ping(Bytes::from(frame.control)),
            10 => Message::Pong(Bytes::from(frame.control)),
            _ if !frame.fin => return Ok(None),
            _ => {
                let Partial {
                    text,
                    bytes,
                    reservation,
                } = self.message.take().expect("a message is open");
                let bytes = Bytes::from(bytes);
                let message = match text {
                    true => Message::Text(Utf8Bytes::try_from(bytes).map_err(|_| ReadError::Protocol {
                        code: CloseCode::Invalid,
                        reason: "a text message must be UTF-8",
                    })?),
                    false => Message::Binary(bytes),
                };
                return Ok(Some(Incoming {
                    message,
                    held: Some(reservation),
                }));
            }
        };
        Ok(Some(Incoming { message, held: None }))
    }
}

/// The length of the frame head that begins with `head`: 2 until its second byte is known.
fn head_len(head: &[u8]) -> usize {
    let Some(&second) = head.get(1) else {
        return 2;
    };
    let extended = match second & 0x7F {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    let mask = if second & 0x80 != 0 { 4 } else { 0 };
    2 + extended + mask
}

/// Unmasks `bytes`, which begin `offset` bytes into their frame's payload.
fn unmask(bytes: &mut [u8], mask: [u8; 4], offset: u64) {
    let mut mask = mask;
    mask.rotate_left((offset % 4) as usize);
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte ^= mask[i & 3];
    }
}

/// The close frame a close frame's payload carries: none when empty, else a code and a UTF-8
/// reason.
fn close_of(payload: &[u8]) -> Result<Option<CloseFrame>, ReadError> {
    match payload {
        [] => Ok(None),
        [_] => Err(protocol("a close frame's payload must hold a 2-byte code")),
        [high, low, reason @ ..] => {
            let reason = std::str::from_utf8(reason).map_err(|_| ReadError::Protocol {
                code: CloseCode::Invalid,
                reason: "a close frame's reason must be UTF-8",
            })?;
            Ok(Some(CloseFrame {
                code: CloseCode::from(u16::from_be_bytes([*high, *low])),
                reason: Utf8Bytes::from(reason),
            }))
        }
    }
}

/// Writes frames to the client (unmasked, one frame per message, flushed).
pub(super) struct ClientWriter<W> {
    io: W,
    closed: bool,
}

impl<W: AsyncWrite + Unpin> ClientWriter<W> {
    /// A writer on `io`.
    pub(super) fn new(io: W) -> Self {
        ClientWriter { io, closed: false }
    }

    /// Sends `message` as one frame. Nothing is sent after a close.
    pub(super) async fn send(&mut self, message: Message) -> io::Result<()> {
        if self.closed {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "the socket is closing"));
        }
        let (opcode, payload) = match message {
            Message::Text(text) => (1, Bytes::from(text)),
            Message::Binary(bytes) => (2, bytes),
            Message::Close(frame) => {
                self.closed = true;
                let mut payload = Vec::new();
                if let Some(frame) = frame {
                    payload.extend_from_slice(&u16::from(frame.code).to_be_bytes());
                    payload.extend_from_slice(frame.reason.as_bytes());
                    // A control frame carries at most 125 bytes.
                    payload.truncate(MAX_CONTROL as usize);
                }
                (8, Bytes::from(payload))
            }
            Message::Ping(bytes) => (9, bytes),
            Message::Pong(bytes) => (10, bytes),
            Message::Frame(_) => return Ok(()),
        };
        let head = frame_head(opcode, payload.len());
        if payload.len() <= READ_BUFFER_BYTES {
            let mut frame = Vec::with_capacity(head.len() + payload.len());
            frame.extend_from_slice(&head);
            frame.extend_from_slice(&payload);
            self.io.write_all(&frame).await?;
        } else {
            self.io.write_all(&head).await?;
            self.io.write_all(&payload).await?;
        }
        self.io.flush().await
    }
}

/// The head of a whole, unmasked frame.
fn frame_head(opcode: u8, len: usize) -> Vec<u8> {
    let mut head = Vec::with_capacity(10);
    head.push(0x80 | opcode);
    match len {
        0..=125 => head.push(len as u8),
        126..=0xFFFF => {
            head.push(126);
            head.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            head.push(127);
            head.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
    head
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A masked client frame.
    fn frame(first: u8, payload: &[u8]) -> Vec<u8> {
        let mask = [1, 2, 3, 4];
        let mut out = vec![first];
        match payload.len() {
            len @ 0..=125 => out.push(0x80 | len as u8),
            len @ 126..=0xFFFF => {
                out.push(0x80 | 126);
                out.extend_from_slice(&(len as u16).to_be_bytes());
            }
            len => {
                out.push(0x80 | 127);
                out.extend_from_slice(&(len as u64).to_be_bytes());
            }
        }
        out.extend_from_slice(&mask);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        out
    }

    fn reader(bytes: Vec<u8>, budget: &Arc<BufferBudget>, max: usize) -> ClientReader<io::Cursor<Vec<u8>>> {
        ClientReader::new(io::Cursor::new(bytes), budget.clone(), max)
    }

    #[tokio::test]
    async fn messages_hold_their_length_until_dropped() {
        let budget = BufferBudget::new(1 << 20);
        let big = "x".repeat(70_000);
        let mut wire = frame(0x81, b"hello");
        wire.extend(frame(0x89, b"ping"));
        // A binary message in three fragments, a ping between them.
        wire.extend(frame(0x02, b"ab"));
        wire.extend(frame(0x89, b""));
        wire.extend(frame(0x00, big.as_bytes()));
        wire.extend(frame(0x80, b"cd"));
        wire.extend(frame(0x88, &[0x03, 0xE8, b'o', b'k']));
        let mut reader = reader(wire, &budget, 1 << 20);
        let first = reader.next().await.unwrap();
        assert_eq!(first.message, Message::text("hello"));
        assert_eq!(budget.reserved(), 5);
        drop(first);
        assert_eq!(budget.reserved(), 0);
        assert_eq!(reader.next().await.unwrap().message, Message::Ping("ping".into()));
        assert_eq!(reader.next().await.unwrap().message, Message::Ping(Bytes::new()));
        let binary = reader.next().await.unwrap();
        let expected = format!("ab{big}cd");
        assert_eq!(binary.message, Message::Binary(expected.clone().into()));
        assert_eq!(budget.reserved(), expected.len());
        drop(binary);
        match reader.next().await.unwrap().message {
            Message::Close(Some(close)) => {
                assert_eq!((u16::from(close.code), close.reason.as_str()), (1000, "ok"))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(reader.next().await, Err(ReadError::Gone)));
        assert_eq!(budget.reserved(), 0);
    }

    #[tokio::test]
    async fn a_frame_that_passes_the_limit_or_the_budget_is_refused_from_its_head() {
        // Only the head is there: the refusal cannot have read the payload.
        let head = |len: u64| {
            let mut out = vec![0x82, 0x80 | 127];
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(&[0, 0, 0, 0]);
            out
        };
        let budget = BufferBudget::new(1000);
        let held = {
            let mut reservation = Reservation::new(&budget);
            assert!(reservation.grow_to(600));
            reservation
        };
        let mut over_limit = reader(head(2000), &budget, 1000);
        assert!(matches!(
            over_limit.next().await,
            Err(ReadError::TooLarge { limit: 1000 })
        ));
        let mut over_budget = reader(head(500), &budget, 1000);
        assert!(matches!(
            over_budget.next().await,
            Err(ReadError::Overloaded { limit: 1000 })
        ));
        assert_eq!(budget.reserved(), 600);
        drop(held);
        let mut fits = reader(head(500), &budget, 1000);
        assert!(
            matches!(fits.next().await, Err(ReadError::Gone)),
            "it waits for its payload"
        );
    }

    #[tokio::test]
    async fn a_refused_socket_reads_on_to_its_close_holding_nothing() {
        let budget = BufferBudget::new(100);
        let mut wire = frame(0x81, &[b'x'; 200]);
        wire.extend(frame(0x81, b"dropped"));
        wire.extend(frame(0x88, &[0x03, 0xE8]));
        let mut reader = reader(wire, &budget, 1000);
        assert!(matches!(reader.next().await, Err(ReadError::Overloaded { .. })));
        reader.discard();
        assert!(matches!(
            reader.next().await.unwrap().message,
            Message::Close(Some(_))
        ));
        assert_eq!(budget.reserved(), 0);
    }

    #[tokio::test]
    async fn protocol_errors_are_named() {
        let budget = BufferBudget::new(1000);
        let unmasked = vec![0x81, 0x02, b'h', b'i'];
        let continuation = frame(0x80, b"x");
        let bad_text = frame(0x81, &[0xFF]);
        let fragmented_ping = frame(0x09, b"");
        for (wire, code) in [
            (unmasked, CloseCode::Protocol),
            (continuation, CloseCode::Protocol),
            (bad_text, CloseCode::Invalid),
            (fragmented_ping, CloseCode::Protocol),
        ] {
            match reader(wire, &budget, 1000).next().await {
                Err(ReadError::Protocol { code: got, .. }) => assert_eq!(got, code),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(budget.reserved(), 0);
    }

    #[tokio::test]
    async fn frames_written_are_whole_and_unmasked() {
        let mut writer = ClientWriter::new(Vec::new());
        writer.send(Message::text("hi")).await.unwrap();
        writer.send(Message::Binary(vec![7; 300].into())).await.unwrap();
        writer
            .send(Message::Close(Some(CloseFrame {
                code: CloseCode::Again,
                reason: "later".into(),
            })))
            .await
            .unwrap();
        assert!(writer.send(Message::text("after")).await.is_err());
        let wire = writer.io;
        assert_eq!(&wire[..4], &[0x81, 2, b'h', b'i']);
        assert_eq!(&wire[4..8], &[0x82, 126, 1, 44]);
        let close = &wire[8 + 300..];
        assert_eq!(close, &[0x88, 7, 0x03, 0xF5, b'l', b'a', b't', b'e', b'r']);
    }
}
