//! Teams and policy end to end (docs/teams.md#teams-and-policy): client keys, what a team may use,
//! pinned tool schemas, actions per team (strip on the wire), rate limits and the audit log. Fake
//! providers record the bytes and headers they get.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::support::proxy::Proxy;
use crate::support::upstream::Upstream;

pub const PAY_KEY: &str = "rg-payments-test-key";
pub const SEARCH_KEY: &str = "rg-search-test-key";
const UPSTREAM_KEY: &str = "sk-provider-own-key";

/// The `keys` entry of a client key, as `replaygate keys new` prints it.
pub fn key_entry(key: &str) -> String {
    replaygate::keys::format_digest(&replaygate::keys::digest(key))
}

/// SHA-256 of `text`, hex (an oracle of its own for the audit log's `body_sha256`).
pub fn digest(key: &str) -> String {
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Two providers at one fake upstream (`openai` and `bedrock`), and `teams` text.
pub fn config(upstream: &Upstream, teams: &str) -> String {
    format!(
        r#"default_provider = "openai"
[providers.openai]
base_url = "{url}/openai"
auth = {{ bearer_env = "UP_KEY" }}
[providers.bedrock]
base_url = "{url}/bedrock"
auth = {{ bearer_env = "UP_KEY" }}
[[routes]]
model = "openai.*"
provider = "bedrock"
{teams}
"#,
        url = upstream.base_url()
    )
}

pub fn two_teams(extra_payments: &str) -> String {
    format!(
        r#"[teams.payments]
keys = ["{}"]
{extra_payments}
[teams.search]
keys = ["{}"]
"#,
        key_entry(PAY_KEY),
        key_entry(SEARCH_KEY)
    )
}

pub async fn start(upstream: &Upstream, teams: &str) -> Proxy {
    Proxy::start(&config(upstream, teams), &[("UP_KEY", UPSTREAM_KEY)]).await
}

/// POSTs `body` with `headers` and returns the status, headers and JSON answer.
pub async fn post(
    proxy: &Proxy,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, http::HeaderMap, Value) {
    let mut request = reqwest::Client::new()
        .post(proxy.url(path))
        .header("content-type", "application/json")
        .body(body.to_owned());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    // Bounded: a request forwarded by mistake to a streaming upstream fails instead of hanging.
    let limit = std::time::Duration::from_secs(10);
    let response = tokio::time::timeout(limit, request.send())
        .await
        .expect("an answer")
        .unwrap();
    let status = response.status().as_u16();
    let head = response.headers().clone();
    let bytes = tokio::time::timeout(limit, response.bytes())
        .await
        .expect("a whole answer")
        .unwrap();
    (
        status,
        head,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

pub fn bearer(key: &str) -> String {
    format!("Bearer {key}")
}

const HELLO: &str = r#"{"model":"gpt-5","input":"hi"}"#;

#[tokio::test]
async fn with_teams_every_request_needs_a_known_key() {
    let upstream = Upstream::json(200, r#"{"ok":true}"#).await;
    let proxy = start(&upstream, &two_teams("")).await;
    for headers in [
        vec![],
        vec![("authorization", "Bearer rg-unknown")],
        vec![("authorization", "Bearer rg-payments-test-ke")],
    ] {
        let (status, _, answer) = post(&proxy, "/v1/responses", &headers, HELLO).await;
        assert_eq!(status, 401, "{headers:?}");
        assert_eq!(answer["error"]["code"], "invalid_api_key");
        assert_eq!(answer["error"]["type"], "invalid_request_error");
    }
    // Ungated paths too.
    let (status, _, _) = post(&proxy, "/v1/files", &[], "{}").await;
    assert_eq!(status, 401);
    assert!(upstream.received().is_empty(), "nothing reached the provider");
}

#[tokio::test]
async fn the_client_key_is_never_forwarded_and_the_provider_gets_its_own() {
    let upstream = Upstream::json(200, r#"{"ok":true}"#).await;
    let proxy = start(&upstream, &two_teams("")).await;
    let pay = bearer(PAY_KEY);
    for headers in [
        vec![("authorization", pay.as_str())],
        vec![("x-api-key", PAY_KEY)],
        vec![("api-key", PAY_KEY), ("authorization", pay.as_str())],
    ] {
        let (status, _, _) = post(&proxy, "/v1/responses", &headers, HELLO).await;
        assert_eq!(status, 200, "{headers:?}");
    }
    let (status, _, _) = post(&proxy, "/v1/models", &[("x-api-key", SEARCH_KEY)], "").await;
    assert_eq!(status, 200);
    let received = upstream.received();
    assert_eq!(received.len(), 4);
    for request in received {
        assert_eq!(request.headers["authorization"], format!("Bearer {UPSTREAM_KEY}"));
        assert!(!request.headers.contains_key("x-api-key") && !request.headers.contains_key("api-key"));
        for (name, value) in &request.headers {
            let value = String::from_utf8_lossy(value.as_bytes());
            assert!(
                !value.contains(PAY_KEY) && !value.contains(SEARCH_KEY),
                "{name} carries a client key"
            );
        }
    }
}

#[tokio::test]
async fn a_team_may_use_only_its_providers_and_models() {
    let upstream = Upstream::json(200, r#"{"ok":true}"#).await;
    let proxy = start(
        &upstream,
        &two_teams("providers = [\"openai\"]\nmodels = [\"gpt-5*\"]"),
    )
    .await;
    let pay = bearer(PAY_KEY);
    let key = [("authorization", pay.as_str())];
    let cases = [
        (
            "/v1/responses",
            r#"{"model":"gpt-5-mini","input":"hi"}"#,
            200,
            None,
        ),
        (
            "/v1/responses",
            r#"{"model":"gpt-4o","input":"hi"}"#,
            403,
            Some("model_not_allowed"),
        ),
        // Routed to bedrock by the model's route.
        (
            "/v1/responses",
            r#"{"model":"openai.gpt-oss-120b","input":"hi"}"#,
            403,
            Some("provider_not_allowed"),
        ),
        // Named by the path prefix: refused before the body is read.
        (
            "/bedrock/v1/responses",
            r#"{"model":"gpt-5","input":"hi"}"#,
            403,
            Some("provider_not_allowed"),
        ),
        ("/bedrock/v1/models", "", 403, Some("provider_not_allowed")),
        // An ungated path's JSON body names its model too.
        (
            "/v1/chat/completions",
            r#"{"model":"gpt-4o","messages":[]}"#,
            403,
            Some("model_not_allowed"),
        ),
        (
            "/v1/chat/completions",
            r#"{"model":"gpt-5","messages":[]}"#,
            200,
            None,
        ),
    ];
    for (path, body, want, code) in cases {
        let (status, _, answer) = post(&proxy, path, &key, body).await;
        assert_eq!(status, want, "{path} {body}: {answer}");
        if let Some(code) = code {
            assert_eq!(answer["error"]["code"], code, "{path} {body}");
            assert_eq!(answer["error"]["type"], "invalid_request_error");
        }
    }
    // The other team has no such limits.
    let search = bearer(SEARCH_KEY);
    let (status, _, _) = post(
        &proxy,
        "/v1/responses",
        &[("authorization", search.as_str())],
        r#"{"model":"openai.gpt-oss-120b","input":"hi"}"#,
    )
    .await;
    assert_eq!(status, 200);
}

fn call(call_id: &str, name: &str, arguments: &str) -> Value {
    json!({"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments})
}

fn output(call_id: &str) -> Value {
    json!({"type": "function_call_output", "call_id": call_id, "output": "done"})
}

#[tokio::test]
async fn tools_outside_the_teams_globs_are_refused_where_declared_and_where_called() {
    let upstream = Upstream::json(200, r#"{"ok":true}"#).await;
    let proxy = start(&upstream, &two_teams("tools = [\"get_report\", \"refund_*\"]")).await;
    let pay = bearer(PAY_KEY);
    let body = json!({
        "model": "gpt-5",
        "tools": [
            {"type": "function", "name": "refund_card", "parameters": {"type": "object"}},
            {"type": "function", "name": "delete_account", "parameters": {"type": "object"}}
        ],
        "input": [call("c1", "refund_card", "{}"), output("c1"), call("c2", "wire_money", "{}")]
    })
    .to_string();
    let (status, _, answer) = post(&proxy, "/v1/responses", &[("authorization", &pay)], &body).await;
    assert_eq!(status, 422);
    let error = &answer["error"];
    assert_eq!(error["code"], "tool_not_allowed");
    assert_eq!(error["param"], "tools[1]");
    let violations = error["violations"].as_array().unwrap();
    assert_eq!(violations.len(), 2);
    assert_eq!(violations[0]["index"], Value::Null);
    assert_eq!(
        (violations[1]["index"].as_u64(), violations[1]["param"].as_str()),
        (Some(2), Some("input[2].name"))
    );
    assert!(upstream.received().is_empty());
    // The team without tool globs sends the same body.
    let search = bearer(SEARCH_KEY);
    let (status, _, _) = post(&proxy, "/v1/responses", &[("authorization", &search)], &body).await;
    assert_eq!(status, 200);
}

pub const PINNED: &str = r#"[{"type":"function","name":"get_report","parameters":{"type":"object","required":["region"],"additionalProperties":false,"properties":{"region":{"enum":["apac","emea"]}}}}]"#;

#[tokio::test]
async fn pinned_schemas_catch_drift_and_validate_calls_the_request_does_not_declare() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tools.json"), PINNED).unwrap();
    let upstream = Upstream::json(200, r#"{"ok":true}"#).await;
    let text = config(&upstream, &two_teams("pinned_tools = \"tools.json\""));
    let path = dir.path().join("proxy.toml");
    std::fs::write(&path, &text).unwrap();
    let loaded = replaygate::config::Config::load(&path).unwrap();
    let proxy = Proxy::start_with(&loaded, &[("UP_KEY", UPSTREAM_KEY)]).await;
    let pay = bearer(PAY_KEY);
    let key = [("authorization", pay.as_str())];

    let drifted = json!({"model": "gpt-5", "tools": [{"type": "function", "name": "get_report", "parameters": {"type": "object"}}], "input": "hi"});
    let (status, _, answer) = post(&proxy, "/v1/responses", &key, &drifted.to_string()).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (422, Some("tool_schema_drift")),
        "{answer}"
    );
    assert_eq!(answer["error"]["param"], "tools[0]");

    let misfit =
        json!({"model": "gpt-5", "input": [call("c1", "get_report", r#"{"region":"mars"}"#), output("c1")]});
    let (status, _, answer) = post(&proxy, "/v1/responses", &key, &misfit.to_string()).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (422, Some("arguments_schema")),
        "{answer}"
    );

    let fits =
        json!({"model": "gpt-5", "input": [call("c1", "get_report", r#"{"region":"apac"}"#), output("c1")]});
    let (status, head, _) = post(&proxy, "/v1/responses", &key, &fits.to_string()).await;
    assert_eq!(status, 200);
    assert!(
        !head.contains_key("x-replaygate-monitored"),
        "no unknown_tool for a pinned tool"
    );
    // The team without pins: the undeclared tool is an unknown tool, monitored.
    let search = bearer(SEARCH_KEY);
    let (status, head, _) = post(
        &proxy,
        "/v1/responses",
        &[("authorization", &search)],
        &misfit.to_string(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(head["x-replaygate-monitored"], "unknown_tool@input[0]");
}

#[tokio::test]
async fn strip_cuts_the_items_out_of_the_original_bytes() {
    let upstream = Upstream::json(200, r#"{"ok":true}"#).await;
    let proxy = start(
        &upstream,
        &two_teams("rules = { namespaced = \"strip\", arguments_parse = \"strip\" }"),
    )
    .await;
    let pay = bearer(PAY_KEY);
    // Odd spacing, a namespaced item the provider may not take, and a call whose arguments are
    // broken, with its output.
    let body = concat!(
        "{\"model\": \"openai.gpt-oss-120b\",\n  \"input\": [\n",
        "    {\"role\": \"user\", \"content\": \"find it\"},\n",
        "    {\"type\": \"openai:web_search_call\", \"id\": \"ws_1\", \"status\": \"completed\"},\n",
        "    {\"type\": \"function_call\", \"call_id\": \"c1\", \"name\": \"f\", \"arguments\": \"{oops\"} ,\n",
        "    {\"type\": \"function_call_output\", \"call_id\": \"c1\", \"output\": \"x\"},\n",
        "    {\"role\": \"user\", \"content\": \"and then?\"}\n",
        "  ],\n  \"store\": false}"
    );
    let expected = concat!(
        "{\"model\": \"openai.gpt-oss-120b\",\n  \"input\": [\n",
        "    {\"role\": \"user\", \"content\": \"find it\"},\n",
        "    {\"role\": \"user\", \"content\": \"and then?\"}\n",
        "  ],\n  \"store\": false}"
    );
    let (status, head, _) = post(&proxy, "/v1/responses", &[("authorization", &pay)], body).await;
    assert_eq!(status, 200);
    assert_eq!(head["x-replaygate-stripped"], "input[1],input[2],input[3]");
    let received = upstream.received();
    assert!(
        received[0].target.ends_with("/bedrock/responses"),
        "{}",
        received[0].target
    );
    assert_eq!(std::str::from_utf8(&received[0].body).unwrap(), expected);
    // Another team, the global actions: refused.
    let search = bearer(SEARCH_KEY);
    let (status, _, answer) = post(&proxy, "/v1/responses", &[("authorization", &search)], body).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (422, Some("namespaced"))
    );
}

#[tokio::test]
async fn strip_on_a_tool_reason_acts_as_reject_and_monitor_mode_forwards_everything() {
    let upstream = Upstream::json(200, r#"{"ok":true}"#).await;
    let teams = format!(
        "{}\n[teams.shadow]\nkeys = [\"{}\"]\nmode = \"monitor\"\ntools = [\"get_*\"]\nrules = {{ namespaced = \"strip\" }}\n",
        two_teams("tools = [\"get_*\"]\nrules = { tool_not_allowed = \"strip\" }"),
        key_entry("rg-shadow")
    );
    let proxy = start(&upstream, &teams).await;
    let body =
        json!({"model": "gpt-5", "input": [call("c1", "wire_money", "{}"), {"type": "openai:x", "id": "x"}]})
            .to_string();
    let pay = bearer(PAY_KEY);
    let (status, _, answer) = post(&proxy, "/bedrock/v1/responses", &[("authorization", &pay)], &body).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (422, Some("tool_not_allowed"))
    );
    let (status, head, _) = post(
        &proxy,
        "/bedrock/v1/responses",
        &[("authorization", "Bearer rg-shadow")],
        &body,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        head["x-replaygate-monitored"],
        "tool_not_allowed@input[0],namespaced@input[1]"
    );
    assert_eq!(
        upstream.received()[0].body,
        body.as_bytes(),
        "forwarded byte for byte"
    );
}

#[tokio::test]
async fn a_team_over_its_rate_gets_429_with_retry_after_and_others_do_not() {
    let upstream = Upstream::json(200, r#"{"ok":true}"#).await;
    let proxy = start(
        &upstream,
        &two_teams("requests_per_minute = 4\nmodels = [\"gpt-5*\"]\nproviders = [\"openai\"]"),
    )
    .await;
    let pay = bearer(PAY_KEY);
    let key = [("authorization", pay.as_str())];
    // Refused requests count as well, whatever refused them: the model, the path's provider,
    // an unknown prefix.
    let (status, _, _) = post(&proxy, "/v1/responses", &key, r#"{"model":"gpt-4o","input":"x"}"#).await;
    assert_eq!(status, 403);
    let (status, _, _) = post(&proxy, "/bedrock/v1/responses", &key, HELLO).await;
    assert_eq!(status, 403);
    let (status, _, _) = post(&proxy, "/nosuch/v1/responses", &key, HELLO).await;
    assert_eq!(status, 404);
    let (status, _, _) = post(&proxy, "/v1/responses", &key, HELLO).await;
    assert_eq!(status, 200);
    let (status, head, answer) = post(&proxy, "/v1/responses", &key, HELLO).await;
    assert_eq!(status, 429);
    assert_eq!(answer["error"]["code"], "rate_limit_exceeded");
    assert_eq!(answer["error"]["type"], "rate_limit_error");
    assert_eq!(
        head["x-should-retry"], "true",
        "the SDKs retry a 429 after retry-after"
    );
    let retry: u64 = head["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=30).contains(&retry), "{retry}");
    let search = bearer(SEARCH_KEY);
    let (status, _, _) = post(&proxy, "/v1/responses", &[("authorization", &search)], HELLO).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn the_audit_log_has_one_line_per_judged_request_and_no_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::json(200, r#"{"ok":true}"#).await;
    let audit = dir.path().join("audit.jsonl");
    let teams = format!(
        "[audit]\npath = \"{}\"\n{}",
        audit.display(),
        two_teams("rules = { namespaced = \"strip\" }")
    );
    let proxy = start(&upstream, &teams).await;
    let pay = bearer(PAY_KEY);
    let search = bearer(SEARCH_KEY);
    let secret_prompt = "my card number is 4111";
    let bodies = [
        (
            pay.as_str(),
            json!({"model": "gpt-5", "input": [{"role": "user", "content": secret_prompt}]}),
        ),
        (
            pay.as_str(),
            json!({"model": "gpt-5", "input": [{"type": "openai:x", "id": "x"}, call("c1", "f", r#"{"pin":"9876"}"#)]}),
        ),
        (
            search.as_str(),
            json!({"model": "gpt-5", "input": [{"type": "mantle:x", "id": "x"}]}),
        ),
    ];
    let mut sent = Vec::new();
    for (key, body) in &bodies {
        let body = body.to_string();
        post(&proxy, "/bedrock/v1/responses", &[("authorization", key)], &body).await;
        sent.push(body);
    }
    // An ungated request is not judged, so not audited.
    post(&proxy, "/v1/models", &[("authorization", &pay)], "").await;
    proxy.shutdown().await;
    let text = std::fs::read_to_string(&audit).unwrap();
    // The lines of judged requests; each forwarded one is followed by its answer's usage line
    // (docs/usage.md#the-audit-log).
    let (usage, lines): (Vec<Value>, Vec<Value>) = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .partition(|line| line["kind"] == "usage");
    assert_eq!(usage.len(), 2, "{text}");
    assert_eq!(lines.len(), 3, "{text}");
    let decisions: Vec<&str> = lines.iter().map(|l| l["decision"].as_str().unwrap()).collect();
    assert_eq!(decisions, ["allowed", "stripped", "rejected"]);
    assert_eq!(lines[0]["team"], "payments");
    assert_eq!(lines[2]["team"], "search");
    // Keys without an id go by the first 8 hex digits of their digest.
    assert_eq!(lines[0]["key_id"], digest(PAY_KEY)[..8]);
    assert_eq!(lines[2]["key_id"], digest(SEARCH_KEY)[..8]);
    assert_eq!(lines[1]["provider"], "bedrock");
    assert_eq!(lines[1]["model"], "gpt-5");
    assert_eq!(
        lines[1]["violations"],
        json!([
            {"index": 0, "reason": "namespaced", "action": "strip", "param": "input[0].type"},
            {"index": 1, "reason": "unknown_tool", "action": "monitor", "param": "input[1].name"}
        ])
    );
    for (line, body) in lines.iter().zip(&sent) {
        assert_eq!(line["body_sha256"], digest(body));
        assert!(line["request_id"].as_str().is_some_and(|id| !id.is_empty()));
        assert!(line["ts"].as_str().is_some());
    }
    for secret in [secret_prompt, "9876", PAY_KEY, SEARCH_KEY, UPSTREAM_KEY] {
        assert!(!text.contains(secret), "the audit log holds {secret}");
    }
}

/// A key whose `expires` has passed gets 401 `expired_api_key` and reaches nothing; one that
/// expires later passes, and the audit line names it by its id, never by the key. (The access
/// line's `key_id` is tested in `tests/access_log.rs`, which owns the process's log.)
#[tokio::test]
async fn an_expired_key_gets_401_expired_api_key_and_one_expiring_later_passes() {
    const FRESH_KEY: &str = "rg-fresh-test-key";
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let teams = format!(
        r#"[audit]
path = "{}"
[teams.payments]
keys = [
  {{ id = "ci-2019", digest = "{}", expires = "2020-01-01T00:00:00Z" }},
  {{ id = "ci-2099", digest = "{}", expires = 2099-01-01T00:00:00+01:00 }},
]
"#,
        audit.display(),
        key_entry(PAY_KEY),
        key_entry(FRESH_KEY)
    );
    let upstream = Upstream::json(200, r#"{"ok":true}"#).await;
    let proxy = start(&upstream, &teams).await;
    let expired = bearer(PAY_KEY);
    let expired_id = [("authorization", expired.as_str()), ("x-request-id", "expired-1")];
    for path in ["/v1/responses", "/v1/models"] {
        let (status, head, answer) = post(&proxy, path, &expired_id, HELLO).await;
        assert_eq!(status, 401, "{path}: {answer}");
        assert_eq!(answer["error"]["code"], "expired_api_key");
        assert_eq!(answer["error"]["type"], "invalid_request_error");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("expired") && message.contains("new one"),
            "{message}"
        );
        assert!(!message.contains(PAY_KEY), "{message}");
        assert_eq!(head["x-should-retry"], "false");
    }
    assert!(upstream.received().is_empty(), "nothing reached the provider");

    let fresh = bearer(FRESH_KEY);
    let fresh_id = [("authorization", fresh.as_str()), ("x-request-id", "fresh-1")];
    let (status, _, answer) = post(&proxy, "/v1/responses", &fresh_id, HELLO).await;
    assert_eq!(status, 200, "{answer}");
    proxy.shutdown().await;

    let audited = std::fs::read_to_string(&audit).unwrap();
    let lines: Vec<Value> = audited
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|line| line["kind"] != "usage")
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "only the fresh key's request was judged: {audited}"
    );
    assert_eq!(
        (&lines[0]["team"], &lines[0]["key_id"]),
        (&json!("payments"), &json!("ci-2099"))
    );

    for key in [PAY_KEY, FRESH_KEY] {
        assert!(!audited.contains(key), "the audit log holds {key}");
    }
}

/// `[state]` on Redis at a port nothing listens on, `[ledger]` as `ledger`, and two teams, the
/// first with a rate limit.
fn redis_down(upstream: &Upstream, ledger: &str) -> String {
    let closed = crate::support::closed_port::closed_port();
    config(
        upstream,
        &format!(
            "[state]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:{closed}\"\n[ledger]\n{ledger}\n{}",
            two_teams("requests_per_minute = 600")
        ),
    )
}

/// `replaygate_rate_limit_unavailable_total` on the proxy's admin listener.
async fn uncounted(proxy: &mut Proxy) -> u64 {
    let admin = proxy.admin().await;
    let text = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        reqwest::get(format!("http://{admin}/metrics")),
    )
    .await
    .expect("the metrics in time")
    .unwrap()
    .text()
    .await
    .unwrap();
    let line = text
        .lines()
        .find(|line| line.starts_with("replaygate_rate_limit_unavailable_total "))
        .unwrap_or_else(|| panic!("no rate_limit_unavailable counter in {text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_rate_limit_the_state_backend_cannot_count_refuses_by_default() {
    let upstream = Upstream::json(200, r#"{"ok":true}"#).await;
    let mut proxy = Proxy::start(&redis_down(&upstream, ""), &[("UP_KEY", UPSTREAM_KEY)]).await;
    let pay = bearer(PAY_KEY);
    for _ in 0..2 {
        let (status, head, answer) = post(&proxy, "/v1/responses", &[("authorization", &pay)], HELLO).await;
        assert_eq!(status, 503, "{answer}");
        assert_eq!(answer["error"]["code"], "ledger_unavailable");
        assert_eq!(answer["error"]["type"], "server_error");
        assert_eq!(head["x-should-retry"], "true");
    }
    assert!(upstream.received().is_empty(), "nothing reached the provider");
    assert_eq!(uncounted(&mut proxy).await, 2);
    // A team without a rate limit needs no count.
    let search = bearer(SEARCH_KEY);
    let (status, _, answer) = post(&proxy, "/v1/responses", &[("authorization", &search)], HELLO).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(uncounted(&mut proxy).await, 2);
}

#[tokio::test]
async fn a_rate_limit_the_state_backend_cannot_count_lets_requests_through_when_allowed() {
    let upstream = Upstream::json(200, r#"{"ok":true}"#).await;
    let config = redis_down(&upstream, "on_unavailable = \"allow\"");
    let mut proxy = Proxy::start(&config, &[("UP_KEY", UPSTREAM_KEY)]).await;
    let pay = bearer(PAY_KEY);
    for _ in 0..2 {
        let (status, _, answer) = post(&proxy, "/v1/responses", &[("authorization", &pay)], HELLO).await;
        assert_eq!(status, 200, "{answer}");
    }
    assert_eq!(upstream.received().len(), 2);
    assert_eq!(uncounted(&mut proxy).await, 2);
}
