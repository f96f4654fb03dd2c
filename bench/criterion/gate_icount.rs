//! The gate's cases of `bench/criterion/gate.rs` run a fixed number of times, for counting instructions
//! under valgrind: on a shared machine wall-clock throughput moves by ±15% from run to run,
//! while instruction counts repeat exactly. `bench/gate/icount.sh` runs it and prints the
//! instructions per check.
//!
//!     gate_icount CASE BYTES TIMES     # CASE: floor, reader, parse, gate, item_profile, first_seen,
//!                                      # next_turn, offline, ledger_stored or ledger_not_stored
//!
//! `floor` is serde_json passing over the body (`IgnoredAny`); `reader` is the gate's own reader
//! doing the same, the least any reading of the body by the gate can cost. `next_turn` is the
//! `item_profile` check of the body as the next turn of a session whose previous turn (the body
//! less its last items) was judged and kept: probed, its old text hashed, read and judged only
//! for its new items, and its whole input kept
//! (docs/incremental-judging.md).
//!
//! `state_not_stored` (docs/reasons.md#state_not_stored) on the same body (a `store: false`
//! history whose reasoning items go by id alone): `offline` is the `item_profile` check as
//! `replaygate check` makes it (every such reasoning item found from the body alone);
//! `ledger_stored` and `ledger_not_stored` are the check with what the ledger knows of every
//! item, recorded for a response its provider stored (the rule finds nothing) or did not (every
//! such reasoning item cut).
//!
//! Under `cargo bench` (which passes `--bench`) it does nothing.

mod history;

use std::hint::black_box;

use replaygate::gate::{parse, ItemProfile, ProviderProfile, Reason, Target};
use serde::de::IgnoredAny;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [case, size, times] = args.as_slice() else {
        return;
    };
    let size: usize = size.parse().expect("BYTES is a number");
    let times: usize = times.parse().expect("TIMES is a number");
    let (gate, first_seen) = history::gates();
    let openai = ProviderProfile::own_namespace("openai");
    let target = Target::provider(&openai);
    let profiled = ProviderProfile::own_namespace("openai").with_item_profile(Some(
        ItemProfile::built_in("openai").expect("the built-in profile"),
    ));
    let profiled_target = Target::provider(&profiled);
    // The same bodies as the criterion benchmark, checked once before counting begins so the
    // schemas are compiled and the passes remembered.
    let body = history::bench_body(size);
    gate.check(&body, &target).expect("the body reads");
    first_seen.check(&body, &target).expect("the body reads");
    gate.check(&body, &profiled_target).expect("the body reads");
    let previous = history::kept_previous_turn(&gate, &profiled_target, &body);
    let offline_target = Target::provider(&profiled).offline();
    let (stored, not_stored) = (history::recorded(&body, false), history::recorded(&body, true));
    let stored_target = Target::provider(&profiled).with_provenance(&stored);
    let not_stored_target = Target::provider(&profiled).with_provenance(&not_stored);
    let found = |target: &Target<'_>| {
        let verdict = gate.check(&body, target).expect("the body reads");
        let not_stored = |v: &&replaygate::gate::Violation| v.reason == Reason::StateNotStored;
        verdict.violations.iter().filter(not_stored).count()
    };
    let cut = [&offline_target, &stored_target, &not_stored_target].map(found);
    assert!(cut[0] > 0 && cut[1] == 0 && cut[2] == cut[0], "{cut:?}");
    for _ in 0..times {
        match case.as_str() {
            "floor" => serde_json::from_slice::<IgnoredAny>(black_box(&body))
                .map(drop)
                .unwrap(),
            "reader" => {
                let text = simdutf8::basic::from_utf8(black_box(&body)).unwrap();
                let _ = black_box(replaygate::json::Reader::read::<IgnoredAny>(text).unwrap());
            }
            "parse" => drop(black_box(parse(black_box(&body)).unwrap().items().len())),
            "gate" => drop(black_box(gate.check(black_box(&body), &target).unwrap())),
            "item_profile" => drop(black_box(gate.check(black_box(&body), &profiled_target).unwrap())),
            "first_seen" => drop(black_box(first_seen.check(black_box(&body), &target).unwrap())),
            "next_turn" => drop(black_box(history::judge_next_turn(
                &gate,
                &profiled_target,
                black_box(&body),
                &previous,
            ))),
            "offline" => drop(black_box(gate.check(black_box(&body), &offline_target).unwrap())),
            "ledger_stored" => drop(black_box(gate.check(black_box(&body), &stored_target).unwrap())),
            "ledger_not_stored" => drop(black_box(
                gate.check(black_box(&body), &not_stored_target).unwrap(),
            )),
            other => panic!("unknown case {other}"),
        }
    }
}
