//! Teams known by their client certificate (docs/teams.md#a-team-known-by-its-client-certificate):
//! a request whose verified certificate matches a team's `client_certs` is that team's, with no
//! key: its policy applies, its state is its own and another team's is refused, and the logs
//! name the certificate by its matched name. Certificates that match two teams, or a key of
//! another team beside one, get 401.
//!
//! The TLS listener hands each request its verified certificate; here the requests are handed
//! to the proxy in-process with the certificate put where the listener puts it. (The access
//! line's and the span's names are tested in tests/access_log.rs, which owns the process's log.)

use std::sync::Arc;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use replaygate::config::Config;
use replaygate::proxy::{lifecycle, present_client_certificate, ProxyState};
use serde_json::{json, Value};

use super::team_state::{config, first_turn, provider, ALPHA, BETA};
use crate::support::upstream::Upstream;

/// A self-signed certificate (DER) with these URI and DNS names and common name.
fn certificate(uris: &[&str], dns: &[&str], cn: &str) -> Vec<u8> {
    crate::support::pki::self_signed_der(uris, dns, Some(cn))
}

/// Who sends a request: a client key, a client certificate, both or neither.
#[derive(Clone, Copy, Default)]
struct Client<'a> {
    key: Option<&'a str>,
    certificate: Option<&'a [u8]>,
}

fn by_key(key: &str) -> Client<'_> {
    Client {
        key: Some(key),
        certificate: None,
    }
}

fn by_certificate(der: &[u8]) -> Client<'_> {
    Client {
        key: None,
        certificate: Some(der),
    }
}

struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: Value,
}

impl Answer {
    fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }
}

/// POSTs `body` to `path` as `client`, in-process; the answer is read to its end (so its
/// access line is written).
async fn post(
    state: &Arc<ProxyState>,
    client: Client<'_>,
    request_id: &str,
    path: &str,
    body: Value,
) -> Answer {
    let mut request = Request::post(path)
        .header("content-type", "application/json")
        .header("x-request-id", request_id);
    if let Some(key) = client.key {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    let mut request = request.body(Full::new(Bytes::from(body.to_string()))).unwrap();
    if let Some(der) = client.certificate {
        present_client_certificate(&mut request, der.to_vec());
    }
    let response = lifecycle::handle(state.clone(), request).await;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        headers,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    }
}

/// Three teams on `openai` and `bedrock` (the ledger on): `alpha` has a key and is known by
/// `spiffe://example.org/ns/alpha/*`, and strips namespaced items where the others reject them;
/// `beta` has a key and is known by `cn:beta-*`; `gamma` has a key only.
fn state(openai: &Upstream, bedrock: &Upstream, audit: &std::path::Path) -> Arc<ProxyState> {
    let text = config(
        openai,
        bedrock,
        [
            "client_certs = [\"spiffe://example.org/ns/alpha/*\"]\nrules = { namespaced = \"strip\" }",
            "client_certs = [\"cn:beta-*\"]",
            "",
        ],
        &format!("[audit]\npath = \"{}\"", audit.display()),
    );
    let config = Config::from_toml(&text).unwrap_or_else(|e| panic!("{e}"));
    Arc::new(ProxyState::new(&config, &|_| None).unwrap())
}

fn audit_lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|line| line.get("kind").is_none())
        .collect()
}

fn namespaced_body() -> Value {
    json!({"model": "m1", "input": [
        {"type": "openai:x", "id": "x"},
        {"role": "user", "content": "hi"}
    ]})
}

#[tokio::test]
async fn a_certificate_of_a_team_passes_its_policy_with_no_key_and_names_the_caller() {
    let (openai, bedrock) = (provider("openai").await, provider("bedrock").await);
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let state = state(&openai, &bedrock, &audit);
    let alpha = certificate(
        &["spiffe://example.org/ns/alpha/sa/api"],
        &["api.alpha.internal"],
        "api",
    );

    // alpha's rule strips the namespaced item; its certificate is all it sends.
    let passed = post(
        &state,
        by_certificate(&alpha),
        "cert-alpha",
        "/bedrock/v1/responses",
        namespaced_body(),
    )
    .await;
    assert_eq!(passed.status, 200, "{}", passed.body);
    assert_eq!(passed.headers["x-replaygate-stripped"], "input[0]");
    assert_eq!(bedrock.received().len(), 1);
    // The same body under another team's policy (beta's, by its key) is rejected.
    let beta = post(
        &state,
        by_key(BETA),
        "key-beta",
        "/bedrock/v1/responses",
        namespaced_body(),
    )
    .await;
    assert_eq!((beta.status, beta.code()), (422, "namespaced"), "{}", beta.body);
    // Without the certificate nor a key: 401, as ever.
    let nobody = post(
        &state,
        Client::default(),
        "nobody",
        "/bedrock/v1/responses",
        namespaced_body(),
    )
    .await;
    assert_eq!((nobody.status, nobody.code()), (401, "invalid_api_key"));
    // A certificate no team knows is as none.
    let stranger = certificate(&["spiffe://example.org/ns/other/x"], &[], "stranger");
    let unknown = post(
        &state,
        by_certificate(&stranger),
        "stranger",
        "/bedrock/v1/responses",
        namespaced_body(),
    )
    .await;
    assert_eq!((unknown.status, unknown.code()), (401, "invalid_api_key"));
    assert_eq!(bedrock.received().len(), 1, "nothing refused is forwarded");

    // The audit line names the caller by the certificate's matched name, never the
    // certificate (the access line and the span too: tests/access_log.rs). The audit log is
    // flushed when the proxy that writes it goes.
    drop(state);
    let audited = audit_lines(&audit);
    assert_eq!(audited.len(), 2, "{audited:?}");
    assert_eq!(
        (
            &audited[0]["team"],
            &audited[0]["client_cert"],
            &audited[0]["key_id"]
        ),
        (
            &json!("alpha"),
            &json!("spiffe://example.org/ns/alpha/sa/api"),
            &Value::Null
        )
    );
    assert_eq!(audited[0]["decision"], "stripped");
    assert!(audited[1].get("client_cert").is_none(), "{}", audited[1]);
    let text = std::fs::read_to_string(&audit).unwrap();
    assert!(
        !text.contains("api.alpha.internal"),
        "only the matched name is audited"
    );
    // The answer's usage line names it the same way.
    let usage: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|line| line["kind"] == "usage")
        .collect();
    assert_eq!(usage.len(), 1, "{text}");
    assert_eq!(
        (&usage[0]["request_id"], &usage[0]["client_cert"]),
        (
            &json!("cert-alpha"),
            &json!("spiffe://example.org/ns/alpha/sa/api")
        )
    );
}

#[tokio::test]
async fn a_certificate_of_two_teams_or_beside_another_teams_key_gets_401() {
    let (openai, bedrock) = (provider("openai").await, provider("bedrock").await);
    let dir = tempfile::tempdir().unwrap();
    let state = state(&openai, &bedrock, &dir.path().join("audit.jsonl"));
    let body = first_turn(false);
    // alpha's URI and beta's common name on one certificate.
    let both = certificate(&["spiffe://example.org/ns/alpha/x"], &[], "beta-ci");
    let answer = post(
        &state,
        by_certificate(&both),
        "two-teams",
        "/v1/responses",
        body.clone(),
    )
    .await;
    assert_eq!(
        (answer.status, answer.code()),
        (401, "ambiguous_client_certificate")
    );
    assert_eq!(answer.body["error"]["type"], "invalid_request_error");
    assert!(!answer.body.to_string().contains("alpha"), "{}", answer.body);
    // A key cannot settle it.
    let answer = post(
        &state,
        Client {
            key: Some(ALPHA),
            certificate: Some(&both),
        },
        "two-and-key",
        "/v1/responses",
        body.clone(),
    )
    .await;
    assert_eq!(
        (answer.status, answer.code()),
        (401, "ambiguous_client_certificate")
    );

    // beta's certificate with alpha's key: 401; with beta's own key: beta's.
    let beta = certificate(&[], &["beta.internal"], "beta-ci");
    let mixed = post(
        &state,
        Client {
            key: Some(ALPHA),
            certificate: Some(&beta),
        },
        "mixed",
        "/v1/responses",
        body.clone(),
    )
    .await;
    assert_eq!(
        (mixed.status, mixed.code()),
        (401, "key_certificate_mismatch"),
        "{}",
        mixed.body
    );
    assert_eq!(openai.received().len(), 0, "nothing refused is forwarded");
    let same = post(
        &state,
        Client {
            key: Some(BETA),
            certificate: Some(&beta),
        },
        "same",
        "/v1/responses",
        body,
    )
    .await;
    assert_eq!(same.status, 200, "{}", same.body);
}

#[tokio::test]
async fn a_team_known_by_its_certificate_keeps_its_state_and_is_refused_anothers() {
    let (openai, bedrock) = (provider("openai").await, provider("bedrock").await);
    let dir = tempfile::tempdir().unwrap();
    let state = state(&openai, &bedrock, &dir.path().join("audit.jsonl"));
    let alpha = certificate(&["spiffe://example.org/ns/alpha/sa/api"], &[], "api");
    let beta = certificate(&[], &[], "beta-ci");
    let next = |id: &Value| json!({"model": "m1", "previous_response_id": id, "input": "And tomorrow?"});

    // A response made by alpha's certificate is alpha's: its key continues it, beta (by key or
    // by certificate) is refused it.
    let first = post(
        &state,
        by_certificate(&alpha),
        "a1",
        "/openai/v1/responses",
        first_turn(false),
    )
    .await;
    assert_eq!(first.status, 200, "{}", first.body);
    let id = first.body["id"].clone();
    let forwarded = openai.received().len();
    for beta in [by_key(BETA), by_certificate(&beta)] {
        let refused = post(&state, beta, "b1", "/openai/v1/responses", next(&id)).await;
        assert_eq!(
            (refused.status, refused.code()),
            (422, "cross_team_state"),
            "{}",
            refused.body
        );
        assert_eq!(refused.body["error"]["param"], "previous_response_id");
    }
    assert_eq!(openai.received().len(), forwarded, "nothing refused is forwarded");
    let owner = post(&state, by_key(ALPHA), "a2", "/openai/v1/responses", next(&id)).await;
    assert_eq!(owner.status, 200, "{}", owner.body);

    // And the other way: beta's response (made by its certificate) is refused to alpha's
    // certificate, and continued by beta's key.
    let first = post(
        &state,
        by_certificate(&beta),
        "b2",
        "/openai/v1/responses",
        first_turn(false),
    )
    .await;
    assert_eq!(first.status, 200, "{}", first.body);
    let id = first.body["id"].clone();
    let refused = post(
        &state,
        by_certificate(&alpha),
        "a3",
        "/openai/v1/responses",
        next(&id),
    )
    .await;
    assert_eq!(
        (refused.status, refused.code()),
        (422, "cross_team_state"),
        "{}",
        refused.body
    );
    let owner = post(&state, by_key(BETA), "b3", "/openai/v1/responses", next(&id)).await;
    assert_eq!(owner.status, 200, "{}", owner.body);
}

/// A WebSocket upgrade is known by its certificate as a request is: the 101 for the team's
/// certificate alone (the socket itself needs a real connection, so it goes no further here),
/// 401 for a certificate beside another team's key, or for none.
#[tokio::test]
async fn a_websocket_upgrade_is_known_by_its_certificate() {
    let (openai, bedrock) = (provider("openai").await, provider("bedrock").await);
    let dir = tempfile::tempdir().unwrap();
    let state = state(&openai, &bedrock, &dir.path().join("audit.jsonl"));
    let alpha = certificate(&["spiffe://example.org/ns/alpha/ws"], &[], "ws");
    for (client, status, code) in [
        (by_certificate(&alpha), 101, ""),
        (
            Client {
                key: Some(BETA),
                certificate: Some(&alpha),
            },
            401,
            "key_certificate_mismatch",
        ),
        (Client::default(), 401, "invalid_api_key"),
    ] {
        let mut request = Request::get("/v1/responses")
            .header("upgrade", "websocket")
            .header("connection", "upgrade")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==");
        if let Some(key) = client.key {
            request = request.header("authorization", format!("Bearer {key}"));
        }
        let mut request = request.body(Full::new(Bytes::new())).unwrap();
        if let Some(der) = client.certificate {
            present_client_certificate(&mut request, der.to_vec());
        }
        let answer = lifecycle::handle(state.clone(), request).await;
        assert_eq!(answer.status().as_u16(), status, "{code}");
        if status == 401 {
            let bytes = answer.into_body().collect().await.unwrap().to_bytes();
            let body: Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(body["error"]["code"], code);
        }
    }
}
