//! Reserve and settle over the memory store: what a request holds, what it is refused, and
//! what settling leaves on the counters.

use std::sync::Arc;

use super::*;
use crate::config::{Budget, BudgetLimit, OnUnavailable, UsageConfig, UsageMode};
use crate::error::ApiError;
use crate::proxy::usage::{Answerer, RequestUsage};
use crate::spend::{Estimate, Prices, Window};
use crate::state::spend::{OwnedBudget, SpendOwner};
use crate::state::{MemoryStore, StateStore};
use crate::usage::{AnswerUsage, ReadUsage, Usage};

/// Now, once for every test: counters of windows long over are gone.
static NOW: std::sync::LazyLock<u64> = std::sync::LazyLock::new(crate::state::now_unix);

fn tokens(owner: SpendOwner, limit: u64) -> OwnedBudget {
    OwnedBudget {
        owner,
        budget: Budget {
            limit: BudgetLimit::Tokens(limit),
            window: Window::Day,
        },
    }
}

/// The budget gauges of a configuration without teams.
static METERS: std::sync::LazyLock<Arc<crate::metrics::Meters>> = std::sync::LazyLock::new(|| {
    let config =
        crate::config::Config::from_toml("[providers.openai]\nbase_url = \"https://api.openai.com/v1\"\n")
            .unwrap();
    Arc::new(crate::metrics::Meters::resolve(
        &Arc::new(crate::metrics::Metrics::new()),
        &config,
    ))
});

fn spending<'a>(store: &'a StateStore, prices: &'a Prices, mode: UsageMode) -> Spending<'a> {
    Spending {
        store,
        now_unix: *NOW,
        prices,
        usage: UsageConfig {
            mode,
            ..UsageConfig::default()
        },
        team_monitors: false,
        meters: &METERS,
    }
}

fn estimate(tokens: u64) -> Estimate {
    Estimate {
        input: tokens,
        output: 0,
    }
}

async fn spent(store: &StateStore, budget: &OwnedBudget) -> u64 {
    let counter = crate::state::spend::BudgetCounter::of(&budget.owner, &budget.budget, *NOW);
    store.spent(&counter.key).await.unwrap()
}

fn settle_with(store: &StateStore, held: Vec<Held>, usage: AnswerUsage) {
    settle_priced(store, Prices::default(), held, usage, None);
}

/// Settles `held` at `prices` with an answer of `usage` naming `model` (the request asked for
/// `gpt-5`).
fn settle_priced(
    store: &StateStore,
    prices: Prices,
    held: Vec<Held>,
    usage: AnswerUsage,
    model: Option<&str>,
) {
    let answerer = Answerer {
        request_id: "req".into(),
        team: Some("payments".into()),
        key_id: None,
        client_cert: None,
        provider: "openai".into(),
        model: Some("gpt-5".into()),
    };
    let sink = Settled {
        store: store.clone(),
        prices: Arc::new(prices),
        held,
        meters: METERS.clone(),
    };
    RequestUsage::new(answerer, Arc::new(sink))
        .answer()
        .deliver(ReadUsage {
            usage,
            model: model.map(str::to_owned),
        });
}

#[tokio::test]
async fn a_request_reserves_on_each_budget_and_settles_what_it_used() {
    let store = StateStore::Memory(MemoryStore::default());
    let prices = Prices::default();
    let team = tokens(SpendOwner::team("payments"), 1000);
    let key = tokens(SpendOwner::team("payments-key"), 500);
    let spending = spending(&store, &prices, UsageMode::Enforce);
    let reserved = reserve(&spending, &[&team, &key], estimate(300), None)
        .await
        .unwrap();
    assert_eq!(reserved.held.len(), 2);
    assert_eq!(
        (spent(&store, &team).await, spent(&store, &key).await),
        (300, 300)
    );
    let used = Usage {
        input: 100,
        output: 20,
        cached_input: 0,
        reasoning_output: 0,
    };
    settle_with(&store, reserved.held, AnswerUsage::Reported(used));
    assert_eq!(
        (spent(&store, &team).await, spent(&store, &key).await),
        (120, 120)
    );
    // An answer without usage keeps its reservation.
    let reserved = reserve(&spending, &[&team], estimate(300), None).await.unwrap();
    settle_with(&store, reserved.held, AnswerUsage::Missing);
    assert_eq!(spent(&store, &team).await, 420);
}

#[tokio::test]
async fn a_budget_it_would_pass_refuses_it_and_gives_back_the_others() {
    let store = StateStore::Memory(MemoryStore::default());
    let prices = Prices::default();
    let team = tokens(SpendOwner::team("payments"), 1000);
    let key = tokens(SpendOwner::team("payments-key"), 200);
    let spending = spending(&store, &prices, UsageMode::Enforce);
    let error = reserve(&spending, &[&team, &key], estimate(300), None)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "budget_exceeded");
    assert_eq!(error.status(), http::StatusCode::TOO_MANY_REQUESTS);
    let message = error.to_string();
    assert!(
        message.contains("200 tokens") && message.contains("day"),
        "{message}"
    );
    assert!(message.contains("this request reserves 300 tokens"), "{message}");
    // The team's reservation was given back: nothing was forwarded.
    assert_eq!(spent(&store, &team).await, 0);
    let ApiError::BudgetExceeded(refusal) = error else {
        unreachable!()
    };
    assert_eq!(refusal.retry_after, Window::Day.bounds(*NOW).end - *NOW);
}

#[tokio::test]
async fn under_monitor_a_passed_budget_is_counted_and_named_not_refused() {
    let store = StateStore::Memory(MemoryStore::default());
    let prices = Prices::default();
    let team = tokens(SpendOwner::team("payments"), 100);
    let spending = spending(&store, &prices, UsageMode::Monitor);
    let reserved = reserve(&spending, &[&team], estimate(300), None).await.unwrap();
    assert_eq!(reserved.passed, ["team:payments"]);
    assert_eq!(spent(&store, &team).await, 300);
}

#[tokio::test]
async fn a_usd_budget_reserves_the_estimate_priced_and_settles_the_cost() {
    let config = crate::config::Config::from_toml(
        "[providers.openai]\nbase_url = \"https://api.openai.com/v1\"\n\
         [prices.\"gpt-5*\"]\ninput_per_million = 2.0\ncached_input_per_million = 0.5\noutput_per_million = 8.0\n",
    )
    .unwrap();
    let prices = Prices::new(config.prices.iter().map(|price| (&price.model, price.price())));
    let store = StateStore::Memory(MemoryStore::default());
    let budget = OwnedBudget {
        owner: SpendOwner::team("payments"),
        budget: Budget {
            limit: BudgetLimit::MicroUsd(1_000_000),
            window: Window::Month,
        },
    };
    let spending = spending(&store, &prices, UsageMode::Enforce);
    let estimate = Estimate {
        input: 100,
        output: 10,
    };
    let reserved = reserve(&spending, &[&budget], estimate, Some("gpt-5"))
        .await
        .unwrap();
    assert_eq!(reserved.held[0].reserved, 100 * 2 + 10 * 8);
    let used = Usage {
        input: 50,
        output: 5,
        cached_input: 40,
        reasoning_output: 0,
    };
    let answered = AnswerUsage::Reported(used);
    settle_priced(&store, prices, reserved.held, answered, Some("gpt-5-2025"));
    let counter = crate::state::spend::BudgetCounter::of(&budget.owner, &budget.budget, *NOW);
    // 10 * 2 + 40 * 0.5 + 5 * 8 micro-dollars.
    assert_eq!(store.spent(&counter.key).await.unwrap(), 80);
}

#[tokio::test]
async fn a_store_that_cannot_count_refuses_unless_allowed() {
    // A Redis nobody listens at.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://127.0.0.1:{port}/");
    let redis =
        crate::state::RedisStore::connect(&url, "rg-test", std::time::Duration::from_millis(300)).unwrap();
    let store = StateStore::Redis(redis);
    let prices = Prices::default();
    let team = tokens(SpendOwner::team("payments"), 1000);
    let mut spending = spending(&store, &prices, UsageMode::Enforce);
    let error = reserve(&spending, &[&team], estimate(1), None).await.unwrap_err();
    assert_eq!(error.code(), "budget_unavailable");
    assert_eq!(error.status(), http::StatusCode::SERVICE_UNAVAILABLE);
    spending.usage.on_unavailable = OnUnavailable::Allow;
    let reserved = reserve(&spending, &[&team], estimate(1), None).await.unwrap();
    assert!(reserved.held.is_empty());
}
