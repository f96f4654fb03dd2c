//! The proxy on Redis as production runs it for high availability: a continuation of a
//! recorded response is judged through a Redis Cluster, and through Redis Sentinel across a
//! failover (503 `ledger_unavailable` while no master answers, never judged as unrecorded).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Response;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};

use crate::support::proxy::{one_provider, Proxy};
use crate::support::redis_ha::{poll, query, Cluster, SentinelSet};
use crate::support::upstream::Upstream;

/// A provider whose Nth answer is response `resp_{ha}_N` (hash-tag braces in its id) with a
/// call `call_N`.
async fn provider() -> Upstream {
    let counter = Arc::new(AtomicU64::new(0));
    Upstream::start(move |_| {
        let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
        async move {
            let answer = json!({"id": format!("resp_{{ha}}_{n}"), "object": "response", "status": "completed",
                "output": [{"type": "function_call", "id": format!("fc_{{ha}}_{n}_0123456789abcdef"),
                            "call_id": format!("call_{n}"), "name": "lookup", "arguments": "{}",
                            "status": "completed"}]});
            let mut response = Response::new(Full::new(Bytes::from(answer.to_string())).boxed_unsync());
            response
                .headers_mut()
                .insert("content-type", "application/json".parse().unwrap());
            response
        }
    })
    .await
}

fn continuation(call_id: &str) -> Value {
    json!({"model": "gpt-5", "previous_response_id": "resp_{ha}_1",
           "input": [{"type": "function_call_output", "call_id": call_id, "output": "42"}]})
}

async fn post(proxy: &Proxy, body: Value) -> (u16, Value) {
    proxy.post_json("/v1/responses", body.to_string()).await
}

/// The proxy in front of `upstream`, its state in the Redis `state` describes.
async fn proxy(upstream: &Upstream, state: &str) -> Proxy {
    let config = one_provider(&upstream.base_url(), "\"none\"", "")
        + &format!("[state]\nbackend = \"redis\"\ntimeout = \"500ms\"\n{state}\n");
    Proxy::start(&config, &[]).await
}

/// Records the first turn, then checks that the continuation naming it is judged with the
/// record: its output pairs with the recorded call, another call id does not.
async fn record_and_continue(proxy: &Proxy) {
    let (status, body) = post(proxy, json!({"model": "gpt-5", "input": "hi"})).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = poll_async(Duration::from_secs(10), || async {
        let (status, body) = post(proxy, continuation("call_1")).await;
        (status == 200).then_some((status, body))
    })
    .await;
    assert_eq!(status, 200, "{body}");
    judged_with_the_record(proxy).await;
}

async fn judged_with_the_record(proxy: &Proxy) {
    let (status, body) = post(proxy, continuation("call_never_made")).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "call_id_mismatch", "{body}");
}

async fn poll_async<T, F, Fut>(limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(Instant::now() < deadline, "gave up after {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_continuation_is_judged_through_a_redis_cluster() {
    let cluster = Cluster::start();
    let upstream = provider().await;
    let nodes: Vec<String> = cluster.addrs().iter().map(|a| format!("\"{a}\"")).collect();
    let proxy = proxy(&upstream, &format!("cluster_nodes = [{}]", nodes.join(", "))).await;
    record_and_continue(&proxy).await;
}

#[tokio::test]
async fn a_continuation_is_judged_through_sentinel_across_a_failover() {
    let mut set = SentinelSet::start("rg-proxy");
    let upstream = provider().await;
    let state = format!(
        "sentinels = [\"{}\"]\nmaster_name = \"{}\"",
        set.sentinel_addr(),
        set.name
    );
    let proxy = proxy(&upstream, &state).await;
    record_and_continue(&proxy).await;
    let replica = set.replica.port();
    poll(Duration::from_secs(10), "the replica to copy the record", || {
        query::<bool>(
            replica,
            ::redis::cmd("EXISTS").arg("replaygate:v1:resp:resp_{ha}_1"),
        )
        .ok()
        .filter(|exists| *exists)
    });

    set.kill_master();
    let refused = std::cell::Cell::new(0);
    poll_async(Duration::from_secs(60), || async {
        let (status, body) = post(&proxy, continuation("call_1")).await;
        match status {
            200 => Some(()),
            503 => {
                assert_eq!(body["error"]["code"], "ledger_unavailable", "{body}");
                refused.set(refused.get() + 1);
                None
            }
            _ => panic!("{status} {body}"),
        }
    })
    .await;
    assert!(
        refused.get() > 0,
        "a continuation was judged while no master answered"
    );
    judged_with_the_record(&proxy).await;
}
