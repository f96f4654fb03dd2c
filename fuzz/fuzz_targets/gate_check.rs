//! The gate on arbitrary bytes: the first byte picks the target provider, the rest is the body.
//!
//! Beyond "never panics": a body the gate can read gets a verdict whose violations are in input
//! order, one per item at most, each pointing into `input` or `tools`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use replaygate::gate::{parse, Gate, ProviderProfile, SchemaLimits, Target};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let profile = match selector % 3 {
        0 => ProviderProfile::own_namespace("bedrock"),
        1 => ProviderProfile::new("openai", ["openai"]),
        _ => ProviderProfile::new("any", ["openai", "acme", "bedrock"]),
    };
    // A fresh gate per input, so a finding never depends on an earlier input's cached schema;
    // a small cache, so eviction runs too.
    let gate = Gate::new(SchemaLimits {
        cache_bytes: 64 << 10,
        max_schema_bytes: 16 << 10,
    });
    let verdict = gate.check(body, &Target::provider(&profile));
    assert_eq!(verdict.is_ok(), parse(body).is_ok(), "check and parse disagree");
    let Ok(verdict) = verdict else { return };
    let items = parse(body).unwrap().items().len();
    let mut previous = None;
    for violation in &verdict.violations {
        assert!(violation.index < items, "violation for a missing item");
        assert!(
            previous < Some(violation.index),
            "violations out of order or repeated"
        );
        previous = Some(violation.index);
        let own = format!("input[{}]", violation.index);
        assert!(
            violation.param.starts_with(&own) || violation.param.starts_with("tools["),
            "param {} for item {}",
            violation.param,
            violation.index
        );
    }
});
