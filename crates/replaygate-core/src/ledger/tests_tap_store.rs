//! Tests of the tap reading an answer's `store` (docs/reasons.md#state_not_stored): only
//! `store: false` marks a record not stored, on every path an answer is read by.

use super::{AnswerKind, Tap, TapLimits};

const REASONING: &str = r#"{"type":"reasoning","id":"rs_0123456789abcdef","summary":[]}"#;

fn json_answer(store: &str) -> String {
    format!(
        r#"{{"id":"resp_1","object":"response","model":"gpt-5","status":"completed"{store},"output":[{REASONING}]}}"#
    )
}

fn sse_answer(store: &str) -> String {
    let head = format!(r#"{{"id":"resp_1","model":"gpt-5","status":"in_progress"{store},"output":[]}}"#);
    let done =
        format!(r#"{{"id":"resp_1","model":"gpt-5","status":"completed"{store},"output":[{REASONING}]}}"#);
    let events = [
        format!(r#"{{"type":"response.created","response":{head}}}"#),
        format!(r#"{{"type":"response.output_item.done","output_index":0,"item":{REASONING}}}"#),
        format!(r#"{{"type":"response.completed","response":{done}}}"#),
    ];
    events.iter().map(|data| format!("data: {data}\n\n")).collect()
}

/// Whether the tap marks the answer not stored, fed in chunks of `chunk` bytes.
fn not_stored(kind: AnswerKind, limits: TapLimits, answer: &str, chunk: usize) -> bool {
    let mut tap = Tap::new(kind, limits);
    for part in answer.as_bytes().chunks(chunk) {
        tap.feed(part);
    }
    tap.finish_kept().expect("its items are recorded").not_stored
}

/// Every way an answer is read: whole, as it streams (over `max_json_bytes`), as events, and
/// as events too large to hold (their `response` read by its head alone).
fn every_read(store: &str) -> Vec<bool> {
    let small = TapLimits {
        max_json_bytes: 40,
        max_event_bytes: 60,
        ..TapLimits::default()
    };
    vec![
        not_stored(AnswerKind::Json, TapLimits::default(), &json_answer(store), 7),
        not_stored(AnswerKind::Json, small, &json_answer(store), 7),
        not_stored(
            AnswerKind::EventStream,
            TapLimits::default(),
            &sse_answer(store),
            9,
        ),
        not_stored(AnswerKind::EventStream, small, &sse_answer(store), 9),
        Tap::new(AnswerKind::Json, TapLimits::default())
            .finish_whole(json_answer(store).as_bytes())
            .is_some_and(|tapped| tapped.not_stored),
    ]
}

#[test]
fn store_false_marks_the_record_not_stored_on_every_read() {
    for store in [r#","store":false"#, r#","store" : false "#] {
        assert_eq!(every_read(store), [true; 5], "{store}");
    }
}

#[test]
fn store_true_absent_or_odd_reads_as_stored() {
    for store in [
        "",
        r#","store":true"#,
        r#","store":null"#,
        r#","store":"false""#,
        r#","store":0"#,
    ] {
        assert_eq!(every_read(store), [false; 5], "{store}");
    }
}

#[test]
fn a_response_not_stored_that_ended_incomplete_is_recorded_not_stored() {
    let incomplete = |answer: String| {
        answer
            .replace(r#""status":"completed""#, r#""status":"incomplete""#)
            .replace("response.completed", "response.incomplete")
    };
    let store = r#","store":false"#;
    let json = incomplete(json_answer(store));
    let sse = incomplete(sse_answer(store));
    assert!(json.contains("incomplete") && sse.contains("response.incomplete"));
    let kept = |kind, answer: &str| {
        let mut tap = Tap::new(kind, TapLimits::default());
        tap.feed(answer.as_bytes());
        tap.finish_kept().expect("its items are recorded")
    };
    for tapped in [kept(AnswerKind::Json, &json), kept(AnswerKind::EventStream, &sse)] {
        assert!(tapped.not_stored);
        assert!(!tapped.complete);
    }
}

#[test]
fn a_response_not_stored_recorded_by_its_id_alone_keeps_that_it_was_not_stored() {
    use super::Ended;
    // A stream that stopped after `response.created` (a socket closed, a client gone): its id
    // alone is recorded, not stored as its head said.
    for (store, expected) in [(r#","store":false"#, true), ("", false)] {
        let head = format!(r#"{{"id":"resp_1","model":"gpt-5","status":"in_progress"{store},"output":[]}}"#);
        let created = format!("data: {{\"type\":\"response.created\",\"response\":{head}}}\n\n");
        let mut tap = Tap::new(AnswerKind::EventStream, TapLimits::default());
        tap.feed(created.as_bytes());
        match tap.end() {
            Ended::IdOnly { id, not_stored, .. } => {
                assert_eq!((id.as_str(), not_stored), ("resp_1", expected), "{store}")
            }
            other => panic!("{other:?}"),
        }
    }
    // A background response answered `in_progress` in JSON.
    let queued = r#"{"id":"resp_2","object":"response","model":"gpt-5","status":"in_progress","store":false,"output":[]}"#;
    let mut tap = Tap::new(AnswerKind::Json, TapLimits::default());
    tap.feed(queued.as_bytes());
    assert!(matches!(tap.end(), Ended::IdOnly { not_stored: true, .. }));
}
