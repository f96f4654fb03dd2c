//! The proxy on a Redis that is there but wrong (docs/operations.md#state-backends and
//! #redis-for-several-replicas): a TLS certificate that expired or names another host, a Redis
//! that answers every call 2 s late, a Sentinel naming a master nobody answers for. Each makes
//! the store unavailable, said clearly in the start line and `/readyz`, and a request that needs
//! a lookup gets 503 `ledger_unavailable` within `[state] timeout`: never judged as "no record",
//! never held, and requests that need no lookup go on. Also: a request's lookups share one
//! round trip to Redis.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::closed_port::closed_port;
use crate::support::pki::{Issued, TestCa};
use crate::support::proxy::{one_provider, Proxy};
use crate::support::redis_ha::{poll, query, start_sentinel};
use crate::support::redis_server::{RedisServer, ServerTls};
use crate::support::serve::Serve;
use crate::support::slow_relay::SlowRelay;
use crate::support::upstream::Upstream;

/// The provider's answer: a reasoning item carrying an encrypted blob, and a call.
const ANSWER: &str = r#"{"id":"resp_fault_1","object":"response","status":"completed","output":[{"type":"reasoning","id":"rs_fault_0123456789abcdef","summary":[],"encrypted_content":"gAAAAB-fault-blob-1"},{"type":"function_call","id":"fc_fault_0123456789abcdef","call_id":"call_1","name":"lookup","arguments":"{}","status":"completed"}]}"#;

/// A continuation of `resp_fault_1` answering `call_id`.
fn continuation(call_id: &str) -> Value {
    json!({"model": "gpt-5", "previous_response_id": "resp_fault_1",
           "input": [{"type": "function_call_output", "call_id": call_id, "output": "42"}]})
}

/// A continuation of `resp_fault_1` that also replays its reasoning item (looked up by id and
/// by the digest of its blob) and its call (by id): every lookup `look_up` makes at once.
fn replaying_continuation() -> Value {
    json!({"model": "gpt-5", "previous_response_id": "resp_fault_1", "input": [
        {"type": "reasoning", "id": "rs_fault_0123456789abcdef", "summary": [], "encrypted_content": "gAAAAB-fault-blob-1"},
        {"type": "function_call", "id": "fc_fault_0123456789abcdef", "call_id": "call_1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "42"}]})
}

/// What the proxy answered, and how long until its head came.
struct Answer {
    status: u16,
    body: Value,
    head_after: Duration,
}

async fn post(address: &str, body: &Value) -> Answer {
    let started = Instant::now();
    let response = reqwest::Client::new()
        .post(format!("http://{address}/v1/responses"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .unwrap();
    let head_after = started.elapsed();
    let status = response.status().as_u16();
    let body = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    Answer {
        status,
        body,
        head_after,
    }
}

async fn readyz(admin: SocketAddr) -> (u16, Value) {
    let response = reqwest::get(format!("http://{admin}/readyz")).await.unwrap();
    let status = response.status().as_u16();
    (
        status,
        serde_json::from_slice(&response.bytes().await.unwrap()).unwrap(),
    )
}

/// The proxy in front of `upstream`, its state in the Redis `state` describes.
async fn proxy(upstream: &Upstream, state: &str, extra: &str) -> Proxy {
    let config = one_provider(&upstream.base_url(), "\"none\"", extra)
        + &format!("[state]\nbackend = \"redis\"\n{state}\n");
    Proxy::start(&config, &[]).await
}

/// Waits until `resp_fault_1` and its items are in the Redis on `port` (5 s at most).
fn until_recorded(port: u16) {
    poll(Duration::from_secs(5), "the first answer to be recorded", || {
        query::<u32>(
            port,
            ::redis::cmd("EXISTS")
                .arg("replaygate:v1:resp:resp_fault_1")
                .arg("replaygate:v1:item:rs_fault_0123456789abcdef")
                .arg("replaygate:v1:item:fc_fault_0123456789abcdef"),
        )
        .ok()
        .filter(|found| *found == 3)
    });
}

/// A request that needs a lookup is refused as the store being unavailable, within `limit`.
async fn refused_within(address: &str, limit: Duration) -> Answer {
    let answer = post(address, &continuation("call_never_made")).await;
    assert_eq!(answer.status, 503, "{}", answer.body);
    assert_eq!(
        answer.body["error"]["code"], "ledger_unavailable",
        "{}",
        answer.body
    );
    assert!(answer.head_after < limit, "{:?}", answer.head_after);
    answer
}

// --- TLS: certificates the proxy must refuse ---

/// `serve` on a TLS-only Redis whose certificate `issue` makes with the CA the proxy trusts:
/// its start line about the state backend, `/readyz`, and what requests get.
async fn serve_on_tls_redis(issue: impl FnOnce(&TestCa, &Path) -> Issued) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("replaygate test redis CA");
    let server = issue(&ca, dir.path());
    let ca_file = ca.write(dir.path(), "ca");
    let redis = RedisServer::start_with(
        &[],
        Some(&ServerTls {
            cert: &server.cert,
            key: &server.key,
            ca: &ca_file,
            auth_clients: false,
        }),
    );
    let upstream = Upstream::json(200, ANSWER).await;
    let config = dir.path().join("proxy.toml");
    std::fs::write(
        &config,
        format!(
            "default_provider = \"openai\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
             [state]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"1s\"\ntls_ca_file = \"ca.pem\"\n\
             [providers.openai]\nbase_url = \"{}\"\nauth = \"none\"\n",
            redis.url(),
            upstream.base_url()
        ),
    )
    .unwrap();
    let mut serve = Serve::start(Serve::command(&config)).await;
    let line = serve.until_logged("state backend").await;
    let admin_line = serve.until_logged("admin listening").await;
    let at = admin_line.find("address=").unwrap() + 8;
    let admin: SocketAddr = admin_line[at..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(line.contains("state backend does not answer"), "{line}");

    let (status, body) = readyz(admin).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["state"]["ok"], false, "{body}");
    let error = body["state"]["error"].as_str().unwrap().to_owned();
    // No plain connection in its place: the lookup fails, the answer that needs none goes on.
    refused_within(&serve.address, Duration::from_secs(3)).await;
    let plain = post(&serve.address, &json!({"model": "gpt-5", "input": "hi"})).await;
    assert_eq!(plain.status, 200, "{}", plain.body);
    (line, error)
}

#[tokio::test]
async fn an_expired_server_certificate_is_refused_and_named() {
    let (line, error) = serve_on_tls_redis(|ca, dir| ca.issue_expired(&["127.0.0.1"], dir, "server")).await;
    for text in [&line, &error] {
        assert!(
            text.contains("invalid peer certificate: certificate expired"),
            "{text}"
        );
    }
}

#[tokio::test]
async fn a_server_certificate_for_another_host_is_refused_and_named() {
    let (line, error) = serve_on_tls_redis(|ca, dir| ca.issue(&["redis.internal"], dir, "server")).await;
    for text in [&line, &error] {
        assert!(
            text.contains("invalid peer certificate: certificate not valid for name"),
            "{text}"
        );
        assert!(
            text.contains("127.0.0.1") && text.contains("redis.internal"),
            "{text}"
        );
    }
}

// --- A Redis that answers 2 s late ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_answering_late_is_unavailable_within_the_timeout_and_holds_nothing_else() {
    const TIMEOUT: Duration = Duration::from_secs(1);
    let redis = RedisServer::start();
    let relay = SlowRelay::start(redis.port(), Duration::ZERO).await;
    let upstream = Upstream::json(200, ANSWER).await;
    let state = format!("url = \"{}\"\ntimeout = \"1s\"", relay.url());
    let mut proxy = proxy(&upstream, &state, "").await;
    let address = proxy.addr.to_string();
    let first = post(&address, &json!({"model": "gpt-5", "input": "hi"})).await;
    assert_eq!(first.status, 200, "{}", first.body);
    until_recorded(redis.port());
    // While Redis answers in time, the continuation is judged with the record.
    let judged = post(&address, &continuation("call_never_made")).await;
    assert_eq!(judged.status, 422, "{}", judged.body);
    assert_eq!(judged.body["error"]["code"], "call_id_mismatch");

    relay.set_delay(Duration::from_secs(2));
    let lookup = tokio::spawn({
        let address = address.clone();
        async move {
            let answer = refused_within(&address, TIMEOUT + Duration::from_secs(1)).await;
            (answer, Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    // A request that needs no lookup is answered while the lookup waits.
    let plain_sent = Instant::now();
    let plain = post(&address, &json!({"model": "gpt-5", "input": "hi again"})).await;
    // Its body ends once its record is written or has failed (bounded by the timeout too).
    let plain_whole = plain_sent.elapsed();
    assert_eq!(plain.status, 200, "{}", plain.body);
    assert_eq!(plain.body["id"], "resp_fault_1", "{}", plain.body);
    let (refused, refused_at) = lookup.await.unwrap();
    assert!(
        plain_sent + plain.head_after < refused_at,
        "the request that needs no lookup waited for the one that does"
    );
    // The lookup waited for Redis up to the timeout, not for its late reply.
    assert!(refused.head_after >= TIMEOUT * 9 / 10, "{:?}", refused.head_after);
    assert!(plain_whole < TIMEOUT + Duration::from_secs(1), "{plain_whole:?}");
    eprintln!(
        "replies 2 s late, timeout {TIMEOUT:?}: a lookup refused after {:?}; meanwhile a request \
         needing none answered after {:?}, whole (its record failing) after {plain_whole:?}",
        refused.head_after, plain.head_after,
    );
    let (status, body) = readyz(proxy.admin().await).await;
    assert_eq!(status, 503, "{body}");
    let error = body["state"]["error"].as_str().unwrap();
    assert!(error.contains("redis did not answer within 1s"), "{error}");
    assert_eq!(upstream.received().len(), 2, "nothing refused was forwarded");

    // Under `on_unavailable = "allow"` the same request is judged without the ledger, as soon.
    let allowing = self::proxy(&upstream, &state, "[ledger]\non_unavailable = \"allow\"\n").await;
    let allowed = post(&allowing.addr.to_string(), &continuation("call_never_made")).await;
    assert_eq!(allowed.status, 200, "{}", allowed.body);
    assert!(
        allowed.head_after < TIMEOUT + Duration::from_secs(1),
        "{:?}",
        allowed.head_after
    );
    assert_eq!(upstream.received().len(), 3);
}

// --- Sentinel naming a master nobody answers for ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_naming_an_unreachable_master_is_unavailable_within_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::json(200, ANSWER).await;
    let sentinel_state = |sentinel: &RedisServer, name: &str| {
        format!(
            "sentinels = [\"127.0.0.1:{}\"]\nmaster_name = \"{name}\"\ntimeout = \"500ms\"",
            sentinel.port()
        )
    };
    let limit = Duration::from_millis(1500);

    // A master at a closed port, from the start.
    let nowhere = start_sentinel(dir.path(), "rg-nowhere", closed_port());
    let mut proxy = proxy(&upstream, &sentinel_state(&nowhere, "rg-nowhere"), "").await;
    let address = proxy.addr.to_string();
    refused_within(&address, limit).await;
    unready_naming_the_way(&mut proxy, &nowhere, "rg-nowhere").await;
    let plain = post(&address, &json!({"model": "gpt-5", "input": "hi"})).await;
    assert_eq!(plain.status, 200, "{}", plain.body);

    // A master that worked, then was killed, with no replica to promote.
    let master = RedisServer::start();
    let watching = start_sentinel(dir.path(), "rg-lone", master.port());
    let mut proxy = self::proxy(&upstream, &sentinel_state(&watching, "rg-lone"), "").await;
    let address = proxy.addr.to_string();
    let first = post(&address, &json!({"model": "gpt-5", "input": "hi"})).await;
    assert_eq!(first.status, 200, "{}", first.body);
    until_recorded(master.port());
    let judged = post(&address, &continuation("call_never_made")).await;
    assert_eq!(judged.status, 422, "{}", judged.body);
    drop(master);
    for _ in 0..3 {
        refused_within(&address, limit).await;
    }
    unready_naming_the_way(&mut proxy, &watching, "rg-lone").await;
}

/// `/readyz` answers 503, its error naming the sentinel asked and the master's name.
async fn unready_naming_the_way(proxy: &mut Proxy, sentinel: &RedisServer, name: &str) {
    let (status, body) = readyz(proxy.admin().await).await;
    assert_eq!(status, 503, "{body}");
    let error = body["state"]["error"].as_str().unwrap();
    let way = format!(
        "the state backend is unavailable: redis: no connection via sentinels 127.0.0.1:{} (master {name}): ",
        sentinel.port()
    );
    assert!(error.starts_with(&way), "{error}");
}

// --- One round trip for a request's lookups ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requests_lookups_share_one_round_trip() {
    const D: Duration = Duration::from_millis(400);
    let redis = RedisServer::start();
    let relay = SlowRelay::start(redis.port(), Duration::ZERO).await;
    let upstream = Upstream::json(200, ANSWER).await;
    let state = format!("url = \"{}\"\ntimeout = \"5s\"", relay.url());
    let proxy = proxy(&upstream, &state, "").await;
    let address = proxy.addr.to_string();
    let first = post(&address, &json!({"model": "gpt-5", "input": "hi"})).await;
    assert_eq!(first.status, 200, "{}", first.body);
    until_recorded(redis.port());
    // The same request with Redis at loopback speed: what the proxy itself takes.
    let quick = post(&address, &replaying_continuation()).await;
    assert_eq!(quick.status, 200, "{}", quick.body);

    relay.set_delay(D);
    // Fewer than two round trips more than at loopback speed: the three lookups went out
    // together (asked one after another they take three, 1.2 s more). The best of three tries,
    // so a moment of load on a busy machine does not fail it; every try waits one at least.
    let limit = quick.head_after + 2 * D;
    let mut tries = Vec::new();
    for _ in 0..3 {
        let slow = post(&address, &replaying_continuation()).await;
        assert_eq!(slow.status, 200, "{}", slow.body);
        assert!(slow.head_after >= D, "{:?}", slow.head_after);
        tries.push(slow.head_after);
        if slow.head_after < limit {
            break;
        }
    }
    eprintln!(
        "lookups with replies held {D:?}: answered after {tries:?} (at loopback speed {:?})",
        quick.head_after
    );
    assert!(
        tries.iter().any(|took| *took < limit),
        "{tries:?}, {:?} at loopback speed",
        quick.head_after
    );
    assert_eq!(upstream.received().len(), 2 + tries.len());
}
