//! Records the backends' unit tests store.

use crate::ledger::{ItemRecord, Owner, ResponseRecord, StoredResponse};

/// Response `id` of `openai`, holding one reasoning item `item_id` with encrypted content
/// (its digest all sevens), expiring at `expires_unix`.
pub(crate) fn one_reasoning_item(id: &str, item_id: &str, expires_unix: u64) -> StoredResponse {
    let item = ItemRecord {
        id: Some(item_id.to_owned()),
        item_type: "reasoning".into(),
        call_id: None,
        digest: [7; 32],
        has_encrypted_content: true,
        preceded_by: None,
    };
    let record = ResponseRecord {
        id: id.to_owned(),
        model: Some("m".into()),
        items: vec![item],
    };
    let owner = Owner {
        provider: "openai".into(),
        model: Some("m".into()),
    };
    let mut stored = StoredResponse::new(record, owner, None, None, 0, 60);
    stored.expires_unix = expires_unix;
    stored
}

/// Response `id` of `openai`, holding a reasoning item with encrypted content for each
/// `(item id, digest byte)` (its digest all that byte), expiring in ten minutes.
pub(crate) fn reasoning_items(id: &str, items: &[(&str, u8)]) -> StoredResponse {
    let items = items
        .iter()
        .map(|(item_id, digest)| ItemRecord {
            id: Some((*item_id).to_owned()),
            item_type: "reasoning".into(),
            call_id: None,
            digest: [*digest; 32],
            has_encrypted_content: true,
            preceded_by: None,
        })
        .collect();
    let record = ResponseRecord {
        id: id.to_owned(),
        model: Some("m".into()),
        items,
    };
    let owner = Owner {
        provider: "openai".into(),
        model: Some("m".into()),
    };
    StoredResponse::new(
        record,
        owner,
        Some("payments".into()),
        None,
        super::now_unix(),
        600,
    )
}
