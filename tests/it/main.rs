//! The integration tests: one binary, so 2 cores link it once and CI's disk holds one copy of
//! the dependencies. `access_log`, `log_secrets` and `bad_input` stay binaries of their own: the
//! first two install the process's global log subscriber, the third measures the process's memory.

#[path = "../support/mod.rs"]
mod support;

mod admin;
mod agents_sdk;
mod bench_default_config;
mod budgets;
mod buffered_bytes;
mod cli_check;
mod client_certs;
mod client_faults;
mod client_gone;
mod codex_cli;
mod docs;
mod frameworks;
mod gate_actions;
mod gate_props;
mod graceful_shutdown;
mod head_errors;
mod item_profiles;
mod item_profiles_cli;
mod item_profiles_sdk;
mod judged_ledger;
mod judged_prefixes;
mod ledger;
mod limits;
mod no_stall;
mod proxy_answers;
mod proxy_forwarding;
mod proxy_props;
mod proxy_routing;
mod proxy_streaming;
mod pydantic_ai_e2e;
mod real_clients;
mod redis_faults;
mod redis_ha;
mod redis_managed;
mod replicas;
mod sdk_e2e;
mod security_request_head;
mod security_routing;
mod seed_vectors;
mod serve_binary;
mod serve_reload;
mod serve_signals;
mod sigv4;
mod state_full;
mod state_not_stored;
mod team_state;
mod team_unfinished;
mod teams;
mod teams_reload;
mod telemetry;
mod tls_listener;
mod tls_serve;
mod tls_teams;
mod tls_upstream;
mod trust;
mod upstream_faults;
mod usage;
mod websocket;
mod websocket_trust;
