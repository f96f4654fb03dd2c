//! The provenance ledger end to end (docs/ledger.md): answers recorded as they stream (JSON and
//! events), each request-side rule both ways through the proxy, carried sessions, the
//! response-side check, a store that is down, the embedded store across a restart and a kill
//! (and refusing a second process), and two replicas on one Redis. The fake providers mint ids
//! of their own per answer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};

use crate::support::proxy::Proxy;
use crate::support::redis_server::RedisServer;
use crate::support::serve::Serve;
use crate::support::upstream::{sse_response, UpBody, Upstream};

/// A provider that answers every `/responses` request with a reasoning item (its blob names
/// the provider and the model), a `get_weather` call and a message, with ids of its own:
/// as JSON, or as events when the request says `"stream": true`. `bad_args` makes its call's
/// arguments miss the tool's required `city`.
async fn provider(name: &'static str, bad_args: bool) -> Upstream {
    provider_with(name, bad_args, false).await
}

/// [`provider`]; with `numbered`, item ids restart in every response (`rs_0`, `fc_0`,
/// `msg_0`), as Bedrock Mantle numbers them.
async fn provider_with(name: &'static str, bad_args: bool, numbered: bool) -> Upstream {
    let counter = Arc::new(AtomicU64::new(0));
    Upstream::start(move |request| {
        let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
        async move {
            let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
            let model = body["model"].as_str().unwrap_or("m").to_owned();
            // Providers may answer with a dated name of the model asked for.
            let answered = format!("{model}-2026-11-01");
            let arguments = if bad_args {
                r#"{"town":"Paris"}"#
            } else {
                r#"{"city":"Paris"}"#
            };
            let item_id = |kind: &str| match numbered {
                true => format!("{kind}_0"),
                false => format!("{kind}_{name}_{n:016}"),
            };
            let response = json!({
                "id": format!("resp_{name}_{n}"),
                "object": "response",
                "model": answered,
                "status": "completed",
                "output": [
                    {"type": "reasoning", "id": item_id("rs"), "summary": [],
                     "encrypted_content": format!("enc-{name}-{model}-{n}")},
                    {"type": "function_call", "id": item_id("fc"), "call_id": format!("call_{name}_{n}"),
                     "name": "get_weather", "arguments": arguments, "status": "completed"},
                    {"type": "message", "id": item_id("msg"), "role": "assistant", "status": "completed",
                     "content": [{"type": "output_text", "text": "Looking.", "annotations": []}]}
                ]
            });
            if body["stream"] == json!(true) {
                stream(response)
            } else {
                let mut answer = Response::new(Full::new(Bytes::from(response.to_string())).boxed_unsync());
                answer
                    .headers_mut()
                    .insert("content-type", "application/json".parse().unwrap());
                answer
            }
        }
    })
    .await
}

/// `response` as the event stream a provider sends, one event per frame.
fn stream(response: Value) -> Response<UpBody> {
    let (events, answer) = sse_response();
    let mut frames = vec![
        json!({"type": "response.created", "response": {"id": response["id"], "model": response["model"], "status": "in_progress", "output": []}}),
    ];
    for (index, item) in response["output"].as_array().unwrap().iter().enumerate() {
        frames.push(json!({"type": "response.output_item.done", "output_index": index, "item": item}));
    }
    frames.push(json!({"type": "response.completed", "response": response}));
    tokio::spawn(async move {
        for frame in frames {
            let event = format!("event: {}\ndata: {frame}\n\n", frame["type"].as_str().unwrap());
            if events.send(Bytes::from(event)).await.is_err() {
                return;
            }
        }
    });
    answer
}

const TOOLS: &str = r#"[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]"#;

/// `openai` and `bedrock` (reasoning bound to the model, as Bedrock binds it), the ledger on
/// `state` with `ledger` settings, and `extra` text.
fn config(openai: &Upstream, bedrock: &Upstream, state: &str, ledger: &str, extra: &str) -> String {
    format!(
        r#"default_provider = "openai"
[state]
{state}
[ledger]
{ledger}
[providers.openai]
base_url = "{openai}"
auth = "none"
[providers.bedrock]
base_url = "{bedrock}"
auth = "none"
encrypted_content_scope = "model"
{extra}
"#,
        openai = openai.base_url(),
        bedrock = bedrock.base_url(),
    )
}

struct Setup {
    openai: Upstream,
    bedrock: Upstream,
    proxy: Proxy,
}

async fn setup(ledger: &str, extra: &str) -> Setup {
    let openai = provider("openai", false).await;
    let bedrock = provider("bedrock", false).await;
    let proxy = Proxy::start(
        &config(&openai, &bedrock, r#"backend = "memory""#, ledger, extra),
        &[],
    )
    .await;
    Setup {
        openai,
        bedrock,
        proxy,
    }
}

/// What a turn came to: status, answer headers and JSON body (an event stream's
/// `response.completed` response).
struct Turn {
    status: u16,
    headers: http::HeaderMap,
    body: Value,
}

async fn post(proxy: &Proxy, provider: &str, body: Value) -> Turn {
    post_to(proxy, &format!("/{provider}/v1/responses"), body).await
}

async fn post_to(proxy: &Proxy, path: &str, body: Value) -> Turn {
    post_url(&proxy.url(path), body).await
}

async fn post_url(url: &str, body: Value) -> Turn {
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    let body = match text.strip_prefix("event: ") {
        Some(_) => text
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .map(|data| serde_json::from_str::<Value>(data).unwrap())
            .find(|event| event["type"] == "response.completed")
            .map(|event| event["response"].clone())
            .expect("the stream completed"),
        None => serde_json::from_str(&text).unwrap_or(Value::Null),
    };
    Turn {
        status,
        headers,
        body,
    }
}

fn first_turn(model: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream, "input": "Weather in Paris?", "tools": serde_json::from_str::<Value>(TOOLS).unwrap()})
}

fn output_of(turn: &Turn) -> Vec<Value> {
    turn.body["output"].as_array().unwrap().clone()
}

fn call_id_of(turn: &Turn) -> String {
    turn.body["output"][1]["call_id"].as_str().unwrap().to_owned()
}

fn code_of(turn: &Turn) -> &str {
    turn.body["error"]["code"].as_str().unwrap_or("")
}

#[tokio::test]
async fn a_previous_response_id_from_another_provider_is_refused_for_json_and_events() {
    for stream in [false, true] {
        let s = setup("", "").await;
        let turn1 = post(&s.proxy, "openai", first_turn("gpt-5", stream)).await;
        assert_eq!(turn1.status, 200);
        let id = turn1.body["id"].as_str().unwrap().to_owned();
        let continuation = json!({"model": "m", "previous_response_id": id, "tools": serde_json::from_str::<Value>(TOOLS).unwrap(),
            "input": [{"type": "function_call_output", "call_id": call_id_of(&turn1), "output": "sunny"}]});
        let refused = post(&s.proxy, "bedrock", continuation.clone()).await;
        assert_eq!(refused.status, 422, "stream {stream}: {}", refused.body);
        assert_eq!(code_of(&refused), "foreign_previous_response");
        assert_eq!(refused.body["error"]["param"], "previous_response_id");
        assert_eq!(refused.body["error"]["violations"][0]["index"], Value::Null);
        assert!(s.bedrock.received().is_empty(), "bedrock never saw it");
        let allowed = post(&s.proxy, "openai", continuation).await;
        assert_eq!(allowed.status, 200, "stream {stream}: {}", allowed.body);
        assert_eq!(s.openai.received().len(), 2);
    }
}

/// On the stores of this process the record is taken before the answer's last bytes pass on,
/// and no commit is waited for (docs/ledger.md#when-a-record-is-written): the next turn, sent the
/// moment the answer ended (on `embedded`, before the writer's batch commits), finds it, as a
/// continuation and as a replayed item's provenance.
#[tokio::test]
async fn the_next_turn_finds_the_record_at_once_on_the_stores_of_this_process() {
    let dir = tempfile::tempdir().unwrap();
    let embedded = format!("backend = \"embedded\"\npath = \"{}\"", dir.path().display());
    for state in [r#"backend = "memory""#, embedded.as_str()] {
        let openai = provider("openai", false).await;
        let bedrock = provider("bedrock", false).await;
        let proxy = Proxy::start(&config(&openai, &bedrock, state, "", ""), &[]).await;
        for stream in [false, true] {
            let turn1 = post(&proxy, "openai", first_turn("gpt-5", stream)).await;
            assert_eq!(turn1.status, 200);
            let continuation = json!({"model": "m", "previous_response_id": turn1.body["id"],
                "input": [{"type": "function_call_output", "call_id": call_id_of(&turn1), "output": "sunny"}]});
            let refused = post(&proxy, "bedrock", continuation.clone()).await;
            assert_eq!(
                code_of(&refused),
                "foreign_previous_response",
                "{state}, stream {stream}: {}",
                refused.body
            );
            let mut replayed = output_of(&turn1);
            replayed.push(
                json!({"type": "function_call_output", "call_id": call_id_of(&turn1), "output": "sunny"}),
            );
            let refused = post(&proxy, "bedrock", json!({"model": "m", "input": replayed})).await;
            assert_eq!(
                code_of(&refused),
                "foreign_encrypted_content",
                "{state}, stream {stream}: {}",
                refused.body
            );
            assert_eq!(
                post(&proxy, "openai", continuation).await.status,
                200,
                "{state}, stream {stream}"
            );
        }
        assert!(
            bedrock.received().is_empty(),
            "{state}: bedrock never saw a refused turn"
        );
        proxy.shutdown().await;
    }
}

#[tokio::test]
async fn the_answer_passes_byte_for_byte_and_what_was_never_recorded_is_judged_as_before() {
    let s = setup("", "").await;
    let turn1 = post(&s.proxy, "openai", first_turn("gpt-5", false)).await;
    assert_eq!(turn1.body["output"][0]["encrypted_content"], "enc-openai-gpt-5-1");
    // An id the ledger never saw (another gateway, older history) is no violation.
    let unknown = json!({"model": "m", "previous_response_id": "resp_elsewhere", "input": [
        {"type": "function_call_output", "call_id": "call_elsewhere", "output": "x"},
        {"type": "reasoning", "id": "rs_elsewhere", "summary": [], "encrypted_content": "enc-elsewhere"}]});
    assert_eq!(post(&s.proxy, "bedrock", unknown).await.status, 200);
    assert_eq!(s.bedrock.received().len(), 1);
}

#[tokio::test]
async fn encrypted_reasoning_from_another_provider_is_refused_or_stripped() {
    for stream in [false, true] {
        let s = setup("", "").await;
        let turn1 = post(&s.proxy, "openai", first_turn("gpt-5", stream)).await;
        let mut input = vec![json!({"role": "user", "content": "Weather in Paris?"})];
        input.extend(output_of(&turn1));
        input.push(json!({"type": "function_call_output", "call_id": call_id_of(&turn1), "output": "sunny"}));
        let history =
            json!({"model": "m", "input": input, "tools": serde_json::from_str::<Value>(TOOLS).unwrap()});
        let refused = post(&s.proxy, "bedrock", history.clone()).await;
        assert_eq!(refused.status, 422, "{}", refused.body);
        assert_eq!(code_of(&refused), "foreign_encrypted_content");
        assert_eq!(refused.body["error"]["param"], "input[1]");
        // The same history goes back to the provider that made it.
        assert_eq!(post(&s.proxy, "openai", history.clone()).await.status, 200);
        // Without its id, the blob alone is known by its digest.
        let mut anonymous = history.clone();
        anonymous["input"][1].as_object_mut().unwrap().remove("id");
        assert_eq!(
            code_of(&post(&s.proxy, "bedrock", anonymous).await),
            "foreign_encrypted_content"
        );
    }
    let s = setup("", "[gate.rules]\nforeign_encrypted_content = \"strip\"").await;
    let turn1 = post(&s.proxy, "openai", first_turn("gpt-5", false)).await;
    let mut input = output_of(&turn1);
    input.push(json!({"type": "function_call_output", "call_id": call_id_of(&turn1), "output": "sunny"}));
    let stripped = post(&s.proxy, "bedrock", json!({"model": "m", "input": input})).await;
    assert_eq!(stripped.status, 200, "{}", stripped.body);
    assert_eq!(stripped.headers["x-replaygate-stripped"], "input[0]");
    let sent: Value = serde_json::from_slice(&s.bedrock.received()[0].body).unwrap();
    assert_eq!(sent["input"].as_array().unwrap().len(), 3);
    assert_eq!(sent["input"][0]["type"], "function_call");
}

#[tokio::test]
async fn bedrock_reasoning_is_bound_to_its_model() {
    let s = setup("", "").await;
    let turn1 = post(&s.proxy, "bedrock", first_turn("openai.gpt-oss-120b", false)).await;
    let history = |model: &str| {
        let mut input = output_of(&turn1);
        input.push(json!({"type": "function_call_output", "call_id": call_id_of(&turn1), "output": "sunny"}));
        json!({"model": model, "input": input})
    };
    assert_eq!(
        post(&s.proxy, "bedrock", history("openai.gpt-oss-120b"))
            .await
            .status,
        200
    );
    let other_model = post(&s.proxy, "bedrock", history("openai.gpt-5.6-sol")).await;
    assert_eq!(
        code_of(&other_model),
        "foreign_encrypted_content",
        "{}",
        other_model.body
    );
}

#[tokio::test]
async fn a_changed_recorded_item_is_reported_as_tampered() {
    let s = setup("", "").await;
    let turn1 = post(&s.proxy, "openai", first_turn("gpt-5", false)).await;
    let mut output = output_of(&turn1);
    let call_id = call_id_of(&turn1);
    let replay = |output: Vec<Value>| {
        let mut input = output;
        input.push(json!({"type": "function_call_output", "call_id": call_id, "output": "sunny"}));
        json!({"model": "gpt-5", "input": input, "tools": serde_json::from_str::<Value>(TOOLS).unwrap()})
    };
    let faithful = post(&s.proxy, "openai", replay(output.clone())).await;
    assert_eq!(faithful.status, 200);
    assert!(faithful.headers.get("x-replaygate-monitored").is_none());
    output[1]["arguments"] = json!(r#"{"city":"Lyon"}"#);
    let tampered = post(&s.proxy, "openai", replay(output)).await;
    assert_eq!(tampered.status, 200, "item_tampered is monitored by default");
    assert_eq!(
        tampered.headers["x-replaygate-monitored"],
        "item_tampered@input[1]"
    );
}

#[tokio::test]
async fn a_reference_to_an_item_another_provider_stored_is_refused() {
    let s = setup("", "").await;
    let turn1 = post(&s.proxy, "openai", first_turn("gpt-5", false)).await;
    let reference =
        json!({"model": "m", "input": [{"type": "item_reference", "id": turn1.body["output"][2]["id"]}]});
    let refused = post(&s.proxy, "bedrock", reference.clone()).await;
    assert_eq!(code_of(&refused), "foreign_item_reference", "{}", refused.body);
    assert_eq!(post(&s.proxy, "openai", reference).await.status, 200);
}

#[tokio::test]
async fn ids_numbered_per_response_never_refuse_a_replay() {
    let openai = provider_with("openai", false, true).await;
    let bedrock = provider_with("bedrock", false, true).await;
    let proxy = Proxy::start(&config(&openai, &bedrock, r#"backend = "memory""#, "", ""), &[]).await;
    // Both providers answer with `rs_0`, `fc_0` and `msg_0`: the last one recorded is OpenAI's.
    let at_bedrock = post(&proxy, "bedrock", first_turn("openai.gpt-oss-120b", false)).await;
    post(&proxy, "openai", first_turn("gpt-5", false)).await;
    let mut input = output_of(&at_bedrock);
    input[0].as_object_mut().unwrap().remove("encrypted_content");
    input.push(json!({"type": "item_reference", "id": "msg_0"}));
    input
        .push(json!({"type": "function_call_output", "call_id": call_id_of(&at_bedrock), "output": "sunny"}));
    let replay = post(
        &proxy,
        "bedrock",
        json!({"model": "openai.gpt-oss-120b", "input": input}),
    )
    .await;
    assert_eq!(replay.status, 200, "{}", replay.body);
    assert!(replay
        .headers
        .get("x-replaygate-monitored")
        .is_none_or(|v| !v.to_str().unwrap().contains("item_")));
}

#[tokio::test]
async fn a_continuation_pairs_its_outputs_with_the_recorded_calls() {
    let s = setup("", "").await;
    let turn1 = post(&s.proxy, "openai", first_turn("gpt-5", false)).await;
    let continuation = |call_id: &str| {
        json!({"model": "gpt-5", "previous_response_id": turn1.body["id"],
               "input": [{"type": "function_call_output", "call_id": call_id, "output": "sunny"}]})
    };
    assert_eq!(
        post(&s.proxy, "openai", continuation(&call_id_of(&turn1)))
            .await
            .status,
        200
    );
    let mismatch = post(&s.proxy, "openai", continuation("call_never_made")).await;
    assert_eq!(mismatch.status, 422, "{}", mismatch.body);
    assert_eq!(code_of(&mismatch), "call_id_mismatch");
    // A chain of two: the output answers the call of the response before the previous one.
    let turn2 = post(&s.proxy, "openai", continuation(&call_id_of(&turn1))).await;
    let older = json!({"model": "gpt-5", "previous_response_id": turn2.body["id"],
        "input": [{"type": "function_call_output", "call_id": call_id_of(&turn1), "output": "again"}]});
    assert_eq!(post(&s.proxy, "openai", older).await.status, 200);
}

#[tokio::test]
async fn a_session_is_carried_to_another_provider_and_back() {
    let s = setup("store_items = true\ncarry_sessions = true", "").await;
    let turn1 = post(&s.proxy, "openai", first_turn("gpt-5", false)).await;
    let id1 = turn1.body["id"].as_str().unwrap().to_owned();
    let turn2 = post(
        &s.proxy,
        "bedrock",
        json!({"model": "openai.gpt-oss-120b", "previous_response_id": id1, "tools": serde_json::from_str::<Value>(TOOLS).unwrap(),
               "input": [{"type": "function_call_output", "call_id": call_id_of(&turn1), "output": "sunny"}]}),
    )
    .await;
    assert_eq!(turn2.status, 200, "{}", turn2.body);
    assert_eq!(turn2.headers["x-replaygate-carried"], id1.as_str());
    let sent: Value = serde_json::from_slice(&s.bedrock.received()[0].body).unwrap();
    assert!(sent.get("previous_response_id").is_none());
    let types: Vec<&str> = sent["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    // The user message, OpenAI's call and message (its reasoning left out), the new output.
    assert_eq!(
        types,
        ["message", "function_call", "message", "function_call_output"]
    );
    assert_eq!(sent["input"][0]["content"], "Weather in Paris?");
    assert!(sent["input"]
        .as_array()
        .unwrap()
        .iter()
        .all(|item| item.get("id").is_none()));
    assert_eq!(sent["tools"], serde_json::from_str::<Value>(TOOLS).unwrap());
    // Back to OpenAI, continuing from Bedrock's answer: the whole chain comes along.
    let id2 = turn2.body["id"].as_str().unwrap().to_owned();
    let turn3 = post(
        &s.proxy,
        "openai",
        json!({"model": "gpt-5", "previous_response_id": id2,
               "input": [{"type": "function_call_output", "call_id": call_id_of(&turn2), "output": "rain"}]}),
    )
    .await;
    assert_eq!(turn3.status, 200, "{}", turn3.body);
    assert_eq!(turn3.headers["x-replaygate-carried"], id2.as_str());
    let sent: Value = serde_json::from_slice(&s.openai.received()[1].body).unwrap();
    let types: Vec<&str> = sent["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "message",
            "function_call",
            "message",
            "function_call_output",
            "function_call",
            "message",
            "function_call_output"
        ]
    );
    // Without carrying, the same turn is refused.
    let plain = setup("store_items = true", "").await;
    let turn1 = post(&plain.proxy, "openai", first_turn("gpt-5", false)).await;
    let refused = post(
        &plain.proxy,
        "bedrock",
        json!({"model": "m", "previous_response_id": turn1.body["id"], "input": "next"}),
    )
    .await;
    assert_eq!(code_of(&refused), "foreign_previous_response");
}

/// The message of a refusal.
fn message_of(turn: &Turn) -> &str {
    turn.body["error"]["message"].as_str().unwrap_or("")
}

#[tokio::test]
async fn a_foreign_previous_response_names_carry_sessions_when_carrying_could_serve_it() {
    // The ledger on, carrying off (items stored or not): the refusal names the setting that
    // lets the same client go on unchanged.
    for ledger in ["", "store_items = true"] {
        let s = setup(ledger, "").await;
        let turn1 = post(&s.proxy, "openai", first_turn("gpt-5", false)).await;
        let refused = post(
            &s.proxy,
            "bedrock",
            json!({"model": "m", "previous_response_id": turn1.body["id"], "input": "next"}),
        )
        .await;
        assert_eq!(code_of(&refused), "foreign_previous_response", "{}", refused.body);
        let message = message_of(&refused);
        assert!(
            message.contains("[ledger] carry_sessions = true"),
            "{ledger:?}: {message}"
        );
        assert!(message.contains("store_items = true"), "{ledger:?}: {message}");
        let violation = refused.body["error"]["violations"][0]["message"]
            .as_str()
            .unwrap();
        assert!(
            violation.contains("carry_sessions = true") && message.ends_with(violation),
            "{message}"
        );
        assert!(s.bedrock.received().is_empty());
    }
    // Carrying on, but the chain is deeper than `max_chain`: it cannot be carried, and the
    // message says so instead of naming a setting already on.
    let s = setup("store_items = true\ncarry_sessions = true\nmax_chain = 1", "").await;
    let turn1 = post(&s.proxy, "openai", first_turn("gpt-5", false)).await;
    let turn2 = post(
        &s.proxy,
        "openai",
        json!({"model": "gpt-5", "previous_response_id": turn1.body["id"], "tools": serde_json::from_str::<Value>(TOOLS).unwrap(),
               "input": [{"type": "function_call_output", "call_id": call_id_of(&turn1), "output": "sunny"}]}),
    )
    .await;
    assert_eq!(turn2.status, 200, "{}", turn2.body);
    let refused = post(
        &s.proxy,
        "bedrock",
        json!({"model": "m", "previous_response_id": turn2.body["id"], "input": "next"}),
    )
    .await;
    assert_eq!(code_of(&refused), "foreign_previous_response", "{}", refused.body);
    assert!(refused.headers.get("x-replaygate-carried").is_none());
    let message = message_of(&refused);
    assert!(message.contains("could not be carried"), "{message}");
    assert!(!message.contains("carry_sessions"), "{message}");
    assert!(s.bedrock.received().is_empty());
    // A chain of one response is carried as before.
    let carried = post(
        &s.proxy,
        "bedrock",
        json!({"model": "m", "previous_response_id": turn1.body["id"], "input": "next"}),
    )
    .await;
    assert_eq!(carried.status, 200, "{}", carried.body);
    assert_eq!(
        carried.headers["x-replaygate-carried"],
        turn1.body["id"].as_str().unwrap()
    );
}

#[tokio::test]
async fn calls_that_do_not_fit_the_tools_are_flagged_logged_and_audited() {
    let openai = provider("openai", true).await;
    let bedrock = provider("bedrock", false).await;
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let extra = format!("[audit]\npath = \"{}\"", audit.display());
    let proxy = Proxy::start(
        &config(&openai, &bedrock, r#"backend = "memory""#, "", &extra),
        &[],
    )
    .await;
    let flagged = post(&proxy, "openai", first_turn("gpt-5", false)).await;
    assert_eq!(flagged.status, 200);
    assert_eq!(
        flagged.headers["x-replaygate-response-violations"],
        "arguments_schema@output[1]"
    );
    assert_eq!(
        flagged.body["output"][1]["arguments"], r#"{"town":"Paris"}"#,
        "the answer is unchanged"
    );
    let fine = post(&proxy, "bedrock", first_turn("m", false)).await;
    assert!(fine.headers.get("x-replaygate-response-violations").is_none());
    assert_eq!(fine.body["output"][1]["arguments"], r#"{"city":"Paris"}"#);
    // A stream cannot carry the header; its flagged calls are audited all the same.
    let streamed = post(&proxy, "openai", first_turn("gpt-5", true)).await;
    assert!(streamed.headers.get("x-replaygate-response-violations").is_none());
    let mut lines = Vec::new();
    for _ in 0..100 {
        lines = std::fs::read_to_string(&audit)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap())
            .filter(|line| line["kind"] == "response")
            .collect();
        if lines.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["response_id"], flagged.body["id"]);
    assert_eq!(lines[0]["provider"], "openai");
    assert_eq!(
        lines[1]["response_violations"],
        json!([{"index": 1, "reason": "arguments_schema", "param": "output[1].arguments"}])
    );
    assert!(
        !lines[0].to_string().contains("town"),
        "no argument value is audited"
    );
}

#[tokio::test]
async fn a_store_that_is_down_refuses_the_requests_that_need_it_unless_allowed() {
    let openai = provider("openai", false).await;
    let bedrock = provider("bedrock", false).await;
    let port = crate::support::closed_port::closed_port();
    let state = format!("backend = \"redis\"\nurl = \"redis://127.0.0.1:{port}\"\ntimeout = \"200ms\"");
    let proxy = Proxy::start(&config(&openai, &bedrock, &state, "", ""), &[]).await;
    // A turn that names no id needs no lookup: it is answered (its record is lost).
    let turn1 = post(&proxy, "openai", first_turn("gpt-5", false)).await;
    assert_eq!(turn1.status, 200);
    let continuation = json!({"model": "m", "previous_response_id": turn1.body["id"], "input": "next"});
    let refused = post(&proxy, "bedrock", continuation.clone()).await;
    assert_eq!(refused.status, 503);
    assert_eq!(code_of(&refused), "ledger_unavailable");
    assert_eq!(refused.body["error"]["type"], "server_error");
    assert_eq!(refused.headers["x-should-retry"], "true");
    let allowing = Proxy::start(
        &config(&openai, &bedrock, &state, "on_unavailable = \"allow\"", ""),
        &[],
    )
    .await;
    assert_eq!(post(&allowing, "bedrock", continuation).await.status, 200);
}

#[tokio::test]
async fn the_embedded_store_remembers_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let openai = provider("openai", false).await;
    let bedrock = provider("bedrock", false).await;
    let state = format!("backend = \"embedded\"\npath = \"{}\"", dir.path().display());
    let text = config(&openai, &bedrock, &state, "", "");
    let first = Proxy::start(&text, &[]).await;
    let turn1 = post(&first, "openai", first_turn("gpt-5", true)).await;
    first.shutdown().await;
    let second = Proxy::start(&text, &[]).await;
    let refused = post(
        &second,
        "bedrock",
        json!({"model": "m", "previous_response_id": turn1.body["id"], "input": "next"}),
    )
    .await;
    assert_eq!(code_of(&refused), "foreign_previous_response", "{}", refused.body);
}

#[tokio::test]
async fn the_embedded_store_keeps_what_was_on_disk_when_the_process_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let openai = provider("openai", false).await;
    let bedrock = provider("bedrock", false).await;
    let state = format!(
        "backend = \"embedded\"\npath = \"{}\"",
        dir.path().join("state").display()
    );
    let path = dir.path().join("proxy.toml");
    std::fs::write(&path, config(&openai, &bedrock, &state, "", "")).unwrap();
    let url = |serve: &Serve, provider: &str| format!("http://{}/{provider}/v1/responses", serve.address);
    let mut first = Serve::start(Serve::command(&path)).await;
    let turn1 = post_url(&url(&first, "openai"), first_turn("gpt-5", false)).await;
    assert_eq!(turn1.status, 200);
    // Committed within 20 ms, and with its commit in the OS's hands: a kill loses nothing
    // committed. (The 0.5 s fdatasync is for a machine that goes down, which no test makes.)
    tokio::time::sleep(Duration::from_millis(1500)).await;
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    // The killed process's lock went with it; the journal is replayed.
    let second = Serve::start(Serve::command(&path)).await;
    let refused = post_url(
        &url(&second, "bedrock"),
        json!({"model": "m", "previous_response_id": turn1.body["id"], "input": "next"}),
    )
    .await;
    assert_eq!(code_of(&refused), "foreign_previous_response", "{}", refused.body);
}

#[tokio::test]
async fn a_second_process_on_the_same_embedded_store_exits_2_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let openai = provider("openai", false).await;
    let bedrock = provider("bedrock", false).await;
    let state = format!(
        "backend = \"embedded\"\npath = \"{}\"",
        dir.path().join("state").display()
    );
    let path = dir.path().join("proxy.toml");
    std::fs::write(&path, config(&openai, &bedrock, &state, "", "")).unwrap();
    let _first = Serve::start(Serve::command(&path)).await;
    let mut second = Serve::command(&path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Bounded: a second process that served instead of exiting is killed, and the test fails.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while second.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            second.kill().unwrap();
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let second = second.wait_with_output().unwrap();
    assert_eq!(second.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        stderr.contains("the state backend is unavailable") && stderr.contains("is already open"),
        "{stderr}"
    );
}

#[tokio::test]
async fn two_replicas_share_the_ledger_and_the_rate_limits_on_redis() {
    let redis = RedisServer::start();
    let openai = provider("openai", false).await;
    let bedrock = provider("bedrock", false).await;
    let state = format!("backend = \"redis\"\nurl = \"{}\"", redis.url());
    let teams = format!(
        "[teams.app]\nkeys = [\"{}\"]\nrequests_per_minute = 3",
        replaygate::keys::format_digest(&replaygate::keys::digest("rg-app-key"))
    );
    let text = config(&openai, &bedrock, &state, "", &teams);
    let (a, b) = (Proxy::start(&text, &[]).await, Proxy::start(&text, &[]).await);
    let send = |proxy: &Proxy, provider: &str, body: Value| {
        reqwest::Client::new()
            .post(proxy.url(&format!("/{provider}/v1/responses")))
            .header("authorization", "Bearer rg-app-key")
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
    };
    let turn1: Value = serde_json::from_slice(
        &send(&a, "openai", first_turn("gpt-5", false))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    )
    .unwrap();
    let turn2 = send(
        &b,
        "bedrock",
        json!({"model": "m", "previous_response_id": turn1["id"], "input": "next"}),
    )
    .await
    .unwrap();
    assert_eq!(turn2.status(), 422);
    let refused: Value = serde_json::from_slice(&turn2.bytes().await.unwrap()).unwrap();
    assert_eq!(refused["error"]["code"], "foreign_previous_response");
    // Two requests counted so far, one on each replica: a third passes, a fourth is over.
    assert_eq!(
        send(&a, "openai", json!({"model": "m", "input": "x"}))
            .await
            .unwrap()
            .status(),
        200
    );
    let over = send(&b, "openai", json!({"model": "m", "input": "x"}))
        .await
        .unwrap();
    assert_eq!(over.status(), 429);
    assert!(over.headers().contains_key("retry-after"));
}

/// Whether the ledger knows response `id` as `openai`'s: a continuation of it on `bedrock` is
/// refused (`foreign_previous_response`), as it is not for an id the ledger does not know.
async fn known_as_openais(proxy: &Proxy, id: &str) -> bool {
    let continuation = json!({"model": "m", "previous_response_id": id, "input": "next"});
    let turn = post(proxy, "bedrock", continuation).await;
    match turn.status {
        200 => false,
        _ => {
            assert_eq!(code_of(&turn), "foreign_previous_response", "{id}: {}", turn.body);
            true
        }
    }
}

#[tokio::test]
async fn answers_the_ledger_cannot_vouch_for_pass_unchanged_and_record_at_most_their_id() {
    let odd = Upstream::start(|request| async move {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        let text = match body["input"].as_str().unwrap() {
            "not json" => "this is not JSON".to_owned(),
            "long id" => {
                json!({"id": format!("resp_{}", "x".repeat(10_240)), "status": "completed", "output": []})
                    .to_string()
            }
            _ => json!({"id": "resp_failed", "status": "failed", "output": []}).to_string(),
        };
        let mut answer = Response::new(Full::new(Bytes::from(text)).boxed_unsync());
        answer
            .headers_mut()
            .insert("content-type", "application/json".parse().unwrap());
        answer
    })
    .await;
    let bedrock = provider("bedrock", false).await;
    let proxy = Proxy::start(&config(&odd, &bedrock, r#"backend = "memory""#, "", ""), &[]).await;
    for input in ["not json", "long id", "failed"] {
        let response = reqwest::Client::new()
            .post(proxy.url("/openai/v1/responses"))
            .body(json!({"model": "m", "input": input}).to_string())
            .header("content-type", "application/json")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let text = response.text().await.unwrap();
        assert!(
            text.starts_with("this is not JSON") || text.starts_with("{\"id\""),
            "{input}"
        );
    }
    // A failed response with no output is recorded by its id alone: whose it is.
    assert!(known_as_openais(&proxy, "resp_failed").await);
    // An id too long to record is not.
    assert!(!known_as_openais(&proxy, &format!("resp_{}", "x".repeat(10_240))).await);
}

#[tokio::test]
async fn a_huge_answer_and_a_stream_cut_mid_event_pass_as_they_are_and_record_their_id_alone() {
    const HUGE: usize = 50 << 20;
    let odd = Upstream::start(|request| async move {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        if body["stream"] == json!(true) {
            let (events, answer) = sse_response();
            tokio::spawn(async move {
                let created = json!({"type": "response.created", "response": {"id": "resp_cut", "status": "in_progress"}});
                let _ = events.send(Bytes::from(format!("data: {created}\n\n"))).await;
                let _ = events
                    .send(Bytes::from_static(b"data: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_"))
                    .await;
                // The sender drops here: the stream ends mid-event.
            });
            return answer;
        }
        let head = r#"{"id":"resp_huge","status":"completed","output":[{"type":"message","content":""#;
        let mut text = Vec::with_capacity(HUGE + 64);
        text.extend_from_slice(head.as_bytes());
        text.resize(HUGE, b'x');
        text.extend_from_slice(b"\"}]}");
        let mut answer = Response::new(Full::new(Bytes::from(text)).boxed_unsync());
        answer
            .headers_mut()
            .insert("content-type", "application/json".parse().unwrap());
        answer
    })
    .await;
    let bedrock = provider("bedrock", false).await;
    let proxy = Proxy::start(&config(&odd, &bedrock, r#"backend = "memory""#, "", ""), &[]).await;
    let client = reqwest::Client::new();
    let huge = client
        .post(proxy.url("/openai/v1/responses"))
        .header("content-type", "application/json")
        .body(json!({"model": "m", "input": "big"}).to_string())
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(huge.len(), HUGE + 4);
    assert!(huge.starts_with(b"{\"id\":\"resp_huge\""));
    let cut = client
        .post(proxy.url("/openai/v1/responses"))
        .header("content-type", "application/json")
        .body(json!({"model": "m", "input": "cut", "stream": true}).to_string())
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap_or_default();
    assert!(
        !String::from_utf8_lossy(&cut).contains("resp_cut\"}"),
        "nothing was added"
    );
    // Their items could not be read (one over the 32 MiB cap; a stream cut before any item
    // ended), their ids were: each response is known as the provider's that produced it.
    for id in ["resp_huge", "resp_cut"] {
        assert!(known_as_openais(&proxy, id).await, "{id} was recorded");
    }
    assert!(!known_as_openais(&proxy, "resp_never_seen").await);
}

#[tokio::test]
async fn a_redis_that_hangs_holds_no_request_longer_than_its_timeout() {
    let hanging = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = hanging.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = hanging.accept().await {
            open.push(stream);
        }
    });
    let openai = provider("openai", false).await;
    let bedrock = provider("bedrock", false).await;
    let state = format!("backend = \"redis\"\nurl = \"redis://127.0.0.1:{port}\"\ntimeout = \"300ms\"");
    let proxy = Proxy::start(&config(&openai, &bedrock, &state, "", ""), &[]).await;
    let started = std::time::Instant::now();
    let turn1 = post(&proxy, "openai", first_turn("gpt-5", false)).await;
    assert_eq!(
        turn1.status, 200,
        "the answer is passed on when its record cannot be written"
    );
    assert_eq!(turn1.body["output"].as_array().unwrap().len(), 3);
    let refused = post(
        &proxy,
        "bedrock",
        json!({"model": "m", "previous_response_id": turn1.body["id"], "input": "x"}),
    )
    .await;
    assert_eq!(code_of(&refused), "ledger_unavailable");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    held.abort();
}

#[tokio::test]
async fn a_compacted_answer_is_recorded_like_a_response() {
    let s = setup("", "").await;
    let compacted = post_to(
        &s.proxy,
        "/openai/v1/responses/compact",
        json!({"model": "gpt-5", "input": "a long history"}),
    )
    .await;
    let replay =
        json!({"model": "m", "input": [compacted.body["output"][0], {"role": "user", "content": "go on"}]});
    let refused = post(&s.proxy, "bedrock", replay.clone()).await;
    assert_eq!(code_of(&refused), "foreign_encrypted_content", "{}", refused.body);
    assert_eq!(post(&s.proxy, "openai", replay).await.status, 200);
    // Counting tokens is not an answer the ledger records.
    let counted = post_to(
        &s.proxy,
        "/openai/v1/responses/input_tokens",
        json!({"model": "gpt-5", "input": "x"}),
    )
    .await;
    let continuation = json!({"model": "m", "previous_response_id": counted.body["id"], "input": "next"});
    assert_eq!(post(&s.proxy, "bedrock", continuation).await.status, 200);
}

/// `body` grown past the size judged on the worker (64 KiB), so it is judged on the blocking
/// pool, where the thread that read it waits for the ledger's answer.
fn judged_on_the_pool(mut body: Value) -> Value {
    body["instructions"] = json!("Be brief. ".repeat(8_000));
    body
}

#[tokio::test]
async fn a_large_body_is_judged_with_the_ledgers_facts_on_the_blocking_pool() {
    let s = setup("store_items = true\ncarry_sessions = true", "").await;
    let turn1 = post(&s.proxy, "openai", judged_on_the_pool(first_turn("gpt-5", false))).await;
    assert_eq!(turn1.status, 200, "{}", turn1.body);
    let call_id = call_id_of(&turn1);
    let replay = |output: Vec<Value>| {
        let mut input = output;
        input.push(json!({"type": "function_call_output", "call_id": call_id, "output": "sunny"}));
        judged_on_the_pool(
            json!({"model": "gpt-5", "input": input, "tools": serde_json::from_str::<Value>(TOOLS).unwrap()}),
        )
    };
    let mut output = output_of(&turn1);
    let faithful = post(&s.proxy, "openai", replay(output.clone())).await;
    assert_eq!(faithful.status, 200, "{}", faithful.body);
    assert!(faithful.headers.get("x-replaygate-monitored").is_none());
    output[1]["arguments"] = json!(r#"{"city":"Lyon"}"#);
    let tampered = post(&s.proxy, "openai", replay(output)).await;
    assert_eq!(
        tampered.headers["x-replaygate-monitored"],
        "item_tampered@input[1]"
    );
    // A continuation sent to another provider is carried there, large as it is.
    let id1 = turn1.body["id"].as_str().unwrap().to_owned();
    let turn2 = post(
        &s.proxy,
        "bedrock",
        judged_on_the_pool(
            json!({"model": "openai.gpt-oss-120b", "previous_response_id": id1,
            "tools": serde_json::from_str::<Value>(TOOLS).unwrap(),
            "input": [{"type": "function_call_output", "call_id": call_id_of(&turn1), "output": "sunny"}]}),
        ),
    )
    .await;
    assert_eq!(turn2.status, 200, "{}", turn2.body);
    assert_eq!(turn2.headers["x-replaygate-carried"], id1.as_str());
    // Without carrying, it is refused, and an unknown id passes.
    let plain = setup("", "").await;
    let turn1 = post(
        &plain.proxy,
        "openai",
        judged_on_the_pool(first_turn("gpt-5", false)),
    )
    .await;
    let next =
        |id: Value| judged_on_the_pool(json!({"model": "m", "previous_response_id": id, "input": "next"}));
    let refused = post(&plain.proxy, "bedrock", next(turn1.body["id"].clone())).await;
    assert_eq!(code_of(&refused), "foreign_previous_response");
    let unknown = post(
        &plain.proxy,
        "bedrock",
        next(json!("resp_never_recorded_0123456789")),
    )
    .await;
    assert_eq!(unknown.status, 200, "{}", unknown.body);
}

/// A 12 MiB answer: its reasoning item alone carries `blob`, 10 MiB of encrypted_content.
fn big_response(blob: &str) -> Value {
    json!({
        "id": "resp_big", "object": "response", "model": "m", "status": "completed",
        "output": [
            {"type": "reasoning", "id": "rs_big", "summary": [], "encrypted_content": blob},
            {"type": "message", "id": "msg_big", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "x".repeat(2 << 20), "annotations": []}]}
        ]
    })
}

/// Replays the big answer's reasoning item to Bedrock, with and without its id: refused both
/// ways, since the ledger recorded it from OpenAI.
async fn big_reasoning_is_refused_on_bedrock(proxy: &Proxy, turn: &Turn) {
    let reasoning = output_of(turn)[0].clone();
    assert_eq!(
        reasoning["encrypted_content"].as_str().map(str::len),
        Some(10 << 20)
    );
    let input = json!([{"role": "user", "content": "big"}, reasoning, {"role": "user", "content": "next"}]);
    let replayed = post(proxy, "bedrock", json!({"model": "m", "input": input})).await;
    assert_eq!(replayed.status, 422, "{}", replayed.body);
    assert_eq!(code_of(&replayed), "foreign_encrypted_content");
    // Without its id, the 10 MiB blob is known by its digest.
    let mut anonymous = input.clone();
    anonymous[1].as_object_mut().unwrap().remove("id");
    let replayed = post(proxy, "bedrock", json!({"model": "m", "input": anonymous})).await;
    assert_eq!(
        code_of(&replayed),
        "foreign_encrypted_content",
        "{}",
        replayed.body
    );
}

#[tokio::test]
async fn an_answer_over_the_whole_body_cap_is_recorded_as_it_streams() {
    // 12 MiB of JSON; its reasoning item alone carries 10 MiB of encrypted_content.
    let blob = Arc::new("E".repeat(10 << 20));
    let served = blob.clone();
    let big = Upstream::start(move |_| {
        let blob = served.clone();
        async move {
            let response = big_response(&blob);
            let mut answer = Response::new(Full::new(Bytes::from(response.to_string())).boxed_unsync());
            answer
                .headers_mut()
                .insert("content-type", "application/json".parse().unwrap());
            answer
        }
    })
    .await;
    let bedrock = provider("bedrock", false).await;
    let proxy = Proxy::start(&config(&big, &bedrock, r#"backend = "memory""#, "", ""), &[]).await;
    let turn = post(&proxy, "openai", json!({"model": "m", "input": "big"})).await;
    assert_eq!(turn.status, 200);
    big_reasoning_is_refused_on_bedrock(&proxy, &turn).await;
}

#[tokio::test]
async fn a_stream_whose_events_pass_the_event_cap_is_recorded_as_it_streams() {
    // Its reasoning item's output_item.done event is 10 MiB, its response.completed 12 MiB.
    let blob = Arc::new("E".repeat(10 << 20));
    let served = blob.clone();
    let big = Upstream::start(move |_| {
        let blob = served.clone();
        async move { stream(big_response(&blob)) }
    })
    .await;
    let bedrock = provider("bedrock", false).await;
    let proxy = Proxy::start(&config(&big, &bedrock, r#"backend = "memory""#, "", ""), &[]).await;
    let turn = post(
        &proxy,
        "openai",
        json!({"model": "m", "input": "big", "stream": true}),
    )
    .await;
    assert_eq!(turn.status, 200);
    assert_eq!(turn.body["id"], "resp_big", "the stream passed whole");
    big_reasoning_is_refused_on_bedrock(&proxy, &turn).await;
    // The response itself is known as OpenAI's.
    let continuation = json!({"model": "m", "previous_response_id": "resp_big", "input": "next"});
    let continued = post(&proxy, "bedrock", continuation).await;
    assert_eq!(
        code_of(&continued),
        "foreign_previous_response",
        "{}",
        continued.body
    );
}
