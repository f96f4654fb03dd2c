//! What one record of a typical answer takes in each lasting backend: bytes of Redis memory
//! (`INFO memory`'s `used_memory` before and after N records) and bytes of the embedded
//! store's disk (its journal and tables, written out and compacted). The figures size the
//! bundled Redis's memory limit and `[state] max_disk_bytes` (docs/benchmarks.md, "What a
//! record takes"). Run with
//! `cargo test --release --lib state::footprint -- --ignored --nocapture`.

use std::time::Duration;

use super::redis::test_server::RedisServer;
use super::{now_unix, EmbeddedStore, RedisStore};
use crate::ledger::{ItemRecord, Owner, ResponseRecord, StoredResponse};

/// A typical answer's record (`store_items = false`): a reasoning item with encrypted content,
/// a function call and a message, ids as OpenAI mints them, a team, and the response it
/// continued; kept 720 hours.
fn typical(n: u64) -> StoredResponse {
    let id = |prefix: &str| format!("{prefix}_68b1c0ffee{n:016x}0123456789abcdef0123456789abcdef01");
    let item = |prefix: &str, item_type: &'static str, call: bool, encrypted: bool, seed: u64| ItemRecord {
        id: Some(id(prefix)),
        item_type: item_type.into(),
        call_id: call.then(|| format!("call_{n:x}Qp7rX2mZ9kLw4tYb")),
        digest: {
            let mut digest = [0u8; 32];
            digest[..8].copy_from_slice(&(n.wrapping_mul(31).wrapping_add(seed)).to_be_bytes());
            digest
        },
        has_encrypted_content: encrypted,
        preceded_by: None,
    };
    let record = ResponseRecord {
        id: id("resp"),
        model: Some("gpt-5-2025-08-07".into()),
        items: vec![
            item("rs", "reasoning", false, true, 1),
            item("fc", "function_call", true, false, 2),
            item("msg", "message", false, false, 3),
        ],
    };
    let owner = Owner {
        provider: "openai".into(),
        model: Some("gpt-5-2025-08-07".into()),
    };
    StoredResponse::new(
        record,
        owner,
        Some("payments".into()),
        Some(id("resp_prev")),
        now_unix(),
        720 * 3600,
    )
}

async fn used_memory(server: &RedisServer) -> u64 {
    let mut conn = ::redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let info: String = ::redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
#[ignore = "a measurement; run with --release --ignored --nocapture"]
async fn measure_bytes_per_record() {
    const REDIS_RECORDS: u64 = 20_000;
    let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"], None);
    let redis = RedisStore::connect(&server.url(), "replaygate", Duration::from_secs(5)).unwrap();
    redis.ping().await.unwrap();
    let before = used_memory(&server).await;
    for n in 0..REDIS_RECORDS {
        redis.put_response(&typical(n)).await.unwrap();
    }
    let after = used_memory(&server).await;
    println!(
        "redis: used_memory {before} -> {after} after {REDIS_RECORDS} records: {} bytes a record (JSON of one: {} bytes)",
        (after - before) / REDIS_RECORDS,
        typical(0).to_json().len()
    );

    const DISK_RECORDS: u64 = 200_000;
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let empty = store.disk_usage().await.unwrap().used_bytes;
    for chunk in 0..DISK_RECORDS / 1000 {
        for n in chunk * 1000..(chunk + 1) * 1000 - 1 {
            store
                .queue_response(
                    typical(n),
                    crate::metrics::LedgerMeter::new(&crate::metrics::Metrics::new()),
                )
                .unwrap();
        }
        store
            .put_response(&typical((chunk + 1) * 1000 - 1))
            .await
            .unwrap();
    }
    let written = store.disk_usage().await.unwrap().used_bytes;
    store.compact_for_measure();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let compacted = store.disk_usage().await.unwrap().used_bytes;
    println!(
        "embedded: {empty} -> {written} bytes on disk after {DISK_RECORDS} records ({} a record, journal included), \
         {compacted} written out and compacted ({} a record)",
        (written - empty) / DISK_RECORDS,
        (compacted - empty) / DISK_RECORDS
    );
}
