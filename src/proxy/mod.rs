//! The proxy: a hyper server whose every request goes through [`lifecycle`]: route the path,
//! read the body, choose the provider and gate, forward, answer.

pub mod answer_headers;
pub mod audit;
pub mod body;
pub mod budget;
pub mod build_error;
mod client_io;
mod connection;
mod earlier_turns;
pub mod exchange;
pub mod headers;
mod judge;
pub mod ledger;
pub mod lifecycle;
mod objects;
mod phases;
pub mod provider;
pub mod rate_limit;
pub mod request_checks;
pub mod server;
pub mod sigv4;
#[cfg(feature = "aws-chain")]
mod sigv4_chain;
pub mod snapshot;
pub mod sockets;
pub mod state;
pub mod teams;
pub mod upstream;
pub mod upstream_client;
pub mod websocket;
pub mod workers;

pub use server::{run, ServerSettings};
pub use state::ProxyState;
pub use workers::{run_workers, worker_runtime};
