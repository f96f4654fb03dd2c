//! Who gets what: a client key never reaches a provider that has a key of its own, on any
//! path, no request target or header can steer a request to a host outside the config, and no
//! path prefix sends a model to a provider that none of its routes names.
//!
//! (The basic cases are in `proxy_forwarding.rs` and `proxy_routing.rs`.)

use crate::support;

use support::proxy::{raw_request, Proxy};
use support::upstream::{Upstream, RESPONSE_JSON};

const PROVIDER_KEY: &str = "sk-provider-own-5150";
const CLIENT_KEY: &str = "sk-client-secret-8086";

/// `openai` (default, own key) and `local` (passthrough) in front of two fake providers, and a
/// third fake provider, `rogue`, that is in no config: nothing may ever reach it.
struct Setup {
    openai: Upstream,
    local: Upstream,
    rogue: Upstream,
    proxy: Proxy,
}

async fn setup() -> Setup {
    let openai = Upstream::json(200, RESPONSE_JSON).await;
    let local = Upstream::json(200, RESPONSE_JSON).await;
    let rogue = Upstream::json(200, RESPONSE_JSON).await;
    let config = format!(
        r#"default_provider = "openai"
[providers.openai]
base_url = "{}"
auth = {{ bearer_env = "KEY" }}

[providers.local]
base_url = "{}"
auth = "passthrough"
"#,
        openai.base_url(),
        local.base_url()
    );
    let proxy = Proxy::start(&config, &[("KEY", PROVIDER_KEY)]).await;
    Setup {
        openai,
        local,
        rogue,
        proxy,
    }
}

#[tokio::test]
async fn a_client_key_never_reaches_a_provider_with_its_own_on_any_path() {
    let s = setup().await;
    for http2 in [false, true] {
        let mut client = reqwest::Client::builder();
        if http2 {
            client = client.http2_prior_knowledge();
        }
        let client = client.build().unwrap();
        for (method, path, body) in [
            ("GET", "/v1/models", ""),
            ("GET", "/openai/v1/models", ""),
            ("GET", "/models", ""),
            (
                "POST",
                "/openai/v1/responses",
                r#"{"model":"gpt-5","input":"hi"}"#,
            ),
            (
                "POST",
                "/openai/v1/responses/compact",
                r#"{"model":"gpt-5","input":"hi"}"#,
            ),
            (
                "POST",
                "/v1/chat/completions",
                r#"{"model":"gpt-5","messages":[]}"#,
            ),
            ("DELETE", "/openai/v1/responses/resp_1", ""),
        ] {
            let response = client
                .request(method.parse().unwrap(), s.proxy.url(path))
                .header("authorization", format!("Bearer {CLIENT_KEY}"))
                .header("x-api-key", CLIENT_KEY)
                .header("api-key", CLIENT_KEY)
                .header("openai-organization", "org-client")
                .header("openai-project", "proj-client")
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200, "{method} {path}");
        }
    }
    let received = s.openai.received();
    assert_eq!(received.len(), 14);
    for request in &received {
        let auth: Vec<_> = request.headers.get_all("authorization").iter().collect();
        assert_eq!(
            auth,
            [format!("Bearer {PROVIDER_KEY}").as_str()],
            "{}",
            request.target
        );
        for name in ["x-api-key", "api-key", "openai-organization", "openai-project"] {
            assert!(
                !request.headers.contains_key(name),
                "{name} reached {}",
                request.target
            );
        }
        let all = format!("{:?}", request.headers);
        assert!(!all.contains(CLIENT_KEY), "{}: {all}", request.target);
    }
    // The passthrough provider was never involved, and the provider key went nowhere else.
    assert!(s.local.received().is_empty());
}

#[tokio::test]
async fn the_provider_key_never_reaches_a_passthrough_provider() {
    let s = setup().await;
    let client = reqwest::Client::new();
    for path in ["/local/v1/responses", "/local/v1/models"] {
        let response = client
            .post(s.proxy.url(path))
            .header("authorization", format!("Bearer {CLIENT_KEY}"))
            .body(r#"{"model":"gpt-5","input":"hi"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    for request in s.local.received() {
        assert_eq!(
            request.headers["authorization"],
            format!("Bearer {CLIENT_KEY}").as_str()
        );
        assert!(!format!("{:?}", request.headers).contains(PROVIDER_KEY));
    }
    assert!(s.openai.received().is_empty());
}

fn status(answer: &str) -> u16 {
    answer.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0)
}

#[tokio::test]
async fn no_target_or_host_reaches_a_host_outside_the_config() {
    let s = setup().await;
    let rogue = s.rogue.addr;
    let body = r#"{"model":"gpt-5","input":"hi"}"#;
    let request = |line: String, host: String| {
        format!(
            "{line}\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    // Targets that the proxy may refuse or send to the configured default, but never elsewhere.
    let attempts = [
        request(
            format!("POST http://{rogue}/v1/responses HTTP/1.1"),
            rogue.to_string(),
        ),
        request(
            format!("POST http://{rogue}/rogue/v1/responses HTTP/1.1"),
            rogue.to_string(),
        ),
        request(
            format!("GET http://{rogue}/v1/models HTTP/1.1"),
            rogue.to_string(),
        ),
        request(
            format!("POST https://{rogue}/v1/responses HTTP/1.1"),
            rogue.to_string(),
        ),
        request("POST /v1/responses HTTP/1.1".into(), rogue.to_string()),
        request(
            "POST /v1/responses HTTP/1.1".into(),
            format!("{rogue}\r\nx-forwarded-host: {rogue}"),
        ),
        request(
            format!("POST http://{rogue}/openai/../v1/responses HTTP/1.1"),
            rogue.to_string(),
        ),
        request(format!("CONNECT {rogue} HTTP/1.1"), rogue.to_string()),
        request("OPTIONS * HTTP/1.1".into(), rogue.to_string()),
        request(format!("POST /http://{rogue}/v1/responses HTTP/1.1"), "x".into()),
        request(format!("POST //{rogue}/v1/responses HTTP/1.1"), "x".into()),
        request("POST /v1%2F..%2F..%2Fv1/responses HTTP/1.1".into(), "x".into()),
        request("POST /v1%5cresponses HTTP/1.1".into(), "x".into()),
        request("POST /rogue/v1/responses HTTP/1.1".into(), "x".into()),
    ];
    for attempt in attempts {
        let answer = raw_request(s.proxy.addr, attempt.as_bytes()).await;
        let line = attempt.lines().next().unwrap();
        assert!(
            status(&answer) == 200 || (400..500).contains(&status(&answer)),
            "{line}: {answer}"
        );
    }
    assert!(
        s.rogue.received().is_empty(),
        "a request reached a host outside the config"
    );
    // What did arrive went to the configured provider, under its own host name.
    for request in s.openai.received() {
        assert!(request.target.starts_with("/v1/"), "{}", request.target);
        assert_eq!(request.headers["host"], s.openai.addr.to_string().as_str());
    }
}

#[tokio::test]
async fn session_headers_reach_only_a_passthrough_provider_and_proxy_authorization_none() {
    let s = setup().await;
    let client = reqwest::Client::new();
    for path in ["/openai/v1/responses", "/local/v1/responses", "/local/v1/models"] {
        let response = client
            .post(s.proxy.url(path))
            .header("authorization", format!("Bearer {CLIENT_KEY}"))
            .header("cookie", "session=client-cookie")
            .header("x-amz-security-token", "client-session-token")
            .header("x-amz-date", "20260101T000000Z")
            .header("proxy-authorization", "Basic cHJveHk6c2VjcmV0")
            .body(r#"{"model":"gpt-5","input":"hi"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
    }
    let own = s.openai.received();
    assert_eq!(own.len(), 1);
    for name in [
        "cookie",
        "x-amz-security-token",
        "x-amz-date",
        "proxy-authorization",
    ] {
        assert!(
            !own[0].headers.contains_key(name),
            "{name} reached a provider with its own key"
        );
    }
    let passthrough = s.local.received();
    assert_eq!(passthrough.len(), 2);
    for request in &passthrough {
        assert_eq!(request.headers["cookie"], "session=client-cookie");
        assert_eq!(request.headers["x-amz-security-token"], "client-session-token");
        assert_eq!(request.headers["x-amz-date"], "20260101T000000Z");
        assert!(
            !request.headers.contains_key("proxy-authorization"),
            "{}",
            request.target
        );
    }
}

/// The repo's proxy.toml, with each provider's base URL pointed at a fake upstream (at the same
/// path after the host).
struct RepoConfig {
    openai: Upstream,
    bedrock: Upstream,
    bedrock_openai: Upstream,
    proxy: Proxy,
}

async fn repo_config() -> RepoConfig {
    let openai = Upstream::json(200, RESPONSE_JSON).await;
    let bedrock = Upstream::json(200, RESPONSE_JSON).await;
    let bedrock_openai = Upstream::json(200, RESPONSE_JSON).await;
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/proxy.toml")).unwrap();
    let text = text
        .replace(
            "\"https://api.openai.com/v1\"",
            &format!("\"{}\"", openai.base_url()),
        )
        .replace(
            "\"https://bedrock-mantle.us-east-1.api.aws/v1\"",
            &format!("\"{}\"", bedrock.base_url()),
        )
        .replace(
            "\"https://bedrock-mantle.us-east-1.api.aws/openai/v1\"",
            // Its own path kept, as Mantle's.
            &format!("\"{}\"", bedrock_openai.base_url().replace("/v1", "/openai/v1")),
        );
    // Commented-out examples may name real hosts; no provider in force may.
    assert!(
        !text
            .lines()
            .any(|line| !line.trim_start().starts_with('#') && line.contains("https://")),
        "a provider of proxy.toml was not pointed at a fake upstream"
    );
    let text = crate::support::proxy::with_state_in_memory(&text);
    let proxy = Proxy::start(
        &text,
        &[
            ("OPENAI_API_KEY", PROVIDER_KEY),
            ("AWS_BEARER_TOKEN_BEDROCK", "bedrock-key"),
        ],
    )
    .await;
    RepoConfig {
        openai,
        bedrock,
        bedrock_openai,
        proxy,
    }
}

fn body_for(model: &str) -> String {
    format!(r#"{{"model":"{model}","input":"hi"}}"#)
}

#[tokio::test]
async fn a_provider_prefix_never_sends_a_model_routed_elsewhere() {
    let c = repo_config().await;
    // Bedrock Mantle's own `/openai/v1` path pointed at replaygate, where `openai` is OpenAI,
    // with a model Mantle serves at `/v1` (`bedrock`), whose own path it is not.
    for (path, model, routed) in [
        ("/openai/v1/responses", "openai.gpt-oss-120b", "`bedrock`"),
        ("/openai/v1/responses/compact", "openai.gpt-oss-120b", "`bedrock`"),
        (
            "/openai/v1/responses/input_tokens",
            "anthropic.claude-sonnet-4",
            "`bedrock`",
        ),
        ("/bedrock/v1/responses", "gpt-5", "`openai`"),
        ("/bedrock/v1/responses", "openai.gpt-5.4", "`bedrock-openai`"),
        ("/bedrock-openai/v1/responses", "openai.gpt-oss-20b", "`bedrock`"),
    ] {
        let (status, body) = c.proxy.post_json(path, body_for(model)).await;
        assert_eq!(status, 400, "{path} {model}");
        let error = &body["error"];
        assert_eq!(error["code"], "route_conflict", "{path} {model}");
        assert_eq!(error["type"], "invalid_request_error");
        let message = error["message"].as_str().unwrap();
        let prefix = path.split('/').nth(1).unwrap();
        // The advice reaches the model's provider, never the one the prefix names.
        let advice = format!(
            "send it without a prefix, or with `/{}`",
            routed.trim_matches('`')
        );
        for part in [
            format!("`{model}`"),
            format!("`{prefix}`"),
            routed.to_owned(),
            advice,
        ] {
            assert!(message.contains(&part), "{message} lacks {part}");
        }
    }
    for upstream in [&c.openai, &c.bedrock, &c.bedrock_openai] {
        assert!(
            upstream.received().is_empty(),
            "a request left for a provider its model is not routed to"
        );
    }
}

#[tokio::test]
async fn a_provider_prefix_takes_its_own_models_and_unrouted_ones() {
    let c = repo_config().await;
    for (path, model) in [
        ("/openai/v1/responses", "gpt-5"),
        ("/openai/v1/responses", "my-fine-tune"),
        ("/bedrock/v1/responses", "openai.gpt-oss-120b"),
        ("/bedrock/v1/responses", "unlisted.model-v1"),
        ("/bedrock-openai/v1/responses", "openai.gpt-5.4"),
        ("/v1/responses", "openai.gpt-5.4"),
        // Mantle's own path for its GPT-5 models: `bedrock-openai`'s, not OpenAI's.
        ("/openai/v1/responses", "openai.gpt-5.4"),
    ] {
        let (status, body) = c.proxy.post_json(path, body_for(model)).await;
        assert_eq!(status, 200, "{path} {model}: {body}");
    }
    let models = |upstream: &Upstream| -> Vec<String> {
        upstream
            .received()
            .iter()
            .map(|r| serde_json::from_slice::<serde_json::Value>(&r.body).unwrap()["model"].to_string())
            .collect()
    };
    assert_eq!(models(&c.openai), ["\"gpt-5\"", "\"my-fine-tune\""]);
    assert_eq!(
        models(&c.bedrock),
        ["\"openai.gpt-oss-120b\"", "\"unlisted.model-v1\""]
    );
    assert_eq!(
        models(&c.bedrock_openai),
        ["\"openai.gpt-5.4\"", "\"openai.gpt-5.4\"", "\"openai.gpt-5.4\""]
    );
    let targets: Vec<String> = c
        .bedrock_openai
        .received()
        .into_iter()
        .map(|r| r.target)
        .collect();
    assert_eq!(targets, ["/openai/v1/responses"; 3]);
    // Each with its provider's own key.
    assert_eq!(
        c.openai.received()[0].headers["authorization"],
        format!("Bearer {PROVIDER_KEY}").as_str()
    );
    assert_eq!(
        c.bedrock.received()[0].headers["authorization"],
        "Bearer bedrock-key"
    );
}
