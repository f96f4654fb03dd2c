//! replaygate: a reverse proxy that gates replayed Open Responses items per target provider.
//!
//! # Layout
//!
//! - [`gate`]: the pure judge of request bodies (no I/O, no async), shared by the proxy and the
//!   `check` command.
//! - [`config`]: `proxy.toml`, parsed strictly and checked.
//! - `routing`: which provider a request goes to, and whether it is gated.
//! - [`proxy`]: the hyper server and the request lifecycle (route, read body, gate, forward,
//!   answer).
//! - `error`: the one error type of the request path and its OpenAI error envelope.
//! - [`keys`]: client keys of teams and their digests.
//! - `spend`: what budgets count in: the UTC calendar windows, model prices, a request's
//!   estimate.
//! - [`ledger`]: the provenance ledger's tap: what a provider's answer produced (pure).
//! - [`metrics`] and [`admin`]: the Prometheus metrics and the admin listener that serves them
//!   with health and readiness.
//! - [`tls`]: the listener's own TLS (certificates, client certificates, reloads).
//! - [`cli`], [`check`], [`commands`], [`telemetry`]: the command line, `replaygate check`,
//!   `replaygate config check` and `keys new`, and logging.
#![forbid(unsafe_code)]
// A connection's future over TLS (hyper's connection over the client IO over rustls's stream)
// nests deeper than the compiler's default limit of 128 when its layout is computed.
#![recursion_limit = "256"]
#![warn(missing_docs, rust_2018_idioms, unreachable_pub)]

pub mod admin;
pub mod check;
pub mod cli;
pub mod commands;
pub use replaygate_core::{gate, json, ledger, usage};
pub mod config;
pub(crate) mod error;
pub mod keys;
pub mod metrics;
pub mod proxy;
pub mod reload;
pub(crate) mod routing;
pub(crate) mod spend;
pub mod state;
pub mod telemetry;
/// Certificates made per run, for the TLS tests of the `redis` backend and of `[state]`.
#[cfg(test)]
// Shared with the integration tests, whose crate sets its visibility.
#[allow(unreachable_pub)]
#[path = "../tests/support/pki.rs"]
pub(crate) mod test_pki;
pub mod tls;
