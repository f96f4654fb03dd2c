//! Tests of the tap over whole answers: JSON, event streams, chunking and limits.

use proptest::prelude::*;

use super::{item_record, AnswerKind, Ended, ResponseRecord, Tap, TapLimits, Tapped, MAX_ID_BYTES};
use crate::gate::{Gate, OutputCall, ProviderProfile, Reason, Target};
use crate::json::{Field, JsonKind, Text};

const CALL: &str = r#"{"type":"function_call","id":"fc_1","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}","status":"completed"}"#;
const MESSAGE: &str = r#"{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Done.","annotations":[]}]}"#;
const REASONING: &str = r#"{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAAAB"}"#;

fn json_answer() -> String {
    format!(
        r#"{{"id":"resp_1","object":"response","model":"gpt-5","status":"completed","output":[{REASONING},{CALL},{MESSAGE}]}}"#
    )
}

/// The same answer as a stream, with comments, `event:` lines and deltas.
fn sse_answer(line_end: &str) -> String {
    let head = r#"{"id":"resp_1","object":"response","model":"gpt-5","status":"in_progress","output":[]}"#;
    let events = [
        format!(r#"{{"type":"response.created","sequence_number":0,"response":{head}}}"#),
        format!(r#"{{"type":"response.in_progress","sequence_number":1,"response":{head}}}"#),
        format!(r#"{{"type":"response.output_item.added","output_index":0,"item":{REASONING}}}"#),
        format!(r#"{{"type":"response.output_item.done","output_index":0,"item":{REASONING}}}"#),
        r#"{"type":"response.function_call_arguments.delta","item_id":"fc_1","delta":"{\"ci"}"#.to_owned(),
        format!(r#"{{"type":"response.output_item.done","output_index":1,"item":{CALL}}}"#),
        format!(r#"{{"type":"response.output_item.done","output_index":2,"item":{MESSAGE}}}"#),
        format!(
            r#"{{"type":"response.completed","response":{{"id":"resp_1","model":"gpt-5","status":"completed","output":[{REASONING},{CALL},{MESSAGE}]}}}}"#
        ),
    ];
    let mut stream = format!(": keep-alive{line_end}{line_end}");
    for data in events {
        let name = data.split('"').nth(3).unwrap().to_owned();
        stream.push_str(&format!(
            "event: {name}{line_end}data: {data}{line_end}{line_end}"
        ));
    }
    stream
}

fn expected() -> ResponseRecord {
    let item = |json: &str| {
        let raw: Box<serde_json::value::RawValue> = serde_json::from_str(json).unwrap();
        item_record(&raw).unwrap()
    };
    ResponseRecord {
        id: "resp_1".to_owned(),
        model: Some("gpt-5".to_owned()),
        items: vec![item(REASONING), item(CALL), item(MESSAGE)],
    }
}

fn tap(kind: AnswerKind, chunks: &[&[u8]]) -> Option<ResponseRecord> {
    tap_with(kind, TapLimits::default(), chunks)
}

fn tap_with(kind: AnswerKind, limits: TapLimits, chunks: &[&[u8]]) -> Option<ResponseRecord> {
    let mut tap = Tap::new(kind, limits);
    for chunk in chunks {
        tap.feed(chunk);
    }
    tap.finish()
}

fn sse(stream: &str) -> Option<ResponseRecord> {
    tap(AnswerKind::EventStream, &[stream.as_bytes()])
}

/// What the tap leaves to record of `chunks`.
fn ended(kind: AnswerKind, limits: TapLimits, chunks: &[&[u8]]) -> Ended {
    let mut tap = Tap::new(kind, limits);
    for chunk in chunks {
        tap.feed(chunk);
    }
    tap.end()
}

fn ended_sse(stream: &str) -> Ended {
    ended(
        AnswerKind::EventStream,
        TapLimits::default(),
        &[stream.as_bytes()],
    )
}

fn ended_json(answer: &str) -> Ended {
    ended(AnswerKind::Json, TapLimits::default(), &[answer.as_bytes()])
}

/// The id alone, and the model.
fn id_only(id: &str, model: Option<&str>) -> Ended {
    Ended::IdOnly {
        id: id.to_owned(),
        model: model.map(str::to_owned),
        not_stored: false,
    }
}

/// The items of `ended`, and whether it completed.
fn items_of(ended: Ended) -> (ResponseRecord, bool) {
    let tapped = ended.items().expect("its items are recorded");
    (tapped.record, tapped.complete)
}

#[test]
fn content_types_name_the_kind() {
    assert_eq!(
        AnswerKind::from_content_type("application/json"),
        Some(AnswerKind::Json)
    );
    assert_eq!(
        AnswerKind::from_content_type("Application/JSON; charset=utf-8"),
        Some(AnswerKind::Json)
    );
    assert_eq!(
        AnswerKind::from_content_type(" text/event-stream ;charset=utf-8"),
        Some(AnswerKind::EventStream)
    );
    assert_eq!(AnswerKind::from_content_type("text/plain"), None);
    assert_eq!(AnswerKind::from_content_type(""), None);
}

#[test]
fn a_json_answer_is_recorded() {
    let record = tap(AnswerKind::Json, &[json_answer().as_bytes()]).unwrap();
    assert_eq!(record, expected());
    assert_eq!(record.items[1].call_id.as_deref(), Some("call_1"));
    assert!(record.items[0].has_encrypted_content);
}

#[test]
fn a_json_answer_in_chunks_is_recorded() {
    let answer = json_answer();
    let chunks: Vec<&[u8]> = answer.as_bytes().chunks(7).collect();
    assert_eq!(tap(AnswerKind::Json, &chunks), Some(expected()));
}

#[test]
fn json_answers_whose_items_cannot_be_read_record_their_id_alone() {
    let answer = json_answer();
    for status in ["queued", "in_progress", "requires_action"] {
        let unfinished = answer.replace(
            r#""status":"completed","output""#,
            &format!(r#""status":"{status}","output""#),
        );
        assert_eq!(tap(AnswerKind::Json, &[unfinished.as_bytes()]), None);
        assert_eq!(
            ended_json(&unfinished),
            id_only("resp_1", Some("gpt-5")),
            "{status}"
        );
    }
    assert_eq!(
        ended_json(r#"{"id":"resp_1","output":[1]}"#),
        id_only("resp_1", None)
    );
    assert_eq!(
        ended_json(r#"{"id":"resp_1","status":"queued"}"#),
        id_only("resp_1", None)
    );
    // Cut short: the id read before the cut.
    assert_eq!(
        ended_json(r#"{"id":"resp_1","output":[]"#),
        id_only("resp_1", None)
    );
    assert_eq!(
        ended_json(&answer[..answer.len() / 2]),
        id_only("resp_1", Some("gpt-5"))
    );
    // A model not to record is not kept with the id.
    let long_model = answer.replace(
        r#""model":"gpt-5""#,
        &format!(r#""model":"{}""#, "m".repeat(MAX_ID_BYTES + 1)),
    );
    assert_eq!(ended_json(&long_model), id_only("resp_1", None));
    // No id to record: nothing.
    assert_eq!(ended_json(r#"{"error":{"message":"no"}}"#), Ended::Nothing);
    assert_eq!(ended_json(r#"{"id":"","output":[]}"#), Ended::Nothing);
    assert_eq!(ended_json(r#"{"id":7,"output":[]}"#), Ended::Nothing);
    assert_eq!(ended_json(r#"[{"id":"resp_1"}]"#), Ended::Nothing);
    assert_eq!(ended_json(r#"{"output":[],"status":"failed"}"#), Ended::Nothing);
}

#[test]
fn json_answers_that_did_not_complete_record_the_items_they_have() {
    let answer = json_answer();
    for status in ["incomplete", "failed", "cancelled"] {
        let partial = answer.replace(
            r#""status":"completed","output""#,
            &format!(r#""status":"{status}","output""#),
        );
        // Every item, with the digests a completed answer's have, but not complete: the
        // calls of its chain are not judged on it.
        assert_eq!(items_of(ended_json(&partial)), (expected(), false), "{status}");
        let limits = TapLimits {
            max_json_bytes: 50,
            ..TapLimits::default()
        };
        assert_eq!(
            ended(AnswerKind::Json, limits, &[partial.as_bytes()]),
            ended_json(&partial),
            "{status}, read as it streams"
        );
        // With no item: its id alone.
        let empty = format!(r#"{{"id":"resp_1","status":"{status}","output":[null]}}"#);
        assert_eq!(ended_json(&empty), id_only("resp_1", None), "{status}");
    }
    assert_eq!(items_of(ended_json(&answer)), (expected(), true));
    // A completed answer with no item is recorded whole.
    let (record, complete) = items_of(ended_json(r#"{"id":"resp_1","status":"completed","output":[]}"#));
    assert!(complete && record.items.is_empty());
}

#[test]
fn answers_that_are_not_utf8_record_nothing() {
    // An invalid byte inside a member the tap skips still makes the answer malformed.
    let spoil = |answer: String| {
        let mut bytes = answer.into_bytes();
        let at = bytes.windows(9).rposition(|w| w == b"\"object\":").unwrap();
        bytes.insert(at + 1, 0xff);
        bytes
    };
    assert!(tap(AnswerKind::Json, &[json_answer().as_bytes()]).is_some());
    assert_eq!(tap(AnswerKind::Json, &[&spoil(json_answer())]), None);
    assert!(tap(AnswerKind::EventStream, &[sse_answer("\n").as_bytes()]).is_some());
    assert_eq!(tap(AnswerKind::EventStream, &[&spoil(sse_answer("\n"))]), None);
}

#[test]
fn a_compact_resource_without_status_is_recorded() {
    let answer = br#"{"id":"cmp_r1","object":"response.compaction","output":[{"type":"compaction","id":"cmp_1","encrypted_content":"e"},null],"created_at":1}"#;
    let record = tap(AnswerKind::Json, &[answer]).unwrap();
    assert_eq!(record.model, None);
    assert_eq!(record.items.len(), 1);
    assert!(record.items[0].has_encrypted_content);
}

#[test]
fn a_json_answer_over_its_limit_is_read_as_it_streams() {
    let answer = json_answer();
    let limits = TapLimits {
        max_json_bytes: 100,
        ..TapLimits::default()
    };
    let largest_item = 300;
    let mut tap = Tap::new(AnswerKind::Json, limits);
    for chunk in answer.as_bytes().chunks(30) {
        tap.feed(chunk);
        assert!(tap.held_bytes() <= largest_item, "{}", tap.held_bytes());
    }
    assert!(tap.is_recording() && !tap.too_large());
    let whole = Tap::new(AnswerKind::Json, TapLimits::default()).finish_whole(answer.as_bytes());
    assert_eq!(tap.finish(), whole.map(|tapped| tapped.record));

    // An item over its own cap records nothing, and the tap says a cap was passed.
    let limits = TapLimits {
        max_item_bytes: 20,
        ..limits
    };
    let mut tap = Tap::new(AnswerKind::Json, limits);
    for chunk in answer.as_bytes().chunks(30) {
        tap.feed(chunk);
    }
    assert!(!tap.is_recording() && tap.too_large());
    assert_eq!(tap.held_bytes(), 0);
    assert_eq!(tap.finish(), None);
}

#[test]
fn an_answer_given_whole_is_recorded_as_one_fed_in_chunks() {
    let answer = json_answer();
    let queued = answer.replace(r#""status":"completed""#, r#""status":"queued""#);
    let stream = sse_answer("\n");
    let cases: [(AnswerKind, &[u8]); 5] = [
        (AnswerKind::Json, answer.as_bytes()),
        (AnswerKind::Json, queued.as_bytes()),
        (AnswerKind::Json, br#"{"id":"resp_1","output":[1]}"#),
        (AnswerKind::Json, b"not json"),
        (AnswerKind::EventStream, stream.as_bytes()),
    ];
    for (kind, body) in cases {
        for (calls, items) in [(false, false), (true, true)] {
            let fed = tap_kept(kind, TapLimits::default(), calls, items, &[body]);
            let whole = Tap::new(kind, TapLimits::default())
                .keep_calls(calls)
                .keep_items(items)
                .finish_whole(body);
            assert_eq!(whole, fed, "{}", String::from_utf8_lossy(body));
        }
    }
    assert!(Tap::new(AnswerKind::Json, TapLimits::default())
        .finish_whole(answer.as_bytes())
        .is_some());
    let small = TapLimits {
        max_json_bytes: answer.len() - 1,
        ..TapLimits::default()
    };
    assert_eq!(
        Tap::new(AnswerKind::Json, small).finish_whole(answer.as_bytes()),
        Tap::new(AnswerKind::Json, TapLimits::default()).finish_whole(answer.as_bytes()),
        "an answer over the whole-body cap is read as it streams"
    );
}

#[test]
fn an_event_stream_gives_the_same_record_as_json() {
    assert_eq!(sse(&sse_answer("\n")), Some(expected()));
}

#[test]
fn every_split_of_the_stream_gives_the_same_record() {
    let stream = sse_answer("\n");
    let bytes = stream.as_bytes();
    for cut in 0..=bytes.len() {
        let (first, second) = bytes.split_at(cut);
        assert_eq!(
            tap(AnswerKind::EventStream, &[first, second]),
            Some(expected()),
            "cut at {cut}"
        );
    }
}

#[test]
fn crlf_and_cr_line_ends_are_read() {
    assert_eq!(sse(&sse_answer("\r\n")), Some(expected()));
    assert_eq!(sse(&sse_answer("\r")), Some(expected()));
    let stream = sse_answer("\r\n");
    let bytes = stream.as_bytes();
    for cut in 0..=bytes.len() {
        let (first, second) = bytes.split_at(cut);
        assert_eq!(
            tap(AnswerKind::EventStream, &[first, second]),
            Some(expected()),
            "cut at {cut}"
        );
    }
}

#[test]
fn a_stream_cut_before_completion_records_the_items_read_whole_as_not_completed() {
    let stream = sse_answer("\n");
    let completed = stream.find("event: response.completed").unwrap();
    // Cut inside the completed event, just before its blank line, and before it: the three
    // items ended, the response did not (as far as the stream said).
    for cut in [completed + 40, stream.len() - 1, completed] {
        let (record, complete) = items_of(ended_sse(&stream[..cut]));
        assert_eq!((record, complete), (expected(), false), "cut at {cut}");
    }
    // Cut inside the second item's event: the first one alone.
    let second = stream.find("event: response.output_item.done").unwrap();
    let third = stream[second + 1..]
        .find("event: response.output_item.done")
        .unwrap()
        + second
        + 1;
    let (record, complete) = items_of(ended_sse(&stream[..third + 30]));
    assert_eq!(record.items, expected().items[..1]);
    assert!(!complete);
    // Cut after `response.created`, before any item ended: its id alone.
    let added = stream.find("event: response.output_item.added").unwrap();
    assert_eq!(ended_sse(&stream[..added]), id_only("resp_1", Some("gpt-5")));
    // Cut before any id: nothing.
    assert_eq!(ended_sse(&stream[..30]), Ended::Nothing);
    assert_eq!(ended_sse(""), Ended::Nothing);
}

#[test]
fn a_stream_that_ends_incomplete_failed_or_cancelled_records_what_it_delivered() {
    let stream = sse_answer("\n");
    let completed = stream.find("event: response.completed").unwrap();
    let before = &stream[..completed];
    let terminal = |data: &str| format!("{before}data: {data}\n\n");
    let endings = [
        r#"{"type":"response.failed","response":{"id":"resp_1","status":"failed","error":{"code":"server_error"}}}"#,
        r#"{"type":"response.incomplete","response":{"id":"resp_1","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"}}}"#,
        r#"{"type":"response.cancelled","response":{"id":"resp_1","status":"cancelled"}}"#,
        r#"{"type":"response.completed","response":{"id":"resp_1","status":"cancelled"}}"#,
        r#"{"type":"response.incomplete"}"#,
        r#"{"type":"error","code":"server_error","message":"x"}"#,
    ];
    for data in endings {
        let stream = terminal(data);
        let mut tap = Tap::new(AnswerKind::EventStream, TapLimits::default());
        tap.feed(stream.as_bytes());
        assert!(tap.has_ended(), "{data}");
        // Its items are those of the completed stream, digests included: replaying them is
        // no tampering.
        assert_eq!(items_of(tap.end()), (expected(), false), "{data}");
        // What follows the terminal event is not read.
        let after = format!("{stream}data: {{\"type\":\"response.output_item.done\",\"item\":5}}\n\n");
        assert_eq!(items_of(ended_sse(&after)), (expected(), false), "{data}");
    }
    // Failed before any item ended: its id alone.
    let head = r#"{"id":"resp_2","model":"gpt-5","status":"in_progress"}"#;
    let failed = format!(
        "data: {{\"type\":\"response.created\",\"response\":{head}}}\n\n\
         data: {{\"type\":\"response.failed\",\"response\":{{\"id\":\"resp_2\",\"status\":\"failed\"}}}}\n\n"
    );
    assert_eq!(ended_sse(&failed), id_only("resp_2", Some("gpt-5")));
    // A failure naming another response names no one response.
    let other = failed.replace(
        r#"{"id":"resp_2","status":"failed"}"#,
        r#"{"id":"resp_3","status":"failed"}"#,
    );
    assert_ne!(other, failed);
    assert_eq!(ended_sse(&other), Ended::Nothing);
    // An error with no response id read before: nothing.
    assert_eq!(
        ended_sse("data: {\"type\":\"error\",\"code\":\"x\"}\n\n"),
        Ended::Nothing
    );
}

#[test]
fn a_stream_whose_rest_cannot_be_read_records_its_id_alone() {
    let stream = sse_answer("\n");
    let completed = stream.find("event: response.completed").unwrap();
    let (before, after) = stream.split_at(completed);
    for bad in [
        "data: {\"type\":\"response.output_item.done\",\n\n",
        "data: {\"type\":\"response.output_item.done\",\"item\":[1]}\n\n",
        "data: {\"type\":\"response.output_item.done\",\"item\":{\"id\":\"no_type\"}}\n\n",
    ] {
        let mut tap = Tap::new(AnswerKind::EventStream, TapLimits::default());
        tap.feed(format!("{before}{bad}{after}").as_bytes());
        assert!(!tap.is_recording() && !tap.too_large() && !tap.has_ended());
        assert_eq!(tap.end(), id_only("resp_1", Some("gpt-5")), "{bad}");
    }
}

#[test]
fn a_completion_without_an_id_records_nothing() {
    assert_eq!(
        sse("data: {\"type\":\"response.completed\",\"response\":{\"model\":\"m\"}}\n\n"),
        None
    );
    assert_eq!(sse("data: {\"type\":\"response.completed\"}\n\n"), None);
}

#[test]
fn malformed_event_data_records_nothing_but_done_is_ignored() {
    let stream = sse_answer("\n");
    let completed = stream.find("event: response.completed").unwrap();
    let (before, after) = stream.split_at(completed);
    let broken = format!("{before}data: {{\"type\":\"response.output_item.done\",\n\n{after}");
    assert_eq!(sse(&broken), None);
    let not_an_item =
        format!("{before}data: {{\"type\":\"response.output_item.done\",\"item\":[1]}}\n\n{after}");
    assert_eq!(sse(&not_an_item), None);
    let done = format!("{stream}data: [DONE]\n\n");
    assert_eq!(sse(&done), Some(expected()));
    let null_item =
        format!("{before}data: {{\"type\":\"response.output_item.done\",\"item\":null}}\n\n{after}");
    assert_eq!(sse(&null_item), Some(expected()));
}

#[test]
fn the_event_name_stands_in_for_a_missing_type() {
    let stream = "event: response.completed\ndata: {\"response\":{\"id\":\"resp_9\"}}\n\n";
    assert_eq!(sse(stream).unwrap().id, "resp_9");
}

#[test]
fn two_response_ids_record_nothing() {
    let stream = sse_answer("\n").replace(
        r#"{"type":"response.completed","response":{"id":"resp_1""#,
        r#"{"type":"response.completed","response":{"id":"resp_2""#,
    );
    assert_eq!(ended_sse(&stream), Ended::Nothing);
    // Nor do two in one JSON answer, whichever a reader would keep.
    let twice = json_answer().replacen(r#""id":"resp_1","#, r#""id":"resp_1","id":"resp_2","#, 1);
    assert_eq!(ended_json(&twice), Ended::Nothing);
    let limits = TapLimits {
        max_json_bytes: 10,
        ..TapLimits::default()
    };
    assert_eq!(
        ended(AnswerKind::Json, limits, &[twice.as_bytes()]),
        Ended::Nothing,
        "read as it streams"
    );
}

#[test]
fn events_after_completion_are_ignored() {
    let stream = format!(
        "{}data: {{\"type\":\"response.failed\"}}\n\ndata: not json\n\n",
        sse_answer("\n")
    );
    assert_eq!(sse(&stream), Some(expected()));
}

#[test]
fn an_over_long_id_records_nothing() {
    let long = "r".repeat(MAX_ID_BYTES + 1);
    let stream = sse_answer("\n").replace("resp_1", &long);
    assert_eq!(sse(&stream), None);
    let answer = json_answer().replace("resp_1", &long);
    assert_eq!(tap(AnswerKind::Json, &[answer.as_bytes()]), None);
    let item_id = sse_answer("\n").replace("fc_1", &long);
    assert_eq!(sse(&item_id), None);
    let fits = sse_answer("\n").replace("resp_1", &"r".repeat(MAX_ID_BYTES));
    assert!(sse(&fits).is_some());
}

#[test]
fn too_many_items_record_nothing() {
    let limits = |max_items| TapLimits {
        max_items,
        ..TapLimits::default()
    };
    let stream = sse_answer("\n");
    assert_eq!(
        tap_with(AnswerKind::EventStream, limits(2), &[stream.as_bytes()]),
        None
    );
    assert_eq!(
        tap_with(AnswerKind::EventStream, limits(3), &[stream.as_bytes()]),
        Some(expected())
    );
    let answer = json_answer();
    assert_eq!(tap_with(AnswerKind::Json, limits(2), &[answer.as_bytes()]), None);
    assert_eq!(
        tap_with(AnswerKind::Json, limits(3), &[answer.as_bytes()]),
        Some(expected())
    );
    // Over the cap, the id alone: of a stream, a JSON answer held whole, one read as it streams.
    let over = [
        ended(AnswerKind::EventStream, limits(2), &[stream.as_bytes()]),
        ended(AnswerKind::Json, limits(2), &[answer.as_bytes()]),
        ended(
            AnswerKind::Json,
            TapLimits {
                max_json_bytes: 10,
                ..limits(2)
            },
            &[answer.as_bytes()],
        ),
    ];
    for ended in over {
        assert_eq!(ended, id_only("resp_1", Some("gpt-5")));
    }
}

#[test]
fn a_huge_event_is_read_without_holding_it() {
    let cap = 4096;
    let limits = TapLimits {
        max_event_bytes: cap,
        ..TapLimits::default()
    };
    let mut tap = Tap::new(AnswerKind::EventStream, limits);
    let stream = sse_answer("\n");
    let completed = stream.find("event: response.completed").unwrap();
    tap.feed(&stream.as_bytes()[..completed]);
    tap.feed(b"data: {\"type\":\"response.output_text.delta\",\"delta\":\"");
    for _ in 0..1000 {
        tap.feed(&[b'a'; 100]);
        assert!(tap.held_bytes() <= cap, "{}", tap.held_bytes());
    }
    // Past the cap, the data passes on: what is held is the event's type.
    assert!(tap.held_bytes() <= 64, "{}", tap.held_bytes());
    tap.feed(b"\"}\n\n");
    tap.feed(&stream.as_bytes()[completed..]);
    assert!(tap.is_recording() && !tap.too_large());
    assert_eq!(tap.finish(), Some(expected()));

    // Many data lines, each small, add up the same way; joined, they are not JSON.
    let mut tap = Tap::new(AnswerKind::EventStream, limits);
    tap.feed(&stream.as_bytes()[..completed]);
    tap.feed(b"data: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n");
    for _ in 0..1000 {
        tap.feed(b"data: xxxxxxxxxxxxxxxxxxxxxxxxx\n");
        assert!(tap.held_bytes() <= cap);
    }
    tap.feed(b"\n");
    tap.feed(&stream.as_bytes()[completed..]);
    assert!(!tap.is_recording() && !tap.too_large());
    assert_eq!(tap.finish(), None);
}

#[test]
fn many_small_data_lines_over_the_cap_give_up() {
    let limits = TapLimits {
        max_event_bytes: 1000,
        ..TapLimits::default()
    };
    let mut tap = Tap::new(AnswerKind::EventStream, limits);
    for _ in 0..100 {
        tap.feed(b"data: 0123456789\n");
        assert!(tap.held_bytes() <= 1000);
    }
    assert!(!tap.is_recording());
}

/// Taps `chunks` keeping calls and items as asked.
fn tap_kept(
    kind: AnswerKind,
    limits: TapLimits,
    calls: bool,
    items: bool,
    chunks: &[&[u8]],
) -> Option<Tapped> {
    let mut tap = Tap::new(kind, limits).keep_calls(calls).keep_items(items);
    for chunk in chunks {
        tap.feed(chunk);
    }
    tap.finish_kept()
}

fn weather_call(index: usize) -> OutputCall {
    OutputCall {
        index,
        call_id: Some("call_1".to_owned()),
        name: Some("get_weather".to_owned()),
        arguments: Field::Str(Text::Borrowed(r#"{"city":"Paris"}"#)),
    }
}

#[test]
fn nothing_is_kept_unless_asked() {
    for (kind, answer) in [
        (AnswerKind::Json, json_answer()),
        (AnswerKind::EventStream, sse_answer("\n")),
    ] {
        let tapped = tap_kept(kind, TapLimits::default(), false, false, &[answer.as_bytes()]).unwrap();
        assert_eq!(tapped.record, expected());
        assert_eq!((tapped.calls, tapped.items), (None, None));
    }
}

#[test]
fn calls_and_item_texts_are_kept_from_json_and_event_streams_alike() {
    for (kind, answer) in [
        (AnswerKind::Json, json_answer()),
        (AnswerKind::EventStream, sse_answer("\n")),
        (AnswerKind::EventStream, sse_answer("\r\n")),
    ] {
        let tapped = tap_kept(kind, TapLimits::default(), true, true, &[answer.as_bytes()]).unwrap();
        assert_eq!(tapped.record, expected(), "{kind:?}");
        assert_eq!(tapped.calls, Some(vec![weather_call(1)]), "{kind:?}");
        assert_eq!(
            tapped.items,
            Some(vec![REASONING.to_owned(), CALL.to_owned(), MESSAGE.to_owned()])
        );
        // Each kind of content is kept only when asked for.
        let calls_only = tap_kept(kind, TapLimits::default(), true, false, &[answer.as_bytes()]).unwrap();
        assert_eq!(
            (calls_only.calls.map(|c| c.len()), calls_only.items),
            (Some(1), None)
        );
        let items_only = tap_kept(kind, TapLimits::default(), false, true, &[answer.as_bytes()]).unwrap();
        assert_eq!(
            (items_only.calls, items_only.items.map(|i| i.len())),
            (None, Some(3))
        );
    }
}

#[test]
fn every_split_of_a_stream_keeps_the_same() {
    let stream = sse_answer("\n");
    let bytes = stream.as_bytes();
    let whole = tap_kept(
        AnswerKind::EventStream,
        TapLimits::default(),
        true,
        true,
        &[bytes],
    );
    for cut in (0..=bytes.len()).step_by(7) {
        let (first, second) = bytes.split_at(cut);
        let split = tap_kept(
            AnswerKind::EventStream,
            TapLimits::default(),
            true,
            true,
            &[first, second],
        );
        assert_eq!(split, whole, "cut at {cut}");
    }
}

#[test]
fn a_call_is_placed_by_its_output_index() {
    // JSON: its place in `output`, a skipped null included.
    let answer = format!(r#"{{"id":"resp_1","status":"completed","output":[null,{MESSAGE},{CALL}]}}"#);
    let tapped = tap_kept(
        AnswerKind::Json,
        TapLimits::default(),
        true,
        true,
        &[answer.as_bytes()],
    )
    .unwrap();
    assert_eq!(tapped.calls, Some(vec![weather_call(2)]));
    assert_eq!(tapped.items.unwrap().len(), 2);
    // Streams: the event's `output_index`, else the item's place among those finished.
    let done = |index: &str, item: &str| {
        format!("data: {{\"type\":\"response.output_item.done\"{index},\"item\":{item}}}\n\n")
    };
    let completed = "data: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\"}}\n\n";
    let stream = format!(
        "{}{}{}{}{completed}",
        done(r#","output_index":5"#, CALL),
        done("", MESSAGE),
        done("", CALL),
        done(r#","output_index":"x""#, CALL),
    );
    let tapped = tap_kept(
        AnswerKind::EventStream,
        TapLimits::default(),
        true,
        false,
        &[stream.as_bytes()],
    )
    .unwrap();
    let places: Vec<usize> = tapped.calls.unwrap().iter().map(|c| c.index).collect();
    assert_eq!(places, [5, 2, 3]);
}

#[test]
fn a_call_keeps_what_its_members_were() {
    let odd = r#"{"type":"function_call","call_id":7,"arguments":{"city":"Paris"}}"#;
    let bare = r#"{"type":"function_call"}"#;
    let answer = format!(r#"{{"id":"resp_1","output":[{odd},{bare}]}}"#);
    let tapped = tap_kept(
        AnswerKind::Json,
        TapLimits::default(),
        true,
        false,
        &[answer.as_bytes()],
    );
    // A call_id that is not a string is not an item the ledger records.
    assert_eq!(tapped, None);
    let odd = r#"{"type":"function_call","call_id":"c","arguments":{"city":"Paris"}}"#;
    let answer = format!(r#"{{"id":"resp_1","output":[{odd},{bare}]}}"#);
    let calls = tap_kept(
        AnswerKind::Json,
        TapLimits::default(),
        true,
        false,
        &[answer.as_bytes()],
    )
    .unwrap()
    .calls
    .unwrap();
    assert_eq!(calls[0].arguments, Field::Other(JsonKind::Object));
    assert_eq!(
        (calls[0].name.as_deref(), calls[0].call_id.as_deref()),
        (None, Some("c"))
    );
    assert_eq!(calls[1].arguments, Field::Absent);
}

#[test]
fn kept_content_over_its_cap_is_dropped_but_the_record_is_made() {
    let stream = sse_answer("\n");
    let kept_bytes = REASONING.len() + CALL.len() + MESSAGE.len();
    let limits = |max_json_bytes| TapLimits {
        max_json_bytes,
        ..TapLimits::default()
    };
    let over = tap_kept(
        AnswerKind::EventStream,
        limits(kept_bytes),
        true,
        true,
        &[stream.as_bytes()],
    )
    .unwrap();
    assert_eq!(over.record, expected());
    assert_eq!((over.calls, over.items), (None, None));
    // The call's texts count too.
    let fits = limits(kept_bytes + "call_1get_weather".len() + r#"{"city":"Paris"}"#.len());
    let tapped = tap_kept(AnswerKind::EventStream, fits, true, true, &[stream.as_bytes()]).unwrap();
    assert!(tapped.calls.is_some() && tapped.items.is_some());
    // What is held never passes the event cap plus the kept cap.
    let mut tap = Tap::new(AnswerKind::EventStream, limits(kept_bytes)).keep_items(true);
    for chunk in stream.as_bytes().chunks(16) {
        tap.feed(chunk);
        assert!(tap.held_bytes() <= TapLimits::default().max_event_bytes + kept_bytes);
    }
}

#[test]
fn kept_calls_feed_the_response_side_check() {
    let bad = CALL.replace(r#"{\"city\":\"Paris\"}"#, r#"{\"town\":\"Paris\"}"#);
    let answer = format!(r#"{{"id":"resp_1","status":"completed","output":[{CALL},{MESSAGE},{bad}]}}"#);
    let calls = tap_kept(
        AnswerKind::Json,
        TapLimits::default(),
        true,
        false,
        &[answer.as_bytes()],
    )
    .unwrap()
    .calls
    .unwrap();
    let tools = r#"[{"type":"function","name":"get_weather","parameters":{"type":"object","required":["city"],
        "properties":{"city":{"type":"string"}},"additionalProperties":false}}]"#;
    let openai = ProviderProfile::own_namespace("openai");
    let violations = Gate::default()
        .check_output_calls(tools, &calls, &Target::provider(&openai))
        .unwrap();
    let found: Vec<_> = violations
        .iter()
        .map(|v| (v.index, v.reason, v.param.as_str()))
        .collect();
    assert_eq!(found, [(2, Reason::ArgumentsSchema, "output[2].arguments")]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_chunking_of_a_stream_gives_the_same_record(
        cuts in proptest::collection::vec(0usize..4096, 0..24),
        crlf in any::<bool>(),
    ) {
        let stream = sse_answer(if crlf { "\r\n" } else { "\n" });
        let bytes = stream.as_bytes();
        let mut cuts: Vec<usize> = cuts.into_iter().map(|cut| cut % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let mut chunks = Vec::new();
        let mut start = 0;
        for cut in cuts {
            chunks.push(&bytes[start..cut]);
            start = cut;
        }
        chunks.push(&bytes[start..]);
        prop_assert_eq!(tap(AnswerKind::EventStream, &chunks), Some(expected()));
    }
}

#[test]
fn a_stream_is_complete_once_its_completed_event_has_arrived() {
    let stream = sse_answer("\n");
    let completed_at = stream.find("event: response.completed").unwrap();
    let mut tap = Tap::new(AnswerKind::EventStream, TapLimits::default());
    tap.feed(&stream.as_bytes()[..completed_at]);
    assert!(!tap.has_ended());
    tap.feed(&stream.as_bytes()[completed_at..]);
    assert!(tap.has_ended());
    assert_eq!(tap.finish(), Some(expected()));
    let mut json = Tap::new(AnswerKind::Json, TapLimits::default());
    json.feed(json_answer().as_bytes());
    assert!(!json.has_ended(), "only the byte count tells a JSON answer's end");
}

/// An OpenAI stream whose reasoning item carries `blob` as its `encrypted_content`, with a
/// message of `text`: each item in its own `response.output_item.done`, and both again in
/// `response.completed`. Also the same answer as JSON.
fn large_answer(blob: &str, text: &str) -> (String, String) {
    let reasoning =
        format!(r#"{{"type":"reasoning","id":"rs_big","summary":[],"encrypted_content":"{blob}"}}"#);
    let message = format!(
        r#"{{"type":"message","id":"msg_big","role":"assistant","status":"completed","content":[{{"type":"output_text","text":"{text}","annotations":[]}}]}}"#
    );
    let response = format!(
        r#"{{"id":"resp_big","object":"response","model":"gpt-5","status":"completed","output":[{reasoning},{message}],"usage":{{"output_tokens":9}}}}"#
    );
    let events = [
        r#"{"type":"response.created","response":{"id":"resp_big","model":"gpt-5","status":"in_progress","output":[]}}"#.to_owned(),
        format!(r#"{{"type":"response.output_item.added","output_index":0,"item":{reasoning}}}"#),
        format!(r#"{{"type":"response.output_item.done","output_index":0,"item":{reasoning}}}"#),
        format!(r#"{{"type":"response.output_item.done","output_index":1,"item":{message}}}"#),
        format!(r#"{{"type":"response.completed","response":{response}}}"#),
    ];
    let stream = events
        .iter()
        .map(|data| format!("event: {}\ndata: {data}\n\n", data.split('"').nth(3).unwrap()))
        .collect();
    (stream, response)
}

#[test]
fn a_stream_of_any_size_is_recorded_as_it_streams() {
    let (stream, json) = large_answer(&"A".repeat(10 << 20), &"b".repeat(2 << 20));
    let completed = stream.rfind("event: response.completed").unwrap();
    assert!(stream.len() - completed > 12 << 20);
    let mut tap = Tap::new(AnswerKind::EventStream, TapLimits::default());
    let (mut max_held, mut max_held_completing) = (0, 0);
    for (at, chunk) in (0..).step_by(16 << 10).zip(stream.as_bytes().chunks(16 << 10)) {
        tap.feed(chunk);
        max_held = max_held.max(tap.held_bytes());
        // The completed event, once past the 1 MiB an event may hold whole.
        if at > completed + (2 << 20) {
            max_held_completing = max_held_completing.max(tap.held_bytes());
        }
    }
    // One item at a time; the completed event's 12 MiB repeat of the output is not held.
    assert!(max_held <= (10 << 20) + 1024, "{max_held}");
    assert!(max_held_completing <= 1024, "{max_held_completing}");
    assert!(tap.has_ended() && !tap.too_large());
    let record = tap.finish().expect("recorded");
    assert_eq!(record.id, "resp_big");
    assert_eq!(record.items[0].id.as_deref(), Some("rs_big"));
    assert!(record.items[0].has_encrypted_content);
    // The same record, digests included, as the JSON answer's and as the stream held whole.
    let whole = TapLimits {
        max_json_bytes: 64 << 20,
        max_event_bytes: 64 << 20,
        ..TapLimits::default()
    };
    let json = Tap::new(AnswerKind::Json, whole).finish_whole(json.as_bytes());
    assert_eq!(Some(&record), json.as_ref().map(|tapped| &tapped.record));
    assert_eq!(
        Some(record),
        tap_with(AnswerKind::EventStream, whole, &[stream.as_bytes()])
    );
}

#[test]
fn an_item_over_its_cap_in_a_large_event_is_too_large() {
    let (stream, _) = large_answer(&"A".repeat(100_000), "b");
    let limits = TapLimits {
        max_event_bytes: 10_000,
        max_item_bytes: 50_000,
        ..TapLimits::default()
    };
    let mut tap = Tap::new(AnswerKind::EventStream, limits);
    for chunk in stream.as_bytes().chunks(1000) {
        tap.feed(chunk);
        assert!(tap.held_bytes() <= 50_000 + 1024, "{}", tap.held_bytes());
    }
    assert!(!tap.is_recording() && tap.too_large());
    // Its items are not recorded, its id is: the response stays its team's.
    assert_eq!(
        (tap.held_bytes(), tap.end()),
        (0, id_only("resp_big", Some("gpt-5")))
    );

    // An item in an event whose item is not read is skipped, whatever its size.
    let added = stream.replace("response.output_item.done", "response.output_item.other");
    let mut tap = Tap::new(AnswerKind::EventStream, limits);
    for chunk in added.as_bytes().chunks(1000) {
        tap.feed(chunk);
        assert!(tap.held_bytes() <= 10_000 + 1024, "{}", tap.held_bytes());
    }
    assert!(tap.is_recording() && !tap.too_large());
    assert_eq!(tap.finish().map(|record| record.items.len()), Some(0));
}

#[test]
fn an_answer_too_large_to_hold_is_recorded_only_if_all_of_it_is_json() {
    let limits = TapLimits {
        max_json_bytes: 10_000,
        max_event_bytes: 10_000,
        ..TapLimits::default()
    };
    let record = |kind, answer: &[u8]| {
        let mut tap = Tap::new(kind, limits);
        for chunk in answer.chunks(777) {
            tap.feed(chunk);
        }
        tap.finish().map(|record| record.items.len())
    };
    let (stream, json) = large_answer(&"A".repeat(50_000), "b");
    assert_eq!(record(AnswerKind::Json, json.as_bytes()), Some(2));
    assert_eq!(record(AnswerKind::EventStream, stream.as_bytes()), Some(2));
    // Breaks the readers that follow only strings and nesting skip: a broken number, a member
    // name that is not UTF-8, a control character in a string, a form feed after the end.
    let broken: [(&str, &[u8]); 4] = [
        (r#""output_tokens":9"#, br#""output_tokens":9x1"#),
        (r#""usage""#, b"\"us\xffage\""),
        (r#""object""#, b"\"ob\x01ject\""),
        ("}}", b"}}\x0c"),
    ];
    for (from, to) in broken {
        let json = json.as_bytes().to_vec();
        let at = json.len()
            - json
                .windows(from.len())
                .rev()
                .position(|w| w == from.as_bytes())
                .unwrap()
            - from.len();
        let mut changed = json[..at].to_vec();
        changed.extend_from_slice(to);
        changed.extend_from_slice(&json[at + from.len()..]);
        let text = std::str::from_utf8(&changed);
        assert!(text.is_err() || serde_json::from_str::<serde::de::IgnoredAny>(text.unwrap()).is_err());
        assert_eq!(record(AnswerKind::Json, &changed), None, "{from:?}");
        // The same change in the stream's completing event, too large to hold whole.
        let mut events = stream.as_bytes()[..stream.rfind("event: response.completed").unwrap()].to_vec();
        events.extend_from_slice(b"event: response.completed\ndata: ");
        events.extend_from_slice(br#"{"type":"response.completed","response":"#);
        events.extend_from_slice(&changed);
        events.extend_from_slice(b"}\n\n");
        assert_eq!(
            record(AnswerKind::EventStream, &events),
            None,
            "{from:?} in an event"
        );
    }
}

/// Output items for generated streams, and whether the ledger records them.
const STREAM_ITEMS: &[(&str, bool)] = &[
    (CALL, true),
    (MESSAGE, true),
    (REASONING, true),
    (
        r#"{"type":"function_call","call_id":"c\u0031","name":null,"arguments":{"a":1}}"#,
        true,
    ),
    (
        r#"{ "type" : "message" ,	"content" : [ {"type":"output_text","text":"a b\"}"} ] }"#,
        true,
    ),
    (r#"{"type":"compaction","encrypted_content":"e\\\"}"}"#, true),
    (r#"{"type":"message","content":"a","content":"b"}"#, true),
    (r#"{"id":"no_type"}"#, false),
    ("null", true),
    ("5", false),
];

/// How a generated stream is written.
#[derive(Debug, Clone)]
struct Layout {
    /// `type` as the data's last member rather than its first.
    type_last: bool,
    /// Each member on a `data` line of its own.
    split_lines: bool,
    /// An `event:` line naming each event.
    names: bool,
    line_end: &'static str,
    /// How `output_index` is written: `"n"` its number, `""` left out, else this text.
    index: &'static str,
}

impl Layout {
    fn event(&self, kind: &str, members: &[(&str, String)]) -> String {
        let mut fields: Vec<String> = members
            .iter()
            .map(|(name, value)| format!(r#""{name}": {value}"#))
            .collect();
        let kind_field = format!(r#""type":"{kind}""#);
        match self.type_last {
            true => fields.push(kind_field),
            false => fields.insert(0, kind_field),
        }
        let separator = if self.split_lines { ",\n" } else { "," };
        let data = format!("{{{}}}", fields.join(separator));
        self.frame(kind, &data)
    }

    fn frame(&self, kind: &str, data: &str) -> String {
        let end = self.line_end;
        let mut out = String::new();
        if self.names {
            out.push_str(&format!("event: {kind}{end}"));
        }
        for line in data.split('\n') {
            out.push_str(&format!("data: {line}{end}"));
        }
        out.push_str(end);
        out
    }

    fn index(&self, index: usize) -> Vec<(&'static str, String)> {
        match self.index {
            "n" => vec![("output_index", index.to_string())],
            "" => vec![],
            other => vec![("output_index", other.to_owned())],
        }
    }
}

/// A stream of `items`, ending as `ending` says.
fn generated_stream(layout: &Layout, items: &[&str], ending: &str) -> String {
    let head = r#"{"id":"resp_1","object":"response","model":"gpt-5","status":"in_progress","output":[]}"#;
    let mut stream = layout.event("response.created", &[("response", head.to_owned())]);
    stream.push_str(&format!(": keep-alive{}{}", layout.line_end, layout.line_end));
    for (index, item) in items.iter().enumerate() {
        let mut added = layout.index(index);
        added.push(("item", (*item).to_owned()));
        stream.push_str(&layout.event("response.output_item.added", &added));
        stream.push_str(&layout.event(
            "response.output_text.delta",
            &[("delta", r#""a \"quoted\" {piece}""#.to_owned())],
        ));
        let mut done = layout.index(index);
        done.push(("item", (*item).to_owned()));
        if ending == "duplicate" {
            done.push(("item", (*item).to_owned()));
        }
        stream.push_str(&layout.event("response.output_item.done", &done));
    }
    let response = format!(
        r#"{{"id":"resp_1","object":"response","model":"gpt-5-2026","status":"completed","output":[{}],"usage":{{"output_tokens":3}}}}"#,
        items.join(",")
    );
    let completed = layout.event("response.completed", &[("response", response)]);
    match ending {
        "failed" => stream.push_str(&layout.event(
            "response.failed",
            &[("response", r#"{"id":"resp_1","status":"failed"}"#.to_owned())],
        )),
        "cut" => stream.push_str(&completed[..completed.len() - layout.line_end.len()]),
        "unended" => {
            stream.push_str(&layout.frame("x", r#"{"type":"response.output_text.delta","delta":"x""#));
            stream.push_str(&completed);
        }
        "done" => {
            stream.push_str(&completed);
            stream.push_str(&layout.frame("", "[DONE]"));
        }
        _ => stream.push_str(&completed),
    }
    stream
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    /// Events read as they stream, cut anywhere, record what events held whole record: the
    /// same items with the same digests, and the same kept calls and texts.
    #[test]
    fn events_read_as_they_stream_record_what_events_held_whole_record(
        items in proptest::collection::vec(proptest::sample::select(STREAM_ITEMS), 0..5),
        ending in proptest::sample::select(&["completed", "completed", "failed", "cut", "unended", "duplicate", "done"][..]),
        type_last in any::<bool>(),
        split_lines in any::<bool>(),
        names in any::<bool>(),
        line_end in proptest::sample::select(&["\n", "\r\n", "\r"][..]),
        index in proptest::sample::select(&["n", "n", "", "\"x\"", "null"][..]),
        cap in proptest::sample::select(&[0usize, 8, 64, 300][..]),
        calls in any::<bool>(),
        kept_items in any::<bool>(),
        max_items in 1..6usize,
        cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..6),
    ) {
        let layout = Layout { type_last, split_lines, names, line_end, index };
        let texts: Vec<&str> = items.iter().map(|(text, _)| *text).collect();
        let stream = generated_stream(&layout, &texts, ending);
        let bytes = stream.as_bytes();
        let limits = TapLimits { max_items, ..TapLimits::default() };
        let whole = tap_kept(AnswerKind::EventStream, limits, calls, kept_items, &[bytes]);
        let mut cuts: Vec<usize> = cuts.iter().map(|cut| cut.index(bytes.len() + 1)).collect();
        cuts.push(0);
        cuts.push(bytes.len());
        cuts.sort_unstable();
        let chunks: Vec<&[u8]> = cuts.windows(2).map(|pair| &bytes[pair[0]..pair[1]]).collect();
        let streamed = TapLimits { max_event_bytes: cap, ..limits };
        let fed = tap_kept(AnswerKind::EventStream, streamed, calls, kept_items, &chunks);
        prop_assert_eq!(&fed, &whole, "{}", stream);
        let ended_whole = ended(AnswerKind::EventStream, limits, &[bytes]);
        let ended_fed = ended(AnswerKind::EventStream, streamed, &chunks);
        prop_assert_eq!(&ended_fed, &ended_whole, "{}", stream);
        // Items are recorded when each could be read: all of a completed stream; of one that
        // failed or was cut, those read whole, when there is one. Otherwise its id alone.
        let read = items.iter().filter(|(text, _)| *text != "null").count();
        let readable = items.iter().all(|(_, ok)| *ok) && read <= max_items;
        let recordable = readable
            && (matches!(ending, "completed" | "done")
                || ending == "duplicate" && items.is_empty()
                || matches!(ending, "failed" | "cut") && read > 0);
        prop_assert_eq!(whole.is_some(), recordable, "{}", stream);
        let complete = matches!(ending, "completed" | "done" | "duplicate");
        prop_assert_eq!(whole.map(|tapped| tapped.complete), recordable.then_some(complete));
        prop_assert_eq!(ended_whole.id(), Some("resp_1"), "{}", stream);
    }
}
