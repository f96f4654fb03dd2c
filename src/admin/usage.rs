//! `GET /usage` (docs/usage.md#get-usage): for each team (`-` alone without teams) and each
//! key with a budget of its own, the current window's tally from the state backend (tokens by
//! kind, answers, those without usage, cost where `[prices]` are configured) and, with a
//! budget, what its counter holds and what is left. Every replica reads the same tallies and
//! counters through `[state]`. A store that cannot answer: 503 `state_unavailable`.
//!
//! The budget gauges (`replaygate_budget_spent`, `replaygate_budget_limit`) are set with what
//! the counters held.

use std::time::Duration;

use bytes::Bytes;
use futures_util::future::{try_join, try_join_all};
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::Full;

use super::usage_report::{KeyUsage, OwnerRead, TeamUsage, UsageReport};
use super::AdminState;
use crate::config::Budget;
use crate::metrics::Meters;
use crate::proxy::usage::{team_tally, ANONYMOUS};
use crate::spend::Window;
use crate::state::spend::{BudgetCounter, SpendOwner};
use crate::state::tally::TallyKey;
use crate::state::{StateStore, StoreError};

/// The longest `/usage` waits for the state backend's answers.
const USAGE_TIMEOUT: Duration = Duration::from_secs(5);

/// The report, or 503 when the store does not answer in time.
pub(super) async fn usage(admin: &AdminState) -> Response<Full<Bytes>> {
    match tokio::time::timeout(USAGE_TIMEOUT, report(admin)).await {
        Ok(Ok(report)) => match serde_json::to_vec(&report) {
            Ok(body) => json(StatusCode::OK, body),
            Err(error) => unavailable(&format!("the usage report could not be written: {error}")),
        },
        Ok(Err(error)) => unavailable(&error.to_string()),
        Err(_) => unavailable(&format!(
            "the state backend did not answer within {} s",
            USAGE_TIMEOUT.as_secs()
        )),
    }
}

/// Reads every owner's tally and budget counter under the configuration in force.
async fn report(admin: &AdminState) -> Result<UsageReport, StoreError> {
    let snapshot = admin.snapshot.load_full();
    let (store, meters, now) = (&admin.store, &*snapshot.meters, admin.clock.now_unix());
    let priced = !snapshot.prices.is_empty();
    let teams = snapshot.teams.all();
    // Whose tallies: each team's (or the anonymous one), then each budgeted key's.
    let team_owners: Vec<(&str, SpendOwner, Window, Option<Budget>)> = if teams.is_empty() {
        let (owner, window) = team_tally(None);
        vec![(ANONYMOUS, owner, window, None)]
    } else {
        teams
            .iter()
            .map(|team| {
                let (owner, window) = team_tally(Some(team));
                let budget = team.budget.as_ref().map(|owned| owned.budget);
                (team.name.as_str(), owner, window, budget)
            })
            .collect()
    };
    let keys = snapshot.teams.key_budgets();
    let team_reads = team_owners
        .iter()
        .map(|(_, owner, window, budget)| read(store, meters, owner, *window, *budget, now));
    let key_reads = keys.iter().map(|(_, _, owned)| {
        let budget = owned.budget;
        read(store, meters, &owned.owner, budget.window, Some(budget), now)
    });
    let (team_reads, key_reads) = try_join(try_join_all(team_reads), try_join_all(key_reads)).await?;
    Ok(UsageReport {
        teams: team_owners
            .iter()
            .zip(&team_reads)
            .map(|((name, ..), read)| TeamUsage::new(name, read, priced))
            .collect(),
        keys: keys
            .iter()
            .zip(&key_reads)
            .map(|((team, key_id, _), read)| KeyUsage::new(key_id, team, read, priced))
            .collect(),
    })
}

/// `owner`'s tally of its `window` holding `now` (a budget's window is its own), and, with a
/// `budget`, what its counter holds (set on the budget gauges).
async fn read(
    store: &StateStore,
    meters: &Meters,
    owner: &SpendOwner,
    window: Window,
    budget: Option<Budget>,
    now: u64,
) -> Result<OwnerRead, StoreError> {
    let window = budget.map_or(window, |budget| budget.window);
    let bounds = window.bounds(now);
    let usage = store
        .window_usage(&TallyKey::new(owner, window, bounds.start))
        .await?;
    let budget = match budget {
        Some(budget) => {
            let spent = store.spent(&BudgetCounter::of(owner, &budget, now).key).await?;
            meters.budget(owner, &budget, spent);
            Some((budget, spent))
        }
        None => None,
    };
    Ok(OwnerRead {
        window,
        bounds,
        usage,
        budget,
    })
}

/// 503 `state_unavailable`, saying why.
fn unavailable(message: &str) -> Response<Full<Bytes>> {
    let body = serde_json::json!({"error": {"message": message, "code": "state_unavailable"}});
    json(StatusCode::SERVICE_UNAVAILABLE, body.to_string().into_bytes())
}

fn json(status: StatusCode, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
