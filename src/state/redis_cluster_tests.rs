//! The `redis` backend on a real three-node Redis Cluster: records round-trip with their items
//! spread over the slots (ids with braces and 10 KB ids included), rate limits are shared, and
//! a node that redirects forever ends in an unavailable store within the timeout, and nodes that
//! refuse connections are named in the error.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::redis_ha::{query, Cluster};
use super::test_records::reasoning_items;
use super::{RedisLogin, RedisStore, StoreError};
use crate::config::{NodeAddr, RedisTarget};

fn store(ports: &[u16], timeout: Duration) -> RedisStore {
    let target = RedisTarget::Cluster {
        nodes: ports
            .iter()
            .map(|port| NodeAddr {
                host: "127.0.0.1".into(),
                port: *port,
            })
            .collect(),
        tls: false,
    };
    RedisStore::open(&target, &RedisLogin::default(), "rg-test", timeout).unwrap()
}

fn ports(cluster: &Cluster) -> Vec<u16> {
    cluster.nodes.iter().map(|node| node.port()).collect()
}

fn per_minute(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

#[tokio::test]
async fn records_round_trip_with_their_items_spread_over_the_nodes() {
    let cluster = Cluster::start();
    // Only the first node is listed: the others are learnt from it.
    let store = store(&ports(&cluster)[..1], Duration::from_secs(2));
    store.ping().await.unwrap();
    let long = format!("rs_{}", "x".repeat(10 * 1024));
    // Ids of at least 16 bytes: shorter ones are not indexed (they name no single item).
    let braces = [
        "rs_{a}1_0123456789",
        "rs_{a}2_0123456789",
        "{rs_0123456789abc}",
        "rs_}{_0123456789ab",
        "fc_{{}}_0123456789",
    ];
    let mut items: Vec<(&str, u8)> = braces.iter().map(|id| (*id, 0)).collect();
    items.push((&long, 0));
    let numbered: Vec<String> = (0..24).map(|n| format!("rs_0123456789ab_{n}")).collect();
    items.extend(numbered.iter().map(|id| (id.as_str(), 0)));
    for (n, item) in items.iter_mut().enumerate() {
        item.1 = u8::try_from(n + 1).unwrap();
    }
    let stored = reasoning_items("resp_{cluster}_1", &items);
    store.put_response(&stored).await.unwrap();
    assert_eq!(
        store.response("resp_{cluster}_1").await.unwrap(),
        Some(stored.clone())
    );
    assert_eq!(store.response("resp_{cluster}_2").await.unwrap(), None);

    // Asked in another order, with unknown ids between: answered in the order asked.
    let mut ids: Vec<String> = items.iter().rev().map(|(id, _)| (*id).to_owned()).collect();
    ids.insert(3, "rs_{a}3_0123456789".into());
    ids.push("nope".into());
    let found = store.items_by_id(&ids).await.unwrap();
    assert_eq!(found.len(), ids.len());
    for (id, item) in ids.iter().zip(&found) {
        match item {
            Some(item) => {
                assert_eq!(item.record.id.as_deref(), Some(id.as_str()));
                assert_eq!(item.response_id, "resp_{cluster}_1");
            }
            None => assert!(id == "rs_{a}3_0123456789" || id == "nope", "{id} not found"),
        }
    }
    let digests: Vec<[u8; 32]> = (1..=u8::try_from(items.len()).unwrap())
        .rev()
        .map(|n| [n; 32])
        .chain([[250; 32]])
        .collect();
    let found = store.items_by_digest(&digests).await.unwrap();
    for (digest, item) in digests.iter().zip(&found) {
        match item {
            Some(item) => assert_eq!(item.record.digest, *digest),
            None => assert_eq!(*digest, [250; 32]),
        }
    }

    // The keys are spread over all three nodes.
    for node in &cluster.nodes {
        let size: u64 = query(node.port(), &::redis::cmd("DBSIZE")).unwrap();
        assert!(size > 0, "node {} holds no key", node.port());
    }
}

#[tokio::test]
async fn two_stores_share_a_teams_count_on_a_cluster() {
    let cluster = Cluster::start();
    let ports = ports(&cluster);
    let replica_a = store(&ports, Duration::from_secs(2));
    let replica_b = store(&ports[2..], Duration::from_secs(2));
    for team in ["payments", "{search}", "a}{b"] {
        assert_eq!(replica_a.hit_rate(team, per_minute(2)).await.unwrap(), Ok(()));
        assert_eq!(replica_b.hit_rate(team, per_minute(2)).await.unwrap(), Ok(()));
        let wait = replica_a
            .hit_rate(team, per_minute(2))
            .await
            .unwrap()
            .unwrap_err();
        assert!(
            wait > Duration::from_secs(25) && wait <= Duration::from_secs(30),
            "{wait:?}"
        );
        assert!(replica_b.hit_rate(team, per_minute(2)).await.unwrap().is_err());
    }
}

#[tokio::test]
async fn a_cluster_that_goes_away_is_unavailable_never_empty() {
    let mut cluster = Cluster::start();
    let ports = ports(&cluster);
    let store = store(&ports, Duration::from_millis(500));
    let stored = reasoning_items("resp_down", &[("rs_down", 1)]);
    store.put_response(&stored).await.unwrap();
    // Every node goes: each call is unavailable within the timeout, never "no record".
    cluster.nodes.clear();
    for _ in 0..3 {
        let started = Instant::now();
        let err = store.response("resp_down").await.unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
        let err = store.items_by_id(&["rs_down".to_owned()]).await.unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
    }
}

#[tokio::test]
async fn nodes_that_refuse_connections_are_named_in_the_error() {
    let port = super::redis::test_server::free_port();
    let store = store(&[port], Duration::from_millis(500));
    let err = store.ping().await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    let way = format!("redis: no connection via cluster 127.0.0.1:{port}: ");
    assert!(err.to_string().contains(&way), "{err}");
}

/// A fake cluster node: it says it holds every slot, then answers every other command with
/// `MOVED` to itself. How many redirected commands it answered is counted.
async fn redirecting_node() -> (u16, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let moved = Arc::new(AtomicUsize::new(0));
    let counted = moved.clone();
    let task = tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut buffer = Vec::new();
                let mut chunk = [0; 4096];
                while let Ok(read) = socket.read(&mut chunk).await {
                    if read == 0 {
                        return;
                    }
                    buffer.extend_from_slice(&chunk[..read]);
                    while let Some((command, used)) = parse_command(&buffer) {
                        buffer.drain(..used);
                        let name = command.join(" ").to_ascii_uppercase();
                        let answer = if name.starts_with("CLUSTER SLOTS") {
                            format!(
                                "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:{port}\r\n$4\r\nnode\r\n"
                            )
                        } else if name.starts_with("CLIENT") {
                            "+OK\r\n".to_owned()
                        } else {
                            counted.fetch_add(1, Ordering::Relaxed);
                            format!("-MOVED 42 127.0.0.1:{port}\r\n")
                        };
                        if socket.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (port, moved, task)
}

/// One RESP command (an array of bulk strings) from the start of `buffer`, and its length.
fn parse_command(buffer: &[u8]) -> Option<(Vec<String>, usize)> {
    fn line(buffer: &[u8], at: usize) -> Option<(&[u8], usize)> {
        let end = buffer[at..].windows(2).position(|w| w == b"\r\n")? + at;
        Some((&buffer[at..end], end + 2))
    }
    let (head, mut at) = line(buffer, 0)?;
    let count: usize = std::str::from_utf8(head.strip_prefix(b"*")?).ok()?.parse().ok()?;
    let mut parts = Vec::with_capacity(count);
    for _ in 0..count {
        let (size, next) = line(buffer, at)?;
        let size: usize = std::str::from_utf8(size.strip_prefix(b"$")?).ok()?.parse().ok()?;
        let end = next + size;
        if buffer.len() < end + 2 {
            return None;
        }
        parts.push(String::from_utf8_lossy(&buffer[next..end]).into_owned());
        at = end + 2;
    }
    Some((parts, at))
}

#[tokio::test]
async fn a_node_redirecting_forever_is_unavailable_within_the_timeout() {
    let (port, moved, task) = redirecting_node().await;
    let timeout = Duration::from_millis(400);
    let store = store(&[port], timeout);
    for _ in 0..2 {
        let started = Instant::now();
        let stored = reasoning_items("resp_1", &[("rs_1", 1), ("rs_2", 2)]);
        let ids = ["rs_1".to_owned(), "rs_2".to_owned()];
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
        assert!(elapsed < timeout + Duration::from_secs(1), "{elapsed:?}");
    }
    // The redirections were followed, not taken as answers.
    assert!(
        moved.load(Ordering::Relaxed) > 5,
        "{}",
        moved.load(Ordering::Relaxed)
    );
    task.abort();
}

/// Three replicas' stores on a cluster, 200 reserves at once against a limit that fits 50, for
/// teams whose names hold braces too: exactly 50 fit each time (each counter is one key, its
/// script run in that key's slot).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_reserve_exactly_what_fits_on_a_cluster() {
    let cluster = Cluster::start();
    let ports = ports(&cluster);
    let replicas = [
        store(&ports, Duration::from_secs(2)),
        store(&ports[1..], Duration::from_secs(2)),
        store(&ports[2..], Duration::from_secs(2)),
    ];
    for team in ["payments", "{search}", "a}{b"] {
        let counted = super::redis::spend::two_hundred_reserves(&replicas, team).await;
        assert_eq!(counted, (50, 1000), "{team}");
    }
}
