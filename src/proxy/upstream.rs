//! Forwarding: the original bytes go up (signed, for an `aws_sigv4` provider), the provider's
//! answer streams back as it arrives.

use bytes::Bytes;
use http::{HeaderMap, Method, Response};

use super::body::ProxyBody;
use super::headers::{strip_hop_by_hop, upstream_request_headers};
use super::provider::{Credential, Provider};
use super::sigv4::SignFailure;
use super::upstream_client::SendError;
use crate::error::ApiError;

/// What is sent upstream: everything but the URL comes from the client's request.
#[derive(Debug)]
pub(crate) struct Outbound<'r> {
    /// The client's method.
    pub(crate) method: Method,
    /// The path after `/v1`, starting with `/`.
    pub(crate) path: &'r str,
    /// The client's query string, if any.
    pub(crate) query: Option<&'r str>,
    /// The client's headers.
    pub(crate) headers: HeaderMap,
    /// The client's body, exactly as received.
    pub(crate) body: Bytes,
}

/// Sends `outbound` to `provider` and streams the answer back, frame by frame.
///
/// Dropping the returned body (the client went away) drops the upstream response and so
/// closes the upstream request.
pub(crate) async fn forward(
    provider: &Provider,
    outbound: Outbound<'_>,
) -> Result<Response<ProxyBody>, ApiError> {
    let unconfigured = |reason: String| ApiError::ProviderUnconfigured {
        provider: provider.name().to_owned(),
        reason,
    };
    if let Credential::Missing { reason } = &provider.credential {
        return Err(unconfigured(reason.clone()));
    }
    let uri = provider
        .uri(outbound.path, outbound.query)
        .map_err(|error| ApiError::UpstreamUnavailable {
            provider: provider.name().to_owned(),
            detail: format!("no upstream URI for this path and query: {error}"),
        })?;
    let mut headers = upstream_request_headers(outbound.headers, &provider.credential);
    crate::telemetry::traceparent_to_provider(&mut headers);
    if let Credential::SigV4(signer) = &provider.credential {
        // The signature covers the bytes sent (after any rewrite), the URL and the method.
        let signed = signer
            .sign_now(&outbound.method, &uri.to_string(), &headers, &outbound.body)
            .await
            .map_err(|failure| match failure {
                SignFailure::Credentials(reason) => unconfigured(reason),
                SignFailure::Request(error) => ApiError::UpstreamUnavailable {
                    provider: provider.name().to_owned(),
                    detail: format!("the request could not be signed: {error}"),
                },
            })?;
        headers.extend(signed);
    }
    let answer = provider
        .client
        .send(outbound.method, uri, headers, outbound.body)
        .await
        .map_err(|e| upstream_error(provider, e))?;
    // Only the status, headers and body pass on: not the provider's HTTP version, nor what the
    // client library noted in the extensions (an HTTP/1 reason phrase).
    let (mut parts, body) = answer.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let mut response = Response::new(body);
    *response.status_mut() = parts.status;
    *response.headers_mut() = parts.headers;
    Ok(response)
}

fn upstream_error(provider: &Provider, error: SendError) -> ApiError {
    let provider = provider.name().to_owned();
    // A provider that could not be connected to is unreachable (502) even when it was the
    // connect timeout that gave up; 504 is for one that took the request and went quiet.
    let (connect, error) = match error {
        SendError::TimedOut => return ApiError::UpstreamTimeout { provider },
        SendError::Connect(error) => (true, error),
        SendError::Failed(error) => (false, error),
    };
    let mut cause: &dyn std::error::Error = &error;
    while let Some(source) = cause.source() {
        cause = source;
    }
    let detail = if connect {
        format!("connection failed ({cause})")
    } else {
        cause.to_string()
    };
    ApiError::UpstreamUnavailable { provider, detail }
}
