//! Tests of carrying a session: the rewritten body, what each carried item becomes, and
//! `input` in its recorded form.

use proptest::prelude::*;
use serde_json::{json, Map, Value};

use super::carry::{carried_body, input_items, CarriedTurn, CarryError};
use super::{Owner, StoredContent, StoredResponse};
use crate::gate::{parse, Gate, ProviderProfile, Target};

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| (*item).to_owned()).collect()
}

/// `body` carried to `target` with one turn answered by `provider`.
fn carry_one(body: &str, provider: &str, input: &[&str], output: &[&str], target: &str) -> String {
    let (input, output) = (strings(input), strings(output));
    let turn = CarriedTurn {
        provider,
        input: &input,
        output: &output,
    };
    let carried = carried_body(body.as_bytes(), &[turn], target).unwrap();
    String::from_utf8(carried).unwrap()
}

const USER: &str = r#"{"type":"message","role":"user","content":"weather in Paris?"}"#;
const CALL: &str = r#"{"type":"function_call","id":"fc_1","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}","status":"completed"}"#;
const CALL_CARRIED: &str = r#"{"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}","status":"completed"}"#;
const OUTPUT: &str = r#"{"type":"function_call_output","call_id":"call_1","output":"sunny"}"#;

#[test]
fn previous_response_id_gives_way_to_the_chain_before_the_own_items() {
    let body =
        format!(r#"{{"model":"gpt-5","previous_response_id":"resp_1","input":[{OUTPUT}],"stream":true}}"#);
    let carried = carry_one(&body, "bedrock", &[USER], &[CALL], "openai");
    assert_eq!(
        carried,
        format!(r#"{{"model":"gpt-5","input":[{USER},{CALL_CARRIED},{OUTPUT}],"stream":true}}"#)
    );
}

#[test]
fn previous_response_id_first_or_last_goes_with_one_comma() {
    let first = format!(r#"{{"previous_response_id":"resp_1","model":"m","input":[{OUTPUT}]}}"#);
    assert_eq!(
        carry_one(&first, "bedrock", &[USER], &[], "openai"),
        format!(r#"{{"model":"m","input":[{USER},{OUTPUT}]}}"#)
    );
    let last = format!(r#"{{"model":"m","input":[{OUTPUT}],"previous_response_id":"resp_1"}}"#);
    assert_eq!(
        carry_one(&last, "bedrock", &[USER], &[], "openai"),
        format!(r#"{{"model":"m","input":[{USER},{OUTPUT}]}}"#)
    );
    let only = r#"{ "previous_response_id" : "resp_1" }"#;
    assert_eq!(
        carry_one(only, "bedrock", &[USER], &[], "openai"),
        format!(r#"{{"input":[{USER}]  }}"#)
    );
}

#[test]
fn a_body_without_input_or_with_null_input_gets_one() {
    assert_eq!(
        carry_one(
            r#"{"model":"m","previous_response_id":"r"}"#,
            "a",
            &[USER],
            &[],
            "b"
        ),
        format!(r#"{{"model":"m","input":[{USER}]}}"#)
    );
    assert_eq!(
        carry_one(
            r#"{"previous_response_id":"r","model":"m"}"#,
            "a",
            &[USER],
            &[],
            "b"
        ),
        format!(r#"{{"model":"m","input":[{USER}]}}"#)
    );
    assert_eq!(
        carry_one("{}", "a", &[USER], &[], "b"),
        format!(r#"{{"input":[{USER}]}}"#)
    );
    assert_eq!(
        carry_one(
            r#"{"input":null,"previous_response_id":null}"#,
            "a",
            &[USER],
            &[],
            "b"
        ),
        format!(r#"{{"input":[{USER}]}}"#)
    );
    // An empty chain still gives an array.
    assert_eq!(
        carry_one(r#"{"model":"m"}"#, "a", &[], &[], "b"),
        r#"{"model":"m","input":[]}"#
    );
}

#[test]
fn a_string_input_becomes_a_user_message_after_the_chain() {
    let body = r#"{"previous_response_id":"r","input":"and in \"Tokyo\"?\u00e9"}"#;
    assert_eq!(
        carry_one(body, "a", &[USER], &[], "b"),
        format!(
            r#"{{"input":[{USER},{{"type":"message","role":"user","content":"and in \"Tokyo\"?\u00e9"}}]}}"#
        )
    );
    assert_eq!(
        carry_one(body, "a", &[], &[], "b"),
        r#"{"input":[{"type":"message","role":"user","content":"and in \"Tokyo\"?\u00e9"}]}"#
    );
}

#[test]
fn odd_formatting_is_kept_around_the_edits() {
    let body = "{\n  \"model\" : \"m\" ,\n  \"previous_response_id\"\t:\t\"resp_1\" ,\n  \"input\" : [\n    {\"role\":\"user\", \"content\":\"hi\"}\n  ]\n}\n";
    assert_eq!(
        carry_one(body, "a", &[USER], &[], "b"),
        format!(
            "{{\n  \"model\" : \"m\" ,\n  \"input\" : [{USER},\n    {{\"role\":\"user\", \"content\":\"hi\"}}\n  ]\n}}\n"
        )
    );
    // An empty own array keeps its whitespace.
    let empty = "{\"input\": [ \n ], \"previous_response_id\": \"r\"}";
    assert_eq!(
        carry_one(empty, "a", &[USER], &[], "b"),
        format!("{{\"input\": [{USER} \n ]}}")
    );
}

#[test]
fn member_names_written_with_escapes_are_the_members() {
    let body = format!(r#"{{"previous_response\u005fid":"r","in\u0070ut":[{OUTPUT}]}}"#);
    assert_eq!(
        carry_one(&body, "a", &[USER], &[], "b"),
        format!(r#"{{"in\u0070ut":[{USER},{OUTPUT}]}}"#)
    );
    // Nested members of the same names are not touched.
    let nested = r#"{"metadata":{"previous_response_id":"x","input":[1]},"previous_response_id":"r"}"#;
    assert_eq!(
        carry_one(nested, "a", &[], &[], "b"),
        r#"{"metadata":{"previous_response_id":"x","input":[1]},"input":[]}"#
    );
}

#[test]
fn carried_items_lose_their_ids_and_foreign_reasoning() {
    let reasoning =
        r#"{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA","status":"completed"}"#;
    let stored_reasoning =
        r#"{"type":"reasoning","id":"rs_2","summary":[{"type":"summary_text","text":"t"}]}"#;
    let compaction = r#"{"type":"compaction","id":"cmp_1","encrypted_content":"e"}"#;
    let message = r#"{"id":"msg_1","type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Sunny."}]}"#;
    let references = [r#"{"type":"item_reference","id":"msg_0"}"#, r#"{"id":"msg_0"}"#];
    let search = r#"{"type":"web_search_call","id":"ws_1","status":"completed","action":{"type":"search","query":"q"}}"#;
    let output = [reasoning, stored_reasoning, compaction, CALL, message, search];
    let input = [USER, references[0], references[1]];
    let to = |provider: &str| {
        carry_one(
            r#"{"previous_response_id":"r"}"#,
            provider,
            &input,
            &output,
            "openai",
        )
    };
    let message_carried = r#"{"type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Sunny."}]}"#;
    let search_carried =
        r#"{"type":"web_search_call","status":"completed","action":{"type":"search","query":"q"}}"#;
    // From another provider: no reasoning or compaction, no references, no ids.
    assert_eq!(
        to("bedrock"),
        format!(r#"{{"input":[{USER},{CALL_CARRIED},{message_carried},{search_carried}]}}"#)
    );
    // The target's own sealed reasoning and compaction come back, without ids; reasoning
    // without its `status`, and stored-only reasoning (no encrypted_content) not at all.
    assert_eq!(
        to("openai"),
        format!(
            r#"{{"input":[{USER},{{"type":"reasoning","summary":[],"encrypted_content":"gAAA"}},{{"type":"compaction","encrypted_content":"e"}},{CALL_CARRIED},{message_carried},{search_carried}]}}"#
        )
    );
}

#[test]
fn a_chain_is_carried_oldest_turn_first_inputs_before_outputs() {
    let (a_in, a_out) = (strings(&[USER]), strings(&[CALL]));
    let (b_in, b_out) = (
        strings(&[OUTPUT]),
        strings(&[r#"{"type":"message","role":"assistant","content":"It is sunny."}"#]),
    );
    let chain = [
        CarriedTurn {
            provider: "bedrock",
            input: &a_in,
            output: &a_out,
        },
        CarriedTurn {
            provider: "openai",
            input: &b_in,
            output: &b_out,
        },
    ];
    let body = r#"{"previous_response_id":"resp_b","input":"and Tokyo?"}"#;
    let carried = String::from_utf8(carried_body(body.as_bytes(), &chain, "azure").unwrap()).unwrap();
    assert_eq!(
        carried,
        format!(
            r#"{{"input":[{USER},{CALL_CARRIED},{OUTPUT},{},{{"type":"message","role":"user","content":"and Tokyo?"}}]}}"#,
            b_out[0]
        )
    );
}

#[test]
fn a_stored_turn_is_carried_only_with_its_items() {
    let record = super::ResponseRecord {
        id: "resp_1".into(),
        model: None,
        items: Vec::new(),
    };
    let owner = Owner {
        provider: "bedrock".into(),
        model: None,
    };
    let mut stored = StoredResponse::new(record, owner, None, None, 0, 60);
    assert_eq!(CarriedTurn::from_stored(&stored), None);
    stored.content = Some(StoredContent {
        input: strings(&[USER]),
        output: strings(&[CALL]),
    });
    let turn = CarriedTurn::from_stored(&stored).unwrap();
    assert_eq!(
        (turn.provider, turn.input.len(), turn.output.len()),
        ("bedrock", 1, 1)
    );
}

#[test]
fn bodies_the_gate_refuses_and_broken_records_are_errors() {
    let turn = |items: &[String]| -> Result<Vec<u8>, CarryError> {
        let chain = [CarriedTurn {
            provider: "a",
            input: items,
            output: &[],
        }];
        carried_body(br#"{"input":[]}"#, &chain, "b")
    };
    for body in [
        &b"[]"[..],
        b"{",
        b"{\"input\":3}",
        b"{\"input\":[],\"input\":[]}",
        b"{\"Input\":[]}",
    ] {
        let err = carried_body(body, &[], "b").unwrap_err();
        assert!(matches!(err, CarryError::Body(_)), "{err}");
    }
    for item in [
        "[]",
        "{",
        "7",
        r#"{"type":1}"#,
        r#"{"type":"message","type":"reasoning"}"#,
        "{} {}",
    ] {
        let err = turn(&strings(&[USER, item])).unwrap_err();
        assert_eq!(
            err,
            CarryError::StoredItem {
                turn: 0,
                part: "input",
                position: 1
            },
            "{item}"
        );
    }
    // Whitespace around a recorded item is not an error.
    assert!(turn(&strings(&[" \n{\"role\":\"user\",\"content\":\"x\"}\t"])).is_ok());
}

#[test]
fn input_items_is_the_recorded_form_of_input() {
    assert_eq!(
        input_items(br#"{"model":"m","input":"hi \"there\""}"#),
        Some(strings(&[
            r#"{"type":"message","role":"user","content":"hi \"there\""}"#
        ]))
    );
    assert_eq!(
        input_items(b"{\"input\": [ {\"role\":\"user\",\"content\":\"a\"} ,\n{\"id\":\"x\"} ]}"),
        Some(strings(&[r#"{"role":"user","content":"a"}"#, r#"{"id":"x"}"#]))
    );
    assert_eq!(input_items(br#"{"model":"m"}"#), Some(Vec::new()));
    assert_eq!(input_items(br#"{"input":null}"#), Some(Vec::new()));
    assert_eq!(input_items(br#"{"input":[]}"#), Some(Vec::new()));
    for bad in [
        &br#"{"input":3}"#[..],
        br#"{"input":{}}"#,
        br#"{"input":[],"input":[]}"#,
        b"[]",
        b"{",
    ] {
        assert_eq!(input_items(bad), None);
    }
    // What is recorded of a string input is carried as the user message it was.
    let recorded = input_items(br#"{"input":"hi"}"#).unwrap();
    let turn = CarriedTurn {
        provider: "a",
        input: &recorded,
        output: &[],
    };
    let carried = carried_body(br#"{"previous_response_id":"r","input":"again"}"#, &[turn], "b").unwrap();
    assert_eq!(
        carried,
        br#"{"input":[{"type":"message","role":"user","content":"hi"},{"type":"message","role":"user","content":"again"}]}"#
    );
}

#[test]
fn a_tool_loop_recorded_at_one_provider_continues_at_another() {
    // Turn 1 went to OpenAI, which answered with a call; the client answers it with
    // `previous_response_id`, and the proxy routes the answer to Bedrock.
    let tools = r#"[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false},"strict":true}]"#;
    let first = format!(
        r#"{{"model":"gpt-4.1","input":[{{"role":"user","content":"What's the weather in Paris?"}}],"tools":{tools}}}"#
    );
    let answer = format!(
        r#"{{"id":"resp_1","model":"gpt-4.1","status":"completed","output":[{{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"}},{CALL}]}}"#
    );
    let mut tap = super::Tap::new(super::AnswerKind::Json, super::TapLimits::default()).keep_items(true);
    tap.feed(answer.as_bytes());
    let tapped = tap.finish_kept().unwrap();
    let owner = Owner {
        provider: "openai".into(),
        model: Some("gpt-4.1".into()),
    };
    let mut stored = StoredResponse::new(tapped.record, owner, None, None, 0, 60);
    stored.content = Some(StoredContent {
        input: input_items(first.as_bytes()).unwrap(),
        output: tapped.items.unwrap(),
    });
    let second = format!(
        r#"{{"model":"gpt-4.1","input":[{OUTPUT}],"previous_response_id":"resp_1","tools":{tools}}}"#
    );
    let chain = [CarriedTurn::from_stored(&stored).unwrap()];
    let carried = carried_body(second.as_bytes(), &chain, "bedrock").unwrap();

    let bedrock = ProviderProfile::own_namespace("bedrock");
    let verdict = Gate::default()
        .check(&carried, &Target::provider(&bedrock))
        .unwrap();
    assert_eq!(verdict.violations, []);
    let value: Value = serde_json::from_slice(&carried).unwrap();
    let types: Vec<&str> = value["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item.get("type").and_then(Value::as_str).unwrap_or("message"))
        .collect();
    assert_eq!(types, ["message", "function_call", "function_call_output"]);
    // Without the recorded call the output would answer nothing.
    let uncarried = carried_body(second.as_bytes(), &[], "bedrock").unwrap();
    let verdict = Gate::default()
        .check(&uncarried, &Target::provider(&bedrock))
        .unwrap();
    assert_eq!(verdict.violations[0].reason.as_str(), "call_id_mismatch");
}

// Property tests: arbitrary chains and bodies.

/// Text with the characters that break naive JSON handling.
fn tricky_text() -> impl Strategy<Value = String> {
    "[a-z ,:{}\\[\\]\"\\\\\n\t\u{e9}\u{1F600}]{0,12}"
}

/// An item as a JSON value, of the kinds a chain or a request holds.
fn item() -> impl Strategy<Value = Value> {
    (0..10u8, tricky_text(), any::<bool>()).prop_map(|(kind, text, flag)| match kind {
        0 => json!({"role": "user", "content": text}),
        1 => json!({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                     "content": [{"type": "output_text", "text": text}]}),
        2 => json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f",
                     "arguments": json!({"q": text}).to_string(), "status": "completed"}),
        3 if flag => json!({"type": "function_call_output", "id": "fco_1", "call_id": "call_1", "output": text}),
        3 => json!({"type": "function_call_output", "call_id": "call_1", "output": text}),
        4 => json!({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": text, "status": "completed"}),
        5 if flag => json!({"type": "reasoning", "id": "rs_2", "summary": [{"type": "summary_text", "text": text}]}),
        5 => json!({"type": "reasoning", "summary": [], "encrypted_content": null}),
        6 => json!({"type": "compaction", "id": "cmp_1", "encrypted_content": text}),
        7 if flag => json!({"type": "item_reference", "id": "msg_0"}),
        7 => json!({"id": "msg_0"}),
        8 => json!({"type": "web_search_call", "id": "ws_1", "status": "completed",
                     "action": {"type": "search", "query": text}}),
        _ => json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}),
    })
}

/// An item's text, compact or spread over lines.
fn item_text(item: &Value, pretty: bool) -> String {
    if pretty {
        serde_json::to_string_pretty(item).unwrap()
    } else {
        item.to_string()
    }
}

/// Whitespace JSON allows between tokens.
fn space() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["", " ", "\n", "\t", "\r\n  "])
}

#[derive(Debug, Clone)]
struct Turn {
    provider: &'static str,
    input: Vec<String>,
    output: Vec<String>,
}

fn turn() -> impl Strategy<Value = Turn> {
    let items = || prop::collection::vec((item(), any::<bool>()), 0..5);
    (prop::sample::select(vec!["openai", "bedrock"]), items(), items()).prop_map(
        |(provider, input, output)| {
            let texts = |items: Vec<(Value, bool)>| {
                items
                    .iter()
                    .map(|(item, pretty)| item_text(item, *pretty))
                    .collect()
            };
            Turn {
                provider,
                input: texts(input),
                output: texts(output),
            }
        },
    )
}

/// The request's `input`: absent, null, a string or an array of items.
#[derive(Debug, Clone)]
enum OwnInput {
    Absent,
    Null,
    Text(String),
    Items(Vec<Value>),
}

fn own_input() -> impl Strategy<Value = OwnInput> {
    prop_oneof![
        Just(OwnInput::Absent),
        Just(OwnInput::Null),
        tricky_text().prop_map(OwnInput::Text),
        prop::collection::vec(item(), 0..4).prop_map(OwnInput::Items),
    ]
}

/// A body's members as (name, value text), in a random order, with or without
/// `previous_response_id`, and the whitespace to write them with.
fn body() -> impl Strategy<Value = (Vec<(String, String)>, Vec<&'static str>)> {
    let others = (tricky_text(), any::<bool>(), any::<bool>());
    (own_input(), any::<bool>(), others, space()).prop_flat_map(
        |(input, previous, (text, stream, metadata), sep)| {
            let mut members = vec![("model".to_owned(), r#""gpt-5""#.to_owned())];
            if previous {
                members.push(("previous_response_id".to_owned(), r#""resp_1""#.to_owned()));
            }
            match input {
                OwnInput::Absent => {}
                OwnInput::Null => members.push(("input".to_owned(), "null".to_owned())),
                OwnInput::Text(text) => members.push(("input".to_owned(), Value::from(text).to_string())),
                OwnInput::Items(items) => {
                    let texts: Vec<String> = items.iter().map(Value::to_string).collect();
                    members.push((
                        "input".to_owned(),
                        format!("[{sep}{}{sep}]", texts.join(&format!(",{sep}"))),
                    ));
                }
            }
            members.push(("instructions".to_owned(), Value::from(text).to_string()));
            if stream {
                members.push(("stream".to_owned(), "true".to_owned()));
            }
            if metadata {
                members.push((
                    "metadata".to_owned(),
                    r#"{"input":"x","previous_response_id":"y"}"#.to_owned(),
                ));
            }
            let count = members.len();
            (
                Just(members).prop_shuffle(),
                prop::collection::vec(space(), count * 4 + 2),
            )
        },
    )
}

fn write_body(members: &[(String, String)], spaces: &[&str]) -> String {
    let mut spaces = spaces.iter();
    let mut next = || *spaces.next().unwrap();
    let mut body = format!("{}{{", next());
    for (k, (name, value)) in members.iter().enumerate() {
        if k > 0 {
            body.push_str(&format!("{},", next()));
        }
        body.push_str(&format!("{}\"{name}\"{}:{}{value}", next(), next(), next()));
    }
    body.push_str(&format!("{}}}{}", next(), next()));
    body
}

/// What a recorded item should become when carried (see the carry module's rules), as a value.
fn expected_item(text: &str, provider: &str, target: &str) -> Option<Value> {
    let Value::Object(mut item) = serde_json::from_str::<Value>(text).unwrap() else {
        panic!("not an object: {text}");
    };
    let kind = item.get("type").and_then(Value::as_str).map(str::to_owned);
    let sealed = item.get("encrypted_content").is_some_and(|v| !v.is_null());
    match kind.as_deref() {
        Some("item_reference") => return None,
        None if item.keys().all(|name| name == "id") => return None,
        Some("reasoning" | "compaction") if provider != target || !sealed => return None,
        _ => {}
    }
    item.remove("id");
    if kind.as_deref() == Some("reasoning") {
        item.remove("status");
    }
    Some(Value::Object(item))
}

fn without(value: &Value, names: &[&str]) -> Map<String, Value> {
    let mut members = value.as_object().unwrap().clone();
    for name in names {
        members.remove(*name);
    }
    members
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_chain_and_body_carry_to_a_body_the_gate_reads(
        chain in prop::collection::vec(turn(), 0..4),
        (members, spaces) in body(),
        to_openai in any::<bool>(),
    ) {
        let target = if to_openai { "openai" } else { "bedrock" };
        let body = write_body(&members, &spaces);
        let turns: Vec<CarriedTurn<'_>> = chain
            .iter()
            .map(|turn| CarriedTurn { provider: turn.provider, input: &turn.input, output: &turn.output })
            .collect();
        let carried = carried_body(body.as_bytes(), &turns, target).unwrap();

        // It parses, and the gate reads and judges it.
        let value: Value = serde_json::from_slice(&carried).unwrap();
        let request = parse(&carried).unwrap();
        prop_assert!(request.previous_response_id.is_absent_or_null());
        let provider = ProviderProfile::own_namespace(target);
        prop_assert!(Gate::default().check(&carried, &Target::provider(&provider)).is_ok());

        // No previous_response_id, and every other member unchanged.
        let original: Value = serde_json::from_str(&body).unwrap();
        prop_assert!(value.get("previous_response_id").is_none());
        prop_assert_eq!(
            without(&value, &["input"]),
            without(&original, &["input", "previous_response_id"])
        );

        // The chain's items, carried, in order, then the request's own.
        let mut expected: Vec<Value> = chain
            .iter()
            .flat_map(|turn| {
                turn.input
                    .iter()
                    .chain(&turn.output)
                    .filter_map(|item| expected_item(item, turn.provider, target))
            })
            .collect();
        let carried_count = expected.len();
        match original.get("input") {
            Some(Value::Array(own)) => expected.extend(own.iter().cloned()),
            Some(Value::String(text)) => {
                expected.push(json!({"type": "message", "role": "user", "content": text}))
            }
            _ => {}
        }
        let input = value["input"].as_array().unwrap();
        prop_assert_eq!(input, &expected);
        prop_assert!(input[..carried_count].iter().all(|item| item.get("id").is_none()));

        // Every member but the two rewritten keeps its bytes, in order.
        let text = String::from_utf8(carried.clone()).unwrap();
        let mut from = 0;
        for (name, value) in &members {
            if name == "input" || name == "previous_response_id" {
                continue;
            }
            let at = text[from..].find(value.as_str());
            prop_assert!(at.is_some(), "{} lost its bytes", name);
            from += at.unwrap() + value.len();
        }
        // The request's own array items keep their bytes.
        if let Some((_, own)) = members.iter().find(|(name, _)| name == "input") {
            if let Some(items) = own.strip_prefix('[') {
                prop_assert!(text.contains(items));
            }
        }
    }

    #[test]
    fn recorded_inputs_read_back_as_the_items_sent(input in own_input(), sep in space()) {
        let body = match &input {
            OwnInput::Absent => "{}".to_owned(),
            OwnInput::Null => r#"{"input":null}"#.to_owned(),
            OwnInput::Text(text) => format!(r#"{{"input":{sep}{}}}"#, Value::from(text.as_str())),
            OwnInput::Items(items) => {
                let texts: Vec<String> = items.iter().map(Value::to_string).collect();
                format!(r#"{{"input":[{sep}{}{sep}]}}"#, texts.join(&format!(",{sep}")))
            }
        };
        let recorded = input_items(body.as_bytes()).unwrap();
        let expected: Vec<Value> = match input {
            OwnInput::Absent | OwnInput::Null => Vec::new(),
            OwnInput::Text(text) => vec![json!({"type": "message", "role": "user", "content": text})],
            OwnInput::Items(items) => items,
        };
        let read: Vec<Value> = recorded.iter().map(|item| serde_json::from_str(item).unwrap()).collect();
        prop_assert_eq!(read, expected);
    }
}
