//! The hand-over of a record: one push on the request thread, found from its return on, in the
//! pending ring, then the recent index, then the tree; a full ring refused at once; the memory
//! it all takes fixed when the store opens.

use std::time::{Duration, Instant};

use super::tests::response;
use super::*;
use crate::metrics::Metrics;

/// A store whose writer lingers `linger` after a record arrives, with `max_memory_bytes`.
fn store(dir: &Path, linger: Duration, max_memory_bytes: u64) -> EmbeddedStore {
    let tuning = Tuning {
        linger,
        max_memory_bytes,
        ..TUNING
    };
    EmbeddedStore::open_tuned(dir, tuning, StateMeter::default()).unwrap()
}

fn pending_holds(store: &EmbeddedStore, id: &str) -> bool {
    let pending = &store.inner.shared.pending;
    pending.find(&response_key(id), |_| Some(())).is_some()
}

fn recent_holds(store: &EmbeddedStore, id: &str) -> bool {
    let recent = &store.inner.shared.recent;
    recent.find(&response_key(id), now_unix(), |_| Some(())).is_some()
}

/// Waits (10 s at most) until the writer has freed every pending slot.
async fn drained(store: &EmbeddedStore) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !store.inner.shared.pending.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the writer did not take the pending records"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_record_is_found_right_after_its_push_then_from_the_recent_index_then_the_tree() {
    let dir = tempfile::tempdir().unwrap();
    let meter = LedgerMeter::new(&Metrics::new());
    // A long linger: the record is surely still pending when it is looked up.
    let store = store(dir.path(), Duration::from_millis(300), DEFAULT_MAX_MEMORY_BYTES);
    let stored = response("resp_ryw", 4, 60);
    store.queue_response(stored.clone(), meter.clone()).unwrap();
    assert!(pending_holds(&store, "resp_ryw"));
    assert_eq!(store.response("resp_ryw").await.unwrap(), Some(stored.clone()));
    let item = store
        .items_by_id(&["fc_0123456789_resp_ryw".into()])
        .await
        .unwrap();
    assert_eq!(item[0].as_ref().unwrap().response_id, "resp_ryw");
    let by_digest = store.items_by_digest(&[[4; 32]]).await.unwrap();
    assert_eq!(by_digest[0].as_ref().unwrap().response_id, "resp_ryw");
    assert_eq!(
        meter.get(LedgerOp::Record, LedgerResult::Ok),
        0,
        "not committed yet"
    );
    // Committed: out of the ring, in the recent index.
    drained(&store).await;
    assert_eq!(meter.get(LedgerOp::Record, LedgerResult::Ok), 1);
    assert!(!pending_holds(&store, "resp_ryw"));
    assert!(recent_holds(&store, "resp_ryw"));
    assert_eq!(store.response("resp_ryw").await.unwrap(), Some(stored.clone()));
    // Reopened: neither ring nor index holds it; the tree does.
    drop(store);
    let store = self::store(dir.path(), Duration::ZERO, DEFAULT_MAX_MEMORY_BYTES);
    assert!(!recent_holds(&store, "resp_ryw"));
    assert_eq!(store.response("resp_ryw").await.unwrap(), Some(stored));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continuation_sent_right_after_each_push_finds_its_record() {
    let dir = tempfile::tempdir().unwrap();
    let meter = LedgerMeter::new(&Metrics::new());
    // No linger: the writer races the lookups, taking records as they come.
    let store = store(dir.path(), Duration::ZERO, 8 << 20);
    let tasks: Vec<_> = (0..4)
        .map(|task| {
            let (store, meter) = (store.clone(), meter.clone());
            tokio::spawn(async move {
                for n in 0..500 {
                    let id = format!("resp_{task}_{n}");
                    store.queue_response(response(&id, 1, 60), meter.clone()).unwrap();
                    let found = store.response(&id).await.unwrap();
                    assert_eq!(found.map(|r| r.id), Some(id.clone()));
                    let item = store.items_by_id(&[format!("rs_0123456789_{id}")]).await.unwrap();
                    assert_eq!(
                        item[0].as_ref().map(|i| i.response_id.as_str()),
                        Some(id.as_str())
                    );
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

#[tokio::test]
async fn a_full_ring_is_a_counted_failed_record_never_a_wait() {
    let dir = tempfile::tempdir().unwrap();
    let tuning = Tuning {
        queue: 4,
        linger: Duration::from_millis(300),
        ..TUNING
    };
    let state = super::super::StateStore::Embedded(
        EmbeddedStore::open_tuned(dir.path(), tuning, StateMeter::default()).unwrap(),
    );
    let meter = LedgerMeter::new(&Metrics::new());
    let started = Instant::now();
    let mut outcomes = Vec::new();
    for n in 0..6 {
        let recorded = state
            .record_response(response(&format!("resp_{n}"), 1, 60), &meter)
            .await;
        outcomes.push(recorded.map_err(|e| e.to_string()));
    }
    assert!(started.elapsed() < Duration::from_millis(250), "a push waited");
    assert!(outcomes[..4]
        .iter()
        .all(|o| o == &Ok(super::super::Recorded::Queued)));
    for refused in &outcomes[4..] {
        assert!(
            matches!(refused, Err(e) if e.contains("write queue full")),
            "{refused:?}"
        );
    }
    // What was taken is written and counted; the ring takes records again.
    let deadline = Instant::now() + Duration::from_secs(10);
    while meter.get(LedgerOp::Record, LedgerResult::Ok) < 4 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(state.response("resp_3").await.unwrap().is_some());
    assert!(state.response("resp_4").await.unwrap().is_none());
    state
        .record_response(response("resp_again", 1, 60), &meter)
        .await
        .unwrap();
}

#[tokio::test]
async fn the_memory_taken_is_fixed_at_open_and_the_index_holds_what_fits() {
    let dir = tempfile::tempdir().unwrap();
    // 8 MiB: a 2 MiB recent index.
    let store = store(dir.path(), Duration::ZERO, 8 << 20);
    let meter = LedgerMeter::new(&Metrics::new());
    let shared = &store.inner.shared;
    let (footprint, capacity) = (shared.recent.footprint(), shared.pending.capacity());
    assert!(footprint <= (2 << 20) + (2 << 20) / 64 * 24, "{footprint}");
    let one = compact::encode(&response("resp_000000", 1, 60)).len();
    let records = 3 * (2 << 20) / one;
    for n in 0..records {
        let id = format!("resp_{n:06}");
        while let Err(e) = store.queue_response(response(&id, 1, 60), meter.clone()) {
            // The ring is full: let the writer catch up (a count, not a time, bounds this).
            assert!(matches!(&e, StoreError::Unavailable(m) if m == "write queue full"));
            drained(&store).await;
        }
    }
    drained(&store).await;
    assert_eq!(shared.recent.footprint(), footprint);
    assert_eq!(shared.pending.capacity(), capacity);
    let held = (0..records)
        .filter(|n| recent_holds(&store, &format!("resp_{n:06}")))
        .count();
    // At most what the ring's bytes hold; the newest are among them.
    assert!(held <= (2 << 20) / one, "{held} held");
    assert!(held >= (2 << 20) / (one + 4) / 2, "{held} held");
    assert!(recent_holds(&store, &format!("resp_{:06}", records - 1)));
    // The ones that left the index are read from the tree.
    assert!(!recent_holds(&store, "resp_000000"));
    assert!(store.response("resp_000000").await.unwrap().is_some());
}
