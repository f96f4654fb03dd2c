//! The socket's own memory of its turns: what each message forwarded on it was, and the
//! responses the provider produced for them, so a later message that continues one of them
//! (`previous_response_id`) is judged with that chain's calls, as the ledger's chain would be,
//! even when the ledger is off or the response was not stored (`store: false`).
//!
//! Server events are the same events as over SSE, so each turn's answer is read by the
//! ledger's own [`Tap`], fed one event per message.
//!
//! A response the socket knows was not stored (its request said `store: false`) lives only
//! here; when a continuation of it is refused, it is evicted (as the Open Responses WebSocket
//! continuation has it), and a later continuation of it is answered `previous_response_not_found`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Mutex, PoisonError};

use crate::gate::ChainFacts;
use crate::ledger::{Owner, ResponseRecord, Tap};
use crate::proxy::earlier_turns::{EarlierTurns, Turn};
use crate::proxy::ledger::recording::Recording;
use crate::proxy::usage::PendingUsage;

/// The most responses a socket remembers; the oldest are forgotten first.
const MAX_REMEMBERED: usize = 1024;

/// A response the provider produced on the socket.
#[derive(Debug)]
struct Produced {
    previous: Option<String>,
    owner: Owner,
    /// The calls of its output, then those of its request's input.
    call_ids: Vec<String>,
    /// Whether its request let the provider store it (not `store: false`).
    stored: bool,
}

#[derive(Debug, Default)]
struct Remembered {
    by_id: HashMap<String, Produced>,
    order: VecDeque<String>,
    /// Responses evicted after a refused continuation, oldest first.
    evicted: HashSet<String>,
    evicted_order: VecDeque<String>,
}

/// The responses produced on one socket, shared by its relay and its judgments.
#[derive(Debug, Default)]
pub(crate) struct SocketTurns {
    remembered: Mutex<Remembered>,
}

impl SocketTurns {
    /// Remembers response `record`, the answer to `turn`; `stored` is false when the turn
    /// asked for `store: false`.
    pub(crate) fn remember(&self, turn: &Turn, record: &ResponseRecord, stored: bool) {
        let calls = record
            .items
            .iter()
            .filter(|item| !item.item_type.ends_with("_output"))
            .filter_map(|item| item.call_id.clone());
        let produced = Produced {
            previous: turn.previous_response_id.clone(),
            owner: Owner {
                provider: turn.provider.clone(),
                model: turn.model.clone().or_else(|| record.model.clone()),
            },
            call_ids: calls
                .chain(turn.input_call_ids.iter().map(str::to_owned))
                .collect(),
            stored,
        };
        let mut remembered = self.remembered.lock().unwrap_or_else(PoisonError::into_inner);
        if remembered.by_id.insert(record.id.clone(), produced).is_none() {
            remembered.order.push_back(record.id.clone());
        }
        while remembered.order.len() > MAX_REMEMBERED {
            if let Some(oldest) = remembered.order.pop_front() {
                remembered.by_id.remove(&oldest);
            }
        }
    }

    /// After a refused continuation of response `id`: forgets it if this socket produced it
    /// unstored, and remembers that it did; whether it was evicted. A stored response stays
    /// (the provider still has it).
    pub(crate) fn evict_unstored(&self, id: &str) -> bool {
        let mut remembered = self.remembered.lock().unwrap_or_else(PoisonError::into_inner);
        if remembered.by_id.get(id).is_none_or(|produced| produced.stored) {
            return false;
        }
        remembered.by_id.remove(id);
        remembered.order.retain(|kept| kept != id);
        if remembered.evicted.insert(id.to_owned()) {
            remembered.evicted_order.push_back(id.to_owned());
        }
        while remembered.evicted_order.len() > MAX_REMEMBERED {
            if let Some(oldest) = remembered.evicted_order.pop_front() {
                remembered.evicted.remove(&oldest);
            }
        }
        true
    }

    /// Whether response `id` was evicted from this socket.
    pub(crate) fn is_evicted(&self, id: &str) -> bool {
        let remembered = self.remembered.lock().unwrap_or_else(PoisonError::into_inner);
        remembered.evicted.contains(id)
    }
}

impl EarlierTurns for SocketTurns {
    /// The chain that response `id` ends, when it was produced on this socket.
    fn chain(&self, id: &str) -> Option<ChainFacts> {
        let remembered = self.remembered.lock().unwrap_or_else(PoisonError::into_inner);
        let first = remembered.by_id.get(id)?;
        let mut call_ids = Vec::new();
        let mut complete = false;
        let mut next = Some(first);
        for _ in 0..MAX_REMEMBERED {
            let Some(produced) = next else { break };
            call_ids.extend(produced.call_ids.iter().cloned());
            match &produced.previous {
                None => {
                    complete = true;
                    break;
                }
                Some(previous) => next = remembered.by_id.get(previous),
            }
        }
        Some(ChainFacts {
            owner: first.owner.clone(),
            call_ids,
            complete,
            // Produced on this socket, so for its own team.
            team: None,
            not_stored: false,
        })
    }
}

/// A forwarded turn whose answer is still streaming: its events are read as they pass.
pub(super) struct Pending {
    pub(crate) tap: Tap,
    /// What the socket's own chain remembers of it, when it judged the turn.
    pub(crate) turn: Option<Turn>,
    /// Whether its request let the provider store the response (not `store: false`).
    pub(crate) stored: bool,
    /// What the ledger records of it, when the ledger is on.
    pub(crate) recording: Option<Recording>,
    /// The count of its usage (docs/usage.md): delivered at its terminal event, missing when
    /// the socket ends before it.
    pub(crate) usage: Option<PendingUsage>,
}

impl Pending {
    /// Reads one server message as the event it is.
    pub(super) fn feed(&mut self, text: &str) {
        // One `data:` line: line breaks in JSON are whitespace, so a space keeps its meaning.
        let mut event = Vec::with_capacity(text.len() + 8);
        event.extend_from_slice(b"data: ");
        event.extend(
            text.bytes()
                .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
        event.extend_from_slice(b"\n\n");
        self.tap.feed(&event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{AnswerKind, ItemRecord, TapLimits};

    fn turn(previous: Option<&str>, input_calls: &[&str]) -> Turn {
        Turn {
            provider: "openai".into(),
            model: Some("gpt-5".into()),
            previous_response_id: previous.map(str::to_owned),
            input_call_ids: input_calls.iter().collect(),
        }
    }

    fn record(id: &str, calls: &[(&str, &str)]) -> ResponseRecord {
        ResponseRecord {
            id: id.into(),
            model: None,
            items: calls
                .iter()
                .map(|(kind, call_id)| ItemRecord {
                    id: None,
                    item_type: kind.to_string().into(),
                    call_id: Some(call_id.to_string()),
                    digest: [0; 32],
                    has_encrypted_content: false,
                    preceded_by: None,
                })
                .collect(),
        }
    }

    #[test]
    fn a_chain_walks_back_to_the_first_turn_newest_first() {
        let turns = SocketTurns::default();
        turns.remember(
            &turn(None, &["call_in"]),
            &record("resp_1", &[("function_call", "call_a")]),
            true,
        );
        turns.remember(
            &turn(Some("resp_1"), &[]),
            &record(
                "resp_2",
                &[("function_call", "call_b"), ("function_call_output", "call_x")],
            ),
            true,
        );
        let chain = turns.chain("resp_2").unwrap();
        assert_eq!(chain.call_ids, ["call_b", "call_a", "call_in"]);
        assert!(chain.complete);
        assert_eq!(chain.owner.provider, "openai");
        assert!(turns.chain("resp_unknown").is_none());
    }

    #[test]
    fn a_chain_that_leaves_the_socket_is_incomplete() {
        let turns = SocketTurns::default();
        turns.remember(
            &turn(Some("resp_elsewhere"), &[]),
            &record("resp_1", &[("function_call", "c")]),
            true,
        );
        assert!(!turns.chain("resp_1").unwrap().complete);
    }

    #[test]
    fn only_unstored_responses_are_evicted() {
        let turns = SocketTurns::default();
        turns.remember(&turn(None, &[]), &record("resp_stored", &[]), true);
        turns.remember(&turn(None, &[]), &record("resp_unstored", &[]), false);
        assert!(!turns.evict_unstored("resp_stored"));
        assert!(!turns.evict_unstored("resp_unknown"));
        assert!(turns.evict_unstored("resp_unstored"));
        assert!(turns.is_evicted("resp_unstored"));
        assert!(turns.chain("resp_unstored").is_none());
        assert!(!turns.is_evicted("resp_stored") && turns.chain("resp_stored").is_some());
    }

    #[test]
    fn messages_read_as_events_even_with_line_breaks() {
        let mut pending = Pending {
            tap: Tap::new(AnswerKind::EventStream, TapLimits::default()),
            turn: Some(turn(None, &[])),
            stored: true,
            recording: None,
            usage: None,
        };
        pending.feed("{\"type\":\"response.created\",\n\"response\":{\"id\":\"resp_1\",\"model\":\"m\"}}");
        pending.feed(r#"{"type":"response.output_item.done","item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"f","arguments":"{}"}}"#);
        assert!(!pending.tap.has_ended());
        pending.feed(r#"{"type":"response.completed","response":{"id":"resp_1","model":"m"}}"#);
        assert!(pending.tap.has_ended());
        let record = pending.tap.finish().unwrap();
        assert_eq!(record.id, "resp_1");
        assert_eq!(record.items[0].call_id.as_deref(), Some("call_1"));
    }
}
