//! The listener's own TLS (docs/operations.md#tls): HTTPS over HTTP/1.1 and HTTP/2 (ALPN),
//! gated requests, streamed answers and WebSockets over it; TLS 1.2 and 1.3 only; client
//! certificates, optional or required, verified against `tls_client_ca_file`; the handshake
//! bounded by the header timeout; plain HTTP and TLS 1.0 refused without hanging; a reload
//! serves new handshakes with the new certificate while open connections keep theirs, and a
//! file that does not load keeps the old one.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::support::pki::{Issued, TestCa};
use crate::support::proxy::Proxy;
use crate::support::upstream::{sse_response, Upstream, RESPONSE_JSON};

const LIMIT: Duration = Duration::from_secs(10);

/// A body the gate refuses: the output of a call that was never made.
const ORPHAN_OUTPUT: &str =
    r#"{"model":"gpt-5","input":[{"type":"function_call_output","call_id":"call_nowhere","output":"x"}]}"#;

/// The certificates of one test: the server's (for localhost and 127.0.0.1) and its CA, a
/// client CA and a client certificate it issued.
pub(crate) struct Pki {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) ca: TestCa,
    pub(crate) ca_file: PathBuf,
    pub(crate) server: Issued,
    pub(crate) client_ca: TestCa,
    pub(crate) client_ca_file: PathBuf,
    pub(crate) client: Issued,
}

impl Pki {
    pub(crate) fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("replaygate listener test CA");
        let ca_file = ca.write(dir.path(), "server-ca");
        let server = ca.issue(&["localhost", "127.0.0.1"], dir.path(), "server");
        let client_ca = TestCa::new("replaygate client test CA");
        let client_ca_file = client_ca.write(dir.path(), "client-ca");
        let client = client_ca.issue(&["client.example"], dir.path(), "client");
        Pki {
            dir,
            ca,
            ca_file,
            server,
            client_ca,
            client_ca_file,
            client,
        }
    }

    /// The `[server]` TLS keys, with `more` (`tls_client_*`, timeouts) after them.
    pub(crate) fn server_keys(&self, more: &str) -> String {
        format!(
            "[server]\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n{more}\n",
            self.server.cert.display(),
            self.server.key.display()
        )
    }

    /// `tls_client_ca_file` with `tls_client_auth = auth`.
    pub(crate) fn client_ca_keys(&self, auth: &str) -> String {
        format!(
            "tls_client_ca_file = \"{}\"\ntls_client_auth = \"{auth}\"\n",
            self.client_ca_file.display()
        )
    }

    /// A reqwest client that trusts the server's CA only.
    pub(crate) fn reqwest(&self) -> reqwest::ClientBuilder {
        let ca = reqwest::Certificate::from_pem(&std::fs::read(&self.ca_file).unwrap()).unwrap();
        reqwest::Client::builder().no_proxy().tls_certs_only([ca])
    }
}

/// The identity of `issued`, for reqwest.
fn identity(issued: &Issued) -> reqwest::Identity {
    let mut pem = std::fs::read(&issued.cert).unwrap();
    pem.extend(std::fs::read(&issued.key).unwrap());
    reqwest::Identity::from_pem(&pem).unwrap()
}

/// A proxy in front of `upstream` whose `[server]` table is `server`.
async fn proxy(upstream: &Upstream, server: &str) -> Proxy {
    let config = format!(
        "{server}\ndefault_provider = \"openai\"\n[providers.openai]\nbase_url = \"{}\"\nauth = \"passthrough\"\n",
        upstream.base_url()
    );
    Proxy::start(&config, &[]).await
}

fn https(proxy: &Proxy, path: &str) -> String {
    format!("https://127.0.0.1:{}{path}", proxy.addr.port())
}

/// A rustls client configuration trusting `ca_file`, with `identity` (certificate and key) if
/// given, for protocol `versions` and offering ALPN `alpn`.
fn client_config(
    ca_file: &Path,
    identity: Option<&Issued>,
    versions: &[&'static rustls::SupportedProtocolVersion],
    alpn: &[&[u8]],
) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_file_iter(ca_file).unwrap() {
        roots.add(certificate.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match identity {
        Some(issued) => builder
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(&issued.cert)
                    .unwrap()
                    .map(Result::unwrap)
                    .collect(),
                PrivateKeyDer::from_pem_file(&issued.key).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config
}

/// A TLS connection to `addr` under `config`, naming `localhost`.
async fn tls_connect(
    addr: SocketAddr,
    config: rustls::ClientConfig,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let connector = TlsConnector::from(Arc::new(config));
    let name = ServerName::try_from("localhost").unwrap();
    // Over TLS 1.3 the server checks the client's certificate after the client's handshake
    // ends: a refusal then shows as the first read's error.
    tokio::time::timeout(LIMIT, connector.connect(name, tcp))
        .await
        .expect("the handshake did not end")
}

/// Sends a `GET /v1/models` (HTTP/1.1, `connection: close`) on `stream` and returns the status
/// line, or the error that ended the exchange.
async fn status_line(stream: &mut TlsStream<TcpStream>) -> std::io::Result<String> {
    stream
        .write_all(b"GET /v1/models HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .await?;
    let mut answer = Vec::new();
    tokio::time::timeout(LIMIT, stream.read_to_end(&mut answer))
        .await
        .expect("no answer in time")?;
    let text = String::from_utf8_lossy(&answer);
    Ok(text.lines().next().unwrap_or_default().to_owned())
}

#[tokio::test]
async fn https_serves_http1_and_http2_by_alpn_and_gates_over_both() {
    let pki = Pki::new();
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let proxy = proxy(&upstream, &pki.server_keys("")).await;

    for (client, version) in [
        (
            pki.reqwest().http1_only().build().unwrap(),
            reqwest::Version::HTTP_11,
        ),
        (pki.reqwest().build().unwrap(), reqwest::Version::HTTP_2),
    ] {
        let answer = client
            .post(https(&proxy, "/v1/responses"))
            .header("content-type", "application/json")
            .body(r#"{"model":"gpt-5","input":"hi"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.version(), version);
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.text().await.unwrap(), RESPONSE_JSON);

        let refused = client
            .post(https(&proxy, "/v1/responses"))
            .header("content-type", "application/json")
            .body(ORPHAN_OUTPUT)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.version(), version);
        assert_eq!(refused.status(), 422);
        let envelope: serde_json::Value = serde_json::from_slice(&refused.bytes().await.unwrap()).unwrap();
        assert_eq!(envelope["error"]["type"], "invalid_request_error", "{envelope}");
    }
    assert_eq!(
        upstream.received().len(),
        2,
        "the refused requests reached no one"
    );
}

#[tokio::test]
async fn tls_1_2_and_1_3_are_served_and_h2_is_chosen_first() {
    let pki = Pki::new();
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let proxy = proxy(&upstream, &pki.server_keys("")).await;
    for (versions, expected) in [
        (&[&rustls::version::TLS12][..], rustls::ProtocolVersion::TLSv1_2),
        (&[&rustls::version::TLS13][..], rustls::ProtocolVersion::TLSv1_3),
    ] {
        let config = client_config(&pki.ca_file, None, versions, &[b"http/1.1"]);
        let mut stream = tls_connect(proxy.addr, config).await.unwrap();
        assert_eq!(stream.get_ref().1.protocol_version(), Some(expected));
        assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
        let line = status_line(&mut stream).await.unwrap();
        assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    }
    let config = client_config(
        &pki.ca_file,
        None,
        &[&rustls::version::TLS13],
        &[b"h2", b"http/1.1"],
    );
    let stream = tls_connect(proxy.addr, config).await.unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    // A client that offers no ALPN at all is served HTTP/1.1.
    let config = client_config(&pki.ca_file, None, &[&rustls::version::TLS13], &[]);
    let mut stream = tls_connect(proxy.addr, config).await.unwrap();
    assert!(status_line(&mut stream)
        .await
        .unwrap()
        .starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn sse_events_arrive_one_by_one_over_http2() {
    let pki = Pki::new();
    let (senders_tx, mut senders) = tokio::sync::mpsc::channel::<tokio::sync::mpsc::Sender<Bytes>>(1);
    let upstream = Upstream::start(move |_| {
        let senders_tx = senders_tx.clone();
        async move {
            let (events, response) = sse_response();
            senders_tx.send(events).await.unwrap();
            response
        }
    })
    .await;
    let proxy = proxy(&upstream, &pki.server_keys("")).await;
    let client = pki.reqwest().build().unwrap();
    let answer = client
        .post(https(&proxy, "/v1/responses"))
        .body(r#"{"model":"gpt-5","stream":true,"input":"hi"}"#)
        .send();
    let (answer, events) = tokio::join!(answer, async {
        tokio::time::timeout(LIMIT, senders.recv())
            .await
            .unwrap()
            .unwrap()
    });
    let answer = answer.unwrap();
    assert_eq!(answer.version(), reqwest::Version::HTTP_2);
    assert_eq!(answer.headers()["content-type"], "text/event-stream");
    let mut body = answer.bytes_stream();
    for n in 0..3 {
        let event = format!("event: response.output_text.delta\ndata: {{\"n\":{n}}}\n\n");
        events.send(Bytes::from(event.clone())).await.unwrap();
        // Each event comes through before the next is sent.
        let chunk = tokio::time::timeout(LIMIT, body.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(chunk, event.as_bytes());
    }
    drop(events);
    let mut rest = Vec::new();
    while let Some(chunk) = tokio::time::timeout(LIMIT, body.next()).await.unwrap() {
        rest.extend_from_slice(&chunk.unwrap());
    }
    assert!(rest.is_empty(), "{:?}", String::from_utf8_lossy(&rest));
}

#[tokio::test]
async fn websockets_upgrade_over_tls() {
    use crate::websocket::fake_provider::{turn_events, Behaviour, FakeProvider};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message;

    let pki = Pki::new();
    let provider = FakeProvider::start(Behaviour::Turns).await;
    let config = format!(
        "{}\ndefault_provider = \"openai\"\n[providers.openai]\nbase_url = \"{}\"\nauth = {{ bearer_env = \"UP_KEY\" }}\n",
        pki.server_keys(""),
        provider.base_url()
    );
    let proxy = Proxy::start(&config, &[("UP_KEY", "sk-provider")]).await;
    let tls = client_config(&pki.ca_file, None, &[&rustls::version::TLS13], &[b"http/1.1"]);
    let stream = tls_connect(proxy.addr, tls).await.unwrap();
    let request = format!("wss://localhost:{}/v1/responses", proxy.addr.port())
        .into_client_request()
        .unwrap();
    let (mut socket, _) = tokio::time::timeout(LIMIT, tokio_tungstenite::client_async(request, stream))
        .await
        .unwrap()
        .unwrap();
    let create = r#"{"type":"response.create","model":"gpt-5","input":[{"role":"user","content":"hi"}],"store":false}"#;
    socket.send(Message::text(create)).await.unwrap();
    let mut events = Vec::new();
    for _ in 0..3 {
        match tokio::time::timeout(LIMIT, socket.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            Message::Text(text) => events.push(text.to_string()),
            other => panic!("expected a text message, got {other:?}"),
        }
    }
    assert_eq!(events, turn_events(1));
    assert_eq!(provider.texts(), [create]);
}

#[tokio::test]
async fn optional_client_certificates_serve_clients_with_and_without_one() {
    let pki = Pki::new();
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let proxy = proxy(&upstream, &pki.server_keys(&pki.client_ca_keys("optional"))).await;
    let without = pki.reqwest().build().unwrap();
    let with = pki.reqwest().identity(identity(&pki.client)).build().unwrap();
    for client in [without, with] {
        let answer = client
            .post(https(&proxy, "/v1/responses"))
            .body(r#"{"model":"gpt-5","input":"hi"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
    }
    // A certificate from another CA fails the handshake even where none is required.
    let stranger = TestCa::new("stranger").issue(&["client.example"], pki.dir.path(), "stranger");
    let config = client_config(&pki.ca_file, Some(&stranger), &[&rustls::version::TLS13], &[]);
    let refused = match tls_connect(proxy.addr, config).await {
        Err(error) => error,
        Ok(mut stream) => status_line(&mut stream).await.unwrap_err(),
    };
    assert!(refused.to_string().contains("alert"), "{refused}");
}

#[tokio::test]
async fn required_client_certificates_refuse_missing_expired_early_and_untrusted_ones() {
    let pki = Pki::new();
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let proxy = proxy(&upstream, &pki.server_keys(&pki.client_ca_keys("required"))).await;
    let dir = pki.dir.path();
    let expired = pki.client_ca.issue_expired(&["client.example"], dir, "expired");
    let early = pki
        .client_ca
        .issue_not_yet_valid(&["client.example"], dir, "early");
    let stranger = TestCa::new("stranger").issue(&["client.example"], dir, "stranger");
    for versions in [&[&rustls::version::TLS12][..], &[&rustls::version::TLS13][..]] {
        let config = client_config(&pki.ca_file, Some(&pki.client), versions, &[]);
        let mut stream = tls_connect(proxy.addr, config).await.unwrap();
        assert!(status_line(&mut stream)
            .await
            .unwrap()
            .starts_with("HTTP/1.1 200"));
        for refused in [None, Some(&expired), Some(&early), Some(&stranger)] {
            let config = client_config(&pki.ca_file, refused, versions, &[]);
            let outcome = match tls_connect(proxy.addr, config).await {
                Err(error) => Err(error),
                Ok(mut stream) => status_line(&mut stream).await,
            };
            assert!(
                outcome.is_err(),
                "{:?} was served: {outcome:?}",
                refused.map(|i| &i.cert)
            );
        }
    }
    assert_eq!(
        upstream.received().len(),
        2,
        "only the verified clients' requests went on"
    );
}

#[tokio::test]
async fn plain_http_and_tls_1_0_are_closed_without_hanging() {
    let pki = Pki::new();
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let proxy = proxy(&upstream, &pki.server_keys("")).await;

    let mut plain = TcpStream::connect(proxy.addr).await.unwrap();
    plain
        .write_all(b"GET /v1/models HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(LIMIT, plain.read_to_end(&mut answer))
        .await
        .expect("a plain HTTP request to the TLS port was left hanging");
    assert!(!answer.starts_with(b"HTTP/"), "answered in clear");

    // A ClientHello that offers TLS 1.0 and nothing later: an alert, then the close.
    let mut tls10 = TcpStream::connect(proxy.addr).await.unwrap();
    tls10.write_all(&client_hello_tls10()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(LIMIT, tls10.read_to_end(&mut answer))
        .await
        .expect("a TLS 1.0 ClientHello was left hanging");
    assert_eq!(answer.first(), Some(&0x15), "an alert record: {answer:?}");
    assert!(answer.len() <= 7, "nothing but the alert: {answer:?}");
}

/// A TLS 1.0 ClientHello (no `supported_versions` extension) offering one TLS 1.0 cipher suite.
fn client_hello_tls10() -> Vec<u8> {
    let mut hello = vec![0x03, 0x01]; // client_version: TLS 1.0
    hello.extend([0x5a; 32]); // random
    hello.push(0); // no session id
    hello.extend([0x00, 0x02, 0x00, 0x2f]); // TLS_RSA_WITH_AES_128_CBC_SHA
    hello.extend([0x01, 0x00]); // null compression
    let mut handshake = vec![0x01, 0x00, 0x00, hello.len() as u8];
    handshake.extend(hello);
    let mut record = vec![0x16, 0x03, 0x01, 0x00, handshake.len() as u8];
    record.extend(handshake);
    record
}

#[tokio::test]
async fn a_handshake_ends_at_the_header_timeout_and_handshakes_are_bounded() {
    let pki = Pki::new();
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let server = pki.server_keys("header_read_timeout_ms = 500\nmax_concurrent_requests = 2");
    let proxy = proxy(&upstream, &server).await;

    // Stalled handshakes: the record header of a ClientHello and no more, many more than the
    // two permits, and one client that sends nothing at all.
    let started = Instant::now();
    let mut stalled = Vec::new();
    for _ in 0..20 {
        let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
        stream.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00]).await.unwrap();
        stalled.push(stream);
    }
    stalled.push(TcpStream::connect(proxy.addr).await.unwrap());
    // A real client that comes while the permits are held waits for one: it is served once the
    // stalled handshakes are closed, at their header timeout.
    tokio::time::sleep(Duration::from_millis(250)).await;
    let answer = pki
        .reqwest()
        .build()
        .unwrap()
        .get(https(&proxy, "/v1/models"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    for mut stream in stalled {
        let mut rest = Vec::new();
        tokio::time::timeout(LIMIT, stream.read_to_end(&mut rest))
            .await
            .expect("a stalled handshake was not closed")
            .ok();
    }
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(400), "{elapsed:?}");
    assert!(
        elapsed < Duration::from_secs(5),
        "closed at the header timeout: {elapsed:?}"
    );
}

#[tokio::test]
async fn another_server_name_is_served_with_the_one_certificate() {
    let pki = Pki::new();
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let proxy = proxy(&upstream, &pki.server_keys("")).await;
    // The client names another host and does not check the name against the certificate.
    let client = pki
        .reqwest()
        .tls_danger_accept_invalid_hostnames(true)
        .resolve("elsewhere.example", proxy.addr)
        .build()
        .unwrap();
    let answer = client
        .get(format!(
            "https://elsewhere.example:{}/v1/models",
            proxy.addr.port()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
}

#[tokio::test]
async fn a_reload_serves_new_handshakes_the_new_certificate_and_keeps_open_connections() {
    let pki = Pki::new();
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let config = format!(
        "{}\ndefault_provider = \"openai\"\n[providers.openai]\nbase_url = \"{}\"\nauth = \"passthrough\"\n",
        pki.server_keys(""),
        upstream.base_url()
    );
    let proxy = Proxy::start(&config, &[]).await;
    let parsed = replaygate::config::Config::from_toml(&config).unwrap();

    // An open HTTP/2 connection under the first certificate.
    let old_client = pki.reqwest().build().unwrap();
    let models = https(&proxy, "/v1/models");
    assert_eq!(old_client.get(&models).send().await.unwrap().status(), 200);

    // A file that does not load: the reload fails naming it, and the old certificate serves.
    let key_bytes = std::fs::read(&pki.server.key).unwrap();
    std::fs::write(&pki.server.key, b"not a key").unwrap();
    let error = proxy.reloader.reload(&parsed, &|_| None).unwrap_err().to_string();
    assert!(error.contains(&pki.server.key.display().to_string()), "{error}");
    assert!(error.contains("tls_key_file"), "{error}");
    std::fs::write(&pki.server.key, &key_bytes).unwrap();
    let fresh = pki.reqwest().build().unwrap();
    assert_eq!(fresh.get(&models).send().await.unwrap().status(), 200);

    // A key of the wrong certificate: refused, naming the key file, never its bytes.
    let other = pki.ca.issue(&["localhost"], pki.dir.path(), "other");
    std::fs::copy(&other.key, &pki.server.key).unwrap();
    let error = proxy.reloader.reload(&parsed, &|_| None).unwrap_err().to_string();
    assert!(error.contains("does not match"), "{error}");
    let other_key = std::fs::read_to_string(&other.key).unwrap();
    for line in other_key.lines().filter(|line| !line.starts_with("-----")) {
        assert!(!error.contains(line), "the error quotes the key");
    }

    // A new certificate from a new CA: new handshakes get it, the open connection goes on.
    let new_ca = TestCa::new("replaygate rotated CA");
    let new_ca_file = new_ca.write(pki.dir.path(), "rotated-ca");
    let rotated = new_ca.issue(&["localhost", "127.0.0.1"], pki.dir.path(), "rotated");
    std::fs::copy(&rotated.cert, &pki.server.cert).unwrap();
    std::fs::copy(&rotated.key, &pki.server.key).unwrap();
    proxy.reloader.reload(&parsed, &|_| None).unwrap();

    let new_ca_pem = reqwest::Certificate::from_pem(&std::fs::read(&new_ca_file).unwrap()).unwrap();
    let new_client = reqwest::Client::builder()
        .no_proxy()
        .tls_certs_only([new_ca_pem])
        .build()
        .unwrap();
    assert_eq!(new_client.get(&models).send().await.unwrap().status(), 200);
    assert!(
        pki.reqwest().build().unwrap().get(&models).send().await.is_err(),
        "a new handshake still got the old certificate"
    );
    assert_eq!(
        old_client.get(&models).send().await.unwrap().status(),
        200,
        "the connection opened before the reload"
    );
}

/// A chain of `length` certificates, leaf first: a root (written to `dir/chain-ca.pem`), then
/// `length - 1` intermediates each signed by the one before, then the leaf; written as
/// `dir/chain.pem` (leaf and intermediates) and `dir/chain.key`.
fn long_chain(dir: &Path, length: usize) -> (PathBuf, Issued) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    let ca_params = |name: String| {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params
    };
    let root =
        CertifiedIssuer::self_signed(ca_params("chain root".into()), KeyPair::generate().unwrap()).unwrap();
    let root_file = dir.join("chain-ca.pem");
    std::fs::write(&root_file, root.pem()).unwrap();
    let mut intermediates: Vec<CertifiedIssuer<'static, KeyPair>> = Vec::new();
    for n in 1..length {
        let issuer = intermediates.last().map_or(&*root, |last| &**last);
        let next = CertifiedIssuer::signed_by(
            ca_params(format!("intermediate {n}")),
            KeyPair::generate().unwrap(),
            issuer,
        )
        .unwrap();
        intermediates.push(next);
    }
    let key = KeyPair::generate().unwrap();
    let issuer = intermediates.last().map_or(&*root, |last| &**last);
    let leaf = CertificateParams::new(vec!["client.example".to_owned()])
        .unwrap()
        .signed_by(&key, issuer)
        .unwrap();
    let mut pem = leaf.pem();
    for intermediate in intermediates.iter().rev() {
        pem.push_str(&intermediate.pem());
    }
    let issued = Issued {
        cert: dir.join("chain.pem"),
        key: dir.join("chain.key"),
    };
    std::fs::write(&issued.cert, pem).unwrap();
    std::fs::write(&issued.key, key.serialize_pem()).unwrap();
    (root_file, issued)
}

#[tokio::test]
async fn chains_of_a_hundred_certificates_are_handled_quickly() {
    let pki = Pki::new();
    let upstream = Upstream::json(200, RESPONSE_JSON).await;

    // A client presenting a chain of 100: refused (longer than any path the verifier builds),
    // quickly, and the listener serves on.
    let (root, chain) = long_chain(pki.dir.path(), 100);
    let server = pki.server_keys(&format!("tls_client_ca_file = \"{}\"", root.display()));
    let proxy = proxy(&upstream, &server).await;
    let started = Instant::now();
    let config = client_config(&pki.ca_file, Some(&chain), &[&rustls::version::TLS13], &[]);
    let outcome = match tls_connect(proxy.addr, config).await {
        Err(error) => Err(error),
        Ok(mut stream) => status_line(&mut stream).await,
    };
    assert!(outcome.is_err(), "served: {outcome:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let config = client_config(&pki.ca_file, None, &[&rustls::version::TLS13], &[]);
    let mut stream = tls_connect(proxy.addr, config).await.unwrap();
    assert!(status_line(&mut stream)
        .await
        .unwrap()
        .starts_with("HTTP/1.1 200"));

    // A served chain of 100 (the leaf and 99 intermediates) loads and is sent whole.
    let ca = TestCa::new("unused");
    let mut served = std::fs::read_to_string(&pki.server.cert).unwrap();
    for n in 0..99 {
        served.push_str(&std::fs::read_to_string(ca.write(pki.dir.path(), &format!("extra-{n}"))).unwrap());
    }
    std::fs::write(&pki.server.cert, served).unwrap();
    let proxy = self::proxy(&upstream, &pki.server_keys("")).await;
    let config = client_config(&pki.ca_file, None, &[&rustls::version::TLS13], &[]);
    let mut stream = tls_connect(proxy.addr, config).await.unwrap();
    assert_eq!(stream.get_ref().1.peer_certificates().map(<[_]>::len), Some(100));
    assert!(status_line(&mut stream)
        .await
        .unwrap()
        .starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn the_admin_listener_serves_https_with_its_own_pair() {
    let pki = Pki::new();
    let upstream = Upstream::json(200, RESPONSE_JSON).await;
    let admin_ca = TestCa::new("admin CA");
    let admin_ca_file = admin_ca.write(pki.dir.path(), "admin-ca");
    let admin_pair = admin_ca.issue(&["127.0.0.1"], pki.dir.path(), "admin");
    // `[server]` last: the helper writes `default_provider` after it.
    let server = format!(
        "[admin]\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n{}",
        admin_pair.cert.display(),
        admin_pair.key.display(),
        pki.server_keys(""),
    );
    let mut proxy = proxy(&upstream, &server).await;
    let admin = proxy.admin().await;
    let trusting = reqwest::Client::builder()
        .no_proxy()
        .tls_certs_only([reqwest::Certificate::from_pem(&std::fs::read(&admin_ca_file).unwrap()).unwrap()])
        .build()
        .unwrap();
    let answer = trusting
        .get(format!("https://{admin}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.version(), reqwest::Version::HTTP_11);
    // The proxy's own certificate is another one.
    assert!(pki
        .reqwest()
        .build()
        .unwrap()
        .get(format!("https://{admin}/healthz"))
        .send()
        .await
        .is_err());
    // Plain HTTP to it is closed.
    let plain = reqwest::Client::builder().no_proxy().build().unwrap();
    assert!(plain.get(format!("http://{admin}/healthz")).send().await.is_err());
    // The proxy's listener is unchanged.
    let answer = pki
        .reqwest()
        .build()
        .unwrap()
        .get(https(&proxy, "/v1/models"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
}
