//! What the ledger records of one answer (docs/ledger.md). The record of each output item, and the
//! digest it carries, are the gate's facts ([`crate::gate::provenance`]), named here too.

pub use crate::gate::provenance::{
    item_digest, item_record, item_record_from_value, link_reasoning, ItemRecord,
};

/// What the ledger keeps of one response the provider completed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseRecord {
    /// The response `id`.
    pub id: String,
    /// The `model` the provider answered with, when it named one.
    pub model: Option<String>,
    /// The output items, in output order.
    pub items: Vec<ItemRecord>,
}
