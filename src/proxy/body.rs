//! Bodies on the request path: reading the client's body under a cap, and the response body type.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap};
use http_body::{Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use tokio::sync::OwnedSemaphorePermit;

use crate::error::ApiError;

/// Any error a response body can end with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body of every response the proxy sends: a streamed upstream body or a small local one.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// A complete, local response body.
pub fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// A response body that holds a concurrency permit until it ends or is dropped.
pub struct HoldsPermit {
    inner: ProxyBody,
    _permit: OwnedSemaphorePermit,
}

impl HoldsPermit {
    /// Ties `permit` to the life of `inner`.
    pub fn new(inner: ProxyBody, permit: OwnedSemaphorePermit) -> Self {
        Self {
            inner,
            _permit: permit,
        }
    }
}

impl http_body::Body for HoldsPermit {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Limits for reading a request body.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// Largest body accepted.
    pub max_bytes: usize,
    /// Longest time the whole body may take to arrive.
    pub read_timeout: Duration,
}

/// Reads the whole request body, refusing one over the cap before or while it arrives.
///
/// A declared `Content-Length` over the cap is refused without reading; a chunked body is
/// counted as it arrives and refused at the first byte over.
pub async fn read_body<B>(body: B, headers: &HeaderMap, limits: BodyLimits) -> Result<Bytes, ApiError>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limits.max_bytes as u64) {
        return Err(ApiError::BodyTooLarge {
            limit: limits.max_bytes as u64,
        });
    }
    let collect = collect(body, declared.map_or(0, |len| len as usize), limits.max_bytes);
    match tokio::time::timeout(limits.read_timeout, collect).await {
        Err(_) => Err(ApiError::BodyTimeout {
            limit: limits.read_timeout,
        }),
        Ok(result) => result,
    }
}

/// Gathers the data frames of `body` into one buffer of at most `max_bytes`.
///
/// A body that arrives as one frame is returned as that frame, without a copy. Otherwise each
/// frame is copied once into one buffer and dropped at once, so the connection's read buffer is
/// reused and the body is held once, not twice. The buffer grows towards `expected` (the
/// declared length, else `max_bytes`) but never past four times the bytes that have arrived, so
/// a client that declares a large body and sends little cannot make the proxy reserve it.
async fn collect<B>(body: B, expected: usize, max_bytes: usize) -> Result<Bytes, ApiError>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let ceiling = if expected > 0 { expected } else { max_bytes };
    let mut body = std::pin::pin!(body);
    let mut first: Option<Bytes> = None;
    let mut joined: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ApiError::BodyUnreadable(e.into().to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers carry nothing the gate reads
        };
        if data.is_empty() {
            continue;
        }
        let earlier = first.as_ref().map_or(joined.len(), Bytes::len);
        let length = earlier + data.len();
        if length > max_bytes {
            return Err(ApiError::BodyTooLarge {
                limit: max_bytes as u64,
            });
        }
        if earlier == 0 {
            first = Some(data);
            continue;
        }
        if length > joined.capacity() {
            let target = length.saturating_mul(4).min(ceiling).max(length);
            joined.reserve_exact(target - joined.len());
        }
        if let Some(earlier) = first.take() {
            joined.extend_from_slice(&earlier);
        }
        joined.extend_from_slice(&data);
    }
    Ok(first.unwrap_or_else(|| Bytes::from(joined)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const LIMITS: BodyLimits = BodyLimits {
        max_bytes: 8,
        read_timeout: Duration::from_secs(5),
    };

    #[tokio::test]
    async fn a_body_within_the_cap_is_read_whole() {
        let bytes = read_body(
            Full::new(Bytes::from_static(b"12345678")),
            &HeaderMap::new(),
            LIMITS,
        )
        .await
        .unwrap();
        assert_eq!(&bytes[..], b"12345678");
    }

    fn frames(parts: &[&'static [u8]]) -> impl http_body::Body<Data = Bytes, Error = BoxError> {
        let frames = parts
            .iter()
            .map(|part| Ok::<_, BoxError>(Frame::data(Bytes::from_static(part))));
        http_body_util::StreamBody::new(futures_util::stream::iter(frames.collect::<Vec<_>>()))
    }

    #[tokio::test]
    async fn a_body_in_many_frames_is_read_whole_in_order() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("8"));
        for declared in [HeaderMap::new(), headers] {
            let bytes = read_body(frames(&[b"12", b"", b"345", b"678"]), &declared, LIMITS)
                .await
                .unwrap();
            assert_eq!(&bytes[..], b"12345678");
        }
    }

    #[tokio::test]
    async fn frames_over_the_cap_are_refused_at_the_first_byte_over() {
        let err = read_body(frames(&[b"1234", b"5678", b"9"]), &HeaderMap::new(), LIMITS)
            .await
            .unwrap_err();
        assert_eq!(err.code(), "body_too_large");
    }

    #[tokio::test]
    async fn a_body_over_the_cap_is_refused_while_reading() {
        let err = read_body(
            Full::new(Bytes::from_static(b"123456789")),
            &HeaderMap::new(),
            LIMITS,
        )
        .await
        .unwrap_err();
        assert_eq!(err.code(), "body_too_large");
    }

    #[tokio::test]
    async fn a_declared_length_over_the_cap_is_refused_before_reading() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("1000"));
        let err = read_body(Full::new(Bytes::new()), &headers, LIMITS)
            .await
            .unwrap_err();
        assert_eq!(err.code(), "body_too_large");
    }
}
