//! Both handshakes: the client's upgrade request (checked, answered 101) and the socket to the
//! provider (its WebSocket endpoint: `base_url` with `ws`/`wss`, the same path, opened with
//! the provider's credential, and under `aws_sigv4` a GET signed with an empty body).

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::ClientConfig;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::WebSocketStream;

use crate::error::ApiError;
use crate::proxy::body::{full, ProxyBody};
use crate::proxy::headers::upstream_request_headers;
use crate::proxy::provider::{Credential, Provider};
use crate::proxy::sigv4::SignFailure;

/// The only WebSocket version there is (RFC 6455).
const VERSION: &str = "13";

/// Whether `request` asks to open a WebSocket: a GET with `Upgrade: websocket` and a
/// `Connection` that names `upgrade`.
pub(crate) fn is_upgrade<B>(request: &Request<B>) -> bool {
    let headers = request.headers();
    request.method() == Method::GET
        && has_token(headers, header::UPGRADE, "websocket")
        && has_token(headers, header::CONNECTION, "upgrade")
}

fn has_token(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|item| item.trim().eq_ignore_ascii_case(token))
}

/// The client's `Sec-WebSocket-Key`, once its handshake is one replaygate can accept.
pub(super) fn client_key(headers: &HeaderMap) -> Result<HeaderValue, ApiError> {
    let version = headers.get(header::SEC_WEBSOCKET_VERSION);
    if version.is_none_or(|version| version != VERSION) {
        return Err(ApiError::BadUpgrade(format!(
            "the WebSocket handshake must carry Sec-WebSocket-Version: {VERSION}"
        )));
    }
    match headers.get(header::SEC_WEBSOCKET_KEY) {
        Some(key) if key.len() == 24 => Ok(key.clone()),
        _ => Err(ApiError::BadUpgrade(
            "the WebSocket handshake must carry a Sec-WebSocket-Key of 16 bytes in base64".to_owned(),
        )),
    }
}

/// The 101 that accepts the client's upgrade.
pub(super) fn switching_protocols(key: &HeaderValue) -> Response<ProxyBody> {
    let mut response = Response::new(full(Bytes::new()));
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(accept) = HeaderValue::try_from(derive_accept_key(key.as_bytes())) {
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    response
}

/// The byte stream under the provider's socket: TCP, or TLS over TCP.
pub(super) trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// A socket to a provider.
pub(super) type UpstreamSocket = WebSocketStream<Box<dyn Io>>;

/// Opens the provider's socket for `path` (after `/v1`) and `query`, with the client's
/// `headers` less its credentials and the WebSocket handshake's own, and the provider's
/// credential. A provider that answers the upgrade with another status than 101 refuses it
/// with that status.
pub(super) async fn open(
    provider: &Provider,
    path: &str,
    query: Option<&str>,
    client_headers: HeaderMap,
) -> Result<UpstreamSocket, ApiError> {
    let name = || provider.name().to_owned();
    let unconfigured = |reason: String| ApiError::ProviderUnconfigured {
        provider: name(),
        reason,
    };
    let unavailable = |detail: String| ApiError::UpstreamUnavailable {
        provider: name(),
        detail,
    };
    if let Credential::Missing { reason } = &provider.credential {
        return Err(unconfigured(reason.clone()));
    }
    let url = provider.url(path, query);
    let mut headers = upstream_request_headers(client_headers, &provider.credential);
    let handshake_own: Vec<_> = headers
        .keys()
        .filter(|name| name.as_str().starts_with("sec-websocket-"))
        .cloned()
        .collect();
    for name in handshake_own {
        headers.remove(name);
    }
    crate::telemetry::traceparent_to_provider(&mut headers);
    if let Credential::SigV4(signer) = &provider.credential {
        let mut signed = signer
            .sign_now(&Method::GET, url.as_str(), &headers, &Bytes::new())
            .await
            .map_err(|failure| match failure {
                SignFailure::Credentials(reason) => unconfigured(reason),
                SignFailure::Request(error) => {
                    unavailable(format!("the upgrade could not be signed: {error}"))
                }
            })?;
        // The handshake writes the same host the signature covers.
        signed.remove(header::HOST);
        headers.extend(signed);
    }
    let secure = url.scheme() == "https";
    let mut ws_url = url.clone();
    let _ = ws_url.set_scheme(if secure { "wss" } else { "ws" });
    let mut request = ws_url
        .as_str()
        .into_client_request()
        .map_err(|error| unavailable(format!("no WebSocket URL: {error}")))?;
    for (name, value) in &headers {
        request.headers_mut().append(name.clone(), value.clone());
    }
    let host = url
        .host_str()
        .unwrap_or_default()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = url
        .port_or_known_default()
        .unwrap_or(if secure { 443 } else { 80 });
    let connected = tokio::time::timeout(provider.connect_timeout, async {
        let tcp = TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|error| unavailable(format!("connection failed ({error})")))?;
        let _ = tcp.set_nodelay(true);
        let io: Box<dyn Io> = match secure {
            false => Box::new(tcp),
            true => {
                let server = ServerName::try_from(host.clone())
                    .map_err(|error| unavailable(format!("no TLS name: {error}")))?;
                let tls = tokio_rustls::TlsConnector::from(tls_config().map_err(unavailable)?)
                    .connect(server, tcp)
                    .await
                    .map_err(|error| unavailable(format!("TLS failed ({error})")))?;
                Box::new(tls)
            }
        };
        Ok::<_, ApiError>(io)
    })
    .await
    .map_err(|_| unavailable("connection timed out".to_owned()))??;
    // What the provider sends is held to tungstenite's own limits (64 MiB a message, 16 MiB a
    // frame); the client's side has the proxy's (docs/websocket.md).
    let handshake = tokio_tungstenite::client_async(request, connected);
    match tokio::time::timeout(provider.connect_timeout, handshake).await {
        Err(_) => Err(ApiError::UpstreamTimeout { provider: name() }),
        Ok(Ok((socket, _))) => Ok(socket),
        Ok(Err(WsError::Http(response))) => Err(ApiError::UpgradeRefused {
            provider: name(),
            status: response.status(),
        }),
        Ok(Err(error)) => Err(unavailable(format!("the WebSocket handshake failed ({error})"))),
    }
}

/// The TLS settings of provider sockets: the platform's trust store, HTTP/1.1 (the upgrade).
fn tls_config() -> Result<Arc<ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            use rustls_platform_verifier::ConfigVerifierExt;
            let mut config = ClientConfig::with_platform_verifier().map_err(|error| error.to_string())?;
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Ok(Arc::new(config))
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upgrade(headers: &[(&str, &str)]) -> Request<()> {
        let mut request = Request::get("/v1/responses");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(()).unwrap()
    }

    #[test]
    fn upgrades_are_recognised_by_their_tokens() {
        assert!(is_upgrade(&upgrade(&[
            ("upgrade", "WebSocket"),
            ("connection", "keep-alive, Upgrade")
        ])));
        assert!(!is_upgrade(&upgrade(&[
            ("upgrade", "h2c"),
            ("connection", "upgrade")
        ])));
        assert!(!is_upgrade(&upgrade(&[("upgrade", "websocket")])));
    }

    #[test]
    fn the_client_handshake_needs_version_13_and_a_key() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "sec-websocket-key",
            HeaderValue::from_static("dGhlIHNhbXBsZSBub25jZQ=="),
        );
        assert!(client_key(&headers).is_err());
        headers.insert("sec-websocket-version", HeaderValue::from_static("13"));
        let key = client_key(&headers).unwrap();
        let response = switching_protocols(&key);
        assert_eq!(response.status(), 101);
        // RFC 6455's own example.
        assert_eq!(
            response.headers()["sec-websocket-accept"],
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        headers.insert("sec-websocket-key", HeaderValue::from_static("short"));
        assert!(client_key(&headers).is_err());
    }
}
