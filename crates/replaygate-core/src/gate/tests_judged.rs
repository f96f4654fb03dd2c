//! Incremental judging against the full check (docs/incremental-judging.md): for every body of
//! the real-client corpus and of generated sessions, cut at every item, the body judged after
//! its judged prefix gets the full check's verdict, or no verdict (and the caller judges it
//! whole); and the ledger query told from the new items is the whole body's.

use proptest::prelude::*;
use serde_json::Value;

use super::provenance::{item_record_from_value, link_reasoning, Owner, StoredItem};
use super::rules::tests_corpus::corpus;
use super::{
    parse_after_known, parse_noting_spans, Gate, InputScan, ItemProfile, ItemsAt, LedgerQuery, Policy,
    Provenance, ProviderProfile, Target, Verdict,
};

/// The body with only the first `count` of its items (the scan's `items`), as a turn sent
/// before it would have been.
fn cut(body: &str, scan: &InputScan, spans: &[std::ops::Range<usize>], count: usize) -> String {
    let end = spans[scan.items() - 1].end;
    format!("{}{}", &body[..spans[count - 1].end], &body[end..])
}

/// What the ledger would know of `body`'s items had `owner` produced every one with an id (a
/// reasoning or compaction item also by its blob), as it sent them.
fn recorded(body: &str, owner: &str) -> Provenance {
    let value: Value = serde_json::from_str(body).unwrap();
    let mut provenance = Provenance::default();
    // As one answer's output: each item after a reasoning item was produced right after it.
    let mut records: Vec<_> = value["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(item_record_from_value)
        .collect();
    link_reasoning(&mut records);
    for record in records {
        let stored = StoredItem {
            response_id: "resp_recorded".into(),
            owner: Owner {
                provider: owner.into(),
                model: value["model"].as_str().map(str::to_owned),
            },
            record,
            expires_unix: u64::MAX,
            team: None,
        };
        if stored.record.has_encrypted_content {
            provenance.encrypted.insert(stored.record.digest, stored.clone());
        }
        if let Some(id) = stored.record.id.clone() {
            provenance.items.insert(id, stored);
        }
    }
    provenance
}

/// The outcome of one body cut at every item: how many cuts were judged after their prefix.
#[derive(Debug, Default)]
struct Outcome {
    incremental: usize,
}

/// Judges `body` whole, and after each of its prefixes that judged clean, for `provider`
/// (with the ledger's `facts`, when given), and checks that the two agree.
fn agree(body: &str, provider: &ProviderProfile, facts: Option<&Provenance>, outcome: &mut Outcome) {
    agree_as_facts_change(body, provider, facts, facts, outcome)
}

/// [`agree`], the earlier bodies judged with what the ledger said then (`earlier_facts`).
fn agree_as_facts_change(
    body: &str,
    provider: &ProviderProfile,
    earlier_facts: Option<&Provenance>,
    facts: Option<&Provenance>,
    outcome: &mut Outcome,
) {
    let gate = Gate::default();
    let policy = Policy::default();
    let mut target = Target::new(provider, &policy);
    if let Some(facts) = facts {
        target = target.with_provenance(facts);
    }
    let mut earlier_target = Target::new(provider, &policy);
    if let Some(facts) = earlier_facts {
        earlier_target = earlier_target.with_provenance(facts);
    }
    let Some(scan) = InputScan::of(body.as_bytes(), 1) else {
        return;
    };
    let Ok(whole) = parse_noting_spans(body.as_bytes(), ItemsAt::Input) else {
        return;
    };
    let spans = whole.item_spans().unwrap().to_vec();
    assert_eq!(spans.len(), scan.items(), "the scan finds the reader's items");
    let whole_query = facts.map(|_| LedgerQuery::of(&whole));
    let Ok(expected) = gate.judge(&whole, &target) else {
        return;
    };
    let (_, kept_whole) = gate.judge_keeping(&whole, &target, whole_query.as_ref()).unwrap();
    for count in 2..scan.items() {
        let earlier = cut(body, &scan, &spans, count);
        let earlier_scan = InputScan::of(earlier.as_bytes(), 1).unwrap();
        let earlier_request = parse_noting_spans(earlier.as_bytes(), ItemsAt::Input).unwrap();
        let earlier_query = facts.map(|_| LedgerQuery::of(&earlier_request));
        let Ok((_, Some(known))) =
            gate.judge_keeping(&earlier_request, &earlier_target, earlier_query.as_ref())
        else {
            continue;
        };
        assert_eq!(known.items(), count);
        let key = scan.prefix_keys().find(|&(n, _)| n == count).map(|(_, key)| key);
        if scan.items() - count <= super::judged::MAX_NEW_ITEMS {
            assert_eq!(
                key,
                Some(earlier_scan.key()),
                "a prefix's key is the earlier body's"
            );
        }
        let after = parse_after_known(body.as_bytes(), ItemsAt::Input, true, scan.known(count)).unwrap();
        assert_eq!(after.known_items(), count);
        let query = match facts {
            Some(_) => match known.query_after(&after) {
                Some(query) => {
                    assert_eq!(
                        Some(&query),
                        whole_query.as_ref(),
                        "the query after the prefix is the body's"
                    );
                    Some(query)
                }
                None => continue,
            },
            None => None,
        };
        let Some((verdict, kept)) = gate.judge_after(&after, &target, &known, query.as_ref()).unwrap() else {
            continue;
        };
        outcome.incremental += 1;
        assert_eq!(summary(&verdict), summary(&expected), "{body}\ncut at {count}");
        assert!(expected.tally.is_empty());
        assert_eq!(
            kept.is_some(),
            kept_whole.is_some(),
            "kept after the prefix as when whole"
        );
        if let (Some(kept), Some(kept_whole)) = (kept, &kept_whole) {
            assert_eq!(kept.items(), kept_whole.items());
        }
    }
}

fn summary(verdict: &Verdict) -> String {
    format!(
        "{:?}",
        (
            &verdict.violations,
            &verdict.tally,
            &verdict.stripped,
            &verdict.repairs,
            &verdict.inserts
        )
    )
}

fn providers() -> Vec<ProviderProfile> {
    vec![
        ProviderProfile::own_namespace("openai"),
        ProviderProfile::own_namespace("openai")
            .with_item_profile(Some(ItemProfile::built_in("openai").unwrap())),
        ProviderProfile::own_namespace("bedrock"),
    ]
}

#[test]
fn every_corpus_body_cut_at_every_item_gets_the_full_checks_verdict() {
    let mut outcome = Outcome::default();
    let mut bodies = 0;
    for (origin, at, body) in corpus() {
        if at != ItemsAt::Input {
            continue;
        }
        bodies += 1;
        for provider in providers() {
            agree(&body, &provider, None, &mut outcome);
            let facts = recorded(&body, provider.name());
            agree(&body, &provider, Some(&facts), &mut outcome);
            let foreign = recorded(&body, "elsewhere");
            agree(&body, &provider, Some(&foreign), &mut outcome);
        }
        let _ = origin;
    }
    assert!(bodies > 10, "the corpus has its bodies");
    // Real clients' histories are mostly clean: most cuts must be judged after their prefix,
    // or incremental judging would not be what the proxy does.
    assert!(outcome.incremental > 100, "{outcome:?}");
}

/// One item of a generated session.
#[derive(Debug, Clone)]
enum Step {
    User,
    Assistant,
    Reasoning {
        blob: bool,
    },
    /// A call and its output, the output `gap` items later (or never, `None`).
    Call {
        args_ok: bool,
        answered: bool,
    },
    /// An output whose call is nowhere.
    StrayOutput,
    /// An item of another provider.
    Namespaced,
    /// An item repeating an earlier item's id.
    RepeatedId,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => Just(Step::User),
        3 => Just(Step::Assistant),
        3 => any::<bool>().prop_map(|blob| Step::Reasoning { blob }),
        8 => (prop::bool::weighted(0.9), prop::bool::weighted(0.9))
            .prop_map(|(args_ok, answered)| Step::Call { args_ok, answered }),
        1 => Just(Step::StrayOutput),
        1 => Just(Step::Namespaced),
        1 => Just(Step::RepeatedId),
    ]
}

/// The body of a session of `steps`, its items with ids long enough to name one item.
fn session(steps: &[Step]) -> String {
    let mut items = Vec::new();
    for (n, step) in steps.iter().enumerate() {
        let id = |prefix: &str| format!("{prefix}_{n:04}0123456789abcdef");
        match step {
            Step::User => items.push(format!(r#"{{"role":"user","content":"turn {n}"}}"#)),
            Step::Assistant => items.push(format!(
                r#"{{"type":"message","id":"{}","role":"assistant","status":"completed","content":[{{"type":"output_text","text":"ok {n}","annotations":[]}}]}}"#,
                id("msg")
            )),
            Step::Reasoning { blob } => items.push(match blob {
                true => format!(
                    r#"{{"type":"reasoning","id":"{}","summary":[],"encrypted_content":"gAAA{n}"}}"#,
                    id("rs")
                ),
                false => format!(r#"{{"type":"reasoning","id":"{}","summary":[]}}"#, id("rs")),
            }),
            Step::Call { args_ok, answered } => {
                let arguments = match args_ok {
                    true => format!(r#""{{\"path\":\"f{n}.rs\"}}""#),
                    false => r#"{"path":7}"#.to_owned(),
                };
                items.push(format!(
                    r#"{{"type":"function_call","id":"{}","call_id":"call_{n}","name":"read_file","arguments":{arguments},"status":"completed"}}"#,
                    id("fc")
                ));
                if *answered {
                    items.push(format!(
                        r#"{{"type":"function_call_output","call_id":"call_{n}","output":"contents {n}"}}"#
                    ));
                }
            }
            Step::StrayOutput => items.push(format!(
                r#"{{"type":"function_call_output","call_id":"nobody_{n}","output":"x"}}"#
            )),
            Step::Namespaced => items.push(format!(r#"{{"type":"openai:web_search_call","id":"{}"}}"#, id("ws"))),
            Step::RepeatedId => {
                if let Some(earlier) = items.iter().find(|item: &&String| item.contains(r#""id":"msg_"#)).cloned() {
                    items.push(earlier.replace("ok ", "changed "));
                }
            }
        }
    }
    format!(
        r#"{{"model":"gpt-5","tools":[{{"type":"function","name":"read_file","parameters":{{"type":"object","properties":{{"path":{{"type":"string"}}}},"required":["path"]}}}}],"input":[{}]}}"#,
        items.join(",")
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn generated_sessions_cut_at_every_item_get_the_full_checks_verdict(
        steps in prop::collection::vec(step(), 2..24),
    ) {
        let body = session(&steps);
        let mut outcome = Outcome::default();
        for provider in providers() {
            agree(&body, &provider, None, &mut outcome);
            let facts = recorded(&body, provider.name());
            agree(&body, &provider, Some(&facts), &mut outcome);
        }
    }
}

#[test]
fn what_the_ledger_says_now_of_the_old_items_counts_not_what_it_said_then() {
    let steps: Vec<Step> = (0..6)
        .flat_map(|_| {
            [
                Step::User,
                Step::Reasoning { blob: true },
                Step::Call {
                    args_ok: true,
                    answered: true,
                },
            ]
        })
        .chain([Step::User, Step::Assistant])
        .collect();
    let body = session(&steps);
    for provider in providers() {
        let own = recorded(&body, provider.name());
        let foreign = recorded(&body, "elsewhere");
        let empty = Provenance::default();
        // Recorded as its own then, as another provider's now (the whole body refused), and the
        // other way round (allowed): the answer is the full check's either way.
        for (then, now) in [
            (&own, &foreign),
            (&foreign, &own),
            (&empty, &foreign),
            (&own, &empty),
        ] {
            let mut outcome = Outcome::default();
            agree_as_facts_change(&body, &provider, Some(then), Some(now), &mut outcome);
        }
    }
}

#[test]
fn a_clean_growing_session_is_judged_after_its_prefix_at_every_turn() {
    let steps: Vec<Step> = (0..12)
        .flat_map(|_| {
            [
                Step::User,
                Step::Reasoning { blob: true },
                Step::Call {
                    args_ok: true,
                    answered: true,
                },
                Step::Assistant,
            ]
        })
        .collect();
    let body = session(&steps);
    for provider in providers() {
        let mut outcome = Outcome::default();
        agree(&body, &provider, None, &mut outcome);
        let facts = recorded(&body, provider.name());
        agree(&body, &provider, Some(&facts), &mut outcome);
        // Every cut but those that end on a reasoning item or between a call and its output.
        assert!(outcome.incremental >= 40, "{}: {outcome:?}", provider.name());
    }
}
