//! The `redis` backend through Redis Sentinel, on real servers: a failover is followed, and
//! while no master answers every call is unavailable (never "no record"), within the timeout.

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use super::redis_ha::{query, start_sentinel, SentinelSet};
use super::redis_server::free_port;
use super::test_records::reasoning_items;
use super::{RedisLogin, RedisStore, StoreError};
use crate::config::{NodeAddr, RedisTarget};

fn target(sentinel_ports: &[u16], master_name: &str) -> RedisTarget {
    RedisTarget::Sentinel {
        sentinels: sentinel_ports
            .iter()
            .map(|port| NodeAddr {
                host: "127.0.0.1".into(),
                port: *port,
            })
            .collect(),
        master_name: master_name.into(),
        password_env: None,
        tls: false,
    }
}

fn store(sentinel_ports: &[u16], master_name: &str, timeout: Duration) -> RedisStore {
    RedisStore::open(
        &target(sentinel_ports, master_name),
        &RedisLogin::default(),
        "rg-test",
        timeout,
    )
    .unwrap()
}

fn per_minute(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

#[tokio::test]
async fn a_failover_is_followed_and_meanwhile_the_store_is_unavailable_not_empty() {
    let mut set = SentinelSet::start("rg-ledger");
    let timeout = Duration::from_millis(500);
    // Two sentinels listed, the first with nothing behind it: the next one is asked.
    let store = store(&[free_port(), set.sentinel.port()], &set.name, timeout);
    let stored = reasoning_items("resp_before", &[("rs_{before}_0123456789", 1)]);
    store.put_response(&stored).await.unwrap();
    assert_eq!(store.response("resp_before").await.unwrap(), Some(stored.clone()));
    assert_eq!(store.hit_rate("payments", per_minute(100)).await.unwrap(), Ok(()));
    // The replica holds it before the master goes.
    let replica = set.replica.port();
    super::redis_ha::poll(Duration::from_secs(10), "the replica to copy the record", || {
        query::<bool>(replica, ::redis::cmd("EXISTS").arg("rg-test:v1:resp:resp_before"))
            .ok()
            .filter(|exists| *exists)
    });

    set.kill_master();
    let killed = Instant::now();
    let mut unavailable = 0;
    let recovered = loop {
        assert!(
            killed.elapsed() < Duration::from_secs(60),
            "no master answered within 60 s of the kill ({unavailable} unavailable answers)"
        );
        let started = Instant::now();
        match store.response("resp_before").await {
            Ok(found) => {
                // Never "no record": the record is on the promoted replica.
                assert_eq!(found, Some(stored.clone()));
                break killed.elapsed();
            }
            Err(StoreError::Unavailable(_)) => unavailable += 1,
            Err(other) => panic!("{other:?}"),
        }
        assert!(
            started.elapsed() < timeout + Duration::from_secs(1),
            "a call took {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(unavailable > 0, "the store answered through a dead master");
    eprintln!("failover followed {recovered:?} after the kill, {unavailable} unavailable answers meanwhile");
    assert_eq!(set.named_master_port(), Some(replica));
    // The promoted replica takes writes, items by id and digest, and the rate limits.
    let after = reasoning_items("resp_after", &[("rs_after_0123456789", 2)]);
    store.put_response(&after).await.unwrap();
    assert_eq!(store.response("resp_after").await.unwrap(), Some(after));
    let ids = [
        "rs_after_0123456789".to_owned(),
        "rs_{before}_0123456789".to_owned(),
        "nope".to_owned(),
    ];
    let found = store.items_by_id(&ids).await.unwrap();
    assert_eq!(found[0].as_ref().unwrap().response_id, "resp_after");
    assert_eq!(found[1].as_ref().unwrap().response_id, "resp_before");
    assert!(found[2].is_none());
    let found = store.items_by_digest(&[[1; 32], [2; 32]]).await.unwrap();
    assert!(found.iter().all(Option::is_some), "{found:?}");
    assert_eq!(store.hit_rate("payments", per_minute(100)).await.unwrap(), Ok(()));
    store.ping().await.unwrap();
}

#[tokio::test]
async fn a_connection_to_a_master_gone_in_a_finished_failover_is_replaced_within_the_call() {
    let mut set = SentinelSet::start("rg-stale");
    let kept = store(&[set.sentinel.port()], &set.name, Duration::from_millis(500));
    let stored = reasoning_items("resp_stale", &[("rs_stale_0123456789", 3)]);
    kept.put_response(&stored).await.unwrap();
    let replica = set.replica.port();
    super::redis_ha::poll(Duration::from_secs(10), "the replica to copy the record", || {
        query::<bool>(replica, ::redis::cmd("EXISTS").arg("rg-test:v1:resp:resp_stale"))
            .ok()
            .filter(|exists| *exists)
    });

    // The store keeps its connection to the master, unused, until another store (another
    // replica) has been answered through the sentinel by the promoted replica.
    set.kill_master();
    let other = store(&[set.sentinel.port()], &set.name, Duration::from_millis(500));
    let deadline = Instant::now() + Duration::from_secs(30);
    while other.ping().await.is_err() {
        assert!(
            Instant::now() < deadline,
            "no master answered within 30 s of the kill"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(set.named_master_port(), Some(replica));
    // The first call after it finds the old connection gone and is answered by the new master,
    // the record and the rate count with it, not refused as unavailable.
    assert_eq!(kept.response("resp_stale").await.unwrap(), Some(stored));
    assert_eq!(kept.hit_rate("payments", per_minute(100)).await.unwrap(), Ok(()));
}

/// Every call of `store` is unavailable, each within the timeout (and some slack).
async fn every_call_is_unavailable(store: &RedisStore) {
    let limit = store.timeout() + Duration::from_secs(1);
    for _ in 0..2 {
        let started = Instant::now();
        let stored = reasoning_items("resp_1", &[("rs_1", 1)]);
        let ids = ["rs_1".to_owned()];
        let (ping, response, found, rate, put) = tokio::join!(
            store.ping(),
            store.response("resp_1"),
            store.items_by_id(&ids),
            store.hit_rate("payments", per_minute(3)),
            store.put_response(&stored),
        );
        let elapsed = started.elapsed();
        for err in [
            ping.unwrap_err(),
            response.unwrap_err(),
            found.unwrap_err(),
            rate.unwrap_err(),
            put.unwrap_err(),
        ] {
            assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
        }
        assert!(elapsed < limit, "{elapsed:?}");
    }
}

#[tokio::test]
async fn a_sentinel_naming_an_unreachable_master_is_unavailable_within_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens where the master should be.
    let nowhere = start_sentinel(dir.path(), "gone", free_port());
    let gone = store(&[nowhere.port()], "gone", Duration::from_millis(300));
    every_call_is_unavailable(&gone).await;
    // The error names the way to the master, not only the refusal.
    let err = gone.ping().await.unwrap_err().to_string();
    let way = format!(
        "redis: no connection via sentinels 127.0.0.1:{} (master gone): ",
        nowhere.port()
    );
    assert!(err.contains(&way), "{err}");

    // The master accepts connections and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_port = listener.local_addr().unwrap().port();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let silent = start_sentinel(dir.path(), "silent", silent_port);
    every_call_is_unavailable(&store(&[silent.port()], "silent", Duration::from_millis(300))).await;
    // A name the sentinel does not know, and no sentinel at all.
    every_call_is_unavailable(&store(&[silent.port()], "unknown", Duration::from_millis(300))).await;
    every_call_is_unavailable(&store(&[free_port()], "silent", Duration::from_millis(300))).await;
    hold.abort();
}

/// Three replicas' stores through Sentinel, 200 reserves at once against a limit that fits 50:
/// exactly 50 fit on the master the sentinels name.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_reserve_exactly_what_fits_through_sentinel() {
    let set = SentinelSet::start("rg-spend");
    let replicas: Vec<RedisStore> = (0..3)
        .map(|_| store(&[set.sentinel.port()], &set.name, Duration::from_secs(2)))
        .collect();
    let counted = super::redis::spend::two_hundred_reserves(&replicas, "payments").await;
    assert_eq!(counted, (50, 1000));
}
