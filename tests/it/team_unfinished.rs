//! Answers that leave state without completing are their team's (docs/teams.md#teams-and-their-data,
//! docs/ledger.md#what-the-ledger-records): a response that ended incomplete, failed or
//! cancelled, one whose answer was over the tap's caps, one whose stream broke or whose client
//! went away after it was created. With two teams behind one provider, the owner continues,
//! reads and cancels each, and replays the items it delivered without their looking tampered;
//! the other team gets 422 `cross_team_state` on a body and 404 `not_found` on the object
//! routes, and nothing of its is forwarded. Over HTTP (JSON and events) and WebSocket.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Response};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use super::teams::key_entry;
use crate::support::metrics::counter;
use crate::support::proxy::Proxy;
use crate::support::raw::{chunk, RawUpstream, SSE_HEAD};
use crate::support::upstream::{json_response, sse_response, UpBody, Upstream};

const ALPHA: &str = "rg-alpha-unfinished-key";
const BETA: &str = "rg-beta-unfinished-key";

/// More output items than the ledger's tap records (10,000): such an answer is recorded by
/// its response id alone.
const OVER_THE_ITEM_CAP: usize = 10_001;

/// The tool the answers' calls name, declared in what is sent back.
fn weather_tool() -> Value {
    json!({"type": "function", "name": "get_weather", "parameters": {"type": "object"}})
}

/// The items of the `incomplete` answer of request `n`: reasoning, a call, and a message cut
/// short.
fn incomplete_items(n: u64) -> Vec<Value> {
    vec![
        json!({"type": "reasoning", "id": format!("rs_incomplete_{n:016}"), "summary": [],
               "encrypted_content": format!("enc-incomplete-{n}")}),
        json!({"type": "function_call", "id": format!("fc_incomplete_{n:016}"), "call_id": format!("call_incomplete_{n}"),
               "name": "get_weather", "arguments": "{\"city\":\"Paris\"}", "status": "completed"}),
        json!({"type": "message", "id": format!("msg_incomplete_{n:016}"), "role": "assistant", "status": "incomplete",
               "content": [{"type": "output_text", "text": "The weather in Par", "annotations": []}]}),
    ]
}

/// A provider whose `/responses` answer is chosen by the request's string `input`:
/// `incomplete` (three items, status `incomplete`), `failed` and `cancelled` (no output),
/// `many` (completed, over the tap's item cap), `open` (events only: created, one item, then
/// keep-alive comments until the client goes away); anything else a completed response.
/// `"stream": true` gets events (`response.incomplete`, `response.failed`, `response.completed`
/// at the end). Any other path: a small JSON object naming it.
async fn provider() -> Upstream {
    let counter = Arc::new(AtomicU64::new(0));
    Upstream::start(move |request| {
        let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
        async move {
            let path = request.target.split('?').next().unwrap_or("").to_owned();
            if !path.ends_with("/responses") {
                let seen = json!({"object": "seen", "method": request.method.as_str(), "path": path});
                return json_response(200, seen.to_string());
            }
            let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
            let kind = body["input"].as_str().unwrap_or("next").to_owned();
            let (status, output) = match kind.as_str() {
                "incomplete" => ("incomplete", incomplete_items(n)),
                "failed" => ("failed", Vec::new()),
                "cancelled" => ("cancelled", Vec::new()),
                "many" => {
                    let item = |i: usize| {
                        json!({"type": "message", "id": format!("msg_many_{n}_{i:08}"), "role": "assistant",
                               "content": [{"type": "output_text", "text": "x", "annotations": []}]})
                    };
                    ("completed", (0..OVER_THE_ITEM_CAP).map(item).collect())
                }
                "open" => ("in_progress", incomplete_items(n)[..1].to_vec()),
                _ => (
                    "completed",
                    vec![json!({"type": "message", "id": format!("msg_next_{n:016}"), "role": "assistant",
                                "status": "completed", "content": [{"type": "output_text", "text": "Done.", "annotations": []}]})],
                ),
            };
            let response = json!({"id": format!("resp_{kind}_{n}"), "object": "response", "model": body["model"],
                                  "status": status, "output": output});
            match (body["stream"] == json!(true), kind.as_str()) {
                (true, "open") => open_events(response),
                (true, _) => events(response),
                (false, _) => json_response(200, response.to_string()),
            }
        }
    })
    .await
}

fn event(data: &Value) -> Bytes {
    Bytes::from(format!(
        "event: {}\ndata: {data}\n\n",
        data["type"].as_str().unwrap()
    ))
}

/// `response` as events: created, each item done, then the terminal event its status calls for.
fn events(response: Value) -> Response<UpBody> {
    let (sender, answer) = sse_response();
    tokio::spawn(async move {
        let head =
            json!({"id": response["id"], "model": response["model"], "status": "in_progress", "output": []});
        let mut frames = vec![json!({"type": "response.created", "response": head})];
        for (index, item) in response["output"].as_array().unwrap().iter().enumerate() {
            frames.push(json!({"type": "response.output_item.done", "output_index": index, "item": item}));
        }
        let terminal = match response["status"].as_str().unwrap() {
            "incomplete" => "response.incomplete",
            "failed" => "response.failed",
            _ => "response.completed",
        };
        frames.push(json!({"type": terminal, "response": response}));
        for frame in frames {
            if sender.send(event(&frame)).await.is_err() {
                return;
            }
        }
    });
    answer
}

/// `response` created, its first item done, then a keep-alive comment every 50 ms (at most
/// 10 s) until the client goes away.
fn open_events(response: Value) -> Response<UpBody> {
    let (sender, answer) = sse_response();
    tokio::spawn(async move {
        let head =
            json!({"id": response["id"], "model": response["model"], "status": "in_progress", "output": []});
        let item = &response["output"][0];
        for frame in [
            json!({"type": "response.created", "response": head}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        ] {
            if sender.send(event(&frame)).await.is_err() {
                return;
            }
        }
        for _ in 0..200 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if sender
                .send(Bytes::from_static(b": keep-alive\n\n"))
                .await
                .is_err()
            {
                return;
            }
        }
    });
    answer
}

/// Two teams on provider `openai` (its `base_url` given), the ledger in memory.
fn config(base_url: &str) -> String {
    format!(
        r#"default_provider = "openai"
[state]
backend = "memory"
[providers.openai]
base_url = "{base_url}"
auth = "none"
[teams.alpha]
keys = ["{alpha}"]
[teams.beta]
keys = ["{beta}"]
"#,
        alpha = key_entry(ALPHA),
        beta = key_entry(BETA),
    )
}

struct Answer {
    status: u16,
    headers: HeaderMap,
    /// The JSON body, or for events each event's data.
    body: Value,
}

impl Answer {
    /// The refusal's `(status, code, param)`.
    fn refusal(&self) -> (u16, &str, &str) {
        let error = &self.body["error"];
        (
            self.status,
            error["code"].as_str().unwrap_or(""),
            error["param"].as_str().unwrap_or(""),
        )
    }

    /// The response id of an answer: a JSON response's, or the created event's.
    fn response_id(&self) -> String {
        let id = match &self.body {
            Value::Array(events) => events
                .iter()
                .find(|event| event["type"] == "response.created")
                .map(|event| &event["response"]["id"]),
            body => Some(&body["id"]),
        };
        id.and_then(Value::as_str).expect("a response id").to_owned()
    }

    /// The output items an answer delivered: a JSON response's `output`, or each
    /// `response.output_item.done` event's item.
    fn items(&self) -> Vec<Value> {
        match &self.body {
            Value::Array(events) => events
                .iter()
                .filter(|event| event["type"] == "response.output_item.done")
                .map(|event| event["item"].clone())
                .collect(),
            body => body["output"].as_array().unwrap().clone(),
        }
    }
}

async fn send(proxy: &Proxy, method: &str, key: &str, path: &str, body: Option<Value>) -> Answer {
    let response = super::team_state::request(proxy, method, key, path, body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    let body = match text.starts_with("event: ") {
        true => Value::Array(
            text.lines()
                .filter_map(|line| line.strip_prefix("data: "))
                .map(|data| serde_json::from_str(data).unwrap())
                .collect(),
        ),
        false => serde_json::from_str(&text).unwrap_or(Value::Null),
    };
    Answer {
        status,
        headers,
        body,
    }
}

async fn turn(proxy: &Proxy, key: &str, body: Value) -> Answer {
    send(proxy, "POST", key, "/openai/v1/responses", Some(body)).await
}

fn continuation(id: &str, input: Value) -> Value {
    json!({"model": "m1", "previous_response_id": id, "input": input, "tools": [weather_tool()]})
}

/// Response `id`, answered to alpha, is alpha's: beta can neither continue, read nor cancel it
/// (the same 404 as for an id never seen), and nothing of beta's is forwarded; alpha can do
/// all three. `forwarded` counts what the provider received.
async fn owned_by_alpha(proxy: &Proxy, forwarded: &dyn Fn() -> usize, id: &str) {
    let before = forwarded();
    let refused = turn(proxy, BETA, continuation(id, json!("next"))).await;
    assert_eq!(
        refused.refusal(),
        (422, "cross_team_state", "previous_response_id"),
        "{id}: {}",
        refused.body
    );
    let never_seen = send(proxy, "GET", BETA, "/openai/v1/responses/resp_never_seen", None).await;
    for (method, path) in [
        ("GET", format!("/openai/v1/responses/{id}")),
        ("POST", format!("/openai/v1/responses/{id}/cancel")),
    ] {
        let other = send(proxy, method, BETA, &path, None).await;
        assert_eq!(other.refusal(), (404, "not_found", ""), "{method} {path}");
        assert_eq!(other.body, never_seen.body, "no oracle of existence");
    }
    assert_eq!(forwarded(), before, "nothing of beta's was forwarded for {id}");
    let continued = turn(proxy, ALPHA, continuation(id, json!("next"))).await;
    assert_eq!(continued.status, 200, "{id}: {}", continued.body);
    for (method, path) in [
        ("GET", format!("/openai/v1/responses/{id}")),
        ("POST", format!("/openai/v1/responses/{id}/cancel")),
    ] {
        let own = send(proxy, method, ALPHA, &path, None).await;
        assert_eq!(own.status, 200, "{method} {path}: {}", own.body);
        assert_eq!(own.body["object"], "seen");
    }
    assert_eq!(forwarded(), before + 3);
}

#[tokio::test]
async fn answers_that_did_not_complete_or_passed_the_caps_are_their_teams_over_json_and_events() {
    let openai = provider().await;
    let mut proxy = Proxy::start(&config(&openai.base_url()), &[]).await;
    let admin = proxy.admin().await;
    let forwarded = || openai.received().len();
    let mut answered = 0;
    for stream in [false, true] {
        let kinds: &[&str] = match stream {
            false => &["incomplete", "failed", "cancelled", "many"],
            true => &["incomplete", "failed", "many"],
        };
        for kind in kinds {
            let first = turn(
                &proxy,
                ALPHA,
                json!({"model": "m1", "stream": stream, "input": kind}),
            )
            .await;
            assert_eq!(first.status, 200, "{kind}");
            answered += 1;
            let id = first.response_id();
            owned_by_alpha(&proxy, &forwarded, &id).await;
            answered += 1; // alpha's continuation
        }
    }
    // Each answer was recorded (ids alone, for the failed, cancelled and over-cap ones):
    // counted as written, none dropped.
    let series =
        |result: &str| format!("replaygate_ledger_operations_total{{op=\"record\",result=\"{result}\"}}");
    assert_eq!(counter(admin, &series("ok")).await, answered);
    assert_eq!(counter(admin, &series("dropped")).await, 0);
    assert_eq!(counter(admin, &series("too_large")).await, 0);
}

#[tokio::test]
async fn the_items_an_incomplete_answer_delivered_are_its_teams_and_replay_untampered() {
    let openai = provider().await;
    let proxy = Proxy::start(&config(&openai.base_url()), &[]).await;
    for stream in [false, true] {
        let first = turn(
            &proxy,
            ALPHA,
            json!({"model": "m1", "stream": stream, "input": "incomplete"}),
        )
        .await;
        assert_eq!(first.status, 200);
        let id = first.response_id();
        let items = first.items();
        assert_eq!(items.len(), 3, "{}", first.body);
        let call_id = items[1]["call_id"].as_str().unwrap().to_owned();
        // The whole history sent back: alpha's own items, as delivered, are no tampering.
        let mut history = vec![json!({"type": "message", "role": "user", "content": "incomplete"})];
        history.extend(items.iter().cloned());
        history.push(json!({"type": "function_call_output", "call_id": call_id, "output": "sunny"}));
        let replay = json!({"model": "m1", "input": history, "tools": [weather_tool()]});
        let own = turn(&proxy, ALPHA, replay.clone()).await;
        assert_eq!(own.status, 200, "{}", own.body);
        assert!(
            !own.headers.contains_key("x-replaygate-monitored"),
            "{:?}",
            own.headers.get("x-replaygate-monitored")
        );
        let before = openai.received().len();
        let other = turn(&proxy, BETA, replay).await;
        assert_eq!(other.refusal().0, 422, "{}", other.body);
        assert_eq!(other.refusal().1, "cross_team_state", "{}", other.body);
        assert_eq!(openai.received().len(), before);
        // A continuation answering its call is allowed; so is one answering a call its record
        // may not hold (the provider may keep items the answer did not deliver whole): pairing
        // is not judged on a response that did not complete.
        for answered in [call_id.as_str(), "call_not_recorded"] {
            let output = json!([{"type": "function_call_output", "call_id": answered, "output": "sunny"}]);
            let continued = turn(&proxy, ALPHA, continuation(&id, output)).await;
            assert_eq!(continued.status, 200, "{answered}: {}", continued.body);
        }
    }
    // A completed response's chain is known whole: there, an output for a call never made is
    // refused.
    let completed = turn(&proxy, ALPHA, json!({"model": "m1", "input": "next"})).await;
    let output = json!([{"type": "function_call_output", "call_id": "call_not_recorded", "output": "sunny"}]);
    let refused = turn(&proxy, ALPHA, continuation(&completed.response_id(), output)).await;
    assert_eq!(refused.refusal().1, "call_id_mismatch", "{}", refused.body);
}

/// Polls, at most 5 s, until response `id` is recorded as alpha's: beta's continuation of it
/// is refused as another team's.
async fn until_recorded(proxy: &Proxy, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let refused = turn(proxy, BETA, continuation(id, json!("next"))).await;
        if refused.refusal().1 == "cross_team_state" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{id} was never recorded: {}",
            refused.body
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_stream_whose_client_went_away_after_its_response_was_created_is_its_teams() {
    let openai = provider().await;
    let proxy = Proxy::start(&config(&openai.base_url()), &[]).await;
    let response = reqwest::Client::new()
        .post(proxy.url("/openai/v1/responses"))
        .header("authorization", format!("Bearer {ALPHA}"))
        .header("content-type", "application/json")
        .body(json!({"model": "m1", "stream": true, "input": "open"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // Read up to the response's first item, then go away.
    let mut response = response;
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("response.output_item.done") {
        let chunk = tokio::time::timeout(Duration::from_secs(5), response.chunk())
            .await
            .unwrap()
            .unwrap()
            .expect("the stream goes on");
        seen.extend_from_slice(&chunk);
    }
    drop(response);
    let id = "resp_open_1";
    assert!(String::from_utf8_lossy(&seen).contains(id));
    until_recorded(&proxy, id).await;
    owned_by_alpha(&proxy, &|| openai.received().len(), id).await;
    // Its first item, delivered whole, is alpha's too.
    let item = json!({"type": "reasoning", "id": format!("rs_incomplete_{:016}", 1), "summary": [],
                      "encrypted_content": "enc-incomplete-1"});
    let replay =
        json!({"model": "m1", "input": [item, {"type": "message", "role": "user", "content": "go on"}]});
    assert_eq!(turn(&proxy, BETA, replay).await.refusal().1, "cross_team_state");
}

#[tokio::test]
async fn a_stream_that_broke_after_its_response_was_created_is_its_teams() {
    const CREATED: &[u8] =
        b"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_broken_1\",\"status\":\"in_progress\"}}\n\n";
    let connections = Arc::new(AtomicU64::new(0));
    let upstream = RawUpstream::start(move |mut stream| {
        let n = connections.fetch_add(1, Ordering::SeqCst);
        async move {
            if n == 0 {
                // The first answer: created, then a close before the last chunk.
                stream.write_all(SSE_HEAD).await.unwrap();
                stream.write_all(&chunk(CREATED)).await.unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
                stream.shutdown().await.unwrap();
                tokio::time::sleep(Duration::from_secs(5)).await;
                return;
            }
            // Any later request: a small JSON answer, and the connection closed.
            let body = format!(r#"{{"object":"seen","id":"resp_later_{n}","status":"completed","output":[]}}"#);
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(body.as_bytes()).await;
            let _ = stream.shutdown().await;
        }
    })
    .await;
    let proxy = Proxy::start(&config(&upstream.base_url()), &[]).await;
    let broken = reqwest::Client::new()
        .post(proxy.url("/openai/v1/responses"))
        .header("authorization", format!("Bearer {ALPHA}"))
        .header("content-type", "application/json")
        .body(json!({"model": "m1", "stream": true, "input": "break"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(broken.status(), 200);
    assert!(broken.bytes().await.is_err(), "the answer broke off");
    until_recorded(&proxy, "resp_broken_1").await;
    // Alpha reaches it (forwarded: the provider's answer), beta does not.
    let own = send(&proxy, "GET", ALPHA, "/openai/v1/responses/resp_broken_1", None).await;
    assert_eq!((own.status, &own.body["object"]), (200, &json!("seen")));
    let other = send(&proxy, "GET", BETA, "/openai/v1/responses/resp_broken_1", None).await;
    assert_eq!(other.refusal(), (404, "not_found", ""));
    let continued = turn(&proxy, ALPHA, continuation("resp_broken_1", json!("next"))).await;
    assert_eq!(continued.status, 200, "{}", continued.body);
}

/// A WebSocket provider: each `response.create` is answered `response.created`, then, for
/// input `incomplete`, one item and `response.incomplete`; for `unreadable`, an item the ledger
/// cannot read and `response.completed`; for any other, nothing more (the turn stays open).
async fn ws_provider() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut n = 0;
        while let Ok((stream, _)) = listener.accept().await {
            let Ok(mut socket) = tokio_tungstenite::accept_async(stream).await else {
                continue;
            };
            while let Some(Ok(Message::Text(text))) = socket.next().await {
                n += 1;
                let message: Value = serde_json::from_str(&text).unwrap();
                let id = format!("resp_ws_{n}");
                let mut events = vec![
                    json!({"type": "response.created", "response": {"id": id, "status": "in_progress"}}),
                ];
                if message["input"] == "incomplete" {
                    let item = &incomplete_items(n)[1];
                    events
                        .push(json!({"type": "response.output_item.done", "output_index": 0, "item": item}));
                    events.push(json!({"type": "response.incomplete",
                                       "response": {"id": id, "status": "incomplete", "output": [item]}}));
                }
                if message["input"] == "unreadable" {
                    events.push(json!({"type": "response.output_item.done", "output_index": 0, "item": 5}));
                    events.push(json!({"type": "response.completed",
                                       "response": {"id": id, "status": "completed", "output": [5]}}));
                }
                for event in events {
                    let _ = socket.send(Message::text(event.to_string())).await;
                }
            }
        }
    });
    (addr, task)
}

#[tokio::test]
async fn a_websocket_turn_that_was_unreadable_ended_incomplete_or_was_left_open_is_its_teams() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message;

    let (addr, task) = ws_provider().await;
    let proxy = Proxy::start(&config(&format!("http://{addr}/v1")), &[]).await;
    let mut request = format!("ws://{}/v1/responses", proxy.addr)
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {ALPHA}").parse().unwrap());
    let stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let mut alpha = tokio_tungstenite::client_async(request, stream).await.unwrap().0;
    let limit = Duration::from_secs(10);
    let turns = [
        ("unreadable", "response.completed"),
        ("incomplete", "response.incomplete"),
        ("hang", "response.created"),
    ];
    for (input, last) in turns {
        let create = json!({"type": "response.create", "model": "m1", "input": input});
        alpha.send(Message::text(create.to_string())).await.unwrap();
        loop {
            let message = tokio::time::timeout(limit, alpha.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            let event: Value = serde_json::from_str(message.to_text().unwrap()).unwrap();
            if event["type"] == last {
                break;
            }
        }
    }
    // The unreadable turn is recorded by its id at its end (and the turns after it are read
    // apart from it), the incomplete one with its item; the open one when the socket ends.
    alpha.close(None).await.unwrap();
    for id in ["resp_ws_1", "resp_ws_2", "resp_ws_3"] {
        until_recorded(&proxy, id).await;
        let other = send(&proxy, "GET", BETA, &format!("/openai/v1/responses/{id}"), None).await;
        assert_eq!(other.refusal(), (404, "not_found", ""), "{id}");
    }
    // The incomplete turn's item is alpha's.
    let call = &incomplete_items(2)[1];
    let output = json!({"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"});
    let replay = json!({"model": "m1", "input": [call, output]});
    assert_eq!(turn(&proxy, BETA, replay).await.refusal().1, "cross_team_state");
    task.abort();
}
