//! Exactly one access line per request, whatever happens: the line is written when the
//! answer's body has ended, or when the client or the provider went away, by whichever holds
//! the request's [`Exchange`] last (the request's future, then its answer's body) as it drops.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body::{Body, Frame, SizeHint};

use super::body::{BoxError, ProxyBody};
use crate::metrics::RequestMeter;
use crate::telemetry::access_log::{AccessRecord, Outcome, CLIENT_GONE};

/// One request's access record and the facts of its answer so far; writes the line on drop.
#[derive(Debug)]
pub(crate) struct Exchange {
    record: AccessRecord,
    started: Instant,
    head: Option<Head>,
    first_byte: Option<Duration>,
    bytes_out: u64,
    stream_error: Option<String>,
    /// Counts the request in the metrics when it ends.
    meter: Option<RequestMeter>,
}

#[derive(Debug, Clone, Copy)]
struct Head {
    status: StatusCode,
    upstream: Option<StatusCode>,
    at: Duration,
    /// An answer hyper sends without its body (to HEAD, or 204 / 304): dropping it unread is
    /// its end, not a break.
    bodiless: bool,
}

impl Exchange {
    /// Starts the exchange of a request that arrived at `started`.
    pub(crate) fn new(record: AccessRecord, started: Instant) -> Exchange {
        Exchange {
            record,
            started,
            head: None,
            first_byte: None,
            bytes_out: 0,
            stream_error: None,
            meter: None,
        }
    }

    /// Counts the request with `meter` (in flight until the exchange ends, then its outcome).
    pub(crate) fn metered(mut self, meter: RequestMeter) -> Exchange {
        self.meter = Some(meter);
        self
    }

    /// The access record, to note facts as the request goes on.
    pub(crate) fn record(&mut self) -> &mut AccessRecord {
        &mut self.record
    }

    /// Notes the answer's head; `upstream` is the provider's status when the answer is its own.
    pub(crate) fn answered(&mut self, status: StatusCode, upstream: Option<StatusCode>) {
        let bodiless = self.record.method() == Some(&Method::HEAD)
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED;
        self.head = Some(Head {
            status,
            upstream,
            at: self.started.elapsed(),
            bodiless,
        });
    }

    fn sent(&mut self, bytes: usize) {
        if self.first_byte.is_none() {
            self.first_byte = Some(self.started.elapsed());
        }
        self.bytes_out += bytes as u64;
    }

    fn outcome(&mut self) -> Outcome {
        let duration = Some(self.started.elapsed());
        match self.head {
            Some(head) => Outcome {
                status: head.status,
                upstream: head.upstream,
                head: Some(head.at),
                first_byte: self.first_byte.or(Some(head.at).filter(|_| self.bytes_out == 0)),
                duration,
                bytes_out: self.bytes_out,
                error: None,
                stream_error: self.stream_error.take(),
            },
            // The request's future was dropped before it had an answer: the client went away
            // (or the connection was closed at shutdown). 499 as nginx logs it.
            None => Outcome {
                status: StatusCode::from_u16(499).expect("499 is a valid status"),
                upstream: None,
                head: None,
                first_byte: None,
                duration,
                bytes_out: 0,
                error: Some(CLIENT_GONE),
                stream_error: None,
            },
        }
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        let outcome = self.outcome();
        self.record.write(&outcome);
        if let Some(meter) = self.meter.take() {
            meter.finish(&self.record, &outcome);
        }
    }
}

/// An answer's body that counts what it passes on and carries the request's [`Exchange`], so
/// the access line is written when the body ends or is dropped.
pub(crate) struct LoggedBody {
    inner: ProxyBody,
    exchange: Exchange,
    ended: bool,
}

impl LoggedBody {
    /// Ties `exchange` (already [`Exchange::answered`]) to the life of `inner`.
    pub(crate) fn new(inner: ProxyBody, exchange: Exchange) -> LoggedBody {
        LoggedBody {
            inner,
            exchange,
            ended: false,
        }
    }
}

impl Body for LoggedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let polled = {
            // What the body's layers log (the ledger's record) names the request.
            let _entered = this.exchange.record.span().enter();
            Pin::new(&mut this.inner).poll_frame(cx)
        };
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.exchange.sent(data.len());
                }
            }
            Poll::Ready(Some(Err(error))) => {
                this.ended = true;
                this.exchange.stream_error = Some(format!("upstream: {}", innermost(&**error)));
            }
            Poll::Ready(None) => this.ended = true,
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl LoggedBody {
    /// Notes a body dropped before its end: its client went away.
    fn note_drop(&mut self) {
        // hyper may stop polling once `is_end_stream` says the body is done.
        let finished = self.ended || self.inner.is_end_stream();
        let bodiless = self.exchange.head.is_some_and(|head| head.bodiless);
        if !finished && !bodiless {
            self.exchange.stream_error = Some(CLIENT_GONE.to_owned());
        }
    }
}

impl Drop for LoggedBody {
    fn drop(&mut self) {
        self.note_drop();
    }
}

/// The last cause of an error, which names what actually failed.
fn innermost(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(source) = cause.source() {
        cause = source;
    }
    cause.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;
    use http_body_util::BodyExt;

    fn begun(method: &Method) -> Exchange {
        Exchange::new(
            AccessRecord::new(method, "/v1/responses", &HeaderMap::new()),
            Instant::now(),
        )
    }

    fn chunks(parts: Vec<Result<&'static [u8], &'static str>>) -> ProxyBody {
        let frames = parts.into_iter().map(|part| {
            part.map(|bytes| Frame::data(Bytes::from_static(bytes)))
                .map_err(|e| BoxError::from(e.to_owned()))
        });
        http_body_util::StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync()
    }

    #[tokio::test]
    async fn a_body_read_to_its_end_counts_its_bytes_and_has_no_stream_error() {
        let mut exchange = begun(&Method::POST);
        exchange.answered(StatusCode::OK, Some(StatusCode::OK));
        let mut body = LoggedBody::new(chunks(vec![Ok(b"abc"), Ok(b"de")]), exchange);
        while body.frame().await.is_some() {}
        assert!(body.ended);
        let outcome = body.exchange.outcome();
        assert_eq!(outcome.bytes_out, 5);
        assert!(outcome.first_byte.is_some() && outcome.stream_error.is_none());
        assert!(outcome.first_byte <= outcome.duration);
    }

    #[tokio::test]
    async fn a_body_dropped_early_is_a_client_gone() {
        let mut exchange = begun(&Method::POST);
        exchange.answered(StatusCode::OK, Some(StatusCode::OK));
        let mut body = LoggedBody::new(chunks(vec![Ok(b"abc"), Ok(b"de")]), exchange);
        body.frame().await.unwrap().unwrap();
        body.note_drop();
        let outcome = body.exchange.outcome();
        assert_eq!(
            (outcome.bytes_out, outcome.stream_error.as_deref()),
            (3, Some("client_gone"))
        );

        // A body that says it is done after its last frame is not polled again: not a break.
        let mut exchange = begun(&Method::POST);
        exchange.answered(StatusCode::OK, None);
        let full = http_body_util::Full::new(Bytes::from_static(b"{}"))
            .map_err(|never| match never {})
            .boxed_unsync();
        let mut body = LoggedBody::new(full, exchange);
        body.frame().await.unwrap().unwrap();
        body.note_drop();
        assert_eq!(body.exchange.outcome().stream_error, None);

        // The answer to HEAD is sent without its body.
        let mut exchange = begun(&Method::HEAD);
        exchange.answered(StatusCode::OK, Some(StatusCode::OK));
        let mut body = LoggedBody::new(chunks(vec![Ok(b"abc")]), exchange);
        body.note_drop();
        let outcome = body.exchange.outcome();
        assert_eq!((outcome.bytes_out, outcome.stream_error), (0, None));
        assert_eq!(
            outcome.first_byte, outcome.head,
            "an answer without body bytes starts with its head"
        );
    }

    #[tokio::test]
    async fn an_upstream_error_mid_body_is_named() {
        let mut exchange = begun(&Method::POST);
        exchange.answered(StatusCode::OK, Some(StatusCode::OK));
        let mut body = LoggedBody::new(chunks(vec![Ok(b"abc"), Err("connection reset")]), exchange);
        body.frame().await.unwrap().unwrap();
        assert!(body.frame().await.unwrap().is_err());
        body.note_drop();
        let outcome = body.exchange.outcome();
        assert_eq!(outcome.bytes_out, 3);
        assert_eq!(
            outcome.stream_error.as_deref(),
            Some("upstream: connection reset")
        );
    }

    #[test]
    fn a_request_dropped_before_its_answer_is_logged_as_499() {
        let mut exchange = begun(&Method::POST);
        let outcome = exchange.outcome();
        assert_eq!(outcome.status.as_u16(), 499);
        assert_eq!(outcome.error, Some("client_gone"));
        assert!(outcome.client_gone());
        assert!(outcome.head.is_none());
    }
}
