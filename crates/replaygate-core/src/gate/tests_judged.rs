//! Incremental judging against the full check (docs/incremental-judging.md): for every body of
//! the real-client corpus and of generated sessions, cut at every item, the body judged after
//! its judged prefix gets the full check's verdict, or no verdict (and the caller judges it
//! whole); and the ledger query told from the new items is the whole body's.

use proptest::prelude::*;

use super::rules::tests_corpus::corpus;
use super::{
    judged_after_prefixes_as_whole, recorded_as_sent as recorded, recorded_for, CheckedFor, ItemProfile,
    ItemsAt, LedgerChange, Policy, Provenance, ProviderProfile, StateAccess,
};
use crate::gate::provenance::StoredItem;

/// How many cuts were judged after their prefix.
#[derive(Debug, Default)]
struct Outcome {
    incremental: usize,
}

fn agree(body: &str, provider: &ProviderProfile, facts: Option<&Provenance>, outcome: &mut Outcome) {
    let unchanged = facts.map(|then| LedgerChange {
        then,
        written: &NOTHING,
        lost: false,
        now_unix: 1,
    });
    agree_as_ledger_changes(body, provider, unchanged.as_ref(), outcome)
}

static NOTHING: std::sync::LazyLock<Provenance> = std::sync::LazyLock::new(Provenance::default);

fn agree_as_ledger_changes(
    body: &str,
    provider: &ProviderProfile,
    ledger: Option<&LedgerChange<'_>>,
    outcome: &mut Outcome,
) {
    let policy = Policy::default();
    outcome.incremental +=
        judged_after_prefixes_as_whole(body, &CheckedFor::provider(provider, &policy), ledger);
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
    /// A reasoning item by an id too short to name one item (a provider that numbers them per
    /// response).
    ShortReasoning,
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
        1 => Just(Step::ShortReasoning),
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
            Step::ShortReasoning => items.push(format!(r#"{{"type":"reasoning","id":"rs_{n}","summary":[]}}"#)),
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
        let change = LedgerChange {
            then: &own,
            written: &foreign,
            lost: true,
            now_unix: 1,
        };
        agree_as_ledger_changes(body, &provider, Some(&change), &mut outcome);
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
        let expiring = recorded_for(&body, provider.name(), None, 5);
        let empty = Provenance::default();
        // Recorded as another provider's since (unknown then), lost and recorded again as
        // another's (the whole body refused), expired since, and lost: the answer is the full
        // check's every time.
        for (then, written, lost, now_unix) in [
            (&empty, &foreign, false, 1),
            (&own, &foreign, true, 1),
            (&foreign, &own, true, 1),
            (&expiring, &empty, false, 5),
            (&expiring, &foreign, false, 9),
            (&own, &empty, true, 1),
        ] {
            let mut outcome = Outcome::default();
            let change = LedgerChange {
                then,
                written,
                lost,
                now_unix,
            };
            agree_as_ledger_changes(&body, &provider, Some(&change), &mut outcome);
        }
    }
}

/// What becomes of one record of a generated session's ledger.
#[derive(Debug, Clone)]
struct Fate {
    /// 0: never recorded, 1: recorded since the earlier turns, else recorded then.
    when: u8,
    /// Whose team: none, the asker's, one that granted it its state, a stranger.
    team: u8,
    /// Produced by the provider the body goes to, or another.
    own_provider: bool,
    /// When it expires: at 3, at 6, or never.
    expires: u8,
}

fn fate() -> impl Strategy<Value = Fate> {
    (0u8..4, 0u8..4, prop::bool::weighted(0.8), 0u8..3).prop_map(|(when, team, own_provider, expires)| Fate {
        when,
        team,
        own_provider,
        expires,
    })
}

/// `body`'s records, each with its fate (in key order, the fates taken in turn): what the
/// ledger held then, and what was written since.
fn fated(body: &str, provider: &str, fates: &[Fate]) -> (Provenance, Provenance) {
    let all = recorded_for(body, provider, Some("asker"), u64::MAX);
    let (mut then, mut written) = (Provenance::default(), Provenance::default());
    let mut turn = 0;
    let mut next_fate = || {
        turn += 1;
        fates[turn % fates.len()].clone()
    };
    let shape = |stored: &StoredItem, fate: &Fate| StoredItem {
        owner: crate::gate::provenance::Owner {
            provider: match fate.own_provider {
                true => provider.to_owned(),
                false => "elsewhere".to_owned(),
            },
            model: stored.owner.model.clone(),
        },
        team: [None, Some("asker"), Some("granter"), Some("stranger")][fate.team as usize].map(str::to_owned),
        expires_unix: [3, 6, u64::MAX][fate.expires as usize],
        ..stored.clone()
    };
    let mut ids: Vec<_> = all.items.iter().collect();
    ids.sort_by(|a, b| a.0.cmp(b.0));
    for (id, stored) in ids {
        let fate = next_fate();
        let into = match fate.when {
            0 => continue,
            1 => &mut written,
            _ => &mut then,
        };
        into.items.insert(id.clone(), shape(stored, &fate));
    }
    let mut digests: Vec<_> = all.encrypted.iter().collect();
    digests.sort_by(|a, b| a.0.cmp(b.0));
    for (digest, stored) in digests {
        let fate = next_fate();
        let into = match fate.when {
            0 => continue,
            1 => &mut written,
            _ => &mut then,
        };
        into.encrypted.insert(*digest, shape(stored, &fate));
    }
    let mut short: Vec<_> = all.short_ids.keys().collect();
    short.sort();
    for id in short {
        let fate = next_fate();
        let into = match fate.when {
            0 => continue,
            1 => &mut written,
            _ => &mut then,
        };
        into.short_ids
            .insert(id.clone(), [3, 6, u64::MAX][fate.expires as usize]);
    }
    (then, written)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Random sessions, random records (whose, which provider's, when written, when they
    /// expire, lost or not) and grants, with and without `unknown_state`: the answer after
    /// every prefix is the full check's.
    #[test]
    fn generated_sessions_with_random_records_expiries_and_grants_get_the_full_checks_verdict(
        steps in prop::collection::vec(step(), 2..20),
        fates in prop::collection::vec(fate(), 1..32),
        lost in prop::bool::weighted(0.2),
        now_unix in 1u64..8,
        granted in any::<bool>(),
        deny_unknown_state in any::<bool>(),
        provider in 0usize..3,
    ) {
        let body = session(&steps);
        let provider = &providers()[provider];
        let (then, written) = fated(&body, provider.name(), &fates);
        let access = StateAccess::new("asker", granted.then(|| "granter".to_owned()));
        let policy = Policy::default();
        let asker = CheckedFor {
            provider,
            policy: &policy,
            access: Some(&access),
            deny_unknown_state,
        };
        let change = LedgerChange { then: &then, written: &written, lost, now_unix };
        judged_after_prefixes_as_whole(&body, &asker, Some(&change));
        // Without teams, the same records.
        judged_after_prefixes_as_whole(&body, &CheckedFor::provider(provider, &policy), Some(&change));
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
