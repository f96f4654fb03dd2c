//! replaygate: a reverse proxy that gates replayed Open Responses items per target provider.
//!
//! # Layout
//!
//! - [`gate`]: the pure judge of request bodies (no I/O, no async), shared by the proxy and the
//!   `check` command.
#![forbid(unsafe_code)]
#![warn(missing_docs, rust_2018_idioms)]

pub mod gate;
