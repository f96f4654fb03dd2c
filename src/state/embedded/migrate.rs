//! Moves a file written in the first layout (version 1) to version 2.
//!
//! Version 1 kept each response under its id's text, and each indexed item as a full copy with
//! an expiry row of its own. Its responses hold everything version 2 needs: the open writes each
//! live one again in the new layout, a batch a transaction, then drops the four old tables.

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, TableHandle, WriteTransaction};

use super::tables::Tables;
use super::unavailable;
use crate::ledger::StoredResponse;
use crate::state::StoreError;

/// A version 1 entry: its `expires_unix` and its JSON.
type Entry = (u64, &'static [u8]);

const RESPONSES_V1: TableDefinition<'_, &str, Entry> = TableDefinition::new("responses_v1");
const ITEMS_BY_ID_V1: TableDefinition<'_, &str, Entry> = TableDefinition::new("items_by_id_v1");
const ITEMS_BY_DIGEST_V1: TableDefinition<'_, &[u8; 32], Entry> = TableDefinition::new("items_by_digest_v1");
const EXPIRY_V1: TableDefinition<'_, (u64, u8, &[u8]), ()> = TableDefinition::new("expiry_v1");

/// What a move found: responses written anew, and those left behind (expired or unreadable).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Moved {
    pub responses: usize,
    pub dropped: usize,
}

/// Moves version 1's records into the tables of version 2 and drops version 1's tables, if the
/// file has them: `batch` records a transaction, each removed from version 1 in the transaction
/// that writes it anew, so an interrupted move goes on where it stopped at the next open.
pub(super) fn from_v1(db: &Database, now: u64, batch: usize) -> Result<Option<Moved>, StoreError> {
    let has_v1 = db
        .begin_read()
        .map_err(unavailable("read transaction"))?
        .list_tables()
        .map_err(unavailable("list tables"))?
        .any(|table| table.name() == RESPONSES_V1.name());
    if !has_v1 {
        return Ok(None);
    }
    tracing::info!("moving the ledger file to layout version 2");
    let mut moved = Moved::default();
    loop {
        let txn = db.begin_write().map_err(unavailable("write transaction"))?;
        let done = move_some(&txn, now, batch, &mut moved)?;
        if done {
            txn.delete_table(RESPONSES_V1)
                .map_err(unavailable("drop table v1"))?;
            txn.delete_table(ITEMS_BY_ID_V1)
                .map_err(unavailable("drop table v1"))?;
            txn.delete_table(ITEMS_BY_DIGEST_V1)
                .map_err(unavailable("drop table v1"))?;
            txn.delete_table(EXPIRY_V1)
                .map_err(unavailable("drop table v1"))?;
        }
        txn.commit().map_err(unavailable("commit"))?;
        if done {
            return Ok(Some(moved));
        }
    }
}

/// Moves up to `batch` of version 1's responses in `txn`; whether none are left.
fn move_some(txn: &WriteTransaction, now: u64, batch: usize, moved: &mut Moved) -> Result<bool, StoreError> {
    let mut tables = Tables::open(txn)?;
    let mut old = txn
        .open_table(RESPONSES_V1)
        .map_err(unavailable("responses table v1"))?;
    let rows = old
        .iter()
        .map_err(unavailable("responses table v1"))?
        .take(batch)
        .map(|row| {
            let (id, entry) = row.map_err(unavailable("responses table v1"))?;
            let (expires, json) = entry.value();
            Ok((id.value().to_owned(), expires, json.to_vec()))
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    for (id, expires, json) in &rows {
        match serde_json::from_slice::<StoredResponse>(json) {
            Ok(response) if now < *expires => {
                tables.put(&response, json)?;
                moved.responses += 1;
            }
            _ => moved.dropped += 1,
        }
        old.remove(id.as_str())
            .map_err(unavailable("responses table v1"))?;
    }
    Ok(rows.len() < batch)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Writes `responses` as version 1 did (each indexed item a full copy, an expiry row for
    /// every entry) into `db`.
    pub fn write_v1(db: &redb::Database, responses: &[StoredResponse]) {
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

    #[test]
    fn a_move_goes_a_batch_a_transaction_and_an_interrupted_one_resumes() {
        use crate::state::embedded::tables::{RESPONSES, RESPONSE_IDS};
        use redb::ReadableTableMetadata;
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(dir.path().join("ledger.redb")).unwrap();
        let now = crate::state::now_unix();
        let response = |n: u64, expires: u64| {
            let mut response = crate::state::embedded::tests::response(&format!("resp_{n}"), 1, 60);
            response.expires_unix = expires;
            response
        };
        let live: Vec<StoredResponse> = (0..4).map(|n| response(n, now + 60)).collect();
        let mut all = live.clone();
        all.push(response(9, now - 1));
        write_v1(&db, &all);
        // A move stopped after its first batch.
        let mut first = Moved::default();
        let txn = db.begin_write().unwrap();
        assert!(!move_some(&txn, now, 2, &mut first).unwrap());
        txn.commit().unwrap();
        // The next open goes on from there.
        let rest = from_v1(&db, now, 2).unwrap().unwrap();
        assert_eq!(first.responses + rest.responses, 4);
        assert_eq!(first.dropped + rest.dropped, 1);
        let txn = db.begin_read().unwrap();
        assert_eq!(txn.open_table(RESPONSES).unwrap().len().unwrap(), 4);
        assert_eq!(txn.open_table(RESPONSE_IDS).unwrap().len().unwrap(), 4);
        assert!(txn
            .list_tables()
            .unwrap()
            .all(|table| !table.name().ends_with("_v1")));
        assert_eq!(from_v1(&db, now, 2).unwrap(), None);
    }

    /// How long a large first-layout file takes to move.
    #[test]
    #[ignore = "a measurement; run with --release --ignored --nocapture"]
    fn measure_a_move() {
        const RECORDS: usize = 200_000;
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(dir.path().join("ledger.redb")).unwrap();
        let now = crate::state::now_unix();
        let records: Vec<StoredResponse> = (0..RECORDS)
            .map(|n| {
                let tag = crate::state::key_filter::StoreKey::of(9, &n.to_le_bytes()).0;
                let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
                crate::state::embedded::tests::response(&format!("resp_{hex}"), n as u8, 600)
            })
            .collect();
        records.chunks(1000).for_each(|chunk| write_v1(&db, chunk));
        let start = std::time::Instant::now();
        let moved = from_v1(&db, now, 10_000).unwrap().unwrap();
        let took = start.elapsed();
        assert_eq!(moved.responses, RECORDS);
        println!(
            "{RECORDS} records of two items moved in {took:?} ({:?} a record)",
            took / RECORDS as u32
        );
    }
}
