//! The answer body that reads usage when the ledger does not: each frame passes on as it
//! arrives, read by the core's [`UsageReader`]; the usage is delivered when the reader has it
//! all (a stream's terminal event, a JSON answer's `Content-Length` reached), or at the body's
//! end, break or drop, with what was read by then.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;

use super::PendingUsage;
use crate::ledger::AnswerKind;
use crate::proxy::body::{BoxError, ProxyBody};
use crate::usage::UsageReader;

/// An answer body read for its usage as it streams.
pub(crate) struct UsageBody {
    inner: ProxyBody,
    /// `None` once the usage was delivered.
    reading: Option<(UsageReader, PendingUsage)>,
    /// A JSON answer's `Content-Length`, and the bytes seen.
    expected_len: Option<u64>,
    seen: u64,
}

impl UsageBody {
    /// Reads `inner`, an answer with `headers`, for `usage`. An answer that is neither JSON
    /// nor an event stream carries no usage: it is counted missing at once and passes as it is.
    pub(crate) fn wrap(inner: ProxyBody, headers: &HeaderMap, usage: PendingUsage) -> ProxyBody {
        let kind = headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .and_then(AnswerKind::from_content_type);
        let Some(kind) = kind else {
            drop(usage);
            return inner;
        };
        let expected_len = match kind {
            AnswerKind::Json => headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.parse().ok()),
            AnswerKind::EventStream => None,
        };
        UsageBody {
            inner,
            reading: Some((UsageReader::new(kind), usage)),
            expected_len,
            seen: 0,
        }
        .boxed_unsync()
    }

    /// Delivers what was read.
    fn deliver(&mut self) {
        if let Some((reader, usage)) = self.reading.take() {
            usage.deliver(reader.end());
        }
    }
}

impl Body for UsageBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let polled = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        match &polled {
            Some(Ok(frame)) => {
                if let (Some(data), Some((reader, _))) = (frame.data_ref(), &mut this.reading) {
                    reader.feed(data);
                    this.seen += data.len() as u64;
                    if reader.has_ended() || this.expected_len == Some(this.seen) {
                        this.deliver();
                    }
                }
            }
            Some(Err(_)) | None => this.deliver(),
        }
        Poll::Ready(polled)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for UsageBody {
    /// An answer whose client left before its end delivers what was read.
    fn drop(&mut self) {
        self.deliver();
    }
}
