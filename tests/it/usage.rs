//! Usage end to end (docs/usage.md): what a fake provider reports in its answers' `usage` is
//! what the proxy counts, by team, provider and model, whatever the transport (JSON, events,
//! `/responses/compact`, WebSocket) and whether the ledger is on; answers that end without
//! usage, or with bad usage, are counted missing; the audit log has each answer's line.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use crate::support::proxy::Proxy;
use crate::support::upstream::{json_response, Received, UpBody, Upstream};
use crate::websocket::fake_provider::{turn_usage, Behaviour, FakeProvider};

const LIMIT: Duration = Duration::from_secs(10);
const PAY_KEY: &str = "rg-usage-payments-key-0001";

/// The usage every answer of the fake provider reports (cached and reasoning included).
const USAGE: &str = r#"{"input_tokens":1200,"input_tokens_details":{"cached_tokens":1000},"output_tokens":300,"output_tokens_details":{"reasoning_tokens":250},"total_tokens":1500}"#;

/// A response object with `usage` (its JSON text).
fn response(usage: &str) -> String {
    format!(
        r#"{{"id":"resp_u1","object":"response","model":"gpt-5-2025","status":"completed","output":[{{"type":"message","id":"msg_1","role":"assistant","content":[{{"type":"output_text","text":"hi"}}]}}],"usage":{usage}}}"#
    )
}

/// The events of one streamed answer carrying `usage` in its `response.completed`.
fn events(usage: &str) -> String {
    let created = r#"{"type":"response.created","response":{"id":"resp_u1","model":"gpt-5-2025","status":"in_progress","output":[]}}"#;
    let delta = r#"{"type":"response.output_text.delta","output_index":0,"delta":"hi"}"#;
    let completed = format!(
        r#"{{"type":"response.completed","response":{}}}"#,
        response(usage)
    );
    [
        ("response.created", created),
        ("response.output_text.delta", delta),
        ("response.completed", &completed),
    ]
    .iter()
    .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
    .collect()
}

fn sse(body: String) -> http::Response<UpBody> {
    let mut response = http::Response::new(Full::new(Bytes::from(body)).boxed_unsync());
    response
        .headers_mut()
        .insert("content-type", "text/event-stream".parse().unwrap());
    response
}

/// A provider whose every answer reports `usage`: a compact resource to
/// `/responses/compact`, events to a request that asks for a stream, JSON otherwise.
async fn provider(usage: &'static str) -> Upstream {
    Upstream::start(move |received: Received| async move {
        if received.target.ends_with("/responses/compact") {
            let compact = format!(
                r#"{{"id":"cmp_1","object":"response.compaction","created_at":1,"output":[{{"type":"compaction","encrypted_content":"e"}}],"usage":{usage}}}"#
            );
            return json_response(200, compact);
        }
        if String::from_utf8_lossy(&received.body).contains(r#""stream":true"#) {
            return sse(events(usage));
        }
        json_response(200, response(usage))
    })
    .await
}

fn config(base_url: &str, ledger: bool, teams: &str) -> String {
    format!(
        "default_provider = \"openai\"\n[state]\nbackend = \"memory\"\n[ledger]\nenabled = {ledger}\n\
         [providers.openai]\nbase_url = \"{base_url}\"\nauth = \"none\"\n{teams}\n"
    )
}

/// The team `payments`, whose one key has the id `ci-usage`.
fn payments() -> String {
    let digest = replaygate::keys::format_digest(&replaygate::keys::digest(PAY_KEY));
    format!("[teams.payments]\nkeys = [{{ id = \"ci-usage\", digest = \"{digest}\" }}]\n")
}

/// POSTs `body` to `path` (with the team's key when `team`), reading the whole answer.
async fn post(proxy: &Proxy, path: &str, body: &str, team: bool) -> (u16, String) {
    let mut request = reqwest::Client::new()
        .post(proxy.url(path))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if team {
        request = request.header("authorization", format!("Bearer {PAY_KEY}"));
    }
    let response = tokio::time::timeout(LIMIT, request.send())
        .await
        .unwrap()
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// The metrics text of the proxy's admin listener.
async fn metrics(admin: SocketAddr) -> String {
    reqwest::get(format!("http://{admin}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The value of `series` in `text` (0 when absent).
fn value(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{series} ")))
        .map_or(0, |value| value.trim().parse().unwrap())
}

fn tokens(team: &str, model: &str, kind: &str) -> String {
    format!(
        r#"replaygate_usage_tokens_total{{team="{team}",provider="openai",model="{model}",kind="{kind}"}}"#
    )
}

fn answers(team: &str, model: &str, usage: &str) -> String {
    format!(
        r#"replaygate_usage_answers_total{{team="{team}",provider="openai",model="{model}",usage="{usage}"}}"#
    )
}

/// Waits until the metrics have `series` at `expected` (usage is delivered as an answer ends,
/// which may be just after the client read it), and returns the metrics text.
async fn until(admin: SocketAddr, series: &str, expected: u64) -> String {
    let started = std::time::Instant::now();
    loop {
        let text = metrics(admin).await;
        if value(&text, series) == expected {
            return text;
        }
        assert!(started.elapsed() < LIMIT, "{series} is not {expected}:\n{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Asserts `answers` reported answers of `team` and `model` counted `answers` times the
/// provider's usage.
fn assert_counted(text: &str, team: &str, model: &str, answered: u64) {
    for (kind, each) in [
        ("input", 1200),
        ("output", 300),
        ("cached_input", 1000),
        ("reasoning_output", 250),
    ] {
        assert_eq!(
            value(text, &tokens(team, model, kind)),
            each * answered,
            "{kind}:\n{text}"
        );
    }
    assert_eq!(value(text, &answers(team, model, "reported")), answered, "{text}");
}

/// JSON, events and `/responses/compact`, with the ledger on and off, without teams and with
/// one: each answer counts exactly what the provider reported, under the answer's model (the
/// request's when the answer names none, as a compact resource does).
#[tokio::test]
async fn every_kind_of_answer_counts_what_the_provider_reported() {
    for (ledger, team) in [(false, false), (true, false), (false, true), (true, true)] {
        let upstream = provider(USAGE).await;
        let teams = if team { payments() } else { String::new() };
        let mut proxy = Proxy::start(&config(&upstream.base_url(), ledger, &teams), &[]).await;
        let admin = proxy.admin().await;
        let label = if team { "payments" } else { "-" };
        for body in [
            r#"{"model":"gpt-5","input":"hi"}"#,
            r#"{"model":"gpt-5","input":"hi","stream":true}"#,
            // With tools, the ledger reads a JSON answer whole before it goes out.
            r#"{"model":"gpt-5","input":"hi","tools":[{"type":"function","name":"f","parameters":{"type":"object"}}]}"#,
        ] {
            let (status, answer) = post(&proxy, "/v1/responses", body, team).await;
            assert_eq!(status, 200, "{answer}");
        }
        let (status, answer) = post(
            &proxy,
            "/v1/responses/compact",
            r#"{"model":"gpt-5-mini","input":"hi"}"#,
            team,
        )
        .await;
        assert_eq!(status, 200, "{answer}");
        let text = until(admin, &answers(label, "gpt-5-2025", "reported"), 3).await;
        assert_counted(&text, label, "gpt-5-2025", 3);
        let text = until(admin, &answers(label, "gpt-5-mini", "reported"), 1).await;
        assert_counted(&text, label, "gpt-5-mini", 1);
        assert!(
            !text.contains(r#"usage="missing""#),
            "ledger {ledger}, team {team}:\n{text}"
        );
    }
}

/// Bad usage (negative, a string, over 2^53, a part over its whole, `output_tokens` absent)
/// counts the answer missing and adds no token.
#[tokio::test]
async fn bad_usage_counts_the_answer_missing() {
    for usage in [
        r#"{"input_tokens":-5,"output_tokens":3}"#,
        r#"{"input_tokens":"5","output_tokens":3}"#,
        r#"{"input_tokens":9007199254740993,"output_tokens":3}"#,
        r#"{"input_tokens":5,"input_tokens_details":{"cached_tokens":6},"output_tokens":3}"#,
        r#"{"input_tokens":5}"#,
    ] {
        let upstream = provider(usage).await;
        let mut proxy = Proxy::start(&config(&upstream.base_url(), true, ""), &[]).await;
        let admin = proxy.admin().await;
        for body in [
            r#"{"model":"gpt-5","input":"hi"}"#,
            r#"{"model":"gpt-5","input":"hi","stream":true}"#,
        ] {
            assert_eq!(post(&proxy, "/v1/responses", body, false).await.0, 200);
        }
        let text = until(admin, &answers("-", "gpt-5-2025", "missing"), 2).await;
        assert!(
            !text.contains("replaygate_usage_tokens_total{"),
            "{usage}:\n{text}"
        );
    }
}

/// With `[prices]` configured, a reported answer whose model no table prices is counted
/// `unpriced`: its tokens count, it has no cost.
#[tokio::test]
async fn an_answer_whose_model_has_no_price_is_counted_unpriced() {
    let upstream = provider(USAGE).await;
    let prices = "[prices.\"o3\"]\ninput_per_million = 2.0\noutput_per_million = 8.0\n";
    let mut proxy = Proxy::start(&config(&upstream.base_url(), false, prices), &[]).await;
    let admin = proxy.admin().await;
    let body = r#"{"model":"gpt-5","input":"hi"}"#;
    assert_eq!(post(&proxy, "/v1/responses", body, false).await.0, 200);
    let text = until(admin, &answers("-", "gpt-5-2025", "unpriced"), 1).await;
    assert_eq!(value(&text, &answers("-", "gpt-5-2025", "reported")), 0, "{text}");
    assert_eq!(value(&text, &tokens("-", "gpt-5-2025", "input")), 1200, "{text}");
}

/// A stream cut before its terminal event, one whose client goes away, and an upstream error
/// are counted missing, under the model known by then.
#[tokio::test]
async fn answers_that_end_without_usage_are_counted_missing() {
    for ledger in [false, true] {
        let (upstream, mut feeds) = Upstream::sse_feed().await;
        let mut proxy = Proxy::start(&config(&upstream.base_url(), ledger, ""), &[]).await;
        let admin = proxy.admin().await;
        let created = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_c\",\"model\":\"gpt-5-2025\",\"status\":\"in_progress\",\"output\":[]}}\n\n";

        // The provider ends the stream before `response.completed`.
        let client = tokio::spawn({
            let url = proxy.url("/v1/responses");
            async move {
                let answer = reqwest::Client::new()
                    .post(url)
                    .header("content-type", "application/json")
                    .body(r#"{"model":"gpt-5","input":"hi","stream":true}"#)
                    .send()
                    .await
                    .unwrap();
                answer.text().await.unwrap()
            }
        });
        let feed = tokio::time::timeout(LIMIT, feeds.recv()).await.unwrap().unwrap();
        feed.send(Bytes::from(created)).await.unwrap();
        drop(feed);
        let text = tokio::time::timeout(LIMIT, client).await.unwrap().unwrap();
        assert!(text.contains("response.created"));
        until(admin, &answers("-", "gpt-5-2025", "missing"), 1).await;

        // The client goes away mid-answer.
        let answer = reqwest::Client::new()
            .post(proxy.url("/v1/responses"))
            .header("content-type", "application/json")
            .body(r#"{"model":"gpt-5","input":"hi","stream":true}"#)
            .send();
        let feed_task = tokio::spawn(async move {
            let feed = tokio::time::timeout(LIMIT, feeds.recv()).await.unwrap().unwrap();
            feed.send(Bytes::from(created)).await.unwrap();
            (feed, feeds)
        });
        let mut answer = tokio::time::timeout(LIMIT, answer).await.unwrap().unwrap();
        let first = tokio::time::timeout(LIMIT, answer.chunk())
            .await
            .unwrap()
            .unwrap();
        assert!(first.is_some());
        drop(answer);
        let (_feed, _feeds) = feed_task.await.unwrap();
        until(admin, &answers("-", "gpt-5-2025", "missing"), 2).await;
        drop(upstream);

        // An upstream error status: the request's model stands in.
        let failing = Upstream::json(500, r#"{"error":{"message":"boom"}}"#).await;
        let proxy = Proxy::start(&config(&failing.base_url(), ledger, ""), &[]).await;
        let mut proxy = proxy;
        let admin = proxy.admin().await;
        assert_eq!(
            post(
                &proxy,
                "/v1/responses",
                r#"{"model":"gpt-5","input":"hi"}"#,
                false
            )
            .await
            .0,
            500
        );
        until(admin, &answers("-", "gpt-5", "missing"), 1).await;
    }
}

/// The audit log has one `usage` line per answer, after the request's own line: the four
/// counts, or `null` when the answer had none.
#[tokio::test]
async fn the_audit_log_has_each_answers_usage() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let upstream = provider(USAGE).await;
    let extra = format!("{}\n[audit]\npath = \"{}\"\n", payments(), audit.display());
    let mut proxy = Proxy::start(&config(&upstream.base_url(), false, &extra), &[]).await;
    let admin = proxy.admin().await;
    assert_eq!(
        post(
            &proxy,
            "/v1/responses",
            r#"{"model":"gpt-5","input":"hi","stream":true}"#,
            true
        )
        .await
        .0,
        200
    );
    until(admin, &answers("payments", "gpt-5-2025", "reported"), 1).await;
    let started = std::time::Instant::now();
    let lines = loop {
        let text = std::fs::read_to_string(&audit).unwrap_or_default();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        if lines.len() >= 2 {
            break lines;
        }
        assert!(started.elapsed() < LIMIT, "{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(lines[0]["decision"], "allowed");
    let usage = &lines[1];
    assert_eq!(usage["kind"], "usage");
    assert_eq!(usage["request_id"], lines[0]["request_id"]);
    assert_eq!(
        (&usage["team"], &usage["key_id"]),
        (&"payments".into(), &"ci-usage".into())
    );
    assert_eq!(
        (&usage["provider"], &usage["model"]),
        (&"openai".into(), &"gpt-5-2025".into())
    );
    assert_eq!(usage["usage"], "reported");
    for (field, count) in [
        ("input_tokens", 1200),
        ("output_tokens", 300),
        ("cached_input_tokens", 1000),
        ("reasoning_output_tokens", 250),
    ] {
        assert_eq!(usage[field], count, "{field}");
    }
}

/// Opens a client socket on `/v1/responses`.
async fn connect(proxy: &Proxy) -> tokio_tungstenite::WebSocketStream<tokio::net::TcpStream> {
    let request = format!("ws://{}/v1/responses", proxy.addr)
        .into_client_request()
        .unwrap();
    let stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let (socket, _) = tokio::time::timeout(LIMIT, tokio_tungstenite::client_async(request, stream))
        .await
        .unwrap()
        .unwrap();
    socket
}

const CREATE: &str = r#"{"type":"response.create","model":"gpt-5","input":[{"role":"user","content":"hi"}]}"#;

/// A WebSocket's turns each count what their `response.completed` reported; a turn whose
/// socket closes mid-answer is counted missing.
#[tokio::test]
async fn websocket_turns_count_their_usage_and_a_socket_closed_mid_answer_is_missing() {
    for ledger in [false, true] {
        let provider = FakeProvider::start(Behaviour::Usage).await;
        let mut proxy = Proxy::start(&config(&provider.base_url(), ledger, ""), &[]).await;
        let admin = proxy.admin().await;
        let mut client = connect(&proxy).await;
        for _ in 0..2 {
            client.send(Message::text(CREATE)).await.unwrap();
            for _ in 0..3 {
                tokio::time::timeout(LIMIT, client.next())
                    .await
                    .unwrap()
                    .unwrap()
                    .unwrap();
            }
        }
        let text = until(admin, &answers("-", "gpt-5", "reported"), 2).await;
        let [input, cached, output, reasoning] =
            [0, 1, 2, 3].map(|i| (turn_usage(1)[i] + turn_usage(2)[i]) as u64);
        for (kind, sum) in [
            ("input", input),
            ("cached_input", cached),
            ("output", output),
            ("reasoning_output", reasoning),
        ] {
            assert_eq!(value(&text, &tokens("-", "gpt-5", kind)), sum, "{kind}");
        }
        client.close(None).await.unwrap();

        let stalling = FakeProvider::start(Behaviour::Stall).await;
        let mut proxy = Proxy::start(&config(&stalling.base_url(), ledger, ""), &[]).await;
        let admin = proxy.admin().await;
        let mut client = connect(&proxy).await;
        client.send(Message::text(CREATE)).await.unwrap();
        tokio::time::timeout(LIMIT, client.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        client.close(None).await.unwrap();
        until(admin, &answers("-", "gpt-5", "missing"), 1).await;
    }
}

/// `GET /usage` on the admin listener: a team with a tokens budget and its key with one of its
/// own, two answers (one reporting usage, one whose usage is bad: missing), `[prices]` pricing
/// the answer's model. Both entries hold the tokens by kind, the answers, the missing one, the
/// cost and the budget, with what is left of it.
#[tokio::test]
async fn get_usage_reports_each_budgets_window_tokens_cost_and_whats_left() {
    let upstream = Upstream::start(|received: Received| async move {
        if String::from_utf8_lossy(&received.body).contains("no-usage") {
            return json_response(200, response(r#"{"input_tokens":5}"#));
        }
        json_response(200, response(USAGE))
    })
    .await;
    let digest = replaygate::keys::format_digest(&replaygate::keys::digest(PAY_KEY));
    let teams = format!(
        "[teams.payments]\nbudget = {{ tokens = 2000000, window = \"day\" }}\n\
         keys = [{{ id = \"ci-usage\", digest = \"{digest}\", budget = {{ tokens = 200000, window = \"week\" }} }}]\n\
         [prices.\"gpt-5*\"]\ninput_per_million = 1.25\ncached_input_per_million = 0.125\noutput_per_million = 10.0\n"
    );
    let mut proxy = Proxy::start(&config(&upstream.base_url(), false, &teams), &[]).await;
    let admin = proxy.admin().await;
    for body in [
        r#"{"model":"gpt-5","input":"hi"}"#,
        r#"{"model":"gpt-5","input":"no-usage"}"#,
    ] {
        let (status, answer) = post(&proxy, "/v1/responses", body, true).await;
        assert_eq!(status, 200, "{answer}");
    }
    // The tallies may land just after the client read the answers.
    let started = std::time::Instant::now();
    let report = loop {
        let response = reqwest::get(format!("http://{admin}/usage")).await.unwrap();
        assert_eq!(response.status().as_u16(), 200);
        assert_eq!(response.headers()["content-type"], "application/json");
        let report: serde_json::Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
        let counted = |entries: &str| report[entries][0]["answers"] == 2;
        if counted("teams") && counted("keys") {
            break report;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "{report:#}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let tokens =
        serde_json::json!({"input": 1200, "output": 300, "cached_input": 1000, "reasoning_output": 250});
    for (entries, window, limit) in [("teams", "day", 2_000_000), ("keys", "week", 200_000)] {
        let list = report[entries].as_array().unwrap();
        assert_eq!(list.len(), 1, "{report:#}");
        let entry = &list[0];
        assert_eq!(entry["team"], "payments", "{report:#}");
        assert_eq!(entry["window"]["name"], window, "{report:#}");
        let (start, end) = (
            entry["window"]["start"].as_str().unwrap(),
            entry["window"]["end"].as_str().unwrap(),
        );
        assert!(start.ends_with("T00:00:00Z") && end.ends_with("T00:00:00Z") && start < end);
        assert_eq!(entry["tokens"], tokens, "{report:#}");
        assert_eq!(entry["answers"], 2, "{report:#}");
        assert_eq!(entry["missing_usage"], 1, "{report:#}");
        // 200 uncached input at 1.25, 1000 cached at 0.125, 300 output at 10: 3375 µ$.
        assert_eq!(entry["cost_usd"], 0.003375, "{report:#}");
        assert_eq!(
            entry["budget"],
            serde_json::json!({ "tokens": limit }),
            "{report:#}"
        );
        // What the budget's counter holds (reservations in flight included) and what is left.
        let (spent, left) = (entry["spent"].as_u64().unwrap(), entry["left"].as_u64().unwrap());
        assert_eq!(spent + left, limit, "{report:#}");
    }
    assert_eq!(report["keys"][0]["key_id"], "ci-usage", "{report:#}");
    // The budget gauges hold what the report read.
    let text = metrics(admin).await;
    assert!(
        text.contains(r#"replaygate_budget_limit{owner="team:payments",unit="tokens",window="day"} 2000000"#),
        "{text}"
    );
    assert!(
        text.contains(r#"replaygate_budget_spent{owner="key:ci-usage",unit="tokens",window="week"} "#),
        "{text}"
    );
}

/// Without teams, one entry for the anonymous answers, in the day; without `[prices]`, no cost;
/// without a budget, none of its fields.
#[tokio::test]
async fn get_usage_without_teams_has_one_anonymous_entry() {
    let upstream = provider(USAGE).await;
    let mut proxy = Proxy::start(&config(&upstream.base_url(), false, ""), &[]).await;
    let admin = proxy.admin().await;
    assert_eq!(
        post(
            &proxy,
            "/v1/responses",
            r#"{"model":"gpt-5","input":"hi"}"#,
            false
        )
        .await
        .0,
        200
    );
    let started = std::time::Instant::now();
    loop {
        let response = reqwest::get(format!("http://{admin}/usage")).await.unwrap();
        let report: serde_json::Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
        if report["teams"][0]["answers"] == 1 {
            let team = &report["teams"][0];
            assert_eq!(report["teams"].as_array().unwrap().len(), 1);
            assert_eq!(team["team"], "-");
            assert_eq!(team["window"]["name"], "day");
            assert_eq!(team["tokens"]["input"], 1200);
            for field in ["cost_usd", "budget", "spent", "left"] {
                assert!(team[field].is_null(), "{field}: {report:#}");
            }
            assert_eq!(report["keys"], serde_json::json!([]));
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "{report:#}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
