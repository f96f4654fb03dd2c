//! Provider credentials replaygate supplies itself: AWS SigV4 (`aws_sigv4`) and a key in a
//! header of its own (`header_env`).
//!
//! The signer is compared with botocore's (the AWS SDK for Python's) for fixed inputs and
//! times, and a live request through the proxy is checked at a fake upstream by recomputing its
//! signature from the bytes received, with a SigV4 verifier written here from the
//! specification. Needs `python3` with the packages in `tests/e2e/requirements.txt`.

use std::time::{Duration, SystemTime};

use replaygate::proxy::sigv4::{sign, Scope, Unsigned};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::support::proxy::Proxy;
use crate::support::upstream::{Received, Upstream, RESPONSE_JSON};

const E2E_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e");

/// The AWS documentation's example key pair (public, not a real credential).
const ACCESS_KEY: &str = "AKIDEXAMPLE";
const SECRET_KEY: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

// === botocore ===

/// One request signed by both signers.
struct Case {
    method: &'static str,
    url: String,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    token: Option<&'static str>,
    region: &'static str,
    service: &'static str,
    /// Seconds since the Unix epoch.
    time: u64,
}

fn cases() -> Vec<Case> {
    let base = |url: &str, body: &[u8]| Case {
        method: "POST",
        url: url.to_owned(),
        content_type: Some("application/json"),
        body: body.to_vec(),
        token: None,
        region: "us-east-1",
        service: "bedrock",
        time: 1_735_787_045,
    };
    let runtime = "https://bedrock-runtime.us-east-1.amazonaws.com/openai/v1/responses";
    let mantle = "https://bedrock-mantle.us-west-2.api.aws/openai/v1/responses";
    let large: Vec<u8> = format!(r#"{{"model":"m","input":"{}"}}"#, "x".repeat(200_000)).into_bytes();
    vec![
        // An empty body, no content type.
        Case {
            content_type: None,
            ..base(runtime, b"")
        },
        // A body with non-ASCII text.
        base(
            runtime,
            "{\"model\":\"us.openai.gpt-5.6-sol\",\"input\":\"h\u{e9}llo \u{2603} \u{65e5}\u{672c} \u{1f600}\"}".as_bytes(),
        ),
        // A query string, out of order, with an encoded space.
        base(
            &format!("{runtime}?b=x%20y&api-version=2025-04-01&a=1"),
            br#"{"model":"m","input":"hi"}"#,
        ),
        // Temporary credentials, Mantle, another region and time.
        Case {
            token: Some("IQoJb3JpZ2luX2VjEXAMPLE//token+with/slashes=="),
            region: "us-west-2",
            service: "bedrock-mantle",
            time: 1_767_225_599,
            ..base(mantle, br#"{"model":"openai.gpt-5.6-luna","input":"hello"}"#)
        },
        // A loopback host with a port, and a GET without a body.
        Case {
            method: "GET",
            content_type: None,
            ..base("http://127.0.0.1:8080/v1/models?limit=2", b"")
        },
        // A large body.
        base(runtime, &large),
    ]
}

/// The headers replaygate's signer adds for `case`.
fn rust_signature(case: &Case) -> http::HeaderMap {
    let credentials = aws_credential_types::Credentials::new(
        ACCESS_KEY,
        SECRET_KEY,
        case.token.map(str::to_owned),
        None,
        "test",
    );
    let request = Unsigned {
        method: case.method,
        url: &case.url,
        content_type: case.content_type,
        body: &case.body,
    };
    let scope = Scope {
        region: case.region.into(),
        service: case.service.into(),
    };
    sign(
        &request,
        &credentials,
        &scope,
        SystemTime::UNIX_EPOCH + Duration::from_secs(case.time),
    )
    .unwrap()
}

/// What `tests/e2e/sigv4_botocore.py` answers for `cases`, each sent with the content type and
/// the `x-amz-content-sha256` replaygate sends.
async fn botocore_signatures(cases: &[Case], rust: &[http::HeaderMap]) -> Vec<Value> {
    let input: Vec<Value> = cases
        .iter()
        .zip(rust)
        .map(|(case, signed)| {
            let mut headers = serde_json::Map::new();
            if let Some(content_type) = case.content_type {
                headers.insert("Content-Type".into(), content_type.into());
            }
            headers.insert(
                "X-Amz-Content-SHA256".into(),
                signed["x-amz-content-sha256"].to_str().unwrap().into(),
            );
            let time =
                humantime::format_rfc3339_seconds(SystemTime::UNIX_EPOCH + Duration::from_secs(case.time))
                    .to_string()
                    .replace(['-', ':'], "");
            json!({
                "method": case.method,
                "url": case.url,
                "headers": headers,
                "body_hex": hex::encode(&case.body),
                "access_key": ACCESS_KEY,
                "secret_key": SECRET_KEY,
                "session_token": case.token,
                "region": case.region,
                "service": case.service,
                "time": time,
            })
        })
        .collect();
    let input_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(input_file.path(), serde_json::to_vec(&input).unwrap()).unwrap();
    let child = tokio::process::Command::new("python3")
        .arg(format!("{E2E_DIR}/sigv4_botocore.py"))
        .stdin(std::fs::File::open(input_file.path()).unwrap())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), child)
        .await
        .expect("sigv4_botocore.py did not finish within 60 s")
        .unwrap_or_else(|e| panic!("cannot run python3 ({e}): install it and tests/e2e/requirements.txt"));
    assert!(
        output.status.success(),
        "sigv4_botocore.py failed (pip install -r tests/e2e/requirements.txt?):\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[tokio::test]
async fn signatures_match_botocore_for_fixed_inputs_and_times() {
    let cases = cases();
    let rust: Vec<http::HeaderMap> = cases.iter().map(rust_signature).collect();
    let botocore = botocore_signatures(&cases, &rust).await;
    assert_eq!(botocore.len(), cases.len());
    for ((case, ours), theirs) in cases.iter().zip(&rust).zip(&botocore) {
        let label = format!("{} {} ({} bytes)", case.method, case.url, case.body.len());
        assert_eq!(
            ours["authorization"].to_str().unwrap(),
            theirs["authorization"],
            "{label}"
        );
        assert_eq!(
            ours["x-amz-date"].to_str().unwrap(),
            theirs["x-amz-date"],
            "{label}"
        );
        assert_eq!(
            ours.get("x-amz-security-token").map(|v| v.to_str().unwrap()),
            theirs["x-amz-security-token"].as_str(),
            "{label}"
        );
        assert_eq!(
            ours["x-amz-content-sha256"].to_str().unwrap(),
            hex::encode(Sha256::digest(&case.body)),
            "{label}"
        );
    }
}

// === a SigV4 verifier, from the specification ===

fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut block = [0u8; 64];
    if key.len() > block.len() {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(block.map(|b| b ^ 0x36));
    inner.update(message);
    let mut outer = Sha256::new();
    outer.update(block.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// The parts of an `Authorization: AWS4-HMAC-SHA256 ...` header.
#[derive(Debug)]
struct Authorization {
    access_key: String,
    date: String,
    region: String,
    service: String,
    signed_headers: Vec<String>,
    signature: String,
}

fn parse_authorization(text: &str) -> Authorization {
    let rest = text
        .strip_prefix("AWS4-HMAC-SHA256 Credential=")
        .unwrap_or_else(|| panic!("not a SigV4 authorization: {text}"));
    let (credential, rest) = rest.split_once(", SignedHeaders=").unwrap();
    let (signed, signature) = rest.split_once(", Signature=").unwrap();
    let scope: Vec<&str> = credential.split('/').collect();
    assert_eq!(scope.len(), 5, "{credential}");
    assert_eq!(scope[4], "aws4_request");
    Authorization {
        access_key: scope[0].into(),
        date: scope[1].into(),
        region: scope[2].into(),
        service: scope[3].into(),
        signed_headers: signed.split(';').map(str::to_owned).collect(),
        signature: signature.into(),
    }
}

/// The signature a request with these parts must carry, computed as the SigV4 specification
/// says (for paths and queries that are already in canonical form, as the tests send them).
fn expected_signature(
    method: &str,
    target: &str,
    headers: &http::HeaderMap,
    body: &[u8],
    auth: &Authorization,
    secret: &str,
) -> String {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut pairs: Vec<&str> = query.split('&').filter(|p| !p.is_empty()).collect();
    pairs.sort_unstable();
    let canonical_headers: String = auth
        .signed_headers
        .iter()
        .map(|name| {
            let values: Vec<&str> = headers
                .get_all(name.as_str())
                .iter()
                .map(|v| v.to_str().unwrap().trim())
                .collect();
            assert!(!values.is_empty(), "signed header {name} was not received");
            format!("{name}:{}\n", values.join(","))
        })
        .collect();
    let canonical_request = format!(
        "{method}\n{path}\n{}\n{canonical_headers}\n{}\n{}",
        pairs.join("&"),
        auth.signed_headers.join(";"),
        hex::encode(Sha256::digest(body)),
    );
    let amz_date = headers["x-amz-date"].to_str().unwrap();
    let scope = format!("{}/{}/{}/aws4_request", auth.date, auth.region, auth.service);
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex::encode(Sha256::digest(canonical_request.as_bytes()))
    );
    let mut key = hmac_sha256(format!("AWS4{secret}").as_bytes(), auth.date.as_bytes());
    for part in [&auth.region, &auth.service, "aws4_request"] {
        key = hmac_sha256(&key, part.as_bytes());
    }
    hex::encode(hmac_sha256(&key, string_to_sign.as_bytes()))
}

/// Checks that `received` carries a valid signature by `secret` for its exact method, target,
/// headers and body, and returns its authorization.
fn verify(received: &Received, secret: &str) -> Authorization {
    let auth = parse_authorization(received.headers["authorization"].to_str().unwrap());
    let expected = expected_signature(
        received.method.as_str(),
        &received.target,
        &received.headers,
        &received.body,
        &auth,
        secret,
    );
    assert_eq!(
        auth.signature, expected,
        "the signature does not match the bytes received"
    );
    assert_eq!(
        received.headers["x-amz-content-sha256"].to_str().unwrap(),
        hex::encode(Sha256::digest(&received.body))
    );
    auth
}

#[test]
fn the_verifier_agrees_with_the_openai_sdk_vector() {
    // The official OpenAI Python SDK's Bedrock vector (tests/fixtures/bedrock/v1/sigv4.json), so
    // the verifier below is itself checked.
    let mut headers = http::HeaderMap::new();
    headers.insert("host", "bedrock-mantle.us-east-1.api.aws".parse().unwrap());
    headers.insert("content-type", "application/json".parse().unwrap());
    headers.insert("x-amz-date", "20250102T030405Z".parse().unwrap());
    headers.insert("x-amz-security-token", "fixture-session-token".parse().unwrap());
    let body = br#"{"model":"gpt-4o","input":"hello"}"#;
    headers.insert(
        "x-amz-content-sha256",
        hex::encode(Sha256::digest(body)).parse().unwrap(),
    );
    let auth = parse_authorization(
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20250102/us-east-1/bedrock-mantle/aws4_request, \
         SignedHeaders=content-type;host;x-amz-content-sha256;x-amz-date;x-amz-security-token, \
         Signature=dc20c8fbe516daf0ccae7e5b7a78fc2936870413a9f1af6e1b2d44b970ce411f",
    );
    let signature = expected_signature("POST", "/openai/v1/responses", &headers, body, &auth, SECRET_KEY);
    assert_eq!(signature, auth.signature);
    let other = expected_signature("POST", "/openai/v1/responses", &headers, b"{}", &auth, SECRET_KEY);
    assert_ne!(other, auth.signature);
}

// === through the proxy ===

const AWS_ENV: [(&str, &str); 3] = [
    ("AWS_ACCESS_KEY_ID", "AKIDPROXYTEST"),
    ("AWS_SECRET_ACCESS_KEY", "proxy-test-secret"),
    ("AWS_SESSION_TOKEN", "proxy-session-token"),
];

fn sigv4_config(upstream: &Upstream, extra: &str) -> String {
    format!(
        "default_provider = \"aws\"\n{extra}[providers.aws]\nbase_url = \"{}\"\nauth = {{ aws_sigv4 = {{ region = \"eu-central-1\", service = \"bedrock-mantle\" }} }}\n",
        upstream.base_url()
    )
}

/// A request carrying every kind of client credential and signing header.
fn with_client_credentials(request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    request
        .header("authorization", "Bearer client-key")
        .header("x-api-key", "client-x-api-key")
        .header("api-key", "client-api-key")
        .header("cookie", "session=client")
        .header("x-amz-security-token", "client-token")
        .header("x-amz-date", "20200101T000000Z")
        .header("x-amz-content-sha256", "UNSIGNED-PAYLOAD")
        .header("x-stainless-lang", "python")
}

/// The client credentials never reach the provider; the provider's signing headers are there.
fn assert_no_client_credential(received: &Received) {
    let headers = &received.headers;
    for name in ["x-api-key", "api-key", "cookie"] {
        assert!(!headers.contains_key(name), "{name} reached the provider");
    }
    assert_eq!(headers.get_all("authorization").iter().count(), 1);
    assert!(!headers["authorization"].to_str().unwrap().contains("client"));
    assert_eq!(headers["x-amz-security-token"], "proxy-session-token");
    assert_ne!(headers["x-amz-date"], "20200101T000000Z");
    assert_ne!(headers["x-amz-content-sha256"], "UNSIGNED-PAYLOAD");
    assert_eq!(headers["x-stainless-lang"], "python");
}

#[tokio::test]
async fn a_forwarded_request_is_signed_over_the_bytes_received() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let proxy = Proxy::start(&sigv4_config(&upstream, ""), &AWS_ENV).await;
    let body = "{\"model\":\"openai.gpt-oss-120b\",\"input\":\"h\u{e9}llo \u{2603}\"}";
    let response = with_client_credentials(reqwest::Client::new().post(proxy.url("/v1/responses?b=2&a=1")))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let response = with_client_credentials(reqwest::Client::new().get(proxy.url("/v1/models")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    let received = upstream.received();
    assert_eq!(received.len(), 2);
    let (post, get) = (&received[0], &received[1]);
    assert_eq!(post.body, body.as_bytes());
    assert_eq!(post.target, "/v1/responses?b=2&a=1");
    for request in [post, get] {
        let auth = verify(request, "proxy-test-secret");
        assert_eq!(auth.access_key, "AKIDPROXYTEST");
        assert_eq!(
            (auth.region.as_str(), auth.service.as_str()),
            ("eu-central-1", "bedrock-mantle")
        );
        assert!(
            auth.date.len() == 8 && days_from_today(&auth.date) <= 1,
            "{}",
            auth.date
        );
        assert_no_client_credential(request);
    }
    assert_eq!(
        parse_authorization(post.headers["authorization"].to_str().unwrap()).signed_headers,
        [
            "content-type",
            "host",
            "x-amz-content-sha256",
            "x-amz-date",
            "x-amz-security-token"
        ]
    );
    assert_eq!(
        parse_authorization(get.headers["authorization"].to_str().unwrap()).signed_headers,
        [
            "host",
            "x-amz-content-sha256",
            "x-amz-date",
            "x-amz-security-token"
        ]
    );
}

/// How many days the `YYYYMMDD` date of a credential scope is from today (a test may run
/// across midnight).
fn days_from_today(date: &str) -> u64 {
    let day = |time: SystemTime| time.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() / 86_400;
    let scoped = humantime::parse_rfc3339(&format!(
        "{}-{}-{}T00:00:00Z",
        &date[..4],
        &date[4..6],
        &date[6..8]
    ))
    .unwrap();
    day(scoped).abs_diff(day(SystemTime::now()))
}

#[tokio::test]
async fn a_stripped_body_is_signed_as_it_is_sent() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let config = sigv4_config(&upstream, "[gate.rules]\nnamespaced = \"strip\"\n");
    let proxy = Proxy::start(&config, &AWS_ENV).await;
    let body = r#"{"model":"m","input":[{"type":"message","role":"user","content":"hi"},{"type":"openai:web_search_call","id":"ws_1","status":"completed"}]}"#;
    let (status, _) = proxy.post_json("/v1/responses", body).await;
    assert_eq!(status, 200);
    let received = upstream.received();
    assert_eq!(received.len(), 1);
    assert!(received[0].body.len() < body.len(), "the item was not stripped");
    assert!(!String::from_utf8_lossy(&received[0].body).contains("web_search"));
    verify(&received[0], "proxy-test-secret");
}

#[cfg(not(feature = "aws-chain"))]
#[tokio::test]
async fn missing_or_expired_aws_credentials_get_503_naming_what_is_missing() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let expired = [
        ("AWS_ACCESS_KEY_ID", "AKID"),
        ("AWS_SECRET_ACCESS_KEY", "secret"),
        ("AWS_CREDENTIAL_EXPIRATION", "2020-01-01T00:00:00Z"),
    ];
    for (env, needle) in [
        (
            &[][..],
            "environment variables AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set",
        ),
        (
            &[("AWS_ACCESS_KEY_ID", "AKID")][..],
            "environment variable AWS_SECRET_ACCESS_KEY is not set",
        ),
        (&expired[..], "expired at 2020-01-01T00:00:00Z"),
    ] {
        let proxy = Proxy::start(&sigv4_config(&upstream, ""), env).await;
        let (status, body) = proxy
            .post_json("/v1/responses", r#"{"model":"m","input":"hi"}"#)
            .await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["error"]["code"], "provider_unconfigured");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{message}");
        assert!(message.contains("provider `aws`"), "{message}");
    }
    assert!(upstream.received().is_empty());
}

// === header_env ===

fn header_env_config(upstream: &Upstream) -> String {
    format!(
        "default_provider = \"azure\"\n[providers.azure]\nbase_url = \"{}\"\nauth = {{ header_env = {{ name = \"Api-Key\", var = \"AZURE_TEST_KEY\" }} }}\n",
        upstream.base_url()
    )
}

#[tokio::test]
async fn a_header_key_is_sent_in_its_header_instead_of_the_clients() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let proxy = Proxy::start(
        &header_env_config(&upstream),
        &[("AZURE_TEST_KEY", "azure-secret")],
    )
    .await;
    let response = with_client_credentials(reqwest::Client::new().post(proxy.url("/v1/responses")))
        .header("content-type", "application/json")
        .body(r#"{"model":"my-deployment","input":"hi"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let received = upstream.received();
    assert_eq!(received.len(), 1);
    let headers = &received[0].headers;
    let keys: Vec<&str> = headers
        .get_all("api-key")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(keys, ["azure-secret"]);
    for name in [
        "authorization",
        "x-api-key",
        "cookie",
        "x-amz-security-token",
        "x-amz-date",
    ] {
        assert!(!headers.contains_key(name), "{name} reached the provider");
    }
    assert_eq!(headers["x-stainless-lang"], "python");
}

#[tokio::test]
async fn an_unset_header_key_gets_503_naming_the_variable() {
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let proxy = Proxy::start(&header_env_config(&upstream), &[]).await;
    let (status, body) = proxy
        .post_json("/v1/responses", r#"{"model":"m","input":"hi"}"#)
        .await;
    assert_eq!(status, 503);
    assert_eq!(body["error"]["code"], "provider_unconfigured");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("environment variable AZURE_TEST_KEY is not set"));
    assert!(upstream.received().is_empty());
}
