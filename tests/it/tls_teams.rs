//! A team known by its client certificate over the listener's real TLS (docs/teams.md,
//! docs/operations.md#tls): a client that presents a certificate the listener verified, whose
//! URI name matches a team's `client_certs`, is that team's with no key, over HTTP/1.1 and
//! HTTP/2. Its team's policy applies; its team's state is its own; another team's state is
//! refused it, and its own is refused to another team.

use serde_json::{json, Value};

use super::team_state::{config, first_turn, provider, BETA};
use super::tls_listener::Pki;
use crate::support::pki::Issued;
use crate::support::proxy::Proxy;

/// The identity of `issued`, for reqwest.
fn identity(issued: &Issued) -> reqwest::Identity {
    let mut pem = std::fs::read(&issued.cert).unwrap();
    pem.extend(std::fs::read(&issued.key).unwrap());
    reqwest::Identity::from_pem(&pem).unwrap()
}

struct Answer {
    status: u16,
    version: http::Version,
    headers: http::HeaderMap,
    body: Value,
}

async fn post(client: &reqwest::Client, url: String, key: Option<&str>, body: &Value) -> Answer {
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(key) = key {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    let limit = std::time::Duration::from_secs(10);
    let response = tokio::time::timeout(limit, request.send())
        .await
        .unwrap()
        .unwrap();
    let status = response.status().as_u16();
    let version = response.version();
    let headers = response.headers().clone();
    let body = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap_or(Value::Null);
    Answer {
        status,
        version,
        headers,
        body,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_its_teams_over_tls_on_http1_and_http2() {
    let (openai, bedrock) = (provider("openai").await, provider("bedrock").await);
    let pki = Pki::new();
    let alpha_cert = pki.client_ca.issue_uris(
        &["spiffe://example.org/ns/alpha/sa/api"],
        pki.dir.path(),
        "alpha-api",
    );
    let text = config(
        &openai,
        &bedrock,
        [
            "client_certs = [\"spiffe://example.org/ns/alpha/*\"]\nrules = { namespaced = \"strip\" }",
            "",
            "",
        ],
        &pki.server_keys(&pki.client_ca_keys("optional")),
    );
    let proxy = Proxy::start(&text, &[]).await;
    let url = |path: &str| format!("https://127.0.0.1:{}{path}", proxy.addr.port());
    let namespaced = json!({"model": "m1", "input": [
        {"type": "openai:x", "id": "x"},
        {"role": "user", "content": "hi"}
    ]});
    let next = |id: &Value| json!({"model": "m1", "previous_response_id": id, "input": "And tomorrow?"});
    let beta_client = pki.reqwest().build().unwrap();
    for http2 in [false, true] {
        let builder = pki.reqwest().identity(identity(&alpha_cert));
        let alpha = match http2 {
            true => builder.build().unwrap(),
            false => builder.http1_only().build().unwrap(),
        };
        let version = if http2 {
            http::Version::HTTP_2
        } else {
            http::Version::HTTP_11
        };
        // alpha's policy (strip) applies to its certificate alone; beta's key gets beta's
        // (reject) on the same body.
        let passed = post(&alpha, url("/bedrock/v1/responses"), None, &namespaced).await;
        assert_eq!((passed.status, passed.version), (200, version), "{}", passed.body);
        assert_eq!(passed.headers["x-replaygate-stripped"], "input[0]");
        let refused = post(
            &beta_client,
            url("/bedrock/v1/responses"),
            Some(BETA),
            &namespaced,
        )
        .await;
        assert_eq!(refused.status, 422, "{}", refused.body);
        assert_eq!(refused.body["error"]["code"], "namespaced");

        // A response alpha's certificate made is alpha's: beta's key is refused it, and
        // nothing leaves; alpha's certificate continues it.
        let first = post(&alpha, url("/openai/v1/responses"), None, &first_turn(false)).await;
        assert_eq!(first.status, 200, "{}", first.body);
        let id = first.body["id"].clone();
        let sent = openai.received().len();
        let refused = post(&beta_client, url("/openai/v1/responses"), Some(BETA), &next(&id)).await;
        assert_eq!(refused.status, 422, "{}", refused.body);
        assert_eq!(refused.body["error"]["code"], "cross_team_state");
        assert_eq!(openai.received().len(), sent, "a refused body left");
        let own = post(&alpha, url("/openai/v1/responses"), None, &next(&id)).await;
        assert_eq!(own.status, 200, "{}", own.body);

        // beta's response is refused to alpha's certificate.
        let first = post(
            &beta_client,
            url("/openai/v1/responses"),
            Some(BETA),
            &first_turn(false),
        )
        .await;
        assert_eq!(first.status, 200, "{}", first.body);
        let refused = post(
            &alpha,
            url("/openai/v1/responses"),
            None,
            &next(&first.body["id"]),
        )
        .await;
        assert_eq!(refused.status, 422, "{}", refused.body);
        assert_eq!(refused.body["error"]["code"], "cross_team_state");

        // Without a certificate nor a key: 401.
        let nobody = post(
            &beta_client,
            url("/openai/v1/responses"),
            None,
            &first_turn(false),
        )
        .await;
        assert_eq!(nobody.status, 401, "{}", nobody.body);
    }
}
