//! Prometheus metrics (docs/operations.md#metrics): the metric families of the process
//! ([`Metrics`]), the handles a configuration resolves once so the request path only adds to
//! atomics
//! (`Meters`), and what one request counts when it ends (`RequestMeter`).
//!
//! Label values come from the configuration (provider and team names, `-` for none) or from
//! fixed sets of words (decision, reason, action, code, op, result): a request can never add a
//! label value, so the number of series is bounded by the configurations the process has run.

mod budget;
mod histogram;
mod labels;
mod ledger;
mod meters;
mod state;
mod usage;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

pub(crate) use histogram::LatencyHistogram;
pub(crate) use labels::{LedgerOp, LedgerResult};
pub(crate) use ledger::LedgerMeter;
pub(crate) use meters::{Meters, RequestMeter};
pub(crate) use state::StateMeter;

use labels::{
    LedgerLabels, ProviderLabels, RequestLabels, ResponseViolationLabels, ResultLabels, TeamLabels,
    UpstreamErrorLabels, VersionLabels, ViolationLabels,
};

/// The content type of `Metrics::encode`'s text: OpenMetrics 1.0, which Prometheus scrapes.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Every metric family of one process (one per [`crate::proxy::ProxyState`] and its siblings,
/// shared as an `Arc`).
/// It outlives configuration reloads: a counter's series keeps counting across them.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    violations: Family<ViolationLabels, Counter>,
    response_violations: Family<ResponseViolationLabels, Counter>,
    request_duration: Family<ProviderLabels, LatencyHistogram>,
    stream_duration: Family<ProviderLabels, LatencyHistogram>,
    gate_duration: Family<ProviderLabels, LatencyHistogram>,
    upstream_duration: Family<ProviderLabels, LatencyHistogram>,
    upstream_errors: Family<UpstreamErrorLabels, Counter>,
    in_flight: Gauge,
    ledger_operations: Family<LedgerLabels, Counter>,
    rate_limit_unavailable: Counter,
    items_judged: Counter,
    items_judged_before: Counter,
    ledger_keys_asked: Counter,
    config_reloads: Family<ResultLabels, Counter>,
    bytes_out: Family<ProviderLabels, Counter>,
    client_gone: Family<TeamLabels, Counter>,
    usage: usage::UsageFamilies,
    budget: budget::BudgetFamilies,
    state: StateMeter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// The families, registered, with `replaygate_build_info` set and the ledger's and the
    /// reloads' series at zero.
    pub(crate) fn new() -> Metrics {
        let metrics = Metrics {
            registry: Registry::default(),
            requests: Family::default(),
            violations: Family::default(),
            response_violations: Family::default(),
            request_duration: Family::default(),
            stream_duration: Family::default(),
            gate_duration: Family::default(),
            upstream_duration: Family::default(),
            upstream_errors: Family::default(),
            in_flight: Gauge::default(),
            ledger_operations: Family::default(),
            rate_limit_unavailable: Counter::default(),
            items_judged: Counter::default(),
            items_judged_before: Counter::default(),
            ledger_keys_asked: Counter::default(),
            config_reloads: Family::default(),
            bytes_out: Family::default(),
            client_gone: Family::default(),
            usage: usage::UsageFamilies::default(),
            budget: budget::BudgetFamilies::default(),
            state: StateMeter::default(),
        };
        metrics.register()
    }

    fn register(mut self) -> Metrics {
        let registry = &mut self.registry;
        // Counters are registered without `_total`: the encoder adds it to each sample.
        registry.register(
            "replaygate_requests",
            "Requests answered, by provider, team and the gate's decision",
            self.requests.clone(),
        );
        registry.register(
            "replaygate_violations",
            "Gate violations, by reason, action, provider and team",
            self.violations.clone(),
        );
        registry.register(
            "replaygate_response_violations",
            "Function calls a provider produced whose arguments fail the request's tool schema",
            self.response_violations.clone(),
        );
        registry.register(
            "replaygate_request_duration_seconds",
            "Time from a request's arrival to its answer's head",
            self.request_duration.clone(),
        );
        registry.register(
            "replaygate_stream_duration_seconds",
            "Time from a request's arrival to its answer's last byte, or to the break",
            self.stream_duration.clone(),
        );
        registry.register(
            "replaygate_gate_duration_seconds",
            "Time the judge phase took: parse, ledger lookup, gate check",
            self.gate_duration.clone(),
        );
        registry.register(
            "replaygate_upstream_duration_seconds",
            "Time from forwarding a request to the provider's response head",
            self.upstream_duration.clone(),
        );
        registry.register(
            "replaygate_upstream_errors",
            "Requests the provider failed: unreachable or silent too long",
            self.upstream_errors.clone(),
        );
        registry.register(
            "replaygate_in_flight_requests",
            "Requests in flight; a stream is in flight until its last byte",
            self.in_flight.clone(),
        );
        registry.register(
            "replaygate_ledger_operations",
            "Provenance ledger operations, by operation and result",
            self.ledger_operations.clone(),
        );
        registry.register(
            "replaygate_rate_limit_unavailable",
            "Team requests whose rate the state backend could not count, refused or let through by [ledger] on_unavailable",
            self.rate_limit_unavailable.clone(),
        );
        registry.register(
            "replaygate_gate_items_judged",
            "Input items the gate read and judged",
            self.items_judged.clone(),
        );
        registry.register(
            "replaygate_gate_items_judged_before",
            "Input items passed over unread, judged clean in an earlier body of the same session ([gate] judged_prefix_bytes)",
            self.items_judged_before.clone(),
        );
        registry.register(
            "replaygate_ledger_keys_asked",
            "Item ids and blob digests the ledger's store was asked about (a turn read after an input judged before asks only about its new items': docs/incremental-judging.md#the-ledger)",
            self.ledger_keys_asked.clone(),
        );
        registry.register(
            "replaygate_config_reloads",
            "Configuration reloads, by result",
            self.config_reloads.clone(),
        );
        registry.register(
            "replaygate_bytes_out",
            "Answer body bytes sent to clients",
            self.bytes_out.clone(),
        );
        registry.register(
            "replaygate_client_gone",
            "Requests whose client went away before the answer's end (its provider request dropped)",
            self.client_gone.clone(),
        );
        registry.register(
            "replaygate_usage_tokens",
            "Tokens the answers' usage reported, by team, provider, model and kind (cached_input and reasoning_output are parts of input and output)",
            self.usage.tokens.clone(),
        );
        registry.register(
            "replaygate_usage_answers",
            "Answers counted for usage, by team, provider, model and whether they reported it",
            self.usage.answers.clone(),
        );
        self.budget.register(registry);
        self.state.register(registry);
        let build_info = Family::<VersionLabels, Gauge>::default();
        build_info
            .get_or_create(&VersionLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        registry.register(
            "replaygate_build_info",
            "Always 1; the version label names the build",
            build_info,
        );
        for result in ["ok", "error"] {
            drop(self.config_reloads.get_or_create(&ResultLabels { result }));
        }
        for (op, result) in labels::LEDGER_OUTCOMES {
            self.ledger_counter(op, result);
        }
        self
    }

    /// Every family in the OpenMetrics text format ([`CONTENT_TYPE`]).
    pub(crate) fn encode(&self) -> String {
        let mut text = String::with_capacity(16 * 1024);
        // Writing to a String does not fail, and every metric here encodes.
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("the metrics encode as text");
        text
    }

    /// Counts one configuration reload.
    pub(crate) fn config_reloaded(&self, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.config_reloads.get_or_create(&ResultLabels { result }).inc();
    }

    /// The counter of ledger operation `op` that ended with `result`.
    pub(crate) fn ledger_counter(&self, op: LedgerOp, result: LedgerResult) -> Counter {
        self.ledger_operations
            .get_or_create(&LedgerLabels {
                op: op.as_str(),
                result: result.as_str(),
            })
            .clone()
    }

    /// Counts a judged request's items: those read and judged, and those passed over as judged
    /// before.
    pub(crate) fn count_items(&self, judged: usize, judged_before: usize) {
        self.items_judged.inc_by(judged as u64);
        self.items_judged_before.inc_by(judged_before as u64);
    }

    /// Counts `keys` the ledger's store was asked about for one request.
    pub(crate) fn count_ledger_keys(&self, keys: usize) {
        self.ledger_keys_asked.inc_by(keys as u64);
    }

    /// How many items were passed over as judged before, so far (the tests').
    #[cfg(test)]
    pub(crate) fn items_judged_before(&self) -> u64 {
        self.items_judged_before.get()
    }

    /// The counter of team requests whose rate could not be counted.
    pub(crate) fn rate_limit_unavailable(&self) -> Counter {
        self.rate_limit_unavailable.clone()
    }

    /// The state backend's metrics.
    pub fn state(&self) -> &StateMeter {
        &self.state
    }

    /// Requests in flight.
    pub(crate) fn in_flight(&self) -> &Gauge {
        &self.in_flight
    }
}

/// A counter of `family` for `labels`, resolved once.
fn counter<S>(family: &Family<S, Counter>, labels: &S) -> Counter
where
    S: Clone + std::hash::Hash + Eq,
{
    family.get_or_create(labels).clone()
}

/// A histogram of `family` for `labels`, resolved once.
fn histogram<S>(family: &Family<S, LatencyHistogram>, labels: &S) -> LatencyHistogram
where
    S: Clone + std::hash::Hash + Eq,
{
    family.get_or_create(labels).clone()
}
