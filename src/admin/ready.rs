//! `GET /readyz`: whether this replica should get traffic, with the state backend's answer in
//! a JSON body, e.g. `{"ready":false,"draining":false,"state":{"backend":"redis","ok":false,
//! "on_unavailable":"refuse","error":"..."}}`. 200 when ready, else 503. The error is the
//! backend's own (a refused connection, a certificate it did not trust, a refused login, a
//! write refused for memory or disk): never a password, which no configuration value or
//! message holds.
//!
//! A backend that does not answer makes the replica unready under `[ledger] on_unavailable =
//! "refuse"` (the default: its requests that need the store would get 503 anyway). Under
//! `"allow"` the replica stays ready, with `"ok": false` in the body: it serves every request
//! without the store, and taking every replica out of the Service at once because Redis is down
//! would refuse what the operator chose to let through (docs/operations.md#ports-and-probes).
//!
//! The body also says what the backend may forget: Redis's `maxmemory-policy` (read anew on
//! each call, reported on `replaygate_state_eviction_risk`), the embedded store's disk use
//! against `[state] max_disk_bytes`.

use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::Full;

use super::AdminState;
use crate::state::{report_memory_policy, DiskUsage, MemoryPolicy};

/// The longest `/readyz` waits for the state backend's answer.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// The body of `/readyz`.
#[derive(Debug, serde::Serialize)]
struct Readiness {
    /// Serving its configuration, not shutting down, and the state backend answers (or
    /// `on_unavailable = "allow"` lets requests go on without it).
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
    /// `[ledger] on_unavailable`: whether a backend that does not answer makes the replica
    /// unready (`refuse`) or not (`allow`).
    on_unavailable: &'static str,
    /// Why it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// Redis: its `maxmemory-policy` (`null` when it could not be read).
    #[serde(skip_serializing_if = "Option::is_none")]
    maxmemory_policy: Option<Option<String>>,
    /// Redis: whether that policy may evict replaygate's records before their time (`null`
    /// when unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    may_evict: Option<Option<bool>>,
    /// The embedded store: its disk use and `[state] max_disk_bytes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    disk: Option<DiskUsage>,
}

/// 200 when the process serves its configuration and the state backend answers (or need not);
/// else 503.
pub(super) async fn ready(admin: &AdminState) -> Response<Full<Bytes>> {
    let store = &admin.store;
    let backend = store.backend();
    let error = match tokio::time::timeout(READY_TIMEOUT, store.ping()).await {
        Ok(Ok(())) => None,
        Ok(Err(error)) => Some(error.to_string()),
        Err(_) => Some(format!(
            "the state backend did not answer within {} s",
            READY_TIMEOUT.as_secs()
        )),
    };
    let (mut maxmemory_policy, mut may_evict, mut disk) = (None, None, None);
    if error.is_none() {
        let policy = tokio::time::timeout(READY_TIMEOUT, report_memory_policy(store, admin.metrics.state()));
        if let Ok(Some(policy)) = policy.await {
            may_evict = Some(policy.may_evict());
            maxmemory_policy = Some(match policy {
                MemoryPolicy::Named(name) => Some(name),
                MemoryPolicy::Unknown(_) => None,
            });
        }
        if let Ok(Some(Ok(usage))) = tokio::time::timeout(READY_TIMEOUT, store.disk_usage()).await {
            disk = Some(usage);
        }
    }
    let draining = admin.is_draining();
    let answers = error.is_none();
    let readiness = Readiness {
        ready: !draining && (answers || admin.allow_unavailable),
        draining,
        state: StateReport {
            backend,
            ok: answers,
            on_unavailable: if admin.allow_unavailable {
                "allow"
            } else {
                "refuse"
            },
            error,
            maxmemory_policy,
            may_evict,
            disk,
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
