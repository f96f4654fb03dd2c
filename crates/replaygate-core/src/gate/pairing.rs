//! Pairing: which call each output in `input` answers, by `call_id`
//! (docs/reasons.md#call_id_mismatch).
//!
//! Each output pairs with the most recent earlier call with its `call_id` that no earlier output
//! answered. A `call_id` may repeat once its call is answered (Bedrock Mantle numbers calls per
//! response, so every turn has a `call_0`); a call repeating a still unanswered one sits on it
//! until that one is answered. Items say what they are to pairing through
//! [`Item::pairing`](super::item::Item::pairing): a call with its `call_id`, an output, or
//! neither.
//!
//! What pairing finds wrong (`call_id_mismatch`, `not_function_call`) is the rules' business;
//! this module only pairs, for them, for cutting stripped items in pairs, and for the ledger
//! query's outputs whose calls only the chain can hold.

use std::collections::{HashMap, HashSet};

use foldhash::fast::RandomState;

use super::item::{Item, ItemClass, Pairing};

/// An earlier call, as pairing needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Call<'r> {
    /// Its position in `input`.
    pub(crate) index: usize,
    /// Its `type`.
    pub(crate) type_name: &'r str,
    /// Whether it is a `function_call`.
    pub(crate) is_function_call: bool,
}

/// What `input` says so far about one `call_id`.
#[derive(Debug, Default)]
struct CallsOf<'r> {
    /// The most recent call not answered yet.
    open: Option<Call<'r>>,
    /// Earlier calls not answered yet, the most recent last (only a refused repeat puts one
    /// here, so valid histories never allocate it).
    under: Vec<Call<'r>>,
    /// The most recent call that an output answered.
    answered: Option<Call<'r>>,
}

/// What pairing made of one item.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Step<'r> {
    /// Neither a call nor an output.
    Neither,
    /// A call, sitting on `repeats` when that call with its `call_id` is still unanswered.
    Call {
        call_id: &'r str,
        repeats: Option<Call<'r>>,
    },
    /// An output without a string `call_id`.
    NoCallId,
    /// An output that answered `call`.
    Answered { call_id: &'r str, call: Call<'r> },
    /// An output that answered nothing; `answered` is the last call with its `call_id` that an
    /// output answered, if any.
    Unpaired {
        call_id: &'r str,
        answered: Option<Call<'r>>,
    },
}

/// The calls of `input` by `call_id`, as the items are paired in order.
#[derive(Debug, Default)]
pub(crate) struct Pairer<'r> {
    by_id: HashMap<&'r str, CallsOf<'r>, RandomState>,
    /// Where the last turn begins (see [`Pairer::with_last_turn`]); 0: not counted.
    last_turn: usize,
    /// How many `function_call`s before `last_turn` an output answered.
    answered_before_last_turn: usize,
}

impl<'r> Pairer<'r> {
    /// A pairer with room for the calls of `items` input items, so it does not grow while a
    /// long history is paired (calls are rarely more than half of the items).
    pub(crate) fn for_items(items: usize) -> Self {
        Self {
            by_id: HashMap::with_capacity_and_hasher(items / 2, RandomState::default()),
            last_turn: 0,
            answered_before_last_turn: 0,
        }
    }

    /// The same pairer, counting the `function_call`s before position `last_turn` that an
    /// output answers ([`Pairer::answered_before_last_turn`]), for `call_without_output`.
    pub(crate) fn with_last_turn(self, last_turn: usize) -> Self {
        Self { last_turn, ..self }
    }

    /// Whether some call paired so far has no output yet.
    pub(crate) fn has_open_calls(&self) -> bool {
        self.by_id.values().any(|calls| calls.open.is_some())
    }

    /// How many `function_call`s before the last turn an output has answered so far.
    pub(crate) fn answered_before_last_turn(&self) -> usize {
        self.answered_before_last_turn
    }

    /// Pairs `item` (the item at `index`, taken in input order). Every item goes through here,
    /// so later outputs see it.
    pub(crate) fn step(&mut self, index: usize, item: &'r Item<'_>) -> Step<'r> {
        match item.pairing() {
            Pairing::Call(call_id) => self.open_call(index, item, call_id),
            Pairing::Output => match item.call_id() {
                Some(call_id) => self.answer(call_id),
                None => Step::NoCallId,
            },
            Pairing::None => Step::Neither,
        }
    }

    fn open_call(&mut self, index: usize, item: &'r Item<'_>, call_id: &'r str) -> Step<'r> {
        let calls = self.by_id.entry(call_id).or_default();
        let call = Call {
            index,
            type_name: item.type_name(),
            is_function_call: item.class == ItemClass::FunctionCall,
        };
        let repeats = calls.open.replace(call);
        if let Some(earlier) = repeats {
            calls.under.push(earlier);
        }
        Step::Call { call_id, repeats }
    }

    fn answer(&mut self, call_id: &'r str) -> Step<'r> {
        let Some(calls) = self.by_id.get_mut(call_id) else {
            return Step::Unpaired {
                call_id,
                answered: None,
            };
        };
        let Some(call) = calls.open.take() else {
            return Step::Unpaired {
                call_id,
                answered: calls.answered,
            };
        };
        calls.open = calls.under.pop();
        calls.answered = Some(call);
        if call.is_function_call && call.index < self.last_turn {
            self.answered_before_last_turn += 1;
        }
        Step::Answered { call_id, call }
    }
}

/// Replays the pairing of `items` and calls `answered(output, call)` for every output that
/// answers a call, in input order, with both positions.
pub(crate) fn for_each_answer(items: &[Item<'_>], mut answered: impl FnMut(usize, usize)) {
    let mut pairer = Pairer::for_items(items.len());
    for (at, item) in items.iter().enumerate() {
        if let Step::Answered { call, .. } = pairer.step(at, item) {
            answered(at, call.index);
        }
    }
}

/// The call ids of the outputs among `items` that answer no call earlier in them, once each.
pub(crate) fn unpaired_call_ids(items: &[Item<'_>]) -> Vec<String> {
    let mut answered = vec![false; items.len()];
    for_each_answer(items, |output, _| answered[output] = true);
    let mut seen = HashSet::with_hasher(RandomState::default());
    items
        .iter()
        .zip(answered)
        .filter(|(item, answered)| !answered && item.pairing() == Pairing::Output)
        .filter_map(|(item, _)| item.call_id())
        .filter(|call_id| seen.insert(*call_id))
        .map(str::to_owned)
        .collect()
}
