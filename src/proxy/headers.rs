//! Which headers cross the proxy, in each direction.

use http::header::{self, HeaderMap, HeaderName};

use super::provider::Credential;

/// Connection-scoped headers (RFC 9110 §7.6.1) that a proxy must not forward.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// Client headers that carry the client's own credentials, session or account scope; they never
/// reach a provider that authenticates with a key of its own. (`Proxy-Authorization`, meant for
/// the proxy, is hop-by-hop and never reaches any provider.)
const CLIENT_CREDENTIALS: [&str; 8] = [
    "authorization",
    "api-key",
    "x-api-key",
    "openai-organization",
    "openai-project",
    "cookie",
    "x-amz-security-token",
    "x-amz-date",
];

/// Headers that ask a server to act as if the request had another method; a request is
/// gated for the method it has, so they never cross.
const METHOD_OVERRIDES: [&str; 3] = ["x-http-method-override", "x-http-method", "x-method-override"];

/// Whether [`strip_hop_by_hop`] removes `name` whatever `Connection` says.
fn is_hop_by_hop(name: &HeaderName) -> bool {
    name == header::UPGRADE || HOP_BY_HOP.contains(name)
}

/// Removes hop-by-hop headers, including any the `Connection` header names.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none (a name `Connection` lists goes only with `Connection`): one pass
    // over the names costs less than a lookup for each listed name.
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    // Removed by name, each removal a lookup: only the names the message has (usually
    // `Connection` alone, with `Keep-Alive` at most), not every name that could be there.
    let connection = headers.get_all(header::CONNECTION);
    let listed = |name: &HeaderName| {
        connection
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|token| token.trim().eq_ignore_ascii_case(name.as_str()))
    };
    let present: Vec<HeaderName> = headers
        .keys()
        .filter(|name| is_hop_by_hop(name) || listed(name))
        .cloned()
        .collect();
    for name in &present {
        headers.remove(name);
    }
}

/// The headers to send upstream: the client's, less hop-by-hop and framing headers, with the
/// provider's credential applied.
pub(crate) fn upstream_request_headers(mut headers: HeaderMap, credential: &Credential) -> HeaderMap {
    strip_hop_by_hop(&mut headers);
    // The upstream client sets these for the bytes it actually sends.
    headers.remove(header::HOST);
    headers.remove(header::CONTENT_LENGTH);
    // The rest are seldom there: one pass over the names finds them.
    let own = credential.is_own();
    let sigv4 = matches!(credential, Credential::SigV4(_));
    let dropped = |name: &HeaderName| {
        let name = name.as_str();
        name == "expect"
            || METHOD_OVERRIDES.contains(&name)
            || (own && CLIENT_CREDENTIALS.contains(&name))
            // Under SigV4 every `X-Amz-*` header goes (the client's date, token, payload hash, or
            // any other signing input): replaygate writes the ones it signs, and sends no other.
            || (sigv4 && name.starts_with("x-amz-"))
    };
    if headers.keys().any(dropped) {
        let names: Vec<HeaderName> = headers.keys().filter(|name| dropped(name)).cloned().collect();
        for name in names {
            headers.remove(name);
        }
    }
    match credential {
        Credential::Passthrough | Credential::Missing { .. } => {}
        Credential::None => {
            headers.remove(header::AUTHORIZATION);
        }
        Credential::Bearer(key) => {
            headers.insert(header::AUTHORIZATION, key.clone());
        }
        Credential::Header { name, value } => {
            headers.insert(name.clone(), value.clone());
        }
        // The signature's headers are added once the URL and the body are final.
        Credential::SigV4(_) => {}
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn client_headers() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("authorization", HeaderValue::from_static("Bearer client-key"));
        h.insert("openai-organization", HeaderValue::from_static("org-client"));
        h.insert("x-api-key", HeaderValue::from_static("client-key-2"));
        h.insert("connection", HeaderValue::from_static("keep-alive, x-private"));
        h.insert("x-private", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        h.insert("host", HeaderValue::from_static("proxy.local"));
        h.insert("content-length", HeaderValue::from_static("12"));
        h.insert("content-type", HeaderValue::from_static("application/json"));
        h.insert("x-stainless-lang", HeaderValue::from_static("python"));
        h.insert("cookie", HeaderValue::from_static("session=client"));
        h.insert(
            "proxy-authorization",
            HeaderValue::from_static("Basic cHJveHk6a2V5"),
        );
        h.insert("x-amz-security-token", HeaderValue::from_static("client-token"));
        h.insert("x-amz-date", HeaderValue::from_static("20260101T000000Z"));
        h.append("x-http-method-override", HeaderValue::from_static("PUT"));
        h.append("X-HTTP-Method", HeaderValue::from_static("PATCH"));
        h.append("X-Method-Override", HeaderValue::from_static("DELETE"));
        h
    }

    /// Headers that only a credential-supplying provider must drop.
    const SESSION_HEADERS: [&str; 3] = ["cookie", "x-amz-security-token", "x-amz-date"];

    #[test]
    fn hop_by_hop_and_framing_headers_never_cross() {
        let h = upstream_request_headers(client_headers(), &Credential::Passthrough);
        for gone in [
            "connection",
            "x-private",
            "keep-alive",
            "transfer-encoding",
            "host",
            "content-length",
        ] {
            assert!(!h.contains_key(gone), "{gone}");
        }
        assert_eq!(h["content-type"], "application/json");
        assert_eq!(h["x-stainless-lang"], "python");
    }

    #[test]
    fn passthrough_forwards_the_client_key() {
        let h = upstream_request_headers(client_headers(), &Credential::Passthrough);
        assert_eq!(h["authorization"], "Bearer client-key");
    }

    #[test]
    fn an_own_key_replaces_every_client_credential() {
        let key = HeaderValue::from_static("Bearer provider-key");
        let h = upstream_request_headers(client_headers(), &Credential::Bearer(key));
        assert_eq!(h.get_all("authorization").iter().count(), 1);
        assert_eq!(h["authorization"], "Bearer provider-key");
        assert!(!h.contains_key("x-api-key") && !h.contains_key("openai-organization"));
        for name in SESSION_HEADERS {
            assert!(!h.contains_key(name), "{name}");
        }
    }

    #[test]
    fn passthrough_forwards_the_client_session_but_never_proxy_authorization() {
        let h = upstream_request_headers(client_headers(), &Credential::Passthrough);
        for name in SESSION_HEADERS {
            assert!(h.contains_key(name), "{name}");
        }
        assert!(!h.contains_key("proxy-authorization"));
    }

    #[test]
    fn method_overrides_never_cross() {
        for credential in [
            Credential::Passthrough,
            Credential::None,
            Credential::Bearer(HeaderValue::from_static("Bearer k")),
        ] {
            let h = upstream_request_headers(client_headers(), &credential);
            for name in METHOD_OVERRIDES {
                assert!(!h.contains_key(name), "{name} under {credential:?}");
            }
        }
    }

    #[test]
    fn a_header_key_replaces_every_client_credential_and_its_own_name() {
        let credential = Credential::Header {
            name: HeaderName::from_static("api-key"),
            value: HeaderValue::from_static("provider-key"),
        };
        let mut client = client_headers();
        client.insert("api-key", HeaderValue::from_static("client-api-key"));
        let h = upstream_request_headers(client, &credential);
        assert_eq!(h.get_all("api-key").iter().count(), 1);
        assert_eq!(h["api-key"], "provider-key");
        for name in CLIENT_CREDENTIALS.iter().filter(|name| **name != "api-key") {
            assert!(!h.contains_key(*name), "{name}");
        }
        assert_eq!(h["x-stainless-lang"], "python");
    }

    #[test]
    fn sigv4_drops_every_client_credential_and_signing_header() {
        let signer = crate::proxy::sigv4::Signer::from_env(
            crate::proxy::sigv4::Scope {
                region: "us-east-1".into(),
                service: "bedrock".into(),
            },
            &|name: &str| {
                matches!(name, "AWS_ACCESS_KEY_ID" | "AWS_SECRET_ACCESS_KEY")
                    .then(|| format!("value-of-{name}"))
            },
        )
        .unwrap();
        let mut client = client_headers();
        client.insert("api-key", HeaderValue::from_static("client-api-key"));
        client.insert(
            "x-amz-content-sha256",
            HeaderValue::from_static("UNSIGNED-PAYLOAD"),
        );
        client.insert("X-Amz-User-Agent", HeaderValue::from_static("client"));
        client.insert("x-amzn-trace-id", HeaderValue::from_static("Root=1"));
        let h = upstream_request_headers(client, &Credential::SigV4(std::sync::Arc::new(signer)));
        for name in CLIENT_CREDENTIALS {
            assert!(!h.contains_key(name), "{name}");
        }
        assert!(!h.keys().any(|name| name.as_str().starts_with("x-amz-")), "{h:?}");
        assert_eq!(h["x-amzn-trace-id"], "Root=1");
        assert_eq!(h["content-type"], "application/json");
    }

    #[test]
    fn none_sends_no_authorization() {
        let h = upstream_request_headers(client_headers(), &Credential::None);
        assert!(!h.contains_key("authorization"));
    }

    #[test]
    fn each_listed_header_goes_even_alone() {
        for name in [
            "upgrade",
            "te",
            "trailer",
            "keep-alive",
            "proxy-connection",
            "transfer-encoding",
        ] {
            let mut h = HeaderMap::new();
            h.insert(name, HeaderValue::from_static("x"));
            h.insert("content-type", HeaderValue::from_static("application/json"));
            strip_hop_by_hop(&mut h);
            assert_eq!(h.len(), 1, "{name}: {h:?}");
        }
        for name in ["expect", "x-http-method-override", "host", "content-length"] {
            let mut h = HeaderMap::new();
            h.insert(name, HeaderValue::from_static("x"));
            h.insert("content-type", HeaderValue::from_static("application/json"));
            let h = upstream_request_headers(h, &Credential::Passthrough);
            assert_eq!(h.len(), 1, "{name}: {h:?}");
        }
        let mut h = HeaderMap::new();
        h.insert("content-type", HeaderValue::from_static("application/json"));
        h.insert("x-request-id", HeaderValue::from_static("1"));
        let before = h.clone();
        strip_hop_by_hop(&mut h);
        assert_eq!(h, before);
    }

    #[test]
    fn every_value_of_a_named_header_goes_and_the_rest_stays() {
        let mut h = HeaderMap::new();
        h.append("Connection", HeaderValue::from_static("keep-alive, X-Trace"));
        h.append("connection", HeaderValue::from_static(" x-hop ,close"));
        h.append("keep-alive", HeaderValue::from_static("timeout=5"));
        h.append("x-trace", HeaderValue::from_static("1"));
        h.append("x-trace", HeaderValue::from_static("2"));
        h.append("x-hop", HeaderValue::from_static("3"));
        h.append("te", HeaderValue::from_static("trailers"));
        h.append("upgrade", HeaderValue::from_static("websocket"));
        h.append("x-kept", HeaderValue::from_static("a"));
        h.append("x-kept", HeaderValue::from_static("b"));
        h.insert("content-type", HeaderValue::from_static("application/json"));
        strip_hop_by_hop(&mut h);
        let mut names: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["content-type", "x-kept"], "{h:?}");
        assert_eq!(h.get_all("x-kept").iter().count(), 2);
    }
}
