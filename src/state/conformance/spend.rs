//! The conformance cases of the budgets' spend counters (docs/budgets.md#counters): what every
//! backend's reserve, settle and read answer alike.

use std::sync::Arc;
use std::time::Duration;

use super::{cannot_answer, eventually, response, Backend, Outage};
use crate::config::BudgetUnit;
use crate::spend::Window;
use crate::state::now_unix;
use crate::state::spend::{CounterKey, Reservation, SpendOwner, COUNTER_GRACE_SECS};

/// The counter of team `team`'s tokens in the day starting at `start`.
fn counter(team: &str, start: u64) -> CounterKey {
    CounterKey::new(&SpendOwner::team(team), BudgetUnit::Tokens, Window::Day, start)
}

/// A window that ends in an hour.
fn window_end() -> u64 {
    now_unix() + 3600
}

fn reserved(spent: u64) -> Reservation {
    Reservation {
        reserved: true,
        spent,
    }
}

fn refused(spent: u64) -> Reservation {
    Reservation {
        reserved: false,
        spent,
    }
}

/// Reservations are added while they fit under the limit, up to it exactly and never past it;
/// a refused one is not counted; an unknown counter reads 0; counters are apart from each other.
pub(super) async fn a_reservation_fits_up_to_the_limit_and_no_further<B: Backend>() {
    let backend = B::open().await;
    let store = backend.store();
    let (key, end) = (counter("payments", 0), window_end());
    assert_eq!(store.spent(&key).await.unwrap(), 0);
    assert_eq!(store.reserve(&key, 60, 100, end).await.unwrap(), reserved(60));
    assert_eq!(store.reserve(&key, 50, 100, end).await.unwrap(), refused(60));
    assert_eq!(store.reserve(&key, 40, 100, end).await.unwrap(), reserved(100));
    assert_eq!(store.reserve(&key, 1, 100, end).await.unwrap(), refused(100));
    assert_eq!(store.reserve(&key, 0, 100, end).await.unwrap(), reserved(100));
    assert_eq!(store.spent(&key).await.unwrap(), 100);
    // A raised limit (a reload) lets the same counter go on.
    assert_eq!(store.reserve(&key, 1, 150, end).await.unwrap(), reserved(101));
    // Another team, or another window of the same team, counts apart; an amount larger than
    // the limit never fits.
    let other = counter("search", 0);
    assert_eq!(store.reserve(&other, 101, 100, end).await.unwrap(), refused(0));
    assert_eq!(store.reserve(&other, 100, 100, end).await.unwrap(), reserved(100));
    let tomorrow = counter("payments", 86_400);
    assert_eq!(store.reserve(&tomorrow, 7, 100, end).await.unwrap(), reserved(7));
    assert_eq!(store.spent(&key).await.unwrap(), 101);
}

/// A settle replaces a reservation by what was used: less gives back the difference, more
/// adds it (past the limit if need be, so the next reservation is refused); the counter never
/// goes below zero; a settle on a counter that is gone counts from zero.
pub(super) async fn settling_replaces_a_reservation_by_what_was_used<B: Backend>() {
    let backend = B::open().await;
    let store = backend.store();
    let (key, end) = (counter("payments", 0), window_end());
    store.reserve(&key, 50, 100, end).await.unwrap();
    store.reserve(&key, 30, 100, end).await.unwrap();
    // The first answer used 20 of its 50.
    assert_eq!(store.settle(&key, 50, 20, end).await.unwrap(), 50);
    // The second used 70 of its 30.
    assert_eq!(store.settle(&key, 30, 70, end).await.unwrap(), 90);
    assert_eq!(store.settle(&key, 0, 0, end).await.unwrap(), 90);
    assert_eq!(store.reserve(&key, 20, 100, end).await.unwrap(), refused(90));
    assert_eq!(store.settle(&key, 0, 25, end).await.unwrap(), 115);
    assert_eq!(store.reserve(&key, 0, 100, end).await.unwrap(), refused(115));
    assert_eq!(store.spent(&key).await.unwrap(), 115);
    // Never below zero.
    assert_eq!(store.settle(&key, 500, 0, end).await.unwrap(), 0);
    assert_eq!(store.spent(&key).await.unwrap(), 0);
    // A counter that is gone counts from zero; one that would stay at zero is not made.
    let lost = counter("lost", 0);
    assert_eq!(store.settle(&lost, 10, 4, end).await.unwrap(), 0);
    assert_eq!(store.settle(&lost, 10, 14, end).await.unwrap(), 4);
    assert_eq!(store.spent(&lost).await.unwrap(), 4);
    // A window whose grace is over settles nothing.
    let over = now_unix() - COUNTER_GRACE_SECS - 10;
    assert_eq!(store.settle(&counter("over", 0), 0, 50, over).await.unwrap(), 0);
    assert_eq!(store.spent(&counter("over", 0)).await.unwrap(), 0);
}

/// A counter is forgotten once its window's end and the grace have passed: read as 0, and a
/// reservation starts afresh (a bounded wait: six seconds at most).
pub(super) async fn a_windows_counter_expires_after_its_end<B: Backend>() {
    let backend = B::open().await;
    let store = backend.store();
    let key = counter("payments", 0);
    // A window that ended just before the grace that is left: two seconds.
    let end = now_unix() + 2 - COUNTER_GRACE_SECS;
    assert_eq!(store.reserve(&key, 80, 100, end).await.unwrap(), reserved(80));
    assert_eq!(store.reserve(&key, 80, 100, end).await.unwrap(), refused(80));
    let gone = eventually(Duration::from_secs(6), || async {
        store.spent(&key).await.unwrap() == 0
    })
    .await;
    assert!(gone, "the counter outlived its window");
    let next_end = window_end();
    assert_eq!(
        store.reserve(&key, 80, 100, next_end).await.unwrap(),
        reserved(80)
    );
}

/// Two hundred reservations at once, from as many tasks on two stores of the backend (two
/// replicas' for Redis), against a limit that fits fifty: exactly fifty are reserved, and the
/// counter holds the limit; settled at what they reserved, it holds it still.
pub(super) async fn concurrent_reserves_never_pass_the_limit<B: Backend>() {
    let backend = B::open().await;
    let stores = [backend.store(), backend.another()];
    let key = Arc::new(counter("payments", 0));
    let end = window_end();
    let tasks: Vec<_> = (0..200)
        .map(|n| {
            let (store, key) = (stores[n % 2].clone(), key.clone());
            tokio::spawn(async move { store.reserve(&key, 4, 200, end).await.unwrap() })
        })
        .collect();
    let mut fitted = 0;
    for task in tasks {
        let reservation = task.await.unwrap();
        assert!(reservation.spent <= 200, "{reservation:?}");
        fitted += u64::from(reservation.reserved);
    }
    assert_eq!(fitted, 50);
    assert_eq!(stores[1].spent(&key).await.unwrap(), 200);
    let settles: Vec<_> = (0..fitted)
        .map(|n| {
            let (store, key) = (stores[n as usize % 2].clone(), key.clone());
            tokio::spawn(async move { store.settle(&key, 4, 4, end).await.unwrap() })
        })
        .collect();
    for settle in settles {
        assert!(settle.await.unwrap() <= 200);
    }
    assert_eq!(stores[0].spent(&key).await.unwrap(), 200);
}

/// While the store cannot answer, reserve, settle and read fail (never a count of 0 or a
/// reservation that was not kept), within the store's timeout; back, they count again.
pub(super) async fn an_unavailable_store_refuses_to_count<B: Outage>() {
    let mut backend = B::open_fallible().await;
    let store = backend.store();
    let (key, end) = (counter("payments", 0), window_end());
    store.reserve(&key, 10, 100, end).await.unwrap();
    backend.take_down().await;
    // A write fails first (the embedded store learns its disk is full from a batch).
    let err = store
        .put_response(&response("resp_during", 8, 600))
        .await
        .unwrap_err();
    assert!(cannot_answer(&err), "{err:?}");
    let started = std::time::Instant::now();
    let err = store.reserve(&key, 10, 100, end).await.unwrap_err();
    assert!(cannot_answer(&err), "{err:?}");
    let err = store.settle(&key, 10, 5, end).await.unwrap_err();
    assert!(cannot_answer(&err), "{err:?}");
    let err = store.spent(&key).await.unwrap_err();
    assert!(cannot_answer(&err), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );

    backend.bring_back().await;
    let answers = eventually(Duration::from_secs(10), || async {
        store.put_response(&response("resp_after", 9, 600)).await.is_ok()
    })
    .await;
    assert!(answers, "the store did not answer again");
    let counted = store.reserve(&key, 10, 100, end).await.unwrap();
    assert!(counted.reserved, "{counted:?}");
}

/// Ten thousand reserves at once of one unit each, on a counter a hundred short of its limit:
/// exactly a hundred fit, and no answer ever sees the counter past the limit.
pub(super) async fn ten_thousand_reserves_at_the_edge_pass_it_by_nothing<B: Backend>() {
    let backend = B::open().await;
    let stores = [backend.store(), backend.another()];
    let key = Arc::new(counter("edge", 0));
    let end = window_end();
    let limit = 1_000_000;
    assert!(
        stores[0]
            .reserve(&key, limit - 100, limit, end)
            .await
            .unwrap()
            .reserved
    );
    let tasks: Vec<_> = (0..10_000)
        .map(|n| {
            let (store, key) = (stores[n % 2].clone(), key.clone());
            tokio::spawn(async move { store.reserve(&key, 1, limit, end).await.unwrap() })
        })
        .collect();
    let mut fitted = 0;
    for task in tasks {
        let reservation = task.await.unwrap();
        assert!(reservation.spent <= limit, "{reservation:?}");
        fitted += u64::from(reservation.reserved);
    }
    assert_eq!(fitted, 100);
    assert_eq!(stores[1].spent(&key).await.unwrap(), limit);
}
