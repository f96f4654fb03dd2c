//! Budgets end to end (docs/budgets.md): a team's requests reserve their estimate before they
//! are forwarded and settle it with their answer's usage, on every state backend. Two hundred
//! requests at once against a budget that fits fifty forward exactly fifty, on three replicas
//! sharing one Redis and on the embedded store; a window ends on a clock the test steps; the
//! embedded store's counts survive a restart; a cut answer keeps its reservation; monitor
//! names the passed budget; a store that cannot count refuses only the teams with budgets.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use http_body_util::{BodyExt, Full};

use crate::support::proxy::Proxy;
use crate::support::redis_ha::query;
use crate::support::redis_server::RedisServer;
use crate::support::upstream::{json_response, Received, UpBody, Upstream};
use replaygate::proxy::SpendClock;

const LIMIT: Duration = Duration::from_secs(20);
const PAY_KEY: &str = "rg-budgets-payments-key-01";
const OTHER_KEY: &str = "rg-budgets-other-team-key-01";
/// `max_output_tokens` of every request: what each reserves for its output.
const MAX_OUTPUT: u64 = 64;

/// The body every request sends.
fn body() -> String {
    format!(r#"{{"model":"gpt-5","input":"what is our spend today?","max_output_tokens":{MAX_OUTPUT}}}"#)
}

/// What a request of [`body`] reserves, as docs/budgets.md estimates it: a token per four
/// bytes of body, rounded up, and its `max_output_tokens`.
fn reservation() -> u64 {
    (body().len() as u64).div_ceil(4) + MAX_OUTPUT
}

/// A response reporting `input` and `output` tokens.
fn answer(input: u64, output: u64) -> String {
    format!(
        r#"{{"id":"resp_b","object":"response","model":"gpt-5","status":"completed","output":[],"usage":{{"input_tokens":{input},"output_tokens":{output},"total_tokens":{}}}}}"#,
        input + output
    )
}

/// A provider whose answers use exactly what each request reserved.
async fn exact_provider() -> Upstream {
    let input = reservation() - MAX_OUTPUT;
    Upstream::start(move |_: Received| async move { json_response(200, answer(input, MAX_OUTPUT)) }).await
}

/// `[teams]` with `payments` (budget `budget`, as TOML) and `other`, without one.
fn teams(budget: &str) -> String {
    let digest = |key| replaygate::keys::format_digest(&replaygate::keys::digest(key));
    format!(
        "[teams.payments]\nkeys = [\"{}\"]\nbudget = {budget}\n[teams.other]\nkeys = [\"{}\"]\n",
        digest(PAY_KEY),
        digest(OTHER_KEY)
    )
}

fn config(provider: &Upstream, state: &str, budget: &str, extra: &str) -> String {
    config_at(&provider.base_url(), state, budget, extra)
}

fn config_at(base_url: &str, state: &str, budget: &str, extra: &str) -> String {
    format!(
        "default_provider = \"openai\"\n[state]\n{state}\n[ledger]\nenabled = false\n\
         [providers.openai]\nbase_url = \"{base_url}\"\nauth = \"none\"\n{extra}\n{}",
        teams(budget)
    )
}

/// One answer: status, headers and body.
struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: serde_json::Value,
}

async fn post(proxy: &Proxy, key: &str) -> Answer {
    let request = reqwest::Client::new()
        .post(proxy.url("/v1/responses"))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {key}"))
        .body(body());
    let response = tokio::time::timeout(LIMIT, request.send())
        .await
        .unwrap()
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    Answer {
        status,
        headers,
        body,
    }
}

/// Sends `count` requests at once, spread over `proxies`; the answers.
async fn at_once(proxies: &[Proxy], count: usize) -> Vec<Answer> {
    join_all((0..count).map(|i| post(&proxies[i % proxies.len()], PAY_KEY))).await
}

/// Checks two hundred answers against a budget of fifty reservations: fifty forwarded, the
/// rest refused 429 `budget_exceeded` naming the window and the budget, never another team.
fn fifty_of_two_hundred(answers: &[Answer], upstream: &Upstream) {
    let forwarded = answers.iter().filter(|answer| answer.status == 200).count();
    assert_eq!(forwarded, 50, "statuses: {:?}", statuses(answers));
    assert_eq!(upstream.received().len(), 50);
    for refused in answers.iter().filter(|answer| answer.status != 200) {
        assert_eq!(refused.status, 429, "{}", refused.body);
        assert_eq!(
            refused.body["error"]["code"], "budget_exceeded",
            "{}",
            refused.body
        );
        assert_eq!(refused.body["error"]["type"], "rate_limit_error");
        let message = refused.body["error"]["message"].as_str().unwrap();
        let budget = format!("budget of {} tokens for this day", 50 * reservation());
        assert!(
            message.contains("team `payments`") && message.contains(&budget),
            "{message}"
        );
        assert!(!message.contains("other"), "{message}");
        let retry_after: u64 = refused.headers["retry-after"].to_str().unwrap().parse().unwrap();
        assert!((1..=86_400).contains(&retry_after), "{retry_after}");
        assert_eq!(refused.headers["x-should-retry"], "false");
    }
}

fn statuses(answers: &[Answer]) -> Vec<u16> {
    answers.iter().map(|answer| answer.status).collect()
}

/// Today's counter of `payments`' tokens budget, as Redis keys it.
fn redis_counter() -> String {
    let start = replaygate_now() / 86_400 * 86_400;
    format!("rg-budgets:v1:spend:team:payments:tokens:day:{start}")
}

fn replaygate_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Waits (at most 5 s) until `read` gives `expected`: a settlement on Redis lands just after
/// its answer.
async fn settles_at(expected: u64, read: impl Fn() -> u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let value = read();
        if value == expected {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the counter holds {value}, not {expected}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn two_hundred_requests_on_three_replicas_sharing_redis_forward_the_fifty_that_fit() {
    let redis = RedisServer::start();
    let upstream = exact_provider().await;
    let state = format!(
        "backend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"rg-budgets\"",
        redis.url()
    );
    let budget = format!("{{ tokens = {}, window = \"day\" }}", 50 * reservation());
    let text = config(&upstream, &state, &budget, "");
    let replicas = [
        Proxy::start(&text, &[]).await,
        Proxy::start(&text, &[]).await,
        Proxy::start(&text, &[]).await,
    ];
    let answers = at_once(&replicas, 200).await;
    fifty_of_two_hundred(&answers, &upstream);
    // Each answer used what it reserved: the window settles at the budget, never past it.
    let port = redis.port();
    let read = || query::<u64>(port, redis::cmd("GET").arg(redis_counter())).unwrap();
    settles_at(50 * reservation(), read).await;
    // Another team, without a budget, goes on.
    assert_eq!(post(&replicas[1], OTHER_KEY).await.status, 200);
}

#[tokio::test]
async fn answers_that_use_less_give_the_rest_back_and_the_settled_total_stays_within_the_budget() {
    let redis = RedisServer::start();
    // Each answer uses half of what its request reserved.
    let half = reservation() / 2;
    let upstream =
        Upstream::start(move |_: Received| async move { json_response(200, answer(half, 0)) }).await;
    let state = format!(
        "backend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"rg-budgets\"",
        redis.url()
    );
    let budget_tokens = 50 * reservation();
    let budget = format!("{{ tokens = {budget_tokens}, window = \"day\" }}");
    let text = config(&upstream, &state, &budget, "");
    let replicas = [
        Proxy::start(&text, &[]).await,
        Proxy::start(&text, &[]).await,
        Proxy::start(&text, &[]).await,
    ];
    let answers = at_once(&replicas, 200).await;
    let forwarded = answers.iter().filter(|answer| answer.status == 200).count() as u64;
    assert!(forwarded >= 50, "{:?}", statuses(&answers));
    assert!(answers.iter().all(|answer| matches!(answer.status, 200 | 429)));
    let port = redis.port();
    let read = || query::<u64>(port, redis::cmd("GET").arg(redis_counter())).unwrap();
    settles_at(forwarded * half, read).await;
    assert!(forwarded * half <= budget_tokens);
}

#[tokio::test]
async fn two_hundred_requests_on_the_embedded_store_forward_fifty_and_the_count_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = exact_provider().await;
    let state = format!("backend = \"embedded\"\npath = \"{}\"", dir.path().display());
    let budget = format!("{{ tokens = {}, window = \"day\" }}", 50 * reservation());
    let text = config(&upstream, &state, &budget, "");
    let proxy = Proxy::start(&text, &[]).await;
    let answers = at_once(std::slice::from_ref(&proxy), 200).await;
    fifty_of_two_hundred(&answers, &upstream);
    proxy.shutdown().await;
    // The day's spend is on disk: after a restart, the budget is still spent.
    let restarted = Proxy::start(&text, &[]).await;
    let refused = post(&restarted, PAY_KEY).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    let message = refused.body["error"]["message"].as_str().unwrap();
    let spent = format!("{} tokens are spent or reserved", 50 * reservation());
    assert!(message.contains(&spent), "{message}");
    assert_eq!(upstream.received().len(), 50);
}

#[tokio::test]
async fn a_window_ends_on_the_clock_and_the_next_one_counts_from_nothing() {
    let upstream = exact_provider().await;
    let budget = format!("{{ tokens = {}, window = \"hour\" }}", 2 * reservation());
    let text = config(&upstream, "backend = \"memory\"", &budget, "");
    // Ten seconds before the end of the hour after this one.
    let hour_end = (replaygate_now() / 3600 + 2) * 3600;
    let now = Arc::new(AtomicU64::new(hour_end - 10));
    let clock = {
        let now = now.clone();
        SpendClock::from_fn(move || now.load(Ordering::SeqCst))
    };
    let mut proxy = Proxy::start_clocked(&text, clock).await;
    let admin = proxy.admin().await;
    assert_eq!(post(&proxy, PAY_KEY).await.status, 200);
    assert_eq!(post(&proxy, PAY_KEY).await.status, 200);
    // GET /usage reads the same clock: this hour, its two answers, nothing left.
    let rfc3339 = |unix: u64| {
        humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_secs(unix)).to_string()
    };
    let payments = usage_of(admin, "payments").await;
    assert_eq!(
        payments["window"]["start"],
        rfc3339(hour_end - 3600),
        "{payments}"
    );
    assert_eq!(payments["answers"], 2, "{payments}");
    assert_eq!(payments["spent"], 2 * reservation(), "{payments}");
    assert_eq!(payments["left"], 0, "{payments}");
    let refused = post(&proxy, PAY_KEY).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.headers["retry-after"], "10");
    let message = refused.body["error"]["message"].as_str().unwrap();
    let ends = humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_secs(hour_end));
    assert!(message.contains(&format!("ends at {ends}")), "{message}");
    // The edge: the last second of the window is still in it.
    now.store(hour_end - 1, Ordering::SeqCst);
    assert_eq!(post(&proxy, PAY_KEY).await.status, 429);
    now.store(hour_end, Ordering::SeqCst);
    let payments = usage_of(admin, "payments").await;
    assert_eq!(payments["window"]["start"], rfc3339(hour_end), "{payments}");
    assert_eq!(
        (&payments["answers"], &payments["spent"]),
        (&0.into(), &0.into()),
        "{payments}"
    );
    assert_eq!(post(&proxy, PAY_KEY).await.status, 200);
    assert_eq!(post(&proxy, PAY_KEY).await.status, 200);
    assert_eq!(post(&proxy, PAY_KEY).await.status, 429);
    // A clock stepped back counts in the earlier window again, whose budget is spent.
    now.store(hour_end - 5, Ordering::SeqCst);
    assert_eq!(post(&proxy, PAY_KEY).await.status, 429);
    assert_eq!(upstream.received().len(), 4);
}

/// Team `team`'s entry of `GET /usage` on the admin listener.
async fn usage_of(admin: std::net::SocketAddr, team: &str) -> serde_json::Value {
    let text = reqwest::get(format!("http://{admin}/usage"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    let entries = report["teams"].as_array().unwrap();
    entries
        .iter()
        .find(|entry| entry["team"] == team)
        .unwrap()
        .clone()
}

/// A provider whose first answer is a stream that ends before `response.completed`, and whose
/// others report a usage of `used` tokens.
async fn cutting_provider(used: u64) -> Upstream {
    let first = Arc::new(AtomicU64::new(0));
    Upstream::start(move |_: Received| {
        let first = first.clone();
        async move {
            if first.fetch_add(1, Ordering::SeqCst) > 0 {
                return json_response(200, answer(used, 0));
            }
            let created = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_c\",\"model\":\"gpt-5\",\"status\":\"in_progress\",\"output\":[]}}\n\n";
            let mut response: http::Response<UpBody> =
                http::Response::new(Full::new(Bytes::from(created)).boxed_unsync());
            response
                .headers_mut()
                .insert("content-type", "text/event-stream".parse().unwrap());
            response
        }
    })
    .await
}

#[tokio::test]
async fn a_stream_cut_before_its_end_keeps_its_reservation() {
    let upstream = cutting_provider(10).await;
    let budget = format!("{{ tokens = {}, window = \"day\" }}", 2 * reservation());
    let text = config(&upstream, "backend = \"memory\"", &budget, "");
    let proxy = Proxy::start(&text, &[]).await;
    // The cut answer: its usage is missing, so what it reserved stays spent.
    let cut = post(&proxy, PAY_KEY).await;
    assert_eq!(cut.status, 200);
    // The next answer uses 10 tokens: the reservation and 10 are spent.
    assert_eq!(post(&proxy, PAY_KEY).await.status, 200);
    let refused = post(&proxy, PAY_KEY).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("{} tokens are spent or reserved", reservation() + 10)),
        "{message}"
    );
}

#[tokio::test]
async fn under_monitor_a_passed_budget_is_named_in_a_header_and_nothing_is_refused() {
    let upstream = exact_provider().await;
    let budget = format!("{{ tokens = {}, window = \"day\" }}", reservation());
    let text = config(
        &upstream,
        "backend = \"memory\"",
        &budget,
        "[usage]\nmode = \"monitor\"",
    );
    let proxy = Proxy::start(&text, &[]).await;
    let first = post(&proxy, PAY_KEY).await;
    assert_eq!(first.status, 200);
    assert!(first.headers.get("x-replaygate-budget-passed").is_none());
    let second = post(&proxy, PAY_KEY).await;
    assert_eq!(second.status, 200, "{}", second.body);
    assert_eq!(second.headers["x-replaygate-budget-passed"], "team:payments");
    assert_eq!(upstream.received().len(), 2);
}

#[tokio::test]
async fn a_store_that_cannot_count_refuses_teams_with_budgets_only_unless_allowed() {
    let upstream = exact_provider().await;
    let port = crate::support::redis_server::free_port();
    let state = format!("backend = \"redis\"\nurl = \"redis://127.0.0.1:{port}/\"\ntimeout = \"200ms\"");
    let budget = "{ tokens = 100000, window = \"day\" }";
    let proxy = Proxy::start(&config(&upstream, &state, budget, ""), &[]).await;
    let refused = post(&proxy, PAY_KEY).await;
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert_eq!(refused.body["error"]["code"], "budget_unavailable");
    // A team without a budget is not held up.
    assert_eq!(post(&proxy, OTHER_KEY).await.status, 200);
    let allowing = format!("{state}\non_unavailable = \"allow\"");
    let proxy = Proxy::start(&config(&upstream, &allowing, budget, ""), &[]).await;
    assert_eq!(post(&proxy, PAY_KEY).await.status, 200);
    assert_eq!(upstream.received().len(), 2);
}

/// A WebSocket's turns are held to the budget as HTTP requests are: each reserves before it
/// is forwarded and settles at its `response.completed`; a turn over the budget gets an
/// `error` event 429 `budget_exceeded`, and the socket stays open.
#[tokio::test]
async fn websocket_turns_reserve_settle_and_are_refused_over_the_budget() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message;

    use crate::websocket::fake_provider::{turn_usage, Behaviour, FakeProvider};

    const CREATE: &str =
        r#"{"type":"response.create","model":"gpt-5","input":[{"role":"user","content":"hi"}]}"#;
    let reserved = (CREATE.len() as u64).div_ceil(4) + 4096;
    let used = |n: usize| (turn_usage(n)[0] + turn_usage(n)[2]) as u64;
    // Turn 2 fits only if turn 1 gave back what it did not use; turn 4 passes the budget.
    let budget = 2 * reserved - 1;
    assert!(used(1) + used(2) + reserved <= budget && used(1) + used(2) + used(3) + reserved > budget);
    let provider = FakeProvider::start(Behaviour::Usage).await;
    let text = config_at(
        &provider.base_url(),
        "backend = \"memory\"",
        &format!("{{ tokens = {budget}, window = \"day\" }}"),
        "",
    );
    let proxy = Proxy::start(&text, &[]).await;
    let mut request = format!("ws://{}/v1/responses", proxy.addr)
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {PAY_KEY}").parse().unwrap());
    let stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let (mut client, _) = tokio::time::timeout(LIMIT, tokio_tungstenite::client_async(request, stream))
        .await
        .unwrap()
        .unwrap();
    for turn in 1..=3 {
        client.send(Message::text(CREATE)).await.unwrap();
        loop {
            let message = tokio::time::timeout(LIMIT, client.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            let event: serde_json::Value = serde_json::from_str(message.to_text().unwrap()).unwrap();
            assert_ne!(event["type"], "error", "turn {turn}: {event}");
            if event["type"] == "response.completed" {
                break;
            }
        }
    }
    client.send(Message::text(CREATE)).await.unwrap();
    let message = tokio::time::timeout(LIMIT, client.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let event: serde_json::Value = serde_json::from_str(message.to_text().unwrap()).unwrap();
    assert_eq!(event["type"], "error", "{event}");
    assert_eq!(event["status"], 429);
    assert_eq!(event["error"]["code"], "budget_exceeded");
    let spent = format!("{} tokens are spent or reserved", used(1) + used(2) + used(3));
    assert!(
        event["error"]["message"].as_str().unwrap().contains(&spent),
        "{event}"
    );
    client.close(None).await.unwrap();
}

/// A budget changed by a reload applies to the running window at once, and counts on from
/// what the window has spent.
#[tokio::test]
async fn a_budget_changed_by_a_reload_counts_on_from_what_the_window_spent() {
    let upstream = exact_provider().await;
    let text = |times: u64| {
        let budget = format!("{{ tokens = {}, window = \"day\" }}", times * reservation());
        config(&upstream, "backend = \"memory\"", &budget, "")
    };
    let proxy = Proxy::start(&text(1), &[]).await;
    assert_eq!(post(&proxy, PAY_KEY).await.status, 200);
    assert_eq!(post(&proxy, PAY_KEY).await.status, 429);
    let raised = replaygate::config::Config::from_toml(&text(3)).unwrap();
    proxy.reloader.reload(&raised, &|_| None).unwrap();
    // Three reservations fit the raised budget, one of which the window has spent.
    assert_eq!(post(&proxy, PAY_KEY).await.status, 200);
    assert_eq!(post(&proxy, PAY_KEY).await.status, 200);
    let refused = post(&proxy, PAY_KEY).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("budget of {} tokens", 3 * reservation())),
        "{message}"
    );
    // Lowered below what is spent: refused until the window ends.
    let lowered = replaygate::config::Config::from_toml(&text(2)).unwrap();
    proxy.reloader.reload(&lowered, &|_| None).unwrap();
    assert_eq!(post(&proxy, PAY_KEY).await.status, 429);
    assert_eq!(upstream.received().len(), 3);
}

/// A key's own budget holds its requests besides the team's: over it, the 429 names the key
/// (the caller's own), and the team's budget keeps nothing of the refused request.
#[tokio::test]
async fn a_keys_own_budget_refuses_it_by_name_while_the_team_has_room() {
    let upstream = exact_provider().await;
    let digest = replaygate::keys::format_digest(&replaygate::keys::digest(PAY_KEY));
    let text = format!(
        "default_provider = \"openai\"\n[state]\nbackend = \"memory\"\n[ledger]\nenabled = false\n\
         [providers.openai]\nbase_url = \"{}\"\nauth = \"none\"\n\
         [teams.payments]\nbudget = {{ tokens = {}, window = \"day\" }}\n\
         keys = [{{ id = \"ci-nightly\", digest = \"{digest}\", budget = {{ tokens = {}, window = \"hour\" }} }}]\n",
        upstream.base_url(),
        10 * reservation(),
        reservation(),
    );
    let mut proxy = Proxy::start(&text, &[]).await;
    let admin = proxy.admin().await;
    assert_eq!(post(&proxy, PAY_KEY).await.status, 200);
    let refused = post(&proxy, PAY_KEY).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("key `ci-nightly`'s budget of"), "{message}");
    assert!(message.contains("for this hour"), "{message}");
    // The team's reservation for the refused request was given back.
    let payments = usage_of(admin, "payments").await;
    assert_eq!(payments["spent"], reservation(), "{payments}");
    assert_eq!(upstream.received().len(), 1);
}

/// A `usd` budget reserves the estimate at the model's price and settles the answer's cost:
/// the refusal shows dollars.
#[tokio::test]
async fn a_usd_budget_counts_dollars_at_the_models_price() {
    let upstream = exact_provider().await;
    // $1 per million tokens of each kind: a request costs its reservation in micro-dollars.
    let prices = "[prices.\"*\"]\ninput_per_million = 1.0\noutput_per_million = 1.0\n";
    let budget = format!(
        "{{ usd = {}, window = \"month\" }}",
        (2 * reservation()) as f64 / 1e6
    );
    let proxy = Proxy::start(&config(&upstream, "backend = \"memory\"", &budget, prices), &[]).await;
    assert_eq!(post(&proxy, PAY_KEY).await.status, 200);
    assert_eq!(post(&proxy, PAY_KEY).await.status, 200);
    let refused = post(&proxy, PAY_KEY).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    let message = refused.body["error"]["message"].as_str().unwrap();
    let spent = format!("$0.{:06} are spent or reserved", 2 * reservation());
    assert!(
        message.contains(&spent) && message.contains("for this month"),
        "{message}"
    );
}
