//! The proxy: a hyper server whose every request goes through [`lifecycle`]: route the path,
//! read the body, choose the provider and gate, forward, answer.

pub(crate) mod answer_headers;
pub(crate) mod audit;
pub mod body;
pub mod buffer_budget;
pub(crate) mod build_error;
mod client_io;
mod connection;
mod earlier_turns;
pub(crate) mod exchange;
pub(crate) mod headers;
mod judge;
mod judged_prefixes;
pub(crate) mod ledger;
pub mod lifecycle;
mod objects;
mod peer_certificate;
mod peer_names;
mod phases;
pub(crate) mod provider;
pub(crate) mod rate_limit;
pub(crate) mod request_checks;
pub(crate) mod server;
pub mod sigv4;
#[cfg(feature = "aws-chain")]
mod sigv4_chain;
pub(crate) mod snapshot;
pub(crate) mod sockets;
mod spend;
pub mod state;
pub mod teams;
pub(crate) mod upstream;
pub(crate) mod upstream_client;
pub(crate) mod usage;
pub mod websocket;
pub(crate) mod workers;

pub use crate::spend::SpendClock;
pub use peer_names::present_client_certificate;
pub use server::{run, ServerSettings};
pub use state::ProxyState;
pub use workers::{run_workers, worker_runtime};
