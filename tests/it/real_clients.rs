//! Gate version 2 against valid traffic from real clients, and the version-2 verdict vectors.
//!
//! `fixtures/corpus/` holds request bodies that the OpenAI Python and Node SDKs, the OpenAI
//! Agents SDK and the Vercel AI SDK sent in tool loops, each accepted by a provider that
//! enforces OpenAI's pairing rules (see its README). Refusing any of them would be refusing
//! valid traffic, the worst bug a gateway can have.

use replaygate::config::Config;
use replaygate::gate::request::parse_with_serde_json;
use replaygate::gate::{parse_with, Action, Gate, ItemsAt, Policy, ProviderProfile, Target, Verdict};
use serde_json::Value;

/// One recorded request: `(file#line, path, body)`.
fn corpus() -> Vec<(String, String, Value)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/corpus");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    let mut bodies = Vec::new();
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        for (n, line) in std::fs::read_to_string(&file).unwrap().lines().enumerate() {
            let record: Value = serde_json::from_str(line).unwrap();
            if record["body"].is_object() {
                let path = record["path"].as_str().unwrap().to_owned();
                bodies.push((format!("{name}#{}", n + 1), path, record["body"].clone()));
            }
        }
    }
    bodies
}

/// Where a recorded path keeps its items, if it is gated.
fn items_at(path: &str) -> Option<ItemsAt> {
    let path = path.trim_end_matches('/');
    if path.ends_with("/responses") || path.ends_with("/responses/compact") {
        Some(ItemsAt::Input)
    } else if path.ends_with("/conversations") {
        Some(ItemsAt::Items)
    } else if path.ends_with("/items") {
        Some(ItemsAt::AddedItems)
    } else {
        None
    }
}

fn judge(gate: &Gate, at: ItemsAt, body: &Value, target: &Target<'_>) -> Verdict {
    let bytes = serde_json::to_vec(body).unwrap();
    let request = parse_with(&bytes, at).expect("a recorded body reads");
    gate.judge(&request, target).expect("within the work budget")
}

#[test]
fn every_real_client_body_passes_without_a_violation_for_openai_and_bedrock() {
    let corpus = corpus();
    assert!(corpus.len() >= 100, "the corpus has {} bodies", corpus.len());
    let gate = Gate::default();
    let mut judged = 0;
    for provider in ["openai", "bedrock"] {
        let profile = ProviderProfile::own_namespace(provider);
        for (origin, path, body) in &corpus {
            let Some(at) = items_at(path) else { continue };
            let verdict = judge(&gate, at, body, &Target::provider(&profile));
            assert!(
                verdict.violations.is_empty(),
                "{origin} ({path}) for {provider}: {:#?}",
                verdict.violations
            );
            judged += 1;
        }
    }
    assert!(judged >= 200, "{judged} bodies judged");
}

#[test]
fn every_real_client_body_passes_the_repo_configuration() {
    let config = Config::from_toml(include_str!("../../proxy.toml")).unwrap();
    let policy = config.gate.policy();
    let gate = Gate::new(config.gate.schema_limits());
    for (name, provider) in &config.providers {
        // With the item profile the repo sets (openai): only the Node stream helper's
        // parsed_arguments are repaired, and a repair is allowed.
        let profile = ProviderProfile::new(name, provider.namespaces().iter().cloned())
            .with_item_profile(provider.item_profile.clone());
        let target = Target::new(&profile, &policy);
        for (origin, path, body) in corpus() {
            let Some(at) = items_at(&path) else { continue };
            let verdict = judge(&gate, at, &body, &target);
            assert!(
                verdict.is_allowed(),
                "{origin} for {name}: {:#?}",
                verdict.violations
            );
        }
    }
}

/// `state_not_stored` offline (`replaygate check`, docs/reasons.md#state_not_stored) against
/// every recorded body with the status the provider gave it: no body a provider answered 200 is
/// found, and the one it answered 404 for a reasoning item of a `store: false` response sent by
/// id alone (the Agents SDK's `to_input_list()` on a GPT-5 model) is, at that item.
#[test]
fn state_not_stored_offline_finds_the_recorded_404_and_no_body_a_provider_took() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/corpus");
    let gate = Gate::default();
    let profile = ProviderProfile::own_namespace("openai")
        .with_item_profile(Some(replaygate::gate::ItemProfile::built_in("openai").unwrap()));
    let target = Target::provider(&profile).offline();
    let mut found = Vec::new();
    let mut judged = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let file = entry.unwrap().path();
        if file.extension().is_none_or(|x| x != "jsonl") {
            continue;
        }
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        for (n, line) in std::fs::read_to_string(&file).unwrap().lines().enumerate() {
            let record: Value = serde_json::from_str(line).unwrap();
            let Some(at) = record["path"].as_str().and_then(items_at) else {
                continue;
            };
            if !record["body"].is_object() {
                continue;
            }
            let verdict = judge(&gate, at, &record["body"], &target);
            judged += 1;
            let cut: Vec<Option<usize>> = verdict
                .violations
                .iter()
                .filter(|v| v.reason == replaygate::gate::Reason::StateNotStored)
                .map(|v| v.index)
                .collect();
            let status = record["status"].as_u64();
            if status == Some(200) {
                assert!(cut.is_empty(), "{name}#{}: {cut:?}", n + 1);
            }
            if !cut.is_empty() {
                found.push((format!("{name}#{}", n + 1), status, cut));
            }
        }
    }
    assert!(judged >= 100, "{judged} bodies judged");
    assert_eq!(
        found,
        [(
            "openai-agents-to-input-list-gpt5-store-false.jsonl#2".to_owned(),
            Some(404),
            vec![Some(1)]
        )]
    );
}

#[test]
fn the_strict_status_reading_still_refuses_what_version_1_refused() {
    // The Vercel AI SDK replays calls without `status`: refused only under require_status.
    let mut policy = Policy::default();
    policy.require_status = true;
    let openai = ProviderProfile::own_namespace("openai");
    let gate = Gate::default();
    let (origin, _, body) = corpus()
        .into_iter()
        .find(|(origin, _, _)| origin.starts_with("vercel-ai-generate-text.jsonl#2"))
        .expect("the Vercel AI SDK's second turn");
    let verdict = judge(&gate, ItemsAt::Input, &body, &Target::new(&openai, &policy));
    assert!(!verdict.is_allowed(), "{origin}");
    assert!(verdict.violations.iter().all(|v| v.reason.as_str() == "status"));
}

#[test]
fn every_real_client_body_and_vector_reads_as_serde_json_reads_it() {
    let mut bodies: Vec<(String, ItemsAt, Vec<u8>)> = corpus()
        .into_iter()
        .filter_map(|(origin, path, body)| {
            let at = items_at(&path)?;
            Some((origin.clone(), at, serde_json::to_vec_pretty(&body).unwrap()))
        })
        .collect();
    for (n, case) in vectors().iter().enumerate() {
        bodies.push((
            format!("vector {n}"),
            ItemsAt::Input,
            serde_json::to_vec(&case["body"]).unwrap(),
        ));
    }
    assert!(bodies.len() >= 100);
    for (origin, at, bytes) in &bodies {
        let ours = parse_with(bytes, *at).expect("a recorded body reads");
        let theirs = parse_with_serde_json(bytes, *at).expect("a recorded body reads");
        assert_eq!(format!("{ours:?}"), format!("{theirs:?}"), "{origin}");
    }
}

fn vectors() -> Vec<Value> {
    let doc: Value = serde_json::from_str(include_str!("../fixtures/v2-vectors.json")).unwrap();
    doc["cases"].as_array().unwrap().clone()
}

#[test]
fn every_version_2_vector_gets_its_verdict() {
    let cases = vectors();
    assert_eq!(cases.len(), 10);
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let provider = case["provider"].as_str().unwrap();
        let (profile, policy, gate) = match case["config"].as_str() {
            Some(toml) => {
                let config = Config::from_toml(toml).unwrap();
                let namespaces = config.providers[provider].namespaces().to_vec();
                (
                    ProviderProfile::new(provider, namespaces),
                    config.gate.policy(),
                    Gate::new(config.gate.schema_limits()),
                )
            }
            None => (
                ProviderProfile::own_namespace(provider),
                Policy::default(),
                Gate::default(),
            ),
        };
        let verdict = judge(
            &gate,
            ItemsAt::Input,
            &case["body"],
            &Target::new(&profile, &policy),
        );
        let expect = &case["expect"];
        assert_eq!(
            verdict.is_allowed(),
            expect["allowed"].as_bool().unwrap(),
            "{name}: {verdict:#?}"
        );
        let got: Vec<(u64, &str, &str)> = verdict
            .violations
            .iter()
            .map(|v| (v.index.unwrap() as u64, v.reason.as_str(), v.action.as_str()))
            .collect();
        let want: Vec<(u64, &str, &str)> = expect["violations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                (
                    v["index"].as_u64().unwrap(),
                    v["reason"].as_str().unwrap(),
                    v["action"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(got, want, "{name}");
        let monitored = verdict.with_action(Action::Monitor).count();
        assert_eq!(verdict.monitored, monitored, "{name}");
    }
}
