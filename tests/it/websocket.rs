//! WebSocket mode end to end (docs/websocket.md): a client socket through the proxy to a fake
//! WebSocket provider. Valid `response.create` messages reach the provider byte for byte and
//! its events come back unchanged; refused ones get an error event and the socket stays; call
//! pairing sees the socket's earlier turns; oversize frames close with 1009; a provider's
//! refusal of the upgrade reaches the client as its status; pings, pongs and closes cross; an
//! idle socket closes; a client that does not read holds the provider back; messages are held in
//! `max_buffered_bytes` (beyond it: `overloaded` and 1013); events of other types are refused
//! unless configured; a refused continuation evicts an unstored response; the server's shutdown
//! closes sockets with 1001. One test runs a Python client (the `websockets` package) through
//! the same path.

pub(crate) mod fake_provider;

use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

use crate::support::proxy::Proxy;
use fake_provider::{
    reasoned_call, reasoned_turn_events, reasoning_item, turn_events, unstored_turn_events, Behaviour,
    FakeProvider, CLOSE_ME,
};

const PROVIDER_KEY: &str = "sk-provider-own-key";
const CLIENT_KEY: &str = "sk-client-key-never-forwarded";
const LIMIT: Duration = Duration::from_secs(10);

type Client = WebSocketStream<TcpStream>;

/// A proxy with provider `openai` (the default) at `provider`, its key from the environment,
/// and `extra` configuration (`[server]` keys, or tables).
async fn proxy(provider: &FakeProvider, extra: &str) -> Proxy {
    let (server, tables) = match extra.starts_with('[') {
        true => ("", extra),
        false => (extra, ""),
    };
    let config = format!(
        "[server]\n{server}\ndefault_provider = \"openai\"\n[providers.openai]\nbase_url = \"{}\"\nauth = {{ bearer_env = \"UP_KEY\" }}\n{tables}\n",
        provider.base_url()
    );
    Proxy::start(&config, &[("UP_KEY", PROVIDER_KEY)]).await
}

/// Opens a client socket on `path`, with the client's own key.
async fn connect(proxy: &Proxy, path: &str) -> Result<Client, WsError> {
    let mut request = format!("ws://{}{path}", proxy.addr)
        .into_client_request()
        .unwrap();
    let headers = request.headers_mut();
    headers.insert("authorization", format!("Bearer {CLIENT_KEY}").parse().unwrap());
    headers.insert("x-api-key", CLIENT_KEY.parse().unwrap());
    let stream = TcpStream::connect(proxy.addr).await.unwrap();
    let (socket, _) = tokio::time::timeout(LIMIT, tokio_tungstenite::client_async(request, stream))
        .await
        .expect("the handshake did not finish")?;
    Ok(socket)
}

/// The next message from the proxy (bounded).
async fn next(client: &mut Client) -> Message {
    tokio::time::timeout(LIMIT, client.next())
        .await
        .expect("no message in time")
        .expect("the socket ended")
        .expect("the socket failed")
}

async fn next_text(client: &mut Client) -> String {
    match next(client).await {
        Message::Text(text) => text.to_string(),
        other => panic!("expected a text message, got {other:?}"),
    }
}

async fn next_json(client: &mut Client) -> Value {
    serde_json::from_str(&next_text(client).await).unwrap()
}

/// A `response.create` that starts a conversation.
fn create(text: &str) -> String {
    // Spacing and member order a re-serialisation would change.
    format!(
        r#"{{"type":"response.create",  "model":"gpt-5","input":[{{"role":"user","content":"{text}"}}],"store":false}}"#
    )
}

/// A `response.create` continuing `previous` with the output of `call_id`.
fn continuation(previous: &str, call_id: &str) -> String {
    json!({
        "type": "response.create",
        "model": "gpt-5",
        "previous_response_id": previous,
        "input": [{"type": "function_call_output", "call_id": call_id, "output": "sunny"}],
    })
    .to_string()
}

/// Sends `message` and reads the turn it gets back.
async fn turn(client: &mut Client, message: &str) -> Vec<String> {
    client.send(Message::text(message)).await.unwrap();
    let mut events = Vec::new();
    for _ in 0..3 {
        events.push(next_text(client).await);
    }
    events
}

async fn wait_for(mut done: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(started.elapsed() < LIMIT, "the condition did not hold in time");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn valid_messages_pass_byte_for_byte_with_the_providers_credential_only() {
    let provider = FakeProvider::start(Behaviour::Turns).await;
    let proxy = proxy(&provider, "").await;
    let mut client = connect(&proxy, "/v1/responses").await.unwrap();
    let first = create("weather in Paris?");
    assert_eq!(turn(&mut client, &first).await, turn_events(1));
    assert_eq!(provider.texts(), [first.as_str()]);

    let seen = provider.seen.lock().unwrap();
    let (path, headers) = &seen.upgrades[0];
    assert_eq!(path, "/v1/responses");
    assert_eq!(headers["authorization"], format!("Bearer {PROVIDER_KEY}"));
    assert_eq!(headers.get_all("authorization").iter().count(), 1);
    assert!(!headers.contains_key("x-api-key"));
    assert!(!format!("{headers:?}").contains(CLIENT_KEY));
}

#[tokio::test]
async fn a_refused_message_gets_an_error_event_and_the_socket_stays() {
    let provider = FakeProvider::start(Behaviour::Turns).await;
    let proxy = proxy(&provider, "").await;
    let mut client = connect(&proxy, "/responses").await.unwrap();
    let refused = json!({
        "type": "response.create",
        "model": "gpt-5",
        "input": [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": {"not": "a string"}}],
    })
    .to_string();
    client.send(Message::text(refused)).await.unwrap();
    let event = next_json(&mut client).await;
    assert_eq!(event["type"], "error");
    assert_eq!(event["status"], 422);
    assert_eq!(event["error"]["code"], "arguments_type");
    assert_eq!(event["error"]["param"], "input[0].arguments");
    assert_eq!(event["error"]["violations"][0]["reason"], "arguments_type");
    // Text that is not JSON: an error event too, and the socket stays.
    client.send(Message::text("hello?")).await.unwrap();
    let event = next_json(&mut client).await;
    assert_eq!(
        (event["status"].as_u64(), event["error"]["code"].as_str()),
        (Some(400), Some("invalid_json"))
    );
    // The same socket still carries a valid turn, and only it reached the provider.
    let valid = create("still here");
    assert_eq!(turn(&mut client, &valid).await, turn_events(1));
    assert_eq!(provider.texts(), [valid]);
}

/// Turns on one socket, then a continuation of its chain on a second socket.
async fn pair_across_turns(ledger: &str) -> Value {
    let provider = FakeProvider::start(Behaviour::Turns).await;
    let proxy = proxy(&provider, &format!("[ledger]\nenabled = {ledger}")).await;
    let mut client = connect(&proxy, "/v1/responses").await.unwrap();
    turn(&mut client, &create("weather?")).await;
    // The output answers the call the provider produced on this socket in resp_1.
    assert_eq!(
        turn(&mut client, &continuation("resp_1", "call_1")).await,
        turn_events(2)
    );
    // resp_2's chain (resp_2, resp_1) is known whole: an output answering no call in it is
    // refused, though the request continues stored state.
    client
        .send(Message::text(continuation("resp_2", "call_999")))
        .await
        .unwrap();
    let event = next_json(&mut client).await;
    assert_eq!(event["status"], 422, "{event}");
    assert_eq!(event["error"]["code"], "call_id_mismatch");
    // Continuing resp_2 with the call of resp_1 (further back in the chain) passes.
    assert_eq!(
        turn(&mut client, &continuation("resp_2", "call_1")).await,
        turn_events(3)
    );
    // A response never produced on this socket (nor recorded) is unknown, not refused.
    assert_eq!(
        turn(&mut client, &continuation("resp_elsewhere", "call_x")).await,
        turn_events(4)
    );
    assert_eq!(provider.texts().len(), 4);
    // Another socket continues the same chain: only the ledger knows it there.
    let mut other = connect(&proxy, "/v1/responses").await.unwrap();
    other
        .send(Message::text(continuation("resp_2", "call_999")))
        .await
        .unwrap();
    next_json(&mut other).await
}

#[tokio::test]
async fn pairing_sees_the_earlier_turns_of_the_socket_without_the_ledger() {
    // The socket's own memory: another socket knows nothing of it, so the provider answers.
    let elsewhere = pair_across_turns("false").await;
    assert_eq!(elsewhere["type"], "response.created", "{elsewhere}");
}

#[tokio::test]
async fn the_ledger_records_what_passes_on_a_socket() {
    let elsewhere = pair_across_turns("true").await;
    assert_eq!(elsewhere["error"]["code"], "call_id_mismatch", "{elsewhere}");
}

#[tokio::test]
async fn a_later_message_routed_elsewhere_is_a_route_conflict() {
    let provider = FakeProvider::start(Behaviour::Turns).await;
    let other = FakeProvider::start(Behaviour::Turns).await;
    let config = format!(
        "default_provider = \"openai\"\n[providers.openai]\nbase_url = \"{}\"\n[providers.bedrock]\nbase_url = \"{}\"\n[[routes]]\nmodel = \"openai.*\"\nprovider = \"bedrock\"\n",
        provider.base_url(),
        other.base_url()
    );
    let proxy = Proxy::start(&config, &[]).await;
    let mut client = connect(&proxy, "/v1/responses").await.unwrap();
    turn(&mut client, &create("hi")).await;
    let elsewhere =
        json!({"type": "response.create", "model": "openai.gpt-oss-120b", "input": "hi"}).to_string();
    client.send(Message::text(elsewhere)).await.unwrap();
    let event = next_json(&mut client).await;
    assert_eq!(
        (event["status"].as_u64(), event["error"]["code"].as_str()),
        (Some(400), Some("route_conflict"))
    );
    assert!(other.seen.lock().unwrap().upgrades.is_empty());
}

#[tokio::test]
async fn mantles_own_path_opens_the_socket_of_the_models_provider() {
    let openai = FakeProvider::start(Behaviour::Turns).await;
    let mantle = FakeProvider::start(Behaviour::Turns).await;
    let config = format!(
        "default_provider = \"openai\"\n[providers.openai]\nbase_url = \"{}\"\n[providers.bedrock-openai]\nbase_url = \"{}\"\n[[routes]]\nmodel = \"gpt-*\"\nprovider = \"openai\"\n[[routes]]\nmodel = \"openai.gpt-5*\"\nprovider = \"bedrock-openai\"\n",
        openai.base_url(),
        mantle.base_url().replace("/v1", "/openai/v1")
    );
    let proxy = Proxy::start(&config, &[]).await;
    // `/openai` is Mantle's own path here, not yet a choice of provider: the first message's
    // model chooses, as it does without a prefix.
    let mut client = connect(&proxy, "/openai/v1/responses").await.unwrap();
    let first = r#"{"type":"response.create", "model":"openai.gpt-5.4","input":"hi","store":false}"#;
    let events = turn(&mut client, first).await;
    assert_eq!(events, turn_events(1));
    let upgrades: Vec<String> = mantle
        .seen
        .lock()
        .unwrap()
        .upgrades
        .iter()
        .map(|u| u.0.clone())
        .collect();
    assert_eq!(upgrades, ["/openai/v1/responses"]);
    assert_eq!(mantle.texts(), [first]);
    // The socket stays with its provider: a model routed to OpenAI is a conflict.
    let elsewhere = json!({"type": "response.create", "model": "gpt-5", "input": "hi"}).to_string();
    client.send(Message::text(elsewhere)).await.unwrap();
    let event = next_json(&mut client).await;
    assert_eq!(
        (event["status"].as_u64(), event["error"]["code"].as_str()),
        (Some(400), Some("route_conflict"))
    );
    assert_eq!(mantle.texts(), [first]);
    assert!(openai.seen.lock().unwrap().upgrades.is_empty());
}

#[tokio::test]
async fn an_oversize_message_closes_with_1009() {
    let provider = FakeProvider::start(Behaviour::Turns).await;
    let proxy = proxy(&provider, "max_body_bytes = 65536").await;
    let mut client = connect(&proxy, "/v1/responses").await.unwrap();
    let big = format!(
        r#"{{"type":"response.create","input":"{}"}}"#,
        "x".repeat(100_000)
    );
    // The send may fail as the proxy closes: what matters is the close frame it sent.
    let _ = client.send(Message::text(big)).await;
    match next(&mut client).await {
        Message::Close(Some(frame)) => assert_eq!(frame.code, CloseCode::Size),
        other => panic!("expected a close frame, got {other:?}"),
    }
    assert!(provider.texts().is_empty());
}

#[tokio::test]
async fn a_frame_announcing_100_mb_is_closed_with_1009_before_it_is_read() {
    let provider = FakeProvider::start(Behaviour::Turns).await;
    let proxy = proxy(&provider, "").await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    let head = format!(
        "GET /v1/responses HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        proxy.addr
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    while !answer.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(LIMIT, stream.read(&mut byte))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(read, 1, "the proxy closed during the handshake");
        answer.push(byte[0]);
    }
    assert!(
        answer.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // A masked text frame of 100 MB: its head and the first 64 KiB of it.
    let mut frame = vec![0x81, 0x80 | 127];
    frame.extend_from_slice(&(100u64 << 20).to_be_bytes());
    frame.extend_from_slice(&[1, 2, 3, 4]);
    frame.extend(std::iter::repeat_n(b'x', 64 << 10));
    let _ = stream.write_all(&frame).await;
    let mut close = [0u8; 4];
    tokio::time::timeout(LIMIT, stream.read_exact(&mut close))
        .await
        .unwrap()
        .unwrap();
    // An unmasked close frame whose code is 1009.
    assert_eq!(close[0], 0x88);
    assert_eq!(u16::from_be_bytes([close[2], close[3]]), 1009);
}

#[tokio::test]
async fn a_provider_refusing_the_upgrade_gives_its_status_in_the_envelope() {
    let provider = FakeProvider::start(Behaviour::Refuse(401)).await;
    let proxy = proxy(&provider, "").await;
    // With the provider in the path, the upgrade itself is answered with its status.
    match connect(&proxy, "/openai/v1/responses").await {
        Err(WsError::Http(response)) => {
            assert_eq!(response.status(), 401);
            let body: Value = serde_json::from_slice(response.body().as_deref().unwrap()).unwrap();
            assert_eq!(body["error"]["code"], "upstream_refused_upgrade");
            assert!(body["error"]["message"].as_str().unwrap().contains("401"));
        }
        other => panic!("expected the provider's refusal, got {other:?}"),
    }
    // Without it, the first response.create opens the provider's socket: an error event.
    let mut client = connect(&proxy, "/v1/responses").await.unwrap();
    client.send(Message::text(create("hi"))).await.unwrap();
    let event = next_json(&mut client).await;
    assert_eq!(
        (event["status"].as_u64(), event["error"]["code"].as_str()),
        (Some(401), Some("upstream_refused_upgrade"))
    );
    assert_eq!(provider.seen.lock().unwrap().upgrades.len(), 2);
}

#[tokio::test]
async fn pings_and_closes_cross_both_ways() {
    let provider = FakeProvider::start(Behaviour::Turns).await;
    let proxy = proxy(&provider, "").await;
    let mut client = connect(&proxy, "/v1/responses").await.unwrap();
    turn(&mut client, &create("hi")).await;
    client.send(Message::Ping("are you there".into())).await.unwrap();
    assert_eq!(next(&mut client).await, Message::Pong("are you there".into()));
    wait_for(|| {
        let seen = provider.seen.lock().unwrap();
        seen.messages.contains(&Message::Ping("are you there".into()))
    })
    .await;
    // The client's close reaches the provider with its code and reason.
    let frame = CloseFrame {
        code: CloseCode::Normal,
        reason: "done here".into(),
    };
    client.send(Message::Close(Some(frame.clone()))).await.unwrap();
    wait_for(|| {
        let seen = provider.seen.lock().unwrap();
        seen.messages.contains(&Message::Close(Some(frame.clone())))
    })
    .await;

    // The provider's close reaches the client (the event asking for it is one the proxy must
    // be told to accept).
    let proxy = self::proxy(&provider, r#"websocket_client_events = ["test.close_me"]"#).await;
    let mut client = connect(&proxy, "/v1/responses").await.unwrap();
    turn(&mut client, &create("hi")).await;
    client.send(Message::text(CLOSE_ME)).await.unwrap();
    match next(&mut client).await {
        Message::Close(Some(frame)) => {
            assert_eq!(
                (frame.code, frame.reason.as_str()),
                (CloseCode::Away, "provider says bye")
            )
        }
        other => panic!("expected the provider's close, got {other:?}"),
    }
}

#[tokio::test]
async fn an_idle_socket_is_closed() {
    let provider = FakeProvider::start(Behaviour::Turns).await;
    let proxy = proxy(&provider, "websocket_idle_timeout_ms = 300").await;
    let mut client = connect(&proxy, "/v1/responses").await.unwrap();
    turn(&mut client, &create("hi")).await;
    let started = std::time::Instant::now();
    match next(&mut client).await {
        Message::Close(Some(frame)) => assert_eq!(frame.code, CloseCode::Away),
        other => panic!("expected a close, got {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(250));
    // The provider's socket was closed too.
    wait_for(|| {
        let seen = provider.seen.lock().unwrap();
        seen.messages.iter().any(Message::is_close)
    })
    .await;
}

#[tokio::test]
async fn a_socket_ends_at_its_longest_life_with_an_error_event() {
    let provider = FakeProvider::start(Behaviour::Turns).await;
    let proxy = proxy(&provider, "websocket_max_duration_ms = 500").await;
    let mut client = connect(&proxy, "/v1/responses").await.unwrap();
    // Busy, not idle: a turn every 100 ms until the limit ends it.
    let started = std::time::Instant::now();
    let mut turns = 0;
    let event = 'socket: loop {
        // The limit may pass between turns: the send may then race the close.
        let _ = client.send(Message::text(create("still busy"))).await;
        loop {
            let event = next_json(&mut client).await;
            match event["type"].as_str() {
                Some("error") => break 'socket event,
                Some("response.completed") => break,
                _ => {}
            }
        }
        turns += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(turns >= 2, "{turns}");
    assert!(started.elapsed() >= Duration::from_millis(450));
    assert_eq!(event["error"]["code"], "websocket_connection_limit_reached");
    match next(&mut client).await {
        Message::Close(Some(frame)) => assert_eq!(frame.code, CloseCode::Normal),
        other => panic!("expected a close, got {other:?}"),
    }
}

#[tokio::test]
async fn a_client_that_never_reads_holds_the_provider_back() {
    // 100 messages of 1 MiB: far more than the sockets' buffers hold (the provider stalls
    // after about a dozen).
    let provider = FakeProvider::start(Behaviour::Flood {
        count: 100,
        bytes: 1 << 20,
    })
    .await;
    let proxy = proxy(&provider, "").await;
    let mut client = connect(&proxy, "/v1/responses").await.unwrap();
    client.send(Message::text(create("flood me"))).await.unwrap();
    // Wait until the provider has stopped making progress.
    let flooded = || provider.flooded.load(std::sync::atomic::Ordering::SeqCst);
    let mut last = usize::MAX;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if flooded() == last {
            break;
        }
        last = flooded();
    }
    assert!(flooded() > 0, "nothing was sent");
    assert!(
        flooded() < 50,
        "the provider sent {} of 100 messages to a client that never read",
        flooded()
    );
    // Once the client reads, everything arrives.
    for _ in 0..100 {
        assert!(matches!(next(&mut client).await, Message::Text(_)));
    }
}

#[tokio::test]
async fn a_python_websockets_client_passes_valid_and_refused_messages_on_one_socket() {
    let provider = FakeProvider::start(Behaviour::Turns).await;
    let proxy = proxy(&provider, "").await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e/websocket_client.py");
    let child = tokio::process::Command::new("python3")
        .arg(script)
        .arg(format!("ws://{}/v1/responses", proxy.addr))
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), child)
        .await
        .expect("websocket_client.py did not finish within 60 s")
        .unwrap_or_else(|e| panic!("cannot run python3 ({e}): install it and tests/e2e/requirements.txt"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "websocket_client.py failed (pip install -r tests/e2e/requirements.txt?):\n{}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_str(stdout.trim()).unwrap();
    // What the script sent and was not refused reached the provider byte for byte, in order.
    let forwarded: Vec<String> = report["forwarded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(provider.texts(), forwarded);
    // The first response was `store: false`: once a continuation of it is refused, it is
    // evicted, and the valid continuation that follows finds it gone.
    assert_eq!(
        report["refused_codes"],
        json!([
            "call_id_mismatch",
            "previous_response_not_found",
            "arguments_type"
        ])
    );
}

#[tokio::test]
async fn teams_audit_and_the_access_line_cover_the_socket_and_its_messages() {
    use crate::support::log_capture::Captured;
    use crate::teams::{key_entry, PAY_KEY};

    let captured = Captured::default();
    let sink = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_writer(move || sink.clone())
        .finish();
    // The test's runtime is one thread: the proxy's tasks log here too.
    let _logging = tracing::subscriber::set_default(subscriber);

    let provider = FakeProvider::start(Behaviour::Turns).await;
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let extra = format!(
        "[audit]\npath = \"{}\"\n[teams.payments]\nkeys = [\"{}\"]\nmodels = [\"gpt-5*\"]\n",
        audit.display(),
        key_entry(PAY_KEY)
    );
    let mut proxy = proxy(&provider, &extra).await;
    // Without a team's key the upgrade is refused.
    match connect(&proxy, "/v1/responses").await {
        Err(WsError::Http(response)) => assert_eq!(response.status(), 401),
        other => panic!("expected 401, got {other:?}"),
    }
    let mut request = format!("ws://{}/v1/responses", proxy.addr)
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {PAY_KEY}").parse().unwrap());
    request
        .headers_mut()
        .insert("x-request-id", "ws-socket-1".parse().unwrap());
    let stream = TcpStream::connect(proxy.addr).await.unwrap();
    let (mut client, _) = tokio_tungstenite::client_async(request, stream).await.unwrap();
    // A model the team may not use: refused on the socket, which stays.
    let other_model = json!({"type": "response.create", "model": "o3", "input": "hi"}).to_string();
    client.send(Message::text(other_model)).await.unwrap();
    let event = next_json(&mut client).await;
    assert_eq!(
        (event["status"].as_u64(), event["error"]["code"].as_str()),
        (Some(403), Some("model_not_allowed"))
    );
    let refused = json!({
        "type": "response.create",
        "model": "gpt-5",
        "input": [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": 7}],
    })
    .to_string();
    client.send(Message::text(&refused)).await.unwrap();
    assert_eq!(next_json(&mut client).await["status"], 422);
    turn(&mut client, &create("hi")).await;
    client.send(Message::Close(None)).await.unwrap();
    while let Ok(Some(Ok(_))) = tokio::time::timeout(LIMIT, client.next()).await {}
    // The provider got the provider's key, never the team's.
    let seen = provider.seen.lock().unwrap().upgrades[0].1.clone();
    assert_eq!(seen["authorization"], format!("Bearer {PROVIDER_KEY}"));

    // One access line for the socket, written as it closed.
    let access = || -> Vec<Value> {
        captured
            .text()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|line| line["target"] == "replaygate::access" && line["request_id"] == "ws-socket-1")
            .collect()
    };
    wait_for(|| !access().is_empty()).await;
    let lines = access();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    assert_eq!(line["status"], 101, "{line}");
    assert_eq!(line["team"], "payments");
    assert_eq!(
        (
            &line["ws_messages_in"],
            &line["ws_messages_out"],
            &line["ws_forwarded"],
            &line["ws_refused"]
        ),
        (&json!(3), &json!(3), &json!(1), &json!(2)),
        "{line}"
    );
    assert_eq!(line["ws_ended"], "client_closed");
    // Audit lines for the judged messages, the refused one among them.
    let audit = std::fs::read_to_string(&audit).unwrap();
    let decisions: Vec<String> = audit
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["decision"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(decisions, ["rejected", "allowed"]);
    // The refused messages count as requests with their decision, by team (and provider, once
    // the socket has one).
    let admin = proxy.admin().await;
    let metrics = reqwest::get(format!("http://{admin}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for series in [
        r#"replaygate_requests_total{provider="-",team="payments",decision="error"} 1"#,
        r#"replaygate_requests_total{provider="openai",team="payments",decision="rejected"} 1"#,
    ] {
        assert!(
            metrics.lines().any(|line| line == series),
            "{series} in\n{metrics}"
        );
    }
}

#[tokio::test]
async fn a_sigv4_provider_gets_a_signed_upgrade() {
    let provider = FakeProvider::start(Behaviour::Turns).await;
    let config = format!(
        "default_provider = \"bedrock\"\n[providers.bedrock]\nbase_url = \"{}\"\nauth = {{ aws_sigv4 = {{ region = \"us-east-1\", service = \"bedrock-mantle\" }} }}\n",
        provider.base_url()
    );
    let env = [
        ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
        ("AWS_SECRET_ACCESS_KEY", "secret"),
    ];
    let proxy = Proxy::start(&config, &env).await;
    let mut client = connect(&proxy, "/v1/responses").await.unwrap();
    assert_eq!(turn(&mut client, &create("hi")).await, turn_events(1));
    let headers = provider.seen.lock().unwrap().upgrades[0].1.clone();
    let authorization = headers["authorization"].to_str().unwrap();
    assert!(
        authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
            && authorization.contains("SignedHeaders=host;"),
        "{authorization}"
    );
    assert!(headers.contains_key("x-amz-date"));
    // The upgrade has no body: the signature covers the empty payload.
    assert_eq!(
        headers["x-amz-content-sha256"],
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert!(!headers.contains_key("x-api-key"));
}

/// Captures the proxy's JSON log lines on this thread (the test's runtime is one thread, so the
/// proxy's tasks log here too) and returns the access lines of request `id`.
fn capture_logs() -> (
    crate::support::log_capture::Captured,
    tracing::subscriber::DefaultGuard,
) {
    let captured = crate::support::log_capture::Captured::default();
    let sink = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_writer(move || sink.clone())
        .finish();
    (captured, tracing::subscriber::set_default(subscriber))
}

fn access_lines(captured: &crate::support::log_capture::Captured, id: &str) -> Vec<Value> {
    captured
        .text()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["target"] == "replaygate::access" && line["request_id"] == id)
        .collect()
}

/// Opens a client socket on `/v1/responses` with `x-request-id: id`.
async fn connect_as(proxy: &Proxy, id: &str) -> Client {
    let mut request = format!("ws://{}/v1/responses", proxy.addr)
        .into_client_request()
        .unwrap();
    request.headers_mut().insert("x-request-id", id.parse().unwrap());
    let stream = TcpStream::connect(proxy.addr).await.unwrap();
    let (socket, _) = tokio::time::timeout(LIMIT, tokio_tungstenite::client_async(request, stream))
        .await
        .unwrap()
        .unwrap();
    socket
}

#[tokio::test]
async fn messages_past_the_buffer_budget_are_refused_overloaded_with_1013_and_the_rest_pass_intact() {
    let provider = FakeProvider::start(Behaviour::Turns).await;
    // Room for three first halves, or two whole messages, at once.
    let proxy = proxy(
        &provider,
        "max_body_bytes = 1048576\nmax_buffered_bytes = 2097152",
    )
    .await;
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(connect(&proxy, "/v1/responses").await.unwrap());
    }
    let message = |n: usize| {
        let filler = char::from(b'a' + n as u8).to_string().repeat(900_000);
        format!(r#"{{"type":"response.create","model":"gpt-5","input":"{filler}"}}"#)
    };
    let half = 600_000;
    // Every socket sends the first 600 kB of its message as a fragment; none can end yet.
    for (n, client) in clients.iter_mut().enumerate() {
        let text = Bytes::from(message(n));
        let first = Frame::message(text.slice(..half), OpCode::Data(Data::Text), false);
        client.send(Message::Frame(first)).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let outcomes =
        futures_util::future::join_all(clients.iter_mut().enumerate().map(|(n, client)| async move {
            let text = Bytes::from(message(n));
            let rest = Frame::message(text.slice(half..), OpCode::Data(Data::Continue), true);
            // A refused socket may be closing already: what it reads is what matters.
            let _ = client.send(Message::Frame(rest)).await;
            let event = next_json(client).await;
            if event["type"] == "error" {
                let close = match next(client).await {
                    Message::Close(Some(frame)) => frame.code,
                    other => panic!("expected a close, got {other:?}"),
                };
                return Err((event, close));
            }
            assert_eq!(event["type"], "response.created", "{event}");
            Ok(n)
        }))
        .await;
    let mut forwarded = Vec::new();
    for outcome in outcomes {
        match outcome {
            Ok(n) => forwarded.push(message(n)),
            Err((event, close)) => {
                assert_eq!(event["status"], 503, "{event}");
                assert_eq!(event["error"]["code"], "overloaded");
                assert_eq!(event["error"]["type"], "server_error");
                assert_eq!(close, CloseCode::Again);
            }
        }
    }
    assert!(
        forwarded.len() < 4,
        "four messages of 900 kB cannot all be held in 2 MiB"
    );
    assert!(
        !forwarded.is_empty(),
        "three first halves fit, so one message at least"
    );
    // What was forwarded reached the provider whole, each message once.
    wait_for(|| provider.texts().len() == forwarded.len()).await;
    let mut received = provider.texts();
    received.sort();
    forwarded.sort();
    assert!(received == forwarded, "the forwarded messages arrived changed");
}

#[tokio::test]
async fn events_of_other_types_are_refused_unless_the_config_accepts_them() {
    let provider = FakeProvider::start(Behaviour::Turns).await;
    let strict = proxy(&provider, "").await;
    let mut client = connect(&strict, "/v1/responses").await.unwrap();
    let first = create("hi");
    turn(&mut client, &first).await;
    let cancel = r#"{"type":"response.cancel","response_id":"resp_1"}"#;
    client.send(Message::text(cancel)).await.unwrap();
    let event = next_json(&mut client).await;
    assert_eq!(
        (event["status"].as_u64(), event["error"]["code"].as_str()),
        (Some(400), Some("unsupported_event")),
        "{event}"
    );
    assert!(event["error"]["message"]
        .as_str()
        .unwrap()
        .contains("response.cancel"));
    // The socket stays, and nothing but the first turn reached the provider.
    assert_eq!(turn(&mut client, &first).await, turn_events(2));
    assert_eq!(provider.texts(), [first.as_str(), first.as_str()]);

    // Listed in websocket_client_events, it passes unjudged, byte for byte.
    let provider = FakeProvider::start(Behaviour::Turns).await;
    let widened = proxy(
        &provider,
        r#"websocket_client_events = ["response.create", "response.cancel"]"#,
    )
    .await;
    let mut client = connect(&widened, "/v1/responses").await.unwrap();
    turn(&mut client, &first).await;
    // (The fake provider answers any message with a turn.)
    assert_eq!(turn(&mut client, cancel).await, turn_events(2));
    let other = r#"{"type":"session.update"}"#;
    client.send(Message::text(other)).await.unwrap();
    assert_eq!(next_json(&mut client).await["error"]["code"], "unsupported_event");
    assert_eq!(provider.texts(), [first.as_str(), cancel]);
}

#[tokio::test]
async fn a_refused_continuation_evicts_the_unstored_response_it_named() {
    let provider = FakeProvider::start(Behaviour::Turns).await;
    let proxy = proxy(&provider, "").await;
    let mut client = connect(&proxy, "/v1/responses").await.unwrap();
    // resp_1: store false (as `create` asks); resp_2: stored.
    turn(&mut client, &create("weather?")).await;
    let stored = create("weather?").replace(r#""store":false"#, r#""store":true"#);
    turn(&mut client, &stored).await;
    // Each continuation answers a call its response never made: refused.
    for previous in ["resp_1", "resp_2"] {
        client
            .send(Message::text(continuation(previous, "call_999")))
            .await
            .unwrap();
        assert_eq!(next_json(&mut client).await["error"]["code"], "call_id_mismatch");
    }
    // A valid continuation of the unstored resp_1 is no longer possible on this socket.
    client
        .send(Message::text(continuation("resp_1", "call_1")))
        .await
        .unwrap();
    let event = next_json(&mut client).await;
    assert_eq!(
        (event["status"].as_u64(), event["error"]["code"].as_str()),
        (Some(400), Some("previous_response_not_found")),
        "{event}"
    );
    assert!(event["error"]["message"].as_str().unwrap().contains("resp_1"));
    // The stored resp_2 stays: a valid continuation of it passes.
    assert_eq!(
        turn(&mut client, &continuation("resp_2", "call_2")).await,
        turn_events(3)
    );
    assert_eq!(provider.texts().len(), 3, "no refused message was forwarded");
}

#[tokio::test]
async fn the_access_line_counts_refusals_by_code_and_says_rejected() {
    let (captured, _logging) = capture_logs();
    let provider = FakeProvider::start(Behaviour::Turns).await;
    let proxy = proxy(&provider, "").await;
    let mut client = connect_as(&proxy, "ws-refusals").await;
    turn(&mut client, &create("hi")).await;
    for _ in 0..2 {
        client
            .send(Message::text(r#"{"type":"response.cancel"}"#))
            .await
            .unwrap();
        assert_eq!(next_json(&mut client).await["error"]["code"], "unsupported_event");
    }
    client.send(Message::text("not json")).await.unwrap();
    assert_eq!(next_json(&mut client).await["error"]["code"], "invalid_json");
    // The last message passes: the line still says the socket refused some.
    turn(&mut client, &create("again")).await;
    client.send(Message::Close(None)).await.unwrap();
    while let Ok(Some(Ok(_))) = tokio::time::timeout(LIMIT, client.next()).await {}
    wait_for(|| !access_lines(&captured, "ws-refusals").is_empty()).await;
    let line = &access_lines(&captured, "ws-refusals")[0];
    assert_eq!(line["decision"], "rejected", "{line}");
    assert_eq!(line["ws_refused"], 3);
    assert_eq!(line["ws_refused_codes"], "unsupported_event=2,invalid_json=1");
    assert_eq!(
        (&line["ws_forwarded"], &line["ws_ended"]),
        (&json!(2), &json!("client_closed"))
    );

    // A socket that refused nothing is allowed, and its line has no refusals.
    let mut client = connect_as(&proxy, "ws-clean").await;
    turn(&mut client, &create("hi")).await;
    client.send(Message::Close(None)).await.unwrap();
    while let Ok(Some(Ok(_))) = tokio::time::timeout(LIMIT, client.next()).await {}
    wait_for(|| !access_lines(&captured, "ws-clean").is_empty()).await;
    let line = &access_lines(&captured, "ws-clean")[0];
    assert_eq!(line["decision"], "allowed", "{line}");
    assert_eq!(line["ws_refused"], 0);
    assert!(line.get("ws_refused_codes").is_none(), "{line}");
}

#[tokio::test]
async fn shutdown_closes_open_sockets_with_1001_within_the_grace_period() {
    let provider = FakeProvider::start(Behaviour::Turns).await;
    let mut proxy = proxy(&provider, "shutdown_grace_ms = 3000").await;
    let mut idle = connect(&proxy, "/v1/responses").await.unwrap();
    turn(&mut idle, &create("hi")).await;
    let mut fresh = connect(&proxy, "/v1/responses").await.unwrap();
    let started = std::time::Instant::now();
    proxy.begin_shutdown();
    for client in [&mut idle, &mut fresh] {
        match next(client).await {
            Message::Close(Some(frame)) => {
                assert_eq!(
                    (frame.code, frame.reason.as_str()),
                    (CloseCode::Away, "server shutting down")
                )
            }
            other => panic!("expected a close, got {other:?}"),
        }
    }
    // Idle sockets do not wait for the grace period; the provider's side was closed too.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    wait_for(|| {
        provider
            .seen
            .lock()
            .unwrap()
            .messages
            .iter()
            .any(Message::is_close)
    })
    .await;
    assert!(
        proxy.stopped_within(Duration::from_secs(4)).await,
        "run() did not return"
    );
}

#[tokio::test]
async fn replayed_items_are_repaired_or_refused_on_a_socket_as_on_a_post() {
    let provider = FakeProvider::start(Behaviour::Turns).await;
    let config = format!(
        "default_provider = \"openai\"\n[providers.openai]\nbase_url = \"{}\"\nauth = {{ bearer_env = \"UP_KEY\" }}\nitem_profile = \"openai\"\n",
        provider.base_url()
    );
    let proxy = Proxy::start(&config, &[("UP_KEY", PROVIDER_KEY)]).await;
    let mut client = connect(&proxy, "/v1/responses").await.unwrap();
    let user = r#"{"role":"user","content":"weather?"}"#;
    let reasoning =
        r#"{"type":"reasoning","id":"rs_68c1a2b3c4d5e6f70001","summary":[],"encrypted_content":"gAAAAB"}"#;
    let message = r#"{"type":"message","id":"msg_68c1a2b3c4d5e6f70003","role":"assistant","content":[{"type":"output_text","text":"Sunny."}]}"#;
    let create = |items: &[&str]| {
        format!(
            r#"{{"type":"response.create","model":"gpt-5","input":[{}],"store":false}}"#,
            items.join(",")
        )
    };
    // An orphaned reasoning item is cut: the provider gets the message without it.
    assert_eq!(
        turn(&mut client, &create(&[user, reasoning, user])).await,
        turn_events(1)
    );
    // The valid shape passes byte for byte.
    let valid = create(&[user, reasoning, message, user]);
    assert_eq!(turn(&mut client, &valid).await, turn_events(2));
    assert_eq!(provider.texts(), [create(&[user, user]), valid.clone()]);
    // A repeat with other bytes is refused with an error event, and the socket stays.
    let changed = message.replace("Sunny.", "Rainy.");
    client
        .send(Message::text(create(&[user, message, user, &changed])))
        .await
        .unwrap();
    let event = next_json(&mut client).await;
    assert_eq!(event["type"], "error");
    assert_eq!(event["status"], 422);
    assert_eq!(event["error"]["code"], "duplicate_item_id");
    assert_eq!(event["error"]["param"], "input[3]");
    assert_eq!(provider.texts().len(), 2, "the refused message did not leave");
}

/// Reads events until the turn's `response.completed` (bounded by `LIMIT` per event).
async fn whole_turn(client: &mut Client) -> Vec<String> {
    let mut events = Vec::new();
    for _ in 0..16 {
        let event = next_text(client).await;
        let done = event.contains(r#""type":"response.completed""#);
        events.push(event);
        if done {
            return events;
        }
    }
    panic!("no response.completed in 16 events: {events:?}")
}

#[tokio::test]
async fn a_call_sent_back_on_a_socket_without_its_reasoning_item_is_refused_or_given_it_back() {
    let provider = FakeProvider::start(Behaviour::Reasoned).await;
    let config = |extra: &str| {
        format!(
            "default_provider = \"openai\"\n[providers.openai]\nbase_url = \"{}\"\nitem_profile = \"openai\"\n[state]\nbackend = \"memory\"\n{extra}",
            provider.base_url()
        )
    };
    let user = r#"{"role":"user","content":"weather?"}"#;
    let output = r#"{"type":"function_call_output","call_id":"call_1","output":"sunny"}"#;
    let create = |items: &[&str]| {
        format!(
            r#"{{"type":"response.create","model":"gpt-5","tools":[{{"type":"function","name":"get_weather","parameters":{{"type":"object"}}}}],"input":[{}],"store":false}}"#,
            items.join(",")
        )
    };
    let (reasoning, call) = (reasoning_item(1), reasoned_call(1));
    let without = create(&[user, &call, output]);
    let with = create(&[user, &reasoning, &call, output]);

    // The ledger saw rs_1 directly before fc_1: the call sent back alone is refused.
    let proxy = Proxy::start(&config(""), &[]).await;
    let mut client = connect(&proxy, "/v1/responses").await.unwrap();
    client.send(Message::text(create(&[user]))).await.unwrap();
    assert_eq!(whole_turn(&mut client).await, reasoned_turn_events(1));
    client.send(Message::text(without.clone())).await.unwrap();
    let event = next_json(&mut client).await;
    assert_eq!(event["type"], "error", "{event}");
    assert_eq!(event["status"], 422);
    assert_eq!(event["error"]["code"], "reasoning_missing");
    assert_eq!(event["error"]["param"], "input[1]");
    assert_eq!(provider.texts().len(), 1, "the refused message did not leave");
    // Sent with it, the call passes byte for byte, and the socket is still open.
    client.send(Message::text(with.clone())).await.unwrap();
    assert_eq!(whole_turn(&mut client).await, reasoned_turn_events(2));
    assert_eq!(provider.texts().last(), Some(&with));

    // With the items kept and `repair`, the reasoning item's bytes go back in before the call.
    let repairing = Proxy::start(
        &config("[ledger]\nstore_items = true\n[gate.rules]\nreasoning_missing = \"repair\"\n"),
        &[],
    )
    .await;
    let mut client = connect(&repairing, "/v1/responses").await.unwrap();
    client.send(Message::text(create(&[user]))).await.unwrap();
    assert_eq!(whole_turn(&mut client).await, reasoned_turn_events(3));
    // Turn 3 answered rs_3 and fc_3; send its call back alone.
    let (reasoning, call) = (reasoning_item(3), reasoned_call(3));
    let output = output.replace("call_1", "call_3");
    client
        .send(Message::text(create(&[user, &call, &output])))
        .await
        .unwrap();
    assert_eq!(whole_turn(&mut client).await, reasoned_turn_events(4));
    assert_eq!(
        provider.texts().last(),
        Some(&create(&[user, &reasoning, &call, &output]))
    );
}

#[tokio::test]
async fn with_teams_a_socket_continues_its_own_turns_and_unknown_state_gets_an_error_event() {
    use crate::teams::{key_entry, PAY_KEY};

    let provider = FakeProvider::start(Behaviour::Turns).await;
    let extra = format!(
        "[state]\nbackend = \"memory\"\n[ledger]\nenabled = true\n[teams.payments]\nkeys = [\"{}\"]\n",
        key_entry(PAY_KEY)
    );
    let proxy = proxy(&provider, &extra).await;
    let mut request = format!("ws://{}/v1/responses", proxy.addr)
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {PAY_KEY}").parse().unwrap());
    let stream = TcpStream::connect(proxy.addr).await.unwrap();
    let (mut client, _) = tokio_tungstenite::client_async(request, stream).await.unwrap();
    // resp_1 is made with `store: false` on this socket: its continuation is the team's own.
    assert_eq!(turn(&mut client, &create("weather?")).await, turn_events(1));
    assert_eq!(
        turn(&mut client, &continuation("resp_1", "call_1")).await,
        turn_events(2)
    );
    // A response neither the socket nor the ledger knows: refused on the socket, which stays.
    for message in [
        continuation("resp_never_seen", "call_1"),
        json!({"type": "response.create", "model": "gpt-5",
               "input": [{"type": "item_reference", "id": "msg_never_seen_0123456789"}]})
        .to_string(),
    ] {
        client.send(Message::text(message)).await.unwrap();
        let event = next_json(&mut client).await;
        assert_eq!(
            (event["status"].as_u64(), event["error"]["code"].as_str()),
            (Some(422), Some("unknown_state")),
            "{event}"
        );
    }
    assert_eq!(provider.texts().len(), 2, "no refused message was forwarded");
}

#[tokio::test]
async fn a_response_not_stored_is_continued_on_its_own_socket_and_refused_on_another_or_over_http() {
    let provider = FakeProvider::start(Behaviour::Unstored).await;
    let config = format!(
        "default_provider = \"openai\"\n[providers.openai]\nbase_url = \"{}\"\nauth = {{ bearer_env = \"UP_KEY\" }}\nitem_profile = \"openai\"\n[state]\nbackend = \"memory\"\n",
        provider.base_url()
    );
    let proxy = Proxy::start(&config, &[("UP_KEY", PROVIDER_KEY)]).await;
    let mut own = connect(&proxy, "/v1/responses").await.unwrap();
    assert_eq!(turn(&mut own, &create("weather?")).await, unstored_turn_events(1));
    // The socket that made resp_1 keeps it: its continuation leaves byte for byte.
    let next = continuation("resp_1", "call_1");
    assert_eq!(turn(&mut own, &next).await, unstored_turn_events(2));
    assert_eq!(provider.texts().last(), Some(&next));
    let sent = provider.texts().len();

    // Another socket cannot continue it: refused with an error event before it leaves.
    let mut other = connect(&proxy, "/v1/responses").await.unwrap();
    other.send(Message::text(next.clone())).await.unwrap();
    let event = next_json(&mut other).await;
    assert_eq!(event["type"], "error", "{event}");
    assert_eq!(event["status"], 422);
    assert_eq!(event["error"]["code"], "state_not_stored");
    assert_eq!(event["error"]["param"], "previous_response_id");

    // Nor can a request over HTTP.
    let body = json!({
        "model": "gpt-5",
        "previous_response_id": "resp_1",
        "input": [{"type": "function_call_output", "call_id": "call_1", "output": "sunny"}],
    });
    let response = reqwest::Client::new()
        .post(proxy.url("/v1/responses"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 422);
    let answer: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    assert_eq!(answer["error"]["code"], "state_not_stored", "{answer}");
    assert_eq!(provider.texts().len(), sent, "a refused message left");
}

#[tokio::test]
async fn a_response_not_stored_is_carried_on_another_socket_with_carry_sessions() {
    let provider = FakeProvider::start(Behaviour::Unstored).await;
    let config = format!(
        "default_provider = \"openai\"\n[providers.openai]\nbase_url = \"{}\"\nauth = {{ bearer_env = \"UP_KEY\" }}\nitem_profile = \"openai\"\n[state]\nbackend = \"memory\"\n[ledger]\nstore_items = true\ncarry_sessions = true\n",
        provider.base_url()
    );
    let proxy = Proxy::start(&config, &[("UP_KEY", PROVIDER_KEY)]).await;
    let mut own = connect(&proxy, "/v1/responses").await.unwrap();
    assert_eq!(turn(&mut own, &create("weather?")).await, unstored_turn_events(1));
    // Another socket continues it: the recorded turn goes in place of the id.
    let mut other = connect(&proxy, "/v1/responses").await.unwrap();
    let events = turn(&mut other, &continuation("resp_1", "call_1")).await;
    assert_eq!(events.len(), unstored_turn_events(2).len(), "{events:?}");
    let forwarded: Value = serde_json::from_str(provider.texts().last().unwrap()).unwrap();
    assert!(forwarded.get("previous_response_id").is_none(), "{forwarded}");
    let types: Vec<&str> = forwarded["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["type"].as_str().unwrap_or("message"))
        .collect();
    assert_eq!(
        types,
        ["message", "function_call", "function_call_output"],
        "{forwarded}"
    );
    assert_eq!(forwarded["input"][1]["call_id"], "call_1", "{forwarded}");
}

/// A WebSocket closed before its `store: false` response completed: the ledger recorded the
/// response's id from `response.created`, with its `store: false`, so a continuation over HTTP is
/// refused before it leaves, as one of a completed response is.
#[tokio::test]
async fn a_response_not_stored_whose_socket_closed_before_it_completed_is_refused_over_http() {
    let provider = FakeProvider::start(Behaviour::Stall).await;
    let config = format!(
        "default_provider = \"openai\"\n[providers.openai]\nbase_url = \"{}\"\nauth = {{ bearer_env = \"UP_KEY\" }}\nitem_profile = \"openai\"\n[state]\nbackend = \"memory\"\n",
        provider.base_url()
    );
    let proxy = Proxy::start(&config, &[("UP_KEY", PROVIDER_KEY)]).await;
    let mut own = connect(&proxy, "/v1/responses").await.unwrap();
    own.send(Message::text(create("weather?"))).await.unwrap();
    let created = next_json(&mut own).await;
    assert_eq!(created["type"], "response.created", "{created}");
    own.close(None).await.unwrap();
    drop(own);
    let body = continuation("resp_1", "call_1");
    let body: Value = serde_json::from_str(&body).unwrap();
    let mut body = body.as_object().unwrap().clone();
    body.remove("type");
    // The record is written as the socket's turn ends: ask until it is there.
    let mut answer = Value::Null;
    for _ in 0..100 {
        let response = reqwest::Client::new()
            .post(proxy.url("/v1/responses"))
            .header("content-type", "application/json")
            .body(Value::Object(body.clone()).to_string())
            .timeout(std::time::Duration::from_secs(5))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        answer = serde_json::from_str(&response.text().await.unwrap()).unwrap_or(Value::Null);
        if status == 422 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(answer["error"]["code"], "state_not_stored", "{answer}");
    assert_eq!(answer["error"]["param"], "previous_response_id", "{answer}");
}
