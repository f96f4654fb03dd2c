//! Teams and their data end to end: with teams and the ledger on, a team's request that names
//! another team's stored state (a `previous_response_id`, a `conversation`, a replayed item by
//! its id or its `encrypted_content`, an `item_reference`) is refused with `cross_team_state`
//! and never forwarded; carrying a session never reads another team's chain; object routes
//! answer 404 `not_found` for another team's id exactly as for an unknown one. Each rule both
//! ways: the owner allowed, another team refused, a team the owner granted allowed. A property
//! test interleaves the turns of three teams with random grants.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use proptest::prelude::*;
use serde_json::{json, Value};

use super::teams::key_entry;
use crate::support::metrics::counter;
use crate::support::proxy::Proxy;
use crate::support::upstream::{json_response, sse_response, UpBody, Upstream};

pub(super) const ALPHA: &str = "rg-alpha-test-key";
pub(super) const BETA: &str = "rg-beta-test-key";
const GAMMA: &str = "rg-gamma-test-key";

/// A provider named `name` that mints new ids on every answer: `/responses` gets a reasoning
/// item, a call and a message (JSON, or events with `"stream": true`); `POST /conversations`
/// a new conversation; any other path a small JSON object naming the path.
pub(super) async fn provider(name: &'static str) -> Upstream {
    let counter = Arc::new(AtomicU64::new(0));
    Upstream::start(move |request| {
        let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
        async move {
            let path = request.target.split('?').next().unwrap_or("").to_owned();
            if path.ends_with("/conversations") {
                return json_answer(json!({"id": format!("conv_{name}_{n}"), "object": "conversation", "created_at": 1, "metadata": {}}));
            }
            if !path.ends_with("/responses") {
                return json_answer(json!({"object": "seen", "method": request.method.as_str(), "path": path}));
            }
            let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
            if body["background"] == json!(true) {
                return json_answer(json!({"id": format!("resp_bg_{name}_{n}"), "object": "response",
                                          "status": "queued", "model": body["model"], "output": []}));
            }
            let response = json!({
                "id": format!("resp_{name}_{n}"),
                "object": "response",
                "model": body["model"],
                "status": "completed",
                "output": [
                    {"type": "reasoning", "id": format!("rs_{name}_{n:016}"), "summary": [],
                     "encrypted_content": format!("enc-{name}-{n}")},
                    {"type": "function_call", "id": format!("fc_{name}_{n:016}"), "call_id": format!("call_{name}_{n}"),
                     "name": "get_weather", "arguments": "{\"city\":\"Paris\"}", "status": "completed"},
                    {"type": "message", "id": format!("msg_{name}_{n:016}"), "role": "assistant", "status": "completed",
                     "content": [{"type": "output_text", "text": "Looking.", "annotations": []}]}
                ]
            });
            match body["stream"] == json!(true) {
                true => events(response),
                false => json_answer(response),
            }
        }
    })
    .await
}

fn json_answer(body: Value) -> Response<UpBody> {
    json_response(200, body.to_string())
}

fn events(response: Value) -> Response<UpBody> {
    let (sender, answer) = sse_response();
    tokio::spawn(async move {
        // As providers stream: each output item in its own event, then the whole response.
        let created = json!({"type": "response.created", "response": {"id": response["id"], "status": "in_progress", "output": []}});
        let items = response["output"].as_array().cloned().unwrap_or_default();
        let done = items.into_iter().enumerate().map(
            |(index, item)| json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        );
        let completed = json!({"type": "response.completed", "response": response});
        let frames: Vec<Value> = std::iter::once(created).chain(done).chain([completed]).collect();
        for frame in frames {
            let event = format!("event: {}\ndata: {frame}\n\n", frame["type"].as_str().unwrap());
            if sender.send(Bytes::from(event)).await.is_err() {
                return;
            }
        }
    });
    answer
}

/// Three teams on `openai` and `bedrock`, the ledger in memory storing items and carrying
/// sessions; `grants` is each team's `share_state_with` line (or nothing), `extra` more text.
pub(super) fn config(openai: &Upstream, bedrock: &Upstream, grants: [&str; 3], extra: &str) -> String {
    let [alpha, beta, gamma] = grants;
    format!(
        r#"default_provider = "openai"
[state]
backend = "memory"
[ledger]
store_items = true
carry_sessions = true
{extra}
[providers.openai]
base_url = "{openai}"
auth = "none"
[providers.bedrock]
base_url = "{bedrock}"
auth = "none"
[teams.alpha]
keys = ["{alpha_key}"]
{alpha}
[teams.beta]
keys = ["{beta_key}"]
{beta}
[teams.gamma]
keys = ["{gamma_key}"]
{gamma}
"#,
        openai = openai.base_url(),
        bedrock = bedrock.base_url(),
        alpha_key = key_entry(ALPHA),
        beta_key = key_entry(BETA),
        gamma_key = key_entry(GAMMA),
    )
}

pub(super) struct Setup {
    pub(super) openai: Upstream,
    pub(super) bedrock: Upstream,
    pub(super) proxy: Proxy,
}

pub(super) async fn setup(grants: [&str; 3], extra: &str) -> Setup {
    let openai = provider("openai").await;
    let bedrock = provider("bedrock").await;
    let proxy = Proxy::start(&config(&openai, &bedrock, grants, extra), &[]).await;
    Setup {
        openai,
        bedrock,
        proxy,
    }
}

impl Setup {
    /// How many requests the providers received in all.
    pub(super) fn forwarded(&self) -> usize {
        self.openai.received().len() + self.bedrock.received().len()
    }
}

pub(super) struct Answer {
    pub(super) status: u16,
    pub(super) body: Value,
}

/// A request of the team with `key`, with a JSON `body` if any.
pub(super) fn request(
    proxy: &Proxy,
    method: &str,
    key: &str,
    path: &str,
    body: Option<Value>,
) -> reqwest::RequestBuilder {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let request = reqwest::Client::new()
        .request(method, proxy.url(path))
        .header("authorization", format!("Bearer {key}"));
    match body {
        Some(body) => request
            .header("content-type", "application/json")
            .body(body.to_string()),
        None => request,
    }
}

pub(super) async fn send(proxy: &Proxy, method: &str, key: &str, path: &str, body: Option<Value>) -> Answer {
    let response = request(proxy, method, key, path, body).send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let body = match text.starts_with("event: ") {
        true => text
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .map(|data| serde_json::from_str::<Value>(data).unwrap())
            .find(|event| event["type"] == "response.completed")
            .map(|event| event["response"].clone())
            .unwrap_or(Value::Null),
        false => serde_json::from_str(&text).unwrap_or(Value::Null),
    };
    Answer { status, body }
}

pub(super) async fn turn(proxy: &Proxy, key: &str, provider: &str, body: Value) -> Answer {
    send(
        proxy,
        "POST",
        key,
        &format!("/{provider}/v1/responses"),
        Some(body),
    )
    .await
}

/// A conversation made through the proxy by the team with `key`.
pub(super) async fn conversation(proxy: &Proxy, key: &str) -> String {
    let made = send(
        proxy,
        "POST",
        key,
        "/v1/conversations",
        Some(json!({"items": []})),
    )
    .await;
    assert_eq!(made.status, 200, "{}", made.body);
    made.body["id"].as_str().unwrap().to_owned()
}

pub(super) fn first_turn(stream: bool) -> Value {
    json!({"model": "m1", "stream": stream, "input": "Weather in Paris?",
           "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]})
}

/// The refusal's `(code, param)`.
pub(super) fn refusal(answer: &Answer) -> (u16, String, String) {
    let error = &answer.body["error"];
    (
        answer.status,
        error["code"].as_str().unwrap_or("").to_owned(),
        error["param"].as_str().unwrap_or("").to_owned(),
    )
}

/// The message says nothing of the other team or of what it recorded.
fn tells_nothing(answer: &Answer, recorded: &Value) {
    let text = answer.body.to_string();
    assert!(!text.contains("alpha"), "{text}");
    for item in recorded["output"].as_array().unwrap() {
        if let Some(blob) = item["encrypted_content"].as_str() {
            assert!(!text.contains(blob), "{text}");
        }
    }
}

#[tokio::test]
async fn a_previous_response_of_another_team_is_refused_over_json_and_events_unless_granted() {
    for stream in [false, true] {
        let setup = setup(["", "", "share_state_with = [\"beta\"]"], "").await;
        let proxy = &setup.proxy;
        let first = turn(proxy, ALPHA, "openai", first_turn(stream)).await;
        assert_eq!(first.status, 200, "{}", first.body);
        let id = first.body["id"].as_str().unwrap().to_owned();
        let next =
            json!({"model": "m1", "stream": stream, "previous_response_id": id, "input": "And tomorrow?"});
        let before = setup.forwarded();
        let refused = turn(proxy, BETA, "openai", next.clone()).await;
        assert_eq!(
            refusal(&refused),
            (422, "cross_team_state".into(), "previous_response_id".into())
        );
        tells_nothing(&refused, &first.body);
        // Carrying it to another provider reads nothing of alpha's: the same refusal.
        let carried = turn(proxy, BETA, "bedrock", next.clone()).await;
        assert_eq!(
            refusal(&carried),
            (422, "cross_team_state".into(), "previous_response_id".into())
        );
        assert_eq!(
            setup.forwarded(),
            before,
            "nothing of a refused request is forwarded"
        );
        // The owner continues it, and carries it.
        assert_eq!(turn(proxy, ALPHA, "openai", next.clone()).await.status, 200);
        let owner_carried = turn(proxy, ALPHA, "bedrock", next.clone()).await;
        assert_eq!(owner_carried.status, 200, "{}", owner_carried.body);
        let sent: Value = serde_json::from_slice(&setup.bedrock.received().last().unwrap().body).unwrap();
        assert!(sent.get("previous_response_id").is_none(), "{sent}");
    }
}

#[tokio::test]
async fn a_granted_team_continues_and_carries_the_owners_session() {
    let setup = setup(["share_state_with = [\"beta\"]", "", ""], "").await;
    let proxy = &setup.proxy;
    let first = turn(proxy, ALPHA, "openai", first_turn(false)).await;
    let id = first.body["id"].as_str().unwrap().to_owned();
    let next = json!({"model": "m1", "previous_response_id": id, "input": "And tomorrow?"});
    assert_eq!(turn(proxy, BETA, "openai", next.clone()).await.status, 200);
    let carried = turn(proxy, BETA, "bedrock", next.clone()).await;
    assert_eq!(carried.status, 200, "{}", carried.body);
    // The grant is alpha's to beta only.
    assert_eq!(
        refusal(&turn(proxy, GAMMA, "openai", next).await),
        (422, "cross_team_state".into(), "previous_response_id".into())
    );
}

#[tokio::test]
async fn replayed_items_of_another_team_are_refused_or_stripped() {
    let setup = setup(["", "", ""], "").await;
    let proxy = &setup.proxy;
    let first = turn(proxy, ALPHA, "openai", first_turn(false)).await;
    let output = first.body["output"].as_array().unwrap().clone();
    let reasoning =
        json!({"type": "reasoning", "summary": [], "encrypted_content": output[0]["encrypted_content"]});
    let reference = json!({"type": "item_reference", "id": output[2]["id"]});
    let body = json!({"model": "m1", "input": [
        {"role": "user", "content": "hi"}, reasoning, reference, {"role": "user", "content": "again"}]});
    // The owner replays its own items.
    assert_eq!(turn(proxy, ALPHA, "openai", body.clone()).await.status, 200);
    let before = setup.forwarded();
    let refused = turn(proxy, BETA, "openai", body.clone()).await;
    assert_eq!(refused.status, 422);
    let violations: Vec<(String, String)> = refused.body["error"]["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["reason"].as_str().unwrap().into(),
                v["param"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        violations,
        [
            ("cross_team_state".into(), "input[1].encrypted_content".into()),
            ("cross_team_state".into(), "input[2]".into()),
        ]
    );
    tells_nothing(&refused, &first.body);
    assert_eq!(setup.forwarded(), before);
    drop(setup);

    // Under `strip`, beta's request goes on without them.
    let setup = setup_with_rule().await;
    let proxy = &setup.proxy;
    let first = turn(proxy, ALPHA, "openai", first_turn(false)).await;
    let output = first.body["output"].as_array().unwrap().clone();
    let body = json!({"model": "m1", "input": [
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "summary": [], "encrypted_content": output[0]["encrypted_content"]},
        {"role": "user", "content": "again"}]});
    let stripped = send(proxy, "POST", BETA, "/openai/v1/responses", Some(body)).await;
    assert_eq!(stripped.status, 200, "{}", stripped.body);
    let sent: Value = serde_json::from_slice(&setup.openai.received().last().unwrap().body).unwrap();
    assert_eq!(sent["input"].as_array().unwrap().len(), 2, "{sent}");
}

async fn setup_with_rule() -> Setup {
    let openai = provider("openai").await;
    let bedrock = provider("bedrock").await;
    let text = config(
        &openai,
        &bedrock,
        ["", "rules = { cross_team_state = \"strip\" }", ""],
        "",
    );
    let proxy = Proxy::start(&text, &[]).await;
    Setup {
        openai,
        bedrock,
        proxy,
    }
}

#[tokio::test]
async fn object_routes_answer_404_for_another_teams_id_as_for_an_unknown_one() {
    let setup = setup(["", "", "share_state_with = [\"*\"]"], "").await;
    let proxy = &setup.proxy;
    let first = turn(proxy, ALPHA, "openai", first_turn(false)).await;
    let id = first.body["id"].as_str().unwrap().to_owned();
    let routes = [
        ("GET", format!("/v1/responses/{id}")),
        ("GET", format!("/v1/responses/{id}/input_items")),
        ("POST", format!("/v1/responses/{id}/cancel")),
        ("DELETE", format!("/v1/responses/{id}")),
    ];
    for (method, path) in &routes {
        let before = setup.forwarded();
        let other = send(proxy, method, BETA, path, None).await;
        let unknown = send(proxy, method, BETA, &path.replace(&id, "resp_never_seen"), None).await;
        assert_eq!(
            refusal(&other),
            (404, "not_found".into(), String::new()),
            "{method} {path}"
        );
        assert_eq!(other.body, unknown.body, "no oracle of existence");
        assert_eq!(setup.forwarded(), before, "{method} {path} was forwarded");
        // The owner reaches it.
        let own = send(proxy, method, ALPHA, path, None).await;
        assert_eq!(own.status, 200, "{method} {path}: {}", own.body);
        assert_eq!(own.body["object"], "seen");
    }
    // Conversations created through the proxy belong to their team.
    let conversation = conversation(proxy, GAMMA).await;
    let made = send(
        proxy,
        "POST",
        ALPHA,
        "/v1/conversations",
        Some(json!({"items": []})),
    )
    .await;
    let alphas = made.body["id"].as_str().unwrap().to_owned();
    for path in [
        format!("/v1/conversations/{alphas}"),
        format!("/v1/conversations/{alphas}/items"),
        format!("/v1/conversations/{alphas}/items/msg_1"),
    ] {
        assert_eq!(
            refusal(&send(proxy, "GET", BETA, &path, None).await).0,
            404,
            "{path}"
        );
        assert_eq!(send(proxy, "GET", ALPHA, &path, None).await.status, 200, "{path}");
        // Gamma shares with every team.
        let shared = path.replace(&alphas, &conversation);
        assert_eq!(
            send(proxy, "GET", BETA, &shared, None).await.status,
            200,
            "{shared}"
        );
    }
    // A request naming alpha's conversation is refused too.
    let named = json!({"model": "m1", "conversation": {"id": alphas}, "input": "hi"});
    assert_eq!(
        refusal(&turn(proxy, BETA, "openai", named.clone()).await),
        (422, "cross_team_state".into(), "conversation".into())
    );
    assert_eq!(turn(proxy, ALPHA, "openai", named).await.status, 200);
    // Odd ids are never forwarded elsewhere.
    let long = format!("/v1/responses/resp_{}", "x".repeat(10_000));
    assert_eq!(send(proxy, "GET", ALPHA, &long, None).await.status, 404);
    let before = setup.forwarded();
    for path in [
        "/v1/responses/../models",
        "/v1/responses/%2e%2e/models",
        "/v1/responses/a%2Fb",
        "/v1/responses/resp_1?x=/../y",
        &format!("/v1/responses/{ALPHA}"),
    ] {
        // Raw bytes, so no client library resolves the dot segments first.
        let request = format!(
            "GET {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {ALPHA}\r\nconnection: close\r\n\r\n"
        );
        let answer = crate::support::proxy::raw_request(proxy.addr, request.as_bytes()).await;
        let status = answer.split(' ').nth(1).unwrap_or("");
        assert!(status == "400" || status == "404", "{path}: {answer}");
        assert!(!answer.contains(ALPHA), "the key is never echoed: {answer}");
    }
    assert_eq!(setup.forwarded(), before);
}

#[tokio::test]
async fn unknown_owner_allow_forwards_ids_the_ledger_does_not_know_but_never_another_teams() {
    let setup = setup(["", "", ""], "unknown_owner = \"allow\"").await;
    let proxy = &setup.proxy;
    let unknown = send(proxy, "GET", BETA, "/v1/responses/resp_from_before", None).await;
    assert_eq!(unknown.status, 200, "{}", unknown.body);
    let first = turn(proxy, ALPHA, "openai", first_turn(false)).await;
    let id = first.body["id"].as_str().unwrap();
    let other = send(proxy, "GET", BETA, &format!("/v1/responses/{id}"), None).await;
    assert_eq!(refusal(&other).0, 404);
}

/// What one step of the property test does: a team starts a session, or continues (or replays
/// an item of) the response of an earlier step.
#[derive(Debug, Clone)]
enum Step {
    Start { team: usize },
    Continue { team: usize, of: usize },
    Replay { team: usize, of: usize },
    Read { team: usize, of: usize },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..3usize).prop_map(|team| Step::Start { team }),
        (0..3usize, 0..8usize).prop_map(|(team, of)| Step::Continue { team, of }),
        (0..3usize, 0..8usize).prop_map(|(team, of)| Step::Replay { team, of }),
        (0..3usize, 0..8usize).prop_map(|(team, of)| Step::Read { team, of }),
    ]
}

const KEYS: [&str; 3] = [ALPHA, BETA, GAMMA];
const NAMES: [&str; 3] = ["alpha", "beta", "gamma"];

/// Runs `steps` under `grants` (grants[owner][team]: owner shares with team) and checks every
/// answer against who may use what.
async fn interleave(grants: [[bool; 3]; 3], steps: Vec<Step>) -> Result<(), TestCaseError> {
    let lines: Vec<String> = (0..3)
        .map(|owner| {
            let names: Vec<String> = (0..3)
                .filter(|&team| team != owner && grants[owner][team])
                .map(|team| format!("\"{}\"", NAMES[team]))
                .collect();
            format!("share_state_with = [{}]", names.join(", "))
        })
        .collect();
    let setup = setup([&lines[0], &lines[1], &lines[2]], "").await;
    let proxy = &setup.proxy;
    // Each started session: its owner, its response and its output.
    let mut sessions: Vec<(usize, Value)> = Vec::new();
    for step in steps {
        let may = |team: usize, owner: usize| team == owner || grants[owner][team];
        let before = setup.forwarded();
        match step {
            Step::Start { team } => {
                let answer = turn(proxy, KEYS[team], "openai", first_turn(false)).await;
                prop_assert_eq!(answer.status, 200);
                sessions.push((team, answer.body));
            }
            Step::Continue { team, of } | Step::Replay { team, of } | Step::Read { team, of }
                if sessions.is_empty() =>
            {
                let _ = (team, of);
            }
            Step::Continue { team, of } => {
                let (owner, response) = &sessions[of % sessions.len()];
                let body = json!({"model": "m1", "previous_response_id": response["id"], "input": "next"});
                let answer = turn(proxy, KEYS[team], "bedrock", body).await;
                check(&answer, may(team, *owner), setup.forwarded() > before)?;
            }
            Step::Replay { team, of } => {
                let (owner, response) = &sessions[of % sessions.len()];
                let body = json!({"model": "m1", "input": [
                    {"role": "user", "content": "hi"},
                    {"type": "item_reference", "id": response["output"][2]["id"]},
                    {"role": "user", "content": "again"}]});
                let answer = turn(proxy, KEYS[team], "openai", body).await;
                check(&answer, may(team, *owner), setup.forwarded() > before)?;
            }
            Step::Read { team, of } => {
                let (owner, response) = &sessions[of % sessions.len()];
                let path = format!("/v1/responses/{}", response["id"].as_str().unwrap());
                let answer = send(proxy, "GET", KEYS[team], &path, None).await;
                check(&answer, may(team, *owner), setup.forwarded() > before)?;
            }
        }
    }
    Ok(())
}

/// An allowed request is answered by the provider; a refused one is never forwarded.
fn check(answer: &Answer, allowed: bool, forwarded: bool) -> Result<(), TestCaseError> {
    if allowed {
        prop_assert_eq!(answer.status, 200, "{}", answer.body);
        prop_assert!(forwarded);
    } else {
        prop_assert!(answer.status == 422 || answer.status == 404, "{}", answer.body);
        prop_assert!(!forwarded);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn no_request_naming_another_teams_state_is_forwarded_and_no_allowed_one_refused(
        grants in proptest::array::uniform3(proptest::array::uniform3(any::<bool>())),
        steps in proptest::collection::vec(step(), 1..12),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(interleave(grants, steps))?;
    }
}

use crate::websocket::fake_provider as ws_provider;

#[tokio::test]
async fn a_websocket_turn_continuing_another_teams_response_is_refused() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message;

    let provider = ws_provider::FakeProvider::start(ws_provider::Behaviour::Turns).await;
    let config = format!(
        "default_provider = \"openai\"\n[state]\nbackend = \"memory\"\n[providers.openai]\nbase_url = \"{}\"\nauth = \"none\"\n\
         [teams.alpha]\nkeys = [\"{}\"]\n[teams.beta]\nkeys = [\"{}\"]\n",
        provider.base_url(),
        key_entry(ALPHA),
        key_entry(BETA)
    );
    let proxy = Proxy::start(&config, &[]).await;
    let connect = |key: &'static str| {
        let addr = proxy.addr;
        async move {
            let mut request = format!("ws://{addr}/v1/responses").into_client_request().unwrap();
            request
                .headers_mut()
                .insert("authorization", format!("Bearer {key}").parse().unwrap());
            let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            tokio_tungstenite::client_async(request, stream).await.unwrap().0
        }
    };
    let limit = std::time::Duration::from_secs(10);
    let mut alpha = connect(ALPHA).await;
    alpha
        .send(Message::text(r#"{"type":"response.create","model":"gpt-5","input":"Weather?","tools":[{"type":"function","name":"get_weather"}]}"#))
        .await
        .unwrap();
    let mut response_id = String::new();
    for _ in 0..3 {
        let event = tokio::time::timeout(limit, alpha.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let event: Value = serde_json::from_str(event.to_text().unwrap()).unwrap();
        if event["type"] == "response.completed" {
            response_id = event["response"]["id"].as_str().unwrap().to_owned();
        }
    }
    let continuation =
        json!({"type": "response.create", "model": "gpt-5", "previous_response_id": response_id,
        "input": [{"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]})
        .to_string();
    let sent = provider.texts().len();
    let mut beta = connect(BETA).await;
    beta.send(Message::text(continuation.clone())).await.unwrap();
    let event = tokio::time::timeout(limit, beta.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let event: Value = serde_json::from_str(event.to_text().unwrap()).unwrap();
    assert_eq!(event["type"], "error", "{event}");
    assert_eq!(event["error"]["code"], "cross_team_state", "{event}");
    assert_eq!(event["error"]["param"], "previous_response_id", "{event}");
    assert_eq!(
        provider.texts().len(),
        sent,
        "nothing of beta's message was forwarded"
    );
    // The owner continues it on a socket of its own.
    let mut again = connect(ALPHA).await;
    again.send(Message::text(continuation)).await.unwrap();
    let event = tokio::time::timeout(limit, again.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(event.to_text().unwrap().contains("response.created"), "{event:?}");
}

#[tokio::test]
async fn a_background_response_belongs_to_its_team_before_it_completes() {
    let setup = setup(["", "", ""], "").await;
    let proxy = &setup.proxy;
    let queued = turn(
        proxy,
        ALPHA,
        "openai",
        json!({"model": "m1", "background": true, "input": "Write a report."}),
    )
    .await;
    assert_eq!(queued.status, 200, "{}", queued.body);
    let id = queued.body["id"].as_str().unwrap().to_owned();
    // Its team polls and cancels it; another team gets 404 as for an unknown id.
    for (method, path) in [
        ("GET", format!("/v1/responses/{id}")),
        ("POST", format!("/v1/responses/{id}/cancel")),
    ] {
        assert_eq!(
            send(proxy, method, ALPHA, &path, None).await.status,
            200,
            "{method} {path}"
        );
        assert_eq!(
            refusal(&send(proxy, method, BETA, &path, None).await).0,
            404,
            "{method} {path}"
        );
    }
    // Its output was never seen, so a continuation answering its calls is not judged on them,
    // and another team's continuation is refused.
    let next = json!({"model": "m1", "previous_response_id": id,
                      "input": [{"type": "function_call_output", "call_id": "call_from_the_report", "output": "ok"}]});
    let own = turn(proxy, ALPHA, "openai", next.clone()).await;
    assert_eq!(own.status, 200, "{}", own.body);
    assert_eq!(
        refusal(&turn(proxy, BETA, "openai", next).await),
        (422, "cross_team_state".into(), "previous_response_id".into())
    );
}

#[tokio::test]
async fn an_object_route_while_the_store_does_not_answer_is_503_or_follows_on_unavailable() {
    let openai = provider("openai").await;
    let bedrock = provider("bedrock").await;
    let down = format!(
        "backend = \"redis\"\nurl = \"redis://127.0.0.1:{}\"\ntimeout = \"200ms\"",
        crate::support::closed_port::closed_port()
    );
    for (ledger, expected) in [("", 503), ("on_unavailable = \"allow\"", 404)] {
        let text = config(&openai, &bedrock, ["", "", ""], ledger).replace("backend = \"memory\"", &down);
        let proxy = Proxy::start(&text, &[]).await;
        let before = openai.received().len();
        let answer = send(&proxy, "GET", ALPHA, "/v1/responses/resp_1", None).await;
        // A lookup that failed is never read as "this team's": refused, or held to unknown_owner.
        let code = match expected {
            503 => "ledger_unavailable",
            _ => "not_found",
        };
        assert_eq!(
            refusal(&answer),
            (expected, code.into(), String::new()),
            "{ledger}"
        );
        assert_eq!(openai.received().len(), before, "nothing forwarded");
    }
}

/// The inputs judged clean are kept per team (docs/incremental-judging.md#identity): another
/// team sending the same history after it is judged on every item, and refused for the items
/// that are not its own, even though nothing the ledger knows of them changed.
#[tokio::test]
async fn a_history_one_team_had_judged_is_judged_again_item_by_item_for_another() {
    let mut setup = setup(["", "", ""], "").await;
    let admin = setup.proxy.admin().await;
    let answer = turn(&setup.proxy, ALPHA, "openai", first_turn(false)).await;
    assert_eq!(answer.status, 200);
    let output = answer.body["output"].as_array().unwrap().clone();
    let call_id = output[1]["call_id"].as_str().unwrap().to_owned();
    let tools = first_turn(false)["tools"].clone();
    let body = |items: &[Value]| json!({"model": "m1", "tools": tools, "input": items});
    let mut items = vec![json!({"role": "user", "content": "Weather in Paris?"})];
    items.extend(output);
    items.push(json!({"type": "function_call_output", "call_id": call_id, "output": "sunny"}));
    // Sent twice (a retry): the second time its input is kept, its leading items seen before.
    for _ in 0..2 {
        assert_eq!(
            turn(&setup.proxy, ALPHA, "openai", body(&items)).await.status,
            200
        );
    }
    items.push(json!({"role": "user", "content": "And tomorrow?"}));
    let judged_before = || counter(admin, "replaygate_gate_items_judged_before_total");
    let forwarded = setup.forwarded();
    let beta = turn(&setup.proxy, BETA, "openai", body(&items)).await;
    assert_eq!(refusal(&beta).0, 422);
    assert_eq!(refusal(&beta).1, "cross_team_state");
    assert_eq!(setup.forwarded(), forwarded, "refused before any provider");
    assert_eq!(judged_before().await, 0, "beta's body was not read after alpha's");
    // alpha's own next turn is read after its history.
    assert_eq!(
        turn(&setup.proxy, ALPHA, "openai", body(&items)).await.status,
        200
    );
    assert_eq!(judged_before().await, 5);
}
