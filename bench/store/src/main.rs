//! What one ledger record costs to keep on disk, for three kinds of store, in the proxy's own
//! pattern: each record a ~750-byte response row under a random id, three item ids and one
//! digest that lead to it, one time-ordered expiry row; written in batches of 32, made durable
//! every 500 ms (as the embedded store does).
//!
//!     taskset -c 1 cargo run --release --manifest-path bench/store/Cargo.toml -- [RECORDS] [STORE...]
//!
//! STORE: `redb-keyed` (the embedded store's layout 2), `redb` (the same with each id's text as
//! its key, as an earlier draft of layout 2 had it), `redb-timed` (layout 2 with the responses
//! in time order, a small index from id to time), `fjall` (the same rows in an LSM tree,
//! one worker thread, its maintenance counted), `fjall-timed` (`redb-timed`'s layout in an LSM
//! tree: responses appended in time order, 16-byte index rows), `log` (the records appended to one file, no
//! index: the floor). Prints the process's CPU time (every thread, from /proc) and wall time
//! per record, and the size on disk. Run it on one CPU, as the proxy shares one with its
//! upstream in the load benchmark. Files go to a temporary directory, removed at the end.
//! `CACHE_MIB` sets the engines' caches (default 64, the embedded store's), `BATCH` the records
//! a transaction (default 32).

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

/// How many records go into one write transaction or batch, unless `BATCH` says otherwise.
const BATCH: usize = 32;

/// `BATCH` from the environment, else [`BATCH`].
fn batch_size() -> usize {
    std::env::var("BATCH").map_or(BATCH, |n| n.parse().expect("BATCH: a number"))
}
/// How often the stores are made durable (an fsync).
const DURABLE_EVERY: Duration = Duration::from_millis(500);

/// One record as the store receives it.
struct Record {
    id: String,
    item_ids: [String; 3],
    digest: [u8; 32],
    expires: u64,
    json: Vec<u8>,
}

/// `count` records with ids shaped like the load benchmark upstream's (a random 32-digit tag).
fn records(count: usize) -> Vec<Record> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut hex = |n: usize| -> String { (0..n).map(|_| format!("{:x}", rng.gen::<u8>() & 15)).collect() };
    (0..count)
        .map(|n| {
            let tag = hex(32);
            let id = format!("resp_{tag}1b9e0c8190a4c3f0d7e5b21a6f0c4d1e2f3a4b5c6d");
            let item_ids = [
                format!("rs_{tag}1c1a8c81909b7e2d4f6a8c0e1f"),
                format!("fc_{tag}1d4b7c8190a1b2c3d4e5f60718"),
                format!("msg_{tag}1e7d9c8190b2c3d4e5f6071829"),
            ];
            let expires = 1_767_542_000 + (n / 9000) as u64;
            let items: Vec<String> = item_ids
                .iter()
                .enumerate()
                .map(|(k, item)| {
                    format!(
                        r#"{{"id":"{item}","type":"t{k}","call_id":"call_{}","digest":"{}","has_encrypted_content":{}}}"#,
                        hex(24),
                        hex(64),
                        k == 0
                    )
                })
                .collect();
            let json = format!(
                r#"{{"id":"{id}","owner":{{"provider":"openai","model":"gpt-5-2025-08-07"}},"team":null,"created_unix":{},"expires_unix":{expires},"previous_response_id":null,"items":[{}],"content":null}}"#,
                expires - 2_592_000,
                items.join(",")
            );
            // As random as a digest, for where it falls in the index.
            let mut digest = [0; 32];
            digest.copy_from_slice(tag.as_bytes());
            Record { id, item_ids, digest, expires, json: json.into_bytes() }
        })
        .collect()
}

/// Each engine's cache: `CACHE_MIB` MiB (default 64, the embedded store's).
fn cache_bytes() -> usize {
    std::env::var("CACHE_MIB").map_or(64, |mib| mib.parse().expect("CACHE_MIB: a number")) << 20
}

/// The process's CPU time so far, every thread (user + system, from /proc).
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // The kernel's USER_HZ is 100 on Linux.
    Duration::from_millis(ticks * 10)
}

/// Writes `records` to a redb file in `dir` with `write`, a batch a transaction, durable every
/// [`DURABLE_EVERY`] (as the embedded store's writer does); the file's size.
fn write_batches(records: &[Record], dir: &Path, write: impl Fn(&redb::WriteTransaction, &[Record])) -> u64 {
    use redb::{Database, Durability};
    let path = dir.join("ledger.redb");
    let db = Database::builder()
        .set_cache_size(cache_bytes())
        .create(&path)
        .unwrap();
    let mut durable_at = Instant::now() + DURABLE_EVERY;
    for batch in records.chunks(batch_size()) {
        let mut txn = db.begin_write().unwrap();
        let durable = Instant::now() >= durable_at;
        if durable {
            durable_at = Instant::now() + DURABLE_EVERY;
        }
        let durability = if durable {
            Durability::Immediate
        } else {
            Durability::None
        };
        txn.set_durability(durability).unwrap();
        txn.set_quick_repair(true);
        write(&txn, batch);
        txn.commit().unwrap();
    }
    drop(db);
    std::fs::metadata(&path).unwrap().len()
}

/// Layout 2 with each id's text as its key.
fn redb(records: &[Record], dir: &Path) -> u64 {
    use redb::TableDefinition;
    const RESPONSES: TableDefinition<&str, (u64, &[u8])> = TableDefinition::new("responses_v2");
    const ITEM_IDS: TableDefinition<&str, &str> = TableDefinition::new("item_ids_v2");
    const ITEM_DIGESTS: TableDefinition<&[u8; 32], &str> = TableDefinition::new("item_digests_v2");
    const EXPIRY: TableDefinition<(u64, &str), ()> = TableDefinition::new("expiry_v2");
    write_batches(records, dir, |txn, batch| {
        let mut responses = txn.open_table(RESPONSES).unwrap();
        let mut item_ids = txn.open_table(ITEM_IDS).unwrap();
        let mut digests = txn.open_table(ITEM_DIGESTS).unwrap();
        let mut expiry = txn.open_table(EXPIRY).unwrap();
        for record in batch {
            let id = record.id.as_str();
            responses
                .insert(id, (record.expires, record.json.as_slice()))
                .unwrap();
            expiry.insert((record.expires, id), ()).unwrap();
            for item in &record.item_ids {
                item_ids.insert(item.as_str(), id).unwrap();
            }
            digests.insert(&record.digest, id).unwrap();
        }
    })
}

/// A 16-byte key for a text, as the embedded store makes it (XXH3-128 seeded with the kind).
fn key16(kind: u8, text: &[u8]) -> [u8; 16] {
    xxhash_rust::xxh3::xxh3_128_with_seed(text, u64::from(kind)).to_le_bytes()
}

/// Layout 2 as the embedded store writes it: every id a 16-byte key.
fn redb_keyed(records: &[Record], dir: &Path) -> u64 {
    use redb::TableDefinition;
    const RESPONSES: TableDefinition<&[u8; 16], (u64, &[u8])> = TableDefinition::new("responses");
    const ITEM_IDS: TableDefinition<&[u8; 16], &[u8; 16]> = TableDefinition::new("item_ids");
    const ITEM_DIGESTS: TableDefinition<&[u8; 32], &[u8; 16]> = TableDefinition::new("item_digests");
    const EXPIRY: TableDefinition<(u64, &[u8; 16]), ()> = TableDefinition::new("expiry");
    write_batches(records, dir, |txn, batch| {
        let mut responses = txn.open_table(RESPONSES).unwrap();
        let mut item_ids = txn.open_table(ITEM_IDS).unwrap();
        let mut digests = txn.open_table(ITEM_DIGESTS).unwrap();
        let mut expiry = txn.open_table(EXPIRY).unwrap();
        for record in batch {
            let id = key16(0, record.id.as_bytes());
            responses
                .insert(&id, (record.expires, record.json.as_slice()))
                .unwrap();
            expiry.insert((record.expires, &id), ()).unwrap();
            for item in &record.item_ids {
                item_ids.insert(&key16(1, item.as_bytes()), &id).unwrap();
            }
            digests.insert(&record.digest, &id).unwrap();
        }
    })
}

/// Layout 2 with the responses kept in time order: keyed by `(expires_unix, key)`, so each
/// batch appends to the tree's right edge, with a small index from a response's key to its
/// expiry (and no expiry table: the sweep reads the responses in order).
fn redb_timed(records: &[Record], dir: &Path) -> u64 {
    use redb::TableDefinition;
    const RESPONSES: TableDefinition<(u64, &[u8; 16]), &[u8]> = TableDefinition::new("responses");
    const RESPONSE_IDS: TableDefinition<&[u8; 16], u64> = TableDefinition::new("response_ids");
    const ITEM_IDS: TableDefinition<&[u8; 16], &[u8; 16]> = TableDefinition::new("item_ids");
    const ITEM_DIGESTS: TableDefinition<&[u8; 32], &[u8; 16]> = TableDefinition::new("item_digests");
    write_batches(records, dir, |txn, batch| {
        let mut responses = txn.open_table(RESPONSES).unwrap();
        let mut response_ids = txn.open_table(RESPONSE_IDS).unwrap();
        let mut item_ids = txn.open_table(ITEM_IDS).unwrap();
        let mut digests = txn.open_table(ITEM_DIGESTS).unwrap();
        for record in batch {
            let id = key16(0, record.id.as_bytes());
            responses
                .insert((record.expires, &id), record.json.as_slice())
                .unwrap();
            response_ids.insert(&id, record.expires).unwrap();
            for item in &record.item_ids {
                item_ids.insert(&key16(1, item.as_bytes()), &id).unwrap();
            }
            digests.insert(&record.digest, &id).unwrap();
        }
    })
}

/// Writes `records` into an LSM tree in `dir` with keyspaces `names`, `put` adding one record
/// to a batch (the keyspaces in the order named), each batch committed and the tree made
/// durable every [`DURABLE_EVERY`]; then waits for its flushes and compactions (part of the
/// cost; at most a minute). Returns its size on disk.
fn fjall_write(
    records: &[Record],
    dir: &Path,
    names: &[&str],
    put: impl Fn(&mut fjall::OwnedWriteBatch, &[fjall::Keyspace], &Record),
) -> u64 {
    use fjall::{KeyspaceCreateOptions, PersistMode};
    let db = fjall::Database::builder(dir.join("fjall"))
        .worker_threads(1)
        .cache_size(cache_bytes() as u64)
        .open()
        .unwrap();
    let keyspaces: Vec<fjall::Keyspace> = names
        .iter()
        .map(|name| db.keyspace(name, KeyspaceCreateOptions::default).unwrap())
        .collect();
    let mut durable_at = Instant::now() + DURABLE_EVERY;
    for chunk in records.chunks(batch_size()) {
        let mut batch = db.batch();
        for record in chunk {
            put(&mut batch, &keyspaces, record);
        }
        batch.commit().unwrap();
        if Instant::now() >= durable_at {
            durable_at = Instant::now() + DURABLE_EVERY;
            db.persist(PersistMode::SyncData).unwrap();
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while (db.outstanding_flushes() > 0 || db.active_compactions() > 0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    db.disk_space().unwrap()
}

/// The same rows in an LSM tree.
fn fjall(records: &[Record], dir: &Path) -> u64 {
    let names = ["responses", "item_ids", "item_digests", "expiry"];
    fjall_write(records, dir, &names, |batch, keyspaces, record| {
        let [responses, item_ids, digests, expiry] = keyspaces else {
            unreachable!("four keyspaces")
        };
        let id = record.id.as_bytes();
        let mut row = record.expires.to_be_bytes().to_vec();
        row.extend_from_slice(&record.json);
        batch.insert(responses, id, row);
        let mut due = record.expires.to_be_bytes().to_vec();
        due.extend_from_slice(id);
        batch.insert(expiry, due, b"");
        for item in &record.item_ids {
            batch.insert(item_ids, item.as_bytes(), id);
        }
        batch.insert(digests, &record.digest[..], id);
    })
}

/// Layout 2 in an LSM tree: the responses keyed by `(expires, key)`, so each batch appends
/// to what the tree holds and compactions move whole tables instead of merging, and 16-byte
/// index rows (id to time, item id and digest to the response's key).
fn fjall_timed(records: &[Record], dir: &Path) -> u64 {
    let names = ["responses", "response_ids", "item_ids", "item_digests"];
    fjall_write(records, dir, &names, |batch, keyspaces, record| {
        let [responses, response_ids, item_ids, digests] = keyspaces else {
            unreachable!("four keyspaces")
        };
        let id = key16(0, record.id.as_bytes());
        let mut at = record.expires.to_be_bytes().to_vec();
        at.extend_from_slice(&id);
        batch.insert(responses, at, record.json.as_slice());
        batch.insert(response_ids, id, record.expires.to_be_bytes());
        for item in &record.item_ids {
            batch.insert(item_ids, key16(1, item.as_bytes()), id);
        }
        batch.insert(digests, key16(2, &record.digest), id);
    })
}

/// The records appended to one file, nothing indexed.
fn log(records: &[Record], dir: &Path) -> u64 {
    let path = dir.join("ledger.log");
    let mut file = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&path).unwrap());
    let mut durable_at = Instant::now() + DURABLE_EVERY;
    for record in records {
        file.write_all(&(record.json.len() as u32).to_le_bytes()).unwrap();
        file.write_all(&record.json).unwrap();
        if Instant::now() >= durable_at {
            durable_at = Instant::now() + DURABLE_EVERY;
            file.flush().unwrap();
            file.get_ref().sync_data().unwrap();
        }
    }
    file.flush().unwrap();
    file.get_ref().sync_data().unwrap();
    std::fs::metadata(&path).unwrap().len()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let count: usize = args
        .next()
        .map_or(300_000, |n| n.parse().expect("RECORDS: a number"));
    let mut stores: Vec<String> = args.collect();
    if stores.is_empty() {
        stores = ["redb-keyed", "redb", "redb-timed", "fjall", "fjall-timed", "log"]
            .map(String::from)
            .to_vec();
    }
    let records = records(count);
    for store in &stores {
        let dir = std::env::temp_dir().join(format!("store-cost-{}-{store}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cpu_start, start) = (cpu(), Instant::now());
        let bytes = match store.as_str() {
            "redb" => redb(&records, &dir),
            "redb-keyed" => redb_keyed(&records, &dir),
            "redb-timed" => redb_timed(&records, &dir),
            "fjall" => fjall(&records, &dir),
            "fjall-timed" => fjall_timed(&records, &dir),
            "log" => log(&records, &dir),
            other => panic!("unknown store {other} (redb-keyed, redb, redb-timed, fjall, fjall-timed, log)"),
        };
        let per = |d: Duration| d.as_secs_f64() * 1e6 / count as f64;
        println!(
            "{store:>5}: {count} records, CPU {:.2} µs a record, wall {:.2} µs, on disk {} bytes a record",
            per(cpu() - cpu_start),
            per(start.elapsed()),
            bytes / count as u64
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
