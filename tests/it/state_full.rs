//! No silent forgetting (docs/operations.md#records-are-never-forgotten-silently): a Redis at its
//! `maxmemory` under `noeviction` refuses writes with `OOM`, and replaygate treats that as an
//! unavailable store (503 `ledger_unavailable`, or on under `on_unavailable = "allow"`), counts
//! it, and reports the policy; `/readyz` keeps replicas serving under `"allow"` while Redis is
//! down. Each test starts its own `redis-server` and sets its `maxmemory` with `CONFIG SET`: 1
//! byte refuses every write, 0 lifts the limit.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::proxy::Proxy;
use crate::support::redis_server::RedisServer;
use crate::support::upstream::Upstream;
use crate::teams::{bearer, key_entry, post, PAY_KEY};

const ANSWER: &str = r#"{"id":"resp_full_1","object":"response","status":"completed","output":[{"type":"function_call","id":"fc_full_1","call_id":"call_1","name":"lookup","arguments":"{}","status":"completed"}]}"#;
const HELLO: &str = r#"{"model":"gpt-5","input":"hello"}"#;
const CONTINUATION: &str = r#"{"model":"gpt-5","previous_response_id":"resp_full_1","input":"next"}"#;

/// A Redis that never evicts.
fn noeviction() -> RedisServer {
    RedisServer::start_with(&["--maxmemory-policy", "noeviction"], None)
}

/// Sets the server's `maxmemory` (bytes; 0 is no limit).
async fn set_maxmemory(server: &RedisServer, bytes: u64) {
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(bytes)
        .query_async(&mut conn)
        .await
        .unwrap();
}

/// One provider at `upstream`, `[state]` on the Redis at `url`, `[ledger]` as `ledger`, and
/// `teams` text.
fn config(upstream: &Upstream, url: &str, ledger: &str, teams: &str) -> String {
    format!(
        "default_provider = \"openai\"\n[state]\nbackend = \"redis\"\nurl = \"{url}\"\ntimeout = \"2s\"\n\
         [ledger]\n{ledger}\n[providers.openai]\nbase_url = \"{}\"\nauth = \"none\"\n{teams}",
        upstream.base_url()
    )
}

/// The value of the unlabelled sample `name` on the proxy's admin listener.
async fn sample(proxy: &mut Proxy, name: &str) -> f64 {
    let text = metrics(proxy).await;
    let line = text
        .lines()
        .find(|line| line.strip_prefix(name).is_some_and(|rest| rest.starts_with(' ')))
        .unwrap_or_else(|| panic!("no {name} in {text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

async fn metrics(proxy: &mut Proxy) -> String {
    let admin = proxy.admin().await;
    get(&format!("http://{admin}/metrics")).await.1
}

async fn readyz(proxy: &mut Proxy) -> (u16, Value) {
    let admin = proxy.admin().await;
    let (status, body) = get(&format!("http://{admin}/readyz")).await;
    (status, serde_json::from_str(&body).unwrap())
}

async fn get(url: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .get(url)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

#[tokio::test]
async fn a_rate_count_redis_refuses_for_memory_is_503_unless_allowed_and_counted() {
    let server = noeviction();
    let upstream = Upstream::json(200, r#"{"ok":true}"#).await;
    let teams = format!(
        "[teams.payments]\nkeys = [\"{}\"]\nrequests_per_minute = 600\n",
        key_entry(PAY_KEY)
    );
    let pay = bearer(PAY_KEY);
    let headers = [("authorization", pay.as_str())];
    let mut refusing = Proxy::start(&config(&upstream, &server.url(), "", &teams), &[]).await;
    let mut allowing = Proxy::start(
        &config(&upstream, &server.url(), "on_unavailable = \"allow\"", &teams),
        &[],
    )
    .await;
    let (status, _, answer) = post(&refusing, "/v1/responses", &headers, r#"{"model":"gpt-5"}"#).await;
    assert_eq!(status, 200, "{answer}");

    set_maxmemory(&server, 1).await;
    let (status, head, answer) = post(&refusing, "/v1/responses", &headers, r#"{"model":"gpt-5"}"#).await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"]["code"], "ledger_unavailable");
    assert_eq!(head["x-should-retry"], "true");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("full") && message.contains("OOM"), "{message}");
    assert_eq!(
        upstream.received().len(),
        1,
        "the refused request was not forwarded"
    );
    assert_eq!(
        sample(&mut refusing, "replaygate_state_writes_refused_total").await,
        1.0
    );
    assert_eq!(
        sample(&mut refusing, "replaygate_rate_limit_unavailable_total").await,
        1.0
    );

    let (status, _, answer) = post(&allowing, "/v1/responses", &headers, r#"{"model":"gpt-5"}"#).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        sample(&mut allowing, "replaygate_state_writes_refused_total").await,
        1.0
    );

    // Room again: the count goes on.
    set_maxmemory(&server, 0).await;
    let (status, _, answer) = post(&refusing, "/v1/responses", &headers, r#"{"model":"gpt-5"}"#).await;
    assert_eq!(status, 200, "{answer}");
}

#[tokio::test]
async fn a_record_redis_refuses_for_memory_is_counted_and_the_store_is_unavailable_until_a_write_lands() {
    let server = noeviction();
    let upstream = Upstream::json(200, ANSWER).await;
    let mut proxy = Proxy::start(&config(&upstream, &server.url(), "", ""), &[]).await;
    let (status, body) = readyz(&mut proxy).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"]["maxmemory_policy"], "noeviction");
    assert_eq!(body["state"]["may_evict"], false);

    set_maxmemory(&server, 1).await;
    // The answer goes out whole; its record is refused, counted and logged, never dropped silently.
    let (status, _, answer) = post(&proxy, "/v1/responses", &[], HELLO).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["id"], "resp_full_1");
    assert_eq!(
        sample(&mut proxy, "replaygate_state_writes_refused_total").await,
        1.0
    );
    let text = metrics(&mut proxy).await;
    assert!(
        text.contains("replaygate_ledger_operations_total{op=\"record\",result=\"error\"} 1\n"),
        "{text}"
    );
    // Its continuation would read the unwritten record as unknown: the store is unavailable.
    let (status, _, answer) = post(&proxy, "/v1/responses", &[], CONTINUATION).await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"]["code"], "ledger_unavailable");
    let (status, body) = readyz(&mut proxy).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["state"]["ok"], false);
    assert!(
        body["state"]["error"].as_str().unwrap().contains("maxmemory"),
        "{body}"
    );
    let allowing = Proxy::start(
        &config(&upstream, &server.url(), "on_unavailable = \"allow\"", ""),
        &[],
    )
    .await;
    // A store of its own: it sees the refusal on its own first write.
    let (status, _, _) = post(&allowing, "/v1/responses", &[], HELLO).await;
    assert_eq!(status, 200);
    let (status, _, answer) = post(&allowing, "/v1/responses", &[], CONTINUATION).await;
    assert_eq!(status, 200, "{answer}");

    // Room again: /readyz's write lands, and the store answers.
    set_maxmemory(&server, 0).await;
    let (status, body) = readyz(&mut proxy).await;
    assert_eq!(status, 200, "{body}");
    let (status, _, answer) = post(&proxy, "/v1/responses", &[], HELLO).await;
    assert_eq!(status, 200, "{answer}");
    let (status, _, answer) = post(&proxy, "/v1/responses", &[], CONTINUATION).await;
    assert_eq!(status, 200, "{answer}");
}

#[tokio::test]
async fn an_evicting_policy_is_reported_on_readyz_and_the_metrics() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"], None);
    let upstream = Upstream::json(200, ANSWER).await;
    let mut proxy = Proxy::start(&config(&upstream, &server.url(), "", ""), &[]).await;
    let (status, body) = readyz(&mut proxy).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"]["maxmemory_policy"], "allkeys-lru");
    assert_eq!(body["state"]["may_evict"], true);
    assert_eq!(sample(&mut proxy, "replaygate_state_eviction_risk").await, 1.0);
    let text = metrics(&mut proxy).await;
    assert!(
        text.contains("replaygate_state_maxmemory_policy{policy=\"allkeys-lru\"} 1\n"),
        "{text}"
    );
}

#[tokio::test]
async fn readiness_follows_on_unavailable_while_redis_is_down() {
    let closed = crate::support::closed_port::closed_port();
    let url = format!("redis://127.0.0.1:{closed}");
    let upstream = Upstream::json(200, ANSWER).await;
    for (ledger, status, ready, on_unavailable) in [
        ("", 503, false, "refuse"),
        ("on_unavailable = \"allow\"", 200, true, "allow"),
    ] {
        let mut proxy = Proxy::start(&config(&upstream, &url, ledger, ""), &[]).await;
        let (got, body) = readyz(&mut proxy).await;
        assert_eq!(got, status, "{body}");
        assert_eq!(body["ready"], ready, "{body}");
        assert_eq!(body["state"]["ok"], false, "{body}");
        assert_eq!(body["state"]["on_unavailable"], on_unavailable, "{body}");
        assert!(body["state"]["error"].is_string(), "{body}");
        // And the replica serves what it says: a request that needs no store is answered.
        let (code, _, answer) = post(&proxy, "/v1/responses", &[], HELLO).await;
        assert_eq!(code, 200, "{answer}");
        let expected = json!(if ready { 200 } else { 503 });
        let (code, _, answer) = post(&proxy, "/v1/responses", &[], CONTINUATION).await;
        assert_eq!(json!(code), expected, "{answer}");
    }
}
