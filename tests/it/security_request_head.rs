//! One reading of each gated request: a body reaches the provider only by `POST`, only as UTF-8,
//! and never with a header that asks the provider to treat it as another method.
//!
//! The refusals are sent as raw bytes, since an HTTP library would normalise a lowercase `post`,
//! drop a `GET` body or merge two `Content-Type` headers.

use crate::support;

use serde_json::Value;
use support::proxy::{raw_request, Proxy};
use support::upstream::{Upstream, RESPONSE_JSON};

const BODY: &str = r#"{"model":"gpt-5","input":"hi"}"#;

/// `openai` (the default, with a key of its own) in front of one fake provider.
async fn setup() -> (Upstream, Proxy) {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let config = format!(
        "default_provider = \"openai\"\n[providers.openai]\nbase_url = \"{}\"\nauth = {{ bearer_env = \"KEY\" }}\n",
        upstream.base_url()
    );
    let proxy = Proxy::start(&config, &[("KEY", "sk-provider")]).await;
    (upstream, proxy)
}

/// A raw HTTP/1.1 request: `line`, then `headers` (each ending in CRLF), then `body` framed by
/// `Content-Length`.
fn with_length(line: &str, headers: &str, body: &str) -> String {
    format!(
        "{line} HTTP/1.1\r\nhost: x\r\n{headers}content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// The same, with `body` sent as one chunk (none when empty).
fn chunked(line: &str, headers: &str, body: &str) -> String {
    let chunk = if body.is_empty() {
        String::new()
    } else {
        format!("{:x}\r\n{body}\r\n", body.len())
    };
    format!(
        "{line} HTTP/1.1\r\nhost: x\r\n{headers}transfer-encoding: chunked\r\nconnection: close\r\n\r\n{chunk}0\r\n\r\n"
    )
}

/// Status, head and JSON body of the proxy's answer to `request`.
async fn answer(proxy: &Proxy, request: &str) -> (u16, String, Value) {
    let text = raw_request(proxy.addr, request.as_bytes()).await;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (
        status,
        head.to_ascii_lowercase(),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

fn first_line(request: &str) -> &str {
    request.lines().next().unwrap()
}

#[tokio::test]
async fn another_method_with_a_body_on_a_gated_path_gets_405() {
    let (upstream, proxy) = setup().await;
    let json = "content-type: application/json\r\n";
    for request in [
        with_length("PUT /v1/responses", json, BODY),
        with_length("PATCH /v1/responses", json, BODY),
        with_length("GET /v1/responses", json, BODY),
        with_length("post /v1/responses", json, BODY),
        with_length("Post /responses/compact", json, BODY),
        with_length("PUT /openai/v1/responses/input_tokens", json, BODY),
        with_length("PATCH /v1/conversations", json, r#"{"items":[]}"#),
        with_length("PUT /v1/conversations/conv_1/items", json, r#"{"items":[]}"#),
        chunked("DELETE /v1/responses", json, BODY),
        chunked("GET /v1/responses", json, ""),
    ] {
        let (status, head, body) = answer(&proxy, &request).await;
        let line = first_line(&request);
        assert_eq!(status, 405, "{line}: {head}");
        assert_eq!(body["error"]["code"], "method_not_allowed", "{line}");
        assert_eq!(body["error"]["type"], "invalid_request_error", "{line}");
        assert!(head.contains("\r\nallow: post"), "{line}: {head}");
    }
    // Over HTTP/2 too, where a body is only frames.
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let response = client
        .put(proxy.url("/v1/responses"))
        .body(BODY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    assert!(
        upstream.received().is_empty(),
        "a body reached the provider by another method than POST"
    );
}

#[tokio::test]
async fn method_override_headers_never_reach_the_provider() {
    let (upstream, proxy) = setup().await;
    let overrides = "X-HTTP-Method-Override: PUT\r\nx-http-method: PATCH\r\nX-METHOD-OVERRIDE: DELETE\r\n";
    let (status, _, _) = answer(&proxy, &with_length("POST /v1/responses", overrides, BODY)).await;
    assert_eq!(status, 200);
    let (status, _, _) = answer(&proxy, &with_length("GET /v1/models", overrides, "")).await;
    assert_eq!(status, 200);
    let received = upstream.received();
    assert_eq!(received.len(), 2);
    for request in &received {
        for name in ["x-http-method-override", "x-http-method", "x-method-override"] {
            assert!(
                !request.headers.contains_key(name),
                "{name} reached {}",
                request.target
            );
        }
    }
    assert_eq!(received[0].method, "POST");
    assert_eq!(&received[0].body[..], BODY.as_bytes());
}

#[tokio::test]
async fn a_charset_other_than_utf8_on_a_gated_path_gets_415() {
    let (upstream, proxy) = setup().await;
    for content_type in [
        "content-type: application/json; charset=utf-7\r\n",
        "content-type: application/json; charset=\"UTF-16\"\r\n",
        "content-type: text/plain;charset=iso-8859-1\r\n",
        "content-type: application/json\r\ncontent-type: application/json; charset=utf-8\r\n",
        "content-type: application/json, text/plain; charset=utf-7\r\n",
        "content-type: application/json; charset=utf-8; charset=utf-7\r\n",
    ] {
        for path in [
            "/v1/responses",
            "/openai/v1/responses/input_tokens",
            "/v1/conversations",
        ] {
            let request = with_length(&format!("POST {path}"), content_type, BODY);
            let (status, _, body) = answer(&proxy, &request).await;
            assert_eq!(status, 415, "{path} {content_type:?}");
            assert_eq!(body["error"]["code"], "unsupported_charset", "{content_type:?}");
        }
    }
    // docs/answers.md's order of body answers is 413, 400, 415, 422: a body that does not parse,
    // or misspells a gated name, gets its 400 whatever its charset; one that parses but holds
    // refused items gets 415, not 422.
    let utf7 = "content-type: application/json; charset=utf-7\r\n";
    let refused = r#"{"model":"gpt-5","input":[{"type":"acme:x"}]}"#;
    for (body, status, code) in [
        ("{not json", 400, "invalid_json"),
        (r#"{"model":"gpt-5","INPUT":[]}"#, 400, "invalid_input"),
        (refused, 415, "unsupported_charset"),
    ] {
        let (got, _, answer) = answer(&proxy, &with_length("POST /v1/responses", utf7, body)).await;
        assert_eq!(
            (got, answer["error"]["code"].as_str()),
            (status, Some(code)),
            "{body}"
        );
    }
    assert!(
        upstream.received().is_empty(),
        "a body in another charset was forwarded"
    );
}

#[tokio::test]
async fn utf8_json_and_bodiless_requests_still_pass() {
    let (upstream, proxy) = setup().await;
    let requests = [
        with_length("POST /v1/responses", "content-type: application/json\r\n", BODY),
        with_length(
            "POST /v1/responses",
            "content-type: application/json; charset=utf-8\r\n",
            BODY,
        ),
        with_length(
            "POST /v1/responses",
            "content-type: application/json; charset=\"UTF8\"\r\n",
            BODY,
        ),
        with_length("POST /v1/responses", "", BODY),
        chunked("POST /v1/responses", "content-type: application/json\r\n", BODY),
        with_length("GET /v1/responses/resp_1", "", ""),
        "GET /v1/responses/resp_1?include=x HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".to_owned(),
        with_length("DELETE /v1/responses/resp_1", "", ""),
        // An ungated path keeps its label and its method: the provider is the judge there.
        with_length(
            "PUT /v1/chat/completions",
            "content-type: application/json; charset=utf-7\r\n",
            "{}",
        ),
    ];
    for request in &requests {
        let (status, head, _) = answer(&proxy, request).await;
        assert_eq!(status, 200, "{}: {head}", first_line(request));
    }
    let received: Vec<(String, String)> = upstream
        .received()
        .into_iter()
        .map(|r| (r.method.to_string(), r.target))
        .collect();
    let expected: Vec<(String, String)> = [
        ("POST", "/v1/responses"),
        ("POST", "/v1/responses"),
        ("POST", "/v1/responses"),
        ("POST", "/v1/responses"),
        ("POST", "/v1/responses"),
        ("GET", "/v1/responses/resp_1"),
        ("GET", "/v1/responses/resp_1?include=x"),
        ("DELETE", "/v1/responses/resp_1"),
        ("PUT", "/v1/chat/completions"),
    ]
    .iter()
    .map(|(m, t)| (m.to_string(), t.to_string()))
    .collect();
    assert_eq!(received, expected);
}
