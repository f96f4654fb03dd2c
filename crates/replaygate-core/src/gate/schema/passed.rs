//! Argument texts already seen to pass a schema.
//!
//! An agent re-sends its whole history on every turn, so most calls a gate sees are calls it
//! already judged. Remembering which exact `arguments` text passed which exact schema lets a
//! replayed call skip decoding, parsing and validation. The text is the one written in the body
//! (the JSON string, escapes included), so a replayed call is recognised without decoding it;
//! the same arguments written with other escapes are simply checked again.
//!
//! A pass is tied to the schema's serial (unique to one compilation in this process), not to a
//! hash of the schema, and a hit is confirmed by comparing the serial and the text, so no
//! constructed hash collision can let a call through unchecked.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::Weighter;
use xxhash_rust::xxh3::xxh3_128_with_seed;

/// Longest arguments text remembered; longer ones are simply checked every time.
const MAX_REMEMBERED_BYTES: usize = 64 * 1024;

/// Fixed per-entry overhead counted on top of the text.
const ENTRY_OVERHEAD: u64 = 64;

/// One remembered pass.
#[derive(Debug)]
struct Pass {
    schema: u64,
    arguments: Box<str>,
}

#[derive(Debug, Clone, Copy)]
struct TextBytes;

impl Weighter<u128, Arc<Pass>> for TextBytes {
    fn weight(&self, _: &u128, pass: &Arc<Pass>) -> u64 {
        pass.arguments.len() as u64 + ENTRY_OVERHEAD
    }
}

/// A bounded memory of (schema, arguments text) pairs that passed.
pub(super) struct PassedCalls {
    entries: Cache<u128, Arc<Pass>, TextBytes>,
    /// Random per memory, so the keys of texts cannot be predicted from outside.
    seed: u64,
}

impl PassedCalls {
    pub(super) fn new(budget_bytes: u64) -> Self {
        let estimated_items = (budget_bytes / (256 + ENTRY_OVERHEAD)).clamp(16, 1 << 20);
        Self {
            entries: Cache::with_weighter(estimated_items as usize, budget_bytes, TextBytes),
            seed: RandomState::new().hash_one(0u8),
        }
    }

    /// The entry's key: the text's hash seeded with the schema's serial and this memory's random
    /// seed. A collision costs nothing but a miss, since a hit is confirmed against the stored
    /// schema serial and text.
    fn key(&self, schema: u64, arguments: &str) -> u128 {
        xxh3_128_with_seed(arguments.as_bytes(), self.seed ^ schema.rotate_left(29))
    }

    /// Whether `arguments` already passed the schema with serial `schema` (0: no schema).
    pub(super) fn contains(&self, schema: u64, arguments: &str) -> bool {
        self.entries
            .get(&self.key(schema, arguments))
            .is_some_and(|pass| pass.schema == schema && *pass.arguments == *arguments)
    }

    /// Remembers that `arguments` passed the schema with serial `schema` (0: no schema).
    pub(super) fn insert(&self, schema: u64, arguments: &str) {
        if arguments.len() <= MAX_REMEMBERED_BYTES {
            let pass = Pass {
                schema,
                arguments: arguments.into(),
            };
            self.entries.insert(self.key(schema, arguments), Arc::new(pass));
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_is_remembered_for_its_schema_and_text_only() {
        let passed = PassedCalls::new(1 << 20);
        passed.insert(7, r#"{"region":"apac"}"#);
        assert!(passed.contains(7, r#"{"region":"apac"}"#));
        assert!(!passed.contains(8, r#"{"region":"apac"}"#));
        assert!(!passed.contains(7, r#"{"region":"emea"}"#));
    }

    #[test]
    fn long_texts_are_not_remembered() {
        let passed = PassedCalls::new(1 << 20);
        let long = "x".repeat(MAX_REMEMBERED_BYTES + 1);
        passed.insert(1, &long);
        assert!(!passed.contains(1, &long));
    }

    #[test]
    fn the_memory_stays_within_its_budget() {
        let passed = PassedCalls::new(64 * 1024);
        for i in 0..10_000 {
            passed.insert(1, &format!(r#"{{"n":{i}}}"#));
        }
        assert!(passed.len() < 1000, "{}", passed.len());
    }
}
