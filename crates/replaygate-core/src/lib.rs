//! replaygate's pure core, kept in its own crate so that Cargo itself keeps it free of I/O:
//! no network, file, async or process dependency can reach it.
//!
//! - [`gate`]: judges the `input` items of one Responses request body for one provider.
//! - [`ledger`]: reads a provider's answer as it streams and says what the provenance ledger
//!   records of it.
//! - [`usage`] (`ledger::usage`): reads what an answer says it cost (its `usage`), with the
//!   ledger's readers, whose stream framing it shares.
//!
//! The `replaygate` crate (the proxy and the command line) re-exports these modules.
#![forbid(unsafe_code)]
#![warn(missing_docs, rust_2018_idioms)]

pub mod gate;
pub mod json;
pub mod ledger;
pub use ledger::usage;
