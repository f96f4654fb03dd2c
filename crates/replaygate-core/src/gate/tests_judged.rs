//! Incremental judging against the full check (docs/incremental-judging.md): for every body of
//! the real-client corpus and of generated sessions, cut at every item, the body judged after
//! its judged prefix gets the full check's verdict, or no verdict (and the caller judges it
//! whole); and the ledger query told from the new items is the whole body's.

use proptest::prelude::*;

use super::rules::tests_corpus::corpus;
use super::{
    judged_after_prefixes_as_whole, recorded_as_sent as recorded, ItemProfile, ItemsAt, Policy, Provenance,
    ProviderProfile,
};

/// How many cuts were judged after their prefix.
#[derive(Debug, Default)]
struct Outcome {
    incremental: usize,
}

fn agree(body: &str, provider: &ProviderProfile, facts: Option<&Provenance>, outcome: &mut Outcome) {
    agree_as_facts_change(body, provider, facts, facts, outcome)
}

fn agree_as_facts_change(
    body: &str,
    provider: &ProviderProfile,
    earlier_facts: Option<&Provenance>,
    facts: Option<&Provenance>,
    outcome: &mut Outcome,
) {
    outcome.incremental +=
        judged_after_prefixes_as_whole(body, provider, &Policy::default(), earlier_facts, facts);
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

/// Found by the `judged_prefix` fuzz target: a reasoning item whose id is too short to name one
/// item (8 bytes), recorded as the provider's then and another's now. The ledger is never asked
/// about such an id and indexes none, so what it is taken to know has none either; with one,
/// the whole check found a `foreign_item_reference` that no query would have fetched.
#[test]
fn ids_too_short_to_name_one_item_are_known_to_no_ledger() {
    let body = r#"{"model":"gpt-5","input":[{"role":"user","content":"weather?"},{"type":"reasoning","id":"FYhMr36L","summary":[]},{"role":"assistant","content":[{"type":"output_text","text":"done"}],"id":"msg_250adea4b65abf0bba5e9de4d92e441067df24a781e9825ddd"},{"role":"user","content":"And in Tokyo?"}],"store":false}"#;
    let own = recorded(body, "openai");
    let foreign = recorded(body, "elsewhere");
    assert!(!foreign.items.contains_key("FYhMr36L"));
    for provider in providers() {
        let mut outcome = Outcome::default();
        agree_as_facts_change(body, &provider, Some(&own), Some(&foreign), &mut outcome);
    }
}

/// `rounds` rounds of a user message, a reasoning item with its blob and an answered call with
/// valid arguments, each followed by `then`.
fn clean_rounds(rounds: usize, then: &[Step]) -> Vec<Step> {
    let round = [
        Step::User,
        Step::Reasoning { blob: true },
        Step::Call {
            args_ok: true,
            answered: true,
        },
    ];
    (0..rounds)
        .flat_map(|_| round.iter().chain(then).cloned())
        .collect()
}

#[test]
fn what_the_ledger_says_now_of_the_old_items_counts_not_what_it_said_then() {
    let steps: Vec<Step> = clean_rounds(6, &[])
        .into_iter()
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
    let steps = clean_rounds(12, &[Step::Assistant]);
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
