//! Forwarding to an `https` provider, as every hosted provider is reached: `replaygate serve`
//! (trusting a CA made for the run through `SSL_CERT_FILE`) connects to a TLS upstream on
//! loopback, agrees on HTTP/2 by ALPN, and the body arrives byte for byte. A certificate from an
//! issuer it does not trust is a 502, never a request sent.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response, Version};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::support::serve::Serve;

const ANSWER: &str = r#"{"id":"resp_tls","object":"response","status":"completed","output":[]}"#;

/// What the upstream saw of one request: the HTTP version and the body.
type Seen = Arc<Mutex<Vec<(Version, Bytes)>>>;

/// A CA for the run, as PEM, and a certificate for `localhost` it signed, with its key.
fn certificates() -> (String, CertificateDer<'static>, PrivateKeyDer<'static>) {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "replaygate test CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    (ca.pem(), leaf.der().clone(), key)
}

/// A TLS upstream on 127.0.0.1 offering `h2` and `http/1.1`; it records each request and
/// answers a fixed response.
async fn tls_upstream(cert: CertificateDer<'static>, key: PrivateKeyDer<'static>) -> (u16, Seen) {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Seen::default();
    let recorded = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let recorded = recorded.clone();
            tokio::spawn(async move {
                // A client that gives up on the certificate ends the handshake: nothing to serve.
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                    let recorded = recorded.clone();
                    async move {
                        let version = request.version();
                        let body = request.into_body().collect().await?.to_bytes();
                        recorded.lock().unwrap().push((version, body));
                        let mut answer = Response::new(Full::new(Bytes::from_static(ANSWER.as_bytes())));
                        answer
                            .headers_mut()
                            .insert("content-type", "application/json".parse().unwrap());
                        Ok::<_, hyper::Error>(answer)
                    }
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (port, seen)
}

/// `replaygate serve` with one `auth = "none"` provider at `https://localhost:PORT/v1`, trusting
/// only the certificates in `trusted` (PEM).
async fn proxy_to(port: u16, trusted: &str, dir: &std::path::Path) -> Serve {
    let config = dir.join("proxy.toml");
    std::fs::write(
        &config,
        format!(
            "default_provider = \"openai\"\n[providers.openai]\nbase_url = \"https://localhost:{port}/v1\"\nauth = \"none\"\n"
        ),
    )
    .unwrap();
    let roots = dir.join("roots.pem");
    std::fs::write(&roots, trusted).unwrap();
    let mut command = Serve::command(&config);
    command.env("SSL_CERT_FILE", &roots).env_remove("SSL_CERT_DIR");
    Serve::start(command).await
}

fn request_body() -> &'static str {
    r#"{"model":"gpt-5","input":[{"type":"message","role":"user","content":"caf\u00e9 \u2014 tls"}]}"#
}

async fn post(proxy: &Serve) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("http://{}/v1/responses", proxy.address))
        .header("content-type", "application/json")
        .body(request_body())
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn https_providers_are_reached_over_http2_with_the_body_unchanged() {
    let (ca_pem, cert, key) = certificates();
    let (port, seen) = tls_upstream(cert, key).await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = proxy_to(port, &ca_pem, dir.path()).await;

    for _ in 0..2 {
        let answer = post(&proxy).await;
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.text().await.unwrap(), ANSWER);
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    for (version, body) in seen {
        assert_eq!(version, Version::HTTP_2, "ALPN should have chosen h2");
        assert_eq!(
            body,
            request_body().as_bytes(),
            "the body must arrive byte for byte"
        );
    }
}

#[tokio::test]
async fn a_certificate_from_an_untrusted_issuer_is_a_502_and_nothing_is_sent() {
    let (_, cert, key) = certificates();
    // The proxy trusts another CA only.
    let (other_ca, _, _) = certificates();
    let (port, seen) = tls_upstream(cert, key).await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = proxy_to(port, &other_ca, dir.path()).await;

    let answer = post(&proxy).await;
    assert_eq!(answer.status(), 502);
    let error: serde_json::Value = serde_json::from_str(&answer.text().await.unwrap()).unwrap();
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("certificate") || message.contains("UnknownIssuer"),
        "{error}"
    );
    assert!(seen.lock().unwrap().is_empty());
}
