//! `unknown_state`, judged through the gate as the proxy calls it: each kind of stored state a
//! body can name, unknown (refused for a team), known (allowed), and the rule off (no teams, or
//! `unknown_owner = "allow"`).

use crate::gate::provenance::{item_record_from_value, Owner, StoredItem};
use crate::gate::{
    parse, Action, ChainFacts, ConversationFacts, Gate, LedgerQuery, Policy, Provenance, ProviderProfile,
    Reason, StateAccess, Target, Verdict,
};

fn owner() -> Owner {
    Owner {
        provider: "openai".to_owned(),
        model: Some("m1".to_owned()),
    }
}

/// What the ledger stored of the output item `json`, for team alpha.
fn stored(json: &str) -> StoredItem {
    StoredItem {
        response_id: "resp_a".to_owned(),
        owner: owner(),
        record: item_record_from_value(&serde_json::from_str(json).unwrap()).unwrap(),
        expires_unix: u64::MAX,
        team: Some("alpha".to_owned()),
        not_stored: false,
    }
}

fn alpha() -> StateAccess {
    StateAccess::new("alpha", [])
}

/// The verdict for team alpha, with unknown state denied or not.
fn judge(body: &str, provenance: &Provenance, access: Option<&StateAccess>, deny: bool) -> Verdict {
    judge_with(body, provenance, access, deny, &Policy::default())
}

fn judge_with(
    body: &str,
    provenance: &Provenance,
    access: Option<&StateAccess>,
    deny: bool,
    policy: &Policy,
) -> Verdict {
    let request = parse(body.as_bytes()).unwrap();
    let openai = ProviderProfile::own_namespace("openai");
    let mut target = Target::new(&openai, policy)
        .with_provenance(provenance)
        .with_unknown_state_denied(deny);
    if let Some(access) = access {
        target = target.with_access(access);
    }
    Gate::default().judge(&request, &target).unwrap()
}

fn unknown(verdict: &Verdict) -> Vec<(Option<usize>, Action, String)> {
    verdict
        .violations
        .iter()
        .filter(|v| v.reason == Reason::UnknownState)
        .map(|v| (v.index, v.action, v.param.clone()))
        .collect()
}

const REASONING_BLOB: &str =
    r#"{"type":"reasoning","id":"rs_a_0123456789ab","summary":[],"encrypted_content":"gAAA"}"#;
const REASONING_BY_ID: &str = r#"{"type":"reasoning","id":"rs_b_0123456789ab","summary":[]}"#;
const COMPACTION: &str = r#"{"type":"compaction","encrypted_content":"cAAA"}"#;
const REFERENCE: &str = r#"{"type":"item_reference","id":"msg_a_0123456789ab"}"#;
const TYPELESS_REFERENCE: &str = r#"{"id":"msg_a_0123456789ab"}"#;
const MESSAGE: &str = r#"{"type":"message","id":"msg_a_0123456789ab","role":"assistant","status":"completed","content":[{"type":"output_text","text":"hello","annotations":[]}]}"#;

fn body_of(items: &[&str]) -> String {
    format!(
        r#"{{"model":"m1","input":[{},{{"role":"user","content":"go on"}}]}}"#,
        items.join(",")
    )
}

#[test]
fn every_kind_of_named_state_the_ledger_does_not_know_is_refused_for_a_team() {
    let empty = Provenance::default();
    for (item, param) in [
        (REASONING_BLOB, "input[0].encrypted_content"),
        (REASONING_BY_ID, "input[0].id"),
        (COMPACTION, "input[0].encrypted_content"),
        (REFERENCE, "input[0].id"),
        (TYPELESS_REFERENCE, "input[0].id"),
    ] {
        let verdict = judge(&body_of(&[item]), &empty, Some(&alpha()), true);
        assert_eq!(
            unknown(&verdict),
            [(Some(0), Action::Reject, param.to_owned())],
            "{item}"
        );
        let message = &verdict.violations[0].message;
        assert!(message.contains("unknown_owner = \"allow\""), "{message}");
        assert!(!message.contains("alpha"), "{message}");
    }
    let previous = r#"{"model":"m1","previous_response_id":"resp_x","input":"hi"}"#;
    let verdict = judge(previous, &empty, Some(&alpha()), true);
    assert_eq!(
        unknown(&verdict),
        [(None, Action::Reject, "previous_response_id".to_owned())]
    );
    for conversation in [r#""conv_x""#, r#"{"id":"conv_x"}"#] {
        let body = format!(r#"{{"model":"m1","conversation":{conversation},"input":"hi"}}"#);
        let verdict = judge(&body, &empty, Some(&alpha()), true);
        assert_eq!(
            unknown(&verdict),
            [(None, Action::Reject, "conversation".to_owned())]
        );
    }
}

#[test]
fn state_the_ledger_knows_is_not_unknown() {
    let body = body_of(&[REASONING_BLOB, REASONING_BY_ID, COMPACTION, REFERENCE]);
    let request = parse(body.as_bytes()).unwrap();
    let query = LedgerQuery::of(&request);
    let mut provenance = Provenance::default();
    for digest in &query.digests {
        provenance.encrypted.insert(*digest, stored(REASONING_BLOB));
    }
    provenance
        .items
        .insert("rs_b_0123456789ab".to_owned(), stored(REASONING_BY_ID));
    provenance
        .items
        .insert("msg_a_0123456789ab".to_owned(), stored(MESSAGE));
    assert_eq!(unknown(&judge(&body, &provenance, Some(&alpha()), true)), []);

    let previous = r#"{"model":"m1","previous_response_id":"resp_a","conversation":"conv_a","input":"hi"}"#;
    let provenance = Provenance {
        previous: Some(ChainFacts {
            owner: owner(),
            call_ids: Vec::new(),
            complete: true,
            team: Some("alpha".to_owned()),
            not_stored: false,
        }),
        conversation: Some(ConversationFacts {
            team: Some("alpha".to_owned()),
        }),
        ..Provenance::default()
    };
    assert_eq!(unknown(&judge(previous, &provenance, Some(&alpha()), true)), []);
}

#[test]
fn an_id_too_short_to_name_one_item_is_known_when_the_ledger_holds_any_record_of_it() {
    let body = body_of(&[r#"{"type":"reasoning","id":"rs_0","summary":[]}"#]);
    let mut provenance = Provenance::default();
    assert_eq!(unknown(&judge(&body, &provenance, Some(&alpha()), true)).len(), 1);
    provenance.short_ids.insert("rs_0".to_owned(), u64::MAX);
    assert_eq!(unknown(&judge(&body, &provenance, Some(&alpha()), true)), []);
}

#[test]
fn items_that_name_no_stored_state_are_never_unknown() {
    let body = body_of(&[
        MESSAGE,
        r#"{"type":"reasoning","summary":[]}"#,
        r#"{"type":"reasoning","id":"rs_c_0123456789ab","summary":[],"encrypted_content":null}"#,
        r#"{"type":"function_call","id":"fc_0123456789abcdef","call_id":"c","name":"f","arguments":"{}"}"#,
        r#"{"type":"function_call_output","call_id":"c","output":"1"}"#,
    ]);
    let verdict = judge(&body, &Provenance::default(), Some(&alpha()), true);
    // Only the reasoning item sent by id alone (null content is no content) names state.
    assert_eq!(
        unknown(&verdict),
        [(Some(2), Action::Reject, "input[2].id".to_owned())]
    );
}

#[test]
fn without_teams_or_with_unknown_owner_allowed_nothing_changes() {
    let body = body_of(&[REASONING_BLOB, REFERENCE]);
    let empty = Provenance::default();
    assert_eq!(unknown(&judge(&body, &empty, None, true)), []);
    assert_eq!(unknown(&judge(&body, &empty, Some(&alpha()), false)), []);
}

#[test]
fn monitor_names_unknown_state_without_refusing_and_strip_cuts_only_items() {
    let body = format!(
        r#"{{"model":"m1","previous_response_id":"resp_x","input":[{REFERENCE},{{"role":"user","content":"go on"}}]}}"#
    );
    let empty = Provenance::default();
    let mut policy = Policy::default();
    policy.set_action(Reason::UnknownState, Action::Monitor);
    let verdict = judge_with(&body, &empty, Some(&alpha()), true, &policy);
    assert!(verdict.is_allowed());
    assert_eq!(unknown(&verdict).len(), 2);
    policy.set_action(Reason::UnknownState, Action::Strip);
    let verdict = judge_with(&body, &empty, Some(&alpha()), true, &policy);
    assert_eq!(
        unknown(&verdict),
        [
            (None, Action::Reject, "previous_response_id".to_owned()),
            (Some(0), Action::Strip, "input[0].id".to_owned()),
        ]
    );
}

#[test]
fn state_recorded_for_no_team_before_teams_is_unknown_as_on_the_object_routes() {
    let body = body_of(&[REFERENCE]);
    let mut provenance = Provenance::default();
    let mut anonymous = stored(MESSAGE);
    anonymous.team = None;
    provenance
        .items
        .insert("msg_a_0123456789ab".to_owned(), anonymous);
    assert_eq!(unknown(&judge(&body, &provenance, Some(&alpha()), true)).len(), 1);
    let previous = r#"{"model":"m1","previous_response_id":"resp_a","input":"hi"}"#;
    let provenance = Provenance {
        previous: Some(ChainFacts {
            owner: owner(),
            call_ids: Vec::new(),
            complete: true,
            team: None,
            not_stored: false,
        }),
        ..Provenance::default()
    };
    assert_eq!(
        unknown(&judge(previous, &provenance, Some(&alpha()), true)).len(),
        1
    );
}
