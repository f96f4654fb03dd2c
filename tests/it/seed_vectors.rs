//! The seed article's request bodies, each with the verdict replaygate must give.

use replaygate::gate::{Gate, ProviderProfile, Target, Verdict};
use serde_json::Value;

fn cases() -> Vec<Value> {
    let text = include_str!("../fixtures/seed-vectors.json");
    let doc: Value = serde_json::from_str(text).expect("fixture parses");
    doc["cases"].as_array().expect("cases").clone()
}

/// The seed case called `name`.
fn case(name: &str) -> Value {
    cases()
        .into_iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no seed case {name}"))
}

fn judge(gate: &Gate, case: &Value) -> Verdict {
    let provider = ProviderProfile::own_namespace(case["provider"].as_str().unwrap());
    let body = serde_json::to_vec(&case["body"]).unwrap();
    gate.check(&body, &Target::provider(&provider))
        .expect("body reads")
}

#[test]
fn every_seed_vector_gets_its_verdict() {
    let gate = Gate::default();
    let cases = cases();
    assert_eq!(cases.len(), 10, "the fixture holds the ten seed cases");
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let verdict = judge(&gate, case);
        let expect = &case["expect"];
        assert_eq!(
            verdict.is_allowed(),
            expect["allowed"].as_bool().unwrap(),
            "{name}: {verdict:?}"
        );
        let got: Vec<(u64, &str)> = verdict
            .violations
            .iter()
            .map(|v| (v.index.expect("an item violation") as u64, v.reason.as_str()))
            .collect();
        let want: Vec<(u64, &str)> = expect["violations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| (v["index"].as_u64().unwrap(), v["reason"].as_str().unwrap()))
            .collect();
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn the_schema_case_names_its_param_and_pointer() {
    let gate = Gate::default();
    let case = case("seed-schema-enum-global");
    let verdict = judge(&gate, &case);
    let v = &verdict.violations[0];
    assert_eq!(v.param, "input[1].arguments");
    assert_eq!(v.pointer.as_deref(), Some("/region"));
    assert_eq!(v.id.as_deref(), Some("fc_009"));
    assert_eq!(v.call_id.as_deref(), Some("call_129"));
    assert_eq!(v.item_type, "function_call");
    assert!(
        v.message.contains("\"global\"") && v.message.contains("/region"),
        "{}",
        v.message
    );
}

#[test]
fn violations_serialize_as_the_contract_shows() {
    let gate = Gate::default();
    let case = case("seed-schema-enum-global");
    let verdict = judge(&gate, &case);
    let json = serde_json::to_string(&verdict.violations[0]).unwrap();
    let head = r#"{"index":1,"type":"function_call","id":"fc_009","call_id":"call_129","reason":"arguments_schema","action":"reject","param":"input[1].arguments","pointer":"/region","message":""#;
    assert!(json.starts_with(head), "{json}");
}

#[test]
fn the_namespaced_case_is_allowed_for_its_own_provider_only() {
    let gate = Gate::default();
    let case = case("seed-namespaced-cross-provider");
    let body = serde_json::to_vec(&case["body"]).unwrap();
    for (provider, allowed) in [("openai", true), ("bedrock", false), ("acme", false)] {
        let profile = ProviderProfile::own_namespace(provider);
        let verdict = gate.check(&body, &Target::provider(&profile)).unwrap();
        assert_eq!(verdict.is_allowed(), allowed, "{provider}");
    }
}
