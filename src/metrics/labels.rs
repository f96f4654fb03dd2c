//! The label sets of the metric families. Every value is a name from the configuration (a
//! provider, a team), `-`, or one of a fixed set of words: nothing a request sends becomes a
//! label value.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;

use crate::error::ApiError;
use crate::gate::Decision;
use crate::telemetry::access_log::RequestDecision;

/// The label value of "none": no provider chosen, no team.
pub(super) const NONE: &str = "-";

/// `replaygate_requests_total{provider,team,decision}`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    pub(crate) provider: Arc<str>,
    pub(crate) team: Arc<str>,
    pub(crate) decision: &'static str,
}

/// `replaygate_violations_total{reason,action,provider,team}`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ViolationLabels {
    pub(crate) reason: &'static str,
    pub(crate) action: &'static str,
    pub(crate) provider: Arc<str>,
    pub(crate) team: Arc<str>,
}

/// `replaygate_response_violations_total{reason,provider}`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResponseViolationLabels {
    pub(crate) reason: &'static str,
    pub(crate) provider: Arc<str>,
}

/// `replaygate_client_gone_total{provider,team}`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TeamLabels {
    pub(crate) provider: Arc<str>,
    pub(crate) team: Arc<str>,
}

/// The families labelled by provider alone (durations, bytes out).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ProviderLabels {
    pub(crate) provider: Arc<str>,
}

/// `replaygate_upstream_errors_total{provider,code}`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct UpstreamErrorLabels {
    pub(crate) provider: Arc<str>,
    pub(crate) code: &'static str,
}

/// `replaygate_ledger_operations_total{op,result}`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct LedgerLabels {
    pub(crate) op: &'static str,
    pub(crate) result: &'static str,
}

/// `replaygate_config_reloads_total{result}`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResultLabels {
    pub(crate) result: &'static str,
}

/// `replaygate_build_info{version}`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct VersionLabels {
    pub(crate) version: &'static str,
}

/// The `decision` label of every request counted (docs/operations.md#metrics), in the order
/// of [`counted_index`]: a verdict's decision (an ungated request counts as allowed), or
/// `error` (`None`): refused by the proxy for another reason, or never answered (the client
/// went away).
pub(crate) const COUNTED_DECISIONS: [Option<Decision>; 6] = [
    Some(Decision::Allowed),
    Some(Decision::Rejected),
    Some(Decision::Monitored),
    Some(Decision::Stripped),
    Some(Decision::Repaired),
    None,
];

/// The label value of a counted decision.
pub(crate) fn counted_label(decision: Option<Decision>) -> &'static str {
    decision.map_or("error", Decision::as_str)
}

/// The decision's place in [`COUNTED_DECISIONS`].
pub(crate) fn counted_index(decision: Option<Decision>) -> usize {
    match decision {
        Some(decision) => decision as usize,
        None => Decision::ALL.len(),
    }
}

/// The decision counted for a request the access log gave `decision`; one that got no answer
/// (`answered` false) counts as an error.
pub(crate) fn counted(decision: RequestDecision, answered: bool) -> Option<Decision> {
    decision.counted().filter(|_| answered)
}

/// The `code` of an upstream error, when `error` is one: the provider could not be reached or
/// did not answer in time.
pub(super) fn upstream_error_code(error: &ApiError) -> Option<&'static str> {
    match error {
        ApiError::UpstreamUnavailable { .. } => Some("upstream_unavailable"),
        ApiError::UpstreamTimeout { .. } => Some("upstream_timeout"),
        _ => None,
    }
}

/// The ledger operations counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LedgerOp {
    /// Looking up what the store knows of a request's ids.
    Lookup,
    /// Recording an answer.
    Record,
    /// Carrying a session to another provider (reading its chain).
    Carry,
}

impl LedgerOp {
    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LedgerOp::Lookup => "lookup",
            LedgerOp::Record => "record",
            LedgerOp::Carry => "carry",
        }
    }
}

/// How a ledger operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LedgerResult {
    /// Done: a lookup that found something, a record written, a session carried.
    Ok,
    /// The store answered and knew nothing: a lookup that found none of the ids, a chain that
    /// cannot be carried.
    Miss,
    /// The store failed or did not answer in time.
    Error,
    /// An answer that was to be recorded and was not: it named no response id (it broke, its
    /// client left, or it could not be read before naming one).
    Dropped,
    /// An answer one of whose output items passed the tap's 32 MiB cap: only its response id
    /// is recorded (that record is counted too, when written).
    TooLarge,
}

impl LedgerResult {
    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LedgerResult::Ok => "ok",
            LedgerResult::Miss => "miss",
            LedgerResult::Error => "error",
            LedgerResult::Dropped => "dropped",
            LedgerResult::TooLarge => "too_large",
        }
    }
}

/// The operations and results that can happen together, each counted from zero.
pub(super) const LEDGER_OUTCOMES: [(LedgerOp, LedgerResult); 10] = [
    (LedgerOp::Lookup, LedgerResult::Ok),
    (LedgerOp::Lookup, LedgerResult::Miss),
    (LedgerOp::Lookup, LedgerResult::Error),
    (LedgerOp::Record, LedgerResult::Ok),
    (LedgerOp::Record, LedgerResult::Error),
    (LedgerOp::Record, LedgerResult::Dropped),
    (LedgerOp::Record, LedgerResult::TooLarge),
    (LedgerOp::Carry, LedgerResult::Ok),
    (LedgerOp::Carry, LedgerResult::Miss),
    (LedgerOp::Carry, LedgerResult::Error),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_access_log_decision_maps_to_a_counted_one() {
        let cases = [
            (RequestDecision::Ungated, "allowed"),
            (RequestDecision::Judged(Decision::Allowed), "allowed"),
            (RequestDecision::Judged(Decision::Rejected), "rejected"),
            (RequestDecision::Judged(Decision::Monitored), "monitored"),
            (RequestDecision::Judged(Decision::Stripped), "stripped"),
            (RequestDecision::Error, "error"),
        ];
        for (decision, label) in cases {
            assert_eq!(counted_label(counted(decision, true)), label);
            assert_eq!(counted(decision, false), None);
            assert_eq!(counted_label(counted(decision, false)), "error");
        }
        for (index, decision) in COUNTED_DECISIONS.into_iter().enumerate() {
            assert_eq!(counted_index(decision), index);
        }
        let words: Vec<&str> = COUNTED_DECISIONS.iter().map(|d| counted_label(*d)).collect();
        assert_eq!(
            words,
            [
                "allowed",
                "rejected",
                "monitored",
                "stripped",
                "repaired",
                "error"
            ]
        );
    }

    #[test]
    fn only_errors_of_the_upstream_have_an_upstream_code() {
        let unavailable = ApiError::UpstreamUnavailable {
            provider: "openai".into(),
            detail: "connection refused".into(),
        };
        let timeout = ApiError::UpstreamTimeout {
            provider: "openai".into(),
        };
        assert_eq!(upstream_error_code(&unavailable), Some("upstream_unavailable"));
        assert_eq!(upstream_error_code(&timeout), Some("upstream_timeout"));
        assert_eq!(upstream_error_code(&ApiError::JudgeFailed), None);
        assert_eq!(upstream_error_code(&ApiError::Overloaded { limit: 1 }), None);
        // The codes are the envelope's.
        assert_eq!(upstream_error_code(&unavailable), Some(unavailable.code()));
        assert_eq!(upstream_error_code(&timeout), Some(timeout.code()));
    }

    #[test]
    fn ledger_outcomes_are_distinct_words() {
        let mut seen: Vec<(&str, &str)> = LEDGER_OUTCOMES
            .iter()
            .map(|(op, result)| (op.as_str(), result.as_str()))
            .collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), LEDGER_OUTCOMES.len());
    }
}
