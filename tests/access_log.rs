//! The access log: one JSON line per request with what an operator needs, and never a key.

mod support;

use replaygate::config::{LogConfig, LogFormat};
use serde_json::Value;
use support::log_capture::Captured;
use support::proxy::Proxy;
use support::upstream::{Upstream, RESPONSE_JSON};

const PROVIDER_KEY: &str = "sk-provider-secret-4242";
const CLIENT_KEY: &str = "sk-client-secret-1717";

#[tokio::test]
async fn each_request_logs_one_json_line_and_no_key() {
    let captured = Captured::default();
    let sink = captured.clone();
    let log = LogConfig {
        format: LogFormat::Json,
        level: "info".into(),
    };
    replaygate::telemetry::install(&log, move || sink.clone(), false);

    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let config = format!(
        "default_provider = \"openai\"\n[providers.openai]\nbase_url = \"{}\"\nauth = {{ bearer_env = \"KEY\" }}\n",
        upstream.base_url()
    );
    let proxy = Proxy::start(&config, &[("KEY", PROVIDER_KEY)]).await;
    let client = reqwest::Client::new();
    let send = |body: &'static str| {
        client
            .post(proxy.url("/v1/responses"))
            .header("authorization", format!("Bearer {CLIENT_KEY}"))
            .header("x-request-id", "req-from-client")
            .body(body)
            .send()
    };
    assert_eq!(
        send(r#"{"model":"gpt-5","input":"hi"}"#).await.unwrap().status(),
        200
    );
    let refused = send(
        r#"{"model":"gpt-5","input":[{"type":"function_call_output","call_id":"c9","output":"x"},{"type":"acme:x"}]}"#,
    );
    assert_eq!(refused.await.unwrap().status(), 422);
    proxy.shutdown().await;

    let text = captured.text();
    assert!(!text.contains(PROVIDER_KEY), "the provider key reached the log");
    assert!(!text.contains(CLIENT_KEY), "the client key reached the log");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|l: &Value| l["target"] == "replaygate::access")
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0]["request_id"], "req-from-client");
    assert_eq!(lines[0]["provider"], "openai");
    assert_eq!(lines[0]["model"], "gpt-5");
    assert_eq!(lines[0]["decision"], "allowed");
    assert_eq!(lines[0]["status"], 200);
    assert_eq!(lines[0]["upstream_status"], "200");
    assert!(lines[0]["latency_ms"].as_str().unwrap().parse::<f64>().unwrap() >= 0.0);
    assert_eq!(lines[1]["decision"], "rejected");
    assert_eq!(lines[1]["reasons"], "call_id_mismatch,namespaced");
    assert_eq!(lines[1]["status"], 422);
}
