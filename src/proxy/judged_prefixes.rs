//! The inputs the gate judged clean, kept so that the next turn of the same session is judged
//! only for its new items (docs/incremental-judging.md). One cache per process, shared by the
//! workers, bounded by `[gate] judged_prefix_bytes`, least recently used entries evicted.

use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::Weighter;

use crate::gate::{InputScan, JudgedPrefix};
use crate::ledger::CallIds;

/// What is kept of one input judged clean.
#[derive(Debug)]
pub(crate) struct Kept {
    /// What the gate needs to judge a body after these items.
    pub(crate) prefix: JudgedPrefix,
    /// The `call_id`s of the calls among them (what the ledger records of a request's input).
    pub(crate) call_ids: CallIds,
}

/// The kept inputs by [`InputScan::key`].
pub(crate) struct JudgedPrefixes {
    entries: Cache<u128, Arc<Kept>, Footprint>,
}

impl std::fmt::Debug for JudgedPrefixes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JudgedPrefixes")
            .field("entries", &self.entries.len())
            .field("bytes", &self.entries.weight())
            .finish()
    }
}

#[derive(Debug, Clone)]
struct Footprint;

impl Weighter<u128, Arc<Kept>> for Footprint {
    fn weight(&self, _: &u128, kept: &Arc<Kept>) -> u64 {
        (kept.prefix.footprint() + kept.call_ids.footprint() + 64) as u64
    }
}

/// What an entry of a 16 KiB agent history takes, about: the size the cache is presized for.
const TYPICAL_ENTRY_BYTES: u64 = 4096;

impl JudgedPrefixes {
    /// A cache of at most `bytes`; `None` when it is 0 (every body judged whole).
    pub(crate) fn new(bytes: u64) -> Option<JudgedPrefixes> {
        (bytes > 0).then(|| JudgedPrefixes {
            entries: Cache::with_weighter((bytes / TYPICAL_ENTRY_BYTES).max(16) as usize, bytes, Footprint),
        })
    }

    /// The longest prefix of the scanned body's items that was kept, with how many items it has.
    pub(crate) fn longest(&self, scan: &InputScan) -> Option<(usize, Arc<Kept>)> {
        scan.prefix_keys()
            .find_map(|(count, key)| self.entries.get(&key).map(|kept| (count, kept)))
            .filter(|(count, kept)| kept.prefix.items() == *count)
    }

    /// Keeps `kept` as the judged input of the scanned body.
    pub(crate) fn keep(&self, scan: &InputScan, kept: Kept) {
        if kept.prefix.items() == scan.items() {
            self.entries.insert(scan.key(), Arc::new(kept));
        }
    }

    /// How many inputs are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::{parse, Gate, ProviderProfile, Target};

    /// A body of one session (`session`) at turn `turn`: a user message and `turn` calls with
    /// their outputs.
    fn body(session: usize, turn: usize) -> String {
        let mut items = vec![format!(r#"{{"role":"user","content":"session {session}"}}"#)];
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

    fn judged(gate: &Gate, text: &str) -> (InputScan, Kept) {
        let provider = ProviderProfile::own_namespace("openai");
        let request = parse(text.as_bytes()).unwrap();
        let (_, prefix) = gate
            .judge_keeping(&request, &Target::provider(&provider), None)
            .unwrap();
        let kept = Kept {
            prefix: prefix.expect("a clean input is kept"),
            call_ids: CallIds::default(),
        };
        (InputScan::of(text.as_bytes(), 0).unwrap(), kept)
    }

    #[test]
    fn the_longest_kept_prefix_is_found_and_memory_stays_within_its_bound() {
        let gate = Gate::default();
        let kept = JudgedPrefixes::new(64 * 1024).unwrap();
        let (scan, first) = judged(&gate, &body(0, 2));
        kept.keep(&scan, first);
        let (scan, second) = judged(&gate, &body(0, 3));
        kept.keep(&scan, second);
        let next = InputScan::of(body(0, 5).as_bytes(), 0).unwrap();
        let (count, found) = kept.longest(&next).unwrap();
        assert_eq!((count, found.prefix.items()), (7, 7));
        // Another session's body finds nothing.
        assert!(kept
            .longest(&InputScan::of(body(1, 5).as_bytes(), 0).unwrap())
            .is_none());
        for session in 0..2000 {
            let (scan, entry) = judged(&gate, &body(session, 2));
            kept.keep(&scan, entry);
        }
        assert!(kept.entries.weight() <= 64 * 1024, "{kept:?}");
        assert!(kept.len() < 2000 && kept.len() > 50, "{kept:?}");
    }

    #[test]
    fn no_memory_keeps_nothing() {
        assert!(JudgedPrefixes::new(0).is_none());
    }
}
