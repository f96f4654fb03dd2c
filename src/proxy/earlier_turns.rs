//! Earlier turns remembered outside the ledger. A request that continues a response
//! (`previous_response_id`) is judged with the chain that response ends: the ledger's, when it
//! is on, and that of any other source of earlier turns the request is judged with (a
//! WebSocket's own turns, docs/websocket.md), which the judge asks through [`EarlierTurns`]
//! without knowing what it is.

use std::fmt::Debug;

use crate::gate::ChainFacts;
use crate::ledger::CallIds;

/// A source of earlier turns, besides the ledger, that a request may continue.
pub(crate) trait EarlierTurns: Send + Sync + Debug {
    /// The chain that response `id` ends, when this source produced it: its owner and every
    /// call of its responses and their requests, newest first; `complete` when the walk
    /// reached a turn that continued nothing.
    fn chain(&self, id: &str) -> Option<ChainFacts>;
}

/// What a judged request was, for a source of earlier turns to remember once it is answered.
#[derive(Debug, Clone)]
pub(crate) struct Turn {
    /// The provider it went to.
    pub(crate) provider: String,
    /// Its `model`.
    pub(crate) model: Option<String>,
    /// The response it continues.
    pub(crate) previous_response_id: Option<String>,
    /// The `call_id`s of the calls among its input items.
    pub(crate) input_call_ids: CallIds,
}
