//! `state_not_stored` on the wire (docs/reasons.md#state_not_stored): a fake OpenAI answers
//! `store: false`; the client's next turn sends the answer's reasoning item back by `id` alone.
//! `repair` (the default) forwards the body without it and names the cut in
//! `x-replaygate-repaired`; `reject` answers 422 naming both remedies, and nothing leaves.

use serde_json::Value;

use crate::support::proxy::Proxy;
use crate::support::upstream::{json_response, Upstream};

const RS_ID: &str = "rs_68d0aa11bb22cc330001";
/// An answer of a response not stored: a reasoning item without encrypted_content, then text.
const UNSTORED: &str = r#"{"id":"resp_68d0aa11bb22cc33","object":"response","status":"completed","model":"gpt-5","store":false,"output":[{"type":"reasoning","id":"rs_68d0aa11bb22cc330001","summary":[]},{"type":"message","id":"msg_68d0aa11bb22cc330002","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Hi.","annotations":[]}]}]}"#;
const USER: &str = r#"{"role":"user","content":"hi"}"#;
const REASONING: &str = r#"{"type":"reasoning","id":"rs_68d0aa11bb22cc330001","summary":[]}"#;
const MESSAGE: &str = r#"{"type":"message","id":"msg_68d0aa11bb22cc330002","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Hi.","annotations":[]}]}"#;

fn body(items: &[&str]) -> String {
    format!(
        r#"{{"model":"gpt-5","store":false,"input":[{}]}}"#,
        items.join(",")
    )
}

/// One provider `openai` with its item profile and the ledger on a memory store, and `extra`.
fn config(upstream: &Upstream, extra: &str) -> String {
    format!(
        "default_provider = \"openai\"\n[providers.openai]\nbase_url = \"{}\"\nauth = \"none\"\n\
         item_profile = \"openai\"\n[state]\nbackend = \"memory\"\n{extra}\n",
        upstream.base_url()
    )
}

/// The last body the provider received, as text.
fn last_forwarded(upstream: &Upstream) -> String {
    String::from_utf8(upstream.received().last().unwrap().body.to_vec()).unwrap()
}

/// The answer's header `name`, as text.
fn header<'h>(headers: &'h http::HeaderMap, name: &str) -> &'h str {
    headers[name].to_str().unwrap()
}

async fn post(proxy: &Proxy, body: &str) -> (u16, http::HeaderMap, Value) {
    let request = reqwest::Client::new()
        .post(proxy.url("/v1/responses"))
        .header("content-type", "application/json")
        .body(body.to_owned());
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reasoning_item_by_id_of_a_response_not_stored_is_cut_by_default() {
    let upstream = Upstream::start(|_| async { json_response(200, UNSTORED) }).await;
    let proxy = Proxy::start(&config(&upstream, ""), &[]).await;
    assert_eq!(post(&proxy, &body(&[USER])).await.0, 200);
    let next = body(&[USER, REASONING, MESSAGE, USER]);
    let (status, headers, answer) = post(&proxy, &next).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        header(&headers, "x-replaygate-repaired"),
        "state_not_stored@input[1]"
    );
    assert_eq!(last_forwarded(&upstream), body(&[USER, MESSAGE, USER]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_refuses_it_before_it_leaves_naming_both_remedies() {
    let upstream = Upstream::start(|_| async { json_response(200, UNSTORED) }).await;
    let strict = "[gate.rules]\nstate_not_stored = \"reject\"\n";
    let proxy = Proxy::start(&config(&upstream, strict), &[]).await;
    assert_eq!(post(&proxy, &body(&[USER])).await.0, 200);
    let before = upstream.received().len();
    let (status, _, answer) = post(&proxy, &body(&[USER, REASONING, MESSAGE, USER])).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["code"], "state_not_stored");
    assert_eq!(answer["error"]["param"], "input[1]");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains(RS_ID), "{message}");
    assert!(message.contains("`store: true`"), "{message}");
    assert!(
        message.contains(r#"include: ["reasoning.encrypted_content"]"#),
        "{message}"
    );
    assert_eq!(upstream.received().len(), before, "a refused body left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_turn_of_a_stored_response_passes_byte_for_byte() {
    let stored = UNSTORED.replace(r#""store":false"#, r#""store":true"#);
    let upstream = Upstream::start(move |_| {
        let stored = stored.clone();
        async move { json_response(200, stored) }
    })
    .await;
    let proxy = Proxy::start(&config(&upstream, ""), &[]).await;
    assert_eq!(post(&proxy, &body(&[USER])).await.0, 200);
    let next = body(&[USER, REASONING, MESSAGE, USER]);
    let (status, headers, answer) = post(&proxy, &next).await;
    assert_eq!(status, 200, "{answer}");
    assert!(headers.get("x-replaygate-repaired").is_none());
    assert_eq!(upstream.received().last().unwrap().body, next.as_bytes());
}

const REFERENCE: &str = r#"{"type":"item_reference","id":"msg_68d0aa11bb22cc330002"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_reference_to_an_item_not_stored_is_replaced_by_the_kept_item_with_store_items() {
    let upstream = Upstream::start(|_| async { json_response(200, UNSTORED) }).await;
    let kept = "[ledger]\nstore_items = true\n";
    let proxy = Proxy::start(&config(&upstream, kept), &[]).await;
    assert_eq!(post(&proxy, &body(&[USER])).await.0, 200);
    let (status, headers, answer) = post(&proxy, &body(&[USER, REFERENCE, USER])).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        header(&headers, "x-replaygate-repaired"),
        "state_not_stored@input[1]"
    );
    assert_eq!(
        header(&headers, "x-replaygate-inserted"),
        "msg_68d0aa11bb22cc330002@input[1]"
    );
    assert_eq!(last_forwarded(&upstream), body(&[USER, MESSAGE, USER]));
}

/// An answer of a response not stored to a request that asked for
/// `include: ["reasoning.encrypted_content"]`: its reasoning item carries the content.
const UNSTORED_WITH_BLOB: &str = r#"{"id":"resp_68d0aa11bb22cc44","object":"response","status":"completed","model":"gpt-5","store":false,"output":[{"type":"reasoning","id":"rs_68d0aa11bb22cc440001","summary":[],"encrypted_content":"gAAAAB-recorded"},{"type":"message","id":"msg_68d0aa11bb22cc440002","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Hi.","annotations":[]}]}]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reasoning_item_by_id_whose_content_the_ledger_kept_is_sent_with_it_with_store_items() {
    let upstream = Upstream::start(|_| async { json_response(200, UNSTORED_WITH_BLOB) }).await;
    let kept = "[ledger]\nstore_items = true\n";
    let proxy = Proxy::start(&config(&upstream, kept), &[]).await;
    assert_eq!(post(&proxy, &body(&[USER])).await.0, 200);
    let by_id = r#"{"type":"reasoning","id":"rs_68d0aa11bb22cc440001","summary":[]}"#;
    let recorded = r#"{"type":"reasoning","id":"rs_68d0aa11bb22cc440001","summary":[],"encrypted_content":"gAAAAB-recorded"}"#;
    let message = r#"{"type":"message","id":"msg_68d0aa11bb22cc440002","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Hi.","annotations":[]}]}"#;
    let (status, headers, answer) = post(&proxy, &body(&[USER, by_id, message, USER])).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        header(&headers, "x-replaygate-repaired"),
        "state_not_stored@input[1]"
    );
    assert_eq!(
        header(&headers, "x-replaygate-inserted"),
        "rs_68d0aa11bb22cc440001@input[1]"
    );
    assert_eq!(last_forwarded(&upstream), body(&[USER, recorded, message, USER]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_reference_to_an_item_not_stored_is_refused_without_its_kept_content() {
    let upstream = Upstream::start(|_| async { json_response(200, UNSTORED) }).await;
    let proxy = Proxy::start(&config(&upstream, ""), &[]).await;
    assert_eq!(post(&proxy, &body(&[USER])).await.0, 200);
    let before = upstream.received().len();
    let (status, _, answer) = post(&proxy, &body(&[USER, REFERENCE, USER])).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["code"], "state_not_stored");
    assert_eq!(answer["error"]["param"], "input[1]");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("msg_68d0aa11bb22cc330002"), "{message}");
    assert!(message.contains("store_items = true"), "{message}");
    assert!(message.contains("send the item itself"), "{message}");
    assert_eq!(upstream.received().len(), before, "a refused body left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_not_stored_that_ended_incomplete_is_recorded_so_and_its_reasoning_item_is_cut() {
    let incomplete = UNSTORED.replace(
        r#""status":"completed","model""#,
        r#""status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"model""#,
    );
    assert_ne!(incomplete, UNSTORED);
    let upstream = Upstream::start(move |_| {
        let incomplete = incomplete.clone();
        async move { json_response(200, incomplete) }
    })
    .await;
    let proxy = Proxy::start(&config(&upstream, ""), &[]).await;
    assert_eq!(post(&proxy, &body(&[USER])).await.0, 200);
    let (status, headers, answer) = post(&proxy, &body(&[USER, REASONING, MESSAGE, USER])).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        header(&headers, "x-replaygate-repaired"),
        "state_not_stored@input[1]"
    );
    assert_eq!(last_forwarded(&upstream), body(&[USER, MESSAGE, USER]));
}

const UNSTORED_ID: &str = "resp_68d0aa11bb22cc33";

/// The next turn over HTTP: the response not stored named by `previous_response_id`.
fn continuation() -> String {
    format!(
        r#"{{"model":"gpt-5","store":false,"previous_response_id":"{UNSTORED_ID}","input":[{{"role":"user","content":"and then?"}}]}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_previous_response_id_not_stored_is_refused_over_http_before_it_leaves() {
    let upstream = Upstream::start(|_| async { json_response(200, UNSTORED) }).await;
    let proxy = Proxy::start(&config(&upstream, ""), &[]).await;
    assert_eq!(post(&proxy, &body(&[USER])).await.0, 200);
    let before = upstream.received().len();
    let (status, _, answer) = post(&proxy, &continuation()).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["code"], "state_not_stored");
    assert_eq!(answer["error"]["param"], "previous_response_id");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("Previous response with id '{UNSTORED_ID}' not found")),
        "{message}"
    );
    assert!(message.contains("`store: true`"), "{message}");
    assert!(message.contains("carry_sessions = true"), "{message}");
    assert_eq!(upstream.received().len(), before, "a refused body left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_previous_response_id_not_stored_is_carried_with_carry_sessions() {
    let upstream = Upstream::start(|_| async { json_response(200, UNSTORED) }).await;
    let carry = "[ledger]\nstore_items = true\ncarry_sessions = true\n";
    let proxy = Proxy::start(&config(&upstream, carry), &[]).await;
    assert_eq!(post(&proxy, &body(&[USER])).await.0, 200);
    let (status, _, answer) = post(&proxy, &continuation()).await;
    assert_eq!(status, 200, "{answer}");
    let forwarded: Value = serde_json::from_slice(&upstream.received().last().unwrap().body).unwrap();
    assert!(forwarded.get("previous_response_id").is_none(), "{forwarded}");
    // The recorded turn in its place: its input, its answer's message (its id cut; the
    // reasoning item without encrypted_content names nothing once its id goes), then the
    // request's own.
    let input = forwarded["input"].as_array().unwrap();
    assert_eq!(input.len(), 3, "{forwarded}");
    assert_eq!(input[0], serde_json::from_str::<Value>(USER).unwrap());
    assert_eq!(input[1]["type"], "message");
    assert!(input[1].get("id").is_none(), "{forwarded}");
    assert_eq!(input[1]["content"][0]["text"], "Hi.");
    assert_eq!(input[2]["content"], "and then?");
}

/// A provider configured `stores_responses = false` keeps nothing whatever its answer says: the
/// ledger records its answers as not stored, so the reasoning item of one, sent by id alone, is
/// cut as that of a `store: false` answer is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_stores_nothing_has_its_answers_recorded_not_stored() {
    let silent = UNSTORED.replace(r#""store":false,"#, "");
    assert_ne!(silent, UNSTORED);
    let answer = silent.clone();
    let upstream = Upstream::start(move |_| {
        let answer = answer.clone();
        async move { json_response(200, answer) }
    })
    .await;
    let config = config(&upstream, "").replace(
        "item_profile = \"openai\"\n",
        "item_profile = \"openai\"\nstores_responses = false\n",
    );
    assert!(config.contains("stores_responses = false"), "{config}");
    let proxy = Proxy::start(&config, &[]).await;
    assert_eq!(post(&proxy, &body(&[USER])).await.0, 200);
    let (status, headers, answer) = post(&proxy, &body(&[USER, REASONING, MESSAGE, USER])).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        header(&headers, "x-replaygate-repaired"),
        "state_not_stored@input[1]"
    );
    // The same provider without the setting: the answer says nothing of store, so it is stored.
    let plain = config.replace("stores_responses = false\n", "");
    let proxy = Proxy::start(&plain, &[]).await;
    assert_eq!(post(&proxy, &body(&[USER])).await.0, 200);
    let (status, headers, _) = post(&proxy, &body(&[USER, REASONING, MESSAGE, USER])).await;
    assert_eq!(status, 200);
    assert!(headers.get("x-replaygate-repaired").is_none());
}

/// With teams, a reasoning item by id of a response not stored that another team's request
/// made is that team's state first: `cross_team_state`, refused, before `state_not_stored`
/// would cut it (docs/item-profiles.md#precedence).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_teams_reasoning_item_of_a_response_not_stored_is_cross_team_state_first() {
    const ALPHA: &str = "rg-alpha-not-stored-0123456789";
    const BETA: &str = "rg-beta-not-stored-0123456789";
    let entry = |key: &str| replaygate::keys::format_digest(&replaygate::keys::digest(key));
    let upstream = Upstream::start(|_| async { json_response(200, UNSTORED) }).await;
    let teams = format!(
        "[teams.alpha]\nkeys = [\"{}\"]\n[teams.beta]\nkeys = [\"{}\"]\n",
        entry(ALPHA),
        entry(BETA)
    );
    let proxy = Proxy::start(&config(&upstream, &teams), &[]).await;
    let send = |key: &'static str, body: String| {
        let request = reqwest::Client::new()
            .post(proxy.url("/v1/responses"))
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {key}"))
            .body(body);
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let answer: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap_or(Value::Null);
            (status, answer)
        }
    };
    assert_eq!(send(ALPHA, body(&[USER])).await.0, 200);
    let before = upstream.received().len();
    let (status, answer) = send(BETA, body(&[USER, REASONING, MESSAGE, USER])).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["code"], "cross_team_state", "{answer}");
    assert_eq!(upstream.received().len(), before, "a refused body left");
    // Its own team's turn is repaired as without teams.
    let (status, _) = send(ALPHA, body(&[USER, REASONING, MESSAGE, USER])).await;
    assert_eq!(status, 200);
}
