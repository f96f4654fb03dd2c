//! What an answer says it cost (docs/usage.md): the token counts of its `usage`, read as the
//! answer streams, and the model that answered.
//!
//! Pure and synchronous, as the ledger's tap. The counts come from one place per answer:
//!
//! - a JSON answer (a response, or the `CompactResource` of `/responses/compact`): its
//!   top-level `usage` and `model`;
//! - an event stream, or a WebSocket's events: the `response.usage` of its first terminal event
//!   (`response.completed`, `response.incomplete`, `response.failed`, `response.cancelled`);
//!   `error`, also terminal, carries none. `model` is the last one a response event named.
//!
//! An answer that ends otherwise (cut before its end or its terminal event, a body that is not
//! JSON, a terminal event without `usage`) has its usage [`AnswerUsage::Missing`]. So has one
//! whose `usage` is not what the Responses API defines ([`Usage`] says what is read): one bad
//! member makes the whole usage missing, since a count that is partly right would be settled
//! as if it were right.
//!
//! Two readers give a [`ReadUsage`]: the ledger's [`Tap`](crate::ledger::Tap) reads it with
//! the answer's items ([`Tap::end_read`](crate::ledger::Tap::end_read)), and when the ledger
//! is off a [`UsageReader`] reads nothing else, holding no output item.
//!
//! ```
//! use replaygate_core::ledger::AnswerKind;
//! use replaygate_core::usage::{AnswerUsage, Usage, UsageReader};
//!
//! let mut reader = UsageReader::new(AnswerKind::EventStream);
//! reader.feed(b"data: {\"type\":\"response.completed\",\"response\":{\"model\":\"gpt-5\",");
//! reader.feed(b"\"usage\":{\"input_tokens\":10,\"output_tokens\":4,");
//! reader.feed(b"\"output_tokens_details\":{\"reasoning_tokens\":3}}}}\n\n");
//! let read = reader.end();
//! assert_eq!(read.model.as_deref(), Some("gpt-5"));
//! assert_eq!(
//!     read.usage,
//!     AnswerUsage::Reported(Usage { input: 10, output: 4, cached_input: 0, reasoning_output: 3 })
//! );
//! ```

pub(crate) mod events;
pub(crate) mod reader;
mod value;

pub(crate) use events::TerminalUsage;
pub use reader::UsageReader;
pub(crate) use value::{usage_of_text, UsageValue};

/// The largest token count read: 2^53, the largest integer every JSON reader keeps exactly. A
/// larger one is not a count.
pub const MAX_TOKENS: u64 = 1 << 53;

/// The token counts of one answer's `usage`.
///
/// `input` is `input_tokens`, `output` is `output_tokens`; `cached_input` is
/// `input_tokens_details.cached_tokens` and `reasoning_output` is
/// `output_tokens_details.reasoning_tokens`, each part of the count before it (as
/// OpenTelemetry's GenAI conventions count them), 0 when its details or the member are absent
/// or `null`. `input_tokens` and `output_tokens` must be there; each count is an integer from 0
/// to [`MAX_TOKENS`], and a part is never more than its whole.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Usage {
    /// Input tokens (`input_tokens`), cached ones included.
    pub input: u64,
    /// Output tokens (`output_tokens`), reasoning ones included.
    pub output: u64,
    /// Of the input, the tokens read from the provider's cache.
    pub cached_input: u64,
    /// Of the output, the reasoning tokens.
    pub reasoning_output: u64,
}

/// What one answer says of its usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AnswerUsage {
    /// Its `usage`, read whole and valid.
    Reported(Usage),
    /// None that can be counted: the answer ended without one (cut off, an error, no terminal
    /// event), or its `usage` was not valid.
    Missing,
}

impl AnswerUsage {
    /// The counts, when reported.
    pub fn reported(&self) -> Option<Usage> {
        match self {
            AnswerUsage::Reported(usage) => Some(*usage),
            AnswerUsage::Missing => None,
        }
    }
}

/// What a reader read of one answer: its usage and the model it named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadUsage {
    /// The usage.
    pub usage: AnswerUsage,
    /// The `model` the answer named (`None`: none, or one longer than
    /// [`MAX_ID_BYTES`](crate::ledger::MAX_ID_BYTES)); the request's stands in for it.
    pub model: Option<String>,
}

impl ReadUsage {
    /// An answer that said nothing.
    pub fn missing() -> ReadUsage {
        ReadUsage {
            usage: AnswerUsage::Missing,
            model: None,
        }
    }
}

#[cfg(test)]
mod tests;
