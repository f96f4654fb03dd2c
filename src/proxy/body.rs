//! Bodies on the request path: reading the client's body under a cap, and the response body type.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap};
use http_body::{Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};

use super::buffer_budget::{BufferBudget, Reservation};
use crate::error::ApiError;

/// Any error a response body can end with.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body of every response the proxy sends: a streamed upstream body or a small local one.
pub(crate) type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// A complete, local response body.
pub(crate) fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// A response body that holds a guard (a concurrency permit, a connection's count of open
/// requests) until it ends or is dropped.
pub(crate) struct Holding<G> {
    inner: ProxyBody,
    _guard: G,
}

impl<G> Holding<G> {
    /// Ties `guard` to the life of `inner`.
    pub(crate) fn new(inner: ProxyBody, guard: G) -> Self {
        Self { inner, _guard: guard }
    }
}

impl<G: Unpin> http_body::Body for Holding<G> {
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

/// A request body read whole, with the share of `max_buffered_bytes` it holds.
#[derive(Debug)]
pub struct HeldBody {
    /// The body, exactly as received.
    pub bytes: Bytes,
    /// Its bytes in the shared budget; drop it once the body is no longer held.
    pub(crate) reservation: Reservation,
}

/// Reads the whole request body, refusing one over the cap before or while it arrives, and
/// one the shared `budget` has no room for.
///
/// A declared `Content-Length` over the cap is refused without reading (413, whatever the
/// load), and one that does not fit in the budget now is refused before the client sends it
/// (503). Otherwise the body takes its bytes from the budget as they arrive, never more than
/// the buffer it fills (at most four times what has arrived), so a client that declares much
/// and sends little holds little; a chunked body is counted the same way and refused at the
/// first byte over the cap.
pub async fn read_body<B>(
    body: B,
    headers: &HeaderMap,
    limits: BodyLimits,
    budget: &Arc<BufferBudget>,
) -> Result<HeldBody, ApiError>
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
    let declared = declared.map_or(0, |len| len as usize);
    if !budget.would_fit(declared) {
        return Err(ApiError::BufferFull { limit: budget.cap() });
    }
    let mut reservation = Reservation::new(budget);
    let collect = collect(body, declared, limits.max_bytes, &mut reservation);
    match tokio::time::timeout(limits.read_timeout, collect).await {
        Err(_) => Err(ApiError::BodyTimeout {
            limit: limits.read_timeout,
        }),
        Ok(result) => result.map(|bytes| HeldBody { bytes, reservation }),
    }
}

/// Gathers the data frames of `body` into one buffer of at most `max_bytes`, holding the
/// buffer's size in `reservation`.
///
/// A body that arrives as one frame is returned as that frame, without a copy. Otherwise each
/// frame is copied once into one buffer and dropped at once, so the connection's read buffer is
/// reused and the body is held once, not twice. The buffer grows towards `expected` (the
/// declared length, else `max_bytes`) but never past four times the bytes that have arrived, so
/// a client that declares a large body and sends little cannot make the proxy reserve it.
async fn collect<B>(
    body: B,
    expected: usize,
    max_bytes: usize,
    reservation: &mut Reservation,
) -> Result<Bytes, ApiError>
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
            hold(reservation, data.len())?;
            first = Some(data);
            continue;
        }
        if length > joined.capacity() {
            let mut target = length.saturating_mul(4).min(ceiling).max(length);
            if !reservation.grow_to(target) {
                // Short of room, grow by what arrived only: a body that fits is not refused.
                target = length;
                hold(reservation, target)?;
            }
            joined.reserve_exact(target - joined.len());
        }
        if let Some(earlier) = first.take() {
            joined.extend_from_slice(&earlier);
        }
        joined.extend_from_slice(&data);
    }
    Ok(first.unwrap_or_else(|| Bytes::from(joined)))
}

/// Grows `reservation` to `bytes`, or refuses the body: the budget has no room for it.
fn hold(reservation: &mut Reservation, bytes: usize) -> Result<(), ApiError> {
    if reservation.grow_to(bytes) {
        Ok(())
    } else {
        Err(ApiError::BufferFull {
            limit: reservation.cap(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const LIMITS: BodyLimits = BodyLimits {
        max_bytes: 8,
        read_timeout: Duration::from_secs(5),
    };

    /// Reads under `LIMITS` with a budget roomy enough for any body.
    async fn read<B>(body: B, headers: &HeaderMap) -> Result<Bytes, ApiError>
    where
        B: http_body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let budget = BufferBudget::new(1 << 20);
        read_body(body, headers, LIMITS, &budget)
            .await
            .map(|held| held.bytes)
    }

    fn declaring(length: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static(length));
        headers
    }

    #[tokio::test]
    async fn a_body_within_the_cap_is_read_whole() {
        let bytes = read(Full::new(Bytes::from_static(b"12345678")), &HeaderMap::new())
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
            let bytes = read(frames(&[b"12", b"", b"345", b"678"]), &declared)
                .await
                .unwrap();
            assert_eq!(&bytes[..], b"12345678");
        }
    }

    #[tokio::test]
    async fn frames_over_the_cap_are_refused_at_the_first_byte_over() {
        let err = read(frames(&[b"1234", b"5678", b"9"]), &HeaderMap::new())
            .await
            .unwrap_err();
        assert_eq!(err.code(), "body_too_large");
    }

    #[tokio::test]
    async fn a_body_over_the_cap_is_refused_while_reading() {
        let err = read(Full::new(Bytes::from_static(b"123456789")), &HeaderMap::new())
            .await
            .unwrap_err();
        assert_eq!(err.code(), "body_too_large");
    }

    #[tokio::test]
    async fn a_declared_length_over_the_cap_is_refused_before_reading() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("1000"));
        let err = read(Full::new(Bytes::new()), &headers).await.unwrap_err();
        assert_eq!(err.code(), "body_too_large");
    }

    const ROOMY: BodyLimits = BodyLimits {
        max_bytes: 1 << 20,
        read_timeout: Duration::from_secs(5),
    };

    #[tokio::test]
    async fn a_declared_body_the_budget_cannot_hold_is_refused_before_reading() {
        let budget = BufferBudget::new(100);
        let mut other = Reservation::new(&budget);
        assert!(other.grow_to(60));
        let err = read_body(frames(&[b"x"]), &declaring("50"), ROOMY, &budget)
            .await
            .unwrap_err();
        assert_eq!((err.status().as_u16(), err.code()), (503, "overloaded"));
        // Over the body cap it is 413, whatever the load.
        let full = BufferBudget::new(8);
        assert!(Reservation::new(&full).grow_to(8));
        let mut held = Reservation::new(&full);
        assert!(held.grow_to(8));
        let err = read_body(frames(&[b"x"]), &declaring("9"), LIMITS, &full)
            .await
            .unwrap_err();
        assert_eq!(err.code(), "body_too_large");
        assert_eq!(budget.reserved(), 60, "a refused body holds nothing");
    }

    #[tokio::test]
    async fn a_body_holds_the_buffer_it_fills_until_it_is_dropped() {
        let budget = BufferBudget::new(1 << 20);
        // Declares a lot, sends ten bytes: it holds at most four times what arrived.
        let held = read_body(
            frames(&[b"12345", b"67890"]),
            &declaring("100000"),
            ROOMY,
            &budget,
        )
        .await
        .unwrap();
        assert_eq!(&held.bytes[..], b"1234567890");
        assert_eq!(held.reservation.bytes(), 40);
        assert_eq!(budget.reserved(), 40);
        // One frame is held as it came.
        let single = read_body(frames(&[b"abc"]), &HeaderMap::new(), ROOMY, &budget)
            .await
            .unwrap();
        assert_eq!(single.reservation.bytes(), 3);
        assert_eq!(budget.reserved(), 43);
        drop((held, single));
        assert_eq!(budget.reserved(), 0);
    }

    #[tokio::test]
    async fn a_chunked_body_that_outgrows_the_budget_is_refused_and_lets_go() {
        let budget = BufferBudget::new(25);
        let mut other = Reservation::new(&budget);
        assert!(other.grow_to(10));
        let parts: &[&'static [u8]] = &[b"1234", b"5678", b"90123", b"45678", b"9"];
        let err = read_body(frames(parts), &HeaderMap::new(), ROOMY, &budget)
            .await
            .unwrap_err();
        assert_eq!(err.code(), "overloaded");
        assert_eq!(budget.reserved(), 10, "the refused body gave its bytes back");
        drop(other);
        let held = read_body(frames(parts), &HeaderMap::new(), ROOMY, &budget)
            .await
            .unwrap();
        assert_eq!(held.bytes.len(), 19);
        assert!(held.reservation.bytes() <= 25);
    }
}
