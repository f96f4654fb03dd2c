//! Moves a `ledger.redb` of an earlier replaygate into the tree, then deletes it.
//!
//! Earlier releases kept the ledger in one redb file, in one of two layouts: version 1 (each
//! response under its id's text, each indexed item a full copy) and version 2 (responses keyed
//! by `(expires_unix, key of the id)`, 16-byte index rows). Both hold each response's JSON, which
//! is all the tree needs: the open writes each live one again through [`Tables::put`], a batch
//! at a time, writes the tree to disk and deletes the file. An interrupted move leaves the file,
//! and the next open moves it again whole (a record written twice is written once).

use std::path::Path;

use redb::{Database, ReadTransaction, ReadableDatabase, TableDefinition, TableHandle};

use super::tables::Store;
use super::tables::Tables;
use super::unavailable;
use crate::ledger::StoredResponse;
use crate::state::StoreError;

/// A version 1 entry: its `expires_unix` and its JSON.
type Entry = (u64, &'static [u8]);

const RESPONSES_V1: TableDefinition<'_, &str, Entry> = TableDefinition::new("responses_v1");
const RESPONSES_V2: TableDefinition<'_, (u64, &[u8; 16]), &[u8]> = TableDefinition::new("responses_v2");

/// What a move found: responses written anew, and those left behind (expired or unreadable).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Moved {
    pub responses: usize,
    pub dropped: usize,
}

/// Moves the responses of the redb file at `path` live at `now` into `store`, `batch` records
/// a write, then deletes the file; `None` if there is no file.
pub(super) fn from_redb(
    path: &Path,
    store: &Store,
    now: u64,
    batch: usize,
) -> Result<Option<Moved>, StoreError> {
    if !path.exists() {
        return Ok(None);
    }
    tracing::info!(file = %path.display(), "moving ledger.redb into the ledger's tree");
    let moved = copy(path, store, now, batch)?;
    store
        .db
        .persist(fjall::PersistMode::SyncAll)
        .map_err(unavailable("write to disk"))?;
    std::fs::remove_file(path).map_err(unavailable("delete ledger.redb"))?;
    Ok(Some(moved))
}

/// Writes the file's live responses into `store`, `batch` a write.
fn copy(path: &Path, store: &Store, now: u64, batch: usize) -> Result<Moved, StoreError> {
    let db = Database::open(path)
        .map_err(|e| StoreError::Unavailable(format!("cannot open {}: {e}", path.display())))?;
    let txn = db.begin_read().map_err(unavailable("read transaction"))?;
    let mut moved = Moved::default();
    let mut rows = Vec::with_capacity(batch);
    let flush = |rows: &mut Vec<(u64, Vec<u8>)>, moved: &mut Moved| -> Result<(), StoreError> {
        let mut tables = Tables::new(&store.keyspaces);
        for (expires, json) in rows.drain(..) {
            match serde_json::from_slice::<StoredResponse>(&json) {
                Ok(response) if now < expires => {
                    tables.put(&response, &json, false)?;
                    moved.responses += 1;
                }
                _ => moved.dropped += 1,
            }
        }
        tables.commit(&store.db)
    };
    for row in responses(&txn)? {
        rows.push(row?);
        if rows.len() == batch {
            flush(&mut rows, &mut moved)?;
        }
    }
    flush(&mut rows, &mut moved)?;
    Ok(moved)
}

/// A response row of either layout: its `expires_unix` and its JSON.
type Row = Result<(u64, Vec<u8>), StoreError>;

/// Each response row of either layout in `txn`.
fn responses(txn: &ReadTransaction) -> Result<Box<dyn Iterator<Item = Row> + '_>, StoreError> {
    let names: Vec<String> = txn
        .list_tables()
        .map_err(unavailable("list tables"))?
        .map(|table| table.name().to_owned())
        .collect();
    let has = |name: &str| names.iter().any(|table| table == name);
    let mut all: Box<dyn Iterator<Item = _>> = Box::new(std::iter::empty());
    if has(RESPONSES_V1.name()) {
        let table = txn
            .open_table(RESPONSES_V1)
            .map_err(unavailable("responses table v1"))?;
        let rows = table
            .range::<&str>(..)
            .map_err(unavailable("responses table v1"))?;
        all = Box::new(all.chain(rows.map(|row| {
            let (_, entry) = row.map_err(unavailable("responses table v1"))?;
            let (expires, json) = entry.value();
            Ok((expires, json.to_vec()))
        })));
    }
    if has(RESPONSES_V2.name()) {
        let table = txn
            .open_table(RESPONSES_V2)
            .map_err(unavailable("responses table v2"))?;
        let rows = table
            .range::<(u64, &[u8; 16])>(..)
            .map_err(unavailable("responses table v2"))?;
        all = Box::new(all.chain(rows.map(|row| {
            let (at, json) = row.map_err(unavailable("responses table v2"))?;
            Ok((at.value().0, json.value().to_vec()))
        })));
    }
    Ok(all)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::state::embedded::tables::{response_key, Keyspaces};

    const ITEMS_BY_ID_V1: TableDefinition<'_, &str, Entry> = TableDefinition::new("items_by_id_v1");
    const ITEMS_BY_DIGEST_V1: TableDefinition<'_, &[u8; 32], Entry> =
        TableDefinition::new("items_by_digest_v1");
    const EXPIRY_V1: TableDefinition<'_, (u64, u8, &[u8]), ()> = TableDefinition::new("expiry_v1");

    /// Writes `responses` as layout 1 did (each indexed item a full copy, an expiry row for
    /// every entry) into `db`.
    pub fn write_v1(db: &Database, responses: &[StoredResponse]) {
        let txn = db.begin_write().unwrap();
        {
            let mut by_response = txn.open_table(RESPONSES_V1).unwrap();
            let mut by_id = txn.open_table(ITEMS_BY_ID_V1).unwrap();
            let mut by_digest = txn.open_table(ITEMS_BY_DIGEST_V1).unwrap();
            let mut expiry = txn.open_table(EXPIRY_V1).unwrap();
            for response in responses {
                let expires = response.expires_unix;
                let json = response.to_json();
                by_response
                    .insert(response.id.as_str(), (expires, json.as_slice()))
                    .unwrap();
                expiry.insert((expires, 0, response.id.as_bytes()), ()).unwrap();
                for (id, item) in response.by_id() {
                    by_id.insert(id, (expires, item.to_json().as_slice())).unwrap();
                    expiry.insert((expires, 1, id.as_bytes()), ()).unwrap();
                }
                for (digest, item) in response.by_digest() {
                    by_digest
                        .insert(&digest, (expires, item.to_json().as_slice()))
                        .unwrap();
                    expiry.insert((expires, 2, &digest[..]), ()).unwrap();
                }
            }
        }
        txn.commit().unwrap();
    }

    /// Writes `responses` as layout 2 did (each under its expiry and key; its index rows are
    /// not needed to move it) into `db`.
    pub fn write_v2(db: &Database, responses: &[StoredResponse]) {
        let txn = db.begin_write().unwrap();
        {
            let mut rows = txn.open_table(RESPONSES_V2).unwrap();
            for response in responses {
                let key = response_key(&response.id).0;
                rows.insert((response.expires_unix, &key), response.to_json().as_slice())
                    .unwrap();
            }
        }
        txn.commit().unwrap();
    }

    fn response(n: u64, expires: u64) -> StoredResponse {
        let mut response = crate::state::embedded::tests::response(&format!("resp_{n}"), 1, 60);
        response.expires_unix = expires;
        response
    }

    fn tree(dir: &Path) -> Store {
        let db = fjall::Database::builder(dir.join("tree")).open().unwrap();
        let keyspaces = Keyspaces::open(&db).unwrap();
        Store {
            db,
            keyspaces,
            floor: Default::default(),
        }
    }

    #[test]
    fn both_layouts_move_in_batches_and_the_file_goes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.redb");
        let now = crate::state::now_unix();
        {
            let db = Database::create(&path).unwrap();
            write_v1(
                &db,
                &[response(1, now + 60), response(2, now + 60), response(9, now - 1)],
            );
            write_v2(&db, &[response(3, now + 60), response(8, now)]);
        }
        let store = tree(dir.path());
        let moved = from_redb(&path, &store, now, 2).unwrap().unwrap();
        assert_eq!(
            moved,
            Moved {
                responses: 3,
                dropped: 2
            }
        );
        assert!(!path.exists());
        assert_eq!(store.keyspaces.responses.len().unwrap(), 3);
        assert_eq!(store.keyspaces.response_ids.len().unwrap(), 3);
        // Two items by id and one by digest each (the digest is the same for all three).
        assert_eq!(store.keyspaces.item_ids.len().unwrap(), 6);
        assert_eq!(store.keyspaces.item_digests.len().unwrap(), 1);
        assert_eq!(from_redb(&path, &store, now, 2).unwrap(), None);
    }

    #[test]
    fn an_interrupted_move_is_made_again_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.redb");
        let now = crate::state::now_unix();
        let live: Vec<StoredResponse> = (0..5).map(|n| response(n, now + 60)).collect();
        write_v2(&Database::create(&path).unwrap(), &live);
        let store = tree(dir.path());
        // Moved, but stopped before the file was deleted.
        assert_eq!(copy(&path, &store, now, 2).unwrap().responses, 5);
        assert!(path.exists());
        let moved = from_redb(&path, &store, now, 2).unwrap().unwrap();
        assert_eq!(moved.responses, 5);
        assert_eq!(store.keyspaces.responses.len().unwrap(), 5);
        assert_eq!(store.keyspaces.response_ids.len().unwrap(), 5);
    }

    /// How long a large layout 2 file takes to move.
    #[test]
    #[ignore = "a measurement; run with --release --ignored --nocapture"]
    fn measure_a_move() {
        const RECORDS: usize = 200_000;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.redb");
        let now = crate::state::now_unix();
        let records: Vec<StoredResponse> = (0..RECORDS)
            .map(|n| {
                let tag = crate::state::key_filter::StoreKey::of(9, &n.to_le_bytes()).0;
                let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
                crate::state::embedded::tests::response(&format!("resp_{hex}"), n as u8, 600)
            })
            .collect();
        {
            let db = Database::create(&path).unwrap();
            records.chunks(1000).for_each(|chunk| write_v2(&db, chunk));
        }
        let store = tree(dir.path());
        let start = std::time::Instant::now();
        let moved = from_redb(&path, &store, now, 10_000).unwrap().unwrap();
        let took = start.elapsed();
        assert_eq!(moved.responses, RECORDS);
        println!(
            "{RECORDS} records of two items moved in {took:?} ({:?} a record)",
            took / RECORDS as u32
        );
    }
}
