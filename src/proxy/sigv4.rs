//! AWS Signature Version 4 for `auth = { aws_sigv4 = { region, service } }`: every forwarded
//! request is signed over the exact bytes sent, with IAM credentials from the AWS environment
//! variables (or, with the `aws-chain` feature and none set, from the AWS default chain).
//!
//! The signature covers a fixed set of headers: `host`, `content-type` (when the request has
//! one), `x-amz-date`, `x-amz-content-sha256` and `x-amz-security-token` (with temporary
//! credentials). Every other header the client sent is forwarded unsigned, so nothing between
//! replaygate and AWS that adds or drops such a header (Bedrock Mantle drops underscore names
//! before it checks) can break the signature.

use std::fmt;
use std::sync::LazyLock;
use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign as sign_request, PayloadChecksumKind, SignableBody, SignableRequest, SigningSettings,
};
use aws_sigv4::sign::v4;
use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use http::Method;
use tracing::subscriber::NoSubscriber;
use tracing::Dispatch;

/// The AWS environment variables the credentials are read from.
pub(crate) const ACCESS_KEY_VARIABLE: &str = "AWS_ACCESS_KEY_ID";
/// The secret half of the key pair.
pub(crate) const SECRET_KEY_VARIABLE: &str = "AWS_SECRET_ACCESS_KEY";
/// The session token of temporary credentials (optional).
pub(crate) const SESSION_TOKEN_VARIABLE: &str = "AWS_SESSION_TOKEN";
/// When temporary credentials expire, RFC 3339 (optional; as botocore and the AWS CLI read it).
pub(crate) const EXPIRATION_VARIABLE: &str = "AWS_CREDENTIAL_EXPIRATION";

/// Bodies larger than this are hashed on the blocking pool rather than on the worker.
const INLINE_HASH_BYTES: usize = 1024 * 1024;

/// What the signing library logs goes here, nowhere: at trace level it writes each canonical
/// request, session token included.
static SILENT: LazyLock<Dispatch> = LazyLock::new(|| Dispatch::new(NoSubscriber::default()));

/// One request as the signature sees it: the parts that are sent as they are given here.
#[derive(Debug, Clone, Copy)]
pub struct Unsigned<'a> {
    /// The method sent.
    pub method: &'a str,
    /// The absolute URL sent (scheme, host, port, path and query).
    pub url: &'a str,
    /// The `Content-Type` sent, if any.
    pub content_type: Option<&'a str>,
    /// The body sent, byte for byte.
    pub body: &'a [u8],
}

/// Where a signature is valid: an AWS region and a service's signing name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// The region, e.g. `us-east-1`.
    pub region: String,
    /// The signing name, e.g. `bedrock` or `bedrock-mantle`.
    pub service: String,
}

/// Why a request could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// The URL has no host to sign.
    #[error("the URL {0} has no host")]
    NoHost(String),
    /// The signing library refused the request.
    #[error("{0}")]
    Signing(String),
    /// A signed header's value is not one HTTP can carry.
    #[error("the signature's header {0} is not a valid header value")]
    Header(&'static str),
}

/// The headers that sign `request` for `scope` with `credentials` at `time`: `authorization`,
/// `x-amz-date`, `x-amz-content-sha256` and, with a session token, `x-amz-security-token`
/// (the credential-bearing ones marked sensitive). The request is then sent with these added
/// and its other parts exactly as given.
pub fn sign(
    request: &Unsigned<'_>,
    credentials: &Credentials,
    scope: &Scope,
    time: SystemTime,
) -> Result<HeaderMap, SignError> {
    let host = host_of(request.url)?;
    let identity = credentials.clone().into();
    let mut settings = SigningSettings::default();
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(&scope.region)
        .name(&scope.service)
        .time(time)
        .settings(settings)
        .build()
        .map_err(|e| SignError::Signing(e.to_string()))?
        .into();
    let mut signed: Vec<(&str, &str)> = vec![("host", host.as_str())];
    if let Some(content_type) = request.content_type {
        signed.push(("content-type", content_type));
    }
    let signable = SignableRequest::new(
        request.method,
        request.url,
        signed.into_iter(),
        SignableBody::Bytes(request.body),
    )
    .map_err(|e| SignError::Signing(e.to_string()))?;
    let output = tracing::dispatcher::with_default(&SILENT, || sign_request(signable, &params));
    let (instructions, _signature) = output
        .map_err(|e| SignError::Signing(e.to_string()))?
        .into_parts();
    let (headers, _query) = instructions.into_parts();
    let mut out = HeaderMap::with_capacity(headers.len());
    for header in headers {
        let invalid = |_| SignError::Header(header.name());
        let name = HeaderName::from_bytes(header.name().as_bytes()).map_err(invalid)?;
        let mut value =
            HeaderValue::from_str(header.value()).map_err(|_| SignError::Header(header.name()))?;
        value.set_sensitive(header.sensitive() || name == http::header::AUTHORIZATION);
        out.insert(name, value);
    }
    Ok(out)
}

/// The `host` a client sends for `url`: the host, and the port when it is not the scheme's
/// default (as hyper writes it from the request's URI).
fn host_of(url: &str) -> Result<String, SignError> {
    let no_host = || SignError::NoHost(url.to_owned());
    let uri: http::Uri = url.parse().map_err(|_| no_host())?;
    let host = uri.host().filter(|host| !host.is_empty()).ok_or_else(no_host)?;
    let default_port = match uri.scheme_str() {
        Some("https" | "wss") => Some(443),
        Some("http" | "ws") => Some(80),
        _ => None,
    };
    Ok(match uri.port_u16() {
        Some(port) if Some(port) != default_port => format!("{host}:{port}"),
        _ => host.to_owned(),
    })
}

/// Where a provider's AWS credentials come from.
enum Source {
    /// Read from the environment when the provider was built.
    Static(Credentials),
    /// The AWS default chain, cached and refreshed ahead of expiry.
    #[cfg(feature = "aws-chain")]
    Chain(super::sigv4_chain::ChainCredentials),
}

/// Signs a provider's requests: its scope and its credentials.
pub(crate) struct Signer {
    scope: Scope,
    source: Source,
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            Source::Static(_) => "environment",
            #[cfg(feature = "aws-chain")]
            Source::Chain(_) => "default chain",
        };
        f.debug_struct("Signer")
            .field("scope", &self.scope)
            .field("credentials", &source)
            .finish()
    }
}

impl Signer {
    /// A signer for `scope` with the credentials in `env`: `AWS_ACCESS_KEY_ID` and
    /// `AWS_SECRET_ACCESS_KEY`, with `AWS_SESSION_TOKEN` and `AWS_CREDENTIAL_EXPIRATION` when
    /// set. Without the two keys: what is missing, as a sentence (with the `aws-chain` feature,
    /// the default chain instead).
    pub(crate) fn from_env(scope: Scope, env: &dyn Fn(&str) -> Option<String>) -> Result<Signer, String> {
        let read = |name: &str| env(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let (access_key, secret_key) = match (read(ACCESS_KEY_VARIABLE), read(SECRET_KEY_VARIABLE)) {
            (Some(access), Some(secret)) => (access, secret),
            (access, secret) => {
                #[cfg(feature = "aws-chain")]
                if access.is_none() && secret.is_none() {
                    return Ok(Signer {
                        source: Source::Chain(super::sigv4_chain::ChainCredentials::new(&scope.region)),
                        scope,
                    });
                }
                return Err(missing_keys(access.is_none(), secret.is_none()));
            }
        };
        let expiry = match read(EXPIRATION_VARIABLE) {
            None => None,
            Some(text) => Some(humantime::parse_rfc3339_weak(&text).map_err(|_| {
                format!("environment variable {EXPIRATION_VARIABLE} ({text:?}) is not an RFC 3339 time")
            })?),
        };
        let credentials = Credentials::new(
            access_key,
            secret_key,
            read(SESSION_TOKEN_VARIABLE),
            expiry,
            "environment",
        );
        Ok(Signer {
            scope,
            source: Source::Static(credentials),
        })
    }

    /// The headers that sign a request to send now (see [`sign`]). `Err` says why there are
    /// no usable credentials (expired ones, or none from the chain); a signing failure of the
    /// request itself is [`SignFailure::Request`].
    pub(crate) async fn sign_now(
        &self,
        method: &Method,
        url: &str,
        headers: &HeaderMap,
        body: &Bytes,
    ) -> Result<HeaderMap, SignFailure> {
        let credentials = self.credentials().await.map_err(SignFailure::Credentials)?;
        let content_type = content_type_of(headers);
        let method = method.as_str();
        let now = SystemTime::now();
        if body.len() <= INLINE_HASH_BYTES {
            let request = Unsigned {
                method,
                url,
                content_type: content_type.as_deref(),
                body,
            };
            return sign(&request, &credentials, &self.scope, now).map_err(SignFailure::Request);
        }
        let (scope, body) = (self.scope.clone(), body.clone());
        let (method, url) = (method.to_owned(), url.to_owned());
        tokio::task::spawn_blocking(move || {
            let request = Unsigned {
                method: &method,
                url: &url,
                content_type: content_type.as_deref(),
                body: &body,
            };
            sign(&request, &credentials, &scope, now)
        })
        .await
        .map_err(|e| SignFailure::Request(SignError::Signing(e.to_string())))?
        .map_err(SignFailure::Request)
    }

    /// Credentials usable now.
    async fn credentials(&self) -> Result<Credentials, String> {
        match &self.source {
            Source::Static(credentials) => match credentials.expiry() {
                Some(expiry) if expiry <= SystemTime::now() => Err(format!(
                    "the AWS credentials from the environment expired at {} ({EXPIRATION_VARIABLE}); \
                     set fresh ones and restart",
                    humantime::format_rfc3339_seconds(expiry)
                )),
                _ => Ok(credentials.clone()),
            },
            #[cfg(feature = "aws-chain")]
            Source::Chain(chain) => chain.credentials().await,
        }
    }
}

/// Why [`Signer::sign_now`] failed.
#[derive(Debug)]
pub(crate) enum SignFailure {
    /// There are no usable credentials: why, as a sentence.
    Credentials(String),
    /// The request itself could not be signed.
    Request(SignError),
}

/// The request's `Content-Type` as sent: its values joined by `,` (as a signature reads a
/// repeated header); `None` when it has none or one that is not visible ASCII, which is then
/// sent unsigned.
fn content_type_of(headers: &HeaderMap) -> Option<String> {
    let mut values = headers.get_all(CONTENT_TYPE).iter().peekable();
    values.peek()?;
    let texts: Option<Vec<&str>> = values.map(|v| v.to_str().ok()).collect();
    texts.map(|texts| texts.join(","))
}

/// The sentence naming the unset key variables.
fn missing_keys(access: bool, secret: bool) -> String {
    match (access, secret) {
        (true, true) => {
            format!("environment variables {ACCESS_KEY_VARIABLE} and {SECRET_KEY_VARIABLE} are not set")
        }
        (true, false) => format!("environment variable {ACCESS_KEY_VARIABLE} is not set"),
        _ => format!("environment variable {SECRET_KEY_VARIABLE} is not set"),
    }
}

#[cfg(test)]
mod tests;
