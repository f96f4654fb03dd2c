//! Moves a file written in the first layout (version 1) to version 2.
//!
//! Version 1 kept each response as version 2 does, and each indexed item as a full copy with an
//! expiry row of its own. Its responses hold everything version 2 needs: the open writes each
//! live one again in the new layout, then drops the four old tables, in one transaction (a
//! crash during it leaves the file as it was).

use redb::{ReadableTable, TableDefinition, TableHandle, WriteTransaction};

use super::tables::{Entry, Tables};
use super::unavailable;
use crate::ledger::StoredResponse;
use crate::state::StoreError;

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

/// Moves version 1's records into `tables` and drops its tables, if the file has them.
pub(super) fn from_v1(
    txn: &WriteTransaction,
    tables: &mut Tables<'_>,
    now: u64,
) -> Result<Option<Moved>, StoreError> {
    let has_v1 = txn
        .list_tables()
        .map_err(unavailable("list tables"))?
        .any(|table| table.name() == RESPONSES_V1.name());
    if !has_v1 {
        return Ok(None);
    }
    let mut moved = Moved::default();
    {
        let old = txn
            .open_table(RESPONSES_V1)
            .map_err(unavailable("responses table v1"))?;
        for row in old.iter().map_err(unavailable("responses table v1"))? {
            let (_, entry) = row.map_err(unavailable("responses table v1"))?;
            let (expires, json) = entry.value();
            match serde_json::from_slice::<StoredResponse>(json) {
                Ok(response) if now < expires => {
                    tables.put(&response, json)?;
                    moved.responses += 1;
                }
                _ => moved.dropped += 1,
            }
        }
    }
    txn.delete_table(RESPONSES_V1)
        .map_err(unavailable("drop table v1"))?;
    txn.delete_table(ITEMS_BY_ID_V1)
        .map_err(unavailable("drop table v1"))?;
    txn.delete_table(ITEMS_BY_DIGEST_V1)
        .map_err(unavailable("drop table v1"))?;
    txn.delete_table(EXPIRY_V1)
        .map_err(unavailable("drop table v1"))?;
    Ok(Some(moved))
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
}
