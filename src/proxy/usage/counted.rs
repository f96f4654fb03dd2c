//! The sink of this phase (docs/usage.md#where-usage-shows): each answer's usage counted in
//! the usage metrics (`unpriced` when `[prices]` price no model of it), added to its request's tally (for the access line and the span), and
//! written to the audit log as a `usage` line when the log is on.

use std::sync::Arc;

use super::{Answered, UsageSink};
use crate::metrics::Meters;
use crate::proxy::audit::{AuditLog, UsageAuditLine};
use crate::spend::Prices;
use crate::telemetry::usage_tally::UsageTally;

/// Counts, tallies and audits each answer's usage.
pub(crate) struct Counted {
    /// The metric handles of the configuration the request was judged under.
    pub(crate) meters: Arc<Meters>,
    /// The request's tally.
    pub(crate) tally: Arc<UsageTally>,
    /// The audit log, when it is on.
    pub(crate) audit: Option<Arc<AuditLog>>,
    /// `[prices]`: a reported answer whose model none prices is counted `unpriced`.
    pub(crate) prices: Arc<Prices>,
}

impl UsageSink for Counted {
    fn answered(&self, answered: &Answered<'_>) {
        let answerer = answered.answerer;
        let unpriced = !self.prices.is_empty() && answered.price(&self.prices).is_none();
        self.meters.usage(
            answerer.team.as_deref(),
            &answerer.provider,
            answered.model,
            answered.usage,
            unpriced,
        );
        self.tally.add(answered.usage);
        if let Some(audit) = &self.audit {
            audit.write(&UsageAuditLine::new(
                &answerer.request_id,
                answerer.team.as_deref(),
                answerer.key_id.as_deref(),
                answerer.client_cert.as_deref(),
                &answerer.provider,
                answered.model,
                answered.usage,
            ));
        }
    }
}
