//! replaygate: a reverse proxy that gates replayed Open Responses items per target provider.
#![forbid(unsafe_code)]

pub mod config;
pub mod routing;
