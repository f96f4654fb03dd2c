//! `GET /readyz`: whether this replica should get traffic, with the state backend's answer in
//! a JSON body, e.g. `{"ready":false,"draining":false,"state":{"backend":"redis","ok":false,
//! "error":"..."}}`. 200 when ready, else 503. The error is the backend's own (a refused
//! connection, a certificate it did not trust, a refused login): never a password, which no
//! configuration value or message holds.

use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::Full;

use super::AdminState;

/// The longest `/readyz` waits for the state backend's answer.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// The body of `/readyz`.
#[derive(Debug, serde::Serialize)]
struct Readiness {
    /// Serving its configuration, not shutting down, and the state backend answers.
    ready: bool,
    /// Shutting down: no new traffic, whatever the backend says.
    draining: bool,
    /// The state backend's answer.
    state: StateReport,
}

/// What the state backend answered.
#[derive(Debug, serde::Serialize)]
struct StateReport {
    /// `[state] backend`: `memory`, `embedded` or `redis`.
    backend: &'static str,
    /// It answered.
    ok: bool,
    /// Why it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// 200 when the process serves its configuration and the state backend answers; else 503.
pub(super) async fn ready(admin: &AdminState) -> Response<Full<Bytes>> {
    let backend = admin.store.backend();
    let error = match tokio::time::timeout(READY_TIMEOUT, admin.store.ping()).await {
        Ok(Ok(())) => None,
        Ok(Err(error)) => Some(error.to_string()),
        Err(_) => Some(format!(
            "the state backend did not answer within {} s",
            READY_TIMEOUT.as_secs()
        )),
    };
    let draining = admin.is_draining();
    let readiness = Readiness {
        ready: !draining && error.is_none(),
        draining,
        state: StateReport {
            backend,
            ok: error.is_none(),
            error,
        },
    };
    let status = if readiness.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let mut body = serde_json::to_vec(&readiness).expect("the readiness body serializes");
    body.push(b'\n');
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
