//! The client connection's IO, which puts hyper's own error answers in the OpenAI envelope and
//! tells a client that went away from one that only half-closed.
//!
//! When hyper cannot parse an HTTP/1 request head it answers by itself, before any service
//! sees a request: a bare `400 Bad Request` (malformed request line or header), `431 Request
//! Header Fields Too Large` (a head over the read buffer) or `414 URI Too Long`, with an empty
//! body and `connection: close`, and then closes the connection. hyper offers no hook for
//! these, so this IO recognises that answer as hyper writes it and writes the envelope in its
//! place. Every other write passes straight through (one counter read per write call).
//!
//! The recognition is exact, not a guess: the write must be hyper's canned answer byte for
//! byte (status line, `connection: close`, `content-length: 0`, `date`, nothing else), written
//! while no request of this connection is open and every answer that ended has been flushed.
//! hyper writes that head only then (it takes the next request head only once the last answer
//! is flushed); every answer replaygate itself sends carries `x-replaygate-request-id`; and the
//! last bytes of a provider's body are written before the flush that follows its end. So
//! neither an answer of ours nor a provider's body passing through can be taken for it.
//!
//! A client's FIN while its request is open means it went away, so hyper ends the connection
//! and the request's work (the provider's request with it) is dropped. One exception: HTTP/1.1
//! lets a client shut down its sending side once its request is sent and still read the answer,
//! and a FIN alone cannot tell the two apart. So when the FIN comes while an HTTP/1.1 request
//! (whole body read) waits for its answer's head, the IO first writes an interim
//! `100 Continue`, which every HTTP/1.1 client must accept before a final answer: a socket the
//! client closed answers it with a reset, which shows as the socket's pending error within a
//! round trip (checked every 50 ms for a second), and hyper ends the connection on it; a client that only half-closed takes it, and its FIN is kept from hyper until
//! the request's answer has ended. A FIN after the answer's head has gone out is a client gone.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{header, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

use super::body::Holding;
use crate::error::ApiError;
use crate::telemetry::access_log::REQUEST_ID_HEADER;

/// The length of an HTTP date, as in `date: Thu, 03 Dec 2026 03:39:58 GMT`.
const HTTP_DATE_LEN: usize = 29;

/// The interim answer written to a client whose FIN came while its request waited (see the
/// module's documentation).
const PROBE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";
/// How often reads are rechecked for the client's reset after the probe, and how many times.
/// The reset comes one round trip after the probe; 20 checks 50 ms apart wait a second for it.
const PROBE_CHECK_EVERY: Duration = Duration::from_millis(50);
const PROBE_CHECKS: u8 = 20;

/// What the service tells the IO: how many requests are open, how many have ended, and
/// whether the newest one may be probed.
#[derive(Debug, Default)]
pub(super) struct Requests {
    open: AtomicUsize,
    ended: AtomicU64,
    /// How many requests have begun: the newest one's number.
    begun: AtomicU64,
    /// The number of the newest HTTP/1.1 request whose body has been read whole (0: none).
    body_read: AtomicU64,
}

impl Requests {
    /// Notes that hyper handed the service a request; call it from the service's `call`, so it
    /// happens before hyper reads or writes anything more.
    pub(super) fn begin(self: &Arc<Self>) -> OpenRequest {
        self.open.fetch_add(1, Ordering::Relaxed);
        let number = self.begun.fetch_add(1, Ordering::Relaxed) + 1;
        OpenRequest(self.clone(), number)
    }

    /// Whether the newest request is an HTTP/1.1 one whose whole body is read and that is open.
    fn newest_waits(&self) -> bool {
        self.open.load(Ordering::Relaxed) > 0
            && self.body_read.load(Ordering::Relaxed) == self.begun.load(Ordering::Relaxed)
    }
}

/// A request of the connection that has not ended; drop it when its answer's body has ended
/// or was dropped.
#[derive(Debug)]
pub(super) struct OpenRequest(Arc<Requests>, u64);

impl OpenRequest {
    /// `body` of this request, which tells the IO when it has been read whole, so that a FIN
    /// before the answer's head is probed from then on (see the module's documentation). Only
    /// for HTTP/1.1 requests.
    pub(super) fn watch<B>(&self, body: B) -> WatchedBody<B> {
        WatchedBody {
            inner: body,
            request: Some((self.0.clone(), self.1)),
        }
    }
}

/// A request body that tells its connection's IO when it has been read whole.
#[derive(Debug)]
pub(super) struct WatchedBody<B> {
    inner: B,
    /// The request, until its end is noted.
    request: Option<(Arc<Requests>, u64)>,
}

impl<B> WatchedBody<B> {
    /// `body` as is, telling no one (HTTP/1.0 and HTTP/2 requests).
    pub(super) fn unwatched(body: B) -> WatchedBody<B> {
        WatchedBody {
            inner: body,
            request: None,
        }
    }

    fn note_end(&mut self) {
        if let Some((requests, number)) = self.request.take() {
            requests.body_read.store(number, Ordering::Relaxed);
        }
    }
}

impl<B: http_body::Body + Unpin> http_body::Body for WatchedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => self.note_end(),
            Poll::Ready(Some(Ok(_))) if self.inner.is_end_stream() => self.note_end(),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for OpenRequest {
    fn drop(&mut self) {
        self.0.ended.fetch_add(1, Ordering::Relaxed);
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An answer's body that keeps its request open until it ends or is dropped.
pub(super) type OpenBody = Holding<OpenRequest>;

/// A client connection's IO: `S` with hyper's canned error answers replaced by envelopes.
pub(super) struct ClientIo<S> {
    inner: S,
    requests: Arc<Requests>,
    /// `requests.ended` at the last flush: every answer that had ended by then is written.
    ended_flushed: u64,
    /// The largest request head accepted, for the 431 message.
    head_limit: usize,
    /// The envelope answer being written in place of hyper's, and how much of it is out.
    replacement: Option<(Vec<u8>, usize)>,
    /// `requests.begun` at the last write: the newest request's answer has started when equal.
    answer_of: u64,
    /// How much of [`PROBE`] is out, while it is being written.
    probe: Option<usize>,
    /// What the client's FIN turned out to mean.
    peer: Peer,
}

/// The client's side of the connection, as reads and the probe tell it.
enum Peer {
    /// No FIN read, or none that needed a probe.
    Open,
    /// The probe went out; reads are rechecked for a reset `checks` more times.
    Probing { checks: u8, timer: Pin<Box<Sleep>> },
    /// The client took the probe: it half-closed and still reads, so its FIN is kept from
    /// hyper while a request is open.
    HalfClosed,
}

impl<S> ClientIo<S> {
    pub(super) fn new(inner: S, requests: Arc<Requests>, head_limit: usize) -> ClientIo<S> {
        ClientIo {
            inner,
            requests,
            ended_flushed: 0,
            head_limit,
            replacement: None,
            answer_of: 0,
            probe: None,
            peer: Peer::Open,
        }
    }

    /// Notes that hyper writes: the newest request's answer has started.
    fn writing(&mut self) {
        self.answer_of = self.requests.begun.load(Ordering::Relaxed);
    }

    /// Whether the newest request waits for its answer's head with its body read whole.
    fn awaits_head(&self) -> bool {
        self.requests.newest_waits() && self.answer_of != self.requests.begun.load(Ordering::Relaxed)
    }

    /// Whether hyper may be writing its canned answer now.
    fn may_be_canned(&self, first: &[u8]) -> bool {
        self.replacement.is_none()
            && first.starts_with(b"HTTP/1.1 4")
            && self.requests.open.load(Ordering::Relaxed) == 0
            && self.requests.ended.load(Ordering::Relaxed) == self.ended_flushed
    }
}

impl<S: AsyncWrite + Unpin> ClientIo<S> {
    /// Writes what is left of the probe, then of the replacement answer.
    fn poll_replacement(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some(written) = &mut self.probe {
            if *written == PROBE.len() {
                self.probe = None;
                break;
            }
            let n = std::task::ready!(Pin::new(&mut self.inner).poll_write(cx, &PROBE[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        while let Some((bytes, written)) = &mut self.replacement {
            if *written == bytes.len() {
                break;
            }
            let n = std::task::ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        Poll::Ready(Ok(()))
    }

    /// If `written` is hyper's canned answer, takes it (its whole length is reported written)
    /// and starts writing the envelope instead.
    fn replace(&mut self, cx: &mut Context<'_>, written: &[u8]) -> Option<Poll<io::Result<usize>>> {
        let (error, date) = canned_error(written, self.head_limit)?;
        self.replacement = Some((envelope_answer(error, date), 0));
        // Whatever the socket takes now; the rest goes out on flush.
        match self.poll_replacement(cx) {
            Poll::Ready(Err(e)) => Some(Poll::Ready(Err(e))),
            _ => Some(Poll::Ready(Ok(written.len()))),
        }
    }
}

/// A socket that reports an error it was told (the reset a closed peer answers data with).
pub(super) trait PendingError {
    /// The socket's pending error, which reading it clears (`SO_ERROR`).
    fn take_error(&self) -> io::Result<Option<io::Error>>;
}

impl PendingError for tokio::net::TcpStream {
    fn take_error(&self) -> io::Result<Option<io::Error>> {
        tokio::net::TcpStream::take_error(self)
    }
}

/// Over TLS, the reset shows on the socket under it.
impl PendingError for tokio_rustls::server::TlsStream<crate::tls::ReadAhead> {
    fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.get_ref().0.get_ref().take_error()
    }
}

impl<S: AsyncWrite + PendingError + Unpin> ClientIo<S> {
    /// What a read that found the client's FIN returns to hyper: the end of the input (hyper
    /// ends the connection if a request is open), or, for a client that only half-closed (or
    /// may have), nothing yet.
    fn after_fin(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.requests.open.load(Ordering::Relaxed) == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            let awaits_head = self.awaits_head();
            match &mut self.peer {
                Peer::HalfClosed => return Poll::Pending,
                Peer::Open if !awaits_head => return Poll::Ready(Ok(())),
                Peer::Open => {
                    self.probe = Some(0);
                    self.peer = Peer::Probing {
                        checks: PROBE_CHECKS,
                        timer: Box::pin(tokio::time::sleep(PROBE_CHECK_EVERY)),
                    };
                    // A write refused now is the reset already: the client is gone.
                    if let Poll::Ready(Err(error)) = self.poll_replacement(cx) {
                        return Poll::Ready(Err(error));
                    }
                }
                Peer::Probing { checks, timer } => {
                    // Once a FIN is read, reads return the end of input even after a reset:
                    // the reset shows as the socket's pending error.
                    if let Some(error) = self.inner.take_error()? {
                        return Poll::Ready(Err(error));
                    }
                    std::task::ready!(timer.as_mut().poll(cx));
                    *checks -= 1;
                    if *checks == 0 {
                        self.peer = Peer::HalfClosed;
                        return Poll::Pending;
                    }
                    timer
                        .as_mut()
                        .reset(tokio::time::Instant::now() + PROBE_CHECK_EVERY);
                }
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + PendingError + Unpin> AsyncRead for ClientIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        if buf.filled().len() > before || buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        this.after_fin(cx)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ClientIo<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        std::task::ready!(this.poll_replacement(cx))?;
        if !buf.is_empty() {
            this.writing();
        }
        if this.may_be_canned(buf) {
            if let Some(done) = this.replace(cx, buf) {
                return done;
            }
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        std::task::ready!(this.poll_replacement(cx))?;
        let first = bufs.iter().find(|b| !b.is_empty()).map_or(&[][..], |b| &b[..]);
        if !first.is_empty() {
            this.writing();
        }
        if this.may_be_canned(first) {
            let total: usize = bufs.iter().map(|b| b.len()).sum();
            if total <= CANNED_MAX_LEN {
                let joined: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
                if let Some(done) = this.replace(cx, &joined) {
                    return done;
                }
            }
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // hyper flushes the IO only once its own buffer is written out.
        self.ended_flushed = self.requests.ended.load(Ordering::Relaxed);
        std::task::ready!(self.poll_replacement(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_replacement(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The longest canned answer hyper writes (431's status line is the longest).
const CANNED_MAX_LEN: usize = 160;

/// The error of hyper's canned answer and the answer's date, if `written` is exactly one.
fn canned_error(written: &[u8], head_limit: usize) -> Option<(ApiError, &[u8])> {
    const HEADERS: &[u8] = b"connection: close\r\ncontent-length: 0\r\ndate: ";
    let (error, rest) = [
        (&b"HTTP/1.1 400 Bad Request\r\n"[..], ApiError::MalformedHead),
        (
            &b"HTTP/1.1 431 Request Header Fields Too Large\r\n"[..],
            ApiError::HeadTooLarge { limit: head_limit },
        ),
        (&b"HTTP/1.1 414 URI Too Long\r\n"[..], ApiError::UriTooLong),
    ]
    .into_iter()
    .find_map(|(line, error)| written.strip_prefix(line).map(|rest| (error, rest)))?;
    let date = rest.strip_prefix(HEADERS)?.strip_suffix(b"\r\n\r\n")?;
    (date.len() == HTTP_DATE_LEN && date.iter().all(|b| b.is_ascii_graphic() || *b == b' '))
        .then_some((error, date))
}

/// `error` as a whole HTTP/1.1 answer that closes the connection, dated `date`.
fn envelope_answer(error: ApiError, date: &[u8]) -> Vec<u8> {
    let code = error.code().to_owned();
    let request_id = uuid::Uuid::new_v4().to_string();
    let (parts, body) = error.into_response().into_parts();
    let status: StatusCode = parts.status;
    let mut answer = Vec::with_capacity(256 + body.len());
    answer.extend_from_slice(b"HTTP/1.1 ");
    answer.extend_from_slice(status.as_str().as_bytes());
    answer.push(b' ');
    answer.extend_from_slice(status.canonical_reason().unwrap_or("Error").as_bytes());
    answer.extend_from_slice(b"\r\n");
    for (name, value) in &parts.headers {
        answer.extend_from_slice(name.as_str().as_bytes());
        answer.extend_from_slice(b": ");
        answer.extend_from_slice(value.as_bytes());
        answer.extend_from_slice(b"\r\n");
    }
    let length = body.len().to_string();
    let extra = [
        (REQUEST_ID_HEADER, request_id.as_bytes()),
        (header::CONNECTION.as_str(), b"close"),
        (header::CONTENT_LENGTH.as_str(), length.as_bytes()),
        (header::DATE.as_str(), date),
    ];
    for (name, value) in extra {
        answer.extend_from_slice(name.as_bytes());
        answer.extend_from_slice(b": ");
        answer.extend_from_slice(value);
        answer.extend_from_slice(b"\r\n");
    }
    answer.extend_from_slice(b"\r\n");
    answer.extend_from_slice(&body);
    crate::telemetry::access_log::write_unparsed(&request_id, status, &code, body.len());
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATE: &str = "Thu, 03 Dec 2026 03:39:58 GMT";

    fn canned(line: &str) -> Vec<u8> {
        format!("{line}\r\nconnection: close\r\ncontent-length: 0\r\ndate: {DATE}\r\n\r\n").into_bytes()
    }

    #[test]
    fn only_hypers_canned_answers_are_recognised() {
        let code = |bytes: &[u8]| canned_error(bytes, 65536).map(|(e, _)| e.code().to_owned());
        assert_eq!(
            code(&canned("HTTP/1.1 400 Bad Request")).as_deref(),
            Some("invalid_request")
        );
        assert_eq!(
            code(&canned("HTTP/1.1 431 Request Header Fields Too Large")).as_deref(),
            Some("request_headers_too_large")
        );
        assert_eq!(
            code(&canned("HTTP/1.1 414 URI Too Long")).as_deref(),
            Some("uri_too_long")
        );
        assert!(canned("HTTP/1.1 431 Request Header Fields Too Large").len() <= CANNED_MAX_LEN);
        // Anything more or less is not hyper's canned answer.
        assert_eq!(code(&canned("HTTP/1.1 404 Not Found")), None);
        let mut longer = canned("HTTP/1.1 400 Bad Request");
        longer.extend_from_slice(b"{}");
        assert_eq!(code(&longer), None);
        let ours = format!(
            "HTTP/1.1 400 Bad Request\r\nconnection: close\r\n{REQUEST_ID_HEADER}: x\r\ncontent-length: 0\r\ndate: {DATE}\r\n\r\n"
        );
        assert_eq!(code(ours.as_bytes()), None);
    }

    #[test]
    fn the_envelope_answer_is_complete_http() {
        let answer = envelope_answer(ApiError::HeadTooLarge { limit: 65536 }, DATE.as_bytes());
        let text = String::from_utf8(answer).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
            "{head}"
        );
        assert!(head.contains("\r\ncontent-type: application/json\r\n"));
        assert!(head.contains("\r\nconnection: close\r\n"));
        assert!(head.contains(&format!("\r\ncontent-length: {}\r\n", body.len())));
        assert!(head.contains(&format!("\r\ndate: {DATE}")));
        let envelope: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(envelope["error"]["code"], "request_headers_too_large");
        assert_eq!(envelope["error"]["type"], "invalid_request_error");
    }
}
