//! Argument texts already seen to pass a schema.
//!
//! An agent re-sends its whole history on every turn, so most calls a gate sees are calls it
//! already judged. Remembering which exact `arguments` text passed which exact schema lets a
//! replayed call skip decoding, parsing and validation. The text is the one written in the body
//! (the JSON string, escapes included), so a replayed call is recognised without decoding it;
//! the same arguments written with other escapes are simply checked again. A hit is confirmed by comparing the text, so a
//! hash collision can never let a call through unchecked.

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
    schema: u128,
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
}

impl PassedCalls {
    pub(super) fn new(budget_bytes: u64) -> Self {
        let estimated_items = (budget_bytes / (256 + ENTRY_OVERHEAD)).clamp(16, 1 << 20);
        Self {
            entries: Cache::with_weighter(estimated_items as usize, budget_bytes, TextBytes),
        }
    }

    /// The entry's key: the text's hash seeded with the schema's. A collision costs nothing but a
    /// miss, since a hit is confirmed against the stored schema and text.
    fn key(schema: u128, arguments: &str) -> u128 {
        let seed = (schema as u64) ^ ((schema >> 64) as u64);
        xxh3_128_with_seed(arguments.as_bytes(), seed)
    }

    /// Whether `arguments` already passed the schema identified by `schema`.
    pub(super) fn contains(&self, schema: u128, arguments: &str) -> bool {
        self.entries
            .get(&Self::key(schema, arguments))
            .is_some_and(|pass| pass.schema == schema && *pass.arguments == *arguments)
    }

    /// Remembers that `arguments` passed the schema identified by `schema`.
    pub(super) fn insert(&self, schema: u128, arguments: &str) {
        if arguments.len() <= MAX_REMEMBERED_BYTES {
            let pass = Pass {
                schema,
                arguments: arguments.into(),
            };
            self.entries.insert(Self::key(schema, arguments), Arc::new(pass));
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
