//! Conversations created through the proxy (`POST /conversations`) recorded for their team, so
//! the object routes and the `conversation` member of later requests know whose they are
//! (docs/teams.md#teams-and-their-data). A conversation is recorded as an owner-only record of its
//! id ([`StoredResponse::owner_only`]): every state backend keeps it, and forgets it, as it does
//! a response, and it says nothing of items or a chain.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use http::Response;
use http_body::Frame;
use http_body_util::{BodyExt, BodyStream, StreamBody};

use super::Ledger;
use crate::error::ApiError;
use crate::ledger::{Owner, StoredResponse, MAX_ID_BYTES};
use crate::metrics::{LedgerOp, LedgerResult};
use crate::proxy::body::{full, ProxyBody};

/// The largest answer to `POST /conversations` read for its id: the conversation object
/// (`id`, `object`, `created_at`, `metadata`) is far smaller. A larger answer is passed on
/// unrecorded, and counted as a dropped record.
const MAX_CONVERSATION_ANSWER: usize = 64 * 1024;

/// Who created a conversation: what its record needs.
#[derive(Debug, Clone)]
pub(crate) struct CreatedConversation {
    /// The provider the request went to.
    pub(crate) provider: String,
    /// The request's team (`None`: anonymous).
    pub(crate) team: Option<String>,
}

/// Records the conversation a successful `POST /conversations` answer created, before the
/// answer goes on (so the client's next request finds it). The answer is read whole (at most
/// 64 KiB); one that is larger, chunked past that, or not a JSON object
/// with a string `id` is passed on as it is, and counted as a dropped record.
pub(crate) async fn record_conversation(
    response: Response<ProxyBody>,
    ledger: Arc<Ledger>,
    created: CreatedConversation,
) -> Result<Response<ProxyBody>, ApiError> {
    let (parts, body) = response.into_parts();
    let declared: Option<usize> = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse().ok());
    if declared.is_some_and(|length| length > MAX_CONVERSATION_ANSWER) {
        ledger.count(LedgerOp::Record, LedgerResult::Dropped);
        return Ok(Response::from_parts(parts, body));
    }
    let mut body = body;
    let mut collected = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let data = match frame {
            Ok(frame) => match frame.into_data() {
                Ok(data) => data,
                // Trailers end a JSON answer's data.
                Err(_) => continue,
            },
            Err(error) => {
                ledger.count(LedgerOp::Record, LedgerResult::Dropped);
                return Err(ApiError::UpstreamUnavailable {
                    provider: created.provider,
                    detail: format!("the answer broke off: {error}"),
                });
            }
        };
        if collected.len() + data.len() > MAX_CONVERSATION_ANSWER {
            // Too large to be a conversation object: passed on as it comes, unrecorded.
            ledger.count(LedgerOp::Record, LedgerResult::Dropped);
            collected.extend_from_slice(&data);
            let head = futures_util::stream::once(std::future::ready(Ok(Frame::data(collected.freeze()))));
            let rest = head.chain(BodyStream::new(body));
            return Ok(Response::from_parts(parts, StreamBody::new(rest).boxed_unsync()));
        }
        collected.extend_from_slice(&data);
    }
    let bytes = collected.freeze();
    match conversation_id(&bytes) {
        Some(id) => {
            let owner = Owner {
                provider: created.provider,
                model: None,
            };
            let retention = ledger.settings.retention.as_secs();
            let now = crate::state::now_unix();
            ledger
                .write(StoredResponse::owner_only(
                    id,
                    owner,
                    created.team,
                    now,
                    retention,
                ))
                .await;
        }
        None => ledger.count(LedgerOp::Record, LedgerResult::Dropped),
    }
    Ok(Response::from_parts(parts, full(bytes)))
}

/// The string `id` of a JSON object, when it can be a ledger key.
fn conversation_id(bytes: &Bytes) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Created {
        id: String,
    }
    let created: Created = serde_json::from_slice(bytes).ok()?;
    (!created.id.is_empty() && created.id.len() <= MAX_ID_BYTES).then_some(created.id)
}

#[cfg(test)]
mod tests {
    use super::conversation_id;
    use bytes::Bytes;

    #[test]
    fn the_id_of_a_created_conversation_is_read() {
        let answer = Bytes::from_static(
            br#"{"id":"conv_68af","object":"conversation","created_at":1741900000,"metadata":{}}"#,
        );
        assert_eq!(conversation_id(&answer).as_deref(), Some("conv_68af"));
        for answer in [&b"[]"[..], b"{}", br#"{"id":7}"#, br#"{"id":""}"#, b"not json"] {
            assert_eq!(conversation_id(&Bytes::from_static(answer)), None);
        }
    }
}
