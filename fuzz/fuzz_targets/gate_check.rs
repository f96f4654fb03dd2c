//! The gate on arbitrary bytes: the first byte picks the target provider and the policy, the
//! rest is the body.
//!
//! Beyond "never panics" (and, through libFuzzer's `-timeout` and `-rss_limit_mb`, "never
//! takes long or much memory"): a body the gate can read gets a verdict whose violations are in
//! input order, one per item at most (without an item profile: with one, an item may have
//! several shape findings), each pointing into `input` or `tools`, each with the policy's
//! action for its reason (or `reject` where a `repair` cannot cure it), counted by action; the request is allowed exactly when no violation
//! is a `reject`. What an allowed verdict strips or repairs is cut out of the body as the proxy
//! would: the result is valid JSON made only of the body's bytes, and reads again. Judging the
//! same body again with the cache warm gives the same verdict, and a body whose `input` (or
//! first item's `type`) is renamed to a misspelling of it is refused as invalid input. Built
//! with debug assertions (`cargo fuzz run -a`), the item profile's fast path is also held to
//! its full check on every item it passes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use replaygate::gate::{
    parse, strip, Action, BodyError, Gate, ItemProfile, Policy, ProviderProfile, Reason, SchemaLimits,
    Target, Verdict,
};
use serde_json::Value;

/// The policy the selector byte's bits above the provider choose (selector / 4).
fn policy(bits: u8) -> Policy {
    let mut policy = Policy::default();
    policy.max_listed = 1_000_000;
    if bits & 1 != 0 {
        policy.set_action(Reason::UnknownTool, Action::Reject);
    }
    if bits & 2 != 0 {
        for reason in [Reason::Status, Reason::ArgumentsSchema, Reason::CallIdMismatch] {
            policy.set_action(reason, Action::Monitor);
        }
    }
    if bits & 4 != 0 {
        policy.require_status = true;
    }
    if bits & 8 != 0 {
        policy.max_listed = 1;
    }
    if bits & 16 != 0 {
        // The proxy's first, inline try.
        policy.work_budget = 20_000;
    }
    policy
}

fn check_verdict(verdict: &Verdict, items: usize, policy: &Policy, profiled: bool) {
    let mut previous: Option<usize> = None;
    for violation in &verdict.violations {
        let Some(index) = violation.index else {
            // Findings about no item (declared tools, the previous response) come first.
            assert!(previous.is_none(), "a finding about no item after an item's");
            assert!(
                violation.param.starts_with("tools[") || violation.param == "previous_response_id",
                "param {} for no item",
                violation.param
            );
            continue;
        };
        assert!(index < items, "violation for a missing item");
        assert!(
            previous < Some(index) || (profiled && previous == Some(index)),
            "violations out of order or repeated"
        );
        previous = Some(index);
        let own = format!("input[{index}]");
        assert!(
            violation.param.starts_with(&own) || violation.param.starts_with("tools["),
            "param {} for item {index}",
            violation.param
        );
        // `repair` on a finding it cannot cure (a repeat that differs from the first, a missing
        // reasoning item whose bytes were not kept) acts as `reject` (docs/reasons.md).
        let action = policy.action(violation.reason);
        assert!(
            violation.action == action || (action == Action::Repair && violation.action == Action::Reject),
            "action of {}: {:?} where the policy says {action:?}",
            violation.reason,
            violation.action
        );
    }
    let listed = |action| verdict.with_action(action).count();
    let (rejects, monitors) = (listed(Action::Reject), listed(Action::Monitor));
    assert_eq!(
        verdict.is_allowed(),
        verdict.rejected == 0,
        "allowed despite rejects"
    );
    assert_eq!(rejects, verdict.rejected.min(policy.max_listed), "listed rejects");
    assert_eq!(
        monitors,
        verdict.monitored.min(policy.max_listed),
        "listed monitors"
    );
    if profiled {
        return;
    }
    assert!(
        verdict.rejected + verdict.monitored <= items,
        "more violations than items"
    );
    if policy.max_listed >= items {
        assert_eq!(verdict.is_allowed(), rejects == 0);
        assert_eq!(verdict.violations.len(), verdict.rejected + verdict.monitored);
    }
}

/// The body as the proxy would forward it after the verdict's strips and repairs: valid JSON,
/// the original's bytes in order with some left out, and a body the gate reads again.
fn check_cut(body: &[u8], request: &replaygate::gate::ParsedRequest<'_>, verdict: &Verdict) {
    let Some(cut) = strip::strip(body, request, verdict).expect("a verdict's own body cuts") else {
        return;
    };
    if let Err(error) = serde_json::from_slice::<serde::de::IgnoredAny>(&cut.body) {
        panic!(
            "the cut left invalid JSON ({error}): {}",
            String::from_utf8_lossy(&cut.body)
        );
    }
    let mut original = body.iter();
    assert!(
        cut.body.iter().all(|b| original.any(|o| o == b)),
        "the cut added or moved bytes"
    );
    assert!(parse(&cut.body).is_ok(), "the cut body no longer reads");
}

/// `body` with its top-level `input`, or its first item's `type`, renamed to `misspelling`;
/// `None` when the body has no such member or already has a member of that spelling.
fn misspelled(body: &[u8], selector: u8) -> Option<Vec<u8>> {
    const TOP: [&str; 3] = ["INPUT", "Input", "input\u{0}"];
    const ITEM: [&str; 3] = ["Type", "type\u{0}", "TYPE"];
    let mut value: Value = serde_json::from_slice(body).ok()?;
    let body = value.as_object_mut()?;
    let rename = |object: &mut serde_json::Map<String, Value>, from: &str, to: &str| {
        if object.contains_key(to) {
            return None;
        }
        let member = object.remove(from)?;
        object.insert(to.to_owned(), member);
        Some(())
    };
    let which = usize::from(selector) % 3;
    if selector & 0x80 == 0 {
        rename(body, "input", TOP[which])?;
    } else {
        let item = body
            .get_mut("input")?
            .as_array_mut()?
            .first_mut()?
            .as_object_mut()?;
        rename(item, "type", ITEM[which])?;
    }
    serde_json::to_vec(&value).ok()
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let profile = match selector % 4 {
        0 => ProviderProfile::own_namespace("bedrock"),
        1 => ProviderProfile::new("openai", ["openai"]),
        2 => ProviderProfile::new("any", ["openai", "acme", "bedrock"]),
        _ => ProviderProfile::own_namespace("openai")
            .with_item_profile(Some(ItemProfile::built_in("openai").expect("the built-in profile"))),
    };
    let profiled = profile.item_profile().is_some();
    let policy = policy(selector / 4);
    let target = Target::new(&profile, &policy);
    // A fresh gate per input, so a finding never depends on an earlier input's cached schema;
    // a small cache, so eviction runs too.
    let gate = Gate::new(SchemaLimits {
        cache_bytes: 64 << 10,
        max_schema_bytes: 16 << 10,
        passed_calls_bytes: 16 << 10,
    });
    let checked = gate.check(body, &target);
    let parsed = parse(body);
    match &checked {
        Err(BodyError::TooCostly(exceeded)) => {
            assert!(parsed.is_ok(), "too costly, yet unreadable");
            assert_eq!(exceeded.budget, policy.work_budget);
            return;
        }
        Err(error) => {
            assert_eq!(parsed.as_ref().err(), Some(error), "check and parse disagree");
            return;
        }
        Ok(_) => assert!(parsed.is_ok(), "check and parse disagree"),
    }
    let verdict = checked.unwrap();
    let request = parsed.unwrap();
    check_verdict(&verdict, request.items().len(), &policy, profiled);
    if verdict.is_allowed() {
        check_cut(body, &request, &verdict);
    }
    // Calls remembered as passed, and schemas compiled once, change nothing.
    let again = gate.judge(&request, &target).expect("less work the second time");
    assert_eq!(again, verdict, "a warm cache changed the verdict");
    if let Some(renamed) = misspelled(body, selector) {
        match parse(&renamed) {
            Err(BodyError::InvalidInput { .. }) => {}
            other => panic!(
                "a misspelled gated name was not refused: {other:?} for {}",
                String::from_utf8_lossy(&renamed)
            ),
        }
    }
});
