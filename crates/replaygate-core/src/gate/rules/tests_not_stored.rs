//! `state_not_stored`, judged through the gate as the proxy calls it: a reasoning item sent by
//! id alone of a response its provider did not store is cut by `repair` and refused by
//! `reject`; the tenancy rule comes first; `reasoning_missing` does not judge such a response's
//! items (docs/item-profiles.md#precedence).

use crate::gate::provenance::{item_record_from_value, link_reasoning, Owner, StoredItem};
use crate::gate::{
    parse, strip, Action, Gate, ItemProfile, Policy, Provenance, ProviderProfile, Reason, StateAccess,
    Target, Verdict,
};

const RS_ID: &str = "rs_unstored_0123456789";
const ID_ONLY: &str = r#"{"type":"reasoning","id":"rs_unstored_0123456789","summary":[]}"#;
const NULL_BLOB: &str =
    r#"{"type":"reasoning","id":"rs_unstored_0123456789","summary":[],"encrypted_content":null}"#;
const WITH_BLOB: &str =
    r#"{"type":"reasoning","id":"rs_unstored_0123456789","summary":[],"encrypted_content":"gAAA"}"#;
const MESSAGE: &str = r#"{"type":"message","id":"msg_unstored_0123456789","role":"assistant","content":[{"type":"output_text","text":"ok"}]}"#;
const USER: &str = r#"{"role":"user","content":"hi"}"#;

fn openai() -> ProviderProfile {
    ProviderProfile::own_namespace("openai").with_item_profile(Some(ItemProfile::built_in("openai").unwrap()))
}

fn body_of(items: &[&str]) -> String {
    format!(r#"{{"model":"m","input":[{}]}}"#, items.join(","))
}

/// What the ledger recorded of one response's output (reasoning, then a message), for `team`,
/// stored by its provider or not.
fn ledger(not_stored: bool, team: Option<&str>) -> Provenance {
    let mut records: Vec<_> = [ID_ONLY, MESSAGE]
        .iter()
        .map(|json| item_record_from_value(&serde_json::from_str(json).unwrap()).unwrap())
        .collect();
    link_reasoning(&mut records);
    let mut provenance = Provenance::default();
    for record in records {
        let stored = StoredItem {
            response_id: "resp_unstored".to_owned(),
            owner: Owner {
                provider: "openai".to_owned(),
                model: Some("m".to_owned()),
            },
            record: record.clone(),
            expires_unix: u64::MAX,
            team: team.map(str::to_owned),
            not_stored,
        };
        provenance.items.insert(record.id.clone().unwrap(), stored);
    }
    provenance
}

fn judge(body: &str, provenance: &Provenance, policy: &Policy, access: Option<&StateAccess>) -> Verdict {
    let request = parse(body.as_bytes()).unwrap();
    let provider = openai();
    let mut target = Target::new(&provider, policy).with_provenance(provenance);
    if let Some(access) = access {
        target = target.with_access(access);
    }
    Gate::default().judge(&request, &target).unwrap()
}

fn summary(verdict: &Verdict) -> Vec<(Option<usize>, Reason, Action)> {
    verdict
        .violations
        .iter()
        .map(|v| (v.index, v.reason, v.action))
        .collect()
}

fn forwarded(body: &str, verdict: &Verdict) -> String {
    let request = parse(body.as_bytes()).unwrap();
    let cut = strip::strip(body.as_bytes(), &request, verdict).unwrap().unwrap();
    String::from_utf8(cut.body).unwrap()
}

#[test]
fn an_id_only_reasoning_item_of_a_response_not_stored_is_cut_by_repair() {
    for reasoning in [ID_ONLY, NULL_BLOB] {
        let body = body_of(&[USER, reasoning, MESSAGE, USER]);
        let verdict = judge(&body, &ledger(true, None), &Policy::default(), None);
        assert_eq!(
            summary(&verdict),
            [(Some(1), Reason::StateNotStored, Action::Repair)],
            "{body}"
        );
        assert!(verdict.is_allowed());
        assert_eq!(verdict.repair_cuts, [1]);
        assert_eq!(forwarded(&body, &verdict), body_of(&[USER, MESSAGE, USER]));
        let message = &verdict.violations[0].message;
        assert!(
            message.contains(RS_ID) && message.contains("resp_unstored"),
            "{message}"
        );
    }
}

#[test]
fn reject_refuses_it_naming_both_remedies() {
    let mut policy = Policy::default();
    policy.set_action(Reason::StateNotStored, Action::Reject);
    let body = body_of(&[USER, ID_ONLY, MESSAGE, USER]);
    let verdict = judge(&body, &ledger(true, None), &policy, None);
    assert_eq!(
        summary(&verdict),
        [(Some(1), Reason::StateNotStored, Action::Reject)]
    );
    assert!(!verdict.is_allowed());
    let message = &verdict.violations[0].message;
    assert!(message.contains("`store: true`"), "{message}");
    assert!(
        message.contains(r#"include: ["reasoning.encrypted_content"]"#),
        "{message}"
    );
}

#[test]
fn a_stored_response_an_item_with_its_content_or_an_unknown_id_is_not_judged() {
    let policy = Policy::default();
    let body = body_of(&[USER, ID_ONLY, MESSAGE, USER]);
    assert!(judge(&body, &ledger(false, None), &policy, None)
        .violations
        .is_empty());
    assert!(judge(&body, &Provenance::default(), &policy, None)
        .violations
        .is_empty());
    // With its content it is readable (its blob differs from the one recorded: only monitored).
    let body = body_of(&[USER, WITH_BLOB, MESSAGE, USER]);
    let verdict = judge(&body, &ledger(true, None), &policy, None);
    assert!(verdict.is_allowed() && verdict.repair_cuts.is_empty());
    assert!(verdict
        .violations
        .iter()
        .all(|v| v.reason != Reason::StateNotStored));
    // A provider whose profile lacks the rule judges nothing of it.
    let plain = ProviderProfile::own_namespace("openai");
    let body = body_of(&[USER, ID_ONLY, MESSAGE, USER]);
    let request = parse(body.as_bytes()).unwrap();
    let provenance = ledger(true, None);
    let target = Target::new(&plain, &policy).with_provenance(&provenance);
    assert!(Gate::default()
        .judge(&request, &target)
        .unwrap()
        .violations
        .is_empty());
}

#[test]
fn another_teams_item_is_cross_team_state_first() {
    let body = body_of(&[USER, ID_ONLY, MESSAGE, USER]);
    let beta = StateAccess::new("beta", []);
    let verdict = judge(
        &body,
        &ledger(true, Some("alpha")),
        &Policy::default(),
        Some(&beta),
    );
    let reasons: Vec<_> = summary(&verdict)
        .into_iter()
        .map(|(at, reason, _)| (at, reason))
        .collect();
    assert_eq!(
        reasons,
        [
            (Some(1), Reason::CrossTeamState),
            (Some(2), Reason::CrossTeamState)
        ]
    );
    assert!(!verdict.is_allowed());
    // The owner's team gets the rule itself.
    let alpha = StateAccess::new("alpha", []);
    let verdict = judge(
        &body,
        &ledger(true, Some("alpha")),
        &Policy::default(),
        Some(&alpha),
    );
    assert_eq!(
        summary(&verdict),
        [(Some(1), Reason::StateNotStored, Action::Repair)]
    );
}

#[test]
fn reasoning_missing_does_not_judge_an_item_of_a_response_not_stored() {
    // The message was recorded right after the reasoning item, and is sent without it.
    let body = body_of(&[USER, MESSAGE, USER]);
    let stored = judge(&body, &ledger(false, None), &Policy::default(), None);
    assert_eq!(
        summary(&stored),
        [(Some(1), Reason::ReasoningMissing, Action::Reject)]
    );
    let unstored = judge(&body, &ledger(true, None), &Policy::default(), None);
    assert!(unstored.violations.is_empty(), "{:?}", unstored.violations);
}

#[test]
fn ten_thousand_id_only_reasoning_items_are_each_cut_once() {
    let mut provenance = ledger(true, None);
    let template = provenance.items[RS_ID].clone();
    let mut items = Vec::new();
    for n in 0..10_000 {
        let id = format!("rs_unstored_{n:010}");
        let mut stored = template.clone();
        stored.record.id = Some(id.clone());
        provenance.items.insert(id.clone(), stored);
        items.push(format!(r#"{{"type":"reasoning","id":"{id}","summary":[]}}"#));
        items.push(MESSAGE.replace("msg_unstored_0123456789", &format!("msg_unstored_{n:010}")));
    }
    let refs: Vec<&str> = items.iter().map(String::as_str).collect();
    let body = body_of(&refs);
    let verdict = judge(&body, &provenance, &Policy::default(), None);
    assert_eq!(verdict.repair_cuts.len(), 10_000);
    assert!(verdict.is_allowed());
    assert!(verdict
        .violations
        .iter()
        .all(|v| v.reason == Reason::StateNotStored));
}

const MSG_ID: &str = "msg_unstored_0123456789";
const REFERENCE: &str = r#"{"type":"item_reference","id":"msg_unstored_0123456789"}"#;

/// [`ledger`] with the message's bytes kept (`store_items = true`).
fn ledger_with_content(not_stored: bool, team: Option<&str>) -> Provenance {
    let mut provenance = ledger(not_stored, team);
    provenance
        .unstored_texts
        .insert(MSG_ID.to_owned(), MESSAGE.to_owned());
    provenance
}

#[test]
fn an_item_reference_to_an_item_not_stored_is_replaced_by_the_kept_item() {
    // In the middle, alone, and last.
    for (body, at) in [
        (body_of(&[USER, REFERENCE, USER]), 1),
        (body_of(&[REFERENCE]), 0),
        (body_of(&[USER, REFERENCE]), 1),
    ] {
        let verdict = judge(&body, &ledger_with_content(true, None), &Policy::default(), None);
        assert_eq!(
            summary(&verdict),
            [(Some(at), Reason::StateNotStored, Action::Repair)],
            "{body}"
        );
        assert!(verdict.is_allowed());
        assert!(verdict.repair_cuts.is_empty());
        assert_eq!(verdict.inserts.len(), 1);
        assert!(verdict.inserts[0].replaces);
        assert_eq!(verdict.inserts[0].id, MSG_ID);
        assert_eq!(forwarded(&body, &verdict), body.replace(REFERENCE, MESSAGE));
        let message = &verdict.violations[0].message;
        assert!(
            message.contains(MSG_ID) && message.contains("resp_unstored"),
            "{message}"
        );
    }
    // Beside an id-only reasoning item repair cuts: the cut and the replacement both hold.
    let body = body_of(&[ID_ONLY, REFERENCE, USER]);
    let verdict = judge(&body, &ledger_with_content(true, None), &Policy::default(), None);
    assert_eq!(verdict.repair_cuts, [0]);
    assert_eq!(forwarded(&body, &verdict), body_of(&[MESSAGE, USER]));
}

/// The reasoning item as the answer held it when its request asked for
/// `reasoning.encrypted_content`.
const RECORDED_WITH_BLOB: &str =
    r#"{"type":"reasoning","id":"rs_unstored_0123456789","summary":[],"encrypted_content":"gAAAAB-kept"}"#;

#[test]
fn an_id_only_reasoning_item_whose_recorded_content_was_kept_is_replaced_by_it() {
    let mut provenance = ledger(true, None);
    provenance
        .unstored_texts
        .insert(RS_ID.to_owned(), RECORDED_WITH_BLOB.to_owned());
    for reasoning in [ID_ONLY, NULL_BLOB] {
        let body = body_of(&[USER, reasoning, MESSAGE, USER]);
        let verdict = judge(&body, &provenance, &Policy::default(), None);
        assert_eq!(
            summary(&verdict),
            [(Some(1), Reason::StateNotStored, Action::Repair)],
            "{body}"
        );
        assert!(verdict.is_allowed());
        assert!(verdict.repair_cuts.is_empty());
        assert_eq!(verdict.inserts.len(), 1);
        assert!(verdict.inserts[0].replaces);
        assert_eq!(
            forwarded(&body, &verdict),
            body_of(&[USER, RECORDED_WITH_BLOB, MESSAGE, USER])
        );
        let message = &verdict.violations[0].message;
        assert!(message.contains("in its place"), "{message}");
    }
    // Kept without its content (the answer was not asked for it): cut, as without the text.
    let mut provenance = ledger(true, None);
    provenance
        .unstored_texts
        .insert(RS_ID.to_owned(), ID_ONLY.to_owned());
    let body = body_of(&[USER, ID_ONLY, MESSAGE, USER]);
    let verdict = judge(&body, &provenance, &Policy::default(), None);
    assert_eq!(verdict.repair_cuts, [1]);
    assert!(verdict.inserts.is_empty());
    assert_eq!(forwarded(&body, &verdict), body_of(&[USER, MESSAGE, USER]));
}

#[test]
fn an_item_reference_to_an_item_not_stored_without_its_content_is_refused() {
    let body = body_of(&[USER, REFERENCE, USER]);
    for action in [Action::Repair, Action::Reject] {
        let mut policy = Policy::default();
        policy.set_action(Reason::StateNotStored, action);
        let verdict = judge(&body, &ledger(true, None), &policy, None);
        // Repair cannot put back what the ledger did not keep: it acts as reject.
        assert_eq!(
            summary(&verdict),
            [(Some(1), Reason::StateNotStored, Action::Reject)],
            "{action:?}"
        );
        assert!(!verdict.is_allowed());
        assert!(verdict.inserts.is_empty());
        let message = &verdict.violations[0].message;
        assert!(message.contains("did not keep the item's content"), "{message}");
        assert!(message.contains("store_items = true"), "{message}");
        assert!(message.contains("send the item itself"), "{message}");
        assert!(message.contains("`store: true`"), "{message}");
    }
    // Reject refuses it even when the content was kept, naming the remedies.
    let mut policy = Policy::default();
    policy.set_action(Reason::StateNotStored, Action::Reject);
    let verdict = judge(&body, &ledger_with_content(true, None), &policy, None);
    assert_eq!(
        summary(&verdict),
        [(Some(1), Reason::StateNotStored, Action::Reject)]
    );
    assert!(verdict.inserts.is_empty());
    let message = &verdict.violations[0].message;
    assert!(
        message.contains("store_items = true") && message.contains("send the item itself"),
        "{message}"
    );
}

#[test]
fn an_item_reference_to_a_stored_response_or_another_providers_item_is_left_alone() {
    // The provider resolves a stored response's item (sent after its reasoning item).
    let stored = body_of(&[USER, ID_ONLY, REFERENCE, USER]);
    let verdict = judge(
        &stored,
        &ledger_with_content(false, None),
        &Policy::default(),
        None,
    );
    assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
    assert!(verdict.inserts.is_empty());
    // Another provider's item is foreign_item_reference's to judge.
    let body = body_of(&[USER, REFERENCE, USER]);
    let mut provenance = ledger_with_content(true, None);
    for stored in provenance.items.values_mut() {
        stored.owner.provider = "anthropic".to_owned();
    }
    let verdict = judge(&body, &provenance, &Policy::default(), None);
    assert_eq!(
        summary(&verdict),
        [(Some(1), Reason::ForeignItemReference, Action::Reject)]
    );
}

#[test]
fn another_teams_item_reference_is_cross_team_state_first() {
    let body = body_of(&[USER, REFERENCE, USER]);
    let beta = StateAccess::new("beta", []);
    let provenance = ledger_with_content(true, Some("alpha"));
    let verdict = judge(&body, &provenance, &Policy::default(), Some(&beta));
    let reasons: Vec<_> = summary(&verdict)
        .into_iter()
        .map(|(at, reason, _)| (at, reason))
        .collect();
    assert_eq!(reasons, [(Some(1), Reason::CrossTeamState)]);
    assert!(!verdict.is_allowed() && verdict.inserts.is_empty());
    let alpha = StateAccess::new("alpha", []);
    let verdict = judge(&body, &provenance, &Policy::default(), Some(&alpha));
    assert_eq!(
        summary(&verdict),
        [(Some(1), Reason::StateNotStored, Action::Repair)]
    );
}

/// What the ledger knows of a `previous_response_id`: a response of `provider`, stored or not.
fn previous(provider: &str, not_stored: bool) -> Provenance {
    Provenance {
        previous: Some(crate::gate::ChainFacts {
            owner: Owner {
                provider: provider.to_owned(),
                model: Some("m".to_owned()),
            },
            call_ids: Vec::new(),
            complete: true,
            team: None,
            not_stored,
        }),
        ..Provenance::default()
    }
}

#[test]
fn a_previous_response_not_stored_is_refused_naming_the_remedies_whatever_the_repair() {
    let body =
        r#"{"model":"m","previous_response_id":"resp_unstored","input":[{"role":"user","content":"hi"}]}"#;
    let request = parse(body.as_bytes()).unwrap();
    let provider = openai();
    for (set, expected) in [
        (None, Action::Reject),
        (Some(Action::Strip), Action::Reject),
        (Some(Action::Monitor), Action::Monitor),
    ] {
        let mut policy = Policy::default();
        if let Some(action) = set {
            policy.set_action(Reason::StateNotStored, action);
        }
        let provenance = previous("openai", true);
        for carry_sessions in [false, true] {
            let target = Target::new(&provider, &policy)
                .with_provenance(&provenance)
                .with_carry_sessions(carry_sessions);
            let verdict = Gate::default().judge(&request, &target).unwrap();
            assert_eq!(summary(&verdict), [(None, Reason::StateNotStored, expected)]);
            let violation = &verdict.violations[0];
            assert_eq!(violation.param, "previous_response_id");
            assert_eq!(violation.id.as_deref(), Some("resp_unstored"));
            let message = &violation.message;
            assert!(
                message.contains("Previous response with id 'resp_unstored' not found"),
                "{message}"
            );
            assert!(message.contains("store: true"), "{message}");
            assert!(message.contains("input items"), "{message}");
            assert_eq!(
                message.contains("carry_sessions = true"),
                !carry_sessions,
                "{message}"
            );
        }
    }
}

#[test]
fn a_previous_response_stored_or_of_another_provider_is_not_judged_by_state_not_stored() {
    let body =
        r#"{"model":"m","previous_response_id":"resp_unstored","input":[{"role":"user","content":"hi"}]}"#;
    let stored = judge(body, &previous("openai", false), &Policy::default(), None);
    assert!(stored.violations.is_empty(), "{stored:?}");
    // Another provider's: `foreign_previous_response` says it.
    let foreign = judge(body, &previous("bedrock", true), &Policy::default(), None);
    assert_eq!(
        summary(&foreign),
        [(None, Reason::ForeignPreviousResponse, Action::Reject)]
    );
}
