//! The provenance rules (docs/ledger.md), judged through the gate as the proxy calls it.

use serde_json::Value;

use super::tests_corpus::corpus;

use crate::gate::provenance::{item_record_from_value, Owner, StoredItem};
use crate::gate::{
    parse, parse_with, strip, Action, ChainFacts, EncryptedScope, Gate, ItemsAt, LedgerQuery, Policy,
    Provenance, ProviderProfile, Reason, Target, Verdict,
};

fn owner(provider: &str, model: Option<&str>) -> Owner {
    Owner {
        provider: provider.to_owned(),
        model: model.map(str::to_owned),
    }
}

/// What the ledger stored for the output item `json` of response `resp_<provider>`.
fn stored(owner: Owner, json: &str) -> StoredItem {
    let record = item_record_from_value(&serde_json::from_str(json).unwrap()).unwrap();
    StoredItem {
        response_id: format!("resp_{}", owner.provider),
        owner,
        record,
        expires_unix: u64::MAX,
        not_stored: false,
        team: None,
    }
}

/// The provenance of a blob: `output` (a reasoning or compaction item) recorded from `owner`.
fn with_blob(provenance: &mut Provenance, owner: Owner, output: &str) {
    let item = stored(owner, output);
    provenance.encrypted.insert(item.record.digest, item);
}

/// The provenance of an item id: `output` (with its `id`) recorded from `owner`.
fn with_item(provenance: &mut Provenance, owner: Owner, output: &str) {
    let item = stored(owner, output);
    provenance
        .items
        .insert(item.record.id.clone().expect("an output with an id"), item);
}

fn judge_under(body: &str, provider: &ProviderProfile, provenance: &Provenance, policy: &Policy) -> Verdict {
    let request = parse(body.as_bytes()).unwrap();
    let target = Target::new(provider, policy).with_provenance(provenance);
    Gate::default().judge(&request, &target).unwrap()
}

fn judge(body: &str, provider: &str, provenance: &Provenance) -> Verdict {
    judge_under(
        body,
        &ProviderProfile::own_namespace(provider),
        provenance,
        &Policy::default(),
    )
}

/// Each violation as `(index, reason, action, param)`.
fn summary(verdict: &Verdict) -> Vec<(Option<usize>, Reason, Action, String)> {
    verdict
        .violations
        .iter()
        .map(|v| (v.index, v.reason, v.action, v.param.clone()))
        .collect()
}

/// A request for model `m1` with `items`, declaring the tool `f` its calls call.
fn request_with(items: &[&str]) -> String {
    format!(r#"{{"model":"m1",{TOOLS},"input":[{}]}}"#, items.join(","))
}

const TOOLS: &str = r#""tools":[{"type":"function","name":"f"}]"#;

const USER: &str = r#"{"role":"user","content":"hi"}"#;
const BLOB_OUTPUT: &str = r#"{"type":"reasoning","id":"rs_1_0123456789ab","summary":[{"type":"summary_text","text":"s"}],"encrypted_content":"gAAA"}"#;
/// The reasoning item of `BLOB_OUTPUT` as a client replays it (another order, no summary).
const BLOB: &str = r#"{"encrypted_content":"gAAA","summary":[],"type":"reasoning"}"#;
const CALL_OUTPUT: &str = r#"{"type":"function_call","id":"fc_1_0123456789ab","call_id":"c1","name":"f","arguments":"{\"a\":1}","status":"completed"}"#;
const CALL: &str =
    r#"{"type":"function_call","id":"fc_1_0123456789ab","call_id":"c1","name":"f","arguments":"{\"a\":1}"}"#;
const CALL_ANSWER: &str = r#"{"type":"function_call_output","call_id":"c1","output":"ok"}"#;

#[test]
fn a_previous_response_of_another_provider_is_foreign() {
    let body = r#"{"model":"m1","previous_response_id":"resp_9","input":[{"role":"user","content":"hi"}]}"#;
    let provenance = Provenance {
        previous: Some(ChainFacts {
            owner: owner("openai", Some("m1")),
            call_ids: Vec::new(),
            complete: true,
            team: None,
            not_stored: false,
        }),
        ..Provenance::default()
    };
    let verdict = judge(body, "bedrock", &provenance);
    assert_eq!(
        summary(&verdict),
        [(
            None,
            Reason::ForeignPreviousResponse,
            Action::Reject,
            "previous_response_id".to_owned()
        )]
    );
    let violation = &verdict.violations[0];
    assert_eq!(violation.id.as_deref(), Some("resp_9"));
    assert_eq!(violation.location("input"), "previous_response_id");
    assert!(violation.message.contains("`openai`"), "{}", violation.message);
    assert!(judge(body, "openai", &provenance).violations.is_empty());
    // The facts only count for a request that names a previous response.
    let no_previous = r#"{"model":"m1","input":[{"role":"user","content":"hi"}]}"#;
    assert!(judge(no_previous, "bedrock", &provenance).violations.is_empty());
    // Nothing can be cut to cure it: strip acts as reject.
    let mut policy = Policy::default();
    policy.set_action(Reason::ForeignPreviousResponse, Action::Strip);
    let bedrock = ProviderProfile::own_namespace("bedrock");
    let verdict = judge_under(body, &bedrock, &provenance, &policy);
    assert_eq!(verdict.violations[0].action, Action::Reject);
    assert!(verdict.stripped.is_empty());
}

#[test]
fn a_foreign_previous_response_says_how_to_go_on_with_carrying_off_and_on() {
    let body = r#"{"model":"m1","previous_response_id":"resp_9","input":[{"role":"user","content":"hi"}]}"#;
    let provenance = Provenance {
        previous: Some(ChainFacts {
            owner: owner("openai", Some("m1")),
            call_ids: Vec::new(),
            complete: false,
            team: None,
            not_stored: false,
        }),
        ..Provenance::default()
    };
    let bedrock = ProviderProfile::own_namespace("bedrock");
    let policy = Policy::default();
    let request = parse(body.as_bytes()).unwrap();
    let message = |carry_sessions: bool| {
        let target = Target::new(&bedrock, &policy)
            .with_provenance(&provenance)
            .with_carry_sessions(carry_sessions);
        let verdict = Gate::default().judge(&request, &target).unwrap();
        assert_eq!(verdict.violations.len(), 1);
        assert_eq!(verdict.violations[0].reason, Reason::ForeignPreviousResponse);
        verdict.violations[0].message.clone()
    };
    // Carrying off (the default target): the setting that lets an unmodified client go on.
    let off = message(false);
    assert!(off.contains("[ledger] carry_sessions = true"), "{off}");
    assert!(off.contains("store_items = true"), "{off}");
    assert!(off.contains("send the history as input items"), "{off}");
    // Carrying on: this chain could not be carried, and naming the setting would not help.
    let on = message(true);
    assert!(!on.contains("carry_sessions"), "{on}");
    assert!(on.contains("could not be carried"), "{on}");
    assert!(on.contains("not every response of its chain"), "{on}");
    assert!(on.contains("send the history as input items"), "{on}");
    // Both name the response and its provider.
    for message in [off, on] {
        assert!(
            message.contains("`resp_9`") && message.contains("`openai`"),
            "{message}"
        );
    }
}

#[test]
fn a_blob_of_another_provider_is_foreign_by_its_digest() {
    let mut provenance = Provenance::default();
    with_blob(&mut provenance, owner("openai", Some("m1")), BLOB_OUTPUT);
    let body = request_with(&[USER, BLOB]);
    let verdict = judge(&body, "bedrock", &provenance);
    assert_eq!(
        summary(&verdict),
        [(
            Some(1),
            Reason::ForeignEncryptedContent,
            Action::Reject,
            "input[1]".to_owned()
        )]
    );
    assert!(verdict.violations[0].message.contains("`openai`"));
    assert!(judge(&body, "openai", &provenance).violations.is_empty());
    // Another blob is unknown: not a violation.
    let other = request_with(&[USER, &BLOB.replace("gAAA", "gBBB")]);
    assert!(judge(&other, "bedrock", &provenance).violations.is_empty());
}

#[test]
fn a_blob_is_judged_foreign_by_its_digest_never_by_its_id_alone() {
    // Only the id was recorded (the digest index does not know the blob): an id may name
    // another item (ids are not always unique), so the blob is not refused by it.
    let mut provenance = Provenance::default();
    with_item(&mut provenance, owner("openai", None), BLOB_OUTPUT);
    let replayed = r#"{"type":"reasoning","id":"rs_1_0123456789ab","summary":[],"encrypted_content":"gAAA"}"#;
    for target in ["bedrock", "openai"] {
        assert!(judge(&request_with(&[replayed]), target, &provenance)
            .violations
            .is_empty());
    }
}

#[test]
fn a_compaction_blob_of_another_provider_is_foreign() {
    let output = r#"{"type":"compaction","id":"cmp_1_0123456789ab","encrypted_content":"zzz"}"#;
    let mut provenance = Provenance::default();
    with_blob(&mut provenance, owner("openai", None), output);
    let body = request_with(&[r#"{"type":"compaction","encrypted_content":"zzz"}"#, USER]);
    let verdict = judge(&body, "bedrock", &provenance);
    assert_eq!(verdict.violations[0].reason, Reason::ForeignEncryptedContent);
    assert_eq!(verdict.violations[0].item_type, "compaction");
}

#[test]
fn with_model_scope_a_blob_of_another_model_is_foreign() {
    let mut provenance = Provenance::default();
    with_blob(&mut provenance, owner("bedrock", Some("m0")), BLOB_OUTPUT);
    let body = request_with(&[BLOB]);
    let provider_scope = ProviderProfile::own_namespace("bedrock");
    let model_scope = provider_scope.clone().with_encrypted_scope(EncryptedScope::Model);
    assert_eq!(provider_scope.encrypted_scope(), EncryptedScope::Provider);
    assert_eq!(model_scope.encrypted_scope(), EncryptedScope::Model);
    let policy = Policy::default();
    assert!(judge_under(&body, &provider_scope, &provenance, &policy)
        .violations
        .is_empty());
    let verdict = judge_under(&body, &model_scope, &provenance, &policy);
    assert_eq!(
        summary(&verdict),
        [(
            Some(0),
            Reason::ForeignEncryptedContent,
            Action::Reject,
            "input[0]".to_owned()
        )]
    );
    assert!(verdict.violations[0].message.contains("`m0`"));
    // The same model passes, and so does a blob whose model was not recorded.
    let same_model = body.replace("\"m1\"", "\"m0\"");
    assert!(judge_under(&same_model, &model_scope, &provenance, &policy)
        .violations
        .is_empty());
    let mut unknown_model = Provenance::default();
    with_blob(&mut unknown_model, owner("bedrock", None), BLOB_OUTPUT);
    assert!(judge_under(&body, &model_scope, &unknown_model, &policy)
        .violations
        .is_empty());
    // So does a request that names no model.
    let no_model = format!(r#"{{"input":[{BLOB}]}}"#);
    assert!(judge_under(&no_model, &model_scope, &provenance, &policy)
        .violations
        .is_empty());
}

#[test]
fn the_scope_reads_from_configuration() {
    let scope: EncryptedScope = serde_json::from_str("\"model\"").unwrap();
    assert_eq!(scope, EncryptedScope::Model);
    assert_eq!(scope.as_str(), "model");
    assert_eq!(EncryptedScope::default().as_str(), "provider");
    assert!(serde_json::from_str::<EncryptedScope>("\"account\"").is_err());
}

#[test]
fn stripping_a_foreign_reasoning_item_forwards_a_valid_body_without_it() {
    let mut provenance = Provenance::default();
    with_blob(&mut provenance, owner("openai", Some("m1")), BLOB_OUTPUT);
    let body = request_with(&[USER, BLOB, CALL, CALL_ANSWER]);
    let mut policy = Policy::default();
    policy.set_action(Reason::ForeignEncryptedContent, Action::Strip);
    let bedrock = ProviderProfile::own_namespace("bedrock");
    let request = parse(body.as_bytes()).unwrap();
    let target = Target::new(&bedrock, &policy).with_provenance(&provenance);
    let verdict = Gate::default().judge(&request, &target).unwrap();
    assert!(verdict.is_allowed(), "{verdict:?}");
    assert_eq!(verdict.stripped, [1]);
    let stripped = strip::strip(body.as_bytes(), &request, &verdict)
        .unwrap()
        .unwrap();
    assert_eq!(stripped.removed, [1]);
    assert_eq!(
        String::from_utf8(stripped.body.clone()).unwrap(),
        request_with(&[USER, CALL, CALL_ANSWER])
    );
    // The forwarded body is valid JSON, and clean for the same target.
    let value: Value = serde_json::from_slice(&stripped.body).unwrap();
    assert_eq!(value["input"].as_array().unwrap().len(), 3);
    let again = parse(&stripped.body).unwrap();
    assert!(Gate::default()
        .judge(&again, &target)
        .unwrap()
        .violations
        .is_empty());
}

#[test]
fn a_reference_to_an_item_another_provider_stored_is_foreign() {
    let message = r#"{"type":"message","id":"msg_1_0123456789ab","role":"assistant","content":[{"type":"output_text","text":"hello"}]}"#;
    let mut provenance = Provenance::default();
    with_item(&mut provenance, owner("openai", None), message);
    for reference in [
        r#"{"id":"msg_1_0123456789ab"}"#,
        r#"{"type":"item_reference","id":"msg_1_0123456789ab"}"#,
    ] {
        let body = request_with(&[USER, reference]);
        let verdict = judge(&body, "bedrock", &provenance);
        assert_eq!(
            summary(&verdict),
            [(
                Some(1),
                Reason::ForeignItemReference,
                Action::Reject,
                "input[1].id".to_owned()
            )],
            "{reference}"
        );
        assert_eq!(verdict.violations[0].item_type, "item_reference");
        assert!(judge(&body, "openai", &provenance).violations.is_empty());
    }
    // A reference the ledger never saw is unknown.
    let unknown = request_with(&[r#"{"type":"item_reference","id":"msg_2_0123456789ab"}"#]);
    assert!(judge(&unknown, "bedrock", &provenance).violations.is_empty());
}

#[test]
fn a_reasoning_item_by_id_alone_is_a_reference() {
    let mut provenance = Provenance::default();
    with_item(&mut provenance, owner("openai", Some("m1")), BLOB_OUTPUT);
    for by_id in [
        r#"{"type":"reasoning","id":"rs_1_0123456789ab","summary":[]}"#,
        r#"{"type":"reasoning","id":"rs_1_0123456789ab","summary":[],"encrypted_content":null}"#,
    ] {
        let body = request_with(&[USER, by_id]);
        let verdict = judge(&body, "bedrock", &provenance);
        assert_eq!(
            summary(&verdict),
            [(
                Some(1),
                Reason::ForeignItemReference,
                Action::Reject,
                "input[1].id".to_owned()
            )],
            "{by_id}"
        );
        // For its own provider it is a reference, not a changed item.
        assert!(
            judge(&body, "openai", &provenance).violations.is_empty(),
            "{by_id}"
        );
    }
}

#[test]
fn an_item_whose_digest_differs_from_its_record_is_tampered() {
    let mut provenance = Provenance::default();
    with_item(&mut provenance, owner("openai", None), CALL_OUTPUT);
    // Replayed as recorded (no status, another member order, an extra member): clean.
    let faithful = r#"{"arguments":"{\"a\":1}","call_id":"c1","id":"fc_1_0123456789ab","name":"f","type":"function_call","parsed_arguments":{"a":1}}"#;
    assert!(judge(
        &request_with(&[USER, faithful, CALL_ANSWER]),
        "openai",
        &provenance
    )
    .violations
    .is_empty());
    // Edited arguments: tampered, monitored by default, whoever the target.
    let edited = CALL.replace(r#"{\"a\":1}"#, r#"{\"a\":2}"#);
    for provider in ["openai", "bedrock"] {
        let verdict = judge(
            &request_with(&[USER, &edited, CALL_ANSWER]),
            provider,
            &provenance,
        );
        assert_eq!(
            summary(&verdict),
            [(
                Some(1),
                Reason::ItemTampered,
                Action::Monitor,
                "input[1]".to_owned()
            )]
        );
        assert!(verdict.is_allowed());
        assert_eq!(verdict.violations[0].id.as_deref(), Some("fc_1_0123456789ab"));
    }
    // Another type under a recorded id.
    let as_message = r#"{"type":"message","id":"fc_1_0123456789ab","role":"assistant","content":"x"}"#;
    let verdict = judge(&request_with(&[as_message]), "openai", &provenance);
    assert_eq!(verdict.violations[0].reason, Reason::ItemTampered);
    assert!(verdict.violations[0]
        .message
        .contains("recorded as a `function_call`"));
}

#[test]
fn a_message_or_blob_whose_content_changed_is_tampered() {
    let message = r#"{"type":"message","id":"msg_1_0123456789ab","role":"assistant","status":"completed","content":[{"type":"output_text","text":"hello","annotations":[]}]}"#;
    let mut provenance = Provenance::default();
    with_item(&mut provenance, owner("openai", None), message);
    with_item(&mut provenance, owner("openai", None), BLOB_OUTPUT);
    let same =
        r#"{"id":"msg_1_0123456789ab","role":"assistant","content":[{"type":"output_text","text":"hello"}]}"#;
    let changed = r#"{"id":"msg_1_0123456789ab","role":"assistant","content":"hello!"}"#;
    let same_blob =
        r#"{"type":"reasoning","id":"rs_1_0123456789ab","summary":[],"encrypted_content":"gAAA"}"#;
    let other_blob =
        r#"{"type":"reasoning","id":"rs_1_0123456789ab","summary":[],"encrypted_content":"gAAB"}"#;
    for (items, tampered) in [
        ([USER, same, same_blob], None),
        ([USER, changed, same_blob], Some(1)),
        ([USER, same, other_blob], Some(2)),
    ] {
        let verdict = judge(&request_with(&items), "openai", &provenance);
        let expected: Vec<_> = tampered
            .map(|i| {
                (
                    Some(i),
                    Reason::ItemTampered,
                    Action::Monitor,
                    format!("input[{i}]"),
                )
            })
            .into_iter()
            .collect();
        assert_eq!(summary(&verdict), expected, "{items:?}");
    }
}

#[test]
fn each_item_has_one_violation_the_first_rule_s() {
    // A blob the ledger never saw under an id recorded with another blob: tampered (or
    // another item under the same id), reported once, never refused.
    let mut provenance = Provenance::default();
    with_item(&mut provenance, owner("openai", None), BLOB_OUTPUT);
    let other_blob =
        r#"{"type":"reasoning","id":"rs_1_0123456789ab","summary":[],"encrypted_content":"gAAB"}"#;
    let verdict = judge(&request_with(&[other_blob]), "bedrock", &provenance);
    assert_eq!(
        summary(&verdict),
        [(
            Some(0),
            Reason::ItemTampered,
            Action::Monitor,
            "input[0]".to_owned()
        )]
    );
    // A tampered call with a bad status: the status is its one violation.
    let mut provenance = Provenance::default();
    with_item(&mut provenance, owner("openai", None), CALL_OUTPUT);
    let edited = CALL
        .replace(r#"{\"a\":1}"#, r#"{\"a\":2}"#)
        .replace("\"type\"", "\"status\":\"incomplete\",\"type\"");
    let verdict = judge(&request_with(&[&edited, CALL_ANSWER]), "openai", &provenance);
    assert_eq!(
        summary(&verdict),
        [(
            Some(0),
            Reason::Status,
            Action::Reject,
            "input[0].status".to_owned()
        )]
    );
    // With every reason stripped, the stripped positions stay ascending and unique.
    let mut policy = Policy::default();
    for reason in Reason::ALL {
        policy.set_action(reason, Action::Strip);
    }
    with_item(&mut provenance, owner("openai", None), BLOB_OUTPUT);
    with_item(
        &mut provenance,
        owner("openai", None),
        r#"{"type":"message","id":"msg_1_0123456789ab","content":"x"}"#,
    );
    let body = request_with(&[&edited, other_blob, CALL_ANSWER, r#"{"id":"msg_1_0123456789ab"}"#]);
    let verdict = judge_under(
        &body,
        &ProviderProfile::own_namespace("bedrock"),
        &provenance,
        &policy,
    );
    assert_eq!(verdict.stripped, [0, 1, 3]);
    assert_eq!(verdict.violations.len(), 3);
}

#[test]
fn ids_a_provider_numbers_per_response_name_no_single_item() {
    // Bedrock Mantle: every response has its rs_0, fc_0 and msg_0; the ledger keeps the last.
    let turn = |blob: &str, text: &str| {
        (
            format!(r#"{{"type":"reasoning","id":"rs_0","summary":[],"encrypted_content":"{blob}"}}"#),
            format!(r#"{{"type":"message","id":"msg_0","role":"assistant","content":"{text}"}}"#),
        )
    };
    let (rs_a, msg_a) = turn("blob_a", "first");
    let (rs_b, msg_b) = turn("blob_b", "second");
    let mut provenance = Provenance::default();
    for output in [&rs_a, &rs_b] {
        with_blob(&mut provenance, owner("bedrock", Some("m1")), output);
    }
    with_item(&mut provenance, owner("bedrock", Some("m1")), &rs_b);
    with_item(&mut provenance, owner("bedrock", Some("m1")), &msg_b);
    let body = request_with(&[USER, &rs_a, &msg_a, USER, &rs_b, &msg_b]);
    assert!(judge(&body, "bedrock", &provenance).violations.is_empty());
    // Once each, the first turn's items: the blob is known by its digest, the message by its id.
    let body = request_with(&[USER, &rs_a, &msg_a]);
    assert_eq!(
        summary(&judge(&body, "bedrock", &provenance)),
        [(
            Some(2),
            Reason::ItemTampered,
            Action::Monitor,
            "input[2]".to_owned()
        )]
    );
    // A repeated reference is not judged by its id either.
    let mut other = Provenance::default();
    with_item(&mut other, owner("openai", None), &msg_b);
    let twice = request_with(&[r#"{"id":"msg_0"}"#, r#"{"id":"msg_0"}"#]);
    assert!(judge(&twice, "bedrock", &other).violations.is_empty());
    let once = request_with(&[r#"{"id":"msg_0"}"#]);
    assert_eq!(
        judge(&once, "bedrock", &other).violations[0].reason,
        Reason::ForeignItemReference
    );
}

/// A request continuing `resp_1` with outputs for `c1` and `c2`.
const CONTINUATION: &str = r#"{"model":"m1","previous_response_id":"resp_1","input":[
    {"type":"function_call_output","call_id":"c1","output":"a"},
    {"type":"function_call_output","call_id":"c2","output":"b"}]}"#;

fn chain(call_ids: &[&str], complete: bool) -> Provenance {
    Provenance {
        previous: Some(ChainFacts {
            owner: owner("openai", Some("m1")),
            call_ids: call_ids.iter().map(|id| id.to_string()).collect(),
            complete,
            team: None,
            not_stored: false,
        }),
        ..Provenance::default()
    }
}

#[test]
fn a_known_chain_pairs_outputs_with_its_recorded_calls() {
    assert!(judge(CONTINUATION, "openai", &chain(&["c2", "c0", "c1"], true))
        .violations
        .is_empty());
    let verdict = judge(CONTINUATION, "openai", &chain(&["c1"], true));
    assert_eq!(
        summary(&verdict),
        [(
            Some(1),
            Reason::CallIdMismatch,
            Action::Reject,
            "input[1].call_id".to_owned()
        )]
    );
    assert!(verdict.violations[0].message.contains("ledger"));
    assert_eq!(verdict.violations[0].call_id.as_deref(), Some("c2"));
}

#[test]
fn an_unknown_or_partly_known_chain_pairs_as_before() {
    assert!(judge(CONTINUATION, "openai", &Provenance::default())
        .violations
        .is_empty());
    assert!(judge(CONTINUATION, "openai", &chain(&[], false))
        .violations
        .is_empty());
    // A conversation holds calls the chain does not.
    let with_conversation = CONTINUATION.replace("\"model\"", "\"conversation\":\"conv_1\",\"model\"");
    assert!(judge(&with_conversation, "openai", &chain(&[], true))
        .violations
        .is_empty());
}

#[test]
fn item_references_bring_their_recorded_calls_along() {
    let body = CONTINUATION.replace(
        "[\n",
        "[{\"type\":\"item_reference\",\"id\":\"fc_2_0123456789ab\"},\n",
    );
    let provenance = chain(&["c1"], true);
    // The ledger never saw fc_2_0123456789ab: it cannot tell where c2 is.
    assert!(judge(&body, "openai", &provenance).violations.is_empty());
    let mut knows_reference = provenance.clone();
    let call =
        r#"{"type":"function_call","id":"fc_2_0123456789ab","call_id":"c2","name":"f","arguments":"{}"}"#;
    with_item(&mut knows_reference, owner("openai", Some("m1")), call);
    assert!(judge(&body, "openai", &knows_reference).violations.is_empty());
    let mut other_call = provenance.clone();
    with_item(
        &mut other_call,
        owner("openai", Some("m1")),
        &call.replace("\"c2\"", "\"c3\""),
    );
    assert_eq!(
        summary(&judge(&body, "openai", &other_call)),
        [(
            Some(2),
            Reason::CallIdMismatch,
            Action::Reject,
            "input[2].call_id".to_owned()
        )]
    );
}

#[test]
fn unknown_provenance_passes() {
    let body = format!(
        r#"{{"model":"m1",{TOOLS},"previous_response_id":"resp_1","input":[{USER},{BLOB},{CALL},{CALL_ANSWER},
            {{"id":"msg_1_0123456789ab"}},{{"type":"reasoning","id":"rs_1_0123456789ab","summary":[]}},
            {{"type":"function_call_output","call_id":"elsewhere","output":"x"}}]}}"#
    );
    for provider in ["openai", "bedrock"] {
        let verdict = judge(&body, provider, &Provenance::default());
        assert!(verdict.violations.is_empty(), "{provider}: {verdict:?}");
    }
    // Facts about other ids and blobs are no facts about these.
    let mut unrelated = Provenance::default();
    with_item(
        &mut unrelated,
        owner("openai", None),
        &CALL_OUTPUT.replace("fc_1_0123456789ab", "fc_9_0123456789ab"),
    );
    with_blob(
        &mut unrelated,
        owner("openai", None),
        &BLOB_OUTPUT.replace("gAAA", "gZZZ"),
    );
    assert!(judge(&body, "bedrock", &unrelated).violations.is_empty());
}

#[test]
fn the_query_finds_what_the_rules_judge() {
    // The proxy's round trip: query, a store that knows everything from openai, judge.
    let body = request_with(&[USER, BLOB, CALL, CALL_ANSWER, r#"{"id":"msg_1_0123456789ab"}"#]);
    let request = parse(body.as_bytes()).unwrap();
    let query = LedgerQuery::of(&request);
    assert_eq!(query.item_ids, ["msg_1_0123456789ab", "fc_1_0123456789ab"]);
    let mut provenance = Provenance::default();
    with_blob(&mut provenance, owner("openai", None), BLOB_OUTPUT);
    assert_eq!(
        query.digests,
        provenance.encrypted.keys().copied().collect::<Vec<_>>()
    );
    with_item(&mut provenance, owner("openai", None), CALL_OUTPUT);
    with_item(
        &mut provenance,
        owner("openai", None),
        r#"{"type":"message","id":"msg_1_0123456789ab","content":"x"}"#,
    );
    let reasons: Vec<Reason> = judge(&body, "bedrock", &provenance)
        .violations
        .iter()
        .map(|v| v.reason)
        .collect();
    assert_eq!(
        reasons,
        [Reason::ForeignEncryptedContent, Reason::ForeignItemReference]
    );
}

#[test]
fn conversation_items_are_judged_where_they_are() {
    let body = format!(r#"{{"items":[{USER},{BLOB}]}}"#);
    let mut provenance = Provenance::default();
    with_blob(&mut provenance, owner("openai", None), BLOB_OUTPUT);
    let request = parse_with(body.as_bytes(), ItemsAt::Items).unwrap();
    let bedrock = ProviderProfile::own_namespace("bedrock");
    let verdict = Gate::default()
        .judge(&request, &Target::provider(&bedrock).with_provenance(&provenance))
        .unwrap();
    assert_eq!(verdict.violations[0].param, "items[1]");
}

/// What a faithful ledger knows of `body` when `producer` (with the request's model) produced
/// everything it replays: the answer to its [`LedgerQuery`], each id and blob recorded from
/// the item itself, and the previous response's chain holding the calls its outputs answer.
fn faithful_ledger(body: &str, at: ItemsAt, producer: &str) -> Provenance {
    let request = parse_with(body.as_bytes(), at).unwrap();
    let query = LedgerQuery::of(&request);
    let value: Value = serde_json::from_str(body).unwrap();
    let items = value[at.member()].as_array().cloned().unwrap_or_default();
    let producer = owner(producer, request.model());
    let record = |item: &Value| {
        let mut output = item.clone();
        let kind = output.get("type").and_then(Value::as_str).unwrap_or("message");
        // An item reference names an output; this one was a message.
        if kind == "item_reference" || output.get("type").is_none() {
            output["type"] = "message".into();
        }
        stored(producer.clone(), &output.to_string())
    };
    let mut provenance = Provenance::default();
    for id in &query.item_ids {
        // The output itself rather than a reference to it, when the request has both.
        let named = |item: &&Value| item["id"] == id.as_str();
        let is_reference = |item: &&Value| item.get("type").is_none_or(|t| t == "item_reference");
        let item = (items.iter().filter(named).find(|item| !is_reference(item)))
            .or_else(|| items.iter().find(named))
            .unwrap();
        provenance.items.insert(id.clone(), record(item));
    }
    for item in &items {
        if matches!(item["type"].as_str(), Some("reasoning" | "compaction"))
            && !item["encrypted_content"].is_null()
        {
            let stored = record(item);
            assert!(query.digests.contains(&stored.record.digest));
            provenance.encrypted.insert(stored.record.digest, stored);
        }
    }
    if query.previous_response_id.is_some() {
        let call_ids = items
            .iter()
            .filter(|item| item["type"].as_str().is_some_and(|t| t.ends_with("_output")))
            .filter_map(|item| item["call_id"].as_str().map(str::to_owned))
            .collect();
        provenance.previous = Some(ChainFacts {
            owner: producer,
            call_ids,
            complete: true,
            team: None,
            not_stored: false,
        });
    }
    provenance
}

#[test]
fn every_real_client_body_passes_with_what_a_faithful_ledger_knows() {
    let corpus = corpus();
    assert!(corpus.len() >= 100, "the corpus has {} bodies", corpus.len());
    let gate = Gate::default();
    let (mut with_ids, mut with_blobs, mut with_previous, mut foreign) = (0, 0, 0, 0);
    for provider in ["openai", "bedrock"] {
        let profiles = [
            ProviderProfile::own_namespace(provider),
            ProviderProfile::own_namespace(provider).with_encrypted_scope(EncryptedScope::Model),
        ];
        for (origin, at, body) in &corpus {
            let request = parse_with(body.as_bytes(), *at).unwrap();
            let faithful = faithful_ledger(body, *at, provider);
            with_ids += usize::from(!faithful.items.is_empty());
            with_blobs += usize::from(!faithful.encrypted.is_empty());
            with_previous += usize::from(faithful.previous.is_some());
            let same_provider_previous = Provenance {
                previous: Some(ChainFacts {
                    owner: owner(provider, request.model()),
                    call_ids: Vec::new(),
                    complete: false,
                    team: None,
                    not_stored: false,
                }),
                ..Provenance::default()
            };
            for profile in &profiles {
                for (facts, provenance) in [
                    ("no facts", &Provenance::default()),
                    (
                        "a previous response of the same provider",
                        &same_provider_previous,
                    ),
                    ("a faithful ledger", &faithful),
                ] {
                    let target = Target::provider(profile).with_provenance(provenance);
                    let verdict = gate.judge(&request, &target).unwrap();
                    assert!(
                        verdict.violations.is_empty(),
                        "{origin} for {provider} ({:?}) with {facts}: {:#?}",
                        profile.encrypted_scope(),
                        verdict.violations
                    );
                }
            }
            // The same facts, but recorded from another provider: the rules are not idle.
            let elsewhere = faithful_ledger(body, *at, "elsewhere");
            let target = Target::provider(&profiles[0]).with_provenance(&elsewhere);
            foreign += usize::from(!gate.judge(&request, &target).unwrap().violations.is_empty());
        }
    }
    assert!(
        with_ids > 20 && with_blobs > 0 && with_previous > 10,
        "{with_ids} {with_blobs} {with_previous}"
    );
    assert!(foreign > 10, "{foreign} bodies with foreign facts refused");
}

mod props {
    use proptest::prelude::*;

    use super::*;

    /// One generated item; `n` makes ids unique (a faithful ledger records each id once).
    fn item(n: usize) -> impl Strategy<Value = String> {
        let blob = prop::sample::select(vec!["gA", "gB", "gC"]);
        let call_id = prop::sample::select(vec!["c0", "c1", "c2"]);
        prop_oneof![
            (any::<bool>(), "[a-z ]{0,6}").prop_map(move |(id, text)| match id {
                true => format!(r#"{{"type":"message","id":"msg_{n}","role":"assistant","content":[{{"type":"output_text","text":"{text}"}}]}}"#),
                false => format!(r#"{{"role":"user","content":"{text}"}}"#),
            }),
            (any::<bool>(), call_id.clone(), 0u8..3).prop_map(move |(id, call_id, a)| {
                let id = if id { format!(r#""id":"fc_{n}","#) } else { String::new() };
                format!(r#"{{"type":"function_call",{id}"call_id":"{call_id}","name":"f","arguments":"{{\"a\":{a}}}"}}"#)
            }),
            call_id.prop_map(|call_id| format!(
                r#"{{"type":"function_call_output","call_id":"{call_id}","output":"x"}}"#
            )),
            (any::<bool>(), prop::option::of(blob), prop::sample::select(vec!["reasoning", "compaction"]))
                .prop_filter("an item with neither id nor blob is no fact", |(id, blob, _)| *id || blob.is_some())
                .prop_map(move |(id, blob, kind)| {
                    let id = if id { format!(r#""id":"rs_{n}","#) } else { String::new() };
                    let blob = blob.map(|b| format!(r#","encrypted_content":"{b}""#)).unwrap_or_default();
                    format!(r#"{{"type":"{kind}",{id}"summary":[]{blob}}}"#)
                }),
            (0..8usize).prop_map(|k| format!(r#"{{"type":"item_reference","id":"msg_{k}"}}"#)),
        ]
    }

    fn history() -> impl Strategy<Value = String> {
        (0..8usize)
            .prop_flat_map(|len| (0..len).map(item).collect::<Vec<_>>())
            .prop_map(|items| {
                let refs: Vec<&str> = items.iter().map(String::as_str).collect();
                request_with(&refs)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Facts that only say "the target produced this, as it is" change no verdict.
        #[test]
        fn faithful_facts_change_nothing(body in history(), model_scope in any::<bool>()) {
            let mut bedrock = ProviderProfile::own_namespace("bedrock");
            if model_scope {
                bedrock = bedrock.with_encrypted_scope(EncryptedScope::Model);
            }
            let request = parse(body.as_bytes()).unwrap();
            let gate = Gate::default();
            let without = gate.judge(&request, &Target::provider(&bedrock)).unwrap();
            for provenance in [Provenance::default(), faithful_ledger(&body, ItemsAt::Input, "bedrock")] {
                let with = gate
                    .judge(&request, &Target::provider(&bedrock).with_provenance(&provenance))
                    .unwrap();
                prop_assert_eq!(&with, &without);
            }
        }

        /// Stripping what another provider produced leaves a body with nothing foreign left.
        #[test]
        fn stripping_foreign_items_leaves_none(body in history()) {
            let provenance = faithful_ledger(&body, ItemsAt::Input, "openai");
            let mut policy = Policy::default();
            policy.set_action(Reason::ForeignEncryptedContent, Action::Strip);
            policy.set_action(Reason::ForeignItemReference, Action::Strip);
            let bedrock = ProviderProfile::own_namespace("bedrock");
            let target = Target::new(&bedrock, &policy).with_provenance(&provenance);
            let request = parse(body.as_bytes()).unwrap();
            let verdict = Gate::default().judge(&request, &target).unwrap();
            let foreign = |v: &crate::gate::Violation| {
                matches!(v.reason, Reason::ForeignEncryptedContent | Reason::ForeignItemReference)
            };
            prop_assert_eq!(verdict.violations.iter().filter(|v| foreign(v)).count(), verdict.stripped.len());
            let Some(stripped) = strip::strip(body.as_bytes(), &request, &verdict).unwrap() else {
                return Ok(());
            };
            let again = parse(&stripped.body).unwrap();
            let verdict = Gate::default().judge(&again, &target).unwrap();
            prop_assert!(!verdict.violations.iter().any(foreign), "{:?}", verdict.violations);
        }
    }
}
