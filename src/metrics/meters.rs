//! The handles of one configuration: for each configured provider its histograms and byte
//! counter, for each (provider, team) its request counters, resolved from the families when
//! the configuration is built (or on first use), never from a request. What the request path
//! does with them is a hash lookup of a configured name and one atomic addition per metric.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use foldhash::fast::RandomState;
use prometheus_client::metrics::counter::Counter;

use super::labels::{
    counted, counted_index, counted_label, upstream_error_code, ProviderLabels, RequestLabels,
    ResponseViolationLabels, TeamLabels, UpstreamErrorLabels, ViolationLabels, COUNTED_DECISIONS, NONE,
};
use super::{counter, histogram, LatencyHistogram, Metrics};
use crate::config::Config;
use crate::error::ApiError;
use crate::gate::{Decision, ResponseViolation, Verdict};
use crate::spend::Budget;
use crate::spend::SpendOwner;
use crate::telemetry::access_log::{AccessRecord, Outcome};

/// The metric handles of one configuration snapshot.
pub(crate) struct Meters {
    metrics: Arc<Metrics>,
    providers: HashMap<String, ProviderMeter, RandomState>,
    /// Requests no provider was chosen for (`provider="-"`).
    unrouted: ProviderMeter,
    /// Team names to their place in `team_labels`.
    teams: HashMap<String, usize, RandomState>,
    /// `-` first, then every team.
    team_labels: Vec<Arc<str>>,
}

impl std::fmt::Debug for Meters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meters")
            .field("providers", &self.providers.len())
            .field("teams", &self.teams.len())
            .finish_non_exhaustive()
    }
}

/// One provider's handles (or those of `-`).
pub(crate) struct ProviderMeter {
    label: Arc<str>,
    /// Arrival to the answer's head.
    request_duration: LatencyHistogram,
    /// Arrival to the answer's last byte (or the break).
    stream_duration: LatencyHistogram,
    /// The judge phase.
    gate_duration: LatencyHistogram,
    /// Forward to the provider's response head.
    upstream_duration: LatencyHistogram,
    bytes_out: Counter,
    /// By team (as `Meters::team_labels`), a counter per decision, made on first use so
    /// (provider, team) pairs that never meet add no series.
    requests: Box<[OnceLock<[Counter; 6]>]>,
}

impl ProviderMeter {
    fn new(metrics: &Metrics, label: Arc<str>, teams: usize) -> ProviderMeter {
        let labels = ProviderLabels {
            provider: label.clone(),
        };
        ProviderMeter {
            request_duration: histogram(&metrics.request_duration, &labels),
            stream_duration: histogram(&metrics.stream_duration, &labels),
            gate_duration: histogram(&metrics.gate_duration, &labels),
            upstream_duration: histogram(&metrics.upstream_duration, &labels),
            bytes_out: counter(&metrics.bytes_out, &labels),
            requests: (0..teams).map(|_| OnceLock::new()).collect(),
            label,
        }
    }

    /// The provider's label value (read by the tests).
    #[cfg(test)]
    pub(crate) fn label(&self) -> &Arc<str> {
        &self.label
    }

    /// Counts the time the judge phase took.
    pub(crate) fn gate_time(&self, elapsed: Duration) {
        self.gate_duration.observe(elapsed);
    }

    /// Counts the time the provider took to answer with its head.
    pub(crate) fn upstream_time(&self, elapsed: Duration) {
        self.upstream_duration.observe(elapsed);
    }
}

impl Meters {
    /// Resolves the handles of `config`'s providers and teams among `metrics`.
    pub(crate) fn resolve(metrics: &Arc<Metrics>, config: &Config) -> Meters {
        let team_labels: Vec<Arc<str>> = std::iter::once(Arc::from(NONE))
            .chain(config.teams.keys().map(|name| Arc::from(name.as_str())))
            .collect();
        let teams = team_labels
            .iter()
            .enumerate()
            .skip(1)
            .map(|(index, name)| (name.to_string(), index))
            .collect();
        let providers = config
            .providers
            .keys()
            .map(|name| {
                let meter = ProviderMeter::new(metrics, Arc::from(name.as_str()), team_labels.len());
                (name.clone(), meter)
            })
            .collect();
        // Every configured series of `replaygate_client_gone_total` is exposed from the start, at
        // zero, as the other families' are.
        for provider in std::iter::once(NONE).chain(config.providers.keys().map(String::as_str)) {
            for team in &team_labels {
                let labels = TeamLabels {
                    provider: Arc::from(provider),
                    team: team.clone(),
                };
                drop(metrics.client_gone.get_or_create(&labels));
            }
        }
        // Every configured budget's limit is exposed from the start; what it has spent once a
        // counter is read.
        for (name, team) in &config.teams {
            if let Some(budget) = &team.budget {
                metrics.budget.set_limit(&SpendOwner::team(name), budget);
            }
            for key in &team.keys {
                if let Some(budget) = &key.budget {
                    metrics.budget.set_limit(&key.spend_owner(), budget);
                }
            }
        }
        Meters {
            unrouted: ProviderMeter::new(metrics, Arc::from(NONE), team_labels.len()),
            metrics: metrics.clone(),
            providers,
            teams,
            team_labels,
        }
    }

    /// The handles of provider `name`; those of `-` when there is none, or when the name is
    /// not configured (so no other name can become a label value).
    pub(crate) fn provider(&self, name: Option<&str>) -> &ProviderMeter {
        name.and_then(|name| self.providers.get(name))
            .unwrap_or(&self.unrouted)
    }

    /// The place of team `name` among the labels; `-`'s (0) for none or an unknown name.
    fn team(&self, name: Option<&str>) -> usize {
        name.and_then(|name| self.teams.get(name).copied()).unwrap_or(0)
    }

    /// Starts counting a request: it is in flight until the returned meter is dropped.
    pub(crate) fn start(self: &Arc<Self>) -> RequestMeter {
        self.metrics.in_flight().inc();
        RequestMeter { meters: self.clone() }
    }

    /// Counts every violation of `verdict` (listed or not), for a request of `team` judged for
    /// `provider`.
    pub(crate) fn violations(&self, verdict: &Verdict, provider: &str, team: Option<&str>) {
        if verdict.tally.is_empty() {
            return;
        }
        let provider = self.provider(Some(provider)).label.clone();
        let team = self.team_labels[self.team(team)].clone();
        for &(reason, action, count) in &verdict.tally {
            let labels = ViolationLabels {
                reason: reason.as_str(),
                action: action.as_str(),
                provider: provider.clone(),
                team: team.clone(),
            };
            self.metrics
                .violations
                .get_or_create(&labels)
                .inc_by(count as u64);
        }
    }

    /// Counts a WebSocket message refused on a socket of `team` to `provider` (when chosen) as
    /// a request with that decision (`rejected` by the gate, else `error`).
    pub(crate) fn refused_message(&self, provider: Option<&str>, team: Option<&str>, rejected: bool) {
        let decision = match rejected {
            true => Some(Decision::Rejected),
            false => None,
        };
        self.count_request(self.provider(provider), team, decision);
    }

    /// Counts one request of `team` to `provider` with `decision`.
    fn count_request(&self, provider: &ProviderMeter, team: Option<&str>, decision: Option<Decision>) {
        let team = self.team(team);
        let counters = provider.requests[team].get_or_init(|| {
            COUNTED_DECISIONS.map(|decision| {
                counter(
                    &self.metrics.requests,
                    &RequestLabels {
                        provider: provider.label.clone(),
                        team: self.team_labels[team].clone(),
                        decision: counted_label(decision),
                    },
                )
            })
        });
        counters[counted_index(decision)].inc();
    }

    /// Counts the function calls `provider` produced that do not fit the request's tools.
    pub(crate) fn response_violations(&self, violations: &[ResponseViolation], provider: &str) {
        let provider = &self.provider(Some(provider)).label;
        for violation in violations {
            let labels = ResponseViolationLabels {
                reason: violation.reason.as_str(),
                provider: provider.clone(),
            };
            self.metrics.response_violations.get_or_create(&labels).inc();
        }
    }

    /// Counts one answer's `usage` for `team`, `provider` and the answer's `model`
    /// (docs/usage.md#metrics): team and provider as configured (`-` otherwise), the model
    /// among the bounded model labels.
    pub(crate) fn usage(
        &self,
        team: Option<&str>,
        provider: &str,
        model: Option<&str>,
        usage: crate::usage::AnswerUsage,
        unpriced: bool,
    ) {
        let families = &self.metrics.usage;
        let team = self.team_labels[self.team(team)].clone();
        let provider = self.provider(Some(provider)).label.clone();
        families.count(team, provider, families.model_label(model), usage, unpriced);
    }

    /// Sets the gauges of `owner`'s `budget` (docs/budgets.md#metrics): its limit, and `spent`,
    /// what its counter holds (tokens, or micro-dollars for a `usd` budget), as a reserve, a
    /// settle or `GET /usage` just read it.
    pub(crate) fn budget(&self, owner: &SpendOwner, budget: &Budget, spent: u64) {
        self.metrics.budget.set(owner, budget, spent);
    }

    /// Counts `error` against `provider`, when it is an error of the upstream.
    pub(crate) fn upstream_error(&self, provider: &str, error: &ApiError) {
        if let Some(code) = upstream_error_code(error) {
            let labels = UpstreamErrorLabels {
                provider: self.provider(Some(provider)).label.clone(),
                code,
            };
            self.metrics.upstream_errors.get_or_create(&labels).inc();
        }
    }
}

/// One request, counted in flight from its arrival until its answer's last byte (or until it
/// is dropped); [`RequestMeter::finish`] counts what it came to.
pub(crate) struct RequestMeter {
    meters: Arc<Meters>,
}

impl std::fmt::Debug for RequestMeter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestMeter").finish_non_exhaustive()
    }
}

impl RequestMeter {
    /// Counts the request `record` describes, which ended with `outcome`: its decision, its
    /// durations and the bytes sent. The provider and team are looked up among the configured
    /// ones (`-` for none).
    pub(crate) fn finish(self, record: &AccessRecord, outcome: &Outcome) {
        let provider = self.meters.provider(record.provider());
        let decision = counted(record.decision(), outcome.head.is_some());
        self.meters.count_request(provider, record.team_name(), decision);
        if let Some(head) = outcome.head {
            provider.request_duration.observe(head);
            if let Some(duration) = outcome.duration {
                provider.stream_duration.observe(duration);
            }
        }
        if outcome.bytes_out > 0 {
            provider.bytes_out.inc_by(outcome.bytes_out);
        }
        if outcome.client_gone() {
            // Rare enough for a lookup in the family; both labels are configured names.
            let labels = TeamLabels {
                provider: provider.label.clone(),
                team: self.meters.team_labels[self.meters.team(record.team_name())].clone(),
            };
            self.meters.metrics.client_gone.get_or_create(&labels).inc();
        }
    }
}

impl Drop for RequestMeter {
    fn drop(&mut self) {
        self.meters.metrics.in_flight().dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::from_toml(
            "[providers.openai]\nbase_url = \"https://api.openai.com/v1\"\nauth = \"none\"\n\
             [providers.bedrock]\nbase_url = \"https://bedrock.example/v1\"\nauth = \"none\"\n",
        )
        .unwrap()
    }

    #[test]
    fn only_configured_names_are_label_values() {
        let metrics = Arc::new(Metrics::new());
        let meters = Meters::resolve(&metrics, &config());
        assert_eq!(&**meters.provider(Some("openai")).label(), "openai");
        assert_eq!(&**meters.provider(Some("bedrock")).label(), "bedrock");
        assert_eq!(&**meters.provider(None).label(), "-");
        let long = "m".repeat(1 << 20);
        assert_eq!(&**meters.provider(Some(&long)).label(), "-");
        assert_eq!(meters.team(Some("payments")), 0, "not a configured team");
        assert_eq!(meters.team(None), 0);

        let error = ApiError::UpstreamUnavailable {
            provider: long.clone(),
            detail: "refused".into(),
        };
        meters.upstream_error(&long, &error);
        meters.upstream_error(
            "openai",
            &ApiError::UpstreamTimeout {
                provider: "openai".into(),
            },
        );
        meters.upstream_error("openai", &ApiError::JudgeFailed);
        let text = metrics.encode();
        assert!(!text.contains(&long[..64]));
        assert!(text
            .contains("replaygate_upstream_errors_total{provider=\"-\",code=\"upstream_unavailable\"} 1\n"));
        assert!(text
            .contains("replaygate_upstream_errors_total{provider=\"openai\",code=\"upstream_timeout\"} 1\n"));
        assert_eq!(text.matches("replaygate_upstream_errors_total{").count(), 2);
    }

    #[test]
    fn a_request_is_in_flight_until_its_meter_is_done() {
        let metrics = Arc::new(Metrics::new());
        let meters = Arc::new(Meters::resolve(&metrics, &config()));
        let first = meters.start();
        let second = meters.start();
        assert_eq!(metrics.in_flight().get(), 2);
        drop(first);
        assert_eq!(metrics.in_flight().get(), 1);
        drop(second);
        assert_eq!(metrics.in_flight().get(), 0);
    }

    #[test]
    fn a_reload_keeps_counting_the_same_series() {
        let metrics = Arc::new(Metrics::new());
        let before = Meters::resolve(&metrics, &config());
        let after = Meters::resolve(&metrics, &config());
        before
            .provider(Some("openai"))
            .gate_time(Duration::from_micros(10));
        after
            .provider(Some("openai"))
            .gate_time(Duration::from_micros(10));
        assert_eq!(after.provider(Some("openai")).gate_duration.count(), 2);
    }
}
