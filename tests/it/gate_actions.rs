//! Gate version 2 through the proxy: monitored violations are forwarded and named in a header,
//! rejected ones answered 422 (at most `max_violations_listed` of them), actions and the strict
//! status reading set in `[gate]`, and a request too costly to judge refused whole.

use crate::support;

use serde_json::Value;
use support::proxy::{one_provider, Proxy};
use support::upstream::{Upstream, RESPONSE_JSON};

const TOOL: &str = r#"{"type":"function","name":"lookup","parameters":{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}}"#;

async fn post(proxy: &Proxy, body: String) -> reqwest::Response {
    reqwest::Client::new()
        .post(proxy.url("/v1/responses"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
}

async fn envelope(response: reqwest::Response) -> Value {
    serde_json::from_slice(&response.bytes().await.unwrap()).unwrap()
}

async fn start(gate: &str) -> (Upstream, Proxy) {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let config = one_provider(&upstream.base_url(), "\"none\"", gate);
    let proxy = Proxy::start(&config, &[]).await;
    (upstream, proxy)
}

/// A history whose call names a tool the request no longer declares (an agent handoff).
fn handoff_history() -> String {
    format!(
        r#"{{"model":"gpt-5","tools":[{TOOL}],"input":[{{"role":"user","content":"hi"}},
        {{"type":"function_call","call_id":"call_1","name":"transfer_to_billing","arguments":"{{}}"}},
        {{"type":"function_call_output","call_id":"call_1","output":"ok"}},
        {{"type":"function_call","call_id":"call_2","name":"lookup","arguments":"{{\"id\":\"a\"}}"}},
        {{"type":"function_call","call_id":"call_3","name":"old_tool","arguments":"{{}}","status":"completed"}}]}}"#
    )
}

#[tokio::test]
async fn monitored_violations_are_forwarded_byte_for_byte_and_named_in_a_header() {
    let (upstream, proxy) = start("").await;
    let body = handoff_history();
    let response = post(&proxy, body.clone()).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["x-replaygate-monitored"],
        "unknown_tool@input[1],unknown_tool@input[4]"
    );
    let received = upstream.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].body, body.as_bytes());
    assert!(!received[0].headers.contains_key("x-replaygate-monitored"));
}

#[tokio::test]
async fn an_allowed_request_without_violations_has_no_monitored_header() {
    let (_upstream, proxy) = start("").await;
    let body = format!(
        r#"{{"model":"gpt-5","tools":[{TOOL}],"input":[{{"type":"function_call","call_id":"c","name":"lookup","arguments":"{{\"id\":\"a\"}}"}},{{"type":"function_call_output","call_id":"c","output":"x"}}]}}"#
    );
    let response = post(&proxy, body).await;
    assert_eq!(response.status(), 200);
    assert!(!response.headers().contains_key("x-replaygate-monitored"));
}

#[tokio::test]
async fn gate_rules_turn_a_monitor_into_a_reject_and_back() {
    let (upstream, proxy) = start("[gate.rules]\nunknown_tool = \"reject\"\nstatus = \"monitor\"\n").await;
    let response = post(&proxy, handoff_history()).await;
    assert_eq!(response.status(), 422);
    let error = &envelope(response).await["error"];
    assert_eq!(error["code"], "unknown_tool");
    assert_eq!(error["param"], "input[1].name");
    let listed: Vec<_> = error["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (&v["index"], &v["action"]))
        .collect();
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().all(|(_, action)| *action == "reject"));
    assert!(upstream.received().is_empty());

    let in_progress = format!(
        r#"{{"model":"gpt-5","tools":[{TOOL}],"input":[{{"type":"function_call","call_id":"c","name":"lookup","arguments":"{{\"id\":\"a\"}}","status":"in_progress"}}]}}"#
    );
    let response = post(&proxy, in_progress).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-replaygate-monitored"], "status@input[0]");
}

#[tokio::test]
async fn require_status_refuses_calls_without_status() {
    let (upstream, proxy) = start("[gate]\nrequire_status = true\n").await;
    let response = post(&proxy, handoff_history()).await;
    assert_eq!(response.status(), 422);
    let error = &envelope(response).await["error"];
    assert_eq!(error["code"], "status");
    assert_eq!(error["param"], "input[1].status");
    assert!(upstream.received().is_empty());
}

#[tokio::test]
async fn a_long_refusal_lists_at_most_the_configured_number() {
    let (upstream, proxy) = start("[gate]\nmax_violations_listed = 3\n").await;
    let items: Vec<String> = (0..50)
        .map(|i| format!(r#"{{"type":"function_call_output","call_id":"nobody_{i}","output":"x"}}"#))
        .collect();
    let body = format!(r#"{{"model":"gpt-5","input":[{}]}}"#, items.join(","));
    let response = post(&proxy, body).await;
    assert_eq!(response.status(), 422);
    let error = &envelope(response).await["error"];
    assert_eq!(error["violations"].as_array().unwrap().len(), 3);
    assert_eq!(error["violations_truncated"], 47);
    assert!(error["message"]
        .as_str()
        .unwrap()
        .ends_with("(and 49 more violations)"));
    assert!(upstream.received().is_empty());
}

#[tokio::test]
async fn the_default_answer_to_100_000_refused_items_stays_small() {
    let (_upstream, proxy) = start("").await;
    let items = vec![r#"{"type":"acme:x"}"#; replaygate::gate::MAX_ITEMS];
    let body = format!(r#"{{"model":"gpt-5","input":[{}]}}"#, items.join(","));
    let response = post(&proxy, body).await;
    assert_eq!(response.status(), 422);
    let bytes = response.bytes().await.unwrap();
    assert!(bytes.len() < 64 * 1024, "a 422 of {} bytes", bytes.len());
    let error = &serde_json::from_slice::<Value>(&bytes).unwrap()["error"];
    assert_eq!(error["violations"].as_array().unwrap().len(), 100);
    assert_eq!(error["violations_truncated"], replaygate::gate::MAX_ITEMS - 100);
}

#[tokio::test]
async fn a_request_past_the_work_budget_is_refused_whole() {
    // The budget takes the tool's schema and a few calls, not 200 of them.
    let (upstream, proxy) = start("[gate]\nwork_budget = 600\n").await;
    let body_of = |calls: usize| {
        let calls: Vec<String> = (0..calls)
            .map(|i| format!(r#"{{"type":"function_call","call_id":"c{i}","name":"lookup","arguments":"{{\"id\":\"{i}\"}}"}},{{"type":"function_call_output","call_id":"c{i}","output":"x"}}"#))
            .collect();
        format!(
            r#"{{"model":"gpt-5","tools":[{TOOL}],"input":[{}]}}"#,
            calls.join(",")
        )
    };
    assert_eq!(post(&proxy, body_of(2)).await.status(), 200);
    let body = body_of(200);
    let response = post(&proxy, body.clone()).await;
    assert_eq!(response.status(), 400);
    let error = &envelope(response).await["error"];
    assert_eq!(error["code"], "gate_budget_exceeded");
    assert!(error["message"].as_str().unwrap().contains("600 units"));
    assert_eq!(
        upstream.received().len(),
        1,
        "only the small request was forwarded"
    );
    // The same request under the default budget is nothing special.
    let (_upstream, proxy) = start("").await;
    assert_eq!(post(&proxy, body).await.status(), 200);
}

#[tokio::test]
async fn names_that_read_as_gated_members_elsewhere_are_refused_before_any_provider_sees_them() {
    let (upstream, proxy) = start("").await;
    // Each body hides an item only another provider may read behind a name that the gate would
    // skip but a case-insensitive JSON binder (Go's encoding/json, ASP.NET) reads as the real one.
    for (body, param) in [
        (
            r#"{"model":"gpt-5","INPUT":[{"type":"bedrock:trace"}],"input":"hi"}"#,
            "input",
        ),
        (
            r#"{"model":"gpt-5","input":[{"Type":"bedrock:trace","type":"message","role":"user","content":"hi"}]}"#,
            "input[0].type",
        ),
        (
            r#"{"model":"gpt-5","input":[{"type\u0000":"bedrock:trace","role":"user","content":"hi"}]}"#,
            "input[0].type",
        ),
        (
            r#"{"model":"gpt-5","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}","\u017ftatus":"in_progress"}]}"#,
            "input[0].status",
        ),
        (
            r#"{"model":"gpt-5","tools":[{"type":"function","name":"f","Parameters":{"type":"object"}}],"input":"hi"}"#,
            "tools[0]",
        ),
    ] {
        let response = post(&proxy, body.to_owned()).await;
        assert_eq!(response.status(), 400, "{body}");
        let error = &envelope(response).await["error"];
        assert_eq!(
            (error["code"].as_str(), error["param"].as_str()),
            (Some("invalid_input"), Some(param)),
            "{body}"
        );
    }
    assert!(upstream.received().is_empty());
    // Names inside metadata, content parts, arguments and schemas are data.
    let data = r#"{"model":"gpt-5","metadata":{"Input":"x","TYPE":"y"},"tools":[{"type":"function","name":"lookup","parameters":{"type":"object","properties":{"Type":{"type":"string"},"id":{"type":"string"}}}}],
        "input":[{"role":"user","content":[{"type":"input_text","text":"hi","Type":"x"}]},{"type":"function_call","call_id":"c","name":"lookup","arguments":"{\"Type\":\"t\",\"id\":\"a\"}"},{"type":"function_call_output","call_id":"c","output":"ok"}]}"#.to_owned();
    let response = post(&proxy, data.clone()).await;
    assert_eq!(response.status(), 200, "{:?}", envelope(response).await);
    assert_eq!(upstream.received()[0].body, data.as_bytes());
}
