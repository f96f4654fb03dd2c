//! Tool schemas: compiled once, cached by content across requests, with a bounded budget.
//!
//! Schemas come from clients, so they are compiled offline (a remote `$ref` is an error, never a
//! fetch), with a linear-time regular-expression engine, under a size limit, and only when
//! their unfolded size (see `cost`) is bounded. That size is also what validating against
//! the schema costs in a request's work budget.

mod cost;
mod passed;

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use jsonschema::{PatternOptions, Validator};
use quick_cache::sync::Cache;
use quick_cache::Weighter;
use serde_json::Value;
use xxhash_rust::xxh3::xxh3_128_with_seed;

pub(crate) use cost::value_count;
use passed::PassedCalls;

/// Budgets for the schema cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaLimits {
    /// Total weight of cached schemas: an upper estimate of their compiled memory.
    pub cache_bytes: u64,
    /// A schema larger than this is not compiled and counts as unusable.
    pub max_schema_bytes: usize,
    /// Memory for remembering which arguments texts passed which schema, roughly their bytes.
    pub passed_calls_bytes: u64,
}

impl Default for SchemaLimits {
    fn default() -> Self {
        Self {
            cache_bytes: 64 << 20,
            max_schema_bytes: 1 << 20,
            passed_calls_bytes: 32 << 20,
        }
    }
}

/// A tool schema after compilation: a validator, or why the schema cannot be used.
#[derive(Debug)]
pub struct CompiledSchema {
    /// Unique to this compilation in this process: what remembered passes are tied to.
    serial: u64,
    source: Box<str>,
    outcome: Result<Compiled, String>,
}

#[derive(Debug)]
struct Compiled {
    validator: Validator,
    unfolded: u64,
    /// JSON values in the schema source: what the validator's memory grows with.
    values: u64,
}

/// Serials of compiled schemas; 0 stands for "no schema".
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

impl CompiledSchema {
    fn compile(source: &str) -> Self {
        Self::with_outcome(source, compile(source))
    }

    fn with_outcome(source: &str, outcome: Result<Compiled, String>) -> Self {
        Self {
            serial: NEXT_SERIAL.fetch_add(1, Ordering::Relaxed),
            source: source.into(),
            outcome,
        }
    }

    /// Identifies this compiled schema for the life of the process (never 0, never reused), so
    /// a pass remembered for it can never be taken for another schema's.
    pub fn serial(&self) -> u64 {
        self.serial
    }

    /// The validator, or the reason the schema is unusable.
    pub fn validator(&self) -> Result<&Validator, &str> {
        self.outcome
            .as_ref()
            .map(|compiled| &compiled.validator)
            .map_err(String::as_str)
    }

    /// How many subschemas the schema unfolds to: the work units of one validation against it.
    pub fn unfolded(&self) -> u64 {
        self.outcome.as_ref().map_or(0, |compiled| compiled.unfolded)
    }

    /// An upper estimate of the memory this compiled schema holds, in bytes. A validator is
    /// tens of times larger than its source (a `{}` of 3 bytes compiles to about 250), so it is
    /// estimated from the number of JSON values in the source, not from its length.
    pub fn footprint(&self) -> u64 {
        let held = match &self.outcome {
            Ok(compiled) => compiled.values.saturating_mul(BYTES_PER_SCHEMA_VALUE),
            Err(why) => why.len() as u64,
        };
        FOOTPRINT_BASE + self.source.len() as u64 + held
    }
}

/// Memory of a compiled schema before its first keyword, in bytes (about 3 KiB measured with
/// jsonschema 0.61, rounded up).
const FOOTPRINT_BASE: u64 = 4096;

/// Memory per JSON value of a schema's source once compiled, in bytes: measured at 240 (an
/// `anyOf` of `{}`), 370 (`properties` of `{"type":"string"}`) and 410 (`$ref`s to a shared
/// definition), rounded up.
const BYTES_PER_SCHEMA_VALUE: u64 = 512;

fn compile(source: &str) -> Result<Compiled, String> {
    let schema: Value = serde_json::from_str(source).map_err(|e| format!("not valid JSON: {e}"))?;
    if !(schema.is_object() || schema.is_boolean()) {
        return Err("a JSON Schema must be an object or a boolean".into());
    }
    cost::check_references(&schema)?;
    let Ok(unfolded) = cost::unfolded_size(&schema, MAX_UNFOLDED_SUBSCHEMAS) else {
        return Err(format!(
            "it unfolds through `$ref` to more than {MAX_UNFOLDED_SUBSCHEMAS} subschemas, too many to check"
        ));
    };
    let validator = jsonschema::options()
        .offline()
        .with_pattern_options(PatternOptions::regex())
        .build(&schema)
        .map_err(|e| e.to_string())?;
    let values = cost::value_count(&schema);
    Ok(Compiled {
        validator,
        unfolded,
        values,
    })
}

/// The most subschemas a tool schema may unfold to (see `cost`); real tool schemas unfold to
/// hundreds at most, and validating a value against this many takes about a millisecond.
pub const MAX_UNFOLDED_SUBSCHEMAS: u64 = 20_000;

/// The seed of the schema cache's hash: random per process, so nobody can construct two schemas
/// that land on one entry (a hit is confirmed by the bytes anyway; this keeps hits hits).
static CACHE_SEED: LazyLock<u64> =
    LazyLock::new(|| std::collections::hash_map::RandomState::new().hash_one(0u8));

/// Weighs a cache entry by the memory its compiled schema holds.
#[derive(Debug, Clone, Copy)]
struct Footprint;

impl Weighter<u128, Arc<CompiledSchema>> for Footprint {
    fn weight(&self, _: &u128, schema: &Arc<CompiledSchema>) -> u64 {
        schema.footprint()
    }
}

/// Compiled tool schemas keyed by a hash of their exact bytes.
///
/// The same tool sent on every turn has the same bytes, so it compiles once. A hit is confirmed
/// by comparing the bytes, so a hash collision can never pick the wrong validator.
pub struct SchemaCache {
    entries: Cache<u128, Arc<CompiledSchema>, Footprint>,
    passed: PassedCalls,
    limits: SchemaLimits,
}

impl std::fmt::Debug for SchemaCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchemaCache")
            .field("entries", &self.entries.len())
            .field("limits", &self.limits)
            .finish()
    }
}

impl SchemaCache {
    /// An empty cache with the given limits.
    pub fn new(limits: SchemaLimits) -> Self {
        // A typical tool schema has a few dozen values.
        let typical = FOOTPRINT_BASE + 64 * BYTES_PER_SCHEMA_VALUE;
        let estimated_items = (limits.cache_bytes / typical).clamp(16, 1 << 16);
        Self {
            entries: Cache::with_weighter(estimated_items as usize, limits.cache_bytes, Footprint),
            passed: PassedCalls::new(limits.passed_calls_bytes),
            limits,
        }
    }

    /// The compiled form of `source` (a tool's `parameters`, exactly as in the body).
    pub fn get(&self, source: &str) -> Arc<CompiledSchema> {
        if source.len() > self.limits.max_schema_bytes {
            let too_large = format!(
                "the schema is {} bytes, over the limit of {} bytes",
                source.len(),
                self.limits.max_schema_bytes
            );
            return Arc::new(CompiledSchema::with_outcome("", Err(too_large)));
        }
        let key = xxh3_128_with_seed(source.as_bytes(), *CACHE_SEED);
        let cached = self
            .entries
            .get_or_insert_with(&key, || Ok::<_, ()>(Arc::new(CompiledSchema::compile(source))));
        match cached {
            Ok(entry) if *entry.source == *source => entry,
            _ => Arc::new(CompiledSchema::compile(source)),
        }
    }

    /// Whether `arguments` (a call's `arguments` as written: its JSON string text, escapes
    /// included) already passed `schema` (`None`: a tool that declares no schema).
    pub fn has_passed(&self, schema: Option<&CompiledSchema>, arguments: &str) -> bool {
        if schema.is_some_and(|schema| schema.validator().is_err()) {
            return false;
        }
        self.passed
            .contains(schema.map_or(0, CompiledSchema::serial), arguments)
    }

    /// Remembers that `arguments` (as written, see [`Self::has_passed`]) passed `schema`.
    pub fn remember_pass(&self, schema: Option<&CompiledSchema>, arguments: &str) {
        self.passed
            .insert(schema.map_or(0, CompiledSchema::serial), arguments);
    }

    /// How many compiled schemas are held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl Default for SchemaCache {
    fn default() -> Self {
        Self::new(SchemaLimits::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn error_of(cache: &SchemaCache, source: &str) -> String {
        cache.get(source).validator().unwrap_err().to_string()
    }

    #[test]
    fn the_same_bytes_compile_once() {
        let cache = SchemaCache::default();
        let a = cache.get(r#"{"type":"object"}"#);
        let b = cache.get(r#"{"type":"object"}"#);
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn draft_2020_12_is_the_default() {
        let cache = SchemaCache::default();
        // prefixItems exists only from 2020-12 on.
        let schema = cache.get(r#"{"type":"array","prefixItems":[{"type":"string"}]}"#);
        let v = schema.validator().unwrap();
        assert!(!v.is_valid(&json!([1])));
        assert!(v.is_valid(&json!(["a"])));
    }

    #[test]
    fn schema_names_its_draft() {
        let cache = SchemaCache::default();
        // In draft 4, exclusiveMaximum is a boolean modifier of maximum.
        let schema = cache.get(
            r#"{"$schema":"http://json-schema.org/draft-04/schema#","maximum":5,"exclusiveMaximum":true}"#,
        );
        let v = schema.validator().unwrap();
        assert!(!v.is_valid(&json!(5)));
        assert!(v.is_valid(&json!(4)));
    }

    #[test]
    fn local_refs_resolve() {
        let cache = SchemaCache::default();
        let schema = cache.get(
            r##"{"$defs":{"region":{"enum":["apac","emea"]}},"type":"object","properties":{"r":{"$ref":"#/$defs/region"}}}"##,
        );
        let v = schema.validator().unwrap();
        assert!(v.is_valid(&json!({"r":"apac"})));
        assert!(!v.is_valid(&json!({"r":"amer"})));
    }

    #[test]
    fn remote_refs_are_never_fetched() {
        let cache = SchemaCache::default();
        let err = error_of(&cache, r#"{"$ref":"https://example.com/schema.json"}"#);
        assert!(!err.is_empty());
    }

    #[test]
    fn invalid_schemas_are_unusable() {
        let cache = SchemaCache::default();
        assert!(cache.get(r#"{"type":"no-such-type"}"#).validator().is_err());
        assert!(cache.get(r#"{"minLength":-1}"#).validator().is_err());
        assert!(error_of(&cache, r#""a string""#).contains("object or a boolean"));
    }

    #[test]
    fn boolean_schemas_work() {
        let cache = SchemaCache::default();
        assert!(cache.get("true").validator().unwrap().is_valid(&json!({"any":1})));
        assert!(!cache.get("false").validator().unwrap().is_valid(&json!({})));
    }

    #[test]
    fn patterns_use_a_linear_time_engine() {
        let cache = SchemaCache::default();
        let schema = cache.get(r#"{"type":"string","pattern":"^(a+)+$"}"#);
        let v = schema.validator().unwrap();
        let hostile = format!("{}!", "a".repeat(100_000));
        assert!(!v.is_valid(&json!(hostile)));
        // Backreferences need backtracking, which the linear engine refuses.
        assert!(cache.get(r#"{"pattern":"(a)\\1"}"#).validator().is_err());
    }

    #[test]
    fn oversized_schemas_are_refused_before_compiling() {
        let cache = SchemaCache::new(SchemaLimits {
            cache_bytes: 1 << 20,
            max_schema_bytes: 64,
            ..SchemaLimits::default()
        });
        let big = format!(r#"{{"description":"{}"}}"#, "x".repeat(100));
        assert!(error_of(&cache, &big).contains("over the limit"));
        assert!(cache.is_empty());
    }

    #[test]
    fn schemas_unfolding_past_the_limit_are_unusable() {
        let cache = SchemaCache::default();
        let mut defs = serde_json::Map::new();
        for i in 0..24 {
            defs.insert(format!("d{i}"), json!({"anyOf": [{"$ref": format!("#/%24defs/d{}", i + 1)}, {"$ref": format!("#/$defs/d{}", i + 1)}]}));
        }
        defs.insert("d24".into(), json!({"type": "integer"}));
        let source = json!({"$defs": defs, "properties": {"x": {"$ref": "#/$defs/d0"}}}).to_string();
        assert!(
            error_of(&cache, &source).contains("unfolds"),
            "{}",
            error_of(&cache, &source)
        );
        let anchored = source.replace("#/%24defs/d", "#d");
        assert!(error_of(&cache, &anchored).contains("local JSON pointer"));
    }

    #[test]
    fn a_recompiled_schema_is_a_new_schema() {
        let cache = SchemaCache::default();
        let a = cache.get(r#"{"type":"object"}"#);
        let b = CompiledSchema::compile(r#"{"type":"object"}"#);
        assert_ne!(a.serial(), b.serial());
        assert_ne!(a.serial(), 0);
        assert_eq!(a.unfolded(), 1);
    }

    #[test]
    fn a_schema_weighs_what_its_validator_holds_not_its_source_length() {
        // 2,000 empty subschemas: 6 KB of source, about 480 KB once compiled (measured).
        let wide = |salt: usize| {
            let branches = vec!["{}"; 2_000].join(",");
            format!(r#"{{"title":"{salt}","anyOf":[{branches}]}}"#)
        };
        let cache = SchemaCache::new(SchemaLimits {
            cache_bytes: 4 << 20,
            ..SchemaLimits::default()
        });
        assert!(cache.get(&wide(0)).footprint() >= 2_000 * 240);
        for salt in 1..100 {
            cache.get(&wide(salt));
        }
        assert!(cache.len() <= 8, "{} entries", cache.len());
    }

    #[test]
    fn the_cache_stays_within_its_budget() {
        let cache = SchemaCache::new(SchemaLimits {
            cache_bytes: 16 * 1024,
            max_schema_bytes: 4096,
            ..SchemaLimits::default()
        });
        for i in 0..1000 {
            cache.get(&format!(r#"{{"type":"object","title":"t{i}"}}"#));
        }
        assert!(cache.len() <= 16, "{} entries", cache.len());
    }
}
