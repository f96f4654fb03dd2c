//! The admin listener and the metrics (docs/operations.md#metrics): exact counter deltas for known
//! traffic, health and readiness (with a state backend that is down), what else it answers, scrapes
//! during reloads and by the thousand, a 1 MiB model name, the in-flight gauge of a stream, and
//! `replaygate serve` with `[admin] listen`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::teams::{bearer, key_entry, PAY_KEY};
use crate::support::closed_port::closed_port;
use crate::support::proxy::Proxy;
use crate::support::upstream::{Upstream, RESPONSE_JSON};

/// One scrape: every sample by its series (`name{labels}`), checked line by line.
#[derive(Debug, Clone, Default)]
struct Scrape(BTreeMap<String, f64>);

impl Scrape {
    /// Parses OpenMetrics text: `# HELP`/`# TYPE` lines, samples `name{labels} value`, and
    /// `# EOF` last. Anything else is an error.
    fn parse(text: &str) -> Result<Scrape, String> {
        let body = text.strip_suffix("# EOF\n").ok_or_else(|| {
            format!(
                "no `# EOF` at the end: {:?}",
                &text[text.len().saturating_sub(80)..]
            )
        })?;
        let mut samples = BTreeMap::new();
        for line in body.lines() {
            if line.starts_with("# HELP ") || line.starts_with("# TYPE ") {
                continue;
            }
            let (series, value) = line
                .rsplit_once(' ')
                .ok_or_else(|| format!("not a sample: {line:?}"))?;
            let name_end = series.find('{').unwrap_or(series.len());
            let name = &series[..name_end];
            if !name.starts_with("replaygate_")
                || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                || (name_end < series.len() && !series.ends_with('}'))
            {
                return Err(format!("not a sample: {line:?}"));
            }
            let value: f64 = value.parse().map_err(|_| format!("not a value: {line:?}"))?;
            if samples.insert(series.to_owned(), value).is_some() {
                return Err(format!("a series twice: {series}"));
            }
        }
        Ok(Scrape(samples))
    }

    fn get(&self, series: &str) -> f64 {
        self.0.get(series).copied().unwrap_or(0.0)
    }

    /// The counter samples (`..._total`) that changed since `before`, by how much.
    fn counter_deltas(&self, before: &Scrape) -> BTreeMap<String, f64> {
        self.0
            .iter()
            .filter(|(series, _)| series.split('{').next().unwrap().ends_with("_total"))
            .map(|(series, value)| (series.clone(), value - before.get(series)))
            .filter(|(_, delta)| *delta != 0.0)
            .collect()
    }

    /// Every value the label `name` has in any series.
    fn label_values(&self, name: &str) -> BTreeSet<String> {
        let key = format!("{name}=\"");
        self.0
            .keys()
            .filter_map(|series| {
                let start = series.find(&key)? + key.len();
                let len = series[start..].find('"')?;
                Some(series[start..start + len].to_owned())
            })
            .collect()
    }
}

/// `GET http://ADDR/PATH`: status, content type and body.
async fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
    let response = tokio::time::timeout(
        Duration::from_secs(10),
        reqwest::Client::new().get(format!("http://{addr}{path}")).send(),
    )
    .await
    .expect("an answer within 10 s")
    .unwrap();
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|value| value.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, content_type, response.text().await.unwrap())
}

async fn scrape(admin: SocketAddr) -> Scrape {
    let (status, content_type, text) = get(admin, "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    Scrape::parse(&text).unwrap_or_else(|error| panic!("{error}\n{text}"))
}

/// POSTs `body` to `path` with `headers`: the status and the answer's body.
async fn post(proxy: &Proxy, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, Vec<u8>) {
    let mut request = reqwest::Client::new()
        .post(proxy.url(path))
        .header("content-type", "application/json")
        .body(body.to_owned());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = tokio::time::timeout(Duration::from_secs(10), request.send())
        .await
        .expect("an answer within 10 s")
        .unwrap();
    let status = response.status().as_u16();
    (status, response.bytes().await.unwrap().to_vec())
}

/// `openai` at `upstream`, `down` at a closed port, the ledger on in memory, and `extra`.
fn config(upstream: &Upstream, extra: &str) -> String {
    format!(
        r#"default_provider = "openai"
[state]
backend = "memory"
[ledger]
enabled = true
[providers.openai]
base_url = "{}"
auth = "none"
[providers.down]
base_url = "http://127.0.0.1:{}/v1"
auth = "none"
connect_timeout_ms = 2000
{extra}
"#,
        upstream.base_url(),
        closed_port()
    )
}

const TOOLS: &str = r#"[{"type":"function","name":"f","parameters":{"type":"object"}}]"#;

fn series(name: &str, labels: &[(&str, &str)]) -> String {
    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    format!("{name}{{{}}}", labels.join(","))
}

fn requests(provider: &str, team: &str, decision: &str) -> String {
    series(
        "replaygate_requests_total",
        &[("provider", provider), ("team", team), ("decision", decision)],
    )
}

fn violations(reason: &str, action: &str, provider: &str, team: &str) -> String {
    series(
        "replaygate_violations_total",
        &[
            ("reason", reason),
            ("action", action),
            ("provider", provider),
            ("team", team),
        ],
    )
}

fn ledger(op: &str, result: &str) -> String {
    series(
        "replaygate_ledger_operations_total",
        &[("op", op), ("result", result)],
    )
}

fn bytes_out(provider: &str) -> String {
    series("replaygate_bytes_out_total", &[("provider", provider)])
}

fn histogram_count(name: &str, provider: &str) -> String {
    series(&format!("{name}_count"), &[("provider", provider)])
}

#[tokio::test]
async fn known_traffic_moves_exactly_the_counters_it_should() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let mut proxy = Proxy::start(&config(&upstream, ""), &[]).await;
    let admin = proxy.admin().await;
    let before = scrape(admin).await;
    assert_eq!(before.get("replaygate_in_flight_requests"), 0.0);
    assert_eq!(
        before.get(&series(
            "replaygate_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        )),
        1.0
    );

    let mut sent = 0usize;
    // Allowed, and its answer recorded.
    let (status, body) = post(&proxy, "/v1/responses", &[], r#"{"model":"gpt-5","input":"hi"}"#).await;
    assert_eq!(status, 200);
    sent += body.len();
    // Rejected, with two violations.
    let call = |id: &str| json!({"type":"function_call","call_id":id,"name":"f","arguments":"{}","status":"in_progress"});
    let rejected = json!({"model":"gpt-5","input":[call("c1"), call("c2")],"tools":serde_json::from_str::<Value>(TOOLS).unwrap()});
    let (status, body) = post(&proxy, "/v1/responses", &[], &rejected.to_string()).await;
    assert_eq!(status, 422, "{}", String::from_utf8_lossy(&body));
    sent += body.len();
    // Monitored (a call to a tool the request does not declare), and recorded.
    let monitored = json!({"model":"gpt-5","input":[
        {"type":"function_call","call_id":"c3","name":"nope","arguments":"{}","status":"completed"},
        {"type":"function_call_output","call_id":"c3","output":"x"}
    ],"tools":serde_json::from_str::<Value>(TOOLS).unwrap()});
    let (status, body) = post(&proxy, "/v1/responses", &[], &monitored.to_string()).await;
    assert_eq!(status, 200);
    sent += body.len();
    // Ledger lookups: a response it recorded (found), and one it never saw (a miss); both
    // answers are recorded too.
    for previous in ["resp_1", "resp_never_seen"] {
        let turn = json!({"model":"gpt-5","previous_response_id":previous,"input":"next"});
        let (status, body) = post(&proxy, "/v1/responses", &[], &turn.to_string()).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        sent += body.len();
    }
    // An upstream error.
    let (status, body) = post(
        &proxy,
        "/down/v1/responses",
        &[],
        r#"{"model":"gpt-5","input":"hi"}"#,
    )
    .await;
    assert_eq!(status, 502, "{}", String::from_utf8_lossy(&body));
    let sent_down = body.len();

    let after = scrape(admin).await;
    let expected: BTreeMap<String, f64> = [
        (requests("openai", "-", "allowed"), 3.0),
        (requests("openai", "-", "rejected"), 1.0),
        (requests("openai", "-", "monitored"), 1.0),
        (requests("down", "-", "error"), 1.0),
        (violations("status", "reject", "openai", "-"), 2.0),
        (violations("unknown_tool", "monitor", "openai", "-"), 1.0),
        (
            series(
                "replaygate_upstream_errors_total",
                &[("provider", "down"), ("code", "upstream_unavailable")],
            ),
            1.0,
        ),
        (ledger("record", "ok"), 4.0),
        (ledger("lookup", "ok"), 1.0),
        (ledger("lookup", "miss"), 1.0),
        (bytes_out("openai"), sent as f64),
        (bytes_out("down"), sent_down as f64),
        // The items of the rejected and the monitored request (the others send text).
        ("replaygate_gate_items_judged_total".to_owned(), 4.0),
        // Every forwarded answer is counted for usage; these report none (docs/usage.md).
        (
            series(
                "replaygate_usage_answers_total",
                &[
                    ("team", "-"),
                    ("provider", "openai"),
                    ("model", "gpt-5"),
                    ("usage", "missing"),
                ],
            ),
            4.0,
        ),
        (
            series(
                "replaygate_usage_answers_total",
                &[
                    ("team", "-"),
                    ("provider", "down"),
                    ("model", "gpt-5"),
                    ("usage", "missing"),
                ],
            ),
            1.0,
        ),
    ]
    .into_iter()
    .collect();
    assert_eq!(after.counter_deltas(&before), expected);

    let count = |name: &str, provider: &str| {
        after.get(&histogram_count(name, provider)) - before.get(&histogram_count(name, provider))
    };
    // Five requests to openai were judged (one refused) and four forwarded; one went to down.
    assert_eq!(count("replaygate_request_duration_seconds", "openai"), 5.0);
    assert_eq!(count("replaygate_stream_duration_seconds", "openai"), 5.0);
    assert_eq!(count("replaygate_gate_duration_seconds", "openai"), 5.0);
    assert_eq!(count("replaygate_upstream_duration_seconds", "openai"), 4.0);
    assert_eq!(count("replaygate_gate_duration_seconds", "down"), 1.0);
    assert_eq!(count("replaygate_request_duration_seconds", "down"), 1.0);
    assert_eq!(count("replaygate_upstream_duration_seconds", "down"), 0.0);
    // The buckets: 50 µs doubling to 52.4288 s, then 60 s and +Inf; cumulative, +Inf = count.
    let buckets: BTreeMap<u64, f64> = after
        .0
        .iter()
        .filter_map(|(series, value)| {
            let le = series
                .strip_prefix("replaygate_request_duration_seconds_bucket{le=\"")?
                .strip_suffix("\",provider=\"openai\"}")?;
            let bound: f64 = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap()
            };
            // Keyed by the bound in nanoseconds, so the map is in bucket order.
            Some(((bound * 1e9).min(u64::MAX as f64) as u64, *value))
        })
        .collect();
    let mut bounds: Vec<u64> = (0..21).map(|k| 50_000u64 << k).collect();
    bounds.extend([60_000_000_000, u64::MAX]);
    assert_eq!(buckets.keys().copied().collect::<Vec<_>>(), bounds);
    let counts: Vec<f64> = buckets.values().copied().collect();
    assert!(counts.windows(2).all(|pair| pair[0] <= pair[1]), "{counts:?}");
    assert_eq!(
        counts.last().copied(),
        Some(after.get(&histogram_count("replaygate_request_duration_seconds", "openai")))
    );
    assert_eq!(after.get("replaygate_in_flight_requests"), 0.0);
}

#[tokio::test]
async fn a_team_s_requests_and_violations_carry_its_name() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let teams = format!("[teams.payments]\nkeys = [\"{}\"]\n", key_entry(PAY_KEY));
    let mut proxy = Proxy::start(&config(&upstream, &teams), &[]).await;
    let admin = proxy.admin().await;
    let before = scrape(admin).await;
    let key = bearer(PAY_KEY);
    let (status, _) = post(
        &proxy,
        "/v1/responses",
        &[("authorization", &key)],
        r#"{"model":"gpt-5","input":"hi"}"#,
    )
    .await;
    assert_eq!(status, 200);
    let call = |id: &str| json!({"type":"function_call","call_id":id,"name":"f","arguments":"{}","status":"in_progress"});
    let rejected = json!({"model":"gpt-5","input":[call("c1"), call("c2")],"tools":serde_json::from_str::<Value>(TOOLS).unwrap()});
    let (status, _) = post(
        &proxy,
        "/v1/responses",
        &[("authorization", &key)],
        &rejected.to_string(),
    )
    .await;
    assert_eq!(status, 422);
    // No key: refused before any provider is chosen.
    let (status, body) = post(&proxy, "/v1/responses", &[], r#"{"model":"gpt-5","input":"hi"}"#).await;
    assert_eq!(status, 401);

    let after = scrape(admin).await;
    let deltas = after.counter_deltas(&before);
    assert_eq!(deltas.get(&requests("openai", "payments", "allowed")), Some(&1.0));
    assert_eq!(
        deltas.get(&requests("openai", "payments", "rejected")),
        Some(&1.0)
    );
    assert_eq!(deltas.get(&requests("-", "-", "error")), Some(&1.0));
    assert_eq!(
        deltas.get(&violations("status", "reject", "openai", "payments")),
        Some(&2.0)
    );
    assert_eq!(deltas.get(&bytes_out("-")), Some(&(body.len() as f64)));
    let request_series: Vec<&String> = deltas
        .keys()
        .filter(|series| series.starts_with("replaygate_requests_total"))
        .collect();
    assert_eq!(request_series.len(), 3, "{deltas:?}");
}

#[tokio::test]
async fn health_readiness_and_nothing_else() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let mut proxy = Proxy::start(&config(&upstream, ""), &[]).await;
    let admin = proxy.admin().await;
    let (status, _, body) = get(admin, "/healthz").await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let (status, content_type, body) = get(admin, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(content_type, "application/json");
    let ready: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        ready,
        serde_json::json!({"ready": true, "draining": false, "state": {"backend": "memory", "ok": true, "on_unavailable": "refuse"}})
    );

    for path in ["/", "/metrics/", "/v1/responses", "/healthz?x=1&y"] {
        let (status, content_type, body) = get(admin, path).await;
        let want = if path.starts_with("/healthz") { 200 } else { 404 };
        assert_eq!(status, want, "{path}: {body}");
        assert!(content_type.starts_with("text/plain"), "{path}: {content_type}");
    }
    for path in ["/metrics", "/healthz", "/readyz", "/usage"] {
        let response = reqwest::Client::new()
            .post(format!("http://{admin}{path}"))
            .body("x")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 405, "{path}");
        assert_eq!(response.headers()["allow"], "GET");
    }
    let response = reqwest::Client::new()
        .delete(format!("http://{admin}/nowhere"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 404);

    // The proxy's port serves no admin path: it is the provider's namespace.
    let proxied = reqwest::get(proxy.url("/metrics")).await.unwrap();
    assert_ne!(
        proxied.headers().get("content-type").map(|v| v.to_str().unwrap()),
        Some(replaygate::metrics::CONTENT_TYPE)
    );

    // Shutting down draining: not ready any more.
    proxy.admin_state.drain();
    let (status, _, body) = get(admin, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    let ready: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        ready,
        serde_json::json!({"ready": false, "draining": true, "state": {"backend": "memory", "ok": true, "on_unavailable": "refuse"}})
    );
}

#[tokio::test]
async fn the_embedded_stores_writer_counts_each_record_it_commits() {
    // The embedded store (the default backend) takes a record without the answer waiting for
    // its commit; the count comes from its writer thread, once the commit ends.
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let dir = tempfile::tempdir().unwrap();
    let text = config(&upstream, "").replace(
        "backend = \"memory\"",
        &format!("backend = \"embedded\"\npath = \"{}\"", dir.path().display()),
    );
    assert!(text.contains("\"embedded\""), "{text}");
    let mut proxy = Proxy::start(&text, &[]).await;
    let admin = proxy.admin().await;
    let before = scrape(admin).await;
    for _ in 0..3 {
        let (status, _) = post(&proxy, "/v1/responses", &[], r#"{"model":"gpt-5","input":"hi"}"#).await;
        assert_eq!(status, 200);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let deltas = loop {
        let deltas = scrape(admin).await.counter_deltas(&before);
        if deltas.get(&ledger("record", "ok")) == Some(&3.0) || tokio::time::Instant::now() > deadline {
            break deltas;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(deltas.get(&ledger("record", "ok")), Some(&3.0), "{deltas:?}");
    assert_eq!(deltas.get(&ledger("record", "error")), None, "{deltas:?}");
}

#[tokio::test]
async fn a_state_backend_that_is_down_is_not_ready_and_its_ledger_errors_are_counted() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let state = format!(
        "[state]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:{}\"\ntimeout = \"200ms\"\n",
        closed_port()
    );
    let text = format!(
        "default_provider = \"openai\"\n{state}[providers.openai]\nbase_url = \"{}\"\nauth = \"none\"\n",
        upstream.base_url()
    );
    let mut proxy = Proxy::start(&text, &[]).await;
    let admin = proxy.admin().await;
    let (status, _, body) = get(admin, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    let ready: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (&ready["ready"], &ready["draining"]),
        (&false.into(), &false.into()),
        "{body}"
    );
    assert_eq!(ready["state"]["backend"], "redis", "{body}");
    assert_eq!(ready["state"]["ok"], false, "{body}");
    let error = ready["state"]["error"].as_str().unwrap();
    assert!(
        error.contains("the state backend is unavailable: redis"),
        "{error}"
    );
    let (status, _, _) = get(admin, "/healthz").await;
    assert_eq!(status, 200, "alive, if not ready");
    // The usage it cannot read is a 503 that says so, never a report of nothing.
    let (status, content_type, body) = get(admin, "/usage").await;
    assert_eq!(
        (status, content_type.as_str()),
        (503, "application/json"),
        "{body}"
    );
    let usage: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(usage["error"]["code"], "state_unavailable", "{body}");
    assert!(
        usage["error"]["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );

    let before = scrape(admin).await;
    // A turn that names no id is answered; its record cannot be written.
    let (status, _) = post(&proxy, "/v1/responses", &[], r#"{"model":"gpt-5","input":"hi"}"#).await;
    assert_eq!(status, 200);
    // One that names a response must be looked up: refused.
    let turn = r#"{"model":"gpt-5","previous_response_id":"resp_1","input":"next"}"#;
    let (status, _) = post(&proxy, "/v1/responses", &[], turn).await;
    assert_eq!(status, 503);
    let deltas = scrape(admin).await.counter_deltas(&before);
    assert_eq!(deltas.get(&ledger("record", "error")), Some(&1.0), "{deltas:?}");
    assert_eq!(deltas.get(&ledger("lookup", "error")), Some(&1.0), "{deltas:?}");
    // Refused before the judge phase chose for good: no provider, as in the access line.
    assert_eq!(deltas.get(&requests("-", "-", "error")), Some(&1.0), "{deltas:?}");
    assert_eq!(
        deltas.get(&requests("openai", "-", "allowed")),
        Some(&1.0),
        "{deltas:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrapes_during_reloads_are_whole_and_reloads_are_counted() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.toml");
    let base = config(&upstream, "");
    std::fs::write(&path, &base).unwrap();
    let loaded = replaygate::config::Config::load(&path).unwrap();
    let mut proxy = Proxy::start_with(&loaded, &[]).await;
    let admin = proxy.admin().await;
    let before = scrape(admin).await;

    let scraping = tokio::spawn(async move {
        let mut scrapes = 0;
        let started = Instant::now();
        while scrapes < 300 && started.elapsed() < Duration::from_secs(20) {
            let (status, _, text) = get(admin, "/metrics").await;
            assert_eq!(status, 200);
            if let Err(error) = Scrape::parse(&text) {
                panic!("scrape {scrapes} during reloads: {error}");
            }
            scrapes += 1;
        }
        scrapes
    });
    let mut reload =
        replaygate::reload::ConfigReload::new(Some(path.clone()), proxy.reloader.clone(), loaded);
    let (mut ok, mut failed) = (0.0, 0.0);
    for round in 0..40 {
        let text = match round % 4 {
            // More providers and teams: new series while scrapes read the families.
            0 => format!(
                "{base}[providers.extra{round}]\nbase_url = \"{}\"\nauth = \"none\"\n[teams.t{round}]\nkeys = [\"{}\"]\n",
                upstream.base_url(),
                key_entry(&format!("rg-{round}"))
            ),
            1 => base.clone(),
            2 => "[providers.openai]\nbase_url = 7\n".to_owned(),
            _ => base.replace("connect_timeout_ms = 2000", "connect_timeout_ms = 3000"),
        };
        std::fs::write(&path, text).unwrap();
        if reload.reload("test") {
            ok += 1.0;
        } else {
            failed += 1.0;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!((ok, failed), (30.0, 10.0));
    assert!(scraping.await.unwrap() > 0);
    let deltas = scrape(admin).await.counter_deltas(&before);
    let reloads = |result: &str| {
        deltas
            .get(&series("replaygate_config_reloads_total", &[("result", result)]))
            .copied()
    };
    assert_eq!(reloads("ok"), Some(ok));
    assert_eq!(reloads("error"), Some(failed));
}

#[tokio::test]
async fn a_1_mib_model_name_mints_no_label_value() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    // No default provider: an unroutable model is answered 404 with no provider chosen.
    let text = config(
        &upstream,
        "[[routes]]\nmodel = \"gpt-*\"\nprovider = \"openai\"\n",
    )
    .replace("default_provider = \"openai\"\n", "");
    let mut proxy = Proxy::start(&text, &[]).await;
    let admin = proxy.admin().await;
    let model = "m".repeat(1 << 20);
    let body = json!({"model": model, "input": "hi"}).to_string();
    let (status, _) = post(&proxy, "/v1/responses", &[], &body).await;
    assert_eq!(status, 404);
    let routed = json!({"model": format!("gpt-{model}"), "input": "hi"}).to_string();
    let (status, _) = post(&proxy, "/v1/responses", &[], &routed).await;
    assert_eq!(status, 200);
    // A long provider prefix (within the 64 KiB a request head may take) names no provider.
    let prefix = "p".repeat(16 << 10);
    let (status, _) = post(&proxy, &format!("/{prefix}/v1/responses"), &[], "{}").await;
    assert_eq!(status, 404);

    let (_, _, text) = get(admin, "/metrics").await;
    assert!(text.len() < 64 * 1024, "{} bytes", text.len());
    assert!(!text.contains("mmmmmmmm") && !text.contains("pppppppp"));
    let scrape = Scrape::parse(&text).unwrap();
    let providers = scrape.label_values("provider");
    let allowed: BTreeSet<String> = ["openai", "down", "-"].into_iter().map(str::to_owned).collect();
    assert!(providers.is_subset(&allowed), "{providers:?}");
    assert_eq!(scrape.get(&requests("-", "-", "error")), 2.0, "{text}");
    assert_eq!(scrape.get(&requests("openai", "-", "allowed")), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_scrapes_leave_the_proxy_answering() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let mut proxy = Proxy::start(&config(&upstream, ""), &[]).await;
    let admin = proxy.admin().await;
    // The scrapers are clients of their own (another thread and runtime), 40 at once.
    let scrapers = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let started = Instant::now();
            let tasks: Vec<_> = (0..40)
                .map(|_| {
                    tokio::spawn(async move {
                        let client = reqwest::Client::new();
                        for _ in 0..50 {
                            let response = client
                                .get(format!("http://{admin}/metrics"))
                                .send()
                                .await
                                .unwrap();
                            assert_eq!(response.status().as_u16(), 200);
                            assert!(response.text().await.unwrap().ends_with("# EOF\n"));
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
            started.elapsed()
        })
    });
    let mut slowest = Duration::ZERO;
    let mut answered = 0;
    while !scrapers.is_finished() && answered < 5000 {
        let sent = Instant::now();
        let (status, _) = post(&proxy, "/v1/responses", &[], r#"{"model":"gpt-5","input":"hi"}"#).await;
        assert_eq!(status, 200);
        slowest = slowest.max(sent.elapsed());
        answered += 1;
    }
    let took = scrapers.join().unwrap();
    assert!(answered > 0);
    assert!(
        slowest < Duration::from_secs(1),
        "a proxied request took {slowest:?} during the scrapes"
    );
    // The admin listener keeps its pace: 2,000 requests take at least 1.9 s at 1,000 a second
    // after a burst of 100.
    assert!(took >= Duration::from_millis(1800), "2,000 scrapes in {took:?}");
    let after = scrape(admin).await;
    assert_eq!(after.get(&requests("openai", "-", "allowed")), answered as f64);
}

#[tokio::test]
async fn a_stream_is_in_flight_until_its_last_byte() {
    let (upstream, mut streams) = Upstream::sse_feed().await;
    let mut proxy = Proxy::start(&config(&upstream, ""), &[]).await;
    let admin = proxy.admin().await;
    let mut response = reqwest::Client::new()
        .post(proxy.url("/v1/responses"))
        .header("content-type", "application/json")
        .body(r#"{"model":"gpt-5","input":"hi","stream":true}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let events = tokio::time::timeout(Duration::from_secs(10), streams.recv())
        .await
        .unwrap()
        .unwrap();
    events
        .send(bytes::Bytes::from_static(
            b"event: response.created\ndata: {}\n\n",
        ))
        .await
        .unwrap();
    let chunk = tokio::time::timeout(Duration::from_secs(10), response.chunk())
        .await
        .unwrap()
        .unwrap();
    assert!(chunk.is_some());
    let open = scrape(admin).await;
    assert_eq!(open.get("replaygate_in_flight_requests"), 1.0);
    assert_eq!(
        open.get(&requests("openai", "-", "allowed")),
        0.0,
        "counted at its end"
    );

    drop(events);
    while tokio::time::timeout(Duration::from_secs(10), response.chunk())
        .await
        .unwrap()
        .unwrap()
        .is_some()
    {}
    let started = Instant::now();
    loop {
        let done = scrape(admin).await;
        if done.get("replaygate_in_flight_requests") == 0.0 {
            assert_eq!(done.get(&requests("openai", "-", "allowed")), 1.0);
            assert_eq!(
                done.get(&histogram_count("replaygate_stream_duration_seconds", "openai")),
                1.0
            );
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "still in flight");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_the_admin_listener_counts_sighup_reloads_and_stops_it() {
    use crate::support::serve::Serve;

    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.toml");
    let text = format!(
        "default_provider = \"openai\"\n[server]\nworkers = 2\n[admin]\nlisten = \"127.0.0.1:0\"\n[state]\nbackend = \"memory\"\n[providers.openai]\nbase_url = \"{}\"\nauth = \"none\"\n",
        upstream.base_url()
    );
    std::fs::write(&path, &text).unwrap();
    let mut serve = Serve::start(Serve::command(&path)).await;
    let line = serve.until_logged("admin listening").await;
    let at = line.find("address=").expect("the admin address is logged") + 8;
    let admin: SocketAddr = line[at..].split_whitespace().next().unwrap().parse().unwrap();
    assert_ne!(admin.to_string(), serve.address);
    assert_eq!(get(admin, "/readyz").await.0, 200);

    let (status, _) = {
        let response = reqwest::Client::new()
            .post(format!("http://{}/v1/responses", serve.address))
            .body(r#"{"model":"gpt-5","input":"hi"}"#)
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), ())
    };
    assert_eq!(status, 200);
    let reloads = |scrape: &Scrape, result: &str| {
        scrape.get(&series("replaygate_config_reloads_total", &[("result", result)]))
    };
    serve.signal("-HUP");
    serve.until_logged("configuration reloaded").await;
    std::fs::write(&path, "[providers.openai]\nbase_url = 7\n").unwrap();
    serve.signal("-HUP");
    serve.until_logged("configuration not reloaded").await;
    let scraped = scrape(admin).await;
    assert_eq!((reloads(&scraped, "ok"), reloads(&scraped, "error")), (1.0, 1.0));
    assert_eq!(scraped.get(&requests("openai", "-", "allowed")), 1.0);

    serve.signal("-TERM");
    let status = serve
        .exited_within(Duration::from_secs(15))
        .await
        .expect("serve exited");
    assert!(status.success(), "{status:?}");
    assert!(
        std::net::TcpStream::connect_timeout(&admin, Duration::from_secs(1)).is_err(),
        "the admin listener stopped with the proxy"
    );
}

#[test]
fn the_admin_listener_may_not_take_the_proxy_s_port() {
    let text = |admin: &str| {
        format!(
            "[server]\nlisten = \"127.0.0.1:8080\"\n[admin]\nlisten = \"{admin}\"\n[providers.openai]\nbase_url = \"https://api.openai.com/v1\"\n"
        )
    };
    for same in ["127.0.0.1:8080", "0.0.0.0:8080"] {
        let error = replaygate::config::Config::from_toml(&text(same))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("line 4, column 10") && error.contains("port of its own"),
            "{error}"
        );
    }
    for other in ["127.0.0.1:9090", "127.0.0.2:8080", "127.0.0.1:0"] {
        let config = replaygate::config::Config::from_toml(&text(other)).unwrap();
        assert_eq!(config.admin.listen, Some(other.parse().unwrap()));
    }
    let error = replaygate::config::Config::from_toml(
        "[admin]\nlisten = \"127.0.0.1:9090\"\nport = 1\n[providers.openai]\nbase_url = \"https://api.openai.com/v1\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("port") && error.contains("line 3"), "{error}");
    let off =
        replaygate::config::Config::from_toml("[providers.openai]\nbase_url = \"https://a.example/v1\"\n")
            .unwrap();
    assert_eq!(off.admin.listen, None, "off unless set");
}
