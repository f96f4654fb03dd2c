//! Allowed requests reach the provider byte for byte, with the right credential, and the
//! provider's answer comes back as it was sent.

use crate::support;

use support::proxy::{one_provider, Proxy};
use support::upstream::{json_response, Upstream, RESPONSE_JSON};

const ODD_BODY: &str = "{ \"input\" :[\n\t{\"content\":\"caf\\u00e9 \\\"quoted\\\"\",  \"role\":\"user\"},\r\n  {\"status\":\"completed\",\"arguments\":\"{\\\"region\\\" : \\\"apac\\\"}\",\"call_id\":\"c1\",\"name\":\"report\",\"type\":\"function_call\"},\n {\"output\":\"ok\",\"call_id\":\"c1\",\"type\":\"function_call_output\"}],\n\"zeta\":1.50e3, \"model\" : \"gpt-5\",\"tools\":[{\"parameters\":{\"type\":\"object\",\"properties\":{\"region\":{\"enum\":[\"apac\"]}}},\"name\":\"report\",\"type\":\"function\"}]   }\n\n";

#[tokio::test]
async fn an_allowed_body_reaches_the_provider_byte_for_byte() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
    let response = reqwest::Client::new()
        .post(proxy.url("/v1/responses?trace=1"))
        .header("content-type", "application/json")
        .body(ODD_BODY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers().contains_key("x-replaygate-request-id"));
    assert_eq!(response.text().await.unwrap(), RESPONSE_JSON);
    let received = upstream.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].target, "/v1/responses?trace=1");
    assert_eq!(&received[0].body[..], ODD_BODY.as_bytes());
    assert_eq!(received[0].headers["content-length"], ODD_BODY.len().to_string());
}

#[tokio::test]
async fn the_providers_status_headers_and_body_pass_through() {
    let upstream = Upstream::start(|_| async {
        let mut r = json_response(429, r#"{"error":{"message":"slow down","type":"rate_limit_error","code":"rate_limit_exceeded","param":null}}"#);
        r.headers_mut().insert("retry-after", "7".parse().unwrap());
        r.headers_mut().insert("x-request-id", "req_up_1".parse().unwrap());
        r.headers_mut().insert("connection", "close".parse().unwrap());
        r
    })
    .await;
    let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
    let response = reqwest::Client::new()
        .post(proxy.url("/v1/responses"))
        .body(r#"{"model":"gpt-5","input":"hi"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "7");
    assert_eq!(response.headers()["x-request-id"], "req_up_1");
    assert!(response.text().await.unwrap().contains("rate_limit_exceeded"));
}

#[tokio::test]
async fn an_own_key_replaces_the_client_key() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let config = one_provider(
        &upstream.base_url(),
        r#"{ bearer_env = "TEST_PROVIDER_KEY" }"#,
        "",
    );
    let proxy = Proxy::start(&config, &[("TEST_PROVIDER_KEY", "sk-provider")]).await;
    let response = reqwest::Client::new()
        .post(proxy.url("/v1/responses"))
        .header("authorization", "Bearer sk-client")
        .header("x-api-key", "sk-client-2")
        .header("openai-organization", "org-client")
        .body(r#"{"model":"gpt-5","input":"hi"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let received = &upstream.received()[0];
    let auth: Vec<_> = received.headers.get_all("authorization").iter().collect();
    assert_eq!(auth, ["Bearer sk-provider"]);
    for header in ["x-api-key", "openai-organization"] {
        assert!(!received.headers.contains_key(header), "{header} leaked");
    }
    let all = format!("{:?}", received.headers);
    assert!(
        !all.contains("sk-client"),
        "a client key reached the provider: {all}"
    );
}

#[tokio::test]
async fn passthrough_forwards_the_client_key() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
    reqwest::Client::new()
        .post(proxy.url("/v1/responses"))
        .header("authorization", "Bearer sk-client")
        .body(r#"{"model":"gpt-5","input":"hi"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(
        upstream.received()[0].headers["authorization"],
        "Bearer sk-client"
    );
}

#[tokio::test]
async fn auth_none_sends_no_credential() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"none\"", ""), &[]).await;
    reqwest::Client::new()
        .post(proxy.url("/v1/responses"))
        .header("authorization", "Bearer sk-client")
        .body(r#"{"model":"gpt-5","input":"hi"}"#)
        .send()
        .await
        .unwrap();
    assert!(!upstream.received()[0].headers.contains_key("authorization"));
}

#[tokio::test]
async fn hop_by_hop_headers_do_not_cross() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
    reqwest::Client::new()
        .post(proxy.url("/v1/responses"))
        .header("connection", "keep-alive, x-hop")
        .header("x-hop", "1")
        .header("proxy-authorization", "Basic abc")
        .header("x-stainless-lang", "python")
        .body(r#"{"model":"gpt-5","input":"hi"}"#)
        .send()
        .await
        .unwrap();
    let headers = &upstream.received()[0].headers;
    assert!(!headers.contains_key("x-hop") && !headers.contains_key("proxy-authorization"));
    assert_eq!(headers["x-stainless-lang"], "python");
}

#[tokio::test]
async fn a_hundred_concurrent_requests_all_arrive_intact() {
    let upstream = Upstream::start(|r| async move {
        let mut response = json_response(200, RESPONSE_JSON);
        // Echo the request's marker so each client can check it got its own answer.
        let marker = String::from_utf8_lossy(&r.body).into_owned();
        response
            .headers_mut()
            .insert("x-echo-len", marker.len().to_string().parse().unwrap());
        response
    })
    .await;
    let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
    let client = reqwest::Client::new();
    let mut tasks = Vec::new();
    for i in 0..100 {
        let client = client.clone();
        let url = proxy.url("/v1/responses");
        tasks.push(tokio::spawn(async move {
            let body = format!(r#"{{"model":"gpt-5","input":[{{"role":"user","content":"request {i}"}}]}}"#);
            let response = client.post(url).body(body.clone()).send().await.unwrap();
            assert_eq!(response.status(), 200);
            assert_eq!(response.headers()["x-echo-len"], body.len().to_string());
            body
        }));
    }
    let mut sent = Vec::new();
    for task in tasks {
        sent.push(task.await.unwrap());
    }
    let mut received: Vec<String> = upstream
        .received()
        .iter()
        .map(|r| String::from_utf8(r.body.to_vec()).unwrap())
        .collect();
    sent.sort();
    received.sort();
    assert_eq!(sent, received);
}

#[tokio::test]
async fn cleartext_http2_clients_are_served() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let proxy = Proxy::start(&one_provider(&upstream.base_url(), "\"passthrough\"", ""), &[]).await;
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let response = client
        .post(proxy.url("/v1/responses"))
        .body(ODD_BODY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    assert_eq!(response.status(), 200);
    assert_eq!(&upstream.received()[0].body[..], ODD_BODY.as_bytes());
}
