//! The usage read from answers: every reader counts what the provider reported, and nothing
//! that is not a valid usage.

use proptest::prelude::*;

use super::*;
use crate::ledger::{AnswerKind, Tap, TapLimits};

fn usage(input: u64, output: u64, cached_input: u64, reasoning_output: u64) -> AnswerUsage {
    AnswerUsage::Reported(Usage {
        input,
        output,
        cached_input,
        reasoning_output,
    })
}

const FULL: &str = r#"{"input_tokens":120,"input_tokens_details":{"cached_tokens":100},"output_tokens":30,"output_tokens_details":{"reasoning_tokens":20},"total_tokens":150}"#;

#[test]
fn a_usage_object_reads_its_four_counts() {
    assert_eq!(usage_of_text(FULL.as_bytes()), usage(120, 30, 100, 20));
    // Details absent or null, or without their count: none of the part.
    for text in [
        r#"{"input_tokens":5,"output_tokens":6}"#,
        r#"{"input_tokens":5,"output_tokens":6,"input_tokens_details":null,"output_tokens_details":null}"#,
        r#"{"input_tokens":5,"output_tokens":6,"input_tokens_details":{},"output_tokens_details":{"reasoning_tokens":null}}"#,
    ] {
        assert_eq!(usage_of_text(text.as_bytes()), usage(5, 6, 0, 0), "{text}");
    }
    let largest = format!(r#"{{"input_tokens":{MAX_TOKENS},"output_tokens":0}}"#);
    assert_eq!(usage_of_text(largest.as_bytes()), usage(MAX_TOKENS, 0, 0, 0));
}

#[test]
fn bad_usage_is_missing_whole() {
    let over = format!(r#"{{"input_tokens":{},"output_tokens":1}}"#, MAX_TOKENS + 1);
    for text in [
        "null",
        "7",
        r#""usage""#,
        "[1,2]",
        "{}",
        r#"{"input_tokens":5}"#,
        r#"{"output_tokens":5}"#,
        r#"{"input_tokens":-1,"output_tokens":5}"#,
        r#"{"input_tokens":"5","output_tokens":5}"#,
        r#"{"input_tokens":5.5,"output_tokens":5}"#,
        r#"{"input_tokens":5,"output_tokens":1e3}"#,
        r#"{"input_tokens":null,"output_tokens":5}"#,
        r#"{"input_tokens":true,"output_tokens":5}"#,
        r#"{"input_tokens":{},"output_tokens":5}"#,
        r#"{"input_tokens":5,"output_tokens":5,"input_tokens":6}"#,
        r#"{"input_tokens":5,"output_tokens":5,"input_tokens_details":"x"}"#,
        r#"{"input_tokens":5,"output_tokens":5,"input_tokens_details":{"cached_tokens":-2}}"#,
        r#"{"input_tokens":5,"output_tokens":5,"output_tokens_details":{"reasoning_tokens":"3"}}"#,
        r#"{"input_tokens":5,"output_tokens":5,"input_tokens_details":{"cached_tokens":6}}"#,
        r#"{"input_tokens":5,"output_tokens":5,"output_tokens_details":{"reasoning_tokens":6}}"#,
        r#"{"input_tokens":5,"output_tokens":5,"output_tokens_details":{},"output_tokens_details":{}}"#,
        r#"{"input_tokens":5,"output_tokens":5"#,
        &over,
        "not json",
    ] {
        assert_eq!(usage_of_text(text.as_bytes()), AnswerUsage::Missing, "{text}");
    }
}

/// A response object with `usage` (its JSON text) and some output.
fn response(status: &str, usage: &str) -> String {
    format!(
        r#"{{"id":"resp_1","object":"response","model":"gpt-5","status":"{status}","output":[{{"type":"message","id":"msg_1","content":[{{"type":"output_text","text":"hi"}}]}}],"usage":{usage}}}"#
    )
}

/// An event stream of one answer ending with `terminal` (whose response has `usage`).
fn stream(terminal: &str, usage: &str) -> String {
    let created = r#"{"type":"response.created","response":{"id":"resp_1","model":"gpt-5-mini","status":"in_progress","output":[],"usage":null}}"#;
    let delta = r#"{"type":"response.output_text.delta","delta":"hi"}"#;
    let done = r#"{"type":"response.output_item.done","output_index":0,"item":{"type":"message","id":"msg_1","content":[]}}"#;
    let status = if terminal == "response.completed" {
        "completed"
    } else {
        "incomplete"
    };
    let last = format!(
        r#"{{"type":"{terminal}","response":{}}}"#,
        response(status, usage)
    );
    [created, delta, done, &last]
        .iter()
        .zip([
            "response.created",
            "response.output_text.delta",
            "response.output_item.done",
            terminal,
        ])
        .map(|(data, name)| format!("event: {name}\ndata: {data}\n\n"))
        .collect()
}

/// What the light reader and the tap read of `text`, fed in `chunk`-byte pieces.
fn read_both(kind: AnswerKind, text: &[u8], chunk: usize) -> (ReadUsage, ReadUsage) {
    let mut reader = UsageReader::new(kind);
    let mut tap = Tap::new(kind, TapLimits::default());
    for piece in text.chunks(chunk.max(1)) {
        reader.feed(piece);
        tap.feed(piece);
    }
    (reader.end(), tap.end_read().1)
}

#[test]
fn json_answers_and_compact_answers_give_their_usage_and_model() {
    let text = response("completed", FULL);
    for chunk in [1, 7, text.len()] {
        let (light, tapped) = read_both(AnswerKind::Json, text.as_bytes(), chunk);
        assert_eq!(light.usage, usage(120, 30, 100, 20));
        assert_eq!(light.model.as_deref(), Some("gpt-5"));
        assert_eq!(light, tapped);
    }
    // The `CompactResource` of `/responses/compact`: no status, no model.
    let compact = format!(
        r#"{{"id":"cmp_1","object":"response.compaction","created_at":1,"output":[{{"type":"compaction","encrypted_content":"e"}}],"usage":{FULL}}}"#
    );
    let (light, tapped) = read_both(AnswerKind::Json, compact.as_bytes(), 5);
    assert_eq!(
        (light.usage, light.model.as_deref()),
        (usage(120, 30, 100, 20), None)
    );
    assert_eq!(light, tapped);
    // Cut before its end: missing, the model it named kept.
    let cut = &text.as_bytes()[..text.len() - 1];
    let (light, tapped) = read_both(AnswerKind::Json, cut, 9);
    assert_eq!(light.usage, AnswerUsage::Missing);
    assert_eq!(tapped.usage, AnswerUsage::Missing);
}

#[test]
fn a_streams_usage_is_its_first_terminal_events() {
    for terminal in ["response.completed", "response.incomplete", "response.failed"] {
        let text = stream(terminal, FULL);
        for chunk in [1, 13, text.len()] {
            let (light, tapped) = read_both(AnswerKind::EventStream, text.as_bytes(), chunk);
            assert_eq!(light.usage, usage(120, 30, 100, 20), "{terminal}");
            assert_eq!(light.model.as_deref(), Some("gpt-5"), "{terminal}");
            assert_eq!(light, tapped, "{terminal}");
        }
    }
    // A second terminal event counts for nothing.
    let twice = format!(
        "{}{}",
        stream("response.completed", FULL),
        stream("response.completed", r#"{"input_tokens":1,"output_tokens":1}"#)
    );
    let (light, tapped) = read_both(AnswerKind::EventStream, twice.as_bytes(), 64);
    assert_eq!(
        (light.usage, tapped.usage),
        (usage(120, 30, 100, 20), usage(120, 30, 100, 20))
    );
}

#[test]
fn a_stream_without_a_terminal_usage_has_it_missing() {
    let full = stream("response.completed", FULL);
    let cut_at = full.rfind("event: response.completed").unwrap();
    let cases = [
        // Cut before its terminal event, or in its middle.
        full[..cut_at].to_owned(),
        full[..full.len() - 10].to_owned(),
        // A terminal event without usage, or with bad usage.
        stream("response.completed", "null"),
        stream("response.incomplete", r#"{"input_tokens":-3,"output_tokens":1}"#),
        // An error event.
        format!(
            "{}event: error\ndata: {{\"type\":\"error\",\"code\":\"server_error\"}}\n\n",
            &full[..cut_at]
        ),
    ];
    for text in cases {
        let (light, tapped) = read_both(AnswerKind::EventStream, text.as_bytes(), 11);
        assert_eq!(light.usage, AnswerUsage::Missing, "{text}");
        assert_eq!(light, tapped, "{text}");
    }
}

#[test]
fn a_terminal_event_too_large_to_hold_is_read_as_it_streams() {
    let blob = "A".repeat(3 << 20);
    let big = response("completed", FULL).replace(r#""text":"hi""#, &format!(r#""text":"{blob}""#));
    let text = format!(
        "event: response.completed\ndata: {{\"type\":\"response.completed\",\"response\":{big}}}\n\n"
    );
    let (light, tapped) = read_both(AnswerKind::EventStream, text.as_bytes(), 64 << 10);
    assert_eq!(light.usage, usage(120, 30, 100, 20));
    assert_eq!(light, tapped);
}

#[test]
fn the_tap_reads_the_usage_after_giving_up_on_the_items() {
    let full = stream("response.completed", FULL);
    let cut_at = full.rfind("event: response.completed").unwrap();
    // Data that is not JSON makes the tap give up; the terminal event comes in the same chunk.
    let text = format!("{}data: not json\n\n{}", &full[..cut_at], &full[cut_at..]);
    let mut tap = Tap::new(AnswerKind::EventStream, TapLimits::default());
    tap.feed(text.as_bytes());
    assert!(!tap.is_recording());
    let (ended, read) = tap.end_read();
    assert_eq!(ended.id(), Some("resp_1"));
    assert!(ended.items().is_none());
    assert_eq!(read.usage, usage(120, 30, 100, 20));
}

/// A count as a provider may write it, and whether it is one.
fn count() -> impl Strategy<Value = (String, Option<u64>)> {
    prop_oneof![
        (0..=MAX_TOKENS).prop_map(|n| (n.to_string(), Some(n))),
        (0..1000u64).prop_map(|n| (n.to_string(), Some(n))),
        (MAX_TOKENS + 1..=u64::MAX).prop_map(|n| (n.to_string(), None)),
        (i64::MIN..0).prop_map(|n| (n.to_string(), None)),
        (0..1000u64).prop_map(|n| (format!("\"{n}\""), None)),
        (0..1000u64).prop_map(|n| (format!("{n}.5"), None)),
        Just(("null".to_owned(), None)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// A usage is reported exactly when its four counts are valid (the two details may be
    /// `null`) and each part fits its whole; the light reader, the tap and the usage's own
    /// read agree, however the answer is cut.
    #[test]
    fn usage_is_reported_exactly_when_every_count_is_valid(
        input in count(),
        output in count(),
        cached in count(),
        reasoning in count(),
        chunk in 1..200usize,
    ) {
        let text = format!(
            r#"{{"input_tokens":{},"output_tokens":{},"input_tokens_details":{{"cached_tokens":{}}},"output_tokens_details":{{"reasoning_tokens":{}}}}}"#,
            input.0, output.0, cached.0, reasoning.0
        );
        let optional = |(text, count): &(String, Option<u64>)| if text == "null" { Some(0) } else { *count };
        let expected = match (input.1, output.1, optional(&cached), optional(&reasoning)) {
            (Some(input), Some(output), Some(cached), Some(reasoning)) if cached <= input && reasoning <= output => {
                usage(input, output, cached, reasoning)
            }
            _ => AnswerUsage::Missing,
        };
        prop_assert_eq!(usage_of_text(text.as_bytes()), expected);
        let answer = response("completed", &text);
        let (light, tapped) = read_both(AnswerKind::Json, answer.as_bytes(), chunk);
        prop_assert_eq!(light.usage, expected);
        prop_assert_eq!(&light, &tapped);
        let events = stream("response.completed", &text);
        let (light, tapped) = read_both(AnswerKind::EventStream, events.as_bytes(), chunk);
        prop_assert_eq!(light.usage, expected);
        prop_assert_eq!(&light, &tapped);
    }
}
