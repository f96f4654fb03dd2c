//! `cross_team_state`, judged through the gate as the proxy calls it: each kind of stored state
//! both ways (the owner's team allowed, another team refused, a granted team allowed).

use crate::gate::provenance::{item_record_from_value, Owner, StoredItem};
use crate::gate::{
    parse, strip, Action, ChainFacts, ConversationFacts, Gate, Policy, Provenance, ProviderProfile, Reason,
    StateAccess, Target, Verdict,
};

fn openai() -> Owner {
    Owner {
        provider: "openai".to_owned(),
        model: Some("m1".to_owned()),
    }
}

/// What the ledger stored of the output item `json`, for `team`.
fn stored(json: &str, team: &str) -> StoredItem {
    StoredItem {
        response_id: "resp_a".to_owned(),
        owner: openai(),
        record: item_record_from_value(&serde_json::from_str(json).unwrap()).unwrap(),
        expires_unix: u64::MAX,
        team: Some(team.to_owned()),
        not_stored: false,
    }
}

fn judge_as(body: &str, provenance: &Provenance, access: &StateAccess, policy: &Policy) -> Verdict {
    let request = parse(body.as_bytes()).unwrap();
    let openai = ProviderProfile::own_namespace("openai");
    let target = Target::new(&openai, policy)
        .with_provenance(provenance)
        .with_access(access);
    Gate::default().judge(&request, &target).unwrap()
}

fn reasons(verdict: &Verdict) -> Vec<(Option<usize>, Reason, Action, String)> {
    verdict
        .violations
        .iter()
        .map(|v| (v.index, v.reason, v.action, v.param.clone()))
        .collect()
}

fn alpha() -> StateAccess {
    StateAccess::new("alpha", [])
}

fn beta() -> StateAccess {
    StateAccess::new("beta", [])
}

/// Beta, granted alpha's state.
fn beta_granted() -> StateAccess {
    StateAccess::new("beta", ["alpha".to_owned()])
}

const REASONING: &str =
    r#"{"type":"reasoning","id":"rs_a_0123456789ab","summary":[],"encrypted_content":"gAAA"}"#;
const MESSAGE: &str = r#"{"type":"message","id":"msg_a_0123456789ab","role":"assistant","status":"completed","content":[{"type":"output_text","text":"hello","annotations":[]}]}"#;

fn alphas_chain() -> Provenance {
    Provenance {
        previous: Some(ChainFacts {
            owner: openai(),
            call_ids: vec!["c1".to_owned()],
            complete: true,
            team: Some("alpha".to_owned()),
            not_stored: false,
        }),
        ..Provenance::default()
    }
}

#[test]
fn a_previous_response_of_another_team_is_refused_and_its_calls_not_paired() {
    let body = r#"{"model":"m1","previous_response_id":"resp_a","input":[{"type":"function_call_output","call_id":"c1","output":"1"}]}"#;
    let provenance = alphas_chain();
    let policy = Policy::default();
    assert!(judge_as(body, &provenance, &alpha(), &policy)
        .violations
        .is_empty());
    assert!(judge_as(body, &provenance, &beta_granted(), &policy)
        .violations
        .is_empty());
    let refused = judge_as(body, &provenance, &beta(), &policy);
    assert_eq!(
        reasons(&refused),
        [(
            None,
            Reason::CrossTeamState,
            Action::Reject,
            "previous_response_id".to_owned()
        )]
    );
    let message = &refused.violations[0].message;
    assert!(
        !message.contains("alpha") && !message.contains("openai"),
        "{message}"
    );
    // `strip`, and monitor mode, cannot let it through: nothing can be cut, and teams stay apart.
    let mut policy = Policy::default();
    policy.set_action(Reason::CrossTeamState, Action::Strip);
    policy.monitor_only = true;
    assert_eq!(
        judge_as(body, &provenance, &beta(), &policy).violations[0].action,
        Action::Reject
    );
}

#[test]
fn a_conversation_of_another_team_is_refused_by_string_or_object() {
    let provenance = Provenance {
        conversation: Some(ConversationFacts {
            team: Some("alpha".to_owned()),
        }),
        ..Provenance::default()
    };
    for body in [
        r#"{"model":"m1","conversation":"conv_a","input":"hi"}"#,
        r#"{"model":"m1","conversation":{"id":"conv_a"},"input":"hi"}"#,
    ] {
        let policy = Policy::default();
        assert!(judge_as(body, &provenance, &alpha(), &policy)
            .violations
            .is_empty());
        assert!(judge_as(body, &provenance, &beta_granted(), &policy)
            .violations
            .is_empty());
        assert_eq!(
            reasons(&judge_as(body, &provenance, &beta(), &policy)),
            [(
                None,
                Reason::CrossTeamState,
                Action::Reject,
                "conversation".to_owned()
            )]
        );
    }
}

#[test]
fn an_item_of_another_team_is_refused_by_id_or_by_blob_and_may_be_stripped() {
    let mut provenance = Provenance::default();
    let reasoning = stored(REASONING, "alpha");
    provenance.encrypted.insert(reasoning.record.digest, reasoning);
    let message = stored(MESSAGE, "alpha");
    provenance.items.insert("msg_a_0123456789ab".to_owned(), message);
    // The blob replayed without its id, and a reference to the message.
    let body = r#"{"model":"m1","input":[
        {"role":"user","content":"hi"},
        {"type":"reasoning","summary":[],"encrypted_content":"gAAA"},
        {"type":"item_reference","id":"msg_a_0123456789ab"},
        {"role":"user","content":"again"}]}"#;
    let policy = Policy::default();
    assert!(judge_as(body, &provenance, &alpha(), &policy)
        .violations
        .is_empty());
    assert!(judge_as(body, &provenance, &beta_granted(), &policy)
        .violations
        .is_empty());
    let refused = judge_as(body, &provenance, &beta(), &policy);
    assert_eq!(
        reasons(&refused),
        [
            (
                Some(1),
                Reason::CrossTeamState,
                Action::Reject,
                "input[1].encrypted_content".to_owned()
            ),
            (
                Some(2),
                Reason::CrossTeamState,
                Action::Reject,
                "input[2]".to_owned()
            ),
        ]
    );
    for violation in &refused.violations {
        assert!(!violation.message.contains("alpha"), "{}", violation.message);
    }
    // `strip` cuts both items out of the bytes forwarded.
    let mut policy = Policy::default();
    policy.set_action(Reason::CrossTeamState, Action::Strip);
    let verdict = judge_as(body, &provenance, &beta(), &policy);
    assert!(verdict.is_allowed());
    let request = parse(body.as_bytes()).unwrap();
    let cut = strip::strip(body.as_bytes(), &request, &verdict)
        .unwrap()
        .unwrap();
    let forwarded: serde_json::Value = serde_json::from_slice(&cut.body).unwrap();
    assert_eq!(forwarded["input"].as_array().unwrap().len(), 2);
}

#[test]
fn without_teams_or_for_records_of_no_team_nothing_is_refused() {
    let body = r#"{"model":"m1","previous_response_id":"resp_a","input":"hi"}"#;
    // No access: no teams configured.
    let request = parse(body.as_bytes()).unwrap();
    let openai = ProviderProfile::own_namespace("openai");
    let provenance = alphas_chain();
    let target = Target::provider(&openai).with_provenance(&provenance);
    assert!(Gate::default()
        .judge(&request, &target)
        .unwrap()
        .violations
        .is_empty());
    // A record of no team (recorded before teams were configured).
    let mut anonymous = alphas_chain();
    anonymous.previous.as_mut().unwrap().team = None;
    assert!(judge_as(body, &anonymous, &beta(), &Policy::default())
        .violations
        .is_empty());
}
