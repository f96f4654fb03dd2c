//! The gate's cost against the floor of merely reading the same bytes as JSON.
//!
//! For each body size: `floor` skips the whole body with `serde::de::IgnoredAny` (the least any
//! JSON reader can do), `reader` is the gate's own reader doing the same (UTF-8 checked first,
//! as the gate does), `parse` is the gate's one-pass read alone, and `gate` is the whole
//! check with one long-lived gate (warm schema cache). The project's goal: `gate` within 2x
//! of `floor` at every size. `gate_item_profile` is `gate` for a provider with the `openai` item
//! profile (docs/item-profiles.md), whose members checks ride the same one reading.
//!
//! Profile one case with e.g. `cargo bench --bench gate -- --profile-time 10 '1MiB/gate'`.

mod history;

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use replaygate::gate::{parse, Gate, ItemProfile, ProviderProfile, Target};
use serde::de::IgnoredAny;

const SIZES: &[(&str, usize)] = &[("16KiB", 16 << 10), ("256KiB", 256 << 10), ("1MiB", 1 << 20)];

fn gate_vs_floor(c: &mut Criterion) {
    let (gate, first_seen) = history::gates();
    let openai = ProviderProfile::own_namespace("openai");
    let target = Target::provider(&openai);
    let profiled = ProviderProfile::own_namespace("openai").with_item_profile(Some(
        ItemProfile::built_in("openai").expect("the built-in profile"),
    ));
    let profiled_target = Target::provider(&profiled);
    for &(label, size) in SIZES {
        let body = history::bench_body(size);
        // Outside the timed loop: the body is what it claims to be.
        let verdict = gate.check(&body, &target).expect("the body reads");
        assert!(verdict.is_allowed(), "{label}: {:#?}", verdict.violations);
        let verdict = gate.check(&body, &profiled_target).expect("the body reads");
        assert!(
            verdict.violations.is_empty(),
            "{label}: {:#?}",
            verdict.violations
        );
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
        group.bench_function("reader", |b| {
            b.iter(|| {
                let text = simdutf8::basic::from_utf8(black_box(&body)).unwrap();
                replaygate::json::Reader::read::<IgnoredAny>(text).unwrap()
            })
        });
        group.bench_function("parse", |b| {
            b.iter(|| parse(black_box(&body)).unwrap().items().len())
        });
        group.bench_function("gate", |b| {
            b.iter(|| gate.check(black_box(&body), &target).unwrap())
        });
        group.bench_function("gate_item_profile", |b| {
            b.iter(|| gate.check(black_box(&body), &profiled_target).unwrap())
        });
        let previous = history::kept_previous_turn(&gate, &profiled_target, &body);
        let next = history::judge_next_turn(&gate, &profiled_target, &body, &previous);
        assert_eq!(
            next.violations, verdict.violations,
            "{label}: the next turn's verdict"
        );
        group.bench_function("gate_next_turn", |b| {
            b.iter(|| history::judge_next_turn(&gate, &profiled_target, black_box(&body), &previous))
        });
        group.bench_function("gate_first_seen", |b| {
            b.iter(|| first_seen.check(black_box(&body), &target).unwrap())
        });
        group.finish();
    }
}

/// The most work one request may make the gate do: calls whose arguments fail a schema that
/// branches in two at every level, up to the default work budget. Its time is what the budget
/// means in CPU (the blocking pool takes such judgments off the event loop).
fn worst_case_within_budget(c: &mut Criterion) {
    let mut defs = serde_json::Map::new();
    let levels = 12;
    for i in 0..levels {
        let next = format!("#/$defs/d{}", i + 1);
        defs.insert(
            format!("d{i}"),
            serde_json::json!({"anyOf": [{"$ref": next}, {"$ref": next}]}),
        );
    }
    defs.insert(format!("d{levels}"), serde_json::json!({"type": "integer"}));
    let parameters =
        serde_json::json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "$defs": defs});
    let gate = Gate::default();
    let openai = ProviderProfile::own_namespace("openai");
    let target = Target::provider(&openai);
    let body_with = |calls: usize| {
        let items: Vec<_> = (0..calls)
            .map(|i| serde_json::json!({"type": "function_call", "call_id": format!("c{i}"), "name": "deep", "arguments": format!(r#"{{"x":"no {i}"}}"#)}))
            .collect();
        let tools = serde_json::json!([{"type": "function", "name": "deep", "parameters": parameters}]);
        serde_json::to_vec(&serde_json::json!({"model": "m", "tools": tools, "input": items})).unwrap()
    };
    // As many failing calls as the budget allows.
    let calls = (1..)
        .take_while(|&n| gate.check(&body_with(n), &target).is_ok())
        .last()
        .unwrap();
    let body = body_with(calls);
    eprintln!("worst case: {calls} failing calls within the default work budget");
    c.bench_function("worst_case_within_budget", |b| {
        b.iter(|| gate.check(black_box(&body), &target).unwrap())
    });
}

criterion_group!(benches, gate_vs_floor, worst_case_within_budget);
criterion_main!(benches);
