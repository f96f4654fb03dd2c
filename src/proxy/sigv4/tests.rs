//! Tests of SigV4 signing: canonical requests, signatures against known values, credentials.

use std::time::{Duration, SystemTime};

use super::*;

/// The AWS documentation's example key pair (public, not a real credential).
const ACCESS_KEY: &str = "AKIDEXAMPLE";
const SECRET_KEY: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

fn credentials(token: Option<&str>) -> Credentials {
    Credentials::new(ACCESS_KEY, SECRET_KEY, token.map(str::to_owned), None, "test")
}

fn scope(region: &str, service: &str) -> Scope {
    Scope {
        region: region.into(),
        service: service.into(),
    }
}

/// 2025-01-02T03:04:05Z.
fn fixed_time() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_735_787_045)
}

fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    move |name| {
        pairs
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
    }
}

#[test]
fn matches_the_openai_sdk_bedrock_vector() {
    // The vector of the official OpenAI Python SDK's Bedrock signer
    // (tests/fixtures/bedrock/v1/sigv4.json in openai/openai-python).
    let body = br#"{"model":"gpt-4o","input":"hello"}"#;
    let request = Unsigned {
        method: "POST",
        url: "https://bedrock-mantle.us-east-1.api.aws/openai/v1/responses",
        content_type: Some("application/json"),
        body,
    };
    let headers = sign(
        &request,
        &credentials(Some("fixture-session-token")),
        &scope("us-east-1", "bedrock-mantle"),
        fixed_time(),
    )
    .unwrap();
    assert_eq!(
        headers["authorization"],
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20250102/us-east-1/bedrock-mantle/aws4_request, \
         SignedHeaders=content-type;host;x-amz-content-sha256;x-amz-date;x-amz-security-token, \
         Signature=dc20c8fbe516daf0ccae7e5b7a78fc2936870413a9f1af6e1b2d44b970ce411f"
    );
    assert_eq!(headers["x-amz-date"], "20250102T030405Z");
    assert_eq!(
        headers["x-amz-content-sha256"],
        "50329e51ad520f21b77bad0b01999930ff556cd1bf18434701251ba6c9f877bc"
    );
    assert_eq!(headers["x-amz-security-token"], "fixture-session-token");
    assert_eq!(headers.len(), 4);
}

#[test]
fn signs_only_the_fixed_header_set() {
    let request = Unsigned {
        method: "POST",
        url: "http://127.0.0.1:8080/openai/v1/responses?b=2&a=1",
        content_type: None,
        body: b"",
    };
    let headers = sign(
        &request,
        &credentials(None),
        &scope("us-west-2", "bedrock"),
        fixed_time(),
    )
    .unwrap();
    let authorization = headers["authorization"].to_str().unwrap();
    assert!(
        authorization.starts_with(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20250102/us-west-2/bedrock/aws4_request, \
             SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature="
        ),
        "{authorization}"
    );
    assert!(!headers.contains_key("x-amz-security-token"));
    // SHA-256 of no bytes.
    assert_eq!(
        headers["x-amz-content-sha256"],
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
}

#[test]
fn the_secret_bearing_headers_are_sensitive() {
    let request = Unsigned {
        method: "POST",
        url: "https://bedrock-runtime.us-east-1.amazonaws.com/openai/v1/responses",
        content_type: Some("application/json"),
        body: b"{}",
    };
    let headers = sign(
        &request,
        &credentials(Some("tok")),
        &scope("us-east-1", "bedrock"),
        fixed_time(),
    )
    .unwrap();
    assert!(headers["authorization"].is_sensitive());
    assert!(headers["x-amz-security-token"].is_sensitive());
}

#[test]
fn every_signed_part_changes_the_signature() {
    let signature = |request: Unsigned<'_>, scope: Scope, time: SystemTime| {
        let headers = sign(&request, &credentials(None), &scope, time).unwrap();
        let authorization = headers["authorization"].to_str().unwrap().to_owned();
        authorization.rsplit_once("Signature=").unwrap().1.to_owned()
    };
    let base = Unsigned {
        method: "POST",
        url: "https://bedrock-runtime.us-east-1.amazonaws.com/openai/v1/responses",
        content_type: Some("application/json"),
        body: b"{\"model\":\"m\"}",
    };
    let first = signature(base, scope("us-east-1", "bedrock"), fixed_time());
    let variants = [
        signature(
            Unsigned {
                body: b"{\"model\":\"n\"}",
                ..base
            },
            scope("us-east-1", "bedrock"),
            fixed_time(),
        ),
        signature(
            Unsigned {
                method: "GET",
                ..base
            },
            scope("us-east-1", "bedrock"),
            fixed_time(),
        ),
        signature(
            Unsigned {
                url: "https://bedrock-runtime.us-east-1.amazonaws.com/openai/v1/responses?x=1",
                ..base
            },
            scope("us-east-1", "bedrock"),
            fixed_time(),
        ),
        signature(
            Unsigned {
                content_type: Some("text/plain"),
                ..base
            },
            scope("us-east-1", "bedrock"),
            fixed_time(),
        ),
        signature(base, scope("us-east-2", "bedrock"), fixed_time()),
        signature(base, scope("us-east-1", "bedrock-mantle"), fixed_time()),
        signature(
            base,
            scope("us-east-1", "bedrock"),
            fixed_time() + Duration::from_secs(1),
        ),
    ];
    for (i, other) in variants.iter().enumerate() {
        assert_ne!(&first, other, "variant {i}");
    }
    assert_eq!(
        first,
        signature(base, scope("us-east-1", "bedrock"), fixed_time())
    );
}

#[test]
fn the_host_is_written_as_a_client_sends_it() {
    assert_eq!(host_of("http://127.0.0.1:8080/v1").unwrap(), "127.0.0.1:8080");
    assert_eq!(host_of("https://example.com:443/v1").unwrap(), "example.com");
    assert_eq!(host_of("http://example.com:80/v1").unwrap(), "example.com");
    assert_eq!(host_of("https://example.com:8443").unwrap(), "example.com:8443");
    assert_eq!(host_of("http://[::1]:9/x").unwrap(), "[::1]:9");
}

#[test]
fn content_type_is_read_as_sent() {
    let mut headers = HeaderMap::new();
    assert_eq!(content_type_of(&headers), None);
    headers.append(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    assert_eq!(content_type_of(&headers).as_deref(), Some("application/json"));
    headers.append(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    assert_eq!(
        content_type_of(&headers).as_deref(),
        Some("application/json,text/plain")
    );
    headers.insert(CONTENT_TYPE, HeaderValue::from_bytes(b"text/\xe9").unwrap());
    assert_eq!(content_type_of(&headers), None);
}

#[test]
fn missing_keys_are_named() {
    let scope = || scope("us-east-1", "bedrock");
    let neither = Signer::from_env(scope(), &env_of(&[]));
    #[cfg(not(feature = "aws-chain"))]
    assert_eq!(
        neither.unwrap_err(),
        "environment variables AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set"
    );
    // The default chain stands in for the environment.
    #[cfg(feature = "aws-chain")]
    assert!(neither.is_ok());
    let error = Signer::from_env(scope(), &env_of(&[("AWS_ACCESS_KEY_ID", "AKID")])).unwrap_err();
    assert_eq!(error, "environment variable AWS_SECRET_ACCESS_KEY is not set");
    let error = Signer::from_env(
        scope(),
        &env_of(&[("AWS_ACCESS_KEY_ID", "  "), ("AWS_SECRET_ACCESS_KEY", "s")]),
    )
    .unwrap_err();
    assert_eq!(error, "environment variable AWS_ACCESS_KEY_ID is not set");
    let error = Signer::from_env(
        scope(),
        &env_of(&[
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("AWS_CREDENTIAL_EXPIRATION", "tomorrow"),
        ]),
    )
    .unwrap_err();
    assert!(error.contains("AWS_CREDENTIAL_EXPIRATION"), "{error}");
}

fn signed_now(signer: &Signer) -> Result<HeaderMap, SignFailure> {
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let url = "https://bedrock-runtime.us-east-1.amazonaws.com/openai/v1/responses";
    runtime.block_on(signer.sign_now(&Method::POST, url, &HeaderMap::new(), &Bytes::from_static(b"{}")))
}

#[test]
fn environment_credentials_sign_until_they_expire() {
    let signer = Signer::from_env(
        scope("us-east-1", "bedrock"),
        &env_of(&[
            ("AWS_ACCESS_KEY_ID", "AKIDTEST"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_SESSION_TOKEN", "session"),
            ("AWS_CREDENTIAL_EXPIRATION", "2999-01-01T00:00:00Z"),
        ]),
    )
    .unwrap();
    let headers = signed_now(&signer).unwrap();
    assert!(headers["authorization"]
        .to_str()
        .unwrap()
        .starts_with("AWS4-HMAC-SHA256 Credential=AKIDTEST/"));
    assert_eq!(headers["x-amz-security-token"], "session");

    let expired = Signer::from_env(
        scope("us-east-1", "bedrock"),
        &env_of(&[
            ("AWS_ACCESS_KEY_ID", "AKIDTEST"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_CREDENTIAL_EXPIRATION", "2020-01-01T00:00:00Z"),
        ]),
    )
    .unwrap();
    match signed_now(&expired) {
        Err(SignFailure::Credentials(reason)) => {
            assert!(reason.contains("expired at 2020-01-01T00:00:00Z"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn debug_output_never_shows_the_secret() {
    let signer = Signer::from_env(
        scope("us-east-1", "bedrock"),
        &env_of(&[
            ("AWS_ACCESS_KEY_ID", "AKIDTEST"),
            ("AWS_SECRET_ACCESS_KEY", "very-secret"),
        ]),
    )
    .unwrap();
    let text = format!("{signer:?}");
    assert!(
        !text.contains("very-secret") && !text.contains("AKIDTEST"),
        "{text}"
    );
}
