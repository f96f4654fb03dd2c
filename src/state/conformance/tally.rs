//! The conformance cases of the usage tallies (docs/usage.md#get-usage): what every backend's
//! add and read answer alike.

use std::sync::Arc;
use std::time::Duration;

use super::{cannot_answer, eventually, response, Backend, Outage};
use crate::spend::Window;
use crate::state::now_unix;
use crate::state::spend::{SpendOwner, COUNTER_GRACE_SECS};
use crate::state::tally::{TallyKey, WindowUsage};

/// Team `team`'s tally of the day starting at `start`.
fn tally(team: &str, start: u64) -> TallyKey {
    TallyKey::new(&SpendOwner::team(team), Window::Day, start)
}

/// A window that ends in an hour.
fn window_end() -> u64 {
    now_unix() + 3600
}

/// One answer's usage, every field set.
fn answer() -> WindowUsage {
    WindowUsage {
        input: 1200,
        output: 300,
        cached_input: 1000,
        reasoning_output: 250,
        cost_micro_usd: 3375,
        answers: 1,
        missing: 0,
    }
}

/// Each field of `usage` times `n`.
fn times(usage: WindowUsage, n: u64) -> WindowUsage {
    WindowUsage::from_values(usage.values().map(|value| value * n))
}

/// An unknown tally reads all 0; adds sum, field by field.
pub(super) async fn usage_adds_sum<B: Backend>() {
    let backend = B::open().await;
    let store = backend.store();
    let (key, end) = (tally("payments", 0), window_end());
    assert_eq!(store.window_usage(&key).await.unwrap(), WindowUsage::default());
    store.add_usage(&key, &answer(), end).await.unwrap();
    assert_eq!(store.window_usage(&key).await.unwrap(), answer());
    store.add_usage(&key, &answer(), end).await.unwrap();
    store.add_usage(&key, &WindowUsage::default(), end).await.unwrap();
    assert_eq!(store.window_usage(&key).await.unwrap(), times(answer(), 2));
    // Another replica's store reads the same tally.
    assert_eq!(
        backend.another().window_usage(&key).await.unwrap(),
        times(answer(), 2)
    );
}

/// Each field counts on its own; owners and windows are tallied apart; a window whose grace is
/// over adds nothing.
pub(super) async fn usage_fields_are_independent<B: Backend>() {
    let backend = B::open().await;
    let store = backend.store();
    let (key, end) = (tally("payments", 0), window_end());
    let missing = WindowUsage {
        answers: 1,
        missing: 1,
        ..WindowUsage::default()
    };
    store.add_usage(&key, &missing, end).await.unwrap();
    let cost_only = WindowUsage {
        cost_micro_usd: 7,
        ..WindowUsage::default()
    };
    store.add_usage(&key, &cost_only, end).await.unwrap();
    assert_eq!(
        store.window_usage(&key).await.unwrap(),
        WindowUsage {
            answers: 1,
            missing: 1,
            cost_micro_usd: 7,
            ..WindowUsage::default()
        }
    );
    let others = [
        tally("search", 0),
        tally("payments", 86_400),
        TallyKey::new(&SpendOwner::team("payments"), Window::Hour, 0),
    ];
    for other in &others {
        assert_eq!(store.window_usage(other).await.unwrap(), WindowUsage::default());
    }
    store.add_usage(&others[0], &answer(), end).await.unwrap();
    assert_eq!(store.window_usage(&others[0]).await.unwrap(), answer());
    assert_eq!(store.window_usage(&key).await.unwrap().input, 0);
    let over = now_unix() - COUNTER_GRACE_SECS - 10;
    store.add_usage(&others[1], &answer(), over).await.unwrap();
    assert_eq!(
        store.window_usage(&others[1]).await.unwrap(),
        WindowUsage::default()
    );
}

/// A tally is forgotten once its window's end and the grace have passed (a bounded wait: six
/// seconds at most); then it counts afresh.
pub(super) async fn usage_expires_after_its_windows_end<B: Backend>() {
    let backend = B::open().await;
    let store = backend.store();
    let key = tally("payments", 0);
    let end = now_unix() + 2 - COUNTER_GRACE_SECS;
    store.add_usage(&key, &answer(), end).await.unwrap();
    assert_eq!(store.window_usage(&key).await.unwrap(), answer());
    let gone = eventually(Duration::from_secs(6), || async {
        store.window_usage(&key).await.unwrap() == WindowUsage::default()
    })
    .await;
    assert!(gone, "the tally outlived its window");
    store.add_usage(&key, &answer(), window_end()).await.unwrap();
    assert_eq!(store.window_usage(&key).await.unwrap(), answer());
}

/// Two hundred adds at once, from as many tasks on two stores of the backend (two replicas'
/// for Redis): every field of every one is counted.
pub(super) async fn concurrent_usage_adds_lose_nothing<B: Backend>() {
    let backend = B::open().await;
    let stores = [backend.store(), backend.another()];
    let key = Arc::new(tally("payments", 0));
    let end = window_end();
    let tasks: Vec<_> = (0..200)
        .map(|n| {
            let (store, key) = (stores[n % 2].clone(), key.clone());
            tokio::spawn(async move { store.add_usage(&key, &answer(), end).await.unwrap() })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(stores[0].window_usage(&key).await.unwrap(), times(answer(), 200));
}

/// While the store cannot answer, adds and reads fail (never a tally of 0); back, they count
/// again.
pub(super) async fn an_unavailable_store_refuses_to_tally<B: Outage>() {
    let mut backend = B::open_fallible().await;
    let store = backend.store();
    let (key, end) = (tally("payments", 0), window_end());
    store.add_usage(&key, &answer(), end).await.unwrap();
    backend.take_down().await;
    let err = store
        .put_response(&response("resp_during", 8, 600))
        .await
        .unwrap_err();
    assert!(cannot_answer(&err), "{err:?}");
    let err = store.add_usage(&key, &answer(), end).await.unwrap_err();
    assert!(cannot_answer(&err), "{err:?}");
    let err = store.window_usage(&key).await.unwrap_err();
    assert!(cannot_answer(&err), "{err:?}");

    backend.bring_back().await;
    let answers = eventually(Duration::from_secs(10), || async {
        store.put_response(&response("resp_after", 9, 600)).await.is_ok()
    })
    .await;
    assert!(answers, "the store did not answer again");
    store.add_usage(&key, &answer(), end).await.unwrap();
}
