//! The provenance ledger in the proxy (docs/ledger.md): the facts a request's ids have in the
//! store, looked up before the gate judges it ([`facts`]); the chain a foreign
//! `previous_response_id` is carried with (`carry`); and the tap that records each allowed
//! answer as it streams ([`recording`]).

pub(crate) mod carry;
pub(crate) mod conversations;
pub(crate) mod facts;
pub(crate) mod recording;

use std::time::Duration;

use crate::error::ApiError;
use crate::ledger::StoredResponse;
use crate::metrics::{LedgerMeter, LedgerOp, LedgerResult};
use crate::state::{HandOver, Recorded, StateStore, StoreError};
use crate::telemetry::LogEvery;

/// The least time between two warnings of the same kind (a record not written, a lookup
/// failed); each one is counted all the same.
const WARN_EVERY: Duration = Duration::from_secs(1);

/// How the ledger behaves (`[ledger]`).
#[derive(Debug, Clone)]
pub(crate) struct LedgerSettings {
    /// `store_items`: keep the items of each turn, to carry sessions.
    pub(crate) store_items: bool,
    /// `carry_sessions`: replace a foreign `previous_response_id` by its recorded chain.
    pub(crate) carry_sessions: bool,
    /// `retention_hours`.
    pub(crate) retention: Duration,
    /// `on_unavailable = "allow"`: judge without the facts when the store cannot answer.
    pub(crate) allow_unavailable: bool,
    /// The most responses one chain walk reads.
    pub(crate) max_chain: usize,
    /// The longest a record's write may hold an answer's last bytes.
    pub(crate) write_timeout: Duration,
}

/// The ledger: its store, its settings and its counts. One per process.
#[derive(Debug)]
pub(crate) struct Ledger {
    /// Where records live.
    pub(crate) store: StateStore,
    /// How it behaves.
    pub(crate) settings: LedgerSettings,
    /// What it has done since the process started (`replaygate_ledger_operations_total`).
    meter: LedgerMeter,
    /// Records not written, logged one a second.
    write_warnings: LogEvery,
    /// Lookups failed, logged one a second.
    lookup_warnings: LogEvery,
}

impl Ledger {
    /// A ledger over `store`, counting its operations with `meter`.
    pub(crate) fn new(store: StateStore, settings: LedgerSettings, meter: LedgerMeter) -> Ledger {
        Ledger {
            store,
            settings,
            meter,
            write_warnings: LogEvery::new(WARN_EVERY),
            lookup_warnings: LogEvery::new(WARN_EVERY),
        }
    }

    /// Counts operation `op` ending with `result`.
    pub(crate) fn count(&self, op: LedgerOp, result: LedgerResult) {
        self.meter.count(op, result);
    }

    /// Writes a record: to a store of this process at once ([`Ledger::hand_over`]), to Redis
    /// within the write timeout. A failure is counted and logged (one line a second, with how
    /// many were not logged since), never passed on (the answer it came from goes on
    /// unchanged). A record the store queues ([`Recorded::Queued`]) is counted, and a failed
    /// commit logged, by the store's writer.
    pub(crate) async fn write(&self, stored: StoredResponse) {
        let Some(stored) = self.hand_over(stored) else {
            return;
        };
        // Named in the warning of a failed write; the store keeps the record itself.
        let (id, provider) = (stored.id.clone(), stored.owner.provider.clone());
        let recording = self.store.record_response(stored, &self.meter);
        let outcome = tokio::time::timeout(self.settings.write_timeout, recording)
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::Unavailable(format!(
                    "the write did not finish within {} ms",
                    self.settings.write_timeout.as_millis()
                )))
            });
        self.written(outcome, &id, &provider);
    }

    /// Hands a record to a store of this process (memory, embedded) and counts it as
    /// [`Ledger::write`] does: every lookup of this process finds it from now on, and nothing
    /// waits for a commit (docs/ledger.md#when-a-record-is-written). Returns `None` then; a
    /// record for Redis, which other replicas read, comes back for [`Ledger::write`].
    pub(crate) fn hand_over(&self, stored: StoredResponse) -> Option<StoredResponse> {
        if self.store.is_remote() {
            return Some(stored);
        }
        // Named in the warning of a refused record; the store keeps the record itself.
        let (id, provider) = (stored.id.clone(), stored.owner.provider.clone());
        match self.store.hand_over(stored, &self.meter) {
            HandOver::Taken(outcome) => self.written(outcome, &id, &provider),
            HandOver::Remote(stored) => return Some(*stored),
        }
        None
    }

    /// Counts how the write of record `id` (for `provider`) ended, and logs a failure.
    fn written(&self, outcome: Result<Recorded, StoreError>, id: &str, provider: &str) {
        let error = match outcome {
            Ok(Recorded::Written) => {
                self.count(LedgerOp::Record, LedgerResult::Ok);
                return;
            }
            // The store's writer counts the record once its commit ends.
            Ok(Recorded::Queued) => return,
            Err(error) => error,
        };
        self.count(LedgerOp::Record, LedgerResult::Error);
        if matches!(error, StoreError::Full(_)) {
            self.meter.state().writes_refused(1);
        }
        if let Some(held_back) = self.write_warnings.admit() {
            tracing::warn!(
                response_id = %id,
                provider = %provider,
                %error,
                not_logged_since_last = held_back,
                "a ledger record was not written"
            );
        }
    }

    /// What a request that needs the store gets when it could not answer: the failure is
    /// logged (one line a second), then 503 `ledger_unavailable`, or under `[ledger]
    /// on_unavailable = "allow"` nothing: the request goes on as if nothing were recorded.
    pub(crate) fn unavailable(&self, error: &StoreError) -> Result<(), ApiError> {
        self.lookup_failed(error);
        match self.settings.allow_unavailable {
            true => Ok(()),
            false => Err(ApiError::LedgerUnavailable(error.to_string())),
        }
    }

    /// Logs a lookup the store could not answer (the operation counts it), one a second.
    fn lookup_failed(&self, error: &StoreError) {
        if let Some(held_back) = self.lookup_warnings.admit() {
            tracing::warn!(%error, not_logged_since_last = held_back, "a ledger lookup failed");
        }
    }
}
