//! Item profiles end to end (docs/item-profiles.md), on the wire: the twelve kinds of replayed body
//! that OpenAI is documented to refuse (tests/fixtures/refusal-vectors.json) stopped or repaired
//! through the proxy, the real-client corpus still forwarded, the actions that `[gate.rules]`
//! and team rules may set, the repair named in `x-replaygate-repaired`, the audit line and the
//! metrics, and hostile bodies (repeated and escaped member names, a 10,000-member item); a
//! member not required sent as `null` (Codex CLI's reasoning items); and an operator's own
//! profile file, applied like the built-in and reloaded with the configuration.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::support::proxy::Proxy;
use crate::support::upstream::{json_response, Upstream};

const OK: &str = r#"{"id":"resp_1","object":"response","status":"completed","output":[]}"#;

/// The refusal vectors: each body with its expected verdict without and with the profile.
pub fn vectors() -> Vec<Value> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/refusal-vectors.json"
    ))
    .unwrap();
    let file: Value = serde_json::from_str(&text).unwrap();
    file["cases"].as_array().unwrap().clone()
}

/// One provider `openai` at `upstream`, with `item_profile` when `profiled`, and `extra` text.
fn config(upstream: &Upstream, profiled: bool, extra: &str) -> String {
    let profile = if profiled {
        "item_profile = \"openai\"\n"
    } else {
        ""
    };
    format!(
        "default_provider = \"openai\"\n[providers.openai]\nbase_url = \"{}\"\nauth = \"none\"\n{profile}{extra}\n",
        upstream.base_url()
    )
}

async fn recording_upstream() -> Upstream {
    Upstream::start(|_| async { json_response(200, OK) }).await
}

/// POSTs `body` and returns the status, the answer's headers and its JSON.
async fn post(proxy: &Proxy, body: &str, headers: &[(&str, &str)]) -> (u16, http::HeaderMap, Value) {
    let mut request = reqwest::Client::new()
        .post(proxy.url("/v1/responses"))
        .header("content-type", "application/json")
        .body(body.to_owned());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let limit = std::time::Duration::from_secs(10);
    let response = tokio::time::timeout(limit, request.send())
        .await
        .unwrap()
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    (
        status,
        headers,
        serde_json::from_str(&text).unwrap_or(Value::Null),
    )
}

/// `body` (JSON text) with the member at `param` (`input[2].parsed_arguments`,
/// `input[4].content[0].parsed`) removed, compared as JSON values.
fn without(body: &Value, param: &str) -> Value {
    let mut body = body.clone();
    let path: Vec<&str> = param.split('.').collect();
    let mut at = &mut body;
    for step in &path[..path.len() - 1] {
        let (name, index) = step.split_once('[').unwrap();
        let index: usize = index.trim_end_matches(']').parse().unwrap();
        at = &mut at[name][index];
    }
    at.as_object_mut().unwrap().remove(*path.last().unwrap()).unwrap();
    body
}

/// Whether a vector's body is stopped before it leaves: refused, or its member cut out.
fn stopped(expected: &Value) -> bool {
    matches!(expected["action"].as_str(), Some("reject" | "repair"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_twelve_documented_refusals_are_stopped_on_the_wire_with_the_profile() {
    let upstream = recording_upstream().await;
    let profiled = Proxy::start(&config(&upstream, true, ""), &[]).await;
    let cases = vectors();
    assert_eq!(cases.len(), 12);
    let mut stopped_count = 0;
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let body = serde_json::to_string(&case["body"]).unwrap();
        let expected = &case["profile"];
        let before = upstream.received().len();
        let (status, headers, answer) = post(&profiled, &body, &[]).await;
        match expected["action"].as_str().unwrap() {
            "reject" => {
                assert_eq!(status, 422, "{name}: {answer}");
                assert_eq!(answer["error"]["code"], expected["reason"], "{name}: {answer}");
                assert_eq!(answer["error"]["param"], expected["param"], "{name}: {answer}");
                assert_eq!(upstream.received().len(), before, "{name}: a refused body left");
            }
            "repair" => {
                assert_eq!(status, 200, "{name}: {answer}");
                let param = expected["param"].as_str().unwrap();
                let header = headers["x-replaygate-repaired"].to_str().unwrap();
                assert_eq!(
                    header,
                    format!("{}@{param}", expected["reason"].as_str().unwrap()),
                    "{name}"
                );
                let received = upstream.received();
                assert_eq!(received.len(), before + 1, "{name}");
                let forwarded: Value = serde_json::from_slice(&received[before].body).unwrap();
                assert_eq!(forwarded, without(&case["body"], param), "{name}");
                let member = param.rsplit('.').next().unwrap();
                let cut = format!(",\"{member}\":");
                assert!(body.contains(&cut), "{name}: the vector is written compactly");
                assert_eq!(
                    received[before].body.len(),
                    body.len()
                        - cut.len()
                        - serde_json::to_string(&lookup(&case["body"], param))
                            .unwrap()
                            .len(),
                    "{name}: only the member and one comma are cut"
                );
            }
            other => panic!("{name}: unexpected action {other}"),
        }
        stopped_count += usize::from(stopped(expected));
    }
    assert_eq!(stopped_count, 12, "stopped with the openai profile");
}

/// The value at `param` in `body`.
fn lookup(body: &Value, param: &str) -> Value {
    let mut at = body;
    for step in param.split('.') {
        at = match step.split_once('[') {
            Some((name, index)) => &at[name][index.trim_end_matches(']').parse::<usize>().unwrap()],
            None => &at[step],
        };
    }
    at.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_profile_version_2_stops_five_of_the_twelve() {
    let upstream = recording_upstream().await;
    let plain = Proxy::start(&config(&upstream, false, ""), &[]).await;
    let mut stopped_count = 0;
    for case in vectors() {
        let name = case["name"].as_str().unwrap();
        let body = serde_json::to_string(&case["body"]).unwrap();
        let (status, _, answer) = post(&plain, &body, &[]).await;
        match case["v2"].as_object() {
            Some(expected) => {
                assert_eq!(status, 422, "{name}: {answer}");
                assert_eq!(answer["error"]["code"], expected["reason"], "{name}");
                assert_eq!(answer["error"]["param"], expected["param"], "{name}");
                stopped_count += 1;
            }
            None => assert_eq!(status, 200, "{name}: version 2 lets it leave: {answer}"),
        }
    }
    assert_eq!(stopped_count, 5);
}

/// The bodies of the real-client corpus (`/responses` posts), by file.
fn corpus() -> BTreeMap<String, Vec<String>> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/corpus");
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "jsonl") {
            let text = std::fs::read_to_string(&path).unwrap();
            let bodies = text
                .lines()
                .map(|line| serde_json::from_str::<Value>(line).unwrap())
                .filter(|record| record["path"].as_str().unwrap().ends_with("responses"))
                .map(|record| serde_json::to_string(&record["body"]).unwrap())
                .collect();
            files.insert(path.file_name().unwrap().to_string_lossy().into_owned(), bodies);
        }
    }
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_corpus_is_forwarded_byte_for_byte_except_the_node_stream_helper_repairs() {
    let upstream = recording_upstream().await;
    let proxy = Proxy::start(&config(&upstream, true, ""), &[]).await;
    let mut repaired = 0;
    for (file, bodies) in corpus() {
        for body in bodies {
            let before = upstream.received().len();
            let (status, headers, answer) = post(&proxy, &body, &[]).await;
            assert_eq!(status, 200, "{file}: {answer}");
            let forwarded = upstream.received()[before].body.clone();
            let monitored = headers
                .get("x-replaygate-monitored")
                .map(|v| v.to_str().unwrap().to_owned());
            match headers.get("x-replaygate-repaired") {
                None => {
                    assert_eq!(forwarded, body.as_bytes(), "{file}");
                    assert!(monitored.is_none(), "{file}: {monitored:?}");
                }
                Some(names) => {
                    assert!(file.starts_with("openai-node-stream"), "{file}: {names:?}");
                    let names = names.to_str().unwrap();
                    let mut expected: Value = serde_json::from_str(&body).unwrap();
                    for name in names.split(',') {
                        let (reason, param) = name.split_once('@').unwrap();
                        assert_eq!(reason, "item_field", "{file}");
                        assert!(param.ends_with(".parsed_arguments"), "{file}: {param}");
                        expected = without(&expected, param);
                    }
                    assert_eq!(
                        serde_json::from_slice::<Value>(&forwarded).unwrap(),
                        expected,
                        "{file}"
                    );
                    assert!(!String::from_utf8_lossy(&forwarded).contains("parsed_arguments"));
                    // `parsed` on output_text is only monitored.
                    if let Some(monitored) = monitored {
                        assert!(
                            monitored.split(',').all(|m| m.starts_with("item_unknown_field@")),
                            "{file}: {monitored}"
                        );
                    }
                    repaired += 1;
                }
            }
        }
    }
    assert!(
        repaired >= 2,
        "the Node stream helper sessions were repaired ({repaired})"
    );
}

const NODE_TURN: &str = r#"{"model":"gpt-4.1","input":[{"role":"user","content":"Paris?"},{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"city\":\"Paris\"}","call_id":"call_1","name":"get_weather","parsed_arguments":{"city":"Paris"}},{"type":"function_call_output","call_id":"call_1","output":"21C"},{"id":"msg_1","type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Sunny.","annotations":[],"logprobs":[],"parsed":null}]},{"role":"user","content":"Tokyo?"}],"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_may_reject_refused_members_or_repair_unknown_ones() {
    let upstream = recording_upstream().await;
    // [gate.rules] item_field = "reject": the request is refused instead of repaired.
    let strict = Proxy::start(
        &config(&upstream, true, "[gate.rules]\nitem_field = \"reject\"\n"),
        &[],
    )
    .await;
    let (status, _, answer) = post(&strict, NODE_TURN, &[]).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["code"], "item_field");
    assert_eq!(answer["error"]["param"], "input[1].parsed_arguments");
    assert!(upstream.received().is_empty());

    // item_unknown_field = "repair": `parsed` goes too, both named in one header.
    let tidy = Proxy::start(
        &config(&upstream, true, "[gate.rules]\nitem_unknown_field = \"repair\"\n"),
        &[],
    )
    .await;
    let (status, headers, answer) = post(&tidy, NODE_TURN, &[]).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        headers["x-replaygate-repaired"],
        "item_field@input[1].parsed_arguments,item_unknown_field@input[3].content[0].parsed"
    );
    let forwarded = &upstream.received()[0].body;
    let expected = NODE_TURN
        .replace(r#","parsed_arguments":{"city":"Paris"}"#, "")
        .replace(r#","parsed":null"#, "");
    assert_eq!(std::str::from_utf8(forwarded).unwrap(), expected);

    // repair on any other reason acts as reject.
    let odd = Proxy::start(
        &config(&upstream, true, "[gate.rules]\nitem_value = \"repair\"\n"),
        &[],
    )
    .await;
    let missing_name = r#"{"model":"m","input":[{"type":"function_call","call_id":"c","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"x"}]}"#;
    let (status, _, answer) = post(&odd, missing_name, &[]).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["violations"][0]["reason"], "item_value");
    assert_eq!(answer["error"]["violations"][0]["action"], "reject");
    assert_eq!(upstream.received().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_may_choose_its_own_repair_actions() {
    let upstream = recording_upstream().await;
    let teams = format!(
        "[teams.strict]\nkeys = [\"{}\"]\nrules = {{ item_field = \"reject\" }}\n[teams.loose]\nkeys = [\"{}\"]\n",
        crate::teams::key_entry("rg-strict"),
        crate::teams::key_entry("rg-loose"),
    );
    let proxy = Proxy::start(&config(&upstream, true, &teams), &[]).await;
    let (status, _, answer) = post(&proxy, NODE_TURN, &[("authorization", "Bearer rg-strict")]).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (422, Some("item_field"))
    );
    let (status, headers, _) = post(&proxy, NODE_TURN, &[("authorization", "Bearer rg-loose")]).await;
    assert_eq!(status, 200);
    assert_eq!(
        headers["x-replaygate-repaired"],
        "item_field@input[1].parsed_arguments"
    );
    assert_eq!(
        headers["x-replaygate-monitored"], "item_unknown_field@input[3]",
        "parsed is monitored by default"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_is_audited_and_counted_as_repaired() {
    let upstream = recording_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let extra = format!("[audit]\npath = \"{}\"\n", audit.display());
    let mut proxy = Proxy::start(&config(&upstream, true, &extra), &[]).await;
    let admin = proxy.admin().await;
    let (status, _, _) = post(&proxy, NODE_TURN, &[]).await;
    assert_eq!(status, 200);
    let metrics = reqwest::get(format!("http://{admin}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let counted = |needle: &str| {
        metrics
            .lines()
            .any(|l| l.contains(needle) && l.contains("openai") && l.ends_with(" 1"))
    };
    assert!(counted("decision=\"repaired\""), "{metrics}");
    assert!(
        counted("reason=\"item_field\"") && metrics.contains("action=\"repair\""),
        "{metrics}"
    );
    // The audit line is written by the time the proxy has shut down.
    proxy.shutdown().await;
    let text = std::fs::read_to_string(&audit).unwrap();
    let line: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(line["decision"], "repaired");
    assert_eq!(
        line["violations"][0],
        json!({"index": 1, "reason": "item_field", "action": "repair", "param": "input[1].parsed_arguments"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_member_names_get_a_clear_answer_and_never_a_broken_cut() {
    let upstream = recording_upstream().await;
    let proxy = Proxy::start(
        &config(&upstream, true, "[gate.rules]\nitem_unknown_field = \"repair\"\n"),
        &[],
    )
    .await;
    let call = r#"{"type":"function_call","call_id":"c1","name":"f","arguments":"{}""#;
    let output = r#"{"type":"function_call_output","call_id":"c1","output":"x"}"#;

    // The same member twice: readers disagree on which counts, so the item is refused.
    let twice = format!(
        r#"{{"model":"m","input":[{call},"parsed_arguments":{{}},"parsed_arguments":{{}}}},{output}]}}"#
    );
    let (status, _, answer) = post(&proxy, &twice, &[]).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["code"], "item_value");
    assert_eq!(answer["error"]["param"], "input[0].parsed_arguments");

    // A name written with escapes is the member it decodes to, and is cut as written.
    let escaped =
        format!(r#"{{"model":"m","input":[{call},"parsed\u005farguments":{{"a":"\"}}"}}}},{output}]}}"#);
    let (status, headers, answer) = post(&proxy, &escaped, &[]).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        headers["x-replaygate-repaired"],
        "item_field@input[0].parsed_arguments"
    );
    let forwarded = upstream.received().last().unwrap().body.clone();
    assert_eq!(
        std::str::from_utf8(&forwarded).unwrap(),
        format!(r#"{{"model":"m","input":[{call}}},{output}]}}"#)
    );

    // 10,000 unknown members: every one cut, the rest byte for byte, the header bounded.
    let mut many = String::from(r#"{"model":"m","input":[{"role":"user","content":"hi""#);
    for i in 0..10_000 {
        many.push_str(&format!(r#", "x{i}" : [{i}]"#));
    }
    many.push_str("}]}");
    let (status, headers, answer) = post(&proxy, &many, &[]).await;
    assert_eq!(status, 200, "{answer}");
    let header = headers["x-replaygate-repaired"].to_str().unwrap();
    assert!(header.ends_with(",+9900"), "{}", &header[header.len() - 40..]);
    let forwarded = upstream.received().last().unwrap().body.clone();
    assert_eq!(
        std::str::from_utf8(&forwarded).unwrap(),
        r#"{"model":"m","input":[{"role":"user","content":"hi"}]}"#
    );
}

/// Replayed items as agents send them: a user turn, a reasoning item, the call it led to and
/// the call's output, with OpenAI's long ids.
const RS: &str =
    r#"{"type":"reasoning","id":"rs_68c1a2b3c4d5e6f70001","summary":[],"encrypted_content":"gAAAAB-one"}"#;
const CALL: &str = r#"{"type":"function_call","id":"fc_68c1a2b3c4d5e6f70002","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"}"#;
const ANSWER: &str = r#"{"type":"function_call_output","call_id":"call_1","output":"21C"}"#;
const RS2: &str =
    r#"{"type":"reasoning","id":"rs_68c1a2b3c4d5e6f70004","summary":[],"encrypted_content":"gAAAAB-two"}"#;
const USER: &str = r#"{"role":"user","content":"Paris?"}"#;
const MESSAGE: &str = r#"{"type":"message","id":"msg_68c1a2b3c4d5e6f70003","role":"assistant","content":[{"type":"output_text","text":"Sunny."}]}"#;

fn replayed(items: &[&str]) -> String {
    format!(
        r#"{{"model":"gpt-5","tools":[{{"type":"function","name":"get_weather","parameters":{{"type":"object"}}}}],"input":[{}]}}"#,
        items.join(",")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphaned_reasoning_and_repeated_items_are_cut_byte_exactly_or_refused() {
    let upstream = recording_upstream().await;
    let proxy = Proxy::start(&config(&upstream, true, ""), &[]).await;
    let cases: [(&[&str], &[&str], &str); 5] = [
        // (sent, forwarded, x-replaygate-repaired)
        (&[USER, RS, USER], &[USER, USER], "reasoning_orphaned@input[1]"),
        (&[USER, RS], &[USER], "reasoning_orphaned@input[1]"),
        (
            &[USER, RS, RS2, CALL, ANSWER],
            &[USER, RS2, CALL, ANSWER],
            "reasoning_orphaned@input[1]",
        ),
        (
            &[USER, MESSAGE, USER, MESSAGE, USER],
            &[USER, MESSAGE, USER, USER],
            "duplicate_item_id@input[3]",
        ),
        // A repeated call takes its output along, named after it.
        (
            &[USER, CALL, ANSWER, CALL, ANSWER, USER],
            &[USER, CALL, ANSWER, USER],
            "duplicate_item_id@input[3],input[4]",
        ),
    ];
    for (sent, forwarded, header) in cases {
        let body = replayed(sent);
        let before = upstream.received().len();
        let (status, headers, answer) = post(&proxy, &body, &[]).await;
        assert_eq!(status, 200, "{body}: {answer}");
        assert_eq!(
            headers["x-replaygate-repaired"].to_str().unwrap(),
            header,
            "{body}"
        );
        let received = upstream.received();
        assert_eq!(received.len(), before + 1);
        assert_eq!(
            String::from_utf8(received[before].body.to_vec()).unwrap(),
            replayed(forwarded),
            "{body}"
        );
    }
    // The valid shapes pass byte for byte, nothing named.
    for sent in [
        &[USER, RS, CALL, ANSWER, RS2, MESSAGE, USER][..],
        &[USER, MESSAGE, USER],
    ] {
        let body = replayed(sent);
        let before = upstream.received().len();
        let (status, headers, answer) = post(&proxy, &body, &[]).await;
        assert_eq!(status, 200, "{body}: {answer}");
        assert!(headers.get("x-replaygate-repaired").is_none(), "{body}");
        assert_eq!(upstream.received()[before].body, body.as_bytes());
    }
    // A repeat with other bytes cannot be cut: refused before it leaves.
    let changed = MESSAGE.replace("Sunny.", "Rainy.");
    let body = replayed(&[USER, MESSAGE, USER, &changed]);
    let before = upstream.received().len();
    let (status, _, answer) = post(&proxy, &body, &[]).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["code"], "duplicate_item_id");
    assert_eq!(answer["error"]["param"], "input[3]");
    assert_eq!(upstream.received().len(), before);
    // A rule may refuse what is repaired by default.
    let strict = Proxy::start(
        &config(&upstream, true, "[gate.rules]\nreasoning_orphaned = \"reject\"\n"),
        &[],
    )
    .await;
    let (status, _, answer) = post(&strict, &replayed(&[USER, RS, USER]), &[]).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["code"], "reasoning_orphaned");
    assert_eq!(answer["error"]["param"], "input[1]");
}

/// An answer whose output is the reasoning item `RS` and the call `CALL` it led to.
const REASONED: &str = r#"{"id":"resp_68c1a2b3c4d5e6f7","object":"response","status":"completed","model":"gpt-5","output":[{"type":"reasoning","id":"rs_68c1a2b3c4d5e6f70001","summary":[],"encrypted_content":"gAAAAB-one"},{"type":"function_call","id":"fc_68c1a2b3c4d5e6f70002","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}","status":"completed"}]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_sent_back_without_its_reasoning_item_is_refused_or_given_it_back() {
    let upstream = Upstream::start(|_| async { json_response(200, REASONED) }).await;
    let first = replayed(&[USER]);
    let without = replayed(&[USER, CALL, ANSWER]);
    // Without the reasoning item's bytes (store_items off), nothing can be inserted.
    let memory = "[state]\nbackend = \"memory\"\n";
    let ids_only = Proxy::start(&config(&upstream, true, memory), &[]).await;
    assert_eq!(post(&ids_only, &first, &[]).await.0, 200);
    let before = upstream.received().len();
    let (status, _, answer) = post(&ids_only, &without, &[]).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["code"], "reasoning_missing");
    assert_eq!(answer["error"]["param"], "input[1]");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("rs_68c1a2b3c4d5e6f70001"), "{message}");
    assert_eq!(upstream.received().len(), before, "a refused body left");
    // Sent with it, the call passes byte for byte.
    let with = replayed(&[USER, RS, CALL, ANSWER]);
    let (status, headers, answer) = post(&ids_only, &with, &[]).await;
    assert_eq!(status, 200, "{answer}");
    assert!(headers.get("x-replaygate-repaired").is_none());
    assert_eq!(upstream.received().last().unwrap().body, with.as_bytes());

    // With the items kept and `repair`, the reasoning item's bytes go back in before the call.
    let kept =
        format!("{memory}[ledger]\nstore_items = true\n[gate.rules]\nreasoning_missing = \"repair\"\n");
    let repairing = Proxy::start(&config(&upstream, true, &kept), &[]).await;
    assert_eq!(post(&repairing, &first, &[]).await.0, 200);
    let (status, headers, answer) = post(&repairing, &without, &[]).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        headers["x-replaygate-repaired"].to_str().unwrap(),
        "reasoning_missing@input[1]"
    );
    assert_eq!(
        headers["x-replaygate-inserted"].to_str().unwrap(),
        "rs_68c1a2b3c4d5e6f70001@input[1]"
    );
    assert_eq!(
        String::from_utf8(upstream.received().last().unwrap().body.to_vec()).unwrap(),
        with
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn null_reads_as_absent_unless_the_member_is_required() {
    let upstream = recording_upstream().await;
    let proxy = Proxy::start(&config(&upstream, true, ""), &[]).await;
    // Codex CLI replays its reasoning items with `"content": null`; OpenAI takes them. (The
    // reasoning item leads to an answer: one followed by a user message is orphaned.)
    let codex = r#"{"model":"gpt-5-codex","input":[{"role":"user","content":"fix it"},{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"Looking"}],"content":null,"encrypted_content":"gAAAA"},{"role":"assistant","content":"Fixed."},{"role":"user","content":"go on"}]}"#;
    let (status, headers, answer) = post(&proxy, codex, &[]).await;
    assert_eq!(status, 200, "{answer}");
    assert!(headers.get("x-replaygate-repaired").is_none());
    assert_eq!(upstream.received().last().unwrap().body, codex.as_bytes());
    let before = upstream.received().len();
    let call = r#"{"model":"m","input":[{"type":"function_call","call_id":"call_1","name":null,"arguments":"{}"},{"type":"function_call_output","call_id":"call_1","output":"ok"}]}"#;
    let (status, _, answer) = post(&proxy, call, &[]).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["code"], "item_value");
    assert_eq!(answer["error"]["param"], "input[0].name");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("`name` is null; it is required"), "{message}");
    assert_eq!(upstream.received().len(), before, "a refused body left");
    // The built-in profile checks a call's name against OpenAI's pattern.
    let dotted = call.replace("\"name\":null", "\"name\":\"get.weather\"");
    let (status, _, answer) = post(&proxy, &dotted, &[]).await;
    assert_eq!(
        (status, &answer["error"]["param"]),
        (422, &json!("input[0].name"))
    );
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("does not match the pattern `^[a-zA-Z0-9_-]+$`")
            && message.contains("string does not match pattern"),
        "{message}"
    );
}

/// The example of an operator's own profile that docs/item-profiles.md shows.
const LOCAL_PROFILE: &str = include_str!("../fixtures/profiles/local.json");

#[test]
fn the_item_profiles_doc_shows_the_tested_example_profile() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/item-profiles.md")).unwrap();
    assert!(
        doc.contains(&format!("```json\n{LOCAL_PROFILE}```")),
        "docs/item-profiles.md's example profile differs from tests/fixtures/profiles/local.json"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_profile_file_refuses_repairs_and_reloads_with_the_config() {
    use replaygate::config::Config;
    use replaygate::reload::ConfigReload;

    let upstream = recording_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("profiles/local.json");
    std::fs::create_dir_all(profile.parent().unwrap()).unwrap();
    std::fs::write(&profile, LOCAL_PROFILE).unwrap();
    let path = dir.path().join("proxy.toml");
    std::fs::write(
        &path,
        format!(
            "default_provider = \"local\"\n[providers.local]\nbase_url = \"{}\"\nauth = \"none\"\n\
             item_profile = {{ file = \"profiles/local.json\" }}\n",
            upstream.base_url()
        ),
    )
    .unwrap();
    let loaded = Config::load(&path).unwrap();
    let proxy = Proxy::start_with(&loaded, &[]).await;
    let mut reloads = ConfigReload::new(Some(path.clone()), proxy.reloader.clone(), loaded);

    // A member the profile refuses is cut out (item_field is repaired by default); `status`
    // sent as null reads as absent.
    let repaired = r#"{"model":"m","input":[{"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{}","status":null,"parsed_arguments":{}},{"type":"function_call_output","call_id":"call_1","output":"sunny"}]}"#;
    let (status, headers, answer) = post(&proxy, repaired, &[]).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        headers["x-replaygate-repaired"],
        "item_field@input[0].parsed_arguments"
    );
    let forwarded = upstream.received().last().unwrap().body.clone();
    assert_eq!(
        std::str::from_utf8(&forwarded).unwrap(),
        repaired.replace(",\"parsed_arguments\":{}", "")
    );
    // A value the profile does not take is refused, with the profile's source.
    let before = upstream.received().len();
    for (bad, says) in [
        (
            repaired.replace("get_weather", "get-weather"),
            "does not match the pattern `^[a-zA-Z0-9_]+$`",
        ),
        (
            repaired.replace("call_1", &"c".repeat(41)),
            "is longer than 40 characters",
        ),
    ] {
        let (status, _, answer) = post(&proxy, &bad, &[]).await;
        assert_eq!(status, 422, "{answer}");
        assert_eq!(answer["error"]["code"], "item_value", "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(says) && message.contains("server docs"),
            "{message}"
        );
    }
    assert_eq!(upstream.received().len(), before, "a refused body left");

    // The file is read again with the configuration: a profile that no longer refuses
    // `parsed_arguments` leaves it in place.
    let relaxed = LOCAL_PROFILE.replace(
        "\"refused\": {\n    \"parsed_arguments\": \"the server answers 400 unknown field `parsed_arguments`\"\n   }",
        "\"refused\": {}",
    );
    assert_ne!(relaxed, LOCAL_PROFILE);
    let relaxed = relaxed.replace(
        "\"arguments\": {",
        "\"parsed_arguments\": {\"source\": \"server docs, release 2.4\"},\n    \"arguments\": {",
    );
    std::fs::write(&profile, &relaxed).unwrap();
    assert!(reloads.reload("test"));
    let (status, headers, answer) = post(&proxy, repaired, &[]).await;
    assert_eq!(status, 200, "{answer}");
    assert!(headers.get("x-replaygate-repaired").is_none());
    assert_eq!(upstream.received().last().unwrap().body, repaired.as_bytes());

    // A profile file that does not load changes nothing.
    std::fs::write(&profile, "{\"profile\": \"local\",").unwrap();
    assert!(!reloads.reload("test"));
    let (status, headers, _) = post(&proxy, repaired, &[]).await;
    assert_eq!(status, 200);
    assert!(headers.get("x-replaygate-repaired").is_none());
    std::fs::write(&profile, LOCAL_PROFILE).unwrap();
    assert!(reloads.reload("test"));
    let (_, headers, _) = post(&proxy, repaired, &[]).await;
    assert_eq!(
        headers["x-replaygate-repaired"],
        "item_field@input[0].parsed_arguments"
    );
}
