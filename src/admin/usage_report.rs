//! The body of `GET /usage` (docs/usage.md#get-usage): what one owner's tally and budget
//! counter held, rendered with stable field names. Pure: [`super::usage`] reads the store.

use crate::config::{Budget, BudgetLimit};
use crate::spend::{rfc3339, Bounds, Window};
use crate::state::tally::WindowUsage;

/// What was read for one owner: its window, its tally, and its budget with what the budget's
/// counter holds.
#[derive(Debug, Clone, Copy)]
pub(super) struct OwnerRead {
    /// The window the tally (and the budget) counts in.
    pub(super) window: Window,
    /// The window holding the time of the read.
    pub(super) bounds: Bounds,
    /// The tally.
    pub(super) usage: WindowUsage,
    /// The owner's budget, and what its counter holds (tokens, or micro-dollars).
    pub(super) budget: Option<(Budget, u64)>,
}

/// The whole body.
#[derive(Debug, serde::Serialize)]
pub(super) struct UsageReport {
    /// Every team (`-` alone without teams), by name.
    pub(super) teams: Vec<TeamUsage>,
    /// Every key with a budget of its own, by team then key id.
    pub(super) keys: Vec<KeyUsage>,
}

/// One team's entry.
#[derive(Debug, serde::Serialize)]
pub(super) struct TeamUsage {
    team: String,
    #[serde(flatten)]
    usage: OwnerUsage,
}

/// One key's entry.
#[derive(Debug, serde::Serialize)]
pub(super) struct KeyUsage {
    key_id: String,
    team: String,
    #[serde(flatten)]
    usage: OwnerUsage,
}

/// The fields of a team's or a key's entry.
#[derive(Debug, serde::Serialize)]
struct OwnerUsage {
    window: WindowReport,
    tokens: Tokens,
    answers: u64,
    missing_usage: u64,
    /// `null` without `[prices]`.
    cost_usd: Option<f64>,
    /// `null` without a budget.
    budget: Option<BudgetReport>,
    /// What the budget's counter holds, in its unit; `null` without a budget.
    spent: Option<Amount>,
    /// The budget less `spent`, never below 0; `null` without a budget.
    left: Option<Amount>,
}

#[derive(Debug, serde::Serialize)]
struct WindowReport {
    name: &'static str,
    start: String,
    end: String,
}

#[derive(Debug, serde::Serialize)]
struct Tokens {
    input: u64,
    output: u64,
    cached_input: u64,
    reasoning_output: u64,
}

/// A budget as written: `{"tokens": N}` or `{"usd": X}`.
#[derive(Debug, serde::Serialize)]
enum BudgetReport {
    #[serde(rename = "tokens")]
    Tokens(u64),
    #[serde(rename = "usd")]
    Usd(f64),
}

/// An amount in a budget's unit: whole tokens, or dollars.
#[derive(Debug, serde::Serialize)]
#[serde(untagged)]
enum Amount {
    Tokens(u64),
    Usd(f64),
}

impl TeamUsage {
    /// Team `team`'s entry (`-` for anonymous answers).
    pub(super) fn new(team: &str, read: &OwnerRead, priced: bool) -> TeamUsage {
        TeamUsage {
            team: team.to_owned(),
            usage: OwnerUsage::new(read, priced),
        }
    }
}

impl KeyUsage {
    /// Key `key_id`'s entry, of team `team`.
    pub(super) fn new(key_id: &str, team: &str, read: &OwnerRead, priced: bool) -> KeyUsage {
        KeyUsage {
            key_id: key_id.to_owned(),
            team: team.to_owned(),
            usage: OwnerUsage::new(read, priced),
        }
    }
}

impl OwnerUsage {
    /// The entry of `read`; `priced`: whether any `[prices]` are configured.
    fn new(read: &OwnerRead, priced: bool) -> OwnerUsage {
        let usage = &read.usage;
        let (budget, spent, left) = match read.budget {
            Some((budget, spent)) => {
                let limit = budget.limit.units();
                let left = limit.saturating_sub(spent);
                let (shown, spent, left) = match budget.limit {
                    BudgetLimit::Tokens(_) => (
                        BudgetReport::Tokens(limit),
                        Amount::Tokens(spent),
                        Amount::Tokens(left),
                    ),
                    BudgetLimit::MicroUsd(_) => (
                        BudgetReport::Usd(usd(limit)),
                        Amount::Usd(usd(spent)),
                        Amount::Usd(usd(left)),
                    ),
                };
                (Some(shown), Some(spent), Some(left))
            }
            None => (None, None, None),
        };
        OwnerUsage {
            window: WindowReport {
                name: read.window.as_str(),
                start: rfc3339(read.bounds.start),
                end: rfc3339(read.bounds.end),
            },
            tokens: Tokens {
                input: usage.input,
                output: usage.output,
                cached_input: usage.cached_input,
                reasoning_output: usage.reasoning_output,
            },
            answers: usage.answers,
            missing_usage: usage.missing,
            cost_usd: priced.then(|| usd(usage.cost_micro_usd)),
            budget,
            spent,
            left,
        }
    }
}

/// Micro-dollars as dollars.
fn usd(micros: u64) -> f64 {
    micros as f64 / 1_000_000.0
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// 2026-12-07T00:00:00Z.
    const DEC_7: u64 = 1_796_601_600;

    fn read(budget: Option<(Budget, u64)>) -> OwnerRead {
        OwnerRead {
            window: Window::Day,
            bounds: Window::Day.bounds(DEC_7 + 3600),
            usage: WindowUsage {
                input: 1200,
                output: 300,
                cached_input: 1000,
                reasoning_output: 250,
                cost_micro_usd: 3375,
                answers: 3,
                missing: 1,
            },
            budget,
        }
    }

    fn render(report: &UsageReport) -> serde_json::Value {
        serde_json::to_value(report).unwrap()
    }

    #[test]
    fn a_team_with_a_tokens_budget_and_a_key_with_a_usd_one() {
        let tokens = Budget {
            limit: BudgetLimit::Tokens(2_000_000),
            window: Window::Day,
        };
        let usd = Budget {
            limit: BudgetLimit::MicroUsd(5_000_000),
            window: Window::Day,
        };
        let report = UsageReport {
            teams: vec![TeamUsage::new("payments", &read(Some((tokens, 1500))), true)],
            keys: vec![KeyUsage::new(
                "ci-nightly",
                "payments",
                &read(Some((usd, 6_000_000))),
                true,
            )],
        };
        let window = json!({"name": "day", "start": "2026-12-07T00:00:00Z", "end": "2026-12-08T00:00:00Z"});
        let tokens = json!({"input": 1200, "output": 300, "cached_input": 1000, "reasoning_output": 250});
        assert_eq!(
            render(&report),
            json!({
                "teams": [{
                    "team": "payments", "window": window, "tokens": tokens,
                    "answers": 3, "missing_usage": 1, "cost_usd": 0.003375,
                    "budget": {"tokens": 2_000_000}, "spent": 1500, "left": 1_998_500,
                }],
                "keys": [{
                    "key_id": "ci-nightly", "team": "payments", "window": window,
                    "tokens": tokens, "answers": 3, "missing_usage": 1, "cost_usd": 0.003375,
                    // Spent past the budget: nothing left, never less.
                    "budget": {"usd": 5.0}, "spent": 6.0, "left": 0.0,
                }],
            })
        );
    }

    #[test]
    fn without_prices_or_budget_those_fields_are_null() {
        let report = UsageReport {
            teams: vec![TeamUsage::new("-", &read(None), false)],
            keys: vec![],
        };
        let body = render(&report);
        let team = &body["teams"][0];
        assert_eq!(team["team"], "-");
        for field in ["cost_usd", "budget", "spent", "left"] {
            assert_eq!(team[field], serde_json::Value::Null, "{field}");
        }
        assert_eq!(body["keys"], json!([]));
        // A month's window ends at the next month's first day.
        let month = OwnerRead {
            window: Window::Month,
            bounds: Window::Month.bounds(DEC_7),
            ..read(None)
        };
        let team = render(&UsageReport {
            teams: vec![TeamUsage::new("t", &month, false)],
            keys: vec![],
        });
        assert_eq!(
            team["teams"][0]["window"],
            json!({"name": "month", "start": "2026-12-01T00:00:00Z", "end": "2027-01-01T00:00:00Z"})
        );
    }
}
