//! No key reaches the logs: a full run (allowed, refused, failed, streamed, ungated, HTTP/1
//! and HTTP/2; bearer, header and SigV4 credentials) is logged at the most verbose level,
//! libraries included, and searched for every client and provider key.
//!
//! A file of its own: the log subscriber is global to the test process.

mod support;

use std::time::Duration;

use bytes::Bytes;
use replaygate::config::{LogConfig, LogFormat};
use support::log_capture::Captured;
use support::proxy::Proxy;
use support::upstream::{Upstream, RESPONSE_JSON};

const OPENAI_KEY: &str = "sk-provider-openai-31337";
const BEDROCK_KEY: &str = "ABSK-provider-bedrock-27182";
const AZURE_KEY: &str = "provider-azure-api-key-16180";
const AWS_SECRET: &str = "provider-aws-secret-14142";
const AWS_TOKEN: &str = "provider-aws-session-token-17320";
const CLIENT_KEYS: [&str; 4] = [
    "sk-client-authorization-1111",
    "sk-client-x-api-key-2222",
    "sk-client-api-key-3333",
    "org-client-4444",
];

#[tokio::test]
async fn no_key_reaches_the_logs_at_any_level() {
    std::env::remove_var("RUST_LOG");
    let captured = Captured::default();
    let sink = captured.clone();
    let log = LogConfig {
        format: LogFormat::Json,
        level: "trace".into(),
    };
    replaygate::telemetry::install(&log, move || sink.clone(), false);

    let (streaming, mut feeds) = Upstream::sse_feed().await;
    let plain = Upstream::json(200, RESPONSE_JSON).await;
    let dead_port = support::closed_port::closed_port();
    let config = format!(
        r#"default_provider = "openai"
[providers.openai]
base_url = "{}"
auth = {{ bearer_env = "OPENAI_KEY" }}

[providers.streaming]
base_url = "{}"
auth = {{ bearer_env = "BEDROCK_KEY" }}

[providers.passthrough]
base_url = "{}"
auth = "passthrough"

[providers.down]
base_url = "http://127.0.0.1:{dead_port}/v1"
auth = {{ bearer_env = "OPENAI_KEY" }}

[providers.unset]
base_url = "{}"
auth = {{ bearer_env = "UNSET_KEY" }}

[providers.azure]
base_url = "{}"
auth = {{ header_env = {{ name = "api-key", var = "AZURE_KEY" }} }}

[providers.aws]
base_url = "{}"
auth = {{ aws_sigv4 = {{ region = "us-east-1", service = "bedrock" }} }}
"#,
        plain.base_url(),
        streaming.base_url(),
        plain.base_url(),
        plain.base_url(),
        plain.base_url(),
        plain.base_url(),
    );
    let proxy = Proxy::start(
        &config,
        &[
            ("OPENAI_KEY", OPENAI_KEY),
            ("BEDROCK_KEY", BEDROCK_KEY),
            ("AZURE_KEY", AZURE_KEY),
            ("AWS_ACCESS_KEY_ID", "AKIDLOGTEST"),
            ("AWS_SECRET_ACCESS_KEY", AWS_SECRET),
            ("AWS_SESSION_TOKEN", AWS_TOKEN),
        ],
    )
    .await;

    for http2 in [false, true] {
        let mut builder = reqwest::Client::builder();
        if http2 {
            builder = builder.http2_prior_knowledge();
        }
        let client = builder.build().unwrap();
        let send = |method: &str, path: &str, body: &'static str| {
            client
                .request(method.parse().unwrap(), proxy.url(path))
                .header("authorization", format!("Bearer {}", CLIENT_KEYS[0]))
                .header("x-api-key", CLIENT_KEYS[1])
                .header("api-key", CLIENT_KEYS[2])
                .header("openai-organization", CLIENT_KEYS[3])
                .header("content-type", "application/json")
                .body(body)
                .send()
        };
        let allowed = r#"{"model":"gpt-5","input":"hi"}"#;
        let cases = [
            ("POST", "/v1/responses", allowed, 200),
            (
                "POST",
                "/v1/responses",
                r#"{"model":"gpt-5","input":[{"type":"acme:x"}]}"#,
                422,
            ),
            ("POST", "/v1/responses", "{not json", 400),
            ("POST", "/nope/v1/responses", allowed, 404),
            ("POST", "/openai%2fv1/responses", allowed, 400),
            ("POST", "/down/v1/responses", allowed, 502),
            ("POST", "/unset/v1/responses", allowed, 503),
            ("POST", "/passthrough/v1/responses", allowed, 200),
            ("POST", "/azure/v1/responses", allowed, 200),
            ("POST", "/aws/v1/responses", allowed, 200),
            ("GET", "/v1/models", "", 200),
            ("GET", "/passthrough/v1/models", "", 200),
        ];
        for (method, path, body, status) in cases {
            let response = send(method, path, body).await.unwrap();
            assert_eq!(
                response.status().as_u16(),
                status,
                "{method} {path} over HTTP/2: {http2}"
            );
            response.bytes().await.unwrap();
        }

        // A stream, fed after its head went out.
        let streamed = tokio::spawn(send(
            "POST",
            "/streaming/v1/responses",
            r#"{"model":"m","stream":true,"input":"hi"}"#,
        ));
        let feed = tokio::time::timeout(Duration::from_secs(5), feeds.recv())
            .await
            .unwrap()
            .unwrap();
        feed.send(Bytes::from_static(b"event: response.created\ndata: {}\n\n"))
            .await
            .unwrap();
        drop(feed);
        let response = streamed.await.unwrap().unwrap();
        assert_eq!(response.status(), 200);
        response.bytes().await.unwrap();
    }
    proxy.shutdown().await;

    let text = captured.text();
    let access_lines = text.lines().filter(|l| l.contains("replaygate::access")).count();
    assert_eq!(access_lines, 26, "expected one access line per request:\n{text}");
    // The libraries' own trace lines were captured too (HTTP/1, HTTP/2, the upstream client).
    for library in ["\"target\":\"hyper", "\"target\":\"h2", "\"target\":\"reqwest"] {
        assert!(
            text.contains(library),
            "no {library} lines: the capture is not verbose"
        );
    }
    for key in CLIENT_KEYS
        .iter()
        .chain([&OPENAI_KEY, &BEDROCK_KEY, &AZURE_KEY, &AWS_SECRET, &AWS_TOKEN])
    {
        if let Some(line) = text.lines().find(|line| line.contains(key)) {
            panic!("`{key}` reached the log:\n{line}");
        }
    }
}
