//! Every refusal of docs/answers.md's table, each in the OpenAI error envelope.

use crate::support;

use std::time::Duration;

use support::proxy::{one_provider, Proxy};
use support::upstream::{Upstream, RESPONSE_JSON};

const SCHEMA_VIOLATION: &str = r#"{"model":"gpt-5","tools":[{"type":"function","name":"get_latest_sales_report","parameters":{"type":"object","additionalProperties":false,"required":["region"],"properties":{"region":{"type":"string","enum":["apac","emea","amer"]}}}}],
"input":[{"type":"message","role":"user","content":"hi"},{"type":"function_call","id":"fc_009","name":"get_latest_sales_report","call_id":"call_129","arguments":"{\"region\":\"global\"}","status":"completed"},{"type":"openai:web_search_call","id":"ws_1","status":"completed"}]}"#;

#[tokio::test]
async fn violations_get_422_listing_every_one_and_nothing_is_forwarded() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let config = format!(
        "{}\n[providers.bedrock]\nbase_url = \"{}\"\n",
        one_provider(&upstream.base_url(), "\"passthrough\"", ""),
        upstream.base_url()
    );
    let proxy = Proxy::start(&config, &[]).await;
    let (status, body) = proxy.post_json("/bedrock/v1/responses", SCHEMA_VIOLATION).await;
    assert_eq!(status, 422);
    let error = &body["error"];
    assert_eq!(error["type"], "invalid_request_error");
    assert_eq!(error["code"], "arguments_schema");
    assert_eq!(error["param"], "input[1].arguments");
    let violations = error["violations"].as_array().unwrap();
    assert_eq!(violations.len(), 2);
    assert_eq!(violations[0]["pointer"], "/region");
    assert_eq!(violations[0]["id"], "fc_009");
    assert_eq!(violations[1]["reason"], "namespaced");
    assert_eq!(violations[1]["index"], 2);
    assert!(error["message"].as_str().unwrap().contains("bedrock"));
    assert!(
        upstream.received().is_empty(),
        "a refused request reached the provider"
    );
}

#[tokio::test]
async fn bad_json_and_bad_input_get_400() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
    let (status, body) = proxy.post_json("/v1/responses", "{\"input\": [").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_json"))
    );
    let (status, body) = proxy
        .post_json("/v1/responses", &b"{\"input\":\"\xff\"}"[..])
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_json"))
    );
    let (status, body) = proxy
        .post_json("/v1/responses", r#"{"model":"gpt-5","input":{"role":"user"}}"#)
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "invalid_input");
    assert_eq!(body["error"]["param"], "input");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(upstream.received().is_empty());
}

#[tokio::test]
async fn oversize_bodies_get_413_with_and_without_content_length() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let config = one_provider(&upstream.base_url(), "\"passthrough\"", "").replacen(
        "[providers.openai]",
        "[server]\nmax_body_bytes = 1024\n\n[providers.openai]",
        1,
    );
    let proxy = Proxy::start(&config, &[]).await;
    let big = format!(r#"{{"model":"gpt-5","input":"{}"}}"#, "x".repeat(4096));

    let (status, body) = proxy.post_json("/v1/responses", big.clone()).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (413, Some("body_too_large"))
    );

    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        big.as_bytes().chunks(512).map(|c| Ok(c.to_vec())).collect();
    let stream = tokio_stream::iter(chunks);
    let (status, body) = proxy
        .post_json("/v1/responses", reqwest::Body::wrap_stream(stream))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (413, Some("body_too_large"))
    );
    assert!(upstream.received().is_empty());
}

#[tokio::test]
async fn an_unknown_provider_prefix_gets_404() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
    let (status, body) = proxy
        .post_json("/nope/v1/responses", r#"{"model":"gpt-5","input":"hi"}"#)
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("unknown_provider"))
    );
    assert!(upstream.received().is_empty());
}

#[tokio::test]
async fn no_route_and_no_default_gets_404() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let config = format!(
        "[providers.openai]\nbase_url = \"{}\"\n\n[[routes]]\nmodel = \"gpt-*\"\nprovider = \"openai\"\n",
        upstream.base_url()
    );
    let proxy = Proxy::start(&config, &[]).await;
    let (status, body) = proxy
        .post_json("/v1/responses", r#"{"model":"claude-x","input":"hi"}"#)
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("unknown_provider"))
    );
    let (status, _) = proxy
        .post_json("/v1/responses", r#"{"model":"gpt-5","input":"hi"}"#)
        .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn an_unset_key_gets_503_naming_the_variable_while_the_gate_keeps_working() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let config = one_provider(&upstream.base_url(), r#"{ bearer_env = "UNSET_TEST_KEY" }"#, "");
    let proxy = Proxy::start(&config, &[]).await;
    let (status, body) = proxy
        .post_json("/v1/responses", r#"{"model":"gpt-5","input":"hi"}"#)
        .await;
    assert_eq!(status, 503);
    assert_eq!(body["error"]["type"], "server_error");
    assert_eq!(body["error"]["code"], "provider_unconfigured");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("UNSET_TEST_KEY"));
    let (status, body) = proxy
        .post_json(
            "/v1/responses",
            r#"{"model":"gpt-5","input":[{"type":"function_call_output","call_id":"nope","output":"x"}]}"#,
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (422, Some("call_id_mismatch"))
    );
    assert!(upstream.received().is_empty());
}

#[tokio::test]
async fn the_closed_port_refuses_connections_and_no_listener_can_take_it() {
    let port = support::closed_port::closed_port();
    let refused = tokio::net::TcpStream::connect(("127.0.0.1", port)).await;
    assert_eq!(
        refused.map(drop).map_err(|e| e.kind()),
        Err(std::io::ErrorKind::ConnectionRefused)
    );
    assert!(std::net::TcpListener::bind(("127.0.0.1", port)).is_err());
}

#[tokio::test]
async fn an_unreachable_upstream_gets_502() {
    let port = support::closed_port::closed_port();
    let proxy = Proxy::start(
        &one_provider(&format!("http://127.0.0.1:{port}/v1"), "\"passthrough\"", ""),
        &[],
    )
    .await;
    let (status, body) = proxy
        .post_json("/v1/responses", r#"{"model":"gpt-5","input":"hi"}"#)
        .await;
    assert_eq!(status, 502);
    assert_eq!(body["error"]["type"], "server_error");
    assert_eq!(body["error"]["code"], "upstream_unavailable");
}

#[tokio::test]
async fn an_upstream_that_never_answers_gets_504() {
    let upstream = Upstream::start(|_| async {
        tokio::time::sleep(Duration::from_secs(30)).await;
        support::upstream::json_response(200, RESPONSE_JSON)
    })
    .await;
    let config = one_provider(&upstream.base_url(), "\"passthrough\"", "read_timeout_ms = 300");
    let proxy = Proxy::start(&config, &[]).await;
    let started = std::time::Instant::now();
    let (status, body) = proxy
        .post_json("/v1/responses", r#"{"model":"gpt-5","input":"hi"}"#)
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (504, Some("upstream_timeout"))
    );
    // Not before the configured read timeout, and not much after it.
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(250) && elapsed < Duration::from_secs(10),
        "answered after {elapsed:?}"
    );
}

#[tokio::test]
async fn a_request_head_over_64_kib_gets_431_and_a_smaller_one_is_forwarded() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
    let body = r#"{"model":"gpt-5","input":"hi"}"#;
    let head = |filler: usize| {
        format!(
            "POST /v1/responses HTTP/1.1\r\nhost: x\r\nx-filler: {}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            "a".repeat(filler),
            body.len()
        )
    };
    let big = support::proxy::raw_request(proxy.addr, head(70_000).as_bytes()).await;
    assert!(big.starts_with("HTTP/1.1 431"), "{}", &big[..big.len().min(200)]);
    let fine = support::proxy::raw_request(proxy.addr, head(60_000).as_bytes()).await;
    assert!(
        fine.starts_with("HTTP/1.1 200"),
        "{}",
        &fine[..fine.len().min(200)]
    );
    assert_eq!(upstream.received().len(), 1);
}
