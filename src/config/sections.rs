//! The `[server]`, `[log]` and `[gate]` settings: values that stand alone,
//! every key optional. `[server]` is read through the file's own table type,
//! which also accepts `default_provider`.

use std::net::SocketAddr;
use std::time::Duration;

use std::collections::HashMap;

use serde::de::{Deserialize, Deserializer, Error};

use super::listener_tls::ListenerTls;
use crate::gate::{Action, Policy, Reason};

/// `[server]`: the listening socket and the limits on client requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// `listen`: address and port to accept connections on.
    pub listen: SocketAddr,
    /// `max_body_bytes`: largest request body accepted; larger bodies get 413.
    pub(crate) max_body_bytes: usize,
    /// `max_buffered_bytes`: the request bodies held at once, across all connections and
    /// workers; a body that would pass it gets 503 `overloaded`. At least `max_body_bytes`.
    pub(crate) max_buffered_bytes: usize,
    /// `header_read_timeout_ms`: time a client has to send the request head.
    pub header_read_timeout: Duration,
    /// `body_read_timeout_ms`: time a client has to send the whole request body.
    pub(crate) body_read_timeout: Duration,
    /// `max_concurrent_requests`: requests handled at the same time, at least 1.
    pub(crate) max_concurrent_requests: usize,
    /// `shutdown_grace_ms`: time in-flight requests get to finish after a
    /// shutdown signal.
    pub shutdown_grace: Duration,
    /// `workers`: threads that serve connections, each with its own single-threaded runtime;
    /// 0 (the default) means one per CPU the process may use.
    pub(crate) workers: usize,
    /// `watch_config`: re-read the configuration when its file changes, as on SIGHUP.
    pub watch_config: bool,
    /// `websocket_idle_timeout_ms`: a WebSocket on which no message passed either way for this
    /// long is closed (default 5 minutes).
    pub(crate) websocket_idle_timeout: Duration,
    /// `websocket_max_duration_ms`: the longest a WebSocket stays open (default 60 minutes, the
    /// providers' own cap).
    pub(crate) websocket_max_duration: Duration,
    /// `websocket_client_events`: the types of client events a WebSocket accepts. A
    /// `response.create` is always accepted and judged; the other types listed are forwarded
    /// unjudged (they carry no items), and any type not listed gets an `unsupported_event`
    /// error event. Default: `["response.create"]`.
    pub(crate) websocket_client_events: Vec<String>,
    /// `tls_cert_file`, `tls_key_file`, `tls_client_ca_file`, `tls_client_auth`: the listener
    /// serves HTTPS; `None` (the default): plain HTTP.
    pub tls: Option<ListenerTls>,
}

impl ServerConfig {
    /// How many worker threads serve: `workers`, or when it is 0 one per CPU the process may use.
    pub fn worker_threads(&self) -> usize {
        match self.workers {
            0 => std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
            n => n,
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            max_body_bytes: 32 * 1024 * 1024,
            max_buffered_bytes: 512 * 1024 * 1024,
            header_read_timeout: Duration::from_secs(30),
            body_read_timeout: Duration::from_secs(60),
            max_concurrent_requests: 1024,
            shutdown_grace: Duration::from_secs(30),
            workers: 0,
            watch_config: false,
            websocket_idle_timeout: Duration::from_secs(5 * 60),
            websocket_max_duration: Duration::from_secs(60 * 60),
            websocket_client_events: vec!["response.create".to_owned()],
            tls: None,
        }
    }
}

/// `[admin]`: the admin listener (metrics, health and readiness).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdminConfig {
    /// `listen`: the admin listener's address; `None` (the default): no admin listener. Never
    /// the proxy's address.
    pub listen: Option<SocketAddr>,
    /// `tls_cert_file` and `tls_key_file`: the admin listener serves HTTPS with its own pair;
    /// `None` (the default): plain HTTP.
    pub tls: Option<ListenerTls>,
}

impl AdminConfig {
    /// Whether the admin listener would take the port of a proxy listening on `proxy`: the
    /// same port on the same address, or on any address when either is unspecified (`0.0.0.0`).
    /// Port 0 (any free port) never collides.
    pub fn collides_with(&self, proxy: SocketAddr) -> bool {
        self.listen.is_some_and(|admin| {
            admin.port() != 0
                && admin.port() == proxy.port()
                && (admin.ip() == proxy.ip() || admin.ip().is_unspecified() || proxy.ip().is_unspecified())
        })
    }
}

/// `[log]`: what the proxy logs and how.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `format`: `"text"` or `"json"`.
    pub format: LogFormat,
    /// `level`: a tracing `EnvFilter` directive such as `"info"` or
    /// `"info,replaygate=debug"`; checked when the file is parsed.
    #[serde(deserialize_with = "filter_directive")]
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            level: "info".to_owned(),
        }
    }
}

/// The shape of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// `[gate]`: the gate's policy (actions per reason) and limits.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GateConfig {
    /// `require_status`: a `function_call` without `status` counts as not completed (the seed
    /// article's strict reading; off by default, since many clients replay calls without it).
    pub(crate) require_status: bool,
    /// `max_violations_listed`: the most violations a 422 lists (the rest are counted in
    /// `violations_truncated`), and the most names in `x-replaygate-monitored`.
    #[serde(deserialize_with = "super::de::positive_count")]
    pub(crate) max_violations_listed: usize,
    /// `work_budget`: the most schema work judging one request may take, in unfolded
    /// subschema visits; a request needing more gets 400 `gate_budget_exceeded`.
    pub(crate) work_budget: u64,
    /// `[gate.rules]`: the action of each reason, where it differs from the default.
    pub(crate) rules: HashMap<Reason, Action>,
    /// `schema_cache_bytes`: weight budget of the cache of compiled tool schemas.
    pub(crate) schema_cache_bytes: u64,
    /// `max_schema_bytes`: a tool schema larger than this is unusable
    /// (`tool_schema_invalid`).
    pub(crate) max_schema_bytes: usize,
    /// `passed_calls_bytes`: memory for remembering which arguments texts already passed which
    /// schema, so a replayed history is not validated again.
    pub(crate) passed_calls_bytes: u64,
    /// `judged_prefix_bytes`: memory for the inputs judged clean, so that a body re-sending
    /// one is judged only for its new items (docs/incremental-judging.md); 0 judges every
    /// body whole.
    pub(crate) judged_prefix_bytes: u64,
}

/// `[gate] judged_prefix_bytes` by default: some two thousand sessions of 16 KiB histories.
pub(crate) const DEFAULT_JUDGED_PREFIX_BYTES: u64 = 8 * 1024 * 1024;

impl Default for GateConfig {
    fn default() -> Self {
        let policy = Policy::default();
        Self {
            require_status: policy.require_status,
            max_violations_listed: policy.max_listed,
            work_budget: policy.work_budget,
            rules: HashMap::new(),
            schema_cache_bytes: 64 * 1024 * 1024,
            max_schema_bytes: 1024 * 1024,
            passed_calls_bytes: 32 * 1024 * 1024,
            judged_prefix_bytes: DEFAULT_JUDGED_PREFIX_BYTES,
        }
    }
}

impl GateConfig {
    /// The gate policy these settings describe.
    pub fn policy(&self) -> Policy {
        let mut policy = Policy::default();
        policy.require_status = self.require_status;
        policy.max_listed = self.max_violations_listed;
        policy.work_budget = self.work_budget;
        for (&reason, &action) in &self.rules {
            policy.set_action(reason, action);
        }
        policy
    }

    /// The gate's cache limits.
    pub fn schema_limits(&self) -> crate::gate::SchemaLimits {
        crate::gate::SchemaLimits {
            cache_bytes: self.schema_cache_bytes,
            max_schema_bytes: self.max_schema_bytes,
            passed_calls_bytes: self.passed_calls_bytes,
        }
    }
}

/// A log level string that `EnvFilter` accepts.
fn filter_directive<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let directive = String::deserialize(deserializer)?;
    tracing_subscriber::EnvFilter::try_new(&directive)
        .map_err(|e| D::Error::custom(format!("invalid log level `{directive}`: {e}")))?;
    Ok(directive)
}
