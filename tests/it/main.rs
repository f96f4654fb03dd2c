//! The integration tests added since the suite grew: one binary, so 2 cores link it once.

#[path = "../support/mod.rs"]
mod support;

mod admin;
mod item_profiles;
mod item_profiles_cli;
mod item_profiles_sdk;
mod ledger;
mod serve_reload;
mod sigv4;
mod teams;
mod teams_reload;
mod telemetry;
mod tls_upstream;
mod websocket;
