//! The inputs the gate judged clean, kept so that the next turn of the same session is judged
//! only for its new items (docs/incremental-judging.md). One cache per process, shared by the
//! workers, bounded by `[gate] judged_prefix_bytes`, least recently used leads evicted.
//!
//! Inputs are found by their lead ([`InputProbe::lead`]: the caller's context and the text of
//! the first items), the longest that a body continues among those with the same lead. An input is kept
//! from the second body with its lead on: a body whose lead was never seen (a single request,
//! or a session's first turn) costs only its probe.
//!
//! Every hash that finds an input is keyed by a [`JudgeKey`] drawn from the system's random
//! source when the cache is made (once per process), which never leaves it: not logged, not
//! in `Debug`, not written anywhere.

use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::{OptionsBuilder, Weighter};

use crate::gate::{Continued, InputProbe, JudgeKey, KeptInput};
use crate::ledger::CallIds;

/// The most inputs kept under one lead (sessions that begin alike: one agent's instructions
/// and the same first request).
const PER_LEAD: usize = 64;

/// The cache's shards: few, so that one lead (which may hold the inputs of many sessions that
/// begin alike) fits in one; a shard holds its share of the budget, and an entry heavier than
/// that is not kept at all.
const SHARDS: usize = 2;

/// The most one lead's inputs weigh, as a share of the budget: well within a shard's, so a lead
/// is always admitted (its oldest inputs give way).
const LEAD_SHARE: u64 = 4;

/// How many leads are remembered as seen: some 2 MiB.
const SEEN_LEADS: usize = 64 * 1024;

/// What is kept of one input judged clean.
#[derive(Debug)]
pub(crate) struct Kept {
    /// Its identity, and what the gate needs to judge a body after it.
    pub(crate) input: KeptInput,
    /// The `call_id`s of the calls among its items (what the ledger records of a request's
    /// input).
    pub(crate) call_ids: CallIds,
    /// The ledger's loss epoch when the facts kept with it were read: they hold only while it
    /// stays the same (docs/incremental-judging.md#the-ledger).
    pub(crate) ledger_epoch: u64,
}

/// What a probed body finds among the kept inputs ([`JudgedPrefixes::look_up`]).
#[derive(Debug)]
pub(crate) struct Lookup {
    /// The kept input it continues, and where to read it from.
    pub(crate) found: Option<(Continued, Arc<Kept>)>,
    /// Whether its own input is kept once judged clean.
    pub(crate) keep: bool,
}

/// The inputs kept under one lead, the most recent first.
#[derive(Debug, Default)]
struct Lead {
    kept: Vec<Arc<Kept>>,
}

/// The kept inputs by lead, the leads seen, and the key they are found by.
pub(crate) struct JudgedPrefixes {
    leads: Cache<u128, Arc<Lead>, Footprint>,
    seen: Cache<u128, ()>,
    key: JudgeKey,
    /// The most one lead's inputs may weigh.
    lead_bytes: u64,
}

impl std::fmt::Debug for JudgedPrefixes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JudgedPrefixes")
            .field("leads", &self.leads.len())
            .field("bytes", &self.leads.weight())
            .finish()
    }
}

#[derive(Debug, Clone)]
struct Footprint;

impl Weighter<u128, Arc<Lead>> for Footprint {
    fn weight(&self, _: &u128, lead: &Arc<Lead>) -> u64 {
        lead.kept.iter().map(|kept| kept.weight()).sum::<u64>() + 64
    }
}

impl Kept {
    /// Roughly the memory it holds, in bytes.
    fn weight(&self) -> u64 {
        (self.input.footprint() + self.call_ids.footprint() + 64) as u64
    }
}

/// What an input of a 16 KiB agent history takes, about: the size the cache is presized for.
const TYPICAL_ENTRY_BYTES: u64 = 4096;

impl JudgedPrefixes {
    /// A cache of at most `bytes`, with a key of its own drawn now; `None` when `bytes` is 0, or
    /// no key could be drawn (every body judged whole).
    pub(crate) fn new(bytes: u64) -> Option<JudgedPrefixes> {
        if bytes == 0 {
            return None;
        }
        let key = match draw_key() {
            Ok(key) => key,
            Err(error) => {
                tracing::warn!(%error, "no random key for the inputs judged before: every body is judged whole");
                return None;
            }
        };
        let options = OptionsBuilder::new()
            .estimated_items_capacity((bytes / TYPICAL_ENTRY_BYTES).max(16) as usize)
            .weight_capacity(bytes)
            .shards(SHARDS)
            .build()
            .expect("a capacity, a weight and shards are all the options");
        Some(JudgedPrefixes {
            leads: Cache::with_options(options, Footprint, Default::default(), Default::default()),
            seen: Cache::new(SEEN_LEADS),
            key,
            lead_bytes: bytes / LEAD_SHARE,
        })
    }

    /// The key the inputs kept here are hashed with: a body is probed ([`InputProbe::of`]),
    /// and its input judged and kept ([`crate::gate::Gate::judge_keeping`]), under it.
    pub(crate) fn key(&self) -> &JudgeKey {
        &self.key
    }

    /// What the probed `body` finds, with one lookup of its lead: the kept input it continues
    /// (the longest of its lead that it does: its text is hashed once, whatever the number
    /// kept) with where to read it from, and whether its own input is to be kept (its lead was
    /// seen before). A lead not found is noted as seen.
    pub(crate) fn look_up(&self, probe: &InputProbe, body: &[u8]) -> Lookup {
        let lead = self.leads.get(&probe.lead());
        let found = lead.as_ref().and_then(|lead| {
            let inputs = lead.kept.iter().map(|kept| &kept.input);
            let (index, continued) = probe.continues_one_of(body, inputs)?;
            Some((continued, lead.kept[index].clone()))
        });
        let seen = self.seen.get(&probe.lead()).is_some();
        if found.is_none() && !seen {
            self.seen.insert(probe.lead(), ());
        }
        Lookup {
            keep: seen || lead.is_some(),
            found,
        }
    }

    /// [`JudgedPrefixes::look_up`]'s kept input alone.
    #[cfg(test)]
    fn find(&self, probe: &InputProbe, body: &[u8]) -> Option<(Continued, Arc<Kept>)> {
        self.look_up(probe, body).found
    }

    /// Whether an input with this lead would be kept: a body with it was seen before.
    #[cfg(test)]
    fn keeps(&self, probe: &InputProbe) -> bool {
        self.seen.get(&probe.lead()).is_some() || self.leads.get(&probe.lead()).is_some()
    }

    /// Keeps `kept` under the probe's lead, the most recent first (an identical input kept
    /// before gives its place up), the oldest giving way past [`PER_LEAD`] inputs or a quarter
    /// of the budget.
    pub(crate) fn keep(&self, probe: &InputProbe, kept: Kept) {
        let kept = Arc::new(kept);
        let mut weight = kept.weight();
        let mut inputs = vec![kept.clone()];
        if let Some(lead) = self.leads.get(&probe.lead()) {
            for other in lead
                .kept
                .iter()
                .filter(|other| !other.input.same_as(&kept.input))
                .take(PER_LEAD - 1)
            {
                weight += other.weight();
                if weight > self.lead_bytes {
                    break;
                }
                inputs.push(other.clone());
            }
        }
        self.leads.insert(probe.lead(), Arc::new(Lead { kept: inputs }));
    }

    /// How many leads have inputs kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.leads.len()
    }

    #[cfg(test)]
    fn weight(&self) -> u64 {
        self.leads.weight()
    }
}

/// A key of 32 bytes from the system's random source.
fn draw_key() -> Result<JudgeKey, getrandom::Error> {
    let mut bytes = [0; 32];
    getrandom::fill(&mut bytes)?;
    Ok(JudgeKey::from_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::{parse_noting_spans, Gate, ItemsAt, ProviderProfile, Target};

    /// A body of one session (`session`) at turn `turn`: a user message and `turn` calls with
    /// their outputs.
    fn body(session: usize, turn: usize) -> String {
        let mut items = vec![
            r#"{"role":"developer","content":"the same instructions"}"#.to_owned(),
            format!(r#"{{"role":"user","content":"session {session}"}}"#),
        ];
        for n in 0..turn {
            items.push(format!(
                r#"{{"type":"function_call","call_id":"c{n}","name":"f","arguments":"{{}}"}}"#
            ));
            items.push(format!(
                r#"{{"type":"function_call_output","call_id":"c{n}","output":"ok"}}"#
            ));
        }
        format!(
            r#"{{"model":"m","tools":[{{"type":"function","name":"f"}}],"input":[{}]}}"#,
            items.join(",")
        )
    }

    /// `text` judged and kept as the proxy keeps it in `kept`.
    fn judged(gate: &Gate, kept: &JudgedPrefixes, text: &str) -> (InputProbe, Kept) {
        let provider = ProviderProfile::own_namespace("openai");
        let request = parse_noting_spans(text.as_bytes(), ItemsAt::Input).unwrap();
        let (_, prefix) = gate
            .judge_keeping(&request, &Target::provider(&provider), None, kept.key())
            .unwrap();
        let probe = InputProbe::of(text.as_bytes(), 0, kept.key()).unwrap();
        let input = probe
            .keep(
                text.as_bytes(),
                None,
                &request,
                prefix.expect("a clean input is kept"),
            )
            .unwrap();
        let kept = Kept {
            input,
            call_ids: CallIds::default(),
            ledger_epoch: 0,
        };
        (probe, kept)
    }

    #[test]
    fn the_most_recent_input_a_body_continues_is_found_and_memory_stays_within_its_bound() {
        let gate = Gate::default();
        let kept = JudgedPrefixes::new(64 * 1024).unwrap();
        let next = body(0, 5);
        let probe = InputProbe::of(next.as_bytes(), 0, kept.key()).unwrap();
        assert!(kept.find(&probe, next.as_bytes()).is_none());
        assert!(kept.keeps(&probe), "seen once, kept from the next body on");
        for turn in [2, 3] {
            let (probe, entry) = judged(&gate, &kept, &body(0, turn));
            kept.keep(&probe, entry);
        }
        let (continued, found) = kept.find(&probe, next.as_bytes()).unwrap();
        assert_eq!((continued.known().count, found.input.prefix().items()), (8, 8));
        // Another session's body finds nothing of this one's.
        let other = body(1, 5);
        assert!(kept
            .find(
                &InputProbe::of(other.as_bytes(), 0, kept.key()).unwrap(),
                other.as_bytes()
            )
            .is_none());
        for session in 0..2000 {
            let (probe, entry) = judged(&gate, &kept, &body(session, 2));
            kept.keep(&probe, entry);
        }
        assert!(kept.weight() <= 64 * 1024, "{kept:?}");
        assert!(kept.len() < 2000 && kept.len() > 20, "{kept:?}");
    }

    #[test]
    fn sessions_that_begin_alike_keep_their_own_inputs_under_one_lead() {
        let gate = Gate::default();
        let kept = JudgedPrefixes::new(1 << 20).unwrap();
        let same_start = |turn: usize| body(7, turn);
        let (probe, first) = judged(&gate, &kept, &same_start(1));
        kept.keep(&probe, first);
        let (_, again) = judged(&gate, &kept, &same_start(1));
        kept.keep(&probe, again);
        assert_eq!(
            kept.leads.get(&probe.lead()).unwrap().kept.len(),
            1,
            "an input sent twice is kept once"
        );
        let (_, longer) = judged(&gate, &kept, &same_start(2));
        kept.keep(&probe, longer);
        let next = same_start(3);
        let (_, found) = kept.find(&probe, next.as_bytes()).unwrap();
        assert_eq!(found.input.prefix().items(), 6, "the most recent, longest input");
    }

    #[test]
    fn two_caches_draw_two_keys_and_neither_finds_what_the_other_kept() {
        let gate = Gate::default();
        let (one, other) = (
            JudgedPrefixes::new(1 << 20).unwrap(),
            JudgedPrefixes::new(1 << 20).unwrap(),
        );
        assert_ne!(one.key(), other.key());
        let next = body(3, 4);
        for kept in [&one, &other] {
            let (probe, entry) = judged(&gate, kept, &body(3, 2));
            kept.keep(&probe, entry);
        }
        for (kept, elsewhere) in [(&one, &other), (&other, &one)] {
            let own = InputProbe::of(next.as_bytes(), 0, kept.key()).unwrap();
            assert!(kept.find(&own, next.as_bytes()).is_some());
            // The same body probed under the other cache's key is not found here: another lead,
            // and another digest of the same text.
            let foreign = InputProbe::of(next.as_bytes(), 0, elsewhere.key()).unwrap();
            assert_ne!(own.lead(), foreign.lead());
            assert!(kept.find(&foreign, next.as_bytes()).is_none());
            let (_, found) = elsewhere.find(&foreign, next.as_bytes()).unwrap();
            assert!(own.continues(next.as_bytes(), &found.input).is_none());
        }
        // What is written of a cache names no key.
        let shown = format!("{one:?} {:?}", one.key());
        assert!(shown.starts_with("JudgedPrefixes { leads: 1, bytes: "), "{shown}");
        assert!(shown.ends_with(" JudgeKey(..)"), "{shown}");
    }

    #[test]
    fn sessions_that_begin_alike_stay_found_however_heavy_their_lead() {
        // Many sessions whose two first items are the same share one lead; the lead's inputs
        // together weigh more than a shard of the budget would take whole. The oldest give way,
        // and the lead stays, with the newest session's input found.
        let gate = Gate::default();
        let kept = JudgedPrefixes::new(256 * 1024).unwrap();
        let alike = |session: usize, turn: usize| {
            let mut text = body(0, turn).replacen(
                r#"{"type":"function_call","call_id":"c0""#,
                &format!(r#"{{"role":"user","content":"session {session}"}},{{"type":"function_call","call_id":"c0""#),
                1,
            );
            // Each call with an id of its own, as providers give them.
            for n in 0..turn {
                text = text.replacen(
                    &format!(r#""call_id":"c{n}","name""#),
                    &format!(r#""id":"fc_{n:04}_0123456789abcdef","call_id":"c{n}","name""#),
                    1,
                );
            }
            text
        };
        for session in 0..40 {
            let (probe, entry) = judged(&gate, &kept, &alike(session, 60));
            kept.keep(&probe, entry);
            let next = alike(session, 61);
            let probe = InputProbe::of(next.as_bytes(), 0, kept.key()).unwrap();
            let (continued, _) = kept.find(&probe, next.as_bytes()).expect("the newest input kept");
            assert_eq!(continued.known().count, 123, "session {session}");
        }
        assert_eq!(kept.len(), 1, "one lead");
        assert!(kept.weight() <= 256 * 1024 / LEAD_SHARE + 64, "{kept:?}");
    }

    #[test]
    fn no_memory_keeps_nothing() {
        assert!(JudgedPrefixes::new(0).is_none());
    }
}
