//! Who gets what: a client key never reaches a provider that has a key of its own, on any
//! path, and no request target or header can steer a request to a host outside the config.
//!
//! (The basic cases are in `proxy_forwarding.rs` and `proxy_routing.rs`.)

mod support;

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
