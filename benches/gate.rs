//! The gate's cost against the floor of merely reading the same bytes as JSON.
//!
//! For each body size: `floor` skips the whole body with `serde::de::IgnoredAny` (the least any
//! JSON reader can do), `parse` is the gate's one-pass read alone, and `gate` is the whole
//! check with one long-lived gate (warm schema cache). The project's goal: `gate` within 2x
//! of `floor` at every size.
//!
//! Profile one case with e.g. `cargo bench --bench gate -- --profile-time 10 '1MiB/gate'`.

mod history;

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use replaygate::gate::{parse, Gate, ProviderProfile, SchemaLimits, Target};
use serde::de::IgnoredAny;

const SIZES: &[(&str, usize)] = &[("16KiB", 16 << 10), ("256KiB", 256 << 10), ("1MiB", 1 << 20)];

fn gate_vs_floor(c: &mut Criterion) {
    let gate = Gate::default();
    // The same gate without the memory of passed calls: every call is parsed and validated, as
    // on the first turn that sends it.
    let first_seen = Gate::new(SchemaLimits {
        passed_calls_bytes: 0,
        ..SchemaLimits::default()
    });
    let openai = ProviderProfile::own_namespace("openai");
    let target = Target::provider(&openai);
    for &(label, size) in SIZES {
        let body = history::body(size, 0x5eed_0000 + size as u64);
        // Outside the timed loop: the body is what it claims to be.
        let verdict = gate.check(&body, &target).expect("the body reads");
        assert!(verdict.is_allowed(), "{label}: {:#?}", verdict.violations);
        serde_json::from_slice::<IgnoredAny>(&body).expect("the body is JSON");
        let items = parse(&body).expect("the body reads").items().len();
        eprintln!("{label}: a body of {} bytes with {items} items", body.len());

        let mut group = c.benchmark_group(label);
        group.throughput(Throughput::Bytes(body.len() as u64));
        // A 1 MiB check takes over a millisecond: give 100 samples the time they need.
        group.measurement_time(Duration::from_secs(if size >= 1 << 20 { 10 } else { 5 }));
        group.bench_function("floor", |b| {
            b.iter(|| serde_json::from_slice::<IgnoredAny>(black_box(&body)).unwrap())
        });
        group.bench_function("parse", |b| {
            b.iter(|| parse(black_box(&body)).unwrap().items().len())
        });
        group.bench_function("gate", |b| {
            b.iter(|| gate.check(black_box(&body), &target).unwrap())
        });
        group.bench_function("gate_first_seen", |b| {
            b.iter(|| first_seen.check(black_box(&body), &target).unwrap())
        });
        group.finish();
    }
}

criterion_group!(benches, gate_vs_floor);
criterion_main!(benches);
