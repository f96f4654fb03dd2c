//! WebSocket client events and the state they name (docs/websocket.md, docs/teams.md), over a
//! real socket through the proxy to the fake WebSocket provider: with teams, a listed event
//! (`response.cancel`, ...) that names another team's response, item or conversation gets the
//! `error` event `not_found` its HTTP route's 404 would give, and nothing is forwarded; the
//! owner's passes byte for byte; without teams it passes as before. A member the relay reads
//! (`type`, `store`, `previous_response_id`, an event's ids) repeated, re-cased, or an id that
//! is not a string, is refused with `invalid_input` naming it, and nothing is forwarded.

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::support::proxy::Proxy;
use crate::teams::key_entry;
use crate::websocket::fake_provider::{reasoned_call, turn_events, Behaviour, FakeProvider};

const ALPHA: &str = "rg-alpha-ws-test-key";
const BETA: &str = "rg-beta-ws-test-key";
const LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

type Client = WebSocketStream<TcpStream>;

/// The client events these proxies accept besides `response.create`.
const EVENTS: &str = r#"websocket_client_events = ["response.create", "response.cancel", "conversation.item.retrieve", "conversation.item.delete"]"#;

/// A proxy in front of `provider` accepting [`EVENTS`], the ledger in memory, and `teams`
/// (nothing: no teams) with `ledger` lines.
async fn proxy(provider: &FakeProvider, teams: &str, ledger: &str) -> Proxy {
    let config = format!(
        "[server]\n{EVENTS}\ndefault_provider = \"openai\"\n[state]\nbackend = \"memory\"\n[ledger]\n{ledger}\n\
         [providers.openai]\nbase_url = \"{}\"\nauth = \"none\"\n{teams}\n",
        provider.base_url()
    );
    Proxy::start(&config, &[]).await
}

/// Teams `alpha` and `beta`, with `alpha_extra` in alpha's table.
fn two_teams(alpha_extra: &str) -> String {
    format!(
        "[teams.alpha]\nkeys = [\"{}\"]\n{alpha_extra}\n[teams.beta]\nkeys = [\"{}\"]\n",
        key_entry(ALPHA),
        key_entry(BETA)
    )
}

/// A socket on `/v1/responses` with client key `key`.
async fn connect(proxy: &Proxy, key: &str) -> Client {
    let mut request = format!("ws://{}/v1/responses", proxy.addr)
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    let stream = TcpStream::connect(proxy.addr).await.unwrap();
    let (socket, _) = tokio::time::timeout(LIMIT, tokio_tungstenite::client_async(request, stream))
        .await
        .expect("the handshake did not finish")
        .unwrap();
    socket
}

async fn next_text(client: &mut Client) -> String {
    let message = tokio::time::timeout(LIMIT, client.next())
        .await
        .expect("no message in time")
        .expect("the socket ended")
        .expect("the socket failed");
    match message {
        Message::Text(text) => text.to_string(),
        other => panic!("expected a text message, got {other:?}"),
    }
}

/// Sends `message` and reads the turn the fake provider answers any forwarded message with.
async fn turn(client: &mut Client, message: &str, events: usize) -> Vec<String> {
    client.send(Message::text(message)).await.unwrap();
    let mut answer = Vec::new();
    for _ in 0..events {
        answer.push(next_text(client).await);
    }
    answer
}

/// Sends `message` and reads the one event it gets: a refusal.
async fn refused(client: &mut Client, message: &str) -> Value {
    client.send(Message::text(message)).await.unwrap();
    let event: Value = serde_json::from_str(&next_text(client).await).unwrap();
    assert_eq!(event["type"], "error", "{message}: {event}");
    event
}

/// A `response.create` that starts a conversation, spaced as no re-serialisation would.
const CREATE: &str =
    r#"{"type":"response.create",  "model":"gpt-5","input":[{"role":"user","content":"weather?"}]}"#;

fn cancel(id: &str) -> String {
    format!(r#"{{ "type" : "response.cancel", "response_id" : "{id}" }}"#)
}

/// The error envelope's `error` of beta's `POST /v1/responses/{id}/cancel`, with its status.
async fn http_cancel(proxy: &Proxy, key: &str, id: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(proxy.url(&format!("/v1/responses/{id}/cancel")))
        .header("authorization", format!("Bearer {key}"))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    (status, body["error"].clone())
}

/// Asserts `event` is the 404 `not_found` its HTTP route gives.
fn assert_not_found(event: &Value, http: &(u16, Value)) {
    assert_eq!(
        (event["status"].as_u64(), event["error"]["code"].as_str()),
        (Some(404), Some("not_found")),
        "{event}"
    );
    assert_eq!(http.0, 404);
    assert_eq!(
        event["error"], http.1,
        "the socket's refusal is not the HTTP route's"
    );
}

#[tokio::test]
async fn another_teams_response_cancel_is_not_found_and_the_owners_passes_byte_for_byte() {
    let provider = FakeProvider::start(Behaviour::Turns).await;
    let proxy = proxy(&provider, &two_teams(""), "").await;
    let mut alpha = connect(&proxy, ALPHA).await;
    let mut beta = connect(&proxy, BETA).await;
    // resp_1 is alpha's, resp_2 beta's (the ledger records each turn before its last event).
    assert_eq!(turn(&mut alpha, CREATE, 3).await, turn_events(1));
    assert_eq!(turn(&mut beta, CREATE, 3).await, turn_events(2));

    // Beta cancelling alpha's response: what the HTTP route answers, the same as for an id
    // never seen; the message names no team.
    let http = http_cancel(&proxy, BETA, "resp_1").await;
    let foreign = refused(&mut beta, &cancel("resp_1")).await;
    assert_not_found(&foreign, &http);
    let unknown = refused(&mut beta, &cancel("resp_never_seen")).await;
    assert_not_found(&unknown, &http_cancel(&proxy, BETA, "resp_never_seen").await);
    assert_eq!(foreign, unknown);
    assert!(!foreign.to_string().contains("alpha"), "{foreign}");
    // Spelt with escapes, the member is still `response_id`, and the id still alpha's.
    let escaped = r#"{"type":"response.cancel","\u0072esponse_id":"resp_\u0031"}"#;
    assert_not_found(&refused(&mut beta, escaped).await, &http);
    // An id of 10 KB is one the ledger never holds: not found, as on the HTTP route.
    let long = "r".repeat(10 << 10);
    assert_eq!(refused(&mut beta, &cancel(&long)).await, foreign);
    // The socket stays: beta's own cancel passes.
    let own = cancel("resp_2");
    assert_eq!(turn(&mut beta, &own, 3).await, turn_events(3));

    // Alpha's cancel of its own response, and cancels naming none, pass byte for byte.
    let mine = cancel("resp_1");
    let bare = r#"{"type":"response.cancel"}"#;
    let null = r#"{"type":"response.cancel","response_id":null,"event_id":"e1"}"#;
    for message in [mine.as_str(), bare, null] {
        turn(&mut alpha, message, 3).await;
    }
    let forwarded = [CREATE, CREATE, own.as_str(), mine.as_str(), bare, null];
    assert_eq!(
        provider.texts(),
        forwarded,
        "only the allowed messages reach the provider"
    );
}

#[tokio::test]
async fn a_team_granted_the_state_may_cancel_it_and_unknown_owner_allow_passes_only_unknown_ids() {
    let provider = FakeProvider::start(Behaviour::Turns).await;
    let proxy = proxy(&provider, &two_teams("share_state_with = [\"beta\"]"), "").await;
    let mut alpha = connect(&proxy, ALPHA).await;
    let mut beta = connect(&proxy, BETA).await;
    turn(&mut alpha, CREATE, 3).await;
    turn(&mut beta, CREATE, 3).await;
    // Alpha shares with beta, not beta with alpha.
    turn(&mut beta, &cancel("resp_1"), 3).await;
    assert_eq!(
        refused(&mut alpha, &cancel("resp_2")).await["error"]["code"],
        "not_found"
    );
    assert_eq!(provider.texts(), [CREATE, CREATE, cancel("resp_1").as_str()]);

    let provider = FakeProvider::start(Behaviour::Turns).await;
    let proxy = self::proxy(&provider, &two_teams(""), "unknown_owner = \"allow\"").await;
    let mut alpha = connect(&proxy, ALPHA).await;
    let mut beta = connect(&proxy, BETA).await;
    turn(&mut alpha, CREATE, 3).await;
    turn(&mut beta, CREATE, 3).await;
    let unknown = cancel("resp_never_seen");
    turn(&mut beta, &unknown, 3).await;
    assert_eq!(
        refused(&mut beta, &cancel("resp_1")).await["error"]["code"],
        "not_found"
    );
    assert_eq!(provider.texts(), [CREATE, CREATE, unknown.as_str()]);
}

#[tokio::test]
async fn items_named_by_an_event_are_checked_by_the_ledgers_item_index() {
    let provider = FakeProvider::start(Behaviour::Reasoned).await;
    let proxy = proxy(&provider, &two_teams(""), "").await;
    let mut alpha = connect(&proxy, ALPHA).await;
    let mut beta = connect(&proxy, BETA).await;
    turn(&mut alpha, CREATE, 4).await;
    turn(&mut beta, CREATE, 4).await;
    let call: Value = serde_json::from_str(&reasoned_call(1)).unwrap();
    let item = call["id"].as_str().unwrap();
    let retrieve = json!({"type": "conversation.item.retrieve", "item_id": item}).to_string();
    let event = refused(&mut beta, &retrieve).await;
    assert_eq!(
        (event["status"].as_u64(), event["error"]["code"].as_str()),
        (Some(404), Some("not_found"))
    );
    assert_eq!(event["error"]["message"], "no item with that id was found");
    let delete = json!({"type": "conversation.item.delete", "previous_item_id": "msg_never_seen_000000"});
    assert_eq!(
        refused(&mut beta, &delete.to_string()).await["error"]["code"],
        "not_found"
    );
    turn(&mut alpha, &retrieve, 4).await;
    assert_eq!(provider.texts(), [CREATE, CREATE, retrieve.as_str()]);
}

#[tokio::test]
async fn without_teams_listed_events_pass_as_before() {
    let provider = FakeProvider::start(Behaviour::Turns).await;
    let proxy = proxy(&provider, "", "").await;
    let mut client = connect(&proxy, "any-key").await;
    turn(&mut client, CREATE, 3).await;
    let long = cancel(&"r".repeat(10 << 10));
    let retrieve = r#"{"type":"conversation.item.retrieve","item_id":"msg_never_seen_000000"}"#;
    for message in [
        cancel("resp_1").as_str(),
        &cancel("resp_never_seen"),
        &long,
        retrieve,
    ] {
        turn(&mut client, message, 3).await;
    }
    assert_eq!(
        provider.texts(),
        [
            CREATE,
            &cancel("resp_1"),
            &cancel("resp_never_seen"),
            &long,
            retrieve
        ]
    );
}

/// Messages refused as read, each with the member its refusal names.
fn malformed() -> Vec<(String, &'static str)> {
    let mut cases: Vec<(String, &'static str)> = [
        // The id beta would look up first, then the one a last-wins reader acts on.
        (r#"{"type":"response.cancel","response_id":"resp_2","response_id":"resp_1"}"#, "response_id"),
        (
            r#"{"type":"response.cancel","response_id":"resp_2","response_id":"resp_2","response_id":"resp_1"}"#,
            "response_id",
        ),
        (r#"{"type":"response.cancel","response_id":"resp_2","Response_Id":"resp_1"}"#, "response_id"),
        (r#"{"type":"response.cancel","response_id":"resp_2","RESPONSE_ID":"resp_1"}"#, "response_id"),
        (r#"{"type":"response.cancel","response_id":"resp_2","response\u005fid":"resp_1"}"#, "response_id"),
        (r#"{"type":"response.cancel","response_id":"resp_2","response_id\u0000":"resp_1"}"#, "response_id"),
        (r#"{"type":"response.cancel","response_id":"resp_2","\u200bresponse_id":"resp_1"}"#, "response_id"),
        (r#"{"type":"response.cancel","response_id":null,"response_id":"resp_1"}"#, "response_id"),
        (r#"{"type":"response.cancel","response_id":7}"#, "response_id"),
        (r#"{"type":"response.cancel","response_id":{"id":"resp_1"}}"#, "response_id"),
        (r#"{"type":"response.cancel","response_id":["resp_1"]}"#, "response_id"),
        (r#"{"type":"response.cancel","response_id":true}"#, "response_id"),
        (r#"{"type":"response.cancel","response_id":"\ud800"}"#, "response_id"),
        (r#"{"type":"conversation.item.delete","item_id":"a","Item_Id":"b"}"#, "item_id"),
        // Which event it is.
        (r#"{"type":"response.cancel","type":"response.create","response_id":"resp_1"}"#, "type"),
        (r#"{"type":"response.create","type":"response.cancel","response_id":"resp_1"}"#, "type"),
        (r#"{"type":"response.cancel","Type":"response.create"}"#, "type"),
        (r#"{"type":"response.cancel","type":"response.cancel","type":"response.cancel"}"#, "type"),
        (r#"{"type":"response.cancel","TYPE\u0001":"x"}"#, "type"),
        // A turn's own members.
        (
            r#"{"type":"response.create","model":"gpt-5","input":"hi","store":false,"store":true}"#,
            "store",
        ),
        (r#"{"type":"response.create","model":"gpt-5","input":"hi","Store":false}"#, "store"),
        (
            r#"{"type":"response.create","model":"gpt-5","input":"hi","previous_response_id":"resp_2","previous_response_id":"resp_1"}"#,
            "previous_response_id",
        ),
        (
            r#"{"type":"response.create","model":"gpt-5","input":"hi","previous_response_id":"resp_2","Previous_Response_Id":"resp_1"}"#,
            "previous_response_id",
        ),
        (
            r#"{"type":"response.create","model":"gpt-5","input":"hi","previous_response_id":null,"previous_response_id":null,"previous_response_id":"resp_1"}"#,
            "previous_response_id",
        ),
    ]
    .into_iter()
    .map(|(message, param)| (message.to_owned(), param))
    .collect();
    let long = "r".repeat(10 << 10);
    cases.push((
        format!(r#"{{"type":"response.cancel","response_id":"{long}","response_id":"{long}"}}"#),
        "response_id",
    ));
    cases
}

#[tokio::test]
async fn repeated_recased_or_unreadable_members_are_invalid_input_and_never_forwarded() {
    for teams in [two_teams(""), String::new()] {
        let provider = FakeProvider::start(Behaviour::Turns).await;
        let proxy = proxy(&provider, &teams, "").await;
        let mut alpha = connect(&proxy, ALPHA).await;
        let mut beta = connect(&proxy, BETA).await;
        turn(&mut alpha, CREATE, 3).await;
        turn(&mut beta, CREATE, 3).await;
        for (message, param) in malformed() {
            let event = refused(&mut beta, &message).await;
            assert_eq!(
                (
                    event["status"].as_u64(),
                    event["error"]["code"].as_str(),
                    event["error"]["param"].as_str()
                ),
                (Some(400), Some("invalid_input"), Some(param)),
                "{message}: {event}"
            );
        }
        // The socket stays, and the provider got nothing but the valid turns.
        assert_eq!(turn(&mut beta, CREATE, 3).await, turn_events(3));
        assert_eq!(
            provider.texts(),
            [CREATE, CREATE, CREATE],
            "with teams: {}",
            !teams.is_empty()
        );
    }
}
