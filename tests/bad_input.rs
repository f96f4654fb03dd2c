//! Hostile and broken bodies: each gets its clear answer (docs/answers.md), quickly, without a panic
//! and without memory out of proportion to the body.
//!
//! The table runs in one test, case after case, so the process's peak memory can be read for
//! each case alone (on Linux, where `/proc/self/clear_refs` resets the peak).

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::memory::status_bytes;
use support::proxy::{one_provider, Proxy};
use support::raw::{connect, read_head, read_to_close, send, status_of};
use support::upstream::{Upstream, RESPONSE_JSON};
use tokio::io::AsyncWriteExt;

/// What a case must get back.
enum Expect {
    /// Forwarded to the provider, whose 200 comes back.
    Forwarded,
    /// Refused by the proxy with this status and error code (and param, when given).
    Refused(u16, &'static str, Option<&'static str>),
}

struct Case {
    name: &'static str,
    body: Vec<u8>,
    expect: Expect,
}

fn case(name: &'static str, body: impl Into<Vec<u8>>, expect: Expect) -> Case {
    Case {
        name,
        body: body.into(),
        expect,
    }
}

const TOOL: &str = r#"{"type":"function","name":"f","parameters":{"type":"object"}}"#;

/// A body with one tool whose `parameters` is `schema` and one call to it with `arguments`
/// (a JSON text, encoded here as the JSON string the contract wants).
fn call_with_schema(schema: &str, arguments: &str) -> String {
    let arguments = serde_json::to_string(arguments).unwrap();
    format!(
        r#"{{"model":"gpt-5","tools":[{{"type":"function","name":"f","parameters":{schema}}}],"input":[{{"type":"function_call","call_id":"c","name":"f","arguments":{arguments},"status":"completed"}}]}}"#
    )
}

fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

fn input_of(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    format!(r#"{{"model":"gpt-5","input":[{}]}}"#, items.join(","))
}

fn cases() -> Vec<Case> {
    use Expect::*;
    let deep = nested(100_000);
    let ten_mib = "x".repeat(10 << 20);
    let many = replaygate::gate::MAX_ITEMS;
    let huge_schema = format!(
        r#"{{"type":"object","properties":{{{}}}}}"#,
        (0..40_000)
            .map(|i| format!(r#""p{i}":{{"type":"string"}}"#))
            .collect::<Vec<_>>()
            .join(",")
    );
    let bad_json = Refused(400, "invalid_json", None);
    vec![
        case("truncated JSON", r#"{"input": ["#, Refused(400, "invalid_json", None)),
        case("trailing garbage", r#"{"model":"gpt-5","input":"hi"} x"#, Refused(400, "invalid_json", None)),
        case("an empty body", "", Refused(400, "invalid_json", None)),
        case("an array, not an object", "[]", Refused(400, "invalid_json", None)),
        case(
            "invalid UTF-8 in a member the gate skips",
            &b"{\"model\":\"gpt-5\",\"metadata\":{\"k\":\"\xff\"},\"input\":\"hi\"}"[..],
            Refused(400, "invalid_json", None),
        ),
        case(
            "an encoded surrogate (CESU-8), not UTF-8",
            &b"{\"model\":\"gpt-5\",\"input\":\"\xed\xa0\x80\"}"[..],
            Refused(400, "invalid_json", None),
        ),
        case("nesting 100,000 deep: the body", deep.clone(), bad_json),
        // The gate reads only what it judges; the provider answers for the rest.
        case(
            "nesting 100,000 deep: a member the gate skips",
            format!(r#"{{"model":"gpt-5","metadata":{deep},"input":"hi"}}"#),
            Forwarded,
        ),
        case(
            "nesting 100,000 deep: message content",
            format!(r#"{{"model":"gpt-5","input":[{{"role":"user","content":{deep}}}]}}"#),
            Forwarded,
        ),
        case(
            "nesting 100,000 deep: arguments",
            call_with_schema(r#"{"type":"array"}"#, &deep),
            Refused(422, "arguments_parse", Some("input[0].arguments")),
        ),
        case(
            "nesting 100,000 deep: a tool's parameters",
            call_with_schema(&format!(r#"{{"type":"object","default":{deep}}}"#), "{}"),
            Refused(422, "tool_schema_invalid", Some("tools[0].parameters")),
        ),
        case(
            "10 MiB arguments that fit the schema",
            call_with_schema(r#"{"type":"object"}"#, &format!(r#"{{"pad":"{ten_mib}"}}"#)),
            Forwarded,
        ),
        case(
            "10 MiB arguments that break the schema",
            call_with_schema(
                r#"{"type":"object","properties":{"pad":{"maxLength":5}}}"#,
                &format!(r#"{{"pad":"{ten_mib}"}}"#),
            ),
            Refused(422, "arguments_schema", Some("input[0].arguments")),
        ),
        case(
            "10 MiB arguments that are not JSON",
            call_with_schema(r#"{"type":"object"}"#, &format!(r#"{{"pad":{ten_mib}"#)),
            Refused(422, "arguments_parse", Some("input[0].arguments")),
        ),
        case(
            "one item more than the gate reads",
            input_of((0..=many).map(|i| format!(r#"{{"role":"user","content":"m{i}"}}"#))),
            Refused(400, "invalid_input", Some("input")),
        ),
        case(
            "100,000 messages",
            input_of((0..many).map(|i| format!(r#"{{"role":"user","content":"m{i}"}}"#))),
            Forwarded,
        ),
        case(
            "50,000 calls, each with its output",
            format!(
                r#"{{"model":"gpt-5","tools":[{TOOL}],"input":[{}]}}"#,
                (0..many / 2)
                    .map(|i| format!(
                        r#"{{"type":"function_call","call_id":"c{i}","name":"f","arguments":"{{}}","status":"completed"}},{{"type":"function_call_output","call_id":"c{i}","output":"o"}}"#
                    ))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            Forwarded,
        ),
        case(
            "100,000 refused items",
            input_of((0..many).map(|_| r#"{"type":"acme:x"}"#.to_owned())),
            Refused(422, "namespaced", Some("input[0].type")),
        ),
        case("input is a number", r#"{"model":"gpt-5","input":5}"#, Refused(400, "invalid_input", Some("input"))),
        case("input is a boolean", r#"{"model":"gpt-5","input":true}"#, Refused(400, "invalid_input", Some("input"))),
        case(
            "an item is a number",
            r#"{"model":"gpt-5","input":[{"role":"user","content":"hi"},7]}"#,
            Refused(400, "invalid_input", Some("input[1]")),
        ),
        case("tools is a string", r#"{"model":"gpt-5","tools":"f","input":"hi"}"#, Refused(400, "invalid_input", Some("tools"))),
        case(
            "input given twice",
            r#"{"model":"gpt-5","input":"hi","input":[{"type":"acme:x"}]}"#,
            Refused(400, "invalid_input", None),
        ),
        case(
            "a tool schema over max_schema_bytes",
            call_with_schema(&huge_schema, "{}"),
            Refused(422, "tool_schema_invalid", Some("tools[0].parameters")),
        ),
        case("a schema that is a $ref to itself", call_with_schema(r##"{"$ref":"#"}"##, "{}"), Forwarded),
        case(
            "a $defs cycle",
            call_with_schema(
                r##"{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}"##,
                "{}",
            ),
            Forwarded,
        ),
        case(
            "a recursive schema over deep arguments",
            call_with_schema(
                r##"{"type":"object","properties":{"a":{"$ref":"#"}}}"##,
                &format!("{}{{}}{}", r#"{"a":"#.repeat(120), "}".repeat(120)),
            ),
            Forwarded,
        ),
        case(
            "a catastrophic regex on 100,000 characters",
            call_with_schema(
                r#"{"type":"object","properties":{"s":{"type":"string","pattern":"^(a+)+$"}}}"#,
                &format!(r#"{{"s":"{}!"}}"#, "a".repeat(100_000)),
            ),
            Refused(422, "arguments_schema", Some("input[0].arguments")),
        ),
        case(
            "a regex with a backreference",
            call_with_schema(r#"{"type":"object","properties":{"s":{"pattern":"^(a)\\1$"}}}"#, "{}"),
            Refused(422, "tool_schema_invalid", Some("tools[0].parameters")),
        ),
    ]
}

/// The process's resident memory now and at its peak, in bytes; `None` off Linux.
fn memory() -> Option<(u64, u64)> {
    Some((status_bytes("self", "VmRSS")?, status_bytes("self", "VmHWM")?))
}

/// Resets the peak resident memory to the current one; whether that worked.
fn reset_peak_memory() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

#[tokio::test]
async fn every_bad_body_gets_a_clear_answer_quickly_and_in_bounded_memory() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
    let client = reqwest::Client::new();
    let mut failures = Vec::new();
    for case in cases() {
        let forwarded_before = upstream.received().len();
        let size = case.body.len() as u64;
        let measured = reset_peak_memory();
        let before = memory();
        let started = Instant::now();
        let response = client
            .post(proxy.url("/v1/responses"))
            .header("content-type", "application/json")
            .body(case.body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let answer = response.bytes().await.unwrap();
        let elapsed = started.elapsed();
        let forwarded = upstream.received().len() > forwarded_before;

        let mut problems = Vec::new();
        match case.expect {
            Expect::Forwarded => {
                if status != 200 || !forwarded {
                    problems.push(format!(
                        "expected it forwarded, got {status} (forwarded: {forwarded})"
                    ));
                }
            }
            Expect::Refused(want_status, want_code, want_param) => {
                let envelope: Value = serde_json::from_slice(&answer).unwrap_or(Value::Null);
                let error = &envelope["error"];
                if status != want_status || error["code"] != want_code {
                    problems.push(format!(
                        "expected {want_status} {want_code}, got {status} {}",
                        error["code"]
                    ));
                }
                if let Some(param) = want_param {
                    if error["param"] != param {
                        problems.push(format!("expected param {param}, got {}", error["param"]));
                    }
                }
                if forwarded {
                    problems.push("a refused body reached the provider".into());
                }
            }
        }
        // Generous for a debug build on a shared machine; the slowest case takes about a second.
        if elapsed > Duration::from_secs(8) {
            problems.push(format!("took {elapsed:?}"));
        }
        if let (true, Some((rss, _)), Some((_, peak))) = (measured, before, memory()) {
            // The body is held a few times over (received, parsed, forwarded, echoed in a 422).
            let growth = peak.saturating_sub(rss);
            let allowed = 64 * size + (256 << 20);
            if growth > allowed {
                problems.push(format!(
                    "peak memory grew by {} MiB for a {size}-byte body",
                    growth >> 20
                ));
            }
        }
        if !problems.is_empty() {
            failures.push(format!("{}: {}", case.name, problems.join("; ")));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[tokio::test]
async fn the_gate_judges_bytes_whatever_the_content_type() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
    let client = reqwest::Client::new();
    let send = |content_type: Option<&'static str>,
                extra: Option<(&'static str, &'static str)>,
                body: &'static [u8]| {
        let mut request = client.post(proxy.url("/v1/responses")).body(body);
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        if let Some((name, value)) = extra {
            request = request.header(name, value);
        }
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let body: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap_or(Value::Null);
            (status, body["error"]["code"].as_str().map(str::to_owned))
        }
    };
    let allowed: &[u8] = br#"{"model":"gpt-5","input":"hi"}"#;
    let refused: &[u8] = br#"{"model":"gpt-5","input":[{"type":"acme:x"}]}"#;

    // JSON under another name (curl -d sends form encoding) is judged, then forwarded as sent.
    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        assert_eq!(
            send(content_type, None, allowed).await,
            (200, None),
            "{content_type:?}"
        );
        assert_eq!(
            send(content_type, None, refused).await,
            (422, Some("namespaced".into())),
            "{content_type:?}"
        );
    }
    let received = upstream.received();
    assert_eq!(received.len(), 3);
    assert_eq!(received[0].headers["content-type"], "text/plain");
    assert_eq!(&received[0].body[..], allowed);

    // Bytes that are not a JSON object are refused whatever they claim to be.
    assert_eq!(
        send(
            Some("multipart/form-data; boundary=x"),
            None,
            b"--x\r\n\r\nhi\r\n--x--\r\n"
        )
        .await,
        (400, Some("invalid_json".into()))
    );
    // A compressed body cannot be judged, so it is refused rather than forwarded unjudged.
    assert_eq!(
        send(
            Some("application/json"),
            Some(("content-encoding", "gzip")),
            b"\x1f\x8b\x08\x00\x00\x00\x00\x00"
        )
        .await,
        (400, Some("invalid_json".into()))
    );
    assert_eq!(upstream.received().len(), 3);
}

/// A proxy that accepts bodies up to 1 MiB.
async fn small_proxy(upstream: &Upstream) -> Proxy {
    let config = one_provider(&upstream.base_url(), "\"passthrough\"", "").replacen(
        "[providers.openai]",
        "[server]\nmax_body_bytes = 1048576\n\n[providers.openai]",
        1,
    );
    Proxy::start(&config, &[]).await
}

#[tokio::test]
async fn an_endless_chunked_body_is_cut_at_the_limit() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let proxy = small_proxy(&upstream).await;
    let client = connect(proxy.addr).await;
    let (mut reader, mut writer) = client.into_split();
    writer
        .write_all(b"POST /v1/responses HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n")
        .await
        .unwrap();
    // Up to 256 MiB in 64 KiB chunks, until the proxy stops taking them.
    let sender = tokio::spawn(async move {
        let chunk = support::raw::chunk(&vec![b' '; 64 * 1024]);
        let mut sent = 0usize;
        while sent < 256 << 20 {
            if writer.write_all(&chunk).await.is_err() {
                break;
            }
            sent += 64 * 1024;
        }
        sent
    });
    let mut answer = Vec::new();
    let read = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::io::AsyncReadExt::read_to_end(&mut reader, &mut answer),
    )
    .await
    .expect("the proxy neither answered nor closed");
    let _ = read;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("body_too_large"));
    let sent = tokio::time::timeout(Duration::from_secs(10), sender)
        .await
        .unwrap()
        .unwrap();
    assert!(
        sent < 64 << 20,
        "the proxy kept reading an oversize body: {sent} bytes"
    );
    assert!(upstream.received().is_empty());
}

#[tokio::test]
async fn an_oversize_declared_length_is_refused_before_the_body_is_sent() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let proxy = small_proxy(&upstream).await;
    let mut client = connect(proxy.addr).await;
    // With `Expect: 100-continue` the client waits for leave to send; it must get 413 instead.
    send(
        &mut client,
        b"POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-length: 10485760\r\nexpect: 100-continue\r\n\r\n",
    )
    .await;
    let (head, _) = read_head(&mut client, Duration::from_secs(5)).await;
    assert_eq!(status_of(&head), 413, "{head}");
    assert!(read_to_close(&mut client, Duration::from_secs(5)).await.is_some());
    assert!(upstream.received().is_empty());
}

/// A small schema whose `$defs` each reference the next one twice (`allOf`/`anyOf`) would cost
/// 2^levels evaluations; the gate refuses it as `tool_schema_invalid` instead of running it.
#[test]
fn a_schema_whose_refs_fan_out_exponentially_is_judged_quickly() {
    use replaygate::gate::{Gate, ProviderProfile, Target};
    // `$defs` that each refer to the next one twice unfold to 2^levels subschemas. Every way of
    // writing the reference must be measured (or refused) before anything is validated.
    let levels = 24;
    type Spelling = fn(usize) -> (String, String);
    let spellings: [(&str, Spelling); 4] = [
        ("JSON pointers", |i| (String::new(), format!("#/$defs/d{i}"))),
        ("percent-escaped pointers", |i| {
            (String::new(), format!("#/%24defs/d{i}"))
        }),
        ("$anchor references", |i| {
            (format!(r#""$anchor":"a{i}","#), format!("#a{i}"))
        }),
        ("$id URNs", |i| {
            (format!(r#""$id":"urn:d{i}","#), format!("urn:d{i}"))
        }),
    ];
    for (name, spelling) in spellings {
        let defs: Vec<String> = (0..levels)
            .map(|i| {
                let (own, _) = spelling(i);
                let (_, next) = spelling(i + 1);
                format!(r#""d{i}":{{{own}"anyOf":[{{"$ref":"{next}"}},{{"$ref":"{next}"}}]}}"#)
            })
            .chain(std::iter::once({
                let (own, _) = spelling(levels);
                format!(r#""d{levels}":{{{own}"type":"string"}}"#)
            }))
            .collect();
        let (_, first) = spelling(0);
        let schema = format!(r#"{{"$defs":{{{}}},"$ref":"{first}"}}"#, defs.join(","));
        assert!(schema.len() < 4096, "{name}: a {} byte schema", schema.len());
        let body = call_with_schema(&schema, r#"{"x":1}"#);
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        // A detached thread: if the gate never returns, the test fails instead of hanging.
        std::thread::spawn(move || {
            let bedrock = ProviderProfile::own_namespace("bedrock");
            let verdict = Gate::default().check(body.as_bytes(), &Target::provider(&bedrock));
            let reasons = verdict.map(|v| v.violations.iter().map(|x| x.reason.as_str()).collect::<Vec<_>>());
            let _ = done_tx.send(reasons);
        });
        let outcome = done_rx.recv_timeout(Duration::from_secs(10));
        assert_eq!(
            outcome.unwrap_or_else(|_| panic!("{name}: judging a 3 KB schema took over 10 s")),
            Ok(vec!["tool_schema_invalid"]),
            "{name}"
        );
    }
}
